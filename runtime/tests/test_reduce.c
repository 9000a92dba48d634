/* Reduction kernels: optimized vs reference on random data over dtypes, dims,
 * keepdim and layouts (contiguous, transposed, strided), known answers (NaN
 * propagation, first-index ties, empty reductions), the thread-split and
 * vertical strategies, scans and sorts; prints fp32 full-sum throughput. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "ops/reduce/reduce_ops.h"
#include "test_util.h"

/* ---- tensors ---- */

enum { LAYOUT_CONTIG, LAYOUT_TRANSPOSED, LAYOUT_STRIDED, LAYOUT_COUNT };

typedef struct tt_t {
  tpurt_tensor_t t;
  void* mem;
} tt_t;


/* A tensor of the given logical sizes; transposed swaps the storage order of
 * the last two dims; strided takes every other element of the last dim. */
static tt_t tt_make(tpurt_dtype_t dt, int ndim, const int64_t* sizes, int layout) {
  tt_t r;
  memset(&r, 0, sizeof(r));
  r.t.dtype = dt;
  r.t.ndim = ndim;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) { r.t.sizes[d] = sizes[d]; n *= sizes[d]; }
  int64_t step = layout == LAYOUT_STRIDED ? 2 : 1;
  int64_t st = step;
  for (int d = ndim - 1; d >= 0; --d) { r.t.strides[d] = st; st *= sizes[d]; }
  if (layout == LAYOUT_TRANSPOSED && ndim >= 2) {
    int a = ndim - 2, b = ndim - 1;
    /* storage order: ..., b, a */
    int64_t s = 1;
    r.t.strides[a] = s; s *= sizes[a];
    r.t.strides[b] = s; s *= sizes[b];
    for (int d = ndim - 3; d >= 0; --d) { r.t.strides[d] = s; s *= sizes[d]; }
  }
  size_t bytes = (size_t)(n * step + 1) * tpurt_dtype_size(dt);
  r.mem = calloc(1, bytes + 64);
  r.t.data = r.mem;
  return r;
}

static void tt_fill(tt_t* x, double lo, double hi) {
  int64_t n = tpurt_tensor_numel(&x->t);
  for (int64_t i = 0; i < n; ++i) {
    void* p = tpurt_tensor_at(&x->t, tpurt_tensor_offset_of(&x->t, i, -1));
    if (x->t.dtype == TPURT_DTYPE_BOOL) tpurt_dtype_store_i64(x->t.dtype, p, test_rand_u64() & 1);
    else if (!tpurt_dtype_is_floating(x->t.dtype)) tpurt_dtype_store_i64(x->t.dtype, p, (int64_t)floor(lo + test_rand_unit() * (hi - lo)));
    else tpurt_dtype_store_f64(x->t.dtype, p, lo + test_rand_unit() * (hi - lo));
  }
}

static void tt_set(tt_t* x, int64_t i, double v) {
  tpurt_dtype_store_f64(x->t.dtype, tpurt_tensor_at(&x->t, tpurt_tensor_offset_of(&x->t, i, -1)), v);
}
static double tt_get(const tt_t* x, int64_t i) {
  return tpurt_dtype_load_f64(x->t.dtype, tpurt_tensor_at(&x->t, tpurt_tensor_offset_of(&x->t, i, -1)));
}


/* Output shape of reducing `mask` dims. */
static tt_t tt_reduced(tpurt_dtype_t dt, const tpurt_tensor_t* in, const bool* mask, bool keepdim) {
  int64_t s[TPURT_MAX_DIMS];
  int nd = 0;
  for (int d = 0; d < in->ndim; ++d) {
    if (mask[d]) { if (keepdim) s[nd++] = 1; }
    else s[nd++] = in->sizes[d];
  }
  return tt_make(dt, nd, s, LAYOUT_CONTIG);
}

static double tol_of(tpurt_dtype_t dt) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT16: return 2e-3;
    case TPURT_DTYPE_BFLOAT16: return 1.6e-2;
    case TPURT_DTYPE_FLOAT32: return 2e-5;
    case TPURT_DTYPE_FLOAT64: return 1e-10;
    default: return 0;
  }
}

