"""Host-cost benchmarks (issue 16), loaded by bench/run.py, each timed on the device and on PyTorch CPU
in the same run:

- new_shape_first / new_shape_repeat: a small transformer's forward (the 2-layer, width-128 GPT of
  tests/test_models.py) over 40 sequence lengths spread from 8 to 487, ms per forward. `first` gives
  every call 40 lengths this process has never run (per-signature caches all miss; each call's are
  the first call's shifted by one, so the work stays the same), `repeat` the first call's 40 lengths.
  The aim is first <= 1.5x repeat on the device.
- decode_gpt_greedy / decode_gpt_sample: a batch-1 generation loop as karpathy/nanoGPT's generate()
  writes it (forward over the growing sequence, last position's logits, top-k + softmax + multinomial
  or argmax, torch.cat of the new token), 40 new tokens after an 8-token prompt, ms per generation.
- hf_generate_gpt2 / hf_generate_llama: Hugging Face `generate()` with its KV cache, greedy, 40 new
  tokens after an 8-token prompt, on the GPT-2 and Llama configs of tests/test_hf_models.py.
- hf_generate_gpt2_compiled / hf_generate_llama_compiled: the same generate() with the forward
  compiled (backend="tpu") and the static KV cache on the device, against CPU's eager generate().

These models are tiny: on a loaded 2-core machine PyTorch CPU's OpenMP threads spin against each
other (greedy generate took 10-50x longer on two, see tests/test_hf_models.py), so the CPU side runs on
one thread, its best case here; the device side is unaffected by that setting.
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

NEW_TOKENS, PROMPT, LENGTHS, SPREAD = 40, 8, 40, 12


def _cpu_one_thread(device, setup):
    """(fn, conv) with fn run on one CPU thread when device is cpu."""
    fn, conv = setup
    if torch.device(device).type != "cpu":
        return fn, conv

    def one_thread():
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return fn()
        finally:
            torch.set_num_threads(before)
    return one_thread, conv


def _gpt(device, seq):
    from test_models import GPT
    torch.manual_seed(0)
    return GPT(vocab=256, d=128, heads=4, layers=2, seq=seq).eval().to(device)


def _forward_lengths(device, fresh):
    """A forward at each of LENGTHS sequence lengths spread over 8 .. 8 + LENGTHS * SPREAD. Call i of
    the `fresh` form shifts them all by i (lengths no call has run, of nearly the same cost as call
    0's), the repeated form runs call 0's every time: so the two compare the same work, seen and
    unseen (before, fresh calls walked to ever longer sequences and the ratio grew with --runs)."""
    model = _gpt(device, seq=1024)
    state = {"calls": 0}

    def fn():
        shift = 0
        if fresh:
            shift = state["calls"]
            state["calls"] += 1
            if shift >= SPREAD:
                raise RuntimeError(f"new_shape_first: more than {SPREAD} calls would repeat lengths")
        with torch.no_grad():
            for j in range(LENGTHS):
                n = 8 + j * SPREAD + shift
                idx = torch.arange(n, device=device).remainder(256).unsqueeze(0)
                out = model(idx)
        return out
    return fn, lambda s: s / LENGTHS * 1e3


def bench_new_shape_first(device):
    return _cpu_one_thread(device, _forward_lengths(device, fresh=True))


def bench_new_shape_repeat(device):
    return _cpu_one_thread(device, _forward_lengths(device, fresh=False))


@torch.no_grad()
def nanogpt_generate(model, idx, max_new_tokens, top_k=None, sample=True, generator=None):
    """karpathy/nanoGPT's generate() (model.py), as written there."""
    for _ in range(max_new_tokens):
        logits = model(idx)[:, -1, :]
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("Inf")
        probs = F.softmax(logits, dim=-1)
        if sample:
            idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
        else:
            _, idx_next = torch.topk(probs, k=1, dim=-1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def _decode(device, sample):
    model = _gpt(device, seq=PROMPT + NEW_TOKENS)
    prompt = torch.randint(0, 256, (1, PROMPT), generator=torch.Generator().manual_seed(1)).to(device)

    def fn():
        return nanogpt_generate(model, prompt, NEW_TOKENS, top_k=20 if sample else None, sample=sample)
    return fn, lambda s: s * 1e3


def bench_decode_gpt_greedy(device):
    return _cpu_one_thread(device, _decode(device, sample=False))


def bench_decode_gpt_sample(device):
    return _cpu_one_thread(device, _decode(device, sample=True))


def _hf_model(name):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      bos_token_id=1, eos_token_id=None, pad_token_id=0)
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   bos_token_id=1, eos_token_id=None, pad_token_id=0,
                                   tie_word_embeddings=False, attention_dropout=0.0)
    return transformers.LlamaForCausalLM(cfg)


