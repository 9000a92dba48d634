"""Special functions on the device (runtime/ops/special) against PyTorch CPU: Bessel I/J/Y/K, Airy,
erfcx, ndtri, log_ndtr, zeta, polygamma, igamma/igammac, the orthogonal polynomials and frexp, over
float32/float64/bfloat16 and integer inputs, non-contiguous and broadcast operands, and the edges
(0, +-inf, NaN, domain errors). The device computes in double, so it is compared with CPU's float64
result at float64, and with CPU at the input dtype's tolerance otherwise."""
import pytest
import torch

S = torch.special

UNARY = {
    "i0": torch.i0, "i0e": S.i0e, "i1": S.i1, "i1e": S.i1e,
    "modified_bessel_i0": S.modified_bessel_i0, "modified_bessel_i1": S.modified_bessel_i1,
    "modified_bessel_k0": S.modified_bessel_k0, "modified_bessel_k1": S.modified_bessel_k1,
    "scaled_modified_bessel_k0": S.scaled_modified_bessel_k0,
    "scaled_modified_bessel_k1": S.scaled_modified_bessel_k1,
    "bessel_j0": S.bessel_j0, "bessel_j1": S.bessel_j1, "bessel_y0": S.bessel_y0, "bessel_y1": S.bessel_y1,
    "airy_ai": S.airy_ai, "spherical_bessel_j0": S.spherical_bessel_j0, "erfcx": S.erfcx,
    "log_ndtr": S.log_ndtr,
}
POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
         "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
         "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
         "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"]


def points(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.linspace(-25, 25, 401, dtype=torch.float64),
                   torch.randn(200, generator=g, dtype=torch.float64) * 8,
                   torch.tensor([0.0, 1e-8, 0.5, 60.0, 300.0, float("inf"), -float("inf"), float("nan")],
                                dtype=torch.float64)])
    return x.to(dtype)


def check(fn, args, device, rtol, atol):
    expect = fn(*args)
    got = fn(*[a.to(device) if isinstance(a, torch.Tensor) else a for a in args])
    if isinstance(expect, tuple):
        for e, d in zip(expect, got):
            torch.testing.assert_close(d.cpu(), e, rtol=rtol, atol=atol, equal_nan=True)
    else:
        assert got.device.type == torch.device(device).type
        torch.testing.assert_close(got.cpu(), expect, rtol=rtol, atol=atol, equal_nan=True)


