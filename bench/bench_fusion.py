"""DeferAndFuse benchmarks (runtime/exec/defer/, runtime/compiler/), loaded by bench/run.py (BENCHES below), or run alone:
    python bench/bench_fusion.py [--runs 5]
which also prints the achieved bytes/s of the fused chain as a fraction of the copy bandwidth measured
in the same run (a device-to-device copy of the same bytes).

The chain: 10 elementwise ops over 2^24 float32 (one input, one output): a pass over memory reads
4*N bytes and writes 4*N, so bytes = 8*N, the same as a copy of the tensor.
"""
import math
import pathlib
import statistics
import sys
import time

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

N = 1 << 24
STRICT, DEFER = 0, 2


def chain10(x):
    y = x * 0.5
    y = y + 1.0
    y = y.exp()
    y = y - 1.0
    y = y / 3.0
    y = y.sigmoid()
    y = y * x
    y = y.tanh()
    y = y + 0.5
    return y.relu()


def arith10(x):
    """10 cheap elementwise ops (no transcendental): memory-bound once fused."""
    y = x * 0.5
    y = y + 1.0
    y = y * y
    y = y - x
    y = y / 3.0
    y = y.abs()
    y = y * x
    y = y.clamp(-2.0, 2.0)
    y = y + 0.5
    return y.relu()


def _set_mode(device, mode):
    """Sets the tpu eager mode without a sync (the harness syncs after fn: that is the flush)."""
    if torch.device(device).type == "cpu":
        return
    from torch_tpu import _C
    _C._set_exec_mode(mode)


def _chain_setup(mode, chain=None, n=N):
    chain = chain or chain10

    def setup(device):
        x = torch.randn(n, device=device)
        return (lambda: chain(x)), lambda s: 8 * n / s / 1e9
    return _in_mode(mode, setup)


def mse(x, y):
    """An elementwise chain ending in a reduction (rule 7 of fuse.c): one pass reading x and y."""
    d = x - y
    return (d * d).mean()


def _mse_setup(mode):
    def setup(device):
        x, y = torch.randn(N, device=device), torch.randn(N, device=device)
        return (lambda: mse(x, y)), lambda s: 8 * N / s / 1e9
    return _in_mode(mode, setup)


def _in_mode(mode, setup):
    """A bench/run.py setup whose step runs in the given eager mode. In DeferAndFuse the step runs twice
    first and the fused kernels it queued for building are awaited: the figure is the steady state a
    training loop reaches after its first steps (and a later process starts in, from the disk cache)."""
    def wrapped(device):
        step, conv = setup(device)

        def fn():
            _set_mode(device, mode)
            try:
                return step()
            finally:
                _set_mode(device, STRICT)
        if mode == DEFER and torch.device(device).type != "cpu":
            from torch_tpu import _C
            for _ in range(2):
                fn()
                _sync(device)
            _C._fusion_wait_builds()
        return fn, conv
    return wrapped


class GPT2Block(nn.Module):
    """A GPT-2 block written the way Hugging Face's GPT-2 and nanoGPT write it: attention as matmuls,
    scale, causal mask and softmax; the tanh GELU spelled out (NewGELUActivation); pre-LayerNorm and
    residuals. Its elementwise chains are what DeferAndFuse is for."""

    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    @staticmethod
    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    def forward(self, x):
        b, t, d = x.shape
        h = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(h))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(self.gelu(self.fc1(self.ln2(x))))


BLOCK_SHAPE = dict(batch=4, seq=256, d=384, heads=6)


def _block_setup(mode):
    """The GPT2Block forward (no grad) on BLOCK_SHAPE, in `mode`."""
    def setup(device):
        torch.manual_seed(0)
        s = BLOCK_SHAPE
        block = GPT2Block(s["d"], s["heads"], s["seq"]).to(device).eval()
        x = torch.randn(s["batch"], s["seq"], s["d"]).to(device)

        def step():
            with torch.no_grad():
                return block(x)
        return step, lambda t: t * 1e3
    return _in_mode(mode, setup)


def _gpt_setup(mode):
    from run import bench_gpt_step  # the same model, data and optimizer as gpt_train_step
    return _in_mode(mode, bench_gpt_step)


def _sync(device):
    if torch.device(device).type != "cpu":
        getattr(torch, torch.device(device).type).synchronize()


