"""Complex scatter_add / scatter_reduce / index_reduce on tpu against PyTorch CPU: the index engine
accumulates complex elements (sum, product, mean); what CPU refuses for complex (amax/amin, and
index_reduce without self) is refused at the call in CPU's words."""
import pytest
import torch

DTYPES = [torch.complex64, torch.complex128]


def _inputs(dt, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 5, dtype=dt, generator=g)
    idx = torch.randint(0, 4, (3, 5), generator=g)
    src = torch.randn(3, 5, dtype=dt, generator=g)
    return x, idx, src


def _close(got, want):
    tol = 1e-12 if want.dtype == torch.complex128 else 1e-5
    assert got.device.type == "tpu" and got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("dt", DTYPES)
def test_scatter_add(dt, tpu, eager_mode):
    x, idx, src = _inputs(dt)
    for dim in (0, 1):
        i = idx if dim == 0 else idx.clamp(max=4)
        _close(x.to(tpu).scatter_add(dim, i.to(tpu), src.to(tpu)), x.scatter_add(dim, i, src))
    y = x.to(tpu)
    y.scatter_add_(0, idx.to(tpu), src.to(tpu))  # in place
    _close(y, x.scatter_add(0, idx, src))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(dt, reduce, include_self, tpu, eager_mode):
    x, idx, src = _inputs(dt, 1)
    want = x.scatter_reduce(0, idx, src, reduce, include_self=include_self)
    _close(x.to(tpu).scatter_reduce(0, idx.to(tpu), src.to(tpu), reduce, include_self=include_self), want)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduce", ["prod", "mean"])
def test_index_reduce(dt, reduce, tpu, eager_mode):
    x, _, src = _inputs(dt, 2)
    index = torch.tensor([0, 3, 0])
    _close(x.to(tpu).index_reduce(0, index.to(tpu), src.to(tpu), reduce), x.index_reduce(0, index, src, reduce))


@pytest.mark.parametrize(
    "call",
    [
        lambda x, i, s: x.scatter_reduce(0, i, s, "amax"),
        lambda x, i, s: x.scatter_reduce(0, i, s, "amin", include_self=False),
        lambda x, i, s: x.index_reduce(0, i[0, :3], s, "amin"),
        lambda x, i, s: x.index_reduce(0, i[0, :3], s, "prod", include_self=False),
    ],
)
def test_refused_as_cpu_refuses(call, tpu, eager_mode):
    x, idx, src = _inputs(torch.complex64, 3)
    with pytest.raises(NotImplementedError) as want:
        call(x, idx, src)
    with pytest.raises(NotImplementedError) as got:
        call(x.to(tpu), idx.to(tpu), src.to(tpu))
    assert str(got.value) == str(want.value)