/* Elementwise comparison; NaN matches NaN. Returns number of mismatches. */
static int tt_compare(const tt_t* a, const tt_t* b, double tol, const char* what) {
  int64_t n = tpurt_tensor_numel(&a->t);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = tt_get(a, i), y = tt_get(b, i);
    if (isnan(x) && isnan(y)) continue;
    if (x == y) continue;
    if (fabs(x - y) <= tol * (1 + fabs(y))) continue;
    if (bad++ < 3) fprintf(stderr, "  %s: [%lld] %.9g vs ref %.9g\n", what, (long long)i, x, y);
  }
  return bad;
}

static void tt_free(tt_t* x) { free(x->mem); x->mem = NULL; }

/* ---- calls ---- */

static tpurt_arg_t A_T(const tpurt_tensor_t* t) { tpurt_arg_t a = {.kind = TPURT_ARG_TENSOR}; a.v.tensor = t; return a; }
static tpurt_arg_t A_I(int64_t i) { tpurt_arg_t a = {.kind = TPURT_ARG_INT}; a.v.i = i; return a; }
static tpurt_arg_t A_D(double d) { tpurt_arg_t a = {.kind = TPURT_ARG_DOUBLE}; a.v.d = d; return a; }
static tpurt_arg_t A_B(bool b) { tpurt_arg_t a = {.kind = TPURT_ARG_BOOL}; a.v.b = b; return a; }
static tpurt_arg_t A_N(void) { tpurt_arg_t a = {.kind = TPURT_ARG_NONE}; return a; }
static tpurt_arg_t A_L(const int64_t* v, int n) { tpurt_arg_t a = {.kind = TPURT_ARG_INT_LIST, .count = n}; a.v.ints = v; return a; }

static tpurt_status_t call(tpurt_kernel_fn_t fn, const char* name, const tpurt_arg_t* args, int nargs,
                           tpurt_tensor_t* outs, int nouts) {
  tpurt_op_call_t c = {.name = name, .overload = "", .num_args = nargs, .args = args, .num_outputs = nouts, .outputs = outs};
  return tpurt_kernel_run(fn, &c);
}

/* Runs fast and reference on identical fresh outputs and compares them. */
static void check_pair(const char* op, const tpurt_arg_t* args, int nargs, tt_t* o1, tt_t* o2, int nouts, double tol) {
  const tpurt_op_def_t* d = tpurt_op_lookup(op);
  CHECK(d != NULL);
  if (!d) return;
  tpurt_tensor_t a[3], b[3];
  for (int i = 0; i < nouts; ++i) { a[i] = o1[i].t; b[i] = o2[i].t; }
  tpurt_status_t s1 = call(d->fn, op, args, nargs, a, nouts);
  tpurt_status_t s2 = call(d->reference, op, args, nargs, b, nouts);
  CHECK(s1 == NULL && s2 == NULL);
  if (s1) fprintf(stderr, "  %s: %s\n", op, tpurt_status_message(s1));
  if (s2) fprintf(stderr, "  %s ref: %s\n", op, tpurt_status_message(s2));
  tpurt_status_free(s1);
  tpurt_status_free(s2);
  for (int i = 0; i < nouts; ++i) {
    int bad = tt_compare(&o1[i], &o2[i], tol, op);
    if (bad) fprintf(stderr, "  %s output %d: %d mismatches\n", op, i, bad);
    CHECK(bad == 0);
  }
}

static const tpurt_dtype_t kAll[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT64,
                                     TPURT_DTYPE_INT64,   TPURT_DTYPE_INT32,    TPURT_DTYPE_INT16,   TPURT_DTYPE_INT8,
                                     TPURT_DTYPE_UINT8,   TPURT_DTYPE_BOOL};

static tpurt_dtype_t sum_dtype(tpurt_dtype_t d) {
  return tpurt_dtype_is_floating(d) ? d : TPURT_DTYPE_INT64;
}

/* ---- randomized engine tests ---- */