def _median_s(fn, device, runs):
    fn()
    _sync(device)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def copy_bandwidth(device, runs=5):
    """Bytes/s of a copy of 2^24 float32 on `device` (read + write = 8*N bytes)."""
    src = torch.randn(N, device=device)
    dst = torch.empty(N, device=device)
    return 8 * N / _median_s(lambda: dst.copy_(src), device, runs)


def _copy_fraction_setup(mode, chain=None):
    """The chain's bytes/s in percent of the same device's copy bandwidth (measured at setup)."""
    def setup(device):
        bw = copy_bandwidth(device, runs=3)
        fn, _ = _chain_setup(mode, chain)(device)
        return fn, lambda s: 100.0 * (8 * N / s) / bw
    return setup


BENCHES = {
    # name: (setup, unit, higher_is_better, what) -- the format of bench/run.py
    "fuse_chain10_defer": (_chain_setup(DEFER), "GB/s", True,
                           "10-op elementwise chain over 2^24 fp32, DeferAndFuse vs CPU eager; bytes = 8*N"),
    "fuse_chain10_strict": (_chain_setup(STRICT), "GB/s", True,
                            "the same chain, Strict vs CPU eager"),
    "fuse_chain10_copyfrac": (_copy_fraction_setup(DEFER), "% copy", True,
                              "the chain's bytes/s as % of the same device's copy bandwidth (ours: "
                              "DeferAndFuse on tpu; cpu: PyTorch CPU eager)"),
    "fuse_chain10_incache": (_chain_setup(DEFER, chain10, 1 << 20), "GB/s", True,
                             "the chain over 2^20 fp32 (in the last-level cache): its compute ceiling"),
    "fuse_arith10_defer": (_chain_setup(DEFER, arith10), "GB/s", True,
                           "10 cheap elementwise ops (mul, add, sub, div, abs, clamp, relu) over 2^24 fp32, "
                           "DeferAndFuse vs CPU eager; bytes = 8*N"),
    "fuse_arith10_copyfrac": (_copy_fraction_setup(DEFER, arith10), "% copy", True,
                              "that chain's bytes/s as % of the same device's copy bandwidth"),
    "fuse_mse_defer": (_mse_setup(DEFER), "GB/s", True,
                       "((x - y) * (x - y)).mean() over 2^24 fp32 (chain into a reduction), DeferAndFuse "
                       "vs CPU eager; bytes = 8*N"),
    "fuse_mse_strict": (_mse_setup(STRICT), "GB/s", True, "the same, Strict vs CPU eager"),
    "fuse_gpt_step_defer": (_gpt_setup(DEFER), "ms/step", False,
                            "small GPT AdamW step (as gpt_train_step) in DeferAndFuse vs CPU"),
    "fuse_block_fwd_defer": (_block_setup(DEFER), "ms", False,
                             "GPT-2 block forward (batch 4, seq 256, d 384, 6 heads; attention and tanh GELU "
                             "written out), DeferAndFuse vs CPU eager"),
    "fuse_block_fwd_strict": (_block_setup(STRICT), "ms", False, "the same block forward, Strict vs CPU eager"),
}


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args(argv)
    sys.path.insert(0, str(HERE.parent))
    import torch_tpu  # noqa: F401
    from torch_tpu import _C
    dev = "tpu"
    x_cpu, x_dev = torch.randn(N), torch.randn(N, device=dev)
    runs = a.runs
    bw_dev, bw_cpu = copy_bandwidth(dev, runs), copy_bandwidth("cpu", runs)
    t_cpu = _median_s(lambda: chain10(x_cpu), "cpu", runs)
    f_strict, _ = _chain_setup(STRICT)(dev)
    f_defer, _ = _chain_setup(DEFER)(dev)
    t_strict = _median_s(f_strict, dev, runs)
    _C._fusion_stats_reset()
    t_defer = _median_s(f_defer, dev, runs)
    st = _C._fusion_stats()
    gb = lambda t: 8 * N / t / 1e9
    print(f"copy bandwidth: tpu {bw_dev / 1e9:.2f} GB/s, cpu {bw_cpu / 1e9:.2f} GB/s")
    print(f"chain10 CPU eager   {t_cpu * 1e3:8.2f} ms  {gb(t_cpu):6.2f} GB/s  {100 * 8 * N / t_cpu / bw_cpu:5.1f}% of cpu copy")
    print(f"chain10 Strict      {t_strict * 1e3:8.2f} ms  {gb(t_strict):6.2f} GB/s  {t_cpu / t_strict:5.2f}x CPU")
    print(f"chain10 DeferAndFuse{t_defer * 1e3:8.2f} ms  {gb(t_defer):6.2f} GB/s  {t_cpu / t_defer:5.2f}x CPU  "
          f"{t_strict / t_defer:5.2f}x Strict  {100 * 8 * N / t_defer / bw_dev:5.1f}% of tpu copy bandwidth")
    print(f"  kernels per chain: {st['kernels_launched'] / max(1, st['flushes']):.1f} (stats {st})")
    t_small = _median_s(_chain_setup(DEFER, chain10, 1 << 20)(dev)[0], dev, runs)
    print(f"chain10 DeferAndFuse on 2^20 (in cache): {8 * (1 << 20) / t_small / 1e9:.2f} GB/s: the chain's "
          f"compute ceiling (transcendentals), against {gb(t_defer):.2f} GB/s from memory")
    a_cpu = _median_s(lambda: arith10(x_cpu), "cpu", runs)
    a_strict = _median_s(_chain_setup(STRICT, arith10)(dev)[0], dev, runs)
    a_defer = _median_s(_chain_setup(DEFER, arith10)(dev)[0], dev, runs)
    print(f"arith10: CPU {gb(a_cpu):.2f} GB/s, Strict {gb(a_strict):.2f} GB/s, DeferAndFuse {gb(a_defer):.2f} GB/s "
          f"({a_cpu / a_defer:.2f}x CPU, {a_strict / a_defer:.2f}x Strict, "
          f"{100 * 8 * N / a_defer / bw_dev:.1f}% of tpu copy bandwidth)")
    m_cpu, m_strict, m_defer = _mse_setup(STRICT)("cpu")[0], _mse_setup(STRICT)(dev)[0], _mse_setup(DEFER)(dev)[0]
    tc, ts, td = (_median_s(m_cpu, "cpu", runs), _median_s(m_strict, dev, runs), _median_s(m_defer, dev, runs))
    print(f"mse (chain into mean): CPU {gb(tc):.2f} GB/s, Strict {gb(ts):.2f} GB/s, DeferAndFuse {gb(td):.2f} GB/s "
          f"({tc / td:.2f}x CPU, {ts / td:.2f}x Strict, {100 * 8 * N / td / bw_dev:.1f}% of tpu copy bandwidth)")
    b_cpu, b_strict, b_defer = _block_setup(STRICT)("cpu")[0], _block_setup(STRICT)(dev)[0], _block_setup(DEFER)(dev)[0]
    tc, ts, td = (_median_s(b_cpu, "cpu", runs), _median_s(b_strict, dev, runs), _median_s(b_defer, dev, runs))
    print(f"GPT-2 block forward {BLOCK_SHAPE}: CPU {tc * 1e3:.1f} ms, Strict {ts * 1e3:.1f} ms, "
          f"DeferAndFuse {td * 1e3:.1f} ms ({tc / td:.2f}x CPU, {ts / td:.2f}x Strict)")
    g_cpu, _ = _gpt_setup(STRICT)("cpu")
    g_strict, _ = _gpt_setup(STRICT)(dev)
    g_defer, _ = _gpt_setup(DEFER)(dev)
    # ~10 ms steps: each sample is 20 steps (one sync each, as a loop reading its loss would)
    steps = 20

    def many(f, device):
        def run():
            for _ in range(steps):
                f()
                _sync(device)
        return run
    tc, ts, td = (_median_s(many(g_cpu, "cpu"), "cpu", runs) / steps, _median_s(many(g_strict, dev), dev, runs) / steps,
                  _median_s(many(g_defer, dev), dev, runs) / steps)
    print(f"gpt step (median of {runs} x {steps} steps): CPU {tc * 1e3:.1f} ms, Strict {ts * 1e3:.1f} ms, "
          f"DeferAndFuse {td * 1e3:.1f} ms ({tc / td:.2f}x CPU, {ts / td:.2f}x Strict)")


if __name__ == "__main__":
    main()
