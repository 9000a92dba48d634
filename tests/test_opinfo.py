"""Op-level harness (DESIGN.md §4): every OpInfo in PyTorch's op_db is run on
CPU and on the device under test with the same sample inputs, forward (and
backward for float32), and each (op, dtype) is classified pass / fail /
unsupported (NotImplementedError from the device) / crash / hang.

The sweep runs in a worker subprocess (this file run as a script), so a kernel
that crashes the process is reported as "crash" for that op and the sweep goes
on. CORE ops must pass fully (one pytest item each); the rest are reported in
build/opinfo_report.md and at the end of the session, not asserted.
"""
import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys
import time
import traceback

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPORT = ROOT / "build" / "opinfo_report.md"

# The ops common models need (op_db names; every variant of a name counts).
CORE_OPS = [
    "add", "sub", "mul", "div", "matmul", "mm", "bmm", "addmm", "exp", "log", "sqrt", "rsqrt",
    "tanh", "sigmoid", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "softmax", "log_softmax", "sum", "mean", "amax", "max", "var", "nn.functional.layer_norm",
    "nn.functional.embedding", "cat", "stack", "index_select", "gather", "scatter_add", "where",
    "masked_fill", "clamp", "pow", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.batch_norm", "nn.functional.dropout", "transpose", "permute", "reshape",
    "view", "expand", "narrow", "select", "unsqueeze", "squeeze", "cumsum", "argmax", "topk",
    "sort",
    # also on every model's path
    "neg", "abs", "reciprocal", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "min", "amin",
    "argmin", "maximum", "minimum", "tril", "triu", "clone", "contiguous", "t", "flatten",
    "split", "chunk", "zeros_like", "ones_like", "full_like", "nn.functional.linear",
    "nn.functional.scaled_dot_product_attention", "nn.functional.nll_loss", "erf", "sin", "cos",
    "rsub", "baddbmm", "index_add", "scatter", "nn.functional.softplus",
]

# Excluded from the sweep, each with its reason (printed in the report).
SKIP = {
    "bernoulli": "random", "cauchy": "random", "exponential": "random", "geometric": "random",
    "log_normal": "random", "normal": "random", "normal.in_place": "random",
    "normal.number_mean": "random", "uniform": "random", "multinomial": "random",
    "randn": "random", "randn_like": "random", "rand_like": "random", "randint": "random",
    "randint_like": "random", "nn.functional.dropout2d": "random", "nn.functional.dropout3d": "random",
    "nn.functional.alpha_dropout": "random", "nn.functional.feature_alpha_dropout.with_train": "random",
    "nn.functional.rrelu": "random", "nn.functional.fractional_max_pool2d": "random",
    "nn.functional.fractional_max_pool3d": "random", "svd_lowrank": "random",
    "pca_lowrank": "random", "nn.functional.multi_head_attention_forward": "random (dropout)",
    "empty": "uninitialized memory", "empty_like": "uninitialized memory",
    "new_empty": "uninitialized memory", "new_empty_strided": "uninitialized memory",
    "empty_strided": "uninitialized memory", "empty_permuted": "uninitialized memory",
    "byte": "float->int cast of out-of-range values is undefined",
    "char": "float->int cast of out-of-range values is undefined",
    "short": "float->int cast of out-of-range values is undefined",
    "int": "float->int cast of out-of-range values is undefined",
    "long": "float->int cast of out-of-range values is undefined",
    "bitwise_left_shift": "shift by >= bit width is undefined",
    "bitwise_right_shift": "shift by >= bit width is undefined",
    "unique": "element order unspecified when sorted=False",
    "torch._scaled_mm": "fp8, CUDA only", "torch._scaled_mm_v2": "fp8, CUDA only",
    "torch.ops.aten._flash_attention_forward": "CUDA only",
    "torch.ops.aten._efficient_attention_forward": "CUDA only",
    "native_batch_norm": "eval-mode save_mean/invstd differ by backend (PyTorch's test_compare_cpu "
                         "expects this op to fail too)",
    "_native_batch_norm_legit": "as native_batch_norm",
    "sparse.mm.reduce": "sparse CSR input; the device holds strided tensors",
    "sparse.sampled_addmm": "sparse CSR input; the device holds strided tensors",
}