static void test_random_reductions(void) {
  const int64_t shape[3] = {5, 7, 9};
  const int64_t dimsets[][3] = {{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}};
  const int dimcounts[] = {1, 1, 1, 2, 2, 3};
  for (size_t di = 0; di < sizeof(kAll) / sizeof(kAll[0]); ++di) {
    tpurt_dtype_t dt = kAll[di];
    bool fl = tpurt_dtype_is_floating(dt);
    for (int layout = 0; layout < LAYOUT_COUNT; ++layout) {
      tt_t x = tt_make(dt, 3, shape, layout);
      tt_fill(&x, -3, 3);
      for (int ds = 0; ds < 6; ++ds) {
        bool mask[TPURT_MAX_DIMS] = {0};
        for (int k = 0; k < dimcounts[ds]; ++k) mask[dimsets[ds][k]] = true;
        for (int keep = 0; keep < 2; ++keep) {
          tpurt_arg_t args[5] = {A_T(&x.t), A_L(dimsets[ds], dimcounts[ds]), A_B(keep), A_N()};
          const char* ops[] = {"sum", "nansum", "prod", "amax", "amin", "any", "all", "mean", "logsumexp"};
          for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); ++o) {
            bool needs_float = o >= 7;
            if (needs_float && !fl) continue;
            tpurt_dtype_t odt = (o <= 2) ? sum_dtype(dt) : (o <= 4 ? dt : (o <= 6 ? TPURT_DTYPE_BOOL : dt));
            tt_t o1 = tt_reduced(odt, &x.t, mask, keep), o2 = tt_reduced(odt, &x.t, mask, keep);
            int nargs = (o >= 3 && o <= 4) || o == 8 ? 3 : 4;
            check_pair(ops[o], args, nargs, &o1, &o2, 1, tol_of(odt) * (o == 2 ? 10 : 1));
            tt_free(&o1); tt_free(&o2);
          }
          if (fl) {
            /* var/std with correction, norms */
            tpurt_arg_t vargs[4] = {A_T(&x.t), A_L(dimsets[ds], dimcounts[ds]), A_I(ds % 2), A_B(keep)};
            const char* vops[] = {"var", "std"};
            for (int o = 0; o < 2; ++o) {
              tt_t o1 = tt_reduced(dt, &x.t, mask, keep), o2 = tt_reduced(dt, &x.t, mask, keep);
              check_pair(vops[o], vargs, 4, &o1, &o2, 1, tol_of(dt));
              tt_free(&o1); tt_free(&o2);
            }
            const double ords[] = {0, 1, 2, 3, INFINITY, -INFINITY};
            for (int oi = 0; oi < 6; ++oi) {
              tpurt_arg_t nargs[5] = {A_T(&x.t), A_D(ords[oi]), A_L(dimsets[ds], dimcounts[ds]), A_B(keep), A_N()};
              tt_t o1 = tt_reduced(dt, &x.t, mask, keep), o2 = tt_reduced(dt, &x.t, mask, keep);
              check_pair("linalg_vector_norm", nargs, 5, &o1, &o2, 1, tol_of(dt));
              tt_free(&o1); tt_free(&o2);
            }
          }
          if (dimcounts[ds] == 1) {
            /* max.dim / min.dim / argmax with indices */
            tpurt_arg_t margs[3] = {A_T(&x.t), A_I(dimsets[ds][0] - 3), A_B(keep)};
            tt_t o1[2] = {tt_reduced(dt, &x.t, mask, keep), tt_reduced(TPURT_DTYPE_INT64, &x.t, mask, keep)};
            tt_t o2[2] = {tt_reduced(dt, &x.t, mask, keep), tt_reduced(TPURT_DTYPE_INT64, &x.t, mask, keep)};
            check_pair("max", margs, 3, o1, o2, 2, 0);
            check_pair("min", margs, 3, o1, o2, 2, 0);
            check_pair("argmax", margs, 3, &o1[1], &o2[1], 1, 0);
            check_pair("argmin", margs, 3, &o1[1], &o2[1], 1, 0);
            for (int i = 0; i < 2; ++i) { tt_free(&o1[i]); tt_free(&o2[i]); }
            /* scans along this dim */
            tpurt_arg_t sargs[3] = {A_T(&x.t), A_I(dimsets[ds][0]), A_N()};
            const char* scans[] = {"cumsum", "cumprod", "logcumsumexp"};
            for (int o = 0; o < 3 && keep == 0; ++o) {
              if (o == 2 && !fl) continue;
              tpurt_dtype_t odt = o < 2 ? sum_dtype(dt) : dt;
              tt_t s1 = tt_make(odt, 3, shape, LAYOUT_CONTIG), s2 = tt_make(odt, 3, shape, LAYOUT_CONTIG);
              check_pair(scans[o], sargs, o == 2 ? 2 : 3, &s1, &s2, 1, tol_of(odt) * 10);
              tt_free(&s1); tt_free(&s2);
            }
            /* sort / topk / kthvalue / median along this dim (keepdim for the last two) */
            if (keep == 0) {
              tpurt_arg_t st[4] = {A_T(&x.t), A_B(true), A_I(dimsets[ds][0]), A_B(ds & 1)};
              tt_t v1[2] = {tt_make(dt, 3, shape, LAYOUT_CONTIG), tt_make(TPURT_DTYPE_INT64, 3, shape, LAYOUT_CONTIG)};
              tt_t v2[2] = {tt_make(dt, 3, shape, LAYOUT_CONTIG), tt_make(TPURT_DTYPE_INT64, 3, shape, LAYOUT_CONTIG)};
              check_pair("sort", st, 4, v1, v2, 2, 0);
              for (int i = 0; i < 2; ++i) { tt_free(&v1[i]); tt_free(&v2[i]); }
              int64_t ks[3] = {shape[0], shape[1], shape[2]};
              ks[dimsets[ds][0]] = 3;
              tpurt_arg_t tk[5] = {A_T(&x.t), A_I(3), A_I(dimsets[ds][0]), A_B(true), A_B(true)};
              tt_t k1[2] = {tt_make(dt, 3, ks, LAYOUT_CONTIG), tt_make(TPURT_DTYPE_INT64, 3, ks, LAYOUT_CONTIG)};
              tt_t k2[2] = {tt_make(dt, 3, ks, LAYOUT_CONTIG), tt_make(TPURT_DTYPE_INT64, 3, ks, LAYOUT_CONTIG)};
              check_pair("topk", tk, 5, k1, k2, 2, 0);
              for (int i = 0; i < 2; ++i) { tt_free(&k1[i]); tt_free(&k2[i]); }
            }
            tpurt_arg_t kv[4] = {A_T(&x.t), A_I(2), A_I(dimsets[ds][0]), A_B(keep)};
            tt_t q1[2] = {tt_reduced(dt, &x.t, mask, keep), tt_reduced(TPURT_DTYPE_INT64, &x.t, mask, keep)};
            tt_t q2[2] = {tt_reduced(dt, &x.t, mask, keep), tt_reduced(TPURT_DTYPE_INT64, &x.t, mask, keep)};
            check_pair("kthvalue", kv, 4, q1, q2, 2, 0);
            tpurt_arg_t md[3] = {A_T(&x.t), A_I(dimsets[ds][0]), A_B(keep)};
            check_pair("median", md, 3, q1, q2, 2, 0);
            check_pair("mode", md, 3, q1, q2, 2, 0);
            for (int i = 0; i < 2; ++i) { tt_free(&q1[i]); tt_free(&q2[i]); }
          }
        }
      }
      tt_free(&x);
    }
  }
}

