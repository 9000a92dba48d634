"""Convolutions lay out their outputs as CPU does: channels-last when the input or the weight is
(Conv2d in every dtype; Conv3d except float64), contiguous otherwise, forward and backward; so a
later .view raises or succeeds as on CPU. Values are compared with CPU too."""
import itertools

import pytest
import torch


def _conv(x, w, nd, transposed):
    return torch.ops.aten.convolution(x, w, None, [1] * nd, [1] * nd, [1] * nd, transposed, [0] * nd, 1)


CASES = [(nd, tr, dt, xcl, wcl)
         for nd, tr, dt, xcl, wcl in itertools.product((2, 3), (False, True), (torch.float32, torch.float64),
                                                      (False, True), (False, True))]


@pytest.mark.parametrize("nd,transposed,dtype,x_cl,w_cl", CASES)
def test_conv_output_layout_matches_cpu(nd, transposed, dtype, x_cl, w_cl, tpu):
    torch.manual_seed(0)
    mf = torch.channels_last if nd == 2 else torch.channels_last_3d
    x = torch.randn((2, 4) + (5,) * nd, dtype=dtype)
    w = torch.randn((4, 4) + (3,) * nd, dtype=dtype)
    if x_cl:
        x = x.contiguous(memory_format=mf)
    if w_cl:
        w = w.contiguous(memory_format=mf)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    xt, wt = x.to(tpu).requires_grad_(), w.to(tpu).requires_grad_()
    yc, yt = _conv(xc, wc, nd, transposed), _conv(xt, wt, nd, transposed)
    # float32 sums in another order than CPU's (weight gradients sum over batch and space)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    assert yt.stride() == yc.stride()
    torch.testing.assert_close(yt.cpu(), yc, **tol)
    g = torch.randn(yc.shape, dtype=dtype)
    gc = torch.autograd.grad(yc, (xc, wc), g)
    gt = torch.autograd.grad(yt, (xt, wt), g.to(tpu))
    for a, b in zip(gt, gc):
        assert a.stride() == b.stride()
        torch.testing.assert_close(a.cpu(), b, **tol)


def test_conv2d_module_channels_last_view(tpu, eager_mode):
    # the fuzzer's finding: on CPU a channels_last Conv2d output cannot be .view'ed flat
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    conv_t = torch.nn.Conv2d(3, 8, 3, padding=1).to(tpu)
    conv_t.load_state_dict(conv.state_dict())
    x = torch.randn(2, 3, 10, 10).contiguous(memory_format=torch.channels_last)
    yc, yt = conv(x), conv_t(x.to(tpu))
    assert yt.is_contiguous(memory_format=torch.channels_last) and not yt.is_contiguous()
    assert yt.stride() == yc.stride()
    torch.testing.assert_close(yt.cpu(), yc, rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError) as cpu_err:
        yc.view(2, -1)
    with pytest.raises(type(cpu_err.value)):
        yt.view(2, -1)
    # contiguous input and weight: a contiguous output, which views
    yc2, yt2 = conv(x.contiguous()), conv_t(x.contiguous().to(tpu))
    assert yt2.stride() == yc2.stride()
    torch.testing.assert_close(yt2.view(2, -1).cpu(), yc2.view(2, -1), rtol=1e-4, atol=1e-5)
    # a channels_last module (weight) with a contiguous input: channels_last, as CPU
    conv.to(memory_format=torch.channels_last)
    conv_t.to(memory_format=torch.channels_last)
    yc3, yt3 = conv(x.contiguous()), conv_t(x.contiguous().to(tpu))
    assert yt3.stride() == yc3.stride()
    torch.testing.assert_close(yt3.cpu(), yc3, rtol=1e-4, atol=1e-5)
