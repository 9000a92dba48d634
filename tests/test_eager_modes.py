"""The eager modes: selecting them (environment, process, scope), switching synchronizes,
and Debug mode's checks: every index op raises CPU's exception type (IndexError, RuntimeError for gather/scatter) at the Python line that issued it, device
memory guards catch a kernel writing past its buffer / reading freed memory and host code reading
freed or live device memory (naming the op, or host code), and the opt-in NaN/Inf check names the first op producing one.
Programs give the same results in Strict and Debug."""
import ctypes
import os
import subprocess
import sys
import textwrap
import traceback

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import _C
from torch_tpu._internal import execution_mode as em

DEV = "tpu"
THIS = os.path.abspath(__file__)


@pytest.fixture(autouse=True)
def back_to_strict():
    yield
    em._restore(em.EagerMode.STRICT)
    _C._debug_set_nan_check(0)


def run_py(code, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_TPU_EAGER_MODE", "TPU_LAUNCH_BLOCKING", "TORCH_TPU_DEFER_AND_FUSE",
                        "TORCH_TPU_DEBUG_NANS", "TORCH_TPU_HBM_BYTES")}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-W", "always", "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout, proc.stderr


# ---------------------------------------------------------------- selecting a mode

def test_set_get_and_scope():
    assert torch_tpu.get_eager_mode() is torch_tpu.EagerMode.STRICT
    torch_tpu.set_eager_mode("debug")
    assert torch_tpu.get_eager_mode() is em.EagerMode.DEBUG and _C._get_exec_mode() == 1
    with torch_tpu.eager_mode("strict") as m:
        assert m is em.EagerMode.STRICT and torch_tpu.get_eager_mode() is em.EagerMode.STRICT
        with torch_tpu.eager_mode(em.EagerMode.DEBUG):
            assert em.eager_mode is em.EagerMode.DEBUG
        assert em.eager_mode is em.EagerMode.STRICT
    assert torch_tpu.get_eager_mode() is em.EagerMode.DEBUG
    torch_tpu.set_eager_mode("STRICT")
    # a scope restores the mode when its body raises
    with pytest.raises(KeyError):
        with torch_tpu.eager_mode("debug"):
            raise KeyError("x")
    assert torch_tpu.get_eager_mode() is em.EagerMode.STRICT


def test_decorator_and_spellings():
    @torch_tpu.eager_mode("debug")
    def f():
        return torch_tpu.get_eager_mode()

    assert f() is em.EagerMode.DEBUG and torch_tpu.get_eager_mode() is em.EagerMode.STRICT
    for spelling in ("debug", "Debug", " DEBUG ", 1, em.EagerMode.DEBUG, "EagerMode.DEBUG"):
        torch_tpu.set_eager_mode(spelling)
        assert torch_tpu.get_eager_mode() is em.EagerMode.DEBUG
        torch_tpu.set_eager_mode("strict")
    # TorchTPU's own spellings keep working
    em.eager_mode = em.EagerMode.DEBUG
    assert em.eager_mode is em.EagerMode.DEBUG
    with em.set_eager_mode(em.EagerMode.STRICT):
        assert em.eager_mode is em.EagerMode.STRICT
    assert em.eager_mode is em.EagerMode.DEBUG
    em.eager_mode = "strict"
    for bad in ("fastest", 7, None, True):
        with pytest.raises(ValueError, match="strict"):
            torch_tpu.set_eager_mode(bad)
    assert torch_tpu.get_eager_mode() is em.EagerMode.STRICT


