"""torch.save / torch.load of device tensors and state_dicts, and the ways a
device tensor reaches the host as Python values (tolist, item, repr)."""
import io

import pytest
import torch
from torch import nn

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def _sample(dtype):
    g = torch.Generator().manual_seed(0)
    t = torch.randn(3, 5, generator=g) * 4
    return t.to(dtype)


def _roundtrip(obj, where, tmp_path, **load_kw):
    if where == "bytesio":
        buf = io.BytesIO()
        torch.save(obj, buf)
        buf.seek(0)
        return torch.load(buf, **load_kw)
    path = tmp_path / "obj.pt"
    torch.save(obj, path)
    return torch.load(path, **load_kw)


@pytest.mark.parametrize("where", ["bytesio", "file"])
@pytest.mark.parametrize("map_location", [None, "cpu", "tpu"])
def test_tensor_roundtrip(where, map_location, device, tmp_path):
    loc = device if map_location == "tpu" else map_location
    want = torch.device(device if map_location in (None, "tpu") else "cpu")
    for dtype in DTYPES:
        ref = _sample(dtype)
        x = ref.to(device)
        y = _roundtrip(x, where, tmp_path, map_location=loc)
        assert y.device.type == want.type, (dtype, y.device)
        assert y.dtype == dtype
        assert torch.equal(y.cpu(), ref), dtype


def test_non_contiguous_and_views_keep_sharing(device, tmp_path):
    base = torch.arange(24.0).reshape(4, 6).to(device)
    obj = {"base": base, "t": base.t(), "row": base[2], "slice": base[:, 1::2]}
    y = _roundtrip(obj, "file", tmp_path)
    for k, v in obj.items():
        assert y[k].device == v.device
        assert y[k].stride() == v.stride() and y[k].storage_offset() == v.storage_offset(), k
        assert torch.equal(y[k].cpu(), v.cpu()), k
    # views saved together still share one storage after load
    y["row"].fill_(-1)
    assert (y["base"][2].cpu() == -1).all()
    assert (y["t"][:, 2].cpu() == -1).all()


@pytest.mark.parametrize("where", ["bytesio", "file"])
@pytest.mark.parametrize("map_location", [None, "cpu", "tpu"])
def test_state_dict_roundtrip(where, map_location, device, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4),
                          nn.BatchNorm1d(4))
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    model.to(device)
    loc = device if map_location == "tpu" else map_location
    sd = _roundtrip(model.state_dict(), where, tmp_path, map_location=loc)
    assert set(sd) == set(ref)
    for k, v in sd.items():
        assert v.device.type == ("cpu" if map_location == "cpu" else torch.device(device).type), k
        assert v.dtype == ref[k].dtype, k
        assert torch.equal(v.cpu(), ref[k]), k
    # load into a fresh model on the device and run it
    torch.manual_seed(1)
    fresh = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4),
                          nn.BatchNorm1d(4)).to(device)
    fresh.load_state_dict(sd)
    fresh.eval()
    model.eval()
    x = torch.randn(5, 8)
    torch.testing.assert_close(fresh(x.to(device)).cpu(), model(x.to(device)).cpu(), rtol=0, atol=0)


def test_load_cpu_checkpoint_to_device(device, tmp_path):
    t = torch.randn(4, 4)
    torch.save({"w": t, "step": 3}, tmp_path / "ck.pt")
    y = torch.load(tmp_path / "ck.pt", map_location=device)
    assert y["step"] == 3
    assert y["w"].device.type == torch.device(device).type
    assert torch.equal(y["w"].cpu(), t)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_tolist_item(dtype, device):
    ref = _sample(dtype)
    x = ref.to(device)
    assert x.tolist() == ref.tolist()
    assert x[1, 2].item() == ref[1, 2].item()
    assert type(x[0, 0].item()) is type(ref[0, 0].item())
    rel = 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-6
    assert x.sum().item() == pytest.approx(ref.sum().item(), rel=rel)


def test_python_conversions(device):
    x = torch.tensor([2.5, -1.0, 0.0]).to(device)
    assert float(x[0]) == 2.5
    assert int(x[1]) == -1
    assert bool(x[0]) and not bool(x[2])
    assert x.cpu().numpy().tolist() == [2.5, -1.0, 0.0]
    if torch.device(device).type != "cpu":
        with pytest.raises(TypeError):  # as for CUDA: copy to the host first
            x.numpy()
    assert int(torch.tensor(7).to(device)) == 7


def test_repr_names_device(device):
    """repr equals CPU's with device='tpu:0' added (printing syncs and copies)."""
    tag = "" if torch.device(device).type == "cpu" else f", device='{torch.device(device).type}:0'"
    cases = [torch.tensor([1.5, 2.0]), torch.tensor([1.0, 3.0], dtype=torch.bfloat16),
             torch.arange(10000.0), torch.zeros(0, 3), torch.tensor(7), torch.tensor([True, False]),
             torch.randn(3, 4, dtype=torch.float64)]
    for ref in cases:
        r = repr(ref.to(device))
        if tag:
            assert tag in r, r
        # the longer first line may wrap differently: compare without whitespace
        assert " ".join(r.replace(tag, "").split()) == " ".join(repr(ref).split())
    assert "tpu:0" in str(torch.ones(2).to(device)) or not tag
