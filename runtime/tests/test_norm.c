/* Softmax, layer/RMS norm, batch norm and loss kernels: optimized vs reference
 * over dtypes and layouts, known answers (softmax rows sum to 1, normalized
 * rows have mean 0 / var 1, nll by hand, bad targets rejected), and the
 * (4096, 1024) fp32 softmax time (printed, never asserted). */
#include <math.h>
#include <string.h>
#include <time.h>

#include "ops/elementwise/ew_expf.h"
#include "ops/reduce/reduce_ops.h"
#include "test_util.h"

typedef struct tt_t {
  tpurt_tensor_t t;
  void* mem;
} tt_t;


/* transposed != 0 swaps the storage order of the last two dims */
static tt_t tt_make(tpurt_dtype_t dt, int ndim, const int64_t* sizes, bool transposed) {
  tt_t r;
  memset(&r, 0, sizeof(r));
  r.t.dtype = dt;
  r.t.ndim = ndim;
  int64_t n = 1, st = 1;
  for (int d = 0; d < ndim; ++d) { r.t.sizes[d] = sizes[d]; n *= sizes[d]; }
  for (int d = ndim - 1; d >= 0; --d) { r.t.strides[d] = st; st *= sizes[d]; }
  if (transposed && ndim >= 2) {
    int a = ndim - 2, b = ndim - 1;
    int64_t s = 1;
    r.t.strides[a] = s; s *= sizes[a];
    r.t.strides[b] = s; s *= sizes[b];
    for (int d = ndim - 3; d >= 0; --d) { r.t.strides[d] = s; s *= sizes[d]; }
  }
  r.mem = calloc(1, (size_t)(n + 1) * tpurt_dtype_size(dt) + 64);
  r.t.data = r.mem;
  return r;
}
static void tt_set(tt_t* x, int64_t i, double v) {
  tpurt_dtype_store_f64(x->t.dtype, tpurt_tensor_at(&x->t, tpurt_tensor_offset_of(&x->t, i, -1)), v);
}
static double tt_get(const tt_t* x, int64_t i) {
  return tpurt_dtype_load_f64(x->t.dtype, tpurt_tensor_at(&x->t, tpurt_tensor_offset_of(&x->t, i, -1)));
}
static void tt_fill(tt_t* x, double lo, double hi) {
  int64_t n = tpurt_tensor_numel(&x->t);
  for (int64_t i = 0; i < n; ++i) {
    if (tpurt_dtype_is_floating(x->t.dtype)) tt_set(x, i, lo + test_rand_unit() * (hi - lo));
    else tpurt_dtype_store_i64(x->t.dtype, tpurt_tensor_at(&x->t, tpurt_tensor_offset_of(&x->t, i, -1)),
                               (int64_t)floor(lo + test_rand_unit() * (hi - lo)));
  }
}
static void tt_free(tt_t* x) { free(x->mem); x->mem = NULL; }

static double tol_of(tpurt_dtype_t dt) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT16: return 2e-3;
    case TPURT_DTYPE_BFLOAT16: return 1.6e-2;
    case TPURT_DTYPE_FLOAT32: return 1e-5;
    default: return 1e-10;
  }
}

static int tt_compare(const tt_t* a, const tt_t* b, double tol, const char* what) {
  int64_t n = tpurt_tensor_numel(&a->t);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = tt_get(a, i), y = tt_get(b, i);
    if ((isnan(x) && isnan(y)) || x == y || fabs(x - y) <= tol * (1 + fabs(y))) continue;
    if (bad++ < 3) fprintf(stderr, "  %s: [%lld] %.9g vs ref %.9g\n", what, (long long)i, x, y);
  }
  return bad;
}

