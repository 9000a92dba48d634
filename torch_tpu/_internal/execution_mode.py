"""The eager execution modes of the tpu device and how a program selects them.

Modes: STRICT (default: ops queued one by one, asynchronously), DEBUG (synchronous and checked: every
index bounds-checked, device memory guarded, optional NaN/Inf check; see runtime/exec/debug/),
DEFER_AND_FUSE (ops recorded, fused and run at sync points; see runtime/exec/defer/ and the rules in runtime/compiler/fuse_plan.c).

Selecting a mode:
    TORCH_TPU_EAGER_MODE=strict|debug|defer_and_fuse     per process, read at start-up (here only)
    TPU_LAUNCH_BLOCKING=1                                 the same as TORCH_TPU_EAGER_MODE=debug (read by
                                                          the C runtime, which starts in DEBUG)
    TORCH_TPU_DEFER_AND_FUSE=1                            the older spelling of defer_and_fuse (here only)
    torch_tpu.set_eager_mode("debug")                     for the process, from Python
    with torch_tpu.eager_mode("debug"): ...               for a scope (also a decorator;
                                                          em.eager_mode_scope here)
    torch_tpu.get_eager_mode()                            -> EagerMode.STRICT / DEBUG / DEFER_AND_FUSE
TorchTPU's spellings work unchanged:
    from torch_tpu._internal import execution_mode as em
    em.eager_mode = em.EagerMode.DEBUG          # switches the mode of this process
    with em.set_eager_mode(em.EagerMode.DEBUG):  # switches it for a scope
        ...
A switch first waits for the work queued under the old mode (on every chip), so no op runs under
rules it was not issued with; a kernel error still pending surfaces there. The mode itself lives in
the C runtime (_C._get_exec_mode / _C._set_exec_mode); this module names and switches it. The mode is
process-wide (as the device is): a scope set in one thread is seen by the others.
"""
import contextlib
import enum
import os
import sys
import types
import warnings


class EagerMode(enum.IntEnum):
    # Values are the C runtime's mode numbers (_C._set_exec_mode, tpurt_exec_mode_t).
    STRICT = 0
    DEBUG = 1
    DEFER_AND_FUSE = 2

    def __str__(self):
        return f"EagerMode.{self.name}"


ENV_MODE = "TORCH_TPU_EAGER_MODE"
ENV_DEFER_AND_FUSE = "TORCH_TPU_DEFER_AND_FUSE"


def _c():
    from torch_tpu import _C
    return _C


def _coerce(mode):
    if isinstance(mode, EagerMode):
        return mode
    if isinstance(mode, str):
        key = mode.strip().upper().replace("-", "_")
        if key.startswith("EAGERMODE."):
            key = key[len("EAGERMODE."):]
        aliases = {"DEFERANDFUSE": "DEFER_AND_FUSE", "DEFER": "DEFER_AND_FUSE", "FUSE": "DEFER_AND_FUSE"}
        key = aliases.get(key, key)
        if key in EagerMode.__members__:
            return EagerMode[key]
    elif isinstance(mode, int) and not isinstance(mode, bool):
        try:
            return EagerMode(mode)
        except ValueError:
            pass
    raise ValueError(f"unknown eager mode {mode!r}; expected one of 'strict', 'debug', 'defer_and_fuse' "
                     f"(or {', '.join('EagerMode.' + m.name for m in EagerMode)})")


def get_eager_mode():
    """The eager mode in force in this process."""
    return EagerMode(_c()._get_exec_mode())


def _synchronize_all(c):
    import torch  # noqa: F401  (the C++ layer needs torch loaded)
    for index in range(c._device_count()):
        c._synchronize(index)


def _set(mode):
    mode = _coerce(mode)
    c = _c()
    if mode == c._get_exec_mode():
        return
    # Pending work was queued under the old mode's rules; finish it before switching. If it failed,
    # its error is raised here and the mode stays as it was.
    _synchronize_all(c)
    c._set_exec_mode(int(mode))


class set_eager_mode:
    """Switches the eager mode of the process at once; used as a context manager (`with
    em.set_eager_mode(...)`), it restores the previous mode on exit, as torch.set_grad_enabled does."""

    def __init__(self, mode):
        self.previous = get_eager_mode()
        self.mode = _coerce(mode)
        _set(self.mode)

    def __enter__(self):
        return self.mode

    def __exit__(self, *exc):
        _restore(self.previous)
        return False

    def __repr__(self):
        return f"set_eager_mode({self.mode})"


