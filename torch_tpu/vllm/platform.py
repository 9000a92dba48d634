"""vLLM's platform for the tpu device (an out-of-tree platform, the way vllm-ascend and tpu-inference
plug in): device name and memory from torch.tpu, our attention backend and worker, eager execution
(no CUDA graphs; TORCH_TPU_VLLM_COMPILE=1: vLLM's piecewise compilation through torch.compile(backend="tpu"),
torch_tpu/vllm/compile.py), and a clear error for each vLLM feature the platform does not support yet.
"""
import importlib.util
import os
import sys

import torch

from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

logger = init_logger(__name__)

_ATTENTION = "torch_tpu.vllm.attention.TpuAttentionBackend"
_WORKER = "torch_tpu.vllm.worker.TpuWorker"
_EXECUTOR = "torch_tpu.vllm.executor.TpuMultiprocExecutor"


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    ray_device_key: str = ""
    # Which chip a process drives (the runtime reads it at start; torch_tpu/vllm/executor.py sets it per worker).
    device_control_env_var: str = "TPU_VISIBLE_CHIPS"
    # torch.compile of vLLM's small helpers (logprobs, a sampler step): run them eagerly.
    simple_compile_backend: str = "eager"
    # vLLM's device groups (tensor parallelism's collectives) are tpu_dist groups: the runtime's collectives
    # between the chips' memories (torch_tpu/distributed.py); its CPU groups stay gloo.
    dist_backend: str = "tpu_dist"
    # compressed-tensors for its FP8 KV-cache scales only (check_and_update_config refuses its weight
    # schemes); every other method quantizes weights through CUDA, Triton or vllm._C kernels. vLLM reads
    # an empty list as "all", hence the one entry.
    supported_quantization: list[str] = ["compressed-tensors"]

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise ValueError(f"tpu platform: model dtype {dtype} is not supported (bfloat16, float16, float32)")

    @classmethod
    def import_kernels(cls) -> None:
        # Our kernels are torch ops defined by torch_tpu.vllm.ops; vllm._C does not exist in this build.
        # torch_tpu.vllm.layers puts our layer classes in vLLM's out-of-tree custom-op registry.
        import torch_tpu.vllm.layers  # noqa: F401
        import torch_tpu.vllm.ops  # noqa: F401

    # vLLM's sampler steps that run as PyTorch code on a platform without Triton, one generic op after
    # another over every logit, and ours in C (runtime/ops/serve/sample.c): top-k/top-p filtering (vLLM
    # sorts every row: 74 ms a step for 16 rows of 32000 on tpu), the penalties (a [batch, vocab + 1]
    # histogram per step), min-p (a softmax) and the draw. vLLM has no registry for these host
    # functions, so each module attribute is rebound, with the names other vLLM modules imported from it
    # (the sampler's and the rejection sampler's), as vLLM's own kernel-override registry rebinds; vLLM's
    # versions stay in ops.VLLM_ORIGINALS for logits our kernels do not take. The model runner installs
    # them (import_kernels runs while vLLM's sampler modules are still being imported).
    _SAMPLER_FUNCTIONS = (("vllm.v1.sample.ops.topk_topp_sampler", "apply_top_k_top_p"),
                          ("vllm.v1.sample.ops.penalties", "apply_all_penalties"),
                          ("vllm.v1.sample.ops.topk_topp_sampler", "random_sample"))

    @classmethod
    def use_tpu_sampler_kernels(cls) -> None:
        from vllm.v1.sample.logits_processor import builtin
        from torch_tpu.vllm import ops
        for module, name in cls._SAMPLER_FUNCTIONS:
            original = getattr(importlib.import_module(module), name)
            ours = getattr(ops, name)
            if original is ours:
                continue
            ops.VLLM_ORIGINALS[name] = original
            for mod_name, mod in list(sys.modules.items()):
                if mod_name.startswith("vllm") and getattr(mod, name, None) is original:
                    setattr(mod, name, ours)
        # min-p is a method of vLLM's built-in logits processor (its state: the rows' min_p on the device)
        if builtin.MinPLogitsProcessor.apply is not ops.min_p_apply:
            ops.VLLM_ORIGINALS["MinPLogitsProcessor.apply"] = builtin.MinPLogitsProcessor.apply
            builtin.MinPLogitsProcessor.apply = ops.min_p_apply

    @classmethod
    def import_ir_kernels(cls) -> None:
        # vLLM's IR ops (RMSNorm) with our C kernels as the "tpu" provider (torch_tpu/vllm/ir.py)
        import torch_tpu.vllm.ir  # noqa: F401

    @classmethod
    def get_default_ir_op_priority(cls, vllm_config):
        from vllm.config.kernel import IrOpPriorityConfig
        from torch_tpu.vllm.ir import PROVIDER
        # ours first; vLLM's dispatch falls back to native for arguments ours does not take
        return IrOpPriorityConfig.with_default(["native"], rms_norm=[PROVIDER, "native"],
                                               fused_add_rms_norm=[PROVIDER, "native"])

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        # vLLM's device-side bookkeeping kernels are Triton; ours are C (runtime/ops/serve).
        from vllm.triton_utils.dispatcher import register_kernels
        from torch_tpu.vllm import ops
        # vLLM 0.32's registry rebinds every reference to a replaced kernel by scanning each loaded
        # module's objects with vars(); llvmlite's library proxy (loaded with numba, which the n-gram
        # proposer uses) answers any attribute, __dict__ included, with a function wrapper, and the scan
        # fails on it. Neither package holds a vLLM kernel: they sit out the scan.
        hidden = {name: mod for name, mod in sys.modules.items()
                  if name.split(".")[0] in ("llvmlite", "numba")}
        for name in hidden:
            del sys.modules[name]
        try:
            register_kernels(ops.VLLM_KERNEL_OVERRIDES)
        finally:
            sys.modules.update(hidden)

    @classmethod
    def get_compile_backend(cls) -> str:
        # the compiler of vLLM's piecewise compilation (CompilationConfig.backend "" resolves to it)
        from torch_tpu.vllm.compile import ADAPTOR
        return ADAPTOR

    @classmethod
    def opaque_attention_op(cls) -> bool:
        # Under vLLM's piecewise compilation, attention is one opaque custom op (vLLM splits the graph
        # there and runs it between the compiled pieces); eager models call the backend directly.
        from vllm.config import get_current_vllm_config_or_none
        from vllm.config.compilation import CompilationMode
        config = get_current_vllm_config_or_none()
        return config is not None and config.compilation_config.mode == CompilationMode.VLLM_COMPILE

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        c = attn_selector_config
        unsupported = [name for name, on in (
            ("MLA attention", c.use_mla), ("sparse attention", c.use_sparse), ("attention sinks", c.has_sink),
            ("multimodal prefix attention", c.use_mm_prefix), ("non-causal decoder attention", c.use_non_causal),
            ("context parallelism", c.use_pcp or c.use_dcp), ("per-head quantization scales",
                                                              c.use_per_head_quant_scales)) if on]
        if unsupported:
            raise NotImplementedError(f"tpu platform: {', '.join(unsupported)} not supported yet")
        if selected_backend is not None and getattr(selected_backend, "name", "") != "CUSTOM":
            logger.warning("tpu platform: attention backend %s is not available on tpu; using the tpu "
                           "paged-attention backend", selected_backend)
        return _ATTENTION

    @classmethod
    def get_device_capability(cls, device_id: int = 0):
        return None

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.get_device_properties(device_id).total_memory

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.tpu.max_memory_allocated(device))

    def is_sleep_mode_available(self) -> bool:
        return False

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "auto":
            parallel.worker_cls = _WORKER
        for name, size in (("pipeline", parallel.pipeline_parallel_size), ("data", parallel.data_parallel_size),
                           ("prefill context", parallel.prefill_context_parallel_size),
                           ("decode context", parallel.decode_context_parallel_size)):
            if size > 1:
                raise NotImplementedError(f"tpu platform: {name} parallelism (size {size}) is not supported yet "
                                          f"(tensor parallelism is)")
        if parallel.enable_expert_parallel:
            raise NotImplementedError("tpu platform: expert parallelism is not supported yet")
        if parallel.world_size > 1:
            # One process per chip: vLLM's multiprocessing executor, each worker spawned on its own chip
            # (torch_tpu/vllm/executor.py), or torchrun's processes (vLLM's "external_launcher"), whose
            # LOCAL_RANK picks each one's chip.
            backend = parallel.distributed_executor_backend
            if backend in (None, "mp"):
                parallel.distributed_executor_backend = _EXECUTOR
            elif backend not in (_EXECUTOR, "external_launcher"):
                raise NotImplementedError(f"tpu platform: distributed executor {backend!r} is not supported yet "
                                          f"(\"mp\", vLLM's multiprocessing executor, and \"external_launcher\", "
                                          f"torchrun's processes, are)")
        cls._configure_compilation(vllm_config)
        if vllm_config.model_config is not None and vllm_config.model_config.enable_sleep_mode:
            raise NotImplementedError("tpu platform: sleep mode is not supported yet")
        # Async scheduling overlaps the next step's scheduling with the device through CUDA streams and
        # events; the vTPU queue is already asynchronous, so steps run one after the other.
        if vllm_config.scheduler_config is not None:
            vllm_config.scheduler_config.async_scheduling = False
        cache = vllm_config.cache_config
        if cache is not None:
            if cache.block_size is None:
                cache.block_size = 16
            # fp8: 8-bit float codes in a uint8 cache, per-tensor scales (runtime/ops/serve/paged.c)
            if cache.cache_dtype not in ("auto", "float16", "bfloat16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2"):
                raise NotImplementedError(f"tpu platform: kv_cache_dtype={cache.cache_dtype!r} is not supported "
                                          f"yet (auto, float16, bfloat16, float32, fp8, fp8_e4m3, fp8_e5m2)")
        # KV connectors (disaggregated prefill, CPU offloading through --kv-offloading-size) move blocks
        # with CUDA's batched memcpy through vllm._C, and vLLM's offloading worker asserts CUDA or XPU
        # tensors; vLLM's own engine never copies or swaps blocks (preemption recomputes).
        if vllm_config.kv_transfer_config is not None or (cache is not None and cache.kv_offloading_size):
            raise NotImplementedError("tpu platform: KV connectors and KV-cache offloading (kv_transfer_config, "
                                      "kv_offloading_size) are not supported yet")
        # Speculative decoding: n-gram prompt lookup (vLLM's proposer on the host, numba) and a draft model
        # (vLLM's DraftModelProposer: the draft runs on tpu with its own KV cache; its Triton bookkeeping
        # kernels are ours, torch_tpu/vllm/ops.py). EAGLE, MTP, Medusa and the rest need hidden-state
        # models and kernels not checked here.
        spec = vllm_config.speculative_config
        if spec is not None and spec.method not in ("ngram", "draft_model"):
            raise NotImplementedError(f"tpu platform: speculative decoding method {spec.method!r} is not "
                                      f"supported yet (ngram and draft_model are)")
        if spec is not None and spec.method == "draft_model":
            cls._check_quantization(spec.draft_model_config)
        if spec is not None and spec.method == "ngram" and importlib.util.find_spec("numba") is None:
            raise ImportError("tpu platform: n-gram speculative decoding needs numba, which vLLM's prompt-lookup "
                              "proposer runs on (scripts/setup.sh installs it)")
        if vllm_config.lora_config is not None:
            raise NotImplementedError("tpu platform: LoRA adapters are not supported yet")
        cls._check_quantization(vllm_config.model_config)

    @classmethod
    def _configure_compilation(cls, vllm_config) -> None:
        """Eager by default. With TORCH_TPU_VLLM_COMPILE=1, where vLLM would compile (its default mode,
        VLLM_COMPILE, when enforce_eager is not given), its piecewise compilation with our compiler
        (torch_tpu/vllm/compile.py). CUDA graphs have no tpu counterpart either way."""
        from vllm.config import CUDAGraphMode
        from vllm.config.compilation import CompilationMode
        from torch_tpu.vllm.compile import ADAPTOR
        comp, model = vllm_config.compilation_config, vllm_config.model_config
        comp.cudagraph_mode = CUDAGraphMode.NONE
        comp.cudagraph_capture_sizes = []
        compile_ = (os.environ.get("TORCH_TPU_VLLM_COMPILE", "0") == "1" and model is not None
                    and not model.enforce_eager and comp.mode == CompilationMode.VLLM_COMPILE)
        if not compile_:
            comp.mode = CompilationMode.NONE
            if model is not None:
                model.enforce_eager = True
            return
        if comp.backend not in (ADAPTOR, "eager"):
            raise NotImplementedError(f"tpu platform: compilation backend {comp.backend!r} is not supported "
                                      f"(leave it unset for torch.compile(backend=\"tpu\"), or \"eager\")")
        # vLLM's fusion passes rewrite the graph into CUDA/ROCm kernels (their modules are imported on
        # those platforms only): all off.
        for name in type(comp.pass_config).__dataclass_fields__:
            if name.startswith(("fuse_", "enable_")) and getattr(comp.pass_config, name):
                setattr(comp.pass_config, name, False)
        # the piecewise backend looks a size up in compile_sizes, which vLLM fills only with CUDA graphs
        if comp.compile_sizes is None:
            comp.compile_sizes = []
        cls._configure_compile_cache()

    @classmethod
    def _configure_compile_cache(cls) -> None:
        """What a later start reuses. vLLM's AOT compile saves Dynamo's trace of the forward (VLLM_USE_AOT_
        COMPILE); its "mega artifact" form would also save each compiled piece, as Inductor's serialized
        output, which ours are not (VLLM_USE_MEGA_AOT_ARTIFACT=0: a loaded trace is split and its pieces
        compiled again through our compiler). With TORCH_TPU_AOT_CACHE=1 our pieces come from AOTAutograd's
        cache (torch_tpu/_compile_cache.py; torch_tpu/vllm/compile.py), and the trace from vLLM's, both
        pickles that the next start loads: so only when both directories are this user's and no one
        else may write them (the checks of README "Security"). Otherwise each start traces anew. A user's
        own VLLM_USE_AOT_COMPILE is left as it is."""
        os.environ.setdefault("VLLM_USE_MEGA_AOT_ARTIFACT", "0")
        if "VLLM_USE_AOT_COMPILE" in os.environ:
            return
        problem = None
        if os.environ.get("TORCH_TPU_AOT_CACHE", "0") != "1":
            problem = "TORCH_TPU_AOT_CACHE=1 not set"
        else:
            import vllm.envs as envs
            from torch_tpu import _compile_cache
            root = envs.VLLM_CACHE_ROOT
            for d in (root, os.path.join(root, "torch_compile_cache")):
                try:
                    os.makedirs(d, mode=0o700, exist_ok=True)
                except OSError as e:
                    problem = f"{d}: {e.strerror}"
                    break
                problem = _compile_cache._dir_problem(d)
                if problem:
                    logger.warning("tpu platform: not saving vLLM's compiled forward: %s", problem)
                    break
        os.environ["VLLM_USE_AOT_COMPILE"] = "0" if problem else "1"

    @classmethod
    def _check_quantization(cls, model_config) -> None:
        # A compressed-tensors checkpoint that carries only a kv_cache_scheme (what llm-compressor writes
        # for an FP8 KV cache: per-tensor k_scale / v_scale per layer, weights left as they are) runs; its
        # weight, activation, sparsity and transform schemes would need quantized GEMM kernels.
        if model_config is None or model_config.quantization != "compressed-tensors":
            return
        qc = getattr(model_config.hf_config, "quantization_config", None) or {}
        if not isinstance(qc, dict):
            qc = qc.to_dict()
        schemes = [name for name in ("config_groups", "sparsity_config", "transform_config") if qc.get(name)]
        if schemes:
            raise NotImplementedError(f"tpu platform: quantized weights are not supported yet (this compressed-"
                                      f"tensors checkpoint has {', '.join(schemes)}); its kv_cache_scheme alone, "
                                      f"an FP8 KV cache with per-tensor scales, is")

    @classmethod
    def get_punica_wrapper(cls) -> str:
        raise NotImplementedError("tpu platform: LoRA adapters are not supported yet")

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "torch_tpu.vllm.communicator.TpuCommunicator"

    @classmethod
    def check_runner_kv_caches_multi_layer(cls) -> None:
        # A draft model's layers carry the target's layer indices (both count from 0), so two attention
        # layers share an index. The runner's list of caches is ordered by index only for code that
        # walks it by position (KV connectors, refused here); our attention reads each layer's own cache.
        pass

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def support_static_graph_mode(cls) -> bool:
        return False
