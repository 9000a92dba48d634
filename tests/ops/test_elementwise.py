"""Elementwise ops on the device against PyTorch CPU: unary/binary/ternary math,
comparisons, activations and their backward ops, copy/fill/where/masked_fill/clamp,
across dtypes and shape cases (broadcast, non-contiguous, 0-d, empty), in-place and
out= forms, scalar type promotion and PyTorch's integer/NaN semantics."""
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import sync  # noqa: F401  (tests/conftest.py)

FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]


def make(shape, dtype, seed=0, low=None, positive=False, nonzero=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 2
        if positive:
            x = x.abs() + 0.05
        if nonzero:
            x = torch.where(x.abs() < 0.1, torch.full_like(x, 0.5), x)
        return x.to(dtype)
    lo, hi = (0, 40) if dtype == torch.uint8 or positive else (-20, 21)
    x = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64)
    if nonzero:
        x = torch.where(x == 0, torch.full_like(x, 3), x)
    if positive:
        x = x + 1
    return x.to(dtype)


def tol(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float32:
        return dict(rtol=2e-5, atol=2e-5)
    return dict(rtol=1e-7, atol=1e-7) if dtype == torch.float64 else dict(rtol=0, atol=0)


def check(dev_out, cpu_out, **kw):
    if isinstance(cpu_out, (tuple, list)):
        for d, c in zip(dev_out, cpu_out):
            check(d, c, **kw)
        return
    assert dev_out.device.type != "cpu" or True
    d = dev_out.cpu()
    assert d.dtype == cpu_out.dtype, (d.dtype, cpu_out.dtype)
    assert d.shape == cpu_out.shape, (d.shape, cpu_out.shape)
    t = tol(cpu_out.dtype) if cpu_out.dtype.is_floating_point else dict(rtol=0, atol=0)
    t.update(kw)
    torch.testing.assert_close(d, cpu_out, equal_nan=True, **t)


def run_both(fn, *inputs, device, **kw):
    """fn on CPU; if CPU raises, the device must raise too; else compare."""
    try:
        expect = fn(*inputs)
    except Exception as e:  # noqa: BLE001
        if any(k in str(e) for k in ("not implemented for", "not supported for", "primitive descriptor")):
            return  # a dtype (or a oneDNN case) PyTorch CPU lacks: the device may do more
        with pytest.raises(Exception):
            got = fn(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs])
            sync(device)
            if isinstance(got, torch.Tensor):
                got.cpu()
        return
    got = fn(*[x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs])
    check(got, expect, **kw)


# shape cases: (shape of a, shape of b, transform) - transform makes a non-contiguous view
SHAPES = [
    ((7, 33), (7, 33), None),
    ((5, 1, 16), (3, 1), None),            # broadcast both ways
    ((33, 7), (33, 7), "t"),                # transposed
    ((6, 40), (6, 20), "slice"),            # every other column
    ((), (), None),                         # 0-d
    ((0, 4), (4,), None),                   # empty
]


def shaped(shape, dtype, seed, how, **kw):
    x = make(shape, dtype, seed, **kw)
    if how == "t":
        x = x.t()
    elif how == "slice":
        x = x[:, ::2]
    return x


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "sgn": torch.sgn,
    "reciprocal": torch.reciprocal, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "exp": torch.exp,
    "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2,
    "log10": torch.log10, "log1p": torch.log1p, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "tanh": torch.tanh, "sinh": torch.sinh, "cosh": torch.cosh, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "sigmoid": torch.sigmoid, "erf": torch.erf, "erfc": torch.erfc, "erfinv": torch.erfinv,
    "lgamma": torch.lgamma, "digamma": torch.digamma, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "round2": lambda x: torch.round(x, decimals=2), "trunc": torch.trunc,
    "frac": torch.frac, "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
    "signbit": torch.signbit, "nan_to_num": torch.nan_to_num, "logit": torch.logit,
    "logit_eps": lambda x: torch.logit(x, eps=0.1), "bitwise_not": torch.bitwise_not,
    "logical_not": torch.logical_not, "relu": torch.relu, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "mish": F.mish,
    "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "elu": F.elu,
    "selu": F.selu, "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "hardtanh": F.hardtanh,
    "softplus": lambda x: F.softplus(x, beta=2, threshold=3), "threshold": lambda x: F.threshold(x, 0.1, -2.0),
    "hardshrink": F.hardshrink, "softshrink": F.softshrink, "sinc": torch.sinc,
    "clamp": lambda x: torch.clamp(x, -1, 2), "clamp_min": lambda x: torch.clamp(x, min=0.5),
    "clamp_max": lambda x: torch.clamp(x, max=0.5), "logsigmoid": F.logsigmoid,
}
UNARY_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", UNARY_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(device, name, dtype):
    fn = UNARY[name]
    kw = dict(rtol=1e-4, atol=1e-4) if name in ("tan", "lgamma", "digamma", "erfinv") and dtype == torch.float32 else {}
    for i, (sa, _, how) in enumerate(SHAPES):
        x = shaped(sa, dtype, i, how)
        run_both(fn, x, device=device, **kw)


