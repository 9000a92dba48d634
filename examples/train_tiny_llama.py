"""Trains a small Llama-architecture model on the tpu device from text every Python installation has (the
source files of its standard library: code, docstrings and comments) and saves it as a Hugging Face model
directory with its tokenizer, ready for `vllm serve` or transformers. No download. scripts/demo.sh trains it
once into build/tiny_llama and serves it.

    .venv/bin/python examples/train_tiny_llama.py [OUT_DIR] [--steps N] [--hidden H] [--layers L] ...

A byte-level BPE tokenizer is trained on the same text (tokenizers' BPE trainer), then the model with AdamW
under bf16 autocast, seeded, on tpu:0 (the device's own kernels). The defaults (2048 tokens, 3 layers of
width 192, 1.6 M parameters, 1000 steps of 24 x 128 tokens) take a few minutes on two cores and write
Python-like text when prompted with "def " or "import ": indentation, names, calls and docstrings in the
standard library's style. It is small and not smart. The same inputs give the same weights on the same
machine and Python.
"""
import argparse
import json
import math
import pathlib
import re
import sys
import sysconfig
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Renders each message as "<s>role\ncontent</s>\n" and opens the assistant's turn (the model never saw
# it in training: chat answers are code-like text, like its completions).
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant\n{% endif %}")


