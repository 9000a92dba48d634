"""Views on the device are metadata only (DESIGN.md §2.3): they share storage
with their base, carry the same sizes/strides/offset as CPU's, and writes go
through in both directions."""
import pytest
import torch

from conftest import sync

# (name, fn) — fn maps a (2, 3, 4) float tensor to a view of it.
VIEWS = [
    ("view", lambda x: x.view(6, 4)),
    ("view_flat", lambda x: x.view(-1)),
    ("view_dtype", lambda x: x.view(torch.int32)),
    ("reshape_contig", lambda x: x.reshape(3, 8)),
    ("flatten", lambda x: x.flatten(1)),
    ("unflatten", lambda x: x.unflatten(2, (2, 2))),
    ("transpose", lambda x: x.transpose(0, 2)),
    ("swapaxes", lambda x: x.swapaxes(1, 2)),
    ("permute", lambda x: x.permute(2, 0, 1)),
    ("movedim", lambda x: x.movedim(0, -1)),
    ("t", lambda x: x[0].t()),
    ("mT", lambda x: x.mT),
    ("slice", lambda x: x[:, 1:3]),
    ("slice_step", lambda x: x[:, :, ::2]),
    ("slice_last", lambda x: x[1, 2, 1:]),
    ("select", lambda x: x[1]),
    ("select_dim", lambda x: x.select(2, 3)),
    ("index_none", lambda x: x[None, :, None]),
    ("ellipsis", lambda x: x[..., 1]),
    ("expand", lambda x: x[:, :1].expand(2, 5, 4)),
    ("expand_new_dim", lambda x: x.expand(3, 2, 3, 4)),
    ("narrow", lambda x: x.narrow(2, 1, 2)),
    ("unsqueeze", lambda x: x.unsqueeze(1)),
    ("squeeze", lambda x: x[:, :1].squeeze(1)),
    ("squeeze_all", lambda x: x[:1, :1].squeeze()),
    ("as_strided", lambda x: x.as_strided((3, 3), (4, 1), 2)),
    ("as_strided_overlap", lambda x: x.as_strided((4, 4), (1, 1), 1)),
    ("unbind", lambda x: x.unbind(1)[2]),
    ("split", lambda x: x.split(2, dim=2)[1]),
    ("split_sizes", lambda x: x.split([1, 2], dim=1)[1]),
    ("chunk", lambda x: x.chunk(3, dim=1)[2]),
    ("tensor_split", lambda x: x.tensor_split(2, dim=2)[1]),
    ("diagonal", lambda x: x.diagonal(offset=1, dim1=1, dim2=2)),
    ("unfold", lambda x: x.unfold(2, 2, 1)),
    ("view_of_transpose", lambda x: x.transpose(1, 2)[:, 1:].select(0, 1)),
    ("alias", lambda x: x.view_as(x)),
    ("detach", lambda x: x.detach()),
]


def _base_tensor(device):
    return torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).to(device)


