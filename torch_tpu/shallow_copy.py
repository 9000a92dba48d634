"""`param.data = moved` and Module.to() across the CPU <-> tpu boundary.

PyTorch lets `set_data` (and Module._apply, which uses it to keep each Parameter object, and so tied
weights and optimizer references) swap a tensor's contents only between tensors of a "compatible
shallow-copy type". Its built-in rule lists CPU, CUDA, XPU, ... but not PrivateUse1, and leaves the
answer to the backend through the aten op `_has_compatible_shallow_copy_type`. Dense strided tpu
tensors are as interchangeable with CPU ones as CUDA tensors are, so we say so.
"""
import torch

_lib = None


def _compatible(self: torch.Tensor, other: torch.Tensor) -> bool:
    dense = ("cpu", "tpu")
    return (self.layout == torch.strided and other.layout == torch.strided
            and self.device.type in dense and other.device.type in dense)


def register() -> None:
    global _lib
    if _lib is None:
        _lib = torch.library.Library("aten", "IMPL")
        _lib.impl("_has_compatible_shallow_copy_type", _compatible, "PrivateUse1")
