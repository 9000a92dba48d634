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
queued. A graph with symbolic sizes is captured twice more at other sizes
at its first call, and its program then takes the sizes at launch
(_Sizes, tpurt_program_generalize): a new size inside the range is a
binding of the same program, with no capture, no C build and no Dynamo
recompile. Where the captures cannot be explained by the sizes, each new
signature costs one capture instead.

A graph with no tpu tensor input (factory ops alone: `torch.arange(n,
device="tpu")`, a model's positions and masks) is captured on the one tpu
device its values (node meta "val") are on, or on the current device where
its code names "tpu" without an index (then part of the program's key); its
sizes, when symbolic, come from its SymInt inputs.

A graph that needs device data on the host while it runs (`.item()`,
`nonzero`) or a CPU tensor output cannot be a program: that signature runs
eagerly, as do all graphs in Debug mode (so Debug's checks apply).
"""
import gc
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
    "size_probes": 0,       # captures at other sizes made to turn a program's sizes into parameters
    "generalized": 0,       # programs that take their sizes at launch
    "bindings": 0,          # new sizes run by such a program: no capture, no build
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


class _OldHeapHidden:
    """While a graph compiles (Dynamo's trace, AOTAutograd, our passes, the first capture), the objects
    that were alive when it began are hidden from Python's cyclic collector (gc.freeze), and shown to it
    again when it ends (gc.unfreeze). A compile makes hundreds of thousands of objects, which trigger
    the collector's full passes; each of those walked every object of the process (about 370000 with
    torch loaded), 0.1-0.2 s a pass, four or five in the small-GPT step's first call. Hidden, a pass
    walks only what the compile made. Nothing is lost: a cycle among the hidden objects is collected
    after the window, as it would have been by a later full pass. Windows nest (Dynamo's callbacks and
    our capture); where gc is off, or the process froze objects itself (gc.get_freeze_count() > 0,
    as a server may after start-up), nothing is touched. TORCH_TPU_COMPILE_GC_WINDOW=0 turns it off."""

    enabled = os.environ.get("TORCH_TPU_COMPILE_GC_WINDOW", "1") != "0"

    def __init__(self):
        self._lock = threading.Lock()
        self._depth = 0
        self._froze = False

    def enter(self, *_args):
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._froze = self.enabled and gc.isenabled() and gc.get_freeze_count() == 0
                if self._froze:
                    gc.freeze()

    def exit(self, *_args):
        with self._lock:
            if self._depth == 0:  # an end callback whose start ran before ours was registered
                return
            self._depth -= 1
            if self._depth == 0 and self._froze:
                self._froze = False
                gc.unfreeze()

    def __enter__(self):
        self.enter()
        return self

    def __exit__(self, *exc):
        self.exit()

    def install(self):
        """Our start and end callbacks on Dynamo's compiles; again after torch._dynamo.reset(), which
        clears the callback lists (tpu_backend calls this at every graph)."""
        from torch._dynamo.callback import callback_handler
        if self.enter not in callback_handler.start_callbacks:
            callback_handler.register_start_callback(self.enter)
            callback_handler.register_end_callback(self.exit)


_old_heap_hidden = _OldHeapHidden()


_EAGER = object()  # a signature that runs eagerly


def _exec_mode_allows_programs():
    return _C._get_exec_mode() != 1  # 1: Debug (exec mode ids: tpurt/device.h)


class _GraphRunner:
    """One AOTAutograd graph (forward, backward or inference): programs per
    signature. Called with the graph's arguments (AOTAutograd boxes it).

    A graph with symbolic sizes captures twice more at its first call, at other
    sizes inside their ranges (never run), and makes its program take the sizes
    at launch (tpurt_program_generalize); a new size is then a binding of that
    program: no capture, no build. Where the captures differ in a way no size
    expression explains, the graph keeps a program per size."""

    def __init__(self, gm):
        # CPU work that follows from the graph's constants alone (a mask built from torch.tensor(...)
        # in the model's code) is done once, here, and its results become device constants: real
        # tensors, made outside the compiler's fake-tensor and dispatch modes.
        from torch.utils._python_dispatch import _disable_current_modes
        with _disable_current_modes():
            self.gm = _fold_cpu_constants(_without_idle_rng_state(gm))
        self.programs = {}
        # A graph without tpu tensor inputs is captured on the device its values are on: the current
        # device at each call where its code names "tpu" without an index.
        self.device = _graph_device(self.gm)
        self.current_device = self.device is not None and _names_current_device(self.gm)
        # Other CPU work inside the graph would run at capture time only (and twice
        # when a capture fails): such a graph always runs eagerly.
        self.scalars = _scalar_inputs(self.gm)
        self.cpu_work = _makes_cpu_tensors(self.gm, self.scalars)
        self.sizes = None    # _Sizes, read at the first capture
        self.general = None  # (program, out_bytes rules, out view rules, template rules, stats, aliasing)

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
        if not tensors and self.current_device:
            key += torch.tpu.current_device().to_bytes(2, "little")
        _count("cache_requests")
        entry = self.programs.get(key)
        if entry is _EAGER:
            return self._eager(args)
        if entry is None:
            entry = self._bind_or_none(args, tensors) if self.general is not None else None
            if entry is None:
                return self._capture(key, args, tensors)
            self.programs[key] = entry
        else:
            _count("cache_hits")
        prog, template, stats, bound = entry
        _count("launches")
        stats.read_count += 1
        stats.last_read = _now()
        return _assemble(template, prog.launch(tensors, **bound))

    def _scalars_to_device(self, args):
        """The scalar inputs as 0-dim tensors on the graph's device, filled by a queued kernel (no wait)."""
        dev = next((a.device for a in args if isinstance(a, torch.Tensor) and a.device.type == "tpu"), self.device)
        if dev is None:
            return args
        args = list(args)
        for i in self.scalars:
            a = args[i]
            if _is_cpu_0dim(a):
                args[i] = torch.full((), a.item(), dtype=a.dtype, device=dev)
        return args

    def _record(self, args, tensors, dev, probe=False):
        """One capture of the graph on these arguments: (program, output storages, template, rng), or a
        string saying why this cannot be a program. A probe (other sizes, never run) gives up on any error."""
        seed, before = _C._capture_begin(dev)
        try:
            out = self.gm(*args)
        except Exception as e:  # noqa: BLE001 - decided below
            _C._capture_abort(dev)
            if not probe and "capture:" not in str(e):
                raise
            return str(e)
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        template, out_tensors = [], []
        for o in flat:
            if isinstance(o, torch.Tensor):
                if o.device.type != "tpu" or o.device.index != dev:
                    _C._capture_abort(dev)
                    return f"an output is on {o.device}"
                template.append(len(out_tensors))
                out_tensors.append(o)
            else:
                template.append((o,))
        try:
            prog, storages = _C._capture_end(tensors, out_tensors, seed, before, dev)
        except RuntimeError as e:
            if not probe and "capture:" not in str(e):
                raise
            return str(e)
        return prog, storages, template, (seed, before)

    def _capture(self, key, args, tensors):
        with _old_heap_hidden:
            return self._capture_hidden(key, args, tensors)

    def _capture_hidden(self, key, args, tensors):
        if tensors:
            dev = tensors[0].device.index
        elif self.device is not None:  # factory ops alone: the device the graph's values name
            dev = torch.tpu.current_device() if self.current_device else self.device.index
        else:
            return self._give_up(key, args, "no tpu tensor input, and its values name no single tpu device")
        if any(t.device.index != dev for t in tensors):
            return self._give_up(key, args, "its tensor inputs are on more than one device")
        t0 = _now()
        rec = self._record(args, tensors, dev)
        if isinstance(rec, str):
            return self._give_up(key, args, rec)
        prog, storages, template, rng = rec
        stats = _CacheEntryStats(_now() - t0, prog)
        bound = {}
        if self.general is None and self.sizes is None and _SIZES_AT_LAUNCH:
            # Taking sizes at launch is a gain, never a condition: whatever fails here leaves the
            # program captured above, with its sizes fixed.
            try:
                self.sizes = _Sizes(self.gm)
                if self.sizes.ok:
                    bound = self._generalize(prog, args, tensors, template, dev, stats) or {}
            except Exception as e:  # noqa: BLE001 - logged; the fixed-size program is right
                _log.info("tpu compile: graph %s keeps a program per size: %s: %s", self.gm._get_name(),
                          type(e).__name__, e)
                self.sizes = self.sizes or False
                bound = {}
        self.programs[key] = (prog, template, stats, bound)
        with _lock:
            _stats["captures"] += 1
            _stats["launches"] += 1
            _entries.append(stats)
        stats.read_count += 1
        stats.last_read = _now()
        return _assemble(template, prog.launch(tensors, storages, rng, **bound))

    def _generalize(self, prog, args, tensors, template, dev, stats):
        """Makes prog take sizes at launch (_generalize_program). Returns the launch arguments for this
        call's sizes, or None (prog keeps its sizes)."""
        def record(pargs):
            ptens = [a for a in pargs if isinstance(a, torch.Tensor) and a.device.type == "tpu"]
            rec = self._record(pargs, ptens, dev, probe=True)
            _count("size_probes")
            return rec if isinstance(rec, str) else (rec[0], rec[2])

        done = _generalize_program(self.sizes, prog, args, template, dev, record,
                                   f"tpu compile: graph {self.gm._get_name()} keeps a program per size", tie=True)
        if done is None:
            return None
        _, vals, rules = done
        _count("generalized")
        self.general = (prog, *rules, stats, _aliasing(tensors))
        return dict(binding=prog.bind(vals, prog.out_bytes(), prog.out_specs()))

    def _bind_or_none(self, args, tensors):
        try:
            return self._bind(args, tensors)
        except (RuntimeError, ValueError, TypeError, IndexError, OverflowError) as e:
            _log.info("tpu compile: graph %s captures this size: %s", self.gm._get_name(), e)
            return None

    def _bind(self, args, tensors):
        """The program that takes sizes, bound to these arguments' sizes; None when they do not fit it."""
        prog, byte_rules, view_rules, tmpl_rules, stats, aliasing = self.general
        sz = self.sizes
        try:
            point = sz.read(args)
        except (IndexError, TypeError, ValueError):
            return None
        for j, (x, (lo, hi)) in enumerate(zip(point, sz.ranges)):
            if j in sz.held:
                if x != sz.held[j]:
                    return None  # a size the program holds at its captured value
            elif x < max(2, lo) or (hi is not None and x > hi):
                return None
        if sz.ties and any(point[j] != point[g[0]] for g in sz.ties for j in g):
            return None  # sizes the program took as one differ here
        vals = sz.values(point)
        if not sz.fits(args, vals) or _aliasing(tensors) != aliasing:
            return None
        out_bytes = [_at(r, vals) for r in byte_rules]
        specs = [(fi, idx, dt, [_at(r, vals) for r in sizes], [_at(r, vals) for r in strides], _at(off, vals))
                 for fi, idx, dt, sizes, strides, off in view_rules]
        template = [t if isinstance(t, int) else (_at(t, vals),) for t in tmpl_rules]
        b = prog.bind(vals, out_bytes, specs)
        _count("bindings")
        return (prog, template, stats, dict(binding=b))

    def _give_up(self, key, args, why):
        _log.info("tpu compile: graph %s runs eagerly for this signature: %s", self.gm._get_name(), why)
        self.programs[key] = _EAGER
        _count("capture_failures")
        return self._eager(args)


def _generalize_program(sz, prog, args, template, dev, record, why, tie=False):
    """Captures a graph at two other points of its sizes (sz: _Sizes; record(args at a point) gives
    (program, output template) or a string saying why not) and makes prog, captured on `args`, take
    its sizes at launch (tpurt_program_generalize). Returns (point, size values, output rules), or None
    after logging why (prefixed by `why`): prog keeps its sizes. The default generator is left where
    it was: captures never run.

    With tie, where a capture at other sizes fails and some symbols are equal at this point, the
    captures are made again with those symbols moving together (sz.ties): Dynamo leaves relations
    between sizes unguarded when an op checks them (dynamic=True gives a model's labels their own
    sizes, and the loss's view needs labels' numel to be logits' rows), and the program then takes
    sizes where they hold (_GraphRunner._bind checks them). With tie too, a symbol whose range has no
    other value is held at this point's (sz.held), which a binding checks as well."""
    point = sz.read(args)
    vals = sz.values(point)
    if not sz.fits(args, vals):
        _log.info("%s: arguments unlike its metadata", why)
        return None
    ties = _equal_groups(point) if tie else None
    rng_state = torch.tpu.get_rng_state(dev) if prog.info()["rng_count"] else None
    try:
        got = _probe_captures(sz, prog, args, template, point, vals, record, None, tie)
        if isinstance(got, str) and ties:
            _log.info("%s: %s; again with equal sizes moving together", why, got)
            got = _probe_captures(sz, prog, args, template, point, vals, record, ties, tie)
    finally:
        if rng_state is not None:
            torch.tpu.set_rng_state(rng_state, dev)
    if isinstance(got, str):
        _log.info("%s: %s", why, got)
        return None
    others, rows, caps, used_ties, held = got
    rules = _output_rules(caps, rows)
    if isinstance(rules, str):
        _log.info("%s: %s", why, rules)
        return None
    try:
        prog.generalize(others, rows)
    except RuntimeError as e:
        _log.info("%s: %s", why, e)
        return None
    sz.ties, sz.held = used_ties, held
    return point, vals, rules


def _equal_groups(point):
    """The groups (tuples of symbol positions, two or more) of symbols with equal values at point; None
    when all differ."""
    groups = {}
    for j, x in enumerate(point):
        groups.setdefault(x, []).append(j)
    out = tuple(tuple(g) for g in groups.values() if len(g) > 1)
    return out or None


def _probe_captures(sz, prog, args, template, point, vals, record, ties, hold):
    """The captures at two other points (sz.probes: symbols in one of ties' groups take one value; with
    hold, symbols that cannot move keep theirs): (programs, size value rows, (out_specs, out_bytes,
    template) per capture, ties, {held symbol position: value}), or a string saying why not."""
    probes = sz.probes(point, ties=ties, hold=hold)
    if probes is None:
        return "no room for other sizes"
    held = {j: a for j, a in enumerate(point) if all(pt[j] == a for pt in probes)}
    rows, caps, others = [vals], [(prog.out_specs(), prog.out_bytes(), template)], []
    for pt in probes:
        try:
            pargs = sz.probe_args(args, pt)
        except (ValueError, RuntimeError) as e:
            return str(e)
        rec = record(pargs)
        if isinstance(rec, str):
            return f"at sizes {pt}: {rec}"
        other, tmpl = rec
        others.append(other)
        rows.append(sz.values(pt))
        caps.append((other.out_specs(), other.out_bytes(), tmpl))
    return others, rows, caps, ties, held


def _aliasing(tensors):
    """Which tpu tensor arguments share a storage: for each, the first with its storage."""
    bases = [t.untyped_storage().data_ptr() for t in tensors]
    return tuple(bases.index(b) for b in bases)


def _output_rules(caps, rows):
    """How the outputs' storages, views and non-tensor values follow the sizes, from the captures'
    (out_specs, out_bytes, template) at the points whose size values are rows; a string when they
    do not."""
    specs0, bytes0, tmpl0 = caps[0]
    if any(len(c[0]) != len(specs0) or len(c[1]) != len(bytes0) or len(c[2]) != len(tmpl0) for c in caps):
        return "the outputs differ at other sizes"
    byte_rules = []
    for j in range(len(bytes0)):
        r = _explain([c[1][j] for c in caps], rows)
        if r is None:
            return f"output storage {j}'s bytes follow no size"
        byte_rules.append(r)
    view_rules = []
    for j, s0 in enumerate(specs0):
        ss = [c[0][j] for c in caps]
        if any(s[:3] != s0[:3] or len(s[3]) != len(s0[3]) for s in ss):
            return f"output {j} differs at other sizes"
        parts = []
        for f in (3, 4):
            rs = [_explain([s[f][d] for s in ss], rows) for d in range(len(s0[f]))]
            if any(r is None for r in rs):
                return f"output {j}'s {'sizes' if f == 3 else 'strides'} follow no size"
            parts.append(rs)
        off = _explain([s[5] for s in ss], rows)
        if off is None:
            return f"output {j}'s offset follows no size"
        view_rules.append((*s0[:3], parts[0], parts[1], off))
    tmpl_rules = []
    for j, t0 in enumerate(tmpl0):
        ts = [c[2][j] for c in caps]
        if isinstance(t0, int):
            if any(t != t0 for t in ts):
                return "the outputs differ at other sizes"
            tmpl_rules.append(t0)
            continue
        vs = [t[0] if isinstance(t, tuple) else None for t in ts]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in vs):
            r = _explain(vs, rows)
            if r is None:
                return f"output {j} (an int) follows no size"
            tmpl_rules.append(r)
        elif all(v == vs[0] and type(v) is type(vs[0]) for v in vs):
            tmpl_rules.append(("c", vs[0]))
        else:
            return f"output {j} ({type(vs[0]).__name__}) changes with the sizes"
    return byte_rules, view_rules, tmpl_rules


# ---- sizes as run-time parameters ----------------------------------------

_PROBE_STEPS = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73)


def _expr_of(v):
    """The sympy expression of a SymInt (or an int), or None."""
    if isinstance(v, torch.SymInt):
        return v.node.expr
    if isinstance(v, int) and not isinstance(v, bool):
        import sympy
        return sympy.Integer(v)
    return None


class _Sizes:
    """A graph's symbolic sizes (dynamic=True, mark_dynamic): its symbols, how each is read off the
    arguments, the layout each tensor argument must have, and the size expressions its values and
    intermediates have (the candidates a program's numbers are explained by, tpurt_program_generalize).
    None-like (ok False) when the graph has no symbols or a symbol that no argument gives."""

    def __init__(self, gm):
        from torch.utils._pytree import tree_leaves
        self.ok = False
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.metas = [n.meta.get("val") for n in phs]
        exprs, seen = [], set()
        shape_env = None
        for n in gm.graph.nodes:
            for v in tree_leaves(n.meta.get("val")):
                xs = (v,) if isinstance(v, torch.SymInt) else \
                    (*v.shape, *v.stride(), v.storage_offset(), v.numel()) if isinstance(v, torch.Tensor) else ()
                shape_env = shape_env or next((x.node.shape_env for x in xs if isinstance(x, torch.SymInt)), None)
        ranges = shape_env.var_to_range if shape_env is not None else {}
        # A size is read at the ranges Dynamo's guards give its symbols (Max(1, s0) is s0 where s0 >= 2:
        # a factory op's contiguous strides).
        self.expr_of = expr_of = _range_simplifier(ranges)

        def add(e):
            if e is not None and e.free_symbols and e not in seen:
                seen.add(e)
                exprs.append(e)

        for n in gm.graph.nodes:
            for v in tree_leaves(n.meta.get("val")):
                if isinstance(v, torch.SymInt):
                    add(expr_of(v))
                elif isinstance(v, torch.Tensor):
                    for x in (*v.shape, *v.stride(), v.storage_offset(), v.numel()):
                        add(expr_of(x))
        if not exprs:
            return
        # Each size without its constant factor too (s0*s1 for 128*s0*s1): the runtime's own
        # temporaries (a kernel's per-row statistics) are sized by products the graph never names alone.
        for e in list(exprs):
            add(e.as_coeff_Mul()[1])
        symbols = sorted(set().union(*(e.free_symbols for e in exprs)), key=str)
        # A piecewise size (Min(s0, 64), s0 // 2) can agree with a simpler one at every point captured
        # and not beyond: such graphs keep a program per size.
        odd = next((e for e in exprs if not e.is_polynomial(*symbols)), None)
        if odd is not None:
            _log.info("tpu compile: graph %s keeps a program per size: size %s is no polynomial", gm._get_name(), odd)
            return
        # How each symbol is read off the arguments: a SymInt argument, or a tensor argument's size.
        self.readers = {}
        for i, m in enumerate(self.metas):
            if isinstance(m, torch.SymInt) and expr_of(m).is_Symbol:
                self.readers.setdefault(expr_of(m), ("int", i, 0))
            elif isinstance(m, torch.Tensor):
                for d, x in enumerate(m.shape):
                    e = expr_of(x)
                    if e is not None and e.is_Symbol:
                        self.readers.setdefault(e, ("size", i, d))
        if any(s not in self.readers for s in symbols):
            _log.info("tpu compile: graph %s keeps a program per size: a size no argument gives", gm._get_name())
            return
        exprs.sort(key=lambda e: (len(e.free_symbols), e.count_ops(), str(e)))
        self.symbols = symbols
        self.exprs = exprs
        index = {e: k for k, e in enumerate(exprs)}
        # The layout each argument must have: (arg, what, dim, expr index or -1, constant).
        self.layout = []
        for i, m in enumerate(self.metas):
            if isinstance(m, torch.Tensor):
                for what, xs in (("size", m.shape), ("stride", m.stride()), ("offset", (m.storage_offset(),))):
                    for d, x in enumerate(xs):
                        e = expr_of(x)
                        self.layout.append((i, what, d, index.get(e, -1), None if e in index else int(e)))
            elif isinstance(m, torch.SymInt):  # (an int Dynamo specialized has a number for its expr)
                e = expr_of(m)
                self.layout.append((i, "int", 0, index.get(e, -1), None if e in index else int(e)))
        from torch.utils._sympy.printers import PythonPrinter
        printer = PythonPrinter()
        names = [f"_s{k}" for k in range(len(symbols))]
        subs = {s: __import__("sympy").Symbol(n, integer=True) for s, n in zip(symbols, names)}
        try:
            body = ", ".join(printer.doprint(e.xreplace(subs)) for e in exprs)
            self.evaluate = eval(f"lambda {', '.join(names)}: ({body},)", {"math": __import__("math")})
        except Exception as e:  # noqa: BLE001 - an expression Python cannot print: sizes stay fixed
            _log.info("tpu compile: graph %s keeps a program per size: %s", gm._get_name(), e)
            return
        self.ranges = [_int_range(ranges.get(s)) for s in symbols]  # (lo, hi), hi None: unbounded
        self.ties = None  # groups of symbols a program takes as one (_generalize_program)
        self.held = {}    # symbols (positions) a program takes at one value only: value
        self.ok = True

    def read(self, args):
        """The symbols' values in these arguments, in self.symbols' order."""
        out = []
        for s in self.symbols:
            kind, i, d = self.readers[s]
            a = args[i]
            out.append(int(a) if kind == "int" else a.shape[d])
        return out

    def values(self, point):
        return [int(v) for v in self.evaluate(*point)]

    def fits(self, args, vals):
        """Whether the arguments have the layout the graph's symbolic metadata says at these values."""
        for i, what, d, k, const in self.layout:
            want = vals[k] if k >= 0 else const
            a = args[i]
            if what == "int":
                got = int(a)
            elif not isinstance(a, torch.Tensor):
                return False
            elif what == "size":
                got = a.shape[d] if d < a.dim() else None
            elif what == "stride":
                got = a.stride(d) if d < a.dim() else None
                if a.shape[d] == 1:
                    continue  # a size-1 dim's stride says nothing
            else:
                got = a.storage_offset()
            if got != want:
                return False
        return True

    def probes(self, point, n=2, ties=None, hold=False):
        """n other points for the symbols: inside their ranges, distinct from each other and from point's,
        except that the symbols of one of ties' groups (tuples of positions) take one value, and, with
        hold, a symbol whose range has no other value (a cache length of 0 whose range ends at 0) keeps
        point's."""
        used = set(point)
        lead = {j: g[0] for g in ties or () for j in g}
        out = []
        for k in range(n):
            p = []
            for j, a in enumerate(point):
                if lead.get(j, j) != j:
                    p.append(p[lead[j]])
                    continue
                group = next((g for g in ties or () if j in g), (j,))
                lo = max([2] + [self.ranges[i][0] for i in group])
                his = [self.ranges[i][1] for i in group if self.ranges[i][1] is not None]
                hi = min(his) if his else None
                hi = a + 1000 if hi is None else hi
                pick = None
                for step in _PROBE_STEPS[k * 3 + j % 3:] + _PROBE_STEPS:
                    for x in (a + step, a - step):
                        if lo <= x <= hi and x not in used:
                            pick = x
                            break
                    if pick is not None:
                        break
                if pick is None and hold and not any(x != a for x in range(lo, min(hi, a + 2) + 1)):
                    pick = a  # no other value in its range
                if pick is None:
                    return None
                used.add(pick)
                p.append(pick)
            out.append(p)
        return out

    def probe_args(self, args, point):
        """The arguments at another point: new (unwritten) tensors where a size is symbolic, the same
        objects elsewhere. Tensors that share a storage get one new storage, each its view of it."""
        vals = self.values(point)
        out = list(args)
        groups = {}
        for i, m in enumerate(self.metas):
            if isinstance(m, torch.SymInt):
                out[i] = vals[self.layout_index(i)]
            elif isinstance(m, torch.Tensor) and isinstance(args[i], torch.Tensor) and args[i].device.type == "tpu":
                groups.setdefault(args[i].untyped_storage().data_ptr(), []).append(i)
        for members in groups.values():
            if all(k < 0 for j, w, d, k, c in self.layout if j in members):
                continue  # no symbolic size: the same tensors
            views, extent = [], 1
            for i in members:
                lay = {(w, d): (vals[k] if k >= 0 else c) for j, w, d, k, c in self.layout if j == i}
                a = args[i]
                sizes = [lay[("size", d)] for d in range(a.dim())]
                strides = [lay[("stride", d)] for d in range(a.dim())]
                off = lay[("offset", 0)]
                end = off + sum((sz - 1) * st for sz, st in zip(sizes, strides)) + 1 if all(sizes) else off
                extent = max(extent, end * a.element_size())
                views.append((i, sizes, strides, off))
            base = torch.empty(extent, dtype=torch.uint8, device=args[members[0]].device)
            for i, sizes, strides, off in views:
                out[i] = base.view(args[i].dtype)[: extent // args[i].element_size()].as_strided(sizes, strides, off) \
                    if extent % args[i].element_size() == 0 else None
                if out[i] is None:
                    raise ValueError("shared storage of mixed element sizes")
        return out

    def layout_index(self, i):
        return next(k for j, w, d, k, c in self.layout if j == i and w == "int")


def _range_simplifier(ranges):
    """expr_of(v): the sympy expression of a SymInt or int (_expr_of), with every Max and Min whose
    order the symbols' value ranges (ranges: symbol -> ValueRanges, the shape env's) decide replaced
    by the argument that wins: Max(1, s0) is s0 where s0 >= 1. Exact inside the ranges, which is where
    the graph runs (Dynamo's guards) and where sizes are bound (_GraphRunner._bind checks them)."""
    import sympy
    from torch.utils._sympy.functions import Max, Min, MinMaxBase
    from torch.utils._sympy.value_ranges import bound_sympy

    def at_least(a, b):  # a >= b everywhere in the ranges
        try:
            lo = bound_sympy(a - b, ranges).lower
            return bool(lo >= 0)
        except Exception:  # noqa: BLE001 - undecided: the Max or Min stays
            return False

    def decide(m):
        bigger = isinstance(m, (Max, sympy.Max))
        keep = list(m.args)
        for a in m.args:
            if any(b is not a and (at_least(b, a) if bigger else at_least(a, b)) for b in keep):
                keep.remove(a)
        return keep[0] if len(keep) == 1 else m.func(*keep)

    def expr_of(v):
        e = _expr_of(v)
        if e is None or not e.has(MinMaxBase, sympy.Max, sympy.Min):
            return e
        return e.replace(lambda x: isinstance(x, (MinMaxBase, sympy.Max, sympy.Min)), decide)

    return expr_of


def _int_range(r):
    """A symbol's value range as (lo, hi) ints, hi None when unbounded."""
    def bound(x):
        try:
            return int(x) if x.is_finite else None
        except (TypeError, ValueError, AttributeError):
            return None
    if r is None:
        return (2, None)
    lo = bound(r.lower)
    return (2 if lo is None else lo, bound(r.upper))


def _explain(rows, values):
    """A number per capture (rows) as ('c', v) when all equal, else ('e', k, coef) with rows[r] = coef *
    values[r][k] for every capture r; None when no size expression explains it."""
    if all(v == rows[0] for v in rows):
        return ("c", rows[0])
    for k in range(len(values[0])):
        x0 = values[0][k]
        if x0 == 0 or rows[0] % x0:
            continue
        c = rows[0] // x0
        if c and all(values[r][k] and rows[r] % values[r][k] == 0 and rows[r] // values[r][k] == c
                     for r in range(1, len(rows))):
            return ("e", k, c)
    return None


def _at(rule, vals):
    return rule[1] if rule[0] == "c" else rule[2] * vals[rule[1]]


def _is_cpu_0dim(v):
    return isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0


def _is_cpu_scalar(v):
    """A Python float Dynamo made a graph input: a CPU 0-dim float64 tensor. (Other CPU 0-dim tensors,
    an optimizer's step count say, are the user's tensors, which the graph may read back or mutate.)"""
    return _is_cpu_0dim(v) and v.dtype == torch.float64


def _read_only(node):
    """Whether the graph only reads this placeholder: every user is a function that does not mutate
    its arguments, and the graph does not return it."""
    for u in node.users:
        if u.op != "call_function":
            return False
        t = u.target
        if isinstance(t, torch._ops.OpOverload) and not t._schema.is_mutable:
            continue
        if getattr(t, "__module__", "") != "_operator":  # operator.getitem and the like read only
            return False
    return True


def _scalar_inputs(gm):
    """Positions of the placeholders that are CPU 0-dim tensors a program takes on the device: Python
    scalars Dynamo made graph inputs (a float that changes between calls: a learning rate, a dropout
    p), and a model's own CPU 0-dim tensors that the graph only reads (transformers' static KV cache
    keeps each layer's filled length in one and copies it to the device in the graph). They are given
    to the program as 0-dim tpu tensors, so a new value is new data, not a new capture. (One the graph
    reads as a number, with .item(), then makes the capture fail: such a graph runs eagerly.)"""
    return frozenset(i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")
                     if _is_cpu_scalar(n.meta.get("val")) or (_is_cpu_0dim(n.meta.get("val")) and _read_only(n)))


def _graph_device(gm):
    """The tpu device of the graph's tensor inputs; for a graph with none (factory ops alone:
    `torch.arange(n, device="tpu")`, masks built from positions), the one tpu device its values
    (node meta "val": results, intermediates, constants) are on. None when there is no tpu tensor
    input and its values name no tpu device or more than one."""
    from torch.utils._pytree import tree_leaves
    for n in gm.graph.nodes:
        v = n.meta.get("val") if n.op == "placeholder" else None
        if isinstance(v, torch.Tensor) and v.device.type == "tpu":
            return v.device
    found = None
    for n in gm.graph.nodes:
        for v in tree_leaves(n.meta.get("val")):
            if isinstance(v, torch.Tensor) and v.device.type == "tpu":
                d = v.device if v.device.index is not None else torch.device("tpu", torch.tpu.current_device())
                if found is not None and d != found:
                    return None
                found = d
    return found


def _names_current_device(gm):
    """Whether the graph's ops name the tpu device without an index (`device="tpu"`): they run on
    whichever device is current at the call."""
    from torch.utils._pytree import tree_leaves
    return any(isinstance(a, torch.device) and a.type == "tpu" and a.index is None
               for n in gm.graph.nodes if n.op == "call_function" for a in tree_leaves((n.args, n.kwargs)))


def _attr(gm, target):
    """What a get_attr node reads ("a.b.c": attributes of attributes)."""
    v = gm
    for part in target.split("."):
        v = getattr(v, part)
    return v


def _copy_graph(gm):
    """A copy of gm's graph to edit, and the map from gm's nodes to the copy's (gm itself stays as it
    was: AOTAutograd's cache may pickle it)."""
    graph = torch.fx.Graph()
    env = {}
    graph.output(graph.graph_copy(gm.graph, env))
    return graph, env


def _fold_cpu_constants(gm):
    """The graph with its CPU work on constants done: every node that computes CPU tensors from CPU
    tensor constants alone (get_attr, or none: a factory with constant arguments; no graph input, no
    random or mutating op) is evaluated now, and what the rest of the graph reads of them becomes a
    constant on the graph's device (a CPU tensor
    and a tpu tensor are read alike by the ops that mix them: 0-dim operands, indices, copies to the
    device). Returns gm itself when there is nothing to fold, else a new GraphModule over a copy of
    its graph (gm is left as it was: AOTAutograd's cache may pickle it)."""
    import operator
    from torch.utils._pytree import tree_leaves, tree_map
    dev = _graph_device(gm)
    if dev is None:
        return gm
    values = {}

    def cpu_tensors_only(v):
        leaves = tree_leaves(v)
        return bool(leaves) and all(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in leaves)

    for node in gm.graph.nodes:
        if node.op == "get_attr":
            try:
                v = _attr(gm, node.target)
            except AttributeError:
                continue
            if isinstance(v, torch.Tensor) and v.device.type == "cpu":
                values[node] = v
            continue
        if node.op != "call_function":
            continue
        # (a node with no inputs at all is a factory of constants: scalar_tensor(2.0) for a pow)
        if any(a not in values for a in node.all_input_nodes) or not cpu_tensors_only(node.meta.get("val")):
            continue
        t = node.target
        if t is operator.getitem:
            pass
        elif not isinstance(t, torch._ops.OpOverload) or t._schema.is_mutable or \
                torch.Tag.nondeterministic_seeded in t.tags:
            continue
        args, kwargs = tree_map(lambda a: values[a] if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs))
        try:
            values[node] = t(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - left to run in the graph (eagerly, see _makes_cpu_tensors)
            _log.info("tpu compile: graph %s: %s on constants not folded: %s", gm._get_name(), t, e)
    folded = [n for n in values if n.op == "call_function"]
    if not folded:
        return gm
    graph, env = _copy_graph(gm)
    consts = {}
    for old in folded:
        v = values[old]
        if not isinstance(v, torch.Tensor) or all(u in values for u in old.users):
            continue  # a tuple (its getitems are read instead), or read only by other folded nodes
        name = f"_tpu_folded{len(consts)}"
        consts[name] = v.to(dev)
        with graph.inserting_before(env[old]):
            attr = graph.get_attr(name)
        attr.meta["val"] = consts[name]
        env[old].replace_all_uses_with(attr)
    graph.eliminate_dead_code()
    root = {}
    for n in graph.nodes:
        if n.op == "get_attr" and n.target not in root:
            root[n.target] = consts[n.target] if n.target in consts else _attr(gm, n.target)
        elif n.op == "call_module" and n.target not in root:
            root[n.target] = gm.get_submodule(n.target)
    out = torch.fx.GraphModule(root, graph, class_name=gm.__class__.__name__)
    out.meta.update(gm.meta)
    _log.info("tpu compile: graph %s: %d CPU ops on constants done at compile time", gm._get_name(), len(folded))
    return out


def _without_idle_rng_state(gm):
    """gm without the generator-state wrappers around ops that draw nothing. Activation checkpointing
    makes AOTAutograd wrap every random-tagged op of a recomputed region in run_and_save_rng_state
    (forward) and run_with_rng_state (backward, from the saved state; see _install_rng_state_ops), SDPA
    among them for its dropout_p even at 0. The state is a CPU tensor, which makes both graphs run
    eagerly; for an op whose tpu kernel never touches the generator the wrapper changes nothing, so the
    op is called directly and the state saved is an empty tpu tensor the backward ignores. gm itself
    when there is none (else a copy: AOTAutograd's cache may pickle gm)."""
    import operator
    from torch._prims import rng_prims
    save, run_with = rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state

    def idle(n):
        if n.op != "call_function" or n.target not in (save, run_with):
            return False
        op = n.args[0] if n.target is save else n.args[1]
        # tagged random for a dropout argument, yet the runtime's kernel takes no generator (the fused
        # attention kernels refuse a nonzero dropout_p); an op without a kernel of ours keeps its wrappers
        return isinstance(op, torch._ops.OpOverload) and _C._op_draws_random(op._opname) is False

    if not any(idle(n) for n in gm.graph.nodes):
        return gm
    dev = _graph_device(gm)
    if dev is None:
        return gm
    graph, env = _copy_graph(gm)
    for old in [n for n in gm.graph.nodes if idle(n)]:
        n = env[old]
        op, args = (n.args[0], n.args[1:]) if n.target is save else (n.args[1], n.args[2:])
        with graph.inserting_before(n):
            call = graph.call_function(op, tuple(args), dict(n.kwargs))
        if n.target is run_with:
            call.meta["val"] = n.meta.get("val")
            n.replace_all_uses_with(call)
        else:
            call.meta["val"] = n.meta["val"][1] if "val" in n.meta else None
            with graph.inserting_before(n):
                state = graph.call_function(torch.ops.aten.empty.memory_format, ([0],),
                                            {"dtype": torch.uint8, "device": dev})
            state.meta["val"] = torch.empty(0, dtype=torch.uint8, device="meta")
            for u in list(n.users):
                if u.op != "call_function" or u.target is not operator.getitem:
                    return gm  # a use not foreseen: keep the wrappers (the graphs then run eagerly)
                u.replace_all_uses_with(state if u.args[1] == 0 else call)
                graph.erase_node(u)
        graph.erase_node(n)
    out = torch.fx.GraphModule(gm, graph, class_name=gm.__class__.__name__)
    out.meta.update(gm.meta)
    _log.info("tpu compile: graph %s: generator-state wrappers removed around ops that draw nothing", gm._get_name())
    return out


def _makes_cpu_tensors(gm, scalars):
    """Whether the graph computes on the CPU. Work that only follows from the scalar inputs (the
    positions _scalar_inputs gives: a cast of the scalar, say) moves to the device with them, so it
    does not count."""
    from torch.utils._pytree import tree_leaves
    moved = set()
    for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
        if i in scalars:
            moved.add(node)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
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
        if not _same_layouts(n.meta.get("val"), [getattr(x, "meta", {}).get("val") for x in first]):
            continue  # a result broadcast past its first-list tensor (NAdam's 0-dim mu product times a state), or promoted
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


def _same_layouts(results, firsts):
    """Whether each result (node meta "val") has the shape, strides, dtype and device of the tensor in
    the same place of the first list: what writing it into that tensor in place needs."""
    if not isinstance(results, (list, tuple)) or len(results) != len(firsts):
        return False
    return all(isinstance(r, torch.Tensor) and isinstance(f, torch.Tensor) and r.shape == f.shape and
               r.stride() == f.stride() and r.dtype == f.dtype and r.device == f.device
               for r, f in zip(results, firsts))


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


# TORCH_TPU_COMPILE_SIZES=0 keeps a program per size for graphs with symbolic sizes (comparisons).
_SIZES_AT_LAUNCH = os.environ.get("TORCH_TPU_COMPILE_SIZES", "1") != "0"

# TORCH_TPU_COMPILE_IN_PLACE=0 keeps AOTAutograd's functional graphs as they come (comparisons).
_IN_PLACE = os.environ.get("TORCH_TPU_COMPILE_IN_PLACE", "1") != "0"


_aot_backend = None


# torch.compile's modes: each compiles the same program here (it is one launch already, what
# "reduce-overhead" asks CUDA graphs for; there is no kernel autotuning to turn on).
_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _check_compile_args(mode, options, unexpected):
    if unexpected:
        raise TypeError(f"torch.compile(backend='tpu'): unexpected argument(s) {sorted(unexpected)}")
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"torch.compile(backend='tpu'): unknown mode {mode!r}; the modes are "
                           f"{', '.join(repr(m) for m in _MODES)}")
    if options:
        raise RuntimeError(f"torch.compile(backend='tpu') takes no options, got {sorted(options)!r} (options= "
                           "sets Inductor's configuration; this backend is configured by TORCH_TPU_* "
                           "environment variables)")


def tpu_backend(gm, example_inputs, mode=None, options=None, **unexpected):
    """The `tpu` torch.compile backend: AOTAutograd graphs, run as device programs. torch.compile's
    `mode` is accepted (every mode compiles the same program); `options` are refused, naming them."""
    global _aot_backend
    _check_compile_args(mode, options, unexpected)
    _install_device_interface()
    _install_rng_state_ops()
    _old_heap_hidden.install()
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
    """Whether a graph Dynamo hands the default backend is tpu work: a tpu tensor among its inputs, its
    module's parameters or buffers, or its values (node meta: a graph with no tensor input whose
    factories make tpu tensors, `torch.arange(n, device="tpu")`)."""
    from torch.utils._pytree import tree_leaves

    def on_tpu(x):
        dev = getattr(x, "device", None)
        return isinstance(dev, torch.device) and dev.type == "tpu"

    if any(on_tpu(x) for x in inputs or ()):
        return True
    graph = getattr(model, "graph", None)
    if isinstance(graph, torch.fx.Graph) and any(
            on_tpu(v) for n in graph.nodes for k in ("example_value", "val") for v in tree_leaves(n.meta.get(k))):
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
    """Called when torch_tpu loads: cheap (Dynamo is not imported here). What
    Dynamo must know before it traces (_register_with_dynamo) is done now when
    Dynamo is already imported, else as its import ends (torch.compile
    imports it at its first call)."""
    _install_default_route()
    if "torch._dynamo" in sys.modules:
        _register_with_dynamo()
    elif not any(isinstance(f, _DynamoImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _DynamoImportHook())


class _DynamoImportHook:
    """A finder that steps aside for every module but torch._dynamo, whose
    loading it extends with _register_with_dynamo, then leaves sys.meta_path."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch._dynamo":
            return None
        import importlib.util
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None  # the import system's own search says why
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        upstream = loader.exec_module

        def exec_module(module):
            upstream(module)
            try:
                _register_with_dynamo()
            except Exception as e:  # noqa: BLE001 - Dynamo itself imported; the backend says so when used
                _log.warning("torch_tpu: registering with Dynamo failed: %s: %s", type(e).__name__, e)

        loader.exec_module = exec_module
        return spec


def _register_with_dynamo():
    from torch._dynamo.backends import registry
    if "tpu" not in registry._COMPILER_FNS:
        registry.register_backend(tpu_backend, name="tpu")
    _old_heap_hidden.install()
    _install_device_interface()
    _install_rng_state_ops()
    _install_capturable_optimizers()
    _install_static_address_check()


def _install_static_address_check():
    """Dynamo's optimizer tracing asks `_is_static_for_cudagraphs(p.grad)` of every gradient, and
    torch 2.13's function imports torch._inductor.cudagraph_trees before looking at the device: with
    it Inductor's compile_fx, lowering and kernel modules, about 0.3 s of a cold process's first
    compiled optimizer step that no backend but Inductor needs. Its answer for a tensor that is not
    CUDA is True whatever it imports; this answers that without the import and leaves CUDA tensors to
    upstream's function."""
    from torch._dynamo.variables import optimizer
    upstream = getattr(optimizer, "_is_static_for_cudagraphs", None)
    if upstream is None or getattr(upstream, "_torch_tpu", False):
        return

    def _is_static_for_cudagraphs(x):
        return True if not x.is_cuda else upstream(x)

    _is_static_for_cudagraphs._torch_tpu = True
    optimizer._is_static_for_cudagraphs = _is_static_for_cudagraphs


def _install_capturable_optimizers():
    """torch.compile(optimizer.step) keeps a tpu optimizer's state on the device, as Dynamo does for
    CUDA and XPU: when it first traces an optimizer whose state is not made yet, Dynamo sets
    capturable=True in each parameter group whose parameters are all on those devices, so the step
    counts are made on the device and the compiled step is device work (capturable=False keeps them
    as CPU tensors: a graph that updates CPU tensors runs eagerly). torch 2.13 tests `p.is_cuda or
    p.is_xpu`; this adds tpu, with upstream's conditions (a group with a capturable option, whose
    parameters have no state yet)."""
    from torch._dynamo.variables.optimizer import OptimizerVariable
    upstream = OptimizerVariable._set_capturable
    if getattr(upstream, "_torch_tpu", False):
        return

    def _set_capturable(self, tx):
        opt = self.value
        for group in opt.param_groups:
            params = group.get("params", [])
            if "capturable" in group and params and all(
                    isinstance(p, torch.Tensor) and p.device.type == "tpu" and p not in opt.state for p in params):
                group["capturable"] = True
        return upstream(self, tx)

    _set_capturable._torch_tpu = True
    OptimizerVariable._set_capturable = _set_capturable


def _tpu_index(args, kwargs):
    """The tpu device index of a random op's call (its device= or first tensor), or None."""
    from torch.utils._pytree import tree_leaves
    dev = kwargs.get("device")
    if dev is not None:
        dev = torch.device(dev)
        return (dev.index or 0) if dev.type == "tpu" else None
    t = next((a for a in tree_leaves(args) if isinstance(a, torch.Tensor)), None)
    return (t.device.index or 0) if t is not None and t.device.type == "tpu" else None


def _install_rng_state_ops():
    """Activation checkpointing under torch.compile: AOTAutograd's partitioner wraps each random op of a
    recomputed region in run_and_save_rng_state (forward: the generator's state, then the op) and
    run_with_rng_state (backward: the op again from that state), so the recomputation draws what the
    forward drew. torch 2.13 implements both for cpu, cuda, hpu and xpu only ("Backend not supported
    for tpu"); this adds tpu to their device switch (the BackendSelect kernel, the fake-tensor and
    tracing forms), with the generator state of torch_tpu.random. The graphs then hold the state as a
    CPU tensor and run eagerly (_makes_cpu_tensors), which gives the right masks."""
    from torch._C import DispatchKey
    from torch._higher_order_ops import utils as hop_utils
    from torch._prims import rng_prims
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode, track_tensor_tree
    from torch.utils import _pytree as pytree
    from torch_tpu import random as tpu_random
    save, run_with = rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state
    if getattr(save, "_torch_tpu", False):
        return

    def on_tpu(upstream):
        def select(op, *args, **kwargs):
            i = _tpu_index(args, kwargs)
            if i is None:
                return upstream(op, *args, **kwargs)
            return tpu_random.get_rng_state(i), op(*args, **kwargs)
        return select

    save_select = on_tpu(save.py_kernels[DispatchKey.BackendSelect])
    save.py_kernels[DispatchKey.BackendSelect] = save_select
    hop_utils.registered_hop_fake_fns[save] = on_tpu(hop_utils.registered_hop_fake_fns[save])
    upstream_proxy = save.python_key_table[ProxyTorchDispatchMode]

    def save_proxy(mode, op, *args, **kwargs):  # as upstream's, through the select above
        if _tpu_index(args, kwargs) is None:
            return upstream_proxy(mode, op, *args, **kwargs)
        out = save_select(op, *args, **kwargs)
        proxy_args = pytree.tree_map(mode.tracer.unwrap_proxy, (op, *args))
        proxy_kwargs = pytree.tree_map(mode.tracer.unwrap_proxy, kwargs)
        out_proxy = mode.tracer.create_proxy("call_function", save, proxy_args, proxy_kwargs)
        return track_tensor_tree(out, out_proxy, constant=None, tracer=mode.tracer)

    save.python_key_table[ProxyTorchDispatchMode] = save_proxy
    save._dispatch_cache.clear()

    upstream_with = run_with.py_kernels[DispatchKey.BackendSelect]

    def with_select(rng_state, op, *args, **kwargs):
        i = _tpu_index(args, kwargs)
        if i is None:
            return upstream_with(rng_state, op, *args, **kwargs)
        current = tpu_random.get_rng_state(i)
        tpu_random.set_rng_state(rng_state, i)
        try:
            return op(*args, **kwargs)
        finally:
            tpu_random.set_rng_state(current, i)

    run_with.py_kernels[DispatchKey.BackendSelect] = with_select
    run_with._dispatch_cache.clear()
    save._torch_tpu = True
