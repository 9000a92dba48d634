"""Defects found by running PyTorch's test_nn.py (its device-generic TestNNDeviceType) on tpu with
tests/pytorch_suites.py, each kept here as a test against PyTorch CPU, so CI guards it without
PyTorch's files."""
import pytest
import torch
import torch.nn as nn


def test_layer_norm_long_row_matches_cpu(tpu, eager_mode):
    # test_LayerNorm_numeric: a row of 256 x 256 x 144 = 9.4M elements. The float kernel summed each
    # of its 32 lanes over 295K elements in float and lost 5e-5 of the output (the test's atol is 1e-5).
    torch.manual_seed(0)
    x = torch.rand(2, 256, 256, 144)
    ln = nn.LayerNorm([256, 256, 144])
    want = ln(x)
    got = ln.to(tpu)(x.to(tpu)).cpu()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [(3, 0, 10, 10), (2, 3, 10, 0), (3, 0, 10), (0, 10, 10), (10, 10)])
def test_reflection_pad2d_refuses_empty_dims_as_cpu(shape, tpu, eager_mode):
    # test_ReflectionPad_empty: PyTorch's decomposition padded a [3, 0, 10, 10] input; CPU raises
    with pytest.raises(RuntimeError) as cpu:
        nn.ReflectionPad2d(2)(torch.randn(shape))
    with pytest.raises(RuntimeError) as dev:
        nn.ReflectionPad2d(2)(torch.randn(shape, device=tpu))
    assert str(dev.value) == str(cpu.value)


def test_reflection_pad2d_empty_batch_still_pads(tpu, eager_mode):
    x = torch.randn(0, 3, 10, 10)
    assert nn.ReflectionPad2d(2)(x.to(tpu)).shape == nn.ReflectionPad2d(2)(x).shape
    x = torch.randn(2, 3, 4, 5)
    torch.testing.assert_close(nn.ReflectionPad2d((1, 2, 3, 0))(x.to(tpu)).cpu(), nn.ReflectionPad2d((1, 2, 3, 0))(x))


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("sizes", [(399, 437), (403, 377), (10, 13), (8, 5)])
def test_uint8_bilinear_matches_cpu(align_corners, sizes, tpu, eager_mode):
    # test_upsamplingBiLinear2d_consistency_interp_size_bug / test_upsamplingBiMode2d_consistency: with
    # align_corners=True the uint8 window's end lacked CPU's align_corners_delta, so it often held one
    # tap instead of two (the nearest pixel, up to 160 off)
    torch.manual_seed(0)
    isz, osz = sizes
    x = torch.randint(0, 256, (2, 3, isz, isz), dtype=torch.uint8)
    for fmt in (torch.contiguous_format, torch.channels_last):
        xf = x.contiguous(memory_format=fmt)
        want = torch.nn.functional.interpolate(xf, size=(osz, osz), mode="bilinear", align_corners=align_corners)
        got = torch.nn.functional.interpolate(xf.to(tpu), size=(osz, osz), mode="bilinear",
                                              align_corners=align_corners).cpu()
        assert torch.equal(got, want)


def test_threshold_in_place_on_expanded_tensor(tpu, eager_mode):
    # test_threshold_inplace_overlap: CPU's threshold skips the internal-overlap check (it is
    # idempotent), so an in-place threshold of an expanded view is allowed
    base = torch.tensor([[0.2, 0.7, -1.0, 0.5, 3.0, 0.49]])
    x = base.to(tpu).expand(6, 6)
    torch.nn.functional.threshold(x, 0.5, 0.5, inplace=True)
    torch.nn.functional.threshold_(x, 0.5, -2.0)
    want = base.expand(6, 6).clone()
    torch.nn.functional.threshold_(want, 0.5, 0.5)
    torch.nn.functional.threshold_(want, 0.5, -2.0)
    torch.testing.assert_close(x.cpu(), want)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        torch.nn.functional.relu_(base.to(tpu).expand(6, 6))


_UPSAMPLE_CASES = [((1, 3, 8), m) for m in ("nearest", "nearest-exact", "linear")] + \
    [((1, 3, 8, 8), m) for m in ("nearest", "nearest-exact", "bilinear", "bicubic")] + \
    [((1, 3, 4, 4, 4), m) for m in ("nearest", "nearest-exact", "trilinear")]


@pytest.mark.parametrize("shape,mode", _UPSAMPLE_CASES)
@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.uint8, torch.int32, torch.int64, torch.complex64,
                                   torch.float32])
def test_upsample_dtypes_as_cpu(shape, mode, dtype, tpu, eager_mode):
    # test_upsamplingBiMode2d_nonsupported_dtypes: CPU resizes floating tensors (and uint8 ones in the
    # nearest modes, bilinear and bicubic) and refuses the others at the call with NotImplementedError
    # '"<kernel>" not implemented for '<dtype>''; nearest and nearest-exact computed any dtype on tpu
    def run(dev):
        x = torch.arange(torch.Size(shape).numel()).reshape(shape).to(dtype).to(dev)
        return torch.nn.functional.interpolate(x, scale_factor=2, mode=mode)
    try:
        want = run("cpu")
    except NotImplementedError as e:
        assert "not implemented for" in str(e)
        with pytest.raises(NotImplementedError, match="not implemented for '"):
            run(tpu)
        return
    assert torch.equal(run(tpu).cpu(), want)


@pytest.mark.parametrize("align_corners", [True, False])
def test_bicubic_forward_kernel(align_corners, tpu, eager_mode):
    # upsample_bicubic2d has a forward kernel now (the tap tables of its backward): float results as
    # CPU's, channels_last kept; uint8 (which PyTorch's decomposition computed in float, 1-2 off in a
    # few pixels) equal to CPU's 16-bit fixed point: border-clamped taps merged per pixel, and the
    # precision from the merged weights (a border pixel's 1 - w3 > 1 takes one bit)
    torch.manual_seed(0)
    f = torch.nn.functional.interpolate
    for dt in (torch.float32, torch.float64):
        x = torch.rand(2, 3, 9, 11, dtype=dt)
        for size in ((13, 17), (4, 5), (9, 11)):
            torch.testing.assert_close(f(x.to(tpu), size=size, mode="bicubic", align_corners=align_corners).cpu(),
                                       f(x, size=size, mode="bicubic", align_corners=align_corners))
    x = torch.rand(2, 3, 9, 11).contiguous(memory_format=torch.channels_last)
    got = f(x.to(tpu), scale_factor=1.7, mode="bicubic", align_corners=align_corners)
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got.cpu(), f(x, scale_factor=1.7, mode="bicubic", align_corners=align_corners))
    for channels in (3, 5):  # CPU's AVX path (up to 4 channels) and its generic one
        u = torch.randint(0, 256, (2, channels, 40, 43), dtype=torch.uint8)
        for size in ((53, 53), (17, 29), (600, 32), (3, 2)):
            want = f(u, size=size, mode="bicubic", align_corners=align_corners)
            got = f(u.to(tpu), size=size, mode="bicubic", align_corners=align_corners).cpu()
            assert torch.equal(got, want)
