"""DeferAndFuse (runtime/exec/defer/, rules in runtime/compiler/fuse_plan.c): ops are recorded, chains of elementwise ops run as one kernel at
sync points, and every result is exactly Strict's.

Kernel counts come from torch_tpu._C._fusion_stats() (kernels launched at materialization: one per fused
chain plus one per unfused op); the rules that decide them are written at the top of runtime/compiler/fuse_plan.c.
"""
import contextlib
import copy

import pytest
import torch
from torch import nn

import test_models as tm

pytestmark = pytest.mark.tpu


def _c():
    from torch_tpu import _C
    return _C


@contextlib.contextmanager
def _mode(mode):
    """Runs the block in `mode` (0 strict, 2 defer_and_fuse), synchronized on both sides."""
    c = _c()
    prev = c._get_exec_mode()
    c._synchronize(-1)
    c._set_exec_mode(mode)
    try:
        yield
    finally:
        c._synchronize(-1)
        c._set_exec_mode(prev)


STRICT, DEFER = 0, 2


@pytest.fixture(autouse=True)
def _fusion_on(device, tmp_path, monkeypatch):
    if device != "tpu":
        pytest.skip("DeferAndFuse is a tpu mode")
    monkeypatch.setenv("TORCH_TPU_FUSE_CACHE_DIR", str(tmp_path / "fused"))
    _c()._fusion_set_enabled(True)
    yield
    _c()._fusion_set_enabled(True)


def _stats_delta(fn):
    c = _c()
    c._synchronize(-1)
    c._fusion_stats_reset()
    out = fn()
    c._synchronize(-1)
    return out, c._fusion_stats()


def chain10(x, b):
    y = x * 2.0
    y = y + b
    y = y.exp()
    y = y - 1.0
    y = y / 3.0
    y = y.sigmoid()
    y = y * x
    y = y.tanh()
    y = y + 0.5
    return y.relu()


def test_mode_is_available():
    with _mode(DEFER):
        assert _c()._get_exec_mode() == DEFER


def test_ten_op_chain_is_one_kernel():
    x = torch.randn(4096)
    b = torch.randn(4096)
    xd, bd = x.to("tpu"), b.to("tpu")
    with _mode(STRICT):
        strict = chain10(xd, bd).cpu()
    with _mode(DEFER):
        out, st = _stats_delta(lambda: chain10(xd, bd).cpu())
    assert st["ops_recorded"] == 10
    assert st["kernels_launched"] == 1, st
    assert st["fused_kernels"] == 1 and st["fused_ops"] == 10
    assert st["stores_skipped"] == 9  # every intermediate died before the flush
    assert torch.equal(out, strict)
    torch.testing.assert_close(out, chain10(x, b), rtol=1e-5, atol=1e-6)


