"""The serving kernels (runtime/ops/serve, reached as torch_tpu::paged_attention and
torch_tpu::reshape_and_cache) against a plain PyTorch reference on CPU: random block tables, ragged
batches mixing decode, prefill and a prefill chunk after a cached prefix, grouped- and multi-query heads,
sliding window, soft-capping, ALiBi, float32/bfloat16/float16 and FP8 (e4m3/e5m2 codes in a uint8 cache,
per-tensor scales; PyTorch's float8 dtypes decode and encode the reference); and seeded sampling's
Tensor.exponential_ with a generator. Needs no vLLM."""
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


FP8 = ["fp8", "fp8_e5m2"]  # "fp8" is e4m3 (vLLM's "fp8_e4m3" names the same format)


def _fp8_cache(kv, fmt, k_scale, v_scale):
    """kv's keys and values quantized to fp8 codes (uint8) with the scales, by the PyTorch reference."""
    d = kv.shape[-1] // 2
    return torch.cat((ops.fp8_quantize_reference(kv[..., :d], fmt, k_scale),
                      ops.fp8_quantize_reference(kv[..., d:], fmt, v_scale)), dim=-1)


@pytest.mark.parametrize("fmt", FP8)
@pytest.mark.parametrize("case", CASES[1:3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_attention_fp8_matches_reference(device, fmt, case, dtype):
    # The kernel decodes the codes and applies the scales itself; the reference decodes them with
    # PyTorch's float8 dtype and computes in float64 from the same (dequantized) cache.
    qlens, ctxs, hq, hkv, d, bs, window, cap = case
    q, kv, qsl, sl, table = _batch(qlens, ctxs, hq, hkv, d, bs, dtype, True)
    k_scale, v_scale = 0.05, 0.02
    # stored head-major, as vLLM's cache is: [blocks, kv_heads, block_size, 2D] seen through the transpose
    cache = _fp8_cache(kv.float() * 3, fmt, k_scale, v_scale).transpose(1, 2).contiguous().transpose(1, 2)
    assert cache.dtype == torch.uint8
    scale = d ** -0.5
    ref = ops.paged_attention_reference(q, cache, qsl, sl, table, scale, window, cap, None, fmt, k_scale, v_scale)
    out = torch.full(q.shape, float("nan"), dtype=dtype, device=device)
    ops.paged_attention(out, q.to(device), cache.to(device), qsl.to(device), sl.to(device), table.to(device),
                        scale, window, cap, None, fmt, k_scale, v_scale)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("fmt", FP8)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k_scale,v_scale", [(1.0, 1.0), (0.37, 2.5)])
def test_reshape_and_cache_fp8_matches_reference(device, fmt, dtype, k_scale, v_scale):
    # Bit-exact codes: round to nearest even over magnitudes from the subnormals to past the largest
    # finite value (saturated), infinities saturated, NaN kept; padding slots leave the cache alone.
    g = torch.Generator().manual_seed(4)
    t, h, d, nb, bs = 9, 2, 32, 5, 4
    mag = 10.0 ** (torch.rand(t, h, d, generator=g) * 12 - 7)
    key = (torch.randn(t, h, d, generator=g).sign() * mag).to(dtype)
    value = (torch.randn(t, h, d, generator=g) * 100).to(dtype)
    key[0, 0, :4] = torch.tensor([float("inf"), -float("inf"), float("nan"), -1e6])
    slots = torch.tensor([5, 0, -1, 19, 7, -1, 3, 12, 8])
    cache = torch.randint(0, 256, (nb, h, bs, 2 * d), generator=g, dtype=torch.uint8)
    ref = cache.clone().transpose(1, 2)
    kq, vq = ops.fp8_quantize_reference(key, fmt, k_scale), ops.fp8_quantize_reference(value, fmt, v_scale)
    for i, s in enumerate(slots.tolist()):
        if s >= 0:
            ref[s // bs, s % bs, :, :d] = kq[i]
            ref[s // bs, s % bs, :, d:] = vq[i]
    dev_cache = cache.to(device)
    ops.reshape_and_cache(key.to(device), value.to(device), dev_cache.transpose(1, 2), slots.to(device), fmt,
                          k_scale, v_scale)
    assert torch.equal(dev_cache.cpu().transpose(1, 2), ref)


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_cache_round_trip_is_exact_on_codes(device, fmt):
    # Every finite value of the format written with scale 1 comes back as its own code, and attention
    # over a one-token context returns the stored value (the softmax weight is exactly 1).
    f8 = ops.FP8_FORMATS[fmt]
    codes = torch.arange(256, dtype=torch.uint8)
    vals = codes.view(f8).float()
    finite = vals.isfinite()
    n = int(finite.sum())
    x = vals[finite].view(n, 1, 1)
    cache = torch.zeros(n, 1, 1, 2, dtype=torch.uint8, device=device)
    ops.reshape_and_cache(x.to(device), x.to(device), cache, torch.arange(n, device=device), fmt)
    got = cache.cpu()
    assert torch.equal(got[:, 0, 0, 0], codes[finite]) and torch.equal(got[:, 0, 0, 1], codes[finite])
    q = torch.ones(n, 1, 1)
    out = torch.empty(n, 1, 1, device=device)
    ones = torch.ones(n, dtype=torch.int32)
    ops.paged_attention(out, q.to(device), cache, torch.arange(n + 1, dtype=torch.int32).to(device),
                        ones.to(device), torch.arange(n, dtype=torch.int32).view(n, 1).to(device), 1.0,
                        kv_cache_dtype=fmt, v_scale=0.5)
    assert torch.equal(out.cpu(), x * 0.5)


@pytest.mark.parametrize("fmt", FP8)
@pytest.mark.parametrize("width", [8, 16, 24])
def test_fp8_cache_every_code_decodes_in_rows(device, fmt, width):
    # All 256 codes (NaNs, infinities and subnormals included) as the values of one-token contexts,
    # `width` to a row (the vector widening takes 8 or 16 codes at a time, the rest one by one): PyTorch's
    # float8 decoding exactly.
    f8 = ops.FP8_FORMATS[fmt]
    n = (256 + width - 1) // width
    codes = torch.cat((torch.arange(256), torch.zeros(n * width - 256, dtype=torch.long))).to(torch.uint8)
    codes = codes.view(n, width)
    cache = torch.zeros(n, 1, 1, 2 * width, dtype=torch.uint8)
    cache[:, 0, 0, width:] = codes
    out = torch.empty(n, 1, width, device=device)
    ones = torch.ones(n, dtype=torch.int32)
    ops.paged_attention(out, torch.zeros(n, 1, width).to(device), cache.to(device),
                        torch.arange(n + 1, dtype=torch.int32).to(device), ones.to(device),
                        torch.arange(n, dtype=torch.int32).view(n, 1).to(device), 1.0, kv_cache_dtype=fmt)
    want = codes.view(f8).float().view(n, 1, width)
    got = out.cpu()
    assert torch.equal(got.isnan(), want.isnan())
    # (as values: a code of -0 comes out +0, the softmax's accumulator starting at +0)
    assert torch.equal(torch.where(want.isnan(), 0, got), torch.where(want.isnan(), 0, want))


def test_fp8_cache_bad_arguments_raise(device):
    q, kv, qsl, sl, table = _batch((1,), (20,), 2, 2, 8, 16, torch.float32, False)
    args = (q.to(device), kv.to(device), qsl.to(device), sl.to(device), table.to(device), 1.0)
    out = torch.empty(q.shape, device=device)
    with pytest.raises(RuntimeError, match="uint8 cache"):       # fp8 named, a float cache given
        ops.paged_attention(out, *args, kv_cache_dtype="fp8")
        out.cpu()
    u8 = kv.to(torch.uint8).to(device)
    with pytest.raises(RuntimeError, match="needs kv_cache_dtype"):  # a uint8 cache read as floats
        ops.paged_attention(out, args[0], u8, *args[2:])
        out.cpu()
    with pytest.raises(RuntimeError, match="not supported"):
        ops.reshape_and_cache(args[0], args[0], u8, torch.zeros(1, dtype=torch.int64, device=device), "int4")
        u8.cpu()
    with pytest.raises(RuntimeError, match="positive and finite"):
        ops.paged_attention(out, args[0], u8, *args[2:], kv_cache_dtype="fp8", k_scale=0.0)
        out.cpu()
    # the device keeps working
    ops.paged_attention(out, *args)
    torch.testing.assert_close(out.cpu(), ops.paged_attention_reference(q, kv, qsl, sl, table, 1.0))


@pytest.mark.parametrize("case", CASES[:3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_attention_alibi_matches_reference(device, case, dtype):
    qlens, ctxs, hq, hkv, d, bs, window, cap = case
    q, kv, qsl, sl, table = _batch(qlens, ctxs, hq, hkv, d, bs, dtype, True)
    # vLLM's (BLOOM's) slopes for hq heads: 2^(-8 (i + 1) / hq)
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / hq) for i in range(hq)], dtype=torch.float32)
    scale = d ** -0.5
    ref = ops.paged_attention_reference(q, kv, qsl, sl, table, scale, window, cap, slopes)
    out = torch.full(q.shape, float("nan"), dtype=dtype, device=device)
    ops.paged_attention(out, q.to(device), kv.to(device), qsl.to(device), sl.to(device), table.to(device),
                        scale, window, cap, slopes.to(device))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=tol, rtol=tol)
    # the slopes change the answer (a context longer than one token)
    plain = ops.paged_attention_reference(q, kv, qsl, sl, table, scale, window, cap)
    assert (plain.float() - ref.float()).abs().max() > 10 * tol


def test_paged_attention_alibi_bad_slopes_raise(device):
    q, kv, qsl, sl, table = _batch((1,), (20,), 2, 2, 8, 16, torch.float32, False)
    out = torch.empty(q.shape, device=device)
    with pytest.raises(RuntimeError, match="alibi_slopes"):
        ops.paged_attention(out, q.to(device), kv.to(device), qsl.to(device), sl.to(device), table.to(device), 1.0,
                            alibi_slopes=torch.ones(3, device=device))
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


# ---- speculative decoding's rejection sampling (runtime/ops/serve/spec.c) against a plain Python
# ---- transcription of vLLM's Triton kernels (vllm/v1/sample/rejection_sampler.py)

def _spec_batch(seed, vocab=37):
    g = torch.Generator().manual_seed(seed)
    counts = [3, 0, 2, 3, 1]                       # drafts per request (one proposes none)
    B, S, N = len(counts), max(counts), sum(counts)
    cu = torch.tensor(counts).cumsum(0).to(torch.int32)
    target_probs = torch.rand(N, vocab, generator=g).softmax(-1)
    draft = target_probs.argmax(-1).to(torch.int32)
    flip = torch.rand(N, generator=g) < 0.4        # some drafts disagree with the target
    draft[flip] = torch.randint(0, vocab, (int(flip.sum()),), generator=g, dtype=torch.int32)
    draft[-1] = -1                                 # a padded draft is always rejected
    return dict(B=B, S=S, N=N, V=vocab, cu=cu, draft=draft, target_probs=target_probs,
                draft_probs=torch.rand(N, vocab, generator=g).softmax(-1),
                bonus=torch.randint(0, vocab, (B, 1), generator=g), uniform=torch.rand(N, generator=g).double(),
                is_greedy=torch.tensor([True, False, False, True, False]),
                inv_q=1.0 / torch.empty(B, vocab).exponential_(generator=g))


def _ranges(cu):
    starts = [0] + cu.tolist()[:-1]
    return list(zip(starts, cu.tolist()))


def _greedy_ref(b, out, argmax):
    for r, (a, e) in enumerate(_ranges(b["cu"])):
        if not b["is_greedy"][r]:
            continue
        rejected = False
        for p in range(e - a):
            out[r, p] = argmax[a + p]
            rejected = int(b["draft"][a + p]) != int(argmax[a + p])
            if rejected:
                break
        if not rejected:
            out[r, e - a] = b["bonus"].view(-1)[r]


def _random_ref(b, out, recovered, with_draft_probs):
    for r, (a, e) in enumerate(_ranges(b["cu"])):
        if b["is_greedy"][r]:
            continue
        rejected = False
        for p in range(e - a):
            t, tok = a + p, int(b["draft"][a + p])
            dp = float(b["draft_probs"][t, tok]) if with_draft_probs and tok >= 0 else 1.0
            accepted = tok >= 0 and dp > 0 and float(b["target_probs"][t, tok]) / dp >= float(b["uniform"][t])
            out[r, p] = tok if accepted else recovered[t]
            if not accepted:
                rejected = True
                break
        if not rejected:
            out[r, e - a] = b["bonus"].view(-1)[r]


def _recovered_ref(b, with_draft_probs):
    rec = torch.zeros(b["N"], dtype=torch.int32)
    for r, (a, e) in enumerate(_ranges(b["cu"])):
        for t in range(a, e):
            p = b["target_probs"][t].double().clone()
            if with_draft_probs:
                p = (p - b["draft_probs"][t].double()).clamp(min=0)
            elif b["draft"][t] >= 0:
                p[int(b["draft"][t])] = 0
            rec[t] = int((p * b["inv_q"][r].double()).argmax())
    return rec


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("with_draft_probs", [False, True])
def test_rejection_sampling_kernels_match_reference(device, seed, with_draft_probs):
    b = _spec_batch(seed)
    d = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in b.items()}
    dp = d["draft_probs"] if with_draft_probs else None
    # recovered tokens
    rec = torch.full((b["N"],), -7, dtype=torch.int32, device=device)
    ops.vllm_sample_recovered_tokens_kernel(rec, d["cu"], d["draft"], dp, d["target_probs"], d["inv_q"], b["V"],
                                            NO_DRAFT_PROBS=not with_draft_probs)
    want_rec = _recovered_ref(b, with_draft_probs)
    assert torch.equal(rec.cpu(), want_rec)
    # random acceptance (non-greedy requests)
    out = torch.full((b["B"], b["S"] + 1), -1, dtype=torch.int32, device=device)
    ops.vllm_rejection_random_sample_kernel(out, d["cu"], d["draft"], dp, d["target_probs"], d["bonus"], rec,
                                            d["uniform"], d["is_greedy"], b["S"], b["V"],
                                            NO_DRAFT_PROBS=not with_draft_probs)
    want = torch.full((b["B"], b["S"] + 1), -1, dtype=torch.int32)
    _random_ref(b, want, want_rec, with_draft_probs)
    assert torch.equal(out.cpu(), want)
    # greedy acceptance against the target's argmax (greedy requests only)
    argmax = b["target_probs"].argmax(-1)
    out = torch.full((b["B"], b["S"] + 1), -1, dtype=torch.int32, device=device)
    ops.vllm_rejection_greedy_sample_kernel(out, d["cu"], d["draft"], argmax.to(device), d["bonus"], d["is_greedy"],
                                            b["S"])
    want = torch.full((b["B"], b["S"] + 1), -1, dtype=torch.int32)
    _greedy_ref(b, want, argmax)
    assert torch.equal(out.cpu(), want)
    # each pass wrote its own requests only
    assert (want[b["is_greedy"]] >= 0).any() and (want[~b["is_greedy"]] == -1).all()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32])
