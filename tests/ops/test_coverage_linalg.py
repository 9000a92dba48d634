"""Dense linear algebra on the device (runtime/ops/linalg/: lu.c, cholesky.c, triangular.c, qr.c, eigh.c, svd.c) against PyTorch CPU: LU (factor,
solve with left/adjoint, unpack, inverse, det, slogdet), Cholesky (factor, inverse, solve), triangular
solves, QR (geqrf conventions, householder_product, ormqr), symmetric eigen and SVD (values against
CPU, vectors by reconstruction since their signs are not unique), batched and broadcast, float32 and
float64, plus gradients through the autograd formulas that use these kernels."""
import pytest
import torch

LA = torch.linalg
DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-9, atol=1e-9)


def rnd(*shape, dtype=torch.float64, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def spd(*shape, dtype=torch.float64, seed=0):
    a = rnd(*shape, dtype=torch.float64, seed=seed)
    return (a @ a.mT + shape[-1] * torch.eye(shape[-1], dtype=torch.float64)).to(dtype)


def same(fn, args, device, dtype, **kw):
    expect = fn(*args, **kw)
    got = fn(*[a.to(device) if isinstance(a, torch.Tensor) else a for a in args], **kw)
    if not isinstance(expect, (tuple, list)):
        expect, got = (expect,), (got,)
    for e, g in zip(expect, got):
        assert g.device.type == torch.device(device).type
        if e.dtype.is_floating_point:
            torch.testing.assert_close(g.cpu(), e, **tol(dtype))
        else:
            assert torch.equal(g.cpu(), e)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 1, 3, 3), (6, 4), (3, 6)])
def test_lu_family(device, dtype, shape):
    a = rnd(*shape, dtype=dtype)
    same(LA.lu_factor_ex, [a], device, dtype)
    same(LA.lu, [a], device, dtype)
    same(lambda x: torch.lu_unpack(*LA.lu_factor(x)), [a], device, dtype)
    same(LA.lu_factor, [a.mT], device, dtype)  # column-major input


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [True, False])
def test_lu_solve(device, dtype, left, adjoint):
    a = rnd(2, 4, 4, dtype=dtype)
    b = rnd(2, 4, 3, dtype=dtype, seed=1) if left else rnd(2, 3, 4, dtype=dtype, seed=1)
    same(lambda x, y: LA.lu_solve(*LA.lu_factor(x), y, left=left, adjoint=adjoint), [a, b], device, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_inv_det(device, dtype):
    a = rnd(3, 4, 4, dtype=dtype)
    same(LA.solve, [a, rnd(3, 4, 2, dtype=dtype, seed=1)], device, dtype)
    same(LA.solve, [a, rnd(4, dtype=dtype, seed=1)], device, dtype)  # vector rhs, broadcast
    same(LA.solve, [a[0], rnd(5, 4, 2, dtype=dtype, seed=1)], device, dtype)  # A broadcast over B's batch
    same(lambda x, y: LA.solve(x, y, left=False), [a, rnd(3, 2, 4, dtype=dtype, seed=1)], device, dtype)
    same(LA.inv, [a], device, dtype)
    same(LA.det, [a], device, dtype)
    same(LA.slogdet, [a], device, dtype)
    same(LA.det, [a.mT], device, dtype)
    sing = torch.zeros(3, 3, dtype=dtype)
    same(LA.det, [sing], device, dtype)
    same(LA.slogdet, [sing], device, dtype)
    half = torch.tensor([[1.0, 0], [0, 0]], dtype=dtype)  # the inverse's content is unspecified, info is not
    assert LA.inv_ex(half.to(device)).info.item() == LA.inv_ex(half).info.item() == 2
    with pytest.raises(RuntimeError):
        LA.inv(sing.to(device))
        torch.tpu.synchronize()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_family(device, dtype, upper):
    a = spd(2, 5, 5, dtype=dtype)
    same(lambda x: LA.cholesky(x, upper=upper), [a], device, dtype)
    same(lambda x: torch.cholesky_inverse(LA.cholesky(x, upper=upper), upper=upper), [a], device, dtype)
    same(lambda x, b: torch.cholesky_solve(b, LA.cholesky(x, upper=upper), upper=upper),
         [a, rnd(2, 5, 3, dtype=dtype, seed=2)], device, dtype)
    bad = -torch.eye(3, dtype=dtype)
    assert LA.cholesky_ex(bad.to(device)).info.item() == 1
    with pytest.raises(RuntimeError):
        LA.cholesky(bad.to(device))
        torch.tpu.synchronize()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("n", [4, 40])  # 40: BLAS's trsm (lapack.h's LAPACK_MIN_TRSM), 4: the loops
def test_triangular(device, dtype, upper, left, unit, n):
    t = rnd(2, n, n, dtype=dtype) + 4 * n ** 0.5 * torch.eye(n, dtype=dtype)
    t = t.triu() if upper else t.tril()
    b = rnd(2, n, 3, dtype=dtype, seed=3) if left else rnd(2, 3, n, dtype=dtype, seed=3)
    same(lambda x, y: LA.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit), [t, b], device, dtype)
    if left:
        same(lambda y, x: torch.triangular_solve(y, x, upper=upper, transpose=unit, unitriangular=unit),
             [b, t], device, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["rows", "columns", "sliced", "sliced columns"])
