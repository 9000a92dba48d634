"""Host-cost paths (issue 16), each checked against PyTorch CPU on the same inputs:
output layouts of new shapes from ATen's C++ meta functions (fallback_meta_table.cpp) and the
native_layer_norm rule; small kernels run on the submitting thread of an idle vTPU queue
(TPURT_VTPU_INLINE_MAX; 0 turns it off), with errors still raised at the next sync; the batch-1
generation loops of bench/bench_decode.py."""
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))


def test_new_shapes_forward_matches_cpu(device):
    """Every length is a new signature for each op of the forward (C++ meta, layer-norm rule)."""
    from test_models import GPT
    torch.manual_seed(0)
    model = GPT(vocab=256, d=128, heads=4, layers=2, seq=128).eval()
    dev_model = GPT(vocab=256, d=128, heads=4, layers=2, seq=128).eval()
    dev_model.load_state_dict(model.state_dict())
    dev_model = dev_model.to(device)
    with torch.no_grad():
        for n in (3, 17, 29, 61, 101):
            idx = torch.randint(0, 256, (2, n), generator=torch.Generator().manual_seed(n))
            torch.testing.assert_close(dev_model(idx.to(device)).cpu(), model(idx), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("shape,normalized", [((3, 5, 8), (8,)), ((2, 7, 4, 6), (4, 6)), ((5,), (5,))])
def test_layer_norm_layouts_match_cpu(device, dtype, shape, normalized):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    w, b = torch.randn(normalized, dtype=dtype), torch.randn(normalized, dtype=dtype)
    ref = torch.ops.aten.native_layer_norm(x, list(normalized), w, b, 1e-5)
    got = torch.ops.aten.native_layer_norm(x.to(device), list(normalized), w.to(device), b.to(device), 1e-5)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got[0].cpu(), ref[0], **tol)
    assert got[0].is_contiguous() and got[0].shape == ref[0].shape
    for g, r in zip(got[1:], ref[1:]):
        assert g.shape == r.shape  # [outer..., 1, ...]
        # float32 statistics for 16-bit inputs, as PyTorch's meta function gives them
        assert g.dtype == (torch.float32 if dtype == torch.bfloat16 else dtype)
        torch.testing.assert_close(g.cpu().to(r.dtype), r, **tol)


def test_layer_norm_bad_shape_raises_as_cpu(device):
    x = torch.randn(3, 5)
    with pytest.raises(RuntimeError) as cpu_err:
        F.layer_norm(x, (4,))
    with pytest.raises(RuntimeError) as dev_err:
        F.layer_norm(x.to(device), (4,))
    assert "normalized_shape" in str(cpu_err.value) and "normalized_shape" in str(dev_err.value)


def test_new_shape_binary_ops_match_cpu(device):
    """Broadcasting, type promotion and out= resizing through the C++ meta table, at shapes used nowhere else."""
    for n in (13, 27):
        a = torch.randn(n, 1, 3)
        b = torch.randint(0, 5, (1, n + 1, 3))
        for fn in (torch.add, torch.mul, torch.sub, torch.maximum, torch.eq, torch.lt):
            torch.testing.assert_close(fn(a.to(device), b.to(device)).cpu(), fn(a, b))
        out = torch.empty(0, device=device)
        torch.add(a.to(device), b.to(device), out=out)
        torch.testing.assert_close(out.cpu(), torch.add(a, b))
        torch.testing.assert_close(torch.softmax(a.to(device) * 3, -1).cpu(), torch.softmax(a * 3, -1))
        torch.testing.assert_close(torch.cat([a.to(device), (a * 2).to(device)], 1).cpu(), torch.cat([a, a * 2], 1))


def test_meta_table_error_matches_cpu(device):
    """The C++ meta's checks are CPU's: mm of mismatched shapes raises RuntimeError on both."""
    with pytest.raises(RuntimeError):
        torch.mm(torch.randn(3, 11), torch.randn(12, 4))
    with pytest.raises(RuntimeError):
        torch.mm(torch.randn(3, 11, device=device), torch.randn(12, 4, device=device))


@pytest.mark.usefixtures("eager_mode")
def test_small_kernel_error_surfaces_at_sync(device):
    """A small kernel run on the submitting thread keeps the queue's error model: in Strict and
    DeferAndFuse the bad index raises at the next sync, not at the call (Debug raises at the call),
    with CPU's type (gather's out-of-range index is a RuntimeError on CPU)."""
    from torch_tpu._internal import execution_mode as em
    x = torch.arange(6.0, device=device)
    idx = torch.tensor([0, 9], device=device)
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.gather(x.cpu(), 0, idx.cpu())
    if em.get_eager_mode() == em.EagerMode.DEBUG:
        with pytest.raises(RuntimeError, match="out of bounds"):
            torch.gather(x, 0, idx)
        return
    y = torch.gather(x, 0, idx)  # queued (or run inline): no error yet
    with pytest.raises(RuntimeError, match="out of bounds"):
        y.cpu()
    torch.testing.assert_close((x * 2).cpu(), torch.arange(6.0) * 2)  # the device keeps working


