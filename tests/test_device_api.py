"""torch.tpu, the device module: each function's behaviour (not only its presence), compared with what
torch.cuda users expect. Behaviour that needs a fresh process (environment variables, OOM with a
small HBM, the CPU fallback) runs in a subprocess."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import torch_tpu  # noqa: F401  (autoload normally did this already)
from torch_tpu import _C
from torch_tpu._internal import execution_mode as em

MiB = 1 << 20


def run_py(code, stderr=False, **env_extra):
    """Runs `code` in a fresh interpreter with extra environment; returns stdout, or (stdout, stderr)
    (asserts exit 0)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_TPU_HBM_BYTES", "TORCH_TPU_CPU_FALLBACK", "TPU_LAUNCH_BLOCKING",
                        "TORCH_TPU_NUM_CHIPS", "TORCH_TPU_DEFER_AND_FUSE")}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return (proc.stdout, proc.stderr) if stderr else proc.stdout


# ---- registration, availability, current chip ----

def test_registered_as_the_accelerator():
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.is_available()
    assert torch.get_device_module("tpu") is torch.tpu
    assert torch.tpu.is_available() and torch.tpu.is_initialized()
    assert torch.tpu.device_count() == 1
    assert torch.tpu.current_device() == 0
    assert torch.accelerator.current_device_index() == 0


def test_tensor_and_module_methods():
    t = torch.arange(6, dtype=torch.float32).tpu()
    assert t.is_tpu and t.device == torch.device("tpu", 0)
    assert t.cpu().tolist() == [0, 1, 2, 3, 4, 5]
    m = torch.nn.Linear(3, 2).tpu()
    assert all(p.device.type == "tpu" for p in m.parameters())
    assert not torch.ones(1).is_tpu


def test_set_device_and_device_context():
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    torch.tpu.set_device(torch.device("tpu", 0))
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(1, device="tpu")):
        assert torch.tpu.current_device() == 0
    with pytest.raises(RuntimeError, match="invalid tpu device index 3"):
        torch.tpu.set_device(3)
    with pytest.raises(ValueError):
        torch.tpu.set_device("cpu")


def test_more_chips_visible_with_env():
    out = run_py("""
        import torch
        print(torch.tpu.device_count())
        with torch.tpu.device(1):
            print(torch.tpu.current_device())
        print(torch.tpu.current_device())
    """, TORCH_TPU_NUM_CHIPS="2")
    assert out.split() == ["2", "1", "0"]


def test_device_name_and_properties():
    props = torch.tpu.get_device_properties(0)
    assert isinstance(torch.tpu.get_device_name(), str) and torch.tpu.get_device_name() == props.name
    assert props.total_memory == torch.tpu.mem_get_info()[1] > 0
    assert props.num_threads >= 1
    assert "total_memory" in repr(props)


def test_amp_dtypes():
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()
    assert torch.float16 in torch.tpu.get_amp_supported_dtype()
    assert torch.tpu.is_bf16_supported()


def test_autocast_policy():
    a = torch.randn(8, 8).to("tpu")
    b = torch.randn(8, 8).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        mm = a @ b
        sm = torch.softmax(mm, dim=-1)
        cat = torch.cat([mm, a])
    assert mm.dtype == torch.bfloat16
    assert sm.dtype == torch.float32   # accuracy-sensitive ops run in float32
    assert cat.dtype == torch.float32  # mixed inputs run in the widest dtype
    torch.testing.assert_close(mm.float().cpu(), a.cpu() @ b.cpu(), atol=0.1, rtol=0.02)
    with torch.autocast("tpu"):  # PyTorch's default autocast dtype for a PrivateUse1 device: float16
        assert torch.nn.functional.linear(a, b).dtype == torch.get_autocast_dtype("tpu")
    assert (a @ b).dtype == torch.float32


