"""What each rank of tests/test_dist.py runs (a module of its own so spawned processes can import it). Every
check compares against a reference computed on CPU from the inputs every rank can rebuild (`_value`)."""
import datetime
import os
import re
import signal
import time
import traceback

import torch

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]


def run_rank(fn_name, rank, world, outdir):
    """Entry point of a spawned rank: runs fn, leaves `rank<r>.ok` or `rank<r>.err` (the traceback)."""
    try:
        import torch_tpu  # noqa: F401
        globals()[fn_name](rank, world)
        open(os.path.join(outdir, f"rank{rank}.ok"), "w").close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        with open(os.path.join(outdir, f"rank{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)
    os._exit(0)  # no atexit work after the verdict (a peer may already be gone)


def _init(rank, world, timeout_s=60):
    import torch.distributed as dist
    dist.init_process_group("tpu_dist", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s))
    return dist


def _value(r, dtype, shape, salt=0):
    """Rank r's input: small integers, so every reduction of every dtype is exact."""
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64)
    v = ((i * 7 + r * 3 + salt) % 5) + r - 1
    if dtype == torch.bool:
        return (v != 0).reshape(shape)
    if dtype.is_complex:
        return torch.complex(v.double(), (v % 3).double()).to(dtype).reshape(shape)
    return v.to(dtype).reshape(shape)


def _reduce_ref(vals, op, dtype):
    import torch.distributed as dist
    if dtype == torch.bool:
        stack = torch.stack(vals)
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.BOR):
            return stack.any(0)
        if op == dist.ReduceOp.BXOR:
            return (stack.sum(0) % 2).bool()
        return stack.all(0)
    wide = torch.complex128 if dtype.is_complex else (torch.float64 if dtype.is_floating_point else torch.int64)
    acc = vals[0].to(wide)
    for v in vals[1:]:
        v = v.to(wide)
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            acc = acc + v
        elif op == dist.ReduceOp.PRODUCT:
            acc = acc * v
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(acc, v)
        elif op == dist.ReduceOp.MAX:
            acc = torch.maximum(acc, v)
        elif op == dist.ReduceOp.BAND:
            acc = acc & v
        elif op == dist.ReduceOp.BOR:
            acc = acc | v
        elif op == dist.ReduceOp.BXOR:
            acc = acc ^ v
    if op == dist.ReduceOp.AVG:
        acc = acc / len(vals)
    return acc.to(dtype)


def _ops_for(dtype):
    import torch.distributed as dist
    R = dist.ReduceOp
    if dtype == torch.bool or not (dtype.is_floating_point or dtype.is_complex):
        ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    elif dtype.is_complex:
        ops = [R.SUM, R.AVG]  # PyTorch refuses the others on complex tensors
    else:
        ops = [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX]
    return ops


def _same(got, want, what):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    if want.dtype in (torch.float16, torch.bfloat16):
        ok = torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(got, want)
    assert ok, f"{what}: got {got.flatten()[:8]} want {want.flatten()[:8]}"



def _w(work):
    """Waits for an async collective's Work (None when it ran synchronously)."""
    if work is not None:
        work.wait()


def _check_all_to_all(rank, W, dt, dev, what, async_op=False):
    """all_to_all_single with uneven splits (rank p sends p + q + 1 rows to rank q), then all_to_all of lists."""
    import torch.distributed as dist
    in_splits = [rank + q + 1 for q in range(W)]
    out_splits = [p + rank + 1 for p in range(W)]
    inp = torch.cat([torch.full((in_splits[q], 3), 100 * rank + q).to(dt) for q in range(W)]).to(dev)
    out = torch.empty((sum(out_splits), 3), dtype=dt, device=dev)
    _w(dist.all_to_all_single(out, inp, out_splits, in_splits, async_op=async_op))
    want = torch.cat([torch.full((out_splits[p], 3), 100 * p + rank).to(dt) for p in range(W)])
    _same(out, want, f"{what}all_to_all_single {dt}")
    ins = [_value(rank, dt, (2, 3), salt=q).to(dev) for q in range(W)]
    outs = [torch.empty((2, 3), dtype=dt, device=dev) for _ in range(W)]
    _w(dist.all_to_all(outs, ins, async_op=async_op))
    for p in range(W):
        _same(outs[p], _value(p, dt, (2, 3), salt=rank), f"{what}all_to_all {dt} from {p}")


