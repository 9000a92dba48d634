/* Elementwise kernels: every registered op's optimized kernel against its
 * reference on random data, across dtypes, broadcasting, transposed and
 * sliced strides, 0-d and empty tensors, casts to the output; known answers
 * for copy/fill/promotion; and a timing print for a large fp32 add. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/ew_ops.h"
#include "test_util.h"


/* A tensor over its own buffer; `layout` 0 contiguous, 1 transposed (last two
 * dims swapped in memory), 2 every other element of the last dim. */
typedef struct tt_t {
  tpurt_tensor_t t;
  void* buf;
} tt_t;

static void tt_make(tt_t* x, tpurt_dtype_t dt, int nd, const int64_t* sizes, int layout) {
  memset(x, 0, sizeof(*x));
  x->t.dtype = dt;
  x->t.ndim = nd;
  int64_t n = 1;
  for (int d = 0; d < nd; ++d) { x->t.sizes[d] = sizes[d]; n *= sizes[d]; }
  int64_t st = 1;
  for (int d = nd - 1; d >= 0; --d) { x->t.strides[d] = st; st *= sizes[d]; }
  int64_t cap = n;
  if (layout == 1 && nd >= 2) {
    int a = nd - 2, b = nd - 1;
    x->t.strides[b] = sizes[a];
    x->t.strides[a] = 1;
    int64_t s2 = sizes[a] * sizes[b];
    for (int d = nd - 3; d >= 0; --d) { x->t.strides[d] = s2; s2 *= sizes[d]; }
  } else if (layout == 2 && nd >= 1) {
    for (int d = 0; d < nd; ++d) x->t.strides[d] *= 2;
    cap = 2 * n;
  }
  size_t bytes = (size_t)(cap ? cap : 1) * tpurt_dtype_size(dt);
  x->buf = calloc(1, bytes + 64);
  x->t.data = x->buf;
}

static void tt_fill_random(tt_t* x, int kind) {
  /* kind: 0 general, 1 nonzero (divisors), 2 positive */
  int64_t n = tpurt_tensor_numel(&x->t);
  int64_t idx[TPURT_MAX_DIMS] = {0};
  size_t es = tpurt_dtype_size(x->t.dtype);
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int d = 0; d < x->t.ndim; ++d) off += idx[d] * x->t.strides[d];
    char* p = (char*)x->t.data + off * (int64_t)es;
    if (tpurt_dtype_is_floating(x->t.dtype)) {
      double v = test_rand_unit() * 6 - 3;
      if (kind == 2) v = test_rand_unit() * 3 + 0.01;
      if (kind == 1 && fabs(v) < 0.1) v = 0.5;
      tpurt_dtype_store_f64(x->t.dtype, p, v);
    } else {
      int64_t v = (int64_t)(test_rand_u64() % 41) - 20;
      if (x->t.dtype == TPURT_DTYPE_UINT8 || kind == 2) v = (int64_t)(test_rand_u64() % 40) + (kind == 2 ? 1 : 0);
      if (x->t.dtype == TPURT_DTYPE_BOOL) v = (int64_t)(test_rand_u64() & 1);
      if (kind == 1 && v == 0) v = 3;
      tpurt_dtype_store_i64(x->t.dtype, p, v);
    }
    for (int d = x->t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < x->t.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

/* compares element-for-element; NaN equals NaN */
static bool tt_close(const tt_t* a, const tt_t* b, double rtol, double atol, const char* what) {
  int64_t n = tpurt_tensor_numel(&a->t);
  int64_t idx[TPURT_MAX_DIMS] = {0};
  size_t es = tpurt_dtype_size(a->t.dtype);
  for (int64_t e = 0; e < n; ++e) {
    int64_t oa = 0, ob = 0;
    for (int d = 0; d < a->t.ndim; ++d) { oa += idx[d] * a->t.strides[d]; ob += idx[d] * b->t.strides[d]; }
    const char* pa = (const char*)a->t.data + oa * (int64_t)es;
    const char* pb = (const char*)b->t.data + ob * (int64_t)es;
    bool ok;
    if (tpurt_dtype_is_floating(a->t.dtype)) {
      double x = tpurt_dtype_load_f64(a->t.dtype, pa), y = tpurt_dtype_load_f64(b->t.dtype, pb);
      ok = (isnan(x) && isnan(y)) || x == y || fabs(x - y) <= atol + rtol * fabs(y);
      if (!ok) fprintf(stderr, "%s: element %lld: %.9g vs reference %.9g\n", what, (long long)e, x, y);
    } else {
      int64_t x = tpurt_dtype_load_i64(a->t.dtype, pa), y = tpurt_dtype_load_i64(b->t.dtype, pb);
      ok = x == y;
      if (!ok) fprintf(stderr, "%s: element %lld: %lld vs reference %lld\n", what, (long long)e, (long long)x, (long long)y);
    }
    if (!ok) return false;
    for (int d = a->t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < a->t.sizes[d]) break;
      idx[d] = 0;
    }
  }
  return true;
}

