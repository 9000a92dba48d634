"""What the device does not support yet says so at the call, and the process keeps working:
unsigned dtypes wider than uint8 (uint16/uint32/uint64) and tensors of more than 16 dimensions
(TPURT_MAX_DIMS, the runtime's fixed tensor descriptor; CPU allows 64). Moving such tensors
between CPU and tpu, and views of them (metadata only), work and keep every value."""
import pytest
import torch

UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
MAX = {torch.uint16: 2**16 - 1, torch.uint32: 2**32 - 1, torch.uint64: 2**64 - 1}


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_copies_round_trip(dtype, tpu):
    x = torch.tensor([0, 1, 2**15 + 3, 2**15 - 1], dtype=dtype)
    x = torch.cat([x, torch.full((1,), MAX[dtype], dtype=dtype)]) if dtype != torch.uint64 else x
    t = x.to(tpu)
    assert t.dtype == dtype and t.device.type == "tpu"
    assert torch.equal(t.cpu(), x)
    assert torch.equal(t[1:3].cpu(), x[1:3])  # a view: metadata only
    assert torch.equal(torch.tensor(x.tolist(), dtype=dtype, device=tpu).cpu(), x)


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unsigned_ops_raise_at_the_call(dtype, tpu, eager_mode):
    t = torch.tensor([1, 2, 3], dtype=dtype, device=tpu)
    for fn in (lambda: t == t, lambda: t.sum(), lambda: torch.zeros(3, dtype=dtype, device=tpu),
               lambda: t.float(), lambda: t.clone()):
        with pytest.raises(NotImplementedError, match=str(dtype).split(".")[1].replace("uint", "UInt")):
            fn()
    assert torch.equal((torch.ones(3, device=tpu) + 1).cpu(), torch.full((3,), 2.0))


def test_more_than_16_dims(tpu, eager_mode):
    shape = [1] * 18 + [2, 3]
    x = torch.arange(6, dtype=torch.float32).view(shape)
    t = x.to(tpu)
    assert t.shape == x.shape and torch.equal(t.cpu(), x)
    assert torch.equal(torch.arange(6.0, device=tpu).view(shape).cpu(), x)  # a view of 20 dims
    for fn in (lambda: t + 1, lambda: t.sum(), lambda: torch.zeros(shape, device=tpu)):
        with pytest.raises(NotImplementedError, match="20 dimensions are not supported on the tpu device"):
            fn()
    # CPU computes them: the limit is the device's, not PyTorch's
    assert torch.equal(x + 1, (x + 1).cpu())
    # at 16 dims everything works, as on CPU
    s16 = [1] * 14 + [2, 3]
    y = torch.arange(6.0).view(s16)
    assert torch.equal((y.to(tpu) * 2 + 1).sum(-1).cpu(), (y * 2 + 1).sum(-1))
