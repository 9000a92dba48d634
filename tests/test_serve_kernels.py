"""The serving kernels (runtime/ops/serve, reached as torch_tpu::paged_attention and
torch_tpu::reshape_and_cache) against a plain PyTorch reference on CPU: random block tables, ragged
batches mixing decode, prefill and a prefill chunk after a cached prefix, grouped- and multi-query heads,
sliding window, soft-capping, float32/bfloat16/float16; and seeded sampling's Tensor.exponential_ with a
generator. Needs no vLLM."""
import pytest
import torch

from torch_tpu.vllm import ops


def _batch(qlens, ctxs, hq, hkv, d, bs, dtype, head_major, seed=0):
    g = torch.Generator().manual_seed(seed)
    max_blocks = max((c + bs - 1) // bs for c in ctxs)
    nb = max_blocks * len(ctxs) + 3
    perm = torch.randperm(nb, generator=g)
    table = perm[:len(ctxs) * max_blocks].view(len(ctxs), max_blocks).to(torch.int32)
    q = torch.randn(sum(qlens), hq, d, generator=g).to(dtype)
    # vLLM's logical cache [blocks, kv_heads, block_size, 2D]; the kernels read its (1, 2) transpose.
    if head_major:
        kv = torch.randn(nb, hkv, bs, 2 * d, generator=g).to(dtype).transpose(1, 2)
    else:
        kv = torch.randn(nb, bs, hkv, 2 * d, generator=g).to(dtype)
    qsl = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0)), dtype=torch.int32)
    return q, kv, qsl, torch.tensor(ctxs, dtype=torch.int32), table


CASES = [
    # (query lengths, context lengths, q heads, kv heads, head size, block size, window, softcap)
    ((1, 1, 1, 1), (1, 17, 40, 64), 4, 4, 16, 16, 0, 0.0),        # decode batch
    ((13, 1, 9), (13, 30, 37), 8, 2, 64, 16, 0, 0.0),               # prefill + decode + chunk after a prefix
    ((13, 1, 9), (13, 30, 37), 6, 1, 24, 8, 5, 0.0),                # multi-query, sliding window
    ((0, 20, 3), (5, 20, 3), 4, 2, 32, 4, 0, 30.0),                 # an idle sequence, soft-capping
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_major", [True, False])
def test_paged_attention_matches_reference(device, case, dtype, head_major):
    qlens, ctxs, hq, hkv, d, bs, window, cap = case
    q, kv, qsl, sl, table = _batch(qlens, ctxs, hq, hkv, d, bs, dtype, head_major)
    scale = d ** -0.5
    ref = ops.paged_attention_reference(q, kv, qsl, sl, table, scale, window, cap)
    out = torch.full(q.shape, float("nan"), dtype=dtype, device=device)
    ops.paged_attention(out, q.to(device), kv.to(device), qsl.to(device), sl.to(device), table.to(device),
                        scale, window, cap)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=tol, rtol=tol)


def test_paged_attention_long_context(device):
    # Many blocks per sequence and the online softmax's rescaling across them.
    q, kv, qsl, sl, table = _batch((1, 64), (700, 513), 8, 2, 64, 16, torch.float32, True, seed=3)
    kv = kv * 4  # peaked scores: the running max moves
    ref = ops.paged_attention_reference(q, kv, qsl, sl, table, 0.125)
    out = torch.empty(q.shape, device=device)
    ops.paged_attention(out, q.to(device), kv.to(device), qsl.to(device), sl.to(device), table.to(device), 0.125)
    torch.testing.assert_close(out.cpu(), ref, atol=1e-5, rtol=1e-5)


def test_paged_attention_bad_block_raises(device):
    q, kv, qsl, sl, table = _batch((1,), (20,), 2, 2, 8, 16, torch.float32, False)
    table[0, 1] = kv.shape[0] + 5
    out = torch.empty(q.shape, device=device)
    with pytest.raises((IndexError, RuntimeError), match="block_table"):
        ops.paged_attention(out, q.to(device), kv.to(device), qsl.to(device), sl.to(device), table.to(device), 1.0)
        out.cpu()


