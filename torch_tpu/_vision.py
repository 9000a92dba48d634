"""torchvision's operators with torch_tpu loaded.

torch_tpu's C++ layer registers tpu kernels for torchvision::nms, roi_align, ... When torchvision's
own _C extension loads (a CPU build), that is all. When it does not (the torchvision 0.28.0 wheel on
our machines is a CUDA build: its _C links libtorch_cuda and cannot load beside a CPU torch), the ops
would not exist and `import torchvision` fails. So a post-import hook on `torchvision.extension`
(installed as torch_tpu loads, whatever the import order) asks the C++ layer to define torchvision
0.28's schemas and register CPU kernels (the same C kernels over host memory), then makes
`torchvision.extension._has_ops()` answer True, so torchvision's Python API reaches these kernels.
"""
import importlib.abc
import sys

_TARGET = "torchvision.extension"


def _has_ops() -> bool:
    return True


def _patch(module) -> None:
    if getattr(module, "_torch_tpu_checked", False):
        return
    module._torch_tpu_checked = True
    if module._has_ops():
        return  # torchvision's _C loaded: its schemas and CPU kernels stand; ours add the tpu kernels
    from torch_tpu import _C
    if not _C._vision_define_ops():
        return  # another library defined the schemas: leave torchvision's answer as it is
    module._has_ops = _has_ops


class _Loader(importlib.abc.Loader):
    """Runs torchvision.extension's own loader, then _patch on the module."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _patch(module)

    def __getattr__(self, name):  # get_source, get_filename, ... as the wrapped loader answers
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds torchvision.extension with the other finders and wraps its loader; nothing else."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    module = sys.modules.get(_TARGET)
    if module is not None:  # torchvision came first (autoload off): patch what is there
        _patch(module)
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
