"""Findings of running PyTorch's test_autograd.py (its device-generic TestAutogradDeviceType) on tpu
(tests/pytorch_suites.py), kept as tests so CI guards them without PyTorch's files."""
import warnings

import pytest
import torch


def test_sparse_layouts_raise_naming_the_layout(tpu):
    # test_sparse_backward / test_sparse_ctor_getter_backward: sparse COO tensors on tpu have no kernels;
    # the dispatcher's own error named a "Sparsetpu" backend, now the op and the layout are named
    i = torch.tensor([[0, 1], [1, 0]])
    v = torch.tensor([1.0, 2.0])
    with pytest.raises(NotImplementedError, match="sparse tensors .* are not supported on the tpu device"):
        torch.sparse_coo_tensor(i, v, (2, 2), device=tpu)
    with pytest.raises(NotImplementedError, match="_sparse_coo_tensor_with_dims_and_tensors: sparse tensors"):
        torch.sparse_coo_tensor(i, v, (2, 2)).to(tpu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csr = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]), v, (2, 2)).to(tpu)
    with pytest.raises(NotImplementedError, match="sparse tensors .* are not supported on the tpu device"):
        csr.to_dense()
    # dense tensors are untouched
    assert (torch.ones(3, device=tpu) * 2).sum().item() == 6.0