/* ---- known answers ---- */

static void test_known_answers(void) {
  const tpurt_op_def_t* sum = tpurt_op_lookup("sum");
  const tpurt_op_def_t* mx = tpurt_op_lookup("max");
  const tpurt_op_def_t* amax = tpurt_op_lookup("amax");
  const tpurt_op_def_t* argmax = tpurt_op_lookup("argmax");
  const tpurt_op_def_t* prod = tpurt_op_lookup("prod");
  /* sum of 1..1000 (int32 -> int64), exact */
  int64_t n1000[1] = {1000};
  tt_t x = tt_make(TPURT_DTYPE_INT32, 1, n1000, LAYOUT_CONTIG);
  for (int i = 0; i < 1000; ++i) tt_set(&x, i, i + 1);
  tt_t o = tt_make(TPURT_DTYPE_INT64, 0, NULL, LAYOUT_CONTIG);
  tpurt_arg_t a2[2] = {A_T(&x.t), A_N()};
  CHECK_OK(call(sum->fn, "sum", a2, 2, &o.t, 1));
  CHECK(*(int64_t*)o.t.data == 500500);
  tt_free(&x); tt_free(&o);
  /* NaN propagates through max / amax; argmax picks the first NaN */
  int64_t n8[1] = {8};
  x = tt_make(TPURT_DTYPE_FLOAT32, 1, n8, LAYOUT_CONTIG);
  for (int i = 0; i < 8; ++i) tt_set(&x, i, i);
  tt_set(&x, 3, NAN);
  tt_set(&x, 6, NAN);
  o = tt_make(TPURT_DTYPE_FLOAT32, 0, NULL, LAYOUT_CONTIG);
  tpurt_arg_t a1[1] = {A_T(&x.t)};
  CHECK_OK(call(mx->fn, "max", a1, 1, &o.t, 1));
  CHECK(isnan(*(float*)o.t.data));
  int64_t d0[1] = {0};
  tpurt_arg_t a3[3] = {A_T(&x.t), A_L(d0, 1), A_B(false)};
  *(float*)o.t.data = 0;
  CHECK_OK(call(amax->fn, "amax", a3, 3, &o.t, 1));
  CHECK(isnan(*(float*)o.t.data));
  tt_t idx = tt_make(TPURT_DTYPE_INT64, 0, NULL, LAYOUT_CONTIG);
  tpurt_arg_t aa[3] = {A_T(&x.t), A_N(), A_B(false)};
  CHECK_OK(call(argmax->fn, "argmax", aa, 3, &idx.t, 1));
  CHECK(*(int64_t*)idx.t.data == 3);
  /* ties: first index */
  for (int i = 0; i < 8; ++i) tt_set(&x, i, i == 2 || i == 5 ? 9 : 1);
  CHECK_OK(call(argmax->fn, "argmax", aa, 3, &idx.t, 1));
  CHECK(*(int64_t*)idx.t.data == 2);
  /* all -inf: argmax is 0, max is -inf */
  for (int i = 0; i < 8; ++i) tt_set(&x, i, -INFINITY);
  CHECK_OK(call(argmax->fn, "argmax", aa, 3, &idx.t, 1));
  CHECK(*(int64_t*)idx.t.data == 0);
  tt_free(&x); tt_free(&o); tt_free(&idx);
  /* empty: sum = 0, prod = 1, max of empty -> error */
  int64_t n0[2] = {0, 3};
  x = tt_make(TPURT_DTYPE_FLOAT32, 2, n0, LAYOUT_CONTIG);
  o = tt_make(TPURT_DTYPE_FLOAT32, 0, NULL, LAYOUT_CONTIG);
  *(float*)o.t.data = 7;
  CHECK_OK(call(sum->fn, "sum", a2, 1, &o.t, 1));
  a2[0] = A_T(&x.t);
  CHECK_OK(call(sum->fn, "sum", a2, 2, &o.t, 1));
  CHECK(*(float*)o.t.data == 0);
  CHECK_OK(call(prod->fn, "prod", a2, 2, &o.t, 1));
  CHECK(*(float*)o.t.data == 1);
  tpurt_arg_t ae[1] = {A_T(&x.t)};
  CHECK_STATUS(call(mx->fn, "max", ae, 1, &o.t, 1), INVALID_ARGUMENT);
  /* sum over dim 0 (size 0) of (0, 3) -> zeros(3) */
  int64_t n3[1] = {3};
  tt_t o3 = tt_make(TPURT_DTYPE_FLOAT32, 1, n3, LAYOUT_CONTIG);
  for (int i = 0; i < 3; ++i) tt_set(&o3, i, 5);
  tpurt_arg_t as[4] = {A_T(&x.t), A_L(d0, 1), A_B(false), A_N()};
  CHECK_OK(call(sum->fn, "sum", as, 4, &o3.t, 1));
  CHECK(tt_get(&o3, 0) == 0 && tt_get(&o3, 2) == 0);
  /* bad dim */
  int64_t d9[1] = {9};
  as[1] = A_L(d9, 1);
  CHECK_STATUS(call(sum->fn, "sum", as, 4, &o3.t, 1), OUT_OF_RANGE);
  tt_free(&x); tt_free(&o); tt_free(&o3);
  /* 0-d input, dim 0 / -1 */
  x = tt_make(TPURT_DTYPE_FLOAT64, 0, NULL, LAYOUT_CONTIG);
  tt_set(&x, 0, 2.5);
  o = tt_make(TPURT_DTYPE_FLOAT64, 0, NULL, LAYOUT_CONTIG);
  int64_t dm1[1] = {-1};
  tpurt_arg_t az[4] = {A_T(&x.t), A_L(dm1, 1), A_B(true), A_N()};
  CHECK_OK(call(sum->fn, "sum", az, 4, &o.t, 1));
  CHECK(tt_get(&o, 0) == 2.5);
  tt_free(&x); tt_free(&o);
  /* topk out of range */
  int64_t n5[1] = {5};
  x = tt_make(TPURT_DTYPE_FLOAT32, 1, n5, LAYOUT_CONTIG);
  tt_t v = tt_make(TPURT_DTYPE_FLOAT32, 1, n5, LAYOUT_CONTIG), iv = tt_make(TPURT_DTYPE_INT64, 1, n5, LAYOUT_CONTIG);
  tpurt_tensor_t outs[2] = {v.t, iv.t};
  tpurt_arg_t tk[5] = {A_T(&x.t), A_I(6), A_I(0), A_B(true), A_B(true)};
  CHECK_STATUS(call(tpurt_op_lookup("topk")->fn, "topk", tk, 5, outs, 2), OUT_OF_RANGE);
  /* stable descending sort keeps equal keys in order, NaN first */
  const double vals[5] = {1, NAN, 3, 1, 3};
  for (int i = 0; i < 5; ++i) tt_set(&x, i, vals[i]);
  tpurt_arg_t sa[4] = {A_T(&x.t), A_B(true), A_I(0), A_B(true)};
  CHECK_OK(call(tpurt_op_lookup("sort")->fn, "sort", sa, 4, outs, 2));
  const int64_t want[5] = {1, 2, 4, 0, 3};
  for (int i = 0; i < 5; ++i) CHECK(((int64_t*)iv.t.data)[i] == want[i]);
  /* cummax: ties take the later index, NaN sticks */
  const double cv[5] = {1, 3, 3, NAN, 2};
  for (int i = 0; i < 5; ++i) tt_set(&x, i, cv[i]);
  tpurt_arg_t ca[4] = {A_T(&x.t), A_T(&v.t), A_T(&iv.t), A_I(0)};
  CHECK_OK(call(tpurt_op_lookup("_cummax_helper")->fn, "_cummax_helper", ca, 4, NULL, 0));
  const int64_t wi[5] = {0, 1, 2, 3, 3};
  for (int i = 0; i < 5; ++i) CHECK(((int64_t*)iv.t.data)[i] == wi[i]);
  CHECK(tt_get(&v, 2) == 3 && isnan(tt_get(&v, 4)));
  tt_free(&x); tt_free(&v); tt_free(&iv);
}

