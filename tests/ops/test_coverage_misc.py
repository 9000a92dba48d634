"""Coverage additions checked against PyTorch CPU: 3-D pooling kernels (avg_pool3d, adaptive_avg_pool3d
and their backward, the backward of max_pool3d / adaptive_max_pool3d), and the Python decompositions
of torch_tpu/decompositions.py for ops with data-dependent shapes (unique, unique_consecutive) and
linalg.matrix_exp."""
import pytest
import torch
import torch.nn.functional as F


def rnd(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def fwd_bwd(fn, x, device, rtol=1e-5, atol=1e-5):
    xc = x.clone().requires_grad_()
    xd = x.to(device).requires_grad_()
    yc, yd = fn(xc), fn(xd)
    torch.testing.assert_close(yd.detach().cpu(), yc.detach(), rtol=rtol, atol=atol)
    g = rnd(*yc.shape, seed=9)
    yc.backward(g)
    yd.backward(g.to(device))
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=(2, 3, 2), stride=(1, 2, 1), ceil_mode=True),
                                dict(kernel_size=3, padding=1, count_include_pad=False),
                                dict(kernel_size=2, divisor_override=3)])
@pytest.mark.parametrize("shape", [(2, 3, 5, 6, 7), (3, 4, 5, 6)])
def test_avg_pool3d(device, kw, shape):
    x = rnd(*shape)
    fwd_bwd(lambda t: F.avg_pool3d(t, **kw), x, device)
    fwd_bwd(lambda t: F.avg_pool3d(t, **kw), x.transpose(-1, -3).contiguous().transpose(-1, -3), device)


def test_avg_pool3d_int_and_16bit(device):
    xi = torch.randint(-50, 50, (2, 3, 4, 4, 4))
    torch.testing.assert_close(F.avg_pool3d(xi.to(device), 2).cpu(), F.avg_pool3d(xi, 2))
    xh = rnd(2, 3, 4, 4, 4, dtype=torch.bfloat16)
    torch.testing.assert_close(F.adaptive_avg_pool3d(xh.to(device), 3).cpu(), F.adaptive_avg_pool3d(xh, 3),
                               rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("out", [1, 3, (2, 5, 4), (7, 6, 9)])
def test_adaptive_pool3d(device, out):
    x = rnd(2, 3, 5, 6, 7)
    fwd_bwd(lambda t: F.adaptive_avg_pool3d(t, out), x, device)
    fwd_bwd(lambda t: F.adaptive_max_pool3d(t, out), x, device)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, dilation=1),
                                dict(kernel_size=2, stride=1, dilation=2, ceil_mode=True)])
def test_max_pool3d_backward(device, kw):
    fwd_bwd(lambda t: F.max_pool3d(t, **kw), rnd(2, 2, 6, 7, 5), device)


def test_bad_indices_raise(device):
    g = torch.ones(1, 1, 1, 1, 1, device=device)
    x = torch.zeros(1, 1, 2, 2, 2, device=device)
    idx = torch.tensor([99]).reshape(1, 1, 1, 1, 1).to(device)
    with pytest.raises(Exception):
        torch.ops.aten.adaptive_max_pool3d_backward(g, x, idx)
        torch.tpu.synchronize()


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
def test_unique(device, dtype):
    x = torch.randint(0, 5, (4, 6), generator=torch.Generator().manual_seed(3)).to(dtype)
    for kw in (dict(), dict(return_inverse=True), dict(return_counts=True),
               dict(return_inverse=True, return_counts=True)):
        c = torch.unique(x, sorted=True, **kw)
        d = torch.unique(x.to(device), sorted=True, **kw)
        for e, g in zip(c if isinstance(c, tuple) else (c,), d if isinstance(d, tuple) else (d,)):
            assert torch.equal(g.cpu(), e)
        c = torch.unique_consecutive(x, **kw)
        d = torch.unique_consecutive(x.to(device), **kw)
        for e, g in zip(c if isinstance(c, tuple) else (c,), d if isinstance(d, tuple) else (d,)):
            assert torch.equal(g.cpu(), e)
        for dim in (0, 1, -1):
            c = torch.unique_consecutive(x, dim=dim, **kw)
            d = torch.unique_consecutive(x.to(device), dim=dim, **kw)
            for e, g in zip(c if isinstance(c, tuple) else (c,), d if isinstance(d, tuple) else (d,)):
                assert torch.equal(g.cpu(), e)
    empty = torch.empty(0, dtype=dtype)
    assert torch.unique(empty.to(device), return_counts=True)[1].numel() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matrix_exp(device, dtype):
    for scale in (0.1, 1.0, 20.0):
        a = rnd(3, 4, 4, dtype=dtype) * scale
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(torch.linalg.matrix_exp(a.to(device)).cpu(), torch.linalg.matrix_exp(a), **tol)
    fwd_bwd(torch.linalg.matrix_exp, rnd(2, 3, 3, dtype=dtype), device, rtol=1e-4, atol=1e-4)