def test_switching_synchronizes_first():
    """Work queued under Strict finishes before the switch: a failed kernel still pending is raised by
    the switch (at that sync point), and the mode does not change."""
    x = torch.arange(4.0, device=DEV)
    bad = torch.tensor([0, 9], device=DEV)
    y = x[bad]  # Strict: queued; the kernel's error is kept until a sync point
    with pytest.raises(IndexError, match="index 9 is out of bounds"):
        torch_tpu.set_eager_mode("debug")
    assert torch_tpu.get_eager_mode() is em.EagerMode.STRICT
    del y
    torch_tpu.set_eager_mode("debug")
    # leaving a scope whose pending work failed still restores the mode, then raises
    with pytest.raises(IndexError):
        with torch_tpu.eager_mode("strict"):
            y = x[bad]
    assert torch_tpu.get_eager_mode() is em.EagerMode.DEBUG
    assert (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


# (TORCH_TPU_EAGER_MODE, TORCH_TPU_DEFER_AND_FUSE=1, runtime started in DEBUG for TPU_LAUNCH_BLOCKING=1)
@pytest.mark.parametrize("explicit, defer_and_fuse, blocking, expect, warns", [
    ("debug", False, False, em.EagerMode.DEBUG, None),
    ("Strict", False, False, em.EagerMode.STRICT, None),
    ("defer_and_fuse", False, False, em.EagerMode.DEFER_AND_FUSE, None),
    ("", False, True, em.EagerMode.DEBUG, None),
    ("strict", False, True, em.EagerMode.STRICT, "TPU_LAUNCH_BLOCKING=1 ignored"),
    ("", True, False, em.EagerMode.DEFER_AND_FUSE, None),
    ("", True, True, em.EagerMode.DEBUG, None),
    ("", False, False, None, None),
])
def test_environment_rules(explicit, defer_and_fuse, blocking, expect, warns):
    if warns:
        with pytest.warns(RuntimeWarning, match=warns):
            assert em._mode_from_env(explicit, defer_and_fuse, blocking) is expect
    else:
        assert em._mode_from_env(explicit, defer_and_fuse, blocking) is expect


@pytest.mark.parametrize("blocking", [False, True])
def test_environment_bad_mode_is_an_error(blocking):
    with pytest.raises(ValueError, match="TORCH_TPU_EAGER_MODE='fastest': expected strict, debug or defer_and_fuse"):
        em._mode_from_env("fastest", False, blocking)


def test_environment_defer_and_fuse(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_EAGER_MODE", "defer_and_fuse")
    em._init_from_env()
    assert torch_tpu.get_eager_mode() is em.EagerMode.DEFER_AND_FUSE
    assert (torch.ones(3, device=DEV) * 2 + 1).cpu().tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("env, expect, warns", [
    ({"TPU_LAUNCH_BLOCKING": "1"}, "EagerMode.DEBUG", None),
    ({"TPU_LAUNCH_BLOCKING": "1", "TORCH_TPU_EAGER_MODE": "strict"}, "EagerMode.STRICT",
     "TPU_LAUNCH_BLOCKING=1 ignored"),
    ({"TORCH_TPU_DEFER_AND_FUSE": "1"}, "EagerMode.DEFER_AND_FUSE", None),
])
def test_environment_switches_at_start_up(env, expect, warns):
    """The switches as a process sees them: TPU_LAUNCH_BLOCKING is read by the runtime alone."""
    out, err = run_py("""
        import torch, torch_tpu
        print(torch_tpu.get_eager_mode())
    """, **env)
    assert out.strip() == expect, out + err
    if warns:
        assert warns in err, err
    else:
        assert "ignored" not in err, err


def test_environment_in_a_fresh_process():
    """TORCH_TPU_EAGER_MODE=debug at start-up, with the NaN check from TORCH_TPU_DEBUG_NANS=1."""
    out, _ = run_py("""
        import torch, torch_tpu
        print(torch_tpu.get_eager_mode())
        x = torch.tensor([1.0, -1.0], device="tpu")
        y = x * 2
        try:
            z = torch.sqrt(x)
        except RuntimeError as e:
            print("caught:", e)
        print(torch.sqrt(x.abs()).sum().item())
    """, TORCH_TPU_EAGER_MODE="debug", TORCH_TPU_DEBUG_NANS="1")
    lines = out.strip().splitlines()
    assert lines[0] == "EagerMode.DEBUG"
    assert "caught:" in out and "op aten::sqrt" in out and "produced NaN in output 0" in out
    assert lines[-1] == "2.0"


# ---------------------------------------------------------------- Debug: indices

def _index_cases():
    x = torch.arange(12.0, device=DEV).reshape(3, 4)
    bad = torch.tensor([0, 5], device=DEV)
    col = torch.tensor([[0, 9]] * 3, device=DEV)
    ones = torch.ones(2, 4, device=DEV)
    # name: (the op's kernel in the message, thunk); each thunk is on one line: its line is the op's line
    return {
        "indexing": ("index", lambda: x[bad]),
        "indexing_negative": ("index", lambda: x[torch.tensor([-4], device=DEV)]),
        "indexing_cpu_index": ("index", lambda: x[torch.tensor([0, 5])]),
        "gather": ("gather", lambda: torch.gather(x, 1, col)),
        "scatter": ("scatter", lambda: x.clone().scatter_(1, col, 1.0)),
        "scatter_add": ("scatter_add", lambda: x.clone().scatter_add_(1, col, x[:, :2])),
        "scatter_reduce": ("scatter_reduce", lambda: x.clone().scatter_reduce_(1, col, x[:, :2], "amax")),
        "index_select": ("index_select", lambda: torch.index_select(x, 0, bad)),
        "embedding": ("index_select", lambda: F.embedding(torch.tensor([1, 3], device=DEV), x)),
        "index_put": ("index_put", lambda: x.clone().index_put_((bad,), torch.tensor(1.0, device=DEV))),
        "index_put_accumulate": ("index_put", lambda: x.clone().index_put_((bad,), torch.tensor(1.0, device=DEV), accumulate=True)),
        "setitem": ("index_put", lambda: x.clone().__setitem__(bad, 1.0)),
        "take": ("take", lambda: torch.take(x, torch.tensor([0, 12], device=DEV))),
        "put": ("put", lambda: x.clone().put_(torch.tensor([12], device=DEV), torch.tensor([1.0], device=DEV))),
        "index_add": ("index_add", lambda: x.clone().index_add_(0, bad, ones)),
        "index_copy": ("index_copy", lambda: x.clone().index_copy_(0, bad, ones)),
        "index_fill": ("index_fill", lambda: x.clone().index_fill_(0, bad, 1.0)),
        "index_reduce": ("index_reduce", lambda: x.clone().index_reduce_(0, bad, ones, "prod")),
        "nll_loss": ("nll_loss", lambda: F.nll_loss(x, torch.tensor([0, 1, 9], device=DEV))),
        "cross_entropy": ("nll_loss", lambda: F.cross_entropy(x, torch.tensor([0, 1, 9], device=DEV))),
        "one_hot": ("scatter", lambda: F.one_hot(torch.tensor([0, 9], device=DEV), 4)),
    }


_INDEX_CASES = list(_index_cases())


def _line_in_this_file(err):
    frames = [f for f in traceback.extract_tb(err.__traceback__) if os.path.abspath(f.filename) == THIS]
    return frames[-1].lineno


# CPU raises RuntimeError for these kernels' bad indices, IndexError for the others
_RUNTIME_ERROR_KERNELS = {"gather", "scatter", "scatter_add", "scatter_reduce", "index_add"}


@pytest.mark.parametrize("name", _INDEX_CASES)
def test_debug_index_error_at_issuing_line(name):
    kernel, thunk = _index_cases()[name]
    torch_tpu.set_eager_mode("debug")
    expected = RuntimeError if kernel in _RUNTIME_ERROR_KERNELS else IndexError
    with pytest.raises(expected, match="out of bounds") as info:
        thunk()
    assert kernel in str(info.value)
    # raised by the op itself (Debug is synchronous), not by a later sync point
    assert _line_in_this_file(info.value) == thunk.__code__.co_firstlineno
    assert (torch.ones(2, device=DEV) + 1).cpu().tolist() == [2.0, 2.0]  # the device keeps working


def test_strict_reports_index_error_at_the_next_sync():
    kernel, thunk = _index_cases()["gather"]
    y = thunk()  # Strict: no error yet
    with pytest.raises(RuntimeError, match="gather.*out of bounds.*TORCH_TPU_EAGER_MODE=debug"):
        torch.tpu.synchronize()
    del y


def test_debug_index_in_range_and_negative_wrap_match_cpu():
    torch_tpu.set_eager_mode("debug")
    xc = torch.arange(12.0).reshape(3, 4)
    x = xc.to(DEV)
    i = torch.tensor([2, -1, 0])
    assert torch.equal(x[i.to(DEV)].cpu(), xc[i])
    assert torch.equal(torch.take(x, torch.tensor([11, -12], device=DEV)).cpu(), torch.take(xc, torch.tensor([11, -12])))
    assert torch.equal(F.embedding(torch.tensor([2, 0], device=DEV), x).cpu(), F.embedding(torch.tensor([2, 0]), xc))


# ---------------------------------------------------------------- Debug: device memory guards

def test_debug_allocations_are_guarded():
    torch_tpu.set_eager_mode("debug")
    before = _C._debug_stats()["guarded_allocs"]
    x = torch.ones(1000, device=DEV)
    assert _C._debug_stats()["guarded_allocs"] > before
    assert x.data_ptr() % 64 == 0
    assert (x * 3).sum().item() == 3000.0


def test_kernel_writing_past_its_buffer_is_caught():
    torch_tpu.set_eager_mode("debug")
    a = torch.zeros(4096, dtype=torch.uint8, device=DEV)
    b = torch.full((4096,), 7, dtype=torch.uint8, device=DEV)
    with pytest.raises(RuntimeError, match=r"aten::_debug_touch: device memory violation: .* at 0x[0-9a-f]+: "
                                           r"offset 4096 of a 4096-byte buffer \(0 bytes past its end\)"):
        _C._debug_touch(a.data_ptr(), 4096 + 64, True)
    assert torch.equal(b.cpu(), torch.full((4096,), 7, dtype=torch.uint8))  # neighbours intact
    # within the 64-byte alignment pad: caught by the canary
    c = torch.zeros(100, dtype=torch.uint8, device=DEV)
    with pytest.raises(RuntimeError, match="write at .*offset 100 of a 100-byte buffer.*alignment padding"):
        _C._debug_touch(c.data_ptr(), 101, True)
    _C._debug_touch(c.data_ptr(), 100, True)  # in bounds: fine
    assert c.cpu().tolist() == [2] * 100  # both runs wrote the 100 bytes in bounds


def test_kernel_reading_freed_memory_is_caught():
    torch_tpu.set_eager_mode("debug")
    a = torch.ones(2048, device=DEV)
    ptr = a.data_ptr()
    del a
    assert _C._debug_stats()["quarantined_bytes"] >= 8192
    with pytest.raises(RuntimeError, match=r"aten::_debug_touch: device memory violation: read at .*"
                                           r"in a freed 8192-byte buffer \(offset 16\)"):
        _C._debug_touch(ptr + 16, 8, False)
    assert torch.ones(2048, device=DEV).data_ptr() != ptr  # quarantined: not handed out again


def test_host_code_reading_freed_device_memory_is_caught():
    torch_tpu.set_eager_mode("debug")
    a = torch.ones(64, device=DEV)
    x = torch.ones(3, device=DEV)
    ptr = a.data_ptr()
    del a
    assert ctypes.string_at(ptr + 8, 4) == b"\0\0\0\0"  # the stray read sees a scratch page, not data
    with pytest.raises(RuntimeError, match=r"\(not run\): device memory violation by host code .*"
                                           r"freed 256-byte buffer \(offset 8\)"):
        x + 1  # the next op reports it
    assert (x + 1).cpu().tolist() == [2.0, 2.0, 2.0]
    ctypes.string_at(ptr, 1)
    with pytest.raises(RuntimeError, match="by host code"):
        _C._debug_check_violation()
    _C._debug_check_violation()  # reported once


def test_host_code_reading_live_device_memory_is_caught():
    """Debug mode keeps live tpu memory inaccessible to host code: reading a tensor's bytes through
    ctypes is reported naming host code, by the next op (which then does not run)."""
    torch_tpu.set_eager_mode("debug")
    t = torch.arange(4.0, device=DEV)
    x = torch.ones(3, device=DEV)
    assert ctypes.string_at(t.data_ptr(), 4) == b"\0\0\0\0"  # a scratch page, not 0.0's bytes by chance
    with pytest.raises(RuntimeError, match=r"\(not run\): host code touched device memory at 0x[0-9a-f]+ "
                                           r"\(offset 0 of a 16-byte buffer\): a read"):
        x + 1
    assert (x + 1).cpu().tolist() == [2.0, 2.0, 2.0]
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]  # the runtime's own copies still work
    # at a sync point: .cpu() / .item() / torch.tpu.synchronize()
    ctypes.string_at(t.data_ptr() + 8, 4)
    with pytest.raises(RuntimeError, match=r"host code touched device memory .*offset 8 of a 16-byte buffer"):
        t.cpu()
    ctypes.string_at(t.data_ptr() + 4, 1)
    with pytest.raises(RuntimeError, match="host code touched device memory"):
        torch.tpu.synchronize()
    assert t[1].item() == 1.0


def test_host_code_writing_live_device_memory_changes_nothing():
    torch_tpu.set_eager_mode("debug")
    t = torch.zeros(8, dtype=torch.int32, device=DEV)
    ctypes.memset(t.data_ptr() + 4, 0x7F, 4)  # a stray write lands on a private scratch page
    with pytest.raises(RuntimeError, match=r"host code touched device memory .*\(offset 4 of a 32-byte buffer\): a write"):
        _C._debug_check_violation()
    assert t.cpu().tolist() == [0] * 8
    assert (t + 1).sum().item() == 8


def test_live_memory_is_plain_memory_out_of_debug_mode():
    torch_tpu.set_eager_mode("debug")
    t = torch.full((4,), 2.5, device=DEV)  # a guarded Debug-mode buffer
    torch_tpu.set_eager_mode("strict")
    assert ctypes.string_at(t.data_ptr(), 4) == torch.tensor([2.5]).numpy().tobytes()
    _C._debug_check_violation()  # nothing to report in Strict mode
    torch_tpu.set_eager_mode("debug")
    ctypes.string_at(t.data_ptr(), 4)
    with pytest.raises(RuntimeError, match="host code touched device memory"):
        _C._debug_check_violation()
    assert (t * 2).cpu().tolist() == [5.0] * 4


def test_debug_programs_touch_no_device_memory_from_host():
    """A small program with views, in-place ops, copies, resize and .item() reports nothing."""
    torch_tpu.set_eager_mode("debug")
    before = _C._debug_stats()["violations"]
    a = torch.randn(6, 5).to(DEV)
    b = a.t().contiguous()[1:4]
    b.add_(1).mul_(torch.tensor(2.0, device=DEV))
    c = torch.empty(0, device=DEV)
    c.resize_(10).fill_(3)
    d = torch.cat([b.flatten(), c]).clone()
    d[2] = 7
    assert d[2].item() == 7.0
    torch.testing.assert_close(b.cpu(), (a.cpu().t()[1:4] + 1) * 2)
    assert c.sum().item() == 30.0
    torch.tpu.synchronize()
    _C._debug_check_violation()
    assert _C._debug_stats()["violations"] == before


def test_strict_mode_allocations_unguarded():
    before = _C._debug_stats()["guarded_allocs"]
    x = torch.ones(1000, device=DEV)
    assert _C._debug_stats()["guarded_allocs"] == before
    torch_tpu.set_eager_mode("debug")
    y = x + 1  # Strict-era buffers work in Debug mode, and Debug-era ones in Strict mode
    torch_tpu.set_eager_mode("strict")
    assert (y * x).sum().item() == 2000.0
    torch.ones(4, device=DEV)
    assert _C._debug_stats()["quarantined_bytes"] == 0  # leaving Debug released the quarantine


# ---------------------------------------------------------------- Debug: NaN / Inf

def test_nan_check_names_the_first_op():
    torch_tpu.set_eager_mode("debug")
    _C._debug_set_nan_check(1)
    x = torch.tensor([1.0, 0.5, 4.0], device=DEV)
    y = x.sqrt() * 2  # finite: fine
    thunk = lambda: x / 0.0 + 1.0  # noqa: E731  (its line is the op's line)
    with pytest.raises(RuntimeError, match=r"op aten::div\.\S+ produced Inf in output 0") as info:
        thunk()
    assert _line_in_this_file(info.value) == thunk.__code__.co_firstlineno
    with pytest.raises(RuntimeError, match=r"op aten::log\.\S+ produced NaN in output 0"):
        torch.log(-x)
    for dt in (torch.bfloat16, torch.float16, torch.float64):
        with pytest.raises(RuntimeError, match="produced NaN"):
            torch.log(-x.to(dt))
    assert (torch.arange(3, device=DEV) * 0).cpu().tolist() == [0, 0, 0]  # integers are not checked
    _C._debug_set_nan_check(2)  # NaN only
    (x / 0.0).cpu()
    with pytest.raises(RuntimeError, match="produced NaN"):
        torch.zeros(2, device=DEV) / 0.0
    _C._debug_set_nan_check(0)
    assert torch.isnan(torch.log(-x)).cpu().tolist() == [True, True, True]
    assert y.cpu().tolist() == (torch.tensor([1.0, 0.5, 4.0]).sqrt() * 2).tolist()


# ---------------------------------------------------------------- same results in every mode

def _train_mlp(mode, steps=5):
    with torch_tpu.eager_mode(mode):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(DEV)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        data = torch.randn(64, 16).to(DEV)
        target = torch.randint(0, 4, (64,)).to(DEV)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]


def test_strict_and_debug_train_identically():
    l0, p0 = _train_mlp("strict")
    l1, p1 = _train_mlp("debug")
    assert l0 == pytest.approx(l1, rel=1e-6, abs=1e-7)
    for a, b in zip(p0, p1):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_debug_resize_keeps_data():
    """resize_ queues a copy out of the old block and frees it at once: in Debug mode the copy must
    still see the block live (its access window), and the data survives."""
    with torch_tpu.eager_mode("debug"):
        s = torch.arange(3.0, device=DEV)
        s.resize_((5, 10))
        assert s.shape == (5, 10)
        assert s.view(-1)[:3].cpu().tolist() == [0.0, 1.0, 2.0]