/* ---- strategies: split over threads, vertical ---- */

static void test_strategies(void) {
  int64_t big[1] = {300001};
  tt_t x = tt_make(TPURT_DTYPE_FLOAT32, 1, big, LAYOUT_CONTIG);
  tt_fill(&x, -1, 1);
  tt_set(&x, 123457, 5);
  tt_set(&x, 234567, 5); /* tie: first index must win across partials */
  tpurt_reduce_set_split_min(1000);
  tt_t o1 = tt_make(TPURT_DTYPE_FLOAT32, 0, NULL, LAYOUT_CONTIG), o2 = tt_make(TPURT_DTYPE_FLOAT32, 0, NULL, LAYOUT_CONTIG);
  tpurt_arg_t a[4] = {A_T(&x.t), A_N(), A_B(false), A_N()};
  check_pair("sum", a, 2, &o1, &o2, 1, 1e-5);
  check_pair("amax", a, 3, &o1, &o2, 1, 0);
  tt_t i1 = tt_make(TPURT_DTYPE_INT64, 0, NULL, LAYOUT_CONTIG), i2 = tt_make(TPURT_DTYPE_INT64, 0, NULL, LAYOUT_CONTIG);
  check_pair("argmax", a, 3, &i1, &i2, 1, 0);
  CHECK(*(int64_t*)i1.t.data == 123457);
  tpurt_reduce_set_split_min(65536);
  tt_free(&x); tt_free(&o1); tt_free(&o2); tt_free(&i1); tt_free(&i2);
  /* vertical: (300, 70) over dim 0, with float32/bf16/f64 */
  tpurt_dtype_t dts[3] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT64};
  for (int k = 0; k < 3; ++k) {
    int64_t sh[2] = {300, 70}, d0[1] = {0};
    x = tt_make(dts[k], 2, sh, LAYOUT_CONTIG);
    tt_fill(&x, -2, 2);
    tt_set(&x, 70 * 5 + 3, NAN);
    bool mask[TPURT_MAX_DIMS] = {true};
    tt_t v1 = tt_reduced(dts[k], &x.t, mask, false), v2 = tt_reduced(dts[k], &x.t, mask, false);
    tpurt_arg_t va[4] = {A_T(&x.t), A_L(d0, 1), A_B(false), A_N()};
    check_pair("sum", va, 4, &v1, &v2, 1, tol_of(dts[k]));
    check_pair("amax", va, 3, &v1, &v2, 1, 0);
    check_pair("amin", va, 3, &v1, &v2, 1, 0);
    check_pair("var", (tpurt_arg_t[]){A_T(&x.t), A_L(d0, 1), A_I(1), A_B(false)}, 4, &v1, &v2, 1, tol_of(dts[k]));
    check_pair("linalg_vector_norm", (tpurt_arg_t[]){A_T(&x.t), A_D(2), A_L(d0, 1), A_B(false), A_N()}, 5, &v1, &v2, 1, tol_of(dts[k]));
    CHECK(isnan(tt_get(&v1, 3)));
    tt_free(&x); tt_free(&v1); tt_free(&v2);
  }
}

