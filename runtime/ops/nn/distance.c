/* Pairwise p-norm distances: _cdist_forward / _cdist_backward (rows of x1
 * against rows of x2, batch dims broadcast) and _pdist_forward /
 * _pdist_backward (every pair i < j of one matrix's rows, in row-major
 * upper-triangle order). p = 0 counts differing coordinates, p = inf takes
 * the largest; the gradient formulas and their zero cases are PyTorch CPU's
 * (Distance.cpp / DistanceOpsKernel.cpp). float32/float64 (CPU has no other);
 * sums run in double. Work splits over output rows; each backward row only
 * reads, so no two threads write the same element. */
#include <math.h>
#include <string.h>

#include "ops/nn/nn.h"

typedef enum dist_kind_e { DIST_ZERO, DIST_ONE, DIST_TWO, DIST_INF, DIST_LT_TWO, DIST_GENERAL } dist_kind_t;

static dist_kind_t kind_of(double p) {
  if (p == 0) return DIST_ZERO;
  if (p == 1) return DIST_ONE;
  if (p == 2) return DIST_TWO;
  if (isinf(p)) return DIST_INF;
  return p < 2 ? DIST_LT_TWO : DIST_GENERAL;
}

/* A matrix operand: rows x cols, with its batch dims (right-aligned against
 * the output's, size-1 dims broadcast). */
typedef struct mat_t {
  const tpurt_tensor_t* t;
  int64_t rows, cols, rs, cs;
} mat_t;

static mat_t mat_of(const tpurt_tensor_t* t) {
  return (mat_t){t, t->sizes[t->ndim - 2], t->sizes[t->ndim - 1], t->strides[t->ndim - 2], t->strides[t->ndim - 1]};
}

/* element offset of batch b (row-major over the nb leading dims of `shape`) in m */
static int64_t batch_off(const mat_t* m, int64_t b, const int64_t* shape, int nb) {
  int mb = m->t->ndim - 2;
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; --d) {
    int64_t i = shape[d] ? b % shape[d] : 0;
    b = shape[d] ? b / shape[d] : 0;
    int md = d - (nb - mb);
    if (md >= 0 && m->t->sizes[md] != 1) off += i * m->t->strides[md];
  }
  return off;
}

static inline double ldv(const tpurt_tensor_t* t, int64_t off) {
  return t->dtype == TPURT_DTYPE_FLOAT32 ? (double)((const float*)t->data)[off] : ((const double*)t->data)[off];
}
static inline void stv(const tpurt_tensor_t* t, int64_t off, double v) {
  if (t->dtype == TPURT_DTYPE_FLOAT32) ((float*)t->data)[off] = (float)v;
  else ((double*)t->data)[off] = v;
}

/* a - b rounded to t's dtype, as CPU subtracts (p = inf's backward tests |diff| == dist exactly) */
static inline double diff_in(const tpurt_tensor_t* t, double a, double b) {
  return t->dtype == TPURT_DTYPE_FLOAT32 ? (double)((float)a - (float)b) : a - b;
}

/* distance between row a of A (at offset oa) and row b of B (at ob) */
static double row_dist(const mat_t* A, int64_t oa, const mat_t* B, int64_t ob, double p, dist_kind_t k) {
  double acc = 0;
  int ip = (p == floor(p) && p >= 3 && p <= 16) ? (int)p : 0;
  for (int64_t c = 0; c < A->cols; ++c) {
    double d = fabs(diff_in(A->t, ldv(A->t, oa + c * A->cs), ldv(B->t, ob + c * B->cs)));
    switch (k) {
      case DIST_ZERO: acc += d != 0 ? 1.0 : 0.0; break;
      case DIST_ONE: acc += d; break;
      case DIST_TWO: acc += d * d; break;
      case DIST_INF: acc = (d > acc || isnan(d)) ? d : acc; break;
      default: {
        if (ip > 0) { /* small integer p: repeated products instead of pow() */
          double v = d;
          for (int e = 1; e < ip; ++e) v *= d;
          acc += v;
        } else {
          acc += pow(d, p);
        }
        break;
      }
    }
  }
  if (k == DIST_TWO) return sqrt(acc);
  if (k == DIST_LT_TWO || k == DIST_GENERAL) return pow(acc, 1.0 / p);
  return acc;
}

/* d(dist)/d(diff) times grad, for one coordinate difference */
static inline double grad_term(double diff, double grad, double dist, double p, dist_kind_t k) {
  double sgn = (diff > 0) - (diff < 0);
  switch (k) {
    case DIST_ZERO: return 0;
    case DIST_ONE: return grad * sgn;
    case DIST_TWO: return dist == 0.0 ? 0 : grad * diff / dist;
    case DIST_INF: return grad * sgn * (fabs(diff) == dist ? 1.0 : 0.0);
    case DIST_LT_TWO:
      return (dist == 0.0 || (diff == 0 && p < 1)) ? 0 : sgn * pow(fabs(diff), p - 1) * grad / pow(dist, p - 1);
    case DIST_GENERAL: return dist == 0.0 ? 0 : diff * pow(fabs(diff), p - 2) * grad / pow(dist, p - 1);
  }
  return 0;
}