def test_broadcast_and_noncontiguous_chain():
    x = torch.randn(64, 48)
    b = torch.randn(48)
    xd = x.to("tpu").t()  # non-contiguous (48, 64)
    bd = b.to("tpu")[:, None]  # broadcast along the rows
    f = lambda t, c: ((t * c).sin() + c).abs().sqrt()
    with _mode(STRICT):
        strict = f(xd, bd).cpu()
    with _mode(DEFER):
        out, st = _stats_delta(lambda: f(xd, bd).cpu())
    assert st["kernels_launched"] == 1, st
    torch.testing.assert_close(out, strict, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(out, f(x.t(), b[:, None]), rtol=1e-5, atol=1e-6)


def test_live_intermediates_are_written():
    x = torch.randn(1000).to("tpu")
    with _mode(DEFER):
        def run():
            a = x + 1
            b2 = a * 3
            c = b2.exp()
            return a, b2, c
        (a, b2, c), st = _stats_delta(lambda: tuple(t.cpu() for t in run()))
    assert st["kernels_launched"] == 1 and st["stores_skipped"] == 0
    xc = x.cpu()
    assert torch.equal(a, xc + 1)
    assert torch.equal(b2, (xc + 1) * 3)
    torch.testing.assert_close(c, ((xc + 1) * 3).exp())


def test_dtypes_and_promotion_match_strict():
    for dt in (torch.float16, torch.bfloat16, torch.float64, torch.int32):
        x = (torch.randn(777) * 4).to(dt).to("tpu")
        y = (torch.randn(777) * 4).to(dt).to("tpu")
        def f():
            z = x * y + x
            z = z - 2
            z = torch.maximum(z, y)
            return (z * 0.5).abs()  # int -> float by a float scalar
        with _mode(STRICT):
            strict = f().cpu()
        with _mode(DEFER):
            out, st = _stats_delta(lambda: f().cpu())
        assert st["kernels_launched"] == 1, (dt, st)
        assert out.dtype == strict.dtype and torch.equal(out, strict), dt


def test_in_place_ops_match_strict():
    base = torch.randn(512)
    def f():
        x = base.to("tpu")
        y = x * 2
        x.add_(1)          # overwrite an input the chain already read
        x.mul_(y)          # in place, reads the fused value
        z = x.exp()
        y.sub_(z)
        return x.cpu(), y.cpu(), z.cpu()
    with _mode(STRICT):
        strict = f()
    with _mode(DEFER):
        out, st = _stats_delta(f)
    for a, b in zip(out, strict):
        assert torch.equal(a, b)
    assert st["fused_kernels"] >= 1


def test_views_and_aliasing_match_strict():
    base = torch.randn(16, 16)
    def f():
        x = base.to("tpu")
        v = x[2:10]                 # a view of x
        w = x.view(-1)[8:40]        # overlaps v differently: must cut, not fuse wrongly
        a = v * 2
        v.add_(a)                   # write through the view
        b = w + 1                   # reads memory v just wrote
        w.mul_(b)
        x.transpose(0, 1).sub_(0.25)   # a transposed view of the same storage
        return x.cpu(), a.cpu(), b.cpu()
    with _mode(STRICT):
        strict = f()
    with _mode(DEFER):
        out, _ = _stats_delta(f)
    for a, b in zip(out, strict):
        assert torch.equal(a, b)


def test_random_ops_match_strict():
    def f():
        torch.tpu.manual_seed(1234) if hasattr(torch, "tpu") and hasattr(torch.tpu, "manual_seed") \
            else torch.manual_seed(1234)
        x = torch.ones(4096, device="tpu")
        r = torch.rand(4096, device="tpu")
        y = (x * 3 + r).exp()
        d = torch.nn.functional.dropout(y, 0.3, training=True)
        return (d * 2 - r).cpu()
    with _mode(STRICT):
        strict = f()
    with _mode(DEFER):
        out, _ = _stats_delta(f)
    assert torch.equal(out, strict)


def test_sync_points_flush():
    x = torch.randn(100).to("tpu")
    with _mode(DEFER):
        y = x * 2 + 1
        assert float((y.sum()).item()) == pytest.approx(float((x.cpu() * 2 + 1).sum()), rel=1e-5)
        z = y.exp()
        torch.tpu.synchronize() if hasattr(torch, "tpu") else _c()._synchronize(-1)
        assert torch.equal(z.cpu(), (x * 2 + 1).exp().cpu())
        print(z[:3])  # printing is a sync point too


def test_kernel_error_surfaces_at_sync():
    a = torch.arange(10, dtype=torch.int64).to("tpu")
    zero = torch.zeros(10, dtype=torch.int64).to("tpu")
    with _mode(DEFER):
        with pytest.raises(Exception, match="ZeroDivision|division by zero"):
            ((a + 1) // zero * 2).cpu()


def test_autograd_matches_strict():
    torch.manual_seed(0)
    w0 = torch.randn(64, 32)
    x0 = torch.randn(8, 64)
    def f():
        w = w0.to("tpu").requires_grad_()
        x = x0.to("tpu")
        h = torch.tanh(x @ w) * 0.5 + 0.1
        loss = (torch.nn.functional.gelu(h) * h.sigmoid()).sum()
        loss.backward()
        return loss.item(), w.grad.cpu()
    with _mode(STRICT):
        ls, gs = f()
    with _mode(DEFER):
        ld, gd = f()
    assert ld == ls
    assert torch.equal(gd, gs)


def test_cache_hits_on_repeat_and_disk(tmp_path):
    """The generated-kernel cache (runtime/compiler/): a chain's kernel is built once, in the background
    after its second sight; then it is answered from memory, also for the same chain over another size
    (sizes are arguments); once the memory table is forgotten it is loaded from disk, not built again."""
    x, b = torch.randn(2048).to("tpu"), torch.randn(2048).to("tpu")
    y, z = torch.randn(300).to("tpu"), torch.randn(300).to("tpu")
    c = _c()
    c._fusion_set_codegen(True)
    with _mode(DEFER):
        c._fusion_cache_clear()
        _, first = _stats_delta(lambda: chain10(x, b).cpu())  # nothing in memory or on disk
        _, second = _stats_delta(lambda: chain10(x, b).cpu())  # seen again: a build is queued
        c._fusion_wait_builds()
        built = c._fusion_stats()
        _, memory = _stats_delta(lambda: chain10(x, b).cpu())
        _, other_size = _stats_delta(lambda: chain10(y, z).cpu())
        c._fusion_cache_clear()  # memory forgotten: the disk has it
        _, disk = _stats_delta(lambda: chain10(x, b).cpu())
        c._fusion_wait_builds()
        after = c._fusion_stats()
    keys = ("codegen_lookups", "codegen_memory_hits", "codegen_disk_loads", "codegen_builds",
            "codegen_build_failures", "codegen_runs")
    counts = lambda st: tuple(st[k] for k in keys)  # noqa: E731
    assert counts(first) == (1, 0, 0, 0, 0, 0), first
    assert counts(second) == (1, 0, 0, 0, 0, 0), second
    assert counts(built) == (1, 0, 0, 1, 0, 0), built
    assert counts(memory) == (1, 1, 0, 0, 0, 1), memory
    assert counts(other_size) == (1, 1, 0, 0, 0, 1), other_size
    assert counts(disk) == (1, 0, 1, 0, 0, 1), disk
    assert after["codegen_builds"] == 0 and after["codegen_disk_rejects"] == 0
    assert all(st["kernels_launched"] == 1 for st in (first, second, memory, other_size, disk))
    # one kernel on disk (its library and its record), for both sizes
    assert sorted(p.suffix for p in (tmp_path / "fused").iterdir()) == [".kernel", ".so"]


def test_fusion_off_still_defers_and_matches():
    x = torch.randn(1000).to("tpu")
    b = torch.randn(1000).to("tpu")
    with _mode(DEFER):
        fused = chain10(x, b).cpu()
        _c()._fusion_set_enabled(False)
        plain, st = _stats_delta(lambda: chain10(x, b).cpu())
    assert st["kernels_launched"] == 10 and st["fused_kernels"] == 0
    assert torch.equal(fused, plain)


# ------------------------------------------------------------ models: DeferAndFuse vs Strict

def _train_device(make_model, make_batch, make_opt, loss_fn, steps, mode, seed=0):
    torch.manual_seed(seed)
    model = copy.deepcopy(make_model()).to("tpu")
    opt = make_opt(model.parameters())
    g = torch.Generator().manual_seed(seed + 1)
    losses = []
    with _mode(mode):
        for _ in range(steps):
            x, y = make_batch(g)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x.to("tpu")), y.to("tpu"))
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return model, losses


