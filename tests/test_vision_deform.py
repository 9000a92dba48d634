"""torchvision's ps_roi_align, ps_roi_pool and deform_conv2d (and their backwards) on the tpu device,
through torchvision's own Python API. Where torchvision's _C cannot load (the CUDA wheel on our
machines), torch_tpu's kernels serve the CPU too, so every result is checked against references
written here in plain Python / PyTorch (the arithmetic of torchvision's CPU kernels), against known
answers, and the backwards by gradcheck in float64."""
import importlib.util
import math

import pytest
import torch

if importlib.util.find_spec("torchvision") is None:
    pytest.skip("torchvision is not installed (scripts/setup.sh installs 0.28.0)", allow_module_level=True)

import torchvision  # noqa: E402,F401  (must import: a broken hook fails here, not skips)
from torchvision import ops  # noqa: E402

from conftest import sync  # noqa: E402
from test_vision_ops import bilinear  # noqa: E402  (ps_roi_align samples as roi_align does)

pytestmark = pytest.mark.usefixtures("eager_mode")


# ---------------- references ----------------

def ref_ps_roi_align(x, rois, scale, ph_n, pw_n, sampling):
    x = x.double().tolist()
    out_c = len(x[0]) // (ph_n * pw_n)
    out = torch.zeros(len(rois), out_c, ph_n, pw_n, dtype=torch.float64)
    for r, roi in enumerate(rois.double().tolist()):
        b = int(roi[0])
        x1, y1, x2, y2 = (v * scale - 0.5 for v in roi[1:])
        bh, bw = (y2 - y1) / ph_n, (x2 - x1) / pw_n
        gh = sampling if sampling > 0 else math.ceil((y2 - y1) / ph_n)
        gw = sampling if sampling > 0 else math.ceil((x2 - x1) / pw_n)
        for co in range(out_c):
            for i in range(ph_n):
                for j in range(pw_n):
                    img = x[b][(co * ph_n + i) * pw_n + j]
                    s = 0.0
                    for iy in range(gh):
                        yy = y1 + i * bh + (iy + 0.5) * bh / gh
                        for ix in range(gw):
                            s += bilinear(img, yy, x1 + j * bw + (ix + 0.5) * bw / gw)
                    out[r, co, i, j] = s / max(gh * gw, 1) if gh * gw > 0 else 0.0
    return out


def ref_ps_roi_pool(x, rois, scale, ph_n, pw_n):
    """torchvision's CPU forward: integer windows, clipped to [0, H-1] x [0, W-1]."""
    xd = x.double()
    h, w = x.shape[-2:]
    out_c = x.shape[1] // (ph_n * pw_n)
    out = torch.zeros(len(rois), out_c, ph_n, pw_n, dtype=torch.float64)
    for r, roi in enumerate(rois.double().tolist()):
        b = int(roi[0])
        sx, sy, ex, ey = (int(round(v * scale)) for v in roi[1:])
        rh, rw = max(ey - sy, 1), max(ex - sx, 1)
        for co in range(out_c):
            for i in range(ph_n):
                for j in range(pw_n):
                    hs = min(max(math.floor(i * rh / ph_n) + sy, 0), h - 1)
                    he = min(max(math.ceil((i + 1) * rh / ph_n) + sy, 0), h - 1)
                    ws = min(max(math.floor(j * rw / pw_n) + sx, 0), w - 1)
                    we = min(max(math.ceil((j + 1) * rw / pw_n) + sx, 0), w - 1)
                    if he > hs and we > ws:
                        out[r, co, i, j] = xd[b, (co * ph_n + i) * pw_n + j, hs:he, ws:we].mean()
    return out


