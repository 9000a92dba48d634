"""What the device does, as PyTorch's tools show it: torch.profiler's device activity (a Kineto
PrivateUse1 plugin over the runtime's trace), memory history snapshots in torch.cuda's format, the
roofline projection on real TPU generations, and float32 matmul precision as on a TPU's MXU."""
import json
import math
import os
import pickle
import subprocess
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_tpu
from torch_tpu import _C

sys.path.insert(0, os.path.dirname(__file__))
from test_models import GPT, _lm_batch, _lm_loss  # noqa: E402

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
DEVICE_CATS = ("kernel", "gpu_memcpy")


def _gpt_step_profile(mode, tmp_path):
    torch.manual_seed(0)
    m = GPT(vocab=256, d=128, heads=4, layers=2, seq=32).tpu()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = (t.tpu() for t in _lm_batch(256, 8, 32)(torch.Generator().manual_seed(1)))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = _lm_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    with torch_tpu.eager_mode(mode):
        step()  # warm: first-call work (meta functions, kernel builds) stays out of the profile
        with profile(activities=ACTIVITIES) as prof:
            step()
    path = tmp_path / f"trace_{mode}.json"
    prof.export_chrome_trace(str(path))
    return prof, json.loads(path.read_text())["traceEvents"]


@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
def test_gpt_step_profile(mode, tmp_path):
    prof, events = _gpt_step_profile(mode, tmp_path)
    runtime_events, busy_ns = _C._trace_last()
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]
    ops = {e["args"]["External id"]: e["name"] for e in events if e.get("cat") == "cpu_op"}
    launches = [e for e in events if e.get("cat") == "privateuse1_runtime"]

    # A device event for every kernel the device ran (the runtime's own record of what it ran).
    assert len(device) == len(runtime_events) > 50
    kernels = [e for e in runtime_events if e["kind"] in ("kernel", "fused")]
    if mode == "defer_and_fuse":
        assert any(e["name"].startswith("fused: ") for e in device), "no fused chain in the trace"
    else:
        assert not any(e["kind"] == "fused" for e in runtime_events)
        # one op call, one kernel: every launch has its device event
        assert len(launches) == len(kernels) + sum(e["kind"] == "copy" for e in runtime_events)

    # Device times add up to the device's busy time (every command it ran is accounted for).
    total_ns = sum(e["dur"] for e in device) * 1e3
    assert total_ns == pytest.approx(busy_ns, rel=0.10), (total_ns, busy_ns)

    # Correlation ids name the aten op that launched each kernel.
    linked = [e for e in device if e["args"].get("External id")]
    assert len(linked) == len(kernels) + sum(e["kind"] == "copy" for e in runtime_events)
    for e in linked:
        op = ops.get(e["args"]["External id"])
        assert op is not None and op.startswith("aten::"), (e["name"], op)
    by_name = {}
    for e in linked:
        by_name.setdefault(e["name"].split(".")[0], set()).add(ops[e["args"]["External id"]])
    assert by_name["mm"] == {"aten::mm"}
    # attention is one fused kernel each way, linked to the SDPA op that launched it
    sdpa = "_scaled_dot_product_flash_attention_for_cpu"
    assert by_name[sdpa] == {"aten::" + sdpa}
    assert by_name[sdpa + "_backward"] == {"aten::" + sdpa + "_backward"}
    assert by_name["addmm"] == {"aten::addmm"}

    # Flow arrows: each launch starts one, its kernel ends it.
    starts = {e["id"] for e in events if e.get("cat") == "ac2g" and e["ph"] == "s"}
    ends = {e["id"] for e in events if e.get("cat") == "ac2g" and e["ph"] == "f"}
    assert starts and starts == ends

    # The device's tracks: a process "TPU 0" with one thread per queue.
    names = {(e["pid"], e["args"]["name"]) for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert (0, "TPU 0") in names
    tracks = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0}
    assert "queue 0" in tracks
    assert all(e["pid"] == 0 for e in device)

    # key_averages: the matmuls have real device time.
    avg = {a.key: a for a in prof.key_averages()}
    assert avg["aten::mm"].self_device_time_total > 0
    assert "Self TPU" in prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)


