"""Defects found by running PyTorch's test_spectral_ops.py on tpu (tests/pytorch_suites.py), each kept
as a test against PyTorch CPU so CI guards it without PyTorch's files."""
import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.complex128])
def test_fftn_over_no_dims_is_a_copy(dtype, tpu, eager_mode):
    # test_fftn_noop_transform: fftn(x, dim=[]) reaches _fft_c2c with no dims, which ATen's CPU and
    # CUDA kernels answer with self.clone(); the tpu kernel refused it at the next sync
    x = torch.randn(10, 10, dtype=dtype)
    for op in (torch.fft.fftn, torch.fft.ifftn):
        for t in (x, x.t(), x[::2, 1:]):
            want = op(t, dim=[])
            got = op(t.to(tpu), dim=[])
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got.cpu(), want)
            for norm in ("forward", "ortho"):
                assert torch.equal(op(t.to(tpu), dim=[], norm=norm).cpu(), op(t, dim=[], norm=norm))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_unfold_backward_complex(dtype, tpu, eager_mode):
    # test_complex_stft_roundtrip / test_stft_roundtrip_complex_window / test_complex_istft_real_equiv:
    # istft of a complex signal runs unfold's backward (aten::unfold_backward) on complex128, which had
    # no tpu kernel
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 20, dtype=dtype, generator=g)
    for dim, size, step in ((1, 5, 2), (0, 2, 1), (1, 4, 4), (-1, 7, 3), (1, 1, 1)):
        shape = x.unfold(dim, size, step).shape
        grad = torch.randn(shape, dtype=dtype, generator=g)
        want = torch.ops.aten.unfold_backward(grad, x.shape, dim, size, step)
        got = torch.ops.aten.unfold_backward(grad.to(tpu), x.shape, dim, size, step)
        torch.testing.assert_close(got.cpu(), want)
    # through autograd, with a non-contiguous gradient
    xt = x.to(tpu).requires_grad_()
    y = xt.unfold(1, 4, 2)
    gy = torch.randn(y.shape[::-1], dtype=dtype, generator=g).permute(2, 1, 0)
    (gx,) = torch.autograd.grad(y, xt, gy.to(tpu))
    xc = x.clone().requires_grad_()
    (want,) = torch.autograd.grad(xc.unfold(1, 4, 2), xc, gy)
    torch.testing.assert_close(gx.cpu(), want)


def test_complex_stft_istft_roundtrip(tpu, eager_mode):
    x = torch.randn(600, dtype=torch.complex128)
    window = torch.rand(50, dtype=torch.complex128)
    kw = dict(n_fft=50, hop_length=10, window=window, center=True, normalized=True)
    want = torch.istft(torch.stft(x, return_complex=True, **kw), length=600, return_complex=True, **kw)
    kw["window"] = window.to(tpu)
    got = torch.istft(torch.stft(x.to(tpu), return_complex=True, **kw), length=600, return_complex=True, **kw)
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(got.cpu(), x)