# (op name, dtype) pairs excluded, with the reason.
SKIP_DTYPE = {
    ("polygamma", "float64"): "PyTorch CPU's own float64 polygamma takes minutes on these samples",
}

DEFAULT_DTYPES = ["float32", "bfloat16", "int64", "bool"]
FULL_DTYPES = ["float32", "bfloat16", "float16", "float64", "int64", "int32", "int16", "int8",
               "uint8", "bool"]

# (rtol, atol). 16-bit floats: about one ulp of the format, since both sides
# compute in float32 and round once. float32: a few ulps for elementwise ops;
# ops that accumulate (matmul, reductions, norms) get LOOSE because a
# different summation order legitimately changes the last bits.
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-7, 1e-7),
       torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3)}
LOOSE = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7),
         torch.bfloat16: (3.2e-2, 2e-2), torch.float16: (4e-3, 2e-3)}
ACCUMULATING = ("matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "mv", "dot", "vdot",
                "inner", "einsum", "tensordot", "chain_matmul", "linalg.", "nn.functional.conv",
                "nn.functional.linear", "nn.functional.bilinear", "sum", "nansum", "mean", "nanmean",
                "var", "std", "cumsum", "cumprod", "logcumsumexp", "prod", "norm", "dist", "cdist",
                "softmax", "log_softmax", "logsumexp", "nn.functional.layer_norm",
                "nn.functional.group_norm", "nn.functional.batch_norm", "nn.functional.instance_norm",
                "nn.functional.rms_norm", "nn.functional.local_response_norm", "nn.functional.",
                "trapz", "trapezoid", "cumulative_trapezoid", "renorm", "cov", "corrcoef",
                "_softmax_backward_data", "special.log_softmax", "special.softmax", "addr",
                "matrix_exp", "pinverse", "cholesky", "lu", "svd", "qr", "det", "logdet", "inverse",
                "triangular_solve", "geqrf", "ormqr", "__rmatmul__", "kron", "_chunk_cat", "std_mean",
                "var_mean", "index_add", "scatter_add", "scatter_reduce", "index_reduce", "put",
                "index_put", "histc", "bincount", "_segment_reduce", "native_batch_norm",
                "_native_batch_norm_legit", "_batch_norm_with_update", "native_layer_norm")

# Ops whose index outputs are unspecified among ties: a mismatch is accepted
# when the values agree and the indices point at those values.
TIE_OPS = {"sort", "argsort", "topk", "kthvalue", "median", "nanmedian", "mode",
           "max.reduction_with_dim", "min.reduction_with_dim", "msort"}

# Ops whose tensor arguments (other than the input) PyTorch requires on the CPU.
HOST_ARGS = {"tensor_split"}

MAX_SAMPLES = 4
MAX_SAMPLES_FULL = 12
OP_TIME_BOX_S = 20.0  # stop taking samples for one (op, dtype) after this
HANG_S = 180.0        # a worker silent this long is killed; its op is a "hang"


def op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def is_core(key: str) -> bool:
    return any(key == c or key.startswith(c + ".") for c in CORE_OPS)


# ---------------------------------------------------------------- worker side

def _move(t, dev):
    """A copy of CPU tensor t on dev with the same sizes, strides and storage
    offset (so strided kernels are exercised), as a leaf with t's requires_grad."""
    if t.layout != torch.strided:
        raise NotImplementedError(f"layout {t.layout} not tested")
    n = t.untyped_storage().nbytes() // max(t.element_size(), 1)
    need = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
    if t.numel() == 0 or n < need:
        out = t.detach().to(dev)
    else:
        flat = torch.as_strided(t.detach(), (n,), (1,), 0)
        out = flat.to(dev).as_strided(t.shape, t.stride(), t.storage_offset())
    return out.detach().requires_grad_(t.requires_grad)


def _leaf(t):
    return t.detach().requires_grad_(t.requires_grad)


