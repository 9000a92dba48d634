"""vLLM's multiprocessing executor with one chip per worker process, as TPU runs one process per chip:
worker `local_rank` is started with TPU_VISIBLE_CHIPS=local_rank (and TORCH_TPU_TOPOLOGY, when unset, a
line of as many chips as the host's workers), so it sees its chip as tpu:0 and the tpu_dist process group
(torch_tpu/distributed.py) moves tensors between the workers' chips. vLLM's CPU platform sets its workers'
OpenMP variables the same way, around each process start; everything else is vLLM's MultiprocExecutor.
"""
import contextlib
import os

from vllm.v1.executor import multiproc_executor
from vllm.v1.executor.multiproc_executor import MultiprocExecutor


@contextlib.contextmanager
def _env(**values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class TpuMultiprocExecutor(MultiprocExecutor):
    def _init_executor(self) -> None:
        chips = self.parallel_config.local_world_size
        topology = os.environ.get("TORCH_TPU_TOPOLOGY") or str(chips)
        from torch_tpu.distributed import Topology
        if Topology(topology).num_chips < chips:
            raise RuntimeError(f"tpu platform: {chips} worker processes on this host need as many chips, but "
                               f"TORCH_TPU_TOPOLOGY={topology} has {Topology(topology).num_chips}")
        worker_proc = multiproc_executor.WorkerProc
        saved = worker_proc.__dict__["make_worker_process"]
        start = worker_proc.make_worker_process

        def make_worker_process(*args, local_rank, **kwargs):
            # The worker's runtime starts when it imports torch (autoload), so its chip is chosen by the
            # environment it is spawned with.
            with _env(TPU_VISIBLE_CHIPS=str(local_rank), TORCH_TPU_TOPOLOGY=topology):
                return start(*args, local_rank=local_rank, **kwargs)

        # A forked worker would inherit this process's initialized runtime (torch.tpu refuses to run in it).
        with _env(VLLM_WORKER_MULTIPROC_METHOD="spawn"):
            worker_proc.make_worker_process = staticmethod(make_worker_process)
            try:
                super()._init_executor()
            finally:
                worker_proc.make_worker_process = saved
