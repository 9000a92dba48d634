"""The vectorized float transcendental paths (tanh, erf, gelu, gelu_backward,
softplus (and its backward), mish, log_sigmoid, sigmoid/silu, xlogy, xlog1py, logaddexp(2), entr, pow with special scalar exponents, and the math
functions of ew_vmath.h: exp2, log, log2, log10, log1p, expm1, sin, cos, tan,
sinh, cosh, asin, acos, atan, atan2, asinh, acosh, atanh, erfc, erfinv, sinc) against
PyTorch CPU with OpInfo's default tolerances, over wide ranges and the special
values (+-inf, NaN, -0.0, denormals, saturation)."""
import pytest
import torch
import torch.nn.functional as F

from conftest import sync  # noqa: F401  (tests/conftest.py)

TOL = {torch.float32: dict(rtol=1.3e-6, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5),
       torch.float16: dict(rtol=1e-3, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-7)}
DTYPES = list(TOL)
SPECIALS = [0.0, -0.0, 1e-40, -1e-45, 1e-30, float("inf"), -float("inf"), float("nan"), 0.625, -0.625,
            0.921875, 2.0, -3.9192059, 4.0, 9.0, -9.1, 44.0, 89.0, -104.0, 1e30, -1e30]


def values(dtype):
    g = torch.Generator().manual_seed(0)
    parts = [torch.linspace(-12, 12, 20001, dtype=torch.float64),
             torch.randn(20000, generator=g, dtype=torch.float64) * 3,
             torch.tensor(SPECIALS, dtype=torch.float64)]
    return torch.cat(parts).to(dtype)


def check(fn, dtype, *inputs):
    exp = fn(*inputs)
    got = fn(*[t.to("tpu") for t in inputs]).cpu()
    torch.testing.assert_close(got, exp, equal_nan=True, **TOL[dtype])


UNARY = {
    "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid, "silu": F.silu, "mish": F.mish,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "softplus": F.softplus, "softplus_b2": lambda x: F.softplus(x, beta=2.0, threshold=30.0),
    "softplus_b2_t3": lambda x: F.softplus(x, beta=2.0, threshold=3.0), "logsigmoid": F.logsigmoid,
    "log_sigmoid_buffer": lambda x: torch.ops.aten.log_sigmoid_forward(x)[1],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, dtype):
    v = values(dtype)
    if name == "gelu":
        # PyTorch CPU's float32 gelu at +-inf depends on the vector ISA it dispatches to (both NaN on
        # AVX-512); ours follows its float64 kernel there, checked on its own below.
        v = v[~v.isinf()]
    check(UNARY[name], dtype, v)


def test_gelu_at_infinity_matches_float64_cpu():
    x = torch.tensor([float("inf"), -float("inf")])
    torch.testing.assert_close(F.gelu(x.to("tpu")).cpu(), F.gelu(x.double()).float(), equal_nan=True)


def test_gelu_erf_against_float64():
    """gelu and its derivative (ew_vmath.h's tables) against float64: PyTorch CPU's own float32 gelu
    differs from it by up to 1.5e-7 absolute in erf, so CPU alone is too loose a reference. bfloat16 is
    the float32 result rounded once; strided inputs take the scalar path, the same bits."""
    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.linspace(-9, 9, 200001), torch.randn(100000, generator=g) * 3])
    ref = F.gelu(x.double())
    got = F.gelu(x.to("tpu")).cpu().double()
    err = (got - ref).abs()
    big, tail = ref.abs() > 1e-3, ref.abs() > 1e-7
    assert (err[big] / ref[big].abs()).max() < 1e-6
    assert (err[tail] / ref[tail].abs()).max() < 5e-5
    assert (err / x.double().abs().clamp(min=1)).max() < 1e-6
    dref = torch.ops.aten.gelu_backward(torch.ones_like(ref), x.double())
    dgot = torch.ops.aten.gelu_backward(torch.ones(x.shape, device="tpu"), x.to("tpu")).cpu().double()
    assert (dgot - dref).abs().max() < 2.5e-7
    xs = x.to("tpu")[::3]
    assert torch.equal(F.gelu(xs).cpu(), F.gelu(x.to("tpu")).cpu()[::3])
    xb = x.bfloat16().to("tpu")
    assert torch.equal(F.gelu(xb).cpu(), F.gelu(xb.float()).bfloat16().cpu())
    gb = torch.randn(x.shape, generator=g).bfloat16().to("tpu")
    assert torch.equal(torch.ops.aten.gelu_backward(gb, xb).cpu(),
                       torch.ops.aten.gelu_backward(gb.float(), xb.float()).bfloat16().cpu())