def _map(obj, fn_tensor, dev=None):
    if isinstance(obj, torch.Tensor):
        return fn_tensor(obj)
    if isinstance(obj, list):
        return [_map(o, fn_tensor, dev) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_map(o, fn_tensor, dev) for o in obj)
    if isinstance(obj, dict):
        return {k: (dev if dev is not None and k == "device" and str(v) == "cpu"
                    else _map(v, fn_tensor, dev)) for k, v in obj.items()}
    if dev is not None and isinstance(obj, torch.device) and obj.type == "cpu":
        return torch.device(dev)
    return obj


def _flat_tensors(obj, out):
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _flat_tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _flat_tensors(o, out)
    return out


def _flat(obj, out):
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for o in obj:
            _flat(o, out)
    else:
        out.append(obj)
    return out


class Mismatch(AssertionError):
    pass


def _close(actual, expected, dtype, key, what, loose=False):
    """Compares a device result with CPU's; raises Mismatch naming the place."""
    acc = loose or any(key == a or key.startswith(a) for a in ACCUMULATING)
    a_list, e_list = _flat(actual, []), _flat(expected, [])
    if len(a_list) != len(e_list):
        raise Mismatch(f"{what}: {len(a_list)} outputs, CPU has {len(e_list)}")
    for i, (a, e) in enumerate(zip(a_list, e_list)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch(f"{what}[{i}]: got {type(a).__name__}, CPU a Tensor")
            if e.device.type == "cpu" and a.device.type != e.device.type and \
                    a.device.type != DEVICE_TYPE:
                raise Mismatch(f"{what}[{i}]: result on {a.device}")
            a_cpu = a.detach().cpu()
            if e.dtype in TOL:
                rtol, atol = (LOOSE if acc else TOL)[e.dtype]
            else:
                rtol, atol = 0.0, 0.0
            try:
                torch.testing.assert_close(a_cpu, e.detach(), rtol=rtol, atol=atol, equal_nan=True,
                                           check_device=False)
            except AssertionError as err:
                msg = " ".join(str(err).split())
                raise Mismatch(f"{what}[{i}] shape {tuple(e.shape)} {e.dtype}: {msg[:300]}") from None
        elif e is None:
            if a is not None:
                raise Mismatch(f"{what}[{i}]: got {type(a).__name__}, CPU None")
        elif isinstance(e, float) and isinstance(a, float):
            if not (abs(a - e) <= 1e-5 + 1e-5 * abs(e) or (a != a and e != e)):
                raise Mismatch(f"{what}[{i}]: {a} vs CPU {e}")
        elif a != e:
            raise Mismatch(f"{what}[{i}]: {a!r} vs CPU {e!r}")


def _tie_ok(key, sample_cpu, out_dev, out_cpu, dtype):
    """For TIE_OPS: values equal and indices valid (pointing at those values)."""
    x = sample_cpu.input
    if not isinstance(x, torch.Tensor):
        return False
    args, kw = sample_cpu.args, sample_cpu.kwargs
    name = key.split(".")[0]
    if name in ("sort", "argsort", "msort"):
        dim = kw.get("dim", args[0] if args and isinstance(args[0], int) else -1)
        keepdim = True
    elif name == "topk":
        dim = kw.get("dim", args[1] if len(args) > 1 else -1)
        keepdim = True
    elif name in ("kthvalue",):
        dim = kw.get("dim", args[1] if len(args) > 1 else -1)
        keepdim = kw.get("keepdim", args[2] if len(args) > 2 else False)
    else:  # median/mode/max/min with dim
        if not args and "dim" not in kw:
            if name == "mode":
                dim = -1
            else:
                return False
        else:
            dim = kw.get("dim", args[0] if args else -1)
        keepdim = kw.get("keepdim", args[1] if len(args) > 1 else False)
    if name == "msort":
        dim = 0
    if isinstance(out_cpu, torch.Tensor):  # argsort: indices only
        idx_d, val_c = out_dev.cpu(), x.gather(dim, out_cpu) if x.dim() else x
        val_d = x.gather(dim, idx_d) if x.dim() else x
        return torch.equal(val_d, val_c) or torch.allclose(val_d, val_c, equal_nan=True)
    val_d, idx_d = out_dev[0].detach().cpu(), out_dev[1].cpu()
    val_c = out_cpu[0].detach()
    _close(val_d, val_c, dtype, key, "values")
    if x.dim() == 0:
        return bool((idx_d == 0).all())
    idx = idx_d if keepdim else idx_d.unsqueeze(dim)
    got = x.detach().gather(dim, idx)
    if not keepdim:
        got = got.squeeze(dim)
    return torch.equal(got, val_c) or torch.allclose(got, val_c, equal_nan=True)


def _as_good_as_cpu(op, s, out_dev, out_cpu, dtype):
    """For bf16/fp16: CPU rounds intermediates to 16 bits in some kernels where
    the device computes in float32 and rounds once. Accept the device's result
    when it is no farther from the float64 result than CPU's is (plus one
    tolerance)."""
    if torch.float64 not in op.supported_dtypes("cpu"):
        return False
    up = lambda t: t.detach().double() if t.dtype == dtype else t.detach()  # noqa: E731
    s64 = _with(s, up)
    kw = {k: (torch.float64 if v == dtype else v) for k, v in s64.kwargs.items()}
    try:
        ref = op(s64.input, *s64.args, **kw)
    except Exception:  # noqa: BLE001 - no float64 reference: cannot judge
        return False
    rtol, atol = LOOSE[dtype]
    ref_l, dev_l, cpu_l = _flat(ref, []), _flat(out_dev, []), _flat(out_cpu, [])
    if not (len(ref_l) == len(dev_l) == len(cpu_l)):
        return False
    for r, d, c in zip(ref_l, dev_l, cpu_l):
        if not isinstance(c, torch.Tensor) or not c.dtype.is_floating_point:
            if isinstance(c, torch.Tensor) and not torch.equal(d.cpu(), c):
                return False
            continue
        r, d, c = r.double(), d.detach().cpu().double(), c.detach().double()
        if r.shape != d.shape:
            return False
        err_d, err_c = (d - r).abs(), (c - r).abs()
        ok = (err_d <= err_c + atol + rtol * r.abs()) | (d.isnan() & c.isnan()) | (d == c)
        if not bool(ok.all()):
            return False
    return True


def _sample_ok(key, sample):
    """Deterministic samples only for ops that are random in training mode."""
    if key.startswith("nn.functional.dropout") or key == "nn.functional.feature_alpha_dropout.without_train":
        return not sample.kwargs.get("training", True) or sample.kwargs.get("p", 0.5) == 0.0
    if key == "nn.functional.scaled_dot_product_attention":
        return sample.kwargs.get("dropout_p", 0.0) == 0.0
    return True


def _grad_check(key, op, s_cpu, s_dev, out_cpu, out_dev, dtype):
    out_cpu = s_cpu.output_process_fn_grad(out_cpu)
    out_dev = s_dev.output_process_fn_grad(out_dev)
    oc = [t for t in _flat_tensors(out_cpu, []) if t.requires_grad and t.dtype.is_floating_point]
    od = [t for t in _flat_tensors(out_dev, []) if t.requires_grad and t.dtype.is_floating_point]
    if len(oc) != len(od):
        raise Mismatch(f"backward: {len(od)} differentiable outputs, CPU has {len(oc)}")
    ic = [t for t in _flat_tensors((s_cpu.input, s_cpu.args, s_cpu.kwargs), []) if t.requires_grad]
    idv = [t for t in _flat_tensors((s_dev.input, s_dev.args, s_dev.kwargs), []) if t.requires_grad]
    if not oc or not ic:
        return False
    g = torch.Generator().manual_seed(1234)
    gc = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in oc]
    gd = [t.to(o.device) for t, o in zip(gc, od)]  # an output may be on CPU (Tensor.to("cpu"))
    grads_c = torch.autograd.grad(oc, ic, gc, allow_unused=True)
    grads_d = torch.autograd.grad(od, idv, gd, allow_unused=True)
    _close(list(grads_d), list(grads_c), dtype, key, "grad", loose=True)
    return True


