"""Generated fused kernels (runtime/compiler/): a DeferAndFuse chain seen a second time is compiled to C
in the background, cached on disk and loaded; until then it runs through the generic fused path. Every
result must be Strict's, bit for bit (NaN payloads aside), before and after the build.

Counters come from torch_tpu._C._fusion_stats(): codegen_builds (compiled), codegen_disk_loads (taken
from the disk cache), codegen_build_failures, codegen_runs (fused chains run by generated code).
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from test_defer_fuse import DEFER, STRICT, _mode, chain10  # noqa: F401  (one definition of each)

pytestmark = pytest.mark.tpu


def _c():
    from torch_tpu import _C
    return _C


@pytest.fixture(autouse=True)
def _codegen_on(device, tmp_path, monkeypatch):
    if device != "tpu":
        pytest.skip("DeferAndFuse is a tpu mode")
    monkeypatch.setenv("TORCH_TPU_FUSE_CACHE_DIR", str(tmp_path / "fused"))
    c = _c()
    c._fusion_set_enabled(True)
    c._fusion_set_codegen(True)
    c._fusion_cache_clear()
    yield
    c._fusion_set_codegen(True)


def _run(fn, mode, *args):
    with _mode(mode):
        out = fn(*args)
        return [t.cpu() for t in (out if isinstance(out, tuple) else (out,))]


def _stats():
    return _c()._fusion_stats()


def _same(got, want):
    """Identical values: equal bits everywhere but at NaNs, and NaN at the same places. (A NaN's sign
    and payload are not part of the contract: x86 returns the first operand's NaN when both are NaN,
    and a compiler may order a commutative op's operands either way.)"""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype == torch.bool:
            assert torch.equal(g, w)
            continue
        gn, wn = torch.isnan(g), torch.isnan(w)
        assert torch.equal(gn, wn), (g[gn != wn], w[gn != wn])
        bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[g.element_size()]
        assert torch.equal(g[~gn].view(bits), w[~wn].view(bits)), (g, w)


def _check_built(fn, *args, expect_codegen=True):
    """Runs fn in Strict, then three times in DeferAndFuse (build queued on the second sight, awaited,
    used on the third); every run must equal Strict's bits. Returns the stats of the last run."""
    want = _run(fn, STRICT, *args)
    c = _c()
    c._fusion_stats_reset()
    _same(_run(fn, DEFER, *args), want)
    first = _stats()
    assert first["codegen_runs"] == 0 and first["codegen_builds"] == 0  # a new chain never waits
    _same(_run(fn, DEFER, *args), want)
    c._fusion_wait_builds()
    if expect_codegen:  # every chain's kernel compiled (a failed build leaves its chain on the generic path)
        assert _stats()["codegen_build_failures"] == 0, _stats()
    c._fusion_stats_reset()
    _same(_run(fn, DEFER, *args), want)
    st = _stats()
    if expect_codegen:
        assert st["codegen_runs"] >= 1, st
    return st


def _special(n, dtype=torch.float32):
    """Random values with the edge cases every expression must agree on."""
    x = torch.randn(n, dtype=dtype) * 4
    edge = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 88.8, -104.5, 1e-40, 3.0, -3.0],
                        dtype=dtype)
    x[: edge.numel()] = edge
    return x


def test_chain_is_built_then_used_and_matches_strict():
    x, b = _special(10_001).to("tpu"), torch.randn(10_001).to("tpu")
    c = _c()
    c._fusion_stats_reset()
    st = _check_built(chain10, x, b)
    assert st["kernels_launched"] == 1 and st["fused_ops"] == 10


@pytest.mark.parametrize("name", ["activations", "backward", "compare", "ternary", "pow", "float64", "in_place",
                                  "multi_store", "device_scalar", "unaligned_view", "bias_rows",
                                  "row_scale", "vector_forms", "vector_math"])
