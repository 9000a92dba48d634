"""Random ops on the device: moments over 1e6 samples, ranges per dtype,
reproducibility under torch.manual_seed, different seeds differ, dropout's
mask and scale, and bad arguments raising."""
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import sync

N = 1_000_000


def stats(t):
    t = t.cpu().double()
    return t.mean().item(), t.std().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_uniform(device, dtype):
    x = torch.empty(N, dtype=dtype, device=device).uniform_(-2, 3)
    m, s = stats(x)
    assert abs(m - 0.5) < 0.02 and abs(s - 5 / math.sqrt(12)) < 0.02
    c = x.cpu()
    assert c.min() >= -2 and c.max() <= 3
    r = torch.rand(1000, 3, device=device, dtype=dtype).cpu()
    assert r.min() >= 0 and r.max() <= 1 and r.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_normal(device, dtype):
    m, s = stats(torch.empty(N, dtype=dtype, device=device).normal_(1.5, 2.0))
    assert abs(m - 1.5) < 0.02 and abs(s - 2.0) < 0.02
    m, s = stats(torch.randn(N, device=device, dtype=dtype))
    assert abs(m) < 0.01 and abs(s - 1) < 0.01


def test_normal_tensor_forms(device):
    mean = torch.tensor([-5.0, 0.0, 5.0], device=device).repeat(N // 3)
    std = torch.tensor([0.5, 1.0, 2.0], device=device).repeat(N // 3)
    for x, sd in ((torch.normal(mean, std), [0.5, 1.0, 2.0]), (torch.normal(mean, 1.0), [1.0] * 3),
                  (torch.normal(0.0, std), [0.5, 1.0, 2.0])):
        x = x.cpu().view(-1, 3)
        for k in range(3):
            assert abs(x[:, k].std().item() - sd[k]) < 0.03
    x = torch.normal(mean, std).cpu().view(-1, 3)
    assert abs(x[:, 0].mean().item() + 5) < 0.02 and abs(x[:, 2].mean().item() - 5) < 0.03


def test_bernoulli(device):
    x = torch.empty(N, device=device).bernoulli_(0.3)
    assert set(x.cpu().unique().tolist()) <= {0.0, 1.0}
    assert abs(x.cpu().mean().item() - 0.3) < 0.005
    p = torch.tensor([0.1, 0.9], device=device).repeat(N // 2)
    y = torch.bernoulli(p).cpu().view(-1, 2)
    assert abs(y[:, 0].mean().item() - 0.1) < 0.005 and abs(y[:, 1].mean().item() - 0.9) < 0.005
    z = torch.empty(N, device=device).bernoulli_(p)
    assert abs(z.cpu().view(-1, 2)[:, 1].mean().item() - 0.9) < 0.005
    b = torch.empty(1000, dtype=torch.bool, device=device).bernoulli_(0.5).cpu()
    assert b.dtype == torch.bool and 300 < b.sum().item() < 700


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int8, torch.float32, torch.bool],
                         ids=str)
def test_random_(device, dtype):
    x = torch.empty(100_000, dtype=dtype, device=device)
    lo, hi = (0, 2) if dtype == torch.bool else (-3, 5) if dtype not in (torch.uint8,) else (3, 9)
    v = x.random_(lo, hi).cpu()
    assert v.min().item() == lo and v.max().item() == hi - 1
    v = x.random_(hi).cpu()
    assert v.min().item() == 0 and v.max().item() == hi - 1
    v = x.random_().cpu().double()
    top = {torch.int64: 2**63 - 1, torch.int32: 2**31 - 1, torch.uint8: 255, torch.int8: 127,
           torch.float32: 2**24, torch.bool: 1}[dtype]
    assert v.min().item() >= 0 and v.max().item() <= top and v.max().item() > top * 0.9
    assert torch.equal(v, v.round())


def test_exponential_and_friends(device):
    m, s = stats(torch.empty(N, device=device).exponential_(2.0))
    assert abs(m - 0.5) < 0.01 and abs(s - 0.5) < 0.01
    g = torch.empty(N, device=device).geometric_(0.25).cpu()
    assert g.min().item() >= 1 and abs(g.mean().item() - 4.0) < 0.05
    ln = torch.empty(N, device=device).log_normal_(0.0, 0.5).cpu()
    assert abs(ln.log().mean().item()) < 0.01 and abs(ln.log().std().item() - 0.5) < 0.01
    c = torch.empty(N, device=device).cauchy_(1.0, 2.0).cpu()
    assert abs(c.median().item() - 1.0) < 0.02


def test_reproducible_and_seed_dependent(device):
    torch.manual_seed(1234)
    a = torch.rand(10_000, device=device).cpu()
    b = torch.randn(10_000, device=device).cpu()
    torch.manual_seed(1234)
    a2 = torch.rand(10_000, device=device).cpu()
    b2 = torch.randn(10_000, device=device).cpu()
    assert torch.equal(a, a2) and torch.equal(b, b2)
    torch.manual_seed(4321)
    a3 = torch.rand(10_000, device=device).cpu()
    assert not torch.equal(a, a3)
    # consecutive draws differ (the counter advances)
    torch.manual_seed(1234)
    c1 = torch.rand(1000, device=device).cpu()
    c2 = torch.rand(1000, device=device).cpu()
    assert not torch.equal(c1, c2)
    # an explicit generator
    g = torch.Generator(device=device)
    g.manual_seed(5)
    e1 = torch.empty(100, device=device).uniform_(generator=g).cpu()
    g.manual_seed(5)
    e2 = torch.empty(100, device=device).uniform_(generator=g).cpu()
    assert torch.equal(e1, e2)


def test_dropout(device):
    x = torch.ones(N, device=device)
    torch.manual_seed(0)
    y = F.dropout(x, p=0.3, training=True).cpu()
    zero = (y == 0).double().mean().item()
    assert abs(zero - 0.3) < 0.005
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.7))
    out, mask = torch.ops.aten.native_dropout(x, 0.3, True)
    assert mask.dtype == torch.bool
    assert torch.equal(out.cpu() != 0, mask.cpu())
    grad = torch.ops.aten.native_dropout_backward(torch.full_like(x, 2.0), mask, 1 / 0.7)
    assert torch.allclose(grad.cpu(), mask.cpu().float() * 2.0 / 0.7)
    assert torch.equal(F.dropout(x, p=0.3, training=False).cpu(), x.cpu())
    # autograd through dropout
    xr = torch.randn(1000, device=device, requires_grad=True)
    yr = F.dropout(xr, p=0.5)
    yr.sum().backward()
    keep = (yr.detach().cpu() != 0)
    assert torch.allclose(xr.grad.cpu()[keep], torch.full((int(keep.sum()),), 2.0))


def test_bad_arguments(device):
    with pytest.raises(Exception):
        torch.empty(10, device=device).normal_(0, -1.0)
        sync(device)
    with pytest.raises(Exception):
        torch.empty(10, device=device).bernoulli_(1.5)
        sync(device)
    with pytest.raises(Exception):
        torch.empty(10, device=device).uniform_(3, 2)
        sync(device)
