"""torchvision's operators (nms, roi_align, roi_pool and their backwards) on the tpu device, through
torchvision's own Python API. Where torchvision's _C cannot load (the CUDA wheel on our machines),
torch_tpu defines the ops and its kernels serve the CPU too, so the references here are written
independently in plain Python (the semantics of torchvision's CPU kernels, as its test/test_ops.py
states them), plus gradcheck in float64 and known answers."""
import importlib.util
import math

import pytest
import torch

if importlib.util.find_spec("torchvision") is None:
    pytest.skip("torchvision is not installed (scripts/setup.sh installs 0.28.0)", allow_module_level=True)

import torchvision  # noqa: E402  (must import: a broken hook fails here, not skips)
from torchvision import ops  # noqa: E402

from conftest import sync  # noqa: E402

pytestmark = pytest.mark.usefixtures("eager_mode")


# ---------------- references ----------------

def ref_nms(boxes, scores, thr):
    b = boxes.double().tolist()
    s = scores.double().tolist()
    order = sorted(range(len(s)), key=lambda i: -s[i])  # stable, as torchvision's sort
    area = [(x2 - x1) * (y2 - y1) for x1, y1, x2, y2 in b]
    dead = [False] * len(s)
    keep = []
    for oi, i in enumerate(order):
        if dead[i]:
            continue
        keep.append(i)
        for j in order[oi + 1:]:
            if dead[j]:
                continue
            w = max(0.0, min(b[i][2], b[j][2]) - max(b[i][0], b[j][0]))
            h = max(0.0, min(b[i][3], b[j][3]) - max(b[i][1], b[j][1]))
            inter = w * h
            if inter / (area[i] + area[j] - inter) > thr:
                dead[j] = True
    return torch.tensor(keep, dtype=torch.long)


def bilinear(img, y, x):
    """img [H, W] (a list of rows) at (y, x), as torchvision's roi_align samples it."""
    h, w = len(img), len(img[0])
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yh = yl = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xh = xl = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    hy, hx = 1 - ly, 1 - lx
    return hy * hx * img[yl][xl] + hy * lx * img[yl][xh] + ly * hx * img[yh][xl] + ly * lx * img[yh][xh]


def ref_roi_align(x, rois, ph, pw, scale, sampling, aligned):
    xd = x.double().tolist()
    out = torch.zeros(len(rois), x.shape[1], ph, pw, dtype=torch.float64)
    off = 0.5 if aligned else 0.0
    for n, (b, x1, y1, x2, y2) in enumerate(rois.double().tolist()):
        sw, sh, ew, eh = x1 * scale - off, y1 * scale - off, x2 * scale - off, y2 * scale - off
        rw, rh = ew - sw, eh - sh
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = sampling if sampling > 0 else math.ceil(rh / ph)
        gw = sampling if sampling > 0 else math.ceil(rw / pw)
        cnt = max(gh * gw, 1)
        for c in range(x.shape[1]):
            img = xd[int(b)][c]
            for i in range(ph):
                for j in range(pw):
                    acc = 0.0
                    for iy in range(gh):
                        yy = sh + i * bh + (iy + 0.5) * bh / gh
                        for ix in range(gw):
                            acc += bilinear(img, yy, sw + j * bw + (ix + 0.5) * bw / gw)
                    out[n, c, i, j] = acc / cnt
    return out


def ref_roi_pool(x, rois, ph, pw, scale):
    xd = x.double()
    out = torch.zeros(len(rois), x.shape[1], ph, pw, dtype=torch.float64)
    H, W = x.shape[2:]
    for n, (b, x1, y1, x2, y2) in enumerate(rois.double().tolist()):
        rnd = lambda v: int(math.floor(v * scale + 0.5)) if v * scale >= 0 else -int(math.floor(-v * scale + 0.5))
        sw, sh, ew, eh = rnd(x1), rnd(y1), rnd(x2), rnd(y2)
        rw, rh = max(ew - sw + 1, 1), max(eh - sh + 1, 1)
        bh, bw = rh / ph, rw / pw
        for i in range(ph):
            hs = min(max(int(math.floor(i * bh)) + sh, 0), H)
            he = min(max(int(math.ceil((i + 1) * bh)) + sh, 0), H)
            for j in range(pw):
                ws = min(max(int(math.floor(j * bw)) + sw, 0), W)
                we = min(max(int(math.ceil((j + 1) * bw)) + sw, 0), W)
                if he <= hs or we <= ws:
                    continue  # an empty bin is 0
                out[n, :, i, j] = xd[int(b), :, hs:he, ws:we].amax(dim=(1, 2))
    return out