@pytest.mark.parametrize("left", [False, True])
def test_triangular_and_inverse_operand_layouts(device, dtype, layout, left):
    """Operands row-major, column-major (.mT of a contiguous tensor: how PyTorch's linalg results lie),
    and either with a gap between its rows or columns, made on the device (a copy to it would make
    them dense), at sizes off the copy's 8 x 8 tiles (matrix.h mat_load / mat_store: whole rows where
    the layouts agree, tiles elsewhere); results also into column-major and sliced out= tensors."""
    n, k = 45, 19

    def lay(x):
        if layout == "columns":
            return x.mT.contiguous().mT
        if layout == "sliced":
            return torch.cat([x, x[..., :, :3]], dim=-1)[..., :, : x.shape[-1]]
        if layout == "sliced columns":  # column-major with a gap between columns
            return torch.cat([x.mT, x.mT[..., :, :3]], dim=-1)[..., :, : x.shape[-2]].mT
        return x
    t = (rnd(2, n, n, dtype=dtype) + 4 * n ** 0.5 * torch.eye(n, dtype=dtype)).triu()
    b = rnd(2, n, k, dtype=dtype, seed=3) if left else rnd(2, k, n, dtype=dtype, seed=3)
    td, bd = lay(t.to(device)), lay(b.to(device))
    assert td.stride() == lay(t).stride() and bd.stride() == lay(b).stride()
    got = LA.solve_triangular(td, bd, upper=True, left=left)
    torch.testing.assert_close(got.cpu(), LA.solve_triangular(t, b, upper=True, left=left), **tol(dtype))
    torch.testing.assert_close(LA.inv(td).cpu(), LA.inv(t), **tol(dtype))
    for out in (torch.empty(2, n, n, dtype=dtype, device=device).mT,
                torch.empty(2, n, n + 5, dtype=dtype, device=device)[..., :n]):
        stride = out.stride()
        LA.inv(td, out=out)
        assert out.stride() == stride
        torch.testing.assert_close(out.cpu(), LA.inv(t), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_qr_family(device, dtype, shape):
    a = rnd(*shape, dtype=dtype)
    for mode in ("reduced", "complete", "r"):
        same(lambda x: LA.qr(x, mode=mode), [a], device, dtype)
    q, tau = torch.geqrf(a)  # on CPU: geqrf's meta function needs the data (see README)
    same(LA.householder_product, [q[..., :, : min(shape[-2:])] if shape[-2] >= shape[-1] else q[..., :, : shape[-2]],
                                  tau], device, dtype)
    c = rnd(*shape[:-2], shape[-2], 2, dtype=dtype, seed=4)
    for left, trans in [(True, False), (True, True)]:
        same(lambda v, t, y: torch.ormqr(v, t, y, left=left, transpose=trans), [q, tau, c], device, dtype)
    c2 = rnd(*shape[:-2], 2, shape[-2], dtype=dtype, seed=5)
    same(lambda v, t, y: torch.ormqr(v, t, y, left=False, transpose=True), [q, tau, c2], device, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_svd(device, dtype):
    a = rnd(3, 5, 5, dtype=dtype)
    s = a + a.mT
    w, v = LA.eigh(s.to(device))
    torch.testing.assert_close(w.cpu(), LA.eigvalsh(s), **tol(dtype))
    torch.testing.assert_close((v @ torch.diag_embed(w) @ v.mT).cpu(), s, **tol(dtype))
    torch.testing.assert_close(LA.eigvalsh(s.to(device), UPLO="U").cpu(), LA.eigvalsh(s, UPLO="U"), **tol(dtype))
    for shape in [(3, 5, 5), (4, 6), (6, 4)]:
        m = rnd(*shape, dtype=dtype, seed=7)
        for full in (False, True):
            u, sv, vh = LA.svd(m.to(device), full_matrices=full)
            torch.testing.assert_close(sv.cpu(), LA.svdvals(m), **tol(dtype))
            k = sv.shape[-1]
            rec = (u[..., :, :k] * sv.unsqueeze(-2)) @ vh[..., :k, :]
            torch.testing.assert_close(rec.cpu(), m, **tol(dtype))
            eye_u = torch.eye(u.shape[-1], dtype=dtype).expand_as(u.mT @ u)
            torch.testing.assert_close((u.mT @ u).cpu(), eye_u, **tol(dtype))
    same(LA.pinv, [rnd(4, 6, dtype=dtype)], device, dtype)
    same(LA.matrix_rank, [rnd(4, 6, dtype=dtype)], device, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.complex128])
def test_svd_of_empty_matrices(device, dtype):
    """An (0, n) or (m, 0) matrix has no singular values; full_matrices still returns the n x n (or
    m x m) identity as Vh (U), as PyTorch CPU does. Vh of (0, n) was left zero."""
    for shape in [(0, 3), (3, 0), (2, 0, 4), (2, 4, 0), (0, 0), (0, 1)]:
        a = torch.zeros(*shape, dtype=dtype)
        for full in (True, False):
            want = LA.svd(a, full_matrices=full)
            got = LA.svd(a.to(device), full_matrices=full)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == w.dtype, (shape, full)
                assert torch.equal(g.cpu(), w), (shape, full)


def test_gradients(device):
    a = rnd(3, 4, 4, dtype=torch.float64)
    b = rnd(3, 4, 2, dtype=torch.float64, seed=1)
    for fn in (lambda x: LA.det(x).sum(), lambda x: LA.slogdet(x).logabsdet.sum(),
               lambda x: LA.inv(x).sum(), lambda x: LA.solve(x, b.to(x.device)).pow(2).sum(),
               lambda x: LA.svdvals(x).sum(), lambda x: LA.qr(x).R.abs().sum(),
               lambda x: LA.cholesky(x @ x.mT + 4 * torch.eye(4, dtype=x.dtype, device=x.device)).sum()):
        xc = a.clone().requires_grad_()
        xd = a.to(device).requires_grad_()
        fn(xc).backward()
        fn(xd).backward()
        torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("n", [5, 40])  # 40: LAPACK's zgetrf/zgetrs (lapack.h's LAPACK_MIN_LU), 5: the loops
def test_complex_lu_family(device, dtype, n):
    g = torch.Generator().manual_seed(n)
    a = torch.randn(2, n, n, dtype=dtype, generator=g)
    b = torch.randn(2, n, 3, dtype=dtype, generator=g)
    t = dict(rtol=2e-4, atol=2e-4) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    for fn in (LA.inv, LA.det, lambda x: LA.slogdet(x)[1], lambda x: LA.lu_factor(x)[0], lambda x: LA.lu(x)[1],
               lambda x: LA.solve(x, b.to(x.device)), lambda x: LA.solve(x, b.mT.to(x.device), left=False)):
        torch.testing.assert_close(fn(a.to(device)).cpu(), fn(a), **t)
    lu, piv = LA.lu_factor(a)
    assert torch.equal(LA.lu_factor(a.to(device))[1].cpu(), piv)  # the same pivots as CPU's getrf
    for adjoint in (False, True):
        torch.testing.assert_close(LA.lu_solve(lu.to(device), piv.to(device), b.to(device), adjoint=adjoint).cpu(),
                                   LA.lu_solve(lu, piv, b, adjoint=adjoint), **t)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("shape", [(40, 40), (60, 25), (25, 60), (5, 4)])  # LAPACK's zgeqrf/zungqr from 10 (lapack.h)
def test_complex_qr(device, dtype, shape):
    a = torch.randn(2, *shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
    t = dict(rtol=2e-4, atol=2e-4) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    for mode in ("reduced", "complete", "r"):
        for e, g in zip(LA.qr(a, mode=mode), LA.qr(a.to(device), mode=mode)):
            torch.testing.assert_close(g.cpu(), e, **t)
    for e, g in zip(torch.geqrf(a), torch.geqrf(a.to(device))):
        torch.testing.assert_close(g.cpu(), e, **t)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64, torch.complex128])
