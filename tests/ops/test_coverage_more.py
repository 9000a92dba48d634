"""Long-tail op coverage, each checked against PyTorch CPU on the same inputs: NaN parity of the
activation backwards, float32 trigamma / airy_ai near their bad spots, upsampling backward (nearest-3d,
nearest-exact, trilinear, bicubic), cdist / pdist, embedding_bag, grid_sample 2-D and 3-D, and the
Python decompositions of torch_tpu/_decomp_more.py (margin losses, addbmm_, histograms,
segment_reduce, lstsq, _efficientzerotensor); bad inputs raise the exception type CPU raises."""
import pytest
import torch
import torch.nn.functional as F


def rnd(*shape, dtype=torch.float32, seed=0):
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def run_both(fn, inputs, device, grad=True, rtol=1e-5, atol=1e-5, equal_nan=True):
    """fn on CPU and on the device; compares outputs and (if grad) the gradients of every float input."""
    cin = [x.clone().requires_grad_(grad and x.dtype.is_floating_point) if isinstance(x, torch.Tensor) else x
           for x in inputs]
    din = [x.detach().to(device).requires_grad_(grad and x.dtype.is_floating_point)
           if isinstance(x, torch.Tensor) else x for x in inputs]
    yc, yd = fn(*cin), fn(*din)
    torch.testing.assert_close(yd.detach().cpu(), yc.detach(), rtol=rtol, atol=atol, equal_nan=equal_nan)
    if not grad:
        return
    g = rnd(*yc.shape, seed=7)
    leaves_c = [x for x in cin if isinstance(x, torch.Tensor) and x.requires_grad]
    leaves_d = [x for x in din if isinstance(x, torch.Tensor) and x.requires_grad]
    gc = torch.autograd.grad(yc, leaves_c, g)
    gd = torch.autograd.grad(yd, leaves_d, g.to(device))
    for a, b in zip(gd, gc):
        torch.testing.assert_close(a.cpu(), b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def sync():
    if hasattr(torch, "tpu"):
        torch.tpu.synchronize()


# ---- activation backward at NaN: the rule of CPU's vectorized body ----
# CPU's scalar tail (after the last whole pair of SIMD vectors: 16 or 32 floats, by ISA) answers
# otherwise at NaN; the device applies the vectorized rule everywhere. Sizes that are multiples of 64
# floats (and 16 doubles) and below CPU's 32768-element grain have no tail on any ISA.

ACTS = {
    "hardtanh": F.hardtanh, "relu6": F.relu6, "softshrink": F.softshrink, "hardshrink": F.hardshrink,
    "elu": lambda t: F.elu(t, alpha=0.8), "celu": lambda t: F.celu(t, alpha=0.8), "selu": F.selu,
}


@pytest.mark.parametrize("n", [64, 128, 4096, 128 * 128])
@pytest.mark.parametrize("name", sorted(ACTS))
def test_activation_backward_nan(device, name, n):
    x = rnd(n) * 3
    x[::3] = float("nan")
    x[1::7] = 1.0  # on hardtanh's border
    run_both(ACTS[name], [x], device, rtol=1e-6, atol=1e-6)


def test_activation_backward_nan_2d_and_double(device):
    x = rnd(5, 32, dtype=torch.float64)
    x[:, ::2] = float("nan")
    run_both(F.hardtanh, [x], device)
    run_both(lambda t: F.elu(t, alpha=1.5), [x], device)


# ---- float32 special functions computed as CPU computes them ----

def test_trigamma_near_poles_float32(device):
    x = torch.tensor([-7.0001, -8.9996, -2.9998, -3.0002, -0.5, 0.3, 1e-3, 2.5, 40.0, -7.0])
    for xi in (x, x + 1e-4):
        torch.testing.assert_close(torch.polygamma(1, xi.to(device)).cpu(), torch.polygamma(1, xi),
                                   rtol=1e-6, atol=0)
    run_both(torch.digamma, [rnd(300) * 6], device, rtol=1e-4, atol=1e-4)


def test_airy_ai_large_negative_float32(device):
    x = torch.tensor([-13437.7, -4988429.0, -9.5, -100.25, -2.5, 0.0, 3.0, 30.0])
    torch.testing.assert_close(torch.special.airy_ai(x.to(device)).cpu(), torch.special.airy_ai(x),
                               rtol=1e-4, atol=1e-5)


# ---- upsampling backward ----

@pytest.mark.parametrize("kw", [dict(size=(3, 5, 7)), dict(scale_factor=2), dict(scale_factor=(0.6, 1.7, 2.5))])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "trilinear"])
def test_upsample3d_backward(device, mode, kw):
    extra = dict(align_corners=False) if mode == "trilinear" else {}
    run_both(lambda t: F.interpolate(t, mode=mode, **kw, **extra), [rnd(2, 3, 4, 5, 6)], device)
    if mode == "trilinear":
        run_both(lambda t: F.interpolate(t, mode=mode, align_corners=True, **kw), [rnd(2, 3, 4, 5, 6)], device)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(size=(7, 3)), dict(scale_factor=(1.5, 0.5)), dict(size=(4, 5))])
