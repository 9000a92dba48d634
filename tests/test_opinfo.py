"""Op conformance harness (DESIGN.md §4): every OpInfo in PyTorch's op_db is run on CPU
and on the device under test with the same sample inputs and compared the way PyTorch's own
TestCommon.test_compare_cpu compares a device with CPU:

- the same comparison (TestCase.assertEqual: exact dtype, NaN == NaN) and tolerances: atol = rtol =
  1e-3, raised to torch.testing's default for the dtype (bfloat16: rtol 1.6e-2) and to any
  toleranceOverride the OpInfo declares for TestCommon;
- outputs passed through the sample's output_process_fn_grad first (linalg sign conventions);
- the OpInfo's own DecorateInfo entries for TestCommon.test_compare_cpu: a skip that states a reason
  (non-deterministic, undefined behaviour, order undefined) skips the op here with that reason; an
  expectedFailure turns a mismatch into "xfail" (PyTorch's CUDA does not match CPU there either).
  Random ops whose samples can be made deterministic (dropout with training=False or p=0,
  scaled_dot_product_attention with dropout_p=0) run on those samples only.

Forward for every op and dtype; backward (gradients of the processed outputs with respect to every
input that requires grad, fed the same random cotangents on both sides) for every op that supports
autograd, in float32, reported separately. Each (op, dtype) is classified pass / fail (first
mismatch or error) / unsupported (NotImplementedError or UNIMPLEMENTED from the device; a dtype that
the dtype mask of the op's kernel leaves out says so) / skip (with the reason) / xfail / na (the op
has no such dtype on CPU, or no sample runs on CPU) / crash / hang. Each entry also lists the kernels
(op-table entries) a device call reached, with their dtype masks; the report shows them per op.

The sweep runs in worker subprocesses (this file run as a script), so a kernel that crashes the
process is reported as "crash" for that (op, dtype) and the sweep goes on.

- Default pytest run: the CORE ops (one item each, asserted) on sample_inputs, MAX_SAMPLES samples,
  dtypes CORE_DTYPES (about 30 s of CPU time).
- `--full` / TORCH_TPU_TEST_FULL=1: the whole of op_db on reference_inputs (PyTorch's larger sample
  set) with MAX_SAMPLES_FULL samples, dtypes FULL_DTYPES; writes build/opinfo_report.json and .md.
- Script: `python tests/test_opinfo.py` runs the full sweep the same way and prints totals, the
  coverage aims and the most common failure causes; `--op a,b` runs ops in-process and
  prints one JSON result each (debugging). `--help` lists the options.
"""
import argparse
import collections
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import traceback
import unittest

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
REPORT = ROOT / "build" / "opinfo_report.md"
REPORT_JSON = ROOT / "build" / "opinfo_report.json"

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

# Skipped here, each with its reason (besides the skips PyTorch's OpInfos declare for
# TestCommon.test_compare_cpu, which are read from op_db).
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
    "bmm.triton_optimized": "Triton, CUDA only",
    "native_batch_norm": "eval-mode save_mean/invstd differ by backend (PyTorch's test_compare_cpu "
                         "expects this op to fail too)",
    "_native_batch_norm_legit": "as native_batch_norm",
    "sparse.mm.reduce": "sparse CSR input; the device holds strided tensors",
    "sparse.sampled_addmm": "sparse CSR input; the device holds strided tensors",
}

# (op name, dtype) pairs skipped, with the reason.
SKIP_DTYPE = {
    ("polygamma", "float64"): "PyTorch CPU's own float64 polygamma takes minutes on these samples",
}

# Random in general, deterministic on some samples: PyTorch skips them in test_compare_cpu; here
# they run on the deterministic samples only (see _sample_ok).
DETERMINISTIC_SAMPLES = ("nn.functional.dropout", "nn.functional.feature_alpha_dropout.without_train",
                         "nn.functional.scaled_dot_product_attention")

# Swept: float32, bfloat16, int64, bool, and float16/float64 where the op supports them (an op
# without the dtype on CPU is "na" for it). ALL_DTYPES: what --dtypes may name.
FULL_DTYPES = ["float32", "bfloat16", "float16", "float64", "int64", "bool"]
ALL_DTYPES = ["float32", "bfloat16", "float16", "float64", "int64", "int32", "int16", "int8",
              "uint8", "bool"]
# The default pytest run: the CORE ops on these, asserted (float16/float64 in the full sweep).
CORE_DTYPES = ["float32", "bfloat16", "int64", "bool"]

# test_compare_cpu: self.assertEqual(device_results, cpu_results, atol=1e-3, rtol=1e-3).
COMPARE_ATOL = COMPARE_RTOL = 1e-3
# 16-bit results differing from CPU are accepted when no farther from float64 than CPU's (plus
# this much): the rule PyTorch's _ref_test_helper uses for the "more precise" comparison.
PRECISE_SLACK = {torch.bfloat16: (3.2e-2, 2e-2), torch.float16: (4e-3, 2e-3)}

# Ops whose index outputs are unspecified among ties: a mismatch is accepted
# when the values agree and the indices point at those values.
TIE_OPS = {"sort", "argsort", "topk", "kthvalue", "median", "nanmedian", "mode",
           "max.reduction_with_dim", "min.reduction_with_dim", "msort"}

# Ops whose tensor arguments (other than the input) PyTorch requires on the CPU.
HOST_ARGS = {"tensor_split"}

MAX_SAMPLES = 4        # default run, sample_inputs
MAX_SAMPLES_FULL = 16  # --full, reference_inputs
OP_TIME_BOX_S = 20.0   # stop taking samples for one (op, dtype) after this
FULL_JOBS = 2          # worker processes for the full sweep
HANG_S = 180.0         # a worker silent this long is killed; its (op, dtype) is a "hang"

DEVICE_DOWN = 3             # worker exit status: the device could not be loaded
DEVICE_DOWN_RETRIES = 12    # the sweep waits this many times DEVICE_DOWN_WAIT_S for the build
DEVICE_DOWN_WAIT_S = 15.0

STATUSES = ["pass", "fail", "xfail", "unsupported", "crash", "hang", "skip", "na"]


def op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def is_core(key: str) -> bool:
    return any(key == c or key.startswith(c + ".") for c in CORE_OPS)


def dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


# ---------------------------------------------------------------- what PyTorch's OpInfo says

def _decorators(op, dtype):
    """The OpInfo's DecorateInfo decorators active for TestCommon.test_compare_cpu on this device
    type and dtype (device-specific entries for cuda/mps/xpu do not apply)."""
    from torch.testing._internal.opinfo.core import DecorateInfo
    out = []
    for d in op.decorators:
        if not isinstance(d, DecorateInfo) or d.device_type not in (None, DEVICE_TYPE, "privateuse1"):
            continue
        if d.is_active("TestCommon", "test_compare_cpu", DEVICE_TYPE, dtype, {}):
            out.extend(d.decorators)
    return out


