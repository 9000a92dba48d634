"""Autograd and torch.optim on the device against PyTorch CPU from identical
initial values; host<->device round trips of tensors and modules.

Tolerance: float32 with a different summation order in matmul/reductions gives
last-bit differences that a few optimizer steps carry along; rtol 1e-4 /
atol 1e-5 is honest for a handful of steps on O(1) values."""
import copy

import pytest
import torch
from torch import nn

RTOL, ATOL = 1e-4, 1e-5


def _composite(x, w, b):
    h = torch.tanh(x @ w + b) * torch.sigmoid(x @ w)
    h = h - h.mean(dim=-1, keepdim=True)
    h = h / (h.var(dim=-1, keepdim=True, unbiased=False) + 1e-5).sqrt()
    p = torch.log_softmax(h, dim=-1)
    return (p.exp() * p).sum() + (h ** 2).clamp(max=3).mean() + torch.relu(h).max()


def test_composite_function_grads(device):
    torch.manual_seed(0)
    args_cpu = [torch.randn(6, 8, requires_grad=True), torch.randn(8, 5, requires_grad=True),
                torch.randn(5, requires_grad=True)]
    args_dev = [a.detach().to(device).requires_grad_() for a in args_cpu]
    out_cpu, out_dev = _composite(*args_cpu), _composite(*args_dev)
    torch.testing.assert_close(out_dev.cpu(), out_cpu.detach(), rtol=RTOL, atol=ATOL)
    out_cpu.backward()
    out_dev.backward()
    for a_dev, a_cpu in zip(args_dev, args_cpu):
        assert a_dev.grad is not None and a_dev.grad.device == a_dev.device
        torch.testing.assert_close(a_dev.grad.cpu(), a_cpu.grad, rtol=RTOL, atol=ATOL)


def test_grad_accumulates_and_retain_graph(device):
    x_cpu = torch.randn(4, 3, requires_grad=True)
    x = x_cpu.detach().to(device).requires_grad_()
    for t in (x_cpu, x):
        y = (t * t).sum()
        y.backward(retain_graph=True)
        y.backward()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)
    torch.testing.assert_close(x.grad.cpu(), 4 * x_cpu.detach())


def test_autograd_grad_higher_order(device):
    x_cpu = torch.randn(5, requires_grad=True)
    x = x_cpu.detach().to(device).requires_grad_()
    res = []
    for t in (x_cpu, x):
        (g,) = torch.autograd.grad(torch.sin(t).pow(3).sum(), t, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), t)
        res.append((g.detach().cpu(), gg.cpu()))
    torch.testing.assert_close(res[1][0], res[0][0], rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(res[1][1], res[0][1], rtol=RTOL, atol=ATOL)


def _mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 8))


OPTIMS = {
    "sgd_momentum": lambda p, fe: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4,
                                                  foreach=fe),
    "sgd_nesterov": lambda p, fe: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                                  foreach=fe),
    "adam": lambda p, fe: torch.optim.Adam(p, lr=1e-2, foreach=fe),
    "adamw": lambda p, fe: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=fe),
    "adamw_amsgrad": lambda p, fe: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, foreach=fe),
}


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "foreach"])
@pytest.mark.parametrize("name", list(OPTIMS))
def test_optimizer_matches_cpu(name, foreach, device):
    torch.manual_seed(0)
    model_cpu = _mlp()
    model_dev = copy.deepcopy(model_cpu).to(device)
    opt_cpu = OPTIMS[name](model_cpu.parameters(), foreach)
    opt_dev = OPTIMS[name](model_dev.parameters(), foreach)
    g = torch.Generator().manual_seed(1)
    for step in range(6):
        x, y = torch.randn(12, 16, generator=g), torch.randn(12, 8, generator=g)
        losses = []
        for model, opt, dev in ((model_cpu, opt_cpu, "cpu"), (model_dev, opt_dev, device)):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=RTOL, abs=ATOL), f"step {step}"
    for (n, p_cpu), p_dev in zip(model_cpu.named_parameters(), model_dev.parameters()):
        assert p_dev.device.type == torch.device(device).type
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=RTOL, atol=ATOL,
                                   msg=lambda m: f"{name} foreach={foreach} param {n}: {m}")
    # optimizer state lives on the device too
    for st in opt_dev.state.values():
        for k, v in st.items():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert v.device.type == torch.device(device).type, k


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "foreach"])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm(foreach, norm_type, device):
    torch.manual_seed(0)
    model_cpu = _mlp()
    model_dev = copy.deepcopy(model_cpu).to(device)
    x, y = torch.randn(12, 16) * 10, torch.randn(12, 8)
    norms = []
    for model, dev in ((model_cpu, "cpu"), (model_dev, device)):
        nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        norms.append(nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5, norm_type=norm_type,
                                              foreach=foreach))
    assert norms[1].device.type == torch.device(device).type
    torch.testing.assert_close(norms[1].cpu(), norms[0], rtol=RTOL, atol=ATOL)
    for p_cpu, p_dev in zip(model_cpu.parameters(), model_dev.parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, rtol=RTOL, atol=ATOL)


