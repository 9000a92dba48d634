"""More decompositions for the long tail of ATen ops, in ops the device has kernels for.

decompositions.py merges `decompositions()` into its table of ours (PyTorch's own win there) and then
applies `overrides()` on top of PyTorch's: those fix a PyTorch decomposition that is meant for tracing
and differs from eager CPU (the 0-d/1-d output shape of the margin losses). `register_kernels(lib)`
adds explicit PrivateUse1 kernels for ops the boxed fallback cannot serve (addbmm_, whose CPU kernel
resizes `self` to the broadcast result while PyTorch's meta function refuses)."""
import builtins

import torch

aten = torch.ops.aten

_MEAN, _SUM = 1, 2  # at::Reduction


# ---- margin losses ----

def _multi_margin_shapes(self, target, weight):
    """CPU's multi_margin_loss_shape_check, in its 2.13 words (PyTorch's decomposition says
    "inconsistent target size" instead)."""
    nd = self.dim()
    torch._check((nd == 2 and self.size(1) != 0) or (nd == 1 and self.size(0) != 0) or nd == 0,
                 lambda: f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                         f"{list(self.shape)}")
    nframe, dim = (1 if nd <= 1 else self.size(0)), (1 if nd == 0 else self.size(-1))
    torch._check(target.dim() <= 1 and target.numel() == nframe,
                 lambda: "multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                         f"samples (batch size). Expected target size [{nframe}], but got {list(target.shape)}. "
                         f"Input has shape {list(self.shape)}.")
    if weight is not None:
        torch._check(weight.dim() <= 1 and weight.numel() == dim,
                     lambda: f"inconsistent weight size, expected {dim} but got {list(weight.shape)}")


def _multi_margin_loss(self, target, p=1, margin=1, weight=None, reduction=_MEAN):
    from torch._decomp.decompositions import multi_margin_loss
    _multi_margin_shapes(self, target, weight)
    out = multi_margin_loss(self, target, p, margin, weight, reduction)
    if reduction == 0 and self.dim() <= 1:
        out = out.reshape(())  # CPU gives one loss as a 0-d tensor for a 0-d/1-d input
    return out


def _scale_margin_grad(g, grad_output, reduction, n, c):
    """g [n, c] over the class count (and the batch for "mean"), times grad_output: per sample
    ([n]) for reduction "none", else the one scalar."""
    g = g / c
    if reduction == _MEAN:
        g = g / n
    go = grad_output.reshape(n, 1) if reduction == 0 else grad_output
    return g * go.to(g.dtype)


def _multi_margin_loss_backward(grad_output, self, target, p, margin, weight=None, reduction=_MEAN):
    """d/dx of sum_{j != y} w[y] max(0, margin - x[y] + x[j])^p / C, per sample (CPU's kernel)."""
    x = self.reshape(1, -1) if self.dim() <= 1 else self
    n, c = x.shape
    y = target.reshape(-1).long()
    xy = x.gather(1, y[:, None])
    z = margin - xy + x
    active = (z > 0) & (torch.arange(c, device=x.device)[None, :] != y[:, None])
    g = active.to(x.dtype) if p == 1 else torch.where(active, 2 * z, torch.zeros_like(z))
    if weight is not None:
        g = g * weight.to(x.dtype)[y][:, None]
    g = _scale_margin_grad(g, grad_output, reduction, n, c)
    g = g.scatter_add(1, y[:, None], -g.sum(1, keepdim=True))
    return g.reshape(self.shape)


def _multilabel_terms(self, target):
    """x [n, c], per-entry target classes [n, k] (clamped), entries before the first -1 [n, k],
    is_target [n, c] (bool), z = 1 - x[target entry] + x[i] [n, k, c] and its live mask."""
    x = self.reshape(1, -1) if self.dim() <= 1 else self
    t = target.reshape(x.shape).long()
    valid = (t != -1).long().cumprod(1).bool()
    tc = t.clamp(min=0)
    is_target = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
    is_target = is_target.scatter_add(1, tc, valid) if x.numel() else is_target
    xj = x.gather(1, tc)
    z = 1 - xj[:, :, None] + x[:, None, :]
    live = valid[:, :, None] & ~is_target[:, None, :]
    return x, tc, is_target, z, live


