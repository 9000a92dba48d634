// Sparse COO tensors on the tpu device (layout torch.sparse_coo).
//
// A sparse tpu tensor is PyTorch's own SparseTensorImpl under the
// SparsePrivateUse1 key: an int64 indices tensor [sparse_dim, nnz] and a values
// tensor [nnz, dense sizes...], both ordinary (dense) tpu tensors. Nothing here
// computes on the host: where ATen's SparseCPU kernel is device-generic (the
// constructors, the accessors, resize/copy/clone, the add/sub/mul/div front
// functions that only pick a result and call the out= variant) the same native
// function is registered; where ATen's kernel is CPU-only (coalesce, add/mul of
// sparse operands, to_dense, sparse_mask, sparse @ dense) it is written here as
// a composition of dense tpu ops (sort, unique_consecutive, searchsorted,
// index_add_, index_put_), so the work runs in the device's queue like any
// other op. The numbers that decide a result's size (nnz after a coalesce or an
// intersection) are read back, as CPU and CUDA read them.
//
// Ops without a registration here, and every compressed layout (CSR, CSC, BSR,
// BSC), reach the fallback below, which raises NotImplementedError naming the
// op and the layout instead of the dispatcher's "Sparsetpu backend" error.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_sparse_mm_native.h>
#include <ATen/ops/_to_sparse_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/mm_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/ops/sum_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/asin_native.h>
#include <ATen/ops/asinh_native.h>
#include <ATen/ops/atan_native.h>
#include <ATen/ops/atanh_native.h>
#include <ATen/ops/ceil_native.h>
#include <ATen/ops/deg2rad_native.h>
#include <ATen/ops/erf_native.h>
#include <ATen/ops/erfinv_native.h>
#include <ATen/ops/expm1_native.h>
#include <ATen/ops/floor_native.h>
#include <ATen/ops/frac_native.h>
#include <ATen/ops/isinf_native.h>
#include <ATen/ops/isnan_native.h>
#include <ATen/ops/isneginf_native.h>
#include <ATen/ops/isposinf_native.h>
#include <ATen/ops/log1p_native.h>
#include <ATen/ops/nan_to_num_native.h>
#include <ATen/ops/rad2deg_native.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/round_native.h>
#include <ATen/ops/sgn_native.h>
#include <ATen/ops/sign_native.h>
#include <ATen/ops/signbit_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sinh_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/tan_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/trunc_native.h>
#include <ATen/ops/cat_native.h>
#include <ATen/ops/pow_native.h>
#include <ATen/ops/any_native.h>
#include <ATen/ops/narrow_copy_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/permute_native.h>
#include <ATen/ops/mv_native.h>
#include <torch/library.h>

namespace torch_tpu {
namespace {

using at::Tensor;

void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().operator_name(),
                              ": this op has no kernel for sparse tensors on the tpu device. Sparse COO tensors "
                              "(torch.sparse_coo) on tpu support construction, coalesce, to_dense/to_sparse, "
                              "add/sub/mul/div, sparse_mask, sum, index_select, cat, the shape ops, elementwise "
                              "ops that keep zeros, and sparse @ dense (mm/addmm/mv); the compressed layouts "
                              "(sparse_csr, sparse_csc, sparse_bsr, sparse_bsc) are not supported. Keep such "
                              "tensors on the CPU, or use a dense (torch.strided) tensor on tpu.");
}

void compressed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().operator_name(),
                              ": sparse compressed layouts (torch.sparse_csr, sparse_csc, sparse_bsr, sparse_bsc) "
                              "are not supported on the tpu device; sparse COO (torch.sparse_coo) is. Keep "
                              "compressed tensors on the CPU, or use a COO or dense tensor on tpu.");
}

// ---------------------------------------------------------------- helpers

// The row-major linear position of each index column over the sparse dims.
Tensor linear_index(const Tensor& indices, at::IntArrayRef sizes, int64_t sparse_dim) {
  const int64_t nnz = indices.size(1);
  Tensor lin = at::zeros({nnz}, indices.options());
  int64_t mult = 1;
  for (int64_t d = sparse_dim - 1; d >= 0; --d) {
    lin.add_(indices.select(0, d), mult);
    mult *= sizes[d];
  }
  return lin;
}

// The inverse of linear_index: [sparse_dim, n] indices of linear positions.
Tensor unlinear_index(const Tensor& lin, at::IntArrayRef sizes, int64_t sparse_dim) {
  std::vector<Tensor> rows(sparse_dim);
  Tensor rem = lin;
  for (int64_t d = sparse_dim - 1; d >= 0; --d) {
    rows[d] = at::remainder(rem, sizes[d]);
    rem = at::div(rem, sizes[d], "floor");
  }
  if (sparse_dim == 0) return at::empty({0, lin.numel()}, lin.options());
  return at::stack(rows, 0);
}

