"""torch.tpu memory API (memory_allocated, memory_stats, empty_cache, ...), mirroring torch.cuda.memory.

Numbers come from the C runtime's caching allocator (_C._memory_stats); this file only renames them
to the keys PyTorch users already read.
"""
import collections
import pickle
import sys

import torch

from torch_tpu import _C
from torch_tpu._utils import _get_device_index

__all__ = [
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "reset_max_memory_allocated", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "mem_get_info", "empty_cache",
    "_record_memory_history", "_snapshot", "_dump_snapshot",
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


# ---- memory history and snapshots, in torch.cuda.memory's format ----
# The snapshot is the dict torch.cuda.memory._snapshot() returns (segments with their blocks and the
# stack of each live allocation; device_traces: the allocator's alloc / free / segment / OOM events),
# so torch.cuda._memory_viz and https://pytorch.org/memory_viz read a tpu snapshot unchanged. The C++
# side is torch_tpu/csrc/memory_history.cpp; the runtime's allocator reports segments and OOMs.

def _record_memory_history(enabled="all", context="all", stacks="python", max_entries=sys.maxsize,
                           device=None, clear_history=False, **_ignored) -> None:
    """Starts (enabled="all" or "state") or stops (enabled=None) recording allocations with their
    stacks and the allocator's event trace, as torch.cuda.memory._record_memory_history does.
    stacks="python" (the default here: cheap) records Python frames; "all" adds C++ frames. The
    trace keeps the last `max_entries` events per device. Stopping drops what was recorded."""
    if enabled is None or enabled is False:
        _C._memory_record_history(None, None, None, 0)
        return
    if enabled not in ("all", "state", True):
        raise ValueError(f"_record_memory_history: enabled must be None, 'state' or 'all', not {enabled!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"_record_memory_history: stacks must be 'python' or 'all', not {stacks!r}")
    if clear_history:
        _C._memory_record_history(None, None, None, 0)
    entries = max_entries if enabled != "state" else 0
    _C._memory_record_history("all", context, stacks, int(min(max(entries, 0), sys.maxsize)))


def _snapshot(device=None) -> dict:
    """The allocator's state and event trace, as torch.cuda.memory._snapshot() returns it."""
    return _C._memory_snapshot()


def _dump_snapshot(filename="dump_snapshot.pickle") -> None:
    """Pickles _snapshot() to `filename` (open it at https://pytorch.org/memory_viz, or render it with
    python -m torch.cuda._memory_viz trace_plot FILE -o out.html)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
