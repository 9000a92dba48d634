/* Index kernel family: every optimized kernel against its reference kernel
 * (dtypes, strided and empty inputs, duplicates), known answers, and bad
 * indices -> OUT_OF_RANGE naming the index. */
#include <math.h>
#include <string.h>

#include "test_util.h"

/* ---- tensors owned by the test ---- */
typedef struct {
  tpurt_tensor_t t;
  void* mem;
} T;

static int64_t rnd(int64_t lo, int64_t hi) { /* [lo, hi) */
  return lo + (int64_t)(test_rand_u64() % (uint64_t)(hi - lo));
}

/* layout 0: contiguous; 1: last two dims transposed in memory; 2: every other
 * element of the last dim (stride 2) */
static T tnew_l(tpurt_dtype_t dt, int nd, const int64_t* sz, int layout) {
  T r;
  memset(&r, 0, sizeof(r));
  r.t.dtype = dt;
  r.t.ndim = nd;
  int64_t n = 1;
  for (int d = 0; d < nd; ++d) { r.t.sizes[d] = sz[d]; n *= sz[d]; }
  size_t es = tpurt_dtype_size(dt);
  size_t bytes = (size_t)(n * 2 + 1) * es;
  r.mem = calloc(1, bytes);
  r.t.data = r.mem;
  int64_t st = 1;
  for (int d = nd - 1; d >= 0; --d) { r.t.strides[d] = st; st *= sz[d] > 0 ? sz[d] : 1; }
  if (layout == 1 && nd >= 2) {
    int64_t a = sz[nd - 2] > 0 ? sz[nd - 2] : 1;
    r.t.strides[nd - 1] = a;
    r.t.strides[nd - 2] = 1;
  } else if (layout == 2 && nd >= 1) {
    for (int d = 0; d < nd; ++d) r.t.strides[d] *= 2;
  }
  return r;
}
static T tnew(tpurt_dtype_t dt, int nd, const int64_t* sz) { return tnew_l(dt, nd, sz, 0); }
static void tfree(T* t) { free(t->mem); }
static int64_t numel(const T* t) { return tpurt_tensor_numel(&t->t); }
static int64_t off_of(const tpurt_tensor_t* t, int64_t l) {
  int64_t o = 0;
  for (int d = t->ndim - 1; d >= 0; --d) { o += (l % t->sizes[d]) * t->strides[d]; l /= t->sizes[d]; }
  return o;
}
static void* at(const T* t, int64_t l) {
  return (char*)t->t.data + off_of(&t->t, l) * (int64_t)tpurt_dtype_size(t->t.dtype);
}
static void set_i(T* t, int64_t l, int64_t v) { tpurt_dtype_store_i64(t->t.dtype, at(t, l), v); }
static void set_f(T* t, int64_t l, double v) { tpurt_dtype_store_f64(t->t.dtype, at(t, l), v); }
static int64_t get_i(const T* t, int64_t l) { return tpurt_dtype_load_i64(t->t.dtype, at(t, l)); }
static double get_f(const T* t, int64_t l) { return tpurt_dtype_load_f64(t->t.dtype, at(t, l)); }
/* small values (floats in quarters) so every dtype holds them */
static void tfill(T* t) {
  bool fl = tpurt_dtype_is_floating(t->t.dtype);
  for (int64_t l = 0; l < numel(t); ++l) {
    if (t->t.dtype == TPURT_DTYPE_BOOL) set_i(t, l, rnd(0, 2));
    else if (t->t.dtype == TPURT_DTYPE_UINT8) set_i(t, l, rnd(0, 9));
    else if (fl) set_f(t, l, (double)rnd(-16, 16) / 4.0);
    else set_i(t, l, rnd(-8, 9));
  }
}
static void tfill_idx(T* t, int64_t lo, int64_t hi) {
  for (int64_t l = 0; l < numel(t); ++l) set_i(t, l, rnd(lo, hi));
}
/* a second tensor with the same layout and contents */
static T tclone(const T* a) {
  T r = *a;
  int64_t span = 1;
  for (int d = 0; d < a->t.ndim; ++d) span += (a->t.sizes[d] > 0 ? a->t.sizes[d] - 1 : 0) * a->t.strides[d];
  size_t bytes = (size_t)(numel(a) * 2 + 1) * tpurt_dtype_size(a->t.dtype);
  if ((size_t)span * tpurt_dtype_size(a->t.dtype) > bytes) bytes = (size_t)span * tpurt_dtype_size(a->t.dtype);
  r.mem = malloc(bytes);
  memcpy(r.mem, a->mem, bytes);
  r.t.data = (char*)r.mem + ((char*)a->t.data - (char*)a->mem);
  return r;
}
static bool tsame(const T* a, const T* b) {
  if (numel(a) != numel(b) || a->t.dtype != b->t.dtype) return false;
  size_t es = tpurt_dtype_size(a->t.dtype);
  for (int64_t l = 0; l < numel(a); ++l)
    if (memcmp(at(a, l), at(b, l), es) != 0) return false;
  return true;
}

/* ---- argument builders ---- */
static tpurt_arg_t A_T(const T* t) { tpurt_arg_t a = {.kind = TPURT_ARG_TENSOR}; a.v.tensor = &t->t; return a; }
static tpurt_arg_t A_I(int64_t v) { tpurt_arg_t a = {.kind = TPURT_ARG_INT}; a.v.i = v; return a; }
static tpurt_arg_t A_D(double v) { tpurt_arg_t a = {.kind = TPURT_ARG_DOUBLE}; a.v.d = v; return a; }
static tpurt_arg_t A_B(bool v) { tpurt_arg_t a = {.kind = TPURT_ARG_BOOL}; a.v.b = v; return a; }
static tpurt_arg_t A_S(const char* s) { tpurt_arg_t a = {.kind = TPURT_ARG_STRING}; a.v.s = s; return a; }
static tpurt_arg_t A_N(void) { tpurt_arg_t a = {.kind = TPURT_ARG_NONE}; return a; }
static tpurt_arg_t A_IL(const int64_t* v, int n) {
  tpurt_arg_t a = {.kind = TPURT_ARG_INT_LIST, .count = n};
  a.v.ints = v;
  return a;
}
static tpurt_arg_t A_TL(const tpurt_tensor_t* const* v, int n) {
  tpurt_arg_t a = {.kind = TPURT_ARG_TENSOR_LIST, .count = n};
  a.v.tensors = v;
  return a;
}