def random_rois(n, batch, size, gen_scale=1.0):
    xy = torch.rand(n, 2) * size * 0.8
    wh = torch.rand(n, 2) * size * 0.6 + 0.3
    b = torch.randint(0, batch, (n, 1)).double()
    return torch.cat([b, xy, xy + wh], 1) / gen_scale


# ---------------- nms ----------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("thr", [0.2, 0.5, 0.8])
def test_nms_matches_reference(device, dtype, thr):
    xy = torch.rand(60, 2) * 50
    boxes = torch.cat([xy, xy + torch.rand(60, 2) * 30 + 1], 1).to(dtype)
    scores = torch.rand(60, dtype=dtype)
    got = ops.nms(boxes.to(device), scores.to(device), thr)
    assert got.dtype == torch.long and got.device.type == torch.device(device).type
    torch.testing.assert_close(got.cpu(), ref_nms(boxes, scores, thr), rtol=0, atol=0)


def test_nms_known_answer_and_ties(device):
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60], [0, 0, 10, 10.]], device=device)
    scores = torch.tensor([0.5, 0.9, 0.7, 0.5], device=device)
    # 1 (0.9) suppresses 0 and 3 (IoU 81/119 > 0.5); 2 stays. Equal scores keep input order.
    assert ops.nms(boxes, scores, 0.5).cpu().tolist() == [1, 2]
    assert ops.nms(boxes, scores, 0.7).cpu().tolist() == [1, 2, 0]
    empty = ops.nms(torch.zeros(0, 4, device=device), torch.zeros(0, device=device), 0.5)
    assert empty.shape == (0,) and empty.dtype == torch.long


def test_batched_nms(device):
    xy = torch.rand(80, 2) * 40
    boxes = torch.cat([xy, xy + torch.rand(80, 2) * 20 + 1], 1)
    scores, idxs = torch.rand(80), torch.randint(0, 4, (80,))
    got = ops.batched_nms(boxes.to(device), scores.to(device), idxs.to(device), 0.4).cpu()
    want = []  # per class, then all kept sorted by score, as batched_nms documents
    for k in range(4):
        sel = (idxs == k).nonzero().flatten()
        want += sel[ref_nms(boxes[sel], scores[sel], 0.4)].tolist()
    want = sorted(want, key=lambda i: -scores[i].item())
    assert got.tolist() == want


def test_nms_errors(device):
    b, s = torch.rand(5, 4, device=device), torch.rand(5, device=device)
    with pytest.raises(RuntimeError, match="boxes should have 4 elements in dimension 1, got 3"):
        ops.nms(b[:, :3], s, 0.5)
    with pytest.raises(RuntimeError, match="boxes and scores should have same number of elements"):
        ops.nms(b, s[:4], 0.5)
    with pytest.raises(RuntimeError, match="dets should have the same type as scores"):
        ops.nms(b, s.double(), 0.5)


# ---------------- roi_align ----------------

