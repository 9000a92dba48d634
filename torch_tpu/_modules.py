"""Kernels for everyday nn modules whose ATen ops are compositions on CPU/CUDA: the attention fast path
of nn.MultiheadAttention and nn.TransformerEncoderLayer in eval mode (`_native_multi_head_attention`,
`_transformer_encoder_layer_fwd`), RReLU (`rrelu_with_noise`), `torch.mode(out=)`, and the meta
functions the boxed fallback needs for the fused GRU cell (whose C kernels are in runtime/ops/train).
Each one follows ATen's CPU kernel step by step, in ops that have C kernels."""
import math

import torch

aten = torch.ops.aten


# ---- attention fast path (ATen native/transformers/attention.cpp, transformer.cpp) ----

def _qkv_projection(query, key, value, embed_dim, qkv_weight):
    if query is key and key is value:
        return torch.nn.functional.linear(query, qkv_weight)
    if key is value:
        q = torch.nn.functional.linear(query, qkv_weight[:embed_dim])
        kv = torch.nn.functional.linear(key, qkv_weight[embed_dim:])
        return q, kv[..., :embed_dim], kv[..., embed_dim:]
    w = qkv_weight.split(embed_dim, 0)
    return tuple(torch.nn.functional.linear(x, wi) for x, wi in zip((query, key, value), w))


def _masked_softmax(scores, mask, mask_type):
    """softmax over the last dim with masked (True) positions left out; a row with every position masked
    gives zeros (ATen's _masked_softmax). mask_type 0: [L, S]; 1: key padding [B, S]; 2: [B, H, L, S]."""
    if mask is None:
        return torch.softmax(scores, -1)
    mask = mask.to(torch.bool)
    if mask_type == 1 or (mask_type is None and mask.dim() == 2 and mask.shape[0] == scores.shape[0]
                          and mask.shape[0] != mask.shape[1]):
        mask = mask[:, None, None, :]
    mask = mask.expand(scores.shape)
    s = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(s, -1)
    return out.masked_fill(mask.all(-1, keepdim=True), 0.0)


def _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                 proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                 mask_type=None):
    torch._check(query.dim() == 3 and key.dim() == 3 and value.dim() == 3,
                 lambda: f"expected 3-D `query`, `key`, `value`, got {query.dim()}-D, {key.dim()}-D, {value.dim()}-D")
    torch._check(query.shape[2] == embed_dim, lambda: f"passed-in embed_dim {embed_dim} didn't match last dim of query "
                                                      f"{query.shape[2]}")
    torch._check(embed_dim % num_head == 0, lambda: "embed_dim must be divisible by num_heads")
    b, t = query.shape[0], query.shape[1]
    dh = embed_dim // num_head
    proj = _qkv_projection(query, key, value, embed_dim, qkv_weight)
    if isinstance(proj, tuple):
        q, k, v = proj
    else:
        q, k, v = proj.split(embed_dim, -1)
    bq, bk, bv = qkv_bias.split(embed_dim)

    def heads(x, bias):
        return (x + bias).view(x.shape[0], x.shape[1], num_head, dh).transpose(1, 2)

    q = heads(q, bq) / math.sqrt(dh)   # transform_bias_rescale_qkv: q scaled before the product
    k, v = heads(k, bk), heads(v, bv)
    scores = torch.matmul(q, k.transpose(-2, -1))
    attn = _masked_softmax(scores, mask, mask_type)
    ctx = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, embed_dim)
    out = torch.nn.functional.linear(ctx, proj_weight, proj_bias)
    if not need_weights:
        return out, query.new_empty((0,))
    if average_attn_weights:
        attn = attn.sum(1) / num_head
    return out, attn


def _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                   mask_type=None):
    F = torch.nn.functional
    x = src
    if norm_first:
        x = F.layer_norm(x, (embed_dim,), norm_weight_1, norm_bias_1, eps)
    x = _native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                     mask, False, True, mask_type)[0]
    x = x + src
    if not norm_first:
        x = F.layer_norm(x, (embed_dim,), norm_weight_1, norm_bias_1, eps)
    residual = x
    if norm_first:
        x = F.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)
    x = F.linear(x, ffn_weight_1, ffn_bias_1)
    x = F.gelu(x) if use_gelu else F.relu(x)
    x = F.linear(x, ffn_weight_2, ffn_bias_2) + residual
    if not norm_first:
        x = F.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)
    return x


# ---- RReLU ----

