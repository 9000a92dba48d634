"""scaled_dot_product_attention on tpu runs the fused kernel (runtime/ops/nn/attention.c,
picked by torch_tpu/csrc/sdpa.cpp): results and gradients against a float64 reference
(bf16 inputs rounded the same way), in every eager mode; the routing itself; and the
cases that must stay on the math path."""
import pytest
import torch
import torch.nn.functional as F

FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"


def _ops(fn):
    with torch.autograd.profiler.profile() as p:
        fn()
    return {e.name for e in p.function_events}


def _ref(q, k, v, **kw):
    """float64 SDPA on CPU, from the same (rounded) inputs, with its gradients."""
    args = [x.detach().cpu().double().requires_grad_() for x in (q, k, v)]
    kw = {a: (b.cpu().double() if torch.is_tensor(b) and b.is_floating_point() else
              b.cpu() if torch.is_tensor(b) else b) for a, b in kw.items()}
    return F.scaled_dot_product_attention(*args, **kw), args


def _inputs(dtype, case, B, H, L, S, E):
    """q, k, v and SDPA's keyword arguments for a case: causal, plain, gqa_causal (two kv heads),
    float_mask (additive, broadcast over batch) or bool_mask (broadcast over heads; every query sees
    the first key)."""
    Hk = 2 if case.startswith("gqa") else H
    q = torch.randn(B, H, L, E, dtype=dtype)
    k = torch.randn(B, Hk, S, E, dtype=dtype)
    v = torch.randn(B, Hk, S, E, dtype=dtype)
    kw = {"is_causal": True} if "causal" in case else {}
    if case.startswith("gqa"):
        kw["enable_gqa"] = True
    if case == "float_mask":
        kw["attn_mask"] = torch.randn(1, H, L, S, dtype=dtype)
    if case == "bool_mask":
        kw["attn_mask"] = torch.rand(B, 1, L, S) > 0.3
        kw["attn_mask"][..., 0] = True
    return q, k, v, kw


def _check_against_float64(tpu, dtype, q, k, v, kw):
    """SDPA's output and input gradients on tpu against the float64 reference."""
    ref, rargs = _ref(q, k, v, **kw)
    g = torch.randn(ref.shape, dtype=dtype)
    ref.backward(g.double())
    targs = [x.to(tpu).requires_grad_() for x in (q, k, v)]
    tkw = {a: (b.to(tpu) if torch.is_tensor(b) else b) for a, b in kw.items()}
    out = F.scaled_dot_product_attention(*targs, **tkw)
    out.backward(g.to(tpu))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.cpu().double(), ref, atol=tol, rtol=tol)
    for t, r in zip(targs, rargs):
        torch.testing.assert_close(t.grad.cpu().double(), r.grad, atol=tol * 4, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["causal", "plain", "gqa_causal", "float_mask", "bool_mask"])
def test_sdpa_matches_float64(tpu, eager_mode, dtype, case):
    torch.manual_seed(0)
    L, S = 70, 70 if "causal" in case else 90
    _check_against_float64(tpu, dtype, *_inputs(dtype, case, 2, 4, L, S, 32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("L,S,case", [(32, 32, "causal"), (37, 20, "plain"), (50, 45, "float_mask"),
                                      (9, 3, "bool_mask"), (33, 33, "gqa_causal"), (64, 63, "causal")])
def test_sdpa_fewer_keys_than_a_block_matches_float64(tpu, dtype, L, S, case):
    """Fewer keys than the backward's 64-key block: it runs one block of the keys padded to 8."""
    torch.manual_seed(1)
    _check_against_float64(tpu, dtype, *_inputs(dtype, case, 2, 4, L, S, 24))


def test_sdpa_routes_to_fused_kernel(tpu):
    q = torch.randn(1, 2, 16, 8, device=tpu, requires_grad=True)
    assert torch._fused_sdp_choice(q, q, q) == 1  # SDPBackend.flash_attention
    names = _ops(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward())
    assert FLASH in names and FLASH + "_backward" in names
    assert "aten::_scaled_dot_product_attention_math" not in names


def test_sdpa_math_path_where_fused_does_not_apply(tpu):
    q = torch.randn(1, 2, 16, 8, device=tpu)
    # dropout, float64, different value head dim, and the user's backend choice stay on math
    for fn in (lambda: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5),
               lambda: F.scaled_dot_product_attention(q.double(), q.double(), q.double()),
               lambda: F.scaled_dot_product_attention(q, q, torch.randn(1, 2, 16, 4, device=tpu)),
               # a mask that needs a gradient (T5's learned position bias): the fused op has none
               lambda: F.scaled_dot_product_attention(
                   q, q, q, attn_mask=torch.zeros(1, 2, 16, 16, device=tpu, requires_grad=True))):
        assert FLASH not in _ops(fn)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.MATH]):
        names = _ops(lambda: F.scaled_dot_product_attention(q, q, q))
    assert FLASH not in names and "aten::_scaled_dot_product_attention_math" in names


def test_sdpa_fully_masked_row_is_zero(tpu):
    """A query row that may attend to nothing gives zeros (as the math path's safe softmax does)."""
    q = torch.randn(1, 1, 4, 8)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    out = F.scaled_dot_product_attention(q.to(tpu), q.to(tpu), q.to(tpu), attn_mask=mask.to(tpu)).cpu()
    ref = F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    assert torch.equal(out[0, 0, 2], torch.zeros(8))
    torch.testing.assert_close(out, ref)
