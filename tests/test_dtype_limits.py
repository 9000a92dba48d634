"""The unsigned dtypes wider than uint8 (uint16/uint32/uint64) do on tpu what they do on CPU
(factories, copies and casts, eq/ne, mul, true division, bitwise ops, sum, prod, cumsum, any, all,
cat, indexing, sort, unique) and raise where CPU raises; tensors
of more than 16 dimensions (TPURT_MAX_DIMS, the runtime's fixed tensor descriptor; CPU allows 64)
move between CPU and tpu and view, and every op on them raises NotImplementedError naming the limit
at the call, with the process working after."""
import pytest
import torch

UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
MAX = {torch.uint16: 2**16 - 1, torch.uint32: 2**32 - 1, torch.uint64: 2**64 - 1}


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_copies_round_trip(dtype, tpu):
    x = torch.tensor([0, 1, 2**15 + 3, 2**15 - 1], dtype=dtype)
    x = torch.cat([x, torch.full((1,), MAX[dtype], dtype=dtype)]) if dtype != torch.uint64 else x
    t = x.to(tpu)
    assert t.dtype == dtype and t.device.type == "tpu"
    assert torch.equal(t.cpu(), x)
    assert torch.equal(t[1:3].cpu(), x[1:3])  # a view: metadata only
    assert torch.equal(torch.tensor(x.tolist(), dtype=dtype, device=tpu).cpu(), x)


def _same(got, want):
    assert got.device.type == "tpu"
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_ops_match_cpu(dtype, tpu, eager_mode):
    # what CPU runs on uint16/32/64: factories, copies and casts, eq/ne, mul, bitwise, sum, prod,
    # cumsum, any, all, cat/stack, indexing, true division, sort, unique
    top = MAX[dtype]
    a = torch.tensor([[0, 1, 2**15 + 3], [top, top - 1, 7]], dtype=dtype)
    b = torch.tensor([[5, 1, 2**15 + 3], [top, 3, 2]], dtype=dtype)
    at, bt = a.to(tpu), b.to(tpu)
    _same(torch.zeros(2, 3, dtype=dtype, device=tpu), torch.zeros(2, 3, dtype=dtype))
    _same(torch.ones(4, dtype=dtype, device=tpu), torch.ones(4, dtype=dtype))
    _same(torch.full((3,), 2**15 + 9, dtype=dtype, device=tpu), torch.full((3,), 2**15 + 9, dtype=dtype))
    _same(torch.zeros_like(at), torch.zeros_like(a))
    _same(at.clone(), a.clone())
    _same(at.t().contiguous(), a.t().contiguous())
    for other in (torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool, torch.int32):
        _same(at.to(other), a.to(other))
    for src in (torch.tensor([[0, 3, 250], [65535, -1, 12]]), torch.tensor([[0.0, 3.7, 250.0], [65535.0, 1e4, 12.5]])):
        _same(src.to(tpu).to(dtype), src.to(dtype))
    _same(at == bt, a == b)
    _same(at != bt, a != b)
    _same(at == 7, a == 7)
    _same(at != 1, a != 1)
    _same(at * bt, a * b)  # wraps as CPU
    _same(at * 3, a * 3)
    _same(at / bt, a / b)  # true division: float32, as CPU
    _same(at / 3, a / 3)
    for fn in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        _same(fn(at, bt), fn(a, b))
    _same(at & 6, a & 6)
    _same(at.sum(), a.sum())
    _same(at.sum(0), a.sum(0))
    _same(at.sum(1, keepdim=True), a.sum(1, keepdim=True))
    _same(bt[:, 1:].prod(1), b[:, 1:].prod(1))
    _same(at.cumsum(1), a.cumsum(1))
    for fn in (torch.any, torch.all, lambda t: t.any(1), lambda t: t.all(0)):
        _same(fn(at), fn(a))
    _same(at[1], a[1])  # a view
    _same(torch.cat([at, bt]), torch.cat([a, b]))
    _same(torch.stack([at, bt], 1), torch.stack([a, b], 1))
    mask = torch.tensor([[True, False, True], [True, True, False]])
    _same(at[mask.to(tpu)], a[mask])
    idx = torch.tensor([[1, 0], [0, 1]])
    _same(at[idx.to(tpu)], a[idx])
    _same(at[:, idx[0].to(tpu)], a[:, idx[0]])
    # sort orders them unsigned (uint64 above 2^63 too); unique sorts
    for fn in (lambda t: t.sort(), lambda t: t.sort(descending=True), lambda t: t.sort(dim=0, stable=True),
               lambda t: t.argsort(dim=1), lambda t: torch.unique(t, return_inverse=True, return_counts=True)):
        got, want = fn(at), fn(a)
        got, want = ([got], [want]) if isinstance(want, torch.Tensor) else (list(got), list(want))
        for g, w in zip(got, want):
            _same(g, w)
    x = torch.zeros(3, dtype=dtype, device=tpu)
    x.fill_(top)
    _same(x, torch.full((3,), top, dtype=dtype))
    x.copy_(at[1])
    _same(x, a[1].clone())


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_unsupported_raise_like_cpu(dtype, tpu, eager_mode):
    # what CPU does not run on these dtypes raises at the call on tpu too, with CPU's exception type
    a = torch.tensor([1, 2, 3], dtype=dtype)
    at = a.to(tpu)
    for fn in (lambda t: t + t, lambda t: t < t, lambda t: -t, lambda t: t.max(), lambda t: t.flip(0),
               lambda t: t + torch.ones(3, dtype=torch.int64, device=t.device),
               lambda t: torch.div(t, t, rounding_mode="floor"), lambda t: torch.div(t, 2, rounding_mode="trunc"),
               lambda t: t.div_(t)):
        with pytest.raises(Exception) as cpu_err:
            fn(a)
        with pytest.raises(type(cpu_err.value)):
            fn(at)
    assert torch.equal((torch.ones(3, device=tpu) + 1).cpu(), torch.full((3,), 2.0))