DEVICE = "tpu"
DEVICE_TYPE = "tpu"


def _sync():
    if DEVICE_TYPE != "cpu":
        getattr(torch, DEVICE_TYPE).synchronize()


def run_one(op, dtype, max_samples):
    """Runs up to max_samples samples of op at dtype on CPU and DEVICE.
    Returns a result dict: status pass/fail/unsupported/na, counts, message."""
    key = op_key(op)
    res = {"op": key, "dtype": str(dtype).replace("torch.", ""), "status": "pass", "samples": 0,
           "bwd": 0, "inplace": 0, "msg": ""}
    if dtype not in op.supported_dtypes("cpu"):
        res["status"] = "na"
        return res
    do_grad = dtype == torch.float32 and op.supports_autograd
    t0 = time.time()
    unsupported = None
    try:
        samples = op.sample_inputs("cpu", dtype, requires_grad=do_grad)
        samples = (s for s in samples if _sample_ok(key, s))
        for s in itertools.islice(samples, max_samples):
            if time.time() - t0 > OP_TIME_BOX_S:
                res["msg"] = f"time box: {res['samples']} samples"
                break
            s_cpu = _with(s, lambda t: _leaf(t))
            s_dev = _with(s, lambda t: _move(t, DEVICE), dev=DEVICE)
            if key in HOST_ARGS:  # PyTorch requires these arguments on the host
                s_dev.args = s_cpu.args
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(0)
                    out_cpu = op(s_cpu.input, *s_cpu.args, **s_cpu.kwargs)
            except Exception:  # the sample is not valid on CPU either
                continue
            where = f"sample {res['samples']}"
            phase = "forward"
            try:
                out_dev = op(s_dev.input, *s_dev.args, **s_dev.kwargs)
                try:
                    _close(out_dev, out_cpu, dtype, key, "output")
                except Mismatch:
                    if key in TIE_OPS and _tie_ok(key, s_cpu, out_dev, out_cpu, dtype):
                        pass
                    elif dtype in (torch.bfloat16, torch.float16) and \
                            _as_good_as_cpu(op, s, out_dev, out_cpu, dtype):
                        res["note"] = "16-bit: differs from CPU, not farther from float64 than CPU"
                    else:
                        raise
                # inputs the op mutated (running stats, out-of-place ops with side effects)
                _close(_flat_tensors((s_dev.input, s_dev.args, s_dev.kwargs), []),
                       _flat_tensors((s_cpu.input, s_cpu.args, s_cpu.kwargs), []), dtype, key,
                       "input after call")
                _sync()  # an asynchronous kernel error belongs to this sample
                res["samples"] += 1
                phase = "backward"
                if do_grad and _grad_check(key, op, s_cpu, s_dev, out_cpu, out_dev, dtype):
                    res["bwd"] += 1
                phase = "in-place"
                if op.inplace_variant is not None and _inplace_check(key, op, s, dtype):
                    res["inplace"] += 1
                _sync()
            except NotImplementedError as e:
                unsupported = unsupported or f"{where} {phase}: {_short(e)}"
            except Mismatch as e:
                res["status"] = "fail"
                res["msg"] = f"{where} {phase} {_describe(s)}: {e}"
                break
            except Exception as e:  # noqa: BLE001 - any other device error is a failure
                if _is_unimplemented(e):
                    unsupported = unsupported or f"{where} {phase}: {_short(e)}"
                    continue
                res["status"] = "fail"
                res["msg"] = f"{where} {phase} {_describe(s)}: {type(e).__name__}: {_short(e)}"
                break
    except Exception as e:  # noqa: BLE001 - sample generation itself failed
        res["status"] = "fail"
        res["msg"] = f"harness: {type(e).__name__}: {_short(e)}"
    if res["status"] == "pass" and unsupported:
        res["status"] = "unsupported"
        res["msg"] = unsupported
    res["seconds"] = round(time.time() - t0, 3)
    return res