def _assert_same(strict, defer, label):
    (m_s, l_s), (m_d, l_d) = strict, defer
    assert l_d == pytest.approx(l_s, rel=1e-6, abs=1e-7), f"{label}: {l_d} vs {l_s}"
    for (name, p_s), (_, p_d) in zip(m_s.named_parameters(), m_d.named_parameters()):
        torch.testing.assert_close(p_d.detach().cpu(), p_s.detach().cpu(), rtol=1e-6, atol=1e-7,
                                   msg=lambda m: f"{label}: {name}: {m}")


def test_mlp_trains_identically():
    def batch(g):
        x = torch.randn(32, 20, generator=g)
        return x, (x[:, :5] * 2 - x[:, 5:10]).tanh()
    args = (lambda: nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(),
                                  nn.Linear(64, 5)),
            batch, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), nn.MSELoss(), 8)
    strict = _train_device(*args, STRICT)
    _c()._fusion_stats_reset()
    defer = _train_device(*args, DEFER)
    st = _c()._fusion_stats()
    _assert_same(strict, defer, "mlp")
    assert st["fused_kernels"] > 0 and st["kernels_launched"] < st["ops_recorded"], st


def test_gpt_trains_identically():
    vocab, seq, bsz = 256, 32, 8
    args = (lambda: tm.GPT(vocab=vocab, d=128, heads=4, layers=2, seq=seq), tm._lm_batch(vocab, bsz, seq),
            lambda p: torch.optim.AdamW(p, lr=tm.ADAM_LR, weight_decay=0.01), tm._lm_loss, 4)
    strict = _train_device(*args, STRICT)
    _c()._fusion_stats_reset()
    defer = _train_device(*args, DEFER)
    st = _c()._fusion_stats()
    _assert_same(strict, defer, "gpt")
    assert st["fused_kernels"] > 0 and st["kernels_launched"] < st["ops_recorded"], st


