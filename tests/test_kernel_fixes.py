"""Regression tests for bugs the test team found, each against PyTorch CPU: reflect/replicate pad
(16-bit forward was silently wrong: PyTorch's out= decompositions cast `out` to a float32 copy; the
backward .grad_input overloads failed), the index family in 16-bit floats, integer convolution."""
import pytest
import torch
import torch.nn.functional as F

HALF = [torch.bfloat16, torch.float16]


def _tol(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype in HALF else dict(atol=1e-5, rtol=1e-5)


def test_bf16_reflect_pad_known_answer(device):
    x = torch.tensor([[1.5, -2.0, 3.25]], dtype=torch.bfloat16)
    for mode in ("reflect", "replicate"):
        got = F.pad(x.to(device), [1, 2], mode=mode).cpu()
        torch.testing.assert_close(got, F.pad(x, [1, 2], mode=mode), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 5), [1, 2]), ((2, 2, 4, 5), [1, 2, 2, 1]),
                                       ((3, 5), [2, 0]), ((1, 3, 4), [3, 3])])
def test_pad_forward_backward(device, dtype, mode, shape, pad):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    up = torch.randn(F.pad(x, pad, mode=mode).shape, generator=g).to(dtype)
    xc = x.clone().requires_grad_()
    ref = F.pad(xc, pad, mode=mode)
    ref.backward(up)
    xd = x.to(device).requires_grad_()
    out = F.pad(xd, pad, mode=mode)
    out.backward(up.to(device))
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=0, rtol=0)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **_tol(dtype))


@pytest.mark.parametrize("op", ["reflection_pad1d", "replication_pad1d", "reflection_pad2d",
                                "replication_pad2d"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pad_out_overloads(device, op, dtype):
    nd = 1 if op.endswith("1d") else 2
    pad = [1, 2, 2, 1][: 2 * nd]
    x = torch.randn((2, 3, 4, 5)[-(nd + 1):]).to(dtype)
    fwd = getattr(torch.ops.aten, op)
    ref = fwd(x, pad)
    out = torch.empty(0, dtype=dtype, device=device)  # resized by the op
    fwd.out(x.to(device), pad, out=out)
    torch.testing.assert_close(out.cpu(), ref, atol=0, rtol=0)
    bwd = getattr(torch.ops.aten, op + "_backward")
    go = torch.randn(ref.shape).to(dtype)
    ref_gi = bwd(go, x, pad)
    gi = torch.empty(x.shape, dtype=dtype, device=device)
    bwd.grad_input(go.to(device), x.to(device), pad, grad_input=gi)
    torch.testing.assert_close(gi.cpu(), ref_gi, **_tol(dtype))
    torch.testing.assert_close(bwd(go.to(device), x.to(device), pad).cpu(), ref_gi, **_tol(dtype))


# ---- the index family in 16-bit floats (and float32 as control) ----

def _idx(n, size, seed=1):
    return torch.randint(0, size, (n,), generator=torch.Generator().manual_seed(seed))


INDEX_CASES = {
    "index": lambda x, d: x[d(_idx(4, 5))],
    "index_2d": lambda x, d: x[d(_idx(3, 5)), d(_idx(3, 6, 2))],
    "unsafe_index": lambda x, d: torch.ops.aten._unsafe_index(x, [None, d(_idx(7, 6))]),
    "index_select": lambda x, d: torch.index_select(x, 1, d(_idx(7, 6))),
    "gather": lambda x, d: torch.gather(x, 1, d(torch.randint(0, 6, (5, 4),
                                                              generator=torch.Generator().manual_seed(3)))),
    "take": lambda x, d: torch.take(x, d(_idx(9, 30))),
    "masked_select": lambda x, d: torch.masked_select(x, x > 0),
    "index_put": lambda x, d: x.clone().index_put_((d(_idx(4, 5)),), d(torch.ones(6, dtype=x.dtype))),
    "index_put_acc": lambda x, d: x.clone().index_put_((d(torch.tensor([0, 0, 2])),),
                                                       d(torch.ones(6, dtype=x.dtype)), accumulate=True),
    "index_add": lambda x, d: x.clone().index_add_(0, d(torch.tensor([1, 1, 4])),
                                                   d(torch.full((3, 6), 0.5, dtype=x.dtype))),
    "index_copy": lambda x, d: x.clone().index_copy_(1, d(torch.tensor([5, 0])),
                                                     d(torch.full((5, 2), -1.25, dtype=x.dtype))),
    "index_fill": lambda x, d: x.clone().index_fill_(1, d(torch.tensor([2, 3])), 7.5),
    "scatter": lambda x, d: x.clone().scatter_(1, d(torch.tensor([[0, 1], [2, 3]])),
                                               d(torch.full((2, 2), 3.5, dtype=x.dtype))),
    "scatter_add": lambda x, d: x.clone().scatter_add_(1, d(torch.tensor([[0, 0], [2, 2]])),
                                                       d(torch.full((2, 2), 0.75, dtype=x.dtype))),
    "masked_fill": lambda x, d: x.clone().masked_fill_(x > 0, -3.5),
    "masked_scatter": lambda x, d: x.clone().masked_scatter_(x > 0, d(torch.arange(30).to(x.dtype))),
    "put": lambda x, d: x.clone().put_(d(torch.tensor([0, 29, 7])), d(torch.tensor([1.5, 2.5, 3.5],
                                                                                   dtype=x.dtype))),
    "embedding": lambda x, d: F.embedding(d(torch.tensor([[0, 4], [2, 2]])), x),
    "flip": lambda x, d: torch.flip(x, [0, 1]),
    "roll": lambda x, d: torch.roll(x, 2, 1),
    "cat": lambda x, d: torch.cat([x, x[:2]]),
}


@pytest.mark.parametrize("dtype", [torch.float32] + HALF)
@pytest.mark.parametrize("case", sorted(INDEX_CASES))
def test_index_family_16bit(device, dtype, case):
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0)).to(dtype)
    f = INDEX_CASES[case]
    ref = f(x, lambda t: t)
    got = f(x.to(device), lambda t: t.to(device))
    torch.testing.assert_close(got.cpu(), ref, atol=0, rtol=0)


