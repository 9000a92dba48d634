"""torch.compile(backend="tpu") (torch_tpu/_compile.py, runtime/exec/capture.c):
compiled graphs run as device programs, one launch per call, and match eager
tpu and PyTorch CPU."""
import copy
import gc

import pytest
import torch
import torch._dynamo
from torch import nn
from torch.nn import functional as F

import torch_tpu
from torch_tpu import _compile
from test_models import GPT, _lm_batch, _lm_loss

pytestmark = pytest.mark.tpu


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    _compile.reset_compile_stats()
    yield
    torch._dynamo.reset()


def stats():
    return _compile.compile_stats()


def mlp():
    return nn.Sequential(nn.Linear(24, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))


def test_backend_is_registered_by_name():
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("tpu") is _compile.tpu_backend
    assert "tpu" in torch._dynamo.list_backends(exclude_tags=())


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_compile_modes_are_accepted_and_match_cpu(mode):
    torch.manual_seed(0)
    m = mlp()
    x = torch.randn(6, 24)
    want = m(x)
    got = torch.compile(m.to("tpu"), backend="tpu", mode=mode)(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    assert stats()["graphs"] == 1


def test_unknown_options_and_modes_are_refused_by_name_and_the_process_goes_on():
    torch.manual_seed(0)
    m = mlp().to("tpu")
    x = torch.randn(6, 24).to("tpu")
    with pytest.raises(Exception, match=r"takes no options, got \['max_fusion_size'\]"):
        torch.compile(m, backend="tpu", options={"max_fusion_size": 4})(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        torch.compile(m, backend="tpu", mode="fastest")(x)
    torch._dynamo.reset()
    got = torch.compile(m, backend="tpu")(x)
    torch.testing.assert_close(got.cpu(), m.cpu()(x.cpu()), rtol=1e-5, atol=1e-5)


def test_forward_backward_match_cpu_and_each_call_is_one_launch():
    torch.manual_seed(0)
    m_cpu = mlp()
    m = copy.deepcopy(m_cpu).to("tpu")
    cm = torch.compile(m, backend="tpu")
    x = torch.randn(16, 24)
    for i in range(3):
        before = stats()["launches"]
        out = cm(x.to("tpu"))
        assert stats()["launches"] == before + 1  # the forward graph: one program launch
        torch.testing.assert_close(out.cpu(), m_cpu(x), rtol=1e-5, atol=1e-6)
    assert stats()["graphs"] == 1 and stats()["captures"] == 1
    assert stats()["cache_hits"] == 2
    loss_cpu = m_cpu(x).square().mean()
    loss_cpu.backward()
    before = stats()["launches"]
    loss = cm(x.to("tpu")).square().mean()
    loss.backward()
    assert stats()["launches"] == before + 2  # forward (training graph) and backward
    assert loss.item() == pytest.approx(loss_cpu.item(), rel=1e-5)
    for (name, p_cpu), p in zip(m_cpu.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-6, msg=name)


def _train(model, opt, batches, device, step_fn=None, autocast=False):
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
            loss = _lm_loss(model(x.to(device)), y.to(device))
        loss.backward()
        (step_fn or opt.step)()
        losses.append(loss.item())
    return losses


def test_gpt_training_with_compiled_model_and_optimizer_step():
    vocab, seq, batch = 128, 16, 4
    torch.manual_seed(0)
    m_cpu = GPT(vocab=vocab, d=64, heads=4, layers=2, seq=seq)
    m = copy.deepcopy(m_cpu).to("tpu")
    opt_cpu = torch.optim.AdamW(m_cpu.parameters(), lr=3e-3)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, capturable=True)  # step counts on the device
    make = _lm_batch(vocab, batch, seq)
    g = torch.Generator().manual_seed(1)
    batches = [make(g) for _ in range(6)]
    cm = torch.compile(m, backend="tpu")
    step = torch.compile(opt.step, backend="tpu")
    losses = _train(cm, opt, batches, "tpu", step)
    losses_cpu = _train(m_cpu, opt_cpu, batches, "cpu")
    assert losses == pytest.approx(losses_cpu, rel=1e-4, abs=1e-5)
    assert losses_cpu[-1] < losses_cpu[0]
    for (name, p_cpu), p in zip(m_cpu.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=3e-4, msg=name)
    s = stats()
    assert s["launches"] > s["captures"] and s["eager_runs"] == 0 and s["capture_failures"] == 0


def test_gpt_training_step_under_bf16_autocast_compiles_and_matches_eager():
    """The whole step under torch.autocast("tpu", bfloat16) (forward and loss autocast, backward and the
    compiled AdamW step outside it): the same losses and weights as the eager step on tpu (both round
    the matrix products' operands to bf16), near CPU's autocast run, with the graphs run as programs."""
    vocab, seq, batch = 128, 16, 4
    torch.manual_seed(0)
    m_cpu = GPT(vocab=vocab, d=64, heads=4, layers=2, seq=seq)
    m_eager, m = copy.deepcopy(m_cpu).to("tpu"), copy.deepcopy(m_cpu).to("tpu")
    make = _lm_batch(vocab, batch, seq)
    g = torch.Generator().manual_seed(1)
    batches = [make(g) for _ in range(5)]
    with torch.no_grad():
        fp32_first = _lm_loss(m_cpu(batches[0][0]), batches[0][1]).item()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, capturable=True)
    opt_eager = torch.optim.AdamW(m_eager.parameters(), lr=3e-3, capturable=True)
    opt_cpu = torch.optim.AdamW(m_cpu.parameters(), lr=3e-3)
    cm = torch.compile(m, backend="tpu")
    losses = _train(cm, opt, batches, "tpu", torch.compile(opt.step, backend="tpu"), autocast=True)
    losses_eager = _train(m_eager, opt_eager, batches, "tpu", autocast=True)
    losses_cpu = _train(m_cpu, opt_cpu, batches, "cpu", autocast=True)
    assert losses == pytest.approx(losses_eager, rel=1e-5, abs=1e-6)
    assert losses == pytest.approx(losses_cpu, rel=2e-2, abs=2e-2)  # bf16 products, summed in other orders
    for (name, p_e), p in zip(m_eager.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_e.detach().cpu(), rtol=1e-5, atol=1e-6, msg=name)
    s = stats()
    assert s["launches"] > s["captures"] > 0 and s["eager_runs"] == 0 and s["capture_failures"] == 0
    # autocast took effect in the program: its logits are bf16 and off fp32's by bf16's rounding (the
    # loss alone cannot tell: at initialization it moved by 2e-6 relative, under CPU's autocast too)
    x0 = batches[0][0].to("tpu")
    with torch.no_grad():
        with torch.autocast("tpu", torch.bfloat16):
            low = cm(x0)
        full = m(x0)
    assert low.dtype == torch.bfloat16 and full.dtype == torch.float32
    assert (low.float() - full).abs().max().item() > 1e-3 * full.abs().max().item()
    assert abs(losses[0] - fp32_first) < 1e-2 * abs(fp32_first)


