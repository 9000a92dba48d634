"""The eager execution modes of the tpu device: STRICT (async, default), DEBUG (synchronous, checked),
DEFER_AND_FUSE (record, fuse, run at sync points; not built yet).

Spelled as TorchTPU spells it, so ported code works unchanged:
    from torch_tpu._internal import execution_mode as em
    em.eager_mode = em.EagerMode.DEBUG          # switches the mode of this process
    with em.set_eager_mode(em.EagerMode.DEBUG):  # switches it for a scope
        ...
The mode itself lives in the C runtime (_C._get_exec_mode / _C._set_exec_mode); this module only
names it. TPU_LAUNCH_BLOCKING=1 selects DEBUG at start-up.
"""
import contextlib
import enum
import os
import sys
import types
import warnings


class EagerMode(enum.IntEnum):
    # Values are the C runtime's mode numbers (_C._set_exec_mode).
    STRICT = 0
    DEBUG = 1
    DEFER_AND_FUSE = 2

    def __str__(self):
        return f"EagerMode.{self.name}"


# Flipped to True by the DeferAndFuse implementation once the C runtime runs deferred graphs.
_DEFER_AND_FUSE_AVAILABLE = False


def _c():
    from torch_tpu import _C
    return _C


def _coerce(mode):
    if isinstance(mode, EagerMode):
        return mode
    if isinstance(mode, str):
        key = mode.strip().upper().replace("-", "_")
        aliases = {"DEFERANDFUSE": "DEFER_AND_FUSE", "DEFER": "DEFER_AND_FUSE", "FUSE": "DEFER_AND_FUSE"}
        key = aliases.get(key, key)
        if key in EagerMode.__members__:
            return EagerMode[key]
    elif isinstance(mode, int) and not isinstance(mode, bool):
        try:
            return EagerMode(mode)
        except ValueError:
            pass
    raise ValueError(f"unknown eager mode {mode!r}; expected one of "
                     f"{', '.join('EagerMode.' + m.name for m in EagerMode)}")


def get_eager_mode():
    """The eager mode in force in this process."""
    return EagerMode(_c()._get_exec_mode())


def _set(mode):
    mode = _coerce(mode)
    if mode is EagerMode.DEFER_AND_FUSE and not _DEFER_AND_FUSE_AVAILABLE:
        raise NotImplementedError(
            "torch_tpu: eager mode DEFER_AND_FUSE is not built yet; use EagerMode.STRICT (default, "
            "asynchronous) or EagerMode.DEBUG (synchronous, checked)")
    # Pending work was queued under the old mode's rules; finish it before switching.
    import torch
    c = _c()
    c._synchronize(torch._C._accelerator_getDeviceIndex())
    c._set_exec_mode(int(mode))


@contextlib.contextmanager
def set_eager_mode(mode):
    """Context manager: run the enclosed code in `mode`, then restore the previous mode."""
    previous = get_eager_mode()
    _set(mode)
    try:
        yield
    finally:
        _set(previous)


def _init_from_env():
    """Applies TPU_LAUNCH_BLOCKING / TORCH_TPU_DEFER_AND_FUSE at start-up (called by torch_tpu)."""
    if os.environ.get("TPU_LAUNCH_BLOCKING", "0") == "1":
        _set(EagerMode.DEBUG)
    elif os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "0") == "1":
        if _DEFER_AND_FUSE_AVAILABLE:
            _set(EagerMode.DEFER_AND_FUSE)
        else:
            # Failing here would fail `import torch` itself (autoload); say it and stay STRICT.
            warnings.warn("torch_tpu: TORCH_TPU_DEFER_AND_FUSE=1 ignored: eager mode DEFER_AND_FUSE is "
                          "not built yet; running in STRICT mode", RuntimeWarning, stacklevel=2)


class _ExecutionModeModule(types.ModuleType):
    """Makes `em.eager_mode = ...` switch the mode (a plain module attribute could not)."""

    @property
    def eager_mode(self):
        return get_eager_mode()

    @eager_mode.setter
    def eager_mode(self, mode):
        _set(mode)


sys.modules[__name__].__class__ = _ExecutionModeModule

__all__ = ["EagerMode", "eager_mode", "get_eager_mode", "set_eager_mode"]
