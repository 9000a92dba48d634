"""torch.compile(backend="tpu") benchmarks, loaded by bench/run.py (BENCHES below: the compiled tpu step
beside PyTorch CPU eager), or run alone for the whole comparison:

    python bench/bench_compile.py [--runs 5] [--inductor] [--new-sizes-only] [--models-only] [--cpu-threads N]
                                  [--thread-cpu] [--models mlp_step,gpt2_block_step]

which prints, per model, ms per call for: compiled tpu (one program launch per graph), eager tpu in
Strict and DeferAndFuse, PyTorch CPU eager, and with --inductor torch.compile with Inductor on CPU
(its cold compile takes minutes here); then the cold compile time of the first call (Dynamo +
AOTAutograd + our capture, fused kernels built) and of a warm start in a new process (kernel cache
on disk), beside Inductor's when --inductor is given; and the small-GPT step compiled with
dynamic=True at a (batch, length) it has not seen against a repeated one, beside CPU eager
(TORCH_TPU_COMPILE_SIZES=0 gives the program-per-size behaviour for comparison). Medians.
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


_THREAD_CPU = False  # --thread-cpu: time a call by its busiest thread's CPU time, not wall time
_LOOP = 1  # --loop N: a sample is N calls in a row and one synchronize, as a training loop runs them


def _threads_cpu():
    """CPU seconds of each of this process's threads (Linux per-thread CPU clocks)."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            out[int(t)] = time.clock_gettime((~int(t) << 3) | 6)  # MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
        except OSError:
            pass
    return out


def _time(fn, device):
    """Seconds one call takes: wall time, or with --thread-cpu the CPU time of the busiest thread (the
    host's Python or the chip's worker): what the call takes on an idle machine with a core per thread,
    and little changed by other processes' load."""
    if _THREAD_CPU:
        a = _threads_cpu()
        for _ in range(_LOOP):
            fn()
        _sync(device)
        z = _threads_cpu()
        return max((z[t] - a.get(t, 0.0) for t in z), default=0.0) / _LOOP
    t0 = time.perf_counter()
    for _ in range(_LOOP):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / _LOOP


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


def compare(runs, inductor, only=None):
    import torch_tpu  # noqa: F401
    cols = [("compiled tpu", "tpu", "tpu", "strict"), ("eager Strict", "tpu", "eager", "strict"),
            ("eager DeferAndFuse", "tpu", "eager", "defer_and_fuse"), ("CPU eager", "cpu", "eager", None)]
    if inductor:
        cols.append(("Inductor CPU", "cpu", "inductor", None))
    rows = {}
    print(f"{'model':<16}" + "".join(f"{c[0]:>20}" for c in cols) + "   (ms per call)")
    for name in (only or MODELS):
        fns = {}
        cold = {}
        for label, dev, how, mode in cols:
            if mode:
                _set_mode(mode)
            fn = make_step(name, dev, how)
            t0 = time.perf_counter()  # first call, wall time: compiles where it compiles
            fn()
            _sync(dev)
            cold[label] = time.perf_counter() - t0
            fns[label] = fn
            _time(fn, dev)
        samples = {c[0]: [] for c in cols}
        for _ in range(runs):
            for label, dev, how, mode in cols:
                if mode:
                    _set_mode(mode)
                # an untimed call first, and a pause after CPU's columns: PyTorch CPU's OpenMP
                # threads spin about 4 ms after a region (libgomp), and the column after CPU's ran
                # beside them (on 2 cores the compiled small-GPT forward measured 3.3 ms there against
                # 2.2 alone); pausing before every column instead let their threads and caches go cold
                _time(fns[label], dev)
                samples[label].append(_time(fns[label], dev) * 1e3)
                if dev == "cpu":
                    time.sleep(0.01)
        _set_mode("strict")
        med = {k: statistics.median(v) for k, v in samples.items()}
        best = {k: min(v) for k, v in samples.items()}
        rows[name] = {"ms": med, "best_ms": best, "first_call_s": cold}
        print(f"{name:<16}" + "".join(f"{med[c[0]]:>20.3f}" for c in cols))
        print(f"{'  (best of ' + str(runs) + ')':<16}" + "".join(f"{best[c[0]]:>20.3f}" for c in cols))
    print("ratios: compiled tpu vs " + ", ".join(
        f"{c[0]} {statistics.median([rows[n]['ms'][c[0]] / rows[n]['ms']['compiled tpu'] for n in rows]):.2f}x"
        for c in cols[1:]) + " (median over models; > 1: compiled tpu faster)")
    print("best-of-N ratios: compiled tpu vs " + ", ".join(
        f"{c[0]} " + "/".join(f"{rows[n]['best_ms'][c[0]] / rows[n]['best_ms']['compiled tpu']:.2f}" for n in rows)
        for c in cols[1:]) + " (per model, in the order above)")
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