def _sample_zero_pad(img, y, x):
    """img [N, H, W] at y, x [N, Ho, Wo]: bilinear with zeros outside the image (deform_conv2d's)."""
    n, h, w = img.shape
    inside = (y > -1) & (y < h) & (x > -1) & (x < w)
    y0, x0 = torch.floor(y), torch.floor(x)
    flat = img.reshape(n, -1)
    out = torch.zeros_like(y)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            wgt = (1 - (y - yy).abs()) * (1 - (x - xx).abs())
            ok = inside & (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            idx = (yy.clamp(0, h - 1) * w + xx.clamp(0, w - 1)).long().reshape(n, -1)
            v = flat.gather(1, idx).reshape(y.shape)
            out = out + torch.where(ok, wgt * v, torch.zeros_like(v))
    return out


def ref_deform_conv2d(x, offset, weight, bias, stride, padding, dilation, mask):
    x, offset, weight = x.double(), offset.double(), weight.double()
    n, c, _, _ = x.shape
    co, cg, kh, kw = weight.shape
    groups, ho, wo = c // cg, offset.shape[2], offset.shape[3]
    og = offset.shape[1] // (2 * kh * kw)
    cpg = c // og
    oy = (torch.arange(ho, dtype=torch.float64) * stride[0] - padding[0]).view(1, ho, 1)
    ox = (torch.arange(wo, dtype=torch.float64) * stride[1] - padding[1]).view(1, 1, wo)
    cols = torch.zeros(n, c, kh * kw, ho, wo, dtype=torch.float64)
    for ch in range(c):
        g = ch // cpg
        for i in range(kh):
            for j in range(kw):
                k = i * kw + j
                yy = oy + i * dilation[0] + offset[:, (g * kh * kw + k) * 2]
                xx = ox + j * dilation[1] + offset[:, (g * kh * kw + k) * 2 + 1]
                v = _sample_zero_pad(x[:, ch], yy, xx)
                if mask is not None:
                    v = v * mask.double()[:, g * kh * kw + k]
                cols[:, ch, k] = v
    out = torch.zeros(n, co, ho, wo, dtype=torch.float64)
    cog = co // groups
    for g in range(groups):
        out[:, g * cog:(g + 1) * cog] = torch.einsum(
            "nckhw,ock->nohw", cols[:, g * cg:(g + 1) * cg], weight[g * cog:(g + 1) * cog].flatten(2))
    if bias is not None:
        out += bias.double().view(1, -1, 1, 1)
    return out


# ---------------- helpers ----------------

def _rois(k, batch, h, w, gen, margin=1.0):
    r = torch.rand(k, 4, generator=gen, dtype=torch.float64)
    x1, y1 = r[:, 0] * (w - margin), r[:, 1] * (h - margin)
    x2 = x1 + r[:, 2] * (w - margin - x1) + 0.3
    y2 = y1 + r[:, 3] * (h - margin - y1) + 0.3
    b = torch.arange(k, dtype=torch.float64) % batch
    return torch.stack([b, x1, y1, x2, y2], 1)


def _tol(dtype):
    return {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 2e-2}[dtype]


# ---------------- ps_roi_align ----------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("sampling", [-1, 2])
def test_ps_roi_align_matches_reference(device, dtype, sampling):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 12, 9, 11, generator=gen).to(dtype)
    rois = _rois(6, 2, 9 * 2, 11 * 2, gen, margin=-4.0).to(dtype)  # some reach past the image
    want = ref_ps_roi_align(x, rois, 0.5, 2, 3, sampling)
    got = ops.ps_roi_align(x.to(device), rois.to(device), (2, 3), 0.5, sampling)
    assert got.device.type == torch.device(device).type and got.dtype == dtype
    torch.testing.assert_close(got.cpu().double(), want, rtol=_tol(dtype), atol=_tol(dtype))


def test_ps_roi_align_known_answer(device):
    # v = h + 2w is linear, so a bin's mean of bilinear samples is v at the bin's centre
    x = (torch.arange(4.0).view(4, 1) + 2 * torch.arange(4.0).view(1, 4)).view(1, 1, 4, 4).double()
    rois = torch.tensor([[0, 1.0, 1.0, 3.0, 3.0]], dtype=torch.float64)
    out = ops.ps_roi_align(x.to(device), rois.to(device), 1, 1.0, -1)
    assert out.cpu().item() == pytest.approx(4.5)


def test_ps_roi_align_gradcheck(device):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(1, 8, 6, 5, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    rois = torch.tensor([[0, 0.5, 0.2, 4.1, 5.3], [0, -1.0, 1.0, 3.0, 7.5]], dtype=torch.float64).to(device)
    assert torch.autograd.gradcheck(lambda t: ops.ps_roi_align(t, rois, (2, 2), 1.0, 2), (x,))


def test_ps_roi_align_module_and_box_list(device):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 7, 7, generator=gen)
    boxes = [torch.tensor([[0.5, 0.5, 5.0, 6.0]]), torch.tensor([[1.0, 0.0, 6.5, 4.0], [2.0, 2.0, 3.0, 3.0]])]
    rois = torch.cat([torch.cat([torch.full((len(b), 1), float(i)), b], 1) for i, b in enumerate(boxes)])
    want = ref_ps_roi_align(x, rois, 1.0, 2, 2, -1)
    m = ops.PSRoIAlign((2, 2), 1.0, -1)
    got = m(x.to(device), [b.to(device) for b in boxes])
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-4, atol=1e-4)


