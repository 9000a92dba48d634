"""Type promotion on the device matches PyTorch CPU: result dtype and values of
binary ops across the 10 supported dtypes, with tensors, 0-d tensors and
Python scalars (and errors where CPU raises one)."""
import pytest
import torch

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]

OPS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "eq": torch.eq, "lt": torch.lt, "ge": torch.ge, "maximum": torch.maximum,
    "where": lambda a, b: torch.where(torch.tensor([True, False, True, False, True, False]).to(
        a.device if isinstance(a, torch.Tensor) else b.device), a, b),
}
SCALARS = [3, -2, 2.5, True, 0.5]


def _vals(dtype, n=6):
    # in range for every dtype (uint8 included), no zero divisors except bool
    return torch.tensor([1, 2, 3, 4, 5, 6][:n]).to(dtype)


def _run(fn, *args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - compared with the device's behaviour
        return None, e


def _check(fn, cpu_args, dev_args, label, bad):
    r_cpu, e_cpu = _run(fn, *cpu_args)
    r_dev, e_dev = _run(fn, *dev_args)
    if e_cpu is not None:
        # the device must refuse too (the exception type may differ, as CUDA's does)
        if e_dev is None:
            bad.append(f"{label}: CPU raises {type(e_cpu).__name__}, device returned {r_dev.dtype}")
        return
    if e_dev is not None:
        bad.append(f"{label}: device raised {type(e_dev).__name__}: {' '.join(str(e_dev).split())[:200]}")
        return
    if r_dev.dtype != r_cpu.dtype:
        bad.append(f"{label}: dtype {r_dev.dtype}, CPU {r_cpu.dtype}")
        return
    if r_dev.shape != r_cpu.shape:
        bad.append(f"{label}: shape {tuple(r_dev.shape)}, CPU {tuple(r_cpu.shape)}")
        return
    got = r_dev.cpu()
    tol = {torch.bfloat16: 1e-2, torch.float16: 1e-3}.get(r_cpu.dtype, 1e-6)
    try:
        torch.testing.assert_close(got, r_cpu, rtol=tol, atol=tol if r_cpu.is_floating_point() else 0,
                                   equal_nan=True)
    except AssertionError:
        bad.append(f"{label}: values {got.tolist()} vs CPU {r_cpu.tolist()}")


def _name(d):
    return str(d).replace("torch.", "")


@pytest.mark.parametrize("op", list(OPS))
def test_tensor_tensor(op, device):
    fn, bad = OPS[op], []
    for a in DTYPES:
        for b in DTYPES:
            x, y = _vals(a), _vals(b).flip(0)
            _check(fn, (x, y), (x.to(device), y.to(device)), f"{op}({_name(a)}, {_name(b)})", bad)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("op", list(OPS))
def test_tensor_zero_dim(op, device):
    """A 0-d tensor participates in promotion only by category (like a scalar)."""
    fn, bad = OPS[op], []
    for a in DTYPES:
        for b in DTYPES:
            x, y = _vals(a), torch.tensor(3).to(b)
            _check(fn, (x, y), (x.to(device), y.to(device)), f"{op}({_name(a)}[6], {_name(b)}[])", bad)
            _check(fn, (y, x), (y.to(device), x.to(device)), f"{op}({_name(b)}[], {_name(a)}[6])", bad)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("op", [o for o in OPS if o != "where"])
def test_tensor_cpu_zero_dim(op, device):
    """A CPU 0-d tensor is accepted with a device tensor, as with CUDA."""
    fn, bad = OPS[op], []
    for a in DTYPES:
        for b in (torch.float32, torch.int64, torch.bool):
            x, y = _vals(a), torch.tensor(2).to(b)
            _check(fn, (x, y), (x.to(device), y), f"{op}({_name(a)}, cpu {_name(b)}[])", bad)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("op", [o for o in OPS if o not in ("where", "maximum")])
def test_tensor_python_scalar(op, device):
    fn, bad = OPS[op], []
    for a in DTYPES:
        for s in SCALARS:
            x = _vals(a)
            _check(fn, (x, s), (x.to(device), s), f"{op}({_name(a)}, {s!r})", bad)
            if op in ("add", "mul", "sub", "div") and not isinstance(s, bool):  # reflected
                _check(fn, (s, x), (s, x.to(device)), f"{op}({s!r}, {_name(a)})", bad)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("op", ["add_", "mul_", "div_", "sub_"])
def test_inplace_promotion(op, device):
    """In place, the result must be castable to self's dtype, else an error."""
    bad = []
    for a in DTYPES:
        for b in DTYPES:
            x, y = _vals(a), _vals(b)
            fn = lambda s, o: getattr(s, op)(o)  # noqa: E731
            _check(fn, (x.clone(), y), (x.to(device), y.to(device)), f"{_name(a)}.{op}({_name(b)})", bad)
    assert not bad, "\n".join(bad)


def test_broadcast_with_promotion(device):
    x = torch.arange(6, dtype=torch.int32).reshape(2, 3, 1)
    y = torch.linspace(0, 1, 4, dtype=torch.bfloat16)
    r = (x.to(device) * y.to(device)) + 1.5
    ref = x * y + 1.5
    assert r.dtype == ref.dtype == torch.bfloat16
    assert torch.equal(r.cpu(), ref)


def test_result_type_api(device):
    for a in DTYPES:
        for b in DTYPES:
            x, y = _vals(a), torch.tensor(1).to(b)
            assert torch.result_type(x.to(device), y.to(device)) == torch.result_type(x, y)
