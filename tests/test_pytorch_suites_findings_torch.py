"""Defects that PyTorch's test_torch.py (its device-generic TestTorchDeviceType) found on tpu
(tests/pytorch_suites.py), each kept here as a test against PyTorch CPU so CI guards it without
PyTorch's files."""
import contextlib
import warnings

import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]


@contextlib.contextmanager
def _deterministic(warn_only=False):
    prev, prev_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)


def _same(a, b):
    # NaN == NaN for the comparison (the filled values are NaN)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(torch.nan_to_num(a) if a.is_floating_point() or a.is_complex() else a,
                       torch.nan_to_num(b) if b.is_floating_point() or b.is_complex() else b)
    if a.is_floating_point() or a.is_complex():
        assert torch.equal(a.isnan(), b.isnan())


@pytest.mark.parametrize("dtype", DTYPES)
def test_deterministic_empty_fills(dtype, tpu, eager_mode):
    # test_torch.test_deterministic_empty: with deterministic algorithms, new tensors read NaN
    # (floating, complex) or the dtype's maximum (integers, True), as on CPU
    makers = [
        lambda d: torch.empty(10, 9, device=d, dtype=dtype),
        lambda d: torch.empty_like(torch.zeros(10, 9, device=d, dtype=dtype)),
        lambda d: torch.empty_strided((10, 9), (1, 5), device=d, dtype=dtype),
        lambda d: torch.empty_permuted((2, 3, 5), (1, 0, 2), device=d, dtype=dtype),
        lambda d: torch.empty(10, 9, out=torch.zeros(1, device=d, dtype=dtype)),
    ]
    with _deterministic():
        for make in makers:
            _same(make(tpu).cpu(), make("cpu"))
    # and only then: without it, empty does not fill (no cost on the ordinary path)
    assert torch.empty(3, device=tpu, dtype=dtype).shape == (3,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.complex128, torch.bfloat16])
def test_deterministic_resize_fills_new_part(dtype, tpu, eager_mode):
    # test_torch.test_deterministic_resize: the elements a resize_ adds to the storage are filled
    # (NaN, or the dtype's maximum), the old ones kept; a resize within the storage changes nothing
    fill = torch.empty(1, dtype=dtype)  # the value CPU fills with
    with _deterministic():
        fill = torch.empty(1, dtype=dtype)
    for size, stride, new in [((10,), (1,), (20,)), ((2, 3, 4), None, (3, 4, 5)), ((2, 3, 4), (1, 4, 12), (2, 4, 4)),
                              ((10,), (1,), (5,))]:
        a = (torch.zeros(size, dtype=dtype, device=tpu) if stride is None
             else torch.empty_strided(size, stride, dtype=dtype, device=tpu).fill_(0))
        old = torch.tensor(a.untyped_storage().cpu(), dtype=dtype)
        with _deterministic():
            a.resize_(new)
        now = torch.tensor(a.untyped_storage().cpu(), dtype=dtype)
        _same(now[:old.numel()], old)
        if now.numel() > old.numel():
            _same(now[old.numel():], fill.expand(now.numel() - old.numel()))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_addcmul_addcdiv_complex_value(dtype, tpu, eager_mode):
    # test_torch.test_addcmul / test_addcdiv: a complex `value` lost its imaginary part
    torch.manual_seed(0)
    a, b, c = (torch.randn(2, 3, dtype=dtype) for _ in range(3))
    c = c + 2
    for value in (0.5 + 0.5j, -2j, 3.0):
        for fn in (torch.addcmul, torch.addcdiv):
            got = fn(a.to(tpu), b.to(tpu), c.to(tpu), value=value).cpu()
            torch.testing.assert_close(got, fn(a, b, c, value=value))
        x = a.to(tpu)
        x.addcmul_(b.to(tpu), c.to(tpu), value=value)
        torch.testing.assert_close(x.cpu(), a.addcmul(b, c, value=value))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_put_take_masked_scatter(dtype, tpu, eager_mode):
    # test_torch.test_put / test_put_accumulate / test_take / test_masked_scatter on complex:
    # put_ and masked_scatter_ had no complex kernels, take none for complex128
    torch.manual_seed(0)
    dst = torch.randn(4, 5, dtype=dtype)
    idx = torch.tensor([[0, 7], [19, 7]])
    src = torch.randn(2, 2, dtype=dtype)
    for acc in (False, True):
        if not acc:
            idx_u = torch.tensor([[0, 7], [19, 3]])
        else:
            idx_u = idx
        assert torch.equal(dst.to(tpu).put(idx_u.to(tpu), src.to(tpu), accumulate=acc).cpu(),
                           dst.put(idx_u, src, accumulate=acc))
        nc = dst.t()  # a non-contiguous self, in place
        got = nc.to(tpu)
        got.put_(idx_u.to(tpu), src.to(tpu), accumulate=acc)
        assert torch.equal(got.cpu(), nc.clone().put_(idx_u, src, accumulate=acc))
    assert torch.equal(dst.to(tpu).take(idx.to(tpu)).cpu(), dst.take(idx))
    assert torch.equal(dst.t().to(tpu).take(idx.to(tpu)).cpu(), dst.t().take(idx))
    mask = torch.rand(4, 5) > 0.5
    source = torch.randn(20, dtype=dtype)
    assert torch.equal(dst.to(tpu).masked_scatter(mask.to(tpu), source.to(tpu)).cpu(), dst.masked_scatter(mask, source))
    assert torch.equal(dst.to(tpu).masked_scatter(mask[0].to(tpu), source.to(tpu)).cpu(),
                       dst.masked_scatter(mask[0], source))
    # a real source for complex self is refused, as on CPU
    with pytest.raises(RuntimeError):
        dst.to(tpu).masked_scatter(mask.to(tpu), source.real.contiguous().to(tpu))
        torch.tpu.synchronize()


