"""Ops with no C kernel reach the device through PyTorch's own decompositions (DESIGN.md §2.3).

At import, every ATen op that only has backend kernels (no CompositeImplicit/Explicit kernel: such an
op would otherwise land in the C++ boxed fallback), has no C kernel in the runtime's op table, and has
an entry in torch._decomp.decomposition_table gets that decomposition registered as its PrivateUse1
kernel. The decomposition calls ops we do have; autograd is unaffected (it sits above PrivateUse1).
Views and factory functions are the C++ layer's and are never decomposed here.
TORCH_TPU_DECOMPOSITIONS=0 turns this off (to see which ops truly lack a kernel).
"""
import os
import threading

import torch

_COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd",
                   "CompositeExplicitAutogradNonFunctional")
_lib = None           # the torch.library.Library holding the registrations; kept alive for the process
_registered = []      # "aten::name.overload" of each registered decomposition
_explicit = []        # "aten::name.overload" of each explicit Python kernel (_decomp_more.register_kernels)
_tls = threading.local()


def _qualified_name(op) -> str:
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def kernel_of(op):
    """The C op-table entry the boxed fallback reaches for `op` (an OpOverload), or None: the runtime's
    one resolution rule (tpurt_op_resolve)."""
    from torch_tpu import _C
    return _C._op_resolve(op._schema.name, op._schema.overload_name)


def _has_tensor_argument(op) -> bool:
    for arg in op._schema.arguments:
        t = arg.type
        if isinstance(t, torch.OptionalType):
            t = t.getElementType()
        if isinstance(t, torch.ListType):
            t = t.getElementType()
            if isinstance(t, torch.OptionalType):
                t = t.getElementType()
        if isinstance(t, torch.TensorType):
            return True
    return False