/* ---- the op sweep ---- */
enum { OUT_SAME = 0, OUT_FLOAT, OUT_BOOL };
typedef struct op_case_t {
  const char* name;
  int nin;
  int out;        /* output dtype rule */
  int data[3];    /* per-input data kind */
  int extra;      /* 0 none; 1 alpha=2 scalar; 2 two scalars (-1, 1); 3 one scalar 0.5 */
} op_case_t;

static const op_case_t kOps[] = {
    {"add", 2, OUT_SAME, {0, 0}, 1}, {"sub", 2, OUT_SAME, {0, 0}, 1}, {"mul", 2, OUT_SAME, {0, 0}, 0},
    {"div", 2, OUT_FLOAT, {0, 1}, 0}, {"remainder", 2, OUT_SAME, {0, 1}, 0}, {"fmod", 2, OUT_SAME, {0, 1}, 0},
    {"floor_divide", 2, OUT_SAME, {0, 1}, 0}, {"pow", 2, OUT_SAME, {2, 2}, 0}, {"atan2", 2, OUT_FLOAT, {0, 0}, 0},
    {"maximum", 2, OUT_SAME, {0, 0}, 0}, {"minimum", 2, OUT_SAME, {0, 0}, 0}, {"fmax", 2, OUT_SAME, {0, 0}, 0},
    {"fmin", 2, OUT_SAME, {0, 0}, 0}, {"hypot", 2, OUT_SAME, {0, 0}, 0}, {"copysign", 2, OUT_FLOAT, {0, 0}, 0},
    {"xlogy", 2, OUT_FLOAT, {0, 2}, 0}, {"logaddexp", 2, OUT_FLOAT, {0, 0}, 0}, {"gcd", 2, OUT_SAME, {0, 0}, 0},
    {"lcm", 2, OUT_SAME, {0, 0}, 0}, {"heaviside", 2, OUT_SAME, {0, 0}, 0},
    {"eq", 2, OUT_BOOL, {0, 0}, 0}, {"ne", 2, OUT_BOOL, {0, 0}, 0}, {"lt", 2, OUT_BOOL, {0, 0}, 0},
    {"le", 2, OUT_BOOL, {0, 0}, 0}, {"gt", 2, OUT_BOOL, {0, 0}, 0}, {"ge", 2, OUT_BOOL, {0, 0}, 0},
    {"logical_and", 2, OUT_BOOL, {0, 0}, 0}, {"logical_or", 2, OUT_BOOL, {0, 0}, 0},
    {"logical_xor", 2, OUT_BOOL, {0, 0}, 0}, {"logical_not", 1, OUT_BOOL, {0}, 0},
    {"bitwise_and", 2, OUT_SAME, {0, 0}, 0}, {"bitwise_or", 2, OUT_SAME, {0, 0}, 0},
    {"bitwise_xor", 2, OUT_SAME, {0, 0}, 0}, {"bitwise_not", 1, OUT_SAME, {0}, 0},
    {"bitwise_left_shift", 2, OUT_SAME, {0, 0}, 0}, {"bitwise_right_shift", 2, OUT_SAME, {0, 0}, 0},
    {"neg", 1, OUT_SAME, {0}, 0}, {"abs", 1, OUT_SAME, {0}, 0}, {"sign", 1, OUT_SAME, {0}, 0},
    {"reciprocal", 1, OUT_FLOAT, {1}, 0}, {"sqrt", 1, OUT_FLOAT, {2}, 0}, {"rsqrt", 1, OUT_FLOAT, {2}, 0},
    {"exp", 1, OUT_FLOAT, {0}, 0}, {"exp2", 1, OUT_FLOAT, {0}, 0}, {"expm1", 1, OUT_FLOAT, {0}, 0},
    {"log", 1, OUT_FLOAT, {2}, 0}, {"log2", 1, OUT_FLOAT, {2}, 0}, {"log10", 1, OUT_FLOAT, {2}, 0},
    {"log1p", 1, OUT_FLOAT, {2}, 0}, {"sin", 1, OUT_FLOAT, {0}, 0}, {"cos", 1, OUT_FLOAT, {0}, 0},
    {"tan", 1, OUT_FLOAT, {0}, 0}, {"tanh", 1, OUT_FLOAT, {0}, 0}, {"sinh", 1, OUT_FLOAT, {0}, 0},
    {"cosh", 1, OUT_FLOAT, {0}, 0}, {"atan", 1, OUT_FLOAT, {0}, 0}, {"asinh", 1, OUT_FLOAT, {0}, 0},
    {"sigmoid", 1, OUT_FLOAT, {0}, 0}, {"erf", 1, OUT_FLOAT, {0}, 0}, {"erfc", 1, OUT_FLOAT, {0}, 0},
    {"lgamma", 1, OUT_FLOAT, {2}, 0}, {"digamma", 1, OUT_FLOAT, {2}, 0}, {"sinc", 1, OUT_FLOAT, {0}, 0},
    {"floor", 1, OUT_SAME, {0}, 0}, {"ceil", 1, OUT_SAME, {0}, 0}, {"trunc", 1, OUT_SAME, {0}, 0},
    {"round", 1, OUT_SAME, {0}, 0}, {"frac", 1, OUT_SAME, {0}, 0}, {"isnan", 1, OUT_BOOL, {0}, 0},
    {"signbit", 1, OUT_BOOL, {0}, 0}, {"nan_to_num", 1, OUT_SAME, {0}, 0}, {"relu", 1, OUT_SAME, {0}, 0},
    {"gelu", 1, OUT_SAME, {0}, 0}, {"silu", 1, OUT_SAME, {0}, 0}, {"mish", 1, OUT_SAME, {0}, 0},
    {"hardsigmoid", 1, OUT_SAME, {0}, 0}, {"hardswish", 1, OUT_SAME, {0}, 0}, {"elu", 1, OUT_SAME, {0}, 0},
    {"leaky_relu", 1, OUT_SAME, {0}, 0}, {"hardtanh", 1, OUT_SAME, {0}, 2}, {"softplus", 1, OUT_SAME, {0}, 0},
    {"threshold", 1, OUT_SAME, {0}, 2}, {"hardshrink", 1, OUT_SAME, {0}, 3}, {"softshrink", 1, OUT_SAME, {0}, 3},
    {"threshold_backward", 2, OUT_SAME, {0, 0}, 3}, {"sigmoid_backward", 2, OUT_SAME, {0, 0}, 0},
    {"tanh_backward", 2, OUT_SAME, {0, 0}, 0}, {"silu_backward", 2, OUT_SAME, {0, 0}, 0},
    {"gelu_backward", 2, OUT_SAME, {0, 0}, 0}, {"hardswish_backward", 2, OUT_SAME, {0, 0}, 0},
    {"hardsigmoid_backward", 2, OUT_SAME, {0, 0}, 0}, {"hardtanh_backward", 2, OUT_SAME, {0, 0}, 2},
    {"lerp", 3, OUT_SAME, {0, 0, 0}, 0}, {"addcmul", 3, OUT_SAME, {0, 0, 0}, 1},
    {"addcdiv", 3, OUT_SAME, {0, 0, 1}, 1}, {"where", 3, OUT_SAME, {0, 0, 0}, 0},
    {"clamp", 3, OUT_SAME, {0, 0, 0}, 0}, {"clamp_min", 2, OUT_SAME, {0, 0}, 0},
    {"copy", 2, OUT_SAME, {0, 0}, 0},
};

