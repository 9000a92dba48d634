"""Defects found by running PyTorch's test_unary_ufuncs.py on tpu (tests/pytorch_suites.py) over its
float64, bfloat16, float16, integer, bool and uint16/32/64 tests, each kept as a test against PyTorch
CPU so CI guards it without PyTorch's files."""
import pytest
import torch

_UINT_WIDE = [torch.uint16, torch.uint32, torch.uint64]

# CPU computes these on uint16/32/64 inputs as on any integer input: promoted to float32.
_FLOAT_PROMOTING = [
    "i0", "special_i0e", "special_i1", "special_i1e", "special_modified_bessel_i0",
    "special_modified_bessel_i1", "special_modified_bessel_k0", "special_modified_bessel_k1",
    "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1", "special_bessel_j0",
    "special_bessel_j1", "special_bessel_y0", "special_bessel_y1", "special_airy_ai",
    "special_spherical_bessel_j0", "special_erfcx", "special_ndtri", "special_entr", "reciprocal", "sqrt",
    "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "tanh", "sinh",
    "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "sigmoid", "erf", "erfc", "erfinv", "lgamma",
    "digamma", "sinc", "angle", "logit",
]


@pytest.mark.parametrize("dtype", _UINT_WIDE)
def test_float_unary_ops_take_wide_unsigned(dtype, tpu, eager_mode):
    # test_batch_vs_slicing / test_contig_* / test_non_contig_* of the special ops on uint16/32/64:
    # CPU promotes the integers to float32 and computes; tpu refused the dtype with NotImplementedError
    x = torch.tensor([[0, 1, 2, 7], [30, 200, 1000, 65535]], dtype=dtype)
    for name in _FLOAT_PROMOTING:
        op = getattr(torch.ops.aten, name)
        want = op(x)
        for t in (x, x.t()):
            got = op(t.to(tpu))
            assert got.dtype == want.dtype == torch.float32, name
            torch.testing.assert_close(got.cpu(), op(t), equal_nan=True, msg=name)
    # polygamma's tensor is its second argument
    for n in (0, 1, 2):
        torch.testing.assert_close(torch.polygamma(n, x.to(tpu)).cpu(), torch.polygamma(n, x), equal_nan=True)


def test_wide_unsigned_still_refused_where_cpu_refuses(tpu):
    x = torch.tensor([1, 2, 3], dtype=torch.uint16)
    for op in (lambda t: torch.igamma(t, t), lambda t: torch.frexp(t)):
        with pytest.raises((RuntimeError, NotImplementedError)):
            op(x)
        with pytest.raises((RuntimeError, NotImplementedError)):
            op(x.to(tpu))
            torch.tpu.synchronize()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16, torch.uint32])
def test_unsigned_scalar_parameter_wraps_as_cpu(dtype, tpu, eager_mode):
    # test_*_nn_functional_threshold_*_uint8: threshold(x, 0.15, value=-9) on uint8. CPU's checked
    # Scalar conversion (c10::overflows) lets an unsigned type take a negative value down to -max,
    # which wraps (-9 is 247); tpu refused it at the next sync
    x = torch.tensor([[0, 5, 200], [255, 1, 7]], dtype=torch.uint8).to(dtype)
    for th, v in ((0.15, -9), (-9, 5), (3, -255), (2, 250)):
        if dtype is not torch.uint8 and (th, v) == (0.15, -9):
            continue  # CPU has no threshold on uint16/32
        try:
            want = torch.threshold(x, th, v)
        except (RuntimeError, NotImplementedError):
            continue
        torch.testing.assert_close(torch.threshold(x.to(tpu), th, v).cpu(), want)