def _inplace_check(key, op, s, dtype):
    s_cpu = _with(s, lambda t: _leaf(t).detach())
    s_dev = _with(s, lambda t: _move(t, DEVICE).detach(), dev=DEVICE)
    try:
        out_cpu = op.inplace_variant(s_cpu.input, *s_cpu.args, **s_cpu.kwargs)
    except Exception:  # not valid in place on CPU (promotion, broadcasting of self)
        return False
    out_dev = op.inplace_variant(s_dev.input, *s_dev.args, **s_dev.kwargs)
    try:
        _close(out_dev, out_cpu, dtype, key, "in-place result")
    except Mismatch:
        if dtype not in (torch.bfloat16, torch.float16) or \
                not _as_good_as_cpu(op, s, out_dev, out_cpu, dtype):
            raise
    _close(s_dev.input, out_dev, dtype, key, "in-place self vs its result")
    return True


def _with(s, fn, dev=None):
    from torch.testing._internal.opinfo.core import SampleInput
    return SampleInput(_map(s.input, fn, dev), args=_map(s.args, fn, dev),
                       kwargs=_map(s.kwargs, fn, dev), output_process_fn_grad=s.output_process_fn_grad)


def _describe(s):
    def d(x):
        if isinstance(x, torch.Tensor):
            st = "" if x.is_contiguous() else f" stride={tuple(x.stride())}"
            return f"T{tuple(x.shape)}{st}"
        if isinstance(x, (list, tuple)):
            return "[" + ",".join(d(y) for y in x) + "]"
        return repr(x)
    kw = ",".join(f"{k}={d(v)}" for k, v in s.kwargs.items())
    return f"({d(s.input)}; args={d(s.args)}; {kw})"[:300]