static const tpurt_dtype_t kDtypes[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT64, TPURT_DTYPE_BFLOAT16,
                                        TPURT_DTYPE_FLOAT16, TPURT_DTYPE_INT64, TPURT_DTYPE_INT32,
                                        TPURT_DTYPE_INT8, TPURT_DTYPE_UINT8, TPURT_DTYPE_BOOL};

static int g_ops_run, g_ops_unimpl;

/* shapes: 0 contiguous, 1 broadcast, 2 transposed, 3 sliced, 4 0-d, 5 empty, 6 large */
static void run_case(const op_case_t* oc, tpurt_dtype_t dt, tpurt_dtype_t dt2, int shape_case) {
  const tpurt_op_def_t* def = tpurt_op_lookup(oc->name);
  if (!def) { fprintf(stderr, "missing op %s\n", oc->name); CHECK(def != NULL); return; }
  int64_t full[3] = {5, 37, 43};
  int nd = 3;
  int64_t sizes[3][3];
  int nds[3];
  int layouts[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k) { nds[k] = 3; memcpy(sizes[k], full, sizeof(full)); }
  if (shape_case == 1) { nds[1] = 2; sizes[1][0] = 1; sizes[1][1] = 43; sizes[0][1] = 1; }
  if (shape_case == 2) { layouts[0] = 1; layouts[1] = 1; }
  if (shape_case == 3) { layouts[0] = 2; layouts[2] = 1; }
  if (shape_case == 4) { nd = 0; for (int k = 0; k < 3; ++k) nds[k] = 0; }
  if (shape_case == 5) { full[1] = 0; for (int k = 0; k < 3; ++k) sizes[k][1] = 0; }
  if (shape_case == 6) { full[0] = 64; full[1] = 1024; full[2] = 33; for (int k = 0; k < 3; ++k) memcpy(sizes[k], full, sizeof(full)); }
  tt_t in[3];
  tpurt_arg_t args[6];
  memset(args, 0, sizeof(args));
  int nargs = 0;
  for (int k = 0; k < oc->nin; ++k) {
    tpurt_dtype_t d = k == 1 ? dt2 : dt;
    if (strcmp(oc->name, "where") == 0 && k == 0) d = TPURT_DTYPE_BOOL;
    tt_make(&in[k], d, nds[k], sizes[k], layouts[k]);
    tt_fill_random(&in[k], oc->data[k]);
    args[nargs].kind = TPURT_ARG_TENSOR;
    args[nargs++].v.tensor = &in[k].t;
  }
  bool is_copy = strcmp(oc->name, "copy") == 0;
  if (oc->extra == 1) { args[nargs].kind = TPURT_ARG_INT; args[nargs++].v.i = 2; }
  if (oc->extra == 2) {
    args[nargs].kind = TPURT_ARG_DOUBLE; args[nargs++].v.d = -1.0;
    args[nargs].kind = TPURT_ARG_DOUBLE; args[nargs++].v.d = 1.0;
  }
  if (oc->extra == 3) { args[nargs].kind = TPURT_ARG_DOUBLE; args[nargs++].v.d = 0.5; }
  /* output dtype, as meta would decide */
  tpurt_dtype_t od = tpurt_dtype_promote(dt, oc->nin > 1 ? dt2 : dt);
  if (strcmp(oc->name, "where") == 0) od = tpurt_dtype_promote(dt2, dt);
  if (oc->out == OUT_FLOAT && !tpurt_dtype_is_floating(od)) od = TPURT_DTYPE_FLOAT32;
  if (oc->out == OUT_BOOL) od = TPURT_DTYPE_BOOL;
  if (is_copy) od = dt; /* copy(self=in0, src=in1) writes self's dtype */
  tt_t out, ref;
  tt_make(&out, od, nd, full, shape_case == 2 ? 1 : 0);
  tt_make(&ref, od, nd, full, 0);
  tpurt_op_call_t call = {.name = oc->name, .overload = "out", .num_args = nargs, .args = args,
                          .num_outputs = 1, .outputs = &out.t};
  tpurt_status_t s1 = tpurt_kernel_run(def->fn, &call);
  call.outputs = &ref.t;
  tpurt_status_t s2 = tpurt_kernel_run(def->reference, &call);
  char what[160];
  snprintf(what, sizeof(what), "%s(%s,%s)->%s shape case %d", oc->name, tpurt_dtype_name(dt),
           tpurt_dtype_name(dt2), tpurt_dtype_name(od), shape_case);
  if (tpurt_status_code(s1) != tpurt_status_code(s2)) {
    fprintf(stderr, "%s: status %s vs reference %s (%s)\n", what, tpurt_status_code_name(tpurt_status_code(s1)),
            tpurt_status_code_name(tpurt_status_code(s2)), tpurt_status_message(s1 ? s1 : s2));
    CHECK(false);
  } else if (s1) {
    if (tpurt_status_code(s1) == TPURT_STATUS_UNIMPLEMENTED) ++g_ops_unimpl;
    else if (strstr(tpurt_status_message(s1), "without overflow")) ++g_ops_unimpl; /* PyTorch raises too */
    else { fprintf(stderr, "%s: %s\n", what, tpurt_status_message(s1)); CHECK(false); }
  } else {
    ++g_ops_run;
    bool low = od == TPURT_DTYPE_BFLOAT16 || od == TPURT_DTYPE_FLOAT16;
    double rtol = low ? 1.6e-2 : (od == TPURT_DTYPE_FLOAT32 ? 2e-5 : 1e-12);
    double atol = low ? 1e-2 : (od == TPURT_DTYPE_FLOAT32 ? 1e-5 : 1e-12);
    CHECK(tt_close(&out, &ref, rtol, atol, what));
  }
  tpurt_status_free(s1);
  tpurt_status_free(s2);
  for (int k = 0; k < oc->nin; ++k) free(in[k].buf);
  free(out.buf);
  free(ref.buf);
}

