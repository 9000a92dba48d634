"""Dispatch overhead with the profiler off and on.

As a bench/run.py plugin: "dispatch_trace_on" is run.py's dispatch loop (z = z + y on 4x4, 2000 ops)
with the runtime's device trace recording (what profiling adds on our side per kernel: a launch
event on the host, a timestamped device event on the queue's thread); compare it with "dispatch".

Standalone (python bench/bench_profiler.py [--runs 7]): the same loop timed inside a running
torch.profiler.profile (CPU + PrivateUse1 activities for tpu, CPU activity for PyTorch CPU; start,
stop and post-processing excluded), against the loop with no profiler, on both devices in the same
run. Our added cost per kernel is tpu(on) - tpu(off); PyTorch's own per-op recording is in both.
"""
import argparse
import statistics
import sys
import time

import torch

N = 2000


def _loop(device):
    x, y = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)

    def fn():
        z = x
        for _ in range(N):
            z = z + y
        return z
    return fn


def _sync(device):
    if device != "cpu":
        torch.tpu.synchronize()


def bench_dispatch_trace_on(device):
    fn = _loop(device)
    if device == "cpu":
        return fn, lambda s: s / N * 1e6
    from torch_tpu import _C

    def traced():
        _C._trace_enable(True)
        try:
            z = fn()
            torch.tpu.synchronize()
        finally:
            _C._trace_enable(False)
        return z
    return traced, lambda s: s / N * 1e6


BENCHES = {
    "dispatch_trace_on": (bench_dispatch_trace_on, "us/op", False,
                          "z = z + y on 4x4 fp32, 2000 ops, with the device trace recording"),
}


def _time_loop(device, profiled, runs):
    from torch.profiler import ProfilerActivity, profile
    fn = _loop(device)
    fn()
    _sync(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.PrivateUse1] if device != "cpu" else [])
    out = []
    for _ in range(runs):
        if profiled:
            with profile(activities=acts):
                t0 = time.perf_counter()
                fn()
                _sync(device)
                out.append(time.perf_counter() - t0)
        else:
            t0 = time.perf_counter()
            fn()
            _sync(device)
            out.append(time.perf_counter() - t0)
    return statistics.median(out) / N * 1e6


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=7)
    a = p.parse_args(argv)
    import torch_tpu  # noqa: F401
    res = {}
    for device in ("tpu", "cpu"):
        for profiled in (False, True):
            res[device, profiled] = _time_loop(device, profiled, a.runs)
    print(f"{'us per op (z = z + y, 4x4)':<30} {'tpu':>8} {'CPU':>8} {'ratio':>7}")
    for profiled in (False, True):
        t, c = res["tpu", profiled], res["cpu", profiled]
        print(f"{'profiler on' if profiled else 'profiler off':<30} {t:>8.3f} {c:>8.3f} {c / t:>7.3f}")
    print(f"{'added by profiling':<30} {res['tpu', True] - res['tpu', False]:>8.3f} "
          f"{res['cpu', True] - res['cpu', False]:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