def test_compiled_optimizer_after_eager_steps_is_right():
    """An optimizer whose state was made by an eager step (CPU step counts: Dynamo makes only a state
    not yet made capturable, tests/test_compile_sweep.py), then compiled."""
    torch.manual_seed(0)
    m_cpu = nn.Linear(6, 3)
    m = copy.deepcopy(m_cpu).to("tpu")
    opt_cpu = torch.optim.AdamW(m_cpu.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    step = torch.compile(opt.step, backend="tpu")
    for i in range(3):
        x = torch.randn(4, 6)
        m_cpu(x).sum().backward()
        m(x.to("tpu")).sum().backward()
        opt_cpu.step()
        if i == 0:
            opt.step()
            assert opt.state[m.weight]["step"].device.type == "cpu"
        else:
            step()
    torch.testing.assert_close(m.weight.detach().cpu(), m_cpu.weight.detach(), rtol=1e-5, atol=1e-6)
    assert opt.state[m.weight]["step"].item() == 3.0
    assert stats()["graphs"] >= 1


def test_dynamic_batch_compiles_once_and_matches_cpu():
    torch.manual_seed(0)
    m_cpu = mlp()
    m = copy.deepcopy(m_cpu).to("tpu")
    cm = torch.compile(m, backend="tpu", dynamic=True)
    for b in (3, 5, 8, 13, 5):
        x = torch.randn(b, 24)
        torch.testing.assert_close(cm(x.to("tpu")).cpu(), m_cpu(x), rtol=1e-5, atol=1e-6)
    s = stats()
    assert s["graphs"] == 1  # one Dynamo compile for every batch size
    # one capture (and two at other sizes that never run) makes a program that takes the batch size
    # at launch: each new size is a binding of it, the repeated 5 a cache hit
    assert s["captures"] == 1 and s["size_probes"] == 2 and s["generalized"] == 1
    assert s["bindings"] == 3 and s["cache_hits"] == 1 and s["launches"] == 5 and s["eager_runs"] == 0


def _codegen_builds():
    torch_tpu._C._fusion_wait_builds()
    return torch_tpu._C._fusion_stats()["codegen_builds"]


def test_sizes_are_launch_parameters_mlp():
    """A program captured at one batch size runs every other size in the range: one capture, no C
    build, no recompile, results as CPU's."""
    torch.manual_seed(0)
    m_cpu = nn.Sequential(nn.Linear(24, 512), nn.GELU(), nn.Linear(512, 64), nn.Tanh(), nn.Linear(64, 5))
    m = copy.deepcopy(m_cpu).to("tpu")
    cm = torch.compile(m, backend="tpu", dynamic=True)
    builds = None
    for b in (40, 7, 96, 33, 64, 2, 129):
        x = torch.randn(b, 24)
        torch.testing.assert_close(cm(x.to("tpu")).cpu(), m_cpu(x), rtol=1e-5, atol=1e-5)
        if builds is None:
            builds = _codegen_builds()  # what the first size built
    assert _codegen_builds() == builds
    s = stats()
    assert s["graphs"] == 1 and s["captures"] == 1 and s["generalized"] == 1 and s["bindings"] == 6
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0
    # sizes seen before, alternating: their fusion plans are kept (one per size), none is made again
    torch.tpu.synchronize()
    made = torch_tpu._C._fusion_stats()["plans_made"]
    for b in (40, 96, 40, 129, 96):
        x = torch.randn(b, 24)
        torch.testing.assert_close(cm(x.to("tpu")).cpu(), m_cpu(x), rtol=1e-5, atol=1e-5)
    assert torch_tpu._C._fusion_stats()["plans_made"] == made


def test_sizes_are_launch_parameters_gpt_forward_backward():
    """The small GPT's forward and backward graphs, batch and sequence length dynamic: one capture each
    for every (batch, length) in the range, and logits and gradients match eager tpu and CPU."""
    vocab = 96
    torch.manual_seed(0)
    m_cpu = GPT(vocab=vocab, d=64, heads=4, layers=2, seq=64)
    m = copy.deepcopy(m_cpu).to("tpu")
    m_eager = copy.deepcopy(m_cpu).to("tpu")
    cm = torch.compile(m, backend="tpu", dynamic=True)
    g = torch.Generator().manual_seed(1)
    builds = None
    sizes = ((2, 8), (3, 8), (4, 16), (5, 12), (2, 31), (6, 40), (3, 8))
    for b, t in sizes:
        x, y = torch.randint(0, vocab, (b, t), generator=g), torch.randint(0, vocab, (b, t), generator=g)
        for mod in (m, m_cpu, m_eager):
            mod.zero_grad()
        logits = cm(x.to("tpu"))
        _lm_loss(logits, y.to("tpu")).backward()
        logits_eager = m_eager(x.to("tpu"))
        _lm_loss(logits_eager, y.to("tpu")).backward()
        logits_cpu = m_cpu(x)
        _lm_loss(logits_cpu, y).backward()
        torch.testing.assert_close(logits.detach().cpu(), logits_eager.detach().cpu(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(logits.detach().cpu(), logits_cpu.detach(), rtol=1e-4, atol=1e-4)
        for (name, p_cpu), p, p_eager in zip(m_cpu.named_parameters(), m.parameters(), m_eager.parameters()):
            torch.testing.assert_close(p.grad.cpu(), p_eager.grad.cpu(), rtol=1e-4, atol=1e-6, msg=name)
            torch.testing.assert_close(p.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5, msg=name)
        if builds is None:
            builds = _codegen_builds()
    assert _codegen_builds() == builds  # no generated kernel built for a new size
    s = stats()
    graphs = s["graphs"]
    assert s["captures"] == 2 and s["generalized"] == 2  # forward and backward, captured once each
    assert s["bindings"] == 2 * (len(set(sizes)) - 1) and s["eager_runs"] == 0 and s["capture_failures"] == 0
    assert graphs <= 2  # Dynamo did not recompile for a size


def _eager_and_compiled(f, cf, seed, *args):
    """f and cf on args from the same seed, each with the generator's next draw after it (where the
    call left it)."""
    torch.manual_seed(seed)
    want = f(*args)
    want_next = torch.randn(5, device="tpu").cpu()
    torch.manual_seed(seed)
    got = cf(*args)
    got_next = torch.randn(5, device="tpu").cpu()
    return want, got, want_next, got_next


def test_dropout_graph_takes_sizes_at_launch():
    """Dropout reserves its random counters rounded up (no multiple of a size); the program computes
    each random op's offsets by the same rule from the bound sizes (tpurt_rng_reservation), so one
    capture serves every size, and at a size never captured it draws exactly what eager tpu draws from
    the same seed and leaves the generator where eager does."""
    def f(x):
        return F.dropout(x, 0.5, training=True) * 2 + 1

    cf = torch.compile(f, backend="tpu", dynamic=True)
    sizes = (64, 96, 130, 77, 3, 64)
    for i, n in enumerate(sizes):
        x = torch.ones(n, 32, device="tpu")
        want, got, want_next, got_next = _eager_and_compiled(f, cf, 7 + i, x)
        assert torch.equal(got.cpu(), want.cpu()), n
        assert torch.equal(got_next, want_next), n
        assert set(got.cpu().unique().tolist()) <= {1.0, 5.0}
        if n > 3:
            assert not torch.equal(cf(x).cpu(), cf(x).cpu())  # each call draws fresh counters
    s = stats()
    assert s["graphs"] == 1 and s["captures"] == 1 and s["size_probes"] == 2 and s["generalized"] == 1
    assert s["bindings"] == len(set(sizes)) - 1 and s["eager_runs"] == 0 and s["capture_failures"] == 0


def test_two_dropouts_at_a_new_size_draw_from_their_own_counters():
    """Two random ops in one graph: at a bound size their counter ranges follow each other as eager's
    do (no overlap: different masks), the bits equal eager tpu's from the same seed."""
    def f(x):
        return F.dropout(x, 0.5, training=True), F.dropout(x * 3, 0.5, training=True) + x.sum()

    cf = torch.compile(f, backend="tpu", dynamic=True)
    sizes = (40, 57, 203, 9)
    for i, n in enumerate(sizes):
        x = torch.ones(n, 8, device="tpu")
        want, got, want_next, got_next = _eager_and_compiled(f, cf, 11 + i, x)
        for a, b in zip(got, want):
            assert torch.equal(a.cpu(), b.cpu()), n
        assert torch.equal(got_next, want_next), n
        first, second = got[0].cpu() != 0, got[1].cpu() != n * 8
        assert not torch.equal(first, second), n  # the second op's counters are not the first's
    s = stats()
    assert s["graphs"] == 1 and s["captures"] == 1 and s["generalized"] == 1
    assert s["bindings"] == len(sizes) - 1 and s["eager_runs"] == 0


def test_gpt_training_with_dropout_takes_sizes_at_launch():
    """A training step of the small GPT with dropout (residual, embedding and attention), batch and
    sequence length dynamic: one capture per graph at the first size, every other size a binding, and
    logits, gradients and the generator's next draw exactly as eager tpu's from the same seed."""
    vocab = 96
    torch.manual_seed(0)
    m_base = GPT(vocab=vocab, d=32, heads=4, layers=2, seq=64, dropout=0.2)
    m = copy.deepcopy(m_base).to("tpu")
    m_eager = copy.deepcopy(m_base).to("tpu")
    cm = torch.compile(m, backend="tpu", dynamic=True)
    g = torch.Generator().manual_seed(1)
    sizes = ((2, 8), (3, 8), (4, 16), (5, 12), (2, 31), (3, 8))
    for b, t in sizes:
        x, y = torch.randint(0, vocab, (b, t), generator=g), torch.randint(0, vocab, (b, t), generator=g)
        out = []
        for mod in (cm, m_eager):
            (m if mod is cm else m_eager).zero_grad()
            torch.manual_seed(100 + b * t)
            logits = mod(x.to("tpu"))
            _lm_loss(logits, y.to("tpu")).backward()
            out.append((logits.detach().cpu(), torch.randn(4, device="tpu").cpu()))
        (lc, nc), (le, ne) = out
        assert torch.equal(lc, le) and torch.equal(nc, ne), (b, t)
        for (name, p), p_eager in zip(m.named_parameters(), m_eager.parameters()):
            assert torch.equal(p.grad.cpu(), p_eager.grad.cpu()), (b, t, name)
    s = stats()
    assert s["graphs"] <= 2 and s["captures"] == 2 and s["generalized"] == 2  # forward and backward
    assert s["bindings"] == 2 * (len(set(sizes)) - 1) and s["eager_runs"] == 0 and s["capture_failures"] == 0


def test_piecewise_size_keeps_a_program_per_size():
    """Min(n, 24) equals n at every size below 24: a program generalized from captures there was wrong
    at 30 (every element). A graph with a size that is no polynomial keeps a capture per size."""
    pos = torch.randn(24, 8)
    f = torch.compile(lambda x, p: x[:, :8] + p[: torch.sym_min(x.shape[0], 24)].sum(0), backend="tpu",
                      dynamic=True)
    for n in (5, 9, 30, 40):
        x = torch.randn(n, 10)
        torch.testing.assert_close(f(x.to("tpu"), pos.to("tpu")).cpu(), x[:, :8] + pos[: min(n, 24)].sum(0))
    s = stats()
    assert s["graphs"] == 1 and s["captures"] == 4
    assert s["generalized"] == 0 and s["bindings"] == 0 and s["eager_runs"] == 0


def test_size_outside_the_marked_range_recompiles():
    """mark_dynamic's bounds are Dynamo's guards: a size past them recompiles, as PyTorch says, and is
    right; sizes inside run the one program."""
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError
    torch.manual_seed(0)
    f = torch.compile(lambda a, w: (a @ w).relu().sum(-1), backend="tpu")
    w = torch.randn(8, 16)
    for n in (4, 9, 15, 16, 40):
        a = torch.randn(n, 8)
        at = a.to("tpu")
        if n <= 16:
            torch._dynamo.mark_dynamic(at, 0, min=2, max=16)
        else:  # marking it with a range it is outside of is Dynamo's error
            marked = a.to("tpu")
            torch._dynamo.mark_dynamic(marked, 0, min=2, max=16)
            with pytest.raises(ConstraintViolationError, match="not in range"):
                f(marked, w.to("tpu"))
        torch.testing.assert_close(f(at, w.to("tpu")).cpu(), (a @ w).relu().sum(-1), rtol=1e-5, atol=1e-5)
    s = stats()
    assert s["graphs"] == 2  # 40 fails the guard s0 <= 16: a recompile, not the program for the range
    assert s["captures"] == 2 and s["bindings"] == 3


def test_mark_dynamic_range():
    torch.manual_seed(0)
    f = torch.compile(lambda a, b: (a * b).sum(-1).softmax(0), backend="tpu")
    for n in (4, 9, 17):
        a, b = torch.randn(n, 8), torch.randn(8)
        at = a.to("tpu")
        torch._dynamo.mark_dynamic(at, 0, min=2, max=64)
        torch.testing.assert_close(f(at, b.to("tpu")).cpu(), (a * b).sum(-1).softmax(0))
    assert stats()["graphs"] == 1


def test_dropout_draws_new_numbers_each_call_and_follows_the_seed():
    def f(x):
        return F.dropout(x, 0.5, training=True) * 2 + 1

    x = torch.ones(64, 64, device="tpu")
    cf = torch.compile(f, backend="tpu")
    torch.manual_seed(123)
    first = [cf(x).cpu() for _ in range(3)]
    torch.manual_seed(123)
    again = [cf(x).cpu() for _ in range(3)]  # launches of the same program
    assert stats()["captures"] == 1 and stats()["launches"] == 6
    assert not torch.equal(first[1], first[2])  # each launch reserves fresh counters
    for a, b in zip(first, again):  # ... from the generator, so the seed decides them
        assert torch.equal(a, b)
    for a in first:  # kept elements scaled by 1 / (1 - p)
        assert set(a.unique().tolist()) == {1.0, 5.0}
        assert 0.4 < (a == 1.0).float().mean().item() < 0.6



def _factories(n, device):
    """Tensors made by factory ops alone (no tensor input), as Hugging Face models build positions and
    masks: arange, ones, full, a comparison mask expanded to a batch, cat and where of them."""
    pos = torch.arange(n, device=device)
    mask = (pos.unsqueeze(0).unsqueeze(1).unsqueeze(2) <= pos.unsqueeze(0).unsqueeze(1).unsqueeze(3))
    ones = torch.ones(n, device=device) * 2
    grid = torch.full((2, n), 3.0, device=device)
    picked = torch.where(pos % 3 == 0, pos.float(), ones)
    return mask.expand(2, -1, n, n), torch.cat([picked, ones, grid[1]]), grid.expand(3, 2, n).sum(0)


def test_graph_without_tensor_inputs_runs_as_a_program():
    """A graph whose tensors all come from factory ops has no tensor input to take a device from: it is
    captured on the device its values are on, and runs as a program (Whisper's positions and masks)."""
    cf = torch.compile(lambda: _factories(7, "tpu"), backend="tpu")
    want = _factories(7, "cpu")
    eager = _factories(7, "tpu")
    for _ in range(3):
        got = cf()
        for g, w, e in zip(got, want, eager):
            assert g.device.type == "tpu" and g.dtype == w.dtype
            assert torch.equal(g.cpu(), w) and torch.equal(g.cpu(), e.cpu())
    s = stats()
    assert s["graphs"] == 1 and s["captures"] == 1 and s["launches"] == 3
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0


def test_graph_with_only_a_dynamic_int_takes_it_at_launch():
    """`torch.arange(n)` with n dynamic: the graph's only input is a SymInt. One capture (and two probes)
    makes a program that takes n at launch; a new n inside the range is a binding, with no capture and
    no recompile. (A factory's contiguous strides are Max(1, n), which is n in n's range.)"""
    cf = torch.compile(_factories, backend="tpu", dynamic=True)
    sizes = (8, 13, 40, 5, 13)
    for n in sizes:
        got = cf(n, "tpu")
        for g, w, e in zip(got, _factories(n, "cpu"), _factories(n, "tpu")):
            assert g.device.type == "tpu" and g.shape == w.shape, n
            assert torch.equal(g.cpu(), w) and torch.equal(g.cpu(), e.cpu()), n
    s = stats()
    assert s["graphs"] == 1 and s["captures"] == 1 and s["size_probes"] == 2 and s["generalized"] == 1
    assert s["bindings"] == len(set(sizes)) - 1 and s["cache_hits"] == 1 and s["launches"] == len(sizes)
    assert s["eager_runs"] == 0 and s["capture_failures"] == 0


def test_op_seen_eagerly_before_still_takes_sizes_at_launch():
    """cat's first call of a signature runs PyTorch's structured wrapper, which hands the kernel its dim
    wrapped (-2 -> 2); later calls of the signature give the kernel that same dim (MetaEntry's
    wrapper_ints). Before, a size already run eagerly recorded -2 where the probes recorded 2, and the
    graph kept a capture per size (Whisper's KV cache: cat of an empty 1-D tensor and the keys)."""
    def f(x):
        k = x.view(x.shape[0], x.shape[1], 4, 16).transpose(1, 2)
        return torch.cat([torch.tensor([], dtype=k.dtype, device=k.device), k], dim=-2) * 2

    x7 = torch.randn(2, 7, 64)
    f(x7.to("tpu"))  # this size's signatures are now cached
    cf = torch.compile(f, backend="tpu", dynamic=True)
    for n in (7, 9, 12):
        x = x7 if n == 7 else torch.randn(2, n, 64)
        assert torch.equal(cf(x.to("tpu")).cpu(), f(x))
    s = stats()
    assert s["captures"] == 1 and s["generalized"] == 1 and s["bindings"] == 2 and s["eager_runs"] == 0


def test_random_factories_without_inputs_follow_the_seed():
    """Random factory ops in a graph without inputs draw what eager tpu draws from the same seed, fresh
    numbers each call, and leave the generator where eager does."""
    def f():
        return torch.randn(5, device="tpu") * 2, torch.rand(3, 3, device="tpu")

    cf = torch.compile(f, backend="tpu")
    for seed in (3, 4):
        want, got, want_next, got_next = _eager_and_compiled(f, cf, seed)
        for g, w in zip(got, want):
            assert torch.equal(g.cpu(), w.cpu())
        assert torch.equal(got_next, want_next)
    assert not torch.equal(cf()[0].cpu(), cf()[0].cpu())
    s = stats()
    assert s["captures"] == 1 and s["eager_runs"] == 0 and s["capture_failures"] == 0


def test_graph_without_tensor_inputs_takes_a_changing_float_on_the_device():
    """A float that changes becomes a CPU scalar input; with no tpu tensor input it still goes to the
    device the graph's values are on, so new values are launches, not captures."""
    cf = torch.compile(lambda p: torch.full((3, 4), 1.0, device="tpu") * p + torch.arange(4, device="tpu"),
                       backend="tpu")
    for p in (0.5, 0.25, 0.125, 2.0):
        torch.testing.assert_close(cf(p).cpu(), torch.full((3, 4), 1.0) * p + torch.arange(4))
    s = stats()
    assert s["graphs"] == 2 and s["captures"] == 2 and s["launches"] == 4 and s["eager_runs"] == 0


@torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True)
def test_graph_without_tensor_inputs_that_reads_device_data_runs_eagerly():
    cf = torch.compile(lambda: torch.nonzero(torch.arange(6, device="tpu") % 2).float().sum(), backend="tpu")
    for _ in range(2):
        assert cf().item() == 9.0
    s = stats()
    assert s["capture_failures"] >= 1 and s["eager_runs"] >= 2

def test_input_mutation_is_applied():
    def f(x, y):
        x.add_(y)
        return x * 2

    cf = torch.compile(f, backend="tpu")
    x = torch.zeros(5, device="tpu")
    y = torch.arange(5.0, device="tpu")
    for i in range(1, 4):
        out = cf(x, y)
        torch.testing.assert_close(x.cpu(), torch.arange(5.0) * i)
        torch.testing.assert_close(out.cpu(), torch.arange(5.0) * i * 2)


def _foreach_graphs(monkeypatch):
    """Records, per compiled graph, how many ops _foreach_in_place changed and the copies left."""
    seen = []
    orig = _compile._foreach_in_place

    def spy(gm):
        changed = orig(gm)
        copies = sum(1 for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default)
        seen.append((changed, copies))
        return changed
    monkeypatch.setattr(_compile, "_foreach_in_place", spy)
    return seen


@pytest.fixture
def no_aot_cache():
    """A graph loaded from AOTAutograd's cache on disk (an earlier test or run) is not compiled again:
    tests that watch our graph passes run with that cache off."""
    with torch._functorch.config.patch(enable_autograd_cache=False):
        yield


def test_compiled_adamw_updates_its_state_in_place_and_matches_eager(monkeypatch, no_aot_cache):
    """AOTAutograd's functional optimizer graph becomes in-place `_foreach_` ops on the parameters and
    states (no copies back left), with every value equal to the eager step on the same device."""
    seen = _foreach_graphs(monkeypatch)
    torch.manual_seed(0)
    m_ref = mlp().to("tpu")
    m = copy.deepcopy(m_ref)
    opt_ref = torch.optim.AdamW(m_ref.parameters(), lr=1e-2, capturable=True)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, capturable=True)
    step = torch.compile(opt.step, backend="tpu")
    for _ in range(4):
        x = torch.randn(8, 24).to("tpu")
        for mm, oo, st in ((m_ref, opt_ref, opt_ref.step), (m, opt, step)):
            oo.zero_grad()
            mm(x).square().mean().backward()
            st()
    for p_ref, p in zip(m_ref.parameters(), m.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach().cpu(), rtol=1e-6, atol=1e-7)
    st, st_ref = opt.state_dict()["state"], opt_ref.state_dict()["state"]
    assert sorted(st) == sorted(st_ref) and len(st) == len(list(m.parameters()))
    for i in st:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(st[i][k].cpu(), st_ref[i][k].cpu(), rtol=1e-6, atol=1e-7)
    assert any(changed > 0 and copies == 0 for changed, copies in seen), seen


def test_foreach_in_place_keeps_old_values_that_are_read_later(monkeypatch, no_aot_cache):
    """An op whose first list is read again later keeps its own output: y holds 2 * the old xs while
    xs become old + 1, as on CPU."""
    seen = _foreach_graphs(monkeypatch)

    def f(xs):
        y = torch._foreach_mul(xs, 2.0)
        torch._foreach_add_(xs, 1.0)
        return y

    cf = torch.compile(f, backend="tpu")
    base = [torch.randn(5), torch.randn(3, 2)]
    xs_cpu = [b.clone() for b in base]
    want = f(xs_cpu)
    xs = [b.to("tpu") for b in base]
    got = cf(xs)
    for g_, w in zip(got, want):
        torch.testing.assert_close(g_.cpu(), w)
    for x, w in zip(xs, xs_cpu):
        torch.testing.assert_close(x.cpu(), w)
    assert seen and seen[0][0] == 1, seen  # the add only: the mul's inputs are read after it


@torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True)
def test_graph_that_reads_device_data_runs_eagerly():
    def f(x):
        return torch.nonzero(x > 0).float().sum() + x.sum()

    cf = torch.compile(f, backend="tpu")
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    for _ in range(2):
        assert cf(x.to("tpu")).item() == pytest.approx(f(x).item())
    s = stats()
    assert s["capture_failures"] >= 1 and s["eager_runs"] >= 2


