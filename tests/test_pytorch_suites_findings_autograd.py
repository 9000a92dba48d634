"""Findings of running PyTorch's test_autograd.py (its device-generic TestAutogradDeviceType) on tpu
(tests/pytorch_suites.py), kept as tests so CI guards them without PyTorch's files."""
import warnings

import pytest
import torch


def test_sparse_compressed_layouts_raise_naming_the_layout(tpu):
    # test_sparse_backward / test_sparse_ctor_getter_backward: sparse COO tensors on tpu now work
    # (tests/test_pytorch_suites_findings_sparse.py); the compressed layouts still have no kernels, and
    # their error names the op and the layout instead of the dispatcher's "SparseCsrtpu" backend
    v = torch.tensor([1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csr = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), v, (2, 2)).to(tpu)
    with pytest.raises(NotImplementedError, match="sparse compressed layouts .* are not supported on the tpu device"):
        csr.to_dense()
    # dense tensors are untouched
    assert (torch.ones(3, device=tpu) * 2).sum().item() == 6.0


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("fn", [torch.tanh, torch.sigmoid])
def test_complex_tanh_sigmoid_backward(dtype, fn, tpu, eager_mode):
    # test_sparse_ctor_getter_backward (complex128) differentiates tanh of complex values:
    # tanh_backward / sigmoid_backward had no complex kernel (CPU: grad * conj(1 - y*y),
    # grad * conj((1 - y) * y))
    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, dtype=dtype, generator=g)
    grad = torch.randn(40, dtype=dtype, generator=g)
    xc = x.clone().requires_grad_()
    fn(xc).backward(grad)
    xt = x.to(tpu).requires_grad_()
    fn(xt).backward(grad.to(tpu))
    tol = 1e-12 if dtype == torch.complex128 else 2e-5
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, atol=tol, rtol=tol)
    if dtype == torch.complex128:
        assert torch.autograd.gradcheck(fn, (x[:4].to(tpu).requires_grad_(),))
