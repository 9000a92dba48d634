/* Helpers shared by the linalg and conv C tests: random tensors of any
 * dtype and layout, and running an op's optimized and reference kernels on
 * the same arguments. */
#ifndef TPURT_TESTS_LINALG_TEST_COMMON_H_
#define TPURT_TESTS_LINALG_TEST_COMMON_H_
#include <math.h>
#include <string.h>

#include "test_util.h"

static inline double tol_for(tpurt_dtype_t dt) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT64: return 1e-12;
    case TPURT_DTYPE_FLOAT32: return 1e-5;
    case TPURT_DTYPE_BFLOAT16: return 1e-2;
    case TPURT_DTYPE_FLOAT16: return 2e-3;
    default: return 0;
  }
}

/* ---- op kernels: fn vs reference through the op table ---- */
typedef struct tbuf_t {
  tpurt_tensor_t t;
  void* mem;
} tbuf_t;

/* A random tensor; perm reverses the memory order of the last two dims (a
 * transposed view) and pad adds unused elements after each innermost row. */
static inline tbuf_t mk(tpurt_dtype_t dt, int nd, const int64_t* sizes, bool perm, int pad) {
  tbuf_t b = {{0}};
  b.t.dtype = dt;
  b.t.ndim = nd;
  int order[TPURT_MAX_DIMS];
  for (int d = 0; d < nd; ++d) order[d] = d, b.t.sizes[d] = sizes[d];
  if (perm && nd >= 2) order[nd - 1] = nd - 2, order[nd - 2] = nd - 1;
  int64_t st = 1;
  for (int i = nd - 1; i >= 0; --i) {
    b.t.strides[order[i]] = st;
    st *= sizes[order[i]] + (i == nd - 1 ? pad : 0);
  }
  b.mem = test_rand_buf(dt, st);
  b.t.data = b.mem;
  return b;
}

/* A random tensor whose dims are laid out in memory in `order` (outermost
 * first), e.g. {0, 2, 3, 1} for channels-last NCHW. */
static inline tbuf_t mk_order(tpurt_dtype_t dt, int nd, const int64_t* sizes, const int* order) {
  tbuf_t b = {{0}};
  b.t.dtype = dt;
  b.t.ndim = nd;
  int64_t st = 1;
  for (int d = 0; d < nd; ++d) b.t.sizes[d] = sizes[d];
  for (int i = nd - 1; i >= 0; --i) {
    b.t.strides[order[i]] = st;
    st *= sizes[order[i]];
  }
  b.mem = test_rand_buf(dt, st);
  b.t.data = b.mem;
  return b;
}

static inline int64_t span(const tpurt_tensor_t* t) {
  int64_t s = 1;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] == 0) return 0;
    s += (t->sizes[d] - 1) * t->strides[d];
  }
  return s;
}

/* Runs op `name` optimized and reference on the same args with outputs laid
 * out like `outs` (initial contents copied), and compares. */
static inline void check_op(const char* name, const char* overload, tpurt_arg_t* args, int nargs,
                     tbuf_t* outs, int nouts, double tol) {
  const tpurt_op_def_t* def = tpurt_op_lookup(name);
  CHECK(def != NULL);
  if (!def) return;
  tpurt_tensor_t o1[4], o2[4];
  void* m2[4];
  for (int i = 0; i < nouts; ++i) {
    o1[i] = outs[i].t;
    o2[i] = outs[i].t;
    size_t bytes = (size_t)span(&outs[i].t) * tpurt_dtype_size(outs[i].t.dtype);
    m2[i] = malloc(bytes ? bytes : 1);
    memcpy(m2[i], outs[i].mem, bytes);
    o2[i].data = m2[i];
  }
  tpurt_op_call_t c1 = {name, overload, nargs, args, nouts, o1};
  tpurt_op_call_t c2 = {name, overload, nargs, args, nouts, o2};
  CHECK_OK(tpurt_kernel_run(def->fn, &c1));
  CHECK_OK(tpurt_kernel_run(def->reference, &c2));
  for (int i = 0; i < nouts; ++i) {
    double err = test_max_err(outs[i].t.dtype, outs[i].mem, m2[i], span(&outs[i].t), 1.0);
    if (!(err <= tol)) fprintf(stderr, "%s output %d (%s): err %g\n", name, i,
                               tpurt_dtype_name(outs[i].t.dtype), err);
    CHECK(err <= tol);
    free(m2[i]);
  }
}

static inline tpurt_arg_t targ(tbuf_t* b) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = &b->t}; }
static inline tpurt_arg_t darg(double d) { return (tpurt_arg_t){.kind = TPURT_ARG_DOUBLE, .v.d = d}; }
static inline tpurt_arg_t iarg(int64_t i) { return (tpurt_arg_t){.kind = TPURT_ARG_INT, .v.i = i}; }
static inline tpurt_arg_t barg(bool b) { return (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .v.b = b}; }

#endif
