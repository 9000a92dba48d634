"""Dense linear algebra (run by bench/run.py after its core set; `--only linalg_eigh_256,...`): the
factorizations that call LAPACK (runtime/ops/linalg/lapack.h) on 256 x 256 float64 and complex128
matrices, and complex matrix products (cgemm/zgemm), timed per call on the device and on PyTorch CPU in
the same run. PyTorch CPU runs MKL's LAPACK on its threads; ours calls the same routines on one thread
per matrix through double scratch copies (the products split rows across the chip's threads).
"""
import torch

N = 256


def _case(make, op):
    def setup(device):
        g = torch.Generator().manual_seed(0)
        x = make(g).to(device)
        return (lambda: op(x)), lambda s: s * 1e3
    return setup


def _reflectors(op):
    """op(reflectors, tau, x) on geqrf's output of a 256 x 256 float64 matrix (computed on CPU)."""
    def setup(device):
        g = torch.Generator().manual_seed(0)
        q, tau = torch.geqrf(_real(g))
        x = _real(g)[:, :64]
        q, tau, x = q.to(device), tau.to(device), x.to(device)
        return (lambda: op(q, tau, x)), lambda s: s * 1e3
    return setup


def _real(g):
    return torch.randn(N, N, generator=g, dtype=torch.float64)


def _spd(g):
    a = _real(g)
    return a @ a.T + N * torch.eye(N, dtype=torch.float64)


def _cplx(g):
    return torch.complex(_real(g), _real(g))


def _upper(g):
    return _real(g).triu() + 16 * torch.eye(N, dtype=torch.float64)


def _cupper(g):
    return _cplx(g).triu() + 16 * torch.eye(N, dtype=torch.complex128)


def _herm(g):
    a = _cplx(g)
    return a @ a.mH + N * torch.eye(N, dtype=torch.complex128)


BENCHES = {
    "linalg_eigh_256": (_case(_spd, torch.linalg.eigh), "ms", False, "linalg.eigh, 256 x 256 float64 SPD"),
    "linalg_svd_256": (_case(_real, torch.linalg.svd), "ms", False, "linalg.svd (reduced), 256 x 256 float64"),
    "linalg_qr_256": (_case(_real, torch.linalg.qr), "ms", False, "linalg.qr, 256 x 256 float64"),
    "linalg_inv_256": (_case(_real, torch.linalg.inv), "ms", False, "linalg.inv, 256 x 256 float64"),
    "linalg_solve_256": (_case(_real, lambda a: torch.linalg.solve(a, a[:, :8])), "ms", False,
                         "linalg.solve, 256 x 256 float64, 8 right-hand sides"),
    "linalg_cholesky_256": (_case(_spd, torch.linalg.cholesky), "ms", False, "linalg.cholesky, 256 x 256 float64"),
    "linalg_eig_256": (_case(_real, torch.linalg.eig), "ms", False, "linalg.eig, 256 x 256 float64 (geev)"),
    "linalg_solve_triangular_256": (_case(_upper, lambda a: torch.linalg.solve_triangular(a, a, upper=True)), "ms",
                                    False, "linalg.solve_triangular, 256 x 256 float64 upper, 256 right-hand sides"),
    "linalg_lstsq_512x256": (_case(lambda g: torch.randn(512, 256, generator=g, dtype=torch.float64),
                                   lambda a: torch.linalg.lstsq(a, a[:, :8]).solution), "ms", False,
                             "linalg.lstsq, 512 x 256 float64, 8 right-hand sides (default driver)"),
    "linalg_ldl_256": (_case(lambda g: _real(g) + _real(g).T, lambda a: torch.linalg.ldl_factor(a)[0]), "ms", False,
                       "linalg.ldl_factor, 256 x 256 float64 symmetric indefinite (sytrf)"),
    "linalg_householder_product_256": (_reflectors(lambda q, t, x: torch.linalg.householder_product(q, t)), "ms",
                                       False, "linalg.householder_product, 256 x 256 float64 (orgqr)"),
    "ormqr_256": (_reflectors(lambda q, t, x: torch.ormqr(q, t, x, transpose=True)), "ms", False,
                  "ormqr, Q^T C, 256 x 256 float64 reflectors, C 256 x 64 (ormqr)"),
    "linalg_cholesky_c256": (_case(_herm, torch.linalg.cholesky), "ms", False,
                             "linalg.cholesky, 256 x 256 complex128 Hermitian (zpotrf)"),
    "linalg_eigh_c256": (_case(_herm, torch.linalg.eigh), "ms", False, "linalg.eigh, 256 x 256 complex128 Hermitian"),
    "linalg_svd_c256": (_case(_cplx, torch.linalg.svd), "ms", False, "linalg.svd (reduced), 256 x 256 complex128"),
    "linalg_qr_c256": (_case(_cplx, torch.linalg.qr), "ms", False, "linalg.qr, 256 x 256 complex128"),
    "linalg_inv_c256": (_case(_cplx, torch.linalg.inv), "ms", False, "linalg.inv, 256 x 256 complex128"),
    "linalg_solve_triangular_c256": (_case(_cupper, lambda a: torch.linalg.solve_triangular(a, a, upper=True)), "ms",
                                     False, "linalg.solve_triangular, 256 x 256 complex128 upper, 256 right-hand sides"),
    "mm_c64_256": (_case(lambda g: _cplx(g).to(torch.complex64), lambda a: a @ a), "ms", False,
                   "mm, 256 x 256 x 256 complex64 (cgemm)"),
    "bmm_c128_8x128": (_case(lambda g: _cplx(g).reshape(8, 128, 64)[..., :64].repeat(1, 1, 2),
                             lambda a: torch.bmm(a, a.mT)), "ms", False,
                       "bmm, 8 x (128 x 128 @ 128 x 128) complex128, the second operand transposed (zgemm)"),
}