def test_bicubic_backward(device, kw, align):
    run_both(lambda t: F.interpolate(t, mode="bicubic", align_corners=align, **kw), [rnd(2, 3, 4, 5)], device)
    x = rnd(1, 2, 6, 4, dtype=torch.float64)
    run_both(lambda t: F.interpolate(t, mode="bicubic", align_corners=align, **kw), [x], device)


@pytest.mark.parametrize("shape,size", [((2, 3, 7), (4,)), ((2, 3, 5, 4), (7, 9)), ((1, 2, 3, 4, 5), (5, 3, 2))])
def test_nearest_exact_backward(device, shape, size):
    run_both(lambda t: F.interpolate(t, size=size, mode="nearest-exact"), [rnd(*shape)], device)


def test_upsample_backward_non_contiguous_grad(device):
    x = rnd(2, 3, 4, 4, 4)
    run_both(lambda t: F.interpolate(t, scale_factor=2, mode="trilinear").transpose(-1, -2), [x], device)


# ---- cdist / pdist ----

@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist(device, p):
    a, b = rnd(2, 5, 4), rnd(2, 6, 4, seed=1)
    run_both(lambda x, y: torch.cdist(x, y, p=p, compute_mode="donot_use_mm_for_euclid_dist"), [a, b], device,
             rtol=1e-4, atol=1e-4)
    # broadcast batch, duplicate rows (zero distances)
    a2, b2 = rnd(1, 3, 4), rnd(3, 2, 4, seed=2)
    b2[:, 0] = a2[0, 1]
    run_both(lambda x, y: torch.cdist(x, y, p=p, compute_mode="donot_use_mm_for_euclid_dist"), [a2, b2], device,
             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 2.5, float("inf")])
def test_pdist(device, p):
    x = rnd(6, 3)
    x[4] = x[1]
    run_both(lambda t: F.pdist(t, p=p), [x], device, rtol=1e-4, atol=1e-4)
    run_both(lambda t: F.pdist(t, p=p), [rnd(1, 3)], device)


def test_cdist_bad_input(device):
    a, b = torch.randn(3, 4, device=device), torch.randn(3, 5, device=device)
    with pytest.raises(RuntimeError):
        torch.cdist(a, b)
    with pytest.raises(NotImplementedError):
        torch.cdist(a.bfloat16(), a.bfloat16(), compute_mode="donot_use_mm_for_euclid_dist")
        sync()
    with pytest.raises(RuntimeError):
        torch.cdist(a, a, p=-1.0)
        sync()


# ---- embedding_bag ----

@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag(device, mode, padding_idx):
    w = rnd(10, 4)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 2, 2])
    offsets = torch.tensor([0, 4, 4, 8])  # bag 1 is empty, the last holds only padding when padding_idx=2
    run_both(lambda t: F.embedding_bag(idx.to(t.device), t, offsets.to(t.device), mode=mode,
                                       padding_idx=padding_idx), [w], device)
    run_both(lambda t: F.embedding_bag(idx.to(t.device), t, torch.tensor([0, 3, 10]).to(t.device), mode=mode,
                                       include_last_offset=True, padding_idx=padding_idx), [w], device)
    run_both(lambda t: F.embedding_bag(idx.reshape(2, 5).to(t.device), t, mode=mode), [w], device)


def test_embedding_bag_per_sample_weights_and_freq(device):
    w, psw = rnd(10, 3), rnd(6, seed=3)
    idx, offsets = torch.tensor([1, 1, 4, 9, 0, 1]), torch.tensor([0, 2, 5])
    run_both(lambda t, s: F.embedding_bag(idx.to(t.device), t, offsets.to(t.device), mode="sum",
                                          per_sample_weights=s), [w, psw], device)
    run_both(lambda t: F.embedding_bag(idx.to(t.device), t, offsets.to(t.device), mode="mean",
                                       scale_grad_by_freq=True), [w], device)
    wb = rnd(10, 3, dtype=torch.bfloat16)
    run_both(lambda t: F.embedding_bag(idx.to(t.device), t, offsets.to(t.device)), [wb], device, grad=False,
             rtol=1.6e-2, atol=1e-2)