@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("sampling", [-1, 0, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_roi_align_matches_reference(device, aligned, sampling, dtype):
    x = torch.randn(2, 3, 12, 14, dtype=dtype)
    rois = random_rois(6, 2, 24, 1.0).to(dtype)
    rois[0, 1:] = torch.tensor([-3.0, -2.0, 30.0, 26.0])  # reaching past the image
    got = ops.roi_align(x.to(device), rois.to(device), (3, 2), spatial_scale=0.5, sampling_ratio=sampling,
                        aligned=aligned)
    want = ref_roi_align(x, rois, 3, 2, 0.5, sampling, aligned)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got.cpu().double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("aligned", [False, True])
def test_roi_align_float16(device, aligned):
    """float16 (which torchvision's CPU kernel takes): computed as c10::Half is, rounded after each
    operation, so within a few half ulps of the float64 reference; the backward too."""
    x = torch.randn(1, 3, 10, 12)
    rois = random_rois(5, 1, 20)
    got = ops.roi_align(x.half().to(device), rois.half().to(device), (2, 3), 0.5, -1, aligned)
    assert got.dtype == torch.float16
    want = ref_roi_align(x.half().double(), rois.half().double(), 2, 3, 0.5, -1, aligned)
    torch.testing.assert_close(got.cpu().double(), want, rtol=1e-2, atol=2e-2)
    xt = x.half().to(device).requires_grad_()
    ops.roi_align(xt, rois.half().to(device), (2, 3), 0.5, -1, aligned).sum().backward()
    x64 = x.half().double().requires_grad_()
    ops.roi_align(x64, rois.half().double(), (2, 3), 0.5, -1, aligned).sum().backward()
    torch.testing.assert_close(xt.grad.cpu().double(), x64.grad, rtol=1e-2, atol=2e-2)


def test_roi_align_known_answer(device):
    x = torch.full((1, 2, 8, 8), 3.0, device=device)
    rois = torch.tensor([[0, 1.0, 1.0, 6.0, 5.0]], device=device)
    out = ops.roi_align(x, rois, (2, 2), 1.0, 2, True)
    assert out.shape == (1, 2, 2, 2) and torch.equal(out.cpu(), torch.full((1, 2, 2, 2), 3.0))
    # boxes as a list of [L, 4] tensors (RoIAlign's module form), one per image
    boxes = [torch.tensor([[1.0, 1.0, 6.0, 5.0]], device=device)]
    mod = ops.RoIAlign((2, 2), 1.0, 2, aligned=True)
    assert torch.equal(mod(x, boxes).cpu(), out.cpu())


@pytest.mark.parametrize("aligned", [False, True])
def test_roi_align_gradcheck(device, aligned):
    x = torch.rand(1, 2, 7, 8, dtype=torch.float64, device=device, requires_grad=True)
    rois = torch.tensor([[0, 0.5, 0.6, 6.3, 5.1], [0, 2.2, 1.0, 7.9, 6.5], [0, -1, -1, 3, 2]],
                        dtype=torch.float64, device=device)
    for sampling in (-1, 2):
        fn = lambda t: ops.roi_align(t, rois, (3, 3), 1.0, sampling, aligned)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-5)


def test_roi_align_backward_matches_cpu_autograd_of_reference(device):
    # The gradient of a linear map: roi_align's backward applied to g equals d/dx sum(out * g).
    x = torch.randn(2, 2, 9, 9, dtype=torch.float64)
    rois = random_rois(5, 2, 9).double()
    g = torch.randn(5, 2, 2, 3, dtype=torch.float64)
    xt = x.to(device).requires_grad_()
    ops.roi_align(xt, rois.to(device), (2, 3), 1.0, -1, False).backward(g.to(device))
    # column by column through the forward reference: grad[i] = sum(ref(e_i) * g)
    want = torch.zeros_like(x).flatten()
    for i in range(x.numel()):
        e = torch.zeros(x.numel(), dtype=torch.float64)
        e[i] = 1.0
        want[i] = (ref_roi_align(e.view_as(x), rois, 2, 3, 1.0, -1, False) * g).sum()
    torch.testing.assert_close(xt.grad.cpu(), want.view_as(x), rtol=1e-10, atol=1e-12)


def test_roi_align_errors(device):
    x = torch.rand(1, 2, 5, 5, device=device)
    with pytest.raises(RuntimeError, match=r"rois must have shape as Tensor\[K, 5\]"):
        torch.ops.torchvision.roi_align(x, torch.rand(2, 4, device=device), 1.0, 2, 2, -1, False)
    with pytest.raises(RuntimeError, match="Expected tensor for argument #1 'input' to have the same type"):
        torch.ops.torchvision.roi_align(x, torch.rand(2, 5, device=device).double(), 1.0, 2, 2, -1, False)
    with pytest.raises(NotImplementedError, match="BFloat16"):  # torchvision's CPU kernel takes float16, not bfloat16
        torch.ops.torchvision.roi_align(x.bfloat16(), torch.zeros(1, 5, device=device).bfloat16(), 1.0, 2, 2, -1,
                                        False)
    with pytest.raises(NotImplementedError, match="Half"):  # roi_pool: float32 and float64, as on CPU
        torch.ops.torchvision.roi_pool(x.half(), torch.zeros(1, 5, device=device).half(), 1.0, 2, 2)
    bad = torch.tensor([[3.0, 0, 0, 2, 2]], device=device)  # batch index 3 of 1 image
    with pytest.raises(IndexError, match=r"batch index \(rois\[:, 0\]\) is outside \[0, 1\)"):
        torch.ops.torchvision.roi_align(x, bad, 1.0, 2, 2, -1, False)
        sync(device)


# ---------------- roi_pool ----------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_roi_pool_matches_reference(device, dtype):
    x = torch.randn(2, 3, 10, 11, dtype=dtype)
    rois = random_rois(7, 2, 20).to(dtype)
    rois[0, 1:] = torch.tensor([-4.0, -4.0, 40.0, 30.0])
    got = ops.roi_pool(x.to(device), rois.to(device), (3, 4), 0.5)
    torch.testing.assert_close(got.cpu().double(), ref_roi_pool(x, rois, 3, 4, 0.5), rtol=0, atol=0)


def test_roi_pool_argmax_and_backward(device):
    x = torch.arange(2 * 6 * 6, dtype=torch.float32).view(1, 2, 6, 6)
    rois = torch.tensor([[0, 0, 0, 5, 5], [0, 1, 1, 3, 2]], dtype=torch.float32)
    out, argmax = torch.ops.torchvision.roi_pool(x.to(device), rois.to(device), 1.0, 2, 2)
    # arange: each bin's maximum is its bottom-right element
    assert argmax.dtype == torch.int32
    assert argmax.cpu()[0, 0].tolist() == [[14, 17], [32, 35]]
    assert torch.equal(out.cpu()[0, 1], (argmax.cpu()[0, 1] + 36).float())
    xt = x.to(device).requires_grad_()
    g = torch.randn(2, 2, 2, 2)
    ops.roi_pool(xt, rois.to(device), (2, 2), 1.0).backward(g.to(device))
    want = torch.zeros(1, 2, 36)
    for n in range(2):
        for c in range(2):
            for k, a in enumerate(argmax.cpu()[n, c].flatten().tolist()):
                want[0, c, a] += g[n, c].flatten()[k]
    torch.testing.assert_close(xt.grad.cpu(), want.view(1, 2, 6, 6), rtol=0, atol=1e-6)


def test_roi_pool_gradcheck(device):
    x = torch.randn(1, 2, 6, 7, dtype=torch.float64, device=device, requires_grad=True)
    rois = torch.tensor([[0, 0, 0, 4, 5], [0, 1, 2, 6, 5]], dtype=torch.float64, device=device)
    assert torch.autograd.gradcheck(lambda t: ops.roi_pool(t, rois, (2, 3), 1.0), (x,), eps=1e-6, atol=1e-5)


def test_unimplemented_ops_say_so():
    with pytest.raises(NotImplementedError, match="qnms"):
        torch.ops.torchvision.qnms(torch.zeros(1, 4), torch.zeros(1), 0.5)
    with pytest.raises(NotImplementedError, match="box_iou_rotated"):
        torch.ops.torchvision.box_iou_rotated(torch.zeros(1, 5), torch.zeros(1, 5))


# ---------------- real use ----------------

def test_multiscale_roi_align(device):
    pool = ops.MultiScaleRoIAlign(["p2", "p3"], output_size=3, sampling_ratio=2)
    feats = {"p2": torch.randn(2, 4, 16, 16), "p3": torch.randn(2, 4, 8, 8)}
    xy = torch.rand(2, 5, 2) * 40
    boxes = [torch.cat([xy[i], xy[i] + torch.rand(5, 2) * 30 + 2], 1) for i in range(2)]
    sizes = [(64, 64), (64, 64)]
    want = pool(feats, boxes, sizes)  # CPU: torch_tpu's kernels too, checked against the references above
    got = pool({k: v.to(device) for k, v in feats.items()}, [b.to(device) for b in boxes], sizes)
    assert got.shape == (10, 4, 3, 3)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_fasterrcnn_mobilenet_eval(device, eager_mode):
    if eager_mode != "strict":
        pytest.skip("one mode for the whole model: the ops themselves run in all three above")
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn
    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=5).eval()
    on_dev = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=5).eval()
    on_dev.load_state_dict(model.state_dict())
    on_dev.to(device)
    img = torch.rand(3, 96, 128)
    # An untrained detector's scores tie to 1e-7 across proposals, so its top-k and NMS pick other boxes
    # for any difference in rounding. The detections are compared with the fp32 products on the library
    # PyTorch CPU uses (MKL where it is loaded); the backbone's features also under the default choice
    # (our own kernel on CPUs that are not Intel's), where they agree to rounding.
    import torch_tpu
    with torch.no_grad():
        images, _ = model.transform([img])
        want_feats = model.backbone(images.tensors)
        got_feats = on_dev.backbone(images.tensors.to(device))
        for name, f in want_feats.items():
            torch.testing.assert_close(got_feats[name].cpu(), f, rtol=1e-4, atol=1e-4 * f.abs().max().item())
        torch_tpu._C._set_fp32_blas(1)
        try:
            want = model([img])[0]
            got = on_dev([img.to(device)])[0]
        finally:
            torch_tpu._C._set_fp32_blas(-1)
    assert want["boxes"].shape[0] > 0
    for key in ("boxes", "scores", "labels"):
        torch.testing.assert_close(got[key].cpu(), want[key], rtol=1e-4, atol=1e-4)


def test_import_orders(eager_mode):
    """`import torchvision` works whatever imports torch_tpu: autoload, or torch_tpu by hand first."""
    if eager_mode != "strict":
        pytest.skip("import behaviour does not depend on the eager mode")
    import os
    import subprocess
    import sys
    code = ("import {first}, torchvision, torch; from torchvision import ops; "
            "b = torch.tensor([[0, 0, 4, 4], [0, 0, 4, 5.]]); "
            "assert ops.nms(b.to('tpu'), torch.tensor([1., 2.]).to('tpu'), 0.5).tolist() == [1]")
    for first, autoload in (("torch", "1"), ("torch_tpu", "0")):
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
        r = subprocess.run([sys.executable, "-c", code.format(first=first)], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