static void test_sweep(void) {
  for (size_t o = 0; o < sizeof(kOps) / sizeof(kOps[0]); ++o) {
    for (size_t i = 0; i < sizeof(kDtypes) / sizeof(kDtypes[0]); ++i) {
      tpurt_dtype_t dt = kDtypes[i];
      for (int sc = 0; sc < 6; ++sc) run_case(&kOps[o], dt, dt, sc);
      /* mixed dtypes: promotion and casts */
      run_case(&kOps[o], dt, kDtypes[(i + 3) % 9], 1);
    }
    run_case(&kOps[o], TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 6);
  }
  printf("sweep: %d op/dtype/shape cases compared, %d unimplemented combos skipped\n", g_ops_run, g_ops_unimpl);
}

/* ---- known answers ---- */
static tpurt_status_t call1(const char* name, tpurt_arg_t* args, int nargs, tpurt_tensor_t* out) {
  tpurt_op_call_t c = {.name = name, .overload = "", .num_args = nargs, .args = args, .num_outputs = 1,
                       .outputs = out};
  return tpurt_kernel_run(tpurt_op_lookup(name)->fn, &c);
}

static tpurt_tensor_t vec(tpurt_dtype_t dt, void* data, int64_t n) {
  tpurt_tensor_t t = {.data = data, .dtype = dt, .ndim = 1};
  t.sizes[0] = n;
  t.strides[0] = 1;
  return t;
}

