"""Defects test_linalg.py found on tpu, each checked against PyTorch CPU: complex linalg.eig/eigvals,
eig's inf/nan check at the call, linalg_eigvals.out's checks, complex LDL (symmetric and Hermitian),
lstsq's argument checks, _compute_linear_combination, and written conj()/negative views (out= and
in-place) of the ops PyTorch's math-bit fallbacks let through."""
import warnings

import numpy as np
import pytest
import torch

import torch_tpu  # noqa: F401

TPU = "tpu"
CPLX = [torch.complex64, torch.complex128]


def _tol(dt):
    return 1e-4 if dt in (torch.float32, torch.complex64) else 1e-10


def _structured(dt):
    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, dtype=dt, generator=g)  # noqa: E731
    herm = r(6, 6)
    return {
        "random": r(5, 5),
        "batched": r(2, 3, 7, 7),
        "upper": r(5, 5).triu(),
        "hermitian": herm + herm.mH,
        "diagonal": torch.diag(torch.tensor([1 + 2j, 3, -1j, 0.5], dtype=dt)),
        "jordan": torch.tensor([[2, 1, 0], [0, 2, 1], [0, 0, 2]], dtype=dt),
        "permutation": torch.tensor([[0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=dt),
        "zero": torch.zeros(4, 4, dtype=dt),
        "large": r(40, 40),
        "empty": r(0, 0),
    }


@pytest.mark.parametrize("dt", CPLX)
@pytest.mark.parametrize("kind", list(_structured(torch.complex64)))
def test_complex_eig_matches_cpu(dt, kind):
    a = _structured(dt)[kind]
    w, v = torch.linalg.eig(a.to(TPU))
    w, v = w.cpu(), v.cpu()
    assert w.dtype == dt and v.dtype == dt and w.shape == a.shape[:-1] and v.shape == a.shape
    if a.numel() == 0:
        return
    wc = torch.linalg.eigvals(a)
    # the order may differ from LAPACK's: compare sorted, as PyTorch's own test does
    got = np.sort_complex(w.numpy().reshape(-1, a.shape[-1]), )
    want = np.sort_complex(wc.numpy().reshape(-1, a.shape[-1]))
    scale = max(1.0, a.abs().max().item())
    tol = (3e-4 if dt == torch.complex64 else 1e-9) * scale * (10 if kind == "jordan" else 1)
    if kind == "jordan":  # a defective eigenvalue is only determined to about eps^(1/3)
        tol = 1e-2 if dt == torch.complex64 else 1e-4
    np.testing.assert_allclose(got, want, atol=tol, rtol=0)
    # eigenvectors: A v = lambda v, unit 2-norm, largest component real (geev's normalization)
    resid = (a @ v - v * w.unsqueeze(-2)).abs().max().item()
    assert resid < 50 * _tol(dt) * scale, resid
    assert torch.allclose(v.norm(dim=-2), torch.ones(1, dtype=v.real.dtype), atol=_tol(dt) * 10)
    big = v.abs().argmax(dim=-2, keepdim=True)
    assert v.gather(-2, big).imag.abs().max().item() < _tol(dt)
    # eigvals alone gives the same values
    assert torch.equal(torch.linalg.eigvals(a.to(TPU)).cpu(), w)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64] + CPLX)
@pytest.mark.parametrize("shape", [(3, 3), (2, 12, 12), (60, 60)])
def test_eig_is_cpus_geev(dt, shape):
    """Real and complex eig run LAPACK's geev in the input's precision, as CPU does: the same
    eigenvalues in the same order, the same eigenvectors (unit norm, the largest component real;
    a real matrix's conjugate pairs). At these sizes CPU's order did not depend on its thread count
    (at 256 x 256 it does)."""
    a = torch.randn(*shape, dtype=dt, generator=torch.Generator().manual_seed(7))
    w, v = torch.linalg.eig(a)
    wt, vt = torch.linalg.eig(a.to(TPU))
    tol = _tol(dt) * max(1.0, w.abs().max().item())
    torch.testing.assert_close(wt.cpu(), w, atol=tol, rtol=0)
    torch.testing.assert_close(vt.cpu(), v, atol=_tol(dt) * 10, rtol=0)
    torch.testing.assert_close(torch.linalg.eigvals(a.to(TPU)).cpu(), torch.linalg.eigvals(a), atol=tol, rtol=0)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64] + CPLX)
@pytest.mark.parametrize("val", [float("inf"), float("nan")])
def test_eig_inf_nan_raises_at_the_call(dt, val):
    a = torch.randn(2, 5, 5).to(dt).to(TPU)
    a[..., -1, -1] = val
    for fn in (torch.linalg.eig, torch.linalg.eigvals):
        with pytest.raises(RuntimeError, match="torch.linalg.eig: input tensor should not contain infs or NaNs"):
            fn(a)  # no sync after it: the error must come from the call itself
    # the process keeps working
    good = torch.randn(3, 3, dtype=dt)
    assert torch.allclose(torch.linalg.eigvals(good.to(TPU)).cpu().abs().sort().values,
                          torch.linalg.eigvals(good).abs().sort().values, atol=1e-4)