static bool real_dtype(tpurt_dtype_t d) { return d == TPURT_DTYPE_FLOAT32 || d == TPURT_DTYPE_FLOAT64; }

static tpurt_status_t tensor_at(const tpurt_op_call_t* call, int i, int min_nd, const tpurt_tensor_t** t) {
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_min_nd(call, i, min_nd, t));
  if (!real_dtype((*t)->dtype))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s (float32/float64 only)", call->name,
                        tpurt_dtype_name((*t)->dtype));
  return TPURT_OK;
}

static tpurt_status_t p_arg(const tpurt_op_call_t* call, int i, double* p) {
  if (!tpurt_arg_opt_double(call, i, p))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d (p) must be a number", call->name, i);
  if (!(*p >= 0)) return TPURT_STATUS(INVALID_ARGUMENT, "%s: p value must be >= 0, got %g", call->name, *p);
  return TPURT_OK;
}

/* ---- cdist ---- */

typedef struct cdist_t {
  mat_t a, b;              /* x1, x2 */
  const tpurt_tensor_t* out;   /* dist [..., P, R] (forward) or grad_x1 [..., P, M] (backward) */
  const tpurt_tensor_t *grad, *dist;
  const int64_t* bshape;   /* output batch shape */
  int nb;
  double p;
  dist_kind_t k;
} cdist_t;

static void cdist_rows(void* u, int64_t r0, int64_t r1, int tid) {
  const cdist_t* c = u;
  int64_t P = c->a.rows, R = c->b.rows;
  const tpurt_tensor_t* o = c->out;
  int nd = o->ndim;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t bi = r / P, i = r % P;
    int64_t oa = batch_off(&c->a, bi, c->bshape, c->nb) + i * c->a.rs;
    int64_t ob = batch_off(&c->b, bi, c->bshape, c->nb);
    mat_t om = mat_of(o);
    int64_t oo = batch_off(&om, bi, c->bshape, c->nb) + i * o->strides[nd - 2];
    if (!c->grad) {
      for (int64_t j = 0; j < R; ++j)
        stv(o, oo + j * o->strides[nd - 1], row_dist(&c->a, oa, &c->b, ob + j * c->b.rs, c->p, c->k));
      continue;
    }
    mat_t gm = mat_of(c->grad), dm = mat_of(c->dist);
    int64_t og = batch_off(&gm, bi, c->bshape, c->nb) + i * gm.rs;
    int64_t od = batch_off(&dm, bi, c->bshape, c->nb) + i * dm.rs;
    for (int64_t m = 0; m < c->a.cols; ++m) {
      double x = ldv(c->a.t, oa + m * c->a.cs), acc = 0;
      for (int64_t j = 0; j < R; ++j) {
        double diff = diff_in(c->a.t, x, ldv(c->b.t, ob + j * c->b.rs + m * c->b.cs));
        acc += grad_term(diff, ldv(c->grad, og + j * gm.cs), ldv(c->dist, od + j * dm.cs), c->p, c->k);
      }
      stv(o, oo + m * o->strides[nd - 1], acc);
    }
  }
}

/* _cdist_forward(x1, x2, p, compute_mode?) / _cdist_backward(grad, x1, x2, p, cdist) */
static tpurt_status_t cdist_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool backward, bool ref) {
  const tpurt_tensor_t *x1, *x2, *grad = NULL, *dist = NULL;
  int base = backward ? 1 : 0;
  if (backward) TPURT_RETURN_IF_ERROR(tensor_at(call, 0, 2, &grad));
  TPURT_RETURN_IF_ERROR(tensor_at(call, base, 2, &x1));
  TPURT_RETURN_IF_ERROR(tensor_at(call, base + 1, 2, &x2));
  if (backward) TPURT_RETURN_IF_ERROR(tensor_at(call, 4, 2, &dist));
  double p = 0; /* set by p_arg */
  TPURT_RETURN_IF_ERROR(p_arg(call, base + 2, &p));
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output", call->name);
  const tpurt_tensor_t* out = &call->outputs[0];
  if (x1->sizes[x1->ndim - 1] != x2->sizes[x2->ndim - 1])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: X1 and X2 must have the same number of columns. X1: %lld X2: %lld",
                        call->name, (long long)x1->sizes[x1->ndim - 1], (long long)x2->sizes[x2->ndim - 1]);
  if (!real_dtype(out->dtype) || out->ndim < 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: output must be a float32/float64 tensor of >= 2 dims", call->name);
  cdist_t c = {mat_of(x1), mat_of(x2), out, grad, dist, out->sizes, out->ndim - 2, p, kind_of(p)};
  int64_t batches = 1;
  for (int d = 0; d < c.nb; ++d) batches *= out->sizes[d];
  if (out->sizes[out->ndim - 2] != c.a.rows)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: output rows %lld differ from x1's %lld", call->name,
                        (long long)out->sizes[out->ndim - 2], (long long)c.a.rows);
  if (backward && tpurt_tensor_numel(grad) == 0) {
    /* an empty broadcast batch: CPU answers zeros shaped like x1 */
    mat_t om = mat_of(out);
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t i = 0; i < om.rows; ++i)
        for (int64_t m = 0; m < om.cols; ++m)
          stv(out, batch_off(&om, b, out->sizes, c.nb) + i * om.rs + m * om.cs, 0);
    return TPURT_OK;
  }
  int64_t rows = batches * c.a.rows;
  if (rows == 0) return TPURT_OK;
  if (ref) cdist_rows(&c, 0, rows, 0);
  else tpurt_parallel_for(ctx, rows, 1, cdist_rows, &c);
  return TPURT_OK;
}

