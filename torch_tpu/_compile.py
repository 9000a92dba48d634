"""torch.compile(backend="tpu"): PyTorch's front end, our device programs.

Dynamo captures the Python; AOTAutograd makes the functional forward and
backward graphs (input mutations kept in the graph as copy_ into the input).
Each graph becomes a _GraphRunner. On the first call for a signature (input
sizes, strides, dtypes, aliasing, scalar values) the graph runs once through
the eager path with the current stream's queue capturing
(tpurt/program.h): every kernel and device copy is recorded instead of run,
and the runtime turns the recording into a program whose intermediates live
in one arena planned from their lifetimes. That call and every later one
with the signature is one launch of the program on the queue: the queue's
thread runs the recorded kernels, fusing elementwise chains into generated
C kernels (the compiler shared with DeferAndFuse, cached on disk by a
shape-independent key), and the host returns as soon as the launch is
queued. A new signature inside a dynamic graph costs one capture (one eager
pass of host dispatch, no C compile, no Dynamo recompile); the generated
kernels take sizes at run time, so none is built again.

A graph that needs device data on the host while it runs (`.item()`,
`nonzero`) or a CPU tensor output cannot be a program: that signature runs
eagerly, as do all graphs in Debug mode (so Debug's checks apply).
"""
import logging
import os
import sys
import threading

import torch

from . import _C

__all__ = ["tpu_backend", "compile_stats", "reset_compile_stats"]

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_stats = {
    "graphs": 0,            # graphs handed to the backend by Dynamo (compiles)
    "captures": 0,          # programs captured
    "capture_failures": 0,  # signatures that run eagerly instead
    "launches": 0,          # program launches
    "eager_runs": 0,        # graph calls run eagerly
    "cache_requests": 0,    # program lookups
    "cache_hits": 0,
    "disk_loads": 0,        # compiled graphs loaded from AOTAutograd's cache on disk (_compile_cache)
}
_entries = []  # per program: read_count, compilation_duration (s), last_read


def compile_stats():
    """Counters of the tpu compile backend (see module docstring)."""
    with _lock:
        return dict(_stats)


def reset_compile_stats():
    with _lock:
        for k in _stats:
            _stats[k] = 0
        _entries.clear()


def _count(key, n=1):
    with _lock:
        _stats[key] += n


class _CacheEntryStats:
    __slots__ = ("read_count", "compilation_duration", "last_read", "program")

    def __init__(self, duration, program=None):
        self.program = program  # torch_tpu._C._Program: .info() has arena_bytes, num_kernels, launches
        self.read_count = 0
        self.compilation_duration = duration
        self.last_read = 0.0

    def __repr__(self):
        return (f"CacheEntryStats(read_count={self.read_count}, "
                f"compilation_duration={self.compilation_duration:.6f}, last_read={self.last_read:.3f})")


class _CacheStats:
    """torch.tpu._get_cache_stats(): TorchTPU's field names over our program cache."""

    def __init__(self):
        with _lock:
            self.num_cache_reqs = _stats["cache_requests"]
            self.num_cache_hits = _stats["cache_hits"]
            self.num_compiles = _stats["graphs"]
            self.num_captures = _stats["captures"]
            self.per_entry_stats = list(_entries)

    def __repr__(self):
        return (f"CacheStats(num_cache_reqs={self.num_cache_reqs}, num_cache_hits={self.num_cache_hits}, "
                f"num_compiles={self.num_compiles}, entries={len(self.per_entry_stats)})")


def _get_cache_stats():
    return _CacheStats()


_EAGER = object()  # a signature that runs eagerly


def _exec_mode_allows_programs():
    return _C._get_exec_mode() != 1  # 1: Debug (exec mode ids: tpurt/device.h)


