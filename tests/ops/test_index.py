"""Indexing, gather/scatter, concatenation and shape ops on the device against
PyTorch CPU: advanced indexing (int/bool/None mixes, broadcast index tensors),
index_put with and without accumulate, the dim-wise family (index_select/add/
copy/fill/reduce, gather, scatter*, take, put_), nonzero/masked ops, cat, flip,
roll, tril/triu, factories, searches; forward and backward through autograd;
bad indices raise IndexError."""
import pytest
import torch
import torch.nn.functional as F

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]
SOME = [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool]


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    lo, hi = (0, 40) if dtype == torch.uint8 else (-20, 21)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def idx(shape, n, seed=1, negative=True, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-n if negative else 0, n, shape, generator=g).to(dtype)


def tol(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float32:
        return dict(rtol=2e-5, atol=2e-5)
    return dict(rtol=1e-7, atol=1e-7) if dtype == torch.float64 else dict(rtol=0, atol=0)


def check(dev_out, cpu_out, **kw):
    if isinstance(cpu_out, (tuple, list)):
        assert len(dev_out) == len(cpu_out)
        for d, c in zip(dev_out, cpu_out):
            check(d, c, **kw)
        return
    d = dev_out.cpu()
    assert d.dtype == cpu_out.dtype, (d.dtype, cpu_out.dtype)
    assert d.shape == cpu_out.shape, (d.shape, cpu_out.shape)
    t = tol(cpu_out.dtype) if cpu_out.dtype.is_floating_point else dict(rtol=0, atol=0)
    t.update(kw)
    torch.testing.assert_close(d, cpu_out, equal_nan=True, **t)


def to(dev, *ts):
    return [t.to(dev) if isinstance(t, torch.Tensor) else t for t in ts]


def both(fn, *inputs, device, **kw):
    """fn on CPU inputs and on copies moved to the device; outputs must match."""
    c = fn(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
    d = fn(*to(device, *inputs))
    check(d, c, **kw)
    return d


# ---------------------------------------------------------------- cat / stack

@pytest.mark.parametrize("dtype", ALL)
def test_cat_dtypes(device, dtype):
    a, b = make((3, 4), dtype, 1), make((3, 2), dtype, 2)
    both(lambda a, b: torch.cat([a, b], 1), a, b, device=device)
    both(lambda a, b: torch.cat([a.t(), b.t()], 0), a, b, device=device)  # non-contiguous inputs


def test_cat_promotion_empty_out(device):
    a, b = make((2, 3), torch.int32), make((2, 3), torch.float16, 1)
    both(lambda a, b: torch.cat([a, b]), a, b, device=device)
    e = torch.empty(0)
    both(lambda a, e: torch.cat([a, e, a], 1), make((2, 3), torch.float32), e, device=device)  # legacy skip
    both(lambda a: torch.cat([a[:, :0], a], 1), make((2, 3), torch.float32), device=device)
    out_c = torch.empty(4, 3)
    out_d = torch.empty(4, 3, device=device)
    a = make((2, 3), torch.float32)
    torch.cat([a, a], out=out_c)
    torch.cat([a.to(device), a.to(device)], out=out_d)
    check(out_d, out_c)
    both(lambda a, b: torch.stack([a, b], 1), make((2, 3), torch.float32), make((2, 3), torch.float32, 3),
         device=device)


# ---------------------------------------------------------------- advanced indexing

INDEX_CASES = {
    "int": lambda x, i, j, m: x[i],
    "int_2d": lambda x, i, j, m: x[i.reshape(2, 3)],
    "slice_int": lambda x, i, j, m: x[:, j],
    "adjacent": lambda x, i, j, m: x[:, j, j.remainder(4)],
    "nonadjacent": lambda x, i, j, m: x[i, :, j.remainder(4)],
    "none_int": lambda x, i, j, m: x[None, i],
    "int_none": lambda x, i, j, m: x[i, None, 1:],
    "int32": lambda x, i, j, m: x[i.int()],
    "scalar_tensor": lambda x, i, j, m: x[i[0]],
    "mask": lambda x, i, j, m: x[m],
    "mask_dim1": lambda x, i, j, m: x[:, m[0]],
    "mask_int": lambda x, i, j, m: x[m[:, 0], 1],
}


@pytest.mark.parametrize("case", list(INDEX_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_index(device, case, dtype):
    x = make((5, 6, 4), dtype)
    i, j = idx((6,), 5), idx((6,), 6, seed=2)
    m = make((5, 6), torch.bool, 3)
    both(lambda x, i, j, m: INDEX_CASES[case](x, i, j, m), x, i, j, m, device=device)


def test_index_noncontiguous(device):
    x = make((6, 5, 4), torch.float32).permute(2, 0, 1)
    i = idx((7,), 6)
    both(lambda x, i: x[:, i], x, i, device=device)
    both(lambda x, i: x[1:, i, ::2], x, i, device=device)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", SOME)
def test_index_put(device, dtype, accumulate):
    x = make((5, 4), dtype)
    i = torch.tensor([0, 2, -1, 2, 4, 0])  # duplicates
    v = make((6, 4), dtype, 5)
    if accumulate:
        both(lambda x, i, v: x.index_put_((i,), v, accumulate=True), x, i, v, device=device)
        both(lambda x, i, v: x.index_put((i,), v[0], accumulate=True), x, i, v, device=device)  # broadcast
        j = torch.tensor([1, 3, 3, 0, 1, 1])
        both(lambda x, i, j, v: x.index_put((i, j), v[:, 0], accumulate=True), x, i, j, v, device=device)
    else:
        u = torch.tensor([3, 1, 0])  # unique: the written value is defined
        both(lambda x, u, v: x.index_put_((u,), v[:3]), x, u, v, device=device)
        both(lambda x, u, v: torch.ops.aten.index_put(x, [None, u], v[:5, :1]), x, u, v, device=device)


def test_setitem(device):
    def f(x, i, m, v):
        x = x.clone()
        x[i] = v[0]
        x[m] = -1.0
        x[:, i[:2]] = 7.0
        x[x > 3] = 0.5
        return x

    both(f, make((6, 6), torch.float32), torch.tensor([4, 1, -2]), make((6, 6), torch.bool, 2),
         make((3, 6), torch.float32, 4), device=device)


# ---------------------------------------------------------------- dim-wise family

@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select_gather(device, dtype, dim):
    x = make((4, 5, 6), dtype)
    n = x.shape[dim]
    i = idx((7,), n, negative=False)  # PyTorch rejects negative indices here
    both(lambda x, i: x.index_select(dim, i), x, i, device=device)
    both(lambda x, i: x.transpose(0, 2).index_select(dim, i.remainder(x.transpose(0, 2).shape[dim])), x, i,
         device=device)
    shp = [3, 4, 5]
    shp[dim] = 7
    gi = idx(tuple(shp), n, seed=3, negative=False)
    both(lambda x, gi: torch.gather(x, dim, gi), x, gi, device=device)


@pytest.mark.parametrize("dtype", SOME)
def test_scatter_family(device, dtype):
    x = make((4, 5), dtype)
    src = make((4, 8), dtype, 2)
    i = idx((4, 8), 5, negative=False)  # duplicates along dim 1
    iu = torch.stack([torch.randperm(5, generator=torch.Generator().manual_seed(k))[:3] for k in range(4)])
    both(lambda x, iu, s: x.scatter(1, iu, s[:, :3]), x, iu, src, device=device)
    both(lambda x, iu: x.scatter(1, iu, 2), x, iu, device=device)
    if dtype != torch.bool:
        both(lambda x, i, s: x.scatter_add(1, i, s), x, i, src, device=device)
        both(lambda x, i, s: x.scatter(1, i, s, reduce="add"), x, i, src, device=device)
        both(lambda x, i, s: x.scatter(1, i, s, reduce="multiply"), x, i, src, device=device)
    for reduce in ["sum", "prod", "mean", "amax", "amin"]:
        if dtype == torch.bool and reduce in ("mean", "sum", "prod"):
            continue
        for include_self in (True, False):
            both(lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self), x, i, src,
                 device=device)
    both(lambda x, i, s: x.scatter_reduce(0, i[:, :5], s[:, :5], "amax"), x, i.remainder(4), src, device=device)


@pytest.mark.parametrize("dtype", SOME)
def test_index_add_copy_fill_reduce(device, dtype):
    x = make((5, 3), dtype)
    i = torch.tensor([4, 0, 4, 3, 2])  # duplicates; negatives are errors for these ops
    s = make((5, 3), dtype, 2)
    if dtype != torch.bool:
        both(lambda x, i, s: x.index_add(0, i, s), x, i, s, device=device)
        if dtype.is_floating_point:
            both(lambda x, i, s: x.index_add(0, i, s, alpha=0.5), x, i, s, device=device)
        both(lambda x, i, s: x.t().index_add(1, i, s.t(), alpha=2), x, i, s, device=device)
    iu = torch.tensor([3, 0, 1])
    both(lambda x, iu, s: x.index_copy(0, iu, s[:3]), x, iu, s, device=device)
    both(lambda x, i: x.index_fill(1, i[1:2], 1), x, i, device=device)
    both(lambda x: x.index_fill(0, torch.tensor([-1, 1], device=x.device), 1), x, device=device)  # wraps
    both(lambda x, i: x.index_fill_(0, i, torch.tensor(0, dtype=x.dtype, device=x.device)), x, i, device=device)
    if dtype not in (torch.bool,):
        for r in ["prod", "mean", "amax", "amin"]:
            for inc in (True, False):
                both(lambda x, i, s: x.index_reduce(0, i, s, r, include_self=inc), x, i, s, device=device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_take_put(device, dtype):
    x = make((4, 5), dtype)
    i = idx((3, 4), 20, seed=4)
    both(lambda x, i: torch.take(x, i), x, i, device=device)
    both(lambda x, i: x.t().take(i), x, i, device=device)
    iu = torch.tensor([[3, -1], [0, 7]])
    v = make((2, 2), dtype, 5)
    both(lambda x, iu, v: x.put_(iu, v), x, iu, v, device=device)
    if dtype != torch.bool:
        v2 = make((3, 4), dtype, 6)
        both(lambda x, i, v2: x.put_(i, v2, accumulate=True), x, i, v2, device=device)


# ---------------------------------------------------------------- data-dependent sizes

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8])
def test_nonzero_masked(device, dtype):
    x = make((4, 6), dtype)
    x[1, 2] = 0
    m = make((4, 6), torch.bool, 9)
    both(lambda x: torch.nonzero(x), x, device=device)
    both(lambda x: torch.nonzero(x, as_tuple=True), x, device=device)
    both(lambda x: x.t().nonzero(), x, device=device)
    both(lambda x: torch.count_nonzero(x), x, device=device)
    both(lambda x, m: x.masked_select(m), x, m, device=device)
    both(lambda x, m: x.masked_select(m[0]), x, m, device=device)  # broadcast mask
    src = make((24,), dtype, 7)
    both(lambda x, m, s: x.masked_scatter(m, s), x, m, src, device=device)
    both(lambda x: torch.nonzero(torch.zeros(3, 0, dtype=x.dtype, device=x.device)), x, device=device)


def test_nonzero_float_specials(device):
    x = torch.tensor([0.0, -0.0, float("nan"), 1e-30, float("inf")])
    both(lambda x: x.nonzero(), x, device=device)


# ---------------------------------------------------------------- shape ops / factories

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.bool])
def test_flip_roll_tril(device, dtype):
    x = make((3, 4, 5), dtype)
    both(lambda x: x.flip(0, 2), x, device=device)
    both(lambda x: x.transpose(0, 2).flip(-1), x, device=device)
    both(lambda x: x.roll(2, 1), x, device=device)
    both(lambda x: x.roll((1, -3), (0, 2)), x, device=device)
    both(lambda x: x.roll(7), x, device=device)
    for d in (-1, 0, 2):
        both(lambda x: x.tril(d), x, device=device)
        both(lambda x: x.triu(d), x, device=device)
        both(lambda x: x.clone().tril_(d), x, device=device)


