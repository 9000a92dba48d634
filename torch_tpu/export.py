"""torch_tpu.export: a `torch.export` program compiled for the tpu device into one file, its weights
included, that runs again from Python (`load`) or from C with no Python at all (`tpurt/export.h`;
`examples/run_export.c` is a complete program).

    ep = torch.export.export(model, (x,))
    torch_tpu.export.save(ep, "model.tpuexp")
    m = torch_tpu.export.load("model.tpuexp")      # weights on the device once
    y = m(x.to("tpu"))

What is saved is a device program (`tpurt/program.h`): the graph is run once on tpu while the queue
captures, exactly as `torch.compile(backend="tpu")` does, and the recorded kernels, their memory plan and
every tensor's place are written with the weights and a manifest (input and output names, the pytree
calling convention, `torch.export`'s dynamic ranges). Where torch.export made sizes dynamic
(`dynamic_shapes=`, `torch.export.Dim`), the program takes them at run time as torch.compile's programs
do: it is captured twice more at other sizes inside the ranges and its numbers become expressions of the
sizes (`tpurt_program_generalize`); a call at any size inside the ranges binds it (no capture, no build),
and one outside them raises, naming the input and size. From C (`tpurt_export_session_run`) an artifact
runs at the sizes it was saved with.
"""
import json

import torch
from torch.utils import _pytree as pytree

from . import _C, _compile
from ._compile import _at

WEIGHT, INPUT, OUTPUT = 0, 1, 2  # tpurt_export_role_t
FORMAT = "torch_tpu.export/1"


def _device(device):
    d = torch.device(device if device is not None else "tpu")
    if d.type != "tpu":
        raise ValueError(f"torch_tpu.export: device must be a tpu device, not {d}")
    return torch.device("tpu", d.index if d.index is not None else torch.tpu.current_device())


def _bound(v):
    """A range bound as an int, None for an infinite one (sympy's oo and torch's int_oo)."""
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def _fresh(t, device):
    """A contiguous copy on `device` in a storage of its own (a program input is a whole storage)."""
    return t.detach().to(device).clone(memory_format=torch.contiguous_format)


def _input_values(ep, flat_user):
    from torch.export.graph_signature import InputKind
    sig = ep.graph_signature
    user = iter(flat_user)
    out = []  # (name, role, tensor, placeholder kind, target)
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            v = next(user)
            if not isinstance(v, torch.Tensor):
                raise NotImplementedError(f"torch_tpu.export: user input {name} is a {type(v).__name__}; "
                                          "only tensor inputs are supported")
            out.append((name, INPUT, v, "user_input", None))
        elif spec.kind == InputKind.PARAMETER:
            out.append((name, WEIGHT, ep.state_dict[spec.target], "parameter", spec.target))
        elif spec.kind == InputKind.BUFFER:
            v = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
            out.append((name, WEIGHT, v, "buffer", spec.target))
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            out.append((name, WEIGHT, ep.constants[spec.target], "constant", spec.target))
        else:
            raise NotImplementedError(f"torch_tpu.export: graph input {name} of kind {spec.kind.name} "
                                      "(custom objects and tokens) is not supported")
    return out


def _implicit_decompositions():
    """The decompositions of the ops that are CompositeImplicitAutograd (diff, linear, layer_norm,
    scaled_dot_product_attention, ...): the eager path runs each as the ops it decomposes into, which are
    what the program records, so the graph is decomposed the same way and every size those ops make
    (diff's prepend: a cat of length n + 1) is a size of the graph, which a program taking its sizes at
    run time is explained by. Every other op stays as torch.export gave it."""
    from torch.export import default_decompositions
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return {op: fn for op, fn in default_decompositions().items() if has(op.name(), "CompositeImplicitAutograd")}


def _on_device(ep, dev):
    """ep (a copy of the caller's: run_decompositions made it) with what it puts on the CPU put on `dev`:
    a model exported on the CPU has the CPU written into its graph (GPT-2's and Llama's position
    `arange(..., device=cpu)`, masks, lifted constants), where the device program must make device
    tensors. torch.export's move_to_device_pass, on copies of the state and constant tables (the caller's
    program shares them)."""
    from torch.export.passes import move_to_device_pass
    ep._state_dict = dict(ep.state_dict)
    ep._constants = dict(ep.constants)
    ep = move_to_device_pass(ep, {"cpu": str(dev)})
    for m in ep.graph_module.modules():  # the pass edits nodes; the modules' code is made from them
        if isinstance(m, torch.fx.GraphModule):
            m.recompile()
    return ep