def _skip_reason(decorator):
    """The reason of a unittest.skip(reason) decorator, None for any other decorator."""
    if getattr(decorator, "__qualname__", "") != "skip.<locals>.decorator":
        return None
    for cell in decorator.__closure__ or ():
        if isinstance(cell.cell_contents, str):
            return cell.cell_contents
    return ""


def pytorch_expectations(op, dtype):
    """(skip reason or None, expected failure?, (atol, rtol) override) from op_db for
    test_compare_cpu. A skip without a stated reason ("Skipped!": CI flakiness or slowness on CUDA)
    is not followed: the op runs here."""
    from torch.testing._internal.common_device_type import toleranceOverride
    skip, xfail, tol = None, False, (0.0, 0.0)
    key = op_key(op)
    for d in _decorators(op, dtype):
        reason = _skip_reason(d)
        if reason and reason != "Skipped!" and key not in DETERMINISTIC_SAMPLES:
            skip = f"PyTorch test_compare_cpu: {reason}"
        elif d is unittest.expectedFailure:
            xfail = True
        elif isinstance(d, toleranceOverride) and dtype in d.d:
            tol = (max(tol[0], d.d[dtype].atol), max(tol[1], d.d[dtype].rtol))
    return skip, xfail, tol


def tolerance(dtype, override=(0.0, 0.0)):
    """(atol, rtol): test_compare_cpu's 1e-3, raised to torch.testing's default for the dtype and
    to the OpInfo's toleranceOverride."""
    from torch.testing._comparison import default_tolerances
    rtol_d, atol_d = default_tolerances(torch.empty(0, dtype=dtype)) if dtype.is_floating_point \
        else (0.0, 0.0)
    return (max(COMPARE_ATOL, atol_d, override[0]), max(COMPARE_RTOL, rtol_d, override[1]))


# ---------------------------------------------------------------- worker side

def _move(t, dev):
    """A copy of CPU tensor t on dev with the same sizes, strides and storage
    offset (so strided kernels are exercised), as a leaf with t's requires_grad."""
    if t.layout != torch.strided:
        raise NotImplementedError(f"layout {t.layout} not tested")
    n = t.untyped_storage().nbytes() // max(t.element_size(), 1)
    need = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
    # copy=True: with --device cpu the copy must not alias the sample either
    if t.numel() == 0 or n < need:
        out = t.detach().to(dev, copy=True)
    else:
        flat = torch.as_strided(t.detach(), (n,), (1,), 0)
        out = flat.to(dev, copy=True).as_strided(t.shape, t.stride(), t.storage_offset())
    return out.detach().requires_grad_(t.requires_grad)


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


_TC = None


def _testcase():
    """A TestCase whose assertEqual does the comparing, as in test_compare_cpu."""
    global _TC
    if _TC is None:
        from torch.testing._internal.common_utils import TestCase

        class _Compare(TestCase):
            exact_dtype = True

            def runTest(self):
                pass
        _TC = _Compare()
    return _TC


def _close(actual, expected, dtype, key, what, tol=None):
    """Compares a device result with CPU's leaf by leaf (TestCase.assertEqual, exact dtype, NaN ==
    NaN, atol/rtol = tol); raises Mismatch naming the place."""
    atol, rtol = tol or tolerance(dtype)
    a_list, e_list = _flat(actual, []), _flat(expected, [])
    if len(a_list) != len(e_list):
        raise Mismatch(f"{what}: {len(a_list)} outputs, CPU has {len(e_list)}")
    tc = _testcase()
    for i, (a, e) in enumerate(zip(a_list, e_list)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch(f"{what}[{i}]: got {type(a).__name__}, CPU a Tensor")
            if e.device.type == "cpu" and a.device.type not in ("cpu", DEVICE_TYPE):
                raise Mismatch(f"{what}[{i}]: result on {a.device}")
            a, e = a.detach().cpu(), e.detach()
            shape = f" shape {tuple(e.shape)} {dtype_name(e.dtype)}"
        else:
            shape = ""
        try:
            tc.assertEqual(a, e, atol=atol, rtol=rtol)
        except AssertionError as err:
            msg = " ".join(str(err).split())
            raise Mismatch(f"{what}[{i}]{shape}: {msg[:300]}") from None


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
    x = x.detach()
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
    got = x.gather(dim, idx)
    if not keepdim:
        got = got.squeeze(dim)
    return torch.equal(got, val_c) or torch.allclose(got, val_c, equal_nan=True)


def _as_good_as_cpu(op, s, out_dev, out_cpu, dtype, process=False):
    """For bf16/fp16: CPU rounds intermediates to 16 bits in some kernels where the device
    computes in float32 and rounds once. Accept the device's result when it is no farther from
    the float64 result than CPU's is (plus PRECISE_SLACK): PyTorch's own rule when a reference
    and the op disagree in low precision (test_ops.py _ref_test_helper)."""
    if torch.float64 not in op.supported_dtypes("cpu"):
        return False
    up = lambda t: t.detach().double() if t.dtype == dtype else t.detach()  # noqa: E731
    s64 = _with(s, up)
    kw = {k: (torch.float64 if v == dtype else v) for k, v in s64.kwargs.items()}
    try:
        ref = op(s64.input, *s64.args, **kw)
        if process:  # out_dev and out_cpu went through output_process_fn_grad
            ref = s.output_process_fn_grad(ref)
    except Exception:  # noqa: BLE001 - no float64 reference: cannot judge
        return False
    rtol, atol = PRECISE_SLACK[dtype]
    ref_l, dev_l, cpu_l = _flat(ref, []), _flat(out_dev, []), _flat(out_cpu, [])
    if not (len(ref_l) == len(dev_l) == len(cpu_l)):
        return False
    for r, d, c in zip(ref_l, dev_l, cpu_l):
        if not isinstance(c, torch.Tensor) or not c.dtype.is_floating_point:
            if isinstance(c, torch.Tensor) and not torch.equal(d.cpu(), c):
                return False
            continue
        if not isinstance(d, torch.Tensor) or d.dtype != c.dtype:
            return False
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


def _differentiable(out, inputs):
    outs = [t for t in _flat_tensors(out, []) if t.requires_grad
            and (t.dtype.is_floating_point or t.dtype.is_complex)]
    ins = [t for t in _flat_tensors(inputs, []) if t.requires_grad]
    return outs, ins


def _cpu_grads(s_cpu, out_cpu):
    """CPU gradients of the processed outputs for fixed random cotangents, or None when the
    sample has nothing to differentiate. Raises when CPU itself cannot."""
    oc, ic = _differentiable(s_cpu.output_process_fn_grad(out_cpu),
                             (s_cpu.input, s_cpu.args, s_cpu.kwargs))
    if not oc or not ic:
        return None
    g = torch.Generator().manual_seed(1234)
    cot = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in oc]
    grads = torch.autograd.grad(oc, ic, cot, allow_unused=True)
    return cot, grads