def test_embedding_bag_bad_input(device):
    w = torch.randn(10, 3, device=device)
    with pytest.raises(RuntimeError):
        F.embedding_bag(torch.tensor([1, 12], device=device), w, torch.tensor([0], device=device))
        sync()
    with pytest.raises(RuntimeError):
        F.embedding_bag(torch.tensor([1, 2], device=device), w, torch.tensor([1, 0], device=device))
        sync()


# ---- grid_sample ----

@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_2d(device, mode, padding, align):
    x, grid = rnd(2, 3, 5, 7), rnd(2, 4, 6, 2, seed=1) * 1.3
    grid[0, 0, 0] = torch.tensor([1.0, -1.0])  # exactly on the border
    fn = lambda t, g: F.grid_sample(t, g, mode=mode, padding_mode=padding, align_corners=align)
    run_both(fn, [x, grid], device, rtol=1e-4, atol=1e-4)
    run_both(fn, [x.double(), grid.double()], device, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d(device, mode, padding, align):
    x, grid = rnd(2, 2, 3, 4, 5), rnd(2, 3, 2, 4, 3, seed=1) * 1.2
    fn = lambda t, g: F.grid_sample(t, g, mode=mode, padding_mode=padding, align_corners=align)
    run_both(fn, [x, grid], device, rtol=1e-4, atol=1e-4)


def test_grid_sample_non_contiguous_grid(device):
    x, grid = rnd(1, 2, 5, 5), rnd(1, 2, 4, 3, seed=4).permute(0, 2, 3, 1)
    run_both(lambda t, g: F.grid_sample(t, g, align_corners=False), [x, grid], device, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_backward(device, dtype):
    """The 16-bit dtypes take the kernels' generic element access (float32 and float64 an inline one)."""
    tol = dict(rtol=1.6e-2, atol=5e-2)  # one bfloat16 ulp at the outputs' magnitude
    if dtype == torch.float16:  # bfloat16: CPU's grad_grid is rounded differently (up to 0.3 apart here)
        x, grid = rnd(2, 3, 5, 7, dtype=dtype), (rnd(2, 4, 6, 2, seed=1) * 1.3).to(dtype)
        run_both(lambda t, g: F.grid_sample(t, g, align_corners=False), [x, grid], device, **tol)
    w, idx, offsets = rnd(10, 4, dtype=dtype), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4, 4])
    run_both(lambda t: F.embedding_bag(idx.to(t.device), t, offsets.to(t.device), mode="mean"), [w], device, **tol)
    run_both(lambda t: F.interpolate(t, scale_factor=2, mode="trilinear"), [rnd(1, 2, 3, 4, 5, dtype=dtype)], device,
             **tol)


def test_grid_sample_bad_input(device):
    x = torch.randn(1, 1, 4, 4, device=device)
    with pytest.raises(RuntimeError):
        F.grid_sample(x, torch.randn(2, 3, 3, 2, device=device), align_corners=False)


# ---- margin losses, addbmm_, _efficientzerotensor ----

@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(device, p):
    for x, t in [(rnd(), torch.tensor(0)), (rnd(4), torch.tensor(2)), (rnd(3, 5), torch.tensor([0, 4, 2]))]:
        for red in ("none", "mean", "sum"):
            w = rnd(x.shape[-1] if x.dim() else 1, seed=5).abs()
            run_both(lambda a: F.multi_margin_loss(a, t.to(a.device), p=p, margin=0.7, weight=w.to(a.device),
                                                   reduction=red), [x], device)


def test_multilabel_margin_loss(device):
    cases = [(rnd(), torch.tensor(0)), (rnd(5), torch.tensor([2, -1, 4, 1, 3])),
             (rnd(5), torch.tensor([1, 1, 0, 1, 4])), (rnd(3, 4), torch.tensor([[3, 0, -1, 1], [1, 2, 3, 0],
                                                                                [-1, 1, 1, 1]]))]
    for x, t in cases:
        for red in ("none", "mean", "sum"):
            run_both(lambda a: F.multilabel_margin_loss(a, t.to(a.device), reduction=red), [x], device)


