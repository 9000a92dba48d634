"""Projected time on a real TPU: each kernel the vTPU ran, costed by a roofline model of a chosen TPU
generation (v5e, v5p, v6e, v7).

    with torch_tpu.projection.record():      # or a torch.profiler.profile(...) with PrivateUse1 activity
        step()
    torch_tpu.projection.summary("v6e")      # per-op projected totals, the step's projected time

A kernel's projected time is max(flops / peak, bytes / HBM bandwidth) + a launch cost, with FLOPs and
bytes from the runtime's cost rules per op-table family (runtime/ops/cost.c) and the chip figures from
Google's published tables (runtime/exec/project.c, which also lists what the model leaves out).
Matrix products (the matmul family, convolutions) run at the MXU's bf16 peak divided by the bf16
passes a float32 product takes at torch.get_float32_matmul_precision() (6 highest, 3 high, 1 medium);
other work is costed on the vector unit, so it is nearly always memory-bound. DeferAndFuse chains are
costed as the one kernel they are. With TORCH_TPU_PROJECT=v6e (or set_chip("v6e")) torch.profiler
also shows a "projected v6e" device track.
"""
import contextlib

import torch

from torch_tpu import _C

__all__ = ["chips", "set_chip", "get_chip", "record", "events", "kernel_time", "summary"]


def chips():
    """The TPU generations the model knows, with their figures and sources."""
    return _C._project_chips()


def set_chip(name):
    """The generation torch.profiler's projected track uses ("" or None: no track)."""
    _C._project_set_chip(name or "")


def get_chip():
    return _C._project_chip() or None


def kernel_time(chip, flops, bytes, matmul=False, dtype=torch.float32, launch_s=None):
    """Projected seconds of one kernel on `chip`, and whether it is compute-bound."""
    passes = _passes(dtype) if matmul else 1
    if launch_s is None:
        launch_s = _C._project_launch_s()
    return _C._project_kernel_s(chip, float(flops), float(bytes), bool(matmul), passes, float(launch_s))


def _passes(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return 1
    if dtype == torch.float32:
        return {"highest": 6, "high": 3, "medium": 1}[torch.get_float32_matmul_precision()]
    return 1


@contextlib.contextmanager
def record():
    """Records what the device runs in the block (without torch.profiler) for summary()."""
    torch.tpu.synchronize()
    _C._trace_enable(True)
    try:
        yield
        torch.tpu.synchronize()
    finally:
        _C._trace_enable(False)
        _C._trace_take_into_last()


def events(chip=None):
    """The device events of the last record() block or profile: name, kind, times (ns), flops, bytes,
    correlation id of the aten op that launched it, and, with a chip, its projected seconds and bound."""
    evs, _busy = _C._trace_last()
    chip = chip or get_chip()
    launch_s = _C._project_launch_s()
    for e in evs:
        if chip:
            passes = _C._fp32_precision_passes(e["dtype"]) if e["matmul"] else 1
            s, cb = _C._project_kernel_s(chip, e["flops"], e["bytes"], e["matmul"], passes, launch_s)
            e["projected_s"] = s
            e["bound"] = "compute" if cb else "memory"
    return evs


def _busy_ns():
    return _C._trace_last()[1]


def summary(chip=None, file=None, top=20):
    """Prints, per op, the vTPU's device time and the projected time on `chip` (default: the chosen
    one, else v6e), whether it is compute- or memory-bound there, and the step's projected time (the
    kernels back to back: the device-side lower bound). Returns the same as a dict."""
    chip = chip or get_chip() or "v6e"
    evs = events(chip)
    per = {}
    for e in evs:
        p = per.setdefault(e["name"], {"count": 0, "vtpu_s": 0.0, "projected_s": 0.0, "flops": 0.0,
                                        "bytes": 0.0, "compute_bound": 0})
        p["count"] += 1
        p["vtpu_s"] += (e["end_ns"] - e["start_ns"]) * 1e-9
        p["projected_s"] += e["projected_s"]
        p["flops"] += e["flops"]
        p["bytes"] += e["bytes"]
        p["compute_bound"] += e["bound"] == "compute"
    total_p = sum(p["projected_s"] for p in per.values())
    total_v = sum(p["vtpu_s"] for p in per.values())
    compute_s = sum(e["projected_s"] for e in evs if e["bound"] == "compute")
    out = {"chip": chip, "kernels": len(evs), "projected_s": total_p, "vtpu_device_s": total_v,
           "compute_bound_s": compute_s, "memory_bound_s": total_p - compute_s, "ops": per}
    lines = [f"Projected on TPU {chip} (roofline; see torch_tpu.projection for what it leaves out)",
             f"{'op':<40} {'calls':>6} {'vTPU ms':>10} {'proj. us':>10} {'GFLOP':>9} {'MB':>9}  bound"]
    for name, p in sorted(per.items(), key=lambda kv: -kv[1]["projected_s"])[:top]:
        bound = "compute" if p["compute_bound"] * 2 > p["count"] else "memory"
        lines.append(f"{name[:40]:<40} {p['count']:>6} {p['vtpu_s'] * 1e3:>10.3f} {p['projected_s'] * 1e6:>10.2f} "
                     f"{p['flops'] / 1e9:>9.3f} {p['bytes'] / 1e6:>9.3f}  {bound}")
    lines.append(f"step: {len(evs)} kernels, projected {total_p * 1e6:.1f} us on {chip} "
                 f"({compute_s * 1e6:.1f} us compute-bound, {(total_p - compute_s) * 1e6:.1f} us memory-bound); "
                 f"vTPU device time {total_v * 1e3:.3f} ms")
    print("\n".join(lines), file=file)
    return out