def _storage_ptr(t):
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("name,fn", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_is_metadata(name, fn, device):
    x_cpu = _base_tensor("cpu")
    x = _base_tensor(device)
    v_cpu, v = fn(x_cpu), fn(x)
    assert v.device.type == torch.device(device).type
    assert _storage_ptr(v) == _storage_ptr(x), f"{name} copied"
    if v_cpu._base is not None:  # CPU tracks it as a view (not detach, view(dtype))
        assert v._base is (x if x._base is None else x._base), f"{name}: _base not set"
    else:
        assert v._base is None
    assert v.shape == v_cpu.shape
    assert v.stride() == v_cpu.stride()
    assert v.storage_offset() == v_cpu.storage_offset()
    assert v.is_contiguous() == v_cpu.is_contiguous()
    assert v.dtype == v_cpu.dtype
    assert torch.equal(v.cpu(), v_cpu)


@pytest.mark.parametrize("name,fn", VIEWS, ids=[v[0] for v in VIEWS])
def test_write_through_view(name, fn, device):
    """An in-place op on the view changes the base exactly as on CPU."""
    x_cpu, x = _base_tensor("cpu"), _base_tensor(device)
    v_cpu, v = fn(x_cpu), fn(x)
    if v.dtype == torch.int32:
        op = lambda t: t.add_(7)  # noqa: E731
    else:
        op = lambda t: t.mul_(2).add_(1)  # noqa: E731
    try:
        op(v_cpu)
    except RuntimeError as e:
        # CPU refuses writes to overlapping views; the device must refuse too.
        with pytest.raises(RuntimeError):
            op(v)
            sync(device)
        assert "overlap" in str(e) or "single memory location" in str(e)
        return
    op(v)
    sync(device)
    assert torch.equal(x.cpu(), x_cpu), f"base after in-place through {name}"
    assert torch.equal(v.cpu(), v_cpu)


@pytest.mark.parametrize("name,fn", VIEWS, ids=[v[0] for v in VIEWS])
def test_base_write_seen_by_view(name, fn, device):
    x = _base_tensor(device)
    v = fn(x)
    x.zero_()
    sync(device)
    assert not v.cpu().any(), name
    x.fill_(3.0)
    x_cpu = torch.full((2, 3, 4), 3.0)
    assert torch.equal(v.cpu(), fn(x_cpu))


def test_examples_from_brief(device):
    x_cpu = torch.arange(20, dtype=torch.float32).reshape(5, 4)
    x = x_cpu.to(device)
    for t in (x_cpu, x):
        t[1:3].add_(1)
        t.t().mul_(2)
        t[:, 1].sub_(5)
        t.diagonal().fill_(-1)
        t[::2, ::3].neg_()
    sync(device)
    assert torch.equal(x.cpu(), x_cpu)


def test_chain_of_views_shares_one_storage(device):
    x = torch.randn(4, 6, 8).to(device)
    y = x.transpose(0, 1)[1:5].reshape(4, 4, 8)  # transpose+slice: not viewable -> copy
    y_cpu = x.cpu().transpose(0, 1)[1:5].reshape(4, 4, 8)
    assert torch.equal(y.cpu(), y_cpu)
    z = x[1:3].permute(2, 0, 1).unsqueeze(0)[0, ::2]
    assert _storage_ptr(z) == _storage_ptr(x)
    assert z._base is x
    z.add_(100)
    sync(device)
    ref = x.cpu()
    assert (ref[1:3, :, ::2] > 50).all() and (ref[0] < 50).all() and (ref[:, :, 1::2] < 50).all()


def test_reshape_copies_exactly_when_cpu_does(device):
    x_cpu = torch.arange(24.0).reshape(2, 3, 4)
    x = x_cpu.to(device)
    for fn in (lambda t: t.reshape(6, 4), lambda t: t.transpose(0, 1).reshape(6, 4),
               lambda t: t[:, :, ::2].reshape(-1), lambda t: t.permute(1, 0, 2).reshape(3, 8),
               lambda t: t.contiguous(), lambda t: t.transpose(1, 2).contiguous()):
        r_cpu, r = fn(x_cpu), fn(x)
        cpu_view = _storage_ptr(r_cpu) == _storage_ptr(x_cpu)
        dev_view = _storage_ptr(r) == _storage_ptr(x)
        assert cpu_view == dev_view
        assert r.stride() == r_cpu.stride()
        assert torch.equal(r.cpu(), r_cpu)


def test_view_of_non_contiguous_rejected_like_cpu(device):
    x = torch.randn(3, 4).to(device)
    with pytest.raises(RuntimeError):
        x.t().view(12)


def test_copy_into_strided_view(device):
    x_cpu = torch.zeros(4, 6)
    x = x_cpu.to(device)
    src = torch.arange(9.0).reshape(3, 3)
    x_cpu[1:, ::2].t().copy_(src)
    x[1:, ::2].t().copy_(src.to(device))
    sync(device)
    assert torch.equal(x.cpu(), x_cpu)
