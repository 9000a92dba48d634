"""Matmul-family ops on the device against PyTorch CPU: mm, addmm (beta/alpha, broadcast self,
in-place, out=), bmm, baddbmm, addbmm, addmv, mv, dot, vdot, addr, trace, matmul/linear (composite,
through these), _addmm_activation and _int_mm; transposed and sliced (non-contiguous) operands,
k = 0 and empty shapes, every dtype the CPU supports; and autograd through nn.Linear."""
import pytest
import torch
import torch.nn.functional as F

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    lo, hi = (0, 6) if dtype == torch.uint8 else (-5, 6)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def tol(dtype, k=1):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(rtol=2e-2, atol=2e-2 * max(1.0, k ** 0.5))
    if dtype == torch.float32:
        return dict(rtol=1e-5, atol=1e-5 * max(1.0, k ** 0.5))
    if dtype == torch.float64:
        return dict(rtol=1e-12, atol=1e-12 * max(1.0, k ** 0.5))
    return dict(rtol=0, atol=0)


def check(fn, args, device, dtype, k=1, **kw):
    expect = fn(*args, **kw)
    got = fn(*[a.to(device) if isinstance(a, torch.Tensor) else a for a in args], **kw)
    if isinstance(expect, (tuple, list)):
        for e, g in zip(expect, got):
            torch.testing.assert_close(g.cpu(), e, **tol(dtype, k))
    else:
        assert got.device.type == torch.device(device).type
        torch.testing.assert_close(got.cpu(), expect, **tol(dtype, k))


# (m, k, n, layout) with layout: "nn" plain, "tn"/"nt"/"tt" transposed views, "sl" sliced
MM_CASES = [(7, 5, 3, "nn"), (33, 65, 17, "tn"), (16, 300, 40, "nt"), (5, 9, 6, "tt"), (12, 10, 8, "sl"),
            (1, 1, 1, "nn"), (6, 0, 4, "nn"), (0, 5, 4, "nn"), (130, 70, 150, "tt")]


def operands(m, k, n, layout, dtype, seed=0):
    a = make((k, m), dtype, seed).t() if layout[0] == "t" else make((m, k), dtype, seed)
    b = make((n, k), dtype, seed + 1).t() if layout[1:] == "t" else make((k, n), dtype, seed + 1)
    if layout == "sl":
        a = make((m, 2 * k), dtype, seed)[:, ::2]
        b = make((k + 3, n + 5), dtype, seed + 1)[2:k + 2, 1:n + 1]
    return a, b


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("case", MM_CASES, ids=lambda c: "x".join(map(str, c)))
def test_mm(device, dtype, case):
    m, k, n, layout = case
    a, b = operands(m, k, n, layout, dtype)
    check(torch.mm, (a, b), device, dtype, k)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
@pytest.mark.parametrize("self_shape", [(9,), (1, 9), (6, 9), ()], ids=str)
def test_addmm(device, dtype, self_shape):
    a, b = operands(6, 11, 9, "tn", dtype)
    s = make(self_shape, dtype, 5)
    if dtype.is_floating_point:
        check(torch.addmm, (s, a, b), device, dtype, 11, beta=0.5, alpha=-1.5)
    else:
        check(torch.addmm, (s, a, b), device, dtype, 11, beta=2, alpha=3)
    check(torch.addmm, (s, a, b), device, dtype, 11)


def test_addmm_beta0_ignores_nan_and_inplace_out(device):
    a, b = make((4, 3), torch.float32), make((3, 5), torch.float32, 1)
    s = torch.full((4, 5), float("nan"))
    got = torch.addmm(s.to(device), a.to(device), b.to(device), beta=0).cpu()
    torch.testing.assert_close(got, a @ b)
    # in place and out=
    c = make((4, 5), torch.float32, 2)
    ct = c.clone().to(device)
    ct.addmm_(a.to(device), b.to(device), alpha=2)
    torch.testing.assert_close(ct.cpu(), c.addmm(a, b, alpha=2))
    out = torch.empty(4, 5, device=device)
    torch.mm(a.to(device), b.to(device), out=out)
    torch.testing.assert_close(out.cpu(), a @ b)
    # alpha = 0: the product is not read
    torch.testing.assert_close(torch.addmm(c.to(device), a.to(device) * float("nan"), b.to(device),
                                           alpha=0).cpu(), c)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32])
