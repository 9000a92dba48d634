/* Matrix access shared by the dense linear algebra kernels (lu.c,
 * cholesky.c, triangular.c, qr.c, eigh.c, svd.c, ldl.c): every matrix is
 * copied into a double row-major scratch, factored there, and written back
 * through the outputs' strides (ATen's meta gives LAPACK outputs column-major
 * strides); batch dims broadcast. float32/float64, and complex64/complex128
 * through the complex double accessors (mat_zld / mat_zst). */
#ifndef TPURT_OPS_LINALG_MATRIX_H_
#define TPURT_OPS_LINALG_MATRIX_H_

#include <complex.h>
#include <math.h>
#include <string.h>

#include "ops/linalg/linalg.h"

static inline bool mat_is_real(const tpurt_tensor_t* t) {
  return t->dtype == TPURT_DTYPE_FLOAT32 || t->dtype == TPURT_DTYPE_FLOAT64;
}

/* offset (elements) of batch index idx[0..nb) in t, whose leading ndim - mat dims broadcast
 * against the nb batch dims (trailing alignment, size-1 dims stride 0) */
static inline int64_t mat_boff(const tpurt_tensor_t* t, int mat, const int64_t* idx, int nb) {
  int tb = t->ndim - mat;
  int64_t off = 0;
  for (int d = 0; d < tb; ++d) {
    int od = d + nb - tb;
    if (od >= 0 && t->sizes[d] != 1) off += idx[od] * t->strides[d];
  }
  return off;
}

static inline double mat_ld(const tpurt_tensor_t* t, int64_t off) {
  return t->dtype == TPURT_DTYPE_FLOAT32 ? (double)((const float*)t->data)[off]
                                         : ((const double*)t->data)[off];
}
static inline void mat_st(const tpurt_tensor_t* t, int64_t off, double v) {
  if (t->dtype == TPURT_DTYPE_FLOAT32) ((float*)t->data)[off] = (float)v;
  else ((double*)t->data)[off] = v;
}

/* complex.h's imaginary unit macro I would take a name the kernels use for tensors (I = info, ...);
 * C11 7.3.1 lets a program undefine it. CMPLX(re, im) builds values instead. */
#undef I
typedef double _Complex zd_t;

static inline bool mat_is_complex(const tpurt_tensor_t* t) {
  return t->dtype == TPURT_DTYPE_COMPLEX64 || t->dtype == TPURT_DTYPE_COMPLEX128;
}
/* one element as complex double (a real dtype loads as x + 0i) */
static inline zd_t mat_zld(const tpurt_tensor_t* t, int64_t off) {
  if (t->dtype == TPURT_DTYPE_COMPLEX64) {
    const float* p = (const float*)t->data + 2 * off;
    return CMPLX(p[0], p[1]);
  }
  if (t->dtype == TPURT_DTYPE_COMPLEX128) {
    const double* p = (const double*)t->data + 2 * off;
    return CMPLX(p[0], p[1]);
  }
  return tpurt_dtype_load_f64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}
/* one element from complex double (a real dtype stores the real part) */
static inline void mat_zst(const tpurt_tensor_t* t, int64_t off, zd_t v) {
  if (t->dtype == TPURT_DTYPE_COMPLEX64) {
    float* p = (float*)t->data + 2 * off;
    p[0] = (float)creal(v);
    p[1] = (float)cimag(v);
  } else if (t->dtype == TPURT_DTYPE_COMPLEX128) {
    double* p = (double*)t->data + 2 * off;
    p[0] = creal(v);
    p[1] = cimag(v);
  } else {
    tpurt_dtype_store_f64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), creal(v));
  }
}

/* mat_load and mat_store: float64 rows that lie contiguous in both (the tensor's and the scratch's
 * layouts agree) are copied whole; any other layout is walked in MAT_TILE x MAT_TILE tiles, where a
 * row at a time would touch a new cache line with every element (PyTorch's linalg results are
 * column-major, a transposed store): a tile's lines stay in L1 while it is copied. Eight, since the
 * strided side's lines of a power-of-two leading dimension share few L1 sets (256 x 256 float64, the
 * column-major X of linalg_solve_triangular: 178 us a row at a time, 115 in 16 x 16 tiles, 69-78 in
 * 8 x 8). */