def _dev_grads(key, s_dev, out_dev, cot, grads_c, dtype):
    od, idv = _differentiable(s_dev.output_process_fn_grad(out_dev),
                              (s_dev.input, s_dev.args, s_dev.kwargs))
    if len(od) != len(cot):
        raise Mismatch(f"backward: {len(od)} differentiable outputs, CPU has {len(cot)}")
    if len(idv) != len(grads_c):
        raise Mismatch(f"backward: {len(idv)} inputs require grad, CPU has {len(grads_c)}")
    gd = [t.to(o.device) for t, o in zip(cot, od)]  # an output may be on CPU (Tensor.to("cpu"))
    grads_d = torch.autograd.grad(od, idv, gd, allow_unused=True)
    _close(list(grads_d), list(grads_c), dtype, key, "grad")


DEVICE = "tpu"
DEVICE_TYPE = "tpu"


def _sync():
    if DEVICE_TYPE != "cpu":
        getattr(torch, DEVICE_TYPE).synchronize()


def _classify_error(e):
    """'unsupported' for NotImplementedError / UNIMPLEMENTED from the device (a dtype its kernel's
    dtype mask refuses among them), else 'fail'."""
    if isinstance(e, NotImplementedError) or _is_unimplemented(e):
        return "unsupported"
    return "fail"


# The fallback's refusal of a dtype the kernel's dtype mask leaves out (fallback_check.cpp).
MASK_REFUSAL = re.compile(r"dtype (\w+) is not supported by its \w+ kernel '([\w.:]+)' "
                          r"\(which computes in ([\w, ]+)\)")


def _error_message(e, where):
    """The problem line for a device error; a dtype-mask refusal says so first."""
    m = MASK_REFUSAL.search(str(e))
    reason = f"refused by the dtype mask of kernel {m.group(2)} ({m.group(3)}): " if m else ""
    return f"{where}: {reason}{type(e).__name__}: {_short(e)}"


def kernels_reached(op, s_dev):
    """{op-table entry: its dtype mask as dtype names} for the kernels one device call of the sample
    reaches: the aten ops the profiler sees dispatched (nested ones included), each resolved by the
    runtime's rule (_C._op_resolve). Run after the sample's first call, so the fallback's layout cache
    answers and no meta computation adds ops of its own. {} off the tpu."""
    if DEVICE_TYPE != "tpu":
        return {}
    from torch.profiler import ProfilerActivity, profile
    from torch._C._profiler import _ExperimentalConfig
    from torch_tpu import _C
    try:
        with profile(activities=[ProfilerActivity.CPU],
                     experimental_config=_ExperimentalConfig(capture_overload_names=True)) as prof:
            op(s_dev.input, *s_dev.args, **s_dev.kwargs)
            _sync()
    except Exception:  # noqa: BLE001 - the sample was judged already; only the ops matter here
        _sync_quietly()
        return {}
    out = {}
    for name, overload in {(e.name, e.overload_name or "") for e in prof.events()}:
        kernel = _C._op_resolve(name, overload)
        if kernel:
            out[kernel] = [dtype_name(d) for d in _C._op_dtypes(kernel)]
    return dict(sorted(out.items()))