def test_batched(device, dtype):
    x = make((4, 7, 5), dtype)
    y = make((4, 3, 5), dtype, 1).transpose(1, 2)   # transposed batch views
    s = make((7, 3), dtype, 2)
    check(torch.bmm, (x, y), device, dtype, 5)
    check(torch.baddbmm, (s, x, y), device, dtype, 5)
    check(torch.addbmm, (s, x, y), device, dtype, 20)
    xs = make((8, 7, 5), dtype, 3)[::2]               # batch stride 2
    check(torch.bmm, (xs, y), device, dtype, 5)
    if dtype.is_floating_point:
        check(torch.baddbmm, (s, x, y), device, dtype, 5, beta=0.25, alpha=2.0)
        check(torch.addbmm, (s, x, y), device, dtype, 20, beta=-1.0, alpha=0.5)
    e = make((0, 7, 5), dtype)
    check(torch.bmm, (e, make((0, 5, 3), dtype)), device, dtype)
    check(torch.addbmm, (s, e, make((0, 5, 3), dtype)), device, dtype)


def test_bmm_many_small_and_large(device):
    # many small products (run one per thread) and one large batched product
    check(torch.bmm, (make((64, 9, 17), torch.float32), make((64, 17, 8), torch.float32, 1)),
          device, torch.float32, 17)
    check(torch.bmm, (make((2, 200, 150), torch.bfloat16), make((2, 150, 90), torch.bfloat16, 1)),
          device, torch.bfloat16, 150)


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64])
def test_vector_ops(device, dtype):
    mat, vec = make((6, 9), dtype), make((9,), dtype, 1)
    v6 = make((6,), dtype, 2)
    check(torch.mv, (mat, vec), device, dtype, 9)
    check(torch.mv, (make((9, 6), dtype).t(), make((18,), dtype, 1)[::2]), device, dtype, 9)
    check(torch.addmv, (v6, mat, vec), device, dtype, 9)
    check(torch.addmv, (make((), dtype, 3), mat, vec), device, dtype, 9)
    check(torch.dot, (vec, make((9,), dtype, 4)), device, dtype, 9)
    check(torch.vdot, (vec, make((9,), dtype, 4)), device, dtype, 9)
    check(torch.addr, (make((6, 9), dtype, 5), v6, vec), device, dtype)
    check(torch.trace, (mat,), device, dtype, 6)
    if dtype.is_floating_point:
        check(torch.addmv, (v6, mat, vec), device, dtype, 9, beta=0.5, alpha=2.0)
    check(torch.dot, (make((0,), dtype), make((0,), dtype)), device, dtype)


def test_trace_promotes_ints(device):
    x = torch.arange(12, dtype=torch.int32).view(3, 4)
    got = torch.trace(x.to(device))
    assert got.dtype == torch.int64
    assert got.item() == torch.trace(x).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_matmul_linear_composites(device, dtype):
    check(torch.matmul, (make((2, 3, 5, 7), dtype), make((7, 4), dtype, 1)), device, dtype, 7)
    check(torch.matmul, (make((3, 1, 5, 7), dtype), make((2, 7, 4), dtype, 1)), device, dtype, 7)
    check(torch.matmul, (make((7,), dtype), make((7, 4), dtype, 1)), device, dtype, 7)
    check(F.linear, (make((2, 3, 7), dtype), make((4, 7), dtype, 1), make((4,), dtype, 2)), device, dtype, 7)


