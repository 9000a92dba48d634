"""The unboxed front of add/sub/mul/div (torch_tpu/csrc/fallback_fast.cpp): calls it takes (dense,
contiguous tensors of one dtype whose sizes broadcast, or a Python number that keeps the dtype)
and calls it hands to the generic path (mixed dtypes, strided views, aliasing, promotion, complex
alpha) give CPU's results, layouts and errors, in every eager mode, functional and in-place, and
autograd records them as usual. The same for the fronts of fill_ (a value the dtype holds) and
pow(tensor, number) (a floating tensor, an exponent other than 0 and 1)."""
import operator

import pytest
import torch

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
OPS = {
    "add": (torch.add, "add_"),
    "sub": (torch.sub, "sub_"),
    "mul": (torch.mul, "mul_"),
    "div": (torch.div, "div_"),
}


def _pair(dtype, shape=(5, 7), seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=g).to(dtype)
    b = (torch.rand(shape, generator=g) + 0.5).to(dtype)
    return a, b


def _same(got, want):
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    # one rounding apart at most: CPU may fuse `a + alpha * b` differently
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(want.dtype, 1e-6)
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", OPS)
def test_functional_and_in_place_match_cpu(eager_mode, name, dtype):
    fn, inplace = OPS[name]
    a, b = _pair(dtype)
    kw = {"alpha": 3} if name in ("add", "sub") else {}
    _same(fn(a.to("tpu"), b.to("tpu"), **kw), fn(a, b, **kw))
    if kw:
        _same(fn(a.to("tpu"), b.to("tpu"), alpha=-0.25), fn(a, b, alpha=-0.25))
    x = a.to("tpu")
    ptr = x.data_ptr()
    r = getattr(x, inplace)(b.to("tpu"), **kw)
    want = getattr(a.clone(), inplace)(b, **kw)
    assert r is x and x.data_ptr() == ptr
    _same(x, want)


BROADCASTS = [((5, 7), (7,)), ((7,), (5, 7)), ((5, 1), (1, 7)), ((1, 7), (5, 1)), ((2, 1, 3), (4, 1)),
              ((64,), (1, 1, 64)), ((1, 4, 1, 16), (1, 1, 1, 16)), ((1, 1, 64), (1, 1, 1)), ((3, 1, 1), (1,)),
              ((1, 1), (1, 1, 1, 1)), ((2, 3), ())]


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_broadcasts_match_cpu(eager_mode, name, dtype):
    fn, inplace = OPS[name]
    for i, (sa, sb) in enumerate(BROADCASTS):
        a, _ = _pair(dtype, sa, seed=i)
        _, b = _pair(dtype, sb, seed=i + 100)
        _same(fn(a.to("tpu"), b.to("tpu")), fn(a, b))
        if torch.broadcast_shapes(sa, sb) == a.shape:
            x = a.to("tpu")
            getattr(x, inplace)(b.to("tpu"))
            _same(x, getattr(a.clone(), inplace)(b))
        else:
            with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
                getattr(a.to("tpu"), inplace)(b.to("tpu"))


@pytest.mark.parametrize("dtype", (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8))
@pytest.mark.parametrize("name", ("add", "sub", "mul"))
def test_integers_match_cpu(eager_mode, name, dtype):
    fn, inplace = OPS[name]
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, 100, (5, 7), generator=g).to(dtype)
    b = torch.randint(0, 100, (7,), generator=g).to(dtype)
    kw = {"alpha": 3} if name != "mul" else {}

    def exact(got, want):
        assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
        assert torch.equal(got.cpu(), want)
    exact(fn(a.to("tpu"), b.to("tpu"), **kw), fn(a, b, **kw))   # wraps as CPU does
    exact(fn(a.to("tpu"), 7), fn(a, 7))
    exact(fn(a.to("tpu"), 2.5), fn(a, 2.5))                     # a float number promotes
    x = a.to("tpu")
    getattr(x, inplace)(b.to("tpu"), **kw)
    exact(x, getattr(a.clone(), inplace)(b, **kw))
    if kw:
        with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
            fn(a.to("tpu"), b.to("tpu"), alpha=0.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        getattr(a.to("tpu"), inplace)(2.5)


@pytest.mark.parametrize("name", OPS)
def test_python_numbers_match_cpu(eager_mode, name):
    fn, inplace = OPS[name]
    a, _ = _pair(torch.bfloat16)
    for number in (2, -0.5, 3.25):
        _same(fn(a.to("tpu"), number), fn(a, number))
        x = a.to("tpu")
        getattr(x, inplace)(number)
        _same(x, getattr(a.clone(), inplace)(number))
    op = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}[name]
    _same(op(1.5, a.to("tpu")), op(1.5, a))