def run_one(op, dtype, max_samples, reference=False):
    """Runs up to max_samples samples of op at dtype on CPU and DEVICE: forward (compared),
    in-place variant, and for float32 ops with autograd the gradients. Returns a result dict:
    status (forward) and bwd_status, each pass/fail/xfail/unsupported/skip/na, with counts and
    the first problem."""
    key = op_key(op)
    dn = dtype_name(dtype)
    do_grad = dtype == torch.float32 and op.supports_autograd
    res = {"op": key, "dtype": dn, "status": "pass", "msg": "", "samples": 0, "cpu_samples": 0,
           "inplace": 0, "bwd_status": "pass" if do_grad else None, "bwd_msg": "", "bwd": 0,
           "cpu_bwd": 0}

    def finish(status, msg, bwd=None):
        res["status"], res["msg"] = status, msg
        if do_grad:
            res["bwd_status"], res["bwd_msg"] = bwd or status, msg
        return res

    if dtype not in op.supported_dtypes("cpu"):
        return finish("na", f"op has no {dn} on CPU")
    skip = SKIP.get(key) or SKIP.get(op.name) or SKIP_DTYPE.get((key, dn)) or \
        SKIP_DTYPE.get((op.name, dn))
    pt_skip, xfail, tol_override = pytorch_expectations(op, dtype)
    if skip or pt_skip:
        return finish("skip", skip or pt_skip)
    tol = tolerance(dtype, tol_override)
    t0 = time.time()
    fwd = {"status": None, "msg": "", "unsup": None}
    bwd = {"status": None, "msg": "", "unsup": None, "blocked": None}

    def fwd_problem(status, msg):
        if status == "unsupported":
            fwd["unsup"] = fwd["unsup"] or msg
        elif fwd["status"] is None:
            fwd["status"], fwd["msg"] = status, msg

    def bwd_problem(status, msg):
        if status == "unsupported":
            bwd["unsup"] = bwd["unsup"] or msg
        elif bwd["status"] is None:
            bwd["status"], bwd["msg"] = status, msg

    first_dev = None  # the first sample that ran on CPU, on the device: its kernels are reported
    try:
        samples = (s for s in _samples(op, dtype, do_grad, reference, res) if _sample_ok(key, s))
        for s in samples:
            if res["cpu_samples"] >= max_samples:
                break
            if time.time() - t0 > OP_TIME_BOX_S:
                res["note"] = f"time box: {res['cpu_samples']} samples"
                break
            if fwd["status"] and (not do_grad or bwd["status"]):
                break  # both first problems found
            # copies: an op may mutate its inputs (running stats), and s stays pristine for
            # _as_good_as_cpu and _inplace_check
            s_cpu = _with(s, lambda t: t.detach().clone().requires_grad_(t.requires_grad))
            s_dev = _with(s, lambda t: _move(t, DEVICE), dev=DEVICE)
            if key in HOST_ARGS:  # PyTorch requires these arguments on the host
                s_dev.args = s_cpu.args
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(0)
                    out_cpu = op(s_cpu.input, *s_cpu.args, **s_cpu.kwargs)
                out_cpu_p = s_cpu.output_process_fn_grad(out_cpu)
            except Exception:  # noqa: BLE001 - the sample is not valid on CPU either
                continue
            res["cpu_samples"] += 1
            where = f"sample {res['cpu_samples'] - 1}"
            if first_dev is None:
                first_dev = s_dev
            grads_c = None
            if do_grad:
                try:
                    grads_c = _cpu_grads(s_cpu, out_cpu)
                except Exception:  # noqa: BLE001 - CPU has no backward for this sample
                    grads_c = None
                if grads_c is not None:
                    res["cpu_bwd"] += 1
            phase = "forward"
            try:
                out_dev = op(s_dev.input, *s_dev.args, **s_dev.kwargs)
                out_dev_p = s_dev.output_process_fn_grad(out_dev)
                _sync()  # an asynchronous kernel error belongs to this sample
            except Exception as e:  # noqa: BLE001
                st = _classify_error(e)
                msg = _error_message(e, f"{where} forward {_describe(s)}")
                fwd_problem(st, msg)
                if grads_c is not None:
                    bwd["blocked"] = bwd["blocked"] or (st, msg)
                continue
            if fwd["status"] is None:
                try:
                    try:
                        _close(out_dev_p, out_cpu_p, dtype, key, "output", tol)
                    except Mismatch:
                        if key in TIE_OPS and _tie_ok(key, s_cpu, out_dev, out_cpu, dtype):
                            pass
                        elif dtype in PRECISE_SLACK and \
                                _as_good_as_cpu(op, s, out_dev_p, out_cpu_p, dtype, process=True):
                            res["note"] = "16-bit: differs from CPU, not farther from float64 than CPU"
                        else:
                            raise
                    # inputs the op mutated (running stats, out-of-place ops with side effects)
                    _close(_flat_tensors((s_dev.input, s_dev.args, s_dev.kwargs), []),
                           _flat_tensors((s_cpu.input, s_cpu.args, s_cpu.kwargs), []), dtype, key,
                           "input after call", tol)
                    phase = "in-place"
                    if op.inplace_variant is not None and _inplace_check(key, op, s, dtype, tol):
                        res["inplace"] += 1
                    _sync()
                    res["samples"] += 1
                except Mismatch as e:
                    fwd_problem("fail", f"{where} {phase} {_describe(s)}: {e}")
                except Exception as e:  # noqa: BLE001 - any other device error
                    fwd_problem(_classify_error(e), _error_message(e, f"{where} {phase} {_describe(s)}"))
            if grads_c is not None and bwd["status"] is None:
                try:
                    _dev_grads(key, s_dev, out_dev, grads_c[0], grads_c[1], dtype)
                    _sync()
                    res["bwd"] += 1
                except Mismatch as e:
                    bwd_problem("fail", f"{where} backward {_describe(s)}: {e}")
                except Exception as e:  # noqa: BLE001
                    bwd_problem(_classify_error(e), _error_message(e, f"{where} backward {_describe(s)}"))
    except Exception as e:  # noqa: BLE001 - sample generation itself failed
        fwd_problem("fail", f"harness: {type(e).__name__}: {_short(e)}")
        bwd_problem("fail", f"harness: {type(e).__name__}: {_short(e)}")
    if first_dev is not None:
        with torch.random.fork_rng(devices=[]):
            res["kernels"] = kernels_reached(op, _with(first_dev, lambda t: t.detach(), dev=DEVICE))
    if dtype == torch.float32:
        res["err_status"], res["err_msg"], res["errors"] = _check_errors(op)
    res["seconds"] = round(time.time() - t0, 3)

    # forward: the first failure, else unsupported, else pass (na when no sample ran on CPU)
    if fwd["status"]:
        res["status"], res["msg"] = fwd["status"], fwd["msg"]
        if xfail and fwd["status"] == "fail":
            res["status"] = "xfail"
            res["msg"] = "PyTorch expects test_compare_cpu to fail for this op: " + res["msg"]
    elif fwd["unsup"]:
        res["status"], res["msg"] = "unsupported", fwd["unsup"]
    elif res["cpu_samples"] == 0:
        res["status"], res["msg"] = "na", "no sample runs on CPU"
    if do_grad:
        if bwd["status"]:
            res["bwd_status"], res["bwd_msg"] = bwd["status"], bwd["msg"]
        elif bwd["unsup"]:
            res["bwd_status"], res["bwd_msg"] = "unsupported", bwd["unsup"]
        elif bwd["blocked"]:  # the forward failed (or is unsupported) on a sample CPU differentiates
            res["bwd_status"], res["bwd_msg"] = bwd["blocked"][0], "forward: " + bwd["blocked"][1]
        elif res["cpu_bwd"] == 0:
            res["bwd_status"], res["bwd_msg"] = "na", "no sample has a CPU backward"
    return res


MAX_ERROR_INPUTS = 32


def _check_errors(op):
    """The OpInfo's error_inputs (wrong shapes, dtypes, out-of-range arguments), built by the same
    generator on CPU and on the device: each one CPU rejects must raise on the device too, an
    exception of CPU's type (NotImplementedError does not count), and the process goes on. Returns
    (status, first problem, inputs checked): pass / fail / na (no error inputs that CPU rejects)."""
    if getattr(op, "error_inputs_func", None) is None:
        return "na", "no error_inputs", 0
    n = 0
    try:
        pairs = zip(op.error_inputs("cpu"), op.error_inputs(DEVICE))
        for i, (ec, ed) in enumerate(pairs):
            if i >= MAX_ERROR_INPUTS:
                break
            sc, sd = ec.sample_input, ed.sample_input
            try:
                op(sc.input, *sc.args, **sc.kwargs)
                continue  # CPU accepts it (some error inputs are another device's)
            except Exception as e:  # noqa: BLE001 - the point
                cpu_type = type(e)
            where = f"error input {i} {_describe(sc)}: CPU raises {cpu_type.__name__}"
            try:
                op(sd.input, *sd.args, **sd.kwargs)
                _sync()
            except Exception as e:  # noqa: BLE001
                if not isinstance(e, cpu_type) or (isinstance(e, NotImplementedError) and
                                                   not issubclass(cpu_type, NotImplementedError)):
                    return "fail", f"{where}, {DEVICE_TYPE} {type(e).__name__}: {_short(e)}", n
                n += 1
                continue
            return "fail", f"{where}, {DEVICE_TYPE} raises nothing", n
    except Exception as e:  # noqa: BLE001 - the generator itself failed (CPU- or device-side)
        _sync_quietly()
        return ("pass" if n else "na"), f"error_inputs stopped: {type(e).__name__}: {_short(e)[:100]}", n
    return ("pass" if n else "na"), "", n