def test_more_than_16_dims(tpu, eager_mode):
    shape = [1] * 18 + [2, 3]
    x = torch.arange(6, dtype=torch.float32).view(shape)
    t = x.to(tpu)
    assert t.shape == x.shape and torch.equal(t.cpu(), x)
    assert torch.equal(torch.arange(6.0, device=tpu).view(shape).cpu(), x)  # a view of 20 dims
    # elementwise, fills, random fills and whole-tensor reductions take them folded
    # (size-1 dims dropped, runs merged), as CPU computes them
    assert torch.equal((t + 1).cpu(), x + 1)
    assert torch.allclose((t * t.exp()).cpu(), x * x.exp())
    assert t.sum().item() == x.sum().item() and t.amax().item() == x.amax().item()
    assert torch.equal(torch.zeros(shape, device=tpu).cpu(), torch.zeros(shape))
    u = torch.empty(shape, device=tpu).uniform_(2, 3).cpu()
    assert u.shape == x.shape and bool(((u >= 2) & (u < 3)).all())
    # what folding cannot bring to 16 dims, or an op with a dim argument, is refused, naming the count
    for fn in (lambda: t.sum(-1), lambda: t.flip(0)):
        with pytest.raises(NotImplementedError, match="20 dimensions are not supported on the tpu device"):
            fn()
    p = torch.randn([2] * 17).permute(*reversed(range(17)))  # no two dims merge
    with pytest.raises(NotImplementedError, match="17 dimensions are not supported on the tpu device"):
        p.to(tpu).exp()
    # CPU computes them: the limit is the device's, not PyTorch's
    assert torch.equal(x + 1, (x + 1).cpu())
    # at 16 dims everything works, as on CPU
    s16 = [1] * 14 + [2, 3]
    y = torch.arange(6.0).view(s16)
    assert torch.equal((y.to(tpu) * 2 + 1).sum(-1).cpu(), (y * 2 + 1).sum(-1))