def save(ep, path, *, example_inputs=None, device=None):
    """Compiles `ep` (a torch.export.ExportedProgram) for the tpu device and writes it, weights included,
    to `path`. `example_inputs` (args, or (args, kwargs)) gives the sizes the program is made for;
    default: the ones `torch.export` saw."""
    from torch.export import ExportedProgram
    from torch.export.graph_signature import OutputKind
    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"torch_tpu.export.save: expected a torch.export.ExportedProgram, got {type(ep).__name__}")
    if example_inputs is None:
        example_inputs = ep.example_inputs
        if example_inputs is None:
            raise ValueError("torch_tpu.export.save: this ExportedProgram kept no example inputs; pass example_inputs")
    if not (isinstance(example_inputs, tuple) and len(example_inputs) == 2 and isinstance(example_inputs[1], dict)):
        example_inputs = (tuple(example_inputs), {})
    flat_user, in_spec = pytree.tree_flatten(example_inputs)
    # Functional ATen: a mutation of an input or buffer becomes an output the loader writes back (the
    # training IR torch.export gives by default keeps in-place ops on graph inputs, which a program
    # run on a copy of the caller's CPU tensor would lose).
    ep = ep.run_decompositions(_implicit_decompositions())
    dev = _device(device)
    ep = _on_device(ep, dev)
    entries = _input_values(ep, flat_user)
    values = [_fresh(v, dev) for _, _, v, _, _ in entries]

    torch.tpu.synchronize(dev)
    seed, before = _C._capture_begin(dev.index)
    try:
        with torch.no_grad():
            out = ep.graph_module(*values)
    except Exception:
        _C._capture_abort(dev.index)
        raise
    flat_out = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(flat_out) != len(ep.graph_signature.output_specs):
        _C._capture_abort(dev.index)
        raise RuntimeError("torch_tpu.export.save: the graph returned a different number of outputs than its "
                           "signature names")
    for o, spec in zip(flat_out, ep.graph_signature.output_specs):
        if not isinstance(o, torch.Tensor) or o.device != dev:
            _C._capture_abort(dev.index)
            what = type(o).__name__ if not isinstance(o, torch.Tensor) else f"a tensor on {o.device}"
            raise NotImplementedError(f"torch_tpu.export.save: output {spec.arg.name} is {what}; only tpu tensor "
                                      "outputs are supported")
    prog, _ = _C._capture_end(values, flat_out, seed, before, dev.index)
    dynamic = _take_sizes(ep.graph_module, prog, values, dev)

    table, inputs_meta = [], []
    for k, ((name, role, _, kind, target), v) in enumerate(zip(entries, values)):
        row = dict(name=name, role=role, dtype=v.dtype, sizes=list(v.shape), strides=list(v.stride()),
                   storage_offset=0, storage_bytes=v.untyped_storage().nbytes(), program_index=k,
                   from_input=False, writes_back=-1)
        if role == WEIGHT:
            row["data"] = v.cpu().reshape(-1).view(torch.uint8) if v.numel() else torch.empty(0, dtype=torch.uint8)
        table.append(row)
        inputs_meta.append(dict(name=name, kind=kind, target=target))
    weight_row = {m["target"]: i for i, m in enumerate(inputs_meta) if m["kind"] in ("buffer", "parameter")}
    user_row = {m["name"]: i for i, m in enumerate(inputs_meta) if m["kind"] == "user_input"}
    outputs_meta = []
    for (from_input, index, dtype, sizes, strides, offset), spec in zip(prog.out_specs(),
                                                                        ep.graph_signature.output_specs):
        nbytes = values[index].untyped_storage().nbytes() if from_input else prog.out_bytes()[index]
        writes_back = -1
        meta = dict(name=spec.arg.name, kind=spec.kind.name.lower(), target=spec.target)
        if spec.kind == OutputKind.BUFFER_MUTATION:
            writes_back = weight_row[spec.target]
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            meta["input"] = user_row[spec.target]
        elif spec.kind not in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT):
            raise NotImplementedError(f"torch_tpu.export.save: output {spec.arg.name} of kind {spec.kind.name}")
        table.append(dict(name=spec.arg.name, role=OUTPUT, dtype=dtype, sizes=list(sizes), strides=list(strides),
                          storage_offset=offset, storage_bytes=nbytes, program_index=index,
                          from_input=from_input, writes_back=writes_back))
        outputs_meta.append(meta)
    ranges = {str(sym): [_bound(r.lower), _bound(r.upper)] for sym, r in ep.range_constraints.items()}
    manifest = dict(format=FORMAT, in_spec=pytree.treespec_dumps(in_spec),
                    out_spec=pytree.treespec_dumps(ep.call_spec.out_spec), inputs=inputs_meta,
                    outputs=outputs_meta, range_constraints=ranges, torch=torch.__version__)
    blob = None
    if dynamic is not None:
        manifest["sizes"] = dynamic
        blob = _sizes_section(dynamic, table)
    elif ranges:
        import warnings
        warnings.warn("torch_tpu.export.save: torch.export made sizes dynamic, but the program could not take "
                      "them at run time and runs only at the sizes it was saved with (the torch_tpu logger "
                      "says why at level INFO)", stacklevel=2)
    _C._export_save(str(path), prog, table, json.dumps(manifest), blob)