# ---- integer convolution ----

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_conv1d_int(device, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-50, 50, (2, 4, 9), generator=g).to(dtype)
    w = torch.randint(-50, 50, (6, 2, 3), generator=g).to(dtype)
    b = torch.randint(-50, 50, (6,), generator=g).to(dtype)
    wfull = torch.cat([w, w], 1)  # (6, 4, 3): all 4 input channels
    for weight, kw in ((wfull, dict()), (wfull, dict(stride=2, padding=1)), (w, dict(dilation=2, groups=2))):
        ref = F.conv1d(x.long(), weight.long(), b.long(), **kw).to(dtype)  # CPU lacks some int32 paths
        got = F.conv1d(x.to(device), weight.to(device), b.to(device), **kw)
        assert got.dtype == dtype
        torch.testing.assert_close(got.cpu(), ref, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_conv2d_int(device, dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-1000, 1000, (2, 3, 7, 6), generator=g).to(dtype)
    w = torch.randint(-1000, 1000, (4, 3, 3, 2), generator=g).to(dtype)
    b = torch.randint(-1000, 1000, (4,), generator=g).to(dtype)
    for kw in (dict(), dict(stride=(2, 1), padding=(1, 2)), dict(dilation=(2, 1))):
        ref = F.conv2d(x.long(), w.long(), b.long(), **kw).to(dtype)
        got = F.conv2d(x.to(device), w.to(device), b.to(device), **kw)
        torch.testing.assert_close(got.cpu(), ref, atol=0, rtol=0)
    ref = F.conv2d(x.long(), w.long()).to(dtype)  # no bias
    torch.testing.assert_close(F.conv2d(x.to(device), w.to(device)).cpu(), ref, atol=0, rtol=0)
    # a non-contiguous input
    xt = x.transpose(2, 3)
    ref = F.conv2d(xt.long(), w.long(), b.long()).to(dtype)
    torch.testing.assert_close(F.conv2d(xt.to(device), w.to(device), b.to(device)).cpu(), ref, atol=0, rtol=0)


# ---- embedding_renorm_ ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_embedding_renorm(device, dtype, norm_type):
    g = torch.Generator().manual_seed(4)
    w = (torch.randn(10, 5, generator=g) * 2).to(dtype)
    idx = torch.tensor([[1, 3, 3], [7, 1, 0]])
    ref = w.clone()
    torch.embedding_renorm_(ref, idx, 1.5, norm_type)
    got = w.to(device)
    torch.embedding_renorm_(got, idx.to(device), 1.5, norm_type)
    torch.testing.assert_close(got.cpu(), ref, **_tol(dtype))
    # through F.embedding(max_norm=...), on a non-contiguous weight
    wt = w.t().contiguous().t()
    ref_w = wt.clone()
    ref_y = F.embedding(idx, ref_w, max_norm=1.0, norm_type=norm_type)
    got_w = wt.to(device)
    got_y = F.embedding(idx.to(device), got_w, max_norm=1.0, norm_type=norm_type)
    torch.testing.assert_close(got_w.cpu(), ref_w, **_tol(dtype))
    torch.testing.assert_close(got_y.cpu(), ref_y, **_tol(dtype))


def test_embedding_renorm_bad_index(device):
    w = torch.randn(4, 3, device=device)
    with pytest.raises((IndexError, RuntimeError)):
        torch.embedding_renorm_(w, torch.tensor([5], device=device), 1.0, 2.0)
        w.cpu()


def _llc_bytes():
    """The last-level cache as the runtime reads it (elementwise.c: sysfs, highest level)."""
    import glob
    best = (0, 0)
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            level = int(open(d + "/level").read())
            size = open(d + "/size").read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        best = max(best, (level, int(size.rstrip("KM")) * mult))
    return best[1] or 32 << 20


@pytest.mark.parametrize("offset", [0, 1, 5])
def test_large_elementwise_streaming_stores(device, offset):
    """Outputs at least the last-level cache in size are written with
    non-temporal stores; check values there, with a misaligned output."""
    llc = _llc_bytes()
    if llc > 256 << 20:
        pytest.skip(f"last-level cache of {llc >> 20} MiB: a streamed output would be too large for this test")
    n = max(llc, 4 << 20) // 4 + (1 << 20)  # float32 elements: 4 MiB past the threshold
    torch.manual_seed(0)
    a, b = torch.randn(n), torch.randn(n)
    out = torch.empty(n + offset, device=device)[offset:]
    torch.add(a.to(device), b.to(device), out=out)
    torch.testing.assert_close(out.cpu(), a + b, rtol=0, atol=0)
    torch.testing.assert_close(torch.mul(a.to(device), 3.0).cpu(), a * 3.0, rtol=0, atol=0)


@pytest.mark.parametrize("args", [(2.1, -2.9, -1.0), (0.5, 5.5, 1.5), (-3.5, 3, 1.2), (0, 10, 3)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16])
def test_arange_integral_dtype_truncates_start_and_step(device, args, dtype):
    """As CPU: an integral arange casts start and step to int64 before stepping."""
    assert torch.equal(torch.arange(*args, dtype=dtype, device=device).cpu(), torch.arange(*args, dtype=dtype))


def test_gather_empty_index_of_other_rank(device):
    x = torch.arange(5.0)
    idx = torch.empty(0, 0, dtype=torch.long)
    assert torch.gather(x.to(device), 0, idx.to(device)).shape == torch.gather(x, 0, idx).shape


def test_unfold_backward_of_0d_input(device):
    """A 0-d tensor unfolds as 1-d of size 1; its gradient flows back."""
    grads = []
    for dev in ("cpu", device):
        x = torch.tensor(3.0, device=dev, requires_grad=True)
        (x.unfold(0, 1, 1) * 5.0).sum().backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


# native_layer_norm / native_group_norm reach the C kernels (not PyTorch's composite, which ran
# them as a batch norm): all three outputs, empty rows (mean 0, rstd NaN as on CPU), and autograd.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape,ns", [((4, 7, 33), (33,)), ((3, 5, 6), (5, 6)), ((10,), (10,)),
                                      ((2, 0, 4), (4,)), ((2, 0), (0,)), ((3, 2, 0), (2, 0))])
