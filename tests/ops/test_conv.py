"""Convolution, pooling, upsampling and unfold/fold on the device against PyTorch CPU, forward and
backward (autograd through nn.Conv*, MaxPool2d, AvgPool2d, adaptive pools, interpolate), across
float dtypes, channels-last inputs, unbatched inputs, and the window options (stride, padding,
dilation, groups, transposed, ceil_mode, count_include_pad, divisor_override, align_corners)."""
import pytest
import torch
import torch.nn.functional as F

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def tol(dtype, scale=1.0):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(rtol=2e-2, atol=3e-2 * scale)
    if dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-5 * scale)
    return dict(rtol=1e-10, atol=1e-10 * scale)


def grad_check(fn, inputs, device, dtype, scale=1.0, seed=7):
    """fn(*inputs) on CPU and on the device; compares outputs and the gradients of every input
    (a random upstream gradient, so each output element matters)."""
    cpu_in = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    dev_in = [t.detach().clone().to(device).requires_grad_(t.is_floating_point()) for t in inputs]
    yc, yd = fn(*cpu_in), fn(*dev_in)
    yc = yc[0] if isinstance(yc, tuple) else yc
    yd = yd[0] if isinstance(yd, tuple) else yd
    torch.testing.assert_close(yd.cpu(), yc, **tol(dtype, scale))
    g = make(yc.shape, dtype, seed)
    yc.backward(g)
    yd.backward(g.to(device))
    for c, d in zip(cpu_in, dev_in):
        if c.requires_grad:
            torch.testing.assert_close(d.grad.cpu(), c.grad, **tol(dtype, scale * 4))


# ---------------------------------- convolution ----------------------------------

CONV_CASES = [
    # (dims, N, Cin, Cout, spatial, kernel, stride, padding, dilation, groups)
    (2, 2, 3, 4, (9, 8), (3, 3), 1, 1, 1, 1),
    (2, 3, 4, 6, (10, 9), (3, 2), (2, 1), (1, 0), (1, 2), 2),
    (2, 2, 4, 8, (6, 6), (1, 1), 1, 0, 1, 1),
    (2, 2, 6, 6, (7, 7), (3, 3), 1, 1, 1, 6),   # depthwise
    (1, 3, 2, 5, (17,), (4,), 2, 2, 1, 1),
    (3, 1, 2, 3, (5, 6, 4), (2, 3, 1), (1, 2, 1), (1, 1, 0), 1, 1),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{c[0]}d-g{c[-1]}-k{c[5]}")
def test_conv_forward_backward(device, dtype, case):
    dims, n, cin, cout, sp, k, st, pd, dl, g = case
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    x, w, b = make((n, cin) + sp, dtype), make((cout, cin // g) + k, dtype, 1), make((cout,), dtype, 2)
    grad_check(lambda x, w, b: conv(x, w, b, st, pd, dl, g), [x, w, b], device, dtype, scale=3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_transpose(device, dtype):
    x, w, b = make((2, 4, 5, 6), dtype), make((4, 3, 3, 3), dtype, 1), make((6,), dtype, 2)
    grad_check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1,
                                                  groups=2, dilation=1), [x, w, b], device, dtype, scale=3)
    x1, w1 = make((2, 3, 7), dtype), make((3, 2, 4), dtype, 1)
    grad_check(lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=1, dilation=2), [x1, w1], device,
               dtype, scale=3)


def test_conv_module_channels_last_no_bias(device):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 4, 3, stride=2))
    dev = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 4, 3, stride=2))
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to(device)
    x = make((2, 3, 12, 11), torch.float32).to(memory_format=torch.channels_last)
    xc, xd = x.clone().requires_grad_(), x.clone().to(device).requires_grad_()
    yc, yd = cpu(xc), dev(xd)
    torch.testing.assert_close(yd.cpu(), yc, rtol=1e-4, atol=1e-4)
    yc.sum().backward()
    yd.sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-3)


def test_unfold_fold(device):
    x = make((2, 3, 9, 8), torch.float32)
    kw = dict(kernel_size=(3, 2), dilation=(1, 2), padding=1, stride=(2, 1))
    grad_check(lambda t: F.unfold(t, **kw), [x], device, torch.float32)
    cols = F.unfold(x, **kw)
    grad_check(lambda t: F.fold(t, (9, 8), **kw), [cols], device, torch.float32)
    grad_check(lambda t: F.unfold(t, 2), [make((3, 5, 5), torch.float64)], device, torch.float64)