def test_addbmm_inplace_broadcast_self(device):
    s, a, b = rnd(1), rnd(5, 5, 5, seed=1), rnd(5, 5, 10, seed=2)
    c = s.clone().addbmm_(a, b, beta=0.5, alpha=2)
    d = s.to(device).addbmm_(a.to(device), b.to(device), beta=0.5, alpha=2)
    torch.testing.assert_close(d.cpu(), c, rtol=1e-5, atol=1e-5)


def test_efficientzerotensor_in_sgn_backward(device):
    x = rnd(4, 4)
    x[0, 0] = 0.0
    run_both(torch.sgn, [x], device)
    z = torch.ops.aten._efficientzerotensor([2, 3], dtype=torch.float32, device=device)
    assert z.device.type == torch.device(device).type and torch.equal(z.cpu(), torch.zeros(2, 3))


# ---- histograms ----

@pytest.mark.parametrize("density", [False, True])
def test_histogram(device, density):
    x, w = rnd(50), rnd(50, seed=1).abs()
    for kw in (dict(bins=7), dict(bins=5, range=(-1.0, 0.5)), dict(bins=torch.tensor([-2.0, -0.1, 0.0, 3.0]))):
        for weight in (None, w):
            c = torch.histogram(x, weight=weight, density=density, **kw)
            kd = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
            d = torch.histogram(x.to(device), weight=None if weight is None else weight.to(device),
                                density=density, **kd)
            for a, b in zip(d, c):
                torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)
    c = torch.histogram(torch.ones(3), bins=4)  # an empty data range widens by 0.5 each way
    d = torch.histogram(torch.ones(3, device=device), bins=4)
    torch.testing.assert_close(d[1].cpu(), c[1])
    torch.testing.assert_close(d[0].cpu(), c[0])


def test_histogramdd(device):
    x, w = rnd(40, 3), rnd(40, seed=1).abs()
    for bins in ([3, 4, 2], 3):
        for density in (False, True):
            c = torch.histogramdd(x, bins=bins, weight=w, density=density)
            d = torch.histogramdd(x.to(device), bins=bins, weight=w.to(device), density=density)
            torch.testing.assert_close(d.hist.cpu(), c.hist, rtol=1e-5, atol=1e-6)
            for a, b in zip(d.bin_edges, c.bin_edges):
                torch.testing.assert_close(a.cpu(), b)


def test_histogram_bad_range(device):
    with pytest.raises(RuntimeError):
        torch.histogram(torch.ones(3, device=device), bins=4, range=(3.0, 1.0))
    with pytest.raises(RuntimeError):
        torch.histogram(torch.tensor([1.0, float("inf")], device=device), bins=4)


# ---- segment_reduce ----

@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 1.5])
def test_segment_reduce(device, reduce, initial):
    data = rnd(2, 7, 3)
    data[1, 2, 0] = 0.0  # prod's gradient at a zero
    data[0, 5] = data[0, 6]  # ties for max/min
    lengths = torch.tensor([[2, 0, 5], [3, 3, 1]])
    offsets = torch.cat([torch.zeros(2, 1, dtype=torch.long), lengths.cumsum(1)], 1)
    for kw in (dict(lengths=lengths), dict(offsets=offsets)):
        fn = lambda t: torch.segment_reduce(t, reduce, axis=1, initial=initial,
                                            **{k: v.to(t.device) for k, v in kw.items()})
        run_both(fn, [data], device, rtol=1e-5, atol=1e-5)


# ---- lstsq ----