def _take_sizes(gm, prog, values, dev):
    """Makes prog take its symbolic sizes at launch, as torch.compile's programs do (_compile._Sizes,
    tpurt_program_generalize): the graph is captured twice more at other sizes inside the exported
    ranges. Returns the manifest's "sizes" entry (how a call's sizes give the program's size values
    and the outputs' storages and views), or None: the program keeps the sizes it was saved with."""
    import sympy
    if not _compile._SIZES_AT_LAUNCH:
        return None
    sz = _compile._Sizes(gm)
    if not sz.ok or any(sz.readers[s][0] != "size" for s in sz.symbols):
        return None
    polys = []
    for e in sz.exprs:
        try:
            terms = sympy.Poly(e, *sz.symbols).terms()
        except sympy.PolynomialError:
            return None
        if any(not c.is_Integer for _, c in terms):
            return None  # a rational coefficient: the loader evaluates integer polynomials only
        polys.append([[int(c), [int(x) for x in exps]] for exps, c in terms])

    def record(pargs):
        seed, before = _C._capture_begin(dev.index)
        try:
            with torch.no_grad():
                out = gm(*pargs)
            flat = list(out) if isinstance(out, (tuple, list)) else [out]
        except Exception as e:  # noqa: BLE001 - the program keeps its sizes
            _C._capture_abort(dev.index)
            return str(e)
        try:
            return _C._capture_end(pargs, flat, seed, before, dev.index)[0], []
        except RuntimeError as e:
            return str(e)

    done = _compile._generalize_program(sz, prog, values, [], dev, record, "torch_tpu.export: sizes stay fixed")
    if done is None:
        return None
    point, _, rules = done
    byte_rules, view_rules, _ = rules
    return dict(symbols=[str(s) for s in sz.symbols], ranges=[list(r) for r in sz.ranges],
                readers=[list(sz.readers[s][1:]) for s in sz.symbols], exprs=polys, point=point,
                layout=[list(x) for x in sz.layout],
                out_bytes=[list(r) for r in byte_rules],
                out_views=[[fi, idx, str(dt).split(".")[-1], [list(r) for r in sizes], [list(r) for r in strides],
                            list(off)] for fi, idx, dt, sizes, strides, off in view_rules])


