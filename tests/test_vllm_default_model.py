"""The default serving model: examples/train_tiny_llama.py trains a Llama on the tpu device from the
standard library's sources (here a tiny configuration, a few steps) and saves a Hugging Face directory:
the loss falls, the same seed gives the same weights, the directory loads with transformers' AutoTokenizer
and AutoModelForCausalLM on the CPU and in vLLM on tpu, and the two give the same greedy tokens, also with
vLLM's piecewise compilation through torch.compile(backend="tpu") (TORCH_TPU_VLLM_COMPILE=1)."""
import gc
import importlib.util
import json
import os
import pathlib

import pytest
import torch

from vllm_models import hf_greedy

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ["--steps", "24", "--seq", "32", "--batch", "8", "--lr", "1e-2", "--vocab", "320", "--hidden", "64",
        "--layers", "2", "--heads", "4", "--kv-heads", "2", "--corpus-chars", "60000", "--log-every", "8"]
PROMPTS = ["def ", "import ", "class Foo:\n    def __init__(self"]


def _example():
    spec = importlib.util.spec_from_file_location("train_tiny_llama", ROOT / "examples" / "train_tiny_llama.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    ex = _example()
    out = tmp_path_factory.mktemp("tiny_llama")
    result = ex.train(ex.parse_args([str(out), *TINY]))
    return ex, out, result


def test_loss_falls(trained):
    _, out, result = trained
    losses = result["losses"]
    assert len(losses) == 24 and all(map(lambda x: x == x, losses)), losses
    assert sum(losses[-4:]) / 4 < losses[0] - 1.0, losses
    info = json.loads((out / "training.json").read_text())
    assert info["first_loss"] == losses[0] and info["last_loss"] == losses[-1]


def test_same_seed_same_weights(trained, tmp_path):
    from safetensors.torch import load_file
    ex, out, _ = trained
    # --reuse sees the finished directory and trains nothing
    ex.main([str(out), *TINY, "--reuse"])
    again = tmp_path / "again"
    ex.train(ex.parse_args([str(again), *TINY]))
    a, b = load_file(str(out / "model.safetensors")), load_file(str(again / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert (out / "tokenizer.json").read_text() == (again / "tokenizer.json").read_text()


def test_loads_in_transformers(trained):
    import transformers
    _, out, _ = trained
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    text = "import os\n\ndef f(x):\n    return x  # \u00e9\n"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1  # <s> first, as in training
    assert tok.decode(ids, skip_special_tokens=True) == text  # byte-level: any text round-trips
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True) == "<s>user\nhi</s>\n<s>assistant\n"
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out))
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.vocab_size == len(tok) == 320


def _vllm_greedy(path, n, **kw):
    vllm = pytest.importorskip("vllm", reason="vLLM is not installed (scripts/setup.sh installs it)")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    llm = vllm.LLM(model=str(path), dtype="float32", max_model_len=128, max_num_seqs=4, block_size=16,
                   kv_cache_memory_bytes=8 << 20, seed=0, **kw)
    try:
        from vllm.platforms import current_platform
        assert current_platform.device_type == "tpu"
        sp = vllm.SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        return [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, sp, use_tqdm=False)], llm.llm_engine
    finally:
        del llm
        gc.collect()


@pytest.fixture(scope="module")
def hf_tokens(trained):
    _, out, _ = trained
    want, margins = hf_greedy(out, PROMPTS, 12, with_margins=True)
    # float32 on both sides: equal tokens, unless two logits tie to within float32 rounding
    assert min(min(m) for m in margins) > 1e-4, margins
    return want


def test_vllm_on_tpu_matches_transformers(trained, hf_tokens):
    _, out, _ = trained
    got, engine = _vllm_greedy(out, 12)
    assert got == hf_tokens
    assert engine.vllm_config.compilation_config.mode == 0  # eager unless TORCH_TPU_VLLM_COMPILE=1


def test_vllm_compiled_matches_transformers(trained, hf_tokens, monkeypatch):
    import torch_tpu._compile as tpu_compile
    _, out, _ = trained
    monkeypatch.setenv("TORCH_TPU_VLLM_COMPILE", "1")
    tpu_compile.reset_compile_stats()
    # 16-token chunks: prefill chunks and decode steps of several batch sizes through the same pieces
    got, engine = _vllm_greedy(out, 12, max_num_batched_tokens=16, enable_chunked_prefill=True)
    stats = tpu_compile.compile_stats()
    comp = engine.vllm_config.compilation_config
    assert comp.mode == 3 and comp.backend == "torch_tpu.vllm.compile.TpuCompilerAdaptor"
    # two layers: the forward splits at the two attention calls into three pieces, each a device program
    assert stats["graphs"] == 3 and stats["eager_runs"] == 0 and stats["launches"] > 3 * 12, stats
    assert got == hf_tokens