def test_default_torch_compile_with_tpu_inputs_uses_our_backend():
    torch.manual_seed(0)
    m_cpu = mlp()
    m = copy.deepcopy(m_cpu).to("tpu")
    x = torch.randn(4, 24)
    out = torch.compile(m)(x.to("tpu"))  # Inductor by default: routed to ours for tpu inputs
    torch.testing.assert_close(out.cpu(), m_cpu(x), rtol=1e-5, atol=1e-6)
    assert stats()["graphs"] == 1 and stats()["launches"] == 1


def test_dynamo_device_interface_is_ours():
    from torch._dynamo.device_interface import get_interface_for_device
    torch.compile(lambda x: x + 1, backend="tpu")(torch.ones(2, device="tpu"))
    iface = get_interface_for_device("tpu")
    assert iface.is_dtype_supported(torch.float64) and iface.is_dtype_supported(torch.float16)
    assert iface.device_count() == torch.tpu.device_count()


def test_debug_mode_runs_graphs_eagerly():
    f = torch.compile(lambda x: (x * 3).relu(), backend="tpu")
    x = torch.tensor([-1.0, 2.0])
    with torch_tpu.eager_mode("debug"):
        assert f(x.to("tpu")).cpu().tolist() == [0.0, 6.0]
    assert stats()["eager_runs"] == 1 and stats()["launches"] == 0


