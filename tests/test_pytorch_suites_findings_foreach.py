"""Defects found by running PyTorch's test_foreach.py on tpu (tests/pytorch_suites.py), each kept as
a test against PyTorch CPU so CI guards it without PyTorch's files. The foreach ops run on tpu as
PyTorch's per-tensor decomposition, so each defect is the per-tensor op's: an error CPU raises at
the call that the tpu kernel found only when it ran (at the next sync in Strict and DeferAndFuse)."""
import pytest
import torch


def _raises_like_cpu(fn, tpu):
    """fn(device) raises on tpu at the call, with CPU's exception type and first line."""
    with pytest.raises(Exception) as want:
        fn("cpu")
    with pytest.raises(Exception) as got:
        fn(tpu)  # no sync: it must raise at the call
    assert type(got.value) is type(want.value)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


def _args(dev, dtype, n=3):
    return [torch.arange(1, 5, device=dev).to(dtype) for _ in range(n)]


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_addc_complex_value_on_real_tensors_raises_at_call(op, dtype, tpu, eager_mode):
    # test_parity with allow_higher_dtype_scalars: a complex `value` of real tensors
    if op == "addcdiv" and dtype == torch.int64:
        pytest.skip("integer addcdiv is refused for its own reason")
    f = getattr(torch, op)
    _raises_like_cpu(lambda d: f(*_args(d, dtype), value=1j), tpu)
    _raises_like_cpu(lambda d: getattr(torch, "_foreach_" + op)(*[[t] for t in _args(d, dtype)], [1j]), tpu)
    _raises_like_cpu(lambda d: getattr(torch, "_foreach_" + op + "_")(*[[t] for t in _args(d, dtype)], 1j), tpu)


def test_addc_complex_value_on_complex_tensors_still_computes(tpu, eager_mode):
    a, b, c = _args("cpu", torch.complex64)
    for op in (torch.addcmul, torch.addcdiv):
        want = op(a, b, c, value=1j)
        got = op(a.to(tpu), b.to(tpu), c.to(tpu), value=1j)
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_addcmul_real_value_still_computes(dtype, tpu, eager_mode):
    a, b, c = _args("cpu", dtype)
    for value in (2, True):
        want = torch.addcmul(a, b, c, value=value)
        got = torch.addcmul(a.to(tpu), b.to(tpu), c.to(tpu), value=value)
        assert torch.equal(got.cpu(), want)


def test_addcmul_and_pow_of_bools_raise_at_call(tpu, eager_mode):
    _raises_like_cpu(lambda d: torch.addcmul(*_args(d, torch.bool)), tpu)
    _raises_like_cpu(lambda d: torch._foreach_addcmul_(*[[t] for t in _args(d, torch.bool)], [2]), tpu)
    _raises_like_cpu(lambda d: torch.pow(*_args(d, torch.bool, 2)), tpu)
    _raises_like_cpu(lambda d: torch._foreach_pow(*[[t] for t in _args(d, torch.bool, 2)]), tpu)
    # a bool base with a bool Scalar exponent CPU computes
    want = torch.pow(_args("cpu", torch.bool, 1)[0], True)
    assert torch.equal(torch.pow(_args(tpu, torch.bool, 1)[0], True).cpu(), want)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_lerp_of_integers_raises_at_call(dtype, tpu, eager_mode):
    _raises_like_cpu(lambda d: torch.lerp(*_args(d, dtype)), tpu)
    _raises_like_cpu(lambda d: torch.lerp(*_args(d, dtype, 2), 0.5), tpu)
    _raises_like_cpu(lambda d: torch._foreach_lerp_(*[[t] for t in _args(d, dtype)]), tpu)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.complex64])
def test_lerp_of_floats_still_computes(dtype, tpu, eager_mode):
    a, b = _args("cpu", dtype, 2)
    w = torch.full((4,), 0.25).to(dtype)
    torch.testing.assert_close(torch.lerp(a.to(tpu), b.to(tpu) * 3, w.to(tpu)).cpu(), torch.lerp(a, b * 3, w))
    got = torch._foreach_lerp([a.to(tpu)], [b.to(tpu) * 3], 0.75)
    torch.testing.assert_close(got[0].cpu(), torch.lerp(a, b * 3, 0.75))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8, torch.float32])
def test_empty_random_fills_as_cpu(dtype):
    # CPU's normal_ / log_normal_ / exponential_ return an empty self before their dtype dispatch
    # (so randn([0], dtype=int) works), after their parameter checks
    for f in ("normal_", "log_normal_", "exponential_"):
        got = getattr(torch.empty(0, dtype=dtype, device="tpu"), f)()
        assert got.shape == (0,) and got.dtype == dtype and got.device.type == "tpu"
    assert torch.randn([0], dtype=dtype, device="tpu").shape == (0,)
    for f, args, msg in [("normal_", (0.0, -1.0), "normal expects std >= 0.0, but found std -1"),
                         ("log_normal_", (0.0, 0.0), "log_normal_ expects std > 0.0, but found std=0"),
                         ("exponential_", (-1.0,), "exponential_ expects lambda > 0.0, but found lambda=-1")]:
        for n in (0, 3):
            with pytest.raises(RuntimeError, match=msg):
                getattr(torch.empty(n, device="tpu"), f)(*args)