def _multilabel_margin_loss_forward(self, target, reduction):
    """CPU's kernel: every target entry up to the first -1 (repeats count again) against every
    non-target class, hinge 1 - x[j] + x[i], over the class count. PyTorch's decomposition stops at
    the wrong entry for a 1-d input, so this replaces it."""
    ndims = self.dim()
    valid = (ndims <= 1 and self.numel() > 0) or (ndims == 2 and self.shape[1] != 0)
    torch._check(valid, lambda: f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                                f"{list(self.shape)}")  # CPU's check (RuntimeError)
    x, _, is_target, z, live = _multilabel_terms(self, target)
    c = x.shape[1]
    loss = torch.where(live, z.clamp(min=0), torch.zeros_like(z)).sum((1, 2)) / c
    if reduction == _MEAN:
        loss = loss.mean()
    elif reduction == _SUM:
        loss = loss.sum()
    elif self.dim() <= 1:
        loss = loss.reshape(())
    return loss, is_target.to(self.dtype).reshape(self.shape)


def _multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target):
    """For each target entry j and non-target class i with 1 - x[j] + x[i] > 0: x[i] gets +g/C and
    x[j] gets -g/C (CPU's kernel)."""
    x, tc, _, z, live = _multilabel_terms(self, target)
    n, c = x.shape
    m = ((z > 0) & live).to(x.dtype)
    g = m.sum(1).scatter_add(1, tc, -m.sum(2))
    g = _scale_margin_grad(g, grad_output, reduction, n, c)
    return g.reshape(self.shape)


# ---- histograms ----

def _outer_edges(d, range, data_min_max):
    """(left, right) of dimension d as CPU's select_outer_bin_edges: the given range, else the data's
    min/max (data_min_max: per-dimension [min, max] lists, or None when there are no points: [0, 1]);
    an empty interval widens by 0.5 each way."""
    if range is not None:
        left, right = float(range[2 * d]), float(range[2 * d + 1])
    elif data_min_max is not None:
        left, right = data_min_max[0][d], data_min_max[1][d]
    else:
        left, right = 0.0, 1.0
    if left > right:
        raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {left:g} max "
                           f"{right:g} for dimension {d}")
    if not (abs(left) < float("inf") and abs(right) < float("inf")):
        raise RuntimeError(f"torch.histogramdd: dimension {d}'s range [{left:g}, {right:g}] is not finite")
    if left == right:
        left, right = left - 0.5, right + 0.5
    return left, right


def _as_points(self, dims):
    return self.reshape(-1, dims) if dims else self.reshape(-1, 1)


def _histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False):
    dims = self.shape[-1] if self.dim() else 1
    torch._check(len(bins) == dims, lambda: "histogramdd: The size of bins must be equal to the innermost "
                                            "dimension of the input.")  # CPU's check (RuntimeError)
    x = _as_points(self, dims)
    # the edges are Python numbers (linspace's ends), so the data's range comes to the host: in one
    # transfer for all dimensions
    data_min_max = None
    if range is None and x.shape[0] > 0:
        data_min_max = torch.stack(torch.aminmax(x, dim=0)).tolist()
    edges = []
    for d in builtins.range(dims):
        left, right = _outer_edges(d, range, data_min_max)
        edges.append(torch.linspace(left, right, bins[d] + 1, dtype=self.dtype, device=self.device))
    return edges


def _histogramdd_count(x, edges, weight, density):
    """Counts the points x [n, D] into the bins between edges (one tensor per dimension): a point on
    a dimension's last edge goes in its last bin, one outside (or NaN) nowhere (CPU's kernel)."""
    n, dims = x.shape
    counts = [e.numel() - 1 for e in edges]
    flat = torch.zeros(n, dtype=torch.long, device=x.device)
    inside = torch.ones(n, dtype=torch.bool, device=x.device)
    for d, e in enumerate(edges):
        v = x[:, d].contiguous()
        e = e.to(x.dtype).contiguous()
        idx = torch.searchsorted(e, v, right=True) - 1
        idx = torch.where(v == e[-1], torch.full_like(idx, counts[d] - 1), idx)
        inside &= (v >= e[0]) & (v <= e[-1])
        flat = flat * counts[d] + idx.clamp(0, max(counts[d] - 1, 0))
    w = weight.reshape(-1).to(x.dtype) if weight is not None else torch.ones(n, dtype=x.dtype, device=x.device)
    w = torch.where(inside, w, torch.zeros_like(w))
    total = 1
    for c in counts:
        total *= c
    hist = torch.zeros(total, dtype=x.dtype, device=x.device)
    if n and total:
        hist = hist.index_add(0, flat, w)
    hist = hist.reshape(counts)
    if density:
        hist = hist / hist.sum()
        for d, e in enumerate(edges):
            shape = [1] * dims
            shape[d] = counts[d]
            hist = hist / (e[1:] - e[:-1]).to(x.dtype).reshape(shape)
    return hist