def test_expression_chains_match_strict(name):
    x = _special(4099).to("tpu")
    y = torch.randn(4099).to("tpu")
    if name == "activations":
        def fn(x, y):
            h = F.gelu(x) + F.gelu(y, approximate="tanh")
            h = F.silu(h) * F.hardswish(x)
            h = F.leaky_relu(h, 0.1) + F.elu(y) + F.softplus(x) + F.mish(y)
            return F.hardtanh(h, -2.0, 3.0).abs().sqrt()
    elif name == "vector_forms":  # every op with a vector form (ew_simd.h), from memory and from members
        def fn(x, y):
            h = torch.exp(x * 0.25) + torch.erf(y) + torch.tanh(x) + torch.sigmoid(y * 2)
            g = torch.ops.aten.gelu_backward(y, x) + torch.ops.aten.gelu_backward(h, y, approximate="tanh")
            g = g + torch.ops.aten.silu_backward(h, x) + F.silu(h) + F.gelu(y * x)
            return g + F.gelu(h, approximate="tanh")
    elif name == "vector_math":  # the math ops with vector forms; sin past 2^28, where lanes go to glibc
        def fn(x, y):
            h = torch.log(x.abs()) + torch.log1p(y.abs()) + torch.expm1(x * 0.5) + torch.exp2(y * 3)
            h = h + torch.atan(x) + torch.sin(x * 1e8) + torch.cos(y * 4) + torch.erfc(x)
            h = h + torch.log2(y.abs()) + torch.log10(x.abs()) + torch.tan(y) + torch.sinh(x * 0.5) + torch.cosh(y)
            h = h + torch.asin(y * 0.3) + torch.acos(x.clamp(-1, 1)) + torch.atan2(x, y) + torch.sinc(y)
            h = h + torch.asinh(x) + torch.acosh(y.abs() + 1) + torch.atanh(y * 0.3) + torch.erfinv(y * 0.3)
            h = h + torch.lgamma(x * 3)
            return h + torch.sin(h) * torch.cos(x)
    elif name == "backward":
        def fn(x, y):
            s = torch.sigmoid(y)
            return torch.ops.aten.sigmoid_backward(x, s) + torch.ops.aten.tanh_backward(x, torch.tanh(y))
    elif name == "compare":
        def fn(x, y):
            return ((x * 2 > y), (x.exp() <= 1.5), x.clamp(-1, 1) + y)
    elif name == "ternary":
        def fn(x, y):
            return torch.lerp(x, y, 0.3).addcmul(x, y, value=0.5).addcdiv(y, y.abs() + 1, value=2.0) * 3
    elif name == "pow":
        def fn(x, y):  # the specialised Scalar exponents, a general one, and a tensor exponent
            h = torch.pow(x, 3.0) * 0.044715 + x ** 2 + y.abs() ** 0.5 + (y.abs() + 1) ** -0.5
            return h + x ** -1 + x ** -2.0 + y.abs() ** 1.7 + torch.pow(y.abs(), x)
    elif name == "float64":
        x, y = x.double(), y.double()

        def fn(x, y):
            return ((x * 0.5 + y).exp() - 1).tanh() / (y.abs() + 1)
    elif name == "in_place":
        def fn(x, y):
            z = x * 1.0
            z.mul_(2).add_(y).sigmoid_().sub_(0.25)
            return z
    elif name == "multi_store":
        def fn(x, y):
            a = x * y
            b = a.exp()
            c = (b + a).tanh()
            return a, b, c
    elif name == "device_scalar":
        s = torch.tensor(1.75).to("tpu")

        def fn(x, y):
            return ((x + s) * s - y).sigmoid() * s
    elif name == "unaligned_view":
        def fn(x, y):
            return ((x[3:] * 1.5 + y[:-3]).exp() * x[3:]).relu()
    elif name == "bias_rows":  # outer dims walked run by run: a bias along the rows, a 3-d view
        x, y = x[:4096].view(16, 8, 32), y[:32].clone()

        def fn(x, y):
            return F.gelu((x * 1.25 + y).tanh() - y, approximate="tanh")
    elif name == "row_scale":  # a per-row scalar (innermost stride 0) and a column slice
        x, y = x[:4000].view(40, 100), y[:40].view(40, 1).clone()

        def fn(x, y):
            return (x[:, 7:93] * y + 0.5).sigmoid() * y
    _check_built(fn, x, y)