/* ---- throughput (printed, never asserted) ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench_full_sum(void) {
  int64_t n[1] = {16 << 20};
  tt_t x = tt_make(TPURT_DTYPE_FLOAT32, 1, n, LAYOUT_CONTIG);
  float* p = x.t.data;
  for (int64_t i = 0; i < n[0]; ++i) p[i] = (float)((i % 1000) * 0.001);
  tt_t o = tt_make(TPURT_DTYPE_FLOAT32, 0, NULL, LAYOUT_CONTIG);
  tpurt_arg_t a[2] = {A_T(&x.t), A_N()};
  const tpurt_op_def_t* d = tpurt_op_lookup("sum");
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    double t0 = now_s();
    tpurt_status_free(call(d->fn, "sum", a, 2, &o.t, 1));
    double t = now_s() - t0;
    if (t < best) best = t;
  }
  double expect = 0;
  for (int64_t i = 0; i < n[0]; ++i) expect += p[i];
  CHECK(fabs(*(float*)o.t.data - expect) <= 1e-6 * expect);
  printf("bench: full fp32 sum of 16M: %.2f ms, %.2f GB/s\n", best * 1e3, n[0] * 4.0 / best / 1e9);
  tt_free(&x); tt_free(&o);
}

/* Column sums (the bias gradient of a linear layer): sum over the outer dims
 * of a matrix whose last dim is contiguous. The vertical strategy adds each
 * output in double over the rows in order, as the reference does, so the two
 * agree bit for bit, whatever the tile width or thread count; shapes cover one
 * tile, several tiles with a ragged last one, a (B, T, C) over (0, 1) and a
 * (B, T, C) over 0 (two outer kept rows). */
