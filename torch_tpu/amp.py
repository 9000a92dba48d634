"""Autocast for tpu: the cast policy of the AutocastPrivateUse1 dispatch key.

PyTorch ships cast policies for CUDA/CPU/XPU/MPS but none for PrivateUse1 (every op falls through), so
`torch.autocast("tpu")` would change nothing. We register torch.cuda's policy, in three lists:
matrix products and convolutions run in the autocast dtype (bf16 by default), ops that lose accuracy
in 16 bits run in float32, and multi-input ops run in the widest input dtype. Only floating-point
tpu tensors other than float64 are cast, as in torch.cuda.
"""
import torch

_LOWER = [  # run in the autocast dtype
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm",
    "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention",
]
_FP32 = [  # run in float32
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
    "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus",
    "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm",
    "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp", "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
    "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d", "cross_entropy_loss",
    # torch.cuda runs these in float32 when no dtype= is given ("fp32_set_opt_dtype")
    "prod", "prod.dim_int", "cumprod", "cumsum", "linalg_vector_norm", "linalg_matrix_norm", "sum",
    "sum.dim_IntList", "softmax.int", "log_softmax.int", "norm.Scalar", "norm.ScalarOpt_dim",
]
_PROMOTE = [  # run in the widest floating dtype among the inputs
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
    "tensordot", "scatter_add", "cat", "stack", "index_copy",
]

_KEY = "AutocastPrivateUse1"
_lib = None
_fallback_lib = None


def _castable(x):
    return (isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "tpu"
            and x.dtype != torch.float64)


def _cast_tree(value, dtype):
    if _castable(value):
        return value.to(dtype) if value.dtype != dtype else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_tree(v, dtype) for v in value)
    return value


def _widest(args, kwargs):
    widest = None
    for x in list(args) + list(kwargs.values()):
        for t in (x if isinstance(x, (list, tuple)) else (x,)):
            if _castable(t) and (widest is None or torch.promote_types(widest, t.dtype) != widest):
                widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    return widest


def _make_kernel(op, policy):
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

    def kernel(*args, **kwargs):
        if policy == "lower":
            dtype = torch.get_autocast_dtype("tpu")
        elif policy == "fp32":
            dtype = torch.float32
        else:
            dtype = _widest(args, kwargs)
        if dtype is not None:
            args, kwargs = _cast_tree(args, dtype), {k: _cast_tree(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            return op(*args, **kwargs)

    return kernel


def register() -> int:
    """Registers the policy once per process; returns the number of op overloads covered."""
    global _lib
    if _lib is not None:
        return len(_lib._op_impls)
    global _fallback_lib
    if not torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.AutocastPrivateUse1):
        # Ops without a policy pass through autocast untouched (PyTorch registers this for its own
        # devices only; without it every op fails inside torch.autocast("tpu")).
        _fallback_lib = torch.library.Library("_", "IMPL")
        _fallback_lib.fallback(torch.library.fallthrough_kernel, _KEY)
    lib = torch.library.Library("aten", "IMPL")
    for policy, names in (("lower", _LOWER), ("fp32", _FP32), ("promote", _PROMOTE)):
        for spec in names:
            base, _, overload = spec.partition(".")
            packet = getattr(torch.ops.aten, base, None)
            if packet is None:
                continue
            overloads = [overload] if overload else packet.overloads()
            for ov in overloads:
                op = getattr(packet, ov, None)
                if op is None or any(a.alias_info is not None and a.alias_info.is_write
                                     for a in op._schema.arguments):
                    continue  # out= and in-place variants are left alone, as in torch.cuda
                name = op._schema.name + ("" if ov == "default" else "." + ov)
                try:
                    if torch._C._dispatch_has_kernel_for_dispatch_key(name, _KEY):
                        continue  # PyTorch already has a policy for it (e.g. a banned op)
                except RuntimeError:
                    continue  # an overload known to Python only, not to the dispatcher
                lib.impl(op, _make_kernel(op, policy), _KEY)
    _lib = lib
    return len(lib._op_impls)
