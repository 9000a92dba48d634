"""examples/hello_tpu.py (README's first example), run as a user runs it: a fresh interpreter with a
plain `import torch` (the device comes from autoload), checked against the same computation on the CPU."""
import os
import re
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hello_tpu.py"


def _run(code_or_path, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    env.update(env_extra or {})
    args = [sys.executable, str(code_or_path)] if isinstance(code_or_path, Path) else [sys.executable, "-c", code_or_path]
    # Run outside the checkout so only the installed package (the entry point) can provide the device.
    proc = subprocess.run(args, capture_output=True, text=True, cwd="/", env=env, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def test_example_as_written():
    out = _run(EXAMPLE)
    assert "Executed on device: tpu:0" in out.splitlines()
    m = re.search(r"^Result shape on CPU: torch.Size\(\[4, 4\]\), sum: (-?\d+\.\d{4})$", out, re.M)
    assert m, out


def test_example_matches_cpu_on_same_data():
    # Runs the example's own code, then recomputes its result on the CPU from the tpu input.
    code = f"""
import sys
ns = {{}}
exec(compile(open({str(EXAMPLE)!r}).read(), "hello_tpu.py", "exec"), ns)
assert "torch_tpu" in sys.modules, "autoload did not load torch_tpu"
torch = ns["torch"]
x, y, result = ns["x"], ns["y"], ns["result"]
expected = torch.matmul(x.cpu(), torch.ones(4, 4))
assert result.device.type == "cpu" and y.device.type == "tpu"
assert torch.allclose(result, expected, rtol=1e-5, atol=1e-5), (result, expected)
print(f"CPU sum: {{expected.sum():.4f}}")
"""
    out = _run(code)
    printed = float(re.search(r"sum: (-?\d+\.\d{4})$", out.splitlines()[1]).group(1))
    cpu = float(re.search(r"^CPU sum: (-?\d+\.\d{4})$", out, re.M).group(1))
    assert out.splitlines()[0] == "Executed on device: tpu:0"
    assert abs(printed - cpu) <= 2e-4, out


def test_explicit_import_first_also_works():
    out = _run("import torch_tpu\nimport torch\nprint(torch.ones(2, device='tpu').device, torch_tpu.__version__)")
    assert out.startswith("tpu:0 ")


def test_import_torch_tpu_without_autoload():
    out = _run("import torch_tpu, torch\nprint((torch.arange(4, device='tpu') * 2).tolist())",
               {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert out.strip() == "[0, 2, 4, 6]"