def _histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False):
    edges = _histogramdd_bin_edges(self, bins, range=range, weight=weight, density=density)
    return _histogramdd_count(_as_points(self, len(edges)), edges, weight, density)


def _histogramdd_from_bin_tensors(self, bins, *, weight=None, density=False):
    return _histogramdd_count(_as_points(self, len(bins)), list(bins), weight, density)


def _histogram_bin_ct(self, bins=100, *, range=None, weight=None, density=False):
    x = self.reshape(-1, 1)
    (edges,) = _histogramdd_bin_edges(x, [bins], range=range)
    return _histogramdd_count(x, [edges], weight, density), edges


def _histogram_bins_tensor(self, bins, *, weight=None, density=False):
    return _histogramdd_count(self.reshape(-1, 1), [bins], weight, density), bins.clone()


# ---- segment_reduce ----

def _segment_ids(data, lengths, offsets, axis):
    """(ids, count, seg_lengths): the segment of each position along `axis` (shaped like data's
    dims up to axis), the segment count, and each segment's length ([..., S])."""
    if offsets is not None:
        ends = offsets[..., 1:]
        seg_len = offsets[..., 1:] - offsets[..., :-1]
    else:
        ends = lengths.cumsum(-1)
        seg_len = lengths
    n = data.shape[axis]
    pos = torch.arange(n, device=data.device).expand(*ends.shape[:-1], n).contiguous()
    ids = torch.searchsorted(ends.contiguous(), pos, right=True)
    return ids, ends.shape[-1], seg_len


def _expand_ids(ids, data, axis):
    return ids.reshape(ids.shape + (1,) * (data.dim() - axis - 1)).expand(data.shape)


_SEGMENT_EMPTY = {"sum": 0.0, "mean": float("nan"), "max": float("-inf"), "min": float("inf"), "prod": 1.0}
# CPU's get_reduction_enum: amax/amin are max/min's other names
_SEGMENT_ALIASES = {"amax": "max", "amin": "min"}


def _segment_reduce_name(reduce):
    reduce = _SEGMENT_ALIASES.get(reduce, reduce)
    if reduce not in _SEGMENT_EMPTY:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return reduce


def _segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                    initial=None):
    """CPU's segment_reduce: `initial` joins every segment's reduction (mean: (sum + initial) / len);
    an empty segment gives `initial`, or 0 / nan / -inf / inf / 1 for sum / mean / max / min / prod."""
    reduce = _segment_reduce_name(reduce)
    axis = axis % max(data.dim(), 1)
    if not unsafe and lengths is not None and lengths.numel():
        # CPU checks the lengths' values at the call when !unsafe (a host sync, as on CPU)
        if lengths.min().item() < 0:
            raise RuntimeError("lengths contains negative value!")
        if not bool((lengths.sum(-1) == data.shape[axis]).all().item()):
            raise RuntimeError("segment_reduce(): Expected all rows of lengths along axis to sum to "
                               "data.size(lengths.dim()-1) when !unsafe.")
    ids, count, seg_len = _segment_ids(data, lengths, offsets, axis)
    shape = list(data.shape)
    shape[axis] = count
    idx = _expand_ids(ids, data, axis).clamp(max=max(count - 1, 0))
    valid = _expand_ids(ids, data, axis) < count
    if reduce in ("sum", "mean"):
        src = torch.where(valid, data, torch.zeros_like(data))
        total = torch.zeros(shape, dtype=data.dtype, device=data.device)
        if count:
            total = total.scatter_add(axis, idx, src)
        if reduce == "sum":
            return total + initial if initial is not None else total
        n = seg_len.reshape(seg_len.shape + (1,) * (data.dim() - axis - 1)).to(data.dtype)
        if initial is not None:
            return torch.where(n > 0, (total + initial) / n, torch.full_like(total, initial))
        return total / n
    fill = float(initial) if initial is not None else _SEGMENT_EMPTY[reduce]
    neutral = {"max": float("-inf"), "min": float("inf"), "prod": 1.0}[reduce]
    src = torch.where(valid, data, torch.full_like(data, neutral))
    out = torch.full(shape, fill, dtype=data.dtype, device=data.device)
    if count:
        out = out.scatter_reduce(axis, idx, src, {"max": "amax", "min": "amin", "prod": "prod"}[reduce],
                                 include_self=True)
    return out


