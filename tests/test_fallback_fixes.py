# Regression tests for the generic fallback (torch_tpu/csrc/fallback.cpp):
# ops that only write their arguments, ops without a meta function, data-
# dependent output sizes, wrapped Python numbers, CPU 0-d tensor arguments,
# the DeviceAllocator memory API and the fused rms_norm. All compare with CPU.
import pytest
import torch

DEV = "tpu"


def same(cpu, tpu, exact=True, atol=1e-5, rtol=1e-5):
    tpu = tpu.cpu()
    assert cpu.dtype == tpu.dtype, (cpu.dtype, tpu.dtype)
    assert cpu.shape == tpu.shape, (cpu.shape, tpu.shape)
    if exact:
        torch.testing.assert_close(tpu, cpu, atol=0, rtol=0, equal_nan=True)
    else:
        torch.testing.assert_close(tpu, cpu, atol=atol, rtol=rtol, equal_nan=True)


# ---- 1. ops whose schema returns nothing and writes arguments ----
@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cummax_cummin(fn, dtype, dim):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 6, generator=g) * 5).to(dtype)
    x[1, 2] = x[1, 1]  # ties take the later index
    v, i = fn(x, dim)
    vt, it = fn(x.to(DEV), dim)
    same(v, vt)
    same(i, it)


def test_cummax_nan_0d_empty_and_out():
    x = torch.tensor([1.0, float("nan"), 3.0, 0.0])
    v, i = torch.cummax(x, 0)
    vt, it = torch.cummax(x.to(DEV), 0)
    same(v, vt, exact=False)
    same(i, it)
    s = torch.tensor(2.5)
    same(torch.cummin(s, 0)[0], torch.cummin(s.to(DEV), 0)[0])
    e = torch.empty(0, 3)
    same(torch.cummax(e, 0)[1], torch.cummax(e.to(DEV), 0)[1])
    ov, oi = torch.empty(0).to(DEV), torch.empty(0, dtype=torch.long).to(DEV)
    torch.cummax(x.to(DEV), 0, out=(ov, oi))
    same(v, ov, exact=False)
    same(i, oi)


# ---- 2. meta by rule: _logcumsumexp ----
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logcumsumexp(dtype):
    x = torch.randn(3, 5, dtype=dtype)
    for dim in (0, 1):
        same(torch.logcumsumexp(x, dim), torch.logcumsumexp(x.to(DEV), dim), exact=False)
    xt = x.t()  # non-contiguous input
    same(torch.logcumsumexp(xt, 1), torch.logcumsumexp(xt.to(DEV), 1), exact=False)


# ---- 3. repeat_interleave without output_size ----
def test_repeat_interleave_data_dependent():
    x = torch.randn(5, 3)
    r = torch.tensor([1, 0, 3, 2, 1])
    same(torch.repeat_interleave(x, r, dim=0), torch.repeat_interleave(x.to(DEV), r.to(DEV), dim=0))
    same(torch.repeat_interleave(r), torch.repeat_interleave(r.to(DEV)))
    r32 = torch.tensor([2, 1, 0], dtype=torch.int32)
    same(torch.repeat_interleave(r32), torch.repeat_interleave(r32.to(DEV)))
    y = torch.arange(6.0)
    same(torch.repeat_interleave(y, torch.tensor(2)), torch.repeat_interleave(y.to(DEV), torch.tensor(2).to(DEV)))
    z = torch.zeros(3, dtype=torch.long)
    same(torch.repeat_interleave(z), torch.repeat_interleave(z.to(DEV)))


# ---- 4. wrapped Python numbers keep their category ----
_DTYPES = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.bool, torch.float16, torch.bfloat16,
           torch.float32]
_SCALARS = [2, -3, 2.5, 0.1, True, False]
_OPS = {
    "add": lambda a, s: a + s,
    "radd": lambda a, s: s + a,
    "sub": lambda a, s: a - s,
    "mul": lambda a, s: a * s,
    "rmul": lambda a, s: s * a,
    "div": lambda a, s: a / s,
    "rdiv": lambda a, s: s / a,
    "lt": lambda a, s: a < s,
    "eq": lambda a, s: a == s,
    "ge": lambda a, s: a >= s,
    "where": lambda a, s: torch.where(a.bool(), a, s),
}


def _operand(dtype):
    if dtype == torch.bool:
        return torch.tensor([True, False, True, True])
    return (torch.arange(-4, 5) * 1.37).to(dtype)