def test_profile_streams_and_tensorboard(tmp_path):
    """A second queue gets its own track; tensorboard_trace_handler writes a trace that loads."""
    a = torch.randn(128, 128, device="tpu")
    s = torch.tpu.Stream()
    handler = torch.profiler.tensorboard_trace_handler(str(tmp_path))
    with profile(activities=ACTIVITIES, on_trace_ready=handler):
        b = a @ a
        with torch.tpu.stream(s):
            c = a + 1
        torch.tpu.synchronize()
    files = list(tmp_path.glob("*.pt.trace.json"))
    assert len(files) == 1
    events = json.loads(files[0].read_text())["traceEvents"]
    dev = [e for e in events if e.get("cat") == "kernel"]
    assert {e["tid"] for e in dev} == {0, _stream_queue(s)}
    assert {e["name"].split(".")[0] for e in dev} >= {"mm", "add"}
    del b, c
    # TensorBoard's profiler plugin (torch-tb-profiler) parses it and builds its views.
    pytest.importorskip("pandas")
    data = pytest.importorskip("torch_tb_profiler.profiler.data")
    from torch_tb_profiler.profiler.run_generator import RunGenerator
    prof = data.RunProfileData.parse("worker", "1", str(files[0]), str(tmp_path / "cache"))
    assert prof.has_kernel
    assert prof.device_props and prof.device_props[0]["name"] == "vTPU"
    views = {v.display_name for v in RunGenerator("worker", "1", prof).generate_run_profile().views}
    assert {"Overview", "Operator", "Kernel", "Trace"} <= views


def _stream_queue(stream):
    evs, _ = _C._trace_last()
    return max(e["queue"] for e in evs)


def test_profiling_off_records_nothing():
    x = torch.randn(64, device="tpu")
    with profile(activities=ACTIVITIES):
        (x + 1).sum().item()
    n = len(_C._trace_last()[0])
    assert n > 0
    (x * 2).sum().item()
    torch.tpu.synchronize()
    assert len(_C._trace_last()[0]) == n  # nothing was recorded after the profile ended