def test_addmm_activation_and_int_mm(device):
    s, a, b = make((9,), torch.float32), make((6, 11), torch.float32, 1), make((11, 9), torch.float32, 2)
    for gelu in (False, True):
        check(lambda *t: torch.ops.aten._addmm_activation(*t, use_gelu=gelu), (s, a, b), device,
              torch.float32, 11)
    ai = make((17, 32), torch.int8)
    bi = make((32, 8), torch.int8, 1)
    check(torch._int_mm, (ai, bi), device, torch.int32)


def test_shape_mismatch_raises(device):
    with pytest.raises(RuntimeError):
        torch.mm(torch.ones(3, 4, device=device), torch.ones(5, 2, device=device))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_linear_autograd(device, dtype):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(13, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5)).to(dtype)
    dev = torch.nn.Sequential(torch.nn.Linear(13, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5)).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to(device)
    x = make((4, 6, 13), dtype)
    xc, xd = x.clone().requires_grad_(), x.clone().to(device).requires_grad_()
    yc, yd = cpu(xc), dev(xd)
    torch.testing.assert_close(yd.cpu(), yc, **tol(dtype, 13))
    yc.square().sum().backward()
    yd.square().sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol(dtype, 24))
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, **tol(dtype, 24))


@pytest.mark.parametrize("blas", [2, 1, 0], ids=["own", "mkl_where_loaded", "openblas"])
def test_fp32_products_through_either_blas(device, blas):
    """fp32 products run through our own kernel (all but the few-row ones, the default where
    the CPU is not Intel's), the process's MKL where PyTorch loaded one (its x86 wheels do), or
    OpenBLAS: each, through every form the slabs take (transposes, strided C, alpha/beta, bmm, slabs
    split across the chip's threads), against CPU."""
    import os
    import subprocess
    import sys

    import torch_tpu
    expect = ("own" if blas == 2 else
              "mkl" if blas == 1 and torch.backends.mkl.is_available() else "openblas")
    torch_tpu._C._set_fp32_blas(blas)
    try:
        assert torch_tpu._C._fp32_blas() == expect
        for m, k, n in [(256, 128, 384), (300, 77, 45), (2, 513, 1030), (64, 2048, 64), (130, 300, 97)]:
            for ta in (False, True):
                for tb in (False, True):
                    a = make((k, m) if ta else (m, k), torch.float32, seed=m + k)
                    b = make((n, k) if tb else (k, n), torch.float32, seed=n)
                    a, b = (a.t() if ta else a), (b.t() if tb else b)
                    ref = a @ b
                    got = (a.to(device) @ b.to(device)).cpu()
                    torch.testing.assert_close(got, ref, **tol(torch.float32, k))
        c = make((96, 200), torch.float32, seed=3)
        x, y = make((96, 64), torch.float32, seed=4), make((64, 200), torch.float32, seed=5)
        ref = torch.addmm(c, x, y, beta=0.5, alpha=-2.0)
        got = torch.addmm(c.to(device), x.to(device), y.to(device), beta=0.5, alpha=-2.0).cpu()
        torch.testing.assert_close(got, ref, **tol(torch.float32, 64))
        out = torch.zeros(200, 96, device=device).t()  # a column-major C
        torch.mm(x.to(device), y.to(device), out=out)
        torch.testing.assert_close(out.cpu(), x @ y, **tol(torch.float32, 64))
        p, q = make((6, 40, 70), torch.float32, seed=6), make((6, 70, 30), torch.float32, seed=7)
        torch.testing.assert_close(torch.bmm(p.to(device), q.to(device)).cpu(), p @ q, **tol(torch.float32, 70))
    finally:
        torch_tpu._C._set_fp32_blas(-1)
    # the environment's choice, read in a new process
    code = "import torch, torch_tpu; print(torch_tpu._C._fp32_blas())"
    for want in ("openblas", "own"):
        env = dict(os.environ, TORCH_TPU_GEMM_BLAS=want)
        assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.strip().splitlines()[-1] == want