# ---------------- ps_roi_pool ----------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ps_roi_pool_matches_reference(device, dtype):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 18, 10, 9, generator=gen).to(dtype)
    rois = _rois(7, 2, 20, 18, gen, margin=-2.0).to(dtype)
    want = ref_ps_roi_pool(x, rois, 0.5, 3, 2)
    got = ops.ps_roi_pool(x.to(device), rois.to(device), (3, 2), 0.5)
    torch.testing.assert_close(got.cpu().double(), want, rtol=_tol(dtype), atol=_tol(dtype))


def test_ps_roi_pool_known_answer(device):
    # 4 channels of v = 4h + w + 100c, 2x2 bins over roi (0, 0)-(3, 3): bin (i, j) reads channel
    # 2i + j; the forward's windows stop at H - 1, as torchvision's CPU kernel's do
    x = (torch.arange(16.0).view(1, 1, 4, 4) + 100 * torch.arange(4.0).view(1, 4, 1, 1))
    rois = torch.tensor([[0, 0.0, 0.0, 3.0, 3.0]])
    out = ops.ps_roi_pool(x.to(device), rois.to(device), 2, 1.0).cpu()
    assert out[0, 0].tolist() == [[2.5, 103.5], [206.5, 307.5]]


def test_ps_roi_pool_gradcheck(device):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 8, 8, 7, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    # windows inside [0, H-2]: torchvision's CPU forward never reads the last row/column, its
    # backward does, so gradcheck holds only away from that edge (as in torchvision's own test)
    rois = torch.tensor([[0, 0.0, 0.0, 5.0, 5.0], [1, 1.0, 2.0, 4.0, 6.0]], dtype=torch.float64).to(device)
    assert torch.autograd.gradcheck(lambda t: ops.ps_roi_pool(t, rois, (2, 2), 1.0), (x,))


def test_ps_roi_refusals(device):
    x = torch.randn(1, 6, 5, 5)
    rois = torch.tensor([[0, 0.0, 0.0, 3.0, 3.0]])
    with pytest.raises(RuntimeError, match="multiple of pooling height"):
        ops.ps_roi_align(x.to(device), rois.to(device), 2, 1.0)
    with pytest.raises(RuntimeError, match="same type"):
        ops.ps_roi_pool(x.double().to(device), rois.to(device), (2, 3), 1.0)
    with pytest.raises(NotImplementedError):
        ops.ps_roi_pool(x.half().to(device), rois.half().to(device), (2, 3), 1.0)
    # a roi naming a batch entry the input lacks: IndexError (at the next sync on tpu), not a read
    with pytest.raises(IndexError, match="not a batch index"):
        out = ops.ps_roi_align(x.to(device), torch.tensor([[3, 0.0, 0.0, 3.0, 3.0]]).to(device), (2, 3), 1.0)
        sync(device)
        out.cpu()


# ---------------- deform_conv2d ----------------

DEFORM_CASES = [
    # N, C, Co, H, W, k, stride, pad, dil, groups, offset_groups, mask, bias
    (2, 3, 4, 7, 6, (3, 3), (1, 1), (1, 1), (1, 1), 1, 1, True, True),
    (1, 4, 6, 8, 9, (3, 2), (2, 1), (1, 0), (1, 2), 2, 2, True, False),
    (3, 4, 4, 5, 5, (1, 1), (1, 1), (0, 0), (1, 1), 1, 1, False, True),
    (2, 6, 4, 6, 7, (2, 3), (1, 2), (2, 1), (2, 1), 2, 3, False, False),
]