static void test_column_sums(void) {
  const tpurt_dtype_t dts[4] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT64};
  const int64_t shapes[5][3] = {{37, 8, 0}, {129, 1100, 0}, {5, 7, 3000}, {3, 41, 600}, {2, 9, 4100}};
  const int nds[5] = {2, 2, 3, 3, 3};
  const bool masks[5][3] = {{true}, {true}, {true, true}, {true, true}, {true}};
  for (int k = 0; k < 4; ++k) {
    for (int c = 0; c < 5; ++c) {
      tt_t x = tt_make(dts[k], nds[c], shapes[c], LAYOUT_CONTIG);
      tt_fill(&x, -3, 3);
      bool mask[TPURT_MAX_DIMS] = {false};
      int64_t dl[2];
      int nd = 0;
      for (int d = 0; d < nds[c]; ++d) if (masks[c][d]) { mask[d] = true; dl[nd++] = d; }
      for (int keep = 0; keep < 2; ++keep) {
        tt_t v1 = tt_reduced(dts[k], &x.t, mask, keep), v2 = tt_reduced(dts[k], &x.t, mask, keep);
        tpurt_arg_t a[4] = {A_T(&x.t), A_L(dl, nd), A_B(keep), A_N()};
        check_pair("sum", a, 4, &v1, &v2, 1, 0);
        check_pair("mean", a, 4, &v1, &v2, 1, 0);
        tt_free(&v1); tt_free(&v2);
      }
      tt_free(&x);
    }
  }
  /* a known answer: column j of a (300, 70) matrix of j's sums to 300 j, in bf16 too */
  for (int k = 0; k < 2; ++k) {
    int64_t sh[2] = {300, 70}, d0[1] = {0};
    tt_t x = tt_make(dts[k], 2, sh, LAYOUT_CONTIG);
    for (int64_t i = 0; i < 300 * 70; ++i) tt_set(&x, i, (double)(i % 70));
    bool mask[TPURT_MAX_DIMS] = {true};
    tt_t o = tt_reduced(dts[k], &x.t, mask, false);
    tpurt_arg_t a[4] = {A_T(&x.t), A_L(d0, 1), A_B(false), A_N()};
    CHECK_OK(call(tpurt_op_lookup("sum")->fn, "sum", a, 4, &o.t, 1));
    for (int64_t j = 0; j < 70; ++j) {
      double want = dts[k] == TPURT_DTYPE_BFLOAT16 ? (double)tpurt_bf16_to_f32(tpurt_f32_to_bf16(300.0f * j)) : 300.0 * j;
      CHECK(tt_get(&o, j) == want);
    }
    tt_free(&x); tt_free(&o);
  }
}