def _short(e):
    return " ".join(str(e).split())[:300]


def _is_unimplemented(e):
    msg = str(e)
    return "UNIMPLEMENTED" in msg or ("not implemented" in msg.lower() and DEVICE_TYPE in msg.lower())


def _load_device(device):
    """Makes `device` usable in this process: autoload normally did it; from a
    checkout without `pip install -e .`, import torch_tpu from the tree."""
    dev_type = device.split(":")[0]
    if dev_type != "cpu" and not hasattr(torch, dev_type):
        try:
            import torch_tpu  # noqa: F401  (on PYTHONPATH)
        except ImportError:
            sys.path.insert(0, str(ROOT))
            import torch_tpu  # noqa: F401


def worker_main(argv):
    """Worker (run by the sweep) and a debugging entry point:
        python tests/test_opinfo.py --op add,nn.functional.gelu --dtypes float32,bfloat16
    prints one JSON result per (op, dtype)."""
    global DEVICE, DEVICE_TYPE
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--device", default="tpu")
    p.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES))
    p.add_argument("--max-samples", type=int, default=MAX_SAMPLES)
    p.add_argument("--ops", help="file with one op key a line (key or key|dtype)")
    p.add_argument("--op", help="comma-separated op keys (op_db name[.variant])")
    p.add_argument("--out", help="JSON lines output (default: stdout)")
    a = p.parse_args(argv)
    DEVICE, DEVICE_TYPE = a.device, a.device.split(":")[0]
    _load_device(DEVICE)
    from torch.testing._internal.common_methods_invocations import op_db
    by_key = {op_key(o): o for o in op_db}
    keys = pathlib.Path(a.ops).read_text().split() if a.ops else a.op.split(",")
    dtypes = [getattr(torch, d) for d in a.dtypes.split(",")]
    torch.manual_seed(0)
    f = open(a.out, "a") if a.out else sys.stdout
    for key in keys:
        # item = "key|dtype" (the resume point after a crash) or "key"
        k, _, only = key.partition("|")
        if k not in by_key:
            print(f"unknown op {k!r}", file=sys.stderr)
            return 2
        for dt in dtypes:
            if only and str(dt).replace("torch.", "") != only:
                continue
            if a.out:
                f.write(json.dumps({"start": k, "dtype": str(dt).replace("torch.", "")}) + "\n")
                f.flush()
            torch.manual_seed(0)
            try:
                r = run_one(by_key[k], dt, a.max_samples)
            except Exception as e:  # noqa: BLE001
                r = {"op": k, "dtype": str(dt).replace("torch.", ""), "status": "fail",
                     "msg": "harness: " + "".join(traceback.format_exception_only(e)).strip()[:300]}
            f.write(json.dumps(r) + "\n")
            f.flush()
    return 0