def _check_coalesced_all_to_all(rank, W, dev, what):
    """all_to_all_single and all_to_all inside a coalescing manager, beside an isend/irecv pair around a ring and an
    all_reduce (the mix batched code issues)."""
    import torch.distributed as dist
    inp = torch.cat([torch.full((2,), 100.0 * rank + q) for q in range(W)]).to(dev)
    out = torch.empty(2 * W, device=dev)
    lst_in = [torch.full((3,), 10.0 * rank + q, device=dev) for q in range(W)]
    lst_out = [torch.empty(3, device=dev) for _ in range(W)]
    mine, got = _value(rank, torch.float32, (4,)).to(dev), torch.empty(4, device=dev)
    acc = torch.full((5,), float(rank + 1), device=dev)
    with dist._coalescing_manager(device=dev, async_ops=True) as cm:
        dist.isend(mine, (rank + 1) % W)
        dist.all_to_all_single(out, inp)
        dist.irecv(got, (rank - 1) % W)
        dist.all_to_all(lst_out, lst_in)
        dist.all_reduce(acc)
    cm.wait()
    _same(out, torch.cat([torch.full((2,), 100.0 * p + rank) for p in range(W)]), f"{what}coalesced all_to_all_single")
    for p in range(W):
        _same(lst_out[p], torch.full((3,), 10.0 * p + rank), f"{what}coalesced all_to_all from {p}")
    _same(got, _value((rank - 1) % W, torch.float32, (4,)), f"{what}coalesced irecv")
    _same(acc, torch.full((5,), float(W * (W + 1) // 2)), f"{what}coalesced all_reduce")


def _check_gather(rank, W, dt, shape, dev, root, what, async_op=False):
    import torch.distributed as dist
    outs = [torch.empty(shape, dtype=dt, device=dev) for _ in range(W)] if rank == root else None
    _w(dist.gather(_value(rank, dt, shape).to(dev), outs, dst=root, async_op=async_op))
    if rank == root:
        for r in range(W):
            _same(outs[r], _value(r, dt, shape), f"{what}gather {dt} to {root} [{r}]")


def _check_scatter(rank, W, dt, shape, dev, root, what, async_op=False):
    import torch.distributed as dist
    out = torch.empty(shape, dtype=dt, device=dev)
    ins = [_value(10 + q, dt, shape).to(dev) for q in range(W)] if rank == root else None
    _w(dist.scatter(out, ins, src=root, async_op=async_op))
    _same(out, _value(10 + rank, dt, shape), f"{what}scatter {dt} from {root}")

def collectives(rank, world):
    dist = _init(rank, world)
    dev = torch.device("tpu", 0)
    W = world
    shape = (5, 7)
    # allreduce: every dtype x every reduction it has, sync and async (Work.wait), in place
    for dt in DTYPES:
        for op in _ops_for(dt):
            for async_op in (False, True):
                t = _value(rank, dt, shape).to(dev)
                w = dist.all_reduce(t, op=op, async_op=async_op)
                if async_op:
                    w.wait()
                    fut = w.get_future()
                    assert fut.value()[0] is not None
                want = _reduce_ref([_value(r, dt, shape) for r in range(W)], op, dt)
                _same(t, want, f"all_reduce {dt} {op} async={async_op}")
    # an unsupported reduction names itself
    try:
        dist.all_reduce(torch.ones(3, device=dev), op=dist.ReduceOp.BAND)
        torch.tpu.synchronize()
        raise AssertionError("BAND on float32 was accepted")
    except RuntimeError as e:
        assert "band" in str(e) and "float32" in str(e), str(e)
    # every collective on every dtype, sync or async (Work.wait) in turn, non-contiguous inputs and outputs included
    for di, dt in enumerate(DTYPES):
        a = di % 2 == 1
        # broadcast from the last rank, into a transposed (non-contiguous) view
        base = _value(rank, dt, (7, 5)).to(dev)
        t = base.t()
        assert not t.is_contiguous()
        _w(dist.broadcast(t, src=W - 1, async_op=a))
        _same(t, _value(W - 1, dt, (7, 5)).t(), f"broadcast {dt}")
        _same(base, _value(W - 1, dt, (7, 5)), f"broadcast {dt} (base of the view)")
        # reduce to rank 1
        if dt != torch.bool:
            t = _value(rank, dt, shape).to(dev)
            _w(dist.reduce(t, dst=1, op=dist.ReduceOp.SUM, async_op=a))
            if rank == 1:
                _same(t, _reduce_ref([_value(r, dt, shape) for r in range(W)], dist.ReduceOp.SUM, dt), f"reduce {dt}")
        # all_gather (list) and all_gather_into_tensor
        inp = _value(rank, dt, shape).to(dev)
        outs = [torch.empty(shape, dtype=dt, device=dev) for _ in range(W)]
        _w(dist.all_gather(outs, inp, async_op=a))
        for r in range(W):
            _same(outs[r], _value(r, dt, shape), f"all_gather {dt} [{r}]")
        big = torch.empty((W * 5, 7), dtype=dt, device=dev)
        _w(dist.all_gather_into_tensor(big, inp, async_op=a))
        _same(big, torch.cat([_value(r, dt, shape) for r in range(W)]), f"all_gather_into_tensor {dt}")
        # reduce_scatter (list) and reduce_scatter_tensor
        if dt != torch.bool:
            ins = [_value(rank, dt, shape, salt=k).to(dev) for k in range(W)]
            out = torch.empty(shape, dtype=dt, device=dev)
            _w(dist.reduce_scatter(out, ins, async_op=a))
            _same(out, _reduce_ref([_value(r, dt, shape, salt=rank) for r in range(W)], dist.ReduceOp.SUM, dt),
                  f"reduce_scatter {dt}")
            flat_in = torch.cat([_value(rank, dt, shape, salt=k) for k in range(W)]).to(dev)
            out2 = torch.empty(shape, dtype=dt, device=dev)
            _w(dist.reduce_scatter_tensor(out2, flat_in, async_op=a))
            _same(out2, out.cpu(), f"reduce_scatter_tensor {dt}")
        _check_all_to_all(rank, W, dt, dev, "", a)
        _check_gather(rank, W, dt, shape, dev, 0, "", a)
        _check_scatter(rank, W, dt, shape, dev, 0, "", a)
        # send / recv around a ring (even ranks send first)
        t = _value(rank, dt, shape).to(dev)
        r_buf = torch.empty(shape, dtype=dt, device=dev)
        nxt, prv = (rank + 1) % W, (rank - 1) % W
        if a:  # isend / irecv
            ws = [dist.isend(t, nxt), dist.irecv(r_buf, prv)] if rank % 2 == 0 else [dist.irecv(r_buf, prv), dist.isend(t, nxt)]
            for w in ws:
                w.wait()
        elif rank % 2 == 0:
            dist.send(t, nxt)
            dist.recv(r_buf, prv)
        else:
            dist.recv(r_buf, prv)
            dist.send(t, nxt)
        _same(r_buf, _value(prv, dt, shape), f"send/recv {dt}")
    # batch_isend_irecv: every rank sends first and receives second, in one batch (no deadlock)
    t = _value(rank, torch.float32, shape).to(dev)
    r_buf = torch.empty(shape, device=dev)
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % W), dist.P2POp(dist.irecv, r_buf, (rank - 1) % W)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    _same(r_buf, _value((rank - 1) % W, torch.float32, shape), "batch_isend_irecv")
    _check_coalesced_all_to_all(rank, W, dev, "")
    dist.barrier()
    # functional collectives (what DTensor and FSDP2 call)
    import torch.distributed._functional_collectives as funcol
    t = _value(rank, torch.float32, shape).to(dev)
    got = funcol.all_reduce(t, "sum", dist.group.WORLD)
    _same(got, _reduce_ref([_value(r, torch.float32, shape) for r in range(W)], dist.ReduceOp.SUM, torch.float32),
          "funcol.all_reduce")
    got = funcol.all_gather_tensor(t, 0, dist.group.WORLD)
    _same(got, torch.cat([_value(r, torch.float32, shape) for r in range(W)]), "funcol.all_gather_tensor")
    # subgroups: the even ranks, and the odd ones
    evens = list(range(0, W, 2))
    odds = list(range(1, W, 2))
    g_even = dist.new_group(evens)
    g_odd = dist.new_group(odds)
    mine = evens if rank % 2 == 0 else odds
    g = g_even if rank % 2 == 0 else g_odd
    t = _value(rank, torch.float32, shape).to(dev)
    dist.all_reduce(t, group=g)
    _same(t, _reduce_ref([_value(r, torch.float32, shape) for r in mine], dist.ReduceOp.SUM, torch.float32),
          "subgroup all_reduce")
    # a large message (several blocks per rank, split unevenly)
    n = (1 << 20) + 3
    t = torch.full((n,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    assert torch.equal(t.cpu(), torch.full((n,), float(W * (W + 1) // 2))), "large all_reduce"
    dist.destroy_process_group()


def device_mesh(rank, world):
    """init_device_mesh("tpu", ...) picks tpu_dist, with the topology-aware layout, and mesh-dim collectives work."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    import torch.distributed._functional_collectives as funcol
    _init(rank, world)
    layout = torch.tpu.topology_aware_mesh((2, 2))
    mesh = DeviceMesh("tpu", layout, mesh_dim_names=("dp", "tp"))
    assert dist.get_backend(mesh.get_group("tp")) == "tpu_dist"
    t = torch.full((4,), float(rank), device="tpu")
    got = funcol.all_reduce(t, "sum", (mesh, 1)).cpu()
    row = [list(r) for r in layout.tolist() if rank in r][0]
    assert torch.equal(got, torch.full((4,), float(sum(row)))), (got, row)
    dist.destroy_process_group()


def ddp_parity(rank, world):
    """DDP on `world` chips trains the small GPT to the same per-step losses as one process on the whole batch."""
    _ddp_parity(rank, world, compiled=False)


def ddp_compiled_parity(rank, world):
    """The same with the DDP model under torch.compile(backend="tpu") (Dynamo's DDPOptimizer splits the
    graph at bucket boundaries; DDP's default buckets here, as its first bucket must be no larger than
    the others): every graph runs as a device program, and the gradients are allreduced by DDP's hooks."""
    from torch_tpu import _compile
    _ddp_parity(rank, world, compiled=True)
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0 and s["launches"] >= s["captures"] > 0, s


def _ddp_parity(rank, world, compiled):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import test_models
    _init(rank, world)
    dev = torch.device("tpu", 0)
    vocab, seq, batch, steps = 64, 16, 4 * world, 3
    torch.manual_seed(0)
    model = test_models.GPT(vocab=vocab, d=32, heads=2, layers=1, seq=seq)
    ref = test_models.GPT(vocab=vocab, d=32, heads=2, layers=1, seq=seq)
    ref.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, vocab, (steps, batch, seq + 1), generator=g)
    ddp = DDP(model.to(dev), device_ids=[0], bucket_cap_mb=None if compiled else 0.05)  # 0.05: several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
    run = torch.compile(ddp, backend="tpu") if compiled else ddp
    losses = []
    per = batch // world
    for s in range(steps):
        x = data[s, rank * per:(rank + 1) * per].to(dev)
        logits = run(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        full = loss.detach().clone()
        dist.all_reduce(full, op=dist.ReduceOp.AVG)
        losses.append(full.item())
    # the one-process reference, on this chip, the whole batch per step
    ref = ref.to(dev)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for s in range(steps):
        x = data[s].to(dev)
        logits = ref(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), x[:, 1:].reshape(-1))
        ropt.zero_grad()
        loss.backward()
        ropt.step()
        assert abs(loss.item() - losses[s]) <= 1e-4 * abs(loss.item()) + 1e-5, (s, loss.item(), losses[s])
    for (name, p), q in zip(ddp.module.named_parameters(), ref.parameters()):
        assert torch.allclose(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5), name
    dist.destroy_process_group()


def ddp_overlap(rank, world):
    """DDP's bucket allreduces run on the group's stream while backward's kernels run on the default stream: in the
    device trace, an allreduce's interval intersects a backward kernel's. The gradients equal one process's on the
    whole batch."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch_tpu import projection
    _init(rank, world)
    dev = torch.device("tpu", 0)
    torch.manual_seed(0)
    # The first bucket ready (the head's) is small; the rest of backward (the wide layers' gradient GEMMs, about
    # 2.4 GFLOP, tens of ms) is long, so that a group-stream thread the OS schedules late on a busy machine still
    # starts inside it.
    # Tanh, not ReLU: a ReLU gate flips where a pre-activation lies within the GEMMs' rounding of zero
    # (one of 512 x 1024 did, at 4.7e-8, once fp32 products ran on our kernel instead of CPU's MKL),
    # and its row of the weight gradient then differs from the reference by far more than rounding.
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 1024),
                                torch.nn.Tanh(), torch.nn.Linear(1024, 8))
    ref = type(model)(*[type(m)(m.in_features, m.out_features) if isinstance(m, torch.nn.Linear) else m
                        for m in model])
    ref.load_state_dict(model.state_dict())
    ddp = DDP(model.to(dev), bucket_cap_mb=0.01)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(world * 512, 256, generator=g)
    per = x.shape[0] // world
    overlapped = 0
    steps = 4
    for step in range(steps):  # the first step is one bucket (DDP rebuilds its buckets in backward order after it)
        ddp.zero_grad()
        out = ddp(x[rank * per:(rank + 1) * per].to(dev))
        loss = out.square().mean()
        with projection.record():
            loss.backward()
        evs = projection.events()
        ars = [e for e in evs if e["name"] == "tpu_dist allreduce"]
        kernels = [e for e in evs if e["kind"] == "kernel" and e["queue"] == 0]
        assert ars and kernels, (len(ars), len(kernels))
        assert all(e["queue"] != 0 for e in ars), "the allreduces ran on the default stream"
        if step:
            overlapped += any(a["start_ns"] < k["end_ns"] and k["start_ns"] < a["end_ns"] for a in ars for k in kernels)
    # Overlap is timing: a step whose group-stream thread the OS ran only after backward's kernels shows none. The
    # mechanism shows in most steps; with the collectives on the caller's stream (TORCH_TPU_DIST_OWN_STREAM=0) the
    # queue assertion above fails in every step.
    assert overlapped >= steps - 2, f"an allreduce overlapped a backward kernel in only {overlapped} of {steps - 1} steps"
    # gradients: the mean over the whole batch, as one process computes them
    ref(x).square().mean().backward()
    for (name, p), q in zip(ddp.module.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-6, msg=name)
    dist.destroy_process_group()


def fail_killed(rank, world):
    """Rank 1 is killed (SIGKILL) before the second allreduce; the others' allreduce fails naming it."""
    dist = _init(rank, world, timeout_s=60)
    t = torch.ones(1000, device="tpu")
    dist.all_reduce(t)
    torch.tpu.synchronize()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)  # (raises here instead when the group has already failed)
        t.cpu()
        raise AssertionError("the allreduce with a dead peer did not fail")
    except RuntimeError as e:
        msg = str(e)
        assert "rank 1" in msg and "died" in msg and "allreduce" in msg, msg
    assert time.monotonic() - t0 < 30, "death was not detected before the timeout"
    # the next collective fails at once too
    try:
        dist.all_reduce(t)
        t.cpu()
        raise AssertionError("the group was not left aborted")
    except RuntimeError as e:
        assert "rank 1" in str(e), str(e)


def fail_skipped(rank, world):
    """Rank 1 skips a collective (stays alive); rank 0's fails after the 3 s timeout naming rank 1 and the call."""
    dist = _init(rank, world, timeout_s=3)
    t = torch.ones(16, device="tpu")
    dist.all_reduce(t)
    torch.tpu.synchronize()
    if rank == 1:
        time.sleep(6)
        return
    try:
        dist.all_reduce(t)  # (raises here instead when the group has already failed)
        t.cpu()
        raise AssertionError("a skipped collective did not fail")
    except RuntimeError as e:
        msg = str(e)
        assert "rank 1" in msg and "timeout" in msg and "allreduce(float32, 16 elements, sum)" in msg, msg


def fail_mismatch(rank, world):
    """Ranks call allreduce with different shapes: both fail before data moves, saying what each called."""
    dist = _init(rank, world)
    t = torch.ones(10 if rank == 0 else 12, device="tpu")
    try:
        # the error surfaces at Work.wait() (all_reduce waits) when the peer's header is already there,
        # else at the next synchronize
        dist.all_reduce(t)
        t.cpu()
        raise AssertionError("mismatched shapes were not detected")
    except RuntimeError as e:
        msg = str(e)
        assert "rank 0 called allreduce(float32, 10 elements, sum)" in msg, msg
        assert "rank 1 called allreduce(float32, 12 elements, sum)" in msg, msg
    dist.destroy_process_group()


def _drain():
    """Lets the failed group's work still queued fail here: the call that failed may have raised the error
    itself (Work.wait sees the aborted group), leaving its queued part to fail at the next synchronize."""
    try:
        torch.tpu.synchronize()
    except RuntimeError as e:
        assert "was aborted" in str(e), str(e)


def fail_mismatch_two_hosts(rank, world):
    """Two "hosts" whose ranks agree within each host but not between them (10 against 12 elements, then allreduce
    against broadcast in a fresh group): every rank fails naming both calls, before data moves between the hosts."""
    import torch.distributed as dist
    _init(rank, world, timeout_s=30)
    dev = torch.device("tpu", 0)
    t = torch.ones(10 if rank < 2 else 12, device=dev)
    try:
        dist.all_reduce(t)
        t.cpu()
        raise AssertionError("mismatched shapes between hosts were not detected")
    except RuntimeError as e:
        msg = str(e)
        # each column (local rank l of both hosts) compares its calls: the first to abort names its pair
        assert "mismatched collectives between hosts" in msg, msg
        assert re.search(r"rank ([01]) called allreduce\(float32, 10 elements, sum\) but rank ([23]) called "
                         r"allreduce\(float32, 12 elements, sum\)", msg), msg
    _drain()
    g = dist.new_group(list(range(world)))
    t = torch.ones(6, device=dev)
    try:
        if rank < 2:
            dist.all_reduce(t, group=g)
        else:
            dist.broadcast(t, src=2, group=g)
        t.cpu()
        raise AssertionError("allreduce against broadcast between hosts was not detected")
    except RuntimeError as e:
        msg = str(e)
        assert re.search(r"rank [01] called allreduce\(float32, 6 elements, sum\) but rank [23] called "
                         r"broadcast\(float32, 6 elements, root 2\)", msg), msg
    _drain()
    # a receive from any source that nobody sends to fails after the group's timeout, naming itself
    g2 = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        t0 = time.monotonic()
        try:
            dist.recv(torch.empty(3, device=dev), group=g2, tag=4)
            raise AssertionError("a recv from any source with no sender returned")
        except RuntimeError as e:
            assert "no rank sent rank 0 a message with tag 4" in str(e) and "2.0 s timeout" in str(e), str(e)
        assert time.monotonic() - t0 < 30
    dist.destroy_process_group()


def _gpt_pair(vocab, seq):
    import test_models
    torch.manual_seed(0)
    model = test_models.GPT(vocab=vocab, d=32, heads=2, layers=2, seq=seq)
    ref = test_models.GPT(vocab=vocab, d=32, heads=2, layers=2, seq=seq)
    ref.load_state_dict(model.state_dict())
    return model, ref


def _ref_losses(ref, data, vocab, lr, steps):
    dev = torch.device("tpu", 0)
    ref = ref.to(dev)
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    out = []
    for s in range(steps):
        x = data[s].to(dev)
        loss = torch.nn.functional.cross_entropy(ref(x[:, :-1]).reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def fsdp2_parity(rank, world):
    """FSDP2 (fully_shard per block and at the root, reshard after forward) trains the small GPT to the same
    per-step losses as one process on the whole batch."""
    _fsdp2_parity(rank, world, compiled=False)


def fsdp2_compiled_parity(rank, world):
    """The same with each block compiled as TorchTitan does (`block.compile(backend="tpu")` after
    fully_shard: FSDP2's all-gather and reduce-scatter hooks stay around the compiled forward and
    backward), every graph a device program."""
    from torch_tpu import _compile
    _fsdp2_parity(rank, world, compiled=True)
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0 and s["launches"] >= s["captures"] > 0, s


def _fsdp2_parity(rank, world, compiled):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    _init(rank, world)
    dev = torch.device("tpu", 0)
    vocab, seq, steps, lr = 64, 16, 3, 0.5
    batch = 4 * world
    model, ref = _gpt_pair(vocab, seq)
    data = torch.randint(0, vocab, (steps, batch, seq + 1), generator=torch.Generator().manual_seed(1))
    mesh = init_device_mesh("tpu", (world,))
    model = model.to(dev)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh, reshard_after_forward=True)
        if compiled:
            blk.compile(backend="tpu")
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    per = batch // world
    losses = []
    for s in range(steps):
        x = data[s, rank * per:(rank + 1) * per].to(dev)
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        losses.append(avg.item())
    want = _ref_losses(ref, data, vocab, lr, steps)
    for s in range(steps):
        assert abs(want[s] - losses[s]) <= 1e-4 * abs(want[s]) + 1e-5, (s, want[s], losses[s])
    dist.destroy_process_group()


def fsdp2_hf_llama(rank, world):
    """FSDP2 (fully_shard per decoder layer and at the root) on a Hugging Face Llama config (GQA, RMSNorm, rotary,
    SiLU MLP): the per-step losses of one process on the whole batch."""
    import transformers
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    _init(rank, world)
    dev = torch.device("tpu", 0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   pad_token_id=0, tie_word_embeddings=False, attention_dropout=0.0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    ref = transformers.LlamaForCausalLM(cfg)
    ref.load_state_dict(model.state_dict())
    steps, lr, per, seq = 3, 0.5, 2, 16
    data = torch.randint(1, 96, (steps, per * world, seq), generator=torch.Generator().manual_seed(2))
    ref = ref.to(dev)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr)
    want = []
    for s in range(steps):
        loss = ref(input_ids=data[s].to(dev), labels=data[s].to(dev)).loss
        ref_opt.zero_grad()
        loss.backward()
        ref_opt.step()
        want.append(loss.item())
    mesh = init_device_mesh("tpu", (world,))
    model = model.to(dev)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for s in range(steps):
        x = data[s, rank * per:(rank + 1) * per].to(dev)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        assert abs(avg.item() - want[s]) <= 1e-4 * abs(want[s]) + 1e-5, (s, want[s], avg.item())
    dist.destroy_process_group()


def tp_parity(rank, world):
    """DTensor tensor parallelism (ColwiseParallel qkv/fc1, RowwiseParallel proj/fc2) on the small GPT's blocks:
    the same per-step losses as one process."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    _init(rank, world)
    dev = torch.device("tpu", 0)
    vocab, seq, steps, lr = 64, 16, 3, 0.5
    batch = 4
    model, ref = _gpt_pair(vocab, seq)
    data = torch.randint(0, vocab, (steps, batch, seq + 1), generator=torch.Generator().manual_seed(1))
    mesh = init_device_mesh("tpu", (world,))
    model = model.to(dev)
    for blk in model.blocks:
        # heads split over ranks: q, k, v come out of one Linear, so shard fc1/fc2 (the MLP) only
        parallelize_module(blk, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=lr, foreach=False)  # DTensor and plain parameters mixed
    losses = []
    for s in range(steps):
        x = data[s].to(dev)  # every rank sees the whole batch (pure TP)
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    want = _ref_losses(ref, data, vocab, lr, steps)
    for s in range(steps):
        assert abs(want[s] - losses[s]) <= 1e-4 * abs(want[s]) + 1e-5, (s, want[s], losses[s])
    _sequence_parallel_parity(rank, world, mesh)
    dist.destroy_process_group()


def _sequence_parallel_parity(rank, world, mesh):
    """SequenceParallel: a LayerNorm on each rank's slice of the sequence, then ColwiseParallel (gathering the
    sequence) and RowwiseParallel (reduce-scattering it back): the per-step losses, outputs and LayerNorm weights of
    one process on the whole sequence."""
    import torch.distributed as dist
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    dev = torch.device("tpu", 0)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc1, self.fc2 = torch.nn.LayerNorm(16), torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

        def forward(self, x):
            return self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))

    torch.manual_seed(3)
    ref = MLP()
    model = MLP()
    model.load_state_dict(ref.state_dict())
    model = model.to(dev)
    parallelize_module(model, mesh, {"ln": SequenceParallel(), "fc1": ColwiseParallel(input_layouts=Shard(1)),
                                     "fc2": RowwiseParallel(output_layouts=Shard(1))})
    opt = torch.optim.SGD(model.parameters(), lr=0.5, foreach=False)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    seq = 4 * world
    for step in range(3):
        x = torch.randn(2, seq, 16, generator=torch.Generator().manual_seed(10 + step))
        y = ref(x)
        ref_loss = (y * y).mean()
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        local = x[:, rank * 4:(rank + 1) * 4].to(dev)
        out = model(local)  # this rank's slice of the sequence
        loss = (out * out).sum() / y.numel()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        assert torch.allclose(out.detach().cpu(), y.detach()[:, rank * 4:(rank + 1) * 4], rtol=1e-4, atol=1e-5), step
        assert abs(total.item() - ref_loss.item()) <= 1e-4 * abs(ref_loss.item()) + 1e-6, (step, total, ref_loss)
    ln_w = model.ln.weight.full_tensor().cpu()
    assert torch.allclose(ln_w, ref.ln.weight.detach(), rtol=1e-4, atol=1e-5), (ln_w, ref.ln.weight)


def cross_host(rank, world):
    """Two "hosts" of 2 chips each on this machine (TORCH_TPU_HOST_ID): collectives go through each host's
    shared memory and gloo between the hosts (by columns for all_reduce, all_gather and reduce_scatter, through the
    hosts' first ranks for the others), point-to-point messages and all_to_all's parts between ranks of different
    hosts through gloo; results equal the known answers."""
    import torch.distributed as dist
    _init(rank, world)
    dev = torch.device("tpu", 0)
    W = world
    shape = (5, 7)
    R = dist.ReduceOp
    for dt, ops in ((torch.float32, (R.SUM, R.AVG, R.MAX, R.PRODUCT)), (torch.int64, (R.SUM, R.MIN, R.BXOR)),
                    (torch.bool, (R.SUM, R.MIN)), (torch.bfloat16, (R.SUM,))):
        for op in ops:
            t = _value(rank, dt, shape).to(dev)
            dist.all_reduce(t, op=op)
            _same(t, _reduce_ref([_value(r, dt, shape) for r in range(W)], op, dt), f"cross-host all_reduce {dt} {op}")
    # all_reduce and all_gather: small messages through the hosts' first ranks, larger ones (over 64 KiB) by
    # columns (a reduce-scatter within each host, each local rank's block between the hosts, an all-gather within
    # the host): non-contiguous tensors, sizes that do not divide by the host's ranks, more dtypes and reductions,
    # async
    for dt, op in ((torch.complex64, R.SUM), (torch.float16, R.MAX), (torch.int8, R.BAND), (torch.uint8, R.BOR),
                   (torch.float64, R.AVG), (torch.int32, R.PRODUCT), (torch.bool, R.BXOR)):
        for a, b in ((7, 5), (257, 259)):  # 66563 elements: over 64 KiB in every dtype
            t = _value(rank, dt, (a, b)).to(dev).t()
            w = dist.all_reduce(t, op=op, async_op=True)
            w.wait()
            _same(t, _reduce_ref([_value(r, dt, (a, b)).t() for r in range(W)], op, dt),
                  f"cross-host all_reduce {dt} {op} {a}x{b}")
            inp = _value(rank, dt, (b, a)).to(dev).t()
            out = torch.empty((W, b, a), dtype=dt, device=dev).transpose(1, 2)  # (W, a, b), non-contiguous
            dist.all_gather_into_tensor(out, inp)
            _same(out, torch.stack([_value(r, dt, (b, a)).t() for r in range(W)]),
                  f"cross-host all_gather_into_tensor {dt} {a}x{b}")
            outs = [torch.empty((a, b), dtype=dt, device=dev) for _ in range(W)]
            dist.all_gather(outs, inp)
            for r in range(W):
                _same(outs[r], _value(r, dt, (b, a)).t(), f"cross-host all_gather {dt} {a}x{b} [{r}]")
    # premul_sum across hosts: each rank's own factor, before the sum within and between hosts
    pm = dist._make_nccl_premul_sum(_premul_factor(rank))
    want = sum(_premul_factor(r) * _value(r, torch.float64, shape) for r in range(W)).float()
    t = _value(rank, torch.float32, shape).to(dev)
    dist.all_reduce(t, op=pm)
    _same(t, want, "cross-host all_reduce premul_sum")
    t = _value(rank, torch.float32, shape).to(dev)
    dist.reduce(t, dst=2, op=pm)
    _same(t, want if rank == 2 else _value(rank, torch.float32, shape), "cross-host reduce premul_sum")
    rs_in = _value(rank, torch.float32, (W * 5, 7)).to(dev)
    rs_out = torch.empty(shape, device=dev)
    dist.reduce_scatter_tensor(rs_out, rs_in, op=pm)
    rs_want = sum(_premul_factor(r) * _value(r, torch.float64, (W * 5, 7)) for r in range(W)).float()
    _same(rs_out, rs_want[rank * 5:(rank + 1) * 5], "cross-host reduce_scatter_tensor premul_sum")
    _same(rs_in, _value(rank, torch.float32, (W * 5, 7)), "cross-host reduce_scatter_tensor premul_sum input")
    for src in (0, 1, 3):
        t = _value(rank, torch.float32, shape).to(dev)
        dist.broadcast(t, src=src)
        _same(t, _value(src, torch.float32, shape), f"cross-host broadcast from {src}")
    inp = _value(rank, torch.float32, shape).to(dev)
    big = torch.empty((W * 5, 7), device=dev)
    dist.all_gather_into_tensor(big, inp)
    _same(big, torch.cat([_value(r, torch.float32, shape) for r in range(W)]), "cross-host all_gather_into_tensor")
    outs = [torch.empty(shape, device=dev) for _ in range(W)]
    dist.all_gather(outs, inp)
    for r in range(W):
        _same(outs[r], _value(r, torch.float32, shape), f"cross-host all_gather [{r}]")
    flat_in = torch.cat([_value(rank, torch.float32, shape, salt=k) for k in range(W)]).to(dev)
    out = torch.empty(shape, device=dev)
    dist.reduce_scatter_tensor(out, flat_in)
    _same(out, _reduce_ref([_value(r, torch.float32, shape, salt=rank) for r in range(W)], R.SUM, torch.float32),
          "cross-host reduce_scatter_tensor")
    # reduce_scatter (within each host, then between hosts on each rank's column): dtypes and reductions, a list of
    # non-contiguous inputs
    for dt, op in ((torch.float32, R.AVG), (torch.float32, R.MAX), (torch.int64, R.MIN), (torch.int32, R.PRODUCT),
                   (torch.complex64, R.SUM), (torch.bfloat16, R.SUM), (torch.float64, R.AVG)):
        ins = [_value(rank, dt, (7, 5), salt=k).to(dev).t() for k in range(W)]
        out = torch.empty(shape, dtype=dt, device=dev)
        dist.reduce_scatter(out, ins, op=op)
        want = _reduce_ref([_value(r, dt, (7, 5), salt=rank).t() for r in range(W)], op, dt)
        _same(out, want, f"cross-host reduce_scatter {dt} {op}")
        flat_in = torch.cat([_value(rank, dt, shape, salt=k) for k in range(W)]).to(dev)
        out2 = torch.empty(shape, dtype=dt, device=dev)
        dist.reduce_scatter_tensor(out2, flat_in, op=op)
        _same(out2, _reduce_ref([_value(r, dt, shape, salt=rank) for r in range(W)], op, dt),
              f"cross-host reduce_scatter_tensor {dt} {op}")
    dist.barrier()
    for dt in (torch.float32, torch.bfloat16, torch.bool, torch.complex64, torch.int64):
        # gather and scatter, with roots on either host and not always a host's first rank
        for root in (0, 3):
            _check_gather(rank, W, dt, shape, dev, root, "cross-host ")
        for root in (1, 2):
            _check_scatter(rank, W, dt, shape, dev, root, "cross-host ")
        _check_all_to_all(rank, W, dt, dev, "cross-host ")
        # send / recv to a rank two away (the other host) and to the neighbour on the same host
        for step in (2, 1):
            peer_to, peer_from = (rank + step) % W, (rank - step) % W
            t = _value(rank, dt, shape).to(dev)
            r_buf = torch.empty(shape, dtype=dt, device=dev)
            if (rank // step) % 2 == 0:
                dist.send(t, peer_to)
                dist.recv(r_buf, peer_from)
            else:
                dist.recv(r_buf, peer_from)
                dist.send(t, peer_to)
            _same(r_buf, _value(peer_from, dt, shape), f"cross-host send/recv {dt} step {step}")
    # isend / irecv, and batch_isend_irecv mixing same-host and other-host peers, every rank sending first
    t = _value(rank, torch.float32, shape).to(dev)
    r_next, r_far = torch.empty(shape, device=dev), torch.empty(shape, device=dev)
    ops = [dist.P2POp(dist.isend, t, (rank + 1) % W), dist.P2POp(dist.isend, t, (rank + 2) % W),
           dist.P2POp(dist.irecv, r_next, (rank - 1) % W), dist.P2POp(dist.irecv, r_far, (rank - 2) % W)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    _same(r_next, _value((rank - 1) % W, torch.float32, shape), "cross-host batch_isend_irecv (ring)")
    _same(r_far, _value((rank - 2) % W, torch.float32, shape), "cross-host batch_isend_irecv (other host)")
    _check_coalesced_all_to_all(rank, W, dev, "cross-host ")
    if rank in (0, 3):
        buf = _value(rank, torch.float32, shape).to(dev) if rank == 0 else torch.empty(shape, device=dev)
        w = dist.isend(buf, 3) if rank == 0 else dist.irecv(buf, 0)
        w.wait()
        _same(buf, _value(0, torch.float32, shape), "cross-host isend/irecv")
    dist.barrier()
    dist.destroy_process_group()


def _recv_from_any_source(dist, dev, world, tagged_from, what=""):
    """Rank 0's side of the any-source cases: one untagged message from each other rank, in whatever order
    they come (each names its sender), then a tag-1 message (the value 10 + its sender) from `tagged_from`."""
    seen = set()
    for _ in range(world - 1):
        buf = torch.empty(4, device=dev)
        src = dist.recv(buf)
        assert src not in seen and 0 < src < world, (src, seen)
        seen.add(src)
        _same(buf, _value(src, torch.float32, (4,)), f"{what}recv from any source (sent by {src})")
    buf = torch.empty((2, 3), dtype=torch.bfloat16, device=dev)
    w = dist.irecv(buf, tag=1)
    w.wait()
    assert w._source_rank() == tagged_from, w._source_rank()
    _same(buf, _value(10 + tagged_from, torch.bfloat16, (2, 3)), f"{what}irecv from any source")


def recv_any_source_two_hosts(rank, world):
    """recv / irecv from any source in a group spanning two "hosts" (TORCH_TPU_HOST_ID), tpu and cpu tensors."""
    import torch.distributed as dist
    _init(rank, world)
    dev = torch.device("tpu", 0)
    # recv from any source in a group spanning hosts: rank 0 takes one message from each other rank (its own host's
    # through shared memory, the other host's through gloo), whichever comes first; a message with another tag
    # waits for its own receive
    if rank == 0:
        _recv_from_any_source(dist, dev, world, tagged_from=3, what="cross-host ")
    elif rank == 3:
        # the tag-1 message posted first (one batch: a lone send across hosts holds the stream until taken)
        ops = [dist.P2POp(dist.isend, _value(13, torch.bfloat16, (2, 3)).to(dev), 0, tag=1),
               dist.P2POp(dist.isend, _value(rank, torch.float32, (4,)).to(dev), 0)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    else:
        dist.send(_value(rank, torch.float32, (4,)).to(dev), 0)
    # CPU tensors, and a subgroup spanning the hosts whose group ranks differ from the global ones: its last rank
    # receives from any of the others
    ranks = [1, 2, 3, 0]
    g = dist.new_group(ranks)
    if rank == 0:
        got = set()
        for _ in range(3):
            buf = torch.empty(3, dtype=torch.int64)
            src = dist.recv(buf, group=g)
            assert src in (1, 2, 3) and src not in got, (src, got)
            got.add(src)
            _same(buf, _value(src, torch.int64, (3,), salt=5), f"cpu subgroup recv from any source ({src})")
    else:
        dist.send(_value(rank, torch.int64, (3,), salt=5), 0, group=g)
    dist.barrier()
    dist.destroy_process_group()


def _train_fsdp(model, mesh, data, rank, world, vocab, lr, steps, **shard_kw):
    """fully_shard per block and at the root on `mesh`; per-step losses averaged over ranks."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    dev = torch.device("tpu", 0)
    model = model.to(dev)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh, reshard_after_forward=True, **shard_kw)
    fully_shard(model, mesh=mesh, **shard_kw)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    per = data.shape[1] // world
    losses = []
    for s in range(steps):
        x = data[s, rank * per:(rank + 1) * per].to(dev)
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).float().reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        losses.append(avg.item())
    return model, losses


def fsdp2_mixed_precision(rank, world):
    """FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the small GPT's per-step losses stay
    within bf16 tolerance of one fp32 process on the whole batch; the sharded parameters stay fp32."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    _init(rank, world)
    vocab, seq, steps, lr = 64, 16, 3, 0.5
    model, ref = _gpt_pair(vocab, seq)
    data = torch.randint(0, vocab, (steps, 4 * world, seq + 1), generator=torch.Generator().manual_seed(1))
    mesh = init_device_mesh("tpu", (world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model, losses = _train_fsdp(model, mesh, data, rank, world, vocab, lr, steps, mp_policy=mp)
    want = _ref_losses(ref, data, vocab, lr, steps)
    for s in range(steps):
        assert abs(want[s] - losses[s]) <= 2e-2 * abs(want[s]), (s, want[s], losses[s])
    assert all(p.dtype == torch.float32 for p in model.parameters())
    dist.destroy_process_group()


def hsdp_two_hosts(rank, world):
    """HSDP on a 2-D mesh over two 2-chip "hosts": replicate across hosts x shard within each host; the small GPT
    trains to one process's per-step losses on the whole batch."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    _init(rank, world)
    vocab, seq, steps, lr = 64, 16, 3, 0.5
    model, ref = _gpt_pair(vocab, seq)
    data = torch.randint(0, vocab, (steps, 2 * world, seq + 1), generator=torch.Generator().manual_seed(1))
    mesh = init_device_mesh("tpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
    assert dist.get_backend(mesh.get_group("replicate")) == "tpu_dist"
    assert sorted(dist.get_process_group_ranks(mesh.get_group("replicate"))) == [rank % 2, rank % 2 + 2]
    model, losses = _train_fsdp(model, mesh, data, rank, world, vocab, lr, steps)
    want = _ref_losses(ref, data, vocab, lr, steps)
    for s in range(steps):
        assert abs(want[s] - losses[s]) <= 1e-4 * abs(want[s]) + 1e-5, (s, want[s], losses[s])
    dist.destroy_process_group()


def _ckpt_dir():
    return os.environ["TORCH_TPU_TEST_CKPT"]


def dcp_save(rank, world):
    """torch.distributed.checkpoint saves an FSDP2 model (one SGD step trained) from `world` ranks; rank 0 also
    writes the full state dict as the reference."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    _init(rank, world)
    vocab, seq = 64, 16
    model, _ = _gpt_pair(vocab, seq)
    data = torch.randint(0, vocab, (1, 2 * world, seq + 1), generator=torch.Generator().manual_seed(1))
    model, _ = _train_fsdp(model, init_device_mesh("tpu", (world,)), data, rank, world, vocab, 0.5, 1)
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=os.path.join(_ckpt_dir(), "ckpt"))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save(full, os.path.join(_ckpt_dir(), "full.pt"))
    dist.barrier()
    dist.destroy_process_group()


def dcp_load(rank, world):
    """The checkpoint dcp_save wrote, loaded into an FSDP2 model sharded over `world` ranks (a different count):
    the full state equals the saved model's, bit for bit."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    import test_models
    _init(rank, world)
    torch.manual_seed(123)  # other initial weights than the saved ones
    model = test_models.GPT(vocab=64, d=32, heads=2, layers=2, seq=16).to("tpu")
    mesh = init_device_mesh("tpu", (world,))
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    state = {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=os.path.join(_ckpt_dir(), "ckpt"))
    set_model_state_dict(model, state["model"])
    got = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        want = torch.load(os.path.join(_ckpt_dir(), "full.pt"))
        assert sorted(got) == sorted(want), (sorted(got), sorted(want))
        for k in want:
            assert torch.equal(got[k].cpu(), want[k].cpu()), k
    dist.barrier()
    dist.destroy_process_group()


def _premul_factor(r):
    """Rank r's premul_sum factor: a binary fraction, so every product and sum of `_value`s is exact."""
    return 0.5 + 0.25 * r


def premul_sum(rank, world):
    """ReduceOp.PREMUL_SUM with a float factor, a one-element tpu tensor and a cpu tensor, different on every rank:
    all_reduce, reduce, reduce_scatter, reduce_scatter_tensor and the coalesced forms give sum_r f_r * x_r (worked on
    CPU in float64), small and large (the shared-memory protocol) messages and a non-contiguous tensor; inputs the
    caller still owns (reduce off the root, reduce_scatter's) are unchanged; an integer tensor is refused with a
    clear error and the group keeps working."""
    dist = _init(rank, world)
    dev = torch.device("tpu", 0)
    mk = dist._make_nccl_premul_sum
    f = _premul_factor(rank)

    def want(shape, dt, salt=0):
        acc = sum(_premul_factor(r) * _value(r, torch.float64, shape, salt) for r in range(world))
        return acc.to(dt)

    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for kind in ("float", "tpu", "cpu"):
            op = (mk(f) if kind == "float" else
                  mk(torch.tensor([f], dtype=dt, device=dev)) if kind == "tpu" else mk(torch.tensor(f)))
            what = f"premul_sum({kind} factor) {dt}"
            shapes = [(6, 5)] + ([(2, 40000)] if dt == torch.float32 else [])
            for shape in shapes:
                t = _value(rank, dt, shape).to(dev)
                dist.all_reduce(t, op=op)
                _same(t, want(shape, dt), f"{what} all_reduce {shape}")
            # non-contiguous: a transposed view
            base = _value(rank, dt, (5, 6)).to(dev)
            view = base.t()
            dist.all_reduce(view, op=op)
            _same(view, want((5, 6), dt).t(), f"{what} all_reduce of a transposed view")
            for root in range(world):
                t = _value(rank, dt, (7,)).to(dev)
                dist.reduce(t, dst=root, op=op)
                _same(t, want((7,), dt) if rank == root else _value(rank, dt, (7,)), f"{what} reduce to {root}")
            inp = _value(rank, dt, (world * 3, 2)).to(dev)
            out = torch.empty((3, 2), dtype=dt, device=dev)
            dist.reduce_scatter_tensor(out, inp, op=op)
            _same(out, want((world * 3, 2), dt)[rank * 3:(rank + 1) * 3], f"{what} reduce_scatter_tensor")
            _same(inp, _value(rank, dt, (world * 3, 2)), f"{what} reduce_scatter_tensor leaves its input")
            ins = [_value(rank, dt, (4,), salt=q).to(dev) for q in range(world)]
            out = torch.empty(4, dtype=dt, device=dev)
            dist.reduce_scatter(out, ins, op=op)
            _same(out, want((4,), dt, salt=rank), f"{what} reduce_scatter")
            for q in range(world):
                _same(ins[q], _value(rank, dt, (4,), salt=q), f"{what} reduce_scatter leaves its inputs")
    # the coalesced forms
    op = mk(f)
    ts = [_value(rank, torch.float32, (3,), salt=s).to(dev) for s in range(3)]
    dist.all_reduce_coalesced(ts, op=op)
    for s in range(3):
        _same(ts[s], want((3,), torch.float32, salt=s), f"all_reduce_coalesced premul_sum [{s}]")
    ins = [_value(rank, torch.float32, (world * 2,), salt=s).to(dev) for s in range(2)]
    outs = [torch.empty(2, device=dev) for _ in range(2)]
    with dist._coalescing_manager(async_ops=False):
        for s in range(2):
            dist.reduce_scatter_tensor(outs[s], ins[s], op=op)
    for s in range(2):
        _same(outs[s], want((world * 2,), torch.float32, salt=s)[rank * 2:rank * 2 + 2], f"coalesced rs premul [{s}]")
        _same(ins[s], _value(rank, torch.float32, (world * 2,), salt=s), f"coalesced rs premul leaves input [{s}]")
    # an integer tensor: refused on every rank before anything moves; the group goes on
    bad = torch.ones(4, dtype=torch.int32, device=dev)
    try:
        dist.all_reduce(bad, op=op)
    except ValueError as e:
        assert "premul_sum needs a float16, bfloat16, float32 or float64 tensor, got Int" in str(e), str(e)
    else:
        raise AssertionError("premul_sum on int32 was accepted")
    t = _value(rank, torch.float32, (5,)).to(dev)
    dist.all_reduce(t)
    _same(t, _reduce_ref([_value(r, torch.float32, (5,)) for r in range(world)], dist.ReduceOp.SUM, torch.float32),
          "all_reduce after a refused premul_sum")
    dist.destroy_process_group()


def recv_any_source(rank, world):
    """dist.recv(t) without src and irecv without src take whichever rank's message comes (gloo's semantics) and
    return / report the sender's rank; in a subgroup, the sender's global rank. Then batch_isend_irecv with two
    messages to one peer."""
    dist = _init(rank, world)
    dev = torch.device("tpu", 0)
    if rank == 0:
        _recv_from_any_source(dist, dev, world, tagged_from=1)
    else:
        dist.send(_value(rank, torch.float32, (4,)).to(dev), 0)
        if rank == 1:
            dist.send(_value(11, torch.bfloat16, (2, 3)).to(dev), 0, tag=1)  # not for the tag-0 receives
    # a subgroup whose group ranks differ from the global ones: the last rank receives from any of the others
    ranks = list(range(1, world)) if world > 2 else [0, 1]
    g = dist.new_group(ranks)
    if rank in ranks:
        last = ranks[-1]
        if rank == last:
            for _ in range(len(ranks) - 1):
                buf = torch.empty(3, dtype=torch.int64, device=dev)
                src = dist.recv(buf, group=g)
                assert src in ranks[:-1], (src, ranks)
                _same(buf, _value(src, torch.int64, (3,), salt=5), f"subgroup recv from any source ({src})")
        else:
            dist.send(_value(rank, torch.int64, (3,), salt=5).to(dev), last, group=g)
    # two sends to the same peer in one batch_isend_irecv (a ring): each receive gets its own message, in order
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    mine = [_value(rank, torch.float32, (4,), salt=k).to(dev) for k in range(2)]
    got = [torch.full((4,), -7.0, device=dev) for _ in range(2)]
    ops = [dist.P2POp(dist.isend, m, nxt) for m in mine] + [dist.P2POp(dist.irecv, x, prv) for x in got]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for k in range(2):
        _same(got[k], _value(prv, torch.float32, (4,), salt=k), f"batch_isend_irecv message {k} of 2 from {prv}")
    dist.barrier()
    dist.destroy_process_group()


def fsdp2_cpu_offload(rank, world):
    """FSDP2 with CPUOffloadPolicy: sharded parameters and gradients live on the CPU between steps and the optimizer
    steps there, while forward, backward and the collectives run on the tpu chip. Trained beside the same model
    sharded without offload, both with a gradient divide factor of 2 * world (FSDP2 then reduce-scatters with
    ReduceOp.PREMUL_SUM): per-step losses match each other and one process on the whole batch at half the learning
    rate, and the parameter shards match after the last step."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
    _init(rank, world)
    dev = torch.device("tpu", 0)
    vocab, seq, steps, lr = 64, 16, 3, 0.5
    batch = 4 * world
    torch.manual_seed(0)
    model, ref = _gpt_pair(vocab, seq)
    plain, _ = _gpt_pair(vocab, seq)
    data = torch.randint(0, vocab, (steps, batch, seq + 1), generator=torch.Generator().manual_seed(1))
    mesh = init_device_mesh("tpu", (world,))

    def shard(m, **kw):
        for blk in m.blocks:
            fully_shard(blk, mesh=mesh, reshard_after_forward=True, **kw)
        fully_shard(m, mesh=mesh, **kw)
        for mod in list(m.blocks) + [m]:
            mod.set_gradient_divide_factor(2.0 * world)
        return m

    model = shard(model, offload_policy=CPUOffloadPolicy())
    plain = shard(plain.to(dev))
    for p in model.parameters():
        assert p.device.type == "cpu" and p.to_local().is_pinned(), p.device
    opts = [torch.optim.SGD(m.parameters(), lr=lr) for m in (model, plain)]
    per = batch // world
    losses, norms = [[], []], [[], []]
    for s in range(steps):
        x = data[s, rank * per:(rank + 1) * per].to(dev)
        for i, m in enumerate((model, plain)):
            loss = torch.nn.functional.cross_entropy(m(x[:, :-1]).reshape(-1, vocab), x[:, 1:].reshape(-1))
            opts[i].zero_grad()
            loss.backward()
            if i == 0:
                for p in m.parameters():
                    assert p.grad is not None and p.grad.device.type == "cpu", p.grad
            # the gradient norm over shards: an all_reduce of a CPU tensor on the offloaded model
            norms[i].append(torch.nn.utils.clip_grad_norm_(m.parameters(), 1e9).item())
            opts[i].step()
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            losses[i].append(avg.item())
    want = _ref_losses(ref, data, vocab, lr / 2, steps)
    for s in range(steps):
        for i in range(2):
            assert abs(want[s] - losses[i][s]) <= 1e-4 * abs(want[s]) + 1e-5, (s, i, want[s], losses[i][s])
        assert abs(norms[0][s] - norms[1][s]) <= 1e-4 * norms[1][s], (s, norms[0][s], norms[1][s])
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        assert p.device.type == "cpu", name
        a, b = p.to_local(), q.to_local().cpu()
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), (name, (a - b).abs().max())
        # full_tensor() of an offloaded parameter: an all_gather of CPU shards
        full = p.full_tensor()
        assert full.device.type == "cpu" and torch.allclose(full, q.full_tensor().cpu(), rtol=1e-4, atol=1e-5), name
    dist.destroy_process_group()


def cpu_tensors(rank, world):
    """CPU tensors given to a tpu_dist group (no gloo named): every collective, point to point, batch_isend_irecv,
    async with Work.wait() and get_future(), the functional collectives and the object collectives give gloo's
    answers (worked on CPU by hand); a collective on the chip in between stays in order."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc
    # One backend per group serves both devices (c10d registers a single backend when every device names the same
    # one): CPU tensors cost no second communicator.
    made = []
    plugin = dist.Backend._plugins["TPU_DIST"]
    dist.Backend._plugins["TPU_DIST"] = dist.Backend._BackendPlugin(
        lambda *a: made.append(1) or plugin.creator_fn(*a), plugin.extended_api)
    try:
        _init(rank, world)
        sub = dist.new_group(list(range(world)))
    finally:
        dist.Backend._plugins["TPU_DIST"] = plugin
    assert len(made) == 2, f"{len(made)} backends for 2 groups"
    assert dist.get_backend_config(sub) == "tpu:tpu_dist,cpu:tpu_dist", dist.get_backend_config(sub)
    dt = torch.float32
    vals = [_value(r, dt, (6,)) for r in range(world)]
    t = vals[rank].clone()
    dist.all_reduce(t)
    _same(t, _reduce_ref(vals, dist.ReduceOp.SUM, dt), "cpu all_reduce")
    t = vals[rank].clone()
    w = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
    chip = _value(rank, dt, (6,)).to("tpu")
    dist.all_reduce(chip)  # a chip collective issued while the CPU one is pending
    w.wait()
    _same(t, _reduce_ref(vals, dist.ReduceOp.MAX, dt), "cpu async all_reduce max")
    _same(chip, _reduce_ref(vals, dist.ReduceOp.SUM, dt), "chip all_reduce between")
    t = vals[rank].clone()
    w = dist.all_reduce(t, async_op=True)
    while not w.is_completed():  # polling, no wait(): complete means the CPU tensor holds the result
        time.sleep(0.001)
    _same(t, _reduce_ref(vals, dist.ReduceOp.SUM, dt), "cpu all_reduce polled with is_completed()")
    t = vals[rank].clone()
    fut = dist.all_reduce(t, async_op=True).get_future()
    _same(fut.wait()[0], _reduce_ref(vals, dist.ReduceOp.SUM, dt), "cpu all_reduce future")
    for root in range(world):
        t = vals[rank].clone()
        dist.broadcast(t, src=root)
        _same(t, vals[root], f"cpu broadcast from {root}")
        t = vals[rank].clone()
        dist.reduce(t, dst=root)
        _same(t, _reduce_ref(vals, dist.ReduceOp.SUM, dt) if rank == root else vals[rank], f"cpu reduce to {root}")
        _check_gather(rank, world, dt, (2, 3), "cpu", root, "cpu ")
        _check_scatter(rank, world, dt, (2, 3), "cpu", root, "cpu ")
    out = torch.empty(6 * world)
    dist.all_gather_into_tensor(out, vals[rank])
    _same(out, torch.cat(vals), "cpu all_gather_into_tensor")
    outs = [torch.empty(6) for _ in range(world)]
    dist.all_gather(outs, vals[rank])
    for r in range(world):
        _same(outs[r], vals[r], f"cpu all_gather [{r}]")
    big = [_value(r, dt, (world * 4,)) for r in range(world)]
    o = torch.empty(4)
    dist.reduce_scatter_tensor(o, big[rank])
    _same(o, _reduce_ref(big, dist.ReduceOp.SUM, dt)[rank * 4:rank * 4 + 4], "cpu reduce_scatter_tensor")
    _check_all_to_all(rank, world, dt, "cpu", "cpu ")
    # point to point: a ring with batch_isend_irecv, then plain send / recv and recv from any source
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(6)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, vals[rank], nxt), dist.P2POp(dist.irecv, got, prv)])
    for r in reqs:
        r.wait()
    _same(got, vals[prv], "cpu batch_isend_irecv")
    if rank == 0:
        for _ in range(world - 1):
            buf = torch.empty(6)
            src = dist.recv(buf)
            _same(buf, vals[src], f"cpu recv from any source ({src})")
        buf = torch.empty(6)
        dist.recv(buf, src=1, tag=1)
        _same(buf, vals[1] * 2, "cpu recv")
    else:
        dist.send(vals[rank], 0)
        if rank == 1:  # another tag: the receives from any source must not take it
            dist.send(vals[1] * 2, 0, tag=1)
    # functional collectives on CPU tensors
    r = fc.all_reduce(vals[rank], "sum", dist.group.WORLD)
    _same(fc.wait_tensor(r), _reduce_ref(vals, dist.ReduceOp.SUM, dt), "cpu functional all_reduce")
    g = fc.all_gather_tensor(vals[rank], 0, dist.group.WORLD)
    _same(fc.wait_tensor(g), torch.cat(vals), "cpu functional all_gather_tensor")
    # object collectives
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
    assert objs == [{"rank": r, "s": "x" * r} for r in range(world)], objs
    lst = [rank * 10, "a"] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [0, "a"], lst
    dist.barrier()
    dist.destroy_process_group()


def _exact_ints(r, shape, dtype=torch.float32, salt=0):
    """Rank r's input: small integers, so every sum is exact in every dtype."""
    n = 1
    for s in shape:
        n *= s
    return (((torch.arange(n) * 7 + r * 3 + salt) % 5) + r - 1).to(dtype).reshape(shape)


def vllm_communicator(rank, world):
    """tests/test_vllm_tp.py: vLLM's device communicator on tpu_dist against results worked out from every rank's
    inputs (each rank on its own chip)."""
    import torch.distributed as dist
    from torch_tpu.vllm.communicator import TpuCommunicator
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("tpu_dist", rank=rank, world_size=world, timeout=timeout)
    ranks = list(range(world))
    comm = TpuCommunicator(dist.new_group(ranks, backend="gloo", timeout=timeout), device=torch.device("tpu", rank),
                           device_group=dist.new_group(ranks, backend="tpu_dist", timeout=timeout))
    assert comm.device == torch.device("tpu", 0), comm.device  # this process's chip, whatever vLLM names
    assert torch.tpu.get_device_properties(0).chip_id == rank
    dev = comm.device
    xs = [_exact_ints(r, (4, 6)) for r in ranks]
    total = sum(xs)

    def eq(got, want, what):
        assert got.device.type == "tpu", what
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, msg=what)

    eq(comm.all_reduce(xs[rank].to(dev)), total, "all_reduce")
    eq(comm.all_reduce(xs[rank].to(dev, torch.bfloat16)), total.bfloat16(), "all_reduce bf16")
    for dim in (0, 1, -1):
        eq(comm.all_gather(xs[rank].to(dev), dim), torch.cat(xs, dim), f"all_gather dim {dim}")
        eq(comm.reduce_scatter(xs[rank].to(dev), dim), total.chunk(world, dim)[rank], f"reduce_scatter dim {dim}")
    g = comm.gather(xs[rank].to(dev), dst=0, dim=1)
    if rank == 0:
        eq(g, torch.cat(xs, 1), "gather")
    else:
        assert g is None
    b = xs[rank].to(dev)
    eq(comm.broadcast(b, src=1), xs[1], "broadcast")
    # uneven rows: rank r has sizes[r] of them
    sizes = [2, 3][:world] + [1] * max(0, world - 2)
    parts = [_exact_ints(r, (sizes[r], 5), salt=1) for r in ranks]
    eq(comm.all_gatherv(parts[rank].to(dev), 0, sizes), torch.cat(parts), "all_gatherv uneven")
    got = comm.all_gatherv([parts[rank].to(dev), parts[rank].to(dev) * 2], 0, sizes)
    eq(got[1], torch.cat(parts) * 2, "all_gatherv list")
    eq(comm.all_gatherv(xs[rank].to(dev), 0), torch.cat(xs), "all_gatherv even")
    ys = [_exact_ints(r, (sum(sizes), 3), salt=2) for r in ranks]
    eq(comm.reduce_scatterv(ys[rank].to(dev), 0, sizes), sum(ys).split(sizes)[rank], "reduce_scatterv uneven")
    zs = [_exact_ints(r, (2, sum(sizes), 3), salt=3) for r in ranks]
    eq(comm.reduce_scatterv(zs[rank].to(dev), 1, sizes), sum(zs).split(sizes, 1)[rank], "reduce_scatterv dim 1")
    # point to point (a send blocks until it is received, as NCCL's does): around the ring from rank 0
    if rank > 0:
        eq(comm.recv(torch.Size((4, 6)), torch.float32), xs[rank - 1], "send/recv")
    comm.send(xs[rank].to(dev))
    if rank == 0:
        eq(comm.recv(torch.Size((4, 6)), torch.float32), xs[world - 1], "send/recv")
    for bad in (lambda: comm.all_gatherv(parts[rank].to(dev), 0, [9] * world),
                lambda: comm.reduce_scatterv(ys[rank].to(dev), 0, [1] * world),
                lambda: comm.all_gatherv(parts[rank].to(dev), 1, sizes)):
        try:
            bad()
        except (ValueError, NotImplementedError) as e:
            assert "tpu communicator" in str(e), e
        else:
            raise AssertionError("bad sizes were accepted")
    dist.destroy_process_group()


