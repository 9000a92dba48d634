"""bf16 matmul, ours and PyTorch CPU's, each side in a process of its own (issue 16).

bench/bench_kernels.py alternates our calls with CPU's in one process, and ours then start beside
PyTorch's OpenMP threads still spinning after their region (README), which lowers our figures on
both cores. Here each (side, size, threads) runs alone: a warm-up, then the best of --runs calls.

    python bench/bench_matmul_separate.py [--sizes 512,2048] [--threads 1,2] [--runs 15]
"""
import argparse
import os
import subprocess
import sys

CHILD = r"""
import sys, time, torch
side, n, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if side == "tpu":
    import torch_tpu  # noqa: F401
a = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
b = torch.randn(n, n, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
sync = lambda: None
if side == "tpu":
    a, b, sync = a.to("tpu"), b.to("tpu"), torch.tpu.synchronize
for _ in range(5):
    c = a @ b
sync()
best = 1e9
for _ in range(runs):
    t = time.perf_counter(); c = a @ b; sync(); best = min(best, time.perf_counter() - t)
print(2 * n ** 3 / best / 1e9)
"""


def run(side, n, threads, runs):
    env = dict(os.environ, TORCH_TPU_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", CHILD, side, str(n), str(runs)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="512,2048")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'bf16 mm':>14} {'threads':>7} | {'ours GFLOP/s':>12} {'CPU GFLOP/s':>12} {'ratio':>6}")
    for n in (int(x) for x in args.sizes.split(",")):
        for t in (int(x) for x in args.threads.split(",")):
            ours, cpu = run("tpu", n, t, args.runs), run("cpu", n, t, args.runs)
            print(f"{str(n) + '^3':>14} {t:>7} | {ours:12.0f} {cpu:12.0f} {ours / cpu:6.2f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