static void test_known(void) {
  /* promotion */
  tpurt_tensor_t ti = {.dtype = TPURT_DTYPE_INT32, .ndim = 1}, tb = {.dtype = TPURT_DTYPE_BOOL, .ndim = 1},
                 th = {.dtype = TPURT_DTYPE_FLOAT16, .ndim = 1}, z64 = {.dtype = TPURT_DTYPE_FLOAT64, .ndim = 0};
  tpurt_arg_t ai = {.kind = TPURT_ARG_TENSOR, .v.tensor = &ti}, ab = {.kind = TPURT_ARG_TENSOR, .v.tensor = &tb},
              ah = {.kind = TPURT_ARG_TENSOR, .v.tensor = &th}, az = {.kind = TPURT_ARG_TENSOR, .v.tensor = &z64},
              sd = {.kind = TPURT_ARG_DOUBLE, .v.d = 2.5}, si = {.kind = TPURT_ARG_INT, .v.i = 3};
  const tpurt_arg_t* p1[2] = {&ai, &sd};
  CHECK(tpurt_ew_result_type(p1, 2) == TPURT_DTYPE_FLOAT32);
  const tpurt_arg_t* p2[2] = {&ab, &si};
  CHECK(tpurt_ew_result_type(p2, 2) == TPURT_DTYPE_INT64);
  const tpurt_arg_t* p3[2] = {&ah, &az};
  CHECK(tpurt_ew_result_type(p3, 2) == TPURT_DTYPE_FLOAT16);
  const tpurt_arg_t* p4[2] = {&ai, &si};
  CHECK(tpurt_ew_result_type(p4, 2) == TPURT_DTYPE_INT32);

  /* copy float -> int truncates; float -> bool is v != 0 (NaN true); bf16 rounds */
  float src[5] = {1.7f, -2.7f, 0.0f, NAN, 3.0f};
  int32_t di[5];
  uint8_t db[5];
  tpurt_tensor_t ts = vec(TPURT_DTYPE_FLOAT32, src, 5), tdi = vec(TPURT_DTYPE_INT32, di, 4),
                 tdb = vec(TPURT_DTYPE_BOOL, db, 5);
  tpurt_arg_t a[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tdi}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &ts},
                      {.kind = TPURT_ARG_BOOL}};
  ts.sizes[0] = 4;
  CHECK_OK(call1("copy", a, 3, &tdi));
  CHECK(di[0] == 1 && di[1] == -2 && di[2] == 0);
  ts.sizes[0] = 5;
  a[0].v.tensor = &tdb;
  CHECK_OK(call1("copy", a, 3, &tdb));
  CHECK(db[0] == 1 && db[1] == 1 && db[2] == 0 && db[3] == 1 && db[4] == 1);
  /* fill with a Scalar and with a 0-d tensor */
  float f[7];
  tpurt_tensor_t tf = vec(TPURT_DTYPE_FLOAT32, f, 7);
  tpurt_arg_t fa[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tf}, {.kind = TPURT_ARG_DOUBLE, .v.d = 1.5}};
  CHECK_OK(call1("fill", fa, 2, &tf));
  CHECK(f[0] == 1.5f && f[6] == 1.5f);
  int64_t v64 = -4;
  tpurt_tensor_t t0 = {.data = &v64, .dtype = TPURT_DTYPE_INT64, .ndim = 0};
  fa[1].kind = TPURT_ARG_TENSOR;
  fa[1].v.tensor = &t0;
  CHECK_OK(call1("fill", fa, 2, &tf));
  CHECK(f[3] == -4.0f);
  CHECK_OK(call1("zero", fa, 1, &tf));
  CHECK(f[5] == 0.0f);
  /* integer division by zero is an error, never a crash */
  int64_t x[2] = {7, -7}, y[2] = {2, 0}, q[2];
  tpurt_tensor_t tx = vec(TPURT_DTYPE_INT64, x, 2), ty = vec(TPURT_DTYPE_INT64, y, 2), tq = vec(TPURT_DTYPE_INT64, q, 2);
  tpurt_arg_t da[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tx}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &ty}};
  CHECK_STATUS(call1("floor_divide", da, 2, &tq), INVALID_ARGUMENT);
  y[1] = 2;
  CHECK_OK(call1("floor_divide", da, 2, &tq));
  CHECK(q[0] == 3 && q[1] == -4);
  CHECK_OK(call1("remainder", da, 2, &tq));
  CHECK(q[0] == 1 && q[1] == 1);
  /* maximum propagates NaN; fmax does not */
  float m1[2] = {NAN, 1}, m2[2] = {0, NAN}, mo[2];
  tpurt_tensor_t tm1 = vec(TPURT_DTYPE_FLOAT32, m1, 2), tm2 = vec(TPURT_DTYPE_FLOAT32, m2, 2),
                 tmo = vec(TPURT_DTYPE_FLOAT32, mo, 2);
  tpurt_arg_t ma[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tm1}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &tm2}};
  CHECK_OK(call1("maximum", ma, 2, &tmo));
  CHECK(isnan(mo[0]) && isnan(mo[1]));
  CHECK_OK(call1("fmax", ma, 2, &tmo));
  CHECK(mo[0] == 0 && mo[1] == 1);
  /* round half to even */
  float r[4] = {0.5f, 1.5f, 2.5f, -0.5f}, ro[4];
  tpurt_tensor_t tr = vec(TPURT_DTYPE_FLOAT32, r, 4), tro = vec(TPURT_DTYPE_FLOAT32, ro, 4);
  tpurt_arg_t ra[1] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tr}};
  CHECK_OK(call1("round", ra, 1, &tro));
  CHECK(ro[0] == 0 && ro[1] == 2 && ro[2] == 2 && ro[3] == 0);
  /* broadcast mismatch is INVALID_ARGUMENT */
  float b3[3] = {0};
  tpurt_tensor_t tb3 = vec(TPURT_DTYPE_FLOAT32, b3, 3);
  tpurt_arg_t ba[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tro}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &tb3}};
  CHECK_STATUS(call1("add", ba, 2, &tro), INVALID_ARGUMENT);
  /* exp over its whole float range (the vectorized polynomial): ~1 ulp, exact
   * overflow / underflow / NaN behaviour */
  enum { NE = 4000 };
  static float ex[NE], eo[NE];
  for (int i = 0; i < NE; ++i) ex[i] = -105.0f + 195.0f * i / (NE - 1);
  ex[0] = NAN;
  ex[1] = INFINITY;
  ex[2] = -INFINITY;
  ex[3] = 88.72f;
  tpurt_tensor_t tex = vec(TPURT_DTYPE_FLOAT32, ex, NE), teo = vec(TPURT_DTYPE_FLOAT32, eo, NE);
  tpurt_arg_t ea[1] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tex}};
  CHECK_OK(call1("exp", ea, 1, &teo));
  int exp_bad = 0;
  for (int i = 0; i < NE; ++i) {
    double want = exp((double)ex[i]);
    float wf = (float)want;
    bool ok = (isnan(wf) && isnan(eo[i])) || eo[i] == wf || fabs(eo[i] - want) <= 3e-7 * fabs(want) ||
              (fabs(want) < 1.2e-38 && fabs(eo[i] - want) < 1e-44);
    if (!ok && exp_bad++ < 3) fprintf(stderr, "exp(%.9g) = %.9g, want %.9g\n", ex[i], eo[i], want);
  }
  CHECK(exp_bad == 0);
  /* unsupported dtype combination is UNIMPLEMENTED */
  CHECK_STATUS(call1("bitwise_and", ma, 2, &tmo), UNIMPLEMENTED);
}