/* ---- pdist ---- */

typedef struct pdist_t {
  mat_t a;
  const tpurt_tensor_t *out, *grad, *dist;
  double p;
  dist_kind_t k;
} pdist_t;

static inline int64_t pair_index(int64_t i, int64_t j, int64_t n) { /* i < j */
  return i * n - i * (i + 1) / 2 + (j - i - 1);
}

static void pdist_rows(void* u, int64_t r0, int64_t r1, int tid) {
  const pdist_t* c = u;
  int64_t n = c->a.rows;
  int64_t os = c->out->ndim ? c->out->strides[c->out->ndim - 1] : 1;
  for (int64_t i = r0; i < r1; ++i) {
    if (!c->grad) {
      for (int64_t j = i + 1; j < n; ++j)
        stv(c->out, pair_index(i, j, n) * os, row_dist(&c->a, i * c->a.rs, &c->a, j * c->a.rs, c->p, c->k));
      continue;
    }
    /* grad of row i: every pair it is in; the gradient terms are odd in the difference */
    int64_t gs = c->grad->strides[0], ds = c->dist->strides[0];
    for (int64_t m = 0; m < c->a.cols; ++m) {
      double x = ldv(c->a.t, i * c->a.rs + m * c->a.cs), acc = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (j == i) continue;
        int64_t k = i < j ? pair_index(i, j, n) : pair_index(j, i, n);
        double diff = diff_in(c->a.t, x, ldv(c->a.t, j * c->a.rs + m * c->a.cs));
        acc += grad_term(diff, ldv(c->grad, k * gs), ldv(c->dist, k * ds), c->p, c->k);
      }
      stv(c->out, i * c->out->strides[0] + m * c->out->strides[1], acc);
    }
  }
}

/* _pdist_forward(self, p) / _pdist_backward(grad, self, p, pdist) */
static tpurt_status_t pdist_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool backward, bool ref) {
  const tpurt_tensor_t *x, *grad = NULL, *dist = NULL;
  int base = backward ? 1 : 0;
  if (backward) TPURT_RETURN_IF_ERROR(tensor_at(call, 0, 1, &grad));
  TPURT_RETURN_IF_ERROR(tensor_at(call, base, 2, &x));
  if (backward) TPURT_RETURN_IF_ERROR(tensor_at(call, 3, 1, &dist));
  if (x->ndim != 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: pdist only supports 2D tensors, got: %dD", call->name, (int)x->ndim);
  double p = 0; /* set by p_arg */
  TPURT_RETURN_IF_ERROR(p_arg(call, base + 1, &p));
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output", call->name);
  pdist_t c = {mat_of(x), &call->outputs[0], grad, dist, p, kind_of(p)};
  int64_t n = c.a.rows, pairs = n * (n - 1) / 2;
  if (!backward && tpurt_tensor_numel(c.out) != pairs)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: output has %lld elements, expected %lld", call->name,
                        (long long)tpurt_tensor_numel(c.out), (long long)pairs);
  if (backward) {
    if (c.out->ndim != 2 || c.out->sizes[0] != n || c.out->sizes[1] != c.a.cols)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_input must be shaped like self", call->name);
    if (tpurt_tensor_numel(grad) != pairs || tpurt_tensor_numel(dist) != pairs)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad and pdist must have %lld elements", call->name,
                          (long long)pairs);
    if (pairs == 0) { /* one row (or none): nothing depends on self */
      for (int64_t i = 0; i < n; ++i)
        for (int64_t m = 0; m < c.a.cols; ++m) stv(c.out, i * c.out->strides[0] + m * c.out->strides[1], 0);
      return TPURT_OK;
    }
  }
  if (n == 0) return TPURT_OK;
  if (ref) pdist_rows(&c, 0, n, 0);
  else tpurt_parallel_for(ctx, n, 1, pdist_rows, &c);
  return TPURT_OK;
}

TPURT_NN_PAIR(cdist_forward, cdist_run(ctx, call, false, ref))
TPURT_NN_PAIR(cdist_backward, cdist_run(ctx, call, true, ref))
TPURT_NN_PAIR(pdist_forward, pdist_run(ctx, call, false, ref))
TPURT_NN_PAIR(pdist_backward, pdist_run(ctx, call, true, ref))
