"""tpu_dist: the topology (hand-worked layouts), and 2- and 4-rank process groups spawned on this machine: every
collective x dtype x sync/async against CPU references, subgroups, functional collectives, a device mesh, DDP parity
with one process on the same global batch, and the failures that must never hang (a killed rank, a skipped
collective, mismatched shapes). Ranks share the machine's cores: one compute thread per chip."""
import os
import socket
import sys
import tempfile
import time

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(fn_name, world, topology=None, timeout=240, expect_dead=(), hosts=1):
    """Starts `world` ranks running dist_workers.<fn_name>; returns after all exit. Ranks in expect_dead must die
    by a signal; every other rank must report success."""
    import multiprocessing as mp
    import dist_workers
    ctx = mp.get_context("spawn")
    outdir = tempfile.mkdtemp(prefix="tpu_dist_test_")
    port = _free_port()
    saved = dict(os.environ)
    procs = []
    try:
        for r in range(world):
            os.environ.update({
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r), "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(r % (world // hosts)), "TORCH_TPU_TOPOLOGY": topology or str(world // hosts),
                "TORCH_TPU_NUM_THREADS": "1", "TORCH_TPU_HBM_BYTES": "1G", "TORCH_TPU_HOST_ID": f"host{r * hosts // world}"})
            p = ctx.Process(target=dist_workers.run_rank, args=(fn_name, r, world, outdir))
            p.start()
            procs.append(p)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    errors = []
    for r in range(world):
        err = os.path.join(outdir, f"rank{r}.err")
        if os.path.exists(err):
            errors.append(f"rank {r}:\n" + open(err).read())
    assert not hung, f"ranks {hung} hung (killed after {timeout} s)\n" + "\n".join(errors)
    assert not errors, "\n".join(errors)
    for r, p in enumerate(procs):
        if r in expect_dead:
            assert p.exitcode is not None and p.exitcode < 0, f"rank {r} should have been killed: {p.exitcode}"
        else:
            assert p.exitcode == 0 and os.path.exists(os.path.join(outdir, f"rank{r}.ok")), f"rank {r}: {p.exitcode}"


# ---- topology (no ranks needed) ----