@pytest.mark.parametrize("op", list(_OPS))
@pytest.mark.parametrize("dtype", _DTYPES)
def test_wrapped_number_promotion(op, dtype):
    f = _OPS[op]
    a = _operand(dtype)
    for s in _SCALARS:
        try:
            c = f(a, s)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                f(a.to(DEV), s).cpu()
            continue
        same(c, f(a.to(DEV), s))


def test_int_tensor_times_float_computes_in_float32():
    a = torch.arange(-5000, 5000, dtype=torch.int32)
    for s in (0.1, 1 / 3, 2.7):
        same(a * s, a.to(DEV) * s)
        same(a / s, a.to(DEV) / s)
        same(a + s, a.to(DEV) + s)
        same(s - a, s - a.to(DEV))
    h = torch.randn(4000).half()
    for s in (0.1, 1 / 3, 2.7):
        same(h * s, h.to(DEV) * s)


# ---- 5. bool ** bool (CompositeExplicitAutogradNonFunctional -> pow.Tensor_Scalar_out) ----
@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.uint8, torch.float16, torch.float32])
def test_pow_scalar_matches_cpu(dtype):
    a = torch.tensor([1, 0, 1]).to(dtype)
    for e in (True, False, 0, 1, 2, 2.5, -1, 0.0, 1.0):
        try:
            c = a ** e
        except RuntimeError:
            with pytest.raises(RuntimeError):
                (a.to(DEV) ** e).cpu()
            continue
        same(c, a.to(DEV) ** e)
    out = torch.empty(0, dtype=torch.bool).to(DEV)
    torch.pow(torch.tensor([True, False]).to(DEV), True, out=out)
    same(torch.tensor([True, False]), out)


# ---- 6. CPU 0-d tensors (not wrapped numbers) reach meta functions on the device ----
def test_cpu_scalar_tensor_args():
    x = torch.zeros(3, 4)
    idx = torch.tensor([0, 2])
    v = torch.tensor(3.5)
    same(x.clone().index_fill_(1, idx, v), x.to(DEV).index_fill_(1, idx.to(DEV), v))
    same(x.index_fill(0, idx, v), x.to(DEV).index_fill(0, idx.to(DEV), v))
    y = torch.arange(12.0).reshape(3, 4)
    m = y > 5
    same(y.clone().masked_fill_(m, torch.tensor(-1.0)), y.to(DEV).masked_fill_(m.to(DEV), torch.tensor(-1.0)))
    # a CPU 0-d tensor in arithmetic still promotes as a 0-d tensor
    i = torch.arange(5, dtype=torch.int32)
    same(i + torch.tensor(2), i.to(DEV) + torch.tensor(2))
    same(i * torch.tensor(2.5), i.to(DEV) * torch.tensor(2.5))


# ---- 7. torch.accelerator memory API over the DeviceAllocator ----
def test_accelerator_memory_api():
    torch.accelerator.synchronize()
    before = torch.accelerator.memory_allocated()
    t = torch.empty(1 << 20, dtype=torch.uint8, device=DEV)
    assert torch.accelerator.memory_allocated() >= before + (1 << 20)
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    del t
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()


# ---- 8. nn.RMSNorm through _fused_rms_norm, forward and backward ----
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_forward_backward(dtype, tol, affine):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, generator=g).to(dtype)
    m = torch.nn.RMSNorm([3, 8], eps=1e-6, elementwise_affine=affine).to(dtype)
    if affine:
        with torch.no_grad():
            m.weight.copy_(torch.rand(3, 8, generator=g).to(dtype) + 0.5)
    mt = torch.nn.RMSNorm([3, 8], eps=1e-6, elementwise_affine=affine).to(dtype).to(DEV)
    if affine:
        with torch.no_grad():
            mt.weight.copy_(m.weight.to(DEV))
    xc = x.clone().requires_grad_()
    xt = x.to(DEV).requires_grad_()
    grad = torch.randn(2, 3, 8, generator=g).to(dtype)
    y = m(xc)
    yt = mt(xt)
    assert "FusedRmsNorm" in type(yt.grad_fn).__name__
    same(y.detach(), yt.detach(), exact=False, atol=tol, rtol=tol)
    y.backward(grad)
    yt.backward(grad.to(DEV))
    same(xc.grad, xt.grad, exact=False, atol=tol * 4, rtol=tol * 4)
    if affine:
        same(m.weight.grad, mt.weight.grad, exact=False, atol=tol * 4, rtol=tol * 4)


def test_rms_norm_default_eps():
    x = torch.randn(4, 16)
    same(torch.nn.functional.rms_norm(x, [16]), torch.nn.functional.rms_norm(x.to(DEV), [16]), exact=False)


