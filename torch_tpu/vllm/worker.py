"""vLLM's worker and model runner on the tpu device: vLLM's GPU worker and v1 model runner, which are
device-neutral but for the parts overridden here (device setup, which assumes "cuda"; the runner's
torch.cuda streams and events, which map onto torch.tpu's).
"""
import contextlib
import gc

import torch

from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.utils.mem_utils import MemorySnapshot
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.utils import request_memory

logger = init_logger(__name__)


@contextlib.contextmanager
def _cuda_as_tpu():
    """torch.cuda's stream and event API, which the runner's constructor uses, answered by torch.tpu."""
    saved = {name: getattr(torch.cuda, name) for name in ("Stream", "current_stream", "stream", "set_stream",
                                                          "Event", "default_stream")}
    torch.cuda.Stream = torch.tpu.Stream
    torch.cuda.current_stream = torch.tpu.current_stream
    torch.cuda.default_stream = torch.tpu.default_stream
    torch.cuda.stream = torch.tpu.stream
    torch.cuda.set_stream = torch.tpu.set_stream
    torch.cuda.Event = lambda *args, blocking=None, **kwargs: torch.tpu.Event(*args, **kwargs)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device):
        current_platform.use_tpu_sampler_kernels()
        with _cuda_as_tpu():
            super().__init__(vllm_config, device)

    def _copy_draft_token_ids_to_cpu(self, scheduler_output, zeros_only: bool = False) -> None:
        # a draft model's tokens come back to the host on a side stream (torch.cuda's API, as above)
        with _cuda_as_tpu():
            super()._copy_draft_token_ids_to_cpu(scheduler_output, zeros_only)

    def _init_kv_zero_meta(self) -> None:
        # vLLM zeroes newly allocated KV blocks with a Triton kernel, for attention kernels that read
        # whole blocks; ours reads only the first seq_lens[s] positions of each sequence, so stale
        # block contents are never seen. Without a zeroer, _zero_block_ids does nothing.
        pass


class TpuWorker(Worker):
    def init_device(self):
        if self.device_config.device_type != "tpu":
            raise RuntimeError(f"TpuWorker: unsupported device type {self.device_config.device}")
        # Each process drives one chip and sees it as tpu:0 (the executor spawned this worker on chip
        # local_rank: torch_tpu/vllm/executor.py).
        self.device = torch.device("tpu", 0)
        torch.tpu.set_device(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(self.vllm_config, self.rank, self.distributed_init_method,
                                            self.local_rank, current_platform.dist_backend)
        set_random_seed(self.model_config.seed)
        gc.collect()
        torch.tpu.empty_cache()
        self.init_snapshot = MemorySnapshot(device=self.device)
        self.requested_memory = request_memory(self.init_snapshot, self.cache_config)
        self._init_workspace_and_model_runner()

    def _maybe_get_memory_pool_context(self, tag: str):
        # vLLM's sleep-mode allocator is CUDA's (cumem); sleep mode is refused by the platform.
        return contextlib.nullcontext()

    def compile_or_warm_up_model(self):
        # vLLM's kernel warm-up tunes CUDA/Triton kernels (and imports torchvision for a model we do
        # not run); everything else of the warm-up (the dummy model, sampler and pooler runs) runs.
        from vllm.v1.worker import gpu_worker
        saved = gpu_worker.kernel_warmup
        gpu_worker.kernel_warmup = lambda worker, **kwargs: None
        try:
            return super().compile_or_warm_up_model()
        finally:
            gpu_worker.kernel_warmup = saved

    def _make_model_runner(self):
        if self.use_v2_model_runner:
            raise NotImplementedError("tpu platform: vLLM's v2 model runner is not supported yet "
                                      "(VLLM_USE_V2_MODEL_RUNNER=0)")
        return TpuModelRunner(self.vllm_config, self.device)