def test_arena_reuses_memory_of_dead_intermediates():
    def f(x):
        for _ in range(8):
            x = torch.sin(x) @ torch.ones(256, 256, device=x.device) / 256
        return x

    cf = torch.compile(f, backend="tpu")
    x = torch.randn(256, 256)
    torch.testing.assert_close(cf(x.to("tpu")).cpu(), f(x), rtol=1e-4, atol=1e-5)
    info = _compile._get_cache_stats().per_entry_stats[0].program.info()
    one = 256 * 256 * 4
    # sixteen 256 KiB intermediates (sin, matmul, ones, div) alive a few at a time
    assert 0 < info["arena_bytes"] <= 6 * one, info
    assert info["num_kernels"] >= 16


def test_torchtpu_mark_dynamic_spelling():
    f = torch.compile(lambda a: (a * 2).sum(-1), backend="tpu")
    for n in (3, 7, 12):
        a = torch.randn(n, 5)
        at = a.to("tpu")
        torch_tpu.mark_dynamic(at, 0, 2, 32)
        torch.testing.assert_close(f(at).cpu(), (a * 2).sum(-1))
    assert stats()["graphs"] == 1


def test_python_scalar_that_changes_is_a_program_input():
    """Dynamo makes a float that changes into a CPU 0-dim graph input; the program takes it as a tpu
    scalar, so new values are new data: no capture and no CPU work per value."""
    x = torch.randn(200, 200)
    xt = x.to("tpu")
    g = torch.compile(lambda x, s: (x * s + 1).relu(), backend="tpu")
    for s in (0.5, 0.25, 0.125, 2.0, 0.25):
        torch.testing.assert_close(g(xt, s).cpu(), (x * s + 1).relu())
    st = stats()
    # PyTorch specialises the first value, then recompiles once with the float dynamic: two graphs, two
    # programs, and every later value is a launch
    assert st["graphs"] == 2 and st["captures"] == 2 and st["eager_runs"] == 0 and st["launches"] == 5