def _replication_pad_backward(grad_output, self, padding):
    """replication_pad{1,2,3}d_backward (PyTorch has no decomposition for it): each padded position
    adds its gradient to the clamped source index, one dimension at a time (the map is separable).
    16-bit floats accumulate in float32 and round once."""
    g = grad_output
    if g.dtype in (torch.bfloat16, torch.float16):
        g = g.float()
    for i in range(len(padding) // 2):
        dim = self.dim() - 1 - i
        size = self.shape[dim]
        idx = torch.arange(-padding[2 * i], g.shape[dim] - padding[2 * i], device=g.device)
        idx = torch.clamp(idx, 0, size - 1)
        shape = list(g.shape)
        shape[dim] = size
        g = g.new_zeros(shape).index_add_(dim, idx, g)
    return g.to(grad_output.dtype)


# ---- coverage: data-dependent shapes and the long tail ----

def _unique_sorted_flat(flat, sorted_vals=None):
    """(values, perm, first-of-run mask) for a 1-D tensor: a stable sort, then the run starts."""
    vals, perm = flat.sort(stable=True) if sorted_vals is None else (sorted_vals, None)
    mask = torch.ones(vals.shape, dtype=torch.bool, device=vals.device)
    if vals.numel() > 1:
        mask[1:] = vals[1:] != vals[:-1]
    return vals, perm, mask


def _run_counts(mask, n):
    starts = mask.nonzero().flatten()
    ends = torch.cat([starts[1:], torch.full((1,), n, dtype=starts.dtype, device=starts.device)])
    return ends - starts


def _unique2(self, sorted=True, return_inverse=False, return_counts=False):
    """_unique2 / _unique: sorted unique values of the flattened input; inverse maps every input
    element to its value's position (input-shaped), counts the run lengths."""
    flat = self.reshape(-1)
    n = flat.numel()
    vals, perm, mask = _unique_sorted_flat(flat)
    out = vals[mask]
    long = dict(dtype=torch.long, device=self.device)
    inverse = torch.empty(0, **long)
    if return_inverse:
        inverse = torch.empty(n, **long)
        inverse[perm] = mask.long().cumsum(0) - 1
        inverse = inverse.reshape(self.shape)
    counts = _run_counts(mask, n) if return_counts else torch.empty(0, **long)
    return out, inverse, counts


def _unique(self, sorted=True, return_inverse=False):
    out, inverse, _ = _unique2(self, sorted, return_inverse, False)
    return out, inverse


def _unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    """Collapses runs of equal consecutive elements (dim=None: of the flattened input; else of
    slices along dim)."""
    long = dict(dtype=torch.long, device=self.device)
    if dim is None:
        flat = self.reshape(-1)
        n = flat.numel()
        _, _, mask = _unique_sorted_flat(flat, sorted_vals=flat)
        out = flat[mask]
        inverse = (mask.long().cumsum(0) - 1).reshape(self.shape) if return_inverse else torch.empty(0, **long)
    else:
        dim = dim % max(self.dim(), 1)
        n = self.shape[dim]
        mask = torch.ones(n, dtype=torch.bool, device=self.device)
        if n > 1:
            a, b = self.narrow(dim, 1, n - 1), self.narrow(dim, 0, n - 1)
            diff = (a != b).movedim(dim, 0).reshape(n - 1, -1)
            mask[1:] = diff.any(1) if diff.shape[1] else False
        out = self.index_select(dim, mask.nonzero().flatten())
        inverse = (mask.long().cumsum(0) - 1) if return_inverse else torch.empty(0, **long)
    counts = _run_counts(mask, n) if return_counts else torch.empty(0, **long)
    return out, inverse, counts


def _unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    """unique_dim: the distinct slices along dim, in lexicographic order of their elements. The order
    is CPU's: the kernel behind torch.ops.tpu._unique_dim_order performs CPU's std::sort with CPU's
    comparator, so slices holding NaN (which that comparator leaves unordered) come out where CPU puts
    them; runs of equal neighbours are merged (a slice with NaN equals none), inverse maps every slice
    to its unique one, counts are the run lengths."""
    if self.is_complex():  # CPU's dispatch refuses complex first, before any other check
        name = {torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat"}.get(self.dtype, "ComplexDouble")
        raise NotImplementedError(f'"unique_dim" not implemented for \'{name}\'')
    nd = self.dim()
    if nd == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
    dim %= nd
    n = self.shape[dim]
    long = dict(dtype=torch.long, device=self.device)
    zero_dims = list(self.shape).count(0)
    if n == 0:  # CPU's checks and result for empty tensors
        torch._check(zero_dims == 1,
                     lambda: "Number of zero sized dimensions is more than one, so unique cannot be applied ")
        return torch.empty_like(self), torch.empty(0, **long), torch.empty(0, **long)
    torch._check(zero_dims == 0,
                 lambda: "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
    rows = self.movedim(dim, 0).reshape(n, -1)
    perm = torch.ops.tpu._unique_dim_order(rows)
    srt = rows[perm]  # advanced indexing: it moves uint16/32/64 too, which index_select does not
    mask = torch.ones(n, dtype=torch.bool, device=self.device)
    if n > 1:
        mask[1:] = (srt[1:] != srt[:-1]).any(1)
    out = self.movedim(dim, 0)[perm[mask]].movedim(0, dim)  # CPU's layout: the slices stacked, moved to dim
    inverse = torch.empty(0, **long)
    if return_inverse:
        inverse = torch.empty(n, **long)
        inverse[perm] = mask.long().cumsum(0) - 1
    counts = _run_counts(mask, n) if return_counts else torch.empty(0, **long)
    return out, inverse, counts


def _matrix_exp(self):
    """linalg_matrix_exp: scaling and squaring with a [13/13] Pade approximant (Higham 2005),
    through matmul and linalg.solve; 16-bit floats compute in float32."""
    a = self.float() if self.dtype in (torch.bfloat16, torch.float16) else self
    if a.shape[-1] == 0:
        return self.clone()
    b = [64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800.,
         129060195264000., 10559470521600., 670442572800., 33522128640., 1323241920.,
         40840800., 960960., 16380., 182., 1.]
    norm = a.abs().sum(-2).amax(-1)  # 1-norm of each matrix
    theta13 = 5.371920351148152
    s = torch.clamp(torch.ceil(torch.log2(norm / theta13)), min=0).nan_to_num(0)
    a = a / torch.pow(2.0, s).to(a.dtype)[..., None, None]
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand_as(a)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = torch.linalg.solve(v - u, v + u)
    smax = int(s.max().item()) if s.numel() else 0
    for i in range(smax):  # square each matrix s times (those needing fewer keep their value)
        r = torch.where((s > i)[..., None, None], r @ r, r)
    return r.to(self.dtype)


def _coverage_decompositions() -> dict:
    aten = torch.ops.aten
    return {
        aten._unique2.default: _unique2,
        aten._unique.default: _unique,
        aten.unique_consecutive.default: _unique_consecutive,
        aten.unique_dim.default: _unique_dim,
        aten.linalg_matrix_exp.default: _matrix_exp,
    }


def _extra_decompositions() -> dict:
    """Decompositions of ours for ops PyTorch's table lacks, keyed like decomposition_table."""
    extra = {}
    for n in (1, 2, 3):
        packet = getattr(torch.ops.aten, f"replication_pad{n}d_backward")
        extra[packet.default] = _replication_pad_backward
        extra[packet.grad_input] = _replication_pad_backward  # adapted to out= by _make_kernel
    extra.update(_coverage_decompositions())
    from torch_tpu import _decomp_more
    extra.update(_decomp_more.decompositions())
    return extra


def _all_decompositions() -> dict:
    from torch._decomp import decomposition_table
    table = dict(_extra_decompositions())
    table.update(decomposition_table)  # PyTorch's own win where both exist
    from torch_tpu import _decomp_more
    table.update(_decomp_more.overrides())  # except where theirs differs from eager CPU
    from torch_tpu import _modules
    table.update(_modules.overrides())
    return table


def candidates(kernel=kernel_of) -> "list[tuple[object, object]]":
    """(OpOverload, decomposition) pairs to register, given kernel(op) -> the op's C kernel or None."""
    has_key = torch._C._dispatch_has_kernel_for_dispatch_key
    out = []
    for op, decomp in _all_decompositions().items():
        if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            continue
        name = _qualified_name(op)
        if any(has_key(name, k) for k in _COMPOSITE_KEYS):
            continue  # PyTorch itself decomposes it above the backend
        if has_key(name, "PrivateUse1"):
            continue  # the C++ layer has a dedicated kernel (views, factories, copies)
        if op.is_view or not _has_tensor_argument(op):
            continue  # views and factory functions are handled natively
        if kernel(op) is not None:
            continue  # a C kernel exists: the boxed fallback reaches it
        out.append((op, decomp))
    return out


_warned_cpu = set()


def _cpu_fallback(op, name, args, kwargs):
    """Runs `op` on the CPU for the opted-in fallback: tpu tensors are copied in, written (aliased)
    arguments copied back, new results moved to tpu. Only reached when a decomposition loops back to
    its own op (e.g. a reference implementation that maps onto the same aten op)."""
    import warnings
    from torch.utils._pytree import tree_map

    if name not in _warned_cpu:
        _warned_cpu.add(name)
        warnings.warn(f"torch_tpu: {name} has no tpu kernel; running it on the CPU "
                      f"(TORCH_TPU_CPU_FALLBACK=1). Shown once per op.", UserWarning, stacklevel=3)

    def to_cpu(x):
        return x.cpu() if isinstance(x, torch.Tensor) and x.device.type == "tpu" else x

    cpu_args, cpu_kwargs = tree_map(to_cpu, args), tree_map(to_cpu, kwargs)
    result = op(*cpu_args, **cpu_kwargs)
    written = {}  # id(cpu tensor the op wrote) -> the tpu tensor it stands for
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        orig = kwargs[arg.name] if arg.name in kwargs else (args[i] if i < len(args) else None)
        new = cpu_kwargs[arg.name] if arg.name in cpu_kwargs else (cpu_args[i] if i < len(cpu_args) else None)
        if isinstance(orig, torch.Tensor) and orig.device.type == "tpu":
            if orig.shape != new.shape:
                orig.resize_(new.shape)
            orig.copy_(new)
            written[id(new)] = orig
    device = _tpu_device_of(args, kwargs)
    moved = []
    for r in (result if isinstance(result, tuple) else (result,)):
        if id(r) in written:
            moved.append(written[id(r)])
        elif isinstance(r, torch.Tensor):
            moved.append(r.to(device))
        else:
            moved.append(r)
    return tuple(moved) if isinstance(result, tuple) else moved[0]


def _tpu_device_of(args, kwargs):
    from torch.utils._pytree import tree_leaves
    for x in tree_leaves((args, kwargs)):
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return x.device
    return torch.device("tpu")


def _out_arg_names(op) -> "list[str]":
    return [a.name for a in op._schema.arguments if a.is_out]


def _functional_overload(op):
    """The overload of `op`'s packet whose arguments are `op`'s minus its out= arguments (e.g.
    reflection_pad1d.default for reflection_pad1d.out), or None."""
    want = [(a.name, str(a.type)) for a in op._schema.arguments if not a.is_out]
    packet = getattr(torch.ops.aten, op._schema.name.split("::", 1)[1], None)
    if packet is None:
        return None
    for overload_name in packet.overloads():
        cand = getattr(packet, overload_name)
        if cand is op or _out_arg_names(cand):
            continue
        if [(a.name, str(a.type)) for a in cand._schema.arguments] == want:
            return cand
    return None


def _adapt_out_overload(op, decomp):
    """For an out= overload, a decomposition that computes the functional result and copies it into
    the out tensors (resizing them as PyTorch's resize_output does). PyTorch's out= decompositions are
    written for tracing: e.g. pw_cast_for_opmath wrapped around out_wrapper casts a bf16 `out` to a
    float32 copy, writes that copy and never the caller's tensor (bf16 reflection_pad1d.out returned
    uninitialised memory), and some are registered under the functional signature (no grad_input=).
    Returns `decomp` unchanged for a functional op or when no functional decomposition exists."""
    out_names = _out_arg_names(op)
    if not out_names:
        return decomp
    functional = _functional_overload(op)
    fdecomp = _all_decompositions().get(functional) if functional is not None else None
    if fdecomp is None or len(functional._schema.returns) != len(out_names):
        return decomp

    def out_kernel(*args, **kwargs):
        outs = [kwargs.pop(n) for n in out_names]
        result = fdecomp(*args, **kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        if len(results) != len(outs):
            raise RuntimeError(f"torch_tpu: decomposition of {_qualified_name(op)} returned "
                               f"{len(results)} results for {len(outs)} out= tensors")
        for o, r in zip(outs, results):
            if o.shape != r.shape:
                o.resize_(r.shape)
            o.copy_(r)
        return outs[0] if len(outs) == 1 else tuple(outs)

    return out_kernel


# Ops whose CPU kernels lay a 4-D/5-D result out in their input's suggested memory format
# (channels_last / channels_last_3d), a fresh one or a given out= of the right size (restrided, as
# CPU's structured kernels do); their decompositions give contiguous results. The input is self, or
# a backward's second argument.
_INPUT_FORMAT_OPS = frozenset(
    ["aten::max_pool3d_with_indices"]
    + [f"aten::{kind}_pad{n}d{ovl}" for kind in ("reflection", "replication") for n in (2, 3)
       for ovl in ("", ".out", "_backward", "_backward.grad_input")])


def _input_format(name, args):
    """channels_last(_3d) where the op's input is laid out so (and not also contiguous), else None."""
    ref = args[1] if "_backward" in name else args[0]
    if not isinstance(ref, torch.Tensor) or ref.dim() not in (4, 5):
        return None
    fmt = torch.channels_last if ref.dim() == 4 else torch.channels_last_3d
    return fmt if ref.is_contiguous(memory_format=fmt) and not ref.is_contiguous() else None


def _in_input_format(name, inner):
    def kernel(*args, **kwargs):
        fmt = _input_format(name, args)
        if fmt is None:
            return inner(*args, **kwargs)
        nd = 4 if fmt is torch.channels_last else 5
        for v in kwargs.values():  # out= tensors: restrided before they are written
            if isinstance(v, torch.Tensor) and v.dim() == nd and not v.is_contiguous(memory_format=fmt):
                v.resize_(v.shape, memory_format=fmt)
        result = inner(*args, **kwargs)

        def relayout(t):
            if isinstance(t, torch.Tensor) and t.dim() == nd and not t.is_contiguous(memory_format=fmt):
                return t.contiguous(memory_format=fmt)
            return t
        return tuple(relayout(t) for t in result) if isinstance(result, tuple) else relayout(result)
    return kernel


def _make_kernel(op, decomp):
    name = _qualified_name(op)
    decomp = _adapt_out_overload(op, decomp)
    if name in _INPUT_FORMAT_OPS:
        decomp = _in_input_format(name, decomp)

    def kernel(*args, **kwargs):
        active = getattr(_tls, "active", None)
        if active is None:
            active = _tls.active = set()
        if name in active:
            # The decomposition reached the op it decomposes (it maps onto the same aten op): there is
            # no kernel underneath. Do what the C++ fallback does for an op without a kernel.
            from torch_tpu import _C
            if _C._get_cpu_fallback():
                return _cpu_fallback(op, name, args, kwargs)
            raise NotImplementedError(
                f"torch_tpu: the operator '{name}' has no kernel for the tpu device (its PyTorch "
                f"decomposition maps back onto it). Set TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU "
                f"(slow: copies to host and back).")
        active.add(name)
        try:
            return decomp(*args, **kwargs)
        finally:
            active.discard(name)

    kernel.__name__ = f"tpu_decomposition_{name.replace('::', '_').replace('.', '_')}"
    return kernel


def register() -> int:
    """Registers the decompositions (once per process); returns how many were registered."""
    global _lib
    if _lib is not None:
        return len(_registered)
    if os.environ.get("TORCH_TPU_DECOMPOSITIONS", "1") == "0":
        _lib = torch.library.Library("aten", "IMPL")
        return 0
    lib = torch.library.Library("aten", "IMPL")
    for op, decomp in candidates():
        lib.impl(op, _make_kernel(op, decomp), "PrivateUse1")
        _registered.append(_qualified_name(op))
    from torch_tpu import _decomp_more
    _explicit.extend(_decomp_more.register_kernels(lib))
    from torch_tpu import _modules
    _explicit.extend(_modules.register_kernels(lib))
    _lib = lib
    return len(_registered)


def registered_ops() -> "list[str]":
    """The ops running through a decomposition on tpu in this process."""
    return list(_registered)


def explicit_ops() -> "list[str]":
    """The ops with a Python kernel of their own on tpu (eager CPU semantics the boxed path cannot
    give: addbmm_ resizing a broadcast self, ...), registered with the decompositions."""
    return list(_explicit)