def _segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0,
                             initial=None):
    """CPU's _segment_reduce_backward, including its quirks: max/min send the gradient to every
    element equal to the result (or NaN) and divide it among ties only where it is positive; prod
    divides grad * output by the element, except at a zero/NaN element, which gets grad times the
    product of the others (and `initial`)."""
    reduce = _segment_reduce_name(reduce)
    axis = axis % max(data.dim(), 1)
    ids, count, seg_len = _segment_ids(data, lengths, offsets, axis)
    eids = _expand_ids(ids, data, axis)
    valid = eids < count
    idx = eids.clamp(max=max(count - 1, 0))
    zero = torch.zeros_like(data)
    if count == 0:
        return zero
    g = grad.gather(axis, idx)
    if reduce == "sum":
        return torch.where(valid, g, zero)
    if reduce == "mean":
        n = seg_len.reshape(seg_len.shape + (1,) * (data.dim() - axis - 1)).to(data.dtype)
        return torch.where(valid, g / n.expand(grad.shape).gather(axis, idx), zero)
    out = output.gather(axis, idx)
    if reduce in ("max", "min"):
        hit = valid & (data.isnan() | (data == out))
        gi = torch.where(hit, g, zero)
        ties = torch.zeros(grad.shape, dtype=data.dtype, device=data.device)
        ties = ties.scatter_add(axis, idx, hit.to(data.dtype)).gather(axis, idx)
        return torch.where((ties >= 2) & (gi > 0), gi / ties, gi)
    if reduce == "prod":
        special = data.isnan() | (data == 0)
        plain = torch.where(special | ~valid, torch.ones_like(data), data)
        base = torch.full(grad.shape, float(initial) if initial is not None else 1.0, dtype=data.dtype,
                          device=data.device)
        others = base.scatter_reduce(axis, idx, plain, "prod", include_self=True).gather(axis, idx)
        nzero = torch.zeros(grad.shape, dtype=data.dtype, device=data.device)
        nzero = nzero.scatter_add(axis, idx, (valid & (data == 0)).to(data.dtype)).gather(axis, idx)
        nnan = torch.zeros(grad.shape, dtype=data.dtype, device=data.device)
        nnan = nnan.scatter_add(axis, idx, (valid & data.isnan()).to(data.dtype)).gather(axis, idx)
        nzero_others = nzero - (data == 0).to(data.dtype)
        nnan_others = nnan - data.isnan().to(data.dtype)
        excl = torch.where(nnan_others > 0, torch.full_like(data, float("nan")),
                           torch.where(nzero_others > 0, zero, others))
        gi = torch.where(special, g * excl, g * out / data)
        return torch.where(valid, gi, zero)
    raise RuntimeError(f"segment_reduce_backward: reduction {reduce} is not supported")


# ---- least squares ----

_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _c10_name(dtype):
    """The dtype as PyTorch's C++ messages name it ("Float", "ComplexDouble")."""
    return torch.empty(0, dtype=dtype).type()[len("torch."):-len("Tensor")]