static tpurt_status_t run(const char* name, bool ref, tpurt_arg_t* args, int nargs, T* out) {
  const tpurt_op_def_t* d = tpurt_op_lookup(name);
  if (!d) return TPURT_STATUS(NOT_FOUND, "no kernel %s", name);
  tpurt_op_call_t c = {name, "", nargs, args, out ? 1 : 0, out ? &out->t : NULL};
  return tpurt_kernel_run(ref ? d->reference : d->fn, &c);
}

/* Runs optimized on `out` and reference on a clone; both must succeed and agree. */
static int g_cmp_fail;
static void both(const char* name, tpurt_arg_t* args, int nargs, T* out, int line) {
  T o2 = tclone(out);
  tpurt_status_t s1 = run(name, false, args, nargs, out);
  tpurt_status_t s2 = run(name, true, args, nargs, &o2);
  bool ok = !s1 && !s2 && tsame(out, &o2);
  if (!ok) {
    ++g_cmp_fail;
    fprintf(stderr, "line %d: %s: opt=%s ref=%s %s\n", line, name, s1 ? tpurt_status_message(s1) : "OK",
            s2 ? tpurt_status_message(s2) : "OK", (!s1 && !s2) ? "results differ" : "");
  }
  CHECK(ok);
  tpurt_status_free(s1);
  tpurt_status_free(s2);
  tfree(&o2);
}
#define BOTH(name, args, out) both(name, args, (int)(sizeof(args) / sizeof(args[0])), out, __LINE__)

static const tpurt_dtype_t kAll[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT64,
                                     TPURT_DTYPE_INT64,   TPURT_DTYPE_INT32,    TPURT_DTYPE_INT16,   TPURT_DTYPE_INT8,
                                     TPURT_DTYPE_UINT8,   TPURT_DTYPE_BOOL};
#define NALL ((int)(sizeof(kAll) / sizeof(kAll[0])))

/* ---- gather / scatter ---- */

static void test_gather(void) {
  /* known answer: gather(x=[[1,2],[3,4]], 1, [[0,0],[1,0]]) = [[1,1],[4,3]] */
  int64_t s22[2] = {2, 2};
  T x = tnew(TPURT_DTYPE_FLOAT32, 2, s22), i = tnew(TPURT_DTYPE_INT64, 2, s22), o = tnew(TPURT_DTYPE_FLOAT32, 2, s22);
  for (int k = 0; k < 4; ++k) set_f(&x, k, k + 1);
  set_i(&i, 0, 0); set_i(&i, 1, 0); set_i(&i, 2, 1); set_i(&i, 3, 0);
  tpurt_arg_t a[] = {A_T(&x), A_I(1), A_T(&i), A_B(false)};
  CHECK_OK(run("gather", false, a, 4, &o));
  CHECK(get_f(&o, 0) == 1 && get_f(&o, 1) == 1 && get_f(&o, 2) == 4 && get_f(&o, 3) == 3);
  /* bad index -> INVALID_ARGUMENT (RuntimeError, as CPU's gather raises) with PyTorch's wording */
  set_i(&i, 3, -1); /* gather rejects negative indices, as PyTorch does */
  CHECK_STATUS(run("gather", false, a, 4, &o), INVALID_ARGUMENT);
  set_i(&i, 3, 2);
  tpurt_status_t s = run("gather", false, a, 4, &o);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INVALID_ARGUMENT);
  CHECK(s && strstr(tpurt_status_message(s), "index 2 is out of bounds for dimension 1 with size 2") != NULL);
  tpurt_status_free(s);
  tfree(&x); tfree(&i); tfree(&o);

  for (int di = 0; di < NALL; ++di)
    for (int layout = 0; layout < 3; ++layout)
      for (int dim = 0; dim < 3; ++dim) {
        int64_t ss[3] = {4, 5, 6}, is[3] = {3, 4, 5};
        is[dim] = 7;
        T self = tnew_l(kAll[di], 3, ss, layout), idx = tnew_l(TPURT_DTYPE_INT64, 3, is, layout == 1 ? 1 : 0);
        T out = tnew_l(kAll[di], 3, is, layout == 2 ? 2 : 0);
        tfill(&self);
        tfill_idx(&idx, 0, ss[dim]);
        tpurt_arg_t g[] = {A_T(&self), A_I(dim), A_T(&idx), A_B(false)};
        BOTH("gather", g, &out);
        tfree(&self); tfree(&idx); tfree(&out);
      }
}

