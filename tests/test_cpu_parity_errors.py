"""Behaviour that must match PyTorch CPU outside the OpInfo sweep: uint8 image resizing (bilinear,
antialiased bilinear and bicubic), nll_loss with a uint8 target, and errors. Errors that depend only
on shapes, dtypes and Python scalars raise at the call, in every eager mode, with CPU's exception
type; errors that depend on index values on the device surface at the next sync with CPU's type, and
in Strict/DeferAndFuse the message says how to find the line that issued the op."""
import pytest
import torch
import torch.nn.functional as F


def _cpu_error(fn):
    try:
        fn("cpu")
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e)
    return None


@pytest.mark.parametrize("mode,aa", [("bilinear", False), ("bilinear", True), ("bicubic", True)])
@pytest.mark.parametrize("src,dst", [((8, 8), (5, 5)), ((7, 9), (16, 12)), ((32, 32), (11, 13))])
@pytest.mark.parametrize("channels_last", [False, True])
def test_uint8_resize_matches_cpu_exactly(mode, aa, src, dst, channels_last, tpu):
    x = torch.randint(0, 256, (2, 3) + src, dtype=torch.uint8)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = F.interpolate(x, size=dst, mode=mode, antialias=aa)
    yt = F.interpolate(x.to(tpu), size=dst, mode=mode, antialias=aa)
    assert torch.equal(yt.cpu(), y)


@pytest.mark.parametrize("src,dst", [((8, 8), (5, 5)), ((7, 9), (16, 12))])
def test_bicubic_antialias_float_forward_backward(src, dst, tpu):
    x = torch.randn(2, 3, *src, dtype=torch.float64)
    xc, xt = x.clone().requires_grad_(), x.to(tpu).requires_grad_()
    yc = F.interpolate(xc, size=dst, mode="bicubic", antialias=True)
    yt = F.interpolate(xt, size=dst, mode="bicubic", antialias=True)
    torch.testing.assert_close(yt.cpu(), yc.detach())
    g = torch.randn(yc.shape, dtype=torch.float64)
    yc.backward(g)
    yt.backward(g.to(tpu))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def test_nll_loss_uint8_target(tpu):
    x = torch.randn(4, 5).log_softmax(1)
    t = torch.tensor([1, 0, 4, 2], dtype=torch.uint8)
    xc, xt = x.clone().requires_grad_(), x.to(tpu).requires_grad_()
    lc, lt = F.nll_loss(xc, t), F.nll_loss(xt, t.to(tpu))
    torch.testing.assert_close(lt.cpu(), lc.detach())
    lc.backward()
    lt.backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


# ---- errors raised at the call (shapes, dtypes, Python scalars) ----

SYNC_ERRORS = {
    "reflect_pad2d_too_large": lambda d: F.pad(torch.randn(1, 1, 3, 3, device=d), (4, 4, 4, 4), mode="reflect"),
    "reflect_pad2d_too_large_h": lambda d: F.pad(torch.randn(1, 1, 3, 5, device=d), (1, 1, 3, 0), mode="reflect"),
    "index_put_value_shape": lambda d: torch.zeros(3, device=d).index_put_(
        (torch.tensor([0, 1], device=d),), torch.ones(3, device=d)),
    "index_put_2d_value_shape": lambda d: torch.zeros(3, 4, device=d).index_put_(
        (torch.tensor([0, 1], device=d),), torch.ones(2, 3, device=d)),
    "setitem_value_shape": lambda d: torch.zeros(4, 2, device=d).__setitem__(
        torch.tensor([0, 1, 2], device=d), torch.ones(2, 2, device=d)),
    "index_put_indices_broadcast": lambda d: torch.zeros(3, 3, device=d).index_put_(
        (torch.tensor([0, 1], device=d), torch.tensor([0, 1, 2], device=d)), torch.tensor(1.0, device=d)),
    "mask_wrong_size_read": lambda d: torch.zeros(3, device=d)[torch.tensor([True, False], device=d)],
    "mask_wrong_size_write": lambda d: torch.zeros(3, device=d).__setitem__(
        torch.tensor([True, False], device=d), 1.0),
    "mask_wrong_size_dim1": lambda d: torch.zeros(2, 3, device=d)[:, torch.tensor([True, False], device=d)],
    "basic_index_out_of_range": lambda d: torch.zeros(3, device=d)[5],
    "floor_divide_bool": lambda d: torch.floor_divide(torch.tensor([True], device=d), torch.tensor([True], device=d)),
    "kthvalue_empty_dim": lambda d: torch.kthvalue(torch.zeros(0, device=d), 1),
    "round_decimals_int": lambda d: torch.round(torch.tensor([1, 2], device=d), decimals=1),
    "round_decimals_zero_uint8": lambda d: torch.round(torch.tensor([1, 2], dtype=torch.uint8, device=d), decimals=0),
    # a fill value the dtype cannot hold: CPU's checked conversion
    "fill_uint8_overflow": lambda d: torch.zeros(3, dtype=torch.uint8, device=d).fill_(300),
    "full_int8_overflow": lambda d: torch.full((2,), -200, dtype=torch.int8, device=d),
    "fill_half_overflow": lambda d: torch.zeros(3, dtype=torch.float16, device=d).fill_(1e300),
    "fill_int32_overflow": lambda d: torch.zeros(3, dtype=torch.int32, device=d).fill_(2**40),
    "fill_int64_above_int64": lambda d: torch.zeros(3, dtype=torch.int64, device=d).fill_(2**63),
}


