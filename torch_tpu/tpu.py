"""The device module registered as torch.tpu: torch.cuda's API for the tpu device.

Code written for torch.cuda ports by changing the device string: availability, the current chip,
synchronize, memory statistics, random seeding, streams and events, AMP dtypes. One process drives
one chip (tpu:0); TORCH_TPU_NUM_CHIPS > 1 makes more chips visible to device_count().
"""
import os

import torch

from torch_tpu import _C
from torch_tpu import memory  # noqa: F401  (torch.tpu.memory, as torch.cuda.memory)
from torch_tpu._utils import _get_device_index, current_device
from torch_tpu.memory import (  # noqa: F401  (re-exported as torch.tpu.*)
    empty_cache, max_memory_allocated, max_memory_reserved, mem_get_info, memory_allocated,
    memory_reserved, memory_stats, memory_stats_as_nested_dict, memory_summary,
    reset_max_memory_allocated, reset_peak_memory_stats)
from torch_tpu.random import (  # noqa: F401
    get_rng_state, get_rng_state_all, initial_seed, manual_seed, manual_seed_all, seed, seed_all,
    set_rng_state, set_rng_state_all)
from torch_tpu.streams import (  # noqa: F401
    Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream)

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "device_of", "synchronize",
    "is_initialized", "init", "get_device_name", "get_device_properties", "get_amp_supported_dtype",
    "is_bf16_supported", "set_cpu_fallback", "get_cpu_fallback", "default_generators",
    "topology", "topology_aware_mesh",
    # memory
    "empty_cache", "max_memory_allocated", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_reserved", "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
    "reset_max_memory_allocated", "reset_peak_memory_stats",
    # random
    "get_rng_state", "get_rng_state_all", "initial_seed", "manual_seed", "manual_seed_all", "seed",
    "seed_all", "set_rng_state", "set_rng_state_all",
    # streams
    "Event", "Stream", "StreamContext", "current_stream", "default_stream", "set_stream", "stream",
]

_initialized = False
_in_bad_fork = False


def _after_fork_in_child():
    # The runtime's compute threads do not survive fork() and device memory would be shared with the
    # parent: a child of an initialized process must not touch the device (as with CUDA).
    global _in_bad_fork
    if _initialized:
        _in_bad_fork = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_in_bad_fork() -> bool:
    """True in a fork()ed child of a process that had initialized the device (torch.random asks)."""
    return _in_bad_fork


def init() -> None:
    """Initializes the runtime (done on import; idempotent)."""
    global _initialized
    if _initialized:
        return
    if _in_bad_fork:
        raise RuntimeError("torch_tpu: cannot re-initialize the tpu device in a forked subprocess; "
                           "use the 'spawn' start method of multiprocessing")
    _C._init()
    _initialized = True


_lazy_init = init


def is_initialized() -> bool:
    """Whether the runtime has been initialized in this process."""
    return _initialized and not _in_bad_fork


def device_count() -> int:
    """Number of tpu chips visible to this process (TORCH_TPU_NUM_CHIPS, default 1)."""
    return int(_C._device_count())


def is_available() -> bool:
    """Whether a tpu chip can be used (the vTPU always can, once the runtime loaded)."""
    try:
        return device_count() > 0
    except Exception:
        return False


def _check_index(index: int) -> int:
    n = device_count()
    if not 0 <= index < n:
        raise RuntimeError(f"invalid tpu device index {index}: this process sees {n} chip(s) "
                           f"(tpu:0..tpu:{n - 1}; TORCH_TPU_NUM_CHIPS sets how many)")
    return index


def set_device(device) -> None:
    """Makes `device` the current chip of this thread. A negative index is a no-op, as in torch.cuda."""
    index = _get_device_index(device)
    if index < 0:
        return
    torch._C._accelerator_setDeviceIndex(_check_index(index))


class device:
    """Context manager that makes `device` current for the enclosed code, then restores the previous chip."""

    def __init__(self, device):
        self.idx = _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = torch._C._accelerator_exchangeDevice(_check_index(self.idx))
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            torch._C._accelerator_maybeExchangeDevice(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the chip of tensor `obj` current (no-op for a non-tpu tensor)."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else -1)


def synchronize(device=None) -> None:
    """Waits until every op queued on `device` (the current chip by default) has finished.
    A kernel error from queued work is raised here, naming the op."""
    _C._synchronize(_get_device_index(device, optional=True))


class _TpuDeviceProperties:
    """What get_device_properties() returns: name, total_memory (HBM bytes), num_threads, and where the chip sits
    in its host's topology (TORCH_TPU_TOPOLOGY): topology (axes), chip_id, coords, neighbors (chip ids one link
    away, wrap-around links included)."""

    def __init__(self, index: int, info: dict):
        self.index = index
        self.name = str(info["name"])
        self.total_memory = int(info["hbm_bytes"])
        self.num_threads = int(info["num_threads"])
        self.type = "tpu"
        host = _C._dist_host_config()
        self.topology = tuple(host["dims"])
        self.chip_id = int(host["chip"])
        spec = "x".join(str(d) for d in self.topology)
        self.coords = tuple(_C._dist_topology_coords(spec, self.chip_id))
        self.neighbors = list(_C._dist_topology_neighbors(spec, self.chip_id))

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"num_threads={self.num_threads}, topology={self.topology}, chip_id={self.chip_id}, "
                f"coords={self.coords})")


def get_device_properties(device=None) -> _TpuDeviceProperties:
    index = _check_index(_get_device_index(device, optional=True))
    return _TpuDeviceProperties(index, _C._device_info(index))


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_amp_supported_dtype() -> "list[torch.dtype]":
    """Dtypes torch.autocast(device_type="tpu") may cast to."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def set_cpu_fallback(enabled: bool) -> None:
    """Opt in (or out) of running on the CPU the ops the device cannot run: no tpu kernel, or a dtype or
    layout their kernel does not take (copy in, run, copy back, one warning per op).
    TORCH_TPU_CPU_FALLBACK=1 sets it at start-up."""
    _C._set_cpu_fallback(bool(enabled))


def get_cpu_fallback() -> bool:
    return bool(_C._get_cpu_fallback())


def _get_cache_stats():
    """The compile cache's statistics (TorchTPU's names): num_cache_reqs, num_cache_hits and
    per_entry_stats[i].read_count / compilation_duration / last_read, one entry per program."""
    from torch_tpu import _compile
    return _compile._get_cache_stats()


def topology():
    """This host's chips as a torus (TORCH_TPU_TOPOLOGY): a torch_tpu.distributed.Topology."""
    from torch_tpu import distributed
    return distributed.topology()


def topology_aware_mesh(mesh_shape, *, topology=None, dcn_mesh_shape=None, **kwargs):
    """The rank layout for DeviceMesh("tpu", mesh=...) (torch_tpu.distributed.topology_aware_mesh)."""
    from torch_tpu import distributed
    return distributed.topology_aware_mesh(mesh_shape, topology=topology, dcn_mesh_shape=dcn_mesh_shape, **kwargs)


def __getattr__(name):
    # Computed on access: the generator objects belong to the C++ layer and device_count() may change
    # with TORCH_TPU_NUM_CHIPS before initialization.
    if name == "distributed":
        from torch_tpu import distributed
        return distributed
    if name == "default_generators":
        return tuple(_C._get_default_generator(i) for i in range(device_count()))
    raise AttributeError(f"module 'torch.tpu' has no attribute '{name}'")
