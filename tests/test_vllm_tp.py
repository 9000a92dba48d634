"""Tensor parallelism of vLLM on two vTPU chips: vLLM's multiprocessing executor starts one worker process
per chip (torch_tpu/vllm/executor.py), and vLLM's device communicator moves tpu tensors through tpu_dist
(torch_tpu/vllm/communicator.py). The communicator's collectives are checked on two spawned ranks against
results worked out from every rank's inputs; `vllm.LLM(..., tensor_parallel_size=2)` gives the greedy tokens
of one chip and of transformers on the CPU, and logprobs within float32 rounding of one chip's; --full adds
torchrun (vLLM's external launcher) with one engine process per chip."""
import gc
import os
import sys

import pytest
import torch

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (scripts/setup.sh installs it)")

sys.path.insert(0, os.path.dirname(__file__))
from vllm_models import MAX_TOKENS, PROMPTS, hf_greedy, make_model  # noqa: E402


def test_communicator_collectives_on_two_chips():
    from test_dist import _spawn
    _spawn("vllm_communicator", 2, timeout=180)  # dist_workers.vllm_communicator on chips 0 and 1


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