@pytest.mark.parametrize("dt", [torch.float32, torch.complex128])
def test_eigvals_out_checks_and_values(dt):
    a = torch.randn(3, 3, dtype=dt)
    for dev in ("cpu", TPU):
        with pytest.raises(RuntimeError, match="but got eigenvalues with dtype Int"):
            torch.linalg.eigvals(a.to(dev), out=torch.empty(0, dtype=torch.int, device=dev))
    if not dt.is_complex:
        with pytest.raises(RuntimeError, match="Expected eigenvalues to be safely castable"):
            torch.linalg.eigvals(a.to(TPU), out=torch.empty(0, dtype=dt, device=TPU))
    out = torch.empty(1, dtype=torch.complex128, device=TPU)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.linalg.eigvals(a.to(TPU), out=out)
    assert any("An output with one or more elements was resized" in str(x.message) for x in w)
    want = torch.linalg.eigvals(a).to(torch.complex128)
    assert np.allclose(np.sort_complex(out.cpu().numpy()), np.sort_complex(want.numpy()), atol=1e-4)


def _ldl_input(dt, hermitian, kind, g, n):
    if kind == "pd":
        m = torch.randn(3, n, n, dtype=dt, generator=g)
        return m @ m.mH + n * torch.eye(n, dtype=dt)
    m = torch.randn(3, n, n, dtype=dt, generator=g)  # indefinite: 2x2 pivots occur
    return m + (m.mH if hermitian else m.mT)


@pytest.mark.parametrize("dt", [torch.float64] + CPLX)
@pytest.mark.parametrize("hermitian", [False, True])
@pytest.mark.parametrize("kind", ["pd", "indefinite"])
@pytest.mark.parametrize("n", [7, 40])  # 40: LAPACK's sytrf/hetrf and sytrs/hetrs (lapack.h's LAPACK_MIN_LDL)
def test_ldl_factor_and_solve_match_cpu(dt, hermitian, kind, n):
    g = torch.Generator().manual_seed(3)
    a = _ldl_input(dt, hermitian, kind, g, n)
    ld, piv, info = torch.linalg.ldl_factor_ex(a.to(TPU), hermitian=hermitian)
    ldc, pivc, infoc = torch.linalg.ldl_factor_ex(a, hermitian=hermitian)
    assert torch.equal(piv.cpu(), pivc) and torch.equal(info.cpu(), infoc)
    if kind == "indefinite":
        assert (pivc < 0).any()  # the 2x2 block path ran
    torch.testing.assert_close(ld.cpu(), ldc, atol=_tol(dt) * 10, rtol=_tol(dt) * 10)
    b = torch.randn(3, n, 2, dtype=dt, generator=g)
    x = torch.linalg.ldl_solve(ld, piv, b.to(TPU), hermitian=hermitian).cpu()
    torch.testing.assert_close(x, torch.linalg.ldl_solve(ldc, pivc, b, hermitian=hermitian),
                               atol=_tol(dt) * 100, rtol=_tol(dt) * 100)
    sym = a if hermitian or not dt.is_complex else a.tril() + a.tril(-1).mT
    torch.testing.assert_close(sym @ x, b, atol=_tol(dt) * 1000, rtol=_tol(dt) * 100)


def test_lstsq_argument_checks_as_cpu():
    a = torch.rand(2, 3)
    b = torch.rand(3)
    cases = [
        (lambda d: torch.linalg.lstsq(b.to(d), b.to(d)), "input must have at least 2 dimensions"),
        (lambda d: torch.linalg.lstsq(a.to(d), torch.tensor(1.0, device=d)), "other must have at least 1 dimension"),
        (lambda d: torch.linalg.lstsq(a.to(d), b.to(d)), r"input.size\(-2\) should match other.size\(-1\)"),
        (lambda d: torch.linalg.lstsq(a.to(d), b.to(d).unsqueeze(-1)), r"input.size\(-2\) should match other.size\(-2\)"),
        (lambda d: torch.linalg.lstsq(torch.rand(2, 2, 2, device=d), torch.ones(2, 2, dtype=torch.long, device=d)),
         "the same dtype"),
    ]
    for fn, msg in cases:
        for dev in ("cpu", TPU):
            with pytest.raises(RuntimeError, match=msg):
                fn(dev)
    # empty shapes give CPU's zero solutions
    for sa, sb, want in [((0, 0, 3, 3), (0, 0, 3, 2), (0, 0, 3, 2)), ((2, 2, 3, 0), (2, 2, 3, 2), (2, 2, 0, 2))]:
        x = torch.linalg.lstsq(torch.rand(sa, device=TPU), torch.rand(sb, device=TPU))[0]
        assert x.shape == want and torch.count_nonzero(x.cpu()) == 0


