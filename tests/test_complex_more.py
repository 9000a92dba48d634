"""Complex dtypes outside the OpInfo sweep, against PyTorch CPU: normal_/randn on complex64 and
complex128 (real and imaginary parts each N(mean, std^2/2)), == and != on complex, index_put_ and
x[i] = v with complex values (accumulate too); and quantized tensors, which the device does not
support, raise NotImplementedError naming the op and the layout."""
import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_randn_and_normal_complex(dtype, tpu, eager_mode):
    torch.manual_seed(3)
    x = torch.randn(20000, dtype=dtype, device=tpu).cpu()
    assert x.dtype == dtype
    # CPU's convention: E|z|^2 = 1, each part variance 1/2, parts uncorrelated
    for part in (x.real, x.imag):
        assert abs(part.mean().item()) < 0.03 and abs(part.var().item() - 0.5) < 0.03
    assert abs((x.real * x.imag).mean().item()) < 0.03
    y = torch.empty(20000, dtype=dtype, device=tpu).normal_(2.0, 3.0).cpu()
    assert abs(y.real.mean().item() - 2.0) < 0.1 and abs(y.imag.mean().item() - 2.0) < 0.1
    assert abs(y.real.var().item() - 4.5) < 0.3 and abs(y.imag.var().item() - 4.5) < 0.3
    torch.manual_seed(7)
    a = torch.randn(64, dtype=dtype, device=tpu).cpu()
    torch.manual_seed(7)
    b = torch.randn(64, dtype=dtype, device=tpu).cpu()
    assert torch.equal(a, b)  # seeded: reproducible


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_eq_ne(dtype, tpu, eager_mode):
    a = torch.tensor([1 + 2j, 3 - 1j, 0j, 5 + 0j], dtype=dtype)
    b = torch.tensor([1 + 2j, 3 + 1j, 0j, 5 + 1j], dtype=dtype)
    at, bt = a.to(tpu), b.to(tpu)
    for fn in (torch.eq, torch.ne):
        assert torch.equal(fn(at, bt).cpu(), fn(a, b))
        assert torch.equal(fn(at[:, None], bt[None, :]).cpu(), fn(a[:, None], b[None, :]))  # broadcast
        assert torch.equal(fn(at, 5).cpu(), fn(a, 5))
    assert torch.equal((at == bt).cpu(), a == b)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("accumulate", [False, True])
def test_complex_index_put(dtype, accumulate, tpu, eager_mode):
    x = torch.arange(12.0).reshape(3, 4).to(dtype) * (1 + 1j)
    idx = (torch.tensor([0, 2, 0]), torch.tensor([1, 3, 1]))
    v = torch.tensor([1 + 2j, -3j, 4.0], dtype=dtype)
    if not accumulate:
        idx, v = (idx[0][:2], idx[1][:2]), v[:2]  # a repeated index without accumulate is unordered
    want = x.clone().index_put_(idx, v, accumulate=accumulate)
    got = x.to(tpu).index_put_(tuple(i.to(tpu) for i in idx), v.to(tpu), accumulate=accumulate)
    assert torch.equal(got.cpu(), want)
    y, yt = x.clone(), x.to(tpu)
    y[torch.tensor([1])] = 2 - 1j
    yt[torch.tensor([1], device=tpu)] = 2 - 1j
    assert torch.equal(yt.cpu(), y)
    m = torch.tensor([[True, False, True, False]] * 3)
    y[m] = 7j
    yt[m.to(tpu)] = 7j
    assert torch.equal(yt.cpu(), y)


@pytest.mark.parametrize("make", [
    lambda d: torch._empty_affine_quantized([2], scale=0.1, zero_point=0, dtype=torch.quint8, device=d),
    lambda d: torch._empty_per_channel_affine_quantized([2, 2], scales=torch.ones(2, device=d),
                                                        zero_points=torch.zeros(2, dtype=torch.long, device=d),
                                                        axis=0, dtype=torch.qint8, device=d),
])
def test_quantized_layouts_raise_a_clear_error(make, tpu):
    with pytest.raises(NotImplementedError, match=r"aten::_empty.*quantized tensors .* not supported on the tpu"):
        make(tpu)
    assert make("cpu").is_quantized  # CPU makes them