def test_clip_grad_value(device):
    g_cpu = torch.randn(50) * 3
    p_cpu = torch.zeros(50, requires_grad=True)
    p_cpu.grad = g_cpu.clone()
    p = torch.zeros(50, device=device, requires_grad=True)
    p.grad = g_cpu.to(device)
    nn.utils.clip_grad_value_([p_cpu], 1.0)
    nn.utils.clip_grad_value_([p], 1.0)
    assert torch.equal(p.grad.cpu(), p_cpu.grad)


def test_tensor_round_trips(device):
    dev = torch.device(device)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
                  torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool):
        ref = (torch.randn(7, 5) * 5).to(dtype)
        x = ref.to(device)
        assert x.device.type == dev.type and x.dtype == dtype
        assert torch.equal(x.cpu(), ref)
        assert torch.equal(x.to("cpu"), ref)
        assert torch.equal(ref.t().to(device).cpu(), ref.t())  # non-contiguous source
        assert torch.equal(x.t().cpu(), ref.t())  # non-contiguous device source
        assert torch.equal(ref.to(device, non_blocking=True).cpu(), ref)
    y = torch.arange(6.0).to(device, torch.float64)
    assert y.dtype == torch.float64 and torch.equal(y.cpu(), torch.arange(6.0, dtype=torch.float64))
    z = torch.empty(3, 4, device=device)
    z.copy_(torch.ones(3, 4))
    host = torch.zeros(3, 4)
    host.copy_(z)
    assert torch.equal(host, torch.ones(3, 4))
    # cross-device copy with broadcasting and a dtype change
    w = torch.zeros(2, 3, 4, dtype=torch.bfloat16, device=device)
    w.copy_(torch.arange(4.0))
    assert torch.equal(w.cpu(), torch.arange(4.0).expand(2, 3, 4).to(torch.bfloat16))
    if dev.type != "cpu":
        assert torch.equal(torch.ones(2).tpu().cpu(), torch.ones(2))
        assert torch.ones(2, device=device).is_tpu


def test_module_round_trip(device):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    ref = copy.deepcopy(m.state_dict())
    m.to(device)
    for t in list(m.parameters()) + list(m.buffers()):
        assert t.device.type == torch.device(device).type
    p = next(m.parameters())
    p.grad = torch.ones_like(p)
    m.cpu()
    for k, v in m.state_dict().items():
        assert v.device.type == "cpu" and torch.equal(v, ref[k]), k
    assert next(m.parameters()).grad.device.type == "cpu"
    m.to(device, torch.float64)
    assert all(t.dtype == torch.float64 for t in m.parameters())


def test_module_to_keeps_tied_weights(device):
    """GPT-2/Llama tie the LM head to the embedding; .to(device) must keep one
    Parameter (PyTorch keeps it by swapping data in place, set_data)."""
    m = nn.Module()
    m.emb, m.head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
    m.head.weight = m.emb.weight
    m.to(device)
    tied = m.head.weight is m.emb.weight
    assert tied, "module.to(device) split a tied Parameter in two (set_data across devices refused?)"
    assert len(list(m.parameters())) == 1
    m.cpu()
    assert m.head.weight is m.emb.weight, "module.cpu() split a tied Parameter"


def test_param_data_assignment_across_devices(device):
    p = nn.Parameter(torch.ones(3))
    p.data = torch.full((3,), 2.0, device=device)
    assert p.device.type == torch.device(device).type and p.cpu().tolist() == [2.0, 2.0, 2.0]


def test_requires_grad_survives_to(device):
    a = torch.randn(3, requires_grad=True)
    b = a.to(device)
    assert b.requires_grad
    assert b.is_leaf == (torch.device(device).type == "cpu")  # to() on the same device is a no-op
    (b * 2).sum().backward()
    assert torch.equal(a.grad, torch.full((3,), 2.0))