static void test_scatter(void) {
  /* scatter_add with duplicates, known answer: out[idx[j]] += src[j] */
  int64_t s5[1] = {5}, s8[1] = {8};
  T self = tnew(TPURT_DTYPE_FLOAT32, 1, s5), idx = tnew(TPURT_DTYPE_INT64, 1, s8), src = tnew(TPURT_DTYPE_FLOAT32, 1, s8);
  T out = tnew(TPURT_DTYPE_FLOAT32, 1, s5);
  int64_t iv[8] = {0, 1, 0, 4, 4, 4, 4, 2};
  for (int k = 0; k < 8; ++k) { set_i(&idx, k, iv[k]); set_f(&src, k, k + 1); }
  for (int k = 0; k < 5; ++k) set_f(&self, k, 100);
  tpurt_arg_t a[] = {A_T(&self), A_I(0), A_T(&idx), A_T(&src)};
  CHECK_OK(run("scatter_add", false, a, 4, &out));
  CHECK(get_f(&out, 0) == 104 && get_f(&out, 1) == 102 && get_f(&out, 2) == 108 && get_f(&out, 3) == 100 &&
        get_f(&out, 4) == 100 + 4 + 5 + 6 + 7);
  /* scatter_reduce mean without self: (1+3)/2 at 0 */
  tpurt_arg_t m[] = {A_T(&self), A_I(0), A_T(&idx), A_T(&src), A_S("mean"), A_B(false)};
  CHECK_OK(run("scatter_reduce", false, m, 6, &out));
  CHECK(get_f(&out, 0) == 2 && get_f(&out, 3) == 100 && get_f(&out, 4) == (4.0 + 5 + 6 + 7) / 4);
  set_i(&idx, 3, 5);
  tpurt_status_t s = run("scatter_add", false, a, 4, &out); /* RuntimeError on CPU too */
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INVALID_ARGUMENT);
  CHECK(s && strstr(tpurt_status_message(s), "index 5 is out of bounds for dimension 0 with size 5") != NULL);
  tpurt_status_free(s);
  tfree(&self); tfree(&idx); tfree(&src); tfree(&out);

  const char* reds[] = {"sum", "prod", "mean", "amax", "amin"};
  for (int di = 0; di < NALL; ++di)
    for (int layout = 0; layout < 3; ++layout)
      for (int dim = 0; dim < 2; ++dim) {
        int64_t ss[2] = {5, 6}, is[2] = {4, 3};
        is[dim] = 9; /* more entries than the dim: duplicates */
        T sf = tnew_l(kAll[di], 2, ss, layout), ix = tnew(TPURT_DTYPE_INT64, 2, is), sr = tnew_l(kAll[di], 2, is, layout);
        T o = tnew_l(kAll[di], 2, ss, layout == 1 ? 0 : layout);
        tfill(&sf); tfill(&sr);
        tfill_idx(&ix, 0, ss[dim]);
        tpurt_arg_t sc[] = {A_T(&sf), A_I(dim), A_T(&ix), A_T(&sr)};
        BOTH("scatter", sc, &o);
        BOTH("scatter_add", sc, &o);
        tpurt_arg_t sv[] = {A_T(&sf), A_I(dim), A_T(&ix), A_D(1.5)};
        BOTH("scatter", sv, &o);
        tpurt_arg_t sm[] = {A_T(&sf), A_I(dim), A_T(&ix), A_T(&sr), A_S("multiply")};
        BOTH("scatter", sm, &o);
        for (int r = 0; r < 5; ++r)
          for (int inc = 0; inc < 2; ++inc) {
            if (kAll[di] == TPURT_DTYPE_BOOL && r == 2) continue; /* bool mean: not a PyTorch case */
            T oc = tnew(kAll[di], 2, ss);
            tpurt_arg_t rr[] = {A_T(&sf), A_I(dim), A_T(&ix), A_T(&sr), A_S(reds[r]), A_B(inc)};
            BOTH("scatter_reduce", rr, &oc);
            tfree(&oc);
          }
        tfree(&sf); tfree(&ix); tfree(&sr); tfree(&o);
      }
  /* large enough to split across threads: duplicates must stay deterministic */
  for (int dim = 0; dim < 2; ++dim) {
    int64_t ss[2] = {64, 512}, is[2] = {64, 512};
    is[dim] = 300;
    T sf = tnew(TPURT_DTYPE_FLOAT32, 2, ss), ix = tnew(TPURT_DTYPE_INT64, 2, is), sr = tnew(TPURT_DTYPE_FLOAT32, 2, is);
    T o = tnew(TPURT_DTYPE_FLOAT32, 2, ss);
    tfill(&sf); tfill(&sr);
    for (int64_t l = 0; l < numel(&sr); ++l) set_f(&sr, l, get_f(&sr, l) + 1.0 / 3.0); /* rounding-sensitive */
    tfill_idx(&ix, 0, 7); /* heavy duplication */
    tpurt_arg_t sc[] = {A_T(&sf), A_I(dim), A_T(&ix), A_T(&sr)};
    BOTH("scatter_add", sc, &o);
    tpurt_arg_t rr[] = {A_T(&sf), A_I(dim), A_T(&ix), A_T(&sr), A_S("mean"), A_B(false)};
    BOTH("scatter_reduce", rr, &o);
    tfree(&sf); tfree(&ix); tfree(&sr); tfree(&o);
  }
  {
    int64_t ss[2] = {50, 4096}, is[1] = {5000}, vs[2] = {5000, 4096};
    T sf = tnew(TPURT_DTYPE_FLOAT32, 2, ss), ix = tnew(TPURT_DTYPE_INT64, 1, is), v = tnew(TPURT_DTYPE_FLOAT32, 2, vs);
    T o = tnew(TPURT_DTYPE_FLOAT32, 2, ss);
    tfill(&sf); tfill(&v);
    tfill_idx(&ix, -50, 50);
    const tpurt_tensor_t* l[] = {&ix.t};
    tpurt_arg_t p[] = {A_T(&sf), A_TL(l, 1), A_T(&v), A_B(true), A_B(false)};
    BOTH("_index_put_impl", p, &o);
    tpurt_arg_t eb[] = {A_T(&v), A_T(&ix), A_I(50), A_I(-1), A_B(false)};
    for (int64_t k = 0; k < 5000; ++k) set_i(&ix, k, get_i(&ix, k) < 0 ? get_i(&ix, k) + 50 : get_i(&ix, k));
    BOTH("embedding_dense_backward", eb, &o);
    tfree(&sf); tfree(&ix); tfree(&v); tfree(&o);
  }
  /* empty index: out = self */
  int64_t s0[2] = {0, 3}, s23[2] = {2, 3};
  T e_self = tnew(TPURT_DTYPE_FLOAT32, 2, s23), e_idx = tnew(TPURT_DTYPE_INT64, 2, s0), e_src = tnew(TPURT_DTYPE_FLOAT32, 2, s0);
  T e_out = tnew(TPURT_DTYPE_FLOAT32, 2, s23);
  tfill(&e_self);
  tpurt_arg_t ea[] = {A_T(&e_self), A_I(0), A_T(&e_idx), A_T(&e_src)};
  CHECK_OK(run("scatter_add", false, ea, 4, &e_out));
  CHECK(tsame(&e_out, &e_self));
  tfree(&e_self); tfree(&e_idx); tfree(&e_src); tfree(&e_out);
}