@pytest.mark.parametrize("dt", [torch.float32, torch.complex64])
def test_compute_linear_combination_and_matrix_exp(dt):
    g = torch.Generator().manual_seed(0)
    coeffs = torch.rand(5, 3, generator=g)
    x = torch.rand(3, 4, 4, generator=g).to(dt)
    want = torch._compute_linear_combination(x, coeffs)
    got = torch._compute_linear_combination(x.to(TPU), coeffs.to(TPU)).cpu()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    out = torch.ones(5, 4, 4, dtype=dt, device=TPU)  # out= accumulates, as CPU's kernel does
    torch._compute_linear_combination(x.to(TPU), coeffs.to(TPU), out=out)
    torch.testing.assert_close(out.cpu() - 1, want, atol=1e-5, rtol=0)
    a = torch.randn(3, 4, 4, generator=g).to(dt)
    torch.testing.assert_close(torch.linalg.matrix_exp(a.to(TPU)).cpu(), torch.linalg.matrix_exp(a),
                               atol=1e-5, rtol=1e-5)


def _written_math_bit_cases(dev, A, B, C):
    T = A.triu() + 3 * torch.eye(3)
    a, b, t = A.to(dev), B.to(dev), T.to(dev)
    out = {}
    o = torch.empty(3, 3, dtype=A.dtype, device=dev).conj()
    out["mm out=conj"] = torch.mm(a, b, out=o)
    o = C.clone().to(dev).conj()
    out["addmm out=self=conj"] = torch.addmm(o, a, b, out=o)
    o = C.clone().to(dev).conj()
    out["addmm_ on conj"] = o.addmm_(a, b)
    o = torch.empty(2, 3, 3, dtype=A.dtype, device=dev).conj()
    out["bmm out=conj"] = torch.bmm(a.expand(2, 3, 3), b.expand(2, 3, 3), out=o)
    o = torch.empty(3, 3, dtype=A.dtype, device=dev).conj()
    out["solve_triangular out=conj"] = torch.linalg.solve_triangular(t, b, upper=True, out=o)
    o = B.clone().to(dev).conj()
    out["solve_triangular out=B.conj()"] = torch.linalg.solve_triangular(t, o, upper=True, out=o)
    z = torch.zeros(3, 3, dtype=A.dtype, device=dev).conj().imag  # a real view with the negative bit
    out["mm out=negative view"] = torch.mm(a.real, b.real, out=z)
    return out


def test_written_conj_and_negative_views_get_cpu_values():
    g = torch.Generator().manual_seed(0)
    A, B, C = (torch.randn(3, 3, dtype=torch.complex64, generator=g) for _ in range(3))
    want = _written_math_bit_cases("cpu", A, B, C)
    got = _written_math_bit_cases(TPU, A, B, C)
    for name in want:
        assert got[name].is_conj() == want[name].is_conj(), name
        assert got[name].is_neg() == want[name].is_neg(), name
        torch.testing.assert_close(got[name].cpu().resolve_conj().resolve_neg(),
                                   want[name].resolve_conj().resolve_neg(), atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("dt", CPLX)
def test_real_sum_into_complex_out_and_matrix_rank(dt):
    g = torch.Generator().manual_seed(2)
    for x in (torch.rand(3, 4, generator=g) > 0.5, torch.randn(3, 4, generator=g)):
        want = torch.empty(3, dtype=dt)
        torch.sum(x, 1, out=want)
        got = torch.empty(3, dtype=dt, device=TPU)
        torch.sum(x.to(TPU), 1, out=got)
        torch.testing.assert_close(got.cpu(), want)
    a = torch.eye(2, dtype=dt)
    with pytest.raises(RuntimeError, match="but got result with dtype Bool"):
        torch.linalg.matrix_rank(a.to(TPU), out=torch.empty(0, dtype=torch.bool, device=TPU))
    out = torch.empty(0, dtype=dt, device=TPU)
    torch.linalg.matrix_rank(a.to(TPU), out=out)
    assert out.cpu().item() == 2


def test_householder_product_tau_dtype_in_cpus_words():
    r, t = torch.randn(3, 3), torch.randn(2)
    msgs = []
    for dev in ("cpu", TPU):
        with pytest.raises(RuntimeError) as e:
            torch.linalg.householder_product(r.to(dev), t.to(dev).to(torch.int))
        msgs.append(str(e.value).splitlines()[0])
    assert msgs[0] == msgs[1] and "tau dtype Int does not match input dtype Float" in msgs[1]