BINARY = {
    "add": torch.add, "add_alpha": lambda a, b: torch.add(a, b, alpha=2), "sub": torch.sub,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3), "rsub": torch.rsub, "mul": torch.mul,
    "div": torch.div, "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"), "remainder": torch.remainder,
    "fmod": torch.fmod, "floor_divide": torch.floor_divide, "pow": torch.pow, "atan2": torch.atan2,
    "maximum": torch.maximum, "minimum": torch.minimum, "fmax": torch.fmax, "fmin": torch.fmin,
    "hypot": torch.hypot, "copysign": torch.copysign, "xlogy": torch.xlogy,
    "logaddexp": torch.logaddexp, "logaddexp2": torch.logaddexp2, "nextafter": torch.nextafter,
    "heaviside": torch.heaviside, "gcd": torch.gcd, "lcm": torch.lcm,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "lshift": lambda a, b: a << (b.abs() % 9 if not b.dtype.is_floating_point and b.dtype != torch.bool else b),
    "rshift": lambda a, b: a >> (b.abs() % 9 if not b.dtype.is_floating_point and b.dtype != torch.bool else b),
    "clamp_t": lambda a, b: torch.clamp(a, min=b), "clamp_max_t": lambda a, b: torch.clamp(a, max=b),
    "where": lambda a, b: torch.where(a > 0 if a.dtype != torch.bool else a, a, b),
    "threshold_backward": lambda g, x: torch.ops.aten.threshold_backward(g, x, 0.5),
    "sigmoid_backward": lambda g, y: torch.ops.aten.sigmoid_backward(g, y),
    "tanh_backward": lambda g, y: torch.ops.aten.tanh_backward(g, y),
    "silu_backward": lambda g, x: torch.ops.aten.silu_backward(g, x),
    "gelu_backward": lambda g, x: torch.ops.aten.gelu_backward(g, x),
    "gelu_backward_tanh": lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh"),
    "hardsigmoid_backward": lambda g, x: torch.ops.aten.hardsigmoid_backward(g, x),
    "hardswish_backward": lambda g, x: torch.ops.aten.hardswish_backward(g, x),
    "hardtanh_backward": lambda g, x: torch.ops.aten.hardtanh_backward(g, x, -1.0, 1.0),
    "leaky_relu_backward": lambda g, x: torch.ops.aten.leaky_relu_backward(g, x, 0.1, False),
    "elu_backward": lambda g, x: torch.ops.aten.elu_backward(g, 1.0, 1.0, 1.0, False, x),
    "softplus_backward": lambda g, x: torch.ops.aten.softplus_backward(g, x, 1.0, 20.0),
    "logit_backward": lambda g, x: torch.ops.aten.logit_backward(g, x, 0.1),
    "hardshrink_backward": lambda g, x: torch.ops.aten.hardshrink_backward(g, x, 0.5),
    "softshrink_backward": lambda g, x: torch.ops.aten.softshrink_backward(g, x, 0.5),
}
BINARY_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int8, torch.bool]
NONZERO_B = {"div", "div_trunc", "div_floor", "remainder", "fmod", "floor_divide"}


@pytest.mark.parametrize("dtype", BINARY_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(device, name, dtype):
    fn = BINARY[name]
    pos = name in ("pow", "xlogy")
    for i, (sa, sb, how) in enumerate(SHAPES):
        a = shaped(sa, dtype, i, how, positive=pos)
        b = shaped(sb, dtype, i + 100, how if sa == sb else None, nonzero=name in NONZERO_B, positive=pos)
        if name == "pow" and not dtype.is_floating_point:
            b = b.remainder(4) if dtype != torch.bool else b
        run_both(fn, a, b, device=device)


@pytest.mark.parametrize("pair", [(torch.int32, torch.float32), (torch.uint8, torch.int8),
                                  (torch.bfloat16, torch.float16), (torch.bool, torch.int64),
                                  (torch.float16, torch.float64), (torch.int64, torch.bfloat16)], ids=str)
@pytest.mark.parametrize("name", ["add", "mul", "div", "maximum", "lt", "eq", "where", "atan2", "remainder"])
def test_binary_mixed_dtypes(device, name, pair):
    a = make((9, 17), pair[0], 1)
    b = make((17,), pair[1], 2, nonzero=True)
    run_both(BINARY[name], a, b, device=device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8, torch.bool], ids=str)
