/* ATen's FFT primitives on the tpu: _fft_r2c, _fft_c2r and _fft_c2c over any
 * set of dimensions and any sizes, with ATen's normalization modes (0: none,
 * 1: 1/sqrt(n), 2: 1/n, n the signal size) and its onesided/last_dim_size
 * conventions. Every torch.fft function (fft, rfft, hfft, their 2-d/n-d and
 * inverse forms) and their backward formulas reach these three. An n-d
 * transform is a sequence of 1-d passes, one per dimension (fft_impl.h). */
#include <math.h>
#include <string.h>

#include "ops/args.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* A prime factor above this goes through Bluestein (the generic butterfly is O(radix^2)). */
#define FFT_MAX_RADIX 32

typedef enum fft_kind_e { FFT_C2C, FFT_R2C, FFT_C2R } fft_kind_t;

/* Where one pass reads and writes: lines along one dimension of src/dst
 * (strides in elements: real for a real tensor, complex for a complex one). */
typedef struct fft_pass_geom_t {
  fft_kind_t kind;
  bool inverse; /* exponent sign +: conj in, conj out */
  double scale;
  const void* src;
  int64_t src_stride, src_n; /* src_n elements read along the dimension */
  void* dst;
  int64_t dst_stride, dst_n; /* dst_n elements written */
  int nother;
  int64_t other_sizes[TPURT_MAX_DIMS], src_other[TPURT_MAX_DIMS], dst_other[TPURT_MAX_DIMS];
  int64_t lines;
} fft_pass_geom_t;

static size_t fft_align(size_t b) { return (b + 63) & ~(size_t)63; }

static int64_t fft_next_pow2(int64_t n) {
  int64_t m = 1;
  while (m < n) m <<= 1;
  return m;
}

/* n = product of the factors written to f (4s first, then 2, 3, 5, other
 * primes); returns how many. */
static int fft_factorize(int64_t n, int64_t* f) {
  int nf = 0;
  while (n % 4 == 0) { f[nf++] = 4; n /= 4; }
  for (int64_t p = 2; p * p <= n; ++p)
    while (n % p == 0) { f[nf++] = p; n /= p; }
  if (n > 1) f[nf++] = n;
  return nf;
}

/* Every prime factor small enough for the mixed-radix path. */
static bool fft_is_smooth(int64_t n) {
  int64_t f[64];
  int nf = fft_factorize(n, f);
  for (int i = 0; i < nf; ++i)
    if (f[i] > FFT_MAX_RADIX) return false;
  return true;
}

#define FFT_R float
#define FFT_SUF f32
#include "ops/fft/fft_impl.h"
#undef FFT_R
#undef FFT_SUF
#define FFT_R double
#define FFT_SUF f64
#include "ops/fft/fft_impl.h"
#undef FFT_R
#undef FFT_SUF

/* ---- kernels ---- */

typedef struct fft_call_t {
  const tpurt_tensor_t* self;
  const tpurt_tensor_t* out;
  int64_t dims[TPURT_MAX_DIMS];
  int nd;
  int64_t norm;
  bool f64; /* double precision */
} fft_call_t;

