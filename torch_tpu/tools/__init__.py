"""Command-line tools: python -m torch_tpu.tools.compare (a layer-by-layer accuracy check)."""
