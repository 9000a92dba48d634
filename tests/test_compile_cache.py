"""AOTAutograd's cache on disk in front of the tpu backend (torch_tpu/_compile_cache.py): a new process
with the same graph loads it instead of running AOTAutograd and computes the same results; an untrusted
cache directory is not used."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.tpu

HERE = os.path.dirname(os.path.abspath(__file__))

STEP = r"""
import json, sys, torch, torch_tpu
from torch._dynamo.utils import counters
from torch_tpu import _compile, _compile_cache
sys.path.insert(0, {here!r})
from test_models import GPT, _lm_batch, _lm_loss
torch.manual_seed(0)
model = GPT(vocab=64, d=32, heads=2, layers=1, seq=8).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-2, device="tpu"), capturable=True)
cm = torch.compile(model, backend="tpu")
step = torch.compile(opt.step, backend="tpu")
g = torch.Generator().manual_seed(1)
losses = []
for _ in range(3):
    x, y = _lm_batch(64, 2, 8)(g)
    opt.zero_grad(set_to_none=True)
    loss = _lm_loss(cm(x.to("tpu")), y.to("tpu"))
    loss.backward()
    step()
    losses.append(loss.item())
print(json.dumps({{"losses": losses, "aot": dict(counters["aot_autograd"]), "stats": _compile.compile_stats(),
                  "status": list(_compile_cache.aot_cache_status()),
                  "w": model.head.weight.detach().cpu().flatten()[:16].tolist()}}))
"""


def _run(cache_dir, **env_extra):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(cache_dir), TORCH_TPU_AOT_CACHE="1")
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", STEP.format(here=HERE)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cpu_reference():
    import torch
    sys.path.insert(0, HERE)
    from test_models import GPT, _lm_batch, _lm_loss
    torch.manual_seed(0)
    model = GPT(vocab=64, d=32, heads=2, layers=1, seq=8)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(3):
        x, y = _lm_batch(64, 2, 8)(g)
        opt.zero_grad(set_to_none=True)
        loss = _lm_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.head.weight.detach().flatten()[:16].tolist()


def test_new_process_loads_compiled_graphs_and_matches(tmp_path):
    cache = tmp_path / "inductor"
    cache.mkdir()
    os.chmod(cache, 0o700)  # whatever the umask
    first = _run(cache)
    second = _run(cache)
    assert first["status"][0] and second["status"][0]
    # the model's forward/backward and the optimizer step: saved by the first, loaded by the second
    assert first["aot"].get("autograd_cache_saved", 0) == 2 and first["aot"].get("autograd_cache_hit", 0) == 0
    assert second["aot"].get("autograd_cache_hit", 0) == 2 and second["aot"].get("autograd_cache_miss", 0) == 0
    assert first["stats"]["disk_loads"] == 0 and second["stats"]["disk_loads"] == 3  # forward, backward, step
    for s in (first, second):  # loaded graphs still run as device programs
        assert s["stats"]["launches"] > s["stats"]["captures"] > 0 and s["stats"]["eager_runs"] == 0
    losses, w = _cpu_reference()
    for s in (first, second):
        assert s["losses"] == pytest.approx(losses, rel=1e-4, abs=1e-5)
        assert s["w"] == pytest.approx(w, rel=1e-4, abs=1e-5)


def test_untrusted_or_disabled_cache_is_not_used(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    r = _run(open_dir)
    assert not r["status"][0] and "writable by its group or others" in r["status"][1]
    assert r["aot"].get("autograd_cache_saved", 0) == 0 and r["aot"].get("autograd_cache_hit", 0) == 0
    assert not list(open_dir.rglob("aotautograd/*/*"))
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    r2 = _run(link)
    assert not r2["status"][0] and "symlink" in r2["status"][1]
    r3 = _run(tmp_path / "off", TORCH_TPU_AOT_CACHE="0")  # the default
    assert r3["status"] == [False, "off (TORCH_TPU_AOT_CACHE=1 turns it on)"]
    assert r3["aot"].get("autograd_cache_saved", 0) == 0
    losses, _ = _cpu_reference()
    for r_ in (r, r2, r3):
        assert r_["losses"] == pytest.approx(losses, rel=1e-4, abs=1e-5)
