"""Compiled graphs in AOTAutograd's cache on disk, so a new process skips AOTAutograd.

`TpuOutputCode` is what the tpu backend's graph compiler returns when the cache is
used: an `OutputCode` (torch._inductor.output_code), the type AOTAutograd's cache
(torch._functorch._aot_autograd.autograd_cache, in its "bundled" form) saves to
disk with the rest of its entry and loads in a new process whose Dynamo graph has
the same key. What is saved is the FX graph after our passes (GraphPickler, as
PyTorch's regional Inductor output does), never code: a loaded graph gets a fresh
_GraphRunner, whose programs are captured on its first call, with their fused
kernels from our own kernel cache (which checks what it loads, README "Security").

It is opt-in (TORCH_TPU_AOT_CACHE=1): measured on the small-GPT training step, a
hit saves about 0.2 s of a 2.7 s first call, while the first compile, which
pickles and saves the entries, takes 0.8 s longer. It is the form Dynamo's
precompile cache needs, which would skip Dynamo's tracing too (see README).

The entry is a pickle that PyTorch loads, so the cache is used only when its
directory (Inductor's cache directory, `TORCHINDUCTOR_CACHE_DIR`, default
/tmp/torchinductor_$USER, and its `aotautograd` folder) is this user's, is not a
symlink and no one else may write it; otherwise graphs are compiled in every
process. `aot_cache_status()` says whether it is used and why not.
"""
import os
import stat

import torch
from torch._inductor.output_code import OutputCode

from . import _compile

_status = None  # (used, why): decided once, at the backend's first graph
_stamp_value = None


def _stamp():
    """A hash of what decides a saved graph (our graph passes, this file, TORCH_TPU_COMPILE_IN_PLACE):
    part of the cache key, and checked again when an entry is loaded."""
    global _stamp_value
    if _stamp_value is None:
        import hashlib
        h = hashlib.sha256()
        for path in (_compile.__file__, __file__):
            with open(path, "rb") as f:
                h.update(f.read())
        h.update(b"in-place" if _compile._IN_PLACE else b"functional")  # TORCH_TPU_COMPILE_IN_PLACE
        _stamp_value = h.hexdigest()[:16]
    return _stamp_value


def aot_cache_status():
    """(used, why): whether compiled graphs go through AOTAutograd's cache on disk."""
    return _status if _status is not None else (False, "no graph compiled yet")


def _dir_problem(path):
    """Why `path` cannot hold entries this process will load, or None."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to this user"
    if st.st_mode & 0o022:
        return f"{path} is writable by its group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def use_aot_cache():
    """Decides (once) whether the backend's graphs use AOTAutograd's cache; turns PyTorch's "bundled"
    form of it on for the process when they do (Inductor graphs compiled in the same process are then
    saved in that form too, which PyTorch supports)."""
    global _status
    if _status is not None:
        return _status[0]
    import torch._functorch.config as fconfig
    if os.environ.get("TORCH_TPU_AOT_CACHE", "0") != "1":
        _status = (False, "off (TORCH_TPU_AOT_CACHE=1 turns it on)")
    elif torch.compiler.config.force_disable_caches or not fconfig.enable_autograd_cache:
        _status = (False, "PyTorch's AOTAutograd cache is off (force_disable_caches / enable_autograd_cache)")
    else:
        from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        root, sub = cache_dir(), AOTAutogradCache._get_tmp_dir()
        problem = None
        for d in (root, sub):
            try:
                os.makedirs(d, mode=0o700, exist_ok=True)
            except OSError as e:
                problem = f"{d}: {e.strerror}"
                break
            problem = _dir_problem(d)
            if problem:
                break
        if problem:
            _status = (False, f"not using AOTAutograd's cache: {problem}")
            _compile._log.warning("tpu compile: %s", _status[1])
        else:
            fconfig.bundled_autograd_cache = True
            # entries of another torch_tpu get other keys (the tag is part of PyTorch's key)
            tag = torch.compiler.config.cache_key_tag
            mine = f"torch_tpu-{_stamp()}"
            if mine not in tag:
                torch.compiler.config.cache_key_tag = f"{tag}|{mine}" if tag else mine
            _status = (True, sub)
    return _status[0]


class TpuOutputCode(OutputCode):
    def __init__(self, gm):
        super().__init__()
        self._boxed_call = True
        self._gm = gm
        self._bytes = None
        self._stamp = _stamp()
        self._runner = _compile._GraphRunner(gm)

    def __call__(self, inputs):
        return self._runner(*inputs)

    def prepare_for_serialization(self):
        """Called on the shallow copy that goes to disk: the graph as bytes, no runner."""
        from torch.fx._graph_pickler import GraphPickler, Options
        self._bytes = GraphPickler.dumps(self._gm, Options(ops_filter=None))
        self._gm = None
        self._runner = None

    def post_compile(self, example_inputs, constants, graph_kwargs):
        """On a cache hit: the graph back from its bytes, and a runner for it."""
        if self._runner is not None:
            return
        if self._stamp != _stamp():  # AOTAutograd then compiles the graph afresh
            raise RuntimeError(f"tpu compile: cache entry of torch_tpu {self._stamp}, this is {_stamp()}")
        from torch._guards import detect_fake_mode
        from torch.fx._graph_pickler import GraphPickler
        fake_mode = detect_fake_mode(example_inputs) or torch._subclasses.FakeTensorMode()
        gm = GraphPickler.loads(self._bytes, fake_mode)
        gm.recompile()
        self._gm = gm
        self._runner = _compile._GraphRunner(gm)
        _compile._count("disk_loads")

    def set_triton_bundle(self, triton_bundle):
        pass