def test_learning_rate_in_a_tensor_changes_without_recompiling():
    """PyTorch's advice for compiled optimizers with a schedule: lr as a tensor. Changing it each step
    neither recompiles nor recaptures, and the steps match CPU."""
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    losses = {}
    for dev in ("cpu", "tpu"):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=torch.tensor(0.01, device=dev), capturable=dev == "tpu")
        step = torch.compile(opt.step, backend="tpu") if dev == "tpu" else opt.step
        xs, ys = x.to(dev), y.to(dev)
        losses[dev] = []
        for i in range(4):
            opt.param_groups[0]["lr"].fill_(0.01 / (i + 1))
            opt.zero_grad()
            loss = ((m(xs) - ys) ** 2).mean()
            loss.backward()
            step()
            losses[dev].append(loss.item())
    torch.testing.assert_close(losses["tpu"], losses["cpu"], rtol=1e-5, atol=1e-6)
    st = stats()
    assert st["graphs"] == 1 and st["captures"] == 1 and st["launches"] == 4


def test_program_signature_keys_what_kernels_depend_on():
    """_C._program_signature: one key per argument layout, dtype, alias pattern and CPU-scalar value,
    the tpu tensors in argument order; None for arguments a program cannot take."""
    sig = torch_tpu._C._program_signature
    x = torch.randn(4, 6, device="tpu")
    y = torch.randn(4, 6, device="tpu")
    base = [x, y, 2, 0.5, True, None, "s", torch.float32, torch.device("tpu", 0), torch.tensor(3.0)]
    key, tensors = sig(base)
    assert isinstance(key, bytes) and len(tensors) == 2 and tensors[0] is x and tensors[1] is y
    assert sig(list(base))[0] == key  # same arguments, same key
    assert sig([torch.randn(4, 6, device="tpu"), torch.randn(4, 6, device="tpu")] + base[2:])[0] == key
    changed = [
        [x.t(), y] + base[2:],                       # strides
        [x[1:], y] + base[2:],                       # sizes and offset
        [x.double(), y] + base[2:],                  # dtype
        [x, x] + base[2:],                           # one storage twice
        [x, y, 3] + base[3:],                        # an int
        [x, y, 2, 0.25] + base[4:],                  # a float
        [x, y, 2, 0.5, False] + base[5:],            # a bool (not the int 0)
        [x, y, 2, 0.5, True, None, "t"] + base[7:],  # a string
        [x, y, 2, 0.5, True, None, "s", torch.float16] + base[8:],
        base[:-1] + [torch.tensor(4.0)],             # a CPU scalar's value
        base[:-1] + [torch.tensor(3, dtype=torch.int64)],
        base[:2] + [2 ** 70] + base[3:],             # an int beyond 64 bits
    ]
    keys = {sig(a)[0] for a in changed}
    assert key not in keys and len(keys) == len(changed)
    assert sig([x, torch.randn(2)]) is None      # a CPU tensor of more than one element
    assert sig([x, object()]) is None            # an argument of another kind
    assert sig([x, torch.randn(2, 2, device="meta")]) is None  # another device