def fail_mismatch_two_hosts_step_kinds(rank, world):
    """Two "hosts" whose calls take different kinds of step between hosts: a small allreduce (its data rides in the
    hosts' first ranks' call exchange) against a large one (every local rank moves its block over its column), an
    all_gather by columns against a broadcast through the first ranks, a barrier against a small allreduce. Every
    rank fails naming both calls, and no rank is left in a gloo call: the ranks exit without waiting for gloo's
    timeout (test_dist's _spawn limit is shorter than the four 30 s timeouts)."""
    import torch.distributed as dist
    _init(rank, world, timeout_s=30)
    dev = torch.device("tpu", 0)
    a = rank < 2  # host 0

    def small_vs_large(g):
        t = torch.ones(10 if a else 100000, device=dev)
        dist.all_reduce(t, group=g)
        t.cpu()

    def gather_vs_broadcast(g):
        t = torch.ones(20000, device=dev)
        if a:
            out = torch.empty(4 * 20000, device=dev)
            dist.all_gather_into_tensor(out, t, group=g)
        else:
            dist.broadcast(t, src=2, group=g)
        t.cpu()

    def barrier_vs_allreduce(g):
        if a:
            dist.barrier(group=g)
        else:
            t = torch.ones(6, device=dev)
            dist.all_reduce(t, group=g)
            t.cpu()
        torch.tpu.synchronize()

    cases = ((small_vs_large, r"rank 0 called allreduce\(float32, 10 elements, sum\) but rank 2 called "
              r"allreduce\(float32, 100000 elements, sum\)"),
             (gather_vs_broadcast, r"rank 0 called all_gather\(float32, 20000 elements\) but rank 2 called "
              r"broadcast\(float32, 20000 elements, root 2\)"),
             (barrier_vs_allreduce, r"rank 0 called barrier but rank 2 called allreduce\(float32, 6 elements, sum\)"))
    for i, (case, want) in enumerate(cases):
        g = None if i == 0 else dist.new_group(list(range(world)))
        try:
            case(g)
            raise AssertionError(f"{case.__name__}: the mismatch between hosts was not detected")
        except RuntimeError as e:
            msg = str(e)
            assert "mismatched collectives between hosts" in msg and re.search(want, msg), f"{case.__name__}: {msg}"
        _drain()
    dist.destroy_process_group()