def test_direct_structured_ops_keep_cpu_checks(device):
    """Structured ops (add.Tensor, sub_.Tensor, ...) reach the C kernels without
    PyTorch's composite wrapper; its C++ meta checks still apply to every new
    signature, and a rejected signature is never cached."""
    from torch_tpu import _C
    assert _C._direct_structured_op_count() > 100
    i = torch.arange(6, device=device).reshape(2, 3)
    ic = i.cpu()
    torch.testing.assert_close(torch.add(i, i, alpha=2).cpu(), torch.add(ic, ic, alpha=2))
    for _ in range(2):  # the second time would hit a cache entry if one had been made
        with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
            torch.add(i, i, alpha=1.5)
        b = torch.ones(3, device=device, dtype=torch.bool)
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
            b - b
        f = torch.ones(2, 3, device=device)
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            i.add_(f)
    # the same signatures keep working (and now hit the cache)
    for _ in range(3):
        x = torch.randn(2, 3, device=device)
        xc = x.cpu()
        torch.testing.assert_close((x * 2 + x).cpu(), xc * 2 + xc)
        x.mul_(0.5)
        torch.testing.assert_close(x.cpu(), xc * 0.5)


@pytest.mark.parametrize("fn", [lambda v: v.pow_(2), lambda v: v.square_(), lambda v: v.pow_(3.0),
                                lambda v: torch.pow(v, 2, out=v)])
def test_written_strided_view_keeps_its_layout(device, fn):
    """An in-place/out= op on a strided view writes through the view; its
    strides are not replaced by the contiguous layout meta reports."""
    x = torch.arange(10.0, device=device)
    xc = torch.arange(10.0)
    v, vc = x[::2], xc[::2]
    fn(v)
    fn(vc)
    assert v.stride() == vc.stride()
    torch.testing.assert_close(x.cpu(), xc)


def test_geqrf_shapes_without_meta(device):
    """geqrf has no meta function in PyTorch 2.13: its layout (a column-major,
    tau [..., min(m, n)]) comes from a rule; values match CPU."""
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    a, tau = torch.geqrf(x)
    a2, tau2 = torch.geqrf(x.to(device))
    assert a2.stride() == a.stride() and tau2.shape == tau.shape
    torch.testing.assert_close(a2.cpu(), a)
    torch.testing.assert_close(tau2.cpu(), tau)
    oa, ot = torch.empty(0, device=device, dtype=x.dtype), torch.empty(0, device=device, dtype=x.dtype)
    torch.geqrf(x.to(device), out=(oa, ot))
    torch.testing.assert_close(oa.cpu(), a)



_SHARED = {  # name: (fn(target, x), CPU refuses it)
    "out_add": (lambda t, x: torch.add(x, x, out=t), True),
    "out_cat": (lambda t, x: torch.cat([x[:3], x[3:]], out=t), True),
    "out_index_select": (lambda t, x: torch.index_select(x, 0, torch.arange(6, device=x.device), out=t), True),
    "inplace_add": (lambda t, x: t.add_(1), True),
    "inplace_uniform": (lambda t, x: t.uniform_(), True),
    "inplace_fill": (lambda t, x: t.fill_(3), False),
    "inplace_zero": (lambda t, x: t.zero_(), False),
    "out_sum": (lambda t, x: torch.sum(x.reshape(6, 1), 1, out=t), False),
}


@pytest.mark.parametrize("case", sorted(_SHARED))
def test_written_tensor_with_shared_elements_as_on_cpu(case):
    """An out= or in-place target whose elements share memory (an expanded view): where CPU raises
    RuntimeError ("more than one element of the written-to tensor refers to a single memory
    location"), tpu raises it too and leaves the target as it was; where CPU allows it, so does tpu."""
    fn, refused = _SHARED[case]

    def run(dev):
        x = torch.arange(6.0, device=dev)
        base = torch.zeros(1, device=dev)
        if refused:
            with pytest.raises(RuntimeError, match="single memory location"):
                fn(base.expand(6), x)
        else:
            fn(base.expand(6), x)
        return base.cpu()
    cpu = run("cpu")
    if case != "out_sum":  # CPU's sum writes the shared element six times; the last write wins
        assert torch.equal(run("tpu"), cpu)
    else:
        run("tpu")


