"""Small helpers shared by the torch.tpu modules: turning a device argument into a chip index."""
import torch


def current_device() -> int:
    """Index of the selected tpu chip of this thread (the C++ DeviceGuardImpl keeps it)."""
    return torch._C._accelerator_getDeviceIndex()


def _get_device_index(device, optional: bool = False) -> int:
    """Accepts an int, "tpu", "tpu:N", torch.device or (when optional) None; returns the chip index."""
    if device is None:
        if optional:
            return current_device()
        raise ValueError("expected a tpu device or index, got None")
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        if device.index is None:
            return current_device()
        return device.index
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise ValueError(f"expected a tpu device or index, got {device!r}")
