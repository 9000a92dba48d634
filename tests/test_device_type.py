"""PyTorch's device-generic test machinery sees the tpu device.

`instantiate_device_type_tests` adds a PrivateUse1TestBase variant of a generic test class when the
PrivateUse1 backend's device module (torch.tpu) is registered and is_available(); the base then
asks the module for current_device() and device_count(). This file instantiates a small generic
class only for tpu and checks that a `...TPU` class with `..._tpu` tests exists; its tests compare
the device with PyTorch CPU, the way PyTorch's own device-generic tests (test_ops.py
TestCommon.test_compare_cpu) do.
"""
import pathlib
import sys
import unittest

import torch

try:  # autoload (an installed torch_tpu) normally registered the device already
    import torch_tpu  # noqa: F401
except ImportError:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    import torch_tpu  # noqa: F401

# Imported after torch_tpu: common_device_type lists the available device bases on import.
from torch.testing._internal import common_device_type as cdt  # noqa: E402
from torch.testing._internal.common_device_type import (  # noqa: E402
    OpDTypes, PrivateUse1TestBase, deviceCountAtLeast, dtypes, instantiate_device_type_tests, ops)
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402

BACKEND = torch._C._get_privateuse1_backend_name()
AVAILABLE = BACKEND == "tpu" and hasattr(torch, "tpu") and torch.tpu.is_available()

# The class name's suffix is PrivateUse1TestBase.device_type upper-cased. That is "privateuse1"
# until the base's setUpClass has run once in the process (it then holds the backend's name), so
# run it now: it is also the check that torch.tpu provides what the base needs (current_device).
if AVAILABLE:
    PrivateUse1TestBase.setUpClass()

_OPS = [op for op in op_db if op.name in ("add", "mul", "nn.functional.relu", "sum", "matmul")
        and not op.variant_test_name]


class TestTpuGeneric(TestCase):
    """A generic (device-parametrized) test class, as PyTorch writes them."""

    def test_device_string(self, device):
        t = torch.arange(6, device=device)
        self.assertEqual(t.device.type, "tpu")
        self.assertEqual(t.cpu(), torch.arange(6))

    @dtypes(torch.float32, torch.bfloat16, torch.int64)
    def test_binary_matches_cpu(self, device, dtype):
        a = torch.arange(-6, 6, dtype=torch.float32).reshape(3, 4).to(dtype)
        b = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(dtype) + 1
        got = (a.to(device) * b.to(device) + a.to(device)).sum(0)
        self.assertEqual(got.device.type, "tpu")
        self.assertEqual(got, (a * b + a).sum(0), exact_device=False)

    @deviceCountAtLeast(1)
    def test_devices(self, devices):
        self.assertEqual(devices[0], f"tpu:{torch.tpu.current_device()}")
        self.assertEqual(len(devices), torch.tpu.device_count())

    # PyTorch's TestCommon.test_compare_cpu, on a few ops. float32 only: in bfloat16 the device
    # rounds once where CPU rounds intermediates (add with alpha: CPU rounds alpha*other to bf16
    # first), which tests/test_opinfo.py judges against float64 instead.
    @ops(_OPS, dtypes=OpDTypes.supported, allowed_dtypes=(torch.float32,))
    def test_compare_cpu(self, device, dtype, op):
        def to_cpu(arg):
            return arg.to(device="cpu") if isinstance(arg, torch.Tensor) else arg

        for sample in op.reference_inputs(device, dtype):
            cpu_sample = sample.transform(to_cpu)
            dev_results = op(sample.input, *sample.args, **sample.kwargs)
            cpu_results = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
            dev_results = sample.output_process_fn_grad(dev_results)
            cpu_results = cpu_sample.output_process_fn_grad(cpu_results)
            self.assertEqual(dev_results, cpu_results, atol=1e-3, rtol=1e-3)


instantiate_device_type_tests(TestTpuGeneric, globals(), only_for="tpu")


class TestInstantiation(unittest.TestCase):
    """The machinery picked the device up."""

    def test_backend_registered(self):
        self.assertEqual(BACKEND, "tpu")
        self.assertTrue(AVAILABLE, "torch.tpu is missing or not available")
        self.assertIn(PrivateUse1TestBase, cdt.get_device_type_test_bases())

    def test_tpu_variant_class_exists(self):
        cls = globals().get("TestTpuGenericTPU")
        self.assertIsNotNone(cls, "instantiate_device_type_tests made no TestTpuGenericTPU; made: "
                             + ", ".join(n for n in globals() if n.startswith("TestTpuGeneric")))
        self.assertTrue(issubclass(cls, PrivateUse1TestBase))
        self.assertEqual(cls.device_type, "tpu")
        self.assertEqual(cls.get_primary_device(), f"tpu:{torch.tpu.current_device()}")
        names = [n for n in dir(cls) if n.startswith("test_")]
        for want in ("test_device_string_tpu", "test_binary_matches_cpu_tpu_float32",
                     "test_binary_matches_cpu_tpu_bfloat16", "test_devices_tpu",
                     "test_compare_cpu_add_tpu_float32", "test_compare_cpu_matmul_tpu_float32"):
            self.assertIn(want, names)
        # only_for="tpu": no CPU variant
        self.assertNotIn("TestTpuGenericCPU", globals())


if __name__ == "__main__":
    from torch.testing._internal.common_utils import run_tests
    run_tests()
