"""Defects found by running PyTorch's own device-generic test files on tpu (tests/pytorch_suites.py),
each kept here as a test against PyTorch CPU so CI guards it without PyTorch's files; and the
runner's own crash and hang isolation on a small generated test file."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_isnan_and_isclose(dtype, tpu, eager_mode):
    # test_shape_ops.test_flip: assertEqual on complex tensors calls isclose, which calls isnan
    nan = float("nan")
    x = torch.tensor([1 + 2j, complex(nan, 1), complex(1, nan), complex(nan, nan), 0j], dtype=dtype)
    assert torch.equal(torch.isnan(x.to(tpu)).cpu(), torch.isnan(x))
    y = x + 1e-9
    for equal_nan in (False, True):
        got = torch.isclose(x.to(tpu), y.to(tpu), equal_nan=equal_nan).cpu()
        assert torch.equal(got, torch.isclose(x, y, equal_nan=equal_nan))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_rand(dtype, tpu, eager_mode):
    # test_shape_ops.test_sparse_dense_dim: torch.rand on complex128 (uniform_ on complex), as CPU:
    # each of the real and imaginary parts uniform in [from, to)
    torch.manual_seed(0)
    x = torch.rand(20000, dtype=dtype, device=tpu).cpu()
    assert x.dtype == torch.rand(1, dtype=dtype).dtype
    for part in (x.real, x.imag):
        assert part.min().item() >= 0 and part.max().item() < 1
        assert abs(part.mean().item() - 0.5) < 0.02 and abs(part.var().item() - 1 / 12) < 0.01
    assert abs(torch.corrcoef(torch.stack([x.real, x.imag]))[0, 1].item()) < 0.05
    y = torch.empty(20000, dtype=dtype, device=tpu).uniform_(-2, 3).cpu()
    for part in (y.real, y.imag):
        assert part.min().item() >= -2 and part.max().item() < 3 and abs(part.mean().item() - 0.5) < 0.1


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_flip_roll_zero_dim(dtype, tpu, eager_mode):
    # test_shape_ops.test_flip: flip(0) of a 0-d complex128 swapped its real and imaginary parts
    x = torch.tensor(4.25 + 5.5j, dtype=dtype)
    for fn in (lambda t: t.flip(0), lambda t: t.flip(()), lambda t: t.roll(1), lambda t: t.flip(-1)):
        assert torch.equal(fn(x.to(tpu)).cpu(), fn(x))
    v = torch.tensor([1 + 2j, 3 + 4j, 5 + 6j], dtype=dtype)
    assert torch.equal(v.to(tpu).flip(0).cpu(), v.flip(0))
    assert torch.equal(v.to(tpu).roll(1, 0).cpu(), v.roll(1, 0))


def _raises_like_cpu(fn, tpu, at_call=False):
    """fn(device) raises on tpu what it raises on CPU (type and first line); at_call: at the call itself,
    before any sync (else by the next sync)."""
    with pytest.raises(Exception) as cpu_err:
        fn("cpu")
    with pytest.raises(type(cpu_err.value)) as tpu_err:
        fn(tpu)
        if not at_call:
            torch.tpu.synchronize()
    torch.tpu.synchronize()
    assert str(tpu_err.value).splitlines()[0] == str(cpu_err.value).splitlines()[0]


def test_nonzero_out_dtype_error(tpu, eager_mode):
    # test_shape_ops.test_nonzero matches CPU's message ("scalar type Long")
    _raises_like_cpu(lambda d: torch.nonzero(torch.ones(3, device=d), out=torch.empty((), device=d)), tpu)


@pytest.mark.parametrize("reduce", ["amax", "amin", "max", "min"])
def test_segment_reduce_amax_amin(reduce, tpu, eager_mode):
    # test_segment_reductions.test_pytorch_scatter_test_cases: amax/amin are max/min's other names
    data = torch.tensor([[1., 2.], [3., 4.], [5., 6.], [7., 8.], [9., 10.], [11., 12.]])
    lengths = torch.tensor([2, 3, 0, 1])
    offsets = torch.tensor([0, 2, 5, 5, 6])
    for kw, kw_tpu in ((dict(lengths=lengths), dict(lengths=lengths.to(tpu))),
                       (dict(offsets=offsets), dict(offsets=offsets.to(tpu)))):
        want = torch._segment_reduce(data, reduce, unsafe=True, **kw)
        got = torch._segment_reduce(data.to(tpu), reduce, unsafe=True, **kw_tpu).cpu()
        assert torch.equal(got, want)


def test_segment_reduce_checks_lengths_when_safe(tpu, eager_mode):
    # test_segment_reductions.test_unsafe_flag: unsafe=False checks the lengths at the call, as CPU
    data = torch.arange(6, dtype=torch.float)
    for lengths in ([0, 2, 3, 0], [1, -1, 6]):
        _raises_like_cpu(lambda d: torch._segment_reduce(data.to(d), "sum", lengths=torch.tensor(lengths, device=d),
                                                          unsafe=False), tpu)
    nd = torch.arange(12, dtype=torch.float).reshape(2, 6)
    _raises_like_cpu(lambda d: torch._segment_reduce(nd.to(d), "sum", axis=1, unsafe=False,
                                                      lengths=torch.tensor([[0, 3, 3, 0], [2, 3, 0, 0]], device=d)), tpu)
    _raises_like_cpu(lambda d: torch._segment_reduce(data.to(d), "foo", lengths=torch.tensor([6], device=d)), tpu)
    ok = torch._segment_reduce(data.to(tpu), "sum", lengths=torch.tensor([1, 2, 3], device=tpu), unsafe=False)
    assert torch.equal(ok.cpu(), torch._segment_reduce(data, "sum", lengths=torch.tensor([1, 2, 3]), unsafe=False))


_FAKE_SUITE = '''
import os, time, torch
from torch.testing._internal.common_utils import TestCase
from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyCPU

class TestFake(TestCase):
    def test_pass(self, device):
        self.assertEqual(torch.arange(4, device=device).sum().item(), 6)
    def test_fail(self, device):
        self.assertEqual(torch.ones(2, device=device), torch.zeros(2))
    def test_raises(self, device):
        raise ValueError("first line\\nsecond line")
    def test_crash(self, device):
        if "tpu" in str(device):
            os.abort()
    def test_hang(self, device):
        if "tpu" in str(device):
            time.sleep(600)
    @onlyCPU
    def test_cpu_only(self, device):
        pass

instantiate_device_type_tests(TestFake, globals())
'''


def test_runner_isolates_crashes_and_hangs(tmp_path, device):
    if device == "cpu":
        pytest.skip("the runner compares the tpu with CPU")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_fake.py").write_text(_FAKE_SUITE)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "pytorch_suites.py"), "--pytorch-src", str(tmp_path),
                        "--timeout", "8", "--out", str(tmp_path / "out"), "test_fake.py"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    row = json.loads((tmp_path / "out" / "strict" / "test_fake.json").read_text())
    assert row["total"] == 6
    assert (row["passed"], row["failed"], row["error"], row["crash"], row["timeout"], row["skipped"]) == (1, 1, 1, 1, 1, 1)
    # on CPU: all but test_fail and test_raises pass; the comparison leaves out what tpu skips
    assert row["cpu_passed"] == 3 and row["tpu_passed_of_cpu_passed"] == 1 and row["cpu_passed_tpu_skipped"] == 1
    causes = dict((c, n) for c, n in row["top_causes"])
    assert causes["ValueError: first line"] == 1
    assert any(c.startswith("Crash: process died with signal SIGABRT") for c in causes)
    assert any(c.startswith("Timeout:") for c in causes)
    assert sorted(row["cpu_only_failures"]) == ["TestFake.test_crash_DEV", "TestFake.test_hang_DEV"]
    md = (tmp_path / "out" / "strict" / "test_fake.md").read_text()
    assert "| 1 | 1 | 1 | 1 | 1 | 1 | 0 | 0 | 6 |" in md


def test_runner_requires_a_source_tree():
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "pytorch_suites.py")], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert r.returncode == 2 and "--pytorch-src" in r.stderr


def test_known_failures_list_parses():
    sys.path.insert(0, str(ROOT / "tests"))
    import pytorch_suites
    known = pytorch_suites.load_known_failures()
    assert known, "tests/pytorch_suites_known_failures.txt lists no failures"
    for (fname, test), reason in known.items():
        assert fname.startswith("test_") and fname.endswith(".py") and "." in test and "_DEV" in test, (fname, test)
        assert reason, f"{fname}::{test} has no reason"


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64, torch.bool, torch.float16,
                                   torch.bfloat16, torch.float32, torch.float64])
def test_random_bounds_checked_at_the_call(dtype, tpu, eager_mode):
    # test_tensor_creation_ops.test_random_from_to / _to / _from_to_bool: bounds outside the dtype, or from >= to,
    # raise at the call with CPU's words
    big = 2 ** 62
    for args in ((-42 if dtype in (torch.uint8, torch.bool) else 2 ** 40, None), (5, 3), (0, big), (-big, 0)):
        try:
            torch.empty(4, dtype=dtype).random_(*args)
            continue
        except RuntimeError:
            pass
        _raises_like_cpu(lambda d: torch.empty(8, dtype=dtype, device=d).random_(*args), tpu, at_call=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_random_float_bounds_move_inward_as_cpu(dtype, tpu, eager_mode):
    # test_tensor_creation_ops.test_random_to_float16: a draw rounded to the dtype stays below `to`, and bounds past
    # 2^digits warn as on CPU
    to = {torch.float16: 32752, torch.bfloat16: 2 ** 40, torch.float32: 2 ** 30}[dtype]
    digits = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24}[dtype]
    t = torch.empty(20000, dtype=dtype, device=tpu)
    with pytest.warns(UserWarning, match="to - 1 is out of bounds") if to > 2 ** digits else _no_warning():
        t.random_(to)
    v = t.double().cpu()
    assert v.min().item() >= 0 and v.max().item() < to
    assert v.max().item() > 0.9 * to


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_uniform_bounds_checked_at_the_call(dtype, tpu, eager_mode):
    # test_tensor_creation_ops.test_uniform_from_to
    fmax = torch.finfo(torch.float32).max
    for a, b in ((1.0, -1.0), (-fmax, fmax)):
        try:
            torch.empty(4, dtype=dtype).uniform_(a, b)
            continue
        except RuntimeError:
            pass
        _raises_like_cpu(lambda d: torch.empty(8, dtype=dtype, device=d).uniform_(a, b), tpu, at_call=True)


def test_normal_std_checked_at_the_call(tpu, eager_mode):
    # test_tensor_creation_ops.test_normal_std_error: a negative std, float or tensor, raises at the call
    _raises_like_cpu(lambda d: torch.normal(0.0, -1.0, (10,), device=d), tpu, at_call=True)
    _raises_like_cpu(lambda d: torch.normal(torch.zeros(3, device=d), torch.tensor([1.0, -1.0, 1.0], device=d)), tpu, at_call=True)
    _raises_like_cpu(lambda d: torch.empty(3, device=d).normal_(0.0, -2.0), tpu, at_call=True)
    _raises_like_cpu(lambda d: torch.normal(0.0, torch.ones(3, dtype=torch.complex64, device=d)), tpu, at_call=True)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_linspace_logspace_eye(dtype, tpu, eager_mode):
    # test_tensor_creation_ops.test_linspace*_complex*, test_logspace_deduction, test_eye: complex factories
    for steps in (0, 1, 2, 5, 11, 256, 257):
        for fn in (torch.linspace, torch.logspace):
            want = fn(-0.03 + 0.88j, 0.031 + 0.44j, steps, dtype=dtype)
            got = fn(-0.03 + 0.88j, 0.031 + 0.44j, steps, dtype=dtype, device=tpu).cpu()
            torch.testing.assert_close(got, want)
        if steps:  # both ends exact
            got = torch.linspace(1 + 2j, -3.5 + 0.25j, steps, dtype=dtype, device=tpu).cpu()
            want = torch.linspace(1 + 2j, -3.5 + 0.25j, steps, dtype=dtype)
            assert torch.equal(got[[0, -1]], want[[0, -1]])
    out = torch.zeros(2, 3, 4, dtype=dtype, device=tpu).permute(2, 0, 1)  # out= of any shape with steps elements
    torch.linspace(0, 24j, 24, out=out)
    torch.testing.assert_close(out.cpu(), torch.linspace(0, 24j, 24, out=torch.zeros(4, 2, 3, dtype=dtype)))
    assert torch.linspace(1j, 2, 7, device=tpu).dtype == torch.linspace(1j, 2, 7).dtype
    for n, m in ((3, 3), (2, 5), (4, 1)):
        assert torch.equal(torch.eye(n, m, dtype=dtype, device=tpu).cpu(), torch.eye(n, m, dtype=dtype))
    _raises_like_cpu(lambda d: torch.eye(-1, 2, dtype=dtype, device=d), tpu, at_call=True)


def test_factory_checks_at_the_call(tpu, eager_mode):
    # test_tensor_creation_ops: test_arange (CPU's order of checks and words), test_linlogspace_mem_overlap,
    # test_repeat_interleave, test_roll, test_torch_complex_*_error
    for args in ((-5, float("nan")), (0, float("-inf"), -1), (float("inf"),), (1.175494351e-38, 3.402823466e+38), (5, 0, 1)):
        _raises_like_cpu(lambda d: torch.arange(*args, device=d), tpu, at_call=True)
    _raises_like_cpu(lambda d: torch.arange(0, 64, 0.5, out=torch.empty(0, dtype=torch.int64, device=d)), tpu, at_call=True)
    _raises_like_cpu(lambda d: torch.arange(10, out=torch.empty(1, device=d).expand(10)), tpu, at_call=True)
    for fn in (torch.linspace, torch.logspace):
        _raises_like_cpu(lambda d: fn(1, 10, 10, out=torch.rand(1, device=d).expand(10)), tpu, at_call=True)
    for reps in ([1, 2, -1, 3], [[1, 2], [3, 4]], [1.0, 2.0]):
        _raises_like_cpu(lambda d: torch.repeat_interleave(torch.tensor(reps, device=d)), tpu, at_call=True)
    assert torch.equal(torch.repeat_interleave(torch.tensor([0, 2, 1], device=tpu)).cpu(),
                       torch.repeat_interleave(torch.tensor([0, 2, 1])))
    data = torch.arange(8).view(2, 4)
    for kw in (dict(shifts=(), dims=()), dict(shifts=(), dims=1), dict(shifts=(1, 2), dims=(1,)), dict(shifts=(1,), dims=(1, 2))):
        _raises_like_cpu(lambda d: data.to(d).roll(**kw), tpu, at_call=True)
    for op in (torch.complex, torch.polar):
        f32, f64, i32 = torch.ones(2), torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.int32)
        _raises_like_cpu(lambda d: op(f32.to(d), f64.to(d)), tpu, at_call=True)
        _raises_like_cpu(lambda d: op(i32.to(d), i32.to(d)), tpu, at_call=True)
        _raises_like_cpu(lambda d: op(f32.to(d), f32.to(d), out=torch.zeros(2, device=d)), tpu, at_call=True)


def test_cat_of_legacy_empty_tensors_only(tpu, eager_mode):
    # test_tensor_creation_ops.test_cat_empty_legacy: cat of 1-d empties along a dim they lack is an empty tensor
    e = torch.randn(0)
    want = torch.cat([e, e], dim=1)
    got = torch.cat([e.to(tpu), e.to(tpu)], dim=1)
    assert got.shape == want.shape and got.cpu().dtype == want.dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int8, torch.int64, torch.uint8,
                                   torch.bool])
def test_hash_tensor(dtype, tpu, eager_mode):
    # test_reductions: every ReductionOpInfo test of hash_tensor (aten::hash_tensor.out had no kernel)
    x = torch.randint(-3, 5, (4, 5, 6)).to(dtype)
    for t, tt in ((x, x.to(tpu)), (x.transpose(0, 2), x.to(tpu).transpose(0, 2)), (x[:, ::2], x.to(tpu)[:, ::2])):
        for kw in ({}, dict(dim=1), dict(dim=(0, 2), keepdim=True), dict(dim=[]), dict(dim=-1, keepdim=True)):
            want = torch.hash_tensor(t, **kw)
            got = torch.hash_tensor(tt, **kw).cpu()
            assert got.dtype == want.dtype and torch.equal(got, want), (kw, got, want)
    e = torch.empty(0, 3, dtype=dtype)
    assert torch.equal(torch.hash_tensor(e.to(tpu), dim=1).cpu(), torch.hash_tensor(e, dim=1))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_reductions(dtype, tpu, eager_mode):
    # test_reductions: var/std (of the parts, any correction, out= complex too), prod, all/any, count_nonzero and
    # linalg_vector_norm on complex inputs (NotImplementedError before)
    torch.manual_seed(0)
    x = torch.randn(5, 3, 4, dtype=dtype)
    x[0, 0, 0] = 0
    x[1] = 0
    for t in (x, x.transpose(0, 2), x[:, ::2]):
        tt = t.to(tpu)
        for kw in ({}, dict(dim=0), dict(dim=1, keepdim=True), dict(dim=(0, 2)), dict(dim=[-1], keepdim=True)):
            for fn in (lambda a, **k: torch.var(a, **k), lambda a, **k: torch.std(a, correction=0, **k),
                       lambda a, **k: torch.var(a, correction=3, **k), lambda a, **k: torch.linalg.vector_norm(a, **k),
                       lambda a, **k: torch.linalg.vector_norm(a, ord=float("inf"), **k),
                       lambda a, **k: torch.count_nonzero(a, dim=k.get("dim"))):
                want, got = fn(t, **kw), fn(tt, **kw).cpu()
                assert got.dtype == want.dtype and got.shape == want.shape
                torch.testing.assert_close(got, want, equal_nan=True)  # correction >= K: nan/inf as CPU
            if "dim" not in kw or isinstance(kw["dim"], int):
                for fn in (torch.prod, torch.all, torch.any):
                    want, got = fn(t, **kw), fn(tt, **kw).cpu()
                    assert got.dtype == want.dtype and got.shape == want.shape
                    torch.testing.assert_close(got, want)
    out = torch.empty(0, dtype=dtype, device=tpu)
    torch.var(x.to(tpu), 1, True, False, out=out)
    torch.testing.assert_close(out.cpu(), torch.var(x, 1, True, False, out=torch.empty(0, dtype=dtype)))
    e = torch.randn(2, 0, 3, dtype=dtype)
    torch.testing.assert_close(torch.prod(e.to(tpu), dim=1).cpu(), torch.prod(e, dim=1))
    assert torch.equal(torch.all(e.to(tpu), dim=1).cpu(), torch.all(e, dim=1))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_exp_log_sqrt_logical_not(dtype, tpu, eager_mode):
    # test_reductions.test_logsumexp*/test_ref_* on complex: exp_, log_, sqrt and logical_not had no complex kernel;
    # exp(inf + 0j) is inf + 0j as on CPU
    inf = float("inf")
    x = torch.randn(64, dtype=dtype) * 3
    x[:6] = torch.tensor([0, complex(inf, 0), -4 + 0j, complex(-4, -0.0), complex(-inf, 0), 2.5j], dtype=dtype)
    for fn in (torch.exp, torch.log, torch.sqrt):
        torch.testing.assert_close(fn(x.to(tpu)).cpu(), fn(x), equal_nan=True)
    assert torch.equal(torch.logical_not(x.to(tpu)).cpu(), torch.logical_not(x))
    y = x.to(tpu)
    y.exp_()
    torch.testing.assert_close(y.cpu(), x.exp(), equal_nan=True)


def test_reduction_checks_and_warnings_at_the_call(tpu, eager_mode):
    # test_reductions.test_all_any_vs_numpy: all/any into a result that is not bool/uint8 raise at the call;
    # test_warn_invalid_degrees_of_freedom: var/std(+_mean) warn when the correction leaves no degrees of freedom
    x = torch.randn(4, 5)
    for fn in (torch.all, torch.any):
        _raises_like_cpu(lambda d: fn(x.to(d), 0, out=torch.empty(5, device=d)), tpu, at_call=True)
        _raises_like_cpu(lambda d: fn(x.to(d), out=torch.empty((), dtype=torch.int32, device=d)), tpu, at_call=True)
        got = fn(x.to(tpu) > 0, 1, out=torch.empty(4, dtype=torch.uint8, device=tpu)).cpu()
        assert torch.equal(got, fn(x > 0, 1, out=torch.empty(4, dtype=torch.uint8)))
    for fn in (torch.std, torch.var, torch.var_mean, torch.std_mean):
        with pytest.warns(UserWarning, match="degrees of freedom is <= 0") as cpu_w:
            fn(x, dim=-1, correction=5)
        with pytest.warns(UserWarning, match="degrees of freedom is <= 0") as tpu_w:
            fn(x.to(tpu), dim=-1, correction=5)
        assert str(tpu_w[0].message).split(" (Triggered")[0] == str(cpu_w[0].message).split(" (Triggered")[0]
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fn(x.to(tpu), dim=-1, correction=4)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_cat_of_many_tensors(dtype, tpu, eager_mode):
    # test_unary_ufuncs.test_batch_vs_slicing: torch.stack of 1024 complex slices (the complex cat path took at
    # most 256 tensors)
    x = torch.randn(600, 3, dtype=dtype)
    assert torch.equal(torch.stack([s for s in x.to(tpu)]).cpu(), torch.stack([s for s in x]))
    out = torch.empty(0, dtype=dtype, device=tpu)
    torch.cat([s.unsqueeze(0) for s in x.to(tpu)], out=out)
    assert torch.equal(out.cpu(), x)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_random_wide_unsigned(dtype, tpu, eager_mode):
    # test_unary_ufuncs (make_tensor of uint16/32/64): random_(from, to) on the wide unsigned dtypes; random_()
    # without bounds raises as CPU
    for args, hi in (((5, 10), 10), ((10,), 10), ((3, None), 2 ** 16 if dtype == torch.uint16 else 2 ** 32)):
        try:
            torch.empty(4, dtype=dtype).random_(*args)
        except RuntimeError:
            _raises_like_cpu(lambda d: torch.empty(8, dtype=dtype, device=d).random_(*args), tpu, at_call=True)
            continue
        t = torch.empty(2000, dtype=dtype, device=tpu).random_(*args).cpu().double()
        assert t.min().item() >= (args[0] if len(args) == 2 else 0) and t.max().item() < hi
        assert t.max().item() > t.min().item()
    _raises_like_cpu(lambda d: torch.empty(8, dtype=dtype, device=d).random_(), tpu, at_call=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_isposinf_isneginf_need_a_bool_out(dtype, tpu, eager_mode):
    # test_unary_ufuncs.test_isposinf_isneginf_non_boolean_output: CPU's error at the call
    t = torch.tensor([float("inf"), -float("inf"), 1.2])
    for fn in (torch.isposinf, torch.isneginf):
        _raises_like_cpu(lambda d: fn(t.to(d), out=torch.empty(3, dtype=dtype, device=d)), tpu, at_call=True)
        got = fn(t.to(tpu), out=torch.empty(3, dtype=torch.bool, device=tpu)).cpu()
        assert torch.equal(got, fn(t))


def test_nansum_of_no_dims_reduces_all_as_cpu(tpu, eager_mode):
    # test_reductions.test_dim_empty_nansum: nansum(dim=[]) reduces every dim on CPU (the test expects no
    # reduction and fails on CPU too); tpu shaped the output as no reduction and its kernel refused it at the sync
    x = torch.randn(3, 4)
    x[0, 0] = float("nan")
    for kw in (dict(dim=[]), dict(dim=[], keepdim=True)):
        want = torch.nansum(x, **kw)
        got = torch.nansum(x.to(tpu), **kw).cpu()
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_logical_not_in_place_and_0d_reductions(dtype, tpu, eager_mode):
    # found by the OpInfo sweep on complex while checking this work: logical_not_ in place on a complex tensor
    # (1 + 0j or 0, the imaginary part too) and sum/mean of a 0-d complex tensor over dim -1
    x = torch.tensor([0, 1 + 2j, 0j, -3j, complex(0, -0.0)], dtype=dtype)
    y = x.to(tpu)
    y.logical_not_()
    assert torch.equal(y.cpu(), x.clone().logical_not_())
    s = torch.tensor(2 + 3j, dtype=dtype)
    for fn in (torch.sum, torch.mean):
        for kw in (dict(dim=-1), dict(dim=0, keepdim=True), dict(dim=[-1])):
            assert torch.equal(fn(s.to(tpu), **kw).cpu(), fn(s, **kw))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_trigonometric_and_hyperbolic(dtype, tpu, eager_mode):
    # test_unary_ufuncs / test_reductions on complex inputs: sin, cos, tan, their hyperbolic forms and all six
    # inverses had no complex kernel (NotImplementedError)
    torch.manual_seed(0)
    x = torch.randn(64, dtype=dtype) * 2
    x[:3] = torch.tensor([0, 1j, -1.5 + 0j], dtype=dtype)
    for name in ("sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh"):
        want = getattr(torch, name)(x)
        torch.testing.assert_close(getattr(torch, name)(x.to(tpu)).cpu(), want, equal_nan=True)
        y = x.to(tpu)
        getattr(y, name + "_")()
        torch.testing.assert_close(y.cpu(), want, equal_nan=True)


def _raise_alike(fn_cpu, fn_tpu):
    """Both raise, with the same exception type and first line of message."""
    with pytest.raises(Exception) as cpu:
        fn_cpu()
    with pytest.raises(Exception) as tpu_e:
        fn_tpu()
    assert type(tpu_e.value) is type(cpu.value)
    assert str(tpu_e.value).splitlines()[0] == str(cpu.value).splitlines()[0]


def test_default_dtype_reaches_cached_layouts(tpu, eager_mode):
    # test_type_promotion.test_div_promotion / test_from_issue: the output layouts are cached per
    # call signature, and integer true division or an integer tensor with a Python float gives the
    # default dtype, so the default dtype is part of the signature
    a, u = torch.arange(1, 6), torch.tensor([1, 2], dtype=torch.uint8)
    try:
        for default in (torch.float32, torch.float64, torch.float32):
            torch.set_default_dtype(default)
            for got, want in (((a.to(tpu) / a.to(tpu)), a / a), ((u.to(tpu) + 5.5), u + 5.5)):
                assert got.dtype == want.dtype == default and torch.equal(got.cpu(), want)
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("op", [torch.neg, torch.floor, torch.ceil])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float64), (torch.int64, torch.float32),
                                    (torch.complex64, torch.complex128)])
def test_unary_out_of_another_dtype_raises_at_the_call(op, dtypes, tpu, eager_mode):
    # test_type_promotion.test_unary_op_out_casting: these unary ops want out= of the input's dtype
    # (ATen's check_all_same_dtype); PyTorch's Python meta let it through and the kernel cast
    x = torch.tensor(1, dtype=dtypes[0])
    _raise_alike(lambda: op(x, out=torch.empty(0, dtype=dtypes[1])),
                     lambda: op(x.to(tpu), out=torch.empty(0, dtype=dtypes[1], device=tpu)))


def test_cpp_meta_error_wins_over_python_meta(tpu, eager_mode):
    # test_type_promotion.test_integer_addcdiv_deprecated and test_alternate_result: where ATen's C++
    # meta function and PyTorch's Python one both refuse, ATen's words are CPU's
    for dtype in (torch.int8, torch.int64):
        t = torch.tensor(1, dtype=dtype)
        d = t.to(tpu)
        _raise_alike(lambda: torch.addcdiv(t, t, t, out=t), lambda: torch.addcdiv(d, d, d, out=d))
    f = torch.ones(4)
    _raise_alike(lambda: torch.add(f, f, out=torch.zeros(4, dtype=torch.long)),
                     lambda: torch.add(f.to(tpu), f.to(tpu), out=torch.zeros(4, dtype=torch.long, device=tpu)))


def test_index_put_of_another_dtype_raises_at_the_call(tpu, eager_mode):
    # test_type_promotion.test_indexing_fail: index_put_ wants values of self's dtype
    def put(dev):
        a = torch.ones(5, 2, dtype=torch.double, device=dev)
        a[:, [1]] = torch.zeros(5, 1, dtype=torch.int, device=dev)
    _raise_alike(lambda: put("cpu"), lambda: put(tpu))
    a = torch.ones(5, 2, dtype=torch.double, device=tpu)
    a[:, [1]] = torch.zeros(5, 1, dtype=torch.double, device=tpu)
    assert torch.equal(a.cpu(), torch.tensor([[1.0, 0.0]] * 5, dtype=torch.double))


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.complex64), (torch.int64, torch.complex128),
                                    (torch.complex64, torch.complex128), (torch.bool, torch.complex64)])
def test_cat_of_real_and_complex(dtypes, tpu, eager_mode):
    # test_type_promotion.test_cat_different_dtypes: cat promotes its inputs, real ones into a complex result
    x = torch.tensor([1, 2, 3]).to(dtypes[0])
    y = (torch.tensor([4, 5, 6]) + 1j * torch.tensor([1, 0, 2])).to(dtypes[1])
    z = torch.randn(6, 3, dtype=torch.complex128).t()[:, ::2]  # a strided complex128 tensor too
    for parts in ((x, y), (y, x), (x, y.real.to(x.dtype), y)):
        assert torch.equal(torch.cat([p.to(tpu) for p in parts]).cpu(), torch.cat(parts))
    assert torch.equal(torch.cat([y.view(3, 1).expand(3, 3).to(tpu), z.to(tpu)], 1).cpu(),
                       torch.cat([y.view(3, 1).expand(3, 3), z], 1))
    out = torch.empty(0, dtype=torch.complex128, device=tpu)
    torch.cat([x.to(tpu), y.to(tpu)], out=out)
    assert torch.equal(out.cpu(), torch.cat([x, y]).to(torch.complex128))


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
@pytest.mark.parametrize("dtypes", [(torch.complex64, torch.complex64), (torch.complex128, torch.float32),
                                    (torch.int64, torch.complex64), (torch.bool, torch.complex128)])
def test_complex_logical_binary(op, dtypes, tpu, eager_mode):
    # test_binary_ufuncs.test_logical_and/or/xor: complex operands read as "nonzero"
    x = (torch.tensor([10, 0, 1, 0]) + (1j * torch.tensor([0, 0, 0, 1]) if dtypes[0].is_complex else 0)).to(dtypes[0])
    y = torch.tensor([1, 0, 0, 10]).to(dtypes[1])
    fn = getattr(torch, op)
    assert torch.equal(fn(x.to(tpu), y.to(tpu)).cpu(), fn(x, y))
    assert torch.equal(fn(x.to(tpu), y[:1].to(tpu)).cpu(), fn(x, y[:1]))  # broadcast
    xi, xt = x.clone(), x.to(tpu)
    getattr(xi, op + "_")(y)
    getattr(xt, op + "_")(y.to(tpu))
    assert torch.equal(xt.cpu(), xi)
    out, out_cpu = torch.empty(0, dtype=torch.complex128, device=tpu), torch.empty(0, dtype=torch.complex128)
    fn(x.to(tpu), y.to(tpu), out=out)
    fn(x, y, out=out_cpu)
    assert torch.equal(out.cpu(), out_cpu)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_pow_and_reciprocal(dtype, tpu, eager_mode):
    # test_binary_ufuncs: pow (and float_power, __rpow__, ldexp through it) and reciprocal (__rdiv__) on complex
    torch.manual_seed(0)
    a, b = torch.randn(64, dtype=dtype), torch.randn(64, dtype=dtype)
    a[0] = 0
    A, B = a.to(tpu), b.to(tpu)
    tol = dict(rtol=1e-4, atol=1e-5, equal_nan=True)  # 0 ** b: inf+nanj where b.real < 0, as CPU
    torch.testing.assert_close((A ** B).cpu(), a ** b, **tol)
    for e in (2, 3, 0.5, -0.5, -1, -2, 1.7, 2j, 1 - 0.5j, 0, 1):
        torch.testing.assert_close((A[1:] ** e).cpu(), a[1:] ** e, **tol)
    torch.testing.assert_close((2 ** A).cpu(), 2 ** a, **tol)
    torch.testing.assert_close((A ** b.real.to(tpu)).cpu(), a ** b.real, **tol)
    torch.testing.assert_close((torch.arange(5.0, device=tpu) ** (1 + 1j)).cpu(), torch.arange(5.0) ** (1 + 1j), **tol)
    torch.testing.assert_close(torch.float_power(A, B).cpu(), torch.float_power(a, b), **tol)
    torch.testing.assert_close(A[1:].reciprocal().cpu(), a[1:].reciprocal())
    torch.testing.assert_close((1 / A[1:]).cpu(), 1 / a[1:])


@pytest.mark.parametrize("case", ["maximum", "fmax", "max", "heaviside", "heaviside_dtypes"])
def test_refused_dtypes_raise_cpus_error(case, tpu, eager_mode):
    # test_binary_ufuncs.test_maximum_minimum_complex / test_heaviside*: where CPU itself refuses the
    # dtypes, tpu raises CPU's RuntimeError (from PyTorch's meta function), not its own NotImplementedError
    def call(dev):
        c, r = torch.ones(2, dtype=torch.complex64, device=dev), torch.ones(2, device=dev)
        return {"maximum": lambda: torch.maximum(c, r), "fmax": lambda: torch.fmax(r, c),
                "max": lambda: torch.max(c, c), "heaviside": lambda: torch.heaviside(c, r),
                "heaviside_dtypes": lambda: r.int().heaviside_(r)}[case]()
    _raise_alike(lambda: call("cpu"), lambda: call(tpu))


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_binary_special_ops_on_wide_unsigned(dtype, tpu, eager_mode):
    # test_binary_ufuncs.test_batch_vs_slicing_special_*: CPU runs zeta, the orthogonal polynomials
    # and xlog1py on uint16/32/64 (promoted to float)
    x = torch.tensor([0, 1, 2, 3, 7], dtype=dtype)
    n = torch.tensor([0, 1, 2, 3, 4], dtype=dtype)
    for fn in (torch.special.zeta, torch.special.chebyshev_polynomial_t, torch.special.hermite_polynomial_he,
               torch.special.laguerre_polynomial_l, torch.special.legendre_polynomial_p, torch.special.xlog1py):
        want = fn(x, n)
        got = fn(x.to(tpu), n.to(tpu)).cpu()
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)


def test_reductions_of_65_dims_raise_cpus_error(tpu, eager_mode):
    # test_reductions.test_dim_ndim_limit: a 65-d tensor is made (make_tensor: empty + uniform_, which
    # tpu runs folded), and reducing along a dim raises CPU's error from PyTorch's meta function
    t = torch.testing.make_tensor([1] * 65, dtype=torch.float, device=tpu)
    c = t.cpu()
    assert c.shape == (1,) * 65
    for op in (torch.sum, torch.amax, torch.argmax, torch.mean, torch.any):
        _raise_alike(lambda: op(c, dim=0), lambda: op(t, dim=0))
    assert t.sum().item() == c.sum().item()


def _eq32(a, b):
    """torch.equal, which CPU lacks for complex32: on the (real, imaginary) float16 pairs."""
    if a.dtype == torch.chalf:
        a = torch.view_as_real(a)
    if b.dtype == torch.chalf:
        b = torch.view_as_real(b)
    return torch.equal(a, b)


def test_complex32_runs_in_complex64(tpu, eager_mode):
    # test_binary_ufuncs (*_complex32), test_type_promotion.test_complex_half, test_tensor_creation_ops
    # (ones/zeros/empty/fill/cat/complex of float16): complex32 has no kernel dtype; its calls run in
    # complex64 (float16 beside it in float32) and round back to complex32 as the op's result is
    c = torch.tensor([1 + 2j, 3 - 1j, -0.5 + 0.25j], dtype=torch.chalf)
    t = c.to(tpu)
    assert t.dtype == torch.chalf and _eq32(t.cpu(), c)
    for fn in (lambda x: x * 2, lambda x: x + x, lambda x: x * 2.2, lambda x: x - 1j, lambda x: x.conj_physical()):
        got, want = fn(t), fn(c)
        assert got.dtype == want.dtype == torch.chalf
        torch.testing.assert_close(torch.view_as_real(got.cpu()), torch.view_as_real(want))
    assert _eq32((t == t).cpu(), c == c) and (t == t).dtype == torch.bool
    assert _eq32(torch.cat([t, t]).cpu(), torch.cat([c, c]))
    for f in (torch.ones, torch.zeros):
        assert _eq32(f(3, dtype=torch.chalf, device=tpu).cpu(), f(3, dtype=torch.chalf))
    assert _eq32(torch.full((2,), 1 + 1j, dtype=torch.chalf, device=tpu).cpu(),
                       torch.full((2,), 1 + 1j, dtype=torch.chalf))
    h = torch.tensor([1.5, 2.0], dtype=torch.half)
    assert _eq32(torch.complex(h.to(tpu), h.to(tpu)).cpu(), torch.complex(h, h))
    u, v = t.clone(), c.clone()
    u.mul_(2)
    v.mul_(2)
    assert _eq32(u.cpu(), v)
    assert _eq32(t.to(torch.complex64).cpu(), c.to(torch.complex64))
    assert _eq32(t.real.cpu(), c.real) and _eq32(t[1:].cpu(), c[1:])
    # promotion as CPU: complex32 with float32 is complex64, with float16 complex32
    assert (t * torch.ones(3, device=tpu)).dtype == (c * torch.ones(3)).dtype == torch.complex64
    r = torch.randn(8, dtype=torch.chalf, device=tpu)
    assert r.dtype == torch.chalf and bool(torch.isfinite(torch.view_as_real(r.cpu())).all())


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_log1p_and_logaddexp(dtype, tpu, eager_mode):
    # test_binary_ufuncs.*logaddexp*_complex*: logaddexp and the log1p its ref uses, on complex, as CPU
    torch.manual_seed(0)
    a, b = torch.randn(64, 2, dtype=dtype) - 0.5, torch.randn(64, 2, dtype=dtype) - 0.5
    a[0, 0] = 1e-9 + 1e-9j  # log1p near 0
    torch.testing.assert_close(torch.log1p(a.to(tpu)).cpu(), torch.log1p(a))
    torch.testing.assert_close(torch.logaddexp(a.to(tpu), b.to(tpu)).cpu(), torch.logaddexp(a, b))
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([inf, -inf, inf, nan], dtype=dtype)
    y = torch.tensor([inf, -inf, -inf, nan], dtype=dtype)
    torch.testing.assert_close(torch.logaddexp(x.to(tpu), y.to(tpu)).cpu(), torch.logaddexp(x, y), equal_nan=True)


def test_bincount_as_cpu(tpu, eager_mode):
    # test_reductions.test_bincount: bincount had no tpu kernel; it runs as index_add_ into bins
    x = torch.tensor([0, 1, 1, 1, 4])
    for args, kw in (((), {}), ((torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]),), {}),
                     ((torch.tensor([1, 2, 3, 4, 5], dtype=torch.int8),), {}), ((), {"minlength": 8})):
        want = torch.bincount(x, *args, **kw)
        got = torch.bincount(x.to(tpu), *[a.to(tpu) for a in args], **kw)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)
    u = torch.tensor([0, 1, 2, 3, 255], dtype=torch.uint8)
    assert torch.equal(u.to(tpu).bincount().cpu(), u.bincount())
    e = torch.tensor([], dtype=torch.long)
    assert torch.equal(torch.bincount(e.to(tpu), minlength=3).cpu(), torch.bincount(e, minlength=3))
    for bad in (lambda d: torch.bincount(torch.tensor([1, -1], device=d)),
                lambda d: torch.bincount(torch.tensor([[1, 2], [3, 4]], device=d)),
                lambda d: torch.bincount(torch.tensor([1.0, 0.3], device=d)),
                lambda d: torch.bincount(torch.tensor([1, 3], device=d), minlength=-1),
                lambda d: torch.bincount(torch.tensor([1, 0], device=d), torch.tensor([1.0, 0.3, 0.5], device=d))):
        _raise_alike(lambda: bad("cpu"), lambda: bad(tpu))


@pytest.mark.parametrize("op", [torch.lt, torch.eq, torch.atan2, torch.fmod, torch.bitwise_and, torch.maximum])
def test_complex_out_of_real_inputs(op, tpu, eager_mode):
    # test_binary_ufuncs.test_type_promotion_*: an out= of complex dtype for real inputs takes the
    # result computed in the inputs' dtypes, cast (the real kernel writes a real temporary)
    a, b = torch.tensor([1, 2, 3], dtype=torch.int16), torch.tensor([2, 2, 2], dtype=torch.int32)
    for dtype in (torch.complex64, torch.complex128):
        want, got = torch.empty(3, dtype=dtype), torch.empty(3, dtype=dtype, device=tpu)
        op(a, b, out=want)
        op(a.to(tpu), b.to(tpu), out=got)
        torch.testing.assert_close(got.cpu(), want)


def test_heaviside_out_of_another_dtype_raises(tpu, eager_mode):
    # test_binary_ufuncs.test_heaviside: ATen's meta refuses an out= of another dtype; PyTorch's
    # Python meta let it through (only an IndexError of ATen's meta now defers to the Python one)
    def call(dev):
        i = torch.tensor([1.0, 0, -2], dtype=torch.bfloat16, device=dev)
        torch.heaviside(i, i, out=torch.empty(3, dtype=torch.float32, device=dev))
    _raise_alike(lambda: call("cpu"), lambda: call(tpu))


def test_result_rounded_to_the_compute_dtype_before_a_wider_out(tpu, eager_mode):
    # test_type_promotion.test_computation_ignores_out: CPU computes float16 + float16 in float16
    # (66000 is inf) and uint8 - uint8 in uint8 (wrapping), then casts into the float64 out=
    cases = ((torch.add, torch.tensor(33000, dtype=torch.float16), torch.tensor(33000, dtype=torch.float16)),
             (torch.sub, torch.tensor(5, dtype=torch.uint8), torch.tensor(8, dtype=torch.uint8)),
             (torch.true_divide, torch.tensor(1.5, dtype=torch.float16), torch.tensor(0.666, dtype=torch.float16)),
             (torch.mul, torch.tensor([300.0, 7.1], dtype=torch.bfloat16), torch.tensor([301.0, 3.3], dtype=torch.bfloat16)))
    for op, a, b in cases:
        want, got = torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.float64, device=tpu)
        op(a, b, out=want)
        op(a.to(tpu), b.to(tpu), out=got)
        assert torch.equal(got.cpu(), want), (op, got.cpu(), want)


def test_integer_true_division_in_the_default_dtype(tpu, eager_mode):
    # test_binary_ufuncs.test_div_rounding_numpy (int64): under a float64 default, int64 / int64 is
    # computed in float64 (it was computed in float32 and widened)
    a = torch.tensor([2**62 + 12345, 7, -(2**40) + 3], dtype=torch.int64)
    b = torch.tensor([3, 2**31 + 11, 7], dtype=torch.int64)
    try:
        torch.set_default_dtype(torch.float64)
        want = a / b
        got = (a.to(tpu) / b.to(tpu)).cpu()
    finally:
        torch.set_default_dtype(torch.float32)
    assert got.dtype == want.dtype == torch.float64 and torch.equal(got, want)


def test_pow_out_of_negative_integer_exponent_raises_at_the_call(tpu, eager_mode):
    # test_binary_ufuncs.test_int_tensor_pow_neg_ints: pow(int tensor, -2, out=) as CPU
    def call(dev):
        base = torch.tensor([1, 2, -3], dtype=torch.int32, device=dev)
        torch.pow(base, -2, out=torch.empty_like(base))
    _raise_alike(lambda: call("cpu"), lambda: call(tpu))


def test_uint8_right_shift_past_its_bits(tpu, eager_mode):
    # test_binary_ufuncs.test_shift_limits (uint8): a count of 8 or more gives 0, no sign fill
    x = torch.tensor([255, 0, 1, 128], dtype=torch.uint8)
    for shift in (7, 8, 9, 100):
        assert torch.equal((x.to(tpu) >> shift).cpu(), x >> shift)
        assert torch.equal((x.to(tpu) << shift).cpu(), x << shift)


def test_float16_times_complex_number_is_complex32(tpu, eager_mode):
    # test_type_promotion.test_complex_promotion: float16 * a Python complex is complex32 with no
    # complex32 input, which also runs widened
    t = torch.tensor([1.5, -2.0, 0.25], dtype=torch.half)
    for fn in (lambda x: x * (1 + 2j), lambda x: (0.5j) * x, lambda x: x + torch.tensor(1j, dtype=torch.chalf, device=x.device)):
        got, want = fn(t.to(tpu)), fn(t)
        assert got.dtype == want.dtype == torch.chalf
        assert _eq32(got.cpu(), want)


def test_complex_cat_with_an_empty_tensor_of_the_other_complex_dtype(tpu, eager_mode):
    # test_type_promotion.test_cat_different_dtypes: a legacy empty tensor (1-d, size 0) of another
    # complex dtype in a complex cat
    x = torch.tensor([1, 2, 3], dtype=torch.complex128)
    for y in (torch.tensor([], dtype=torch.complex64), torch.tensor([], dtype=torch.float32)):
        assert torch.equal(torch.cat([x.to(tpu), y.to(tpu)]).cpu(), torch.cat([x, y]))
        assert torch.equal(torch.cat([y.to(tpu), x.to(tpu)]).cpu(), torch.cat([y, x]))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("op", ["exp2", "expm1", "log2", "log10", "rsqrt", "sigmoid", "sinc", "silu"])
def test_complex_unary_ops(op, dtype, tpu, eager_mode):
    # test_unary_ufuncs (*_complex64): these ops had no complex kernel; zeros and infinities included
    fn = torch.nn.functional.silu if op == "silu" else getattr(torch, op)
    torch.manual_seed(0)
    x = torch.randn(64, dtype=dtype) * 3
    x[:4] = torch.tensor([0, 1e-4j, complex(float("inf"), 0), complex(0, 2)], dtype=dtype)
    torch.testing.assert_close(fn(x.to(tpu)).cpu(), fn(x), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_masked_fill(dtype, tpu, eager_mode):
    # test_unary_ufuncs: make_tensor's noncontiguous/extremal samples call masked_fill_ on complex
    torch.manual_seed(0)
    x = torch.randn(6, 5, dtype=dtype)
    m = torch.rand(6, 5) > 0.5
    for v in (2 + 3j, 1.5, torch.tensor(-1j, dtype=dtype)):
        want = x.clone().masked_fill_(m, v)
        got = x.to(tpu).masked_fill_(m.to(tpu), v.to(tpu) if isinstance(v, torch.Tensor) else v)
        assert torch.equal(got.cpu(), want)
    xt = x.to(tpu).t()  # a strided self, broadcast mask
    assert torch.equal(xt.masked_fill(m[:, :1].t().to(tpu), 7j).cpu(), x.t().masked_fill(m[:, :1].t(), 7j))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_lerp_cumprod_var_mean(dtype, tpu, eager_mode):
    # test_binary_ufuncs.test_lerp, test_tensor_creation_ops.test_vander_types (cumprod),
    # test_reductions.test_var_mean_correction / test_std_mean_correction on complex
    torch.manual_seed(0)
    x, y = torch.randn(4, 5, dtype=dtype), torch.randn(4, 5, dtype=dtype)
    w = torch.rand(4, 5, dtype=dtype)
    for weight, weight_tpu in ((0.3, 0.3), (0.8, 0.8), (0.7 + 0.2j, 0.7 + 0.2j), (w, w.to(tpu))):
        torch.testing.assert_close(torch.lerp(x.to(tpu), y.to(tpu), weight_tpu).cpu(), torch.lerp(x, y, weight))
    for d in (0, 1):
        torch.testing.assert_close(torch.cumprod(x.to(tpu), d).cpu(), torch.cumprod(x, d))
    for fn in (torch.var_mean, torch.std_mean):
        for kw in ({}, {"dim": 1}, {"dim": (0, 1), "keepdim": True}, {"dim": 0, "correction": 0}):
            want, got = fn(x, **kw), fn(x.to(tpu), **kw)
            for a, b in zip(got, want):
                assert a.dtype == b.dtype and a.shape == b.shape
                torch.testing.assert_close(a.cpu(), b)


@pytest.mark.parametrize("op", [torch.abs, torch.angle])
def test_complex_to_real_op_into_a_complex_out(op, tpu, eager_mode):
    # test_unary_ufuncs.test_abs_angle_complex_to_float: CPU takes a complex out= for abs/angle of a
    # complex tensor and writes 0 imaginary parts (the out= starts with other values)
    x = torch.tensor([1 + 1j, -2j, -3 + 0.5j, 0j])
    out = torch.full((4,), 7 + 7j, device=tpu)
    op(x.to(tpu), out=out)
    want = torch.full((4,), 7 + 7j)
    op(x, out=want)
    assert torch.equal(out.cpu(), want)
    _raises_like_cpu(lambda d: op(x.to(d), out=torch.empty(0, dtype=torch.long, device=d)), tpu, at_call=True)
    wide = lambda d: op(x.to(d), out=torch.empty(0, dtype=torch.complex128, device=d))  # noqa: E731
    if op is torch.abs:  # abs keeps the precision (TensorIterator's same-dtype check), angle widens it
        _raises_like_cpu(wide, tpu, at_call=True)
    else:
        torch.testing.assert_close(wide(tpu).cpu(), wide("cpu"))


def test_unique_dim(tpu, eager_mode):
    # test_sort_and_select.test_unique_dim: aten::unique_dim had no tpu kernel
    x = torch.tensor([[[1, 1], [0, 1], [2, 1], [0, 1]], [[1, 1], [0, 1], [2, 1], [0, 1]]])
    for t in (x, x.float(), x.bool(), torch.tensor([[1, 2], [0, 1], [1, 2], [0, 0]])):
        for dim in range(t.dim()):
            want = torch.unique(t, dim=dim, return_inverse=True, return_counts=True)
            got = torch.unique(t.to(tpu), dim=dim, return_inverse=True, return_counts=True)
            for a, b in zip(got, want):
                assert torch.equal(a.cpu(), b)
    for shape, dim in (((5, 0), 1), ((0, 3), 0)):
        got = torch.unique(torch.empty(shape, device=tpu), dim=dim, return_inverse=True, return_counts=True)
        want = torch.unique(torch.empty(shape), dim=dim, return_inverse=True, return_counts=True)
        assert [g.shape for g in got] == [w.shape for w in want]
    for shape, dim in (((5, 0, 5), 0), ((5, 0, 0), 1), ((), 0), ((3, 2), 2)):
        _raises_like_cpu(lambda d: torch.unique(torch.ones(shape, device=d), dim=dim), tpu, at_call=True)


def test_nansum_and_copy_of_65_dims(tpu, eager_mode):
    # test_reductions.test_dim_ndim_limit_nansum / test_dim_reduction_less_than_64: CPU's 64-dims error at
    # the call; copy_ of a 65-d tensor works on CPU, and on tpu (the size-1 dims folded away)
    t = torch.randn([1] * 65)
    _raises_like_cpu(lambda d: torch.nansum(t.to(d), dim=0), tpu, at_call=True)
    _raises_like_cpu(lambda d: torch.logsumexp(t.to(d), dim=-1), tpu, at_call=True)
    u = torch.randn([1] * 30 + [3] + [1] * 30 + [2] + [1] * 4)
    assert torch.equal(u.to(tpu).clone().cpu(), u)
    w = torch.empty([1] * 30 + [2] + [1] * 30 + [3] + [1] * 4, device=tpu)
    w.copy_(u.to(tpu).transpose(30, 61))
    assert torch.equal(w.cpu(), u.transpose(30, 61))


@pytest.mark.parametrize("reduce", ["prod", "amax", "mean"])
def test_index_reduce_of_a_source_empty_along_dim(reduce, tpu, eager_mode):
    # test_indexing.test_index_reduce: ATen's C++ meta selects slice 0 of an empty source (CPU never does)
    d, s, i = torch.randn(3, 4, 5), torch.randn(3, 4, 0), torch.zeros(0, dtype=torch.long)
    got = d.to(tpu).index_reduce_(2, i.to(tpu), s.to(tpu), reduce)
    assert torch.equal(got.cpu(), d.clone().index_reduce_(2, i, s, reduce))
    assert torch.equal(d.to(tpu).index_reduce(2, i.to(tpu), s.to(tpu), reduce, include_self=False).cpu(),
                       d.index_reduce(2, i, s, reduce, include_self=False))


def test_randperm(tpu, eager_mode):
    # test_tensor_creation_ops.test_randperm, test_indexing.test_index_copy: aten::randperm had no tpu kernel
    for n, dtype in ((0, torch.long), (1, torch.long), (100, torch.long), (2049, torch.half), (300, torch.float),
                     (255, torch.uint8)):
        p = torch.randperm(n, dtype=dtype, device=tpu).cpu()
        assert p.dtype == dtype and torch.equal(p.long().sort().values, torch.arange(n))
    g = torch.Generator(tpu)
    g.manual_seed(7)
    a = torch.randperm(1000, device=tpu, generator=g)
    g.manual_seed(7)
    b = torch.randperm(1000, device=tpu, generator=g)
    assert torch.equal(a.cpu(), b.cpu()) and not torch.equal(a.cpu(), torch.arange(1000))
    nc = torch.zeros((2, 3), dtype=torch.long, device=tpu).t()
    torch.randperm(6, out=nc)
    assert nc.shape == (6,) and torch.equal(nc.cpu().sort().values, torch.arange(6))
    for dtype, n in ((torch.half, 2050), (torch.float, 2 ** 24 + 2), (torch.long, -1)):
        _raises_like_cpu(lambda d: torch.randperm(n, out=torch.empty(0, dtype=dtype, device=d)), tpu, at_call=True)
    with pytest.raises(RuntimeError):  # n - 1 does not fit uint8 (CPU's words name the C type)
        torch.randperm(257, out=torch.empty(0, dtype=torch.uint8, device=tpu))


def test_index_put_warnings_and_checks_as_cpu(tpu, eager_mode):
    # test_indexing.test_byte_tensor_assignment / test_byte_mask_accumulate: a uint8 mask warns once per call;
    # test_index_put_accumulate_empty: no index tensors, values must broadcast to self
    import warnings
    for fn in (lambda x, b, v: x.__setitem__(b, v), lambda x, b, v: x[b],
               lambda x, b, v: x.index_put_((b,), v, accumulate=True)):
        counts = []
        for d in ("cpu", tpu):
            x = torch.arange(16.0, device=d).view(4, 4)
            b = torch.tensor([1, 0, 1, 0], dtype=torch.uint8, device=d)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                fn(x, b, torch.tensor([3.0, 4.0, 5.0, 6.0], device=d))
            counts.append(len([m for m in w if "uint8" in str(m.message)]))
        assert counts[0] == counts[1] == 1
    _raises_like_cpu(lambda d: torch.rand([], device=d).index_put([], torch.tensor([1.0], device=d), True), tpu,
                     at_call=True)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_index_copy_fill_select(dtype, tpu, eager_mode):
    # test_indexing.test_index_copy / test_index_copy_scalars / test_index_fill / test_index_select on complex
    x, s, i = torch.randn(4, 5, dtype=dtype), torch.randn(4, 3, dtype=dtype), torch.tensor([4, 0, 2])
    assert torch.equal(x.to(tpu).index_copy_(1, i.to(tpu), s.to(tpu)).cpu(), x.clone().index_copy_(1, i, s))
    t, one = torch.tensor(2 + 1j, dtype=dtype), torch.tensor([0])
    assert torch.equal(t.to(tpu).index_copy(0, one.to(tpu), torch.tensor([5 - 1j], dtype=dtype, device=tpu)).cpu(),
                       t.index_copy(0, one, torch.tensor([5 - 1j], dtype=dtype)))
    for idx in (one, torch.tensor(0)):
        assert torch.equal(t.to(tpu).index_select(0, idx.to(tpu)).cpu(), t.index_select(0, idx))
    for v in (0, -1, 2.5, 1 + 2j, torch.tensor(3 - 1j), torch.tensor(2.0)):
        vt = v.to(tpu) if isinstance(v, torch.Tensor) else v
        assert torch.equal(x.to(tpu).index_fill_(1, i.to(tpu), vt).cpu(), x.clone().index_fill_(1, i, v))
        assert torch.equal(x.to(tpu).index_fill(0, one.to(tpu), vt).cpu(), x.index_fill(0, one, v))
    assert torch.equal(t.to(tpu).index_fill(0, one.to(tpu), -1).cpu(), t.index_fill(0, one, -1))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_sqrt_rsqrt_of_extremal_values(dtype, tpu, eager_mode):
    # test_unary_ufuncs.test_reference_numerics_extremal_sqrt (complex64): infinite and NaN parts take C99's
    # values, and complex64 rounds as CPU's csqrtf does
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([complex(a, b) for a in (inf, -inf, nan, 0.0, -0.0, 1.0, -1.0, 1e-30)
                      for b in (inf, -inf, nan, 0.0, -0.0, 1.0, -1.0)], dtype=dtype)
    for fn in (torch.sqrt, torch.rsqrt):
        got, want = fn(x.to(tpu)).cpu(), fn(x)
        assert [str(v) for v in got.tolist()] == [str(v) for v in want.tolist()]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_cumsum_logcumsumexp(dtype, tpu, eager_mode):
    # complex cumsum and logcumsumexp had no tpu kernel (test_reductions, test_unary_ufuncs' samples);
    # CPU accumulates in complex128 and logcumsumexp uses its _log_add_exp_helper (NaN, -inf, +inf parts)
    torch.manual_seed(0)
    inf, nan = float("inf"), float("nan")
    x = (torch.randn(3, 6, dtype=dtype) * 4)
    x[1, 2] = complex(-inf, 1.0)
    x[1, 4] = complex(-inf, -2.0)
    x[2, 3] = complex(nan, 0.0)
    x[0, 5] = complex(inf, 0.5)
    for fn in (lambda t: torch.cumsum(t, 1), lambda t: torch.cumsum(t, 0), lambda t: torch.logcumsumexp(t, 1),
               lambda t: torch.logcumsumexp(t, 0), lambda t: torch.cumsum(t.mT, 1, dtype=torch.complex128),
               lambda t: torch.logcumsumexp(t[:, ::2], 1), lambda t: torch.cumsum(t[0, 0], 0)):
        torch.testing.assert_close(fn(x.to(tpu)).cpu(), fn(x), equal_nan=True)
    out = torch.empty(3, 6, dtype=dtype, device=tpu)
    torch.cumsum(x.to(tpu), 1, out=out)
    torch.testing.assert_close(out.cpu(), torch.cumsum(x, 1), equal_nan=True)


def test_module_loss_errors_as_cpu(tpu, eager_mode):
    # test_modules.test_errors: nll_loss refuses a weight of another dtype than the input, even for
    # empty inputs; multi_margin_loss's target size error in CPU's 2.13 words
    import torch.nn.functional as F
    for shape in ((0, 0), (3, 4), (2, 3, 4, 4)):
        _raises_like_cpu(lambda d: F.nll_loss(torch.zeros(shape, device=d),
                                              torch.zeros((shape[0],) + shape[2:], dtype=torch.long, device=d),
                                              weight=torch.ones(shape[1], dtype=torch.float16, device=d)),
                         tpu, at_call=True)
    _raises_like_cpu(lambda d: F.multi_margin_loss(torch.randn(5, 10, device=d),
                                                   torch.tensor([0, 1, 2], device=d)), tpu, at_call=True)
    _raises_like_cpu(lambda d: F.multi_margin_loss(torch.randn(5, 10, device=d), torch.zeros(5, dtype=torch.long,
                                                   device=d), weight=torch.ones(3, device=d)), tpu, at_call=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("case", [((2, 3, 9, 11), (2, 3), (4, 5)), ((3, 7, 7), 3, (3, 3)),
                                  ((2, 2, 5, 6, 7), (2, 2, 3), (3, 3, 3)), ((2, 5, 6, 7), 2, (2, 4, 3))])
def test_fractional_max_pool(case, dtype, tpu, eager_mode):
    # test_modules.test_forward/test_grad of nn.FractionalMaxPool2d/3d: no tpu kernel. Given the same
    # random samples the windows, maxima (NaN wins), indices and gradients are CPU's
    import torch.nn.functional as F
    shape, k, o = case
    sp = len(o)
    torch.manual_seed(1)
    x = torch.randn(shape, dtype=dtype)
    x.view(-1)[3] = float("nan")
    nb = shape[0] if len(shape) == sp + 2 else 1
    samples = torch.rand(nb, shape[-sp - 1], sp, dtype=dtype)
    fn = F.fractional_max_pool2d if sp == 2 else F.fractional_max_pool3d
    xc, xd = x.clone().requires_grad_(), x.to(tpu).requires_grad_()
    yc, ic = fn(xc, k, output_size=o, return_indices=True, _random_samples=samples)
    yd, id_ = fn(xd, k, output_size=o, return_indices=True, _random_samples=samples.to(tpu))
    g = torch.randn(yc.shape, dtype=dtype)
    yc.backward(g)
    yd.backward(g.to(tpu))
    torch.testing.assert_close(yd.detach().cpu(), yc.detach(), equal_nan=True)
    assert torch.equal(id_.cpu(), ic)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    # CPU's argument checks (its meta function) at the call
    _raises_like_cpu(lambda d: fn(torch.randn(shape, device=d), 8, output_size=o), tpu, at_call=True)


def test_complex_binary_into_out_of_other_precision(tpu, eager_mode):
    # test_binary_ufuncs.test_type_promotion_pow: pow(complex64, complex128, out=complex64) computes in
    # complex128 and rounds, as CPU; the complex kernels computed in the out= dtype
    torch.manual_seed(0)
    a, b = torch.randn(50, dtype=torch.complex64), torch.randn(50, dtype=torch.complex128)
    for op in (torch.pow, torch.add, torch.div):
        # (complex64 products and quotients differ from CPU's vectorized ones in the last bit, so the
        # widening case is checked on add only)
        cases = ((a, b, torch.complex64), (b, a, torch.complex64), (a, b.real, torch.complex64))
        for x, y, od in cases + (((a, a, torch.complex128),) if op is torch.add else ()):
            want = op(x, y, out=torch.empty(50, dtype=od))
            got = op(x.to(tpu), y.to(tpu), out=torch.empty(50, dtype=od, device=tpu)).cpu()
            assert torch.equal(got, want), (op, x.dtype, y.dtype, od)
    # a strided out= of the other precision
    out = torch.zeros(50, 2, dtype=torch.complex64, device=tpu)
    torch.pow(a.to(tpu), b.to(tpu), out=out[:, 1])
    assert torch.equal(out[:, 1].cpu(), torch.pow(a, b).to(torch.complex64)) and not out[:, 0].cpu().any()


@pytest.mark.parametrize("name", ["MaxPool3d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad2d", "ReplicationPad3d",
                                  "RMSNorm"])
def test_channels_last_layouts_of_pool_pad_norm(name, tpu, eager_mode):
    # test_modules.test_memory_format: CPU lays these results out channels-last (3d) for a channels-last
    # input (the gradients of the pads, MaxPool3d's output, RMSNorm's input gradient when grad_output is
    # channels-last too); their decompositions and PyTorch's meta functions said contiguous
    import torch.nn as nn
    mod, shape = {"MaxPool3d": (nn.MaxPool3d(2), (2, 3, 4, 4, 4)), "ReflectionPad2d": (nn.ReflectionPad2d(2), (2, 3, 5, 6)),
                  "ReflectionPad3d": (nn.ReflectionPad3d(1), (2, 3, 3, 4, 5)),
                  "ReplicationPad2d": (nn.ReplicationPad2d(2), (2, 3, 5, 6)),
                  "ReplicationPad3d": (nn.ReplicationPad3d(1), (2, 3, 3, 4, 5)),
                  "RMSNorm": (nn.RMSNorm([5, 6]), (2, 4, 5, 6))}[name]
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    torch.manual_seed(0)
    x0 = torch.randn(shape)
    got = {}
    for dev in ("cpu", tpu):
        x = x0.to(dev).contiguous(memory_format=fmt).requires_grad_()
        y = mod.to(dev)(x)
        g0 = torch.linspace(0, 1, y.numel()).reshape(y.shape).to(dev).contiguous(memory_format=fmt)
        g, = torch.autograd.grad(y, x, g0)
        got[dev] = (y.detach().cpu(), g.cpu(), y.is_contiguous(memory_format=fmt), g.is_contiguous(memory_format=fmt))
    torch.testing.assert_close(got[tpu][:2], got["cpu"][:2])
    assert got[tpu][2:] == got["cpu"][2:]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_tril_triu_trace(dtype, tpu, eager_mode):
    # complex tril/triu/trace had no tpu kernel (NotImplementedError naming the dtype); CPU has them
    torch.manual_seed(0)
    a = torch.randn(2, 4, 5, dtype=dtype)
    for fn in (lambda t: t.tril(), lambda t: t.triu(1), lambda t: t.tril(-1).mT, lambda t: t.mT.triu(-2),
               lambda t: torch.trace(t[0]), lambda t: torch.trace(t[1].mT[:3])):
        assert torch.equal(fn(a.to(tpu)).cpu(), fn(a))
    b, bt = a.clone(), a.to(tpu)
    b.tril_(1)
    bt.tril_(1)
    assert torch.equal(bt.cpu(), b)
    out = torch.empty(2, 4, 5, dtype=dtype, device=tpu)
    torch.triu(a.to(tpu), out=out)
    assert torch.equal(out.cpu(), a.triu())


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_index_add(dtype, tpu, eager_mode):
    # complex index_add had no tpu kernel; now the real kernel on the (real, imaginary) pairs, for a
    # real alpha (a complex one raises NotImplementedError at the call)
    torch.manual_seed(0)
    a, src, idx = torch.randn(4, 5, dtype=dtype), torch.randn(3, 5, dtype=dtype), torch.tensor([0, 2, 0])
    for fn in (lambda t, i, s: t.index_add(0, i, s), lambda t, i, s: t.index_add(-2, i, s, alpha=2),
               lambda t, i, s: t.index_add(1, i, t[:, 1:4]), lambda t, i, s: t.index_add(-1, i, t[:, ::2]),
               lambda t, i, s: t.index_add(0, i, s, alpha=1 + 0j)):
        torch.testing.assert_close(fn(a.to(tpu), idx.to(tpu), src.to(tpu)).cpu(), fn(a, idx, src))
    b, bt = a.clone(), a.to(tpu)
    b.index_add_(0, idx, src)
    bt.index_add_(0, idx.to(tpu), src.to(tpu))
    torch.testing.assert_close(bt.cpu(), b)
    with pytest.raises(NotImplementedError, match="complex alpha"):
        a.to(tpu).index_add(0, idx.to(tpu), src.to(tpu), alpha=1j)


def test_lstm_cell_backward_with_no_gradient(tpu, eager_mode):
    # test_modules.test_grad_nn_LSTMCell/LSTM (gradcheck's undefined-grad check): the fused LSTM cell's
    # backward with neither grad_hy nor grad_cy defined wrote through the undefined outputs' null data
    # (a crash); ATen returns undefined tensors, and gradcheck passes as on CPU
    from torch.autograd import gradcheck
    op = torch.ops.aten._thnn_fused_lstm_cell_backward_impl
    cx, cy = torch.randn(3, 5, dtype=torch.double, device=tpu), torch.randn(3, 5, dtype=torch.double, device=tpu)
    ws = torch.rand(3, 20, dtype=torch.double, device=tpu)
    assert all(t is None for t in op(None, None, cx, cy, ws, True))
    torch.manual_seed(0)
    m = torch.nn.LSTMCell(4, 5).double()
    x = torch.randn(3, 4, dtype=torch.double)
    mt, xt = m.to(tpu), x.to(tpu).requires_grad_()
    assert gradcheck(lambda t: mt(t), (xt,))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_advanced_indexing(dtype, tpu, eager_mode):
    # complex128 advanced indexing (x[:, [2, 0]]) was refused ("complex::index computes in complex64");
    # it now moves the (real, imaginary) pairs, which the index tensors never reach
    torch.manual_seed(0)
    t = torch.randn(3, 4, 5, dtype=dtype)
    i0, i1 = torch.tensor([2, 0]), torch.tensor([[1], [2]])
    for fn in (lambda x, a, b: x[:, a], lambda x, a, b: x[a], lambda x, a, b: x[a, :, a], lambda x, a, b: x[b, a],
               lambda x, a, b: x[..., a], lambda x, a, b: x[:, b, a], lambda x, a, b: x[x.real > 0],
               lambda x, a, b: x.mT[:, a]):
        assert torch.equal(fn(t.to(tpu), i0.to(tpu), i1.to(tpu)).cpu(), fn(t, i0, i1))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_nan_to_num(dtype, tpu, eager_mode):
    # complex nan_to_num had no tpu kernel; CPU replaces NaN/inf in the real and imaginary parts apart
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([complex(nan, 1), complex(inf, -inf), complex(2, nan), complex(-inf, 3), 1 + 1j], dtype=dtype)
    for fn in (lambda t: t.nan_to_num(), lambda t: t.nan_to_num(0.5, 7.0, -8.0),
               lambda t: torch.nan_to_num(t[::2], posinf=1e3)):
        assert torch.equal(fn(x.to(tpu)).cpu(), fn(x))
    y, yt = x.clone(), x.to(tpu)
    y.nan_to_num_(1.0)
    yt.nan_to_num_(1.0)
    assert torch.equal(yt.cpu(), y)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_dot_vdot(dtype, tpu, eager_mode):
    # complex dot/vdot had no tpu kernel (the probe of what test_linalg.py meets)
    torch.manual_seed(0)
    a, b = torch.randn(7, dtype=dtype), torch.randn(14, dtype=dtype)[::2]
    for fn in (torch.dot, torch.vdot, lambda x, y: x @ y, lambda x, y: torch.dot(x.conj(), y)):
        torch.testing.assert_close(fn(a.to(tpu), b.to(tpu)).cpu(), fn(a, b))


# ---- test_linalg.py: complex linear algebra, check_errors=, addr/mm argument checks ----

def _close(got, want, dtype):
    tol = dict(atol=1e-4, rtol=1e-4) if dtype in (torch.complex64, torch.float32) else dict(atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_lu_family(dtype, tpu, eager_mode):
    # test_linalg: complex lu_factor/lu/lu_unpack/lu_solve/solve/inv/det/slogdet had no tpu kernels.
    # Pivots as zgetrf picks them (by |re| + |im|), so LU and the pivots equal CPU's.
    torch.manual_seed(0)
    A, B = torch.randn(3, 4, 4, dtype=dtype), torch.randn(3, 4, 2, dtype=dtype)
    At, Bt = A.to(tpu), B.to(tpu)
    LU, piv = torch.linalg.lu_factor(A)
    LUt, pivt = torch.linalg.lu_factor(At)
    assert torch.equal(pivt.cpu(), piv)
    _close(LUt.cpu(), LU, dtype)
    for got, want in zip(torch.linalg.lu(At), torch.linalg.lu(A)):
        _close(got.cpu(), want, dtype)
    for got, want in zip(torch.lu_unpack(LUt, pivt), torch.lu_unpack(LU, piv)):
        _close(got.cpu(), want, dtype)
    for left in (True, False):
        for adjoint in (True, False):
            b = B if left else B.mT
            _close(torch.linalg.lu_solve(LUt, pivt, b.to(tpu), left=left, adjoint=adjoint).cpu(),
                   torch.linalg.lu_solve(LU, piv, b, left=left, adjoint=adjoint), dtype)
    _close(torch.linalg.solve(At, Bt).cpu(), torch.linalg.solve(A, B), dtype)
    _close(torch.linalg.inv(At).cpu(), torch.linalg.inv(A), dtype)
    _close(torch.linalg.det(At).cpu(), torch.linalg.det(A), dtype)
    for got, want in zip(torch.linalg.slogdet(At), torch.linalg.slogdet(A)):
        _close(got.cpu(), want, dtype)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_cholesky_and_triangular(dtype, tpu, eager_mode):
    # test_linalg: complex cholesky (L L^H), cholesky_inverse, cholesky_solve and the triangular
    # solves had no tpu kernels
    torch.manual_seed(0)
    A, B = torch.randn(2, 4, 4, dtype=dtype), torch.randn(2, 4, 3, dtype=dtype)
    H = A @ A.mH + 4 * torch.eye(4, dtype=dtype)
    for upper in (False, True):
        L = torch.linalg.cholesky(H, upper=upper)
        _close(torch.linalg.cholesky(H.to(tpu), upper=upper).cpu(), L, dtype)
        _close(torch.cholesky_inverse(L.to(tpu), upper=upper).cpu(), torch.cholesky_inverse(L, upper=upper), dtype)
        _close(torch.cholesky_solve(B.to(tpu), L.to(tpu), upper=upper).cpu(),
               torch.cholesky_solve(B, L, upper=upper), dtype)
        T = (A.triu() if upper else A.tril()) + 3 * torch.eye(4, dtype=dtype)
        for left in (True, False):
            b = B if left else B.mT
            _close(torch.linalg.solve_triangular(T.to(tpu), b.to(tpu), upper=upper, left=left).cpu(),
                   torch.linalg.solve_triangular(T, b, upper=upper, left=left), dtype)
        for transpose in (False, True):
            got = torch.triangular_solve(B.to(tpu), T.to(tpu), upper=upper, transpose=transpose)
            want = torch.triangular_solve(B, T, upper=upper, transpose=transpose)
            _close(got.solution.cpu(), want.solution, dtype)
    Hn = H.clone()
    Hn[1, -1, -1] = -1  # not positive-definite: info, as CPU
    assert torch.equal(torch.linalg.cholesky_ex(Hn.to(tpu)).info.cpu(), torch.linalg.cholesky_ex(Hn).info)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
def test_complex_qr_family(dtype, shape, tpu, eager_mode):
    # test_linalg: complex geqrf/linalg.qr/householder_product/ormqr had no tpu kernels. zgeqrf's
    # reflectors (real beta, complex tau), so the factors equal CPU's, not only up to phases.
    torch.manual_seed(0)
    X = torch.randn(2, *shape, dtype=dtype)
    Xt = X.to(tpu)
    a, tau = torch.geqrf(X)
    at, taut = torch.geqrf(Xt)
    _close(at.cpu(), a, dtype)
    _close(taut.cpu(), tau, dtype)
    for mode in ("reduced", "complete", "r"):
        for got, want in zip(torch.linalg.qr(Xt, mode=mode), torch.linalg.qr(X, mode=mode)):
            _close(got.cpu(), want, dtype)
    if shape[0] >= shape[1]:
        _close(torch.linalg.householder_product(at, taut).cpu(), torch.linalg.householder_product(a, tau), dtype)
    C = torch.randn(2, shape[0], 3, dtype=dtype)
    for left, c in ((True, C), (False, C.mT.contiguous())):
        for transpose in (False, True):
            _close(torch.ormqr(at, taut, c.to(tpu), left=left, transpose=transpose).cpu(),
                   torch.ormqr(a, tau, c, left=left, transpose=transpose), dtype)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_eigh_and_svd(dtype, tpu, eager_mode):
    # test_linalg: complex eigh/eigvalsh and svd/svdvals had no tpu kernels. Eigen- and singular
    # vectors are unique up to a phase per column: values against CPU, vectors by their definition.
    torch.manual_seed(0)
    M = torch.randn(3, 5, 5, dtype=dtype)
    eye = torch.eye(5, dtype=dtype)
    for uplo in ("L", "U"):
        w, V = torch.linalg.eigh(M.to(tpu), UPLO=uplo)
        w, V = w.cpu(), V.cpu()
        assert w.dtype == torch.linalg.eigvalsh(M).dtype
        _close(w, torch.linalg.eigvalsh(M, UPLO=uplo), dtype)
        Mh = M.tril() + M.tril(-1).mH if uplo == "L" else M.triu() + M.triu(1).mH
        Mh = Mh - 1j * torch.diag_embed(Mh.diagonal(dim1=-2, dim2=-1).imag).to(dtype)
        _close(Mh @ V, V * w.to(dtype).unsqueeze(-2), dtype)
        _close(V.mH @ V, eye.expand(3, 5, 5), dtype)
    for shape in ((6, 4), (4, 6), (5, 5)):
        X = torch.randn(2, *shape, dtype=dtype)
        k = min(shape)
        for full in (False, True):
            U, S, Vh = (t.cpu() for t in torch.linalg.svd(X.to(tpu), full_matrices=full))
            _close(S, torch.linalg.svdvals(X), dtype)
            _close(U[..., :k] @ torch.diag_embed(S).to(dtype) @ Vh[..., :k, :], X, dtype)
            _close(U.mH @ U, torch.eye(U.shape[-1], dtype=dtype).expand(2, -1, -1), dtype)
            _close(Vh @ Vh.mH, torch.eye(Vh.shape[-2], dtype=dtype).expand(2, -1, -1), dtype)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_addmm_family(dtype, tpu, eager_mode):
    # test_linalg: complex addmm/addmv/mv/baddbmm/addbmm were refused (nn.Linear on complex too);
    # beta == 0 ignores self's NaNs, as CPU does
    torch.manual_seed(0)
    r = lambda *s: torch.randn(*s, dtype=dtype)  # noqa: E731
    nan = torch.full((3, 5), float("nan"), dtype=dtype)
    cases = [
        (torch.addmm, (r(5), r(3, 4), r(4, 5).mT.contiguous().mT), dict(beta=0.5 + 0.6j, alpha=0.9 + 0.3j)),
        (torch.addmm, (nan, r(3, 4), r(4, 5)), dict(beta=0, alpha=2)),
        (torch.addmv, (r(3), r(4, 3).mT, r(4)), dict(beta=2, alpha=0.5j)),
        (torch.mv, (r(3, 4), r(8)[::2]), {}),
        (torch.baddbmm, (r(2, 3, 5), r(2, 3, 4), r(2, 4, 5)), dict(beta=0.1j, alpha=0.5j)),
        (torch.addbmm, (r(3, 5), r(2, 3, 4), r(2, 4, 5)), dict(beta=1, alpha=0.5)),
        (torch.nn.functional.linear, (r(6, 4), r(5, 4), r(5)), {}),
    ]
    for fn, args, kw in cases:
        _close(fn(*(a.to(tpu) for a in args), **kw).cpu(), fn(*args, **kw), dtype)
    out = torch.empty(3, 5, dtype=dtype, device=tpu)
    torch.addmm(nan.to(tpu), r(3, 4).to(tpu), r(4, 5).to(tpu), beta=0, out=out)
    assert not out.cpu().isnan().any()


def test_linalg_check_errors_raises_at_call(tpu, eager_mode):
    # test_linalg.test_cholesky_ex_non_pd / test_inv_ex_singular: check_errors=True raises
    # torch.linalg.LinAlgError at the call, as CPU (Strict raised a RuntimeError at the next sync)
    for dtype in (torch.float64, torch.complex128):
        A = torch.eye(3, dtype=dtype).repeat(5, 1, 1)
        A[3, -2, -2] = 0
        for fn in (torch.linalg.cholesky_ex, torch.linalg.inv_ex, torch.linalg.lu_factor_ex):
            with pytest.raises(RuntimeError) as cpu_err:  # LinAlgError (lu_factor_ex: RuntimeError)
                fn(A, check_errors=True)
            with pytest.raises(RuntimeError) as tpu_err:
                fn(A.to(tpu), check_errors=True)
            assert type(tpu_err.value) is type(cpu_err.value) and str(tpu_err.value) == str(cpu_err.value)
            assert torch.equal(fn(A.to(tpu)).info.cpu(), fn(A).info)  # without the check: info only
        with pytest.raises(torch.linalg.LinAlgError, match="singular"):
            torch.linalg.solve_ex(A.to(tpu), torch.ones(5, 3, 1, dtype=dtype, device=tpu), check_errors=True)


def test_solve_empty_broadcast_batch(tpu, eager_mode):
    # test_linalg.test_solve_batched_broadcasting: A (5, 5) with B (2, 0, 5, 3) left A's info unwritten,
    # and linalg.solve raised on its garbage
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.complex64):
        A = torch.randn(5, 5, dtype=dtype) + 5 * torch.eye(5, dtype=dtype)
        for b_shape in ((2, 0, 5, 3), (0, 5, 2)):
            B = torch.randn(*b_shape, dtype=dtype)
            got = torch.linalg.solve(A.to(tpu), B.to(tpu))
            assert got.shape == torch.linalg.solve(A, B).shape


def test_svd_of_a_very_wide_matrix(tpu, eager_mode):
    # test_linalg.test_svd_memory_allocation: svdvals of (3, 2**20) asked for a 2**20-square scratch
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.complex64):
        X = torch.randn(3, 2 ** 16, dtype=dtype)
        torch.testing.assert_close(torch.linalg.svdvals(X.to(tpu)).cpu(), torch.linalg.svdvals(X),
                                   atol=1e-2, rtol=1e-4)
        U, S, Vh = torch.linalg.svd(X.to(tpu), full_matrices=False)
        assert U.shape == (3, 3) and Vh.shape == (3, 2 ** 16)


def test_addr_scalar_checks(tpu, eager_mode):
    # test_linalg.test_addr_integral / test_addr_float_and_complex: CPU refuses a bool beta/alpha for a
    # non-bool result and a floating one for an integral result; tpu computed
    for dtype, kw in ((torch.int64, dict(beta=2.0, alpha=1)), (torch.int64, dict(beta=2, alpha=1.0)),
                      (torch.float32, dict(beta=True, alpha=1)), (torch.complex64, dict(beta=1, alpha=True)),
                      (torch.int16, dict(beta=True, alpha=1))):
        m, v = torch.ones(3, 3, dtype=dtype), torch.ones(3, dtype=dtype)
        with pytest.raises(RuntimeError) as cpu_err:
            torch.addr(m, v, v, **kw)
        with pytest.raises(RuntimeError, match=str(cpu_err.value)):
            torch.addr(m.to(tpu), v.to(tpu), v.to(tpu), **kw)
    m, v = torch.arange(9.).view(3, 3), torch.arange(3.)
    got = torch.addr(m.to(tpu), v.to(tpu), v.to(tpu), beta=2, alpha=3).cpu()
    assert torch.equal(got, torch.addr(m, v, v, beta=2, alpha=3))
    b = torch.tensor([True, False, True])
    assert torch.equal(torch.addr(b.to(tpu)[:, None] & b.to(tpu), b.to(tpu), b.to(tpu), beta=False).cpu(),
                       torch.addr(b[:, None] & b, b, b, beta=False))


def test_mm_mixed_dtypes_and_devices_raise(tpu, eager_mode):
    # test_linalg.test_mm_empty_inputs_mixed_dtype_errors, test_dot_invalid_args: CPU's errors and words
    a, b = torch.randint(0, 10, (1, 10), dtype=torch.int16), torch.randn(10, 20)
    with pytest.raises(RuntimeError, match="expected .* and .* to have the same dtype, but got:"):
        torch.mm(a.to(tpu), b.to(tpu))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.dot(torch.ones(3, device=tpu), torch.ones(3))


def test_python_meta_refusals_raise_runtime_error(tpu, eager_mode):
    # test_linalg.test_eig_errors_and_warnings (and eigvals', cholesky_inverse's): PyTorch's Python
    # meta functions refuse a 1-D input with AssertionError; CPU raises RuntimeError (the meta's words
    # differ a little: "The input tensor must have at least 2 dimensions, got 1")
    for fn in (torch.linalg.eig, torch.linalg.eigvals, torch.cholesky_inverse):
        with pytest.raises(RuntimeError, match="must have at least 2 dimensions") as cpu_err:
            fn(torch.ones(3))
        with pytest.raises(RuntimeError, match="must have at least 2 dimensions") as tpu_err:
            fn(torch.ones(3, device=tpu))
        assert type(tpu_err.value) is type(cpu_err.value)


def _resize_warnings(fn):
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return [x for x in w if "An output with one or more elements was resized" in str(x.message)]


def test_out_resize_warns_once_per_output(tpu, eager_mode):
    # test_linalg.test_eigh_errors_and_warnings (slogdet's, triangular_solve's, householder_product's):
    # an out= of another shape warned twice (the Python meta's resize of its meta copy, then ours)
    torch.manual_seed(0)
    a = torch.randn(3, 3)
    a = a + a.mT
    cases = [
        lambda d: torch.linalg.eigh(a.to(d), out=(torch.empty(7, 7, device=d), torch.empty(7, 7, device=d))),
        lambda d: torch.linalg.eigvalsh(a.to(d), out=torch.empty(7, 7, device=d)),
        lambda d: torch.linalg.slogdet(a.to(d), out=(torch.empty(1, device=d), torch.empty(1, device=d))),
        lambda d: torch.linalg.householder_product(a.to(d), torch.randn(3).to(d), out=torch.empty(2, 3, device=d)),
    ]
    for case in cases:
        assert len(_resize_warnings(lambda: case(tpu))) == len(_resize_warnings(lambda: case("cpu")))


def test_out_of_uncastable_dtype_raises_cpus_words(tpu, eager_mode):
    # test_linalg's *_errors_and_warnings: an out= of a dtype the result cannot be cast to was refused
    # in the Python meta's words ("Attempting to cast from ..."); CPU's are the op's own
    torch.manual_seed(0)
    a = torch.randn(3, 3)
    a = a + a.mT
    e = lambda dt, *s: torch.empty(*s, dtype=dt)  # noqa: E731
    cases = [
        lambda d: torch.linalg.eigh(a.to(d), out=(e(torch.float, 0).to(d), e(torch.int, 0).to(d))),
        lambda d: torch.linalg.eigvalsh(a.to(d), out=e(torch.int, 0).to(d)),
        lambda d: torch.cholesky_inverse(a.to(d), out=e(torch.int, 3, 3).to(d)),
        lambda d: torch.linalg.eig(a.to(d), out=(e(torch.int, 0).to(d), e(torch.int, 0).to(d))),
        lambda d: torch.linalg.eig(a.to(d), out=(e(torch.float, 0).to(d), e(torch.float, 0).to(d))),
    ]
    for case in cases:
        with pytest.raises(RuntimeError) as cpu_err:
            case("cpu")
        with pytest.raises(RuntimeError) as tpu_err:
            case(tpu)
        assert str(tpu_err.value) == str(cpu_err.value)