@pytest.mark.usefixtures("eager_mode")
def test_small_copies_to_device_land_in_order(device):
    """Small copies to the device behind queued work are staged and queued (Strict, DeferAndFuse) or
    copied at the call (Debug): either way a kernel queued before the copy reads the old values, one
    after it the new, and the caller's source buffer may change as soon as the call returns."""
    a = torch.randn(400, 400, device=device)
    x = torch.zeros(64, device=device)
    src = torch.empty(64)
    outs = []
    for k in range(6):
        b = a @ a  # keeps the queue busy
        y = x + 1
        src.fill_(k)
        x.copy_(src)
        src.fill_(-100.0)
        outs.append((y, x * 2, b))
    for k, (y, z, _) in enumerate(outs):
        torch.testing.assert_close(y.cpu(), torch.full((64,), float(max(k - 1, 0) + 1)))
        torch.testing.assert_close(z.cpu(), torch.full((64,), 2.0 * k))
    # an index built on the CPU, used at once (nanoGPT's v[:, [-1]])
    v = torch.randn(3, 20)
    vd = v.to(device)
    for k in range(20):
        torch.testing.assert_close(vd[:, [k]].cpu(), v[:, [k]])


def test_small_copy_to_device_is_a_queued_device_event(device):
    """Behind queued work, a small copy to the device is a queued command (its device-trace event is
    "copy (host to device)"), not a wait for the queue."""
    from torch_tpu import projection
    a = torch.randn(1500, 1500, device=device) / 40
    with projection.record():
        b = a @ a @ a @ a  # about 20 GFLOP queued: the copy below is issued long before it has run
        i = torch.tensor([3]).to(device)
        c = b[:, i]
        c.cpu()
    names = [e["name"] for e in projection.events() if e["kind"] != "launch"]
    assert "copy (host to device)" in names, sorted(set(names))
    ac = a.cpu()
    torch.testing.assert_close(c.cpu(), (ac @ ac @ ac @ ac)[:, [3]], rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("eager_mode")
@pytest.mark.parametrize("sample", [False, True])
def test_nanogpt_generate_matches_cpu(device, sample):
    """bench/bench_decode.py's generation loop: greedy tokens equal CPU's; with sampling, every token
    is one of CPU's top-20 at that step (the two sides draw from different generators)."""
    from bench_decode import nanogpt_generate
    from test_models import GPT
    torch.manual_seed(0)
    model = GPT(vocab=256, d=128, heads=4, layers=2, seq=32).eval()
    dev_model = GPT(vocab=256, d=128, heads=4, layers=2, seq=32).eval()
    dev_model.load_state_dict(model.state_dict())
    dev_model = dev_model.to(device)
    prompt = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(1))
    got = nanogpt_generate(dev_model, prompt.to(device), 12, top_k=20 if sample else None, sample=sample).cpu()
    if not sample:
        assert torch.equal(got, nanogpt_generate(model, prompt, 12, sample=False))
        return
    with torch.no_grad():
        logits = model(got[:, :-1])
    for t in range(8, got.shape[1]):
        top = torch.topk(logits[0, t - 1], 20).indices
        assert got[0, t] in top, f"token {t}: {got[0, t]} not among CPU's top 20"


_SCRIPT = """
import torch, torch_tpu, sys
sys.path.insert(0, {tests!r}); sys.path.insert(0, {bench!r})
from bench_decode import nanogpt_generate
from test_models import GPT
torch.manual_seed(0)
m = GPT(vocab=256, d=128, heads=4, layers=2, seq=32).eval()
p = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(1))
ref = nanogpt_generate(m, p, 10, sample=False)
got = nanogpt_generate(m.to("tpu"), p.to("tpu"), 10, sample=False).cpu()
x = torch.randn(300, 300)
big = (x.to("tpu") @ x.to("tpu")).cpu()   # over the inline bound: queued to the worker
assert torch.equal(got, ref), (got, ref)
torch.testing.assert_close(big, x @ x, atol=1e-3, rtol=1e-4)
print("ok")
"""


@pytest.mark.parametrize("inline_max", ["0", "1", "65536"])
def test_inline_bound_does_not_change_results(inline_max):
    """TPURT_VTPU_INLINE_MAX=0 queues every kernel to the worker, 1 almost every one, the default runs
    small ones on the submitting thread: the same tokens as CPU in each case."""
    env = dict(os.environ, TPURT_VTPU_INLINE_MAX=inline_max)
    script = _SCRIPT.format(tests=str(ROOT / "tests"), bench=str(ROOT / "bench"))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def test_cpp_meta_refusal_falls_back_to_python_meta(device):
    """ATen's C++ meta for index_add selects slice 0 along the indexed dim when the result is on
    Meta, which fails for a size-0 dim that CPU's kernel accepts; the Python meta then decides, so
    the op runs as on CPU (found by tests/test_fuzz.py after the meta table met main's fuzzer)."""
    for dev in ("cpu", device):
        v = torch.zeros(4, 0, dtype=torch.int32, device=dev)
        v.index_add_(1, torch.tensor([], dtype=torch.int64, device=dev), torch.zeros(4, 0, dtype=torch.int32, device=dev))
        assert v.shape == (4, 0)
    x = torch.arange(12.0).reshape(3, 4)
    src = torch.ones(3, 2)
    idx = torch.tensor([3, 0])
    torch.testing.assert_close(x.to(device).index_add(1, idx.to(device), src.to(device)).cpu(), x.index_add(1, idx, src))


