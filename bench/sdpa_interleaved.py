"""SDPA causal forward (or forward+backward) on tpu and on PyTorch CPU, interleaved call by call, with
the minimum and the median of each side's wall times and the process CPU time per tpu call. On a
shared, loaded machine the minimum is the figure least disturbed by other processes; bench/run.py's
rows (one call per sample) moved by 0.3-0.7 between runs there.

    python bench/sdpa_interleaved.py [--dtype float32|bfloat16] [--backward] [--heads 8] [--calls 12]
"""
import argparse
import os
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import run  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backward", action="store_true")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--calls", type=int, default=12)
    a = p.parse_args(argv)
    run.load_device("tpu")
    dt = getattr(torch, a.dtype)
    g = torch.Generator().manual_seed(0)
    shape = (1, a.heads, a.seq, 64)
    qkv = [torch.randn(*shape, generator=g).to(dt) for _ in range(3)]
    go = torch.randn(*shape, generator=g).to(dt)
    side = {d: ([t.to(d).requires_grad_(a.backward) for t in qkv], go.to(d)) for d in ("tpu", "cpu")}

    def once(d):
        (q, k, v), gd = side[d]
        t0 = time.perf_counter()
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if a.backward:
            o.backward(gd)
        run.sync(d)
        return time.perf_counter() - t0

    times = {"tpu": [], "cpu": []}
    cpu_time = []
    for d in times:
        once(d)
    for _ in range(a.calls):
        for d in times:
            c0 = time.process_time()
            times[d].append(once(d))
            if d == "tpu":
                cpu_time.append(time.process_time() - c0)
    mn = {d: min(v) * 1e3 for d, v in times.items()}
    md = {d: statistics.median(v) * 1e3 for d, v in times.items()}
    what = f"SDPA causal {a.dtype} 1x{a.heads}x{a.seq}x64 {'forward+backward' if a.backward else 'forward'}"
    print(f"{what}: min tpu {mn['tpu']:.1f} ms, CPU {mn['cpu']:.1f} ms, ratio {mn['cpu'] / mn['tpu']:.2f} | "
          f"median tpu {md['tpu']:.1f}, CPU {md['cpu']:.1f}, ratio {md['cpu'] / md['tpu']:.2f} | "
          f"tpu process CPU time {statistics.median(cpu_time) * 1e3:.1f} ms/call | "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