static tpurt_arg_t A_T(const tpurt_tensor_t* t) { tpurt_arg_t a = {.kind = t ? TPURT_ARG_TENSOR : TPURT_ARG_NONE}; a.v.tensor = t; return a; }
static tpurt_arg_t A_I(int64_t i) { tpurt_arg_t a = {.kind = TPURT_ARG_INT}; a.v.i = i; return a; }
static tpurt_arg_t A_D(double d) { tpurt_arg_t a = {.kind = TPURT_ARG_DOUBLE}; a.v.d = d; return a; }
static tpurt_arg_t A_B(bool b) { tpurt_arg_t a = {.kind = TPURT_ARG_BOOL}; a.v.b = b; return a; }
static tpurt_arg_t A_N(void) { tpurt_arg_t a = {.kind = TPURT_ARG_NONE}; return a; }
static tpurt_arg_t A_L(const int64_t* v, int n) { tpurt_arg_t a = {.kind = TPURT_ARG_INT_LIST, .count = n}; a.v.ints = v; return a; }
static tpurt_arg_t A_BL(const bool* v, int n) { tpurt_arg_t a = {.kind = TPURT_ARG_BOOL_LIST, .count = n}; a.v.bools = v; return a; }

static tpurt_status_t call(tpurt_kernel_fn_t fn, const char* name, const tpurt_arg_t* args, int nargs, tpurt_tensor_t* outs, int nouts) {
  tpurt_op_call_t c = {.name = name, .overload = "", .num_args = nargs, .args = args, .num_outputs = nouts, .outputs = outs};
  return tpurt_kernel_run(fn, &c);
}

/* Fast vs reference on fresh outputs shaped like `shapes`; the inputs in args
 * that are mutated (running stats) are reset from `reset` copies before each run. */
static void check_pair(const char* op, const tpurt_arg_t* args, int nargs, tt_t* o1, tt_t* o2, int nouts, double tol,
                       tt_t* mut, const tt_t* mut_init, int nmut, tt_t* mut_after) {
  const tpurt_op_def_t* d = tpurt_op_lookup(op);
  CHECK(d != NULL);
  if (!d) return;
  tpurt_tensor_t a[4], b[4];
  for (int i = 0; i < nouts; ++i) { a[i] = o1[i].t; b[i] = o2[i].t; }
  for (int m = 0; m < nmut; ++m) memcpy(mut[m].mem, mut_init[m].mem, (size_t)tpurt_tensor_numel(&mut[m].t) * tpurt_dtype_size(mut[m].t.dtype));
  tpurt_status_t s1 = call(d->fn, op, args, nargs, a, nouts);
  for (int m = 0; m < nmut; ++m) {
    memcpy(mut_after[m].mem, mut[m].mem, (size_t)tpurt_tensor_numel(&mut[m].t) * tpurt_dtype_size(mut[m].t.dtype));
    memcpy(mut[m].mem, mut_init[m].mem, (size_t)tpurt_tensor_numel(&mut[m].t) * tpurt_dtype_size(mut[m].t.dtype));
  }
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
  for (int m = 0; m < nmut; ++m) CHECK(tt_compare(&mut_after[m], &mut[m], tol, "running stats") == 0);
}
#define CHECK_PAIR(op, args, nargs, o1, o2, nouts, tol) check_pair(op, args, nargs, o1, o2, nouts, tol, NULL, NULL, 0, NULL)

static const tpurt_dtype_t kFloat[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT64};

/* The bfloat16 softmax / log_softmax rows read in place (contiguous rows), forward and backward,
 * give the bits of the float32-copy path a strided row takes: every row length's vector blocks and
 * tails. */
