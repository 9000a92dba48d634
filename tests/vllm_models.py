"""Small Hugging Face model directories for the serving tests and benchmarks, made on the spot with no
download: a byte-level BPE tokenizer trained on Python's own documentation strings, and randomly
initialised Llama / Qwen2 / BLOOM weights (seeded) saved as safetensors. The weights are scaled up from
transformers' default initialisation so that greedy decoding has clear winners (random models with tiny
weights have near-uniform logits, where the argmax is decided by rounding)."""
import pathlib

import torch

# A chat template that supports tools in the Hermes style (vLLM's "hermes" tool parser reads
# <tool_call>{"name": ..., "arguments": ...}</tool_call>): the tools' JSON in a system turn, an
# assistant's tool calls as tagged JSON, tool results as "tool" turns. Without tools it renders each
# message as "<s>role\ncontent</s>\n".
CHAT_TEMPLATE = (
    "{% if tools %}<s>system\nYou may call these tools, answering <tool_call>{\"name\": ..., \"arguments\": ...}"
    "</tool_call>:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}</s>\n{% endif %}"
    "{% for m in messages %}<s>{{ m['role'] }}\n{% if m['content'] %}{{ m['content'] }}{% endif %}"
    "{% if m['tool_calls'] %}{% for c in m['tool_calls'] %}<tool_call>{\"name\": {{ c['function']['name'] | tojson }}, "
    "\"arguments\": {{ c['function']['arguments'] | tojson }}}</tool_call>{% endfor %}{% endif %}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}")


# The prompts the engine tests generate from, and how many tokens.
PROMPTS = [
    "The standard library",
    "Return a new dictionary",
    # long enough for two prefill chunks at max_num_batched_tokens=48
    "This module implements specialized container datatypes providing alternatives to Python's general "
    "purpose built-in containers, dict, list, set, and tuple. It also provides a named tuple factory.",
]
MAX_TOKENS = 10


def corpus() -> list[str]:
    """Text every Python has: the standard library's module documentation."""
    import collections, json, os, re, string, textwrap, unittest, argparse, logging, pathlib as pl
    return [m.__doc__ for m in (collections, json, os, re, string, textwrap, unittest, argparse, logging, pl)
            if m.__doc__]


def make_tokenizer(path, vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(path))
    return fast