/* in-place (out is self) with src aliasing self: the kernel must read src first */
static void test_scatter_alias(void) {
  int64_t s6[1] = {6}, s3[1] = {3};
  T x = tnew(TPURT_DTYPE_INT64, 1, s6), idx = tnew(TPURT_DTYPE_INT64, 1, s3);
  for (int k = 0; k < 6; ++k) set_i(&x, k, k);
  set_i(&idx, 0, 1); set_i(&idx, 1, 2); set_i(&idx, 2, 3);
  T src = x; /* view of x[0:3] */
  src.mem = NULL;
  src.t.sizes[0] = 3;
  tpurt_arg_t a[] = {A_T(&x), A_I(0), A_T(&idx), A_T(&src)};
  CHECK_OK(run("scatter", false, a, 4, &x));
  /* x[1..3] = old x[0..2] = 0,1,2 */
  CHECK(get_i(&x, 0) == 0 && get_i(&x, 1) == 0 && get_i(&x, 2) == 1 && get_i(&x, 3) == 2 && get_i(&x, 4) == 4);
  tfree(&x); tfree(&idx);
}

/* ---- index_select / index_add / copy / fill / reduce ---- */

static void test_index_dim(void) {
  const char* reds[] = {"prod", "mean", "amax", "amin"};
  for (int di = 0; di < NALL; ++di)
    for (int layout = 0; layout < 3; ++layout)
      for (int dim = 0; dim < 3; ++dim) {
        int64_t ss[3] = {4, 5, 3}, n = 7;
        T self = tnew_l(kAll[di], 3, ss, layout), idx = tnew(TPURT_DTYPE_INT64, 1, &n);
        tfill(&self);
        tfill_idx(&idx, 0, ss[dim]);
        int64_t os[3] = {4, 5, 3};
        os[dim] = n;
        T out = tnew_l(kAll[di], 3, os, layout == 2 ? 1 : 0);
        tpurt_arg_t a[] = {A_T(&self), A_I(dim), A_T(&idx)};
        BOTH("index_select", a, &out);
        /* source has out's shape */
        T src = tnew_l(kAll[di], 3, os, layout);
        tfill(&src);
        T o2 = tnew(kAll[di], 3, ss);
        tpurt_arg_t ad[] = {A_T(&self), A_I(dim), A_T(&idx), A_T(&src), A_I(kAll[di] == TPURT_DTYPE_BOOL ? 1 : 2)};
        BOTH("index_add", ad, &o2);
        tpurt_arg_t cp[] = {A_T(&self), A_I(dim), A_T(&idx), A_T(&src)};
        BOTH("index_copy", cp, &o2);
        tpurt_arg_t fl[] = {A_T(&self), A_I(dim), A_T(&idx), A_I(1)};
        BOTH("index_fill", fl, &o2);
        for (int r = 0; r < 4; ++r)
          for (int inc = 0; inc < 2; ++inc) {
            if (kAll[di] == TPURT_DTYPE_BOOL) continue;
            tpurt_arg_t rd[] = {A_T(&self), A_I(dim), A_T(&idx), A_T(&src), A_S(reds[r]), A_B(inc)};
            BOTH("index_reduce", rd, &o2);
          }
        tfree(&self); tfree(&idx); tfree(&out); tfree(&src); tfree(&o2);
      }
  /* known answer: index_add with duplicates */
  int64_t s4[1] = {4}, s3[1] = {3};
  T x = tnew(TPURT_DTYPE_INT32, 1, s4), i = tnew(TPURT_DTYPE_INT32, 1, s3), s = tnew(TPURT_DTYPE_INT32, 1, s3);
  T o = tnew(TPURT_DTYPE_INT32, 1, s4);
  set_i(&i, 0, 2); set_i(&i, 1, 2); set_i(&i, 2, 0);
  set_i(&s, 0, 5); set_i(&s, 1, 6); set_i(&s, 2, 7);
  tpurt_arg_t a[] = {A_T(&x), A_I(0), A_T(&i), A_T(&s), A_I(1)};
  CHECK_OK(run("index_add", false, a, 5, &o));
  CHECK(get_i(&o, 0) == 7 && get_i(&o, 1) == 0 && get_i(&o, 2) == 11 && get_i(&o, 3) == 0);
  set_i(&i, 1, -5);
  tpurt_status_t st = run("index_select", false, (tpurt_arg_t[]){A_T(&x), A_I(0), A_T(&i)}, 3, &s);
  CHECK(tpurt_status_code(st) == TPURT_STATUS_OUT_OF_RANGE);
  CHECK(st && strstr(tpurt_status_message(st), "index -5 is out of bounds for dimension 0 with size 4") != NULL);
  tpurt_status_free(st);
  tfree(&x); tfree(&i); tfree(&s); tfree(&o);
}

/* ---- advanced indexing ---- */

