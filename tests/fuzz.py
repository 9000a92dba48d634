"""Differential fuzzer: random op programs, run on the tpu and on PyTorch CPU, compared.

A program is a list of Python statements over variables v0, v1, ...: tensors made from seeded CPU
data, elementwise/reduction/matmul/indexing/view ops, in-place ops on views (slices, transposes,
narrow, expand-then-clone), frees (`del`) and syncs (`S(v)` reads a value back, `sync()` waits for
the device). The generator builds it by running each candidate statement on CPU as it goes, so it
knows every live tensor's shape and dtype and which statements raise. The same program then runs on
the tpu in one eager mode, and at every read-back and at the end every live tensor is compared with
CPU's (allclose with a tolerance per dtype; integers and bool exactly). A statement CPU rejects is
followed by `sync()`: the tpu must raise the same exception type at that statement or, for an
error found by a kernel, at that sync (README: a kernel error surfaces at the next sync point).

    python -m tests.fuzz --seeds 0:2000 --mode strict,debug,defer_and_fuse
    scripts/fuzz.sh 0:2000            # the same; --asan runs it on the ASan+UBSan runtime

A failing seed prints a minimal reproducer: the program, cut down to the statements the failure
needs, as a Python script that runs it on both devices.
"""
import argparse
import math
import random
import sys
import time
import warnings

import torch

FLOATS = (torch.float32, torch.float64, torch.bfloat16)
INTS = (torch.int64, torch.int32)
SIZES = (0, 1, 1, 2, 2, 3, 3, 4, 5)

# Tolerance (rtol, atol) per dtype, relative to the largest magnitude of CPU's tensor: chains of ops
# and matmul accumulate in another order than CPU; stale or unwritten memory is far outside these.
TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-9, 1e-12), torch.bfloat16: (2e-2, 1e-2),
       torch.float16: (4e-3, 1e-3)}