static void test_softmax_backward_bf16_direct(void) {
  const int64_t lens[] = {1, 7, 8, 9, 15, 16, 17, 24, 33, 100, 1030};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li) {
    const int64_t sh[2] = {3, lens[li]}, n = 3 * lens[li];
    tt_t g1 = tt_make(TPURT_DTYPE_BFLOAT16, 2, sh, false), g2 = tt_make(TPURT_DTYPE_BFLOAT16, 2, sh, true);
    tt_t o1 = tt_make(TPURT_DTYPE_BFLOAT16, 2, sh, false), o2 = tt_make(TPURT_DTYPE_BFLOAT16, 2, sh, true);
    for (int64_t i = 0; i < n; ++i) {
      double gv = sin((double)i * 0.7) * 3, ov = -fabs(cos((double)i * 1.3)) * 6 - (i % 5 == 0 ? 90 : 0);
      tt_set(&g1, i, gv); tt_set(&g2, i, gv); tt_set(&o1, i, ov); tt_set(&o2, i, ov);
    }
    for (int lg = 0; lg < 2; ++lg) {
      const char* fop = lg ? "_log_softmax" : "_softmax";
      tt_t f1 = tt_make(TPURT_DTYPE_BFLOAT16, 2, sh, false), f2 = tt_make(TPURT_DTYPE_BFLOAT16, 2, sh, false);
      tpurt_arg_t fa1[3] = {A_T(&g1.t), A_I(1), A_B(false)}, fa2[3] = {A_T(&g2.t), A_I(1), A_B(false)};
      CHECK_OK(call(tpurt_op_lookup(fop)->fn, fop, fa1, 3, &f1.t, 1));
      CHECK_OK(call(tpurt_op_lookup(fop)->fn, fop, fa2, 3, &f2.t, 1));
      int fbad = memcmp(f1.mem, f2.mem, (size_t)n * 2) != 0;
      if (fbad) fprintf(stderr, "  %s bf16, rows of %lld: in-place rows differ from the copied ones\n", fop, (long long)lens[li]);
      CHECK(!fbad);
      tt_free(&f1); tt_free(&f2);
      const char* op = lg ? "_log_softmax_backward_data" : "_softmax_backward_data";
      tt_t y1 = tt_make(TPURT_DTYPE_BFLOAT16, 2, sh, false), y2 = tt_make(TPURT_DTYPE_BFLOAT16, 2, sh, false);
      tpurt_arg_t a1[4] = {A_T(&g1.t), A_T(&o1.t), A_I(1), A_I(TPURT_DTYPE_BFLOAT16)};
      tpurt_arg_t a2[4] = {A_T(&g2.t), A_T(&o2.t), A_I(1), A_I(TPURT_DTYPE_BFLOAT16)};
      CHECK_OK(call(tpurt_op_lookup(op)->fn, op, a1, 4, &y1.t, 1));
      CHECK_OK(call(tpurt_op_lookup(op)->fn, op, a2, 4, &y2.t, 1));
      int bad = memcmp(y1.mem, y2.mem, (size_t)n * 2) != 0;
      if (bad) fprintf(stderr, "  %s bf16, rows of %lld: in-place rows differ from the copied ones\n", op, (long long)lens[li]);
      CHECK(!bad);
      tt_free(&y1); tt_free(&y2);
    }
    tt_free(&g1); tt_free(&g2); tt_free(&o1); tt_free(&o2);
  }
}

static void test_softmax(void) {
  const int64_t sh[3] = {4, 6, 33};
  for (int di = 0; di < 4; ++di) {
    tpurt_dtype_t dt = kFloat[di];
    for (int tr = 0; tr < 2; ++tr) {
      tt_t x = tt_make(dt, 3, sh, tr), g = tt_make(dt, 3, sh, false);
      tt_fill(&x, -8, 8);
      tt_fill(&g, -1, 1);
      for (int dim = -3; dim < 3; ++dim) {
        const char* ops[2] = {"_softmax", "_log_softmax"};
        for (int o = 0; o < 2; ++o) {
          tt_t y1 = tt_make(dt, 3, sh, false), y2 = tt_make(dt, 3, sh, false);
          tpurt_arg_t a[3] = {A_T(&x.t), A_I(dim), A_B(false)};
          CHECK_PAIR(ops[o], a, 3, &y1, &y2, 1, tol_of(dt) * 2);
          /* backward on the forward's output */
          tt_t b1 = tt_make(dt, 3, sh, false), b2 = tt_make(dt, 3, sh, false);
          tpurt_arg_t ba[4] = {A_T(&g.t), A_T(&y2.t), A_I(dim), A_I(dt)};
          CHECK_PAIR(o ? "_log_softmax_backward_data" : "_softmax_backward_data", ba, 4, &b1, &b2, 1, tol_of(dt) * 4);
          if (o == 0 && dim == 2) {
            double s = 0;
            for (int i = 0; i < 33; ++i) s += tt_get(&y1, i);
            CHECK(fabs(s - 1) < 20 * tol_of(dt));
          }
          tt_free(&y1); tt_free(&y2); tt_free(&b1); tt_free(&b2);
        }
      }
      tt_free(&x); tt_free(&g);
    }
  }
  /* half_to_float: bf16 in, f32 out; NaN row -> all NaN; -inf entries -> 0 */
  const int64_t s2[2] = {3, 5};
  tt_t x = tt_make(TPURT_DTYPE_BFLOAT16, 2, s2, false);
  tt_fill(&x, -2, 2);
  tt_set(&x, 7, NAN);
  tt_set(&x, 11, -INFINITY);
  tt_t y = tt_make(TPURT_DTYPE_FLOAT32, 2, s2, false);
  tpurt_arg_t a[3] = {A_T(&x.t), A_I(1), A_B(true)};
  CHECK_OK(call(tpurt_op_lookup("_softmax")->fn, "_softmax", a, 3, &y.t, 1));
  CHECK(isnan(tt_get(&y, 5)) && isnan(tt_get(&y, 9)));
  CHECK(tt_get(&y, 11) == 0);
  CHECK(!isnan(tt_get(&y, 0)));
  tt_free(&x); tt_free(&y);
}