class _GraphRunner:
    """One AOTAutograd graph (forward, backward or inference): programs per
    signature. Called with the graph's arguments (AOTAutograd boxes it)."""

    def __init__(self, gm):
        self.gm = gm
        self.programs = {}
        # CPU work inside the graph would run at capture time only (and twice
        # when a capture fails): such a graph always runs eagerly.
        self.cpu_work = _makes_cpu_tensors(gm)
        self.scalars = _scalar_inputs(gm)

    def _eager(self, args):
        _count("eager_runs")
        return self.gm(*args)

    def __call__(self, *args):
        if self.cpu_work or not _exec_mode_allows_programs():
            return self._eager(args)
        if self.scalars:
            args = self._scalars_to_device(args)
        sig = _C._program_signature(args)
        if sig is None:
            return self._eager(args)
        key, tensors = sig
        _count("cache_requests")
        entry = self.programs.get(key)
        if entry is _EAGER:
            return self._eager(args)
        if entry is None:
            return self._capture(key, args, tensors)
        prog, template, stats = entry
        _count("cache_hits")
        _count("launches")
        stats.read_count += 1
        stats.last_read = _now()
        return _assemble(template, prog.launch(tensors))

    def _scalars_to_device(self, args):
        """The scalar inputs as 0-dim tensors on the graph's device, filled by a queued kernel (no wait)."""
        dev = next((a.device for a in args if isinstance(a, torch.Tensor) and a.device.type == "tpu"), None)
        if dev is None:
            return args
        args = list(args)
        for i in self.scalars:
            a = args[i]
            if _is_cpu_scalar(a):
                args[i] = torch.full((), a.item(), dtype=a.dtype, device=dev)
        return args

    def _capture(self, key, args, tensors):
        if not tensors:
            self.programs[key] = _EAGER
            return self._eager(args)
        dev = tensors[0].device.index
        if any(t.device.index != dev for t in tensors):
            self.programs[key] = _EAGER
            return self._eager(args)
        t0 = _now()
        seed, before = _C._capture_begin(dev)
        try:
            out = self.gm(*args)
        except Exception as e:  # noqa: BLE001 - decided below
            _C._capture_abort(dev)
            if "capture:" not in str(e):
                raise
            return self._give_up(key, args, str(e))
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        template, out_tensors = [], []
        for o in flat:
            if isinstance(o, torch.Tensor):
                if o.device.type != "tpu" or o.device.index != dev:
                    _C._capture_abort(dev)
                    return self._give_up(key, args, f"an output is on {o.device}")
                template.append(len(out_tensors))
                out_tensors.append(o)
            else:
                template.append((o,))
        try:
            prog, storages = _C._capture_end(tensors, out_tensors, seed, before, dev)
        except RuntimeError as e:
            if "capture:" not in str(e):
                raise
            return self._give_up(key, args, str(e))
        stats = _CacheEntryStats(_now() - t0, prog)
        self.programs[key] = (prog, template, stats)
        with _lock:
            _stats["captures"] += 1
            _stats["launches"] += 1
            _entries.append(stats)
        stats.read_count += 1
        stats.last_read = _now()
        result = _assemble(template, prog.launch(tensors, storages, (seed, before)))
        return result

    def _give_up(self, key, args, why):
        _log.info("tpu compile: graph %s runs eagerly for this signature: %s", self.gm._get_name(), why)
        self.programs[key] = _EAGER
        _count("capture_failures")
        return self._eager(args)


def _is_cpu_scalar(v):
    """A Python float Dynamo made a graph input: a CPU 0-dim float64 tensor. (Other CPU 0-dim tensors,
    an optimizer's step count say, are the user's tensors, which the graph may read back or mutate.)"""
    return isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0 and v.dtype == torch.float64


def _scalar_inputs(gm):
    """Positions of the placeholders that are CPU 0-dim tensors: Python scalars Dynamo made graph inputs
    (a float that changes between calls: a learning rate, a dropout p). They are given to the program
    as 0-dim tpu tensors, so a new value is new data, not a new capture."""
    return frozenset(i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")
                     if _is_cpu_scalar(n.meta.get("val")))


def _makes_cpu_tensors(gm):
    """Whether the graph computes on the CPU. Work that only follows from scalar inputs (see
    _scalar_inputs: a cast of the scalar, say) moves to the device with them, so it does not count."""
    from torch.utils._pytree import tree_leaves
    moved = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if _is_cpu_scalar(node.meta.get("val")):
                moved.add(node)
            continue
        if node.op != "call_function":
            continue
        follows_scalar = any(a in moved for a in node.all_input_nodes)
        for v in tree_leaves(node.meta.get("val")):
            if isinstance(v, torch.Tensor) and v.device.type == "cpu":
                if follows_scalar:
                    moved.add(node)
                    continue
                _log.info("tpu compile: graph %s runs eagerly: %s makes a CPU tensor", gm._get_name(), node.target)
                return True
    return False


def _assemble(template, tensors):
    return [tensors[t] if isinstance(t, int) else t[0] for t in template]


def _now():
    import time
    return time.perf_counter()