@pytest.mark.parametrize("case", ["cat", "index_select", "take", "add_partial", "add_identical"])
def test_out_overlapping_an_input_as_on_cpu(case):
    """out= overlapping an input: cat/index_select/take/gather refuse any overlap (CPU's
    assert_no_overlap), elementwise ops refuse a partial one but take out= identical to an input."""
    def run(dev):
        x = torch.arange(12.0, device=dev)
        fns = {"cat": lambda: torch.cat([x[:6], x[6:]], out=x),
               "index_select": lambda: torch.index_select(x, 0, torch.arange(12, device=dev), out=x),
               "take": lambda: torch.take(x, torch.arange(12, device=dev), out=x),
               "add_partial": lambda: torch.add(x[1:], 1, out=x[:-1]),
               "add_identical": lambda: torch.add(x, 1, out=x)}
        if case == "add_identical":
            fns[case]()
        else:
            with pytest.raises(RuntimeError, match="single memory location"):
                fns[case]()
        return x.cpu()
    assert torch.equal(run("tpu"), run("cpu"))


def test_rms_norm_argument_errors_as_on_cpu():
    x = torch.randn(2, 2, 3)
    for args in [([], None), ([2, 3], torch.ones(1, 2)), ([2, 2], None)]:
        with pytest.raises(RuntimeError) as cpu:
            torch.nn.functional.rms_norm(x, args[0], args[1])
        w = args[1].to("tpu") if args[1] is not None else None
        with pytest.raises(RuntimeError) as dev:
            torch.nn.functional.rms_norm(x.to("tpu"), args[0], w)
        assert str(dev.value).split("\n")[0] == str(cpu.value).split("\n")[0]


def test_masked_scatter_refuses_uint8_mask_as_on_cpu():
    x, src = torch.zeros(3), torch.ones(3)
    mask = torch.tensor([1, 0, 1], dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="boolean masks"):
        x.masked_scatter(mask, src)
    with pytest.raises(RuntimeError, match="boolean masks"):
        x.to("tpu").masked_scatter(mask.to("tpu"), src.to("tpu"))
        torch.tpu.synchronize()
    assert torch.equal(x.to("tpu").masked_scatter(mask.bool().to("tpu"), src.to("tpu")).cpu(),
                       x.masked_scatter(mask.bool(), src))


@pytest.mark.parametrize("case", ["complex_dtypes", "complex_out", "masked_select_expanded_out",
                                  "multilabel_empty", "histogramdd_bins"])
def test_bad_arguments_raise_as_on_cpu(case):
    """A few of OpInfo's error_inputs the device used to accept: the same exception type as CPU."""
    def run(dev):
        x = torch.randn(5, 4, device=dev)
        fns = {"complex_dtypes": lambda: torch.complex(x, x.double()),
               "complex_out": lambda: torch.complex(x.double(), x.double(),
                                                    out=torch.empty(5, 4, dtype=torch.complex64, device=dev)),
               "masked_select_expanded_out": lambda: torch.masked_select(
                   x, x > 0, out=torch.empty(1, device=dev).expand(20)),
               "multilabel_empty": lambda: torch.nn.functional.multilabel_margin_loss(
                   torch.empty(0, device=dev), torch.empty(0, dtype=torch.long, device=dev)),
               "histogramdd_bins": lambda: torch.histogramdd(x.cpu() if dev == "cpu" else x, [2, 2, 2])}
        with pytest.raises(RuntimeError):
            fns[case]()
            if dev != "cpu":
                torch.tpu.synchronize()
    run("cpu")
    run("tpu")
    assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]  # the process goes on


# ---- the structured wrapper's internal outputs raise no user warning ----
def test_mse_loss_warns_only_where_cpu_warns():
    import warnings
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 5, generator=g), torch.randn(7, 5, generator=g)
    for reduction in ("mean", "sum", "none"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a first call of this signature on tpu: no warning
            got = torch.nn.functional.mse_loss(x.to(DEV), y.to(DEV), reduction=reduction)
        same(torch.nn.functional.mse_loss(x, y, reduction=reduction), got, exact=False)
    # a user's out= of another shape with elements warns on tpu as on CPU, also once cached
    outs = []
    for dev in ("cpu", DEV, DEV):
        out = torch.empty(3, device=dev)
        with pytest.warns(UserWarning, match="was resized since it had shape \\[3\\]"):
            torch._C._nn.mse_loss(x.to(dev), y.to(dev), 0, out=out)
        outs.append(out)
    same(outs[0], outs[1], exact=False)
    same(outs[0], outs[2], exact=False)
    for dev in ("cpu", DEV):  # an out= with no elements is resized silently
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.add(x.to(dev), y.to(dev), out=torch.empty(0, device=dev))
