"""Switching the eager mode while other threads run ops: the switch waits for the submits in progress
and for the chip to run what was queued under the old mode, so every result equals PyTorch CPU's and
nothing raises or crashes, whichever mode each op ran in. Each run is a subprocess (a crash must fail
the test, not end the session); the fast suite runs ~3 s, --full longer."""
import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import sys, threading, time
    import torch, torch_tpu

    seconds, modes = float(sys.argv[1]), sys.argv[2].split(",")
    errors, counts, stop = [], [0, 0, 0], threading.Event()

    def work(i):
        g = torch.Generator().manual_seed(i)
        a = torch.randn(256 * (i + 1), 1024, generator=g)  # MBs: copies and kernels overlap switches
        ref = a * 2
        try:
            while not stop.is_set():
                out = (a.to("tpu") * 2).cpu()
                if not torch.equal(out, ref):
                    errors.append(f"thread {i}: result differs from CPU in {(out != ref).sum()} elements")
                    return
                counts[i] += 1
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    # The first op of a process imports PyTorch's compiler stack (seconds): not part of the run.
    for i in range(3):
        (torch.ones(256 * (i + 1), 1024).to("tpu") * 2).cpu()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    switches, end = 0, time.monotonic() + seconds
    try:
        while time.monotonic() < end and not errors:
            torch_tpu.set_eager_mode(modes[switches % len(modes)])
            switches += 1
            time.sleep(0.002 if switches % 2 else 0)  # every 2 ms, and back-to-back
    finally:
        stop.set()
        for t in threads:
            t.join()
    torch_tpu.set_eager_mode("strict")
    print("switches", switches, "ops per thread", counts)
    assert not errors, errors
    assert switches > len(modes) and min(counts) > 0, (switches, counts)
""")


def run_switching(seconds, modes):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCH_TPU_EAGER_MODE", "TPU_LAUNCH_BLOCKING", "TORCH_TPU_DEFER_AND_FUSE")}
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(seconds), ",".join(modes)], capture_output=True,
                          text=True, env=env, timeout=300 + 2 * seconds)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    return proc.stdout


# Every ordered pair of modes follows another once per cycle.
ALL_PAIRS = ["strict", "debug", "defer_and_fuse", "debug", "strict", "defer_and_fuse"]


def test_switch_strict_debug_while_threads_run_ops():
    run_switching(3, ["strict", "debug"])


def test_switch_all_modes_while_threads_run_ops():
    run_switching(3, ALL_PAIRS)


@pytest.mark.full
@pytest.mark.parametrize("modes", [["strict", "debug"], ALL_PAIRS], ids=["strict-debug", "all-pairs"])
def test_switch_long(modes):
    run_switching(30, modes)