def _new_size_step(device, how):
    """The small GPT's training step (forward, backward, AdamW) compiled with dynamic=True, called
    with (batch, length) batches: fn(b, t)."""
    from test_models import GPT, _lm_batch, _lm_loss
    torch.manual_seed(0)
    model = GPT(vocab=256, d=128, heads=4, layers=2, seq=64).to(device)

    def loss_of(x, y):  # the loss inside the compiled region, as nanoGPT's forward has it
        return _lm_loss(model(x), y)
    run = torch.compile(loss_of, backend="tpu", dynamic=True) if how == "tpu" else loss_of
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, capturable=how == "tpu")
    step = torch.compile(opt.step, backend="tpu") if how == "tpu" else opt.step
    batches = {}

    def fn(b, t):
        if (b, t) not in batches:
            x, y = _lm_batch(256, b, t)(torch.Generator().manual_seed(b * 100 + t))
            batches[(b, t)] = (x.to(device), y.to(device))
        x, y = batches[(b, t)]
        opt.zero_grad(set_to_none=True)
        run(x, y).backward()
        step()
    return fn


def new_sizes(runs):
    """The first call at a (batch, length) not seen before against a repeated one, compiled tpu
    (dynamic=True) beside CPU eager on the same sizes. Returns medians in ms."""
    import torch_tpu
    torch_tpu.set_eager_mode("strict")
    sizes = [(b, t) for t in (9, 13, 17, 21, 27, 33, 41, 47, 53, 61) for b in (2, 3, 5, 7)]
    import random
    random.Random(0).shuffle(sizes)
    assert runs + 3 <= len(sizes), "too many runs for the sizes listed"
    out = {}
    for label, dev, how in (("compiled tpu", "tpu", "tpu"), ("CPU eager", "cpu", "eager")):
        fn = _new_size_step(dev, how)
        for b, t in sizes[:3]:  # the compile, and the graphs' first sizes
            _time(lambda: fn(b, t), dev)
        first, repeat = [], []
        for b, t in sizes[3:3 + runs]:
            first.append(_time(lambda: fn(b, t), dev) * 1e3)
            repeat.append(min(_time(lambda: fn(b, t), dev) for _ in range(2)) * 1e3)
        out[label] = (statistics.median(first), statistics.median(repeat))
    ours, cpu = out["compiled tpu"], out["CPU eager"]
    print(f"small-GPT step, dynamic=True, a new (batch, length) each time ({runs} sizes): "
          f"first call {ours[0]:.2f} ms, repeated {ours[1]:.2f} ms (first/repeat {ours[0] / ours[1]:.2f}x); "
          f"CPU eager {cpu[0]:.2f} / {cpu[1]:.2f} ms; CPU / ours on first calls {cpu[0] / ours[0]:.2f}x, "
          f"repeated {cpu[1] / ours[1]:.2f}x")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--inductor", action="store_true", help="also torch.compile with Inductor on CPU (slow)")
    p.add_argument("--out", default=str(HERE / "results_compile.json"))
    p.add_argument("--new-sizes-only", action="store_true",
                   help="only the first call at a new size against a repeated one (dynamic=True)")
    p.add_argument("--models-only", action="store_true",
                   help="only the per-model rows (no new-size or warm-start figures)")
    p.add_argument("--cpu-threads", type=int, default=int(os.environ.get("TORCH_TPU_NUM_THREADS", "0")),
                   help="threads of PyTorch CPU (eager and Inductor); default: TORCH_TPU_NUM_THREADS when set "
                        "(one thread each side), else PyTorch's own choice")
    p.add_argument("--models", default="", help="comma-separated model rows to run (default: all): "
                   + ", ".join(MODELS))
    p.add_argument("--thread-cpu", action="store_true",
                   help="time each call by the CPU time of its busiest thread instead of wall time (one thread "
                        "each side on a loaded machine: TORCH_TPU_NUM_THREADS=1)")
    p.add_argument("--loop", type=int, default=1,
                   help="calls per sample, with one synchronize after them (a training loop's steady state: "
                        "the host queues the next step while the device runs this one); default 1, each "
                        "call timed to its end")
    a = p.parse_args(argv)
    global _THREAD_CPU, _LOOP
    _THREAD_CPU = a.thread_cpu
    _LOOP = max(1, a.loop)
    if a.cpu_threads > 0:
        torch.set_num_threads(a.cpu_threads)
    print(f"load average {os.getloadavg()[0]:.2f}; PyTorch CPU threads {torch.get_num_threads()}, "
          f"TORCH_TPU_NUM_THREADS={os.environ.get('TORCH_TPU_NUM_THREADS', 'unset')}; "
          f"{'busiest thread CPU time' if a.thread_cpu else 'wall time'} per call"
          + (f", {_LOOP} calls per sample" if _LOOP > 1 else ""))
    if a.new_sizes_only:
        new_sizes(max(a.runs, 5))
        return 0
    only = [m for m in a.models.split(",") if m]
    unknown = [m for m in only if m not in MODELS]
    if unknown:
        p.error(f"unknown model row(s) {unknown}; rows are {list(MODELS)}")
    rows = compare(a.runs, a.inductor, only)
    if a.models_only:
        pathlib.Path(a.out).write_text(json.dumps({"rows": rows, "load": os.getloadavg()[0]}, indent=2) + "\n")
        return 0
    rows["new_sizes_ms"] = new_sizes(max(a.runs, 5))
    warm = warm_start()
    print(f"gpt_step warm start in a new process (Dynamo + AOTAutograd + capture, kernels from the disk cache): "
          f"{warm:.2f} s; cold first call in this run {rows['gpt_step']['first_call_s']['compiled tpu']:.2f} s")
    pathlib.Path(a.out).write_text(json.dumps({"rows": rows, "warm_start_s": warm,
                                               "load": os.getloadavg()[0]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