/* CPU time of the whole process: with TORCH_TPU_NUM_THREADS=1 the kernel's
 * work whichever thread runs it, steadier than wall time on a shared machine. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Column sums of (8192, 768): fp32 and bf16 (bytes = the input's); best of 30
 * in process CPU time. */
static void bench_column_sum(void) {
  const tpurt_dtype_t dts[2] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16};
  for (int k = 0; k < 2; ++k) {
    int64_t sh[2] = {8192, 768}, d0[1] = {0};
    tt_t x = tt_make(dts[k], 2, sh, LAYOUT_CONTIG);
    tt_fill(&x, -1, 1);
    bool mask[TPURT_MAX_DIMS] = {true};
    tt_t o = tt_reduced(dts[k], &x.t, mask, false);
    tpurt_arg_t a[4] = {A_T(&x.t), A_L(d0, 1), A_B(false), A_N()};
    const tpurt_op_def_t* d = tpurt_op_lookup("sum");
    double best = 1e9;
    for (int r = 0; r < 30; ++r) {
      double t0 = cpu_s();
      tpurt_status_free(call(d->fn, "sum", a, 4, &o.t, 1));
      double t = cpu_s() - t0;
      if (t < best) best = t;
    }
    double bytes = 8192.0 * 768 * tpurt_dtype_size(dts[k]);
    printf("bench: column sum (8192, 768) %s over dim 0: %.2f ms CPU, %.2f GB/s\n", tpurt_dtype_name(dts[k]),
           best * 1e3, bytes / best / 1e9);
    tt_free(&x); tt_free(&o);
  }
}

int main(void) {
  test_random_reductions();
  test_known_answers();
  test_strategies();
  test_column_sums();
  bench_full_sum();
  bench_column_sum();
  return test_finish("test_reduce");
}