static tpurt_status_t fft_parse(const tpurt_op_call_t* call, const char* op, fft_call_t* c) {
  int32_t nd;
  const int64_t* dims = tpurt_arg_ints(call, 1, &nd);
  c->self = tpurt_arg_tensor(call, 0);
  if (call->num_args < 4 || !c->self || !dims || !tpurt_arg_is(call, 2, TPURT_ARG_INT) || call->num_outputs < 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (self, dim, normalization, ...)", op);
  c->out = &call->outputs[0];
  c->norm = tpurt_arg_int(call, 2, 0);
  if (c->norm < 0 || c->norm > 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: invalid normalization mode %lld", op, (long long)c->norm);
  if (c->out->ndim != c->self->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: output has %d dims, input %d", op, c->out->ndim, c->self->ndim);
  int32_t ndim = c->self->ndim;
  /* _fft_c2c over no dims is a copy (ATen's CPU and CUDA kernels return self.clone()) */
  int32_t min_nd = strcmp(op, "_fft_c2c") == 0 ? 0 : 1;
  if (nd < min_nd || nd > ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected %d to %d dims, got %d", op, min_nd, ndim, nd);
  c->nd = nd;
  for (int i = 0; i < nd; ++i) {
    int64_t d = dims[i];
    if (d < -ndim || d >= ndim)
      return TPURT_STATUS(OUT_OF_RANGE, "%s: dimension %lld out of range for %d dims", op, (long long)d, ndim);
    if (d < 0) d += ndim;
    for (int j = 0; j < i; ++j)
      if (c->dims[j] == d) return TPURT_STATUS(INVALID_ARGUMENT, "%s: dims must be unique", op);
    c->dims[i] = d;
  }
  return TPURT_OK;
}

static double fft_scale(int64_t norm, const tpurt_tensor_t* t, const fft_call_t* c) {
  double n = 1;
  for (int i = 0; i < c->nd; ++i) n *= (double)t->sizes[c->dims[i]];
  return norm == 1 ? 1.0 / sqrt(n) : norm == 2 ? 1.0 / n : 1.0;
}

/* The lines of src/dst along `dim`; every other dimension must agree. */
static tpurt_status_t fft_geom(fft_kind_t kind, const tpurt_tensor_t* src, const tpurt_tensor_t* dst, int dim,
                               bool inverse, double scale, fft_pass_geom_t* g) {
  memset(g, 0, sizeof(*g));
  g->kind = kind;
  g->inverse = inverse;
  g->scale = scale;
  g->src = src->data;
  g->dst = dst->data;
  g->src_stride = src->strides[dim];
  g->dst_stride = dst->strides[dim];
  g->src_n = src->sizes[dim];
  g->dst_n = dst->sizes[dim];
  g->lines = 1;
  for (int k = 0; k < dst->ndim; ++k) {
    if (k == dim) continue;
    if (src->sizes[k] != dst->sizes[k])
      return TPURT_STATUS(INVALID_ARGUMENT, "fft: input and output sizes differ at dim %d (%lld vs %lld)", k,
                          (long long)src->sizes[k], (long long)dst->sizes[k]);
    g->other_sizes[g->nother] = dst->sizes[k];
    g->src_other[g->nother] = src->strides[k];
    g->dst_other[g->nother] = dst->strides[k];
    g->lines *= dst->sizes[k];
    ++g->nother;
  }
  return TPURT_OK;
}

static tpurt_status_t fft_pass(tpurt_kernel_ctx_t* ctx, const fft_call_t* c, const fft_pass_geom_t* g, int64_t n,
                               bool reference) {
  return c->f64 ? fft_pass_f64(ctx, g, n, reference) : fft_pass_f32(ctx, g, n, reference);
}

/* c2c passes over dims[first..last) of `out`, in place (after the first
 * pass, which may read another tensor `src`). */
static tpurt_status_t fft_c2c_passes(tpurt_kernel_ctx_t* ctx, const fft_call_t* c, const tpurt_tensor_t* src,
                                     const tpurt_tensor_t* out, int first, int last, bool inverse, double scale,
                                     bool reference) {
  for (int i = first; i < last; ++i) {
    fft_pass_geom_t g;
    TPURT_RETURN_IF_ERROR(fft_geom(FFT_C2C, i == first ? src : out, out, (int)c->dims[i], inverse,
                                   i == first ? scale : 1.0, &g));
    if (g.src_n != g.dst_n) return TPURT_STATUS(INVALID_ARGUMENT, "_fft_c2c: input and output sizes differ");
    TPURT_RETURN_IF_ERROR(fft_pass(ctx, c, &g, g.dst_n, reference));
  }
  return TPURT_OK;
}

/* _fft_c2c(self, dim, normalization, forward) */
static tpurt_status_t fft_c2c_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  fft_call_t c;
  TPURT_RETURN_IF_ERROR(fft_parse(call, "_fft_c2c", &c));
  if (!tpurt_dtype_is_complex(c.self->dtype) || c.out->dtype != c.self->dtype || !tpurt_arg_is(call, 3, TPURT_ARG_BOOL))
    return TPURT_STATUS(INVALID_ARGUMENT, "_fft_c2c: expected a complex input and output of one dtype, and forward");
  c.f64 = c.self->dtype == TPURT_DTYPE_COMPLEX128;
  if (tpurt_tensor_numel(c.out) == 0) return TPURT_OK;
  if (c.nd == 0) { /* no transform: out = self, element by element in any layout */
    if (tpurt_tensor_numel(c.self) != tpurt_tensor_numel(c.out))
      return TPURT_STATUS(INVALID_ARGUMENT, "_fft_c2c: input and output sizes differ");
    size_t es = tpurt_dtype_size(c.out->dtype);
    for (int64_t i = 0, n = tpurt_tensor_numel(c.out); i < n; ++i) {
      int64_t rem = i, so = 0, oo = 0;
      for (int d = c.out->ndim - 1; d >= 0; --d) {
        int64_t p = rem % c.out->sizes[d];
        rem /= c.out->sizes[d];
        so += p * c.self->strides[d];
        oo += p * c.out->strides[d];
      }
      memcpy((char*)c.out->data + oo * (int64_t)es, (const char*)c.self->data + so * (int64_t)es, es);
    }
    return TPURT_OK;
  }
  bool forward = tpurt_arg_bool(call, 3, true);
  return fft_c2c_passes(ctx, &c, c.self, c.out, 0, c.nd, !forward, fft_scale(c.norm, c.self, &c), reference);
}

/* _fft_r2c(self, dim, normalization, onesided): a forward transform of real
 * input; the last dim's pass keeps the first n/2+1 outputs when onesided. */
static tpurt_status_t fft_r2c_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  fft_call_t c;
  TPURT_RETURN_IF_ERROR(fft_parse(call, "_fft_r2c", &c));
  tpurt_dtype_t dt = c.self->dtype;
  if ((dt != TPURT_DTYPE_FLOAT32 && dt != TPURT_DTYPE_FLOAT64) || c.out->dtype != tpurt_dtype_to_complex(dt))
    return TPURT_STATUS(UNIMPLEMENTED, "_fft_r2c: unsupported dtypes %s -> %s", tpurt_dtype_name(dt),
                        tpurt_dtype_name(c.out->dtype));
  c.f64 = dt == TPURT_DTYPE_FLOAT64;
  if (tpurt_tensor_numel(c.out) == 0) return TPURT_OK;
  int last = (int)c.dims[c.nd - 1];
  fft_pass_geom_t g;
  TPURT_RETURN_IF_ERROR(fft_geom(FFT_R2C, c.self, c.out, last, false, fft_scale(c.norm, c.self, &c), &g));
  int64_t n = c.self->sizes[last];
  if (g.dst_n > n) return TPURT_STATUS(INVALID_ARGUMENT, "_fft_r2c: output longer than the signal");
  TPURT_RETURN_IF_ERROR(fft_pass(ctx, &c, &g, n, reference));
  return fft_c2c_passes(ctx, &c, c.out, c.out, 0, c.nd - 1, false, 1.0, reference);
}

/* _fft_c2r(self, dim, normalization, last_dim_size): an inverse transform of
 * a Hermitian half-spectrum to a real signal of last_dim_size. The other dims
 * are transformed first into a dense complex copy (the input stays as it is). */
static tpurt_status_t fft_c2r_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool reference) {
  fft_call_t c;
  TPURT_RETURN_IF_ERROR(fft_parse(call, "_fft_c2r", &c));
  tpurt_dtype_t dt = c.self->dtype;
  if (!tpurt_dtype_is_complex(dt) || c.out->dtype != tpurt_dtype_to_real(dt))
    return TPURT_STATUS(INVALID_ARGUMENT, "_fft_c2r: expected a complex input and its real output dtype, got %s -> %s",
                        tpurt_dtype_name(dt), tpurt_dtype_name(c.out->dtype));
  c.f64 = dt == TPURT_DTYPE_COMPLEX128;
  if (tpurt_tensor_numel(c.out) == 0) return TPURT_OK;
  const tpurt_tensor_t* src = c.self;
  tpurt_tensor_t tmp;
  if (c.nd > 1) {
    tmp = *c.self;
    int64_t st = 1;
    for (int k = tmp.ndim - 1; k >= 0; --k) {
      tmp.strides[k] = st;
      st *= tmp.sizes[k] > 1 ? tmp.sizes[k] : 1;
    }
    tmp.data = tpurt_kernel_scratch(ctx, (size_t)st * tpurt_dtype_size(dt));
    if (!tmp.data) return TPURT_STATUS(RESOURCE_EXHAUSTED, "_fft_c2r: no scratch memory for %lld elements", (long long)st);
    if (tpurt_tensor_numel(&tmp) == 0) return TPURT_OK;
    TPURT_RETURN_IF_ERROR(fft_c2c_passes(ctx, &c, c.self, &tmp, 0, c.nd - 1, true, 1.0, reference));
    src = &tmp;
  }
  int last = (int)c.dims[c.nd - 1];
  fft_pass_geom_t g;
  TPURT_RETURN_IF_ERROR(fft_geom(FFT_C2R, src, c.out, last, true, fft_scale(c.norm, c.out, &c), &g));
  return fft_pass(ctx, &c, &g, c.out->sizes[last], reference);
}

#define FFT_KERNELS(NAME)                                                                   \
  static tpurt_status_t tpurt_fft_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { \
    return fft_##NAME##_run(ctx, call, false);                                              \
  }                                                                                         \
  static tpurt_status_t tpurt_fft_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { \
    return fft_##NAME##_run(ctx, call, true);                                               \
  }
FFT_KERNELS(c2c)
FFT_KERNELS(r2c)
FFT_KERNELS(c2r)

/* Born complex: real in or out, complex on the other side (tpurt/kernel.h).
 * The input is complex64/complex128, or float32/float64 for _fft_r2c. */
#define FFT_DT_REAL (TPURT_DTYPE_BIT(FLOAT32) | TPURT_DTYPE_BIT(FLOAT64))
#define FFT(NAME, FN, DT) {NAME, tpurt_fft_##FN, tpurt_fft_##FN##_ref, TPURT_OP_COMPLEX, DT, TPURT_LAYOUT_STRIDED}
const tpurt_op_def_t tpurt_ops_fft[] = {
    FFT("_fft_c2c", c2c, TPURT_DTYPES_COMPLEX),
    FFT("_fft_r2c", r2c, FFT_DT_REAL),
    FFT("_fft_c2r", c2r, TPURT_DTYPES_COMPLEX),
    TPURT_OP_TABLE_END,
};