@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (2, 4), (2, 6, 3)])
def test_lstsq(device, driver, shape):
    a, b = rnd(*shape), rnd(*shape[:-1], 2, seed=1)
    c = torch.linalg.lstsq(a, b, driver=driver)
    d = torch.linalg.lstsq(a.to(device), b.to(device), driver=driver)
    for x, y in zip(d, c):
        assert x.shape == y.shape and x.dtype == y.dtype
        torch.testing.assert_close(x.cpu(), y, rtol=1e-4, atol=1e-4)
    run_both(lambda x, y: torch.linalg.lstsq(x, y, driver=driver).solution, [a, b], device, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_lstsq_complex(device, driver, dtype):
    """Complex residuals are real squared moduli (|A x - b|^2), as LAPACK's; every output's dtype as CPU's."""
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(2, 6, 3, dtype=dtype, generator=g), torch.randn(2, 6, 2, dtype=dtype, generator=g)
    for x, y in zip(torch.linalg.lstsq(a.to(device), b.to(device), driver=driver), torch.linalg.lstsq(a, b, driver=driver)):
        assert x.shape == y.shape and x.dtype == y.dtype
        torch.testing.assert_close(x.cpu(), y, rtol=1e-4, atol=1e-4)


def test_lstsq_bad_input(device):
    a = torch.randn(4, 3, device=device)
    with pytest.raises(RuntimeError):
        torch.linalg.lstsq(a, torch.randn(5, 2, device=device))
    with pytest.raises(RuntimeError):
        torch.linalg.lstsq(a, torch.randn(4, 2, device=device), driver="foo")


# ---- ctc_loss ----

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss(device, reduction, zero_infinity):
    T, N, C = 12, 4, 6
    lp = rnd(T, N, C).log_softmax(-1)
    targets = torch.randint(1, C, (N, 5), generator=torch.Generator().manual_seed(1))
    in_len, tg_len = [12, 10, 3, 12], [5, 3, 4, 0]  # entry 2 cannot fit its target: an infinite loss
    fn = lambda x: F.ctc_loss(x, targets.to(x.device), in_len, tg_len, reduction=reduction,
                              zero_infinity=zero_infinity)
    run_both(fn, [lp], device, rtol=1e-4, atol=1e-4)
    flat = torch.cat([targets[b, :tg_len[b]] for b in range(N)])  # 1-D concatenated targets, tensor lengths
    fn = lambda x: F.ctc_loss(x, flat.to(x.device), torch.tensor(in_len).to(x.device),
                              torch.tensor(tg_len).to(x.device), reduction=reduction, zero_infinity=zero_infinity)
    run_both(fn, [lp], device, rtol=1e-4, atol=1e-4)


def test_ctc_loss_bad_input(device):
    lp = torch.randn(5, 2, 4, device=device).log_softmax(-1)
    with pytest.raises(RuntimeError):
        F.ctc_loss(lp, torch.ones(2, 3, dtype=torch.long, device=device), [6, 5], [3, 3])
        sync()


# ---- antialiased bilinear ----

@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size", [(3, 3), (7, 12), (2, 25), (20, 40)])
def test_upsample_bilinear2d_aa(device, size, align):
    x = rnd(2, 3, 10, 20)
    run_both(lambda t: F.interpolate(t, size=size, mode="bilinear", antialias=True, align_corners=align), [x],
             device, rtol=1e-4, atol=1e-5)
    run_both(lambda t: F.interpolate(t, scale_factor=0.3, mode="bilinear", antialias=True), [x.double()], device)


# ---- LDL ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ldl_factor_and_solve(device, dtype):
    a = rnd(3, 6, 6, dtype=dtype)
    a = a + a.mT
    a[1, 0, 0] = 1e-4  # a small first pivot: forces interchanges / 2x2 blocks
    a[2].diagonal().zero_()
    c = torch.linalg.ldl_factor_ex(a)
    d = torch.linalg.ldl_factor_ex(a.to(device))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(d.LD.cpu(), c.LD, **tol)
    assert torch.equal(d.pivots.cpu(), c.pivots) and torch.equal(d.info.cpu(), c.info)
    b = rnd(3, 6, 2, dtype=dtype, seed=3)
    x_c = torch.linalg.ldl_solve(c.LD, c.pivots, b)
    x_d = torch.linalg.ldl_solve(c.LD.to(device), c.pivots.to(device), b.to(device))
    torch.testing.assert_close(x_d.cpu(), x_c, **tol)
    singular = torch.zeros(3, 3, dtype=dtype)
    assert torch.linalg.ldl_factor_ex(singular.to(device)).info.item() == torch.linalg.ldl_factor_ex(singular).info.item()


# ---- nextafter on 16-bit floats ----

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nextafter_16bit(device, dtype):
    a = torch.tensor([0.0, -0.0, 1.0, -1.0, 3.5, float("inf"), float("nan"), 1e-30, 65504.0, 2.0], dtype=dtype)
    b = torch.tensor([1.0, -1.0, 2.0, 0.0, 3.5, 0.0, 1.0, float("nan"), float("inf"), -0.0], dtype=dtype)
    torch.testing.assert_close(torch.nextafter(a.to(device), b.to(device)).cpu(), torch.nextafter(a, b),
                               rtol=0, atol=0, equal_nan=True)
    x = rnd(4, 5, dtype=dtype)
    torch.testing.assert_close(torch.nextafter(x.to(device), torch.zeros(5, dtype=dtype, device=device)).cpu(),
                               torch.nextafter(x, torch.zeros(5, dtype=dtype)), rtol=0, atol=0)
