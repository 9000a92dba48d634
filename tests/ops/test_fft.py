"""Complex dtypes and torch.fft on the device against PyTorch CPU: every fft/ifft/rfft/irfft/hfft/ihfft
form (1-d, 2-d, n-d) on sizes with small and large prime factors (mixed radix and Bluestein), each
normalization, explicit lengths (padding and cropping), float32 and float64, strided inputs, gradients
through rfft/irfft/fft; the complex elementwise kernels (arithmetic with real and complex operands,
abs/angle/sgn, complex()/polar(), lazy conj views through copies and matmul), data movement (cat, flip,
roll, indexing), a rotary embedding written with complex numbers, and linalg.eig/eigvals (eigenvalues in
CPU's order, eigenvectors up to phase, gradients). Kernels: runtime/ops/fft/,
runtime/ops/elementwise/ew_complex.c, runtime/ops/index/index_complex.c, runtime/ops/linalg/complex.c."""
import pytest
import torch

FFT = torch.fft
DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    if dtype in (torch.float32, torch.complex64):
        return dict(rtol=1e-4, atol=1e-4)
    return dict(rtol=1e-9, atol=1e-9)


def rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        real = torch.float32 if dtype == torch.complex64 else torch.float64
        return torch.complex(torch.randn(*shape, generator=g, dtype=real), torch.randn(*shape, generator=g, dtype=real))
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def same(fn, x, device, **kw):
    want = fn(x, **kw)
    got = fn(x.to(device), **kw)
    assert got.device.type == torch.device(device).type
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, **tol(want.dtype))


# sizes: powers of 2, 3, 5 and their products, small primes (generic radix), large primes (Bluestein)
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 30, 31, 37, 64, 97, 100, 127, 210, 256, 1009]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fft_1d_sizes(device, n, dtype):
    x = rnd(3, n, dtype=dtype)
    same(FFT.fft, x, device)
    same(FFT.rfft, x, device)
    same(FFT.ihfft, x, device)
    c = rnd(3, n, dtype=torch.complex64 if dtype == torch.float32 else torch.complex128, seed=1)
    same(FFT.ifft, c, device)
    if n > 1:  # output length 2 (n - 1)
        same(FFT.irfft, c, device)
        same(FFT.hfft, c, device)