def stdlib_sources(limit_chars: int) -> list[str]:
    """The standard library's top-level .py files, in name order, until limit_chars (the machine-specific
    _sysconfigdata module left out), each cut into its top-level pieces: at every blank line followed by
    an unindented def, class, import, decorator or comment. Each piece is a document: it
    starts with <s> in training, as a prompt does, so "def " or "import " at the start of a prompt reads
    as the start of a function or of an import block."""
    out, total = [], 0
    for path in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        if path.name.startswith("_sysconfigdata"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        pieces = re.split(r"\n\s*\n(?=(?:async def |def |class |import |from |@|#))", text)
        out += [piece.strip("\n") + "\n" for piece in pieces if piece.strip()]
        total += len(text)
        if total >= limit_chars:
            break
    if not out:
        raise RuntimeError(f"no standard library sources under {sysconfig.get_paths()['stdlib']}")
    return out


def train_tokenizer(texts: list[str], vocab_size: int, out: pathlib.Path):
    """A byte-level BPE (every byte is a token, so any text encodes) with <s>, </s> and <pad>, which puts
    <s> before a text it encodes (as Llama's tokenizers do), saved in transformers' format with a chat
    template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    # Words keep the space that follows them ("def ", "import ", "self"), unlike GPT-2's leading space: a
    # prompt that ends in a space ("def ") then ends on a whole token the model saw in training, not on
    # a lone space. Identifiers (letters, digits, _) are one piece, runs of whitespace (newline and
    # indentation) another, punctuation a third.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[\p{L}\p{N}_]+ ?|[^\s\p{L}\p{N}_]+ ?|\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   model_max_length=1024)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return fast


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default=str(ROOT / "build" / "tiny_llama"),
                   help="the model directory to write")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seq", type=int, default=128, help="tokens per training sequence")
    p.add_argument("--batch", type=int, default=24, help="sequences per step")
    p.add_argument("--lr", type=float, default=5e-3,
                   help="AdamW's peak learning rate (warm-up, then cosine down to a tenth)")
    p.add_argument("--vocab", type=int, default=2048, help="BPE vocabulary size")
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--corpus-chars", type=int, default=3_000_000,
                   help="how much standard library source to read")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="bfloat16: forward and loss under torch.autocast (weights and AdamW stay float32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--reuse", action="store_true",
                   help="do nothing if OUT_DIR holds a model this script made with the same settings and Python")
    return p.parse_args(argv)


def recipe_key(a) -> str:
    """What decides the weights: this script's text, the settings, the Python version (its standard library
    is the corpus)."""
    import hashlib
    settings = {k: v for k, v in sorted(vars(a).items()) if k not in ("out", "reuse", "log_every")}
    text = pathlib.Path(__file__).read_bytes() + json.dumps(settings).encode() + sys.version.split()[0].encode()
    return hashlib.sha256(text).hexdigest()


def made_already(a) -> bool:
    try:
        info = json.loads((pathlib.Path(a.out) / "training.json").read_text())
    except (OSError, ValueError):
        return False
    return info.get("key") == recipe_key(a) and (pathlib.Path(a.out) / "model.safetensors").is_file()


def train(a) -> dict:
    """Trains and saves; returns {"losses": [per step], "seconds": training time, "tokens": corpus size}."""
    import transformers
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "training.json").unlink(missing_ok=True)  # written last: its presence says the directory is whole
    key = recipe_key(a)
    t0 = time.time()
    texts = stdlib_sources(a.corpus_chars)
    tok = train_tokenizer(texts, a.vocab, out)
    # <s> piece </s>, one piece after another
    ids = torch.tensor([t for e in tok.backend_tokenizer.encode_batch(texts) for t in e.ids + [tok.eos_token_id]],
                       dtype=torch.long)
    print(f"corpus: {len(texts)} pieces of standard library files, {sum(map(len, texts))} characters, "
          f"{ids.numel()} tokens (vocabulary {len(tok)}; {time.time() - t0:.0f} s)", flush=True)
    if ids.numel() <= a.seq + 1:
        raise ValueError(f"corpus of {ids.numel()} tokens is too short for --seq {a.seq}")

    config = transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=a.hidden, intermediate_size=a.hidden * 8 // 3 // 64 * 64 or 64,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=1024, rope_theta=10000.0, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True,
        initializer_range=0.02)
    torch.manual_seed(a.seed)
    model = transformers.LlamaForCausalLM(config).to("tpu").train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: Llama, {a.layers} layers of width {a.hidden}, {a.heads} heads ({a.kv_heads} for keys and "
          f"values), {n_params / 1e6:.2f} M parameters; {a.steps} steps of {a.batch} x {a.seq} tokens, "
          f"{a.dtype}", flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    warmup = max(1, a.steps // 20)

    def lr_factor(s):  # linear warm-up over 5% of the steps, then a cosine from 1 down to 0.1
        return min(1.0, (s + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s, a.steps) / a.steps)))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    g = torch.Generator().manual_seed(a.seed)
    losses = []
    t1, c1 = time.time(), time.process_time()
    for step in range(a.steps):
        starts = torch.randint(0, ids.numel() - a.seq, (a.batch,), generator=g)
        batch = torch.stack([ids[s:s + a.seq] for s in starts.tolist()]).to("tpu")
        with torch.autocast("tpu", dtype=torch.bfloat16, enabled=a.dtype == "bfloat16"):
            loss = model(input_ids=batch, labels=batch).loss  # transformers shifts the labels
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % a.log_every == 0 or step == a.steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.3f}  {time.time() - t1:.0f} s", flush=True)
    seconds, cpu_seconds = time.time() - t1, time.process_time() - c1
    model.cpu().eval().save_pretrained(str(out), safe_serialization=True)
    (out / "training.json").write_text(json.dumps(
        {"key": key, "args": vars(a), "python": sys.version.split()[0], "corpus_tokens": ids.numel(),
         "parameters": n_params, "first_loss": losses[0], "last_loss": losses[-1], "train_seconds": round(seconds, 1),
         "train_cpu_seconds": round(cpu_seconds, 1)}, indent=1) + "\n")
    print(f"saved {out} ({seconds:.0f} s of training, {cpu_seconds:.0f} s of CPU time in all threads)", flush=True)
    return {"losses": losses, "seconds": seconds, "tokens": ids.numel()}


def main(argv=None):
    a = parse_args(argv)
    if a.reuse and made_already(a):
        print(f"{a.out}: already trained with these settings (training.json); not training again")
        return
    train(a)


if __name__ == "__main__":
    main()