@pytest.mark.parametrize("dtype,cache_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                               (torch.float32, torch.bfloat16)])
def test_reshape_and_cache_matches_reference(device, dtype, cache_dtype):
    g = torch.Generator().manual_seed(1)
    t, h, d, nb, bs = 9, 2, 8, 5, 4
    key = torch.randn(t, h, d, generator=g).to(dtype)
    value = torch.randn(t, h, d, generator=g).to(dtype)
    slots = torch.tensor([5, 0, -1, 19, 7, -1, 3, 12, 8])
    cache = torch.randn(nb, h, bs, 2 * d, generator=g).to(cache_dtype)   # logical layout, head-major
    ref = cache.clone().transpose(1, 2)                                   # [blocks, block_size, heads, 2D]
    for i, s in enumerate(slots.tolist()):
        if s >= 0:
            ref[s // bs, s % bs, :, :d] = key[i].to(cache_dtype)
            ref[s // bs, s % bs, :, d:] = value[i].to(cache_dtype)
    dev_cache = cache.to(device)
    ops.reshape_and_cache(key.to(device), value.to(device), dev_cache.transpose(1, 2), slots.to(device))
    assert torch.equal(dev_cache.cpu().transpose(1, 2), ref)


def test_exponential_with_generator_is_seeded(device):
    def draw(seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        return torch.empty(4096, device=device).exponential_(generator=gen).cpu()

    a, b, c = draw(7), draw(7), draw(8)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert (a > 0).all()
    # Exponential(1): mean 1, variance 1 (4096 samples: standard error ~0.016 on the mean)
    assert abs(a.mean().item() - 1.0) < 0.08 and abs(a.var().item() - 1.0) < 0.2
    # lambda scales it, and the default generator still works
    gen = torch.Generator(device=device).manual_seed(7)
    assert torch.allclose(torch.empty(4096, device=device).exponential_(2.0, generator=gen).cpu(), a / 2)
    assert torch.empty(16, device=device).exponential_().cpu().gt(0).all()


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_embedding_matches_reference(device, neox, dtype):
    # vLLM's native formula (RotaryEmbedding.forward_static) on CPU in float64 as the reference; query
    # and key are views of one fused QKV row, as vLLM passes them; a partial rotary dim (24 of 32).
    g = torch.Generator().manual_seed(2)
    t, hq, hkv, hs, rot = 7, 4, 2, 32, 24
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    freqs = torch.arange(64, dtype=torch.float64)[:, None] * inv[None]
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    positions = torch.tensor([0, 5, 6, 7, 63, 1, 2])
    qkv = torch.randn(t, (hq + 2 * hkv) * hs, generator=g).to(dtype)

    def rope(x):
        x = x.double().view(t, -1, hs).clone()
        cos, sin = cache[positions].chunk(2, dim=-1)
        cos, sin = cos[:, None], sin[:, None]
        r = x[..., :rot]
        if neox:
            x1, x2 = r.chunk(2, dim=-1)
            r = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            x1, x2 = r[..., ::2], r[..., 1::2]
            r = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        x[..., :rot] = r
        return x.view(t, -1)

    want_q, want_k = rope(qkv[:, :hq * hs]), rope(qkv[:, hq * hs:(hq + hkv) * hs])
    dev = qkv.to(device)
    q, k = dev[:, :hq * hs], dev[:, hq * hs:(hq + hkv) * hs]
    torch.ops.torch_tpu.rotary_embedding(positions.to(device), q, k, cache.to(device=device, dtype=dtype), hs, neox)
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(q.cpu().double(), want_q, atol=tol, rtol=tol)
    torch.testing.assert_close(k.cpu().double(), want_k, atol=tol, rtol=tol)
    # the values part of the fused row is untouched
    assert torch.equal(dev[:, (hq + hkv) * hs:].cpu(), qkv[:, (hq + hkv) * hs:])
