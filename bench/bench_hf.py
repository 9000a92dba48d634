"""Hugging Face benchmarks: forward and one AdamW training step of a GPT-2 and a BERT, and a bf16
training step of a Llama, built from their `transformers` configs (seeded random weights), timed on the device and on PyTorch CPU in the
same run by bench/run.py, which loads this module's BENCHES.

The configs are the test families of tests/test_hf_models.py at a size where the matrix products, not
dispatch, take most of the time: hidden 256, 4 layers, 4 heads, vocab 1024, batch 4 x 128 tokens.
transformers is imported only when a benchmark is set up, so run.py still runs the rest without it.
"""
import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BATCH, SEQ, VOCAB, HIDDEN, LAYERS, HEADS = 4, 128, 1024, 256, 4, 4


def _gpt2():
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=HIDDEN, n_layer=LAYERS,
                                  n_head=HEADS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  bos_token_id=1, eos_token_id=None, pad_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def _bert():
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                  num_attention_heads=HEADS, intermediate_size=4 * HIDDEN,
                                  max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, pad_token_id=0)
    return transformers.BertForMaskedLM(cfg)


def _llama():
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=688,
                                   num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS // 2,
                                   max_position_embeddings=SEQ, bos_token_id=1, eos_token_id=None, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def _setup(builder, device, train, dtype=None):
    """The same weights and batch on either side (seeded), moved to `device` (and to `dtype`: weights,
    activations, gradients and AdamW's states all in it, as a bf16 run is)."""
    torch.manual_seed(0)
    model = builder()
    if dtype is not None:
        model = model.to(dtype)
    ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    labels = ids.clone()  # GPT-2: next-token loss; BERT: every position is a masked-LM target
    model = model.to(device)
    batch = {k: v.to(device) for k, v in batch.items()}
    labels = labels.to(device)
    if not train:
        model.eval()

        def forward():
            with torch.no_grad():
                return model(**batch).logits
        return forward, lambda s: s * 1e3

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        model(**batch, labels=labels).loss.backward()
        opt.step()
    return step, lambda s: s * 1e3


def bench_hf_gpt2_forward(device):
    return _setup(_gpt2, device, train=False)


def bench_hf_gpt2_train_step(device):
    return _setup(_gpt2, device, train=True)


def bench_hf_llama_train_step_bf16(device):
    return _setup(_llama, device, train=True, dtype=torch.bfloat16)


def bench_hf_bert_forward(device):
    return _setup(_bert, device, train=False)


def bench_hf_bert_train_step(device):
    return _setup(_bert, device, train=True)


_WHAT = f"d {HIDDEN}, {LAYERS} layers, {HEADS} heads, vocab {VOCAB}, batch {BATCH} x {SEQ} tokens"
BENCHES = {
    # name: (setup, unit, higher_is_better, what)  -- the format of bench/run.py
    "hf_gpt2_forward": (bench_hf_gpt2_forward, "ms", False,
                        f"transformers GPT2LMHeadModel forward, no_grad ({_WHAT})"),
    "hf_gpt2_train_step": (bench_hf_gpt2_train_step, "ms/step", False,
                           f"transformers GPT2LMHeadModel LM loss + backward + AdamW step ({_WHAT})"),
    "hf_bert_forward": (bench_hf_bert_forward, "ms", False,
                        f"transformers BertForMaskedLM forward, no_grad ({_WHAT})"),
    "hf_bert_train_step": (bench_hf_bert_train_step, "ms/step", False,
                           f"transformers BertForMaskedLM MLM loss + backward + AdamW step ({_WHAT})"),
    "hf_llama_train_step_bf16": (bench_hf_llama_train_step_bf16, "ms/step", False,
                                 f"transformers LlamaForCausalLM in bfloat16 (weights, grads, AdamW states), "
                                 f"LM loss + backward + AdamW step ({_WHAT}, 2 kv heads, MLP 688)"),
}
