"""Tensor parallelism of vLLM on two vTPU chips: vLLM's multiprocessing executor starts one worker process
per chip (torch_tpu/vllm/executor.py), and vLLM's device communicator moves tpu tensors through tpu_dist
(torch_tpu/vllm/communicator.py). The communicator's collectives are checked on two spawned ranks against
results worked out from every rank's inputs; `vllm.LLM(..., tensor_parallel_size=2)` gives the greedy tokens
of one chip and of transformers on the CPU, and logprobs within float32 rounding of one chip's; --full adds
torchrun (vLLM's external launcher) with one engine process per chip."""
import datetime
import gc
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import traceback

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (scripts/setup.sh installs it)")

sys.path.insert(0, os.path.dirname(__file__))
from vllm_models import hf_greedy, make_model  # noqa: E402

PROMPTS = [
    "The standard library",
    "Return a new dictionary",
    "This module implements specialized container datatypes providing alternatives to Python's general "
    "purpose built-in containers, dict, list, set, and tuple. It also provides a named tuple factory.",
]
MAX_TOKENS = 10


def _x(r, shape, dtype=torch.float32, salt=0):
    """Rank r's input: small integers, so every sum is exact in every dtype."""
    n = 1
    for s in shape:
        n *= s
    return (((torch.arange(n) * 7 + r * 3 + salt) % 5) + r - 1).to(dtype).reshape(shape)


def _communicator_rank(rank, world):
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
    xs = [_x(r, (4, 6)) for r in ranks]
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
    parts = [_x(r, (sizes[r], 5), salt=1) for r in ranks]
    eq(comm.all_gatherv(parts[rank].to(dev), 0, sizes), torch.cat(parts), "all_gatherv uneven")
    got = comm.all_gatherv([parts[rank].to(dev), parts[rank].to(dev) * 2], 0, sizes)
    eq(got[1], torch.cat(parts) * 2, "all_gatherv list")
    eq(comm.all_gatherv(xs[rank].to(dev), 0), torch.cat(xs), "all_gatherv even")
    ys = [_x(r, (sum(sizes), 3), salt=2) for r in ranks]
    eq(comm.reduce_scatterv(ys[rank].to(dev), 0, sizes), sum(ys).split(sizes)[rank], "reduce_scatterv uneven")
    zs = [_x(r, (2, sum(sizes), 3), salt=3) for r in ranks]
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


def _run_rank(fn_name, rank, world, outdir):
    try:
        import torch_tpu  # noqa: F401
        globals()[fn_name](rank, world)
        open(os.path.join(outdir, f"rank{rank}.ok"), "w").close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        with open(os.path.join(outdir, f"rank{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        os._exit(1)
    os._exit(0)


def test_communicator_collectives_on_two_chips():
    ctx = mp.get_context("spawn")
    outdir = tempfile.mkdtemp(prefix="tpu_vllm_comm_")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    saved = dict(os.environ)
    procs = []
    try:
        for r in range(2):
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TPU_VISIBLE_CHIPS=str(r),
                              TORCH_TPU_TOPOLOGY="2", TORCH_TPU_NUM_THREADS="1", TORCH_TPU_HBM_BYTES="1G")
            p = ctx.Process(target=_run_rank, args=("_communicator_rank", r, 2, outdir))
            p.start()
            procs.append(p)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for p in procs:
        p.join(180)
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    errors = [open(os.path.join(outdir, f"rank{r}.err")).read() for r in range(2)
              if os.path.exists(os.path.join(outdir, f"rank{r}.err"))]
    assert not hung and not errors, f"hung: {hung}\n" + "\n".join(errors)
    assert all(p.exitcode == 0 for p in procs)


def _engine(path, tp, **kw):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return vllm.LLM(model=str(path), dtype="float32", max_model_len=256, max_num_seqs=8, max_num_batched_tokens=48,
                    enable_chunked_prefill=True, enable_prefix_caching=True, block_size=16,
                    kv_cache_memory_bytes=16 << 20, seed=0, tensor_parallel_size=tp, **kw)


def _run(llm):
    sp = vllm.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=2)
    outs = [o.outputs[0] for o in llm.generate(PROMPTS, sp, use_tqdm=False)]
    return ([list(o.token_ids) for o in outs],
            [[{t: lp.logprob for t, lp in step.items()} for step in o.logprobs] for o in outs])