def test_factories(device):
    for dt in (torch.float32, torch.int64, torch.bfloat16, torch.float64):
        check(torch.arange(2, 20, 3, dtype=dt, device=device), torch.arange(2, 20, 3, dtype=dt))
        check(torch.linspace(-1, 3, 11, dtype=dt, device=device), torch.linspace(-1, 3, 11, dtype=dt))
        check(torch.eye(3, 5, dtype=dt, device=device), torch.eye(3, 5, dtype=dt))
    check(torch.arange(0.5, 3.0, 0.25, device=device), torch.arange(0.5, 3.0, 0.25))
    check(torch.arange(7, device=device), torch.arange(7))
    check(torch.logspace(0, 2, 5, device=device), torch.logspace(0, 2, 5))
    check(torch.logspace(0, 3, 4, base=2, device=device), torch.logspace(0, 3, 4, base=2))
    for r, c, o in [(4, 3, 0), (3, 5, 1), (5, 4, -2)]:
        check(torch.tril_indices(r, c, o, device=device), torch.tril_indices(r, c, o))
        check(torch.triu_indices(r, c, o, device=device), torch.triu_indices(r, c, o))


def test_search_hist(device):
    b = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    v = make((3, 5), torch.float32)
    v[0, 0] = 0.5
    for right in (False, True):
        both(lambda v, b: torch.bucketize(v, b, right=right), v, b, device=device)
        both(lambda v, b: torch.searchsorted(b, v, right=right), v, b, device=device)
    both(lambda v, b: torch.bucketize(v, b, out_int32=True), v, b, device=device)
    seq = torch.sort(make((3, 6), torch.float32, 2), dim=1).values
    both(lambda seq, v: torch.searchsorted(seq, v, side="right"), seq, v, device=device)
    both(lambda v: torch.histc(v, bins=7), v, device=device)
    both(lambda v: torch.histc(v, bins=4, min=-1, max=1), v, device=device)