def _sync_quietly():
    try:
        _sync()
    except Exception:  # noqa: BLE001 - an error left by an error input, already judged
        pass


def _samples(op, dtype, requires_grad, reference, res):
    """The OpInfo's reference_inputs (or sample_inputs). Some generators fail with
    requires_grad=True (where's reference_inputs makes a bool tensor that requires grad): then
    sample_inputs are used, or the samples generated so far, with a note."""
    gens = [op.reference_inputs, op.sample_inputs] if reference else [op.sample_inputs]
    for i, gen in enumerate(gens):
        yielded = 0
        try:
            for s in gen("cpu", dtype, requires_grad=requires_grad):
                yielded += 1
                yield s
            return
        except Exception as e:  # noqa: BLE001
            if yielded == 0 and i + 1 < len(gens):
                res["note"] = f"{gen.__name__} failed ({type(e).__name__}: {_short(e)[:100]})"
                continue
            if yielded == 0:
                raise
            res["note"] = f"{gen.__name__} stopped after {yielded} samples ({type(e).__name__})"
            return


def _inplace_check(key, op, s, dtype, tol):
    s_cpu = _with(s, lambda t: t.detach().clone())  # a copy: s stays pristine
    s_dev = _with(s, lambda t: _move(t, DEVICE).detach(), dev=DEVICE)
    if key in HOST_ARGS:
        s_dev.args = s_cpu.args
    try:
        out_cpu = op.inplace_variant(s_cpu.input, *s_cpu.args, **s_cpu.kwargs)
    except Exception:  # noqa: BLE001 - not valid in place on CPU (promotion, broadcasting of self)
        return False
    out_dev = op.inplace_variant(s_dev.input, *s_dev.args, **s_dev.kwargs)
    try:
        _close(out_dev, out_cpu, dtype, key, "in-place result", tol)
    except Mismatch:
        if dtype not in PRECISE_SLACK or not _as_good_as_cpu(op, s, out_dev, out_cpu, dtype):
            raise
    _close(s_dev.input, out_dev, dtype, key, "in-place self vs its result", tol)
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


def _arg_parser():
    p = argparse.ArgumentParser(
        prog="tests/test_opinfo.py",
        description="OpInfo conformance harness: PyTorch's op_db on the device vs PyTorch CPU "
                    "(forward, backward, in-place). Without --op it runs the sweep in worker "
                    "subprocesses (a crash or hang is reported for its op and the sweep goes on), "
                    "writes build/opinfo_report.json and .md and prints totals, the coverage "
                    "percentages and the most common failure causes. With --op it runs the named "
                    "ops in this process and prints one JSON result per (op, dtype).")
    p.add_argument("--op", help="comma-separated op keys (op_db name[.variant]) to run in-process")
    p.add_argument("--device", default="tpu", help="device under test (default tpu)")
    p.add_argument("--dtypes", help=f"comma-separated dtypes (default {','.join(FULL_DTYPES)}; "
                                    f"all: {','.join(ALL_DTYPES)})")
    p.add_argument("--max-samples", type=int,
                   help=f"samples per (op, dtype) that run on CPU (default {MAX_SAMPLES_FULL} for "
                        f"the sweep, {MAX_SAMPLES} with --op)")
    p.add_argument("--samples", choices=["reference", "sample"],
                   help="OpInfo sample set: reference_inputs (PyTorch's test_compare_cpu; sweep "
                        "default) or sample_inputs (smaller; default with --op)")
    p.add_argument("--subset", choices=["all", "core"], default="all",
                   help="sweep: every op in op_db (default) or the CORE ops")
    p.add_argument("--jobs", type=int, default=FULL_JOBS,
                   help=f"sweep: worker processes (default {FULL_JOBS}: the machine's 2 cores)")
    p.add_argument("--report-dir", default=str(ROOT / "build"),
                   help="sweep: where opinfo_report.{json,md} and worker files go (default build/)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ops", help=argparse.SUPPRESS)  # worker: file, one "key|dtype" a line
    p.add_argument("--out", help=argparse.SUPPRESS)  # worker: JSON lines output
    return p


def worker_main(a):
    """Worker (run by the sweep) and the --op debugging entry point."""
    global DEVICE, DEVICE_TYPE
    DEVICE, DEVICE_TYPE = a.device, a.device.split(":")[0]
    try:
        _load_device(DEVICE)
        if DEVICE_TYPE != "cpu" and not hasattr(torch, DEVICE_TYPE):
            raise RuntimeError(f"torch.{DEVICE_TYPE} is not registered")
        (torch.ones(2, device=DEVICE) + 1).cpu()
    except Exception as e:  # noqa: BLE001 - the parent waits for the build and retries
        print(f"device {DEVICE!r} is not usable: {type(e).__name__}: {e}", file=sys.stderr)
        return DEVICE_DOWN
    from torch.testing._internal.common_methods_invocations import op_db
    by_key = {op_key(o): o for o in op_db}
    keys = pathlib.Path(a.ops).read_text().split() if a.ops else a.op.split(",")
    dtypes = (a.dtypes or ",".join(FULL_DTYPES)).split(",")
    max_samples = a.max_samples or MAX_SAMPLES
    reference = a.samples == "reference"
    torch.manual_seed(0)
    f = open(a.out, "a") if a.out else sys.stdout
    for item in keys:
        # item = "key|dtype" (the sweep's unit, so a crash resumes after it) or "key"
        k, _, only = item.partition("|")
        if k not in by_key:
            print(f"unknown op {k!r}", file=sys.stderr)
            return 2
        for dn in ([only] if only else dtypes):
            if a.out:
                f.write(json.dumps({"start": k, "dtype": dn}) + "\n")
                f.flush()
            torch.manual_seed(0)
            if os.environ.get("TORCH_TPU_OPINFO_CRASH_TEST") == f"{k}|{dn}":
                os.abort()  # checks the sweep's crash handling (see _run_chunk)
            try:
                r = run_one(by_key[k], getattr(torch, dn), max_samples, reference)
            except Exception as e:  # noqa: BLE001
                msg = "harness: " + "".join(traceback.format_exception_only(e)).strip()[:300]
                r = {"op": k, "dtype": dn, "status": "fail", "msg": msg, "bwd_status": None}
            f.write(json.dumps(r) + "\n")
            f.flush()
    return 0


# ---------------------------------------------------------------- parent side