def test_meta_functions_raise_no_cuda_alerts(tpu, eager_mode):
    # test_torch.test_nondeterministic_alert_histc / _median: PyTorch's meta functions, which the tpu
    # uses for output shapes, take a meta tensor for a CUDA one and raised CUDA's alerts
    x = torch.randn(10, device=tpu)
    with _deterministic():
        torch.histc(x, bins=4, min=-1, max=1)
        torch.median(x, 0)
        x.median(0)
        torch.kthvalue(x, 3)
    torch.tpu.synchronize()


def test_put_alert_and_overlap(tpu, eager_mode):
    # test_torch.test_nondeterministic_alert_put / test_put_mem_overlap: as CPU, put_ without accumulate
    # alerts under deterministic algorithms, and refuses overlapping self / index / source at the call
    a = torch.randn(10, device=tpu)
    ind = torch.tensor([0, 0], device=tpu)
    v = torch.tensor([0., 1.], device=tpu)
    with _deterministic():
        for call in (lambda: a.put_(ind, v), lambda: a.put(ind, v)):
            with pytest.raises(RuntimeError, match="put_ does not have a deterministic implementation"):
                call()
        a.put_(ind, v, accumulate=True)  # CPU's accumulate is deterministic
    x = torch.rand(1, device=tpu).expand(6)
    y = torch.rand(6, device=tpu)
    i = torch.tensor([2, 1, 0], device=tpu)
    for bad in (lambda: x.put_(i, torch.rand(3, device=tpu)), lambda: y.put_(i[0], y[0]), lambda: i.put_(i, i),
                lambda: y.put_(i, y[:3]), lambda: i.put_(i, i.clone()), lambda: i.put_(i.clone(), i)):
        with pytest.raises(RuntimeError, match="unsupported operation"):
            bad()


