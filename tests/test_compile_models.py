"""The model suite under torch.compile(backend="tpu"): a training step (forward, loss, backward and an
AdamW step, model and optimizer step both compiled) of the Llama block, the convnet and the Hugging Face
configs of tests/test_hf_models.py, against the same steps on PyTorch CPU, and under bf16 autocast against eager tpu. Every graph must run as a
device program (no graph runs eagerly), except where a model's own code reads device data on the host.
Whisper, in training mode, breaks into several graphs (its LayerDrop branches on a CPU `torch.rand([])`),
one of which has no tensor input (positions and masks from factory ops): it runs as a program too.
The MLP and the small GPT are in tests/test_compile.py."""
import copy

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from torch_tpu import _compile
import test_models as M

pytestmark = pytest.mark.tpu

transformers = pytest.importorskip("transformers")
import test_hf_models as H  # noqa: E402  (needs transformers)


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    _compile.reset_compile_stats()
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny CPU references (see test_hf_models)
    yield
    torch.set_num_threads(before)
    torch._dynamo.reset()


def _suite(name):
    """(CPU model, loss(model, device))."""
    torch.manual_seed(0)
    if name == "llama_block":
        model = M.Llama()
        x, y = M._lm_batch(128, 4, 16)(torch.Generator().manual_seed(1))
        return model, lambda m, d: M._lm_loss(m(x.to(d)), y.to(d))
    if name == "convnet":
        model = M.ConvNet()
        x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
        y = torch.tensor([1, 2, 3, 4])
        return model, lambda m, d: F.cross_entropy(m(x.to(d)), y.to(d))
    model, inputs = H._build(name)
    model.train()
    return model, lambda m, d: m(**H._to(inputs, d)).loss


DEFAULT = ["llama_block", "convnet", "llama", "mistral", "bert", "whisper"]
HEAVY = ["gpt2", "qwen2", "qwen3", "t5", "vit"]


def _grads(model):
    return [p.grad.detach().cpu().clone() if p.grad is not None else None for p in model.parameters()]


@pytest.mark.parametrize("name", DEFAULT + [pytest.param(n, marks=pytest.mark.full) for n in HEAVY])
def test_compiled_training_step_matches_cpu(name):
    model, loss_of = _suite(name)
    dev_model = copy.deepcopy(model).to("tpu")
    opt_cpu = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_dev = torch.optim.AdamW(dev_model.parameters(), lr=torch.tensor(1e-3, device="tpu"), capturable=True)
    run = torch.compile(dev_model, backend="tpu")
    step = torch.compile(opt_dev.step, backend="tpu")
    for i in range(3):
        opt_cpu.zero_grad(set_to_none=True)
        opt_dev.zero_grad(set_to_none=True)
        want = loss_of(model, "cpu")
        got = loss_of(run, "tpu")
        want.backward()
        got.backward()
        # after AdamW steps, float rounding differences grow (T5's third loss is 1.2e-4 off CPU's in
        # eager tpu too): tight on the first step, looser after
        rel = 1e-4 if i == 0 else 1e-3
        assert got.item() == pytest.approx(want.item(), rel=rel, abs=1e-5), f"{name}: step {i} loss"
        if i == 0:  # the gradients of the first step, before the optimizers' paths can drift apart
            for (pname, p), g in zip(model.named_parameters(), _grads(dev_model)):
                if p.grad is None:
                    assert g is None, pname
                    continue
                scale = p.grad.abs().max().item() + 1e-6
                err = (g - p.grad).abs().max().item()
                assert err <= 1e-3 * scale + 1e-6, f"{name}: gradient of {pname}: {err} (max {scale})"
        opt_cpu.step()
        step()
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0, s
    assert s["launches"] > s["captures"] > 0 and s["graphs"] >= 2, s
    for (pname, p), q in zip(model.named_parameters(), dev_model.parameters()):
        # AdamW's step is lr-sized wherever a gradient is tiny, so compare within a few steps' size
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-3, atol=3e-3, msg=pname)


def test_cpu_work_on_constants_runs_at_compile_time():
    """A graph that builds a CPU tensor from constants (torch.tensor(...) in the model's code, as
    Mistral's sliding-window mask does) computes it once at compile time and still runs as a program;
    CPU work on the graph's inputs, or random CPU work, is not folded: that graph runs eagerly."""
    def f(x):
        w = torch.tensor([1.0, 2.0, 3.0]) * 2 + 1  # CPU ops on a constant
        return x * w.to(x.device) + torch.tensor(0.5).to(x.device)

    x = torch.randn(4, 3)
    cf = torch.compile(f, backend="tpu")
    for _ in range(3):
        torch.testing.assert_close(cf(x.to("tpu")).cpu(), f(x))
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["captures"] == 1 and s["launches"] == 3, s

    torch._dynamo.reset()
    _compile.reset_compile_stats()

    def g(x):  # CPU work that depends on the input: not a constant
        return (x.cpu() * 2).to(x.device) + 1

    cg = torch.compile(g, backend="tpu")
    torch.testing.assert_close(cg(x.to("tpu")).cpu(), g(x))
    assert _compile.compile_stats()["eager_runs"] >= 1

    torch._dynamo.reset()
    _compile.reset_compile_stats()

    def h(x):  # a random CPU tensor: drawn at each call, never folded
        return x + torch.rand(3).to(x.device)

    ch = torch.compile(h, backend="tpu")
    a, b = ch(x.to("tpu")).cpu(), ch(x.to("tpu")).cpu()
    assert not torch.equal(a, b)
    assert _compile.compile_stats()["eager_runs"] == 2


# Whisper's autocast row takes about 9 s (its LayerDrop graph breaks: many graphs to trace): --full.
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.full) if n == "whisper" else n for n in DEFAULT])
def test_compiled_step_under_bf16_autocast_matches_eager(name):
    """Forward and backward under torch.autocast("tpu", bfloat16), compiled, against eager tpu under the
    same autocast (the same kernels: near-equal) and CPU's bf16 autocast (bf16 rounding apart)."""
    model, loss_of = _suite(name)
    compiled, eager = copy.deepcopy(model).to("tpu"), copy.deepcopy(model).to("tpu")
    run = torch.compile(compiled, backend="tpu")
    with torch.autocast("cpu", torch.bfloat16):
        want = loss_of(model, "cpu")
    with torch.autocast("tpu", torch.bfloat16):
        got, ref = loss_of(run, "tpu"), loss_of(eager, "tpu")
    for loss in (want, got, ref):
        loss.backward()
    assert got.item() == pytest.approx(ref.item(), rel=1e-5)
    assert got.item() == pytest.approx(want.item(), rel=1e-2)
    # A gradient that is rounding noise (an attention key bias: adding it shifts every score of a query
    # alike, so its true gradient is 0) is compared at the model's gradient scale, not its own.
    gmax = max(q.grad.abs().max().item() for q in eager.parameters() if q.grad is not None)
    for (pname, p), q, c in zip(compiled.named_parameters(), eager.parameters(), model.parameters()):
        if q.grad is None:
            continue
        scale = max(q.grad.abs().max().item(), 1e-4 * gmax) + 1e-6
        assert (p.grad - q.grad).abs().max().item() <= 2e-2 * scale, f"{name}: {pname} against eager tpu"
        assert (p.grad.cpu().float() - c.grad.float()).abs().max().item() <= 5e-2 * scale, f"{name}: {pname} against CPU"
    s = _compile.compile_stats()
    assert s["eager_runs"] == 0 and s["captures"] >= 2, s