def _linalg_lstsq(self, b, rcond=None, *, driver=None):
    """linalg.lstsq through one SVD (the pseudo-inverse's rule): the least-squares solution, minimum-norm
    when m < n; outputs shaped as CPU's LAPACK drivers give them: rank for all but gels, singular
    values for gelss/gelsd, residuals (squared column norms of A X - B) when m > n, the driver is
    not gelsy and (gelss/gelsd) A has full rank."""
    driver = driver or "gelsy"
    if driver not in _LSTSQ_DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of "
                           "(gels, gelsy, gelsd, gelss)")
    # CPU's checks (linalg_lstsq_out), in its order and words
    if self.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if b.dim() < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if self.dtype != b.dtype:
        raise RuntimeError("torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
                           f"input's dtype {_c10_name(self.dtype)} and other's dtype {_c10_name(b.dtype)}")
    if not 0 <= self.dim() - b.dim() <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    vector = b.dim() == self.dim() - 1
    if vector:
        b = b.unsqueeze(-1)
    if self.shape[-2] != b.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-1)" if vector else
                           "torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    if self.device != b.device:
        raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                           f"{b.device} and {self.device}! (torch.linalg.lstsq: other is on {b.device}, "
                           f"input on {self.device}; both must be on the same device)")
    m, n = self.shape[-2], self.shape[-1]
    batch = torch.broadcast_shapes(self.shape[:-2], b.shape[:-2])
    a = self.expand(*batch, m, n)
    b = b.expand(*batch, m, b.shape[-1])
    dev, dt = self.device, self.dtype
    sv_dt = dt.to_real() if dt.is_complex else dt
    if rcond is None or rcond < 0:
        rcond = torch.finfo(dt).eps * max(m, n)
    if min(m, n):
        # one SVD for the solution and the rank: x = V diag(1 / s where s > rcond * s_max) U^H b (pinv's rule)
        u, sv, vh = torch.linalg.svd(a, full_matrices=False)
        keep = sv > rcond * sv[..., :1]
        sinv = torch.where(keep, 1 / torch.where(keep, sv, torch.ones_like(sv)), torch.zeros_like(sv))
        x = vh.mH @ (sinv.unsqueeze(-1).to(u.dtype) * (u.mH @ b))
    else:
        sv = torch.zeros(*batch, 0, dtype=sv_dt, device=dev)
        x = torch.zeros(*batch, n, b.shape[-1], dtype=dt, device=dev)
    if driver == "gels":
        rank = torch.zeros(0, dtype=torch.long, device=dev)
    elif min(m, n) == 0:
        rank = torch.zeros(batch, dtype=torch.long, device=dev)
    else:
        rank = keep.sum(-1)
    full = bool((rank == n).all()) if driver in ("gelss", "gelsd") else True
    if m > n and driver != "gelsy" and full:
        residuals = (a @ x - b).abs().pow(2).sum(-2)  # real, as LAPACK's: squared moduli
        if vector:
            residuals = residuals.squeeze(-1)
    else:
        residuals = torch.zeros(0, dtype=dt, device=dev)
    if driver not in ("gelss", "gelsd"):
        sv = torch.zeros(0, dtype=sv_dt, device=dev)
    if vector:
        x = x.squeeze(-1)
    return x, residuals, rank, sv


def _bincount(self, weights=None, minlength=0):
    """CPU's bincount (SummaryOps.cpp): integral 1-d input, counts (int64) or sums of weights (float32
    weights stay float32, others become float64) in max(max(self) + 1, minlength) bins; the bin count
    and the sign check read the data, so this waits for the device."""
    if self.is_floating_point() or self.is_complex() or self.dtype == torch.bool:
        torch.bincount(torch.zeros(1, dtype=self.dtype))  # raises CPU's "not implemented for" error
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if self.dim() == 1 and self.numel() == 0:
        return torch.zeros(minlength, dtype=torch.long, device=self.device)
    if self.dim() != 1 or self.min().item() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.size(0) != self.size(0)):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    n = max(int(self.max().item()) + 1, minlength)
    index = self.long()
    if weights is None:
        return torch.zeros(n, dtype=torch.long, device=self.device).index_add_(0, index, torch.ones_like(index))
    dt = torch.float32 if weights.dtype == torch.float32 else torch.float64
    return torch.zeros(n, dtype=dt, device=self.device).index_add_(0, index, weights.to(dt))


def decompositions() -> dict:
    """Ops PyTorch has no decomposition for."""
    return {
        aten.multi_margin_loss_backward.default: _multi_margin_loss_backward,
        aten.multilabel_margin_loss_backward.default: _multilabel_margin_loss_backward,
        aten._histogramdd_bin_edges.default: _histogramdd_bin_edges,
        aten._histogramdd_from_bin_cts.default: _histogramdd_from_bin_cts,
        aten._histogramdd_from_bin_tensors.default: _histogramdd_from_bin_tensors,
        aten.histogram.bin_ct: _histogram_bin_ct,
        aten.histogram.bins_tensor: _histogram_bins_tensor,
        aten.segment_reduce.default: _segment_reduce,
        aten._segment_reduce_backward.default: _segment_reduce_backward,
        aten.linalg_lstsq.default: _linalg_lstsq,  # reached as linalg_lstsq.out (adapted)
        aten.linalg_lstsq.out: _linalg_lstsq,
        aten.bincount.default: _bincount,
    }


def overrides() -> dict:
    """Ours replace PyTorch's decomposition for these (eager CPU semantics)."""
    return {
        aten.multi_margin_loss.default: _multi_margin_loss,
        aten.multilabel_margin_loss_forward.default: _multilabel_margin_loss_forward,
    }


