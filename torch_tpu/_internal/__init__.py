"""Internal APIs of torch_tpu that TorchTPU code imports by path (e.g. execution_mode).

Not covered by compatibility promises beyond the spellings TorchTPU users already write.
"""
