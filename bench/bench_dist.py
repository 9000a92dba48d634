"""tpu_dist collectives on this machine: allreduce, all_gather and reduce_scatter bus bandwidth (the NCCL-tests definition) from
4 KiB to 256 MiB on 2 and 4 chips, beside gloo on CPU tensors in the same run and the same process group, as a
fraction of this machine's copy bandwidth (measured in the same run), the latency of an 8-byte allreduce, and the
DDP training step time of the small GPT on 1, 2 and 4 chips beside the same DDP on CPU with gloo.

    python bench/bench_dist.py [--ranks 2,4] [--max-mib 256] [--sizes-mib 64,256 | --sizes-kib 64,256,1024]
                               [--ddp-ranks 1,2,4]
                               [--hosts 2] [--json bench/results_dist.json]

(--max-mib 0: no bandwidth table; --ddp-ranks "": no DDP.) --hosts H runs each rank count as H "hosts" on this
machine: H torchrun node groups (--nnodes H, on loopback), each with its own TORCH_TPU_HOST_ID, so collectives go
through shared memory within a node group and gloo between them, as on H machines.

Bus bandwidth: allreduce moves size * 2(n-1)/n per rank, all_gather (of a size-byte output) size * (n-1)/n, so
busbw = that / time; it is comparable across rank counts and with a copy's bandwidth (bytes copied per second, one
read and one write of each byte). Every chip gets TORCH_TPU_NUM_THREADS=1 unless set: the ranks share the cores.
Times are medians; the device's end with torch.tpu.synchronize(). The load average is printed beside the figures.
"""
import argparse
import datetime
import json
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent


# reduce_scatter (of a size-byte input) moves size * (n-1)/n per rank, as all_gather does.
KINDS = ("allreduce", "all_gather", "reduce_scatter")


def _median_time(fn, sync, iters, repeats=3):
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / iters)
    return statistics.median(times)