static void test_index_advanced(void) {
  int64_t ss[4] = {5, 6, 4, 3};
  for (int di = 0; di < NALL; di += 3)
    for (int layout = 0; layout < 3; ++layout) {
      T self = tnew_l(kAll[di], 4, ss, layout);
      tfill(&self);
      int64_t b2[2] = {2, 3}, b1[1] = {3};
      T i0 = tnew(TPURT_DTYPE_INT64, 2, b2), i1 = tnew(TPURT_DTYPE_INT32, 1, b1), i2 = tnew(TPURT_DTYPE_INT64, 2, b2);
      tfill_idx(&i0, -5, 5);
      tfill_idx(&i1, -6, 6);
      tfill_idx(&i2, 0, 4);
      /* x[i0] -> [2,3,6,4,3] */
      {
        const tpurt_tensor_t* l[] = {&i0.t};
        int64_t os[5] = {2, 3, 6, 4, 3};
        T o = tnew(kAll[di], 5, os);
        tpurt_arg_t a[] = {A_T(&self), A_TL(l, 1)};
        BOTH("index", a, &o);
        tfree(&o);
      }
      /* x[:, i1, i2] adjacent, broadcast [2,3] -> [5,2,3,3] */
      {
        const tpurt_tensor_t* l[] = {NULL, &i1.t, &i2.t};
        int64_t os[4] = {5, 2, 3, 3};
        T o = tnew_l(kAll[di], 4, os, layout == 1 ? 1 : 0);
        tpurt_arg_t a[] = {A_T(&self), A_TL(l, 3)};
        BOTH("index", a, &o);
        /* index_put back, accumulate and not, values broadcast [3] */
        int64_t vs[1] = {3};
        T v = tnew(kAll[di], 1, vs), po = tnew(kAll[di], 4, ss);
        tfill(&v);
        for (int acc = 0; acc < 2; ++acc) {
          tpurt_arg_t p[] = {A_T(&self), A_TL(l, 3), A_T(&v), A_B(acc), A_B(false)};
          BOTH("_index_put_impl", p, &po);
          tpurt_arg_t p2[] = {A_T(&self), A_TL(l, 3), A_T(&o), A_B(acc), A_B(false)};
          BOTH("_index_put_impl", p2, &po);
        }
        tfree(&o); tfree(&v); tfree(&po);
      }
      /* x[i0, :, i2] non-adjacent -> [2,3,6,3] */
      {
        const tpurt_tensor_t* l[] = {&i0.t, NULL, &i2.t};
        int64_t os[4] = {2, 3, 6, 3};
        T o = tnew(kAll[di], 4, os);
        tpurt_arg_t a[] = {A_T(&self), A_TL(l, 3)};
        BOTH("index", a, &o);
        T po = tnew(kAll[di], 4, ss);
        int64_t vs[2] = {6, 1};
        T v = tnew_l(kAll[di], 2, vs, layout);
        tfill(&v);
        for (int acc = 0; acc < 2; ++acc) {
          tpurt_arg_t p[] = {A_T(&self), A_TL(l, 3), A_T(&v), A_B(acc), A_B(false)};
          BOTH("_index_put_impl", p, &po);
        }
        tfree(&o); tfree(&po); tfree(&v);
      }
      /* bool mask over dims 1,2 */
      {
        int64_t ms[2] = {6, 4};
        T m = tnew(TPURT_DTYPE_BOOL, 2, ms);
        tfill(&m);
        int64_t cnt = 0;
        for (int64_t l = 0; l < 24; ++l) cnt += get_i(&m, l) != 0;
        const tpurt_tensor_t* l[] = {NULL, &m.t};
        int64_t os[3] = {5, cnt, 3};
        T o = tnew(kAll[di], 3, os);
        tpurt_arg_t a[] = {A_T(&self), A_TL(l, 2)};
        BOTH("index", a, &o);
        T po = tnew(kAll[di], 4, ss);
        tpurt_arg_t p[] = {A_T(&self), A_TL(l, 2), A_T(&o), A_B(true), A_B(false)};
        BOTH("_index_put_impl", p, &po);
        tfree(&m); tfree(&o); tfree(&po);
      }
      tfree(&self); tfree(&i0); tfree(&i1); tfree(&i2);
    }
  /* known answers: x[[0,2,2]] += [1,2,3] with duplicates, then x[mask] */
  int64_t s4[1] = {4}, s3[1] = {3};
  T x = tnew(TPURT_DTYPE_FLOAT32, 1, s4), i = tnew(TPURT_DTYPE_INT64, 1, s3), v = tnew(TPURT_DTYPE_FLOAT32, 1, s3);
  set_i(&i, 0, 0); set_i(&i, 1, 2); set_i(&i, 2, -2);
  set_f(&v, 0, 1); set_f(&v, 1, 2); set_f(&v, 2, 3);
  const tpurt_tensor_t* l[] = {&i.t};
  tpurt_arg_t p[] = {A_T(&x), A_TL(l, 1), A_T(&v), A_B(true), A_B(false)};
  CHECK_OK(run("_index_put_impl", false, p, 5, &x)); /* in place: out is self */
  CHECK(get_f(&x, 0) == 1 && get_f(&x, 1) == 0 && get_f(&x, 2) == 5 && get_f(&x, 3) == 0);
  T m = tnew(TPURT_DTYPE_BOOL, 1, s4), o = tnew(TPURT_DTYPE_FLOAT32, 1, (int64_t[]){2});
  set_i(&m, 0, 1); set_i(&m, 2, 1);
  const tpurt_tensor_t* ml[] = {&m.t};
  CHECK_OK(run("index", false, (tpurt_arg_t[]){A_T(&x), A_TL(ml, 1)}, 2, &o));
  CHECK(get_f(&o, 0) == 1 && get_f(&o, 1) == 5);
  set_i(&i, 1, 4);
  tpurt_status_t s = run("index", false, (tpurt_arg_t[]){A_T(&x), A_TL(l, 1)}, 2, &v);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_OUT_OF_RANGE);
  CHECK(s && strstr(tpurt_status_message(s), "index 4 is out of bounds for dimension 0 with size 4") != NULL);
  tpurt_status_free(s);
  s = run("_index_put_impl", false, p, 5, &x);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_OUT_OF_RANGE);
  tpurt_status_free(s);
  CHECK(get_f(&x, 0) == 1 && get_f(&x, 2) == 5); /* nothing written on error */
  tfree(&x); tfree(&i); tfree(&v); tfree(&m); tfree(&o);
}

/* ---- take / put / embedding backward ---- */