def test_topology_aware_mesh_layouts():
    tam = torch.tpu.topology_aware_mesh
    # 1-D: a ring of 4 on a 2x2 is the snake 0 1 3 2 (3 -> 2 and 2 -> 0 are links)
    assert tam((4,), topology="2x2").tolist() == [0, 1, 3, 2]
    assert tam((4,), topology="4").tolist() == [0, 1, 2, 3]
    # 2-D
    assert tam((2, 2), topology="2x2").tolist() == [[0, 1], [2, 3]]
    assert tam((2, 4), topology="4x2").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert tam((8,), topology="4x2").tolist() == [0, 1, 2, 3, 7, 6, 5, 4]
    # 3-D: the reflected Gray code visits linked chips only
    assert tam((8,), topology="2x2x2").tolist() == [0, 1, 3, 2, 6, 7, 5, 4]
    assert tam((2, 4), topology="2x2x2").tolist() == [[0, 1, 3, 2], [4, 5, 7, 6]]
    assert tam((2, 2, 2), topology="2x2x2").tolist() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    # hosts over DCN: two 2x2 hosts as (2, 4), host 1 on the second row
    m = tam((1, 4), topology="2x2", dcn_mesh_shape=(2, 1))
    assert m.dtype == torch.int64 and m.tolist() == [[0, 1, 3, 2], [4, 5, 7, 6]]
    with pytest.raises(ValueError, match="chip count"):
        tam((3,), topology="2x2")
    with pytest.raises(ValueError, match="topology '2y2'"):
        tam((4,), topology="2y2")
    # consecutive entries of a ring layout are physical neighbours (wrap-around included)
    topo = torch.tpu.distributed.Topology("4x2")
    ring = tam((8,), topology=topo).tolist()
    for a, b in zip(ring, ring[1:] + ring[:1]):
        assert b in topo.neighbors(a), (a, b)
    assert topo.coords(5) == (1, 1) and topo.neighbors(0) == [1, 3, 4]
    # TorchTPU's (JAX's) keywords: a physical axis spread over two mesh dimensions only when allowed
    with pytest.raises(ValueError, match="splits physical axis 0 of topology '8' between mesh dimensions 0 and 1"):
        tam((2, 4), topology="8")
    assert tam((2, 4), topology="8", allow_split_physical_axes=True).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert tam((4, 2), topology="2x2x2").tolist() == [[0, 1], [2, 3], [6, 7], [4, 5]]  # two whole axes: no split
    # each process a granule of the outer network: the layout is over processes
    assert tam((1, 1), process_is_granule=True, dcn_mesh_shape=(2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert torch.tpu.distributed.topology_aware_mesh((4,), topology="2x2", contiguous_submeshes=True).tolist() == [0, 1, 3, 2]


def test_chip_per_process_and_split(tmp_path):
    """A process of a 2x2 host with LOCAL_RANK=3 owns chip 3 as tpu:0, with a quarter of the cores and RAM."""
    import subprocess
    code = ("import torch, torch_tpu, os\n"
            "p = torch.tpu.get_device_properties(0)\n"
            "print(torch.tpu.device_count(), p.chip_id, p.coords, p.neighbors, p.topology, p.num_threads,"
            " os.cpu_count())\n")
    env = dict(os.environ, TORCH_TPU_TOPOLOGY="2x2", LOCAL_RANK="3")
    env.pop("TORCH_TPU_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("1 3 (1, 1) [1, 2] (2, 2) "), line
    env["TPU_VISIBLE_CHIPS"] = "5"
    bad = subprocess.run([sys.executable, "-c", "import torch, torch_tpu; torch.zeros(1, device='tpu')"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "TPU_VISIBLE_CHIPS=5" in bad.stderr


# ---- process groups ----

@pytest.mark.parametrize("world", [2, 4])
def test_collectives(world):
    _spawn("collectives", world, topology="2x2" if world == 4 else "2")


@pytest.mark.full
def test_device_mesh_4_ranks():
    _spawn("device_mesh", 4, topology="2x2")


def test_init_with_device_id():
    _spawn("init_with_device_id", 2)


def test_ddp_parity_2_ranks():
    _spawn("ddp_parity", 2)


def test_ddp_compiled_parity_2_ranks():
    _spawn("ddp_compiled_parity", 2)


def test_ddp_allreduce_overlaps_backward():
    """DDP's bucket allreduces run on the group's stream, concurrently with backward's kernels (device trace)."""
    _spawn("ddp_overlap", 2)


@pytest.mark.full
def test_ddp_parity_4_ranks():
    _spawn("ddp_parity", 4, topology="2x2")


def test_failure_killed_rank():
    _spawn("fail_killed", 2, expect_dead=(1,))


def test_failure_skipped_collective():
    _spawn("fail_skipped", 2)


def test_failure_mismatched_shapes_and_no_leftovers():
    """Mismatched shapes fail on both ranks; the group's shared memory is gone from /dev/shm afterwards."""
    before = {f for f in os.listdir("/dev/shm") if f.startswith("tpurt_dist_")}
    _spawn("fail_mismatch", 2)
    after = {f for f in os.listdir("/dev/shm") if f.startswith("tpurt_dist_")}
    assert after <= before, after - before


@pytest.mark.parametrize("victim", [3, 2])
def test_failure_killed_rank_between_hosts(victim):
    """Two 2-chip "hosts": a rank of the second host (3; 2, its first rank, the one in the step between hosts
    through the first ranks) is killed (SIGKILL) while the others are inside an allreduce (16 MiB by columns; 64
    bytes through the first ranks): every other rank's allreduce fails naming it and the collective (the rank that
    saw it die tells the other host through the group's store), the group stays aborted, destroy_process_group
    returns, and nothing is left in /dev/shm."""
    before = {f for f in os.listdir("/dev/shm") if f.startswith("tpurt_dist_")}
    _spawn("fail_killed_two_hosts" if victim == 3 else "fail_killed_two_hosts_first_rank", 4, hosts=2,
           expect_dead=(victim,), timeout=150)
    after = {f for f in os.listdir("/dev/shm") if f.startswith("tpurt_dist_")}
    assert after <= before, after - before


@pytest.mark.parametrize("victim", [3, pytest.param(2, marks=pytest.mark.full)])
def test_failure_skipped_between_hosts(victim):
    """Two 2-chip "hosts": a rank of the second host stays alive but skips an allreduce (4 MiB by columns; 64 bytes
    through the first ranks when the skipping rank is its host's first): every other rank's allreduce fails after
    the group's 4 s timeout naming the skipping rank (not a rank of the first host, whose ranks wait on each other
    while their step between hosts waits for the second host) and the collective; every rank exits cleanly."""
    before = {f for f in os.listdir("/dev/shm") if f.startswith("tpurt_dist_")}
    _spawn("fail_skipped_two_hosts" if victim == 3 else "fail_skipped_two_hosts_first_rank", 4, hosts=2, timeout=150)
    after = {f for f in os.listdir("/dev/shm") if f.startswith("tpurt_dist_")}
    assert after <= before, after - before


def test_failure_mismatched_dtype_and_order():
    """Different dtypes in one allreduce, and broadcast-then-allreduce against allreduce-then-broadcast: both
    ranks fail at the first call that differs, naming what each called, before data moves."""
    _spawn("fail_mismatch_dtype_and_order", 2, timeout=120)


def test_failure_mismatch_between_hosts():
    """Hosts that called different collectives fail naming both, though each host's ranks agree."""
    _spawn("fail_mismatch_two_hosts", 4, hosts=2, timeout=120)


def test_failure_mismatch_between_hosts_step_kinds():
    """Hosts whose calls take different kinds of step between hosts (data in the call exchange, through the first
    ranks, by columns) fail naming both calls, and exit without waiting for gloo's timeout."""
    _spawn("fail_mismatch_two_hosts_step_kinds", 4, hosts=2, timeout=100)


def test_cross_host_size_boundaries():
    """all_reduce, all_gather and broadcast across two hosts on each side of 4 KiB and 64 KiB."""
    _spawn("cross_host_size_boundaries", 4, hosts=2)


def test_future_error_at_wait():
    """Work.get_future(): the collective's output as its value; a failed collective raises at the future's wait."""
    _spawn("future_error", 2)


def test_lone_sends_beside_collectives():
    """A send waits for its receiver on a queue of its own: the group's collectives after it run meanwhile."""
    _spawn("lone_sends", 2, timeout=120)


def test_fsdp2_parity_2_ranks():
    _spawn("fsdp2_parity", 2)


def test_fsdp2_compiled_blocks_parity_2_ranks():
    _spawn("fsdp2_compiled_parity", 2)


@pytest.mark.full
def test_fsdp2_hf_llama_2_ranks():
    _spawn("fsdp2_hf_llama", 2)


def test_tensor_parallel_parity_2_ranks():
    """ColwiseParallel / RowwiseParallel on the small GPT, and SequenceParallel: one process's losses."""
    _spawn("tp_parity", 2)


def test_two_hosts_of_two_chips():
    """Multi-host as separate node groups on loopback: within each "host" shared memory, gloo between hosts."""
    _spawn("cross_host", 4, hosts=2)


def test_torchrun_two_node_groups():
    """examples/ddp_tpu.py under torchrun as two node groups of one chip each on loopback (two "hosts": their step
    between hosts goes through gloo): rank 0's per-step losses match one process on the whole batches."""
    import subprocess
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "ddp_tpu.py")
    port = _free_port()
    procs = []
    for h in range(2):
        env = dict(os.environ, TORCH_TPU_HOST_ID=f"node{h}", TORCH_TPU_TOPOLOGY="1", TORCH_TPU_NUM_THREADS="1",
                   TORCH_TPU_HBM_BYTES="1G")
        procs.append(subprocess.Popen(
            [torchrun, "--nnodes=2", f"--node-rank={h}", "--nproc-per-node=1", "--master-addr=127.0.0.1",
             f"--master-port={port}", example], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    diff = [line for line in outs[0].splitlines() if "largest per-step loss difference" in line]
    assert diff and float(diff[0].split()[-1]) < 1e-5, outs[0]


def test_recv_any_source_two_hosts():
    """recv from any source across hosts: same-host messages through shared memory, other-host ones through gloo."""
    _spawn("recv_any_source_two_hosts", 4, hosts=2, timeout=120)


def test_fsdp2_mixed_precision_2_ranks():
    """MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): within bf16 tolerance of one fp32 process."""
    _spawn("fsdp2_mixed_precision", 2)


def test_hsdp_two_hosts():
    """HSDP on a (replicate=2 hosts, shard=2 chips) mesh: replication across hosts goes through gloo."""
    _spawn("hsdp_two_hosts", 4, hosts=2)


@pytest.mark.parametrize("load_world", [1, 4])
def test_distributed_checkpoint_2_to_n(tmp_path, load_world, monkeypatch):
    """torch.distributed.checkpoint: an FSDP2 model saved from 2 ranks loads into 1 and into 4, state equal."""
    monkeypatch.setenv("TORCH_TPU_TEST_CKPT", str(tmp_path))
    _spawn("dcp_save", 2)
    _spawn("dcp_load", load_world, topology="2x2" if load_world == 4 else None)


@pytest.mark.parametrize("world", [2, 4])
def test_premul_sum(world):
    """ReduceOp.PREMUL_SUM (FSDP's gradient division) on every reducing collective, against CPU by hand."""
    _spawn("premul_sum", world, topology="2x2" if world == 4 else None)


@pytest.mark.parametrize("world", [2, 3])
def test_recv_any_source(world):
    _spawn("recv_any_source", world)


def test_fsdp2_cpu_offload_2_ranks():
    """FSDP2 with CPUOffloadPolicy (parameters, gradients and the optimizer step on the CPU) against the same model
    sharded on the chips and one process; gradient division by premul_sum."""
    _spawn("fsdp2_cpu_offload", 2)


@pytest.mark.parametrize("world", [2, 4])
def test_cpu_tensors(world):
    """CPU tensors on a tpu_dist group (what FSDP2's CPU offload and object collectives hand it) give gloo's answers."""
    _spawn("cpu_tensors", world, topology="2x2" if world == 4 else None)