def _run_chunk(device, todo, max_samples, reference, workdir, tag, autograd, results, lock):
    """Runs one worker over todo ("key|dtype" items); restarts it after a crash or hang."""
    out = workdir / f"opinfo_results{tag}.jsonl"
    logf = workdir / f"opinfo_worker{tag}.log"
    out.write_text("")
    logf.write_bytes(b"")
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    mine = {}
    down_retries = DEVICE_DOWN_RETRIES
    retried = False
    while todo or not retried:
        if not todo:
            # Run each crashed item once more in a fresh worker: a crash caused by something
            # outside the op (the shared libtpurt.so rebuilt under a running worker) goes away.
            retried = True
            todo = [f"{k}|{d}" for (k, d), r in mine.items() if r["status"] == "crash"]
            for item in todo:
                del mine[tuple(item.split("|"))]
            if not todo:
                break
        ops_file = workdir / f"opinfo_todo{tag}.txt"
        ops_file.write_text("\n".join(todo) + "\n")
        cmd = [sys.executable, "-X", "faulthandler", str(pathlib.Path(__file__).resolve()),
               "--worker", "--device", device, "--max-samples", str(max_samples),
               "--samples", "reference" if reference else "sample", "--ops", str(ops_file),
               "--out", str(out)]
        log = open(logf, "ab")
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
                mine[(rec["op"], rec["dtype"])] = rec
                started = None
        if started is not None and started not in mine:
            tail = logf.read_bytes()[-600:].decode(errors="replace")
            status = "hang" if hung else "crash"
            msg = f"worker {status} (exit {proc.returncode}): " + " ".join(tail.split())[-300:]
            grad = started[1] == "float32" and autograd.get(started[0], False)
            mine[started] = {"op": started[0], "dtype": started[1], "status": status, "msg": msg,
                             "bwd_status": status if grad else None, "bwd_msg": msg if grad else ""}
        elif proc.returncode == DEVICE_DOWN and down_retries > 0:
            # the shared build is being rebuilt (libtpurt.so half-written): wait for it
            down_retries -= 1
            time.sleep(DEVICE_DOWN_WAIT_S)
        elif proc.returncode != 0 and not hung:
            tail = logf.read_bytes()[-2000:].decode(errors="replace")
            raise RuntimeError(f"opinfo worker failed (exit {proc.returncode}):\n{tail}")
        todo = [t for t in todo if tuple(t.split("|")) not in mine]
    with lock:
        results.update(mine)