def test_tanh_saturates_exactly():
    x = torch.tensor([9.5, 20.0, 1e4, float("inf"), -9.5, -1e4, -float("inf")])
    y = torch.tanh(x.to("tpu")).cpu()
    assert torch.equal(y, torch.tensor([1.0, 1, 1, 1, -1, -1, -1]))
    z = torch.tanh(torch.tensor([-0.0]).to("tpu")).cpu()
    assert z.item() == 0 and torch.signbit(z).item()


# name: (function, the inputs it is checked on, from values(dtype))
MATH = {
    "exp2": (torch.exp2, lambda v: v * 11), "log": (torch.log, torch.abs), "log2": (torch.log2, torch.abs),
    "log10": (torch.log10, torch.abs), "log1p": (torch.log1p, lambda v: v.abs() - 0.5),
    "expm1": (torch.expm1, lambda v: v * 7),
    # sin, cos and tan over many periods, with large arguments (past 2^28 glibc reduces them)
    "sin": (torch.sin, lambda v: torch.cat([v, v * 1e3, v * 3e7])),
    "cos": (torch.cos, lambda v: torch.cat([v, v * 1e3, v * 3e7])),
    "tan": (torch.tan, lambda v: torch.cat([v, v * 1e3])),
    "sinh": (torch.sinh, lambda v: v * 7.5), "cosh": (torch.cosh, lambda v: v * 7.5),  # float64 reference
    "asin": (torch.asin, lambda v: v / 11), "acos": (torch.acos, lambda v: v / 11),
    "atan": (torch.atan, lambda v: torch.cat([v, v * 1e4])), "erfc": (torch.erfc, lambda v: v),
    "sinc": (torch.sinc, lambda v: v),
    "asinh": (torch.asinh, lambda v: torch.cat([v, v * 1e5, v * 1e30])),
    "acosh": (torch.acosh, lambda v: torch.cat([v.abs() + 1, v * 1e5, v * 1e30])),
    "atanh": (torch.atanh, lambda v: v / 11),
    "erfinv": (torch.erfinv, lambda v: torch.cat([v / 12.01, v.sign() * (1 - (v.abs() / 12.01) ** 8)])),
    # both signs (the reflection, the poles at the negative integers), about 1 and 2 (the Taylor series), tiny and huge
    "lgamma": (torch.lgamma, lambda v: torch.cat([v, v * 0.3 + 1, v * 0.3 + 2, v * 1e-30, v * 1e30, v.round()])),
    # both signs, the poles (0, -0: -inf and +inf; negative integers: NaN), near its zero 1.4616, huge
    "digamma": (torch.digamma, lambda v: torch.cat([v, v * 0.3 + 1.46, v * 1e30, v.round()])),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(MATH))
def test_math(name, dtype):
    fn, inputs = MATH[name]
    x = inputs(values(dtype))
    if name in ("sinh", "cosh"):
        # PyTorch CPU's float32 sinh and cosh overflow to inf from |x| = 88.72 (where expf does) while the value is finite
        # up to 89.415 (3.4e38): those are compared with float64's, rounded
        exp = fn(x.double()).to(dtype)
        torch.testing.assert_close(fn(x.to("tpu")).cpu(), exp, equal_nan=True, **TOL[dtype])
        big = x.abs() > 88.5
        torch.testing.assert_close(fn(x[~big]), exp[~big], equal_nan=True, **TOL[dtype])  # CPU agrees below
        return
    check(fn, dtype, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_atan2(dtype):
    v = values(dtype)
    w = torch.roll(v, 7919) * 0.5  # every special against many values, both orders
    sp = torch.tensor(SPECIALS, dtype=dtype)
    ys, xs = sp.repeat_interleave(len(sp)), sp.repeat(len(sp))  # every pair of specials
    check(torch.atan2, dtype, torch.cat([v, w, ys]), torch.cat([w, v, xs]))


LOG_BINARY = {"xlogy": torch.xlogy, "xlog1py": torch.special.xlog1py, "logaddexp": torch.logaddexp,
              "logaddexp2": torch.logaddexp2}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(LOG_BINARY))