# ------------------------------------ pooling ------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cfg", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                 dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(1, 2),
                                      ceil_mode=True)], ids=["k2", "k3s2p1", "dil-ceil"])
def test_max_pool2d(device, dtype, cfg):
    x = make((2, 3, 9, 10), dtype)
    grad_check(lambda t: F.max_pool2d(t, **cfg), [x], device, dtype)
    yc, ic = F.max_pool2d(x, return_indices=True, **cfg)
    yd, idd = F.max_pool2d(x.to(device), return_indices=True, **cfg)
    assert torch.equal(idd.cpu(), ic)


def test_max_pool2d_nan_channels_last_unbatched(device):
    x = make((2, 4, 6, 6), torch.float32)
    x[0, 1, 2, 3] = float("nan")
    xl = x.to(memory_format=torch.channels_last)
    for t in (x, xl, x[0]):
        yc, ic = F.max_pool2d(t, 2, return_indices=True)
        yd, idd = F.max_pool2d(t.to(device), 2, return_indices=True)
        torch.testing.assert_close(yd.cpu(), yc, equal_nan=True)
        assert torch.equal(idd.cpu(), ic)
    xi = torch.randint(-50, 50, (2, 3, 6, 7))
    assert torch.equal(F.max_pool2d(xi.to(device), 3, 2).cpu(), F.max_pool2d(xi, 3, 2))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cfg", [dict(kernel_size=2),
                                 dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
                                 dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                 dict(kernel_size=(2, 3), stride=1, padding=(1, 1), divisor_override=4)],
                         ids=["k2", "nopad-count", "ceil", "divisor"])
def test_avg_pool2d(device, dtype, cfg):
    grad_check(lambda t: F.avg_pool2d(t, **cfg), [make((2, 3, 9, 10), dtype)], device, dtype)


def test_avg_pool2d_int_and_unbatched(device):
    xi = torch.randint(-50, 50, (2, 3, 6, 7))
    assert torch.equal(F.avg_pool2d(xi.to(device), 2).cpu(), F.avg_pool2d(xi, 2))
    grad_check(lambda t: F.avg_pool2d(t, 3, 2, 1), [make((3, 7, 7), torch.float32)], device, torch.float32)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("out", [(1, 1), (4, 3), (7, 11)], ids=str)
def test_adaptive_pools(device, dtype, out):
    x = make((2, 3, 9, 10), dtype)
    grad_check(lambda t: F.adaptive_avg_pool2d(t, out), [x], device, dtype)
    grad_check(lambda t: F.adaptive_max_pool2d(t, out), [x], device, dtype)
    grad_check(lambda t: F.adaptive_avg_pool2d(t, out), [x.to(memory_format=torch.channels_last)], device,
               dtype)


# ----------------------------------- upsampling -----------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cfg", [dict(scale_factor=2, mode="nearest"), dict(size=(13, 7), mode="nearest"),
                                 dict(scale_factor=1.7, mode="bilinear"),
                                 dict(size=(5, 19), mode="bilinear", align_corners=True),
                                 dict(scale_factor=0.5, mode="bilinear")],
                         ids=["near2x", "near-size", "bil1.7", "bil-ac", "bil-down"])
def test_interpolate(device, dtype, cfg):
    grad_check(lambda t: F.interpolate(t, **cfg), [make((2, 3, 6, 8), dtype)], device, dtype)


@pytest.mark.parametrize("cfg", [dict(scale_factor=2, mode="nearest"), dict(size=11, mode="nearest"),
                                 dict(scale_factor=1.5, mode="linear"), dict(size=4, mode="linear", align_corners=True)],
                         ids=["near2x", "near-size", "lin1.5", "lin-ac"])
def test_interpolate_1d(device, cfg):
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        grad_check(lambda t: F.interpolate(t, **cfg), [make((2, 3, 7), dtype)], device, dtype)


def test_pool_modules_in_a_model(device):
    import copy
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.MaxPool2d(2), torch.nn.AvgPool2d(3, 1, 1),
                              torch.nn.Upsample(scale_factor=2, mode="bilinear"),
                              torch.nn.AdaptiveAvgPool2d((3, 3)), torch.nn.Flatten(), torch.nn.Linear(36, 2))
    dev = copy.deepcopy(cpu).to(device)
    x = make((2, 4, 8, 8), torch.float32)
    xc, xd = x.clone().requires_grad_(), x.clone().to(device).requires_grad_()
    yc, yd = cpu(xc), dev(xd)
    torch.testing.assert_close(yd.cpu(), yc, rtol=1e-4, atol=1e-5)
    yc.sum().backward()
    yd.sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5)