def test_spec_expand_matches_reference(device, dtype):
    values = torch.tensor([4, 0, 9, 4], dtype=dtype)
    cu = torch.tensor([2, 2, 5, 6], dtype=torch.int32)
    out = torch.full((6,), -3, dtype=dtype, device=device)
    ops.vllm_expand_kernel(out, values.to(device), cu.to(device), 4, 7)      # 4 becomes 7
    assert torch.equal(out.cpu(), torch.tensor([7, 7, 9, 9, 9, 7], dtype=dtype))


def test_rejection_sampling_bad_input_raises(device):
    b = _spec_batch(0)
    out = torch.zeros(b["B"], 2, dtype=torch.int32, device=device)    # rows too short for 3 drafts
    with pytest.raises(IndexError, match="rejection_greedy_sample"):
        ops.vllm_rejection_greedy_sample_kernel(out, b["cu"].to(device), b["draft"].to(device),
                                                b["target_probs"].argmax(-1).to(device), b["bonus"].to(device),
                                                None, b["S"])
        out.cpu()
    with pytest.raises(NotImplementedError, match="synthetic"):
        ops.vllm_rejection_greedy_sample_kernel(out, None, None, None, None, None, 1, SYNTHETIC_MODE=True)


# vLLM's RMSNorm and SiLU-and-mul as our kernels (torch_tpu::rms_norm, fused_add_rms_norm, silu_and_mul;
# runtime/ops/serve/layers.c) against vLLM's native PyTorch formulas on the CPU, which round where the
# kernels round (x * rstd through the weight's dtype, silu(gate) through the input's).
def _rms_norm_native(x, weight, eps, residual=None):
    dt = x.dtype
    x = x.float()
    if residual is not None:
        x = x + residual.float()
        residual = x.to(dt)
    x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        x = x.to(weight.dtype) * weight
    return x.to(dt), residual