def cross_host_size_boundaries(rank, world):
    """Two "hosts" of 2 chips: all_reduce, all_gather and broadcast on each side of the sizes where the step between
    hosts changes (data in the call exchange up to 4 KiB per host, through the first ranks up to 64 KiB, by
    columns above), and barriers, against the known answers."""
    import torch.distributed as dist
    _init(rank, world)
    dev = torch.device("tpu", 0)
    W = world
    R = dist.ReduceOp
    for n in (1, 1024, 1025, 16384, 16385):  # float32 elements: 4 KiB, 64 KiB
        for dt, op in ((torch.float32, R.SUM), (torch.float16, R.MIN), (torch.int32, R.MAX), (torch.bool, R.PRODUCT)):
            t = _value(rank, dt, (n,)).to(dev)
            dist.all_reduce(t, op=op)
            _same(t, _reduce_ref([_value(r, dt, (n,)) for r in range(W)], op, dt), f"all_reduce {dt} {op} n={n}")
        for src in (0, 3):
            t = _value(rank, torch.float32, (n,)).to(dev)
            dist.broadcast(t, src=src)
            _same(t, _value(src, torch.float32, (n,)), f"broadcast from {src} n={n}")
    for n in (1, 512, 513, 8192, 8193):  # per rank: a host's gathered part of 4 KiB, an output of 64 KiB
        inp = _value(rank, torch.float32, (n,)).to(dev)
        out = torch.empty(W * n, device=dev)
        dist.all_gather_into_tensor(out, inp)
        _same(out, torch.cat([_value(r, torch.float32, (n,)) for r in range(W)]), f"all_gather n={n}")
    for _ in range(3):
        dist.barrier()
    dist.destroy_process_group()