def mk(seed, shape, dtype):
    """Seeded CPU data: floats on a 1/8 grid in [-4, 4] (exact in every float dtype, so sums and
    differences of them are exact), small integers, or bools."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randint(-32, 33, shape, generator=g).double() / 8).to(dtype)
    return torch.randint(-6, 7, shape, generator=g).to(dtype)


class Stmt:
    """One statement: its source, the variable it binds (or None), the variables it reads, and
    whether it is a read-back whose value is compared (`_chk = ...`)."""
    __slots__ = ("src", "defines", "uses", "check", "code")

    def __init__(self, src, defines=None, uses=(), check=False):
        self.src, self.defines, self.uses, self.check = src, defines, frozenset(uses), check
        self.code = compile(src, "<fuzz>", "exec")


class Var:
    """The generator's view of a live variable: its CPU value, whether it holds exact values (so a
    discontinuous op on it gives CPU's answer exactly: floor, comparisons, argmax...), and the least
    precise float dtype that took part in computing it: it is compared with that dtype's tolerance
    (one rounding of a bfloat16 intermediate is 0.4%, whatever dtype the result has)."""
    __slots__ = ("name", "t", "exact", "prec")

    def __init__(self, name, t, exact, prec):
        self.name, self.t, self.exact, self.prec = name, t, exact, prec


# ------------------------------------------------------------------------------------------------
# the generator

class Gen:
    def __init__(self, seed, n_stmts):
        self.rng = random.Random(seed)
        self.seed = seed
        self.n_stmts = n_stmts
        self.ns = _namespace("cpu")
        self.vars = {}       # name -> Var
        self.stmts = []
        self.counter = 0
        self.data_seed = seed * 1000
        self.prec = {}  # variable -> the least precise float dtype it was computed through

    # helpers
    def fresh(self):
        n = f"v{self.counter}"
        self.counter += 1
        return n

    def pick(self, pred=lambda v: True):
        c = [v for v in self.vars.values() if pred(v)]
        return self.rng.choice(c) if c else None

    def shape(self, ndim=None):
        nd = self.rng.choice((0, 1, 1, 2, 2, 2, 3, 3)) if ndim is None else ndim
        return tuple(self.rng.choice(SIZES) for _ in range(nd))

    def dtype(self):
        r = self.rng.random()
        if r < 0.55:
            return torch.float32
        if r < 0.65:
            return torch.float64
        if r < 0.72:
            return torch.bfloat16
        if r < 0.82:
            return torch.int64
        if r < 0.92:
            return torch.int32
        return torch.bool

    def mk_src(self, shape, dtype):
        self.data_seed += 1
        return f"mk({self.data_seed}, {tuple(shape)!r}, {_dt(dtype)})"

    def broadcast_partner(self, t):
        """A shape that broadcasts with t's: t's own, a suffix, or t's with some dims set to 1."""
        s = list(t.shape)
        r = self.rng.random()
        if r < 0.4:
            return tuple(s)
        if r < 0.6 and s:
            return tuple(s[self.rng.randint(0, len(s)):])
        if r < 0.95:
            return tuple(1 if self.rng.random() < 0.4 else d for d in s)
        return self.shape()  # usually incompatible: an error CPU raises

    # one statement: try it on CPU; keep it if CPU accepts it, or if it is an op whose error the
    # tpu must reproduce (then a sync follows)
    def emit(self, src, uses=(), defines=None, exact=False, may_fail=True):
        st = Stmt(src, defines, uses)
        try:
            exec(st.code, self.ns)
        except Exception:  # noqa: BLE001 - CPU's answer is the reference
            if not may_fail:
                return False
            self.stmts.append(st)
            self.stmts.append(Stmt("sync()"))
            return False
        self.stmts.append(st)
        prec = _loosest([self.vars[u].prec for u in uses if u in self.vars]
                        + [dt for dt in FLOATS if str(dt) in src])
        if defines:
            val = self.ns[defines]
            if isinstance(val, torch.Tensor):
                self.vars[defines] = Var(defines, val, exact, _loosest([prec, val.dtype]))
        elif uses and prec is not None and uses[0] in self.vars:  # an in-place op writes its first operand
            ptr = self.vars[uses[0]].t.untyped_storage().data_ptr()
            for x in self.vars.values():
                if x.t.untyped_storage().data_ptr() == ptr:
                    x.prec = _loosest([x.prec, prec])
        return True

    def taint(self, v):
        """v's values are no longer exact: nor are those of every variable sharing its storage."""
        ptr = v.t.untyped_storage().data_ptr()
        for x in self.vars.values():
            if x.t.untyped_storage().data_ptr() == ptr:
                x.exact = False

    def run(self):
        while len(self.stmts) < self.n_stmts:
            if len(self.vars) < 2 or self.rng.random() < 0.08:
                self.g_new()
                continue
            kind = self.rng.choices(
                ("unary", "binary", "scalar", "reduce", "matmul", "view", "inplace", "index", "copy",
                 "free", "sync", "shape"),
                (14, 14, 6, 10, 5, 12, 14, 8, 5, 4, 5, 4))[0]
            getattr(self, "g_" + kind)()
        for n, v in self.vars.items():
            self.prec[n] = _loosest([self.prec.get(n), v.prec])
        return self.stmts, sorted(self.vars, key=lambda n: int(n[1:]))

    # ---- statement kinds ----
    def g_new(self):
        n = self.fresh()
        dt = self.dtype()
        shp = self.shape()
        r = self.rng.random()
        if r < 0.8:
            self.emit(f"{n} = {self.mk_src(shp, dt)}.to(dev)", defines=n, exact=True)
        elif r < 0.9:
            k = self.rng.choice((0, 1, 3, 6))
            self.emit(f"{n} = torch.arange({k}, dtype={_dt(dt)}, device=dev)", defines=n, exact=True,
                      may_fail=False)
        else:
            v = self.rng.choice((0, 1, -2.5, 3)) if dt.is_floating_point else self.rng.choice((0, 1, -2))
            self.emit(f"{n} = torch.full({shp!r}, {v}, dtype={_dt(dt)}, device=dev)", defines=n, exact=True)

    def g_unary(self):
        v = self.pick()
        fl = v.t.dtype.is_floating_point
        if fl:
            smooth = ["neg", "abs", "relu", "square", "exp", "tanh", "sigmoid", "sin", "cos", "exp2",
                      "expm1", "log1p", "erf", "sqrt", "log", "reciprocal", "rsqrt", "atan", "sinh"]
            jumpy = ["floor", "ceil", "round", "trunc", "sign", "frac", "isnan", "signbit", "logical_not"]
        elif v.t.dtype == torch.bool:
            smooth, jumpy = [], ["logical_not", "bitwise_not", "abs"]
        else:
            smooth, jumpy = [], ["neg", "abs", "sign", "square", "bitwise_not", "logical_not", "relu"]
        ops = smooth + (jumpy if v.exact else [])
        if not ops:
            return
        op = self.rng.choice(ops)
        n = self.fresh()
        exact = v.exact and op in ("neg", "abs", "relu", "floor", "ceil", "round", "trunc", "sign", "isnan",
                                   "signbit", "logical_not", "bitwise_not", "frac")
        if op == "relu":
            self.emit(f"{n} = torch.relu({v.name})", (v.name,), n, exact)
        else:
            self.emit(f"{n} = torch.{op}({v.name})", (v.name,), n, exact)

    def g_binary(self):
        a = self.pick()
        b = self.pick(lambda x: x is not a and self.rng.random() < 0.5)
        if b is None:
            shp = self.broadcast_partner(a.t)
            dt = a.t.dtype if self.rng.random() < 0.8 else self.dtype()
            bsrc, buses, bexact, bdt = self.mk_src(shp, dt) + ".to(dev)", (), True, dt
        else:
            bsrc, buses, bexact, bdt = b.name, (b.name,), b.exact, b.t.dtype
        exact = a.exact and bexact
        smooth = ["add", "sub", "mul", "maximum", "minimum", "atan2", "hypot"]
        jumpy = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
                 "bitwise_and", "bitwise_or", "bitwise_xor", "where", "remainder", "fmod", "floor_divide",
                 "div"]
        op = self.rng.choice(smooth + (jumpy if exact else []))
        n = self.fresh()
        ex = exact and op not in ("mul", "atan2", "hypot", "div", "remainder", "fmod")
        if op == "where":
            c = self.mk_src(a.t.shape, torch.bool)
            self.emit(f"{n} = torch.where({c}.to(dev), {a.name}, {bsrc})", (a.name, *buses), n, ex)
        else:
            self.emit(f"{n} = torch.{op}({a.name}, {bsrc})", (a.name, *buses), n, ex)

    def g_scalar(self):
        a = self.pick()
        op = self.rng.choice(("+", "-", "*", "/", "**"))
        s = self.rng.choice((2, -1, 0.5, 3, 0, 2.5))
        if op == "**":
            s = self.rng.choice((2, 3, 0.5)) if a.t.dtype.is_floating_point else self.rng.choice((2, 3))
        n = self.fresh()
        ex = a.exact and op in ("+", "-") and float(s).is_integer()
        self.emit(f"{n} = {a.name} {op} {s}", (a.name,), n, ex)

    def g_reduce(self):
        a = self.pick()
        t = a.t
        fl = t.dtype.is_floating_point
        nd = t.dim()
        dim = self.rng.randint(-nd, nd - 1) if nd else self.rng.choice((None, 0, -1))
        kd = self.rng.random() < 0.3
        n = self.fresh()
        choices = ["sum", "amax", "amin", "cumsum", "any", "all", "count_nonzero"]
        if fl:
            choices += ["mean", "softmax", "log_softmax", "logsumexp", "std", "var", "norm", "prod",
                        "cumprod"]
        if a.exact:
            choices += ["argmax", "argmin", "max_dim", "min_dim", "sort", "topk"]
            if t.dtype != torch.bool and (t.numel() or fl):
                # CPU has no bool kernel (an empty bool input it lets through), and the median of an
                # empty integer tensor is NaN cast to an integer: undefined
                choices += ["kthvalue", "median"]
        op = self.rng.choice(choices)
        u = (a.name,)
        ex = a.exact and (op in ("amax", "amin", "any", "all", "count_nonzero", "argmax", "argmin", "max_dim",
                                 "min_dim", "sort", "topk", "kthvalue", "median")
                          or (op in ("sum", "cumsum") and t.dtype in (torch.float32, torch.float64)))
        d = dim if dim is not None else 0
        if op in ("sum", "amax", "amin", "mean", "logsumexp", "std", "var", "any", "all"):
            if dim is None and op not in ("logsumexp",):
                self.emit(f"{n} = torch.{op}({a.name})", u, n, ex)
            else:
                self.emit(f"{n} = torch.{op}({a.name}, {d}, keepdim={kd})", u, n, ex)
        elif op == "count_nonzero":
            self.emit(f"{n} = torch.count_nonzero({a.name}{'' if dim is None else f', {d}'})", u, n, ex)
        elif op == "norm":
            self.emit(f"{n} = torch.linalg.vector_norm({a.name})", u, n, False)
        elif op == "prod":
            self.emit(f"{n} = torch.prod({a.name}, {d})", u, n, False)
        elif op in ("cumsum", "cumprod", "softmax", "log_softmax"):
            self.emit(f"{n} = torch.{op}({a.name}, {d})", u, n, ex)
        elif op in ("argmax", "argmin"):
            self.emit(f"{n} = torch.{op}({a.name}{'' if dim is None else f', {d}, keepdim={kd}'})", u, n, ex)
        elif op in ("max_dim", "min_dim"):
            self.emit(f"{n} = torch.{op[:3]}({a.name}, {d}, keepdim={kd}).values", u, n, ex)
            if self.rng.random() < 0.5 and n in self.vars:
                m = self.fresh()
                self.emit(f"{m} = torch.{op[:3]}({a.name}, {d}).indices", u, m, ex)
        elif op == "sort":
            part = self.rng.choice(("values", "indices"))
            desc = self.rng.random() < 0.5
            self.emit(f"{n} = torch.sort({a.name}, {d}, descending={desc}, stable=True).{part}", u, n, ex)
        elif op == "topk":
            size = t.shape[d] if nd else 1
            k = self.rng.randint(0, size + (1 if self.rng.random() < 0.1 else 0))
            largest = self.rng.random() < 0.7
            self.emit(f"{n} = torch.topk({a.name}, {k}, {d}, largest={largest}).values", u, n, ex)
        elif op == "kthvalue":
            size = t.shape[d] if nd else 1
            k = self.rng.randint(1, max(1, size))
            self.emit(f"{n} = torch.kthvalue({a.name}, {k}, {d}).values", u, n, ex)
        elif op == "median":
            self.emit(f"{n} = torch.median({a.name})", u, n, ex)

    def g_matmul(self):
        dt = self.rng.choice((torch.float32, torch.float32, torch.float64, torch.int64, torch.bfloat16))
        m, k, nn = (self.rng.choice((0, 1, 2, 3, 5, 8, 17)) for _ in range(3))
        form = self.rng.choice(("mm", "bmm", "matmul_vec", "addmm", "t", "mismatch", "live"))
        n = self.fresh()
        ex = dt == torch.int64
        if form == "live":
            a = self.pick(lambda v: v.t.dim() >= 1 and v.t.dtype in (torch.float32, torch.float64, torch.int64))
            if a is None:
                return
            bshape = (a.t.shape[-1], self.rng.choice((1, 3)))
            self.emit(f"{n} = {a.name} @ {self.mk_src(bshape, a.t.dtype)}.to(dev)", (a.name,), n,
                      a.exact and a.t.dtype == torch.int64)
            return
        A = self.mk_src((m, k), dt) + ".to(dev)"
        B = self.mk_src((k, nn), dt) + ".to(dev)"
        if form == "mm":
            if dt == torch.int64 and self.rng.random() < 0.4:  # products past int64's range: they wrap
                A = f"({self.mk_src((m, k), dt)} << 40).to(dev)"
            self.emit(f"{n} = torch.mm({A}, {B})", (), n, ex)
        elif form == "bmm":
            b = self.rng.choice((0, 1, 3))
            self.emit(f"{n} = torch.bmm({self.mk_src((b, m, k), dt)}.to(dev), {self.mk_src((b, k, nn), dt)}.to(dev))",
                      (), n, ex)
        elif form == "matmul_vec":
            self.emit(f"{n} = torch.matmul({A}, {self.mk_src((k,), dt)}.to(dev))", (), n, ex)
        elif form == "addmm":
            self.emit(f"{n} = torch.addmm({self.mk_src((nn,), dt)}.to(dev), {A}, {B}, beta=2, alpha=3)", (), n, ex)
        elif form == "t":
            self.emit(f"{n} = {self.mk_src((k, m), dt)}.to(dev).t() @ {self.mk_src((nn, k), dt)}.to(dev).t()",
                      (), n, ex)
        else:
            self.emit(f"{n} = torch.mm({A}, {self.mk_src((k + 1, nn), dt)}.to(dev))", (), n, ex)

    def g_view(self):
        a = self.pick()
        t = a.t
        nd = t.dim()
        n = self.fresh()
        u = (a.name,)
        ops = ["unsqueeze", "view_flat", "reshape", "expand"]
        if nd >= 1:
            ops += ["slice", "slice", "narrow", "select", "squeeze", "flip_view", "chunk", "unbind", "diagonal_1d"]
        if nd >= 2:
            ops += ["t", "transpose", "permute", "diagonal", "slice2"]
        op = self.rng.choice(ops)
        d = self.rng.randint(0, nd - 1) if nd else 0
        size = t.shape[d] if nd else 1
        if op == "unsqueeze":
            self.emit(f"{n} = {a.name}.unsqueeze({self.rng.randint(-nd - 1, nd)})", u, n, a.exact)
        elif op == "view_flat":
            self.emit(f"{n} = {a.name}.view(-1)", u, n, a.exact)
        elif op == "reshape":
            numel = t.numel()
            shp = (-1,) if numel == 0 else self.rng.choice(((numel,), (1, numel), (-1, 1), (numel, 1, 1)))
            self.emit(f"{n} = {a.name}.reshape{shp!r}", u, n, a.exact)
        elif op == "expand":
            shp = (self.rng.choice((1, 2, 3)),) + tuple(t.shape)
            self.emit(f"{n} = {a.name}.expand{shp!r}", u, n, a.exact)
        elif op == "slice":
            lo = self.rng.randint(0, size)
            hi = self.rng.randint(lo, size)
            step = self.rng.choice((1, 1, 2, 3))
            idx = ", ".join([":"] * d + [f"{lo}:{hi}:{step}"])
            self.emit(f"{n} = {a.name}[{idx}]", u, n, a.exact)
        elif op == "slice2":
            self.emit(f"{n} = {a.name}[1:, ::2]", u, n, a.exact)
        elif op == "narrow":
            lo = self.rng.randint(0, size)
            ln = self.rng.randint(0, size - lo)
            self.emit(f"{n} = {a.name}.narrow({d}, {lo}, {ln})", u, n, a.exact)
        elif op == "select":
            i = self.rng.randint(-size, size) if size else 0  # size itself: out of range
            self.emit(f"{n} = {a.name}.select({d}, {i})", u, n, a.exact)
        elif op == "squeeze":
            self.emit(f"{n} = {a.name}.squeeze({d})", u, n, a.exact)
        elif op == "flip_view":
            self.emit(f"{n} = {a.name}.flip({d})", u, n, a.exact)
        elif op == "chunk":
            self.emit(f"{n} = {a.name}.chunk(2, {d})[0]", u, n, a.exact)
        elif op == "unbind":
            if size:
                self.emit(f"{n} = {a.name}.unbind({d})[{self.rng.randint(0, size - 1)}]", u, n, a.exact)
        elif op == "diagonal_1d":
            self.emit(f"{n} = {a.name}.movedim({d}, 0)", u, n, a.exact)
        elif op == "t":
            self.emit(f"{n} = {a.name}.mT", u, n, a.exact)
        elif op == "transpose":
            self.emit(f"{n} = {a.name}.transpose({d}, {self.rng.randint(0, nd - 1)})", u, n, a.exact)
        elif op == "permute":
            p = list(range(nd))
            self.rng.shuffle(p)
            self.emit(f"{n} = {a.name}.permute{tuple(p)!r}", u, n, a.exact)
        elif op == "diagonal":
            self.emit(f"{n} = {a.name}.diagonal(0, 0, 1)", u, n, a.exact)

    def g_inplace(self):
        a = self.pick()
        t = a.t
        fl = t.dtype.is_floating_point
        u = (a.name,)
        r = self.rng.random()
        if r < 0.35:  # with a broadcast source (may be another live variable, a view of the same base)
            b = self.pick(lambda x: self.rng.random() < 0.4)
            if b is not None and b is not a:
                src, uses, bex = b.name, (a.name, b.name), b.exact
            else:
                src, uses, bex = self.mk_src(self.broadcast_partner(t), t.dtype) + ".to(dev)", u, True
            op = self.rng.choice(("add_", "sub_", "mul_", "copy_", "maximum_", "clamp_min_"))
            if op == "maximum_":
                self.emit(f"{a.name}.copy_(torch.maximum({a.name}, {src}))", uses, None)
            elif op == "clamp_min_" and fl:
                self.emit(f"{a.name}.clamp_min_({src})", uses, None)
            elif op != "clamp_min_":
                self.emit(f"{a.name}.{op}({src})", uses, None)
            if op == "mul_" or not bex:
                self.taint(a)
        elif r < 0.6:
            s = self.rng.choice((2, -1, 3)) if not fl else self.rng.choice((2, -1, 0.5, 1.5))
            op = self.rng.choice(("add_", "mul_", "sub_", "fill_", "clamp_", "zero_", "neg_", "abs_"))
            if op in ("add_", "mul_", "sub_", "fill_"):
                self.emit(f"{a.name}.{op}({s})", u, None)
            elif op == "clamp_":
                self.emit(f"{a.name}.clamp_(-1, 2)", u, None)
            else:
                self.emit(f"{a.name}.{op}()", u, None)
            if op == "mul_" and not float(s).is_integer():
                self.taint(a)
        elif r < 0.75 and fl:
            op = self.rng.choice(("exp_", "tanh_", "sigmoid_", "relu_", "sin_"))
            self.emit(f"{a.name}.{op}()", u, None)
            if op != "relu_":
                self.taint(a)
        else:  # in-place through a view made on the spot
            if t.dim() == 0:
                self.emit(f"{a.name}.unsqueeze(0).mul_(2)", u, None)
                return
            d = self.rng.randint(0, t.dim() - 1)
            size = t.shape[d]
            lo = self.rng.randint(0, size)
            form = self.rng.choice(("narrow", "slice", "t", "expand", "select", "setitem"))
            if form == "narrow":
                self.emit(f"{a.name}.narrow({d}, {lo}, {size - lo}).add_(1)", u, None)
            elif form == "slice":
                idx = ", ".join([":"] * d + [f"{lo}::2"])
                self.emit(f"{a.name}[{idx}] = {self.rng.choice((0, 7, -3))}", u, None)
            elif form == "t" and t.dim() >= 2:
                self.emit(f"{a.name}.mT.sub_({self.mk_src((t.shape[-2],), t.dtype)}.to(dev))", u, None)
            elif form == "expand":
                # writing through an expanded view: CPU refuses (internal overlap)
                self.emit(f"{a.name}.unsqueeze(0).expand(2, *{a.name}.shape).add_(1)", u, None)
            elif form == "select" and size:
                self.emit(f"{a.name}.select({d}, {self.rng.randint(0, size - 1)}).fill_(5)", u, None)
            else:
                self.emit(f"{a.name}[...] = {a.name}.flip({d}).clone()", u, None)

    def g_index(self):
        a = self.pick(lambda v: v.t.dim() >= 1)
        if a is None:
            return
        t = a.t
        d = self.rng.randint(0, t.dim() - 1)
        size = t.shape[d]
        bad = self.rng.random() < 0.08
        hi = size if bad else size - 1
        n = self.fresh()
        u = (a.name,)
        lo = -size if self.rng.random() < 0.3 else 0
        idx = [self.rng.randint(lo, hi) for _ in range(self.rng.randint(0, 4))] if hi >= 0 else []
        if bad:
            idx.insert(self.rng.randint(0, len(idx)), size)
        I = f"torch.tensor({idx!r}, dtype=torch.int64, device=dev)"
        form = self.rng.choice(("index_select", "getitem", "gather", "mask", "index_add_", "index_put_",
                                "scatter_", "masked_fill_", "index_copy", "cat", "stack"))
        if form == "index_select":
            self.emit(f"{n} = torch.index_select({a.name}, {d}, {I})", u, n, a.exact)
        elif form == "getitem":
            self.emit(f"{n} = {a.name}[{', '.join([':'] * d + [I])}]", u, n, a.exact)
        elif form == "gather":
            ishape = list(t.shape)
            ishape[d] = self.rng.randint(0, 3)
            vals = f"torch.randint(0, {max(size, 1) + int(bad)}, {tuple(ishape)!r}, generator=torch.Generator().manual_seed({self.rng.randint(0, 99)}))"
            self.emit(f"{n} = torch.gather({a.name}, {d}, {vals}.to(dev))", u, n, a.exact)
        elif form == "mask":
            self.emit(f"{n} = {a.name}[{self.mk_src(t.shape, torch.bool)}.to(dev)]", u, n, a.exact)
        elif form == "index_add_" and not bad and t.dtype != torch.bool:
            k = self.rng.randint(0, 3)
            if size == 0:
                return
            ii = [self.rng.randint(0, size - 1) for _ in range(k)]
            sshape = list(t.shape)
            sshape[d] = k
            self.emit(f"{a.name}.index_add_({d}, torch.tensor({ii!r}, dtype=torch.int64, device=dev), "
                      f"{self.mk_src(sshape, t.dtype)}.to(dev))", u, None)
        elif form == "index_put_" and not bad:
            if size == 0 or torch._debug_has_internal_overlap(t) == 1:
                return  # the tpu refuses index_put_ into an expanded view, which CPU deprecates but runs
            ii = [self.rng.randint(0, size - 1) for _ in range(self.rng.randint(1, 3))]
            acc = self.rng.random() < 0.5 and t.dtype != torch.bool
            self.emit(f"{a.name}.index_put_(({'slice(None), ' * 0}torch.tensor({ii!r}, device=dev),), "
                      f"torch.tensor(3, dtype={_dt(t.dtype)}, device=dev), accumulate={acc})"
                      if d == 0 else
                      f"{a.name}[{', '.join([':'] * d + [f'torch.tensor({ii!r}, device=dev)'])}] = 2", u, None)
        elif form == "scatter_" and not bad and size:
            ishape = list(t.shape)
            ishape[d] = 1
            vals = f"torch.randint(0, {size}, {tuple(ishape)!r}, generator=torch.Generator().manual_seed({self.rng.randint(0, 99)}))"
            self.emit(f"{a.name}.scatter_({d}, {vals}.to(dev), {self.mk_src(ishape, t.dtype)}.to(dev))", u, None)
        elif form == "masked_fill_":
            self.emit(f"{a.name}.masked_fill_({self.mk_src(t.shape, torch.bool)}.to(dev), 1)", u, None)
        elif form == "index_copy" and not bad and size:
            ii = list(range(size))
            self.rng.shuffle(ii)
            self.emit(f"{n} = {a.name}.index_copy({d}, torch.tensor({ii!r}, device=dev), {a.name}.flip({d}))",
                      u, n, a.exact)
        elif form == "cat":
            b = self.pick(lambda v: v.t.dtype == t.dtype)
            self.emit(f"{n} = torch.cat([{a.name}, {b.name}], {d})", (a.name, b.name), n, a.exact and b.exact)
        elif form == "stack":
            self.emit(f"{n} = torch.stack([{a.name}, {a.name}.neg()], {self.rng.randint(0, t.dim())})", u, n,
                      a.exact)

    def g_copy(self):
        a = self.pick()
        n = self.fresh()
        form = self.rng.choice(("clone", "contiguous", "to", "expand_clone", "transpose_contig"))
        u = (a.name,)
        if form == "clone":
            self.emit(f"{n} = {a.name}.clone()", u, n, a.exact)
        elif form == "contiguous":
            self.emit(f"{n} = {a.name}.contiguous()", u, n, a.exact)
        elif form == "to":
            dt = self.dtype()
            if a.t.dtype.is_floating_point and not dt.is_floating_point and not a.exact:
                return  # NaN, inf or out-of-range floats cast to an integer: undefined (C and PyTorch)
            self.emit(f"{n} = {a.name}.to({_dt(dt)})", u, n, a.exact and dt != torch.bfloat16)
        elif form == "expand_clone":
            self.emit(f"{n} = {a.name}.unsqueeze(0).expand(3, *{a.name}.shape).clone()", u, n, a.exact)
        else:
            if a.t.dim() >= 2:
                self.emit(f"{n} = {a.name}.transpose(0, 1).contiguous()", u, n, a.exact)

    def g_shape(self):
        a = self.pick()
        n = self.fresh()
        form = self.rng.choice(("flip", "roll", "repeat", "tril", "pad"))
        u = (a.name,)
        nd = a.t.dim()
        if form == "flip" and nd:
            self.emit(f"{n} = torch.flip({a.name}, ({self.rng.randint(0, nd - 1)},))", u, n, a.exact)
        elif form == "roll" and nd:
            self.emit(f"{n} = torch.roll({a.name}, {self.rng.randint(-3, 3)}, {self.rng.randint(0, nd - 1)})",
                      u, n, a.exact)
        elif form == "repeat":
            self.emit(f"{n} = {a.name}.repeat({', '.join(['2'] + ['1'] * nd)})", u, n, a.exact)
        elif form == "tril" and nd >= 2:
            self.emit(f"{n} = torch.tril({a.name}, {self.rng.randint(-1, 1)})", u, n, a.exact)
        elif form == "pad" and nd >= 1 and a.t.dtype != torch.bool:
            self.emit(f"{n} = torch.nn.functional.pad({a.name}, (1, 2))", u, n, a.exact)

    def g_free(self):
        v = self.pick()
        self.stmts.append(Stmt(f"del {v.name}", uses=(v.name,)))
        exec(self.stmts[-1].code, self.ns)
        del self.vars[v.name]

    def g_sync(self):
        r = self.rng.random()
        if r < 0.25:
            self.stmts.append(Stmt("sync()"))
            return
        v = self.pick()
        self.prec[v.name] = _loosest([self.prec.get(v.name), v.prec])
        if r < 0.4 and v.t.numel() == 1:
            self.stmts.append(Stmt(f"_chk = {v.name}.item()", uses=(v.name,), check=True))
        elif r < 0.5:
            self.stmts.append(Stmt(f"_chk = {v.name}.tolist()", uses=(v.name,), check=True))
        else:
            self.stmts.append(Stmt(f"_chk = S({v.name})", uses=(v.name,), check=True))


