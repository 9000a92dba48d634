"""torch.compile(backend="tpu") benchmarks, loaded by bench/run.py (BENCHES below: the compiled tpu step
beside PyTorch CPU eager), or run alone for the whole comparison:

    python bench/bench_compile.py [--runs 5] [--inductor]

which prints, per model, ms per call for: compiled tpu (one program launch per graph), eager tpu in
Strict and DeferAndFuse, PyTorch CPU eager, and with --inductor torch.compile with Inductor on CPU
(its cold compile takes minutes here); then the cold compile time of the first call (Dynamo +
AOTAutograd + our capture, fused kernels built) and of a warm start in a new process (kernel cache
on disk), beside Inductor's when --inductor is given. Medians of interleaved runs.
"""
import argparse
import copy
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def _gpt():
    from test_models import GPT
    return GPT(vocab=256, d=128, heads=4, layers=2, seq=32)


def _gpt2_block():
    from test_models import Block
    return nn.Sequential(Block(768, 12, 0.0))


def _mlp():
    return nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 512))


def _inputs(name, device):
    g = torch.Generator().manual_seed(1)
    if name == "gpt_step" or name == "gpt_forward":
        from test_models import _lm_batch
        x, y = _lm_batch(256, 8, 32)(g)
        return x.to(device), y.to(device)
    if name == "gpt2_block_step":
        return torch.randn(4, 128, 768, generator=g).to(device), None
    return torch.randn(64, 512, generator=g).to(device), None


MODELS = {
    # name: (model factory, training step?)
    "gpt_step": (_gpt, True),
    "gpt_forward": (_gpt, False),
    "gpt2_block_step": (_gpt2_block, True),
    "mlp_step": (_mlp, True),
}


def make_step(name, device, how):
    """A callable running one call of `name` on `device`; how: eager | tpu | inductor."""
    from test_models import _lm_loss
    factory, train = MODELS[name]
    torch.manual_seed(0)
    model = factory().to(device)
    x, y = _inputs(name, device)
    run = model if how == "eager" else torch.compile(model, backend="tpu" if how == "tpu" else "inductor")
    if not train:
        model.eval()

        def fwd():
            with torch.no_grad():
                return run(x)
        return fwd
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, capturable=device != "cpu" and how == "tpu")
    step = torch.compile(opt.step, backend="tpu" if how == "tpu" else "inductor") if how != "eager" else opt.step

    def fn():
        opt.zero_grad(set_to_none=True)
        out = run(x)
        loss = _lm_loss(out, y) if y is not None else out.square().mean()
        loss.backward()
        step()
    return fn


def _sync(device):
    if device != "cpu":
        torch.tpu.synchronize()


def _time(fn, device):
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def bench_gpt_step_compiled(device):
    fn = make_step("gpt_step", device, "tpu" if device != "cpu" else "eager")
    return fn, lambda s: s * 1e3


BENCHES = {
    "gpt_step_compiled": (bench_gpt_step_compiled, "ms/step", False,
                          "small GPT AdamW step: torch.compile(backend='tpu') model and optimizer step vs CPU eager"),
}


def _set_mode(mode):
    import torch_tpu
    torch_tpu.set_eager_mode(mode)


def compare(runs, inductor):
    import torch_tpu  # noqa: F401
    cols = [("compiled tpu", "tpu", "tpu", "strict"), ("eager Strict", "tpu", "eager", "strict"),
            ("eager DeferAndFuse", "tpu", "eager", "defer_and_fuse"), ("CPU eager", "cpu", "eager", None)]
    if inductor:
        cols.append(("Inductor CPU", "cpu", "inductor", None))
    rows = {}
    print(f"{'model':<16}" + "".join(f"{c[0]:>20}" for c in cols) + "   (ms per call)")
    for name in MODELS:
        fns = {}
        cold = {}
        for label, dev, how, mode in cols:
            if mode:
                _set_mode(mode)
            fn = make_step(name, dev, how)
            cold[label] = _time(fn, dev)  # first call: compiles where it compiles
            fns[label] = fn
            _time(fn, dev)
        samples = {c[0]: [] for c in cols}
        for _ in range(runs):
            for label, dev, how, mode in cols:
                if mode:
                    _set_mode(mode)
                samples[label].append(_time(fns[label], dev) * 1e3)
        _set_mode("strict")
        med = {k: statistics.median(v) for k, v in samples.items()}
        rows[name] = {"ms": med, "first_call_s": cold}
        print(f"{name:<16}" + "".join(f"{med[c[0]]:>20.3f}" for c in cols))
    print("ratios: compiled tpu vs " + ", ".join(
        f"{c[0]} {statistics.median([rows[n]['ms'][c[0]] / rows[n]['ms']['compiled tpu'] for n in rows]):.2f}x"
        for c in cols[1:]) + " (median over models; > 1: compiled tpu faster)")
    print("first call (s): " + "; ".join(
        f"{n}: ours {rows[n]['first_call_s']['compiled tpu']:.2f}"
        + (f", Inductor {rows[n]['first_call_s']['Inductor CPU']:.2f}" if inductor else "") for n in rows))
    return rows


WARM = """
import sys, time, torch, torch_tpu
sys.path.insert(0, {bench!r})
import bench_compile as b
t0 = time.perf_counter()
fn = b.make_step("gpt_step", "tpu", "tpu")
fn(); torch.tpu.synchronize()
print(time.perf_counter() - t0)
"""


def warm_start():
    """A new process compiling the small GPT step with the kernel cache warm: its first call's time."""
    out = subprocess.run([sys.executable, "-c", WARM.format(bench=str(HERE))], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--inductor", action="store_true", help="also torch.compile with Inductor on CPU (slow)")
    p.add_argument("--out", default=str(HERE / "results_compile.json"))
    a = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}")
    rows = compare(a.runs, a.inductor)
    warm = warm_start()
    print(f"gpt_step warm start in a new process (Dynamo + AOTAutograd + capture, kernels from the disk cache): "
          f"{warm:.2f} s; cold first call in this run {rows['gpt_step']['first_call_s']['compiled tpu']:.2f} s")
    pathlib.Path(a.out).write_text(json.dumps({"rows": rows, "warm_start_s": warm,
                                               "load": os.getloadavg()[0]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