def future_error(rank, world):
    """Work.get_future() (what DDP waits on): its value is the collective's output once it ran; when the collective
    fails (rank 1 skips it), the future's wait raises naming the rank and the collective."""
    import torch.distributed as dist
    _init(rank, world, timeout_s=3)
    dev = torch.device("tpu", 0)
    t = torch.full((16,), float(rank + 1), device=dev)
    fut = dist.all_reduce(t, async_op=True).get_future()
    got = fut.wait()
    _same(got[0], torch.full((16,), 3.0), "future's value")
    then = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0].sum().item())
    assert then.wait() == 16 * 6.0, then.value()
    if rank == 1:
        time.sleep(6)
        return
    w = dist.all_reduce(t, async_op=True)
    try:
        w.get_future().wait()
        raise AssertionError("the future of a failed collective did not raise")
    except RuntimeError as e:
        msg = str(e)
        assert "rank 1" in msg and "timeout" in msg and "allreduce(float32, 16 elements, sum)" in msg, msg
    _drain()


def lone_sends(rank, world):
    """A send outside batch_isend_irecv waits for its receiver on a queue of its peer's, not on the group's stream:
    rank 0 sends, then all-reduces, while rank 1 all-reduces before it receives; both ranks isend before they
    irecv. (With the sends on the group's stream, both waited until the timeout.) Messages to a peer keep their
    order across lone sends and batch_isend_irecv; a non-contiguous tensor is sent as its values."""
    dist = _init(rank, world, timeout_s=20)
    dev = torch.device("tpu", 0)
    peer = 1 - rank
    x = torch.full((4,), float(rank + 1), device=dev)
    msg = _value(rank, torch.float32, (5, 3)).to(dev).t()  # non-contiguous
    if rank == 0:
        w = dist.isend(msg, 1)
        dist.all_reduce(x)
        _same(x, torch.full((4,), 3.0), "all_reduce behind a send not yet received")
        w.wait()
    else:
        dist.all_reduce(x)
        _same(x, torch.full((4,), 3.0), "all_reduce")
        buf = torch.empty((3, 5), device=dev)
        dist.recv(buf, 0)
        _same(buf, _value(0, torch.float32, (5, 3)).t(), "recv of a lone send")
    # both ranks send first, then receive
    mine, theirs = _value(rank, torch.int64, (7,)).to(dev), torch.empty(7, dtype=torch.int64, device=dev)
    ws = dist.isend(mine, peer)
    wr = dist.irecv(theirs, peer)
    wr.wait()
    ws.wait()
    _same(theirs, _value(peer, torch.int64, (7,)), "isend then irecv on both ranks")
    # order: lone send, batch, lone send to the same peer
    if rank == 0:
        vals = [torch.full((3,), float(k), device=dev) for k in range(4)]
        dist.send(vals[0], 1)
        for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, vals[1], 1), dist.P2POp(dist.isend, vals[2], 1)]):
            w.wait()
        dist.send(vals[3], 1)
    else:
        for k in range(4):
            buf = torch.empty(3, device=dev)
            dist.recv(buf, 0)
            _same(buf, torch.full((3,), float(k)), f"message {k} in order")
    dist.barrier()
    dist.destroy_process_group()


