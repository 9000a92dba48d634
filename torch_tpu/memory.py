"""torch.tpu memory API (memory_allocated, memory_stats, empty_cache, ...), mirroring torch.cuda.memory.

Numbers come from the C runtime's caching allocator (_C._memory_stats); this file only renames them
to the keys PyTorch users already read.
"""
import collections

import torch

from torch_tpu import _C
from torch_tpu._utils import _get_device_index

__all__ = [
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "reset_max_memory_allocated", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "mem_get_info", "empty_cache",
]


def _raw(device):
    return _C._memory_stats(_get_device_index(device, optional=True))


def memory_allocated(device=None) -> int:
    """Bytes of device memory held by live tensors on `device`."""
    return int(_raw(device)["allocated_bytes"])


def max_memory_allocated(device=None) -> int:
    """Peak of memory_allocated() since start-up or the last reset_peak_memory_stats()."""
    return int(_raw(device)["peak_allocated_bytes"])


def memory_reserved(device=None) -> int:
    """Bytes of device memory held by the caching allocator (live tensors plus cached free blocks)."""
    return int(_raw(device)["reserved_bytes"])


def max_memory_reserved(device=None) -> int:
    """Peak of memory_reserved() since start-up or the last reset_peak_memory_stats()."""
    return int(_raw(device)["peak_reserved_bytes"])


def reset_peak_memory_stats(device=None) -> None:
    """Resets the peaks reported by max_memory_allocated / max_memory_reserved to the current values."""
    _C._reset_peak_memory_stats(_get_device_index(device, optional=True))


def reset_max_memory_allocated(device=None) -> None:
    """Alias kept for code written for torch.cuda."""
    reset_peak_memory_stats(device)


def memory_stats(device=None) -> "collections.OrderedDict[str, int]":
    """Allocator statistics with torch.cuda.memory_stats()' key names (the 'all' pool only: the vTPU
    allocator has one pool), plus 'capacity_bytes' (the chip's HBM limit)."""
    s = _raw(device)
    allocs, frees = int(s["num_allocs"]), int(s["num_frees"])
    out = {
        "allocated_bytes.all.current": int(s["allocated_bytes"]),
        "allocated_bytes.all.peak": int(s["peak_allocated_bytes"]),
        "reserved_bytes.all.current": int(s["reserved_bytes"]),
        "reserved_bytes.all.peak": int(s["peak_reserved_bytes"]),
        "allocation.all.current": allocs - frees,
        "allocation.all.allocated": allocs,
        "allocation.all.freed": frees,
        "segment.all.current": int(s["num_segments"]),
        "num_ooms": int(s["num_ooms"]),
        "num_alloc_retries": int(s.get("num_alloc_retries", 0)),
        "capacity_bytes": int(s["capacity_bytes"]),
    }
    return collections.OrderedDict(sorted(out.items()))


def memory_stats_as_nested_dict(device=None) -> dict:
    """memory_stats() with its dotted keys split into nested dicts, as torch.cuda offers."""
    nested: dict = {}
    for key, value in memory_stats(device).items():
        node = nested
        *path, leaf = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A short human-readable table of memory_stats()."""
    idx = _get_device_index(device, optional=True)
    s = memory_stats(idx)
    mib = 1024 * 1024
    lines = [
        f"tpu:{idx} memory summary",
        f"  allocated: {s['allocated_bytes.all.current'] / mib:10.2f} MiB  (peak {s['allocated_bytes.all.peak'] / mib:.2f} MiB)",
        f"  reserved:  {s['reserved_bytes.all.current'] / mib:10.2f} MiB  (peak {s['reserved_bytes.all.peak'] / mib:.2f} MiB)",
        f"  capacity:  {s['capacity_bytes'] / mib:10.2f} MiB",
        f"  tensors live: {s['allocation.all.current']}  allocs: {s['allocation.all.allocated']}  "
        f"frees: {s['allocation.all.freed']}  segments: {s['segment.all.current']}  OOMs: {s['num_ooms']}",
    ]
    return "\n".join(lines) + "\n"


def mem_get_info(device=None) -> "tuple[int, int]":
    """(free, total) bytes of the chip's HBM; free counts memory the allocator could still hand out."""
    free, total = _C._mem_get_info(_get_device_index(device, optional=True))
    return int(free), int(total)


def empty_cache() -> None:
    """Returns the allocator's cached free blocks to the device (memory_reserved() drops)."""
    _C._empty_cache(_get_device_index(None, optional=True))