RECOMPILES = r"""
import torch, torch_tpu
from torch_tpu import _compile
f = torch.compile(lambda x: (x * 2).sum(), backend="tpu")
vals = []
for n in (4, 4, 5, 6, 6, 7):
    y = f(torch.ones(n, device="tpu"))
    vals.append(y.item())  # reading a result: never a compile
    print("step", n, y)     # printing one: never a compile
print("VALS", vals, _compile.compile_stats()["graphs"])
"""


def test_recompiles_are_logged_with_the_failed_guard_and_reads_never_compile():
    """TORCH_LOGS=recompiles (PyTorch's switch) names the guard that failed; the backend's graph count
    counts each compile; .item() and printing around the compiled call compile nothing."""
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", RECOMPILES], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TORCH_LOGS="recompiles"))
    assert out.returncode == 0, out.stderr[-2000:]
    vals_line = [ln for ln in out.stdout.splitlines() if ln.startswith("VALS")][-1]
    assert vals_line == "VALS [8.0, 8.0, 10.0, 12.0, 12.0, 14.0] 2"  # 4, then 5 recompiles as dynamic
    assert out.stderr.count("Recompiling function") == 1
    assert "tensor 'x' size mismatch at index 0. expected 4, actual 5" in out.stderr


OPTIMIZER_STEP = """
import sys, torch, torch_tpu
from torch import nn
torch.manual_seed(0)
ps = {d: [nn.Parameter(torch.randn(8, 4).to(d)) for _ in range(2)] for d in ("tpu", "cpu")}
for a, b in zip(ps["tpu"], ps["cpu"]):
    b.data.copy_(a.detach().cpu())
opts = {d: torch.optim.AdamW(ps[d], lr=1e-2, capturable=d == "tpu") for d in ps}
step = torch.compile(opts["tpu"].step, backend="tpu")
for i in range(3):
    for d in ps:
        for p in ps[d]:
            p.grad = torch.full_like(p, 0.1 * (i + 1))
    step()
    opts["cpu"].step()
print("SAME", all(torch.allclose(a.detach().cpu(), b.detach(), atol=1e-6) for a, b in zip(ps["tpu"], ps["cpu"])))
print("INDUCTOR", [m for m in ("torch._inductor.cudagraph_trees", "torch._inductor.lowering") if m in sys.modules])
"""