def test_python_ints_above_int64(tpu, eager_mode):
    """A Python int above INT64_MAX is its number for float tensors (it was read as the int64 with its
    bits: pow(x, 2**64 - 1) computed x ** -1) and its bits for uint64 tensors."""
    x = torch.tensor([0.5, 2.0, 1.0])
    for e in (2**64 - 1, 2**63):
        torch.testing.assert_close(torch.pow(x.to(tpu), e).cpu(), torch.pow(x, e))
    u = torch.tensor([1, 2**64 - 1, 2**63], dtype=torch.uint64)
    for v in (2**64 - 1, 2**63):
        assert torch.equal(torch.eq(u.to(tpu), v).cpu(), torch.eq(u, v))
        assert torch.equal(torch.zeros(2, dtype=torch.uint64, device=tpu).fill_(v).cpu(),
                           torch.zeros(2, dtype=torch.uint64).fill_(v))


def test_fill_values_the_dtype_holds_still_fill(tpu, eager_mode):
    for dt, v in ((torch.uint8, -1), (torch.uint8, 255), (torch.float16, float("inf")), (torch.bool, 5),
                  (torch.int8, -128), (torch.float32, 1e38), (torch.uint64, 2**64 - 1)):
        want = torch.zeros(3, dtype=dt).fill_(v)
        assert torch.equal(torch.zeros(3, dtype=dt, device=tpu).fill_(v).cpu(), want), (dt, v)


@pytest.mark.parametrize("case", sorted(SYNC_ERRORS))
def test_shape_errors_raise_at_the_call_with_cpus_type(case, tpu, eager_mode):
    fn = SYNC_ERRORS[case]
    expected = _cpu_error(fn)
    assert expected is not None, "CPU accepts it: the case is wrong"
    with pytest.raises(expected):
        fn(tpu)  # no sync: it must raise here


def test_valid_index_put_still_works(tpu, eager_mode):
    for fn in (lambda d: torch.zeros(3, 4, device=d).index_put_((torch.tensor([0, 2], device=d),),
                                                                  torch.ones(4, device=d)),
               lambda d: torch.zeros(3, 4, device=d).index_put_(
                   (torch.tensor([[0], [2]], device=d), torch.tensor([1, 3], device=d)), torch.ones(2, 2, device=d)),
               lambda d: _setitem(torch.zeros(2, 3, 4, device=d), ([0, 1], slice(None), [1, 3]),
                                  torch.arange(6.0, device=d).reshape(2, 3))):
        assert torch.equal(fn(tpu).cpu(), fn("cpu"))


def _setitem(x, key, value):
    x[key] = value  # indexed dims apart: the index shape goes first
    return x


# ---- errors that depend on index values on the device ----

VALUE_ERRORS = {
    "gather_out_of_range": lambda d: torch.zeros(3, device=d).gather(0, torch.tensor([5], device=d)),
    "scatter_out_of_range": lambda d: torch.zeros(1, 2, device=d).scatter(1, torch.tensor([[5]], device=d), 1.0),
    "scatter_add_negative": lambda d: torch.zeros(2, device=d).scatter_add(
        0, torch.tensor([-1], device=d), torch.ones(1, device=d)),
    "index_select_out_of_range": lambda d: torch.zeros(3, device=d).index_select(0, torch.tensor([5], device=d)),
    "index_select_dim1_out_of_range": lambda d: torch.zeros(3, 3, 5, device=d)[:, 0].index_select(
        1, torch.tensor([5], device=d)),
    "index_select_dim2_out_of_range": lambda d: torch.zeros(3, 5, 2, device=d).index_select(
        2, torch.tensor([-3], device=d)),
    "index_add_out_of_range": lambda d: torch.zeros(5, 4, device=d).index_add(
        0, torch.tensor([5], device=d), torch.ones(1, 4, device=d)),
    "index_copy_out_of_range": lambda d: torch.zeros(5, 4, device=d).index_copy(
        0, torch.tensor([5], device=d), torch.ones(1, 4, device=d)),
    "take_out_of_range": lambda d: torch.zeros(5, 4, device=d).take(torch.tensor([20], device=d)),
    "one_hot_too_large": lambda d: F.one_hot(torch.tensor([3], device=d), 2),
}


@pytest.mark.parametrize("case", sorted(VALUE_ERRORS))
def test_value_errors_have_cpus_type(case, tpu, eager_mode):
    fn = VALUE_ERRORS[case]
    expected = _cpu_error(fn)
    assert expected is not None
    with pytest.raises(expected) as info:
        fn(tpu)
        torch.tpu.synchronize()
    if eager_mode != "debug":
        assert "set TORCH_TPU_EAGER_MODE=debug to raise at the line that issued it" in str(info.value)


@pytest.mark.parametrize("values", [[-1], [2, -3, 0], [[0, 1], [-1, 4]]])
def test_one_hot_negative_class_raises_at_the_call(values, tpu, eager_mode):
    # one_hot without num_classes reads the largest class (a sync on every device); min comes back in
    # the same read, so CPU's check is made at the call in CPU's words. ATen leaves it to scatter on
    # accelerators, whose error surfaced at some later sync (never for [-1]: the result is empty).
    with pytest.raises(RuntimeError) as want:
        F.one_hot(torch.tensor(values))
    with pytest.raises(RuntimeError) as got:
        F.one_hot(torch.tensor(values, device=tpu))
    assert str(got.value) == str(want.value) == "Class values must be non-negative."
    x = torch.tensor([[0, 3], [2, 2]])
    assert torch.equal(F.one_hot(x.to(tpu)).cpu(), F.one_hot(x))  # the device keeps working
