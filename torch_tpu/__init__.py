"""torch_tpu: PyTorch on a TPU-architecture device (the vTPU, emulated on host CPU cores by a C runtime).

`import torch` alone enables the device: the `torch.backends` entry point calls _autoload(), which
renames PyTorch's PrivateUse1 backend to "tpu", loads the C++ layer (torch_tpu._C: allocator, device
guard, generator, the boxed fallback into the C op table), installs torch.tpu and the Tensor/Module
.tpu() methods, and registers decompositions for ops with no C kernel. `import torch_tpu` does the same.
"""
# Everything _autoload needs is defined before `import torch`: when a program imports torch_tpu first,
# `import torch` below runs the entry point, which finds this module half-imported.
__version__ = "0.1.0"
__all__ = ["__version__", "EagerMode", "eager_mode", "get_eager_mode", "set_eager_mode"]

_registered = False
_load_error = None  # why the device is unavailable, when autoload could not load the build


def _register() -> None:
    global _registered
    if _registered:
        return
    import torch

    name = torch._C._get_privateuse1_backend_name()
    if name == "privateuseone":
        torch.utils.rename_privateuse1_backend("tpu")
    elif name != "tpu":
        raise RuntimeError(f"torch_tpu: PyTorch's PrivateUse1 backend is already registered as '{name}' by "
                           f"another extension; a process can host only one (disable the other or set "
                           f"TORCH_DEVICE_BACKEND_AUTOLOAD=0)")

    from torch_tpu._internal import execution_mode
    execution_mode._check_env()  # a bad TORCH_TPU_EAGER_MODE fails before the device is installed
    from torch_tpu import _C  # loads libtpurt and registers the C++ allocator, guard, hooks, fallback
    from torch_tpu import tpu as device_module
    device_module.init()
    if not hasattr(torch, "tpu"):
        torch._register_device_module("tpu", device_module)
    if not hasattr(torch.Tensor, "tpu"):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True)

    # TORCH_TPU_CPU_FALLBACK is read by the C++ layer as it loads (fallback.cpp).
    execution_mode._init_from_env()
    from torch_tpu import amp, decompositions, projection, shallow_copy  # noqa: F401
    decompositions.register()
    amp.register()
    shallow_copy.register()
    from torch_tpu import _vision
    _vision.install()  # torchvision's ops (schemas and CPU kernels where its _C cannot load)
    from torch_tpu import _compile
    _compile._register()
    from torch_tpu import distributed
    distributed.register_backend()
    _registered = True


def _torch_is_importing() -> bool:
    import sys
    spec = getattr(sys.modules.get("torch"), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _register_or_warn() -> None:
    """Registers. Under autoload a device that cannot come up (a missing or stale build, a bad
    environment variable) must not break `import torch` for every program of the environment (the
    build itself imports torch): autoload only warns, and `import torch_tpu` raises."""
    global _load_error
    if _registered or _load_error is not None:
        return
    try:
        _register()
    except Exception as err:  # noqa: BLE001 - reported, and raised again by an explicit import
        if not _torch_is_importing():
            raise
        _load_error = err
        import warnings
        hint = "; build it with `make` or scripts/setup.sh" if isinstance(err, ImportError) else ""
        warnings.warn(f"torch_tpu: the tpu device is not available ({err}){hint}", RuntimeWarning, stacklevel=2)
        _install_unavailable(err)


def _install_unavailable(err) -> None:
    """After a failed autoload, `torch.tpu` and tensors on "tpu" raise the reason (a bad
    TORCH_TPU_* value names itself) instead of PyTorch's `No module named 'torch.tpu'`."""
    import sys
    import types
    import torch

    if "torch.tpu" in sys.modules or hasattr(torch, "tpu"):
        return

    class _Unavailable(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            raise RuntimeError(f"torch_tpu: the tpu device is not available: {err}") from err

    stub = _Unavailable("torch.tpu", "The tpu device failed to load; any use raises why.")
    stub.is_available = lambda: False  # the one quiet question, as torch.cuda's
    stub.is_initialized = lambda: False
    sys.modules["torch.tpu"] = stub
    torch.tpu = stub


def _autoload() -> None:
    """Entry point of the `torch.backends` group: `import torch` calls it."""
    _register_or_warn()


# ---- eager modes (torch_tpu/_internal/execution_mode.py has the rules) ----
from torch_tpu._internal.execution_mode import EagerMode  # noqa: E402  (stdlib only: safe before torch)


def set_eager_mode(mode) -> None:
    """Switches the eager mode of this process: "strict" (default, asynchronous), "debug" (synchronous,
    checked) or "defer_and_fuse" (or an EagerMode). Waits for pending work first."""
    from torch_tpu._internal import execution_mode
    execution_mode._set(mode)


def get_eager_mode():
    """The eager mode in force (an EagerMode: STRICT, DEBUG or DEFER_AND_FUSE)."""
    from torch_tpu._internal import execution_mode
    return execution_mode.get_eager_mode()


def eager_mode(mode):
    """Context manager (or decorator) running its body in `mode`, then restoring the previous mode:
    `with torch_tpu.eager_mode("debug"): ...`"""
    from torch_tpu._internal import execution_mode
    return execution_mode.eager_mode_scope(mode)


def mark_dynamic(tensor, dim, lower_bound=None, upper_bound=None):
    """TorchTPU's spelling of `torch._dynamo.mark_dynamic(tensor, dim, min=, max=)`: dimension `dim` of
    `tensor` varies within [lower_bound, upper_bound] under torch.compile, which compiles once for the
    range (nothing is padded: a new size is a new capture of the same graph, not a recompile)."""
    import torch._dynamo
    torch._dynamo.mark_dynamic(tensor, dim, min=lower_bound, max=upper_bound)


import torch  # noqa: E402  (may run _autoload above)

if _load_error is not None and not _torch_is_importing():
    # `import torch_tpu` asked for the device explicitly: the failed autoload is an error now.
    raise ImportError(f"torch_tpu: the tpu device is not available: {_load_error}") from _load_error
_register_or_warn()