@pytest.mark.parametrize("scalar", [-3, 2.5, True], ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "lt", "eq", "remainder", "maximum0d"])
def test_scalar_promotion(device, op, dtype, scalar):
    x = make((6, 5), dtype, 3, positive=op == "pow")
    fns = {"add": lambda t: t + scalar, "sub": lambda t: t - scalar, "mul": lambda t: t * scalar,
           "div": lambda t: t / scalar, "pow": lambda t: t ** scalar, "lt": lambda t: t < scalar,
           "eq": lambda t: t == scalar, "remainder": lambda t: t % scalar,
           "maximum0d": lambda t: torch.maximum(t, torch.tensor(scalar, device=t.device))}
    run_both(fns[op], x, device=device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int8], ids=str)
def test_ternary(device, dtype):
    for i, (sa, sb, how) in enumerate(SHAPES):
        a, b, c = shaped(sa, dtype, i, how), shaped(sb, dtype, i + 1, None), shaped(sb, dtype, i + 2, None, nonzero=True)
        run_both(lambda x, y, z: torch.addcmul(x, y, z, value=2), a, b, c, device=device)
        run_both(lambda x, y, z: torch.addcdiv(x, y, z, value=0.5), a, b, c, device=device)
        run_both(lambda x, y, z: torch.lerp(x, y, z), a, b, c, device=device)
        run_both(lambda x, y: torch.lerp(x, y, 0.3), a, b, device=device)
        run_both(lambda x, y, z: torch.clamp(x, y, y + z.abs()), a, b, c, device=device)
        run_both(lambda x, y, z: torch.where(y > 0, x, z), a, b, c, device=device)


@pytest.mark.parametrize("src", ALL, ids=str)
def test_copy_casts(device, src):
    x = make((13, 11), src, 5)
    for dst in ALL:
        d = torch.empty((13, 11), dtype=dst, device=device)
        d.copy_(x.to(device))                       # device -> device with a cast
        check(d, x.to(dst))
        d2 = torch.empty((11, 13), dtype=dst, device=device).t()
        d2.copy_(x.to(device))                      # into a transposed view
        check(d2, x.to(dst))
        check(x.to(device).to(dst), x.to(dst))      # .to(dtype) on device
    # broadcasting copy and a non-contiguous source
    d = torch.zeros((4, 13, 11), dtype=src, device=device)
    d.copy_(x.to(device))
    check(d, x.expand(4, 13, 11).contiguous())
    check(x.to(device).t().contiguous(), x.t().contiguous())
    check(x.to(device)[::2, 1::3].clone(), x[::2, 1::3].clone())


def test_copy_large(device):
    x = torch.randn(1 << 22)
    y = x.to(device)
    z = torch.empty_like(y)
    z.copy_(y)
    check(z, x)
    check(y.to(torch.bfloat16), x.to(torch.bfloat16))


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_fill_zero_masked_fill(device, dtype):
    x = make((5, 8), dtype, 7)
    for v in (3, -1.5, True):
        try:
            expect = x.clone().fill_(v)
        except Exception:  # noqa: BLE001
            continue
        check(x.clone().to(device).fill_(v), expect)
        check(x.clone().to(device).t().fill_(v), x.clone().t().fill_(v))
        check(x.clone().to(device).fill_(torch.tensor(v)), x.clone().fill_(torch.tensor(v)))
    check(x.clone().to(device).zero_(), torch.zeros_like(x))
    check(torch.full((3, 4), 7, dtype=dtype, device=device), torch.full((3, 4), 7, dtype=dtype))
    m = make((5, 8), torch.bool, 8)
    check(x.clone().to(device).masked_fill_(m.to(device), 1), x.clone().masked_fill_(m, 1))
    check(x.to(device).masked_fill(m[0].to(device), 0), x.masked_fill(m[0], 0))
    check(x.to(device).masked_fill(m.to(device), torch.tensor(1, device=device)), x.masked_fill(m, torch.tensor(1)))