def test_init_is_idempotent_and_fork_state():
    torch.tpu.init()
    torch.tpu._lazy_init()
    assert torch.tpu.is_initialized()
    assert torch.tpu._is_in_bad_fork() is False
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only reads a Python flag, then leaves without running any cleanup
        os.write(w, b"1" if torch.tpu._is_in_bad_fork() else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    os.close(r)
    os.close(w)


# ---- synchronization ----

def _busy(n=512):
    a = torch.randn(n, n).to("tpu")
    for _ in range(4):
        a = a @ a / n
    return a


def test_synchronize_waits():
    _busy()
    done = torch.tpu.Event()
    done.record()
    torch.tpu.synchronize()
    assert done.query()
    _busy()
    done2 = torch.Event(device="tpu")
    done2.record()
    torch.accelerator.synchronize()
    assert done2.query()


# ---- memory ----

def _settle():
    torch.tpu.synchronize()


def test_memory_allocated_tracks_tensors():
    _settle()
    before = torch.tpu.memory_allocated()
    t = torch.empty(MiB, dtype=torch.float32, device="tpu")  # 4 MiB
    assert torch.tpu.memory_allocated() - before == 4 * MiB
    assert torch.tpu.memory_allocated(0) == torch.tpu.memory_allocated("tpu:0")
    del t
    _settle()
    assert torch.tpu.memory_allocated() == before


def test_peak_and_reset():
    _settle()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() == base
    t = torch.empty(2 * MiB, dtype=torch.float32, device="tpu")  # 8 MiB
    del t
    _settle()
    assert torch.tpu.max_memory_allocated() >= base + 8 * MiB
    assert torch.tpu.max_memory_reserved() >= torch.tpu.max_memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated() == base


def test_reserved_cache_and_mem_get_info():
    _settle()
    t = torch.empty(4 * MiB, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated() >= 4 * MiB
    del t
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    free0, total = torch.tpu.mem_get_info()
    assert 0 < free0 <= total
    t = torch.empty(16 * MiB, dtype=torch.uint8, device="tpu")
    free1, _ = torch.tpu.mem_get_info()
    assert free0 - free1 >= 16 * MiB
    del t


def test_memory_stats_keys_agree():
    _settle()
    t = torch.ones(1000, device="tpu")
    s = torch.tpu.memory_stats()
    assert s["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert s["allocated_bytes.all.peak"] == torch.tpu.max_memory_allocated()
    assert s["reserved_bytes.all.current"] == torch.tpu.memory_reserved()
    assert s["reserved_bytes.all.peak"] == torch.tpu.max_memory_reserved()
    assert s["allocation.all.allocated"] - s["allocation.all.freed"] == s["allocation.all.current"] >= 1
    assert s["capacity_bytes"] == torch.tpu.mem_get_info()[1]
    for key in ("num_ooms", "num_alloc_retries", "segment.all.current"):
        assert key in s and s[key] >= 0
    assert torch.tpu.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["current"] == \
        s["allocated_bytes.all.current"]
    assert "tpu:0" in torch.tpu.memory_summary()
    del t


def test_accelerator_memory_api_agrees():
    _settle()
    t = torch.empty(MiB, device="tpu")
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
    assert torch.accelerator.memory_allocated() >= MiB
    assert torch.accelerator.max_memory_allocated() == torch.tpu.max_memory_allocated()
    assert torch.accelerator.memory_reserved() == torch.tpu.memory_reserved()
    del t
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()


def test_out_of_memory_is_recoverable():
    out = run_py("""
        import torch
        print(torch.tpu.get_device_properties().total_memory, torch.tpu.mem_get_info()[1])
        x = torch.ones(4 * 2**20, device="tpu")  # 16 MiB live
        free, total = torch.tpu.mem_get_info()
        try:
            torch.empty(128 * 2**20, dtype=torch.uint8, device="tpu")
        except torch.OutOfMemoryError as e:
            msg = str(e)
        else:
            raise SystemExit("no OutOfMemoryError")
        print("requested" in msg.lower() or "tried to allocate" in msg.lower(),
              str(128 * 2**20) in msg or "128.00 MiB" in msg or "128 MiB" in msg,
              "free" in msg.lower())
        y = torch.ones(2**20, device="tpu") * 3          # the device still works
        print(float(y.sum().item()), float(x.sum().item()))
        print(torch.tpu.memory_stats()["num_ooms"])
        print(msg)
    """, TORCH_TPU_HBM_BYTES="64M")
    lines = out.splitlines()
    assert lines[0].split() == [str(64 * MiB)] * 2, out  # TORCH_TPU_HBM_BYTES=64M sets the capacity
    assert lines[1] == "True True True", out
    assert lines[2] == f"{3.0 * 2**20} {4.0 * 2**20}", out
    assert lines[3] == "1", out


# ---- random ----

def test_manual_seed_reproducible():
    torch.tpu.manual_seed(123)
    assert torch.tpu.initial_seed() == 123
    a = torch.randn(1000, device="tpu")
    torch.tpu.manual_seed(123)
    b = torch.randn(1000, device="tpu")
    assert torch.equal(a.cpu(), b.cpu())
    c = torch.randn(1000, device="tpu")
    assert not torch.equal(a.cpu(), c.cpu())
    torch.manual_seed(7)  # seeds every device, tpu included (manual_seed_all)
    d = torch.randn(1000, device="tpu")
    torch.tpu.manual_seed_all(7)
    e = torch.randn(1000, device="tpu")
    assert torch.equal(d.cpu(), e.cpu())


def test_randn_is_standard_normal():
    torch.tpu.manual_seed(0)
    x = torch.randn(100_000, device="tpu").cpu().double()
    assert abs(x.mean().item()) < 0.02 and abs(x.std().item() - 1) < 0.02


def test_seed_and_initial_seed():
    torch.tpu.seed()
    s1 = torch.tpu.initial_seed()
    torch.tpu.seed()
    assert torch.tpu.initial_seed() != s1
    torch.tpu.seed_all()


def test_rng_state_round_trip():
    torch.tpu.manual_seed(5)
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.rand(100, device="tpu")
    torch.tpu.set_rng_state(state)
    b = torch.rand(100, device="tpu")
    assert torch.equal(a.cpu(), b.cpu())
    states = torch.tpu.get_rng_state_all()
    assert len(states) == torch.tpu.device_count()
    c = torch.rand(100, device="tpu")
    torch.tpu.set_rng_state_all(states)
    assert torch.equal(c.cpu(), torch.rand(100, device="tpu").cpu())
    with torch.random.fork_rng(device_type="tpu"):
        torch.rand(10, device="tpu")
    torch.tpu.set_rng_state_all(states)
    expected = torch.rand(100, device="tpu").cpu()
    torch.tpu.set_rng_state_all(states)
    with torch.random.fork_rng(device_type="tpu"):
        torch.rand(10, device="tpu")
    assert torch.equal(torch.rand(100, device="tpu").cpu(), expected)
    assert len(torch.tpu.default_generators) == torch.tpu.device_count()


# ---- streams and events ----

def test_stream_basics():
    s = torch.tpu.Stream()
    assert isinstance(s, torch.Stream) and s.device == torch.device("tpu", 0)
    default = torch.tpu.default_stream()
    assert torch.tpu.current_stream() == default
    assert s != default
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        x = torch.full((256, 256), 2.0, device="tpu")
        y = x @ x
    assert torch.tpu.current_stream() == default
    s.synchronize()
    assert s.query()
    assert torch.equal(y.cpu(), torch.full((256, 256), 1024.0))
    torch.tpu.set_stream(s)
    assert torch.tpu.current_stream() == s
    torch.tpu.set_stream(default)
    assert torch.tpu.current_stream() == default
    g = torch.Stream(device="tpu")  # PyTorch's generic stream reaches the same runtime queues
    assert g.device.type == "tpu"


def test_event_record_query_synchronize_elapsed():
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    assert isinstance(start, torch.Event) and isinstance(start, torch.tpu.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.tpu.Event)
    start.record()
    _busy()
    end.record()
    end.synchronize()
    assert end.query() and start.query()
    ms = start.elapsed_time(end)
    assert ms >= 0.0


def test_wait_stream_orders_work():
    s = torch.tpu.Stream()
    default = torch.tpu.current_stream()
    a = torch.full((512, 512), 1.0, device="tpu")
    default.synchronize()
    with torch.tpu.stream(s):
        b = a @ a                      # 512 everywhere, produced on s
    default.wait_stream(s)             # later work on default waits for s
    c = b + 1
    assert torch.equal(c.cpu(), torch.full((512, 512), 513.0))
    ev = s.record_event()
    default.wait_event(ev)
    ev.synchronize()
    assert ev.query()


# ---- execution modes ----

def test_execution_modes():
    assert em.eager_mode is em.EagerMode.STRICT
    em.eager_mode = em.EagerMode.DEBUG
    try:
        assert _C._get_exec_mode() == 1 and em.eager_mode is em.EagerMode.DEBUG
        assert (torch.ones(3, device="tpu") * 2).cpu().tolist() == [2, 2, 2]
        with em.set_eager_mode(em.EagerMode.STRICT):
            assert em.eager_mode is em.EagerMode.STRICT
        assert em.eager_mode is em.EagerMode.DEBUG
    finally:
        em.eager_mode = em.EagerMode.STRICT
    assert _C._get_exec_mode() == 0
    with em.set_eager_mode(em.EagerMode.DEFER_AND_FUSE):
        assert _C._get_exec_mode() == 2 and em.eager_mode is em.EagerMode.DEFER_AND_FUSE
        assert (torch.ones(3, device="tpu") * 2 + 1).cpu().tolist() == [3, 3, 3]
    assert em.eager_mode is em.EagerMode.STRICT
    with pytest.raises(ValueError):
        em.eager_mode = "fastest"


def test_launch_blocking_selects_debug():
    out = run_py("""
        from torch_tpu._internal import execution_mode as em
        import torch
        print(em.eager_mode)
    """, TPU_LAUNCH_BLOCKING="1")
    assert out.strip() == "EagerMode.DEBUG"


# ---- ops with no kernel ----

# An operator no kernel table will ever have: defined here with a CPU kernel only, so a call on tpu
# tensors reaches the boxed fallback and finds no C kernel (whatever kernels the runtime gains).
_NO_KERNEL_OP = """
import torch
_lib = torch.library.Library("tpu_test", "DEF")
_lib.define("cube_plus(Tensor x, float c) -> Tensor")
_lib.impl("cube_plus", lambda x, c: x * x * x + c, "CPU")
"""
_no_kernel = {}
exec(_NO_KERNEL_OP, _no_kernel)


def test_unimplemented_op_message():
    x = torch.rand(8).to("tpu")
    with pytest.raises(NotImplementedError) as info:
        torch.ops.tpu_test.cube_plus(x, 1.0)  # raised at the call, not at a sync
    msg = str(info.value)
    assert "tpu_test::cube_plus" in msg and "TORCH_TPU_CPU_FALLBACK" in msg
    assert (x + 1).cpu().tolist() == (x.cpu() + 1).tolist()  # the process goes on


def test_cpu_fallback_opt_in():
    out, err = run_py(_NO_KERNEL_OP + """
import warnings
x = torch.rand(64, dtype=torch.float64) * 4 - 2
expected = x * x * x + 0.5
xt = x.to("tpu")
got1 = torch.ops.tpu_test.cube_plus(xt, 0.5)
got2 = torch.ops.tpu_test.cube_plus(xt, 0.5)
print(got1.device, torch.equal(got1.cpu(), expected), torch.equal(got2.cpu(), expected))
# An op whose PyTorch decomposition maps back onto itself (no kernel underneath) falls back too.
from torch_tpu.decompositions import registered_ops
if "aten::special_i0e.out" in registered_ops():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [torch.special.i0e(xt).cpu() for _ in range(2)]
    print(all(torch.allclose(g, torch.special.i0e(x)) for g in got),
          sum("special_i0e" in str(w.message) for w in caught))
else:
    print("True 1")  # it got a kernel: nothing to fall back from
""", stderr=True, TORCH_TPU_CPU_FALLBACK="1")
    lines = out.splitlines()
    assert lines[0] == "tpu:0 True True", out
    # the one-time warning (torch.ops calls print C++ warnings on stderr instead of warnings.warn)
    assert err.count("'tpu_test::cube_plus' is not implemented on the tpu device; it runs on the CPU") == 1, err
    assert lines[1] == "True 1", out
    assert torch.tpu.get_cpu_fallback() is False  # this process did not opt in


# ---- decompositions ----

def test_decompositions_only_where_no_kernel():
    from torch_tpu import decompositions as d
    names = d.registered_ops()
    for name in names:
        op = torch._ops.ops.aten
        base, _, overload = name.split("::")[1].partition(".")
        ov = getattr(getattr(op, base), overload or "default")
        assert d.kernel_of(ov) is None, name
        assert not ov.is_view, name
    everything = {d._qualified_name(o) for o, _ in d.candidates(lambda op: None)}
    assert "aten::transpose.int" not in everything   # a view
    assert "aten::empty.memory_format" not in everything  # a factory
    assert "aten::add.Tensor" not in everything      # PyTorch decomposes it above the backend


def test_kernel_resolution_rule():
    """Python asks the runtime's one rule (tpurt_op_resolve): "base.overload", then "base", an in-place
    name without its "_", dunders kept, complex calls to "complex::" kernels or to kernels born complex."""
    from torch_tpu import decompositions as d
    assert _C._op_resolve("aten::add_", "Tensor") == "add"
    assert d.kernel_of(torch.ops.aten.add_.Tensor) == "add"
    assert d.kernel_of(torch.ops.aten.relu.default) == "relu"
    assert _C._op_resolve("aten::sum", "dim_IntList") == "sum"
    assert _C._op_resolve("aten::__ilshift__", "Tensor") == "__ilshift__"  # a dunder keeps its "_"
    assert _C._op_resolve("aten::add", "Tensor", complex=True) == "complex::add"
    assert _C._op_resolve("aten::polar", "", complex=True) == "polar"  # born complex (TPURT_OP_COMPLEX)
    assert _C._op_resolve("aten::no_such_op") is None
    assert _C._op_resolve("aten::lgamma", "", complex=True) is None  # no complex lgamma kernel
    # The dtype mask of an entry, as torch dtypes; None for a name not in the table.
    assert _C._op_dtypes("no_such_kernel") is None
    add = _C._op_dtypes("add")
    assert torch.float32 in add and all(isinstance(t, torch.dtype) for t in add)


@pytest.mark.parametrize("expr", [
    "torch.nn.functional.hardswish(x)", "torch.flip(x, [0])", "torch.roll(x, 3, 1)",
    "torch.trace(x)", "torch.nansum(x, 1)", "torch.nn.functional.hardtanh(x, -0.5, 0.5)",
    "torch.index_select(x, 1, torch.tensor([2, 0, 1], device=x.device))",
])
def test_ops_match_cpu_with_kernel_or_decomposition(expr):
    torch.manual_seed(0)
    x_cpu = torch.randn(6, 6)
    expected = eval(expr, {"torch": torch, "x": x_cpu})
    got = eval(expr, {"torch": torch, "x": x_cpu.to("tpu")}).cpu()
    torch.testing.assert_close(got, expected)