def _workers(worker):
    from vllm.distributed import parallel_state
    import torch.distributed as dist
    tp = parallel_state.get_tp_group()
    return (torch.tpu.get_device_properties(0).chip_id, str(worker.device), tp.world_size, tp.rank_in_group,
            dist.get_backend(tp.device_group), type(tp.device_communicator).__name__)


@pytest.fixture(scope="module")
def llama_path(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("llama_tp"), "llama", torch.float32)


@pytest.fixture(scope="module")
def tp1(llama_path):
    llm = _engine(llama_path, 1)
    result = _run(llm)
    del llm
    gc.collect()
    return result


def test_tensor_parallel_2_matches_one_chip_and_transformers(llama_path, tp1):
    llm = _engine(llama_path, 2)
    try:
        # two worker processes, each on its own chip (tpu:0 in each), the TP group a tpu_dist group
        assert sorted(llm.collective_rpc(_workers)) == [(0, "tpu:0", 2, 0, "tpu_dist", "TpuCommunicator"),
                                                        (1, "tpu:0", 2, 1, "tpu_dist", "TpuCommunicator")]
        tokens, logprobs = _run(llm)
    finally:
        del llm
        gc.collect()
    assert tokens == hf_greedy(llama_path, PROMPTS, MAX_TOKENS)
    assert tokens == tp1[0]
    # the partial products are summed across chips: logprobs move by float32 rounding only
    for seq, ref in zip(logprobs, tp1[1]):
        for step, want in zip(seq, ref):
            assert step.keys() == want.keys()
            for t in step:
                assert abs(step[t] - want[t]) < 1e-4, (t, step[t], want[t])


def test_unsupported_parallelism_is_refused(llama_path, monkeypatch):
    with pytest.raises(Exception, match="pipeline parallelism"):
        _engine(llama_path, 1, pipeline_parallel_size=2)
    with pytest.raises(Exception, match="distributed executor 'uni' is not supported"):
        _engine(llama_path, 2, distributed_executor_backend="uni")
    # more workers than the host's chips
    monkeypatch.setenv("TORCH_TPU_TOPOLOGY", "1")
    with pytest.raises(Exception, match="need as many chips, but TORCH_TPU_TOPOLOGY=1 has 1"):
        _engine(llama_path, 2)


_TORCHRUN_SCRIPT = """
import os, sys
import torch, vllm
def main():
    llm = vllm.LLM(model=sys.argv[1], dtype="float32", max_model_len=256, kv_cache_memory_bytes=16 << 20, seed=0,
                   tensor_parallel_size=2, distributed_executor_backend="external_launcher")
    sp = vllm.SamplingParams(temperature=0.0, max_tokens={n}, ignore_eos=True)
    got = [list(o.outputs[0].token_ids) for o in llm.generate({prompts!r}, sp, use_tqdm=False)]
    print("RESULT", os.environ["RANK"], torch.tpu.get_device_properties(0).chip_id, got, flush=True)
if __name__ == "__main__":
    main()
"""


@pytest.mark.full
def test_tensor_parallel_under_torchrun(llama_path, tmp_path):
    # vLLM's external launcher: torchrun starts one process per chip (its LOCAL_RANK picks the chip), each
    # an engine of its own holding one shard; both give transformers' greedy tokens
    import subprocess
    script = tmp_path / "tp_torchrun.py"
    script.write_text(_TORCHRUN_SCRIPT.format(n=MAX_TOKENS, prompts=PROMPTS[:2]))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, TORCH_TPU_TOPOLOGY="2", TORCH_TPU_HBM_BYTES="1G", VLLM_NO_USAGE_STATS="1",
               PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                         os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([torchrun, "--standalone", "--nproc-per-node=2", str(script), str(llama_path)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = sorted(line.split(" ", 3)[1:] for line in out.stdout.splitlines() if line.startswith("RESULT "))
    want = str(hf_greedy(llama_path, PROMPTS[:2], MAX_TOKENS))
    assert results == [["0", "0", want], ["1", "1", want]]