def make_model(path, arch: str = "llama", dtype=torch.float32, seed: int = 0, hidden: int = 64, layers: int = 2,
               heads: int = 4, kv_heads: int = 2, max_len: int = 512, vocab_size: int = 512,
               max_shard_size=None, sliding_window: int = 16):
    """Writes a tokenizer and a random model of `arch` ("llama", "qwen2", "qwen3": RMSNorm on each query
    and key head, "mistral": every layer's attention within a sliding window of `sliding_window`
    tokens, or "bloom": ALiBi positions, no grouped-query heads) into path; returns the path. With
    max_shard_size (e.g. "40KB") the safetensors are sharded as transformers shards them, with its
    index file."""
    import transformers
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(path, vocab_size)
    common = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_len,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                  tie_word_embeddings=False, initializer_range=0.2, torch_dtype=dtype)
    if arch == "llama":
        config = transformers.LlamaConfig(**common)
        cls = transformers.LlamaForCausalLM
    elif arch == "qwen2":
        config = transformers.Qwen2Config(**common)
        cls = transformers.Qwen2ForCausalLM
    elif arch == "qwen3":
        config = transformers.Qwen3Config(**common, head_dim=hidden // heads)
        cls = transformers.Qwen3ForCausalLM
    elif arch == "mistral":
        config = transformers.MistralConfig(**common, head_dim=hidden // heads, sliding_window=sliding_window)
        cls = transformers.MistralForCausalLM
    elif arch == "bloom":
        config = transformers.BloomConfig(vocab_size=len(tok), hidden_size=hidden, n_layer=layers, n_head=heads,
                                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                          pad_token_id=tok.pad_token_id, initializer_range=0.2, torch_dtype=dtype)
        cls = transformers.BloomForCausalLM
    else:
        raise ValueError(f"unknown architecture {arch!r}")
    torch.manual_seed(seed)
    model = cls(config).to(dtype).eval()
    kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(str(path), safe_serialization=True, **kw)
    return path


FP8_KV = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def fp8_kv_attention(kv_cache_dtype: str, scales=None) -> str:
    """Registers with transformers an attention that reads keys and values rounded through the fp8
    format (key / k_scale saturated to the format's range, rounded, times k_scale; likewise values)
    before scaled_dot_product_attention: what vLLM computes with kv_cache_dtype=kv_cache_dtype, whose
    kernels read every key and value from the fp8 cache. `scales` gives (k_scale, v_scale) per layer
    index (unit scales without it). Returns the attn_implementation name."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    f8 = FP8_KV[kv_cache_dtype]
    lim = torch.finfo(f8).max

    def rounded(x, scale):
        return ((x.float() / scale).clamp(-lim, lim).to(f8).float() * scale).to(x.dtype)

    def attention(module, query, key, value, attention_mask, **kwargs):
        k_scale, v_scale = scales[module.layer_idx] if scales else (1.0, 1.0)
        return sdpa_attention_forward(module, query, rounded(key, k_scale), rounded(value, v_scale), attention_mask,
                                      **kwargs)

    name = f"kv_{kv_cache_dtype}" + ("_scaled" if scales else "")
    AttentionInterface.register(name, attention)
    return name


def kv_absmax(path, prompts) -> dict:
    """The largest |key| and |value| (after rotary: what the cache holds) per layer index of the model in
    `path` over `prompts`, by transformers on the CPU."""
    import transformers
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    seen = {}

    def attention(module, query, key, value, attention_mask, **kwargs):
        k, v = seen.get(module.layer_idx, (0.0, 0.0))
        seen[module.layer_idx] = (max(k, key.abs().max().item()), max(v, value.abs().max().item()))
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("kv_absmax", attention)
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="kv_absmax").eval()
    with torch.no_grad():
        for p in prompts:
            model(torch.tensor([tok(p)["input_ids"]]))
    return seen


def add_kv_cache_scales(path, scales: dict) -> None:
    """Makes the Llama/Qwen2 directory `path` an FP8-KV-cache checkpoint as llm-compressor writes one: a
    compressed-tensors quantization config with only a kv_cache_scheme (per-tensor float8, weights
    unquantized) and each layer's self_attn.k_scale / v_scale tensors, from `scales` ({layer index:
    (k_scale, v_scale)})."""
    import json
    from safetensors.torch import load_file, save_file
    path = pathlib.Path(path)
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "dense", "quantization_status": "compressed",
        "config_groups": {}, "ignore": [],
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
                            "symmetric": True}}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    weights = load_file(str(path / "model.safetensors"))
    for i, (k, v) in scales.items():
        weights[f"model.layers.{i}.self_attn.k_scale"] = torch.tensor(float(k))
        weights[f"model.layers.{i}.self_attn.v_scale"] = torch.tensor(float(v))
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})


def hf_greedy(path, prompts, max_tokens: int, dtype=torch.float32, with_margins: bool = False,
              kv_cache_dtype: str = "auto", repetition_penalty: float = 1.0, presence_penalty: float = 0.0,
              frequency_penalty: float = 0.0):
    """Greedy continuations by Hugging Face transformers on the CPU, one prompt at a time; with_margins
    also gives, per generated token, the gap between transformers' best and second-best logit. An fp8
    kv_cache_dtype rounds keys and values through that format, as vLLM's fp8 KV cache does. A
    repetition_penalty other than 1 applies transformers' RepetitionPenaltyLogitsProcessor (over the
    prompt and the tokens so far, as vLLM's); presence and frequency penalties subtract, as OpenAI
    defines them, presence_penalty once and frequency_penalty per occurrence from the logit of each token
    generated so far."""
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    kw = {} if kv_cache_dtype == "auto" else {"attn_implementation": fp8_kv_attention(kv_cache_dtype)}
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, **kw).eval()
    out, margins = [], []
    with torch.no_grad():
        for p in prompts:
            # a plain greedy loop: no end-of-sequence handling, as vLLM's ignore_eos (generate's
            # min_new_tokens would instead ban the end token, a different choice where it is the best)
            ids = torch.tensor([tok(p)["input_ids"]]) if isinstance(p, str) else torch.tensor([p])
            seen = ids
            tokens, gaps, past = [], [], None
            for _ in range(max_tokens):
                r = model(ids, past_key_values=past, use_cache=True)
                logits, past = r.logits[0, -1].float(), r.past_key_values
                if repetition_penalty != 1.0:
                    rp = transformers.RepetitionPenaltyLogitsProcessor(repetition_penalty)
                    logits = rp(seen, logits[None])[0]
                if tokens and (presence_penalty or frequency_penalty):
                    counts = torch.bincount(torch.tensor(tokens), minlength=logits.numel()).float()
                    logits = logits - frequency_penalty * counts - presence_penalty * (counts > 0).float()
                top2 = logits.topk(2).values
                tokens.append(int(logits.argmax()))
                gaps.append(float(top2[0] - top2[1]))
                ids = torch.tensor([[tokens[-1]]])
                seen = torch.cat([seen, ids], dim=1)
            out.append(tokens)
            margins.append(gaps)
    return (out, margins) if with_margins else out


def decided_prefix(tokens, margins, tol: float) -> int:
    """How many leading greedy tokens are decided: up to the first step whose best two logits are within
    `tol` (in bfloat16 a logit has 8 significant bits, so near-ties go either way with the rounding
    order of the implementation)."""
    for i, m in enumerate(margins):
        if m <= tol:
            return i
    return len(tokens)


def teach(path, examples, steps: int = 400, lr: float = 1e-2, seed: int = 0):
    """Trains the model in `path` on the CPU until it answers each (prompt_ids, answer_ids) example with
    that answer (the loss on the answer tokens only), and saves it back: a model that knows what to
    say where a test needs one (a tool call, say), random elsewhere. Returns the final loss."""
    import transformers
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    batch = []
    for prompt, answer in examples:
        ids = torch.tensor([list(prompt) + list(answer)])
        labels = ids.clone()
        labels[0, :len(prompt)] = -100
        batch.append((ids, labels))
    for step in range(steps):
        opt.zero_grad()
        loss = sum(model(input_ids=ids, labels=labels).loss for ids, labels in batch) / len(batch)
        loss.backward()
        opt.step()
        if loss.item() < 1e-2:
            break
    model.eval().save_pretrained(str(path), safe_serialization=True)
    return loss.item(), step