enum { MAT_TILE = 8 };
/* The scratch's rows (the tensor's rows, or its columns where trans) lie contiguous in a float64 t. */
static inline bool mat_rows_alike(const tpurt_tensor_t* t, int64_t rs, int64_t cs, int64_t r, int64_t c, bool trans) {
  return t->dtype == TPURT_DTYPE_FLOAT64 && (trans ? (rs == 1 || r == 1) : (cs == 1 || c == 1));
}
/* BODY for every (i, j) of an r x c matrix, tile by tile */
#define MAT_TILED(r, c, i, j, BODY)                                                                   \
  for (int64_t i##0 = 0; i##0 < (r); i##0 += MAT_TILE)                                              \
    for (int64_t j##0 = 0; j##0 < (c); j##0 += MAT_TILE)                                            \
      for (int64_t i = i##0; i < (r) && i < i##0 + MAT_TILE; ++i)                                   \
        for (int64_t j = j##0; j < (c) && j < j##0 + MAT_TILE; ++j) BODY
/* r x c matrix at t+off (last two dims, or a vector as c = 1) into dst row-major;
 * trans loads the transpose (dst is c x r) */
static inline void mat_load(const tpurt_tensor_t* t, int64_t off, int64_t r, int64_t c, bool vec,
                            double* dst, bool trans) {
  int64_t rs = vec ? t->strides[t->ndim - 1] : t->strides[t->ndim - 2];
  int64_t cs = vec ? 0 : t->strides[t->ndim - 1];
  if (mat_rows_alike(t, rs, cs, r, c, trans)) {
    /* dst's row q: the tensor's row q, or its column q where trans */
    const double* p = (const double*)t->data + off;
    const int64_t rows = trans ? c : r, len = trans ? r : c, step = trans ? cs : rs;
    for (int64_t q = 0; q < rows; ++q) memcpy(dst + q * len, p + q * step, (size_t)len * sizeof(double));
    return;
  }
  MAT_TILED(r, c, i, j, {
    double v = mat_ld(t, off + i * rs + j * cs);
    if (trans) dst[j * r + i] = v;
    else dst[i * c + j] = v;
  })
}
static inline void mat_store(const tpurt_tensor_t* t, int64_t off, int64_t r, int64_t c, bool vec,
                             const double* src, bool trans) {
  int64_t rs = vec ? t->strides[t->ndim - 1] : t->strides[t->ndim - 2];
  int64_t cs = vec ? 0 : t->strides[t->ndim - 1];
  if (mat_rows_alike(t, rs, cs, r, c, trans)) {
    double* p = (double*)t->data + off;
    const int64_t rows = trans ? c : r, len = trans ? r : c, step = trans ? cs : rs;
    for (int64_t q = 0; q < rows; ++q) memcpy(p + q * step, src + q * len, (size_t)len * sizeof(double));
    return;
  }
  MAT_TILED(r, c, i, j, mat_st(t, off + i * rs + j * cs, trans ? src[j * r + i] : src[i * c + j]);)
}
#undef MAT_TILED

/* r x c matrix (or vector, c = 1) at t+off into dst row-major; trans stores the
 * transpose (dst c x r), cj conjugates */
static inline void mat_zload(const tpurt_tensor_t* t, int64_t off, int64_t r, int64_t c, bool vec, zd_t* dst, bool trans,
                              bool cj) {
  int64_t rs = vec ? t->strides[t->ndim - 1] : t->strides[t->ndim - 2];
  int64_t cs = vec ? 0 : t->strides[t->ndim - 1];
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      zd_t v = mat_zld(t, off + i * rs + j * cs);
      if (cj) v = conj(v);
      if (trans) dst[j * r + i] = v;
      else dst[i * c + j] = v;
    }
}
/* the r x c matrix of t at off from src (row-major; trans: src is c x r and stored transposed) */
static inline void mat_zstore(const tpurt_tensor_t* t, int64_t off, int64_t r, int64_t c, bool vec, const zd_t* src,
                               bool trans, bool cj) {
  int64_t rs = vec ? t->strides[t->ndim - 1] : t->strides[t->ndim - 2];
  int64_t cs = vec ? 0 : t->strides[t->ndim - 1];
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      zd_t v = trans ? src[j * r + i] : src[i * c + j];
      mat_zst(t, off + i * rs + j * cs, cj ? conj(v) : v);
    }
}
static inline void mat_unravel(int64_t b, const int64_t* sizes, int nb, int64_t* idx) {
  for (int d = nb - 1; d >= 0; --d) {
    idx[d] = sizes[d] ? b % sizes[d] : 0;
    b = sizes[d] ? b / sizes[d] : 0;
  }
}
static inline int64_t mat_prod(const int64_t* s, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= s[i];
  return p;
}

static inline tpurt_status_t mat_need_outputs(const tpurt_op_call_t* c, int n) {
  if (c->num_outputs < n)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected %d outputs, got %d", c->name, n,
                        (int)c->num_outputs);
  return TPURT_OK;
}
static inline tpurt_status_t mat_need_real(const tpurt_op_call_t* c, const tpurt_tensor_t* t) {
  if (!mat_is_real(t))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for dtype %s (float32/float64 only)",
                        c->name, tpurt_dtype_name(t->dtype));
  return TPURT_OK;
}
static inline double* mat_scratch(tpurt_kernel_ctx_t* ctx, int64_t n) {
  return tpurt_kernel_scratch(ctx, (size_t)(n > 0 ? n : 1) * sizeof(double));
}
#define MAT_SCRATCH_OR_FAIL(p, n)                                                                 \
  double* p = mat_scratch(ctx, (n));                                                              \
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %lld doubles", call->name, \
                              (long long)(n))

/* The batch shape of an op with one matrix output: that output's leading dims. */
#define MAT_BATCH_OF(T, MAT) int nb = (T)->ndim - (MAT); int64_t batch = mat_prod((T)->sizes, nb)

static inline void mat_set_int(const tpurt_tensor_t* t, int64_t off, int64_t v) {
  tpurt_dtype_store_i64(t->dtype, (char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype), v);
}
static inline int64_t mat_get_int(const tpurt_tensor_t* t, int64_t off) {
  return tpurt_dtype_load_i64(t->dtype, (const char*)t->data + off * (int64_t)tpurt_dtype_size(t->dtype));
}


/* Triangular solve in place: op(T) X = B, T n x n row-major (lower or upper,
 * unit diagonal optional), B n x k. trans solves T^T X = B. (triangular.c) */
void tpurt_linalg_tri_solve(const double* t, int64_t n, bool lower, bool trans, bool unit, double* b, int64_t k);
/* complex LU with partial pivoting of the row-major m x n a in place (1-based pivots; returns info),
 * and op(A) X = B in place in b (n x k; trans: A^T) from it: zfactor.c, shared with complex.c */
int tpurt_linalg_zlu_factor(zd_t* a, int64_t m, int64_t n, int32_t* piv);
void tpurt_linalg_zlu_solve(const zd_t* lu, const int32_t* piv, int64_t n, zd_t* b, int64_t k, bool trans);

#endif /* TPURT_OPS_LINALG_MATRIX_H_ */