def _warns_expanded(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return [str(e.message) for e in w if "on expanded tensors is deprecated" in str(e.message)]


def test_expanded_self_warns_as_cpu(tpu, eager_mode):
    # test_torch.test_index_put_mem_overlap / test_masked_fill_mem_overlap / test_index_fill_mem_overlap:
    # CPU warns (and writes) for an expanded self, where tpu raised or said nothing; it still refuses
    # index and value tensors that overlap self
    for d in ("cpu", tpu):
        x = torch.rand(1, device=d).expand(6)
        ind = torch.tensor([2, 1, 0], device=d)
        mask = torch.tensor([True, False, True, True, False, False], device=d)
        assert any("index_put_" in m for m in _warns_expanded(lambda: x.index_put_((ind,), torch.rand(3, device=d))))
        assert any("masked_fill_" in m for m in _warns_expanded(lambda: x.masked_fill_(mask, 0.)))
        assert any("masked_fill_" in m for m in _warns_expanded(
            lambda: x.masked_fill_(mask, torch.tensor(0., device=d))))
        assert any("index_fill_" in m for m in _warns_expanded(lambda: x.index_fill_(0, ind, 1.0)))
        y = torch.rand(6, device=d)
        for bad in (lambda: y.index_put_((ind,), y[0]), lambda: ind.index_put_((ind,), ind),
                    lambda: y.index_put_((ind,), y[:3]), lambda: ind.index_put_((ind,), ind.clone()),
                    lambda: ind.index_put_((ind.clone(),), ind), lambda: mask[1:].masked_fill_(mask[:-1], False),
                    lambda: ind.index_fill_(0, ind, 0)):
            with pytest.raises(RuntimeError, match="unsupported operation"):
                bad()
    # an ordinary index_put_ / masked_fill_ warns nothing
    z = torch.zeros(6, device=tpu)
    assert not _warns_expanded(lambda: z.index_put_((torch.tensor([1], device=tpu),), torch.ones(1, device=tpu)))
    assert not _warns_expanded(lambda: z.masked_fill_(z > 0, 2.0))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_scatter_reduce(dtype, tpu, eager_mode):
    # test_torch.test_scatter_reduce_*: scatter_ (src, value, reduce add/multiply) had no complex kernel
    torch.manual_seed(0)
    index = torch.tensor([[1, 0], [2, 1]])
    src = torch.randn(2, 2, dtype=dtype)
    for reduce in (None, "add", "multiply"):
        for value in (src, 2, 1.5 - 0.5j):
            x = torch.randn(4, 3, dtype=dtype)
            kw = {} if reduce is None else {"reduce": reduce}
            got = x.to(tpu)
            got.scatter_(0, index.to(tpu), value.to(tpu) if isinstance(value, torch.Tensor) else value, **kw)
            want = x.clone().scatter_(0, index, value, **kw)
            torch.testing.assert_close(got.cpu(), want)
            # along dim 1, non-contiguous self, out of place
            got = torch.scatter(x.t().to(tpu), 1, index.to(tpu), src.to(tpu), **kw).cpu()
            torch.testing.assert_close(got, torch.scatter(x.t(), 1, index, src, **kw))
    # non-unique index: products accumulate in index order, as CPU
    x = torch.full((2, 2), 2 + 1j, dtype=dtype)
    s = torch.full((2, 2), 1 - 2j, dtype=dtype)
    z = torch.zeros(2, 2, dtype=torch.long)
    got = x.to(tpu).scatter_(0, z.to(tpu), s.to(tpu), reduce="multiply").cpu()
    torch.testing.assert_close(got, x.clone().scatter_(0, z, s, reduce="multiply"))
    bad = torch.tensor([[4, 0]])
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.randn(4, 3, dtype=dtype, device=tpu).scatter_(0, bad.to(tpu), src[:1].to(tpu), reduce="add")
        torch.tpu.synchronize()


def test_masked_scatter_mask_must_broadcast_to_self(tpu, eager_mode):
    # test_torch.test_broadcast (masked_scatter): an in-place masked_scatter_ whose mask does not
    # broadcast to self raised only at the next sync; CPU raises at the call
    for d in ("cpu", tpu):
        small = torch.randn(3, 1, device=d)
        mask = torch.rand(3, 4, device=d) < 0.5
        with pytest.raises(RuntimeError, match="expanded size"):
            small.masked_scatter_(mask, torch.randn(12, device=d))
    x = torch.zeros(3, 4, device=tpu)
    m = torch.tensor([True, False, True, False], device=tpu)
    src = torch.arange(12.)
    assert torch.equal(x.masked_scatter_(m, src.to(tpu)).cpu(), torch.zeros(3, 4).masked_scatter_(m.cpu(), src))


def test_grid_sampler_shape_errors_at_call(tpu, eager_mode):
    # test_torch.test_invalid_shapes_grid_sampler: grid_sampler_2d/3d on mismatched shapes raised a
    # ValueError from PyTorch's Python meta function; CPU's checks raise RuntimeError with its words
    for ins, grid in (((5, 5, 5, 5, 5), (1, 1, 1, 4, 4)), ((5, 5, 5, 5), (1, 1, 4, 4)), ((2, 3, 4, 4), (2, 4, 4, 3)),
                      ((2, 3, 4, 4, 4), (2, 4, 4, 4, 2))):
        for fn in (torch.grid_sampler_2d, torch.grid_sampler_3d):
            msgs = []
            for d in ("cpu", tpu):
                a = torch.randn(ins, device=d, dtype=torch.float64)
                g = torch.rand(grid, device=d, dtype=torch.float64) * 2 - 1
                with pytest.raises(RuntimeError) as e:
                    fn(a, g, 0, 0, True)
                msgs.append(str(e.value).splitlines()[0])
            assert msgs[0] == msgs[1]


def test_logcumsumexp_out(tpu, eager_mode):
    # test_torch.test_logcumsumexp: logcumsumexp(out=) had no output shapes (no meta for
    # _logcumsumexp.out); a wrongly typed out= raises CPU's error
    b = torch.randn(5, 2)
    out = torch.zeros(5, 2, device=tpu)
    torch.logcumsumexp(b.to(tpu), -1, out=out)
    torch.testing.assert_close(out.cpu(), torch.logcumsumexp(b, -1))
    out = torch.empty(0, device=tpu)
    torch.logcumsumexp(b.to(tpu), 0, out=out)
    torch.testing.assert_close(out.cpu(), torch.logcumsumexp(b, 0))
    with pytest.raises(RuntimeError, match="expected scalar_type Double but found Float"):
        torch.logcumsumexp(b.double().to(tpu), -1, out=torch.zeros(5, 2, device=tpu))


def test_elementwise_layout_of_ambiguous_channels_last(tpu, eager_mode):
    # test_torch.test_memory_format_propagation_rules: a channels-last (N, C, 1, 1) tensor is contiguous
    # too; the unboxed add/mul front gave its results contiguous strides where CPU's TensorIterator keeps
    # its strides when it broadcasts or meets a number
    for mf in (torch.channels_last, torch.contiguous_format):
        a = torch.rand(10, 3, 1, 1).to(memory_format=mf)
        bias = torch.rand(3, 1, 1)
        for fn in (lambda x, b: x + b, lambda x, b: b + x, lambda x, b: x * 5, lambda x, b: x + x,
                   lambda x, b: x - b, lambda x, b: x / 2):
            got = fn(a.to(tpu), bias.to(tpu))
            want = fn(a, bias)
            assert got.stride() == want.stride()
            torch.testing.assert_close(got.cpu(), want)
    s = torch.rand(4, 6)[:, 2:3]  # a slice: contiguous, its size-1 dim's stride is 1
    assert (s.to(tpu) * 2).stride() == (s * 2).stride()


_OLD_NAMES_SUITE = '''
import torch
from torch.testing._internal.common_utils import TestCase, skipIfMps
from torch.testing._internal.common_cuda import tf32_is_not_fp32
from torch.testing._internal.common_device_type import instantiate_device_type_tests


class TestOld(TestCase):
    @skipIfMps
    def test_add(self, device):
        self.assertFalse(tf32_is_not_fp32())
        self.assertEqual((torch.ones(2, device=device) + 1).cpu(), torch.full((2,), 2.0))


instantiate_device_type_tests(TestOld, globals())
'''


def test_runner_takes_older_files_and_a_relative_out(tmp_path, device):
    # test_torch.py (e121c6ea) imports skipIfMps and tf32_is_not_fp32, which 2.13 lacks; and a relative
    # --out failed in the children, which run in the test directory
    import json
    import os
    import pathlib
    import subprocess
    import sys
    if device == "cpu":
        pytest.skip("the runner compares the tpu with CPU")
    root = pathlib.Path(__file__).resolve().parent.parent
    (tmp_path / "src" / "test").mkdir(parents=True)
    (tmp_path / "src" / "test" / "test_old.py").write_text(_OLD_NAMES_SUITE)
    r = subprocess.run([sys.executable, str(root / "tests" / "pytorch_suites.py"), "--pytorch-src", "src",
                        "--out", "out", "test_old.py"], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(root)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    row = json.loads((tmp_path / "out" / "strict" / "test_old.json").read_text())
    assert row["total"] == 1 and row["passed"] == 1 and row["cpu_passed"] == 1, row
