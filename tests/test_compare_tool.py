"""python -m torch_tpu.tools.compare: the layer-by-layer check finds a layer that computes differently
on the device, in the forward outputs and in the gradients, and passes a model that does not."""
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from torch_tpu.tools import compare as cmp

MODELS = textwrap.dedent('''
    import torch
    from torch import nn

    class Perturbed(nn.Module):
        """A linear layer that is slightly wrong on the tpu only (as a buggy kernel would be)."""
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)
        def forward(self, x):
            y = self.lin(x)
            return y * 1.01 if y.device.type == "tpu" else y

    def net(perturb=False):
        torch.manual_seed(0)
        layers = [nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32)]
        layers.append(Perturbed(32) if perturb else nn.Linear(32, 32))
        layers += [nn.ReLU(), nn.Linear(32, 8)]
        return nn.Sequential(*layers), torch.randn(4, 16)

    def good():
        return net(False)

    def bad():
        return net(True)
''')


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "cmp_models.py"
    path.write_text(MODELS)
    return str(path)


def test_finds_the_perturbed_layer(models, capsys):
    assert cmp.main([f"{models}:bad"]) == 1
    out = capsys.readouterr().out
    assert "first module over tolerance: 3\n" in out  # Perturbed, not its (correct) inner Linear
    assert "first gradient over tolerance" in out
    assert cmp.main([f"{models}:good"]) == 0
    out = capsys.readouterr().out
    assert "every module within tolerance" in out and "every gradient within tolerance" in out


def test_report_rows(models):
    model, x = cmp._load_callable(f"{models}:bad")
    rep = cmp.compare(model, x)
    names = [r["name"] for r in rep["modules"]]
    # hooks report children before their parents, in execution order
    assert names[:4] == ["0", "1", "2", "3.lin"] and names[-1] == "(model)"
    by = {r["name"]: r for r in rep["modules"]}
    assert by["0"]["ok"] and by["2"]["ok"] and by["0"]["rel"] < 1e-5
    assert by["3.lin"]["ok"]  # the inner Linear is right; the layer around it scales its output
    assert not by["3"]["ok"] and by["3"]["rel"] == pytest.approx(0.01, rel=0.05)
    assert by["3"]["shape"] == [4, 32]
    assert rep["first_bad_module"] == "3"
    grads = {g["name"]: g for g in rep["gradients"]}
    assert set(grads) == {n for n, _ in model.named_parameters()}
    # the perturbation scales what flows back through it and what the next layer sees
    assert not grads["0.weight"]["ok"] and not grads["3.lin.weight"]["ok"] and not grads["5.weight"]["ok"]
    assert grads["5.bias"]["ok"]  # d loss / d bias of the last layer does not depend on layer 3


def test_bfloat16_tolerance(models):
    model, x = cmp._load_callable(f"{models}:good")
    rep = cmp.compare(model, x, dtype=torch.bfloat16)
    assert rep["tolerance"] == cmp.TOLERANCE[torch.bfloat16]
    assert rep["first_bad_module"] is None, rep["modules"]


def test_cli_json(models):
    r = subprocess.run([sys.executable, "-m", "torch_tpu.tools.compare", f"{models}:bad", "--json",
                        "--no-backward"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["first_bad_module"] == "3" and rep["gradients"] == []
    bad = subprocess.run([sys.executable, "-m", "torch_tpu.tools.compare", "no_such_module:x"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "cannot load" in bad.stderr


def test_hugging_face_directory(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                  architectures=["GPT2LMHeadModel"])
    cfg.save_pretrained(tmp_path)
    model, inputs = cmp._load_hf(str(tmp_path), 2, 8)
    rep = cmp.compare(model, inputs)
    assert rep["first_bad_module"] is None, [r for r in rep["modules"] if not r["ok"]][:3]
    assert any(r["name"].endswith("h.1.attn") for r in rep["modules"])
    assert rep["first_bad_gradient"] is None
