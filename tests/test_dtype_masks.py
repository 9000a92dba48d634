"""Ask before you fail: each op-table entry declares the dtypes (and layouts) its kernel computes in, and
the boxed fallback checks them before anything is queued. A call the kernel cannot take raises
NotImplementedError at the call, naming the op and the dtype, in every eager mode (never an error at the
next sync), or runs on the CPU when the user opted in (TORCH_TPU_CPU_FALLBACK=1). Checked with
torch.cdist, whose kernel (_cdist_forward) computes in float32 and float64."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from torch_tpu import _C

DEV = "tpu"
MODES = ["strict", "debug", "defer_and_fuse"]


@pytest.fixture
def cdist_without_float16():
    dtypes = _C._op_dtypes("_cdist_forward")
    assert dtypes is not None, "no _cdist_forward kernel"
    if torch.float16 in dtypes:
        pytest.skip("_cdist_forward declares no dtype mask yet (0 accepts every dtype)")
    return dtypes


def _inputs(dtype):
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 5, 4, generator=g).to(dtype), torch.randn(3, 6, 4, generator=g).to(dtype)


def test_mask_as_python_sees_it(cdist_without_float16):
    assert torch.float32 in cdist_without_float16 and torch.float64 in cdist_without_float16
    assert _C._op_resolve("aten::_cdist_forward") == "_cdist_forward"


@pytest.mark.parametrize("mode", MODES)
def test_refused_dtype_raises_at_the_call(mode, cdist_without_float16):
    a, b = _inputs(torch.float16)
    at, bt = a.to(DEV), b.to(DEV)
    with torch_tpu.eager_mode(mode):
        with pytest.raises(NotImplementedError) as info:
            torch.cdist(at, bt)  # no sync: the call itself raises
        msg = str(info.value)
        assert "aten::_cdist_forward" in msg and "float16" in msg and "TORCH_TPU_CPU_FALLBACK" in msg, msg
        torch.tpu.synchronize()  # nothing was queued: no error left for the next sync
        # the process keeps working: the same op in a dtype the kernel takes matches CPU
        a32, b32 = _inputs(torch.float32)
        got = torch.cdist(a32.to(DEV), b32.to(DEV)).cpu()
    torch.testing.assert_close(got, torch.cdist(a32, b32))


def test_cpu_fallback_runs_refused_dtype_on_cpu(cdist_without_float16):
    """Under TORCH_TPU_CPU_FALLBACK=1 the refused call runs on the CPU (one warning per op) and its
    outcome is CPU's: the same result within float16's tolerance, or the same error where CPU has no
    float16 cdist either. A dtype the kernel takes still runs on the device, without a warning."""
    code = textwrap.dedent("""
        import warnings, torch
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(3, 5, 4, generator=g), torch.randn(3, 6, 4, generator=g)

        def outcome(x, y):
            try:
                return torch.cdist(x, y)
            except Exception as e:  # noqa: BLE001
                return e

        expected = outcome(a.half(), b.half())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [outcome(a.half().to("tpu"), b.half().to("tpu")) for _ in range(2)]
            f32 = torch.cdist(a.to("tpu"), b.to("tpu"))
        for g_ in got:
            if isinstance(expected, Exception):
                assert type(g_) is type(expected) and str(g_) == str(expected), (g_, expected)
            else:
                assert g_.device.type == "tpu" and g_.dtype == torch.float16
                torch.testing.assert_close(g_.cpu(), expected, atol=1e-3, rtol=1e-3)
        assert f32.device.type == "tpu"
        torch.testing.assert_close(f32.cpu(), torch.cdist(a, b))
        warned = [str(w.message) for w in caught if "_cdist_forward" in str(w.message)]
        assert len(warned) == 1 and "runs on the CPU" in warned[0], warned
        print("ok", type(expected).__name__)
    """)
    env = dict(os.environ, TORCH_TPU_CPU_FALLBACK="1")
    env.pop("TORCH_TPU_EAGER_MODE", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


def test_cpu_fallback_switch_in_process(cdist_without_float16):
    """torch.tpu.set_cpu_fallback turns the same refusal into a CPU run within a process."""
    a, b = _inputs(torch.float16)
    try:
        expected = torch.cdist(a, b)
    except Exception as e:  # noqa: BLE001 - CPU has no float16 cdist
        expected = e
    torch.tpu.set_cpu_fallback(True)
    try:
        try:
            got = torch.cdist(a.to(DEV), b.to(DEV))
        except Exception as e:  # noqa: BLE001
            got = e
    finally:
        torch.tpu.set_cpu_fallback(False)
    if isinstance(expected, Exception):
        assert type(got) is type(expected) and str(got) == str(expected)
    else:
        torch.testing.assert_close(got.cpu(), expected, atol=1e-3, rtol=1e-3)
    with pytest.raises(NotImplementedError, match="float16"):
        torch.cdist(a.to(DEV), b.to(DEV))


def test_non_strided_layouts_never_reach_a_kernel():
    """Kernels read strided tensors only (layouts mask). A sparse COO tpu tensor is a pair of strided tpu
    tensors (indices, values) that the sparse ops (torch_tpu/csrc/sparse.cpp) hand to the kernels; the
    compressed layouts are refused at the call."""
    x = torch.randn(3, 3)
    assert x.to_sparse().to(DEV).to_dense().cpu().equal(x)
    assert x.to(DEV).to_sparse()._values().layout == torch.strided
    with pytest.raises(NotImplementedError, match="sparse_csr"):
        x.to(DEV).to_sparse(layout=torch.sparse_csr)
    assert (x.to(DEV) * 2).cpu().equal(x * 2)