static void test_take_put_embedding(void) {
  for (int di = 0; di < NALL; ++di) {
    int64_t ss[2] = {4, 5}, is[2] = {3, 7};
    T self = tnew_l(kAll[di], 2, ss, 1), idx = tnew(TPURT_DTYPE_INT64, 2, is), out = tnew(kAll[di], 2, is);
    tfill(&self);
    tfill_idx(&idx, -20, 20);
    tpurt_arg_t a[] = {A_T(&self), A_T(&idx)};
    BOTH("take", a, &out);
    T po = tnew(kAll[di], 2, ss);
    for (int acc = 0; acc < 2; ++acc) {
      tpurt_arg_t p[] = {A_T(&self), A_T(&idx), A_T(&out), A_B(acc)};
      BOTH("put", p, &po);
    }
    tfree(&self); tfree(&idx); tfree(&out); tfree(&po);
  }
  const tpurt_dtype_t fdt[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT64};
  for (int k = 0; k < 3; ++k)
    for (int scale = 0; scale < 2; ++scale) {
      int64_t is[2] = {3, 5}, gs[3] = {3, 5, 8}, ws[2] = {6, 8};
      T idx = tnew(TPURT_DTYPE_INT64, 2, is), g = tnew(fdt[k], 3, gs), w = tnew(fdt[k], 2, ws);
      tfill_idx(&idx, 0, 6);
      tfill(&g);
      tpurt_arg_t a[] = {A_T(&g), A_T(&idx), A_I(6), A_I(2), A_B(scale)};
      BOTH("embedding_dense_backward", a, &w);
      /* padding row is zero */
      bool zero = true;
      for (int c = 0; c < 8; ++c) zero = zero && get_f(&w, 2 * 8 + c) == 0;
      CHECK(zero);
      tfree(&idx); tfree(&g); tfree(&w);
    }
  /* known answer: rows 1 and 1 and 0 */
  int64_t is[1] = {3}, gs[2] = {3, 2}, ws[2] = {3, 2};
  T idx = tnew(TPURT_DTYPE_INT64, 1, is), g = tnew(TPURT_DTYPE_FLOAT32, 2, gs), w = tnew(TPURT_DTYPE_FLOAT32, 2, ws);
  set_i(&idx, 0, 1); set_i(&idx, 1, 1); set_i(&idx, 2, 0);
  for (int k = 0; k < 6; ++k) set_f(&g, k, k + 1);
  tpurt_arg_t a[] = {A_T(&g), A_T(&idx), A_I(3), A_I(-1), A_B(false)};
  CHECK_OK(run("embedding_dense_backward", false, a, 5, &w));
  CHECK(get_f(&w, 0) == 5 && get_f(&w, 1) == 6 && get_f(&w, 2) == 4 && get_f(&w, 3) == 6 && get_f(&w, 4) == 0);
  tfree(&idx); tfree(&g); tfree(&w);
}

/* ---- nonzero / masked ---- */

static void test_nonzero_masked(void) {
  int64_t s[2] = {3, 4};
  T x = tnew_l(TPURT_DTYPE_FLOAT32, 2, s, 1);
  set_f(&x, 1, 2.0); set_f(&x, 4, -0.0); set_f(&x, 6, NAN); set_f(&x, 11, 1.0);
  int64_t os[2] = {3, 2};
  T o = tnew(TPURT_DTYPE_INT64, 2, os);
  tpurt_arg_t a[] = {A_T(&x)};
  CHECK_OK(run("nonzero", false, a, 1, &o));
  CHECK(get_i(&o, 0) == 0 && get_i(&o, 1) == 1 && get_i(&o, 2) == 1 && get_i(&o, 3) == 2 && get_i(&o, 4) == 2 &&
        get_i(&o, 5) == 3);
  T bad = tnew(TPURT_DTYPE_INT64, 2, (int64_t[]){2, 2});
  CHECK_STATUS(run("nonzero", false, a, 1, &bad), FAILED_PRECONDITION);
  /* nonzero_static: pad with fill */
  T st = tnew(TPURT_DTYPE_INT64, 2, (int64_t[]){5, 2});
  CHECK_OK(run("nonzero_static", false, (tpurt_arg_t[]){A_T(&x), A_I(5), A_I(-7)}, 3, &st));
  CHECK(get_i(&st, 4) == 2 && get_i(&st, 5) == 3 && get_i(&st, 6) == -7 && get_i(&st, 9) == -7);
  tfree(&x); tfree(&o); tfree(&bad); tfree(&st);
  /* big, to cross chunk boundaries */
  int64_t big[1] = {200003};
  T y = tnew(TPURT_DTYPE_INT8, 1, big);
  int64_t cnt = 0;
  for (int64_t l = 0; l < big[0]; ++l) { int64_t v = rnd(0, 3) == 0; set_i(&y, l, v); cnt += v; }
  T yo = tnew(TPURT_DTYPE_INT64, 2, (int64_t[]){cnt, 1});
  both("nonzero", (tpurt_arg_t[]){A_T(&y)}, 1, &yo, __LINE__);
  bool inc = true;
  for (int64_t r = 1; r < cnt; ++r) inc = inc && get_i(&yo, r) > get_i(&yo, r - 1);
  CHECK(inc);
  tfree(&y); tfree(&yo);
  /* masked_select with broadcast mask [4] over self [3,4]; masked_scatter */
  for (int di = 0; di < NALL; ++di) {
    T self = tnew_l(kAll[di], 2, s, 2), m = tnew(TPURT_DTYPE_BOOL, 1, (int64_t[]){4});
    tfill(&self);
    set_i(&m, 0, 1); set_i(&m, 2, 1); set_i(&m, 3, 1);
    T out = tnew(kAll[di], 1, (int64_t[]){9});
    tpurt_arg_t ms[] = {A_T(&self), A_T(&m)};
    BOTH("masked_select", ms, &out);
    CHECK(memcmp(at(&out, 1), at(&self, 2), tpurt_dtype_size(kAll[di])) == 0);
    T src = tnew(kAll[di], 1, (int64_t[]){12}), so = tnew(kAll[di], 2, s);
    tfill(&src);
    tpurt_arg_t sc[] = {A_T(&self), A_T(&m), A_T(&src)};
    BOTH("masked_scatter", sc, &so);
    CHECK(memcmp(at(&so, 4), at(&src, 3), tpurt_dtype_size(kAll[di])) == 0);
    CHECK(memcmp(at(&so, 5), at(&self, 5), tpurt_dtype_size(kAll[di])) == 0);
    tfree(&self); tfree(&m); tfree(&out); tfree(&src); tfree(&so);
  }
}

/* ---- shapes: cat, flip, roll, tril/triu, unfold_backward ---- */