@pytest.mark.parametrize("name", ["mse", "row_sum_bias", "live_and_norm", "amax_logsumexp", "large_mean"])
def test_chains_into_reductions_match_strict(name):
    x, y = _special(6000).to("tpu"), torch.randn(6000).to("tpu")
    if name == "mse":
        fn = lambda x, y: ((x - y) * (x - y)).mean()  # noqa: E731
    elif name == "row_sum_bias":  # rows walked run by run, the bias broadcast along them
        x, y = x.view(60, 100), y[:100].clone()
        fn = lambda x, y: (torch.tanh(x * 0.5 + y) * y).sum(-1)  # noqa: E731
    elif name == "live_and_norm":  # an intermediate the caller keeps is stored on the way
        def fn(x, y):
            h = (x * y + 1.0).abs()
            return h, (h * 2.0).exp().clamp(max=50.0).norm(dim=-1)
        x, y = x.view(30, 200), y.view(30, 200)
    elif name == "amax_logsumexp":
        x, y = x.view(40, 150), y.view(40, 150)
        fn = lambda x, y: ((x - y).sigmoid().amax(-1), (x * 0.1 + y).logsumexp(-1))  # noqa: E731
    elif name == "large_mean":  # several threads, each its own runs
        x, y = torch.randn(1 << 20).to("tpu"), torch.randn(1 << 20).to("tpu")
        fn = lambda x, y: ((x * 1.5 - y).relu() ** 2).mean()  # noqa: E731
    _check_built(fn, x, y)


def test_streaming_outputs_larger_than_cache_match_strict():
    n = (1 << 24) + 37  # bigger than the last-level cache: stored outputs stream; odd head and tail
    x = torch.randn(n).to("tpu")
    fn = lambda x: ((x * 0.5 + 1.0).abs() * x).clamp(-2.0, 2.0) + 0.5  # noqa: E731
    _check_built(fn, x)
    # Inputs misaligned by one element: the same kernel (pointers and sizes are arguments) runs at once.
    _c()._fusion_stats_reset()
    _same(_run(lambda x: fn(x[1:]), DEFER, x), _run(lambda x: fn(x[1:]), STRICT, x))
    assert _stats()["codegen_runs"] == 1 and _stats()["codegen_builds"] == 0
    # Rows walked one by one, each streamed from its own 64-byte boundary (rows of 8200 floats).
    a, b = torch.randn(2049, 8200).to("tpu"), torch.randn(8200).to("tpu")
    _check_built(lambda a, b: ((a + b) * 0.5).relu() - b, a, b)


def test_codegen_off_runs_generic_path():
    x, b = torch.randn(3000).to("tpu"), torch.randn(3000).to("tpu")
    c = _c()
    c._fusion_set_codegen(False)
    st = _check_built(chain10, x, b, expect_codegen=False)
    assert st["codegen_runs"] == 0 and st["codegen_builds"] == 0
    assert st["fused_kernels"] == 1


def test_unbuildable_expression_stays_generic_and_correct():
    # digamma's expression calls a helper private to the elementwise library (ew_math.c's ew_digamma):
    # the build fails, the chain keeps running through the generic path with Strict's results, and
    # the failure is kept.
    x = (torch.rand(5000) * 1.8 + 0.1).to("tpu")
    fn = lambda x: (x * 0.5).digamma() + x  # noqa: E731
    st = _check_built(fn, x, expect_codegen=False)
    assert st["codegen_runs"] == 0
    c = _c()
    c._fusion_stats_reset()
    c._fusion_cache_clear()
    _run(fn, DEFER, x)
    _run(fn, DEFER, x)
    c._fusion_wait_builds()
    st = _stats()
    assert st["codegen_builds"] == 0 and st["codegen_build_failures"] == 0  # known to fail: not rebuilt
    assert any(f.endswith(".fail") for f in os.listdir(os.environ["TORCH_TPU_FUSE_CACHE_DIR"]))


