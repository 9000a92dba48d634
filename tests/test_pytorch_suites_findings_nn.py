"""Defects found by running PyTorch's test_nn.py (its device-generic TestNNDeviceType) on tpu with
tests/pytorch_suites.py, each kept here as a test against PyTorch CPU, so CI guards it without
PyTorch's files."""
import pytest
import torch
import torch.nn as nn


def test_layer_norm_long_row_matches_cpu(tpu, eager_mode):
    # test_LayerNorm_numeric: a row of 256 x 256 x 144 = 9.4M elements. The float kernel summed each
    # of its 32 lanes over 295K elements in float and lost 5e-5 of the output (the test's atol is 1e-5).
    torch.manual_seed(0)
    x = torch.rand(2, 256, 256, 144)
    ln = nn.LayerNorm([256, 256, 144])
    want = ln(x)
    got = ln.to(tpu)(x.to(tpu)).cpu()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [(3, 0, 10, 10), (2, 3, 10, 0), (3, 0, 10), (0, 10, 10), (10, 10)])
def test_reflection_pad2d_refuses_empty_dims_as_cpu(shape, tpu, eager_mode):
    # test_ReflectionPad_empty: PyTorch's decomposition padded a [3, 0, 10, 10] input; CPU raises
    with pytest.raises(RuntimeError) as cpu:
        nn.ReflectionPad2d(2)(torch.randn(shape))
    with pytest.raises(RuntimeError) as dev:
        nn.ReflectionPad2d(2)(torch.randn(shape, device=tpu))
    assert str(dev.value) == str(cpu.value)


def test_reflection_pad2d_empty_batch_still_pads(tpu, eager_mode):
    x = torch.randn(0, 3, 10, 10)
    assert nn.ReflectionPad2d(2)(x.to(tpu)).shape == nn.ReflectionPad2d(2)(x).shape
    x = torch.randn(2, 3, 4, 5)
    torch.testing.assert_close(nn.ReflectionPad2d((1, 2, 3, 0))(x.to(tpu)).cpu(), nn.ReflectionPad2d((1, 2, 3, 0))(x))
