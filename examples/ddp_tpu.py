"""DDP on several vTPU chips of this host, one process per chip, through the "tpu_dist" process group:

    TORCH_TPU_TOPOLOGY=2 TORCH_TPU_NUM_THREADS=1 .venv/bin/torchrun --standalone --nproc-per-node=2 examples/ddp_tpu.py

Each rank trains the same small model on its half of every global batch; DDP averages the gradients with
tpu_dist's allreduce (in C, between the chips' device memory). Rank 0 prints the loss averaged over the ranks
at each step, then trains a one-process copy on the whole batches and prints the largest difference of the
per-step losses (fp32 rounding only).
"""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("tpu_dist")  # torchrun provides rank, world size and the rendezvous
rank, world = dist.get_rank(), dist.get_world_size()
dev = torch.device("tpu", 0)  # every process sees its own chip as tpu:0
props = torch.tpu.get_device_properties(dev)
print(f"rank {rank}: chip {props.chip_id} at {props.coords} of topology {props.topology}, "
      f"neighbours {props.neighbors}, {props.num_threads} compute thread(s)", flush=True)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 4))


g = torch.Generator().manual_seed(1)
steps, batch = 10, 16 * world
xs, ys = torch.randn(steps, batch, 32, generator=g), torch.randn(steps, batch, 4, generator=g)
model = DDP(make_model().to(dev), device_ids=[0])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
per = batch // world
losses = []
for s in range(steps):
    x, y = xs[s, rank * per:(rank + 1) * per].to(dev), ys[s, rank * per:(rank + 1) * per].to(dev)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    avg = loss.detach().clone()
    dist.all_reduce(avg, op=dist.ReduceOp.AVG)
    losses.append(avg.item())
    if rank == 0:
        print(f"step {s}: loss {losses[-1]:.6f}", flush=True)

if rank == 0:
    ref = make_model().to(dev)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    diff = 0.0
    for s in range(steps):
        loss = nn.functional.mse_loss(ref(xs[s].to(dev)), ys[s].to(dev))
        ropt.zero_grad()
        loss.backward()
        ropt.step()
        diff = max(diff, abs(loss.item() - losses[s]))
    print(f"one process on the whole batches: largest per-step loss difference {diff:.2e}")
dist.destroy_process_group()