_CHILD = textwrap.dedent("""
    import torch, torch_tpu
    from torch_tpu import _C
    x = torch.linspace(-3, 3, 5000).to("tpu")
    _C._set_exec_mode(2)
    _C._fusion_stats_reset()
    y = ((x * 2.0 + 1.0).exp() * x).tanh().cpu()
    _C._set_exec_mode(0)
    want = ((x * 2.0 + 1.0).exp() * x).tanh().cpu()
    st = _C._fusion_stats()
    print(st["codegen_disk_loads"], st["codegen_runs"], st["codegen_builds"], int(torch.equal(y, want)))
""")


def _child(env):
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [int(v) for v in r.stdout.split()[-4:]]


def test_next_process_loads_the_kernel_from_disk(tmp_path, monkeypatch):
    env = dict(os.environ, TORCH_TPU_FUSE_CACHE_DIR=str(tmp_path / "shared"))
    x = torch.linspace(-3, 3, 5000).to("tpu")
    fn = lambda x: ((x * 2.0 + 1.0).exp() * x).tanh()  # noqa: E731
    monkeypatch.setenv("TORCH_TPU_FUSE_CACHE_DIR", env["TORCH_TPU_FUSE_CACHE_DIR"])  # undone after the test
    _check_built(fn, x)  # built here, stored in the shared directory
    loaded, runs, built, same = _child(env)
    assert (loaded, runs, built, same) == (1, 1, 0, 1)
    # A tampered kernel is refused (its bytes no longer hash to the record) and nothing runs it.
    d = tmp_path / "shared"
    so = next(p for p in d.iterdir() if p.suffix == ".so")
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0xFF
    # A new file in its place (this process has the original mapped: rewriting it in place would
    # change code under the loaded library; the runtime itself only ever renames files into place).
    tampered = so.with_suffix(".new")
    tampered.write_bytes(bytes(data))
    os.chmod(tampered, 0o600)
    os.replace(tampered, so)
    loaded, runs, built, same = _child(env)
    assert (loaded, runs, same) == (0, 0, 1)


_CHILD_NO_TOOLCHAIN = textwrap.dedent("""
    import torch, torch_tpu
    from torch_tpu import _C
    x = torch.linspace(-3, 3, 5000).to("tpu")
    want = ((x * 2.0 + 1.0).exp() * x).tanh().cpu()
    _C._set_exec_mode(2)
    same = all(torch.equal(((x * 2.0 + 1.0).exp() * x).tanh().cpu(), want) for _ in range(3))
    _C._fusion_wait_builds()
    same = same and torch.equal(((x * 2.0 + 1.0).exp() * x).tanh().cpu(), want)
    st = _C._fusion_stats()
    print(int(_C._fusion_codegen()), st["codegen_builds"], st["codegen_runs"], int(same))
""")


@pytest.mark.parametrize("missing", ["compiler", "source_tree"])
def test_missing_toolchain_turns_codegen_off_without_marking_kernels(tmp_path, missing):
    d = tmp_path / "cache"
    env = dict(os.environ, TORCH_TPU_FUSE_CACHE_DIR=str(d))
    if missing == "compiler":
        env["TORCH_TPU_CC"] = str(tmp_path / "no-such-cc")
    else:
        env["TORCH_TPU_RUNTIME_SRC"] = str(tmp_path / "no-such-tree")
    r = subprocess.run([sys.executable, "-c", _CHILD_NO_TOOLCHAIN], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    on, built, runs, same = (int(v) for v in r.stdout.split()[-4:])
    assert (on, built, runs, same) == (0, 0, 0, 1)
    # nothing recorded as unbuildable: with a compiler, a later process builds these kernels
    assert not [f for f in os.listdir(d) if f.endswith(".fail")]
