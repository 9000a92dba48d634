"""Trains a small Llama-architecture model on the tpu device from text every Python installation has (the
docstrings of the standard library's modules, functions and classes) and saves it as a Hugging Face model
directory with its tokenizer, ready for `vllm serve` (scripts/demo.sh serves it). No download.

    .venv/bin/python examples/train_tiny_llama.py [OUT_DIR] [--steps N]

A byte-level BPE tokenizer (1024 tokens) is trained on the same text; the model has 4 layers of width 192.
A few minutes of training give text in the docstrings' style, with real words and phrases; it is small, not smart.
"""
import argparse
import ast
import pathlib
import sys
import sysconfig
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def stdlib_docstrings(limit_chars: int = 3_000_000) -> list[str]:
    """Every docstring of the standard library's top-level .py files, in a fixed order."""
    out, total = [], 0
    for path in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    out.append(doc)
                    total += len(doc)
        if total > limit_chars:
            break
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", default=str(ROOT / "build" / "tiny_llama"))
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    import transformers
    import vllm_models

    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = stdlib_docstrings()
    vllm_models.corpus = lambda: docs  # the tokenizer learns from the same text
    tok = vllm_models.make_tokenizer(out, vocab_size=1024)
    ids = torch.tensor([t for d in docs for t in tok(d)["input_ids"] + [tok.eos_token_id]], dtype=torch.long)
    print(f"corpus: {len(docs)} docstrings, {ids.numel()} tokens", flush=True)

    config = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=192, intermediate_size=512,
                                      num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2,
                                      max_position_embeddings=512, bos_token_id=tok.bos_token_id,
                                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=a.steps, pct_start=0.1)
    g = torch.Generator().manual_seed(0)
    t0 = time.time()
    for step in range(a.steps):
        starts = torch.randint(0, ids.numel() - a.seq - 1, (a.batch,), generator=g)
        batch = torch.stack([ids[s:s + a.seq + 1] for s in starts.tolist()]).to("tpu")
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1].contiguous()).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == a.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.3f}  {time.time() - t0:.0f} s", flush=True)
    model.cpu().save_pretrained(str(out), safe_serialization=True)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