# ---------------------------------------------------------------- parent side

def run_sweep(device, keys, dtypes, max_samples, workdir):
    """Runs the worker over keys; restarts it after a crash or hang. Returns
    {(key, dtype): result}."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "opinfo_results.jsonl"
    out.write_text("")
    todo = [f"{k}|{d}" for k in keys for d in dtypes
            if (k.split(".")[0], d) not in SKIP_DTYPE and (k, d) not in SKIP_DTYPE]
    results = {}
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    while todo:
        ops_file = workdir / "opinfo_todo.txt"
        ops_file.write_text("\n".join(todo) + "\n")
        cmd = [sys.executable, "-X", "faulthandler", str(pathlib.Path(__file__).resolve()), "--worker", "--device", device,
               "--dtypes", ",".join(dtypes), "--max-samples", str(max_samples),
               "--ops", str(ops_file), "--out", str(out)]
        log = open(workdir / "opinfo_worker.log", "ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT))
        last_size, last_change, hung = -1, time.time(), False
        while proc.poll() is None:
            time.sleep(0.5)
            size = out.stat().st_size
            if size != last_size:
                last_size, last_change = size, time.time()
            elif time.time() - last_change > HANG_S:
                proc.kill()
                proc.wait()
                hung = True
        log.close()
        started = None
        for line in out.read_text().splitlines():
            rec = json.loads(line)
            if "start" in rec:
                started = (rec["start"], rec["dtype"])
            else:
                results[(rec["op"], rec["dtype"])] = rec
                started = None
        if started is not None and started not in results:
            tail = (workdir / "opinfo_worker.log").read_bytes()[-600:].decode(errors="replace")
            status = "hang" if hung else "crash"
            results[started] = {"op": started[0], "dtype": started[1], "status": status,
                                "msg": f"worker {status} (exit {proc.returncode}): " + " ".join(tail.split())[-300:]}
        elif proc.returncode != 0 and not hung:
            tail = (workdir / "opinfo_worker.log").read_bytes()[-2000:].decode(errors="replace")
            raise RuntimeError(f"opinfo worker failed (exit {proc.returncode}):\n{tail}")
        todo = [t for t in todo if tuple(t.split("|")) not in results]
    return results


def format_report(results, skipped, device, dtypes, seconds):
    statuses = ["pass", "fail", "unsupported", "crash", "hang"]
    totals = {s: 0 for s in statuses}
    for r in results.values():
        if r["status"] in totals:
            totals[r["status"]] += 1
    ops = sorted({k for k, _ in results})
    per_op = {}
    for k in ops:
        st = {d: results.get((k, d), {}).get("status", "-") for d in dtypes}
        real = [s for s in st.values() if s not in ("na", "-")]
        if not real:
            overall = "na"
        else:
            for s in ("crash", "hang", "fail", "unsupported", "pass"):
                if s in real:
                    overall = s
                    break
        per_op[k] = (overall, st)
    op_totals = {s: sum(1 for o, _ in per_op.values() if o == s) for s in statuses + ["na"]}
    lines = [f"# OpInfo harness: device {device} vs PyTorch CPU", "",
             f"dtypes: {', '.join(dtypes)}; {len(ops)} ops; {seconds:.0f} s", "",
             "(op, dtype) totals: " + ", ".join(f"{s} {n}" for s, n in totals.items()),
             "ops (worst dtype): " + ", ".join(f"{s} {n}" for s, n in op_totals.items()), "",
             "| op | core | " + " | ".join(dtypes) + " | first problem |",
             "|---|---|" + "---|" * len(dtypes) + "---|"]
    for k in ops:
        overall, st = per_op[k]
        msg = ""
        for d in dtypes:
            r = results.get((k, d), {})
            if r.get("status") not in ("pass", "na", None):
                msg = f"{d}: {r.get('msg', '')}".replace("|", "/")
                break
        lines.append(f"| {k} | {'yes' if is_core(k) else ''} | " +
                     " | ".join(st[d] for d in dtypes) + f" | {msg[:400]} |")
    lines += ["", "## Excluded", ""] + [f"- {k}: {v}" for k, v in sorted(skipped.items())]
    short = [lines[0], lines[4], lines[5]]
    problems = [(k, per_op[k]) for k in ops if per_op[k][0] not in ("pass", "na")]
    if problems:
        short.append("not passing (op: dtype statuses):")
        for k, (overall, st) in problems:
            bad = ", ".join(f"{d}={s}" for d, s in st.items() if s not in ("pass", "na", "-"))
            short.append(f"  {'[core] ' if is_core(k) else ''}{k}: {bad}")
    short.append(f"excluded: {len(skipped)} ({', '.join(sorted(skipped))})")
    return "\n".join(lines) + "\n", "\n".join(short)


_SWEEP = {}


@pytest.fixture(scope="session")
def opinfo_results(request, device, full):
    """Runs the sweep once per session over what the selected tests need."""
    if "r" in _SWEEP:
        return _SWEEP["r"]
    from torch.testing._internal.common_methods_invocations import op_db
    items = request.session.items
    want_all = any(i.name.startswith("test_opinfo_report") for i in items)
    wanted_core = {i.callspec.params["name"] for i in items
                   if i.name.startswith("test_core_op") and hasattr(i, "callspec")}
    keys, skipped = [], {}
    for o in op_db:
        k = op_key(o)
        if k in SKIP or o.name in SKIP:
            skipped[k] = SKIP.get(k, SKIP.get(o.name))
            continue
        if want_all or any(k == c or k.startswith(c + ".") for c in wanted_core):
            keys.append(k)
    dtypes = FULL_DTYPES if full else DEFAULT_DTYPES
    for (name, dt), why in SKIP_DTYPE.items():
        if dt in dtypes and any(k == name or k.startswith(name + ".") for k in keys):
            skipped[f"{name} ({dt})"] = why
    t0 = time.time()
    results = run_sweep(device, keys, dtypes, MAX_SAMPLES_FULL if full else MAX_SAMPLES,
                        ROOT / "build")
    report, short = format_report(results, skipped, device, dtypes, time.time() - t0)
    if want_all:
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(report)
        request.config._tpu_opinfo_summary = short
    _SWEEP["r"] = (results, keys, dtypes)
    return _SWEEP["r"]


@pytest.mark.parametrize("name", CORE_OPS)
def test_core_op(name, opinfo_results):
    results, keys, dtypes = opinfo_results
    mine = [k for k in keys if k == name or k.startswith(name + ".")]
    assert mine, f"core op {name!r} is not in op_db (or is excluded)"
    bad = []
    ran = 0
    for k in mine:
        for d in dtypes:
            r = results.get((k, d), {"status": "na"})  # absent: excluded (SKIP_DTYPE)
            if r["status"] == "na":
                continue
            ran += 1
            if r["status"] != "pass":
                bad.append(f"{k} {d}: {r['status']}: {r.get('msg', '')}")
            elif r.get("samples", 0) == 0:
                bad.append(f"{k} {d}: no sample ran")
    assert ran, f"core op {name!r}: no dtype in {dtypes} is supported on CPU"
    assert not bad, "\n".join(bad)


def test_opinfo_report(opinfo_results):
    """The whole sweep: every (op, dtype) is classified and the report is
    written. Non-core failures are reported, not asserted."""
    results, keys, dtypes = opinfo_results
    assert len(keys) > 500
    missing = [(k, d) for k in keys for d in dtypes if (k, d) not in results
               and (k.split(".")[0], d) not in SKIP_DTYPE]
    assert not missing, f"not classified: {missing[:10]}"
    assert REPORT.exists()
    ran = sum(1 for r in results.values() if r["status"] not in ("na",))
    assert ran > 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
