"""A tensor made over device storage never reaches past it: a checkpoint whose pickle claims more
elements than its storage holds, set_ / as_strided / _reshape_alias with a view past the storage,
and a storage shrunk under its tensor raise RuntimeError as PyTorch CPU does, instead of exposing
device memory a freed tensor left."""
import io
import pickletools
import zipfile

import pytest
import torch


def _claim_more(checkpoint: bytes, real: int, claimed: int) -> bytes:
    """The checkpoint with its tensor's size edited in the pickle, as an attacker would: the size
    tuple (real,) becomes (claimed,), the storage record is left as it is."""
    z = zipfile.ZipFile(io.BytesIO(checkpoint))
    pk = next(n for n in z.namelist() if n.endswith("data.pkl"))
    data = z.read(pk)
    ops = [(op.name, arg, pos) for op, arg, pos in pickletools.genops(data)]
    # the size tuple follows the storage offset in _rebuild_tensor_v2's arguments: BININT1 real, TUPLE1
    hits = [pos for (name, arg, pos), nxt in zip(ops, ops[1:]) if name == "BININT1" and arg == real
            and nxt[0] == "TUPLE1"]
    assert len(hits) == 1, ops
    edited = data[:hits[0]] + b"M" + claimed.to_bytes(2, "little") + data[hits[0] + 2:]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as w:
        for n in z.namelist():
            w.writestr(z.getinfo(n), edited if n == pk else z.read(n))
    return out.getvalue()


def _stale(device, n=4000):
    """Leaves n recognisable values in freed device memory (what an out-of-bounds view would read)."""
    y = torch.full((n,), 7.0, device=device)
    torch.tpu.synchronize() if device != "cpu" else None
    del y


def _load_error(data, **kw):
    try:
        t = torch.load(io.BytesIO(data), weights_only=True, **kw)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return e
    pytest.fail(f"loaded a {tuple(t.shape)} tensor from a 4-element storage (map {kw}): "
                f"{int((t.cpu() == 7).sum())} values of a freed tensor")


@pytest.mark.parametrize("saved_on", ["cpu", "tpu"])
def test_checkpoint_claiming_more_elements_is_rejected(saved_on, device):
    buf = io.BytesIO()
    torch.save(torch.arange(4, dtype=torch.float32, device=device if saved_on == "tpu" else "cpu"), buf)
    bad = _claim_more(buf.getvalue(), 4, 4000)
    cpu_err = _load_error(bad, map_location="cpu")
    assert isinstance(cpu_err, RuntimeError)
    _stale(device)
    err = _load_error(bad, map_location=device)
    assert type(err) is type(cpu_err), err
    if saved_on == "tpu":  # no map_location: the tensor goes back to the tpu it was saved from
        _stale(device)
        err = _load_error(bad)
        assert type(err) is type(cpu_err), err
    # the unedited checkpoint still loads, on both
    for loc in ("cpu", device):
        t = torch.load(io.BytesIO(buf.getvalue()), weights_only=True, map_location=loc)
        assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


# (storage offset, size, stride) over a 4-element float storage
OUT_OF_BOUNDS = [(0, (4000,), (1,)), (3, (2,), (1,)), (0, (2,), (4,)), (1, (2, 2), (2, 1)), (4, (1,), (1,))]
IN_BOUNDS = [(0, (4,), (1,)), (1, (2,), (2,)), (0, (2, 2), (1, 2)), (3, (1,), (1,)), (4, (0,), (1,)),
             (0, (3, 0), (1, 1))]


def _run(f):
    try:
        return f(), None
    except Exception as e:  # noqa: BLE001
        return None, e


@pytest.mark.parametrize("geom", OUT_OF_BOUNDS)
def test_set_past_the_storage_raises(geom, device):
    off, size, stride = geom
    # CPU's reference: a storage that cannot grow (a loaded checkpoint's) rejects the view
    buf = io.BytesIO()
    torch.save(torch.arange(4.0), buf)
    cpu_storage = torch.load(io.BytesIO(buf.getvalue()), weights_only=True).untyped_storage()
    _, cpu_err = _run(lambda: torch.empty(0).set_(cpu_storage, off, size, stride))
    assert isinstance(cpu_err, RuntimeError)
    _stale(device)
    s = torch.arange(4.0, device=device).untyped_storage()
    t, err = _run(lambda: torch.empty(0, device=device).set_(s, off, size, stride))
    assert type(err) is RuntimeError, t
    assert "out of bounds for storage of size 16" in str(err)
    assert s.nbytes() == 16  # not grown


@pytest.mark.parametrize("geom", OUT_OF_BOUNDS)
@pytest.mark.parametrize("op", ["as_strided", "as_strided_", "_reshape_alias"])
def test_views_past_the_storage_raise_as_on_cpu(geom, op, device):
    off, size, stride = geom

    def make(dev):
        x = torch.arange(4.0, device=dev)
        if op == "as_strided":
            return x.as_strided(size, stride, off)
        if op == "as_strided_":
            return x.as_strided_(size, stride, off)
        return torch.ops.aten._reshape_alias(x[off:] if off <= 4 else x, size, stride).cpu()[:]

    _, cpu_err = _run(lambda: make("cpu"))
    t, err = _run(lambda: make(device))
    assert cpu_err is not None and type(err) is type(cpu_err), (t, cpu_err)


@pytest.mark.parametrize("geom", IN_BOUNDS)
def test_views_in_bounds_match_cpu(geom, device):
    off, size, stride = geom
    want = torch.empty(0).set_(torch.arange(4.0).untyped_storage(), off, size, stride)
    s = torch.arange(4.0, device=device).untyped_storage()
    got = torch.empty(0, device=device).set_(s, off, size, stride)
    assert torch.equal(got.cpu(), want)
    assert torch.equal(torch.arange(4.0, device=device).as_strided(size, stride, off).cpu(), want)


def test_storage_shrunk_under_a_tensor_raises(device):
    """CPU has no check here (it reads freed memory, or crashes); the tpu raises at the next op, copy
    or read instead of reading device memory the tensor no longer owns."""
    x = torch.arange(4.0, device=device)
    x.untyped_storage().resize_(0)
    _stale(device)
    for f in (lambda: x + 1, lambda: x.cpu(), lambda: x[0].item(), lambda: x.copy_(torch.ones(4))):
        t, err = _run(f)
        assert type(err) is RuntimeError and "out of bounds for storage of size 0" in str(err), t


def test_resize_still_grows(device):
    x = torch.arange(4.0, device=device)
    x.resize_(8)
    assert x.untyped_storage().nbytes() == 32
    assert x[:4].cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    y = torch.empty(0, device=device)
    y.set_(torch.arange(3.0, device=device).untyped_storage())
    assert y.cpu().tolist() == [0.0, 1.0, 2.0]