_LOOSENESS = {torch.float64: 0, torch.float32: 1, torch.float16: 2, torch.bfloat16: 3}


def _loosest(dtypes):
    ds = [d for d in dtypes if d in _LOOSENESS]
    return max(ds, key=_LOOSENESS.get) if ds else None


def _dt(dtype):
    return str(dtype)  # "torch.float32"


# ------------------------------------------------------------------------------------------------
# running and comparing

def _sync_device(dev):
    if dev != "cpu":
        getattr(torch, torch.device(dev).type).synchronize()


def _namespace(dev):
    def S(x):
        return x.cpu() if dev != "cpu" else x.clone()
    return {"torch": torch, "dev": dev, "mk": mk, "S": S, "sync": lambda: _sync_device(dev)}


class Outcome:
    """What one run produced: per statement None (ran), or the exception; each read-back's value;
    the live variables at the end (CPU copies)."""

    def __init__(self):
        self.errors = []
        self.checks = {}
        self.final = {}
        self.final_error = None


def run_program(stmts, live, dev):
    warnings.filterwarnings("ignore", category=UserWarning)  # std() of one element, etc.: on both
    ns = _namespace(dev)
    out = Outcome()
    for i, st in enumerate(stmts):
        try:
            exec(st.code, ns)
            out.errors.append(None)
        except Exception as e:  # noqa: BLE001 - compared with CPU's
            out.errors.append(e)
            continue
        if st.check:
            val = ns.pop("_chk")
            out.checks[i] = val
    try:
        _sync_device(dev)
        for name in live:
            if name in ns:
                out.final[name] = ns[name].cpu() if dev != "cpu" else ns[name]
    except Exception as e:  # noqa: BLE001
        out.final_error = e
    return out