def _mask_put(dev, self, mask, value, grad=False):
    x = self.to(dev).requires_grad_(grad)
    y = x.clone() if grad else x
    y[mask.to(dev)] = value.cpu() if dev == "cpu" and isinstance(value, torch.Tensor) else value
    if grad:
        y.backward(torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape).to(dev))
        return y.detach().cpu(), x.grad.cpu()
    return y.cpu()


@pytest.mark.usefixtures("eager_mode")
def test_full_bool_mask_put_matches_cpu_without_expanding_the_mask(device):
    """`x[mask] = v` with one value (nanoGPT's top-k filter) runs as masked_fill_ on the device, as
    ATen's index_put_ does on CPU: the result, including through autograd, is CPU's, and the mask
    never becomes indices (aten::nonzero, whose count of elements the host would wait for)."""
    from torch.profiler import profile, ProfilerActivity
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, generator=g)
    mask = x < x.topk(5, dim=-1).values[:, [-1]]
    cases = [(x, mask, -float("inf")), (x, mask, torch.tensor(2.5)), (x, mask, torch.tensor(2.5).to(device)), (x, mask, torch.tensor([7.0])),
             (x.to(torch.bfloat16), mask, -1.0), (torch.arange(12).reshape(3, 4), torch.arange(12).reshape(3, 4) % 3 == 0, 9),
             (x, torch.zeros_like(mask), 1.0), (x, mask[:, 0], 4.0), (x, mask, torch.tensor(3, dtype=torch.int64)),
             (x, mask, torch.tensor(1.5, dtype=torch.float64))]
    for self, m, v in cases:
        assert torch.equal(_mask_put(device, self, m, v), _mask_put("cpu", self, m, v))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _mask_put(device, self, m, v)
        assert not [e.name for e in prof.events() if e.name == "aten::nonzero"]
    got, gg = _mask_put(device, x, mask, -1.0, grad=True)
    want, wg = _mask_put("cpu", x, mask, -1.0, grad=True)
    assert torch.equal(got, want) and torch.equal(gg, wg)


@pytest.mark.usefixtures("eager_mode")
def test_other_bool_mask_puts_still_match_cpu(device):
    """Masks over some dims with several values, accumulation and a device value of another dtype
    keep index_put_'s own path, with CPU's results."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 5, generator=g)
    rows = torch.tensor([True, False, True, False])
    assert torch.equal(_mask_put(device, x, rows, 3.0), _mask_put("cpu", x, rows, 3.0))
    vals = torch.arange(10.0).reshape(2, 5)
    assert torch.equal(_mask_put(device, x, rows, vals.to(device)), _mask_put("cpu", x, rows, vals))
    full = x > 0
    acc = [t.index_put_((full.to(t.device),), torch.tensor(1.0, device=t.device), accumulate=True).cpu()
           for t in (x.clone().to(device), x.clone())]
    assert torch.equal(acc[0], acc[1])
    # a value of another dtype: converted when it is a CPU scalar (ATen's masked_fill_ path, on CPU
    # too); on the device, index_put_'s general path refuses it, as it does on CUDA
    v64 = torch.tensor(1.0, dtype=torch.float64)
    assert torch.equal(x.clone().to(device).index_put_((full.to(device),), v64).cpu(), x.clone().index_put_((full,), v64))
    with pytest.raises(RuntimeError, match="dtypes match"):
        x.clone().to(device).index_put_((full.to(device),), v64.to(device))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("dim", [0, 1, 2, 3, -1])
def test_small_cat_matches_cpu(device, dtype, dim):
    """cat of small contiguous inputs copies whole rows (index_shape.c cat_rows); a transposed or
    empty input among them, and inputs past the small-copy size, take the strided copy."""
    g = torch.Generator().manual_seed(dim + 7)
    base = [2, 3, 4, 5]

    def make(n, transposed=False):
        shape = list(base)
        shape[dim] = n
        t = (torch.randn(shape, generator=g) * 100).to(dtype)
        return t.transpose(0, 1).contiguous().transpose(0, 1) if transposed else t

    cases = [[make(2), make(1)], [make(3), make(0), make(2, transposed=True), make(1)],
             [make(300), make(1)]]  # the last: beyond 64 KiB along dims past the first
    for parts in cases:
        got = torch.cat([p.to(device) for p in parts], dim=dim)
        assert torch.equal(got.cpu(), torch.cat(parts, dim=dim))
    # a decode step's cache append: (1, heads, seq, head_dim) + one new position
    cache = torch.zeros(1, 4, 47, 16, dtype=dtype)
    new = torch.ones(1, 4, 1, 16, dtype=dtype)
    assert torch.equal(torch.cat([cache.to(device), new.to(device)], dim=-2).cpu(), torch.cat([cache, new], dim=-2))