def _layer_rows(shape, dtype, gen, strided):
    # strided: a view whose leading dims step over a wider buffer (vLLM's q/k slices of a fused QKV row)
    big = torch.randn(*shape[:-1], shape[-1] + (24 if strided else 0), generator=gen).to(dtype)
    return big[..., :shape[-1]]


LAYER_SHAPES = [((5, 64), False), ((3, 4, 48), True), ((2, 1000), False), ((7, 33), True)]


@pytest.mark.parametrize("shape,strided", LAYER_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm_matches_vllm_native(device, shape, strided, dtype, with_weight):
    gen = torch.Generator().manual_seed(0)
    x = _layer_rows(shape, dtype, gen, strided)
    w = torch.randn(shape[-1], generator=gen).to(dtype) if with_weight else None
    want, _ = _rms_norm_native(x, w, 1e-6)
    out = torch.empty(shape, dtype=dtype, device=device)
    torch.ops.torch_tpu.rms_norm(out, x.to(device), None if w is None else w.to(device), 1e-6)
    torch.testing.assert_close(out.cpu(), want)


@pytest.mark.parametrize("shape,strided", LAYER_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fused_add_rms_norm_matches_vllm_native(device, shape, strided, dtype):
    gen = torch.Generator().manual_seed(1)
    x = _layer_rows(shape, dtype, gen, strided)
    res = torch.randn(shape, generator=gen).to(dtype)
    w = torch.randn(shape[-1], generator=gen).to(dtype)
    want, want_res = _rms_norm_native(x, w, 1e-5, res)
    xd, rd = x.to(device), res.to(device)
    torch.ops.torch_tpu.fused_add_rms_norm(xd, rd, w.to(device), 1e-5)
    torch.testing.assert_close(rd.cpu(), want_res, rtol=0, atol=0)  # one rounding of the same float sum
    torch.testing.assert_close(xd.cpu(), want)


@pytest.mark.parametrize("shape,strided", [((5, 2 * 64), False), ((3, 4, 2 * 48), True), ((2, 2 * 1000), False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_silu_and_mul_matches_vllm_native(device, shape, strided, dtype):
    gen = torch.Generator().manual_seed(2)
    x = _layer_rows(shape, dtype, gen, strided) * 4
    d = shape[-1] // 2
    want = torch.nn.functional.silu(x[..., :d]) * x[..., d:]
    out = torch.empty(shape[:-1] + (d,), dtype=dtype, device=device)
    torch.ops.torch_tpu.silu_and_mul(out, x.to(device))
    torch.testing.assert_close(out.cpu(), want)


def test_layer_kernels_bad_input_raise(device):
    x = torch.randn(4, 8, device=device)
    with pytest.raises(RuntimeError, match="weight must be a float vector"):
        torch.ops.torch_tpu.rms_norm(torch.empty_like(x), x, torch.ones(5, device=device), 1e-6)
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="residual must have the input's shape"):
        torch.ops.torch_tpu.fused_add_rms_norm(x, torch.randn(4, 9, device=device), None, 1e-6)
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="silu_and_mul: out must be"):
        torch.ops.torch_tpu.silu_and_mul(torch.empty(4, 8, device=device), x)
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="contiguous in the last dim"):
        torch.ops.torch_tpu.silu_and_mul(torch.empty(8, 2, device=device), x.t())
        torch.tpu.synchronize()
    # the device keeps working
    y = torch.empty(4, 4, device=device)
    torch.ops.torch_tpu.silu_and_mul(y, x)
    torch.testing.assert_close(y.cpu(), torch.nn.functional.silu(x.cpu()[:, :4]) * x.cpu()[:, 4:])


# The sampler's top-k / top-p filtering (torch_tpu::top_k_top_p, runtime/ops/serve/sample.c) against
# vLLM's sort-based PyTorch version (apply_top_k_top_p_pytorch, restated here) on the CPU.
def _top_k_top_p_sorted(logits, k, p):
    logits = logits.clone()
    srt, idx = logits.sort(dim=-1, descending=False)
    if k is not None:
        kth = srt.gather(1, (srt.size(1) - k.long()).unsqueeze(1))
        srt.masked_fill_(srt < kth, -float("inf"))
    near = torch.zeros_like(srt, dtype=torch.bool)
    if p is not None:
        cum = srt.softmax(dim=-1).cumsum(dim=-1)
        mask = cum <= 1 - p.unsqueeze(1)
        mask[:, -1] = False
        srt.masked_fill_(mask, -float("inf"))
        near = (cum - (1 - p.unsqueeze(1))).abs() < 1e-5  # a float32 sum's order decides these
    return logits.scatter_(-1, idx, srt), torch.zeros_like(near).scatter_(-1, idx, near)


@pytest.mark.parametrize("vocab", [7, 512, 32000])
@pytest.mark.parametrize("mode", ["k", "p", "kp"])
def test_top_k_top_p_matches_vllm_sorted(device, vocab, mode):
    gen = torch.Generator().manual_seed(vocab)
    B = 6
    logits = torch.randn(B, vocab, generator=gen) * 3
    k = torch.tensor([1, 2, 5, vocab, max(1, vocab // 3), vocab - 1])[:B] if "k" in mode else None
    p = torch.tensor([0.9, 0.5, 1.0, 0.99, 0.1, 0.0])[:B] if "p" in mode else None
    want, near = _top_k_top_p_sorted(logits, k, p)
    got = logits.to(device)
    torch.ops.torch_tpu.top_k_top_p(got, None if k is None else k.to(device), None if p is None else p.to(device))
    got = got.cpu()
    kept, kept_want = got.isfinite(), want.isfinite()
    assert torch.equal(kept | near, kept_want | near) and kept.any(dim=-1).all()
    assert torch.equal(got[kept], logits[kept])  # what stays is untouched


def test_top_k_top_p_keeps_ties_and_rejects_bad_input(device):
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]], device=device)
    torch.ops.torch_tpu.top_k_top_p(logits, torch.tensor([2], device=device), None)
    assert logits.cpu().isfinite().tolist() == [[False, True, True, False, True]]  # the tie at the 2nd all stays
    with pytest.raises(RuntimeError, match="k must be an integer tensor"):
        torch.ops.torch_tpu.top_k_top_p(logits, torch.tensor([2.0, 1.0], device=device), None)
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="logits must be float32"):
        torch.ops.torch_tpu.top_k_top_p(torch.zeros(2, 3, dtype=torch.float16, device=device), None,
                                        torch.tensor([0.5, 0.5], device=device))
        torch.tpu.synchronize()


# The sampler's penalties, min-p and draw (torch_tpu::apply_penalties / min_p / sample_exponential,
# runtime/ops/serve/sample.c) against vLLM 0.32's PyTorch versions, restated here: apply_penalties
# (vllm/model_executor/layers/utils.py with apply_repetition_penalties_torch), MinPLogitsProcessor.apply,
# random_sample (vllm/v1/sample/ops/topk_topp_sampler.py).
def _vllm_penalties(logits, prompt, output, presence, frequency, repetition):
    logits = logits.clone()
    B, V = logits.shape

    def counts(tokens):
        c = torch.zeros(B, V + 1, dtype=torch.long)
        c.scatter_add_(1, tokens, torch.ones_like(tokens))
        return c[:, :V], c[:, :V] > 0
    _, prompt_mask = counts(prompt)
    out_counts, out_mask = counts(output.masked_fill(output == -1, V))
    rep = repetition.unsqueeze(1).repeat(1, V)
    pen = torch.where(prompt_mask | out_mask, rep, 1.0)
    logits *= torch.where(logits > 0, 1.0 / pen, pen)
    logits -= frequency.unsqueeze(1) * out_counts
    logits -= presence.unsqueeze(1) * out_mask
    return logits


def _penalty_batch(vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    B = 5
    logits = torch.randn(B, vocab, generator=g) * 4
    logits[0, 3] = float("-inf")
    plens, olens = [7, 0, 30, 1, 12], [5, 9, 0, 40, 3]
    prompt = torch.full((B, max(plens)), vocab, dtype=torch.int64)   # vLLM pads with the vocab size
    output = torch.full((B, max(olens)), vocab, dtype=torch.int64)
    for r in range(B):
        prompt[r, :plens[r]] = torch.randint(0, min(vocab, 20), (plens[r],), generator=g)  # repeats
        output[r, :olens[r]] = torch.randint(0, min(vocab, 25), (olens[r],), generator=g)
    output[3, 5] = -1  # a speculative placeholder
    presence = torch.tensor([0.0, 0.5, -0.3, 1.5, 0.2])
    frequency = torch.tensor([0.0, 0.25, 0.1, -0.4, 0.7])
    repetition = torch.tensor([1.0, 1.3, 0.8, 2.0, 1.1])
    return logits, prompt, output, presence, frequency, repetition


@pytest.mark.parametrize("vocab", [32, 32000])
@pytest.mark.parametrize("ids", [torch.int64, torch.int32])
def test_penalties_match_vllm(device, vocab, ids):
    logits, prompt, output, presence, frequency, repetition = _penalty_batch(vocab)
    want = _vllm_penalties(logits, prompt, output, presence, frequency, repetition)
    got = logits.to(device)
    torch.ops.torch_tpu.apply_penalties(got, prompt.to(device, ids), output.to(device, ids), presence.to(device),
                                        frequency.to(device), repetition.to(device))
    assert torch.equal(got.cpu(), want)  # bit for bit: the same float32 operations in the same order
    assert not torch.equal(want, logits)


def _vllm_min_p(logits, min_p):
    probs = torch.softmax(logits, dim=-1)
    thr = probs.amax(dim=-1, keepdim=True) * min_p.unsqueeze(1)
    near = (probs.log() - thr.log()).abs() < 1e-5  # within float32 rounding of the threshold
    return logits.masked_fill(probs < thr, float("-inf")), near


@pytest.mark.parametrize("vocab", [7, 32000])
def test_min_p_matches_vllm(device, vocab):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(6, vocab, generator=g) * 3
    logits[2, :2] = float("-inf")
    min_p = torch.tensor([0.0, 0.05, 0.1, 0.5, 1.0, 1e-4])
    want, near = _vllm_min_p(logits, min_p)
    got = logits.to(device)
    torch.ops.torch_tpu.min_p(got, min_p.to(device))
    got = got.cpu()
    kept, kept_want = got.isfinite(), want.isfinite()
    assert torch.equal(kept | near, kept_want | near) and kept.any(dim=-1).all()
    assert torch.equal(got[kept], logits[kept])
    assert torch.equal(got[0], logits[0]) and not kept[3].all()  # min_p 0 leaves a row, 0.5 cuts


def test_sample_exponential_matches_vllm_random_sample(device):
    # The same probabilities and the same generators give vLLM's tokens, the kernel drawing the noise
    # itself: rows 1 and 4 with generators of their own (seeded requests), the rest from the device's
    # default generator, as vLLM draws them; the generators are left as vLLM leaves them.
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(6, 32000, generator=g) * 2, dim=-1).to(device)
    probs[5] = 0
    probs[5, 123] = 1  # a row with one possible token

    probs[2, ::2] = 0  # a filtered row (top-k/top-p leave zeros)
    probs[2] /= probs[2].sum()

    def draw(fn):
        # the tokens, and what the default and a request's generator draw next (their states after)
        torch.tpu.manual_seed(11)
        gens = {i: torch.Generator(device=device).manual_seed(100 + i) for i in (1, 4)}
        tokens = fn(probs.clone(), gens)
        return tokens, torch.rand(5, device=device).cpu(), torch.rand(5, device=device, generator=gens[4]).cpu()

    def vllm_random_sample(p, generators):
        q = torch.empty_like(p)
        if len(generators) != p.shape[0]:
            q.exponential_()
        for i, gen in generators.items():
            q[i].exponential_(generator=gen)
        return p.div_(q).argmax(dim=-1).view(-1)
    want, want_next, want_next4 = draw(vllm_random_sample)
    got, got_next, got_next4 = draw(ops.random_sample)
    got, want = got.cpu(), want.cpu()
    assert got.dtype == torch.int64 and torch.equal(got, want)
    assert torch.equal(got_next, want_next) and torch.equal(got_next4, want_next4)
    assert got[2] % 2 == 1  # never a zero-probability token
    assert got[5] == 123 and len(set(got.tolist())) > 3
    # another seed, other tokens
    torch.tpu.manual_seed(12)
    assert not torch.equal(ops.random_sample(probs.clone(), {}).cpu(), want)
    # draws follow the distribution: a two-token row, 4000 draws
    two = torch.zeros(4000, 2, device=device)
    two[:, 0], two[:, 1] = 0.25, 0.75
    assert abs(ops.random_sample(two, {}).float().mean().item() - 0.75) < 0.03


def test_sampler_kernels_reject_bad_input(device):
    logits = torch.zeros(2, 8, device=device)
    with pytest.raises(RuntimeError, match="prompt token ids must be int32/int64"):
        ids = torch.zeros(2, 1, dtype=torch.int64, device=device)
        torch.ops.torch_tpu.apply_penalties(logits, torch.zeros(2, 3, device=device), ids,
                                            *[torch.zeros(2, device=device)] * 3)
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match=r"min_p must be a float tensor \[2\]"):
        torch.ops.torch_tpu.min_p(logits, torch.zeros(3, device=device))
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="q must be float32"):
        torch.ops.torch_tpu.sample_exponential(torch.empty(2, dtype=torch.int64, device=device), logits,
                                               torch.ones(2, 7, device=device))
        torch.tpu.synchronize()
    # the device keeps working
    out = torch.empty(2, dtype=torch.int64, device=device)
    logits[:, 5] = 1
    torch.ops.torch_tpu.sample_exponential(out, logits, torch.ones(2, 8, device=device))
    assert out.tolist() == [5, 5]