def test_native_layer_norm_all_outputs(device, dtype, shape, ns):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(dtype)
    w, b = torch.randn(ns, generator=g).to(dtype), torch.randn(ns, generator=g).to(dtype)
    for wb in ((w, b), (None, None)):
        ref = torch.native_layer_norm(x, ns, *wb, 1e-5)
        got = torch.native_layer_norm(x.to(device), ns, *(t.to(device) if t is not None else None for t in wb), 1e-5)
        meta = torch.native_layer_norm(x.to("meta"), ns, *(t.to("meta") if t is not None else None for t in wb), 1e-5)
        for r, o, m in zip(ref, got, meta):
            # dtypes are the meta function's (what torch.compile sees): 16-bit inputs keep float32
            # statistics, as on CUDA; CPU eager rounds them to the input dtype
            assert o.shape == r.shape and o.dtype == m.dtype
            torch.testing.assert_close(o.cpu().to(r.dtype), r, equal_nan=True, **_tol(dtype))


# The float32 row path reads a contiguous float32 weight and bias in place and converts contiguous
# 16-bit ones in one pass; strided ones (views) still go element by element.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("strided", [False, True])
def test_layer_norm_weight_layouts(device, dtype, strided):
    def on_device(t):
        if not strided:
            return t.to(device)
        buf = torch.zeros(t.numel() * 2, dtype=t.dtype, device=device)
        buf[::2] = t.to(device)
        assert not buf[::2].is_contiguous()
        return buf[::2]

    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 64, generator=g).to(dtype)
    w, b = torch.randn(64, generator=g).to(dtype), torch.randn(64, generator=g).to(dtype)
    got = F.layer_norm(x.to(device), (64,), on_device(w), on_device(b))
    torch.testing.assert_close(got.cpu(), F.layer_norm(x, (64,), w, b), **_tol(dtype))
    got = F.rms_norm(x.to(device), (64,), on_device(w))
    torch.testing.assert_close(got.cpu(), F.rms_norm(x, (64,), w), **_tol(dtype))