def init_with_device_id(rank, world):
    """init_process_group(device_id=tpu:0) with no backend named picks tpu_dist (registered for the tpu device)."""
    import torch.distributed as dist
    dev = torch.device("tpu", 0)
    dist.init_process_group(rank=rank, world_size=world, device_id=dev, timeout=datetime.timedelta(seconds=60))
    assert dist.get_backend() == "tpu_dist", dist.get_backend()
    t = torch.full((3,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    _same(t, torch.full((3,), float(world * (world + 1) // 2)), "all_reduce after init with device_id")
    dist.destroy_process_group()


def _killed_between_hosts(rank, world, victim, numel):
    """Two "hosts" of 2 chips: `victim` (a rank of the second host) issues an allreduce of `numel` float32 and is
    killed (SIGKILL) 50 ms later, while the others are inside it (or, when it finished first, inside the next one,
    which the victim never calls): every other rank's allreduce fails naming the victim and the collective, within
    the group's timeout (20 s; the test's hang guard is larger), the group is left aborted, and
    destroy_process_group returns."""
    import torch.distributed as dist
    _init(rank, world, timeout_s=20)
    dev = torch.device("tpu", 0)
    t = torch.ones(numel, device=dev)
    dist.all_reduce(t)
    _same(t, torch.full((numel,), float(world)), "allreduce before the kill")
    dist.barrier()
    if rank == victim:
        dist.all_reduce(t, async_op=True)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(2):
            dist.all_reduce(t)
            t.cpu()
        raise AssertionError("the allreduce with a dead peer on another host did not fail")
    except RuntimeError as e:
        msg = str(e)
        print(f"rank {rank} after {time.monotonic() - t0:.1f} s: {msg}", flush=True)
        assert f"rank {victim}" in msg and "allreduce" in msg, msg
    _drain()
    try:
        dist.all_reduce(t)
        t.cpu()
        raise AssertionError("the group was not left aborted")
    except RuntimeError as e:
        assert f"rank {victim}" in str(e), str(e)
    dist.destroy_process_group()


def fail_killed_two_hosts(rank, world):
    _killed_between_hosts(rank, world, victim=3, numel=1 << 22)


def fail_killed_two_hosts_first_rank(rank, world):
    _killed_between_hosts(rank, world, victim=2, numel=16)


def _skipped_between_hosts(rank, world, victim, numel):
    """Two "hosts" of 2 chips: `victim` (a rank of the second host) stays alive but skips an allreduce of `numel`
    float32; every other rank's allreduce fails after the group's 4 s timeout naming the victim, the timeout and
    the collective (the rank that timed out tells the other host through the store), and the group is left
    aborted; destroy_process_group returns on every rank."""
    import torch.distributed as dist
    _init(rank, world, timeout_s=4)
    dev = torch.device("tpu", 0)
    t = torch.ones(numel, device=dev)
    dist.all_reduce(t)
    _same(t, torch.full((numel,), float(world)), "allreduce before the skip")
    if rank == victim:
        time.sleep(12)
        try:
            dist.all_reduce(t)
            t.cpu()
            raise AssertionError("the skipping rank's group was not aborted")
        except RuntimeError as e:
            assert f"rank {victim}" in str(e), str(e)
        _drain()
        dist.destroy_process_group()
        return
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        t.cpu()
        raise AssertionError("an allreduce skipped by a rank of another host did not fail")
    except RuntimeError as e:
        msg = str(e)
        print(f"rank {rank} after {time.monotonic() - t0:.1f} s: {msg}", flush=True)
        assert f"rank {victim}" in msg and "timeout" in msg and "allreduce" in msg, msg
    _drain()
    try:
        dist.all_reduce(t)
        t.cpu()
        raise AssertionError("the group was not left aborted")
    except RuntimeError as e:
        assert f"rank {victim}" in str(e), str(e)
    dist.destroy_process_group()


def fail_skipped_two_hosts(rank, world):
    _skipped_between_hosts(rank, world, victim=3, numel=1 << 20)


def fail_skipped_two_hosts_first_rank(rank, world):
    _skipped_between_hosts(rank, world, victim=2, numel=16)


def fail_mismatch_dtype_and_order(rank, world):
    """Ranks that call the same collective with different dtypes, or the same collectives in a different order,
    fail on both ranks before data moves, saying what each called."""
    import torch.distributed as dist
    _init(rank, world)
    dev = torch.device("tpu", 0)
    t = torch.ones(10, dtype=torch.float32 if rank == 0 else torch.int32, device=dev)
    try:
        dist.all_reduce(t)
        t.cpu()
        raise AssertionError("mismatched dtypes were not detected")
    except RuntimeError as e:
        msg = str(e)
        assert "rank 0 called allreduce(float32, 10 elements, sum)" in msg, msg
        assert "rank 1 called allreduce(int32, 10 elements, sum)" in msg and "no data was exchanged" in msg, msg
    _drain()
    g = dist.new_group(list(range(world)))
    a = torch.ones(6, device=dev)
    try:
        if rank == 0:
            dist.broadcast(a, src=0, group=g)
            dist.all_reduce(a, group=g)
        else:
            dist.all_reduce(a, group=g)
            dist.broadcast(a, src=0, group=g)
        a.cpu()
        raise AssertionError("collectives called in a different order were not detected")
    except RuntimeError as e:
        msg = str(e)
        assert "at call #1 of the group" in msg, msg
        assert "rank 0 called broadcast(float32, 6 elements, root 0)" in msg, msg
        assert "rank 1 called allreduce(float32, 6 elements, sum)" in msg, msg
    _drain()
    dist.destroy_process_group()