static void test_layer_norm(void) {
  const int64_t sh[3] = {3, 5, 40};
  const int64_t ns2[2] = {5, 40};
  for (int di = 0; di < 4; ++di) {
    tpurt_dtype_t dt = kFloat[di];
    for (int tr = 0; tr < 2; ++tr) {
      for (int nd = 1; nd <= 2; ++nd) {
        const int64_t* ns = nd == 1 ? &ns2[1] : ns2;
        tt_t x = tt_make(dt, 3, sh, tr), dy = tt_make(dt, 3, sh, false);
        tt_fill(&x, -3, 5);
        tt_fill(&dy, -1, 1);
        tt_t w = tt_make(dt, nd, ns, false), b = tt_make(dt, nd, ns, false);
        tt_fill(&w, 0.5, 1.5);
        tt_fill(&b, -1, 1);
        int64_t st[3] = {3, nd == 1 ? 5 : 1, 1};
        tpurt_dtype_t sdt = TPURT_DTYPE_FLOAT32;
        if (dt == TPURT_DTYPE_FLOAT64) sdt = dt;
        for (int wb = 0; wb < 2; ++wb) {
          tt_t o1[3] = {tt_make(dt, 3, sh, false), tt_make(sdt, 3, st, false), tt_make(sdt, 3, st, false)};
          tt_t o2[3] = {tt_make(dt, 3, sh, false), tt_make(sdt, 3, st, false), tt_make(sdt, 3, st, false)};
          tpurt_arg_t a[5] = {A_T(&x.t), A_L(ns, nd), A_T(wb ? &w.t : NULL), A_T(wb ? &b.t : NULL), A_D(1e-5)};
          CHECK_PAIR("native_layer_norm", a, 5, o1, o2, 3, tol_of(dt) * 2);
          if (wb == 0 && dt == TPURT_DTYPE_FLOAT64) {
            double m = 0, v = 0;
            int64_t n = nd == 1 ? 40 : 200;
            for (int64_t i = 0; i < n; ++i) m += tt_get(&o1[0], i);
            m /= n;
            for (int64_t i = 0; i < n; ++i) v += (tt_get(&o1[0], i) - m) * (tt_get(&o1[0], i) - m);
            CHECK(fabs(m) < 1e-9 && fabs(v / n - 1) < 1e-3);
          }
          bool mask[3] = {true, wb != 0, wb != 0};
          tt_t g1[3] = {tt_make(dt, 3, sh, false), tt_make(dt, nd, ns, false), tt_make(dt, nd, ns, false)};
          tt_t g2[3] = {tt_make(dt, 3, sh, false), tt_make(dt, nd, ns, false), tt_make(dt, nd, ns, false)};
          tpurt_arg_t ba[8] = {A_T(&dy.t), A_T(&x.t), A_L(ns, nd), A_T(&o2[1].t), A_T(&o2[2].t),
                               A_T(wb ? &w.t : NULL), A_T(wb ? &b.t : NULL), A_BL(mask, 3)};
          CHECK_PAIR("native_layer_norm_backward", ba, 8, g1, g2, 3, tol_of(dt) * 8);
          /* RMS norm forward/backward */
          tpurt_arg_t ra[4] = {A_T(&x.t), A_L(ns, nd), A_T(wb ? &w.t : NULL), wb ? A_D(1e-6) : A_N()};
          CHECK_PAIR("_fused_rms_norm", ra, 4, o1, o2, 2, tol_of(dt) * 2);
          bool rmask[2] = {true, wb != 0};
          tpurt_arg_t rb[6] = {A_T(&dy.t), A_T(&x.t), A_L(ns, nd), A_T(&o2[1].t), A_T(wb ? &w.t : NULL), A_BL(rmask, 2)};
          CHECK_PAIR("_fused_rms_norm_backward", rb, 6, g1, g2, 2, tol_of(dt) * 8);
          for (int i = 0; i < 3; ++i) { tt_free(&o1[i]); tt_free(&o2[i]); tt_free(&g1[i]); tt_free(&g2[i]); }
        }
        tt_free(&x); tt_free(&dy); tt_free(&w); tt_free(&b);
      }
    }
  }
}