@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (64, 12), (6, 4)])  # orgqr / ormqr from 10 (lapack.h)
def test_householder_product_and_ormqr(device, dtype, shape):
    g = torch.Generator().manual_seed(shape[0])
    t = dict(rtol=2e-4, atol=2e-4) if dtype in (torch.float32, torch.complex64) else dict(rtol=1e-10, atol=1e-10)
    q, tau = torch.geqrf(torch.randn(2, *shape, dtype=dtype, generator=g))
    m, n = shape
    v = q[..., :, : min(m, n)]
    torch.testing.assert_close(LA.householder_product(v.to(device), tau.to(device)).cpu(),
                               LA.householder_product(v, tau), **t)
    for left in (True, False):
        c = torch.randn(2, *((m, 7) if left else (7, m)), dtype=dtype, generator=g)
        for trans in (False, True):  # Q^T, or Q^H for complex
            torch.testing.assert_close(
                torch.ormqr(q.to(device), tau.to(device), c.to(device), left=left, transpose=trans).cpu(),
                torch.ormqr(q, tau, c, left=left, transpose=trans), **t)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("n", [5, 40, 100])  # zpotrf from 16 (lapack.h's LAPACK_MIN_LU), 5: the loops
def test_complex_cholesky(device, dtype, n):
    g = torch.Generator().manual_seed(n)
    t = dict(rtol=2e-4, atol=2e-4) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    a = torch.randn(3, n, n, dtype=dtype, generator=g)
    h = a @ a.mH + n * torch.eye(n, dtype=dtype)
    for upper in (False, True):
        torch.testing.assert_close(LA.cholesky(h.to(device), upper=upper).cpu(), LA.cholesky(h, upper=upper), **t)
    h[1, n // 2, n // 2] = -1  # the second matrix's minor of order n // 2 + 1 is not positive-definite
    want, got = LA.cholesky_ex(h), LA.cholesky_ex(h.to(device))
    assert torch.equal(got.info.cpu(), want.info) and want.info.tolist() == [0, n // 2 + 1, 0]
    torch.testing.assert_close(got.L.cpu()[0::2], want.L[0::2], **t)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("n", [4, 40])  # 40: BLAS's ztrsm (LAPACK_MIN_TRSM)
def test_complex_triangular(device, dtype, n):
    g = torch.Generator().manual_seed(n)
    t = dict(rtol=2e-4, atol=2e-4) if dtype == torch.complex64 else dict(rtol=1e-10, atol=1e-10)
    for upper in (False, True):
        a = torch.randn(2, n, n, dtype=dtype, generator=g) + 4 * n ** 0.5 * torch.eye(n, dtype=dtype)
        a = a.triu() if upper else a.tril()
        for left in (False, True):
            b = torch.randn(2, n, 3, dtype=dtype, generator=g) if left else torch.randn(2, 3, n, dtype=dtype, generator=g)
            for unit in (False, True):
                torch.testing.assert_close(
                    LA.solve_triangular(a.to(device), b.to(device), upper=upper, left=left, unitriangular=unit).cpu(),
                    LA.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit), **t)
    s = torch.randn(n, n, dtype=dtype, generator=g)
    c = LA.cholesky(s @ s.mH + n * torch.eye(n, dtype=dtype))
    b = torch.randn(n, 2, dtype=dtype, generator=g)
    for upper in (False, True):  # cholesky_inverse / cholesky_solve solve with L and L^H ("C")
        f = c.mH if upper else c
        torch.testing.assert_close(torch.cholesky_inverse(f.to(device), upper=upper).cpu(),
                                   torch.cholesky_inverse(f, upper=upper), **t)
        torch.testing.assert_close(torch.cholesky_solve(b.to(device), f.to(device), upper=upper).cpu(),
                                   torch.cholesky_solve(b, f, upper=upper), **t)
