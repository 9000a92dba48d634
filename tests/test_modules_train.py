"""Everyday modules and training features against PyTorch CPU: recurrent layers and cells (the fused
LSTM/GRU cell kernels, forward and backward), the attention fast path of nn.MultiheadAttention and
nn.TransformerEncoderLayer in eval mode (a small ViT), every fused=True optimizer, fp16 training with
torch.amp.GradScaler("tpu"), RReLU and torch.mode(out=)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def _close(a, b, atol=1e-5, rtol=1e-4):
    torch.testing.assert_close(a.detach().cpu(), b.detach(), atol=atol, rtol=rtol, equal_nan=True)


def _twin(module, tpu):
    return module, copy.deepcopy(module).to(tpu)


def _grads_close(m_cpu, m_tpu, atol=1e-5, rtol=1e-4):
    for (n, p), q in zip(m_cpu.named_parameters(), m_tpu.parameters()):
        assert q.grad is not None, n
        torch.testing.assert_close(q.grad.cpu(), p.grad, atol=atol, rtol=rtol, msg=lambda m: f"{n}: {m}")


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("cfg", [dict(num_layers=2, batch_first=True), dict(bidirectional=True, bias=False)])
def test_recurrent_layers_forward_backward(cls, cfg, tpu, eager_mode):
    m_cpu, m_tpu = _twin(cls(4, 5, **cfg), tpu)
    x = torch.randn(3, 6, 4) if cfg.get("batch_first") else torch.randn(6, 3, 4)
    xc, xt = x.clone().requires_grad_(), x.to(tpu).requires_grad_()
    yc, hc = m_cpu(xc)
    yt, ht = m_tpu(xt)
    hc = hc if isinstance(hc, tuple) else (hc,)
    ht = ht if isinstance(ht, tuple) else (ht,)
    _close(yt, yc)
    for a, b in zip(ht, hc):
        _close(a, b)
    w = torch.randn(yc.shape)
    ((yc * w).sum() + sum(h.sum() for h in hc)).backward()
    ((yt * w.to(tpu)).sum() + sum(h.sum() for h in ht)).backward()
    _close(xt.grad, xc.grad)
    _grads_close(m_cpu, m_tpu)


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell])
def test_recurrent_cells_forward_backward(cls, tpu):
    m_cpu, m_tpu = _twin(cls(4, 7), tpu)
    x = torch.randn(5, 4)
    h0 = torch.randn(5, 7)
    state = (h0, torch.randn(5, 7)) if cls is nn.LSTMCell else h0
    state_t = tuple(s.to(tpu) for s in state) if cls is nn.LSTMCell else state.to(tpu)
    xc, xt = x.clone().requires_grad_(), x.to(tpu).requires_grad_()
    oc, ot = m_cpu(xc, state), m_tpu(xt, state_t)
    oc = oc if isinstance(oc, tuple) else (oc,)
    ot = ot if isinstance(ot, tuple) else (ot,)
    for a, b in zip(ot, oc):
        _close(a, b)
    # only hy gets a gradient for the LSTM cell: grad_cy arrives undefined
    oc[0].pow(2).sum().backward()
    ot[0].pow(2).sum().backward()
    _close(xt.grad, xc.grad)
    _grads_close(m_cpu, m_tpu)


def test_lstm_cell_kernel_without_bias_float64(tpu):
    ig, hg, cx = torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(ig.to(tpu), hg.to(tpu), cx.to(tpu))
    i, f, g, o = (ig + hg).chunk(4, 1)
    c_ref = f.sigmoid() * cx + i.sigmoid() * g.tanh()
    torch.testing.assert_close(cy.cpu(), c_ref)
    torch.testing.assert_close(hy.cpu(), o.sigmoid() * c_ref.tanh())


def _masks(b, t):
    pad = torch.zeros(b, t, dtype=torch.bool)
    pad[1, t - 2:] = True
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
    return {"none": {}, "key_padding": dict(key_padding_mask=pad), "causal": dict(attn_mask=causal)}


@pytest.mark.parametrize("mask", ["none", "key_padding", "causal"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_fast_path(mask, need_weights, tpu, eager_mode):
    m_cpu, m_tpu = _twin(nn.MultiheadAttention(8, 2, batch_first=True).eval(), tpu)
    x = torch.randn(2, 5, 8)
    kw = _masks(2, 5)[mask]
    with torch.no_grad():
        yc, wc = m_cpu(x, x, x, need_weights=need_weights, **kw)
        yt, wt = m_tpu(x.to(tpu), x.to(tpu), x.to(tpu), need_weights=need_weights,
                       **{k: v.to(tpu) for k, v in kw.items()})
    _close(yt, yc)
    if need_weights:
        _close(wt, wc)
    else:
        assert wc is None and wt is None


def test_multihead_attention_separate_key_value(tpu):
    m_cpu, m_tpu = _twin(nn.MultiheadAttention(8, 4, batch_first=True).eval(), tpu)
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8)
    with torch.no_grad():
        for kk, vv in ((k, v), (k, k)):
            yc, wc = m_cpu(q, kk, vv, average_attn_weights=False)
            yt, wt = m_tpu(q.to(tpu), kk.to(tpu), vv.to(tpu), average_attn_weights=False)
            _close(yt, yc)
            _close(wt, wc)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer_fast_path(norm_first, activation, tpu, eager_mode):
    layer = nn.TransformerEncoderLayer(16, 4, 32, activation=activation, norm_first=norm_first, batch_first=True)
    m_cpu, m_tpu = _twin(layer.eval(), tpu)
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        _close(m_tpu(x.to(tpu)), m_cpu(x))
        causal = nn.Transformer.generate_square_subsequent_mask(7)
        _close(m_tpu(x.to(tpu), src_mask=causal.to(tpu)), m_cpu(x, src_mask=causal))


class _TinyViT(nn.Module):
    """Patch embedding (a strided conv), a class token, position embeddings, an encoder, a head."""

    def __init__(self, dim=32, depth=2, heads=4, patch=4, image=16, classes=10):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


def test_vit_inference(tpu, eager_mode):
    m_cpu, m_tpu = _twin(_TinyViT().eval(), tpu)
    x = torch.randn(2, 3, 16, 16)
    with torch.inference_mode():
        _close(m_tpu(x.to(tpu)), m_cpu(x), atol=1e-4)


_OPTIMIZERS = [
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True, maximize=True)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    (torch.optim.AdamW, dict(lr=torch.tensor(0.01), amsgrad=True)),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, maximize=True)),
    (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.01, weight_decay=0.01)),
]


@pytest.mark.parametrize("cls,kw", _OPTIMIZERS, ids=lambda v: getattr(v, "__name__", None) or
                         "-".join(f"{k}" for k in v))
def test_fused_optimizers_match_cpu(cls, kw, tpu, eager_mode):
    torch.manual_seed(1)
    params = [torch.randn(5, 3), torch.randn(7), torch.randn(2, 2).t()]  # the last is not contiguous
    pc = [p.clone().requires_grad_() for p in params]
    pt = [p.to(tpu).requires_grad_() for p in params]
    kw_t = dict(kw)
    if isinstance(kw.get("lr"), torch.Tensor):
        kw_t["lr"] = kw["lr"].clone()   # a CPU tensor lr, as the docs allow for fused optimizers
    oc = cls(pc, fused=True, **kw)
    ot = cls(pt, fused=True, **kw_t)
    for _ in range(3):
        # gradients laid out like their parameters, as autograd makes them (CPU's kernel walks
        # memory in order and would pair differently laid out elements)
        grads = [torch.empty_strided(p.shape, p.stride()).copy_(torch.randn(p.shape)) for p in params]
        for p, g in zip(pc, grads):
            p.grad = g.clone()
        for p, g in zip(pt, grads):
            p.grad = g.to(tpu)
        oc.step()
        ot.step()
    for a, b in zip(pt, pc):
        _close(a, b, atol=1e-6, rtol=1e-5)
    for sc, st in zip(oc.state.values(), ot.state.values()):
        for k in sc:
            _close(st[k], sc[k], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_fused_adamw_low_precision_params(dtype, tpu):
    p = torch.randn(64, dtype=dtype)
    pc, pt = p.clone().requires_grad_(), p.to(tpu).requires_grad_()
    oc = torch.optim.AdamW([pc], lr=0.01, fused=True)
    ot = torch.optim.AdamW([pt], lr=0.01, fused=True)
    for _ in range(2):
        g = torch.randn(64, dtype=dtype)
        pc.grad, pt.grad = g.clone(), g.to(tpu)
        oc.step()
        ot.step()
    tol = dict(atol=1e-6, rtol=1e-6) if dtype == torch.float64 else dict(atol=1e-2, rtol=1e-2)
    _close(pt, pc, **tol)


def test_grad_scaler_fp16_training(tpu, eager_mode):
    """Three fp16-autocast steps under GradScaler against the same on CPU; the second step's gradients
    hold an inf, so both skip it and back the scale off."""
    torch.manual_seed(2)
    m_cpu = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    m_tpu = copy.deepcopy(m_cpu).to(tpu)
    runs = []
    for m, dev in ((m_cpu, "cpu"), (m_tpu, tpu)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(torch.device(dev).type, init_scale=2.0 ** 10, growth_interval=2)
        scales = []
        for step in range(3):
            torch.manual_seed(10 + step)
            x = torch.randn(4, 8).to(dev)
            with torch.autocast(torch.device(dev).type, dtype=torch.float16):
                loss = m(x).float().pow(2).mean()
            opt.zero_grad()
            scaler.scale(loss).backward()
            if step == 1:
                next(m.parameters()).grad[0, 0] = float("inf")
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        runs.append(scales)
    assert runs[0] == runs[1] == [1024.0, 512.0, 512.0]
    for a, b in zip(m_tpu.parameters(), m_cpu.parameters()):
        _close(a, b, atol=1e-3, rtol=1e-3)


def test_amp_kernels_directly(tpu):
    g = [torch.tensor([1.0, 2.0]), torch.tensor([float("nan"), 4.0], dtype=torch.float16)]
    gt = [x.to(tpu) for x in g]
    found, inv = torch.zeros(1), torch.full((1,), 0.5)
    found_t, inv_t = found.to(tpu), inv.to(tpu)
    torch._amp_foreach_non_finite_check_and_unscale_(g, found, inv)
    torch._amp_foreach_non_finite_check_and_unscale_(gt, found_t, inv_t)
    for a, b in zip(gt, g):
        _close(a, b)
    assert found_t.item() == found.item() == 1.0
    for found_inf in (0.0, 1.0):
        for tracker in (0, 2):
            s, t, f = torch.tensor([8.0]), torch.tensor([tracker], dtype=torch.int32), torch.tensor([found_inf])
            st, tt = s.to(tpu), t.to(tpu)
            torch._amp_update_scale_(s, t, f, 2.0, 0.25, 3)
            torch._amp_update_scale_(st, tt, f.to(tpu), 2.0, 0.25, 3)
            assert (st.item(), tt.item()) == (s.item(), t.item())


def test_rrelu(tpu, eager_mode):
    x = torch.randn(200)
    m = nn.RReLU(0.1, 0.3)
    _close(m.eval()(x.to(tpu)), m.eval()(x))  # eval: the mean slope, as CPU
    xt = x.to(tpu).requires_grad_()
    y = m.train()(xt)
    y.sum().backward()
    xc, yc, g = x, y.detach().cpu(), xt.grad.cpu()
    pos = xc >= 0
    assert torch.equal(yc[pos], xc[pos]) and torch.equal(g[pos], torch.ones(int(pos.sum())))
    slope = yc[~pos] / xc[~pos]
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6 and slope.std() > 0.01
    _close(g[~pos], slope, atol=1e-6, rtol=1e-5)  # the gradient is the slope drawn


def test_mode_out(tpu):
    x = torch.tensor([[1, 2, 2, 3], [3, 3, 1, 1]])
    v, i = torch.empty(0, dtype=torch.long, device=tpu), torch.empty(0, dtype=torch.long, device=tpu)
    r = torch.mode(x.to(tpu), 1, out=(v, i))
    vc, ic = torch.mode(x, 1)
    assert r[0] is v and r[1] is i
    assert torch.equal(v.cpu(), vc) and torch.equal(i.cpu(), ic)