static void test_batch_norm(void) {
  const int64_t sh[4] = {4, 3, 5, 6};
  const int64_t c3[1] = {3};
  for (int di = 0; di < 4; ++di) {
    tpurt_dtype_t dt = kFloat[di];
    for (int tr = 0; tr < 2; ++tr) {
      tt_t x = tt_make(dt, 4, sh, tr), dy = tt_make(dt, 4, sh, false);
      tt_fill(&x, -2, 4);
      tt_fill(&dy, -1, 1);
      tt_t w = tt_make(dt, 1, c3, false), b = tt_make(dt, 1, c3, false);
      tt_fill(&w, 0.5, 1.5);
      tt_fill(&b, -1, 1);
      tpurt_dtype_t sdt = TPURT_DTYPE_FLOAT32;
      tt_t rm = tt_make(sdt, 1, c3, false), rv = tt_make(sdt, 1, c3, false);
      tt_t init[2] = {tt_make(sdt, 1, c3, false), tt_make(sdt, 1, c3, false)};
      tt_t after[2] = {tt_make(sdt, 1, c3, false), tt_make(sdt, 1, c3, false)};
      for (int i = 0; i < 3; ++i) { tt_set(&init[0], i, 0.1 * i); tt_set(&init[1], i, 1 + 0.2 * i); }
      tt_t mut[2] = {rm, rv};
      for (int training = 0; training < 2; ++training) {
        tt_t o1[3] = {tt_make(dt, 4, sh, false), tt_make(sdt, 1, c3, false), tt_make(sdt, 1, c3, false)};
        tt_t o2[3] = {tt_make(dt, 4, sh, false), tt_make(sdt, 1, c3, false), tt_make(sdt, 1, c3, false)};
        tpurt_arg_t a[8] = {A_T(&x.t), A_T(&w.t), A_T(&b.t), A_T(&rm.t), A_T(&rv.t), A_B(training), A_D(0.1), A_D(1e-5)};
        check_pair("native_batch_norm", a, 8, o1, o2, 3, tol_of(dt) * 2, mut, init, 2, after);
        check_pair("_native_batch_norm_legit", a, 8, o1, o2, 3, tol_of(dt) * 2, mut, init, 2, after);
        if (training) {
          /* running stats moved towards the batch stats */
          CHECK(fabs(tt_get(&after[0], 0) - (0.9 * 0 + 0.1 * tt_get(&o1[1], 0))) < 1e-5);
          tpurt_arg_t ns[6] = {A_T(&x.t), A_T(NULL), A_T(NULL), A_B(true), A_D(0.1), A_D(1e-5)};
          CHECK_PAIR("_native_batch_norm_legit", ns, 6, o1, o2, 3, tol_of(dt) * 2);
          tpurt_arg_t us[4] = {A_T(&x.t), A_T(&rm.t), A_T(&rv.t), A_D(0.1)};
          check_pair("batch_norm_update_stats", us, 4, &o1[1], &o2[1], 2, tol_of(dt), mut, init, 2, after);
        }
        bool mask[3] = {true, true, true};
        tt_t g1[3] = {tt_make(dt, 4, sh, false), tt_make(dt, 1, c3, false), tt_make(dt, 1, c3, false)};
        tt_t g2[3] = {tt_make(dt, 4, sh, false), tt_make(dt, 1, c3, false), tt_make(dt, 1, c3, false)};
        tpurt_arg_t ba[10] = {A_T(&dy.t), A_T(&x.t), A_T(&w.t), A_T(&init[0].t), A_T(&init[1].t),
                              A_T(&o2[1].t), A_T(&o2[2].t), A_B(training), A_D(1e-5), A_BL(mask, 3)};
        CHECK_PAIR("native_batch_norm_backward", ba, 10, g1, g2, 3, tol_of(dt) * 8);
        for (int i = 0; i < 3; ++i) { tt_free(&o1[i]); tt_free(&o2[i]); tt_free(&g1[i]); tt_free(&g2[i]); }
      }
      tt_free(&x); tt_free(&dy); tt_free(&w); tt_free(&b); tt_free(&rm); tt_free(&rv);
      for (int i = 0; i < 2; ++i) { tt_free(&init[i]); tt_free(&after[i]); }
    }
  }
}