def _sizes_section(d, table):
    """The artifact's sizes section for C (tpurt/export.h, tpurt_export_session_run_at): the symbols,
    the size values as polynomials of them, and per table tensor the rules (value index or -1, coef,
    constant) of its sizes, strides, offset and storage bytes."""
    import struct
    ns = len(d["symbols"])
    out = [struct.pack("<I", ns)]
    for name, (lo, hi), saved in zip(d["symbols"], d["ranges"], d["point"]):
        nb = name.encode()
        out.append(struct.pack("<qqqI", lo, -1 if hi is None else hi, saved, len(nb)) + nb)
    out.append(struct.pack("<I", len(d["exprs"])))
    for poly in d["exprs"]:
        out.append(struct.pack("<I", len(poly)))
        for coef, exps in poly:
            out.append(struct.pack("<q", coef) + bytes(exps))

    def rule(r):  # ("c", v) / ("e", k, coef) of _compile._explain
        return struct.pack("<iqq", -1, 0, r[1]) if r[0] == "c" else struct.pack("<iqq", r[1], r[2], 0)

    layout = {}
    for i, what, dim, k, const in d["layout"]:
        layout[(i, what, dim)] = ("c", const) if k < 0 else ("e", k, 1)
    views = iter(d["out_views"])
    byte_rules = d["out_bytes"]
    for row in table:
        if row["role"] == WEIGHT:
            out.append(b"\0")
            continue
        nd = len(row["sizes"])
        if row["role"] == INPUT:
            i = row["program_index"]
            rules = [layout[(i, "size", k)] for k in range(nd)] + [layout[(i, "stride", k)] for k in range(nd)] + \
                [layout[(i, "offset", 0)], ("c", 0)]
        else:
            _, idx, _, sizes, strides, off = next(views)
            nbytes = ("c", 0) if row["from_input"] else byte_rules[idx]
            rules = list(sizes) + list(strides) + [off, nbytes]
        out.append(b"\1" + b"".join(rule(r) for r in rules))
    return b"".join(out)


class _SizeRules:
    """A loaded artifact's "sizes" entry: from a call's input sizes to the program's size values and
    its outputs' storages and views."""

    def __init__(self, d):
        self.symbols, self.ranges, self.readers = d["symbols"], d["ranges"], d["readers"]
        self.exprs, self.layout = d["exprs"], d["layout"]
        self.out_bytes = d["out_bytes"]
        self.out_views = [(fi, idx, getattr(torch, dt), sizes, strides, off)
                          for fi, idx, dt, sizes, strides, off in d["out_views"]]

    def values(self, inputs, names):
        """The size values at these program inputs (None for the weights), or ValueError naming the
        input and size that is outside what the program was exported for."""
        point = []
        for name, (lo, hi), (i, d) in zip(self.symbols, self.ranges, self.readers):
            x = inputs[i].shape[d]
            if x < max(2, lo) or (hi is not None and x > hi):
                raise ValueError(f"torch_tpu.export: input {names[i]} has size {x} in dim {d} ({name}); the "
                                 f"program was exported for {max(2, lo)} to {hi if hi is not None else 'any'}")
            point.append(x)
        vals = []
        for poly in self.exprs:
            v = 0
            for coef, exps in poly:
                t = coef
                for x, n in zip(point, exps):
                    t *= x ** n
                v += t
            vals.append(v)
        for i, what, d, k, const in self.layout:
            a = inputs[i]
            if a is None or what == "stride":
                continue  # weights are fixed; inputs are made contiguous by the loader
            want = vals[k] if k >= 0 else const
            got = a.shape[d] if what == "size" else 0
            if got != want:
                raise ValueError(f"torch_tpu.export: input {names[i]} has size {got} in dim {d}; with "
                                 f"{dict(zip(self.symbols, point))} the program takes {want}")
        return tuple(vals)