def _restore(previous):
    """Back to `previous` at the end of a scope: the switch happens even when the scope's pending
    work failed (that error is raised after switching), so a failed scope cannot leak its mode."""
    try:
        _set(previous)
    except Exception:
        _c()._set_exec_mode(int(previous))
        raise


@contextlib.contextmanager
def eager_mode_scope(mode):
    """Context manager (and decorator): run the enclosed code in `mode`, then restore the previous
    mode. `with torch_tpu.eager_mode("debug"): ...`"""
    previous = get_eager_mode()
    _set(mode)
    try:
        yield _coerce(mode)
    finally:
        _restore(previous)


def _mode_from_env(explicit="", defer_and_fuse=False, launch_blocking=False):
    """The mode the environment asks for, or None: `explicit` is TORCH_TPU_EAGER_MODE's value,
    `defer_and_fuse` whether TORCH_TPU_DEFER_AND_FUSE=1, `launch_blocking` whether the runtime started in
    DEBUG for TPU_LAUNCH_BLOCKING=1. TORCH_TPU_EAGER_MODE wins over the older switches; a conflict is
    warned about; a value that names no mode raises ValueError."""
    explicit = explicit.strip()
    if explicit:
        try:
            mode = _coerce(explicit)
        except ValueError:
            # A bad value is an error, as for the runtime's variables (torch_tpu's autoload reports it).
            raise ValueError(f"{ENV_MODE}={explicit!r}: expected strict, debug or defer_and_fuse") from None
        if launch_blocking and mode is not EagerMode.DEBUG:
            warnings.warn(f"torch_tpu: TPU_LAUNCH_BLOCKING=1 ignored: {ENV_MODE}={explicit} selects "
                          f"{mode}", RuntimeWarning, stacklevel=3)
        return mode
    if launch_blocking:
        return EagerMode.DEBUG
    if defer_and_fuse:
        return EagerMode.DEFER_AND_FUSE
    return None


def _check_env():
    """Raises ValueError naming TORCH_TPU_EAGER_MODE when its value names no mode (before anything is
    registered, so that a failed start leaves no half-installed device)."""
    explicit = os.environ.get(ENV_MODE, "").strip()
    if explicit:
        _mode_from_env(explicit)


def _init_from_env():
    """Applies TORCH_TPU_EAGER_MODE / TORCH_TPU_DEFER_AND_FUSE at start-up (called by torch_tpu); a bad
    value raises ValueError naming the variable. TPU_LAUNCH_BLOCKING is the runtime's (runtime/exec/mode.c reads
    it and starts in DEBUG): it is asked, never read again here, and only when one of ours is set, so
    that importing does not start the runtime."""
    explicit = os.environ.get(ENV_MODE, "")
    defer_and_fuse = os.environ.get(ENV_DEFER_AND_FUSE, "0") == "1"
    if not explicit.strip() and not defer_and_fuse:
        return  # the runtime's own start-up mode stands
    # Before any switch, the runtime's mode is its start-up mode: DEBUG exactly when TPU_LAUNCH_BLOCKING=1.
    launch_blocking = _c()._get_exec_mode() == EagerMode.DEBUG
    mode = _mode_from_env(explicit, defer_and_fuse, launch_blocking)
    if mode is not None:
        _set(mode)


def fusion_stats():
    """DeferAndFuse counters since start (or fusion_stats_reset()): ops recorded, flushes, kernels
    launched, fused kernels and the ops in them, stores skipped (and their bytes), fallbacks; and the
    generated-kernel cache: chains that asked for their kernel (codegen_lookups), answered from memory
    (codegen_memory_hits), kernels loaded from disk (codegen_disk_loads), compiled (codegen_builds),
    builds that failed (codegen_build_failures), disk entries refused (codegen_disk_rejects), and fused
    chains run by generated code (codegen_runs)."""
    return dict(_c()._fusion_stats())


def fusion_stats_reset():
    _c()._fusion_stats_reset()


class _ExecutionModeModule(types.ModuleType):
    """Makes `em.eager_mode = ...` switch the mode (a plain module attribute could not)."""

    @property
    def eager_mode(self):
        return get_eager_mode()

    @eager_mode.setter
    def eager_mode(self, mode):
        _set(mode)


sys.modules[__name__].__class__ = _ExecutionModeModule

__all__ = ["EagerMode", "eager_mode", "eager_mode_scope", "fusion_stats", "fusion_stats_reset",
           "get_eager_mode", "set_eager_mode"]