@pytest.mark.parametrize("shape,groups", [((4, 6, 5, 3), 3), ((2, 4, 7), 2), ((3, 8), 4), ((2, 6, 0), 3)])
def test_native_group_norm_all_outputs(device, shape, groups):
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(shape, generator=g), torch.randn(shape[1], generator=g), torch.randn(shape[1], generator=g)
    hw = 1
    for s in shape[2:]:
        hw *= s
    ref = torch.native_group_norm(x, w, b, shape[0], shape[1], hw, groups, 1e-5)
    got = torch.native_group_norm(x.to(device), w.to(device), b.to(device), shape[0], shape[1], hw, groups, 1e-5)
    for r, o in zip(ref, got):
        assert o.shape == r.shape
        torch.testing.assert_close(o.cpu(), r, equal_nan=True, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(torch.randn(2, 6, 3, device=device), 4)


def test_layer_and_group_norm_backward(device):
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(3, 4, 6, generator=g), torch.randn(6, generator=g), torch.randn(6, generator=g)
    for fn in (lambda x, w, b: F.layer_norm(x, (6,), w, b), lambda x, w, b: F.group_norm(x, 2, w[:4], b[:4])):
        ref_in = [t.clone().requires_grad_() for t in (x, w, b)]
        dev_in = [t.to(device).requires_grad_() for t in (x, w, b)]
        fn(*ref_in).square().sum().backward()
        fn(*dev_in).square().sum().backward()
        for r, d in zip(ref_in, dev_in):
            torch.testing.assert_close(d.grad.cpu(), r.grad, atol=1e-4, rtol=1e-4)


# fp32 products are cut into slabs of C across the chip's threads, one single-threaded BLAS call
# each (gemm.c blas_call: 2 slabs from 2^21 multiply-adds on 2 threads, by rows when m >= n, else by
# columns; "out_t" swaps m and n). 517x129x257 splits by rows (by columns as out_t), 40x300x517 by
# columns, both with a ragged last slab; the small shapes take one call.
@pytest.mark.parametrize("m,k,n", [(517, 129, 257), (40, 300, 517), (300, 70, 40), (16, 2048, 16), (1, 5, 3)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt", "out_t"])
def test_sliced_fp32_gemm_layouts(device, m, k, n, layout):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(k, m, generator=g).t() if layout[0] == "t" and layout != "out_t" else torch.randn(m, k, generator=g)
    b = torch.randn(n, k, generator=g).t() if layout[1] == "t" and layout != "out_t" else torch.randn(k, n, generator=g)
    c = torch.randn(m, n, generator=g)
    ref = torch.addmm(c, a, b, beta=0.5, alpha=2.0)
    if layout == "out_t":  # C stored transposed: the product is taken as C^T = B^T A^T
        out = torch.empty(n, m, device=device).t()
        torch.addmm(c.to(device), a.to(device), b.to(device), beta=0.5, alpha=2.0, out=out)
    else:
        out = torch.addmm(c.to(device), a.to(device), b.to(device), beta=0.5, alpha=2.0)
    torch.testing.assert_close(out.cpu(), ref, atol=1e-3, rtol=1e-4)