@pytest.mark.parametrize("name", ["add", "mul", "sub", "div", "sigmoid", "exp", "clamp", "maximum"])
def test_inplace_and_out(device, name):
    a, b = make((8, 9), torch.float32, 1), make((8, 9), torch.float32, 2)
    unary = {"sigmoid", "exp", "clamp"}
    if name in unary:
        kw = dict(min=-0.5, max=0.5) if name == "clamp" else {}
        expect = getattr(torch, name)(a, **kw)
        d = a.clone().to(device)
        getattr(d, name + "_")(**kw)
        check(d, expect)
        out = torch.empty(8, 9, device=device)
        getattr(torch, name)(a.clone().to(device), **kw, out=out)
        check(out, expect)
        dt = a.clone().to(device).t()
        getattr(dt, name + "_")(**kw)
        check(dt, getattr(torch, name)(a.t(), **kw))
        return
    expect = getattr(torch, name)(a, b)
    d = a.clone().to(device)
    if name != "maximum":
        getattr(d, name + "_")(b.to(device))
        check(d, expect)
    out = torch.empty(8, 9, device=device)
    getattr(torch, name)(a.clone().to(device), b.to(device), out=out)
    check(out, expect)
    out64 = torch.empty(8, 9, dtype=torch.float64, device=device)  # out= with another dtype
    getattr(torch, name)(a.clone().to(device), b.to(device), out=out64)
    check(out64, getattr(torch, name)(a, b, out=torch.empty(8, 9, dtype=torch.float64)))
    # self aliasing out element-for-element with broadcasting other
    d = a.clone().to(device)
    getattr(torch, name)(d, b[0].to(device), out=d)
    check(d, getattr(torch, name)(a, b[0]))


def test_integer_semantics(device):
    a = torch.tensor([7, -7, 7, -7, 0], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 5], dtype=torch.int64)
    for fn in (torch.floor_divide, torch.remainder, torch.fmod,
               lambda x, y: torch.div(x, y, rounding_mode="trunc"), torch.div):
        check(fn(a.to(device), b.to(device)), fn(a, b))
    with pytest.raises(Exception):
        (a.to(device) // torch.zeros(5, dtype=torch.int64, device=device)).cpu()
    check(torch.tensor([2, -1, 1, 3], device=device) ** torch.tensor([10, 3, -2, 0], device=device),
          torch.tensor([2, -1, 1, 3]) ** torch.tensor([10, 3, -2, 0]))
    i8 = torch.tensor([100, -100, 127], dtype=torch.int8)
    check(i8.to(device) + i8.to(device), i8 + i8)           # wraps
    check(i8.to(device) * 3, i8 * 3)
    check(torch.tensor([1, 2], dtype=torch.uint8, device=device) - 3, torch.tensor([1, 2], dtype=torch.uint8) - 3)


def test_nan_semantics(device):
    x = torch.tensor([float("nan"), 1.0, -2.0, float("inf"), -0.0])
    y = torch.tensor([0.0, float("nan"), 3.0, 1.0, 0.0])
    for fn in (torch.maximum, torch.minimum, torch.fmax, torch.fmin,
               lambda p, q: torch.clamp(p, min=q), lambda p, q: torch.clamp(p, max=q)):
        check(fn(x.to(device), y.to(device)), fn(x, y))
    check(torch.clamp(x.to(device), -1, 1), torch.clamp(x, -1, 1))
    check(torch.round(torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5], device=device)),
          torch.tensor([0.0, 2.0, 2.0, -0.0, -2.0]))
    check(torch.nan_to_num(x.to(torch.float16).to(device)), torch.nan_to_num(x.to(torch.float16)))
    check(torch.nan_to_num(x.to(device), nan=1.0, posinf=2.0, neginf=-3.0),
          torch.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0))


def test_activation_backward_through_autograd(device):
    for fn in (torch.sigmoid, torch.tanh, F.gelu, F.silu, F.relu, F.elu, F.leaky_relu, F.hardswish,
               F.hardsigmoid, F.softplus, F.mish, F.hardtanh, torch.exp, torch.sqrt, torch.log1p):
        x = make((6, 7), torch.float32, 9, positive=fn in (torch.sqrt, torch.log1p))
        xc = x.clone().requires_grad_()
        fn(xc).sum().backward()
        xd = x.to(device).requires_grad_()
        fn(xd).sum().backward()
        check(xd.grad, xc.grad, rtol=1e-4, atol=1e-5)
