"""vLLM's piecewise compilation with torch.compile(backend="tpu") (opt-in: TORCH_TPU_VLLM_COMPILE=1).

vLLM's compilation mode VLLM_COMPILE traces the model's forward once with Dynamo (the number of tokens a
dynamic size), splits the graph at each attention call (vLLM's opaque `unified_attention_with_output`
op, which then runs eagerly between the pieces with the step's metadata) and hands every piece to the
platform's compiler. Ours hands the piece to the tpu backend (torch_tpu/_compile.py): AOTAutograd's
inference graph, captured as a device program whose sizes are bound at launch, so one program per piece
serves every batch size in the compile range. This replaces CUDA graphs' role (fewer host round trips a
step); the platform (platform.py) turns it on."""
from vllm.compilation.compiler_interface import CompilerInterface

ADAPTOR = "torch_tpu.vllm.compile.TpuCompilerAdaptor"


class TpuCompilerAdaptor(CompilerInterface):
    name = "tpu"

    def compute_hash(self, vllm_config) -> str:
        return "torch_tpu"

    def compile(self, graph, example_inputs, compiler_config, compile_range, key=None):
        import torch._functorch.config as functorch_config
        from torch_tpu._compile import tpu_backend
        # AOTAutograd's cache holds a piece for the next start only in the form the tpu backend saves with
        # TORCH_TPU_AOT_CACHE=1 (torch_tpu/_compile_cache.py, which checks the directory first); otherwise
        # it is off while the piece compiles (it would expect Inductor's output). vLLM also reuses a piece
        # it has compiled in this process when another has the same structure.
        from torch_tpu import _compile_cache
        with functorch_config.patch(enable_autograd_cache=_compile_cache.use_aot_cache()):
            return tpu_backend(graph, example_inputs), None