@pytest.mark.parametrize("view", ["as_strided_overlap", "unfold", "expand_diag"])
def test_self_overlapping_in_place_matches_strict(view):
    """In place through a view whose elements share memory: order-dependent, so never fused."""
    fns = {"as_strided_overlap": lambda t: t.as_strided((3, 3), (1, 1)),
           "unfold": lambda t: t.view(-1).unfold(0, 4, 2),
           "expand_diag": lambda t: t.as_strided((4, 4), (4, 3))}
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    def f():
        x = base.to("tpu")
        fns[view](x).mul_(2).add_(1)
        return x.cpu()
    with _mode(STRICT):
        strict = f()
    with _mode(DEFER):
        out = f()
    assert torch.equal(out, strict)


# Rule 7: a chain ends in a reduction of one of its values -> one pass, the value never in memory.
_REDUCTIONS = {
    "mul_sum": (lambda x, y: (x * y).sum(), 2),
    "sqdiff_mean_last": (lambda x, y: ((x - y) * 1.5).square().mean(-1), 4),
    "relu_amax_keepdim": (lambda x, y: (x + 1).relu().amax(1, keepdim=True), 3),
    "gt_count": (lambda x, y: (x > y).sum(), 2),
    "var_last": (lambda x, y: (x * 2 + y).var(-1), 3),
    "vector_norm": (lambda x, y: torch.linalg.vector_norm(x + y), 2),
    "max_dim": (lambda x, y: (x * y).max(1), 2),
    "sum_dtype": (lambda x, y: (x * y).sum(1, dtype=torch.float64), 2),
}


@pytest.mark.parametrize("name", sorted(_REDUCTIONS))
def test_chain_into_reduction_is_one_kernel(name):
    f, nops = _REDUCTIONS[name]
    x, y = torch.randn(64, 1000), torch.randn(64, 1000)
    xd, yd = x.to("tpu"), y.to("tpu")
    as_list = lambda r: [t.cpu() for t in (r if isinstance(r, tuple) else (r,))]
    with _mode(STRICT):
        strict = as_list(f(xd, yd))
    with _mode(DEFER):
        out, st = _stats_delta(lambda: as_list(f(xd, yd)))
    assert st["kernels_launched"] == 1 and st["fused_ops"] == nops and st["fallbacks"] == 0, st
    ref = as_list(f(x, y))
    for o, s, r in zip(out, strict, ref):
        torch.testing.assert_close(o, s, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-4)


def test_large_chain_into_sum_splits_over_threads():
    x = torch.randn(1 << 21)
    xd = x.to("tpu")
    f = lambda t: (t * 0.5 + 1).abs().sum()
    with _mode(STRICT):
        strict = f(xd).cpu()
    with _mode(DEFER):
        out, st = _stats_delta(lambda: f(xd).cpu())
    assert st["kernels_launched"] == 1, st
    torch.testing.assert_close(out, strict, rtol=1e-6, atol=0)
    torch.testing.assert_close(out, f(x.double()).float(), rtol=1e-5, atol=0)


def test_reduction_over_outer_dim_runs_unfused():
    """The engine takes a chain's value only as contiguous runs: a sum over dim 0 runs unfused, correctly."""
    x = torch.randn(300, 70)
    xd = x.to("tpu")
    with _mode(STRICT):
        strict = xd.exp().sum(0).cpu()
    with _mode(DEFER):
        out, st = _stats_delta(lambda: xd.exp().sum(0).cpu())
    assert st["kernels_launched"] == 2, st
    assert torch.equal(out, strict)
    torch.testing.assert_close(out, x.exp().sum(0))


def test_live_value_feeding_a_reduction_is_written():
    x = torch.randn(50, 40)
    xd = x.to("tpu")
    with _mode(DEFER):
        def run():
            t = xd * 3 + 1
            return t, t.sum(-1)
        (t, s), st = _stats_delta(lambda: tuple(v.cpu() for v in run()))
    assert st["kernels_launched"] == 1 and st["stores_skipped"] == 1, st  # only x*3 died
    assert torch.equal(t, x * 3 + 1)
    torch.testing.assert_close(s, (x * 3 + 1).sum(-1))


def test_in_place_chain_into_reduction_matches_strict():
    """A chain that writes memory it also reads never ends in a reduction (var reads its input twice)."""
    base = torch.randn(20, 30)
    def f():
        x = base.to("tpu")
        v = x.mul_(2).add_(1).var(-1)
        return x.cpu(), v.cpu()
    with _mode(STRICT):
        strict = f()
    with _mode(DEFER):
        out = f()
    assert torch.equal(out[0], strict[0]) and torch.equal(out[1], strict[1])
    torch.testing.assert_close(out[1], (base * 2 + 1).var(-1))
