"""torch.tpu random-number API (manual_seed, get_rng_state, ...), mirroring torch.cuda.random.

Each chip has one default torch.Generator owned by the C++ layer (counter-based, so a seed gives the
same numbers whatever the thread count); these functions seed and snapshot it.
"""
import torch

from torch_tpu import _C
from torch_tpu._utils import _get_device_index

__all__ = [
    "get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all", "manual_seed",
    "manual_seed_all", "seed", "seed_all", "initial_seed",
]


def _default_generator(device=None) -> torch.Generator:
    """The default generator of `device` (the current chip by default)."""
    return _C._get_default_generator(_get_device_index(device, optional=True))


def _count():
    return _C._device_count()


def get_rng_state(device="tpu") -> torch.Tensor:
    """The generator state of `device` as a CPU uint8 tensor."""
    return _default_generator(device).get_state()


def get_rng_state_all() -> "list[torch.Tensor]":
    return [get_rng_state(i) for i in range(_count())]


def set_rng_state(new_state: torch.Tensor, device="tpu") -> None:
    """Restores a state returned by get_rng_state()."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError(f"set_rng_state expects a torch.uint8 tensor from get_rng_state(), got {new_state!r}")
    _default_generator(device).set_state(new_state.detach().to("cpu").contiguous())


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed) -> None:
    """Seeds the current chip's generator (torch.manual_seed seeds every chip through manual_seed_all)."""
    _default_generator(None).manual_seed(int(seed))


def manual_seed_all(seed) -> None:
    seed = int(seed)
    for i in range(_count()):
        _default_generator(i).manual_seed(seed)


def seed() -> None:
    """Seeds the current chip's generator with a non-deterministic random number."""
    _default_generator(None).seed()


def seed_all() -> None:
    """Seeds every chip with one non-deterministic random number."""
    manual_seed_all(_default_generator(None).seed())


def initial_seed() -> int:
    """The seed the current chip's generator was last seeded with."""
    return _default_generator(None).initial_seed()