def test_log_binary(name, dtype):
    """xlogy, xlog1py, logaddexp and logaddexp2 (float32 on ew_simd.h's vectors) over wide ranges,
    zeros, and every pair of specials (equal infinities, NaN on either side)."""
    v = values(dtype)
    w = torch.randn(v.shape, generator=torch.Generator().manual_seed(2)).to(dtype) * 5
    sp = torch.tensor(SPECIALS, dtype=dtype)
    ys, xs = sp.repeat_interleave(len(sp)), sp.repeat(len(sp))
    z = torch.zeros(64, dtype=dtype)
    a, b = torch.cat([v, w, ys, z, w[:64]]), torch.cat([w.abs(), v, xs, w[:64], z])
    check(LOG_BINARY[name], dtype, a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_entr(dtype):
    v = values(dtype)
    check(torch.special.entr, dtype, torch.cat([v, v.abs(), v.abs() * 1e-30]))


BACKWARD = {
    "gelu_backward": lambda g, x: torch.ops.aten.gelu_backward(g, x),
    "gelu_backward_tanh": lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh"),
    "softplus_backward": lambda g, x: torch.ops.aten.softplus_backward(g, x, 1.0, 20.0),
    "softplus_backward_b2_t3": lambda g, x: torch.ops.aten.softplus_backward(g, x, 2.0, 3.0),
    "silu_backward": lambda g, x: torch.ops.aten.silu_backward(g, x),
    "elu_backward": lambda g, x: torch.ops.aten.elu_backward(g, 1.0, 1.0, 1.0, False, x),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(BACKWARD))
def test_backward(name, dtype):
    x = values(dtype)
    x = x[x.abs() < 1e20]  # grad * huge products overflow differently in 16-bit
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    check(BACKWARD[name], dtype, g, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("e", [2, 3, 0.5, -0.5, -1, -2, 2.5, 0, 1, -3])
def test_pow_scalar(e, dtype):
    x = values(dtype)
    x = x[x.abs() < 1e4]  # keep finite cubes in float16
    if isinstance(e, float) and e != int(e):
        x = torch.cat([x, x.abs()])
    x = torch.cat([x, torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan")], dtype=dtype)])
    check(lambda t: torch.pow(t, e), dtype, x)
    check(lambda t: t ** e, dtype, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("e", [2.0, 0.5, -0.5, -1.0])
def test_pow_tensor_exponent_0d(e, dtype):
    x = torch.cat([values(dtype)[:2000], torch.tensor([-0.0, float("inf"), -float("inf")], dtype=dtype)])
    check(lambda t, s: torch.pow(t, s), dtype, x, torch.tensor(e, dtype=dtype))


def test_pow_noncontiguous_and_out():
    x = torch.randn(64, 33) * 3
    check(lambda t: torch.pow(t.t(), 3), torch.float32, x)
    out = torch.empty(33, 64, device="tpu")
    torch.pow(x.t().to("tpu"), -2, out=out)
    torch.testing.assert_close(out.cpu(), torch.pow(x.t(), -2), **TOL[torch.float32])


BF16_DIRECT = {
    "neg": torch.neg, "abs": torch.abs,
    # neg and abs work on the bits; a broadcast operand is a float32 scalar computed once
    "neg_broadcast": lambda x: torch.neg(x[3:4].expand(x.shape[0])), "abs_broadcast": lambda x: torch.abs(x[5:6].expand(x.shape[0])),
    "reciprocal": torch.reciprocal, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "relu": torch.relu, "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "hardtanh": lambda x: F.hardtanh(x, -0.5, 2.0),
    "maximum": lambda x: torch.maximum(x, x.flip(0)), "minimum": lambda x: torch.minimum(x, x.flip(0)),
    "sigmoid_backward": lambda x: torch.ops.aten.sigmoid_backward(x, x.flip(0)),
    "tanh_backward": lambda x: torch.ops.aten.tanh_backward(x, x.flip(0)),
    "threshold_backward": lambda x: torch.ops.aten.threshold_backward(x, x.flip(0), 0.25),
    "hypot": lambda x: torch.hypot(x, x.flip(0)), "copysign": lambda x: torch.copysign(x, x.flip(0)),
    "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish,
    "hardsigmoid_backward": lambda x: torch.ops.aten.hardsigmoid_backward(x, x.flip(0)),
    "hardswish_backward": lambda x: torch.ops.aten.hardswish_backward(x, x.flip(0)),
    "leaky_relu_backward": lambda x: torch.ops.aten.leaky_relu_backward(x, x.flip(0), 0.2, False),
    # three operands (and clamp's bounds as scalars, read once)
    "clamp": lambda x: torch.clamp(x, -0.3, 2.0), "clamp_min": lambda x: torch.clamp_min(x, 0.3),
    "clamp_max": lambda x: torch.clamp_max(x, -0.3),
    "clamp_tensors": lambda x: torch.clamp(x, x.flip(0), x.roll(7)),
    "addcmul": lambda x: torch.addcmul(x, x.flip(0), x.roll(7), value=0.3),
    "addcdiv": lambda x: torch.addcdiv(x, x.flip(0), x.roll(7), value=-1.7),
    "lerp": lambda x: torch.lerp(x, x.flip(0), 0.3), "lerp_high": lambda x: torch.lerp(x, x.flip(0), 0.8),
    "lerp_tensor": lambda x: torch.lerp(x, x.flip(0), x.roll(7)),
}


@pytest.mark.parametrize("name", list(BF16_DIRECT))
def test_bf16_direct_loops(name):
    """Contiguous bfloat16 operands run these ops in one loop (widen, compute, round: ew_math.c's
    EW_OP_FIV / EW_OP_FV / EW_OP_FVP), which must give float32's result rounded once, specials included, and
    what PyTorch CPU gives; strided operands take the cast path, the same values."""
    fn = BF16_DIRECT[name]
    x = values(torch.bfloat16)
    xt = x.to("tpu")
    got = fn(xt).cpu()
    torch.testing.assert_close(got, fn(xt.float()).bfloat16().cpu(), rtol=0, atol=0, equal_nan=True)
    # PyTorch CPU computing in float32, rounded
    torch.testing.assert_close(got, fn(x.float()).bfloat16(), equal_nan=True, **TOL[torch.bfloat16])
    torch.testing.assert_close(fn(xt[::2]).cpu(), fn(xt.float()[::2]).bfloat16().cpu(), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["fmod", "remainder", "floor_divide"])
def test_fmod_family(name, dtype):
    """fmod, remainder (%) and floor_divide (//): float32 exact through double lanes (ew_simd.h's
    ewv_fmod), the rest as before; over operands of every magnitude, integral multiples, zeros and
    every pair of specials, against float64's results rounded (PyTorch CPU's float32 fmod answers
    NaN for denormal divisors, and its float16 floor_divide rounds every step to float16)."""
    fn = getattr(torch, name)
    g = torch.Generator().manual_seed(5)
    v = values(dtype)
    w = (torch.randn(v.shape, generator=g) * torch.exp2(torch.randint(-30, 30, v.shape, generator=g).float())).to(dtype)
    k = torch.randint(-1000, 1000, v.shape, generator=g).to(dtype)
    sp = torch.tensor(SPECIALS, dtype=dtype)
    ys, xs = sp.repeat_interleave(len(sp)), sp.repeat(len(sp))
    a = torch.cat([v, w, (w * k).to(dtype), ys, w[:100]])
    b = torch.cat([w, v, w, xs, torch.zeros(100, dtype=dtype)])
    got = fn(a.to("tpu"), b.to("tpu")).cpu()
    torch.testing.assert_close(got, fn(a.double(), b.double()).to(dtype), equal_nan=True, **TOL[dtype])
    if dtype == torch.bfloat16:  # the direct bf16 loop: float32's result rounded once
        at, bt = a.to("tpu"), b.to("tpu")
        torch.testing.assert_close(fn(at, bt).cpu(), fn(at.float(), bt.float()).bfloat16().cpu(),
                                   rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pow_general(dtype):
    """pow with a tensor exponent and with scalar exponents other than the specialized ones (float32:
    exp(y log x) in double lanes, glibc's powf for x <= 0 and the specials): against float64's pow
    rounded (16-bit floats: against PyTorch CPU), over bases of every magnitude, negative bases with integral exponents, every pair of
    specials, and overflow / underflow."""
    g = torch.Generator().manual_seed(7)
    n = 20000
    x = torch.cat([torch.rand(n, generator=g) * 4, torch.exp2(torch.rand(n, generator=g) * 200 - 100),
                   -torch.rand(n, generator=g) * 3, torch.tensor(SPECIALS)])
    y = torch.cat([(torch.rand(n, generator=g) * 2 - 1) * 8, (torch.rand(n, generator=g) * 2 - 1) * 3,
                   torch.randint(-5, 6, (n,), generator=g).float(), torch.tensor(SPECIALS).flip(0)])
    sp = torch.tensor(SPECIALS)
    x, y = torch.cat([x, sp.repeat_interleave(len(sp))]).to(dtype), torch.cat([y, sp.repeat(len(sp))]).to(dtype)
    wide = dtype in (torch.float32, torch.float64)  # 16-bit: PyTorch CPU's roundings are the reference
    want = torch.pow(x.double(), y.double()).to(dtype) if wide else torch.pow(x, y)
    torch.testing.assert_close(torch.pow(x.to("tpu"), y.to("tpu")).cpu(), want, equal_nan=True, **TOL[dtype])
    for e in (2.5, -1.7, 0.3, 7.0):  # float32 takes the exponent rounded to float32, as on CPU
        ed = torch.tensor(e, dtype=dtype).item()
        want = torch.pow(x.double(), ed).to(dtype) if wide else torch.pow(x, e)
        torch.testing.assert_close(torch.pow(x.to("tpu"), e).cpu(), want, equal_nan=True, **TOL[dtype])


BF16_SCALAR = {
    "add": lambda x: x + 0.3, "rsub": lambda x: 0.3 - x, "mul": lambda x: x * 3.1, "div": lambda x: x / 3.1,
    "rdiv": lambda x: 2.5 / x, "maximum": lambda x: torch.maximum(x, torch.tensor(0.25, dtype=x.dtype, device=x.device)),
    "minimum_left": lambda x: torch.minimum(torch.tensor(0.25, dtype=x.dtype, device=x.device), x),
    "fmod": lambda x: torch.fmod(x, 1.5), "remainder": lambda x: x % -2.0, "atan2": lambda x: torch.atan2(x, torch.tensor(0.5, dtype=x.dtype, device=x.device)),
    "hypot": lambda x: torch.hypot(x, torch.tensor(3.0, dtype=x.dtype, device=x.device)),
    "xlogy": lambda x: torch.xlogy(2.0, x.abs()), "copysign": lambda x: torch.copysign(x, -1.0),
    "maximum_nan": lambda x: torch.maximum(x, torch.tensor(float("nan"), dtype=x.dtype, device=x.device)),
    "clamp": lambda x: torch.clamp(x, -0.3, 2.0), "clamp_min": lambda x: torch.clamp_min(x, 0.3),
    "clamp_lo_tensor_hi": lambda x: torch.clamp(x, x.flip(0), torch.tensor(1.5, dtype=x.dtype, device=x.device)),
    "lerp": lambda x: torch.lerp(x, x.flip(0), 0.3),
    "addcmul_scalar_mid": lambda x: torch.addcmul(x, torch.tensor(0.7, dtype=x.dtype, device=x.device), x.flip(0)),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("name", list(BF16_SCALAR))
def test_vector_loops_with_a_scalar(name, dtype):
    """Ops with a scalar operand (either side) run the vector loops with the scalar read once (bf16:
    the one-pass loop, the scalar as float32 since elementwise.c converts broadcast scalars first):
    the same values as the generic path a strided operand takes, any length (the loops' tails), and
    PyTorch CPU's within the dtype's tolerance."""
    fn = BF16_SCALAR[name]
    x = values(dtype)
    x = x[x.abs() < 1e30][:40001]  # an odd length: the vector loops' tail
    xt = x.to("tpu")
    got = fn(xt).cpu()
    strided = fn(torch.stack([xt, xt], 1)[:, 0]).cpu()
    torch.testing.assert_close(got, strided, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got, fn(x), equal_nan=True, **TOL[dtype])  # (bf16 x + 0.3: 0.3 as bf16)


def test_nextafter_float32_bits():
    """float32 nextafter on vectors (ew_simd.h's ewv_nextafter): numpy's nextafter bit for bit over starts of
    every magnitude (denormals, the largest finite) towards every direction and every pair of specials, with
    the direction as a tensor, as a stride-0 scalar and strided."""
    import numpy as np
    g = torch.Generator().manual_seed(11)
    n = 50001
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-150, 128, (n,), generator=g).float())
    y = torch.where(torch.rand(n, generator=g) < 0.3, x, torch.randn(n, generator=g) * 1e3)
    sp = torch.tensor(SPECIALS + [3.4028235e38, -3.4028235e38, 1.1754944e-38])
    a, b = torch.cat([x, sp.repeat_interleave(len(sp))]), torch.cat([y, sp.repeat(len(sp))])

    def want(p, q):
        with np.errstate(over="ignore"):
            return torch.from_numpy(np.nextafter(p.numpy(), q.numpy()))

    def same(got, ref):
        assert torch.equal(got.isnan(), ref.isnan())
        assert torch.equal(got[~ref.isnan()].view(torch.int32), ref[~ref.isnan()].view(torch.int32))

    at, bt = a.to("tpu"), b.to("tpu")
    same(torch.nextafter(at, bt).cpu(), want(a, b))
    same(torch.nextafter(at[::3], bt[::3]).cpu(), want(a[::3], b[::3]))
    for d in (float("inf"), -float("inf"), 0.0, float("nan")):
        same(torch.nextafter(at, torch.tensor(d, device="tpu")).cpu(), want(a, torch.full_like(a, d)))
