"""Reductions, scans and sorts on the device against PyTorch CPU: sum/mean/prod/nansum, amax/amin,
max/min (full and with indices), argmax/argmin, all/any, count_nonzero, var/std(+_mean),
vector norms, logsumexp, cumsum/cumprod/logcumsumexp, sort/argsort/topk/kthvalue/median, across
dtypes, dims (None, negative, lists), keepdim, non-contiguous inputs, 0-d and empty tensors,
plus NaN propagation and first-index ties."""
import pytest
import torch

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.uint8, torch.bool]


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        lo = 0 if dtype == torch.uint8 else -4
        return torch.randint(lo, 5, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def tol(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float32:
        return dict(rtol=2e-5, atol=2e-5)
    return dict(rtol=1e-7, atol=1e-7)


def same(dev_out, cpu_out, dtype=None, **kw):
    if isinstance(cpu_out, (tuple, list)):
        for d, c in zip(dev_out, cpu_out):
            same(d, c, dtype, **kw)
        return
    t = tol(dtype or cpu_out.dtype) if cpu_out.dtype.is_floating_point else dict(rtol=0, atol=0)
    t.update(kw)
    torch.testing.assert_close(dev_out.cpu(), cpu_out, equal_nan=True, **t)


def layouts(x, device):
    """(cpu, device) pairs of the same values: contiguous, transposed, sliced."""
    d = x.to(device)
    yield x, d
    if x.dim() >= 2:
        yield x.transpose(0, -1), d.transpose(0, -1)
        yield x[:, ::2], d[:, ::2]


DIMS = [None, 0, -1, (0, 2), (-1, 1)]


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("op", ["sum", "prod", "nansum", "amax", "amin", "mean"])
def test_basic_reductions(device, dtype, op):
    x = make((4, 5, 6), dtype)
    if op == "mean" and not dtype.is_floating_point:
        # PyTorch refuses the mean of integers on CPU; the device refuses it with CPU's exception type
        with pytest.raises(Exception) as cpu:
            getattr(torch, op)(x)
        with pytest.raises(type(cpu.value)):
            getattr(torch, op)(x.to(device)).cpu()
        return
    if op == "prod" and dtype.is_floating_point:
        x = (x.double().abs() * 0.2 + 0.9).to(dtype)
    f = getattr(torch, op)
    loose = {"rtol": 5e-2, "atol": 5e-2} if op == "prod" and dtype in (torch.bfloat16, torch.float16) else {}
    for xv, xd in layouts(x, device):
        same(f(xd), f(xv), dtype, **loose)
        for dim in DIMS[1:]:
            if op == "prod" and not isinstance(dim, int):
                continue
            for keepdim in (False, True):
                same(f(xd, dim, keepdim=keepdim), f(xv, dim, keepdim=keepdim), dtype, **loose)


def test_noncontiguous_device_views(device):
    x = make((6, 8, 10), torch.float32)
    d = x.to(device)
    for cv, dv in [(x.transpose(0, 2), d.transpose(0, 2)), (x[:, ::2, 1::3], d[:, ::2, 1::3]),
                   (x.permute(1, 2, 0), d.permute(1, 2, 0))]:
        for dim in [None, 0, 1, -1, (0, 2)]:
            same(dv.sum(dim) if dim is not None else dv.sum(), cv.sum(dim) if dim is not None else cv.sum())
            if dim is not None:
                same(dv.amax(dim), cv.amax(dim))
                same(dv.mean(dim, keepdim=True), cv.mean(dim, keepdim=True))
                same(dv.var(dim), cv.var(dim))
        same(dv.argmax(1), cv.argmax(1))
        same(dv.cumsum(1), cv.cumsum(1))
        same(dv.softmax(0), cv.softmax(0))


def test_sum_dtypes_and_promotion(device):
    for dt in INTS:
        x = make((3, 7), dt)
        same(x.to(device).sum(), x.sum())
        same(x.to(device).sum(1), x.sum(1))
        same(x.to(device).sum(0, dtype=torch.float32), x.sum(0, dtype=torch.float32))
    x = make((3, 7), torch.float16)
    same(x.to(device).sum(1, dtype=torch.float32), x.sum(1, dtype=torch.float32))
    same(x.to(device).mean(1, dtype=torch.float64), x.mean(1, dtype=torch.float64))


def test_large_sum_accuracy(device):
    x = torch.rand(1 << 22)
    torch.testing.assert_close(x.to(device).sum().cpu(), x.sum(), rtol=1e-5, atol=0)
    x = torch.rand(1000, 3000)
    same(x.to(device).sum(0), x.sum(0))
    same(x.to(device).sum(1), x.sum(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_contiguous_row_sums_every_length(device, dtype):
    """Sums along a contiguous dim, at lengths around the kernel's 64- and 16-lane loops and its
    1024-element blocks, with a nonzero mean (so a dropped or repeated element shows), against float64
    sums of the same (rounded) values; bf16 results are rounded once, as CPU's."""
    for n in (1, 15, 16, 17, 63, 64, 65, 80, 127, 1023, 1024, 1025, 1090, 3000, 8192):
        x = (torch.rand(3, n, generator=torch.Generator().manual_seed(n), dtype=torch.float64) + 0.5).to(dtype)
        ref = x.double().sum(1)
        got = x.to(device).sum(1)
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu().double(), ref.to(dtype).double(), rtol=1e-5 if dtype == torch.float32 else 8e-3,
                                   atol=0, msg=f"n={n}")
        got_t = x.t().contiguous().to(device).t().sum(1)  # the same rows read through a transposed view
        torch.testing.assert_close(got_t.cpu(), got.cpu(), rtol=1e-5 if dtype == torch.float32 else 8e-3, atol=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_outer_dim_sums(device, dtype):
    """Sums over the outer dims (the bias gradients of training steps): contiguous, the transposed
    and strided forms autograd produces, several column tiles with a ragged last one, (B, T, C)
    over (0, 1), and mean; the device's dtype and shape are CPU's."""
    x = make((257, 2600), dtype, seed=1)
    d = x.to(device)
    xt = make((2600, 257), dtype, seed=2).t()
    dt = xt.t().contiguous().to(device).t()
    for cv, dv in [(x, d), (xt, dt), (x[::2], d[::2]), (x[:, 3:], d[:, 3:]), (x[:, ::2], d[:, ::2])]:
        for keepdim in (False, True):
            same(dv.sum(0, keepdim=keepdim), cv.sum(0, keepdim=keepdim))
            same(dv.mean(0, keepdim=keepdim), cv.mean(0, keepdim=keepdim))
    x3 = make((5, 33, 770), dtype, seed=3)
    d3 = x3.to(device)
    same(d3.sum((0, 1)), x3.sum((0, 1)))
    same(d3.sum(0), x3.sum(0))
    same(d3.mean((0, 1), keepdim=True), x3.mean((0, 1), keepdim=True))
    same(d3.sum((0, 1), dtype=torch.float32), x3.sum((0, 1), dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_bias_grad(device, dtype):
    lin = torch.nn.Linear(48, 80).to(dtype)
    x = make((6, 41, 48), dtype, seed=4)
    g = make((6, 41, 80), dtype, seed=5)
    lin(x).backward(g)
    lind = torch.nn.Linear(48, 80).to(dtype)
    lind.load_state_dict(lin.state_dict())
    lind = lind.to(device)
    lind(x.to(device)).backward(g.to(device))
    same(lind.bias.grad, lin.bias.grad)
    same(lind.weight.grad, lin.weight.grad, rtol=5e-2, atol=5e-2)


def test_zero_dim_and_empty(device):
    s = torch.tensor(2.5)
    sd = s.to(device)
    same(sd.sum(), s.sum())
    same(sd.sum(0), s.sum(0))
    same(sd.amax(-1, keepdim=True), s.amax(-1, keepdim=True))
    same(sd.max(0)[0], s.max(0)[0])
    same(sd.argmax(), s.argmax())
    e = torch.zeros(0, 3)
    ed = e.to(device)
    same(ed.sum(), e.sum())
    same(ed.sum(0), e.sum(0))
    same(ed.prod(0), e.prod(0))
    same(ed.mean(0), e.mean(0))
    same(ed.any(0), e.any(0))
    same(ed.all(0), e.all(0))
    same(ed.amax(1), e.amax(1))
    with pytest.raises(Exception):
        ed.max()
        torch.tpu.synchronize() if hasattr(torch, "tpu") else None
    with pytest.raises(Exception):
        ed.amax(0)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.uint8])
def test_max_min_with_indices(device, dtype):
    x = make((5, 6, 7), dtype)
    xd = x.to(device)
    same(xd.max(), x.max())
    same(xd.min(), x.min())
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            cv, ci = x.max(dim, keepdim)
            dv, di = xd.max(dim, keepdim)
            same(dv, cv)
            same(di, ci)
            cv, ci = x.min(dim, keepdim)
            dv, di = xd.min(dim, keepdim)
            same(dv, cv)
            same(di, ci)
            same(xd.argmax(dim, keepdim), x.argmax(dim, keepdim))
            same(xd.argmin(dim, keepdim), x.argmin(dim, keepdim))
    same(xd.argmax(), x.argmax())
    same(xd.argmin(), x.argmin())
    same(torch.aminmax(xd), torch.aminmax(x))
    same(torch.aminmax(xd, dim=1), torch.aminmax(x, dim=1))


def test_nan_and_ties(device):
    x = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [2.0, 5.0, 5.0, 1.0]])
    xd = x.to(device)
    same(xd.max(), x.max())
    same(xd.amax(1), x.amax(1))
    same(xd.amin(1), x.amin(1))
    same(xd.max(1), x.max(1))
    same(xd.min(1), x.min(1))
    same(xd.argmax(1), x.argmax(1))
    same(xd.argmin(1), x.argmin(1))
    same(xd.sum(1), x.sum(1))
    same(xd.nansum(1), x.nansum(1))
    same(xd.logsumexp(1), x.logsumexp(1))
    t = torch.tensor([3, 7, 7, 1, 7])
    same(t.to(device).argmax(), t.argmax())
    f = torch.tensor([float("-inf")] * 4)
    same(f.to(device).argmax(), f.argmax())
    same(f.to(device).logsumexp(0), f.logsumexp(0))


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_all_any_count(device, dtype):
    x = make((4, 5, 6), dtype)
    if dtype.is_floating_point:
        x[x.abs() < 0.5] = 0
        x[0, 0, 0] = float("nan")
    xd = x.to(device)
    same(xd.all(), x.all())
    same(xd.any(), x.any())
    for dim in (0, -1):
        for keepdim in (False, True):
            same(xd.all(dim, keepdim), x.all(dim, keepdim))
            same(xd.any(dim, keepdim), x.any(dim, keepdim))
    same(torch.count_nonzero(xd), torch.count_nonzero(x))
    same(torch.count_nonzero(xd, dim=(0, 2)), torch.count_nonzero(x, dim=(0, 2)))
    z = torch.zeros(3, 4, dtype=dtype)
    same(z.to(device).any(), z.any())
    same(z.to(device).all(1), z.all(1))


@pytest.mark.parametrize("dtype", FLOATS)
def test_var_std(device, dtype):
    x = make((4, 5, 6), dtype) * 3 + 1
    xd = x.to(device)
    for dim in (None, 0, -1, (0, 2)):
        for correction in (0, 1, 2):
            for keepdim in (False, True):
                kw = dict(correction=correction, keepdim=keepdim)
                same(torch.var(xd, dim, **kw), torch.var(x, dim, **kw), dtype)
                same(torch.std(xd, dim, **kw), torch.std(x, dim, **kw), dtype)
                same(torch.var_mean(xd, dim, **kw), torch.var_mean(x, dim, **kw), dtype)
                same(torch.std_mean(xd, dim, **kw), torch.std_mean(x, dim, **kw), dtype)
    same(xd.var(), x.var(), dtype)
    same(xd.std(1, unbiased=False), x.std(1, unbiased=False), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_norms(device, dtype):
    x = make((4, 5, 6), dtype)
    x[0, 0, :2] = 0
    xd = x.to(device)
    for ord in (0, 1, 2, 3, 0.5, float("inf"), float("-inf")):
        for dim in (None, 1, (0, 2)):
            same(torch.linalg.vector_norm(xd, ord, dim), torch.linalg.vector_norm(x, ord, dim), dtype)
        same(torch.linalg.vector_norm(xd, ord, -1, keepdim=True), torch.linalg.vector_norm(x, ord, -1, keepdim=True), dtype)
    same(xd.norm(), x.norm(), dtype)
    same(xd.norm(p=1, dim=1), x.norm(p=1, dim=1), dtype)
    same(torch.linalg.vector_norm(xd, 2, dtype=torch.float64), torch.linalg.vector_norm(x, 2, dtype=torch.float64))


@pytest.mark.parametrize("dtype", FLOATS)
def test_logsumexp(device, dtype):
    x = make((4, 5, 6), dtype) * 10
    xd = x.to(device)
    for dim in (0, -1, (0, 1)):
        for keepdim in (False, True):
            same(torch.logsumexp(xd, dim, keepdim), torch.logsumexp(x, dim, keepdim), dtype)
    i = torch.arange(12).reshape(3, 4)
    same(torch.logsumexp(i.to(device), 1), torch.logsumexp(i, 1))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_scans(device, dtype):
    x = make((4, 5, 6), dtype)
    xd = x.to(device)
    for dim in (0, 1, -1):
        same(torch.cumsum(xd, dim), torch.cumsum(x, dim), dtype)
        if dtype.is_floating_point:
            y = (x.double().abs() * 0.3 + 0.8).to(dtype)
            same(torch.cumprod(y.to(device), dim), torch.cumprod(y, dim), dtype)
            # logcumsumexp: aten::_logcumsumexp has no meta kernel in 2.13 (C kernel registered, untested here)
        else:
            same(torch.cumprod(xd, dim), torch.cumprod(x, dim))
    same(torch.cumsum(xd, 1, dtype=torch.float64), torch.cumsum(x, 1, dtype=torch.float64))
    s = torch.tensor(3.0)
    same(torch.cumsum(s.to(device), 0), torch.cumsum(s, 0))


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int32, torch.uint8])
def test_sort_topk(device, dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randperm(5 * 6 * 7, generator=g).reshape(5, 6, 7)
    if dtype in (torch.bfloat16, torch.float16):
        x = x.double() / 8  # exactly representable, still unique
    x = x.to(dtype)
    xd = x.to(device)
    for dim in (0, 1, -1):
        for desc in (False, True):
            same(torch.sort(xd, dim=dim, descending=desc, stable=True), torch.sort(x, dim=dim, descending=desc, stable=True))
            same(torch.argsort(xd, dim=dim, descending=desc, stable=True), torch.argsort(x, dim=dim, descending=desc, stable=True))
        for largest in (True, False):
            same(torch.topk(xd, 3, dim, largest=largest), torch.topk(x, 3, dim, largest=largest))
        for keepdim in (False, True):
            same(torch.kthvalue(xd, 2, dim, keepdim), torch.kthvalue(x, 2, dim, keepdim))
            same(torch.median(xd, dim, keepdim), torch.median(x, dim, keepdim))
    same(torch.median(xd), torch.median(x))
    # stable sort with duplicates keeps the original order of equal keys
    d = torch.tensor([3, 1, 2, 1, 3, 2, 1]).to(dtype)
    same(torch.sort(d.to(device), stable=True), torch.sort(d, stable=True))
    same(torch.sort(d.to(device), stable=True, descending=True), torch.sort(d, stable=True, descending=True))


def test_sort_nan_and_nanmedian(device):
    x = torch.tensor([[3.0, float("nan"), 1.0, 2.0], [float("nan"), 0.5, float("nan"), -1.0]])
    xd = x.to(device)
    same(torch.sort(xd, dim=1, stable=True), torch.sort(x, dim=1, stable=True))
    same(torch.sort(xd, dim=1, descending=True, stable=True), torch.sort(x, dim=1, descending=True, stable=True))
    same(torch.median(xd, 1)[0], torch.median(x, 1)[0])
    same(torch.nanmedian(xd, 1)[0], torch.nanmedian(x, 1)[0])
    same(torch.nanmedian(xd), torch.nanmedian(x))
    same(torch.median(xd), torch.median(x))


def test_topk_errors(device):
    x = torch.randn(4, 5).to(device)
    with pytest.raises(Exception):
        torch.topk(x, 6, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_mode(device, dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 4, (5, 9), generator=g).to(dtype)
    xd = x.to(device)
    for dim in (0, 1):
        for keepdim in (False, True):
            cv, _ = torch.mode(x, dim, keepdim)
            dv, di = torch.mode(xd, dim, keepdim)
            same(dv, cv)
            # the index points at an occurrence of the mode
            picked = torch.gather(x, dim, di.cpu() if keepdim else di.cpu().unsqueeze(dim))
            same(picked if keepdim else picked.squeeze(dim), cv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_trace(device, dtype):
    g = torch.Generator().manual_seed(6)
    x = torch.randint(-3, 4, (4, 9), generator=g).to(dtype)  # many ties
    if dtype.is_floating_point:
        x[1, 3] = float("nan")
    xd = x.to(device)
    # cummax/cummin reach us as aten::_cummax_helper / _cummin_helper, which return () and have no
    # meta kernel in 2.13; the C kernels exist (runtime/tests/test_reduce.c) but the PyTorch layer
    # cannot route them yet.
    same(torch.trace(xd), torch.trace(x))
    same(torch.trace(xd[:, :3]), torch.trace(x[:, :3]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_renorm(device, dtype):
    x = make((4, 5, 3), dtype) * 2
    for p, dim, maxnorm in [(2, 0, 1.0), (1, 1, 2.0), (3, -1, 0.5), (float("inf"), 0, 1.0)]:
        same(torch.renorm(x.to(device), p, dim, maxnorm), torch.renorm(x, p, dim, maxnorm), dtype)