static void test_shape(void) {
  /* cat with promotion (int32 + float32 -> float64 out) and a legacy empty tensor */
  int64_t a_s[2] = {2, 3}, b_s[2] = {2, 2}, e_s[1] = {0}, o_s[2] = {2, 5};
  T a = tnew_l(TPURT_DTYPE_INT32, 2, a_s, 1), b = tnew(TPURT_DTYPE_FLOAT32, 2, b_s), e = tnew(TPURT_DTYPE_FLOAT32, 1, e_s);
  T o = tnew(TPURT_DTYPE_FLOAT64, 2, o_s);
  tfill(&a); tfill(&b);
  const tpurt_tensor_t* l[] = {&a.t, &e.t, &b.t};
  tpurt_arg_t ca[] = {A_TL(l, 3), A_I(-1)};
  BOTH("cat", ca, &o);
  CHECK(get_f(&o, 4) == get_f(&b, 1) && get_f(&o, 5) == get_f(&a, 3));
  T bad = tnew(TPURT_DTYPE_FLOAT64, 2, (int64_t[]){2, 6});
  CHECK_STATUS(run("cat", false, ca, 2, &bad), INVALID_ARGUMENT);
  tfree(&a); tfree(&b); tfree(&e); tfree(&o); tfree(&bad);
  for (int di = 0; di < NALL; ++di)
    for (int layout = 0; layout < 3; ++layout) {
      int64_t s[3] = {3, 4, 5};
      T x = tnew_l(kAll[di], 3, s, layout), y = tnew(kAll[di], 3, s);
      tfill(&x);
      int64_t d02[2] = {0, 2}, d1[1] = {-2};
      tpurt_arg_t f[] = {A_T(&x), A_IL(d02, 2)};
      BOTH("flip", f, &y);
      tpurt_arg_t f1[] = {A_T(&x), A_IL(d1, 1)};
      BOTH("flip", f1, &y);
      int64_t sh[2] = {2, -7}, dims[2] = {1, 2}, sh1[1] = {13};
      tpurt_arg_t r[] = {A_T(&x), A_IL(sh, 2), A_IL(dims, 2)};
      BOTH("roll", r, &y);
      tpurt_arg_t r1[] = {A_T(&x), A_IL(sh1, 1), A_IL(dims, 0)};
      BOTH("roll", r1, &y);
      for (int dg = -2; dg <= 3; ++dg) {
        tpurt_arg_t t[] = {A_T(&x), A_I(dg)};
        BOTH("tril", t, &y);
        BOTH("triu", t, &y);
      }
      tfree(&x); tfree(&y);
    }
  /* roll 1-d known answer */
  T x = tnew(TPURT_DTYPE_INT64, 1, (int64_t[]){5}), y = tnew(TPURT_DTYPE_INT64, 1, (int64_t[]){5});
  for (int k = 0; k < 5; ++k) set_i(&x, k, k);
  int64_t sh[1] = {2}, dm[1] = {0};
  CHECK_OK(run("roll", false, (tpurt_arg_t[]){A_T(&x), A_IL(sh, 1), A_IL(dm, 1)}, 3, &y));
  CHECK(get_i(&y, 0) == 3 && get_i(&y, 2) == 0 && get_i(&y, 4) == 2);
  tfree(&x); tfree(&y);
  /* unfold_backward: input [7], size 3, step 2 -> windows [3,3] */
  T g = tnew(TPURT_DTYPE_FLOAT32, 2, (int64_t[]){3, 3}), w = tnew(TPURT_DTYPE_FLOAT32, 1, (int64_t[]){7});
  for (int k = 0; k < 9; ++k) set_f(&g, k, 1);
  int64_t isz[1] = {7};
  tpurt_arg_t ub[] = {A_T(&g), A_IL(isz, 1), A_I(0), A_I(3), A_I(2)};
  BOTH("unfold_backward", ub, &w);
  CHECK(get_f(&w, 0) == 1 && get_f(&w, 2) == 2 && get_f(&w, 4) == 2 && get_f(&w, 6) == 1);
  tfree(&g); tfree(&w);
}

/* ---- factories and searches ---- */