@pytest.mark.parametrize("name", OPS)
def test_calls_for_the_generic_path_match_cpu(eager_mode, name):
    fn, inplace = OPS[name]
    a, b = _pair(torch.float32, (4, 6))
    ta, tb = a.to("tpu"), b.to("tpu")
    cases = [
        (ta, tb[0], a, b[0]),                                # broadcast
        (ta, tb.to(torch.float64), a, b.to(torch.float64)),  # mixed dtypes
        (ta.t(), tb.t(), a.t(), b.t()),                      # not contiguous
        (ta[:, ::2], tb[:, 1::2], a[:, ::2], b[:, 1::2]),   # strided views
        (ta, torch.tensor(2.0), a, torch.tensor(2.0)),        # a 0-d CPU tensor
    ]
    if name != "div":
        ia, ib = (a * 10).to(torch.int64), (b * 10).to(torch.int64)
        cases.append((ia.to("tpu"), ib.to("tpu"), ia, ib))  # integers
    for x, y, cx, cy in cases:
        got, want = fn(x, y), fn(cx, cy)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.cpu(), want)
    # in place on a view, and with the other operand the same tensor or an overlapping one
    x, cx = ta.clone(), a.clone()
    getattr(x[1:3], inplace)(tb[1:3])
    getattr(cx[1:3], inplace)(b[1:3])
    torch.testing.assert_close(x.cpu(), cx)
    x, cx = ta.clone(), a.clone()
    getattr(x, inplace)(x)
    getattr(cx, inplace)(cx)
    torch.testing.assert_close(x.cpu(), cx)


def test_errors_match_cpu():
    a, b = _pair(torch.float32)
    ta, tb = a.to("tpu"), b.to("tpu")
    with pytest.raises(RuntimeError, match="alpha must not be a complex"):
        torch.add(ta, tb, alpha=1j)
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.add(ta, tb[:, :3])
    x = ta.clone()
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        x.to(torch.int64).add_(tb)
    with pytest.raises(RuntimeError, match="unsupported operation"):  # internal overlap, as CPU
        ta[:1].expand(5, 7).add_(tb)
    torch.testing.assert_close((ta + tb).cpu(), a + b)  # the process keeps working


def test_autograd_through_the_front():
    a, b = _pair(torch.float32)
    x = a.to("tpu").requires_grad_()
    y = b.to("tpu").requires_grad_()
    ((x * y + x) / y - 2 * x).sum().backward()
    cx, cy = a.clone().requires_grad_(), b.clone().requires_grad_()
    ((cx * cy + cx) / cy - 2 * cx).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), cx.grad)
    torch.testing.assert_close(y.grad.cpu(), cy.grad)
    leaf = a.to("tpu").requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.add_(b.to("tpu"))


# ---- the fronts of fill_.Scalar and pow.Tensor_Scalar (same file) ----

FILL_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16,
               torch.int8, torch.uint8, torch.bool)
FILL_VALUES = (0, 1, -1, 7, 127, 255, 2**40, 1.0, -3.0, 128.0, 2.0**53, 2.5, -0.0, 65504.0, 3.3e38, float("nan"), float("inf"),
               float("-inf"), True, False)


def _fill_same(got, want):
    assert got.device.type == "tpu" and got.dtype == want.dtype and got.shape == want.shape
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", FILL_DTYPES)
def test_fill_and_full_match_cpu(eager_mode, dtype):
    # the front takes a value the dtype holds on a contiguous tensor; a value that would overflow
    # and every strided tensor go to the generic path, as before
    for v in FILL_VALUES:
        try:
            want = torch.zeros(3, 5, dtype=dtype).fill_(v)
        except RuntimeError:
            continue  # CPU refuses the conversion; the tpu's answer there is the generic path's
        x = torch.zeros(3, 5, dtype=dtype, device="tpu")
        ptr = x.data_ptr()
        assert x.fill_(v) is x and x.data_ptr() == ptr
        _fill_same(x, want)
        _fill_same(torch.full((2, 3), v, dtype=dtype, device="tpu"), torch.full((2, 3), v, dtype=dtype))
        y = torch.zeros(4, 6, dtype=dtype, device="tpu")
        y[:, 1:4].fill_(v)  # a strided view
        w = torch.zeros(4, 6, dtype=dtype)
        w[:, 1:4].fill_(v)
        _fill_same(y, w)
    _fill_same(torch.ones(2, 2, dtype=dtype, device="tpu").new_ones(3, 1), torch.ones(2, 2, dtype=dtype).new_ones(3, 1))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64))
def test_pow_scalar_matches_cpu(eager_mode, dtype):
    g = torch.Generator().manual_seed(3)
    a = (torch.rand(4, 6, generator=g) * 3 + 0.1).to(dtype)
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1e-5)
    for e in (3.0, 3, 2, 0.5, -1, -2.0, 1.7, 0, 1, 0.0, 1.0, True, False):
        for x in (a, a.t()):  # contiguous (the front) and strided (the generic path)
            try:
                want = torch.pow(x, e)
            except RuntimeError as err:  # integers to negative integer powers
                with pytest.raises(RuntimeError, match="negative integer powers"):
                    torch.pow(a.to("tpu"), e)
                assert "negative integer powers" in str(err)
                continue
            got = torch.pow(x.to("tpu") if x.is_contiguous() else a.to("tpu").t(), e)
            assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
            torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
    x = a.to("tpu").to(torch.float32).requires_grad_()
    (x ** 3.0).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), 3 * a.float() ** 2, rtol=1e-5, atol=1e-5)