class ExportedTPUProgram:
    """A loaded artifact: call it as the exported module was called. Weights live on the device; mutated
    buffers are updated in place after each call, as the module's would be."""

    def __init__(self, path, device=None):
        self._art = _C._export_load(str(path))
        self.manifest = json.loads(self._art.manifest())
        if self.manifest.get("format") != FORMAT:
            raise RuntimeError(f"torch_tpu.export.load: {path} is format {self.manifest.get('format')!r}, "
                               f"this version reads {FORMAT!r}")
        self.device = _device(device)
        self._table = self._art.tensors()
        self._program = self._art.program(self.device.index)
        self._in_spec = pytree.treespec_loads(self.manifest["in_spec"])
        self._out_spec = pytree.treespec_loads(self.manifest["out_spec"])
        n_in = sum(1 for t in self._table if t["role"] != OUTPUT)
        self._inputs = [None] * n_in
        self._user = []  # (program index, table row) in call order
        user_position = {}  # table index of a user input -> its position in the call
        for i, row in enumerate(self._table):
            if row["role"] == WEIGHT:
                data = row["data"]
                t = data.view(row["dtype"]) if data.numel() else torch.empty(0, dtype=row["dtype"])
                self._inputs[row["program_index"]] = t.as_strided(row["sizes"], row["strides"]).to(self.device)
            elif row["role"] == INPUT:
                user_position[i] = len(self._user)
                self._user.append((row["program_index"], row))
        self._outputs = [row for row in self._table if row["role"] == OUTPUT]
        # per output: the user input it updates (a mutated input), by position in the call, or None
        self._mutates = [user_position[m["input"]] if m["kind"] == "user_input_mutation" else None
                         for m in self.manifest["outputs"]]
        # A program that takes sizes: its size rules, and a binding per size seen
        self._sizes = _SizeRules(self.manifest["sizes"]) if "sizes" in self.manifest else None
        if self._sizes is not None and not self._program.values():
            raise RuntimeError(f"torch_tpu.export.load: {path}: the manifest gives sizes, the program takes none")
        self._names = [None] * n_in
        for row in self._table:
            if row["role"] != OUTPUT:
                self._names[row["program_index"]] = row["name"]
        self._bindings = {}

    def _binding(self, inputs):
        vals = self._sizes.values(inputs, self._names)
        b = self._bindings.get(vals)
        if b is None:
            out_bytes = [_at(r, vals) for r in self._sizes.out_bytes]
            specs = [(fi, idx, dt, [_at(r, vals) for r in sizes], [_at(r, vals) for r in strides], _at(off, vals))
                     for fi, idx, dt, sizes, strides, off in self._sizes.out_views]
            b = self._bindings[vals] = self._program.bind(list(vals), out_bytes, specs)
        return b

    def weights(self):
        """{name in the graph: device tensor} of the parameters, buffers and constants."""
        return {row["name"]: self._inputs[row["program_index"]] for row in self._table if row["role"] == WEIGHT}

    def _fixed_sizes_note(self):
        if self._sizes is not None:
            return ""
        if self.manifest.get("range_constraints"):
            return (" (its sizes are fixed: torch.export made sizes dynamic, but the program could not take them "
                    "at run time; save warned why)")
        return " (its sizes are fixed: torch.export made no size of it dynamic)"

    def __call__(self, *args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            raise TypeError(f"torch_tpu.export: called with arguments structured as {spec}, the program takes "
                            f"{self._in_spec}")
        inputs = list(self._inputs)
        given = []
        for v, (k, row) in zip(flat, self._user):
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"torch_tpu.export: input {row['name']} must be a tensor, got {type(v).__name__}")
            if v.dtype != row["dtype"] or (self._sizes is None and list(v.shape) != row["sizes"]) or \
                    v.dim() != len(row["sizes"]):
                raise ValueError(f"torch_tpu.export: input {row['name']} is {v.dtype} {list(v.shape)}; the program "
                                 f"was saved for {row['dtype']} {row['sizes']}{self._fixed_sizes_note()}")
            t = v.to(self.device)
            if not t.is_contiguous() or t.storage_offset() != 0:
                t = t.clone(memory_format=torch.contiguous_format)
            inputs[k] = t.detach()
            given.append(v)
        outs = self._program.launch(inputs) if self._sizes is None else \
            self._program.launch(inputs, binding=self._binding(inputs))
        user_outs = []
        for o, row, mutates in zip(outs, self._outputs, self._mutates):
            if row["writes_back"] >= 0:
                w = self._inputs[self._table[row["writes_back"]]["program_index"]]
                if w.data_ptr() != o.data_ptr():
                    w.copy_(o)
            elif mutates is not None:
                given[mutates].copy_(o)
            else:
                user_outs.append(o)
        return pytree.tree_unflatten(user_outs, self._out_spec)


def load(path, device=None):
    """Loads an artifact `save` wrote; returns a callable with the exported module's calling convention."""
    return ExportedTPUProgram(path, device)