@pytest.mark.parametrize("norm", [None, "forward", "backward", "ortho"])
@pytest.mark.parametrize("fn", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_fft_norms_and_lengths(device, fn, norm):
    real_in = fn in ("fft", "rfft", "ihfft")
    x = rnd(4, 9, 6, dtype=torch.float32 if real_in else torch.complex64)
    f = getattr(FFT, fn)
    for n in (None, 5, 11, 16):   # crop, pad, pad to a power of two
        for dim in (-1, 1, 0):
            same(f, x, device, n=n, dim=dim, norm=norm)


@pytest.mark.parametrize("fn", ["fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2",
                                "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fft_nd(device, fn, dtype):
    real_in = fn.startswith(("fft", "rfft", "ihfft"))
    cdtype = torch.complex64 if dtype == torch.float32 else torch.complex128
    x = rnd(3, 5, 7, 4, dtype=dtype if real_in else cdtype)
    f = getattr(FFT, fn)
    same(f, x, device)
    same(f, x, device, dim=(0, 2))
    same(f, x, device, s=(6, 3), dim=(1, 3), norm="ortho")
    if fn.endswith("n"):
        same(f, x, device, dim=(0, 1, 2, 3), norm="forward")


def test_fft_strided_input(device):
    x = rnd(8, 10, 6, dtype=torch.complex64)
    xd = x.to(device)
    for view in (lambda t: t.transpose(0, 2), lambda t: t[::2, 1:, ::3], lambda t: t.permute(1, 2, 0)[2:]):
        torch.testing.assert_close(FFT.fftn(view(xd), dim=(0, 1)).cpu(), FFT.fftn(view(x), dim=(0, 1)), **tol(x.dtype))
        torch.testing.assert_close(FFT.irfft(view(xd), dim=1).cpu(), FFT.irfft(view(x), dim=1), **tol(x.dtype))
    r = rnd(6, 12)
    torch.testing.assert_close(FFT.rfft(r.to(device).t()).cpu(), FFT.rfft(r.t()), **tol(r.dtype))


@pytest.mark.parametrize("fn,real_in", [("rfft", True), ("irfft", False), ("fft", True), ("fft", False),
                                        ("ihfft", True), ("hfft", False), ("rfft2", True), ("irfftn", False)])
def test_fft_backward(device, fn, real_in):
    x = rnd(4, 10, dtype=torch.float32 if real_in else torch.complex64, seed=3)
    f = getattr(FFT, fn)
    xc = x.clone().requires_grad_()
    xd = x.to(device).requires_grad_()
    yc, yd = f(xc), f(xd)
    g = rnd(*yc.shape, dtype=yc.dtype, seed=4)
    yc.backward(g)
    yd.backward(g.to(device))
    torch.testing.assert_close(yd.cpu(), yc.detach(), **tol(yc.dtype))
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol(x.dtype))


def test_fft_bad_input(device):
    with pytest.raises(IndexError):
        FFT.fft(rnd(3, 4).to(device), dim=5)
    with pytest.raises(RuntimeError):
        FFT.fft(rnd(3, 4).to(device), n=0)


# ---------------------------------- complex elementwise ----------------------------------

def test_complex_roundtrip_and_views(device):
    c = rnd(4, 5, dtype=torch.complex64)
    cd = c.to(device)
    torch.testing.assert_close(cd.cpu(), c)
    torch.testing.assert_close(torch.view_as_real(cd).cpu(), torch.view_as_real(c))
    torch.testing.assert_close(cd.real.cpu(), c.real)
    torch.testing.assert_close(cd.imag.cpu(), c.imag)
    torch.testing.assert_close(cd.to(torch.complex128).cpu(), c.to(torch.complex128))
    torch.testing.assert_close(cd.t().contiguous().cpu(), c.t().contiguous())
    r = rnd(4, 5)
    torch.testing.assert_close(r.to(device).to(torch.complex64).cpu(), r.to(torch.complex64))
    z = torch.zeros(3, dtype=torch.complex128, device=device)
    z.fill_(2.5)
    torch.testing.assert_close(z.cpu(), torch.full((3,), 2.5, dtype=torch.complex128))


def test_complex_scalars_and_casts(device):
    t = torch.full((3,), 1 + 2j, device=device)                   # a complex Scalar argument
    torch.testing.assert_close(t.cpu(), torch.full((3,), 1 + 2j))
    x = rnd(3, dtype=torch.complex64, seed=7)
    torch.testing.assert_close(torch.add(x.to(device), x.to(device), alpha=1j).cpu(), torch.add(x, x, alpha=1j))
    c = torch.tensor([0j, 1j, 1 + 0j, -2 - 3j])
    assert torch.equal(c.to(device).bool().cpu(), c.bool())    # true when either part is nonzero
    torch.testing.assert_close(c.to(device).real.contiguous().cpu(), c.real)


def test_conj_bits(device):
    c = rnd(4, 4, dtype=torch.complex64)
    cd = c.to(device)
    torch.testing.assert_close(cd.conj().cpu(), c.conj())           # lazy conj to the host
    torch.testing.assert_close(cd.conj().clone().cpu(), c.conj())   # materialized on the device
    torch.testing.assert_close(torch.imag(cd.conj()).cpu(), torch.imag(c.conj()))  # negative view
    torch.testing.assert_close((torch.imag(cd.conj()) * 2).cpu(), torch.imag(c.conj()) * 2)
    torch.testing.assert_close((cd.mH @ cd).cpu(), c.mH @ c, **tol(c.dtype))      # mm reads the bit
    t = torch.empty(4, 4, dtype=torch.complex64, device=device)
    t.copy_(c.conj())                                               # host conj view to the device
    torch.testing.assert_close(t.cpu(), c.conj())


@pytest.mark.parametrize("cdtype", [torch.complex64, torch.complex128])
def test_complex_arithmetic(device, cdtype):
    a, b = rnd(3, 4, dtype=cdtype, seed=1), rnd(1, 4, dtype=cdtype, seed=2)
    r = rnd(3, 1, seed=3)
    ad, bd, rd = a.to(device), b.to(device), r.to(device)
    for f in (lambda x, y, z: x + y, lambda x, y, z: x - 2 * y, lambda x, y, z: x * y, lambda x, y, z: x / y,
              lambda x, y, z: x * z, lambda x, y, z: z / x, lambda x, y, z: x * 1j + 0.5,
              lambda x, y, z: torch.add(x, y, alpha=3), lambda x, y, z: torch.addcmul(x, y, y, value=0.5),
              lambda x, y, z: torch.where(z > 0, x, y), lambda x, y, z: -x, lambda x, y, z: x.sum(0),
              lambda x, y, z: x.mean(), lambda x, y, z: x.conj_physical()):
        torch.testing.assert_close(f(ad, bd, rd).cpu(), f(a, b, r), **tol(cdtype))
    ac = a.clone()
    acd = a.to(device)
    ac.mul_(b)
    acd.mul_(bd)
    torch.testing.assert_close(acd.cpu(), ac, **tol(cdtype))


def test_complex_special_values(device):
    c = torch.tensor([complex(float("inf"), 0), 0j, complex(0, float("nan")), 1 + 1j, complex(-3, 4)],
                     dtype=torch.complex64)
    cd = c.to(device)
    for f in (torch.abs, torch.angle, torch.sgn, lambda x: x * (2 + 0j), lambda x: x / (1 + 1j)):
        torch.testing.assert_close(f(cd).cpu(), f(c), equal_nan=True)


def test_complex_polar_and_grads(device):
    a, th = rnd(5).abs(), rnd(5, seed=2)
    for f in (torch.complex, torch.polar):
        xc = [a.clone().requires_grad_(), th.clone().requires_grad_()]
        xd = [a.clone().to(device).requires_grad_(), th.clone().to(device).requires_grad_()]
        yc, yd = f(*xc), f(*xd)
        torch.testing.assert_close(yd.cpu(), yc.detach(), **tol(a.dtype))
        g = rnd(5, dtype=torch.complex64, seed=5)
        yc.backward(g)
        yd.backward(g.to(device))
        for p, q in zip(xc, xd):
            torch.testing.assert_close(q.grad.cpu(), p.grad, **tol(a.dtype))


@pytest.mark.parametrize("cdtype", [torch.complex64, torch.complex128])
def test_complex_data_movement(device, cdtype):
    c = rnd(4, 5, dtype=cdtype, seed=6)
    d = c.to(device)
    idx = torch.tensor([3, 0, 1])
    cases = [lambda x: torch.cat([x, x[:2]], 0), lambda x: torch.stack([x, x], -1), lambda x: x.flip(-1, 0),
             lambda x: x.roll(2, -1), lambda x: x.roll(3), lambda x: x.index_select(-1, idx.to(x.device))]
    if cdtype == torch.complex64:  # moved as 8-byte elements by every index kernel
        cases += [lambda x: x.gather(1, torch.ones(4, 2, dtype=torch.long, device=x.device)),
                  lambda x: x[idx.to(x.device)], lambda x: x.take(idx.to(x.device)), lambda x: x[x.real > 0]]
    for f in cases:
        torch.testing.assert_close(f(d).cpu(), f(c), rtol=0, atol=0)


def test_rotary_embedding_complex(device):
    # Llama's rotary embedding: polar, view_as_complex, a broadcast complex product, view_as_real
    def rope(xq, freqs):
        fc = torch.polar(torch.ones_like(freqs), freqs)
        xc = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        return torch.view_as_real(xc * fc.view(1, xq.shape[1], 1, -1)).flatten(3).type_as(xq)
    xq = rnd(2, 6, 4, 8, seed=8)
    freqs = torch.outer(torch.arange(6, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8))
    xc, xd = xq.clone().requires_grad_(), xq.clone().to(device).requires_grad_()
    yc, yd = rope(xc, freqs), rope(xd, freqs.to(device))
    torch.testing.assert_close(yd.cpu(), yc.detach(), **tol(xq.dtype))
    g = rnd(*yc.shape, seed=9)
    yc.backward(g)
    yd.backward(g.to(device))
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol(xq.dtype))


def test_complex_unsupported_is_not_implemented(device):
    if device == "cpu":
        pytest.skip("about the device's missing kernels")
    c = rnd(3, dtype=torch.complex64)
    m = torch.outer(c, c) + torch.eye(3)
    with pytest.raises(NotImplementedError, match="complex alpha"):
        # no kernel for index_add's complex alpha on complex tensors yet (CPU has one): a clear error
        # at the call, never a wrong answer
        idx = torch.tensor([0, 1, 1], device=device)
        torch.zeros(3, dtype=torch.complex64, device=device).index_add(0, idx, c.to(device), alpha=1j)
    # these have kernels now (complex LDL too: tests/test_pytorch_suites_findings_linalg.py; complex
    # scatter_add: tests/test_complex_scatter_reduce.py)
    idx = torch.tensor([0, 1, 1])
    torch.testing.assert_close(torch.zeros(3, dtype=torch.complex64, device=device).scatter_add(
        0, idx.to(device), c.to(device)).cpu(), torch.zeros(3, dtype=torch.complex64).scatter_add(0, idx, c))
    torch.testing.assert_close(torch.linalg.det(m.to(device)).cpu(), torch.linalg.det(m))
    torch.testing.assert_close(torch.cumprod(c.to(device), 0).cpu(), torch.cumprod(c, 0))
    torch.testing.assert_close(torch.logcumsumexp(c.to(device), 0).cpu(), torch.logcumsumexp(c, 0))


# --------------------------------------- linalg.eig ---------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (3, 6, 6), (2, 1, 8, 8), (0, 4, 4)])
def test_linalg_eig(device, dtype, shape):
    a = rnd(*shape, dtype=dtype, seed=11) * 4
    w, v = torch.linalg.eig(a)
    wd, vd = torch.linalg.eig(a.to(device))
    torch.testing.assert_close(wd.cpu(), w, **tol(w.dtype))                    # the same order as CPU
    torch.testing.assert_close(vd.cpu().abs(), v.abs(), **tol(w.dtype))       # vectors up to phase
    av = a.to(w.dtype).to(device) @ vd
    torch.testing.assert_close(av.cpu(), (vd * wd.unsqueeze(-2)).cpu(), **tol(w.dtype))
    torch.testing.assert_close(torch.linalg.eigvals(a.to(device)).cpu(), w, **tol(w.dtype))


def test_linalg_eig_backward(device):
    a = rnd(5, 5, seed=12)
    ac, ad = a.clone().requires_grad_(), a.to(device).requires_grad_()
    gw, gv = rnd(5, dtype=torch.complex64, seed=13), rnd(5, 5, seed=14)
    outs = []
    for x, dev in ((ac, "cpu"), (ad, device)):
        w, v = torch.linalg.eig(x)
        loss = (torch.view_as_real(w * gw.to(dev))).sum() + (v.abs() * gv.to(dev)).sum()
        loss.backward()
        outs.append(x.grad.cpu())
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-3, atol=1e-3)


def test_linalg_eig_rejects_nonfinite(device):
    a = rnd(3, 3)
    a[1, 1] = float("nan")
    with pytest.raises(RuntimeError):
        torch.linalg.eig(a.to(device))[0].cpu()