c10::List<std::optional<Tensor>> index_rows(const Tensor& indices, int64_t sparse_dim) {
  c10::List<std::optional<Tensor>> rows;
  for (int64_t d = 0; d < sparse_dim; ++d) rows.push_back(indices.select(0, d));
  return rows;
}

// Makes `out` (a sparse tensor) hold indices/values with the given shape.
void set_sparse_result(Tensor& out, int64_t sparse_dim, int64_t dense_dim, at::IntArrayRef sizes,
                       const Tensor& indices, const Tensor& values, bool coalesced) {
  auto* impl = at::sparse::get_sparse_impl(out);
  impl->resize_and_clear_(sparse_dim, dense_dim, sizes);
  at::sparse::alias_into_sparse(out, indices, values.scalar_type() == out.scalar_type()
                                                 ? values
                                                 : values.to(out.scalar_type()));
  impl->set_coalesced(coalesced);
}

Tensor make_sparse(at::IntArrayRef sizes, int64_t sparse_dim, const Tensor& indices, const Tensor& values,
                   bool coalesced) {
  Tensor out = at::_sparse_coo_tensor_with_dims_and_tensors(
      sparse_dim, static_cast<int64_t>(sizes.size()) - sparse_dim, sizes, indices, values,
      values.options().layout(at::kSparse));
  at::sparse::get_sparse_impl(out)->set_coalesced(coalesced);
  return out;
}

// A boolean [n] mask broadcast over the dense dims of [n, dense...] values.
Tensor expand_rows(const Tensor& mask, const Tensor& values) {
  std::vector<int64_t> shape(values.dim(), 1);
  shape[0] = mask.size(0);
  return mask.view(shape);
}

// The values of a coalesced sparse `src` at the linear positions `query`
// ([n]); zeros where src has no entry. `found` receives which were present.
Tensor project_values(const Tensor& src_c, const Tensor& query, Tensor* found) {
  const int64_t sd = src_c.sparse_dim();
  Tensor src_vals = src_c._values();
  std::vector<int64_t> shape = src_vals.sizes().vec();
  shape[0] = query.numel();
  const int64_t n_src = src_c._nnz();
  if (n_src == 0 || query.numel() == 0) {
    if (found) *found = at::zeros({query.numel()}, query.options().dtype(at::kBool));
    return at::zeros(shape, src_vals.options());
  }
  Tensor lin_src = linear_index(src_c._indices(), src_c.sizes(), sd);
  Tensor pos = at::searchsorted(lin_src, query).clamp_max_(n_src - 1);
  Tensor hit = lin_src.index_select(0, pos).eq(query);
  Tensor vals = src_vals.index_select(0, pos);
  Tensor res = at::where(expand_rows(hit, vals), vals, at::zeros({}, vals.options()));
  if (found) *found = hit;
  return res;
}

// ---------------------------------------------------------------- coalesce