# ---------------------------------------------------------------- autograd

def grads(fn, *inputs, device):
    """Gradients of fn(*inputs).sum-like loss on CPU and on the device."""
    out = []
    for dev in ("cpu", device):
        xs = [t.detach().clone().to(dev).requires_grad_(t.is_floating_point()) for t in inputs]
        y = fn(*xs)
        w = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape).to(dev)
        (y * w).sum().backward()
        out.append([x.grad for x in xs if x.requires_grad])
    check(out[1], out[0], rtol=1e-5, atol=1e-5)


def test_backward_index_and_put(device):
    x = make((6, 4), torch.float32)
    i = torch.tensor([5, 0, 5, 2, -1])
    grads(lambda x: x[i.to(x.device)], x, device=device)  # index backward = index_put accumulate
    m = make((6, 4), torch.bool, 3)
    grads(lambda x: x[m.to(x.device)], x, device=device)
    grads(lambda x: x[:, i.remainder(4).to(x.device)], x, device=device)
    v = make((5, 4), torch.float32, 2)
    grads(lambda x, v: x.index_put((i.to(x.device),), v, accumulate=True), x, v, device=device)


def test_backward_gather_scatter_cat(device):
    x = make((4, 5), torch.float32)
    gi = idx((4, 7), 5, negative=False)
    grads(lambda x: torch.gather(x, 1, gi.to(x.device)), x, device=device)  # scatter_add
    s = make((4, 7), torch.float32, 3)
    grads(lambda x, s: x.scatter_add(1, gi.to(x.device), s), x, s, device=device)
    grads(lambda x: x.index_select(0, torch.tensor([3, 3, 1]).to(x.device)), x, device=device)
    grads(lambda x, s: torch.cat([x, s, x], 1), x, s, device=device)
    grads(lambda x, s: torch.stack([x, s[:, :5]]), x, s, device=device)
    grads(lambda x: x.flip(1).roll(2, 0).tril(), x, device=device)
    grads(lambda x: x.unfold(1, 3, 1), x, device=device)  # unfold_backward
    grads(lambda x: x.masked_select(x > 0), x, device=device)


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("scale", [False, True])
def test_embedding_backward(device, padding_idx, scale):
    w = make((7, 5), torch.float32)
    i = torch.tensor([[1, 2, 1, 6], [0, 2, 2, 1]])
    grads(lambda w: F.embedding(i.to(w.device), w, padding_idx=padding_idx, scale_grad_by_freq=scale), w,
          device=device)


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("op", [
    lambda x, d: x[torch.tensor([7], device=d)],
    lambda x, d: x.index_select(0, torch.tensor([-6], device=d)),
    lambda x, d: torch.gather(x, 1, torch.tensor([[0], [4]], device=d)),
    lambda x, d: x.scatter_add(0, torch.tensor([[9, 0, 0, 0]], device=d), torch.ones(1, 4, device=d)),
    lambda x, d: x.index_put((torch.tensor([5], device=d),), torch.tensor(1.0, device=d)),
    lambda x, d: x.index_add(0, torch.tensor([5], device=d), torch.ones(1, 4, device=d)),
    lambda x, d: torch.take(x, torch.tensor([20], device=d)),
])
def test_bad_index_raises(device, op):
    # CPU's exception type: RuntimeError for gather/scatter, IndexError for the others
    with pytest.raises((IndexError, RuntimeError)) as cpu_err:
        op(torch.zeros(5, 4), "cpu")
    x = torch.zeros(5, 4, device=device)
    with pytest.raises(type(cpu_err.value), match="out of (bounds|range)"):
        op(x, device).cpu()
