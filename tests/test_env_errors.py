"""Bad start-up conditions get a clear error naming what was wrong: a TORCH_TPU_* variable with a bad
value (under autoload too: `import torch` warns, then torch.tpu and `import torch_tpu` raise naming the
variable and its value, not `No module named 'torch.tpu'`), more chips than a process can drive, and
the device touched in a child forked after the parent used it. Each case is a fresh process."""
import os
import subprocess
import sys
import textwrap

import pytest


def run_py(code, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_TPU_") and k != "TPU_LAUNCH_BLOCKING"}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    return proc.stdout


CATCH = """
    import torch
    def show(f):
        try:
            f()
            print("no error")
        except Exception as e:
            print(type(e).__name__ + ": " + str(e).splitlines()[0])
"""


@pytest.mark.parametrize("var, value, expect", [
    ("TORCH_TPU_NUM_CHIPS", "64", "TORCH_TPU_NUM_CHIPS=64: expected a number of chips from 1 to 16"),
    ("TORCH_TPU_NUM_CHIPS", "abc", "TORCH_TPU_NUM_CHIPS=abc: expected a number of chips from 1 to 16"),
    ("TORCH_TPU_EAGER_MODE", "fastest", "TORCH_TPU_EAGER_MODE='fastest': expected strict, debug or defer_and_fuse"),
    ("TORCH_TPU_PIN_THREADS", "yes", "TORCH_TPU_PIN_THREADS=yes: expected 0 (the host's scheduler places"),
])
def test_bad_variable_under_autoload_is_named(var, value, expect):
    out = run_py(CATCH + """
    print(torch.tpu.is_available())
    show(lambda: torch.tpu.device_count())
    show(lambda: torch.tpu.synchronize())
    """, **{var: value})
    lines = out.splitlines()
    assert lines[0] == "False", out
    for line in lines[1:]:
        assert expect in line and "No module named" not in line, out


@pytest.mark.parametrize("var, value, expect", [
    ("TORCH_TPU_NUM_CHIPS", "64", "TORCH_TPU_NUM_CHIPS=64: expected a number of chips from 1 to 16"),
    ("TORCH_TPU_EAGER_MODE", "fastest", "TORCH_TPU_EAGER_MODE='fastest': expected strict, debug or defer_and_fuse"),
])
def test_bad_variable_on_explicit_import_is_named(var, value, expect):
    out = run_py(CATCH + """
    show(lambda: __import__("torch_tpu"))
    """, TORCH_DEVICE_BACKEND_AUTOLOAD="0", **{var: value})
    assert out.split(":")[0] in ("RuntimeError", "ValueError", "ImportError") and expect in out, out


def test_too_many_chips_named_when_used():
    out = run_py(CATCH + """
    show(lambda: torch.zeros(2, device="tpu"))
    """, TORCH_TPU_NUM_CHIPS="17")
    assert out.startswith("RuntimeError:") and "TORCH_TPU_NUM_CHIPS=17: expected a number of chips from 1 to 16" in out, out


def test_most_chips_accepted():
    out = run_py("""
    import torch
    print(torch.tpu.device_count())
    print((torch.ones(3, device="tpu:15") * 2).cpu().tolist())
    """, TORCH_TPU_NUM_CHIPS="16", TORCH_TPU_HBM_BYTES="64M", TORCH_TPU_NUM_THREADS="1")
    assert out.split() == ["16", "[2.0,", "2.0,", "2.0]"], out


def test_forked_child_error_says_fork():
    out = run_py(CATCH + """
    import os
    assert (torch.ones(3, device="tpu") * 2).cpu().tolist() == [2.0, 2.0, 2.0]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            torch.ones(2, device="tpu")
            msg = "no error"
        except Exception as e:
            msg = type(e).__name__ + ": " + str(e)
        os.write(w, msg.encode())
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(w)
    print(os.read(r, 4096).decode())
    """)
    assert "cannot use the tpu device in a forked subprocess" in out and "'spawn' start method" in out, out
    assert "out of memory" not in out, out


AFFINITY = """
    import os, torch
    assert (torch.ones(3, device="tpu") * 2).cpu().tolist() == [2.0, 2.0, 2.0]
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        assert (torch.ones(3, device="tpu") + 1).cpu().tolist() == [2.0, 2.0, 2.0]
    torch.tpu.synchronize()
    print("allowed", ",".join(map(str, sorted(os.sched_getaffinity(0)))))
    for tid in sorted(os.listdir("/proc/self/task")):
        name = open(f"/proc/self/task/{tid}/comm").read().strip()
        if name.startswith("tpu"):
            print(name, ",".join(map(str, sorted(os.sched_getaffinity(int(tid))))))
"""


def _affinities(**env):
    out = run_py(AFFINITY, **env)
    return {line.split()[0]: line.split()[1] for line in out.splitlines()}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two host CPUs")
def test_compute_threads_keep_to_cpus_of_their_own():
    """Each of the chip's compute threads keeps to its own CPU among the process's: the default queue's
    worker (which leads kernels) on the first, pool thread t on the t-th; another queue's worker on
    the chip's CPUs. TORCH_TPU_PIN_THREADS=0, or one thread, leaves them to the scheduler."""
    allowed = sorted(os.sched_getaffinity(0))
    a = _affinities(TORCH_TPU_NUM_THREADS="2")
    cpus = a["allowed"].split(",")
    assert cpus == [str(c) for c in allowed], a
    assert a["tpu0-q0"] == cpus[0] and a["tpu0-pool1"] == cpus[1], a
    assert a["tpu0-q1"] == ",".join(cpus[:2]), a
    a = _affinities(TORCH_TPU_NUM_THREADS="2", TORCH_TPU_PIN_THREADS="0")
    assert a["tpu0-q0"] == a["tpu0-pool1"] == a["tpu0-q1"] == a["allowed"], a
    a = _affinities(TORCH_TPU_NUM_THREADS="1")
    assert "tpu0-pool1" not in a and a["tpu0-q0"] == a["allowed"], a


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two host CPUs")
def test_host_chips_take_disjoint_cpus():
    """Chips of one host (TORCH_TPU_TOPOLOGY, a process each) keep to disjoint runs of CPUs when their
    threads fit, and are left to the scheduler when they do not."""
    allowed = [str(c) for c in sorted(os.sched_getaffinity(0))]
    if len(allowed) >= 4:
        a = _affinities(TORCH_TPU_TOPOLOGY="2", TPU_VISIBLE_CHIPS="1", TORCH_TPU_NUM_THREADS="2")
        assert a["tpu0-q0"] == allowed[2] and a["tpu0-pool1"] == allowed[3], a
    a = _affinities(TORCH_TPU_TOPOLOGY="2", TPU_VISIBLE_CHIPS="1", TORCH_TPU_NUM_THREADS=str(len(allowed)))
    assert a["tpu0-q0"] == a["tpu0-pool1"] == a["allowed"], a