/* An activation (its backward when nin == 2: grad g, input x) into out, with its approximate string;
 * or a binary op (g, x) with its alpha where alpha != 0. */
static tpurt_status_t act_call(const char* name, int nin, const char* approx, double alpha, tpurt_tensor_t* g,
                               tpurt_tensor_t* x, tpurt_tensor_t* out) {
  tpurt_arg_t args[3];
  int na = 0;
  if (nin == 2) args[na++] = (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = g};
  args[na++] = (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = x};
  if (approx) args[na++] = (tpurt_arg_t){.kind = TPURT_ARG_STRING, .v.s = approx};
  if (alpha != 0) args[na++] = (tpurt_arg_t){.kind = TPURT_ARG_DOUBLE, .v.d = alpha};
  return call1(name, args, na, out);
}

/* The activations' hand-vectorized float32 loops (ew_math.c, ew_simd.h) against the generated loop
 * of the same expression, which a strided input takes: the same bits at every start offset, output
 * alignment and length (vector heads and tails), with streamed stores on and off, for ordinary and
 * extreme inputs (overflow, denormal results, infinities, NaN; sin and cos past 2^28, where lanes go to glibc).
 * The arithmetic ops (add, sub with an alpha, mul, div) take part for their bf16 loops. */
static void test_vector_loops(void) {
  static const struct { const char* name; int nin; const char* approx; double alpha; } ops[] = {
      {"exp", 1, NULL},  {"tanh", 1, NULL},          {"sigmoid", 1, NULL},       {"erf", 1, NULL},
      {"silu", 1, NULL}, {"gelu", 1, "none"},        {"gelu", 1, "tanh"},        {"silu_backward", 2, NULL},
      {"gelu_backward", 2, "none"}, {"gelu_backward", 2, "tanh"}, {"log", 1, NULL}, {"log1p", 1, NULL}, {"expm1", 1, NULL},
      {"exp2", 1, NULL}, {"atan", 1, NULL}, {"sin", 1, NULL}, {"cos", 1, NULL}, {"erfc", 1, NULL},
      {"log2", 1, NULL}, {"log10", 1, NULL}, {"tan", 1, NULL}, {"sinh", 1, NULL}, {"cosh", 1, NULL},
      {"asin", 1, NULL}, {"acos", 1, NULL}, {"atan2", 2, NULL}, {"sinc", 1, NULL},
      {"asinh", 1, NULL}, {"acosh", 1, NULL}, {"atanh", 1, NULL}, {"erfinv", 1, NULL}, {"lgamma", 1, NULL},
      {"digamma", 1, NULL}, {"add", 2, NULL}, {"add", 2, NULL, -0.37}, {"sub", 2, NULL, 2.5}, {"mul", 2, NULL},
      {"div", 2, NULL}};
  enum { N = 1200 };
  static float x[N + 32], g[N + 32], xs[2 * N], gs[2 * N], yv[N + 32], ys[N + 32];
  const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.72f, 89.5f, -87.5f, -103.98f, -110.0f,
                      1e-40f, -3.9192059f, 0.625f, 0.921875f, 2.0f, 1e30f,
                      3e8f, -268435456.0f, 1e20f, 10.06f, -10.6f, 128.0f, -150.2f, 2.4142137f, 0.5f,
                      -0.75f, 1.0f, 89.5f, 0.1f};
  for (int i = 0; i < N + 32; ++i) {
    x[i] = (float)((test_rand_unit() * 2 - 1) * (i % 7 == 0 ? 120.0 : 6.0));
    g[i] = (float)(test_rand_unit() * 2 - 1);
    if (i % 37 == 5) x[i] = sp[(i / 37) % (sizeof sp / sizeof sp[0])];
  }
  int bad = 0, cases = 0;
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
    const tpurt_op_def_t* def = tpurt_op_lookup(ops[o].name);
    CHECK(def != NULL);
    const int offs[] = {0, 1, 5, 16}, lens[] = {64, 67, 1000, N};
    for (int a = 0; a < 4; ++a)
      for (int l = 0; l < 4; ++l)
        for (int st = 0; st < 2; ++st) {
          const int off = offs[a], len = lens[l] - (lens[l] == N ? off : 0), oo = (a + st) % 3;
          for (int i = 0; i < len; ++i) { xs[2 * i] = x[off + i]; gs[2 * i] = g[off + i]; }
          tpurt_tensor_t tg = vec(TPURT_DTYPE_FLOAT32, g + off, len), tx = vec(TPURT_DTYPE_FLOAT32, x + off, len),
                         tgs = vec(TPURT_DTYPE_FLOAT32, gs, len), txs = vec(TPURT_DTYPE_FLOAT32, xs, len),
                         tv = vec(TPURT_DTYPE_FLOAT32, yv + oo, len), ts = vec(TPURT_DTYPE_FLOAT32, ys, len);
          tgs.strides[0] = txs.strides[0] = 2;
          tpurt_ew_stream_active = st; /* this thread runs the call: below the grain */
          CHECK_OK(act_call(ops[o].name, ops[o].nin, ops[o].approx, ops[o].alpha, &tg, &tx, &tv));
          tpurt_ew_stream_active = false;
          CHECK_OK(act_call(ops[o].name, ops[o].nin, ops[o].approx, ops[o].alpha, &tgs, &txs, &ts));
          for (int i = 0; i < len; ++i) {
            float u = yv[oo + i], w = ys[i];
            if (memcmp(&u, &w, 4) != 0 && !(isnan(u) && isnan(w)) && bad++ < 3)
              fprintf(stderr, "%s%s%s at %d (offset %d, length %d, stream %d): %a vs %a\n", ops[o].name,
                      ops[o].approx ? " " : "", ops[o].approx ? ops[o].approx : "", i, off, len, st, (double)u,
                      (double)w);
          }
          ++cases;
        }
  }
  printf("vector activation loops: %d cases bit-identical to the generated loops\n", cases);
  CHECK(bad == 0);

  /* bfloat16: contiguous operands run the ops' direct bf16 loops (loop_bf16), strided ones are cast
   * through float32 chunks around the float32 loop; the same bits either way */
  static uint16_t hx[N + 32], hg[N + 32], hxs[2 * N], hgs[2 * N], hv[N + 32], hs[N + 32];
  for (int i = 0; i < N + 32; ++i) { hx[i] = tpurt_f32_to_bf16(x[i]); hg[i] = tpurt_f32_to_bf16(g[i]); }
  hx[3] = 0x0001; /* a denormal input, and ones whose results are denormal */
  hx[4] = tpurt_f32_to_bf16(-95.0f);
  bad = cases = 0;
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
    const int offs[] = {0, 1, 3}, lens[] = {15, 64, 67, 1000};
    for (int a = 0; a < 3; ++a)
      for (int l = 0; l < 4; ++l) {
        const int off = offs[a], len = lens[l];
        for (int i = 0; i < len; ++i) { hxs[2 * i] = hx[off + i]; hgs[2 * i] = hg[off + i]; }
        tpurt_tensor_t tg = vec(TPURT_DTYPE_BFLOAT16, hg + off, len), tx = vec(TPURT_DTYPE_BFLOAT16, hx + off, len),
                       tgs = vec(TPURT_DTYPE_BFLOAT16, hgs, len), txs = vec(TPURT_DTYPE_BFLOAT16, hxs, len),
                       tv = vec(TPURT_DTYPE_BFLOAT16, hv + a, len), ts = vec(TPURT_DTYPE_BFLOAT16, hs, len);
        tgs.strides[0] = txs.strides[0] = 2;
        CHECK_OK(act_call(ops[o].name, ops[o].nin, ops[o].approx, ops[o].alpha, &tg, &tx, &tv));
        CHECK_OK(act_call(ops[o].name, ops[o].nin, ops[o].approx, ops[o].alpha, &tgs, &txs, &ts));
        for (int i = 0; i < len; ++i) {
          float u = tpurt_bf16_to_f32(hv[a + i]), w = tpurt_bf16_to_f32(hs[i]);
          if (hv[a + i] != hs[i] && !(isnan(u) && isnan(w)) && bad++ < 3)
            fprintf(stderr, "bf16 %s%s%s at %d (offset %d, length %d): %a vs %a\n", ops[o].name,
                    ops[o].approx ? " " : "", ops[o].approx ? ops[o].approx : "", i, off, len, (double)u, (double)w);
        }
        ++cases;
      }
  }
  printf("vector activation loops, bfloat16: %d cases bit-identical to the cast path\n", cases);
  CHECK(bad == 0);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void time_add(void) {
  const int64_t n = 16 << 20;
  float* a = malloc(n * 4);
  float* b = malloc(n * 4);
  float* c = malloc(n * 4);
  for (int64_t i = 0; i < n; ++i) { a[i] = (float)i; b[i] = 1.0f; c[i] = 0; }
  tpurt_tensor_t ta = vec(TPURT_DTYPE_FLOAT32, a, n), tb = vec(TPURT_DTYPE_FLOAT32, b, n),
                 tc = vec(TPURT_DTYPE_FLOAT32, c, n);
  tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &tb}};
  double best = 1e9, best_copy = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = now_s();
    tpurt_status_t s = call1("add", args, 2, &tc);
    double t1 = now_s();
    tpurt_status_free(s);
    if (t1 - t0 < best) best = t1 - t0;
    tpurt_arg_t cargs[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tc}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}};
    t0 = now_s();
    s = call1("copy", cargs, 2, &tc);
    t1 = now_s();
    tpurt_status_free(s);
    if (t1 - t0 < best_copy) best_copy = t1 - t0;
  }
  CHECK(c[12345] == 12345.0f);
  printf("timing (threads per tpurt_kernel_run): fp32 add 16M: %.2f ms, %.1f GB/s; copy 16M fp32: %.2f ms, %.1f GB/s\n",
         best * 1e3, 3.0 * n * 4 / best / 1e9, best_copy * 1e3, 2.0 * n * 4 / best_copy / 1e9);
  free(a);
  free(b);
  free(c);
}

int main(int argc, char** argv) {
  test_known();
  test_sweep();
  test_vector_loops();
  if (!(argc > 1 && strcmp(argv[1], "--no-timing") == 0)) time_add();
  return test_finish("test_elementwise");
}