Tensor coalesce_tpu(const Tensor& self) {
  TORCH_CHECK(self.is_sparse(), "_coalesce: expected a sparse COO tensor, got layout ", self.layout());
  const int64_t nnz = self._nnz();
  if (nnz < 2) {
    Tensor dst = self.clone();
    at::sparse::get_sparse_impl(dst)->set_coalesced(true);
    return dst;
  }
  const int64_t sd = self.sparse_dim();
  Tensor indices = self._indices();
  Tensor values = self._values();
  Tensor lin = linear_index(indices, self.sizes(), sd);
  auto sorted = at::sort(lin, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  Tensor perm = std::get<1>(sorted);
  auto uniq = at::unique_consecutive(std::get<0>(sorted), /*return_inverse=*/true, /*return_counts=*/false);
  Tensor keys = std::get<0>(uniq);
  Tensor inverse = std::get<1>(uniq);
  std::vector<int64_t> vshape = values.sizes().vec();
  vshape[0] = keys.numel();
  Tensor new_values = at::zeros(vshape, values.options());
  new_values.index_add_(0, inverse, values.index_select(0, perm));
  Tensor new_indices = unlinear_index(keys, self.sizes(), sd);
  return make_sparse(self.sizes(), sd, new_indices, new_values, true);
}

// ---------------------------------------------------------------- to_dense / to_sparse

Tensor to_dense_tpu(const Tensor& self, std::optional<at::ScalarType> dtype, std::optional<bool> masked_grad) {
  TORCH_CHECK(!dtype.has_value(), "dtype argument is not supported by sparse_to_dense");
  (void)masked_grad;
  Tensor dst = at::zeros(self.sizes(), self.options().layout(at::kStrided));
  if (self._nnz() == 0) return dst;
  const int64_t sd = self.sparse_dim();
  Tensor values = self._values();
  if (sd == 0) {
    Tensor total = values.scalar_type() == at::kBool ? values.any(0) : at::sum(values, {0}, false, values.scalar_type());
    dst.copy_(total);
    return dst;
  }
  dst.index_put_(index_rows(self._indices(), sd), values, /*accumulate=*/true);
  return dst;
}

Tensor dense_to_sparse_tpu(const Tensor& self, std::optional<at::Layout> layout, at::OptionalIntArrayRef blocksize,
                           std::optional<int64_t> dense_dim) {
  const at::Layout target = layout.value_or(at::kSparse);
  TORCH_CHECK_NOT_IMPLEMENTED(target == at::kSparse || target == at::kStrided, "to_sparse(layout=", target,
                              "): sparse compressed layouts (sparse_csr, sparse_csc, sparse_bsr, sparse_bsc) are "
                              "not supported on the tpu device; only torch.sparse_coo is");
  return at::native::dense_to_sparse(self, layout, blocksize, dense_dim);
}

// ---------------------------------------------------------------- add / sub

Tensor& add_out_dense_sparse(const Tensor& dense, const Tensor& sparse, const at::Scalar& alpha, Tensor& out) {
  TORCH_CHECK(!out.is_sparse(), "add(dense, sparse): expected 'out' to be a dense tensor, but got a sparse one");
  TORCH_CHECK(dense.sizes().equals(sparse.sizes()), "add: expected 'self' and 'other' to have same size, but self has size ",
              dense.sizes(), " while other has size ", sparse.sizes(),
              " (FYI: dense-sparse addition does not currently support broadcasting)");
  const auto common = at::promoteTypes(dense.scalar_type(), sparse.scalar_type());
  TORCH_CHECK(at::canCast(common, out.scalar_type()), "Can't convert result type ", common, " to output ",
              out.scalar_type(), " in add operation");
  Tensor acc = dense.to(common, /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
  if (sparse._nnz() > 0) {
    Tensor vals = sparse._values().to(common);
    if (!(alpha.isIntegral(true) && alpha.toLong() == 1) && !(alpha.isBoolean() && alpha.toBool()))
      vals = vals.mul(alpha);
    const int64_t sd = sparse.sparse_dim();
    if (sd == 0) {
      Tensor total = common == at::kBool ? vals.any(0) : at::sum(vals, {0}, false, common);
      if (common == at::kBool)
        acc.logical_or_(total);
      else
        acc.add_(total);
    } else {
      acc.index_put_(index_rows(sparse._indices(), sd), vals, /*accumulate=*/true);
    }
  }
  if (!out.sizes().equals(dense.sizes())) out.resize_(dense.sizes());
  out.copy_(acc);
  return out;
}

Tensor& add_out_sparse_tpu(const Tensor& self, const Tensor& other, const at::Scalar& alpha, Tensor& out) {
  if (!self.is_sparse()) {
    TORCH_CHECK(other.is_sparse(), "add: expected a sparse operand");
    return add_out_dense_sparse(self, other, alpha, out);
  }
  TORCH_CHECK(other.is_sparse(), "add(sparse, dense) is not supported. Use add(dense, sparse) instead.");
  TORCH_CHECK(out.is_sparse(), "add(sparse, sparse): expected 'out' to be a sparse tensor, but got a dense one");
  TORCH_CHECK(self.sizes().equals(other.sizes()), "add: expected sizes of 'self' and 'other' to match, but ",
              self.sizes(), " != ", other.sizes());
  const auto common = at::promoteTypes(self.scalar_type(), other.scalar_type());
  TORCH_CHECK(at::canCast(common, out.scalar_type()), "Can't convert result type ", common, " to output ",
              out.scalar_type(), " in add operation");
  const int64_t sd = self.sparse_dim(), dd = self.dense_dim();
  TORCH_CHECK(sd == other.sparse_dim(), "add: expected 'self' and 'other' to have same sparse dimensions, but ", sd,
              " != ", other.sparse_dim());
  TORCH_CHECK(dd == other.dense_dim(), "add: expected 'self' and 'other' to have same dense dimensions, but ", dd,
              " != ", other.dense_dim());
  const std::vector<int64_t> sizes = self.sizes().vec();
  const bool one = (alpha.isIntegral(true) && alpha.toLong() == 1) || (alpha.isBoolean() && alpha.toBool());
  Tensor ov = other._values().to(common);
  if (!one) ov = ov.mul(alpha);
  Tensor sv = self._values().to(common);
  Tensor indices, values;
  bool coalesced;
  if (other._nnz() == 0) {
    indices = self._indices().clone();
    values = sv.clone();
    coalesced = self.is_coalesced();
  } else if (self._nnz() == 0) {
    indices = other._indices().clone();
    values = ov.clone();
    coalesced = other.is_coalesced();
  } else {
    indices = at::cat({self._indices(), other._indices()}, 1);
    values = at::cat({sv, ov}, 0);
    coalesced = self.is_coalesced() && other.is_coalesced();
    if (coalesced) {
      // Both coalesced: CPU merges them into a coalesced result (matching
      // indices summed, none dropped); coalescing the concatenation is that.
      Tensor merged = coalesce_tpu(make_sparse(sizes, sd, indices, values, false));
      indices = merged._indices();
      values = merged._values();
    }
  }
  set_sparse_result(out, sd, dd, sizes, indices, values, coalesced);
  return out;
}

// ---------------------------------------------------------------- mul

// mul of a dense and a sparse operand: the sparse operand's pattern with the
// dense values gathered at its indices. `out` sparse (mul / mul.out) or dense
// (dense.mul_(sparse)).
Tensor& mul_dense_sparse(const Tensor& d, const Tensor& s, Tensor& out) {
  const auto common = at::result_type(d, s);
  TORCH_CHECK(at::canCast(common, out.scalar_type()), "Can't convert result type ", common, " to output ",
              out.scalar_type(), " in mul operation");
  const int64_t sd = s.sparse_dim();
  const std::vector<int64_t> sizes = s.sizes().vec();
  Tensor sv = s._values().to(common);
  Tensor vals;
  if (d.dim() == 0) {
    vals = sv.mul(d.to(common));
  } else {
    TORCH_CHECK_NOT_IMPLEMENTED(at::infer_size(d.sizes(), s.sizes()) == s.sizes(),
                                "mul of a sparse tensor of size ", s.sizes(), " and a dense tensor of size ", d.sizes(),
                                ": broadcasting the sparse operand is not supported on the tpu device");
    Tensor de = d.expand(s.sizes()).to(common);
    Tensor gathered;
    if (sd == 0)
      gathered = de.unsqueeze(0).expand(sv.sizes());
    else
      gathered = at::index(de, index_rows(s._indices(), sd));
    vals = sv.mul(gathered);
  }
  if (out.is_sparse()) {
    set_sparse_result(out, sd, s.dense_dim(), sizes, s._indices().clone(), vals, s.is_coalesced());
  } else {
    Tensor dense = to_dense_tpu(make_sparse(sizes, sd, s._indices(), vals, s.is_coalesced()), std::nullopt,
                                std::nullopt);
    if (!out.sizes().equals(dense.sizes())) out.resize_(dense.sizes());
    out.copy_(dense);
  }
  return out;
}

Tensor& mul_out_sparse_tpu(const Tensor& self, const Tensor& other, Tensor& out) {
  if (!self.is_sparse()) return mul_dense_sparse(self, other, out);
  if (!other.is_sparse()) return mul_dense_sparse(other, self, out);
  TORCH_CHECK(out.is_sparse(), "mul(sparse, sparse): expected 'out' to be a sparse tensor, but got a dense one");
  TORCH_CHECK_NOT_IMPLEMENTED(self.sizes().equals(other.sizes()), "mul of sparse tensors of sizes ", self.sizes(),
                              " and ", other.sizes(), ": broadcasting is not supported on the tpu device");
  TORCH_CHECK(self.sparse_dim() == other.sparse_dim() && self.dense_dim() == other.dense_dim(),
              "mul(sparse, sparse): expected operands with the same sparse and dense dimensions, got (",
              self.sparse_dim(), ", ", self.dense_dim(), ") and (", other.sparse_dim(), ", ", other.dense_dim(), ")");
  const auto common = at::promoteTypes(self.scalar_type(), other.scalar_type());
  TORCH_CHECK(at::canCast(common, out.scalar_type()), "Can't convert result type ", common, " to output ",
              out.scalar_type(), " in mul operation");
  const int64_t sd = self.sparse_dim(), dd = self.dense_dim();
  const std::vector<int64_t> sizes = self.sizes().vec();
  // The intersection: self's entries (in self's order) that other has, times
  // other's (coalesced) value there, as CPU's kernel keeps them.
  Tensor oc = other.is_coalesced() ? other : coalesce_tpu(other);
  Tensor lin = linear_index(self._indices(), sizes, sd);
  Tensor found;
  Tensor ov = project_values(oc, lin, &found);
  Tensor keep = found.nonzero().squeeze(1);
  Tensor indices = self._indices().index_select(1, keep);
  Tensor values = self._values().to(common).index_select(0, keep).mul(ov.to(common).index_select(0, keep));
  set_sparse_result(out, sd, dd, sizes, indices, values, self.is_coalesced());
  return out;
}

// ---------------------------------------------------------------- sparse_mask

Tensor sparse_mask_tpu(const Tensor& self, const Tensor& mask) {
  TORCH_CHECK(mask.is_sparse(), "sparse_mask expects mask to be sparse, got layout ", mask.layout());
  TORCH_CHECK(mask.sizes().equals(self.sizes()), "sparse_mask(): operands have incompatible sizes; self has size ",
              self.sizes(), " but mask has size ", mask.sizes());
  const int64_t sd = mask.sparse_dim();
  const std::vector<int64_t> sizes = mask.sizes().vec();
  Tensor indices = mask._indices();
  Tensor values;
  if (self.is_sparse()) {
    TORCH_CHECK(self.sparse_dim() == sd, "sparse_mask(): the number of sparse dimensions in `self` (",
                self.sparse_dim(), ") should match that of the `mask` (", sd, ")");
    Tensor sc = self.is_coalesced() ? self : coalesce_tpu(self);
    values = project_values(sc, linear_index(indices, sizes, sd), nullptr);
  } else if (sd == 0) {
    std::vector<int64_t> vshape = mask._values().sizes().vec();
    values = self.unsqueeze(0).expand(vshape).clone();
  } else {
    values = at::index(self, index_rows(indices, sd));
  }
  return make_sparse(sizes, sd, indices.clone(), values, mask.is_coalesced());
}

// self's entries (its indices, in its order) kept where `mask` has the index
// and zero elsewhere; accumulate_matches multiplies each by the number of
// mask entries at its index (CPU's _sparse_mask_projection, sparse_mask's
// backward).
Tensor sparse_mask_projection_tpu(const Tensor& self, const Tensor& mask, bool accumulate_matches) {
  TORCH_CHECK(self.is_sparse() && mask.is_sparse(), "_sparse_mask_projection: expected sparse COO operands, got ",
              self.layout(), " and ", mask.layout());
  TORCH_CHECK(mask.sizes().equals(self.sizes()), "_sparse_mask_projection(): operands have incompatible sizes; self has size ",
              self.sizes(), " but mask has size ", mask.sizes());
  TORCH_CHECK(self.sparse_dim() == mask.sparse_dim(), "_sparse_mask_projection(): the number of sparse dimensions in `self` (",
              self.sparse_dim(), ") should match that of the `mask` (", mask.sparse_dim(), ")");
  const int64_t sd = self.sparse_dim();
  const std::vector<int64_t> sizes = self.sizes().vec();
  Tensor values = self._values();
  if (self._nnz() > 0) {
    Tensor lin_self = linear_index(self._indices(), sizes, sd);
    Tensor lin_mask = std::get<0>(at::sort(linear_index(mask._indices(), sizes, sd)));
    Tensor cnt = at::searchsorted(lin_mask, lin_self, /*out_int32=*/false, /*right=*/true)
                     .sub_(at::searchsorted(lin_mask, lin_self));
    Tensor hit = expand_rows(cnt.gt(0), values);
    Tensor kept = accumulate_matches ? values.mul(expand_rows(cnt, values).to(values.scalar_type())) : values;
    values = at::where(hit, kept, at::zeros({}, values.options()));
  } else {
    values = values.clone();
  }
  return make_sparse(sizes, sd, self._indices().clone(), values, self.is_coalesced());
}

// ---------------------------------------------------------------- index_select

// Along a sparse dim: for each position p of `index` (in order), the entries of
// self whose index there is index[p] (in self's order), moved to p, as CPU's
// kernel orders them. Along a dense dim: index_select of the values.
Tensor index_select_sparse_tpu(const Tensor& self, int64_t dim, const Tensor& index) {
  TORCH_CHECK(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const int64_t sd = self.sparse_dim(), size = self.size(dim);
  Tensor idx = index.reshape({-1}).to(self._indices().options());
  const int64_t n = idx.numel();
  if (n > 0) {
    auto [mn, mx] = at::aminmax(idx);  // both bounds in one read (a sync, as CPU's check reads them)
    const Tensor bounds = at::stack({mn, mx}).cpu();
    const int64_t lo = bounds.const_data_ptr<int64_t>()[0], hi = bounds.const_data_ptr<int64_t>()[1];
    // as CPU: no negative indices
    TORCH_CHECK(lo >= 0, "index ", lo, " is out of bounds for dimension ", dim, " with size ", size);
    TORCH_CHECK(hi < size, "index ", hi, " is out of bounds for dimension ", dim, " with size ", size);
  }
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[dim] = n;
  if (dim >= sd) {
    Tensor values = self._values().index_select(dim - sd + 1, idx);
    return make_sparse(sizes, sd, self._indices().clone(), values, false);
  }
  Tensor indices = self._indices();
  Tensor values = self._values();
  auto sorted = at::sort(indices.select(0, dim), /*stable=*/true, /*dim=*/0, /*descending=*/false);
  Tensor keys = std::get<0>(sorted), perm = std::get<1>(sorted);
  Tensor first = at::searchsorted(keys, idx);
  Tensor cnt = at::searchsorted(keys, idx, /*out_int32=*/false, /*right=*/true).sub_(first);
  Tensor pos = at::repeat_interleave(at::arange(n, idx.options()), cnt);
  const int64_t total = pos.numel();
  Tensor offs = cnt.cumsum(0).sub_(cnt);
  Tensor within = at::arange(total, idx.options()).sub_(offs.index_select(0, pos));
  Tensor entry = perm.index_select(0, first.index_select(0, pos).add_(within));
  Tensor new_indices = indices.index_select(1, entry);
  new_indices.select(0, dim).copy_(pos);
  // (the entries' order within the result can differ from CPU's, which picks its loop order by size;
  // CPU calls the result coalesced only in this case)
  return make_sparse(sizes, sd, new_indices, values.index_select(0, entry),
                     self.is_coalesced() && dim == 0 && n == 1 && total > 0);
}

// ---------------------------------------------------------------- sum

Tensor sum_sparse_tpu(const Tensor& self, std::optional<at::ScalarType> dtype) {
  return self._values().sum(dtype);
}

// ---------------------------------------------------------------- addmm (sparse @ dense)

Tensor& addmm_out_sparse_tpu(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const at::Scalar& beta,
                             const at::Scalar& alpha, Tensor& out) {
  TORCH_CHECK_NOT_IMPLEMENTED(mat1.is_sparse() && !mat2.is_sparse() && !self.is_sparse() && !out.is_sparse(),
                              "addmm on the tpu device supports a sparse COO mat1 with dense self, mat2 and result; "
                              "got layouts self ", self.layout(), ", mat1 ", mat1.layout(), ", mat2 ", mat2.layout());
  TORCH_CHECK(mat1.dim() == 2 && mat2.dim() == 2, "addmm: 2D tensors expected, got ", mat1.dim(), "D and ",
              mat2.dim(), "D tensors");
  TORCH_CHECK(mat1.sparse_dim() == 2 && mat1.dense_dim() == 0, "addmm: expected first two dims to be sparse (indices has size 2 at first dim), but got ",
              mat1.sparse_dim(), " sparse dims");
  TORCH_CHECK(mat1.size(1) == mat2.size(0), "mat1 and mat2 shapes cannot be multiplied (", mat1.size(0), "x",
              mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  TORCH_CHECK(mat1.scalar_type() == mat2.scalar_type() && self.scalar_type() == mat2.scalar_type(),
              "addmm: expected self, mat1 and mat2 to have the same dtype, but got ", self.scalar_type(), ", ",
              mat1.scalar_type(), " and ", mat2.scalar_type());
  const int64_t m = mat1.size(0), n = mat2.size(1);
  Tensor t = self.expand({m, n});
  Tensor acc = at::zeros({m, n}, mat2.options());
  if (mat1._nnz() > 0) {
    Tensor idx = mat1._indices();
    Tensor contrib = mat2.index_select(0, idx.select(0, 1)).mul(mat1._values().unsqueeze(1));
    acc.index_add_(0, idx.select(0, 0), contrib);
  }
  Tensor result;
  if (beta.toComplexDouble() == 0.0)
    result = acc.mul(alpha);
  else
    result = at::add(t.mul(beta), acc, alpha);
  if (!out.sizes().equals(result.sizes())) out.resize_(result.sizes());
  out.copy_(result);
  return out;
}

Tensor addmm_sparse_tpu(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const at::Scalar& beta,
                        const at::Scalar& alpha) {
  Tensor out = at::empty({0}, mat2.options().layout(at::kStrided));
  return addmm_out_sparse_tpu(self, mat1, mat2, beta, alpha, out);
}

Tensor& addmm_sparse_tpu_(Tensor& self, const Tensor& mat1, const Tensor& mat2, const at::Scalar& beta,
                          const at::Scalar& alpha) {
  return addmm_out_sparse_tpu(self, mat1, mat2, beta, alpha, self);
}

}  // namespace
}  // namespace torch_tpu

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_tpu::sparse_fallback>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torch_tpu::compressed_fallback>());
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  using at::Tensor;
  namespace nat = at::native;
  // Device-generic ATen kernels (the ones SparseCPU and SparseCUDA share).
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(nat::new_with_dims_and_tensor_sparse_symint));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(nat::new_with_dims_sparse));
  m.impl("empty.memory_format", TORCH_FN(nat::empty_sparse_symint));
  m.impl("empty_like", TORCH_FN(nat::empty_like_sparse_coo));
  m.impl("sparse_dim", TORCH_FN(nat::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(nat::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(nat::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(nat::dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(nat::_nnz_sparse));
  m.impl("_indices", TORCH_FN(nat::_indices_sparse));
  m.impl("_values", TORCH_FN(nat::_values_sparse));
  m.impl("indices", TORCH_FN(nat::indices_sparse));
  m.impl("values", TORCH_FN(nat::values_sparse));
  m.impl("is_coalesced", TORCH_FN(nat::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(nat::_coalesced_sparse_));
  m.impl("sparse_resize_", TORCH_FN(nat::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(nat::sparse_resize_and_clear_));
  m.impl("resize_as_sparse_", TORCH_FN(nat::resize_as_sparse_));
  m.impl("copy_", TORCH_FN(nat::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(nat::copy_sparse_));
  m.impl("clone", TORCH_FN(nat::clone_sparse));
  m.impl("zero_", TORCH_FN(nat::zero_sparse_));
  m.impl("_to_sparse.sparse_dim",
         static_cast<Tensor (*)(const Tensor&, int64_t)>(nat::sparse_coo_to_sparse));
  m.impl("_to_sparse", static_cast<Tensor (*)(const Tensor&, std::optional<at::Layout>, at::OptionalIntArrayRef,
                                              std::optional<int64_t>)>(nat::sparse_coo_to_sparse));
  m.impl("add.Tensor", TORCH_FN(nat::add_sparse));
  m.impl("add_.Tensor", TORCH_FN(nat::add_sparse_));
  m.impl("sub.Tensor", TORCH_FN(nat::sub_sparse));
  m.impl("sub_.Tensor", TORCH_FN(nat::sub_sparse_));
  m.impl("sub.out", TORCH_FN(nat::sub_out_sparse));
  m.impl("mul.Tensor", TORCH_FN(nat::mul_sparse));
  m.impl("mul_.Tensor", TORCH_FN(nat::mul_sparse_));
  m.impl("neg", TORCH_FN(nat::neg_sparse));
  m.impl("neg_", TORCH_FN(nat::neg_sparse_));
  m.impl("neg.out", TORCH_FN(nat::neg_out_sparse));
  m.impl("div.Tensor", static_cast<Tensor (*)(const Tensor&, const Tensor&)>(nat::div_sparse));
  m.impl("div_.Tensor", static_cast<Tensor& (*)(Tensor&, const Tensor&)>(nat::div_sparse_));
  m.impl("div.out", static_cast<Tensor& (*)(const Tensor&, const Tensor&, Tensor&)>(nat::div_out_sparse_zerodim));
  m.impl("div.Tensor_mode",
         static_cast<Tensor (*)(const Tensor&, const Tensor&, std::optional<c10::string_view>)>(nat::div_sparse));
  m.impl("div_.Tensor_mode",
         static_cast<Tensor& (*)(Tensor&, const Tensor&, std::optional<c10::string_view>)>(nat::div_sparse_));
  m.impl("div.out_mode", static_cast<Tensor& (*)(const Tensor&, const Tensor&, std::optional<c10::string_view>,
                                                 Tensor&)>(nat::div_out_sparse_zerodim));
  // Elementwise ops that keep zeros (ATen's coalesce-then-apply-to-values kernels, device-generic).
#define TPU_SPARSE_UNARY(op)                          \
  m.impl(#op, TORCH_FN(nat::op##_sparse));            \
  m.impl(#op "_", TORCH_FN(nat::op##_sparse_));      \
  m.impl(#op ".out", TORCH_FN(nat::op##_sparse_out));
  TPU_SPARSE_UNARY(abs)
  TPU_SPARSE_UNARY(asin)
  TPU_SPARSE_UNARY(asinh)
  TPU_SPARSE_UNARY(atan)
  TPU_SPARSE_UNARY(atanh)
  TPU_SPARSE_UNARY(ceil)
  TPU_SPARSE_UNARY(deg2rad)
  TPU_SPARSE_UNARY(frac)
  TPU_SPARSE_UNARY(floor)
  TPU_SPARSE_UNARY(log1p)
  TPU_SPARSE_UNARY(rad2deg)
  TPU_SPARSE_UNARY(round)
  TPU_SPARSE_UNARY(sin)
  TPU_SPARSE_UNARY(sinh)
  TPU_SPARSE_UNARY(sign)
  TPU_SPARSE_UNARY(sgn)
  TPU_SPARSE_UNARY(tan)
  TPU_SPARSE_UNARY(tanh)
  TPU_SPARSE_UNARY(trunc)
  TPU_SPARSE_UNARY(expm1)
  TPU_SPARSE_UNARY(sqrt)
  TPU_SPARSE_UNARY(erf)
  TPU_SPARSE_UNARY(erfinv)
  TPU_SPARSE_UNARY(nan_to_num)
#undef TPU_SPARSE_UNARY
  m.impl("signbit", TORCH_FN(nat::signbit_sparse));
  m.impl("signbit.out", TORCH_FN(nat::signbit_sparse_out));
  m.impl("isinf", TORCH_FN(nat::isinf_sparse));
  m.impl("isnan", TORCH_FN(nat::isnan_sparse));
  m.impl("isposinf", TORCH_FN(nat::isposinf_sparse));
  m.impl("isposinf.out", TORCH_FN(nat::isposinf_sparse_out));
  m.impl("isneginf", TORCH_FN(nat::isneginf_sparse));
  m.impl("isneginf.out", TORCH_FN(nat::isneginf_sparse_out));
  m.impl("relu", TORCH_FN(nat::relu_sparse));
  m.impl("relu_", TORCH_FN(nat::relu_sparse_));
  // Shape ops and reductions that ATen writes with dense ops on indices and values.
  m.impl("cat", TORCH_FN(nat::cat_sparse));
  m.impl("unsqueeze", TORCH_FN(nat::unsqueeze_sparse));
  m.impl("permute", TORCH_FN(nat::permute_sparse_coo));
  m.impl("narrow_copy", TORCH_FN(nat::narrow_copy_sparse));
  m.impl("sum.dim_IntList", TORCH_FN(nat::sum_sparse_coo));
  m.impl("any", TORCH_FN(nat::any_sparse));
  m.impl("pow.Tensor_Scalar", TORCH_FN(nat::pow_sparse_scalar));
  m.impl("pow.Tensor_Scalar_out", TORCH_FN(nat::pow_out_sparse_scalar));
  m.impl("mv", TORCH_FN(nat::mv_sparse));
  m.impl("mm", static_cast<Tensor (*)(const Tensor&, const Tensor&)>(nat::_sparse_mm));
  // Written here from dense tpu ops (ATen's are CPU-only).
  m.impl("_coalesce", TORCH_FN(torch_tpu::coalesce_tpu));
  m.impl("_to_dense", TORCH_FN(torch_tpu::to_dense_tpu));
  m.impl("add.out", TORCH_FN(torch_tpu::add_out_sparse_tpu));
  m.impl("mul.out", TORCH_FN(torch_tpu::mul_out_sparse_tpu));
  m.impl("sparse_mask", TORCH_FN(torch_tpu::sparse_mask_tpu));
  m.impl("_sparse_mask_projection", TORCH_FN(torch_tpu::sparse_mask_projection_tpu));
  m.impl("sum", TORCH_FN(torch_tpu::sum_sparse_tpu));
  m.impl("index_select", TORCH_FN(torch_tpu::index_select_sparse_tpu));
  m.impl("addmm", TORCH_FN(torch_tpu::addmm_sparse_tpu));
  m.impl("addmm.out", TORCH_FN(torch_tpu::addmm_out_sparse_tpu));
  m.impl("addmm_", TORCH_FN(torch_tpu::addmm_sparse_tpu_));
}

// Dense tpu -> sparse COO (ATen's dense_to_sparse is device-generic: nonzero
// and index on the device).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse.sparse_dim",
         static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(at::native::dense_to_sparse));
  m.impl("_to_sparse", TORCH_FN(torch_tpu::dense_to_sparse_tpu));
}