def _close(got, want, prec=None):
    """None when equal within tolerance, else a description of the first difference."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {type(got).__name__}"
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"shape/dtype {tuple(got.shape)} {got.dtype} vs CPU {tuple(want.shape)} {want.dtype}"
        if want.numel() == 0:
            return None
        if not want.dtype.is_floating_point and not want.dtype.is_complex:
            if torch.equal(got, want):
                return None
            bad = (got != want).nonzero()[0].tolist()
            return f"at {bad}: {got[tuple(bad)].item()} vs CPU {want[tuple(bad)].item()}"
        g, w = got.double(), want.double()
        nan_ok = torch.isnan(g) == torch.isnan(w)
        inf = torch.isinf(w)
        inf_ok = ~inf | (g == w)
        rtol, atol = TOL[_loosest([prec, want.dtype])]
        finite = torch.isfinite(w)
        scale = w[finite].abs().max().item() if finite.any() else 0.0
        diff = (g - w).abs()
        ok = nan_ok & inf_ok & (~finite | (diff <= atol + rtol * max(scale, 1.0)))
        if bool(ok.all()):
            return None
        bad = (~ok).nonzero()[0].tolist()
        return f"at {bad}: {g[tuple(bad)].item()!r} vs CPU {w[tuple(bad)].item()!r}"
    if isinstance(want, float) and isinstance(got, float):
        if math.isnan(want) and math.isnan(got):
            return None
        rtol = TOL[_loosest([prec, torch.float32])][0]
        return None if got == want or abs(got - want) <= rtol * max(1.0, abs(want)) else f"{got!r} vs CPU {want!r}"
    if isinstance(want, list):
        return _close(torch.tensor(got), torch.tensor(want), prec) if got != want else None
    return None if got == want else f"{got!r} vs CPU {want!r}"


def same_error(te, ce):
    """Whether the tpu's exception answers CPU's: the same type (gather/scatter out of range raise
    RuntimeError and index_select IndexError, as CPU; floor_divide on bool NotImplementedError and
    kthvalue over an empty dim IndexError, fallback_precheck.cpp)."""
    return isinstance(te, type(ce))


def compare(stmts, ref, got, loose=None):
    """The first way the tpu's run differs from CPU's, as (kind, message), or None. `loose` maps a
    variable to the float dtype whose tolerance it is compared with (default its own)."""
    loose = loose or {}
    i = 0
    n = len(stmts)
    while i < n:
        ce, te = ref.errors[i], got.errors[i]
        if ce is not None:
            # CPU raised: the tpu raises the same type here, or at the sync that follows
            if te is not None:
                if not same_error(te, ce):
                    return "error-type", (f"statement {i} `{stmts[i].src}`: tpu raised {type(te).__name__}: "
                                          f"{_short(te)}; CPU raised {type(ce).__name__}: {_short(ce)}")
            else:
                nxt = got.errors[i + 1] if i + 1 < n and stmts[i + 1].src == "sync()" else None
                if nxt is None:
                    return "no-error", (f"statement {i} `{stmts[i].src}`: CPU raised {type(ce).__name__}: "
                                        f"{_short(ce)}; the tpu raised nothing (at the call or the next sync)")
                if not same_error(nxt, ce):
                    return "error-type", (f"statement {i} `{stmts[i].src}`: tpu raised {type(nxt).__name__} "
                                          f"at the next sync: {_short(nxt)}; CPU raised {type(ce).__name__}: "
                                          f"{_short(ce)}")
                i += 1  # that sync raised, as expected
            i += 1
            continue
        if te is not None:
            return "spurious-error", (f"statement {i} `{stmts[i].src}`: tpu raised {type(te).__name__}: "
                                      f"{_short(te)}; CPU ran it")
        if i in ref.checks:
            if i not in got.checks:
                return "mismatch", f"statement {i} `{stmts[i].src}`: no value read back"
            msg = _close(got.checks[i], ref.checks[i], _loosest([loose.get(u) for u in stmts[i].uses]))
            if msg:
                return "mismatch", f"statement {i} `{stmts[i].src}`: {msg}"
        i += 1
    if got.final_error is not None:
        return "spurious-error", f"at the end: {type(got.final_error).__name__}: {_short(got.final_error)}"
    for name, want in ref.final.items():
        if name not in got.final:
            return "mismatch", f"{name} missing at the end"
        msg = _close(got.final[name], want, loose.get(name))
        if msg:
            return "mismatch", f"{name} at the end: {msg}"
    return None


def _short(e):
    s = str(e).strip().splitlines()
    return (s[0] if s else "")[:200]


def generate(seed, n_stmts=30):
    """(statements, variables live at the end, {variable: the float dtype whose tolerance applies})."""
    g = Gen(seed, n_stmts)
    stmts, live = g.run()
    return stmts, live, g.prec


def _live_after(stmts, ref):
    """Variables bound at the end of a CPU run of stmts (for a cut-down program)."""
    live = []
    for st, e in zip(stmts, ref.errors):
        if e is not None:
            continue
        if st.defines:
            live.append(st.defines)
        if st.src.startswith("del "):
            name = st.src[4:]
            if name in live:
                live.remove(name)
    return live


def check_program(stmts, live, dev, loose=None, ref=None):
    """Runs stmts on CPU (unless ref is given) and on dev in the current mode; the difference or None."""
    if ref is None:
        ref = run_program(stmts, live, "cpu")
    got = run_program(stmts, live, dev)
    return compare(stmts, ref, got, loose)


def minimize(stmts, dev, kind, loose=None):
    """Drops statements (with everything that reads what they bind) while the run still fails with
    the same kind of difference."""
    def fails(cand):
        try:
            ref = run_program(cand, [], "cpu")
            live = _live_after(cand, ref)
            ref = run_program(cand, live, "cpu")
            r = check_program(cand, live, dev, loose, ref)
        except Exception:  # noqa: BLE001 - a candidate that breaks the harness is not kept
            return False
        return r is not None and r[0] == kind

    cur = list(stmts)
    changed = True
    while changed:
        changed = False
        i = len(cur) - 1
        while i >= 0:
            drop = {i}
            defined = {cur[i].defines} - {None}
            for j in range(i + 1, len(cur)):
                if cur[j].uses & defined:
                    drop.add(j)
                    if cur[j].defines:
                        defined.add(cur[j].defines)
            cand = [s for j, s in enumerate(cur) if j not in drop]
            # a sync right after a dropped statement that raised goes with it
            if cand != cur and fails(cand):
                cur = cand
                changed = True
            i = min(i - 1, len(cur) - 1)
    return cur


def reproducer(stmts, mode, message):
    body = "\n".join("    " + s.src for s in stmts)
    return f'''# fuzz reproducer ({mode}): {message}
import torch
import torch_tpu
from tests.fuzz import mk, _namespace

torch_tpu.set_eager_mode("{mode}")

def program(dev):
    ns = _namespace(dev)
    mk, S, sync = ns["mk"], ns["S"], ns["sync"]
{body}
    sync()
    return {{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in locals().items()
            if k.startswith("v") or k == "_chk"}}

cpu, tpu = program("cpu"), program("tpu")
for k in cpu:
    print(k, "cpu:", cpu[k], "tpu:", tpu.get(k))
'''


def fuzz_one(seed, mode, dev="tpu", n_stmts=30, do_minimize=True):
    """Generates program `seed`, runs it on dev in `mode`; None when it matches CPU, else the
    report (with a minimal reproducer)."""
    import torch_tpu
    torch_tpu.set_eager_mode(mode)
    stmts, live, loose = generate(seed, n_stmts)
    try:
        r = check_program(stmts, live, dev, loose)
    finally:
        try:
            _sync_device(dev)
        except Exception:  # noqa: BLE001 - a kept error must not leak into the next program
            pass
    if r is None:
        return None
    kind, msg = r
    small = minimize(stmts, dev, kind, loose) if do_minimize else stmts
    try:
        _sync_device(dev)
    except Exception:  # noqa: BLE001
        pass
    return f"seed {seed} mode {mode}: {kind}: {msg}\n" + reproducer(small, mode, f"{kind}: {msg}")


def _parse_seeds(s):
    if ":" in s:
        a, b = s.split(":")
        return range(int(a), int(b))
    return [int(x) for x in s.split(",")]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0:200", help="A:B (half-open range) or a comma list")
    p.add_argument("--mode", default="strict,debug,defer_and_fuse", help="eager modes, comma-separated")
    p.add_argument("--stmts", type=int, default=30, help="statements per program")
    p.add_argument("--no-minimize", action="store_true", help="print failing programs whole")
    p.add_argument("--max-failures", type=int, default=20, help="stop after this many failures")
    args = p.parse_args(argv)
    import torch_tpu  # noqa: F401
    failures = 0
    total = 0
    t0 = time.time()
    for mode in args.mode.split(","):
        for seed in _parse_seeds(args.seeds):
            total += 1
            rep = fuzz_one(seed, mode, n_stmts=args.stmts, do_minimize=not args.no_minimize)
            if rep:
                failures += 1
                print(rep, flush=True)
                if failures >= args.max_failures:
                    break
        if failures >= args.max_failures:
            break
    print(f"{total} programs, {failures} failing, {time.time() - t0:.1f} s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