static void test_group_norm(void) {
  const int64_t sh[4] = {2, 6, 4, 5}, c6[1] = {6}, ng[2] = {2, 3};
  for (int di = 0; di < 4; ++di) {
    tpurt_dtype_t dt = kFloat[di];
    for (int tr = 0; tr < 2; ++tr) {
      tt_t x = tt_make(dt, 4, sh, tr), dy = tt_make(dt, 4, sh, false);
      tt_fill(&x, -2, 3);
      tt_fill(&dy, -1, 1);
      tt_t w = tt_make(dt, 1, c6, false), b = tt_make(dt, 1, c6, false);
      tt_fill(&w, 0.5, 1.5);
      tt_fill(&b, -1, 1);
      tt_t o1[3] = {tt_make(dt, 4, sh, false), tt_make(dt, 2, ng, false), tt_make(dt, 2, ng, false)};
      tt_t o2[3] = {tt_make(dt, 4, sh, false), tt_make(dt, 2, ng, false), tt_make(dt, 2, ng, false)};
      tpurt_arg_t a[8] = {A_T(&x.t), A_T(&w.t), A_T(&b.t), A_I(2), A_I(6), A_I(20), A_I(3), A_D(1e-5)};
      CHECK_PAIR("native_group_norm", a, 8, o1, o2, 3, tol_of(dt) * 2);
      bool mask[3] = {true, true, true};
      tt_t g1[3] = {tt_make(dt, 4, sh, false), tt_make(dt, 1, c6, false), tt_make(dt, 1, c6, false)};
      tt_t g2[3] = {tt_make(dt, 4, sh, false), tt_make(dt, 1, c6, false), tt_make(dt, 1, c6, false)};
      tpurt_arg_t ba[10] = {A_T(&dy.t), A_T(&x.t), A_T(&o2[1].t), A_T(&o2[2].t), A_T(&w.t),
                            A_I(2), A_I(6), A_I(20), A_I(3), A_BL(mask, 3)};
      CHECK_PAIR("native_group_norm_backward", ba, 10, g1, g2, 3, tol_of(dt) * 8);
      /* 4 groups of 6 channels is an error */
      a[6] = A_I(4);
      CHECK_STATUS(call(tpurt_op_lookup("native_group_norm")->fn, "native_group_norm", a, 8, (tpurt_tensor_t[]){o1[0].t, o1[1].t, o1[2].t}, 3), INVALID_ARGUMENT);
      for (int i = 0; i < 3; ++i) { tt_free(&o1[i]); tt_free(&o2[i]); tt_free(&g1[i]); tt_free(&g2[i]); }
      tt_free(&x); tt_free(&dy); tt_free(&w); tt_free(&b);
    }
  }
}