def run_sweep(device, keys, dtypes, max_samples, workdir, reference=False, jobs=1, autograd=None):
    """Runs keys x dtypes in `jobs` worker subprocesses. Returns {(key, dtype): result}."""
    workdir.mkdir(parents=True, exist_ok=True)
    todo = [f"{k}|{d}" for k in keys for d in dtypes]
    jobs = max(1, min(jobs, len(todo) or 1))
    results, lock, threads = {}, threading.Lock(), []
    errors = []

    def run(i):
        try:
            _run_chunk(device, todo[i::jobs], max_samples, reference, workdir,
                       "" if jobs == 1 else f".{i}", autograd or {}, results, lock)
        except Exception as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)
    for i in range(jobs):
        t = threading.Thread(target=run, args=(i,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# ---------------------------------------------------------------- report

_FWD_COUNTED = ("pass", "fail", "xfail", "unsupported", "crash", "hang")


def _share(results, dtype, field):
    """Of the ops that run on CPU at dtype (status not skip/na), how many pass on the device."""
    den = [r for (k, d), r in results.items() if d == dtype and r.get(field) in _FWD_COUNTED]
    num = sum(1 for r in den if r.get(field) == "pass")
    return {"pass": num, "of": len(den), "percent": round(100.0 * num / len(den), 1) if den else None}


def goals(results):
    """The coverage aims: float32 forward >= 95%, float32 backward >= 90%, bfloat16 forward >= 90%."""
    return {"float32 forward": dict(_share(results, "float32", "status"), aim=95),
            "float32 backward": dict(_share(results, "float32", "bwd_status"), aim=90),
            "bfloat16 forward": dict(_share(results, "bfloat16", "status"), aim=90)}


def error_share(results):
    """Ops whose error_inputs raise on the device the exception type CPU raises."""
    den = [r for (k, d), r in results.items() if d == "float32" and r.get("err_status") in ("pass", "fail")]
    num = sum(1 for r in den if r["err_status"] == "pass")
    return {"pass": num, "of": len(den), "inputs": sum(r.get("errors", 0) for r in den),
            "failing": sorted(r["op"] for r in den if r["err_status"] == "fail")}


def cause(msg):
    """A failure message reduced to its cause, so that (op, dtype) entries group."""
    m = re.search(r"operator '(aten::[\w.]+)' is not implemented", msg)
    if m:
        return f"no tpu kernel or decomposition: {m.group(1)}"
    m = MASK_REFUSAL.search(msg)
    if m:
        return f"dtype {m.group(1)} refused by the dtype mask of kernel {m.group(2)} ({m.group(3)})"
    if re.search(r"dtype Complex\w+ is not supported on the \w+ device", msg):
        return "complex dtypes are not supported on the device"
    m = re.search(r"dtype (\w+) is not supported on the \w+ device", msg)
    if m:
        return f"dtype {m.group(1)} not supported on the device"
    if msg.startswith("worker crash") or msg.startswith("worker hang"):
        return msg.split(":")[0]
    msg = re.sub(r"^PyTorch expects test_compare_cpu to fail for this op: ", "", msg)
    msg = re.sub(r"^(forward: )?sample \d+ [\w-]+ (\(.*?\): )?", "", msg)
    msg = re.sub(r"^(output|grad|input after call|in-place result|values)\[\d+\]( shape \([\d, ]*\) \w+)?:",
                 lambda m: m.group(1) + ":", msg)
    msg = re.sub(r"Greatest .*|Mismatched elements.*", "", msg)
    msg = re.sub(r"\[[\d, ]*\]|\([\d, ]*\)|-?\d+(\.\d+)?(e-?\d+)?", "#", msg)
    return " ".join(msg.split())[:110]


def failure_causes(results, n=15):
    """The n most common causes among not-passing forward and backward entries."""
    groups = collections.defaultdict(lambda: {"entries": 0, "ops": set(), "statuses": set()})
    for (k, d), r in results.items():
        for field, mfield in (("status", "msg"), ("bwd_status", "bwd_msg")):
            if r.get(field) in ("fail", "unsupported", "crash", "hang", "xfail"):
                g = groups[cause(r.get(mfield) or "")]
                g["entries"] += 1
                g["ops"].add(k)
                g["statuses"].add(r[field])
    top = sorted(groups.items(), key=lambda kv: (-len(kv[1]["ops"]), -kv[1]["entries"]))[:n]
    return [{"cause": f"{'/'.join(sorted(g['statuses']))}: {c}", "ops": len(g["ops"]),
             "entries": g["entries"], "examples": sorted(g["ops"])[:6]} for c, g in top]


def summarize(results, dtypes):
    fwd = {s: 0 for s in STATUSES}
    bwd = {s: 0 for s in STATUSES}
    per_dtype = {d: {s: 0 for s in STATUSES} for d in dtypes}
    for (k, d), r in results.items():
        fwd[r["status"]] = fwd.get(r["status"], 0) + 1
        if d in per_dtype:
            per_dtype[d][r["status"]] = per_dtype[d].get(r["status"], 0) + 1
        if r.get("bwd_status"):
            bwd[r["bwd_status"]] = bwd.get(r["bwd_status"], 0) + 1
    return {"forward": fwd, "backward_float32": bwd, "forward_by_dtype": per_dtype}


DEVICE_DTYPES = 12  # the device's dtypes (tpurt_dtype_t): a mask naming all of them says "all"


def kernel_masks(rows):
    """'name: dtypes; ...' for the kernels an op's (op, dtype) entries reached."""
    masks = {}
    for r in rows:
        masks.update((r or {}).get("kernels") or {})
    return "; ".join(f"{n}: {'all' if len(d) >= DEVICE_DTYPES else ', '.join(d) or 'none'}"
                     for n, d in sorted(masks.items())) or "-"


def format_report(results, device, dtypes, seconds, mode):
    """(markdown, JSON-able dict, short text for the terminal)."""
    ops = sorted({k for k, _ in results})
    totals = summarize(results, dtypes)
    g = goals(results)
    causes = failure_causes(results)
    errs = error_share(results)
    data = {"device": device, "mode": mode, "dtypes": dtypes, "ops": len(ops),
            "seconds": round(seconds, 1), "totals": totals, "goals": g, "error_inputs": errs,
            "top_causes": causes, "results": [results[k] for k in sorted(results)]}
    err_line = (f"error inputs (OpInfo error_inputs, float32 row): {errs['pass']}/{errs['of']} ops raise "
                f"CPU's exception type on every one of {errs['inputs']} inputs"
                + (f"; not yet: {', '.join(errs['failing'][:12])}" if errs["failing"] else ""))

    def cell(r):
        return r.get("status", "-") if r else "-"

    def goal_line(name, v):
        pct = "n/a" if v["percent"] is None else f"{v['percent']}%"
        return f"{name}: {v['pass']}/{v['of']} = {pct} (aim {v['aim']}%)"
    fmt = lambda t: ", ".join(f"{s} {n}" for s, n in t.items() if n)  # noqa: E731
    lines = [f"# OpInfo conformance: device {device} vs PyTorch CPU", "",
             f"{mode}; dtypes {', '.join(dtypes)}; {len(ops)} ops; {seconds:.0f} s. "
             "Re-run: `.venv/bin/python tests/test_opinfo.py` (or `pytest tests/test_opinfo.py --full`).",
             "", "Of the ops that run on CPU, share passing on the device:", ""]
    lines += [f"- {goal_line(n, v)}" for n, v in g.items()]
    lines += ["", f"- {err_line}"]
    lines += ["", f"(op, dtype) forward: {fmt(totals['forward'])}",
              f"float32 backward: {fmt(totals['backward_float32'])}", "",
              "| dtype | " + " | ".join(STATUSES) + " |", "|---|" + "---|" * len(STATUSES)]
    for d in dtypes:
        lines.append(f"| {d} | " + " | ".join(str(totals["forward_by_dtype"][d].get(s, 0))
                                             for s in STATUSES) + " |")
    lines += ["", "## Most common failure causes (ops affected, (op, dtype) entries)", ""]
    for c in causes:
        lines.append(f"- {c['ops']} ops, {c['entries']} entries: {c['cause']} "
                     f"(e.g. {', '.join(c['examples'])})")
    lines += ["", "## Per op", "", "Kernels: the op-table entries a call reaches, each with its dtype mask "
              "(\"all\": every device dtype, or a mask not declared yet).", "",
              "| op | core | float32 | f32 bwd | " + " | ".join(d for d in dtypes if d != "float32") +
              " | kernels (dtype mask) | first problem |",
              "|---|---|---|---|" + "---|" * (len(dtypes) - 1) + "---|---|"]
    for k in ops:
        row = {d: results.get((k, d)) for d in dtypes}
        f32 = row.get("float32") or {}
        msg = ""
        for d in dtypes:
            r = row[d] or {}
            if r.get("status") not in ("pass", "na", None):
                msg = f"{d}: {r.get('msg', '')}"
                break
            if d == "float32" and r.get("bwd_status") not in ("pass", "na", None):
                msg = f"float32 backward: {r.get('bwd_msg', '')}"
                break
            if d == "float32" and r.get("err_status") == "fail":
                msg = f"error inputs: {r.get('err_msg', '')}"
                break
        lines.append(f"| {k} | {'yes' if is_core(k) else ''} | {cell(f32)} | "
                     f"{f32.get('bwd_status') or '-'} | " +
                     " | ".join(cell(row[d]) for d in dtypes if d != "float32") +
                     f" | {kernel_masks(row.values())} | {msg.replace('|', '/')[:300]} |")
    short = [lines[0], lines[2], "Of the ops that run on CPU, share passing on the device:"]
    short += [f"  {goal_line(n, v)}" for n, v in g.items()]
    short += [f"  {err_line}"]
    short += [f"(op, dtype) forward: {fmt(totals['forward'])}",
              f"float32 backward: {fmt(totals['backward_float32'])}",
              "most common failure causes (ops, entries):"]
    short += [f"  {c['ops']:4d} {c['entries']:4d}  {c['cause']}" for c in causes]
    return "\n".join(lines) + "\n", data, "\n".join(short)


def write_report(results, device, dtypes, seconds, mode, outdir=None):
    outdir = pathlib.Path(outdir) if outdir else REPORT.parent
    md, data, short = format_report(results, device, dtypes, seconds, mode)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / REPORT.name).write_text(md)
    (outdir / REPORT_JSON.name).write_text(json.dumps(data, indent=1) + "\n")
    return short


def all_keys(subset="all"):
    from torch.testing._internal.common_methods_invocations import op_db
    keys, autograd = [], {}
    for o in op_db:
        k = op_key(o)
        if subset == "core" and not is_core(k):
            continue
        if k not in autograd:
            keys.append(k)
        autograd[k] = o.supports_autograd
    return keys, autograd


def sweep_main(a):
    dtypes = (a.dtypes or ",".join(FULL_DTYPES)).split(",")
    reference = (a.samples or "reference") == "reference"
    max_samples = a.max_samples or (MAX_SAMPLES_FULL if reference else MAX_SAMPLES)
    keys, autograd = all_keys(a.subset)
    t0 = time.time()
    results = run_sweep(a.device, keys, dtypes, max_samples, pathlib.Path(a.report_dir),
                        reference, a.jobs, autograd)
    mode = (f"{'reference_inputs' if reference else 'sample_inputs'}, up to {max_samples} "
            f"samples per (op, dtype), {a.subset} ops")
    short = write_report(results, a.device, dtypes, time.time() - t0, mode, a.report_dir)
    print(short)
    print(f"report: {pathlib.Path(a.report_dir) / REPORT.name}, "
          f"{pathlib.Path(a.report_dir) / REPORT_JSON.name}")
    return 0


# ---------------------------------------------------------------- pytest

_SWEEP = {}


@pytest.fixture(scope="session")
def opinfo_results(request, device, full):
    """Runs the sweep once per session: the CORE ops on sample_inputs by default; with --full every
    op on reference_inputs, writing build/opinfo_report.{json,md}."""
    if "r" in _SWEEP:
        return _SWEEP["r"]
    keys, autograd = all_keys("all" if full else "core")
    if not full:  # only what the selected tests need
        wanted = {i.callspec.params["name"] for i in request.session.items
                  if i.name.startswith("test_core_op") and hasattr(i, "callspec")}
        keys = [k for k in keys if any(k == c or k.startswith(c + ".") for c in wanted)]
    dtypes = FULL_DTYPES if full else CORE_DTYPES
    max_samples = MAX_SAMPLES_FULL if full else MAX_SAMPLES
    t0 = time.time()
    results = run_sweep(device, keys, dtypes, max_samples, ROOT / "build", reference=full,
                        jobs=FULL_JOBS if full else 1, autograd=autograd)
    if full:
        mode = f"reference_inputs, up to {max_samples} samples per (op, dtype), all ops"
        request.config._tpu_opinfo_summary = write_report(results, device, dtypes,
                                                          time.time() - t0, mode)
    _SWEEP["r"] = (results, keys, dtypes)
    return _SWEEP["r"]


@pytest.mark.parametrize("name", CORE_OPS)
def test_core_op(name, opinfo_results):
    """A CORE op passes forward on CORE_DTYPES and backward in float32 (float16/float64 results
    are reported, not asserted)."""
    results, keys, dtypes = opinfo_results
    mine = [k for k in keys if k == name or k.startswith(name + ".")]
    assert mine, f"core op {name!r} is not in op_db"
    bad = []
    ran = 0
    for k in mine:
        for d in CORE_DTYPES:
            r = results.get((k, d), {"status": "na"})
            if r["status"] in ("na", "skip"):
                continue
            ran += 1
            if r["status"] != "pass":
                bad.append(f"{k} {d}: {r['status']}: {r.get('msg', '')}")
            elif r.get("samples", 0) == 0:
                bad.append(f"{k} {d}: no sample ran")
            if r.get("bwd_status") not in (None, "pass", "na"):
                bad.append(f"{k} {d} backward: {r['bwd_status']}: {r.get('bwd_msg', '')}")
    assert ran, f"core op {name!r}: no dtype in {CORE_DTYPES} runs"
    assert not bad, "\n".join(bad)


@pytest.mark.full
def test_opinfo_report(opinfo_results):
    """The whole sweep: every (op, dtype) is classified and the report is written. Non-core
    failures are reported, not asserted."""
    results, keys, dtypes = opinfo_results
    assert len(keys) > 500
    missing = [(k, d) for k in keys for d in dtypes if (k, d) not in results]
    assert not missing, f"not classified: {missing[:10]}"
    assert REPORT.exists() and REPORT_JSON.exists()
    assert all(r["status"] in STATUSES for r in results.values())


def test_report_format():
    """The report's arithmetic on a hand-made result set (no device needed)."""
    res = {("a", "float32"): {"op": "a", "dtype": "float32", "status": "pass", "bwd_status": "fail",
                              "bwd_msg": "sample 0 backward (T(2,); args=[]; ): grad[0] shape (2,) "
                                         "float32: Tensor-likes are not close!"},
           ("b", "float32"): {"op": "b", "dtype": "float32", "status": "unsupported",
                              "msg": "sample 0 forward: The operator 'aten::foo.out' is not "
                                     "implemented for the tpu device yet.",
                              "bwd_status": "unsupported", "bwd_msg": "forward: x"},
           ("c", "float32"): {"op": "c", "dtype": "float32", "status": "skip", "msg": "random",
                              "bwd_status": "skip"},
           ("a", "bfloat16"): {"op": "a", "dtype": "bfloat16", "status": "pass", "bwd_status": None,
                               "kernels": {"a_kernel": ["float32", "float64"]}},
           ("d", "bfloat16"): {"op": "d", "dtype": "bfloat16", "status": "unsupported",
                               "msg": _error_message(NotImplementedError(
                                   "aten::_cdist_forward: dtype bfloat16 is not supported by its tpu kernel "
                                   "'_cdist_forward' (which computes in float32, float64). Set "
                                   "TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU (slow)."), "sample 0 forward"),
                               "bwd_status": None}}
    assert res[("d", "bfloat16")]["msg"].startswith(
        "sample 0 forward: refused by the dtype mask of kernel _cdist_forward (float32, float64): ")
    g = goals(res)
    assert g["float32 forward"]["pass"] == 1 and g["float32 forward"]["of"] == 2
    assert g["float32 backward"]["pass"] == 0 and g["float32 backward"]["of"] == 2
    assert g["bfloat16 forward"]["percent"] == 50.0  # d is unsupported
    causes = {c["cause"] for c in failure_causes(res)}
    assert "unsupported: no tpu kernel or decomposition: aten::foo.out" in causes
    assert ("unsupported: dtype bfloat16 refused by the dtype mask of kernel _cdist_forward (float32, float64)"
            in causes)
    md, data, short = format_report(res, "tpu", ["float32", "bfloat16"], 1.0, "test")
    assert "| a |" in md and data["totals"]["forward"]["skip"] == 1
    assert "| a_kernel: float32, float64 |" in md


if __name__ == "__main__":
    _args = _arg_parser().parse_args(sys.argv[1:])
    sys.exit(worker_main(_args) if (_args.worker or _args.op) else sweep_main(_args))
