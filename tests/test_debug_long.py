"""Debug mode over long runs: a training loop keeps a bounded number of memory mappings once its
quarantine is full (regions leaving the quarantine are reused in place, and the quarantine is bounded
by a number of regions as well as bytes), so a loop of any length runs; the loss matches PyTorch
CPU's. Counted from /proc/self/maps in a subprocess (a crash must fail the test, not the session).
The fast test shrinks the quarantine (TORCH_TPU_DEBUG_QUARANTINE_BYTES) so that it fills in a few
steps; --full runs 10,000 steps with the default quarantine."""
import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import json, sys
    import torch, torch_tpu

    steps, every = int(sys.argv[1]), int(sys.argv[2])

    def maps():
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 48),
                                   torch.nn.ReLU(), torch.nn.Linear(48, 10))

    torch.manual_seed(1)
    x, t = torch.randn(16, 32), torch.randint(0, 10, (16,))
    cpu, dev = make(), make().to("tpu")
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.05, momentum=0.9)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.05, momentum=0.9)
    xd, td = x.to("tpu"), t.to("tpu")
    torch_tpu.set_eager_mode("debug")
    counts, quarantined = [], []
    for i in range(steps):
        for m, o, xx, tt in ((cpu, opt_c, x, t), (dev, opt_d, xd, td)):
            o.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(xx), tt)
            loss.backward()
            o.step()
            if m is cpu:
                loss_c = loss.detach()
            else:
                loss_d = loss.detach().cpu()
        if i % every == every - 1:
            counts.append(maps())
            quarantined.append(torch_tpu._C._debug_stats()["quarantined_bytes"])
    torch.testing.assert_close(loss_d, loss_c, rtol=1e-4, atol=1e-5)
    print(json.dumps({"maps": counts, "quarantined": quarantined,
                      "stats": dict(torch_tpu._C._debug_stats())}))
""")


def run_loop(steps, every, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_TPU_EAGER_MODE", "TPU_LAUNCH_BLOCKING", "TORCH_TPU_DEFER_AND_FUSE",
                        "TORCH_TPU_DEBUG_GUARDS", "TORCH_TPU_DEBUG_QUARANTINE_BYTES")}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(steps), str(every)], capture_output=True, text=True,
                          env=env, timeout=3600)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    import json
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_debug_training_loop_mappings_plateau():
    # 1 MiB of quarantine fills within a few steps; from then on every step frees and allocates the
    # same sizes, so the mapping count must not move. Before the fix it grew after the quarantine
    # filled, by about one mapping per quarantined region (with the default quarantine, until
    # vm.max_map_count was reached and mprotect failed).
    budget = 1 << 20
    out = run_loop(60, 1, TORCH_TPU_DEBUG_QUARANTINE_BYTES=str(budget))
    maps, quarantined = out["maps"], out["quarantined"]
    assert out["stats"]["violations"] == 0, out
    full = next(i for i, q in enumerate(quarantined) if q >= budget * 3 // 4)
    assert full <= 20, quarantined  # the rest of the run is past the point where the quarantine is full
    assert max(maps[full:]) - maps[full] <= 8, f"mappings grow after the quarantine filled (step {full}): {maps}"


@pytest.mark.full
def test_debug_training_loop_10000_steps():
    # The default quarantine (a quarter of HBM) fills after some thousands of steps; the loop used to
    # die at about step 9,900 (vm.max_map_count reached: mprotect failed, then SIGSEGV).
    out = run_loop(10000, 500)
    maps = out["maps"]
    assert max(maps[-6:]) - min(maps[-6:]) <= 8 and max(maps) < 40000, f"mappings: {maps}"
