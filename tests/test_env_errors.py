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