def test_unsigned_scalar_parameter_overflow_raises_at_the_call(tpu, eager_mode):
    # a value the integer type cannot hold is CPU's RuntimeError at the call, in every mode (it
    # depends on a Python scalar and a dtype only), not the kernel's at the next sync
    x = torch.tensor([0, 5, 200], dtype=torch.uint8)
    for th, v in ((3, -256), (300, 1)):
        with pytest.raises(RuntimeError, match="cannot be converted to type uint8_t without overflow"):
            torch.threshold(x, th, v)
        xt = x.to(tpu)
        with pytest.raises(RuntimeError, match="cannot be converted to type uint8_t without overflow"):
            torch.threshold(xt, th, v)
        with pytest.raises(RuntimeError, match="cannot be converted to type uint8_t without overflow"):
            torch.threshold_(xt, th, v)
        torch.testing.assert_close(xt.cpu(), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_frexp_out_dtypes_checked_at_the_call(dtype, tpu, eager_mode):
    # test_frexp_assert_raises: frexp(out=(mantissa, exponent)) with a mantissa of another dtype than
    # the input, or a non-int32 exponent, is CPU's RuntimeError; tpu cast into the outs
    x = torch.randn(4, 5, dtype=dtype)
    others = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
              torch.float64, torch.complex64, torch.complex128]
    for md in others:
        if md == dtype:
            continue
        for dev in ("cpu", tpu):
            with pytest.raises(RuntimeError, match=r"torch\.frexp\(\) expects mantissa to have dtype .+ but got .+"):
                torch.frexp(x.to(dev), out=(torch.empty(4, 5, dtype=md, device=dev),
                                            torch.empty(4, 5, dtype=torch.int32, device=dev)))
    for ed in others:
        if ed == torch.int32:
            continue
        for dev in ("cpu", tpu):
            with pytest.raises(RuntimeError, match=r"torch\.frexp\(\) expects exponent to have int dtype but got .+"):
                torch.frexp(x.to(dev), out=(torch.empty(4, 5, dtype=dtype, device=dev),
                                            torch.empty(4, 5, dtype=ed, device=dev)))
    m, e = torch.empty(4, 5, dtype=dtype, device=tpu), torch.empty(4, 5, dtype=torch.int32, device=tpu)
    torch.frexp(x.to(tpu), out=(m, e))
    want = torch.frexp(x)
    torch.testing.assert_close(m.cpu(), want.mantissa)
    torch.testing.assert_close(e.cpu(), want.exponent)


def test_conj_of_complex32_materializes(tpu, eager_mode):
    # test_*_conj_*_complex32: conj() of a complex32 tensor is a lazy view; copying it out (clone,
    # .cpu(), copy_ into a plain tensor) conjugated the copy with a complex kernel complex32 lacks
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        x = torch.randn(3, 4, dtype=torch.complex64).to(torch.complex32)
        t = x.to(tpu)

        def same(a, b):
            return torch.equal(a.resolve_conj().to(torch.complex64), b.resolve_conj().to(torch.complex64))

        assert same(torch.conj(t).cpu(), torch.conj(x))
        c = torch.conj(t).clone()
        assert not c.is_conj() and same(c.cpu(), torch.conj(x))
        assert same(torch.conj(t.T)[::2].cpu(), torch.conj(x.T)[::2])
        e = torch.empty_like(t)
        e.copy_(torch.conj(t))
        assert same(e.cpu(), torch.conj(x))
        n = torch.conj(t).imag  # a negative view of the imaginary halves
        assert torch.equal(n.clone().cpu(), torch.conj(x).imag.clone())


@pytest.mark.parametrize("dtype", _UINT_WIDE)
def test_identity_and_constant_unary_ops_take_wide_unsigned(dtype, tpu, eager_mode):
    # floor/ceil/trunc/round/nan_to_num are identities and isnan/isposinf/isneginf/signbit constants on
    # unsigned integers, which CPU runs; uint64 above 2^63 (negative in the int64 loops) has no sign
    vals = [0, 3, 2**15 + 1, 65535] + ([2**63 + 5, 2**64 - 1] if dtype == torch.uint64 else [])
    x = torch.tensor(vals, dtype=dtype)
    for op in (torch.floor, torch.ceil, torch.trunc, torch.round, torch.nan_to_num, torch.isnan, torch.isposinf,
               torch.isneginf, torch.signbit):
        got, want = op(x.to(tpu)), op(x)
        assert got.dtype == want.dtype
        assert torch.equal(got.cpu(), want), op.__name__
    # round with decimals: CPU refuses these dtypes, and tpu at the call
    with pytest.raises(NotImplementedError):
        torch.round(x, decimals=1)
    with pytest.raises(NotImplementedError):
        torch.round(x.to(tpu), decimals=1)
