"""Trains a small GPT (2 layers, width 128, AdamW) on tpu for a few steps, printing the loss of each
step, then runs the same training on the CPU from the same initial weights and data and compares
losses and final parameters. Exits non-zero if they disagree beyond float32 tolerance.

    python examples/train_gpt.py [--steps 20] [--batch 8] [--no-cpu]
"""
import argparse
import copy
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
    "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season "
    "of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair, "
    "we had everything before us, we had nothing before us, we were all going direct to Heaven, we "
    "were all going direct the other way."
)


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, width=128, layers=2, heads=4):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(block, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def make_batches(steps, batch, block, seed):
    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(ch) for ch in TEXT], dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - block - 1, (batch,), generator=g)
        x = torch.stack([data[s:s + block] for s in starts])
        y = torch.stack([data[s + 1:s + block + 1] for s in starts])
        out.append((x, y))
    return len(chars), out


def train(model, batches, device, verbose):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    losses, times = [], []
    for i, (x, y) in enumerate(batches):
        t0 = time.perf_counter()
        x, y = x.to(device), y.to(device)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = loss.item()  # waits for the step to finish on the device
        times.append(time.perf_counter() - t0)
        losses.append(value)
        if verbose:
            print(f"  [{device}] step {i + 1:3d}/{len(batches)}  loss {value:.4f}  {times[-1] * 1e3:7.1f} ms",
                  flush=True)
    params = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return losses, params, times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU run and the comparison")
    args = ap.parse_args()

    vocab, batches = make_batches(args.steps, args.batch, args.block, args.seed)
    torch.manual_seed(args.seed)
    model = GPT(vocab, args.block)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"GPT: 2 layers, width 128, {nparams / 1e3:.0f}k parameters, vocab {vocab}, "
          f"batch {args.batch}x{args.block}, AdamW, {args.steps} steps")
    print(f"expected loss at start ~ ln({vocab}) = {math.log(vocab):.3f}")

    tpu_model = copy.deepcopy(model)
    print(f"training on tpu ({torch.tpu.get_device_name()}, {torch.tpu.get_device_properties().num_threads} "
          f"threads):")
    tpu_losses, tpu_params, tpu_times = train(tpu_model, batches, "tpu", verbose=True)
    print(f"tpu: loss {tpu_losses[0]:.4f} -> {tpu_losses[-1]:.4f}, median step "
          f"{statistics.median(tpu_times) * 1e3:.1f} ms, peak device memory "
          f"{torch.tpu.max_memory_allocated() / 2**20:.1f} MiB")
    if args.no_cpu:
        return 0

    print("training on cpu (same initial weights, same batches):")
    cpu_losses, cpu_params, cpu_times = train(model, batches, "cpu", verbose=False)
    print(f"cpu: loss {cpu_losses[0]:.4f} -> {cpu_losses[-1]:.4f}, median step "
          f"{statistics.median(cpu_times) * 1e3:.1f} ms")

    loss_diff = max(abs(a - b) for a, b in zip(tpu_losses, cpu_losses))
    param_diff = max((tpu_params[k].float() - cpu_params[k].float()).abs().max().item() for k in cpu_params)
    ok = loss_diff < 1e-3 and param_diff < 1e-2
    print(f"tpu vs cpu: max |loss difference| over {args.steps} steps {loss_diff:.2e}, "
          f"max |parameter difference| {param_diff:.2e}  -> {'MATCH' if ok else 'MISMATCH'}")
    print(f"step time: tpu {statistics.median(tpu_times) * 1e3:.1f} ms, cpu "
          f"{statistics.median(cpu_times) * 1e3:.1f} ms (median)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