def _deform_inputs(case, dtype, gen):
    n, c, co, h, w, k, s, p, d, g, og, use_mask, use_bias = case
    ho = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    wo = (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    x = torch.randn(n, c, h, w, generator=gen, dtype=torch.float64)
    wt = torch.randn(co, c // g, *k, generator=gen, dtype=torch.float64)
    off = 1.7 * torch.randn(n, 2 * og * k[0] * k[1], ho, wo, generator=gen, dtype=torch.float64)
    mask = torch.rand(n, og * k[0] * k[1], ho, wo, generator=gen, dtype=torch.float64) if use_mask else None
    bias = torch.randn(co, generator=gen, dtype=torch.float64) if use_bias else None
    cast = (lambda t: None if t is None else t.to(dtype))
    return cast(x), cast(off), cast(wt), cast(bias), cast(mask), s, p, d


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("case", range(len(DEFORM_CASES)))
def test_deform_conv2d_matches_reference(device, dtype, case):
    gen = torch.Generator().manual_seed(10 + case)
    x, off, wt, bias, mask, s, p, d = _deform_inputs(DEFORM_CASES[case], dtype, gen)
    want = ref_deform_conv2d(x, off, wt, bias, s, p, d, mask)
    dev = (lambda t: None if t is None else t.to(device))
    got = ops.deform_conv2d(dev(x), dev(off), dev(wt), dev(bias), s, p, d, dev(mask))
    assert got.dtype == dtype
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 3e-2}[dtype]
    torch.testing.assert_close(got.cpu().double(), want, rtol=tol, atol=tol * max(1.0, want.abs().max().item()))


def test_deform_conv2d_known_answer(device):
    # a 1x1 weight of 1, mask 0.5, every offset (+0.5, 0): rows h and h+1 averaged (row H is zero)
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.float64).view(1, 1, 3, 2)
    off = torch.zeros(1, 2, 3, 2, dtype=torch.float64)
    off[:, 0] = 0.5
    mask = torch.full((1, 1, 3, 2), 0.5, dtype=torch.float64)
    w = torch.ones(1, 1, 1, 1, dtype=torch.float64)
    b = torch.tensor([0.25], dtype=torch.float64)
    out = ops.deform_conv2d(x.to(device), off.to(device), w.to(device), b.to(device), mask=mask.to(device))
    assert out.cpu().view(3, 2).tolist() == [[1.25, 1.75], [2.25, 2.75], [1.5, 1.75]]
    # zero offsets and no mask: an ordinary convolution
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(2, 4, 6, 5, generator=gen, dtype=torch.float64)
    w = torch.randn(6, 2, 3, 3, generator=gen, dtype=torch.float64)
    off = torch.zeros(2, 18, 6, 5, dtype=torch.float64)
    out = ops.deform_conv2d(x.to(device), off.to(device), w.to(device), padding=1)
    torch.testing.assert_close(out.cpu(), torch.nn.functional.conv2d(x, w, padding=1, groups=2))


@pytest.mark.parametrize("use_mask", [True, False])
def test_deform_conv2d_gradcheck(device, use_mask):
    gen = torch.Generator().manual_seed(20)
    case = (1, 4, 2, 4, 5, (2, 2), (1, 1), (1, 0), (1, 1), 2, 2, use_mask, True)
    x, off, wt, bias, mask, s, p, d = _deform_inputs(case, torch.float64, gen)
    off = off * 0.4  # keep samples off integer coordinates' kinks by chance only
    leaves = [t.to(device).requires_grad_() for t in (x, off, wt, bias)]
    m = mask.to(device).requires_grad_() if use_mask else None
    args = leaves + ([m] if use_mask else [])

    def f(x_, off_, wt_, bias_, *rest):
        return ops.deform_conv2d(x_, off_, wt_, bias_, s, p, d, rest[0] if rest else None)
    assert torch.autograd.gradcheck(f, tuple(args))


def test_deform_conv2d_module_trains(device):
    torch.manual_seed(0)
    ref = ops.DeformConv2d(4, 6, 3, padding=1, groups=2)
    mod = ops.DeformConv2d(4, 6, 3, padding=1, groups=2).to(device)
    mod.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 6, 6)
    off = 0.8 * torch.randn(2, 18, 6, 6)
    mask = torch.rand(2, 9, 6, 6)
    want = ref_deform_conv2d(x, off, ref.weight.detach(), ref.bias.detach(), (1, 1), (1, 1), (1, 1), mask)
    got = mod(x.to(device), off.to(device), mask.to(device))
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=1e-4, atol=1e-4)
    got.square().sum().backward()
    # grads against float64 autograd through the plain-PyTorch reference
    xr = x.double().requires_grad_()
    wr = ref.weight.detach().double().requires_grad_()
    br = ref.bias.detach().double().requires_grad_()
    ref_deform_conv2d(xr, off.double(), wr, br, (1, 1), (1, 1), (1, 1), mask.double()).square().sum().backward()
    torch.testing.assert_close(mod.weight.grad.cpu().double(), wr.grad, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(mod.bias.grad.cpu().double(), br.grad, rtol=1e-3, atol=1e-3)


def test_deform_conv2d_refusals(device):
    x = torch.randn(1, 2, 5, 5).to(device)
    w = torch.randn(3, 2, 3, 3).to(device)
    with pytest.raises(RuntimeError, match="offset output dims"):
        ops.deform_conv2d(x, torch.zeros(1, 18, 5, 5).to(device), w)
    with pytest.raises(RuntimeError, match="mask.shape\\[1\\] is not valid"):
        ops.deform_conv2d(x, torch.zeros(1, 18, 3, 3).to(device), w, mask=torch.ones(1, 4, 3, 3).to(device))
    with pytest.raises(NotImplementedError):
        ops.deform_conv2d(x.bfloat16(), torch.zeros(1, 18, 3, 3).bfloat16().to(device), w.bfloat16())