# ---- explicit kernels ----

def _addbmm_(self, batch1, batch2, *, beta=1, alpha=1):
    """CPU's addbmm_ broadcasts `self` to the [n, p] result and resizes it (expand_size, then
    resize_as_); the meta function of the boxed path rejects that, so do it here."""
    out = torch.addbmm(self, batch1, batch2, beta=beta, alpha=alpha)
    if self.shape != out.shape:
        self.resize_(out.shape)
    return self.copy_(out)


def _efficientzerotensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """Autograd's zero gradients (sgn, where a mask is zero, ...): a plain zero-filled tensor here;
    the device has no ZeroTensor dispatch key to make it free."""
    return torch.zeros(size, dtype=dtype, device=device)


def _ctc_loss_backward_meta(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
                            log_alpha, blank, zero_infinity=False):
    """PyTorch has no meta function for _ctc_loss_backward; the boxed path needs one to shape the
    output (the gradient is shaped like log_probs)."""
    return log_probs.new_empty(log_probs.shape)


_RANDPERM_FLOAT_LIMIT = {torch.float16: ((1 << 11) + 1, "2049", "Half"),
                         torch.float32: ((1 << 24) + 1, "2^24+1", "Float"),
                         torch.float64: ((1 << 53) + 1, "2^53+1", "Double")}


def _randperm_out(n, *, generator=None, out):
    """randperm(n) into out: CPU's checks (n >= 0; n - 1 representable in out's dtype, exactly for
    floating types), then the order that sorts n uniform float64 keys drawn on the device (from
    `generator` or the default tpu generator): a uniformly random permutation, as the keys are
    distinct with probability 1 - n^2 / 2^54."""
    torch._check(n >= 0, lambda: f"n must be non-negative, got{n}")
    if out.dtype in _RANDPERM_FLOAT_LIMIT:
        limit, words, name = _RANDPERM_FLOAT_LIMIT[out.dtype]
        torch._check(n <= limit, lambda: f"n cannot be greater than {words} for {name} type.")
    elif out.dtype != torch.bool and not out.dtype.is_floating_point:
        hi = torch.iinfo(out.dtype).max
        torch._check(n - 1 <= hi, lambda: f"value cannot be converted to type {out.dtype} without overflow")
    keys = torch.rand(n, dtype=torch.float64, device=out.device, generator=generator)
    perm = keys.argsort(stable=True)
    if out.shape != (n,):
        out.resize_(n)
    return out.copy_(perm)


def _compute_linear_combination_out(input, coefficients, *, out):
    """out[i, ...] += sum_j coefficients[i, j] * input[j, ...] (CPU's kernel accumulates into out;
    matrix_exp uses it): one matrix product over input's flattened trailing dims. Complex input takes
    real coefficients, as on CPU."""
    torch._check(coefficients.dim() == 2 and coefficients.shape[1] == input.shape[0],
                 lambda: f"_compute_linear_combination: coefficients must be [m, {input.shape[0]}], "
                         f"got {list(coefficients.shape)}")
    rest = input.shape[1:]
    prod = coefficients.to(input.dtype) @ input.reshape(input.shape[0], -1)
    return out.add_(prod.reshape(coefficients.shape[0], *rest))


def _compute_linear_combination(input, coefficients):
    torch._check(input.dim() > 0 and input.numel() > 0, lambda: "Empty tensor not supported")
    out = torch.zeros(coefficients.shape[0], *input.shape[1:], dtype=input.dtype, device=input.device)
    return _compute_linear_combination_out(input, coefficients, out=out)


def register_kernels(lib) -> "list[str]":
    lib.impl("_compute_linear_combination", _compute_linear_combination, "PrivateUse1")
    lib.impl("_compute_linear_combination.out", _compute_linear_combination_out, "PrivateUse1")
    lib.impl("addbmm_", _addbmm_, "PrivateUse1")
    lib.impl("randperm.generator_out", _randperm_out, "PrivateUse1")
    lib.impl("_efficientzerotensor", _efficientzerotensor, "PrivateUse1")
    for overload in ("_ctc_loss_backward", "_ctc_loss_backward.Tensor"):
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{overload}", "Meta"):
            lib.impl(overload, _ctc_loss_backward_meta, "Meta")
    return ["aten::addbmm_", "aten::_efficientzerotensor", "aten::randperm.generator_out",
            "aten::_compute_linear_combination", "aten::_compute_linear_combination.out"]
