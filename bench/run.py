"""Benchmarks (DESIGN.md §5): each one measured on the device and on PyTorch CPU
in the same run, interleaved, median of several runs; prints both figures and
the ratio, and writes bench/results.json.

    python bench/run.py [--runs 5] [--only dispatch,matmul] [--device tpu]

ratio = how many times better the device is than CPU (for times CPU/ours, for
rates ours/CPU), so > 1 always means the device wins. Device timings end with
torch.tpu.synchronize(): asynchronous dispatch is counted in full.
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

# --one-thread (parsed again below): both sides on one core, set before torch (and with it the
# device, through autoload) starts. See bench_kernels.py for why that keeps figures comparable on a
# shared 2-core machine.
if __name__ == "__main__" and "--one-thread" in sys.argv:
    os.environ["TORCH_TPU_NUM_THREADS"] = "1"

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the small GPT is the one tests train


def load_device(device):
    """Autoload (an installed torch_tpu) normally registered the device; from a
    checkout without `pip install -e .`, import torch_tpu from the tree."""
    dev_type = device.split(":")[0]
    if dev_type != "cpu" and not hasattr(torch, dev_type):
        try:
            import torch_tpu  # noqa: F401
        except ImportError:
            sys.path.insert(0, str(HERE.parent))
            import torch_tpu  # noqa: F401


# The pause before each timed sample (see main).
SETTLE_S = 0.02


def sync(device):
    dev = torch.device(device)
    if dev.type != "cpu":
        getattr(torch, dev.type).synchronize()


def timed(fn, device, runs, warmup=1):
    """Median wall time of fn() (including the final sync) over runs."""
    for _ in range(warmup):
        fn()
        sync(device)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


# Each benchmark: setup(device) -> (fn, work) where work converts seconds to
# the reported figure; `higher` says whether a bigger figure is better.

def bench_dispatch(device):
    x, y = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)
    n = 2000

    def fn():
        z = x
        for _ in range(n):
            z = z + y
        return z
    return fn, lambda s: s / n * 1e6


def bench_dispatch_inplace(device):
    x, y = torch.randn(4, 4, device=device), torch.randn(4, 4, device=device)
    n = 2000

    def fn():
        for _ in range(n):
            x.add_(y, alpha=1e-3)
    return fn, lambda s: s / n * 1e6


def bench_matmul(device, n=2048, dtype=torch.float32):
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return (lambda: torch.mm(a, b)), lambda s: 2 * n ** 3 / s / 1e9


def bench_matmul_bf16(device):
    return bench_matmul(device, n=512, dtype=torch.bfloat16)


def bench_add(device):
    n = 1 << 24
    a, b = torch.randn(n, device=device), torch.randn(n, device=device)
    out = torch.empty(n, device=device)
    return (lambda: torch.add(a, b, out=out)), lambda s: 3 * 4 * n / s / 1e9


def bench_sum(device):
    n = 1 << 24
    a = torch.randn(n, device=device)
    return (lambda: a.sum()), lambda s: 4 * n / s / 1e9


def bench_softmax(device):
    a = torch.randn(4096, 1024, device=device)
    return (lambda: torch.softmax(a, dim=-1)), lambda s: 2 * 4 * a.numel() / s / 1e9


def bench_gpt_step(device, autocast=False):
    from test_models import GPT, _lm_batch, _lm_loss
    torch.manual_seed(0)
    model = GPT(vocab=256, d=128, heads=4, layers=2, seq=32).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = _lm_batch(256, 8, 32)(torch.Generator().manual_seed(1))
    x, y = x.to(device), y.to(device)
    dev_type = torch.device(device).type

    def fn():
        opt.zero_grad(set_to_none=True)
        # forward and loss under autocast, backward and step outside it (PyTorch's AMP recipe)
        with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=autocast):
            loss = _lm_loss(model(x), y)
        loss.backward()
        opt.step()
    return fn, lambda s: s * 1e3


def bench_gpt_step_autocast(device):
    """gpt_train_step with bf16 autocast (matrix products in bf16, fp32 weights and optimizer)."""
    return bench_gpt_step(device, autocast=True)


BENCHES = {
    # name: (setup, unit, higher_is_better, what)
    "dispatch": (bench_dispatch, "us/op", False, "z = z + y on 4x4 fp32, 2000 chained ops"),
    "dispatch_inplace": (bench_dispatch_inplace, "us/op", False, "x.add_(y) on 4x4 fp32, 2000 ops"),
    "matmul_fp32": (bench_matmul, "GFLOP/s", True, "mm 2048x2048x2048 fp32"),
    "matmul_bf16": (bench_matmul_bf16, "GFLOP/s", True, "mm 512x512x512 bf16"),
    "add": (bench_add, "GB/s", True, "add 2^24 fp32 (out=), bytes = 3*4*N"),
    "sum": (bench_sum, "GB/s", True, "sum of 2^24 fp32, bytes = 4*N"),
    "softmax": (bench_softmax, "GB/s", True, "softmax rows of 4096x1024 fp32, bytes = 2*4*N"),
    "gpt_train_step": (bench_gpt_step, "ms/step", False,
                       "small GPT (2 layers, d 128, 4 heads, vocab 256, seq 32, batch 8) AdamW step"),
    "gpt_train_step_autocast": (bench_gpt_step_autocast, "ms/step", False,
                                "the same step, forward and loss under torch.autocast(bfloat16)"),
}


def _plugin_benches():
    """Other parts of the project add benchmarks as bench/bench_<part>.py modules
    exposing a BENCHES dict in the format above; they run after the core set."""
    import importlib.util
    found = {}
    for path in sorted(HERE.glob("bench_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        found.update(getattr(mod, "BENCHES", {}))
    return found


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=os.environ.get("TORCH_TPU_BENCH_DEVICE", "tpu"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--only", default="", help="comma-separated benchmark names")
    p.add_argument("--out", default=str(HERE / "results.json"))
    p.add_argument("--one-thread", action="store_true",
                   help="one compute thread on each side (TORCH_TPU_NUM_THREADS=1, torch.set_num_threads(1))")
    a = p.parse_args(argv)
    if a.one_thread:
        os.environ["TORCH_TPU_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    load_device(a.device)
    BENCHES.update(_plugin_benches())
    names = [n for n in BENCHES if not a.only or n in a.only.split(",")]
    results = []
    t_start = time.time()
    print(f"{'benchmark':<18} {'ours':>12} {'PyTorch CPU':>12}  {'unit':<8} {'ratio':>7}  (ratio > 1: device better)")
    for name in names:
        setup, unit, higher, what = BENCHES[name]
        row = {"name": name, "what": what, "unit": unit, "higher_is_better": higher}
        try:
            fns = {"ours": setup(a.device), "cpu": setup("cpu")}
            for f, _ in fns.values():  # warm both before timing either
                f()
            sync(a.device)
            samples = {"ours": [], "cpu": []}
            for _ in range(a.runs):  # interleave so drifting machine load hits both
                for side, dev in (("ours", a.device), ("cpu", "cpu")):
                    fn, conv = fns[side]
                    # a pause first: the other side's threads stop spinning (PyTorch's OpenMP
                    # threads stay busy for a while after a region), so neither side's sample
                    # starts beside the other's leftovers
                    time.sleep(SETTLE_S)
                    _, ts = timed(fn, dev, 1, warmup=0)
                    samples[side].append(conv(ts[0]))
            for side in samples:
                row[side] = statistics.median(samples[side])
                row[side + "_runs"] = [round(v, 4) for v in samples[side]]
            row["ratio"] = row["ours"] / row["cpu"] if higher else row["cpu"] / row["ours"]
            print(f"{name:<18} {row['ours']:>12.3f} {row['cpu']:>12.3f}  {unit:<8} {row['ratio']:>7.3f}")
        except Exception as e:  # noqa: BLE001 - one failing benchmark does not stop the rest
            row["error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            print(f"{name:<18} FAILED: {row['error']}")
        results.append(row)
    doc = {
        "device": a.device, "runs": a.runs, "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(), "host": platform.node(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(time.time() - t_start, 1),
        "results": results,
    }
    pathlib.Path(a.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {a.out} ({doc['seconds']} s)")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
