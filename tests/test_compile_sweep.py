"""What users write under torch.compile on tpu, unchanged, against PyTorch CPU: optimizers as they
come (capturable left to Dynamo, as on CUDA), NAdam's broadcast state updates, the default backend
on a graph whose only tpu tensors come from factories, and dynamic=True where Dynamo leaves sizes
related (a loss's labels and logits) or a size with no room to move (GPT-2's cache length)."""
import copy
import os
import subprocess
import sys

import pytest
import torch

from torch_tpu import _compile
from test_compile import fresh  # noqa: F401  (autouse: Dynamo reset, counters zeroed)

pytestmark = pytest.mark.tpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _steps(opt_cls, n=3, dev_kw=None):
    """n steps of a CPU optimizer and of the same optimizer on tpu (with dev_kw too) with its step
    compiled, compared; returns the tpu optimizer."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    dev_model = copy.deepcopy(model).to("tpu")
    opt = opt_cls(model.parameters(), lr=1e-2)
    dev_opt = opt_cls(dev_model.parameters(), lr=1e-2, **(dev_kw or {}))
    step = torch.compile(dev_opt.step, backend="tpu")
    gen = torch.Generator().manual_seed(1)
    for _ in range(n):
        x = torch.randn(5, 8, generator=gen)
        for m, d in ((model, "cpu"), (dev_model, "tpu")):
            m.zero_grad()
            m(x.to(d)).square().sum().backward()
        opt.step()
        step()
    for p, q in zip(model.parameters(), dev_model.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    return dev_opt


@pytest.mark.parametrize("opt_cls", [torch.optim.AdamW, torch.optim.Adam, torch.optim.RMSprop])
def test_optimizer_as_written_keeps_its_state_on_the_device(opt_cls):
    """torch.compile(opt.step) with the optimizer's defaults: Dynamo makes the state capturable for
    tpu as for CUDA, so the step counts are device tensors and the step is a program (it ran eagerly:
    a graph updating CPU step counts)."""
    dev_opt = _steps(opt_cls)
    assert dev_opt.param_groups[0]["capturable"] is True
    assert all(st["step"].device.type == "tpu" for st in dev_opt.state.values())
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0 and s["captures"] == 1, s


@pytest.mark.parametrize("capturable", [None, True])
def test_nadam_broadcast_updates_stay_out_of_place(capturable):
    """NAdam multiplies its 0-dim momentum products into states of the parameter's shape: a _foreach_
    result broadcast past its first list must not be made in place on it (it raised "output with shape
    [] doesn't match the broadcast shape")."""
    _steps(torch.optim.NAdam, dev_kw=None if capturable is None else {"capturable": capturable})
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["captures"] == 1, s


def test_in_place_rewrite_still_applies_where_layouts_match():
    """Adam's updates keep their shapes: the compiled step's _foreach_ ops are still made in place."""
    from torch._functorch.aot_autograd import aot_function
    changed = []

    def compiler(gm, _):
        changed.append(_compile._foreach_in_place(gm))
        return gm

    ps = [torch.randn(3, 2, device="tpu"), torch.randn(4, device="tpu")]
    avgs = [torch.zeros_like(p) for p in ps]

    def f(ps, gs, avgs):
        torch._foreach_mul_(avgs, 0.9)
        torch._foreach_add_(avgs, gs, alpha=0.1)
        torch._foreach_add_(ps, avgs, alpha=-0.01)

    aot_function(f, fw_compiler=compiler, keep_inference_input_mutations=True)(
        ps, [torch.ones_like(p) for p in ps], avgs)
    assert changed and changed[0] >= 3


def test_default_backend_takes_graphs_whose_tpu_tensors_come_from_factories():
    """torch.compile(fn) without a backend on a function with no tensor input that makes tpu tensors:
    our backend, not Inductor's JAX/Pallas "tpu" (ModuleNotFoundError: jax)."""
    @torch.compile
    def f(n):
        return torch.arange(n, device="tpu") * 2

    assert f(5).cpu().tolist() == [0, 2, 4, 6, 8]
    assert _compile.compile_stats()["graphs"] == 1


def test_dynamo_imported_after_torch_tpu_gets_the_registration():
    """torch_tpu loads with torch (autoload) before Dynamo: what Dynamo must know before tracing
    (the backend name, the optimizer rule above) is installed as Dynamo's import ends."""
    code = ("import sys, torch, torch_tpu\n"
            "assert 'torch._dynamo' not in sys.modules\n"
            "import torch._dynamo\n"
            "from torch._dynamo.backends import registry\n"
            "from torch._dynamo.variables.optimizer import OptimizerVariable\n"
            "assert 'tpu' in registry._COMPILER_FNS\n"
            "assert OptimizerVariable._set_capturable._torch_tpu\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_dynamic_sizes_related_by_an_op_move_together():
    """Labels with sizes of their own (as a Hugging Face loss graph after a graph break gets them; here
    without duck shaping): the loss needs labels' numel to be logits' rows, a relation Dynamo guards
    but cannot substitute. Captures at other sizes that move the symbols apart fail; moved together
    (equal at the first call) they succeed, and later lengths are bindings of one program, not a
    capture each."""
    import torch.fx.experimental._config as fx_config

    def loss(logits, labels):
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))

    f = torch.compile(loss, backend="tpu", dynamic=True)
    gen = torch.Generator().manual_seed(0)
    with fx_config.patch(use_duck_shape=False):
        _related_calls(f, loss, gen)


def _related_calls(f, loss, gen):
    for n in (6, 9, 13, 20):
        logits, labels = torch.randn(2, n, 16, generator=gen), torch.randint(0, 16, (2, n), generator=gen)
        got = f(logits.to("tpu"), labels.to("tpu"))
        torch.testing.assert_close(got.cpu(), loss(logits, labels))
    s = _compile.compile_stats()
    assert s["graphs"] == 1 and s["generalized"] == 1 and s["bindings"] == 3 and s["captures"] == 1, s
    # sizes the program took as one differ here: not a binding of it; still right
    logits, labels = torch.randn(3, 4, 16, generator=gen), torch.randint(0, 16, (6, 2), generator=gen)
    torch.testing.assert_close(f(logits.to("tpu"), labels.to("tpu")).cpu(), loss(logits, labels))
    s = _compile.compile_stats()
    assert s["bindings"] == 3 and s["eager_runs"] == 0, s


def test_dynamic_sequence_length_training_step_of_gpt2():
    """A Hugging Face GPT-2 training step under dynamic=True at several lengths: equal to CPU, and each
    graph captured once (its cache length, 0 with a range that ends at 0, is held; labels' sizes move
    with the inputs')."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).train()
    dev_model = copy.deepcopy(model).to("tpu")
    run = torch.compile(dev_model, backend="tpu", dynamic=True)
    gen = torch.Generator().manual_seed(1)
    for n in (6, 9, 13):
        ids = torch.randint(2, 64, (2, n), generator=gen)
        model.zero_grad()
        dev_model.zero_grad()
        want = model(input_ids=ids, labels=ids).loss
        got = run(input_ids=ids.to("tpu"), labels=ids.to("tpu")).loss
        want.backward()
        got.backward()
        assert got.item() == pytest.approx(want.item(), rel=1e-5)
        for (name, p), q in zip(model.named_parameters(), dev_model.parameters()):
            scale = p.grad.abs().max().item() + 1e-6
            assert (q.grad.cpu() - p.grad).abs().max().item() <= 1e-4 * scale, name
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["captures"] == s["generalized"] and s["bindings"] >= 2 * s["captures"], s