def _per_call_median(fn, iters):
    """The median of single calls' times: the typical latency, without the tail that other processes' use of the
    shared cores adds to a mean."""
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _iters_for(nbytes):
    return max(2, min(200, (32 << 20) // max(nbytes, 1)))


def _concurrent_copy_bw(torch, dist, n):
    """Bytes per second one rank copies (float32, n elements) while every rank copies, one thread each."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    src, dst = torch.ones(n), torch.empty(n)
    dst.copy_(src)
    times = []
    for _ in range(5):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(2):
            dst.copy_(src)
        t = torch.tensor([(time.perf_counter() - t0) / 2], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(t.item())
    torch.set_num_threads(threads)
    return n * 4 / statistics.median(times)


def rank_main(rank, world, sizes, outfile):
    sys.path.insert(0, str(HERE.parent))
    import torch
    import torch_tpu  # noqa: F401
    import torch.distributed as dist
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    tsync = torch.tpu.synchronize
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        row = {"bytes": nbytes}
        for kind in KINDS:
            for dev in ("tpu", "cpu"):
                if kind == "allreduce":
                    t = torch.ones(n, device=dev)
                    fn = (lambda t=t: dist.all_reduce(t))
                    busf = 2 * (world - 1) / world
                elif kind == "reduce_scatter":
                    inp = torch.ones((n // world) * world, device=dev)
                    out = torch.empty(n // world, device=dev)
                    fn = (lambda inp=inp, out=out: dist.reduce_scatter_tensor(out, inp))
                    busf = (world - 1) / world
                else:
                    inp = torch.ones(n // world, device=dev)
                    out = torch.empty((n // world) * world, device=dev)
                    fn = (lambda inp=inp, out=out: dist.all_gather_into_tensor(out, inp))
                    busf = (world - 1) / world
                sync = tsync if dev == "tpu" else (lambda: None)
                fn()
                sync()
                sec = _median_time(fn, sync, _iters_for(nbytes))
                row[f"{kind}_{dev}_s"] = sec
                row[f"{kind}_{dev}_busbw"] = nbytes * busf / sec
        rows.append(row)
    # 8-byte allreduce latency: queued back to back (the NCCL-tests figure) and one call + sync at a time
    lat = {}
    small = torch.ones(2, device="tpu")
    lat["queued_us"] = 1e6 * _median_time(lambda: dist.all_reduce(small), tsync, 2000)
    lat["synced_us"] = 1e6 * _median_time(lambda: (dist.all_reduce(small), tsync()), lambda: None, 300)
    lat["synced_p50_us"] = 1e6 * _per_call_median(lambda: (dist.all_reduce(small), tsync()), 1000)
    small_cpu = torch.ones(2)
    lat["gloo_us"] = 1e6 * _median_time(lambda: dist.all_reduce(small_cpu), lambda: None, 300)
    lat["gloo_p50_us"] = 1e6 * _per_call_median(lambda: dist.all_reduce(small_cpu), 1000)
    copy_bw = chip_copy_bw = None
    if rank == 0 and sizes:
        # this machine's copy bandwidth, measured in the same run (64 MiB, CPU memcpy through torch)
        src = torch.ones(16 << 20)
        dst = torch.empty_like(src)
        sec = _median_time(lambda: dst.copy_(src), lambda: None, 10, repeats=5)
        copy_bw = src.numel() * 4 / sec
    # A chip's copy bandwidth while every chip copies at once, one thread each (what a chip is given: the host's
    # cores and memory are shared by its chips): every rank copies 256 MiB within its own memory at the same time;
    # the slowest rank's time counts. A collective's bytes all pass through that shared memory, so this is its bound.
    if sizes:
        chip_copy_bw = _concurrent_copy_bw(torch, dist, 64 << 20)
    dist.barrier()
    if rank == 0:
        with open(outfile, "w") as f:
            json.dump({"world": world, "rows": rows, "latency": lat, "copy_bw": copy_bw,
                       "chip_copy_bw": chip_copy_bw}, f)
    dist.destroy_process_group()


# The small GPT of tests/test_models.py at the size bench/run.py trains; a fixed batch per rank (weak scaling).
DDP_CFG = dict(vocab=256, d=128, heads=4, layers=2, seq=32)
DDP_BATCH, DDP_STEPS = 8, 12


def ddp_main(rank, world, _unused, outfile):
    """DDP step time (forward, backward with its bucketed allreduce, SGD step, synchronize) of the small GPT: on
    tpu chips through tpu_dist, and the same model on CPU through gloo, in the same process group."""
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(HERE.parent / "tests"))
    import torch
    import torch_tpu  # noqa: F401
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import test_models
    torch.set_num_threads(1)  # each CPU rank gets one thread, as each chip does
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    cfg = DDP_CFG
    data = torch.randint(0, cfg["vocab"], (DDP_STEPS, DDP_BATCH, cfg["seq"] + 1),
                         generator=torch.Generator().manual_seed(rank))
    res = {}
    for dev in ("tpu", "cpu"):
        torch.manual_seed(0)
        model = test_models.GPT(**cfg).to(dev)
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        sync = torch.tpu.synchronize if dev == "tpu" else (lambda: None)
        times = []
        for s in range(DDP_STEPS):
            x = data[s].to(dev)
            dist.barrier()
            t0 = time.perf_counter()
            logits = ddp(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab"]), x[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sync()
            times.append(time.perf_counter() - t0)
        res[f"{dev}_step_s"] = statistics.median(times[2:])  # the first steps build caches and buckets
    dist.barrier()
    if rank == 0:
        with open(outfile, "w") as f:
            json.dump({"world": world, **res}, f)
    dist.destroy_process_group()


def _spawn(world, sizes, target=None):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tempfile.mktemp(prefix="bench_dist_", suffix=".json")
    saved = dict(os.environ)
    procs = []
    try:
        for r in range(world):
            os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "LOCAL_RANK": str(r),
                               "TORCH_TPU_TOPOLOGY": str(world)})
            os.environ.setdefault("TORCH_TPU_NUM_THREADS", "1")
            os.environ.setdefault("TORCH_TPU_HBM_BYTES", "2G")
            p = ctx.Process(target=target or rank_main, args=(r, world, sizes, out))
            p.start()
            procs.append(p)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"bench_dist: a rank failed: {[p.exitcode for p in procs]}")
    with open(out) as f:
        return json.load(f)


def _spawn_hosts(world, hosts, sizes):
    """world ranks as `hosts` torchrun node groups on loopback, each its own host (TORCH_TPU_HOST_ID)."""
    import subprocess
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tempfile.mktemp(prefix="bench_dist_", suffix=".json")
    chips = world // hosts
    procs = []
    for h in range(hosts):
        env = dict(os.environ, TORCH_TPU_HOST_ID=f"node{h}", TORCH_TPU_TOPOLOGY=str(chips),
                   PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.setdefault("TORCH_TPU_NUM_THREADS", "1")
        env.setdefault("TORCH_TPU_HBM_BYTES", "2G")
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={hosts}", f"--node-rank={h}",
               f"--nproc-per-node={chips}", "--master-addr=127.0.0.1", f"--master-port={port}", str(HERE / "bench_dist.py"),
               "--worker", out, "--worker-bytes", ",".join(str(b) for b in sizes)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"bench_dist: a node group failed: {codes}")
    with open(out) as f:
        return json.load(f)


def _fmt_bytes(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--max-mib", type=int, default=256)
    ap.add_argument("--ddp-ranks", default="1,2,4")
    ap.add_argument("--sizes-mib", default="", help="only these sizes, e.g. 64,256 (default: 4 KiB .. --max-mib)")
    ap.add_argument("--sizes-kib", default="", help="only these sizes in KiB, e.g. 64,256,1024 (mid-size messages)")
    ap.add_argument("--latency-only", action="store_true", help="only the 8-byte allreduce latency (no size table)")
    ap.add_argument("--hosts", type=int, default=1, help="split each rank count into this many torchrun node groups")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)  # a torchrun rank of --hosts: writes here
    ap.add_argument("--worker-bytes", default="", help=argparse.SUPPRESS)  # its sizes
    ap.add_argument("--json", default=str(HERE / "results_dist.json"))
    args = ap.parse_args()
    if args.worker:
        rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                  [int(x) for x in args.worker_bytes.split(",") if x], args.worker)
        return
    sizes = []
    s = 4 << 10
    while s <= args.max_mib << 20:
        sizes.append(s)
        s *= 4
    if sizes and sizes[-1] != args.max_mib << 20 and args.max_mib << 20 > 4 << 10:
        sizes.append(args.max_mib << 20)
    if args.sizes_mib:
        sizes = [int(x) << 20 for x in args.sizes_mib.split(",") if x]
    if args.sizes_kib:
        sizes = [int(x) << 10 for x in args.sizes_kib.split(",") if x]
    if args.latency_only:
        sizes = []
    results = []
    for world in [int(x) for x in args.ranks.split(",") if x] if sizes or args.latency_only else []:
        res = _spawn_hosts(world, args.hosts, sizes) if args.hosts > 1 else _spawn(world, sizes)
        res["hosts"] = args.hosts
        results.append(res)
        cbw, chip_bw = res["copy_bw"], res["chip_copy_bw"]
        where = f"{args.hosts} hosts x {world // args.hosts} chips (torchrun node groups on loopback)" \
            if args.hosts > 1 else f"{world} chips"
        if not res["rows"]:
            print(f"\n== {where} (load average {os.getloadavg()[0]:.1f})")
        else:
            print(f"\n== {where} (load average {os.getloadavg()[0]:.1f}); copy bandwidth {cbw / 1e9:.2f} GB/s "
                  f"(one process, its threads); a chip's while all {world} copy at once: {chip_bw / 1e9:.2f} GB/s")
            print(f"{'size':>9} |" + "".join(f" {kind + ' busbw GB/s':>26} {'x gloo':>7} {'of copy':>8} {'of chip':>8} |"
                                             for kind in KINDS))
            for row in res["rows"]:
                line = f"{_fmt_bytes(row['bytes']):>9} |"
                for kind in KINDS:
                    ours, gloo = row[f"{kind}_tpu_busbw"], row[f"{kind}_cpu_busbw"]
                    line += (f" {ours / 1e9:13.2f} (gloo {gloo / 1e9:6.2f}) {ours / gloo:7.1f} {ours / cbw:8.0%}"
                             f" {ours / chip_bw:8.0%} |")
                print(line)
        lat = res["latency"]
        print(f"8-byte allreduce: {lat['queued_us']:.1f} us each queued back to back; one call + synchronize "
              f"{lat['synced_us']:.1f} us mean, {lat['synced_p50_us']:.1f} us median; gloo {lat['gloo_us']:.1f} us mean "
              f"({lat['gloo_us'] / lat['synced_us']:.1f}x), {lat['gloo_p50_us']:.1f} us median "
              f"({lat['gloo_p50_us'] / lat['synced_p50_us']:.1f}x)")
    ddp = []
    ddp_worlds = [int(x) for x in args.ddp_ranks.split(",") if x]
    if ddp_worlds:
        print(f"\n== DDP step of the small GPT {DDP_CFG}, batch {DDP_BATCH} per rank, median of "
              f"{DDP_STEPS - 2} steps")
        print(f"{'chips':>5} | {'tpu_dist ms':>11} {'gloo CPU ms':>11} {'x CPU':>6} | load")
    for world in ddp_worlds:
        res = _spawn(world, None, target=ddp_main)
        ddp.append(res)
        print(f"{world:>5} | {res['tpu_step_s'] * 1e3:11.1f} {res['cpu_step_s'] * 1e3:11.1f} "
              f"{res['cpu_step_s'] / res['tpu_step_s']:6.2f} | {os.getloadavg()[0]:.1f}")
    with open(args.json, "w") as f:
        json.dump({"load_average": os.getloadavg(), "results": results, "ddp": ddp}, f, indent=1)
    print(f"\nwritten to {args.json}; load average now {os.getloadavg()}")


if __name__ == "__main__":
    main()