static void test_losses(void) {
  const int64_t sh[2] = {6, 7};
  for (int di = 0; di < 4; ++di) {
    tpurt_dtype_t dt = kFloat[di];
    tt_t x = tt_make(dt, 2, sh, true), t = tt_make(dt, 2, sh, false), g = tt_make(dt, 2, sh, false);
    tt_fill(&x, 0.02, 0.98);
    tt_fill(&t, 0, 1);
    tt_fill(&g, -1, 1);
    tt_t w = tt_make(dt, 2, sh, false);
    tt_fill(&w, 0.5, 2);
    tt_t gs = tt_make(dt, 0, NULL, false);
    tt_set(&gs, 0, 0.7);
    for (int red = 0; red < 3; ++red) {
      const char* ops[5] = {"mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss", "binary_cross_entropy"};
      for (int o = 0; o < 5; ++o) {
        bool bce = o == 4;
        tt_t o1 = red ? tt_make(dt, 0, NULL, false) : tt_make(dt, 2, sh, false);
        tt_t o2 = red ? tt_make(dt, 0, NULL, false) : tt_make(dt, 2, sh, false);
        tpurt_arg_t a[5];
        int n = 0;
        a[n++] = A_T(&x.t); a[n++] = A_T(&t.t);
        if (bce) a[n++] = A_T(&w.t);
        a[n++] = A_I(red);
        if (o == 2 || o == 3) a[n++] = A_D(0.3);
        CHECK_PAIR(ops[o], a, n, &o1, &o2, 1, tol_of(dt) * 4);
        if (o != 1) {
          char bname[64];
          snprintf(bname, sizeof(bname), "%s_backward", ops[o]);
          tt_t b1 = tt_make(dt, 2, sh, false), b2 = tt_make(dt, 2, sh, false);
          tpurt_arg_t ba[6];
          ba[0] = A_T(red ? &gs.t : &g.t);
          for (int i = 0; i < n; ++i) ba[i + 1] = a[i];
          CHECK_PAIR(bname, ba, n + 1, &b1, &b2, 1, tol_of(dt) * 4);
          tt_free(&b1); tt_free(&b2);
        }
        tt_free(&o1); tt_free(&o2);
      }
    }
    /* bce rejects inputs outside [0, 1] */
    tt_set(&x, 3, 1.5);
    tt_t o = tt_make(dt, 0, NULL, false);
    tpurt_arg_t a[4] = {A_T(&x.t), A_T(&t.t), A_N(), A_I(1)};
    CHECK_STATUS(call(tpurt_op_lookup("binary_cross_entropy")->fn, "binary_cross_entropy", a, 4, &o.t, 1), INVALID_ARGUMENT);
    tt_free(&o);
    tt_free(&x); tt_free(&t); tt_free(&g); tt_free(&w); tt_free(&gs);
  }
  /* nll_loss by hand: x (3, 4), target {1, -100, 3}, weight */
  const int64_t s34[2] = {3, 4}, s3[1] = {3}, s4[1] = {4};
  tt_t x = tt_make(TPURT_DTYPE_FLOAT32, 2, s34, false);
  for (int i = 0; i < 12; ++i) tt_set(&x, i, -(double)i);
  tt_t tg = tt_make(TPURT_DTYPE_INT64, 1, s3, false);
  tt_set(&tg, 0, 1); tt_set(&tg, 1, -100); tt_set(&tg, 2, 3);
  tt_t w = tt_make(TPURT_DTYPE_FLOAT32, 1, s4, false);
  for (int i = 0; i < 4; ++i) tt_set(&w, i, i + 1);
  tt_t out = tt_make(TPURT_DTYPE_FLOAT32, 0, NULL, false), tw = tt_make(TPURT_DTYPE_FLOAT32, 0, NULL, false);
  tpurt_tensor_t outs[2] = {out.t, tw.t};
  tpurt_arg_t a[5] = {A_T(&x.t), A_T(&tg.t), A_T(&w.t), A_I(1), A_I(-100)};
  CHECK_OK(call(tpurt_op_lookup("nll_loss_forward")->fn, "nll_loss_forward", a, 5, outs, 2));
  /* loss = (2*1 + 4*11) / (2 + 4) */
  CHECK(fabs(tt_get(&out, 0) - 46.0 / 6.0) < 1e-5);
  CHECK(tt_get(&tw, 0) == 6);
  tt_t gi = tt_make(TPURT_DTYPE_FLOAT32, 2, s34, false), go = tt_make(TPURT_DTYPE_FLOAT32, 0, NULL, false);
  tt_set(&go, 0, 1);
  tpurt_arg_t ba[7] = {A_T(&go.t), A_T(&x.t), A_T(&tg.t), A_T(&w.t), A_I(1), A_I(-100), A_T(&tw.t)};
  CHECK_OK(call(tpurt_op_lookup("nll_loss_backward")->fn, "nll_loss_backward", ba, 7, &gi.t, 1));
  CHECK(fabs(tt_get(&gi, 1) + 2.0 / 6) < 1e-6 && tt_get(&gi, 0) == 0 && tt_get(&gi, 5) == 0 && fabs(tt_get(&gi, 11) + 4.0 / 6) < 1e-6);
  tt_set(&tg, 1, 4);
  CHECK_STATUS(call(tpurt_op_lookup("nll_loss_forward")->fn, "nll_loss_forward", a, 5, outs, 2), OUT_OF_RANGE);
  tt_free(&x); tt_free(&tg); tt_free(&w); tt_free(&out); tt_free(&tw); tt_free(&gi); tt_free(&go);
}