def _hf_generate(device, name):
    model = _hf_model(name).eval().to(device)
    ids = torch.randint(2, 256, (1, PROMPT), generator=torch.Generator().manual_seed(1)).to(device)
    mask = torch.ones_like(ids)

    def fn():
        with torch.no_grad():
            return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                                  min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    return fn, lambda s: s * 1e3


def _hf_generate_compiled(device, name):
    """generate() as transformers' docs tell users to compile it: the forward compiled
    (torch.compile(model.forward, backend="tpu")) with the static KV cache, so the decode step is one
    graph for every position. The CPU side runs the eager generate() of the rows above (its dynamic
    cache is the faster one on CPU: 33 against 42 ms static, GPT-2, one thread), the first call
    (compilation) untimed by run.py's warm-up."""
    if torch.device(device).type == "cpu":
        return _hf_generate(device, name)
    model = _hf_model(name).eval().to(device)
    model.forward = torch.compile(model.forward, backend="tpu")
    ids = torch.randint(2, 256, (1, PROMPT), generator=torch.Generator().manual_seed(1)).to(device)
    mask = torch.ones_like(ids)

    def fn():
        with torch.no_grad():
            return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                                  min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
                                  cache_implementation="static")
    return fn, lambda s: s * 1e3


def bench_hf_generate_gpt2(device):
    return _cpu_one_thread(device, _hf_generate(device, "gpt2"))


def bench_hf_generate_llama(device):
    return _cpu_one_thread(device, _hf_generate(device, "llama"))


def bench_hf_generate_gpt2_compiled(device):
    return _cpu_one_thread(device, _hf_generate_compiled(device, "gpt2"))


def bench_hf_generate_llama_compiled(device):
    return _cpu_one_thread(device, _hf_generate_compiled(device, "llama"))


BENCHES = {
    "new_shape_first": (bench_new_shape_first, "ms/fwd", False,
                        "small GPT forward at 40 sequence lengths never run before in the process"),
    "new_shape_repeat": (bench_new_shape_repeat, "ms/fwd", False,
                         "small GPT forward at the same 40 sequence lengths again"),
    "decode_gpt_greedy": (bench_decode_gpt_greedy, "ms/gen", False,
                          "nanoGPT generate(), small GPT, batch 1, 40 new tokens, greedy"),
    "decode_gpt_sample": (bench_decode_gpt_sample, "ms/gen", False,
                          "nanoGPT generate(), small GPT, batch 1, 40 new tokens, top-k 20 sampling"),
    "hf_generate_gpt2": (bench_hf_generate_gpt2, "ms/gen", False,
                         "HF generate() with KV cache, GPT-2 config (2 layers, d 64), 40 new tokens greedy"),
    "hf_generate_llama": (bench_hf_generate_llama, "ms/gen", False,
                          "HF generate() with KV cache, Llama config (2 layers, d 64, GQA), 40 new tokens greedy"),
    "hf_generate_gpt2_compiled": (bench_hf_generate_gpt2_compiled, "ms/gen", False,
                                  "the same, GPT-2, tpu: forward torch.compile'd, static KV cache; CPU: eager"),
    "hf_generate_llama_compiled": (bench_hf_generate_llama_compiled, "ms/gen", False,
                                   "the same, Llama, tpu: forward torch.compile'd, static KV cache; CPU: eager"),
}