def _foreach_in_place(gm):
    """Makes the graph's out-of-place `_foreach_*` ops in-place on their first list where that is
    exact, and drops the copies back into mutated inputs that this leaves as self-copies.

    AOTAutograd hands a compiled optimizer step over as a functional graph: every `_foreach_*` op
    writes new tensors, and mutated inputs (parameters, optimizer states, step counts) get their final
    values through `copy_` at the end. Run as is, the program writes each state twice and keeps a new
    buffer per update. An op may instead write into its first list when no later node reads those
    tensors' old values (a mutated input's only later use being the copy into it), the first list is
    graph inputs AOTAutograd copies into at the end or earlier `_foreach_` results, and no tensor
    appears twice in it. Returns the number of ops changed."""
    import operator
    g = gm.graph
    aten = torch.ops.aten
    nodes = list(g.nodes)
    pos = {n: i for i, n in enumerate(nodes)}

    def is_copy_into(u, x):
        """u writes a new value into x without reading it (a copy of x into itself, which an earlier
        rewrite leaves, keeps x's value to the end: a read)."""
        return u.op == "call_function" and u.target is aten.copy_.default and u.args[0] is x and u.args[1] is not x

    mutated = {n.args[0] for n in nodes
               if n.op == "call_function" and n.target is aten.copy_.default and n.args[0].op == "placeholder"}
    changed = 0
    for n in nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        base = n.target._schema.name.split("::")[-1]
        if not base.startswith("_foreach_") or base.endswith("_"):
            continue
        packet = getattr(aten, base + "_", None)
        inplace = getattr(packet, n.target._overloadname, None) if packet is not None else None
        first = n.args[0] if n.args else None
        if inplace is None or not isinstance(first, (list, tuple)) or len(set(first)) != len(first):
            continue
        gets = list(n.users)
        if any(u.op != "call_function" or u.target is not operator.getitem for u in gets):
            continue
        ok = True
        for x in first:
            if not isinstance(x, torch.fx.Node):
                ok = False
                break
            if x.op == "placeholder":
                ok = x in mutated
            else:
                ok = x.op == "call_function" and x.target is operator.getitem and isinstance(
                    x.args[0].target, torch._ops.OpOverload) and x.args[0].target._schema.name.startswith(
                    "aten::_foreach_")
            ok = ok and all(u is n or pos[u] < pos[n] or is_copy_into(u, x) for u in x.users)
            if not ok:
                break
        if not ok:
            continue
        with g.inserting_before(n):
            new = g.call_function(inplace, tuple(n.args), dict(n.kwargs))
        pos[new] = pos[n]
        for u in gets:
            u.replace_all_uses_with(first[u.args[1]])
            g.erase_node(u)
        g.erase_node(n)
        changed += 1
    if changed:
        for n in list(g.nodes):
            if n.op == "call_function" and n.target is aten.copy_.default and n.args[0] is n.args[1]:
                n.replace_all_uses_with(n.args[0])
                g.erase_node(n)
        g.lint()
        gm.recompile()
    return changed


def _prepare_graph(gm):
    if _IN_PLACE:
        try:
            _foreach_in_place(gm)
        except Exception as e:  # noqa: BLE001 - the functional graph as it came is still right
            _log.info("tpu compile: graph %s kept functional: %s", gm._get_name(), e)
    return gm


def _compile_graph(gm, example_inputs):
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(_GraphRunner(_prepare_graph(gm)))


def _compile_graph_cacheable(gm, example_inputs):
    from ._compile_cache import TpuOutputCode
    return TpuOutputCode(_prepare_graph(gm))


# TORCH_TPU_COMPILE_IN_PLACE=0 keeps AOTAutograd's functional graphs as they come (comparisons).
_IN_PLACE = os.environ.get("TORCH_TPU_COMPILE_IN_PLACE", "1") != "0"


_aot_backend = None


def tpu_backend(gm, example_inputs, **options):
    """The `tpu` torch.compile backend: AOTAutograd graphs, run as device programs."""
    global _aot_backend
    _install_device_interface()
    _count("graphs")
    if _aot_backend is None:
        from torch._dynamo.backends.common import aot_autograd
        from . import _compile_cache
        compiler = _compile_graph
        if _compile_cache.use_aot_cache():
            # compiled graphs AOTAutograd's cache can save and load (see _compile_cache)
            from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
            compiler = SerializableAOTDispatchCompiler(_compile_cache.TpuOutputCode, _compile_graph_cacheable)
        _aot_backend = aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                                    inference_compiler=compiler, keep_inference_input_mutations=True)
    return _aot_backend(gm, example_inputs)


# ---- registration --------------------------------------------------------