def _rrelu_with_noise(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """Training: each negative element is scaled by a slope drawn from U(lower, upper), recorded in
    `noise` (1 for the others) for the backward; eval: the mean slope (ATen's rrelu_with_noise_out_cpu)."""
    lower, upper = float(lower), float(upper)
    if not training:
        return torch.nn.functional.leaky_relu(self, (lower + upper) / 2)
    slope = torch.empty_like(self).uniform_(lower, upper, generator=generator)
    r = torch.where(self <= 0, slope, torch.ones_like(self))
    noise.copy_(r.reshape(noise.shape) if noise.numel() == r.numel() else r)
    return self * r


def _rrelu_with_noise_(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    return self.copy_(_rrelu_with_noise(self, noise, lower, upper, training, generator))


def _rrelu_with_noise_out(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None, *, out):
    r = _rrelu_with_noise(self, noise, lower, upper, training, generator)
    if out.shape != r.shape:
        out.resize_(r.shape)
    return out.copy_(r)


# ---- torch.mode(out=): ATen's mode_out refuses devices other than CPU/CUDA/XPU ----

def _mode_values(self, dim=-1, keepdim=False, *, values, indices):
    v, i = torch.mode(self, dim, keepdim)
    for o, r in ((values, v), (indices, i)):
        torch._check(o.dtype == r.dtype, lambda: f"mode(): expected out tensor dtype {r.dtype}, got {o.dtype}")
        if o.shape != r.shape:
            o.resize_(r.shape)
        o.copy_(r)
    return values, indices


# ---- meta functions the boxed fallback shapes outputs with ----

def _gru_cell_meta(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    torch._check(input_gates.dim() == 2 and input_gates.shape == hidden_gates.shape
                 and input_gates.shape[1] == 3 * hx.shape[1],
                 lambda: f"_thnn_fused_gru_cell: gates {list(input_gates.shape)} do not match hx {list(hx.shape)}")
    return hx.new_empty(hx.shape), hx.new_empty((hx.shape[0], 5 * hx.shape[1]))


def _gru_cell_backward_meta(grad_hy, workspace, has_bias):
    b, h = grad_hy.shape
    gates = grad_hy.new_empty((b, 3 * h))
    bias = grad_hy.new_empty((3 * h,)) if has_bias else grad_hy.new_empty((0,))
    return gates, gates.new_empty((b, 3 * h)), grad_hy.new_empty((b, h)), bias, bias.new_empty(bias.shape)


def register_kernels(lib) -> "list[str]":
    """Registers these kernels (PrivateUse1) and the missing meta functions into `lib`; returns the
    qualified names of the PrivateUse1 kernels."""
    kernels = {
        "_native_multi_head_attention": _native_multi_head_attention,
        "_transformer_encoder_layer_fwd": _transformer_encoder_layer_fwd,
        "rrelu_with_noise": _rrelu_with_noise,
        "rrelu_with_noise_": _rrelu_with_noise_,
        "rrelu_with_noise.out": _rrelu_with_noise_out,
        "mode.values": _mode_values,
    }
    for name, fn in kernels.items():
        lib.impl(name, fn, "PrivateUse1")
    metas = {"_thnn_fused_gru_cell": _gru_cell_meta, "_thnn_fused_gru_cell_backward": _gru_cell_backward_meta}
    for name, fn in metas.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"):
            lib.impl(name, fn, "Meta")
    return [f"aten::{n}" for n in kernels]


# ---- decompositions that miss a check CPU makes (merged over PyTorch's by decompositions.py) ----

def _reflection_pad2d(self, padding):
    """CPU's check first (the 1-d and 3-d forms get it from their structured meta; 2-d has none): each
    pad must be smaller than the dim it reflects; the input 3-d, or 4-d with a batch, whose other
    dims are not empty (PyTorch's decomposition padded a [3, 0, 10, 10] input where CPU raises)."""
    torch._check(len(padding) == 4, lambda: f"padding size is expected to be 4, but got: {len(padding)}")
    torch._check(self.dim() in (3, 4) and all(s != 0 for s in self.shape[self.dim() - 3:]), lambda: (
        f"Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions "
        f"for input, but got: {list(self.shape)}"))
    for dim, (lo, hi) in ((self.dim() - 1, padding[0:2]), (self.dim() - 2, padding[2:4])):
        size = self.shape[dim]
        torch._check(lo < size and hi < size, lambda: (
            f"Argument #4: Padding size should be less than the corresponding input dimension, but got: "
            f"padding ({lo}, {hi}) at dimension {dim} of input {list(self.shape)}"))
    from torch._decomp.decompositions import _reflection_pad
    return _reflection_pad(self, padding)


# CPU's names of the dtypes (c10::toString), which its dispatch macros' refusals print
_CPU_DTYPE_NAMES = {torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short",
                    torch.int32: "Int", torch.int64: "Long", torch.uint16: "UInt16", torch.uint32: "UInt32",
                    torch.uint64: "UInt64", torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat",
                    torch.complex128: "ComplexDouble"}


def _upsample_dtype_checked(name: str, uint8: bool):
    """The upsample forwards that reach the device through PyTorch's decomposition (no C kernel):
    CPU computes them in the floating types (and the nearest ones in uint8) and refuses the others
    at the call; the decomposition would compute any dtype."""
    from torch._decomp import decomposition_table
    decomp = decomposition_table[getattr(aten, name).default]

    def kernel(self, *args, **kwargs):
        if not self.is_floating_point() and not (uint8 and self.dtype == torch.uint8):
            raise NotImplementedError(
                f'"{name}" not implemented for \'{_CPU_DTYPE_NAMES.get(self.dtype, str(self.dtype))}\'')
        return decomp(self, *args, **kwargs)
    return kernel


def overrides() -> dict:
    table = {aten.reflection_pad2d.default: _reflection_pad2d}
    for name, uint8 in (("upsample_nearest3d", True), ("_upsample_nearest_exact1d", True),
                        ("_upsample_nearest_exact2d", True), ("_upsample_nearest_exact3d", True),
                        ("upsample_trilinear3d", False)):
        table[getattr(aten, name).default] = _upsample_dtype_checked(name, uint8)
    return table