/* The softmax exp (ew_expf.h) against the exp op's definition: bit-equal
 * where that is at least 2^-125, 0 below, NaN for NaN, 0 for -inf, on every
 * vector width this build has. */
static void test_softmax_exp(void) {
  enum { N = 16 * 4096 };
  static float d[N], want[N], got[N];
  for (int i = 0; i < N - 16; ++i) d[i] = -100.0f + 188.0f * (float)i / (N - 16); /* [-100, 88] */
  for (int i = N - 16; i < N; ++i) d[i] = -(float)(i - (N - 16)) * 1e-3f;
  d[7] = -INFINITY;
  d[9] = NAN;
  d[11] = 0.0f;
  for (int i = 0; i < N; ++i) want[i] = tpurt_ew_expf(d[i]);
  int bad = 0, widths = 0;
#if defined(__AVX512F__)
  for (int i = 0; i < N; i += 16) _mm512_storeu_ps(got + i, tpurt_ew_expf16_softmax(_mm512_loadu_ps(d + i)));
  ++widths;
  for (int i = 0; i < N; ++i)
    bad += want[i] >= 0x1p-125f ? memcmp(&got[i], &want[i], 4) != 0 : d[i] != d[i] ? got[i] == got[i] : got[i] > want[i];
#endif
#if defined(__AVX2__) && defined(__FMA__)
  for (int i = 0; i < N; i += 8) _mm256_storeu_ps(got + i, tpurt_ew_expf8_softmax(_mm256_loadu_ps(d + i)));
  ++widths;
  for (int i = 0; i < N; ++i)
    bad += want[i] >= 0x1p-125f ? memcmp(&got[i], &want[i], 4) != 0 : d[i] != d[i] ? got[i] == got[i] : got[i] > want[i];
#endif
  CHECK(bad == 0);
  if (widths) CHECK(got[7] == 0.0f && got[9] != got[9] && got[11] == 1.0f);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench_softmax(void) {
  const int64_t sh[2] = {4096, 1024};
  tt_t x = tt_make(TPURT_DTYPE_FLOAT32, 2, sh, false), y = tt_make(TPURT_DTYPE_FLOAT32, 2, sh, false);
  tt_fill(&x, -5, 5);
  tpurt_arg_t a[3] = {A_T(&x.t), A_I(1), A_B(false)};
  const tpurt_op_def_t* d = tpurt_op_lookup("_softmax");
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    double t0 = now_s();
    tpurt_status_free(call(d->fn, "_softmax", a, 3, &y.t, 1));
    double t = now_s() - t0;
    if (t < best) best = t;
  }
  printf("bench: softmax fp32 (4096, 1024) dim=-1: %.2f ms\n", best * 1e3);
  tt_free(&x); tt_free(&y);
}

int main(void) {
  test_softmax_exp();
  test_softmax();
  test_softmax_backward_bf16_direct();
  test_layer_norm();
  test_batch_norm();
  test_group_norm();
  test_losses();
  bench_softmax();
  return test_finish("test_norm");
}