def _device_interface_class():
    from torch._dynamo.device_interface import DeviceInterface

    class TpuInterface(DeviceInterface):
        """Dynamo's view of our device: the real torch.tpu module."""

        device = torch.tpu.device  # noqa: F821 - set by torch_tpu
        Event = torch.tpu.Event
        Stream = torch.tpu.Stream

        class Worker:
            @staticmethod
            def set_device(device):
                torch.tpu.set_device(device)

            @staticmethod
            def current_device():
                return torch.tpu.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return torch.tpu.get_device_properties(device)

        @staticmethod
        def current_device():
            return torch.tpu.current_device()

        @staticmethod
        def set_device(device):
            torch.tpu.set_device(device)

        @staticmethod
        def device_count():
            return torch.tpu.device_count()

        @staticmethod
        def is_available():
            return torch.tpu.is_available()

        @staticmethod
        def stream(stream):
            return torch.tpu.stream(stream)

        @staticmethod
        def current_stream():
            return torch.tpu.current_stream()

        @staticmethod
        def set_stream(stream):
            torch.tpu.set_stream(stream)

        @staticmethod
        def get_raw_stream(device_index):
            return torch.tpu.current_stream(device_index).stream_id

        @staticmethod
        def synchronize(device=None):
            torch.tpu.synchronize(device)

        @staticmethod
        def get_device_properties(device=None):
            return torch.tpu.get_device_properties(device)

        @staticmethod
        def get_compute_capability(device=None):
            return ""

        @staticmethod
        def is_bf16_supported(including_emulation=False):
            return True

        @classmethod
        def is_dtype_supported(cls, dtype, including_emulation=False):
            return True  # every dtype PyTorch's CPU backend has (complex32 aside, as there)

        @staticmethod
        def memory_allocated(device=None):
            return torch.tpu.memory_allocated(device)

    return TpuInterface


_interface_lock = threading.Lock()
_interface = None


def _install_device_interface():
    """Make Dynamo's "tpu" device interface ours. torch registers its own
    (for the JAX/Pallas TorchTPU) lazily in init_device_reg, so ours is put
    back after that runs too, whatever the order."""
    global _interface
    with _interface_lock:
        import torch._dynamo.device_interface as di
        if _interface is None:
            _interface = _device_interface_class()
            upstream_init = di.init_device_reg

            def init_device_reg():
                upstream_init()
                di.register_interface_for_device("tpu", _interface)
                for i in range(torch.tpu.device_count()):
                    di.register_interface_for_device(f"tpu:{i}", _interface)

            di.init_device_reg = init_device_reg
        di.register_interface_for_device("tpu", _interface)
        for i in range(torch.tpu.device_count()):
            di.register_interface_for_device(f"tpu:{i}", _interface)


def _has_tpu(model, inputs):
    def on_tpu(x):
        dev = getattr(x, "device", None)
        return isinstance(dev, torch.device) and dev.type == "tpu"

    if any(on_tpu(x) for x in inputs or ()):
        return True
    params = getattr(model, "parameters", None)
    if params is not None:
        try:
            return any(on_tpu(p) for p in model.parameters()) or any(on_tpu(b) for b in model.buffers())
        except Exception:  # noqa: BLE001 - not a module after all
            return False
    return False


def _install_default_route():
    """`torch.compile(model)` (Inductor) with tpu inputs goes to our backend:
    torch 2.13's Inductor has a JAX/Pallas backend under the name "tpu" that
    is not ours and cannot run here."""
    wrapper = torch._TorchCompileInductorWrapper
    if getattr(wrapper.__call__, "_torch_tpu", False):
        return
    upstream = wrapper.__call__

    def __call__(self, model_, inputs_, *args, **kwargs):
        if _has_tpu(model_, inputs_):
            return tpu_backend(model_, inputs_)
        return upstream(self, model_, inputs_, *args, **kwargs)

    __call__._torch_tpu = True
    wrapper.__call__ = __call__


def _register():
    """Called when torch_tpu loads: cheap (Dynamo is not imported here). The
    name "tpu" reaches Dynamo's registry through the torch_dynamo_backends
    entry point, or directly when Dynamo is already imported."""
    _install_default_route()
    if "torch._dynamo" in sys.modules:
        _register_with_dynamo()


def _register_with_dynamo():
    from torch._dynamo.backends import registry
    if "tpu" not in registry._COMPILER_FNS:
        registry.register_backend(tpu_backend, name="tpu")
    _install_device_interface()