def test_projected_track(tmp_path):
    x = torch.randn(256, 256, device="tpu")
    torch_tpu.projection.set_chip("v6e")
    try:
        with profile(activities=ACTIVITIES) as prof:
            (x @ x).relu().sum().item()
    finally:
        torch_tpu.projection.set_chip(None)
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    proj = [e for e in events if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("projected v6e: ")]
    dev = [e for e in events if e.get("cat") == "kernel"]
    assert len(proj) == len(dev)
    tracks = {e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert "projected v6e (queue 0)" in tracks
    mm = next(e for e in proj if e["name"].startswith("projected v6e: mm"))
    assert mm["args"]["bound"] in ("compute", "memory")


# ---------------------------------------------------------------- projection

def test_projection_gemm_and_add_match_hand_calculation():
    m, k, n = 512, 256, 1024
    a, b = torch.randn(m, k, device="tpu"), torch.randn(k, n, device="tpu")
    x, y = torch.randn(1 << 22, device="tpu"), torch.randn(1 << 22, device="tpu")
    launch = _C._project_launch_s()
    with torch_tpu.projection.record():
        a @ b
        x + y
        a.to(torch.bfloat16) @ b.to(torch.bfloat16)
    gemm = next(e for e in torch_tpu.projection.events("v5e") if e["name"].startswith("mm") and e["dtype"] == 8)
    # float32 GEMM: 2*m*n*k flops, (m*k + k*n + m*n) * 4 bytes; v5e: 197e12 bf16 FLOP/s, 819e9 B/s;
    # at "highest" a float32 product is 6 bf16 passes.
    flops, nbytes = 2 * m * n * k, (m * k + k * n + m * n) * 4
    assert gemm["flops"] == flops and gemm["bytes"] == nbytes
    t_compute, t_mem = flops / (197e12 / 6), nbytes / 819e9
    assert gemm["projected_s"] == pytest.approx(max(t_compute, t_mem) + launch, rel=1e-9)
    assert gemm["bound"] == ("compute" if t_compute > t_mem else "memory")
    # Large add: 3 * 4 MiB-element float32 tensors through HBM, memory-bound.
    add = next(e for e in torch_tpu.projection.events("v5e") if e["name"].startswith("add"))
    assert add["bytes"] == 3 * (1 << 22) * 4 and add["flops"] == 1 << 22
    assert add["projected_s"] == pytest.approx(3 * (1 << 22) * 4 / 819e9 + launch, rel=1e-9)
    assert add["bound"] == "memory"
    # bf16 GEMM on v6e: one pass at 918e12.
    bf = next(e for e in torch_tpu.projection.events("v6e") if e["name"].startswith("mm") and e["dtype"] != 8)
    t_c, t_m = flops / 918e12, (m * k + k * n) * 2 / 1638e9 + m * n * 2 / 1638e9
    assert bf["projected_s"] == pytest.approx(max(t_c, t_m) + launch, rel=1e-9)
    # "high" precision: 3 passes.
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        g3 = next(e for e in torch_tpu.projection.events("v5e") if e["name"].startswith("mm") and e["dtype"] == 8)
        assert g3["projected_s"] == pytest.approx(max(flops / (197e12 / 3), t_mem) + launch, rel=1e-9)
    finally:
        torch.set_float32_matmul_precision(prev)
    with open(os.devnull, "w") as devnull:
        out = torch_tpu.projection.summary("v5e", file=devnull)
    assert out["kernels"] == len(torch_tpu.projection.events("v5e"))
    assert out["projected_s"] == pytest.approx(sum(e["projected_s"] for e in torch_tpu.projection.events("v5e")))


def test_projection_fused_chain_costed_as_fused():
    x = torch.randn(1 << 20, device="tpu")
    with torch_tpu.eager_mode("defer_and_fuse"):
        with torch_tpu.projection.record():
            ((x * 2 + 1).exp() - x).sum().item()
    fused = [e for e in torch_tpu.projection.events("v6e") if e["kind"] == "fused"]
    assert fused, torch_tpu.projection.events("v6e")
    f = fused[0]
    # read x once (the chain's intermediates stay in registers), write nothing but what is stored
    assert f["bytes"] < 4 * (1 << 20) * 4
    assert f["flops"] >= 4 * (1 << 20)


def test_projection_chips_and_errors():
    names = {c["name"] for c in torch_tpu.projection.chips()}
    assert names == {"v5e", "v5p", "v6e", "v7"}
    assert all(c["source"].startswith("cloud.google.com/tpu/docs/") for c in torch_tpu.projection.chips())
    with pytest.raises(ValueError, match="unknown TPU generation"):
        torch_tpu.projection.set_chip("v9")


# ---------------------------------------------------------------- float32 matmul precision

@pytest.mark.parametrize("fn", ["mm", "conv"])
def test_fp32_matmul_precision_error_order(fn):
    """highest: float32; high: bf16x3 (about 16 mantissa bits); medium: one bf16 pass (8 bits)."""
    g = torch.Generator().manual_seed(0)
    if fn == "mm":
        a, b = torch.randn(96, 384, generator=g), torch.randn(384, 80, generator=g)
        ref = a.double() @ b.double()
        run = lambda: (a.tpu() @ b.tpu()).cpu()  # noqa: E731
    else:
        a, b = torch.randn(2, 16, 12, 12, generator=g), torch.randn(8, 16, 3, 3, generator=g)
        ref = torch.nn.functional.conv2d(a.double(), b.double())
        run = lambda: torch.nn.functional.conv2d(a.tpu(), b.tpu()).cpu()  # noqa: E731
    scale = ref.abs().max().item()
    prev = torch.get_float32_matmul_precision()
    err = {}
    try:
        for p in ("highest", "high", "medium"):
            torch.set_float32_matmul_precision(p)
            err[p] = (run().double() - ref).abs().max().item() / scale
    finally:
        torch.set_float32_matmul_precision(prev)
    # Relative to the largest |result|; K = 384 (mm) and 144 (conv) terms of unit normals. float32
    # rounding: ~2^-24 per term; bf16x3 drops the lo*lo term and rounds lo to bf16: ~2^-17; one bf16
    # pass rounds each operand to 8 bits: ~2^-9. Measured: 3e-7, 4-5e-6, 2.1-2.4e-3.
    assert err["highest"] < 2e-6
    assert 1e-6 < err["high"] < 5e-5
    assert 5e-4 < err["medium"] < 1e-2
    assert err["medium"] > 100 * err["high"] and err["high"] > 3 * err["highest"]


# ---------------------------------------------------------------- memory snapshots

def _train_loop(steps=3):
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).tpu()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    for _ in range(steps):
        loss = m(torch.randn(128, 64, device="tpu")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    # larger than any segment earlier code can have left partly used: a segment_alloc event for sure
    buf = torch.zeros(128 << 20, dtype=torch.uint8, device="tpu")
    return m, opt, buf


def test_memory_snapshot_round_trips_through_memory_viz(tmp_path):
    from torch.cuda import _memory_viz

    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    # blocks that earlier code keeps alive were allocated before recording: no stack, as on CUDA
    before = {b["address"] for s in torch.tpu.memory._snapshot()["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"}
    torch.tpu.memory._record_memory_history(max_entries=100000)
    try:
        keep = _train_loop()
        torch.tpu.synchronize()
        path = tmp_path / "snapshot.pickle"
        torch.tpu.memory._dump_snapshot(str(path))
        snap = pickle.loads(path.read_bytes())
        # The allocator's state: segments add up to memory_reserved, live blocks to memory_allocated.
        assert sum(s["total_size"] for s in snap["segments"]) == torch.tpu.memory_reserved()
        live = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
        assert sum(b["size"] for b in live) == torch.tpu.memory_allocated()
        for s in snap["segments"]:
            assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
        # Each live block carries the Python stack that allocated it.
        assert all(b["frames"] for b in live if b["address"] not in before)
        assert all(not b["frames"] for b in live if b["address"] in before)
        assert any(f["name"] == "_train_loop" for b in live for f in b["frames"])
        trace = snap["device_traces"][0]
        actions = {e["action"] for e in trace}
        assert {"alloc", "free_requested", "free_completed", "segment_alloc"} <= actions
        # memory_viz reads it as a CUDA snapshot.
        assert "segments:" in _memory_viz.segsum(snap)
        assert "entries" in _memory_viz.trace(snap)
        # (flamegraph lines, not the flamegraph.pl rendering, which would be downloaded)
        lines = _memory_viz.memory(snap, format_flamegraph=lambda text: text)
        assert "_train_loop" in lines and "active_allocated" in lines
        assert "stream_0;seg_" in _memory_viz.segments(snap, format_flamegraph=lambda text: text)
        html = _memory_viz.trace_plot(snap)
        assert "snapshot.pickle" in html
        _memory_viz.segment_plot(snap)
        # An OOM is in the trace, and its error points at the snapshot.
        with pytest.raises(torch.OutOfMemoryError, match="_dump_snapshot"):
            torch.empty(1 << 45, dtype=torch.uint8, device="tpu")
        oom = [e for e in torch.tpu.memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
        assert oom and oom[-1]["size"] == 1 << 45 and oom[-1]["device_free"] > 0
        del keep
    finally:
        torch.tpu.memory._record_memory_history(enabled=None)
    with pytest.raises(torch.OutOfMemoryError) as e:
        torch.empty(1 << 45, dtype=torch.uint8, device="tpu")
    assert "_dump_snapshot" not in str(e.value)
    assert torch.tpu.memory._snapshot()["device_traces"][0] == []


SNAPSHOT_UNDER_GC = r"""
import gc, torch, torch_tpu
torch.tpu.memory._record_memory_history(max_entries=1000)
class Cycle:
    pass
for i in range(200):  # garbage only the cycle collector frees, each holding a tpu tensor
    c = Cycle(); c.me = c; c.t = torch.full((64,), float(i), device="tpu")
del c
gc.set_threshold(1)  # a collection at the snapshot's first new dict frees those tensors
snap = torch.tpu.memory._snapshot()
gc.set_threshold(700)
frees = sum(1 for e in snap["device_traces"][0] if e["action"] == "free_completed")
gc.collect()
after = sum(1 for e in torch.tpu.memory._snapshot()["device_traces"][0] if e["action"] == "free_completed")
print("ok", frees, after)
"""


def test_memory_snapshot_while_the_garbage_collector_frees_tpu_tensors():
    """Building the snapshot's Python objects can run the cycle collector, which frees tpu tensors,
    whose frees are recorded under the history's lock: the snapshot deadlocked when it built them with
    that lock held (a hang seen in the test suite). In a subprocess, so a hang fails by its timeout."""
    out = subprocess.run([sys.executable, "-c", SNAPSHOT_UNDER_GC], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    ok, frees, after = out.stdout.split()
    assert ok == "ok" and int(after) == 200 and int(frees) <= 200  # every free recorded, once


def test_profile_memory_reports_tpu_allocations():
    with profile(activities=ACTIVITIES, profile_memory=True) as prof:
        x = torch.randn(1024, 1024, device="tpu")
        y = x * 2
        del x
        torch.tpu.synchronize()
    rows = {a.key: a for a in prof.key_averages()}
    assert rows["aten::mul"].device_memory_usage >= 4 * 1024 * 1024
    del y


def test_compiled_program_kernels_link_to_their_launch():
    @torch.compile(backend="tpu")
    def f(x, w):
        return (x @ w).relu() * 2 + 1

    # 128x128: programs fuse chains of at least TORCH_TPU_PROGRAM_FUSE_MIN_NUMEL (16384) elements
    x, w = torch.randn(128, 128, device="tpu"), torch.randn(128, 128, device="tpu")
    f(x, w)
    f(x, w)
    torch.tpu.synchronize()
    with profile(activities=ACTIVITIES):
        out = f(x, w)
        torch.tpu.synchronize()
    evs = [e for e in _C._trace_last()[0] if e["kind"] in ("kernel", "fused")]
    assert {e["name"].split(".")[0] for e in evs} >= {"mm"}
    assert any(e["kind"] == "fused" for e in evs)  # the elementwise tail runs as one kernel
    # every kernel of the program is linked to the one launch
    assert len({e["launch_ns"] for e in evs}) == 1
    torch.testing.assert_close(out.cpu(), ((x.cpu() @ w.cpu()).relu() * 2 + 1), rtol=1e-4, atol=1e-4)