static void test_factory_search(void) {
  T o = tnew(TPURT_DTYPE_FLOAT32, 1, (int64_t[]){4});
  CHECK_OK(run("arange", false, (tpurt_arg_t[]){A_D(1.0), A_D(3.0), A_D(0.5)}, 3, &o));
  CHECK(get_f(&o, 0) == 1.0 && get_f(&o, 3) == 2.5);
  CHECK_OK(run("linspace", false, (tpurt_arg_t[]){A_I(0), A_I(1), A_I(4)}, 3, &o));
  CHECK(get_f(&o, 0) == 0 && get_f(&o, 3) == 1 && fabs(get_f(&o, 1) - 1.0 / 3) < 1e-7);
  CHECK_OK(run("logspace", false, (tpurt_arg_t[]){A_I(0), A_I(3), A_I(4), A_D(10.0)}, 4, &o));
  CHECK(get_f(&o, 0) == 1 && get_f(&o, 3) == 1000);
  tfree(&o);
  T e = tnew(TPURT_DTYPE_INT64, 2, (int64_t[]){2, 3});
  CHECK_OK(run("eye", false, (tpurt_arg_t[]){A_I(2), A_I(3)}, 2, &e));
  CHECK(get_i(&e, 0) == 1 && get_i(&e, 1) == 0 && get_i(&e, 4) == 1 && get_i(&e, 5) == 0);
  tfree(&e);
  T ti = tnew(TPURT_DTYPE_INT64, 2, (int64_t[]){2, 5});
  /* 3x3, offset 0 has 6 entries: a 5-column out is an error */
  tpurt_status_t s = run("tril_indices", false, (tpurt_arg_t[]){A_I(3), A_I(3), A_I(0)}, 3, &ti);
  CHECK(s != NULL);
  tpurt_status_free(s);
  tfree(&ti);
  ti = tnew(TPURT_DTYPE_INT64, 2, (int64_t[]){2, 6});
  CHECK_OK(run("tril_indices", false, (tpurt_arg_t[]){A_I(3), A_I(3), A_I(0)}, 3, &ti));
  CHECK(get_i(&ti, 3) == 2 && get_i(&ti, 6 + 3) == 0 && get_i(&ti, 6 + 5) == 2);
  T tu = tnew(TPURT_DTYPE_INT64, 2, (int64_t[]){2, 3});
  CHECK_OK(run("triu_indices", false, (tpurt_arg_t[]){A_I(3), A_I(3), A_I(1)}, 3, &tu));
  CHECK(get_i(&tu, 2) == 1 && get_i(&tu, 3 + 2) == 2);
  tfree(&tu);
  tfree(&ti);
  /* searchsorted / bucketize */
  T bnd = tnew(TPURT_DTYPE_FLOAT32, 1, (int64_t[]){4}), v = tnew(TPURT_DTYPE_FLOAT32, 1, (int64_t[]){5});
  T r = tnew(TPURT_DTYPE_INT64, 1, (int64_t[]){5});
  double bv[4] = {1, 3, 5, 7}, vv[5] = {0, 3, 4, 7, NAN};
  for (int k = 0; k < 4; ++k) set_f(&bnd, k, bv[k]);
  for (int k = 0; k < 5; ++k) set_f(&v, k, vv[k]);
  CHECK_OK(run("bucketize", false, (tpurt_arg_t[]){A_T(&v), A_T(&bnd), A_B(false), A_B(false)}, 4, &r));
  CHECK(get_i(&r, 0) == 0 && get_i(&r, 1) == 1 && get_i(&r, 2) == 2 && get_i(&r, 3) == 3 && get_i(&r, 4) == 4);
  CHECK_OK(run("searchsorted", false,
               (tpurt_arg_t[]){A_T(&bnd), A_T(&v), A_B(false), A_B(false), A_S("right"), A_N()}, 6, &r));
  CHECK(get_i(&r, 1) == 2 && get_i(&r, 3) == 4);
  tfree(&bnd); tfree(&v); tfree(&r);
  /* histc */
  T h = tnew(TPURT_DTYPE_FLOAT32, 1, (int64_t[]){6}), hb = tnew(TPURT_DTYPE_FLOAT32, 1, (int64_t[]){4});
  double hv[6] = {1, 2, 1, 4, 0, 9};
  for (int k = 0; k < 6; ++k) set_f(&h, k, hv[k]);
  CHECK_OK(run("histc", false, (tpurt_arg_t[]){A_T(&h), A_I(4), A_I(0), A_I(4)}, 4, &hb));
  CHECK(get_f(&hb, 0) == 1 && get_f(&hb, 1) == 2 && get_f(&hb, 2) == 1 && get_f(&hb, 3) == 1);
  tfree(&h); tfree(&hb);
  T rep = tnew(TPURT_DTYPE_INT64, 1, (int64_t[]){3}), ro = tnew(TPURT_DTYPE_INT64, 1, (int64_t[]){4});
  set_i(&rep, 0, 2); set_i(&rep, 1, 0); set_i(&rep, 2, 2);
  CHECK_OK(run("repeat_interleave", false, (tpurt_arg_t[]){A_T(&rep), A_N()}, 2, &ro));
  CHECK(get_i(&ro, 0) == 0 && get_i(&ro, 1) == 0 && get_i(&ro, 2) == 2 && get_i(&ro, 3) == 2);
  tfree(&rep); tfree(&ro);
}

/* complex::cat moves complex elements through the real cat's views; a list
 * with a real tensor goes to the real cat, which converts each element (a
 * zero imaginary part), as CPU's cat promotes; the legacy empty tensor is skipped. */
static void test_complex_cat(void) {
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, out[8] = {0}, r[2] = {9, 9}, e[1];
  int64_t two = 2, four = 4, zero = 0;
  tpurt_tensor_t ta = test_tensor_dense(TPURT_DTYPE_COMPLEX64, a, 1, &two);
  tpurt_tensor_t tb = test_tensor_dense(TPURT_DTYPE_COMPLEX64, b, 1, &two);
  tpurt_tensor_t to = test_tensor_dense(TPURT_DTYPE_COMPLEX64, out, 1, &four);
  tpurt_tensor_t tr = test_tensor_dense(TPURT_DTYPE_FLOAT32, r, 1, &two);
  tpurt_tensor_t te = test_tensor_dense(TPURT_DTYPE_FLOAT32, e, 1, &zero);
  const tpurt_tensor_t* both_cx[2] = {&ta, &tb};
  tpurt_arg_t args[2] = {A_TL(both_cx, 2), A_I(0)};
  CHECK_OK(test_op_run("complex::cat", false, args, 2, &to, 1));
  for (int i = 0; i < 4; ++i) CHECK(out[i] == a[i] && out[4 + i] == b[i]);
  const tpurt_tensor_t* mixed[2] = {&tr, &tb};
  args[0] = A_TL(mixed, 2);
  CHECK_OK(test_op_run("complex::cat", false, args, 2, &to, 1));
  for (int i = 0; i < 2; ++i) CHECK(out[2 * i] == r[i] && out[2 * i + 1] == 0);
  for (int i = 0; i < 4; ++i) CHECK(out[4 + i] == b[i]);
  const tpurt_tensor_t* legacy[2] = {&te, &tb};
  tpurt_tensor_t to2 = test_tensor_dense(TPURT_DTYPE_COMPLEX64, out, 1, &two);
  args[0] = A_TL(legacy, 2);
  CHECK_OK(test_op_run("complex::cat", false, args, 2, &to2, 1));
  for (int i = 0; i < 4; ++i) CHECK(out[i] == b[i]);
}

int main(void) {
  test_gather();
  test_scatter();
  test_scatter_alias();
  test_index_dim();
  test_index_advanced();
  test_take_put_embedding();
  test_nonzero_masked();
  test_shape();
  test_factory_search();
  test_complex_cat();
  if (g_cmp_fail) fprintf(stderr, "%d optimized/reference comparisons failed\n", g_cmp_fail);
  return test_finish("test_index");
}