def test_compiled_optimizer_step_does_not_load_inductor():
    """Dynamo asks `_is_static_for_cudagraphs` of every gradient when it traces an optimizer, and torch
    2.13's function imported Inductor's cudagraph trees (with compile_fx and lowering: about 0.3 s of a
    cold first step) before finding the tensor is not CUDA; ours answers for non-CUDA tensors without
    the import. A fresh process compiles a tpu AdamW step, matches CPU's, and never loads Inductor."""
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", OPTIMIZER_STEP], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "SAME True" in out.stdout and "INDUCTOR []" in out.stdout, out.stdout + out.stderr[-2000:]


def test_compiled_adamw_updates_each_parameter_in_one_fused_pass(no_aot_cache):
    """A compiled AdamW step is op-major (each `_foreach_` op over every parameter in turn); the
    program's fusion plan gathers each large parameter's update (weight decay, both moments,
    denominator, step: 10 ops) into one chain, running the step-count scalars it reads first
    (runtime/compiler/fuse_plan.c, "Programs"). Parameters, states and step counts equal the eager
    step on tpu and PyTorch CPU's after several steps; params of one shape stay separate chains."""
    torch.manual_seed(0)
    shapes = [(256, 96), (256, 96), (96, 256), (40000,), (7, 3)]  # 3 of >= 16384 elements share a shape
    base = [torch.randn(s) * 0.1 for s in shapes]
    grads = [[torch.randn(s) for s in shapes] for _ in range(3)]

    def make(dev, capturable):
        ps = [nn.Parameter(b.clone().to(dev)) for b in base]
        return ps, torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05, capturable=capturable)

    (p_cpu, o_cpu), (p_eager, o_eager), (p_tpu, o_tpu) = make("cpu", False), make("tpu", True), make("tpu", True)
    step = torch.compile(o_tpu.step, backend="tpu")
    for k, gs in enumerate(grads):
        for ps, dev in ((p_cpu, "cpu"), (p_eager, "tpu"), (p_tpu, "tpu")):
            for p, g in zip(ps, gs):
                p.grad = g.to(dev)
        o_cpu.step()
        o_eager.step()
        torch.tpu.synchronize()
        torch_tpu._C._fusion_stats_reset()
        step()
        torch.tpu.synchronize()
        fs = torch_tpu._C._fusion_stats()
        if k > 0:  # the first call also compiles
            big = sum(1 for s in shapes if torch.Size(s).numel() >= 16384)
            # every large op fused (11 per parameter), one chain per parameter (the arena plan's reuse of
            # a dead temporary's bytes orders nothing when the chain keeps the value in its tiles); the
            # first-op rule made 11 chains of 43 ops here
            assert fs["fused_ops"] >= 11 * big and fs["fused_kernels"] == big, fs
    assert stats()["launches"] >= 2
    for a, b, c in zip(p_tpu, p_eager, p_cpu):
        torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(a.detach().cpu(), c.detach(), rtol=1e-5, atol=1e-6)
    for i in range(len(shapes)):
        s_tpu, s_eager, s_cpu = o_tpu.state[p_tpu[i]], o_eager.state[p_eager[i]], o_cpu.state[p_cpu[i]]
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(s_tpu[key].cpu(), s_eager[key].cpu(), rtol=1e-6, atol=1e-7)
            torch.testing.assert_close(s_tpu[key].cpu(), s_cpu[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_activation_checkpointing_under_compile(dropout):
    """torch.utils.checkpoint inside a compiled model (TorchTitan's activation checkpointing): AOTAutograd
    wraps the recomputed region's random ops (SDPA is one, for its dropout_p) in run_and_save_rng_state /
    run_with_rng_state, which torch 2.13 implements for cpu, cuda, hpu and xpu only; with tpu added
    (_compile._install_rng_state_ops) the backward recomputes the forward's dropout masks. Gradients equal
    eager tpu's from the same seed, and CPU's without dropout. With dropout the graphs run eagerly (they
    hold the generator state as a CPU tensor); without, the only random-tagged op is SDPA, whose kernel
    draws nothing, so its wrappers are removed and both graphs are programs (_without_idle_rng_state)."""
    import copy
    from torch.utils.checkpoint import checkpoint
    import test_models as M

    class Ckpt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = M.Block(64, 4, dropout), M.Block(64, 4, dropout)

        def forward(self, x):
            x = checkpoint(self.a, x, use_reentrant=False)
            return checkpoint(self.b, x, use_reentrant=False).square().mean()

    torch.manual_seed(0)
    cpu = Ckpt()
    eager, comp = copy.deepcopy(cpu).to("tpu"), copy.deepcopy(cpu).to("tpu")
    x = torch.randn(2, 8, 64)
    run = torch.compile(comp, backend="tpu")
    for step in range(2):
        torch.manual_seed(10 + step)
        eager(x.to("tpu")).backward()
        after_eager = torch.randn(8, device="tpu").cpu()
        torch.manual_seed(10 + step)
        run(x.to("tpu")).backward()
        # the generator is left where eager leaves it (the recomputation's draws are given back)
        assert torch.equal(torch.randn(8, device="tpu").cpu(), after_eager)
        if dropout == 0.0:
            cpu(x).backward()
    for (name, p), q, c in zip(eager.named_parameters(), comp.parameters(), cpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad.cpu(), rtol=1e-4, atol=1e-6, msg=name)
        if dropout == 0.0:
            torch.testing.assert_close(q.grad.cpu(), c.grad, rtol=1e-4, atol=1e-6, msg=name)
    s = stats()
    assert s["capture_failures"] == 0, s
    if dropout == 0.0:
        assert s["eager_runs"] == 0 and s["launches"] >= 4, s
    else:
        assert s["eager_runs"] > 0, s


def _frozen_during_compile():
    """Runs a small model's first compiled call; returns the gc freeze counts Dynamo's start
    callback (registered after ours, so run after it) and our capture saw."""
    from torch._dynamo.callback import callback_handler
    seen = []

    def look(_args):
        seen.append(("dynamo", gc.get_freeze_count()))
    callback_handler.register_start_callback(look)
    capture = _compile._GraphRunner._capture_hidden

    def capture_looking(self, *a):
        seen.append(("capture", gc.get_freeze_count()))
        return capture(self, *a)
    try:
        _compile._GraphRunner._capture_hidden = capture_looking
        torch.manual_seed(0)
        m_cpu = mlp()
        cm = torch.compile(copy.deepcopy(m_cpu).to("tpu"), backend="tpu")
        x = torch.randn(8, 24)
        torch.testing.assert_close(cm(x.to("tpu")).cpu(), m_cpu(x), rtol=1e-5, atol=1e-6)
    finally:
        _compile._GraphRunner._capture_hidden = capture
        if look in callback_handler.start_callbacks:
            callback_handler.remove_start_callback(look)
    return seen


def test_compile_hides_the_old_heap_from_gc_and_shows_it_again():
    assert gc.isenabled() and gc.get_freeze_count() == 0
    # a compile before this test (or torch_tpu's registration) installed our callbacks; the fixture's
    # torch._dynamo.reset() cleared them, and the backend puts them back at its first graph
    seen = _frozen_during_compile()
    kinds = {k for k, _ in seen}
    assert "capture" in kinds
    assert all(n > 0 for k, n in seen if k == "capture"), seen
    assert gc.get_freeze_count() == 0 and gc.isenabled()  # shown again after the window
    from torch._dynamo.callback import callback_handler
    assert _compile._old_heap_hidden.enter in callback_handler.start_callbacks
    # the next compile's Dynamo window is hidden too (the callbacks are installed now)
    torch._dynamo.reset()
    _compile._old_heap_hidden.install()
    seen = _frozen_during_compile()
    dynamo = [n for k, n in seen if k == "dynamo"]
    assert dynamo and all(n > 0 for n in dynamo), seen
    assert gc.get_freeze_count() == 0


def test_compile_leaves_a_frozen_heap_and_a_disabled_gc_as_it_found_them():
    gc.freeze()  # the process froze its heap itself (a server after start-up): not ours to undo
    try:
        frozen = gc.get_freeze_count()
        _frozen_during_compile()
        # still frozen (objects freed by their reference counts leave the permanent generation)
        assert gc.get_freeze_count() > frozen // 2
    finally:
        gc.unfreeze()
    torch._dynamo.reset()
    gc.disable()
    try:
        seen = _frozen_during_compile()
        assert all(n == 0 for _, n in seen), seen
        assert not gc.isenabled()
    finally:
        gc.enable()
    # a cycle among the hidden objects is still collected after the window
    import weakref

    class Node:
        pass
    a, b = Node(), Node()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    del a, b
    torch._dynamo.reset()
    _frozen_during_compile()
    gc.collect()
    assert ref() is None
