"""The differential fuzzer (tests/fuzz.py): random op programs, run on the tpu in each eager mode and
on PyTorch CPU from the same seed, must give CPU's values and CPU's exceptions. A fast slice runs by
default; --full (TORCH_TPU_TEST_FULL=1) runs a long one. A failure prints the minimal reproducer."""
import gc
import pytest
import torch

import fuzz

FAST_SEEDS = range(0, 150)     # per mode: 5-20 s per mode on a 2-core machine
FULL_SEEDS = range(0, 1500)


def _fuzz(seeds, mode, device):
    failures = []
    for seed in seeds:
        rep = fuzz.fuzz_one(seed, mode, dev=device)
        if rep:
            failures.append(rep)
            if len(failures) >= 3:
                break
    assert not failures, "\n\n".join(failures)


def _fuzz_in_mode(seeds, mode, device):
    if device == "cpu":
        pytest.skip("compares the tpu with CPU")
    import torch_tpu
    prev = torch_tpu.get_eager_mode()
    try:
        _fuzz(seeds, mode, device)
    finally:
        torch_tpu.set_eager_mode(prev)
        # A program's exceptions hold its namespace through their tracebacks (a cycle): free its
        # tensors now, so poisoned ones do not keep later tests' DeferAndFuse op by op.
        gc.collect()


@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
def test_fuzz_fast(mode, device):
    _fuzz_in_mode(FAST_SEEDS, mode, device)


@pytest.mark.full
@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
def test_fuzz_full(mode, device):
    _fuzz_in_mode(FULL_SEEDS, mode, device)


def test_generator_is_deterministic():
    a, b = fuzz.generate(7), fuzz.generate(7)
    assert [s.src for s in a[0]] == [s.src for s in b[0]] and a[1] == b[1]
    assert [s.src for s in fuzz.generate(8)[0]] != [s.src for s in a[0]]


def test_comparison_catches_what_it_must():
    """The harness itself can fail: a wrong value, a missing error, an error of another type and an
    error where CPU ran are each reported, with a reproducer naming the statement."""
    prog = [fuzz.Stmt("v0 = mk(1, (3,), torch.float32).to(dev)", "v0"),
            fuzz.Stmt("_chk = S(v0)", uses=("v0",), check=True)]
    ref = fuzz.run_program(prog, ["v0"], "cpu")
    got = fuzz.run_program(prog, ["v0"], "cpu")
    assert fuzz.compare(prog, ref, got) is None
    got.checks[1] = got.checks[1] + 1
    assert fuzz.compare(prog, ref, got)[0] == "mismatch"
    got = fuzz.run_program(prog, ["v0"], "cpu")
    got.final["v0"] = got.final["v0"].clone()
    got.final["v0"][1] = 1e6
    assert fuzz.compare(prog, ref, got)[0] == "mismatch"
    err = [fuzz.Stmt("v1 = torch.ones(2) @ torch.ones(3)", "v1"), fuzz.Stmt("sync()")]
    ref = fuzz.run_program(err, [], "cpu")
    assert isinstance(ref.errors[0], RuntimeError)
    ok = fuzz.run_program([fuzz.Stmt("v1 = torch.ones(2)", "v1"), fuzz.Stmt("sync()")], [], "cpu")
    assert fuzz.compare(err, ref, ok)[0] == "no-error"
    ok.errors[0] = TypeError("x")
    assert fuzz.compare(err, ref, ok)[0] == "error-type"
    ok.errors[0], ok.errors[1] = None, RuntimeError("at the sync")
    assert fuzz.compare(err, ref, ok) is None  # a kernel error surfacing at the next sync
    assert fuzz.compare(prog, fuzz.run_program(prog, ["v0"], "cpu"),
                        fuzz.run_program(err[:1] + prog[1:], [], "cpu"))[0] == "spurious-error"
    src = fuzz.reproducer(prog, "strict", "mismatch")
    assert "_chk = S(v0)" in src and 'set_eager_mode("strict")' in src
    compile(src, "<reproducer>", "exec")