# CPU's float64 J/Y/Airy use float-grade approximations (errors up to ~1e-6 around x = 5..7, where
# the device's series agree with mpmath to 1e-14), so those are compared at float32 tolerance.
LOOSE64 = {"bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float64(device, name):
    x = points()
    x = x[~x.isinf()]  # (the infinities are checked in test_infinities)
    if name in LOOSE64:
        check(UNARY[name], [x], device, rtol=1e-5, atol=1e-6)
    else:
        check(UNARY[name], [x], device, rtol=1e-9, atol=1e-12)


def test_known_values_float64(device):
    x = torch.tensor([6.25, 7.0, 5.125, -2.25], dtype=torch.float64, device=device)
    got = torch.stack([S.bessel_j0(x[0]), S.bessel_j1(x[1]), S.bessel_y1(x[2]), S.airy_ai(x[3])]).cpu()
    want = torch.tensor([0.213090053076661, -0.00468282348234583, 0.105126589043401, 0.0615986587770053],
                        dtype=torch.float64)  # mpmath
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    inf = torch.tensor([float("inf"), -float("inf")], dtype=torch.float64, device=device)
    assert torch.i0(inf).cpu().isnan().all()  # as PyTorch CPU (not the limit, inf)
    assert S.i0e(inf).cpu().tolist() == [0.0, 0.0]


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32_strided(device, name):
    x = points(torch.float32)
    x = x[~x.isinf()].reshape(-1, 1).expand(-1, 3)[:, 1]  # stride 0 on the columns, then a slice
    check(UNARY[name], [x], device, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e"])
def test_bfloat16_and_int(device, name):
    check(UNARY[name], [torch.linspace(-6, 6, 97).to(torch.bfloat16)], device, rtol=1.6e-2, atol=1e-2)
    check(UNARY[name], [torch.arange(-10, 11)], device, rtol=1e-5, atol=1e-5)  # int64 -> float32
    check(UNARY[name], [torch.tensor([True, False])], device, rtol=1e-5, atol=1e-5)


def test_ndtri(device):
    p = torch.cat([torch.rand(500, generator=torch.Generator().manual_seed(1), dtype=torch.float64),
                   torch.tensor([0.0, 1.0, 1e-300, 1e-20, 1 - 1e-12, -0.5, 2.0, float("nan")],
                                dtype=torch.float64)])
    check(S.ndtri, [p], device, rtol=1e-9, atol=1e-12)
    check(S.ndtri, [p.float()], device, rtol=1e-5, atol=1e-5)


def test_zeta_polygamma(device):
    g = torch.Generator().manual_seed(2)
    x = torch.rand(300, generator=g, dtype=torch.float64) * 10 + 1
    q = torch.rand(300, generator=g, dtype=torch.float64) * 20 - 5
    check(S.zeta, [x, q], device, rtol=1e-9, atol=1e-12)
    check(S.zeta, [x.float(), 2.5], device, rtol=1e-5, atol=1e-5)  # Scalar other
    xs = torch.linspace(0.05, 20, 200, dtype=torch.float64)
    for n in range(5):
        check(lambda t: torch.polygamma(n, t), [xs], device, rtol=1e-9, atol=1e-12)
        check(lambda t: torch.polygamma(n, t), [xs.float()], device, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac])
def test_igamma(device, fn):
    g = torch.Generator().manual_seed(3)
    a = torch.cat([torch.rand(300, generator=g, dtype=torch.float64) * 30,
                   torch.tensor([0.0, 0.0, -1.0, 2.0, float("inf"), 1.0])])
    x = torch.cat([torch.rand(300, generator=g, dtype=torch.float64) * 30,
                   torch.tensor([0.0, 2.0, 1.0, -1.0, 3.0, float("inf")])])
    check(fn, [a, x], device, rtol=1e-8, atol=1e-10)  # CPU float64 is off by ~2e-9 (mpmath agrees with the device)
    check(fn, [a.float(), x.float()], device, rtol=1e-5, atol=1e-5)
    check(fn, [a[:40].bfloat16(), x[:40].bfloat16()], device, rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("name", POLYS)
def test_polynomials(device, name):
    fn = getattr(S, name)
    x = torch.linspace(-2, 2, 81, dtype=torch.float64).reshape(-1, 1)
    n = torch.tensor([-3.0, -0.5, 0.0, 1.0, 2.0, 5.0, 7.0, 9.0, 12.0], dtype=torch.float64)
    check(fn, [x, n], device, rtol=1e-9, atol=1e-9)  # broadcast (81, 1) x (9,)
    check(fn, [x.float(), n.float()], device, rtol=1e-5, atol=1e-5)
    check(fn, [x.float(), 4], device, rtol=1e-5, atol=1e-5)  # Scalar n
    check(fn, [torch.arange(-3, 4), torch.arange(0, 7)], device, rtol=1e-5, atol=1e-5)  # int64 inputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_frexp(device, dtype):
    x = torch.tensor([8.0, -0.375, 0.0, 1e-3, 3e5, -7.0], dtype=dtype)
    check(torch.frexp, [x], device, rtol=0, atol=0)


def test_out_and_inplace(device):
    x = points(torch.float32)
    x = x[~x.isinf()]
    out = torch.empty_like(x, device=device)
    torch.special.i0e(x.to(device), out=out)
    torch.testing.assert_close(out.cpu(), S.i0e(x), rtol=1e-5, atol=1e-5, equal_nan=True)
    y = x.clone().to(device)
    y.i0_()
    torch.testing.assert_close(y.cpu(), torch.i0(x), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_infinities(device, name):
    # PyTorch CPU answers NaN for i0/i1/J/Y/Ai at +-inf; the device matches it
    x = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0])
    check(UNARY[name], [x], device, rtol=1e-6, atol=1e-7)
