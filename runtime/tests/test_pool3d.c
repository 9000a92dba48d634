/* 3-D pooling kernels (ops/nn/pool3d.c) through the op table: known
 * answers (box averages with and without counted padding, divisor override,
 * adaptive windows, argmax indices), backward as the adjoint of forward
 * (<avg(x), g> == <x, avg_backward(g)>), kernel vs reference, and bad indices
 * / dtypes returning a status. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static tpurt_tensor_t vol5(tpurt_dtype_t dt, void* data, int64_t n, int64_t c, int64_t d, int64_t h, int64_t w) {
  tpurt_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dt;
  t.ndim = 5;
  int64_t s[5] = {n, c, d, h, w}, st = 1;
  for (int i = 4; i >= 0; --i) t.sizes[i] = s[i], t.strides[i] = st, st *= s[i];
  return t;
}
static tpurt_arg_t T(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }
static tpurt_arg_t L(const int64_t* v, int n) { return (tpurt_arg_t){.kind = TPURT_ARG_INT_LIST, .count = n, .v.ints = v}; }
static tpurt_arg_t Bo(bool b) { return (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .v.b = b}; }
static tpurt_arg_t None(void) { return (tpurt_arg_t){.kind = TPURT_ARG_NONE}; }

static tpurt_status_t run(const char* name, bool ref, tpurt_arg_t* a, int na, tpurt_tensor_t* o, int no) {
  const tpurt_op_def_t* d = tpurt_op_lookup(name);
  if (!d) return TPURT_STATUS(NOT_FOUND, "%s", name);
  tpurt_op_call_t c = {.name = name, .overload = "", .num_args = na, .args = a, .num_outputs = no, .outputs = o};
  return tpurt_kernel_run(ref ? d->reference : d->fn, &c);
}

static void test_avg(void) {
  enum { D = 4, H = 5, W = 6, OD = 2, OH = 3, OW = 3 };
  double x[2 * D * H * W], y0[2 * OD * OH * OW], y1[2 * OD * OH * OW], g[2 * OD * OH * OW], gx[2 * D * H * W];
  for (int i = 0; i < 2 * D * H * W; ++i) x[i] = 2.0 * test_rand_unit() - 1.0;
  for (int i = 0; i < 2 * OD * OH * OW; ++i) g[i] = 2.0 * test_rand_unit() - 1.0;
  tpurt_tensor_t X = vol5(TPURT_DTYPE_FLOAT64, x, 1, 2, D, H, W);
  tpurt_tensor_t Y0 = vol5(TPURT_DTYPE_FLOAT64, y0, 1, 2, OD, OH, OW), Y1 = vol5(TPURT_DTYPE_FLOAT64, y1, 1, 2, OD, OH, OW);
  tpurt_tensor_t G = vol5(TPURT_DTYPE_FLOAT64, g, 1, 2, OD, OH, OW), GX = vol5(TPURT_DTYPE_FLOAT64, gx, 1, 2, D, H, W);
  const int64_t k[3] = {3, 3, 3}, s[3] = {2, 2, 2}, p[3] = {1, 1, 1};
  for (int pad_counted = 0; pad_counted < 2; ++pad_counted) {
    tpurt_arg_t a[7] = {T(&X), L(k, 3), L(s, 3), L(p, 3), Bo(false), Bo(pad_counted), None()};
    CHECK_OK(run("avg_pool3d", false, a, 7, &Y0, 1));
    CHECK_OK(run("avg_pool3d", true, a, 7, &Y1, 1));
    CHECK(memcmp(y0, y1, sizeof(y0)) == 0);
    /* output (0, 0, 0) of plane 0: the window [0, 2)^3 of the padded [-1, 2) box */
    double sum = 0;
    for (int d = 0; d < 2; ++d)
      for (int h = 0; h < 2; ++h)
        for (int w = 0; w < 2; ++w) sum += x[(d * H + h) * W + w];
    CHECK(fabs(y0[0] - sum / (pad_counted ? 27.0 : 8.0)) < 1e-12);
    /* backward is the adjoint: <avg(x), g> == <x, avg_bwd(g)> */
    tpurt_arg_t b[8] = {T(&G), T(&X), L(k, 3), L(s, 3), L(p, 3), Bo(false), Bo(pad_counted), None()};
    CHECK_OK(run("avg_pool3d_backward", false, b, 8, &GX, 1));
    double lhs = 0, rhs = 0;
    for (int i = 0; i < 2 * OD * OH * OW; ++i) lhs += y0[i] * g[i];
    for (int i = 0; i < 2 * D * H * W; ++i) rhs += x[i] * gx[i];
    CHECK(fabs(lhs - rhs) < 1e-10);
  }
  /* divisor override */
  tpurt_arg_t dv = {.kind = TPURT_ARG_INT, .v.i = 5};
  tpurt_arg_t a2[7] = {T(&X), L(k, 3), L(s, 3), L(p, 3), Bo(false), Bo(true), dv};
  CHECK_OK(run("avg_pool3d", false, a2, 7, &Y0, 1));
  double sum = 0;
  for (int d = 0; d < 2; ++d)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 2; ++w) sum += x[(d * H + h) * W + w];
  CHECK(fabs(y0[0] - sum / 5.0) < 1e-12);
  /* zero divisor and zero kernel are refused */
  tpurt_arg_t dz = {.kind = TPURT_ARG_INT, .v.i = 0};
  tpurt_arg_t a3[7] = {T(&X), L(k, 3), L(s, 3), L(p, 3), Bo(false), Bo(true), dz};
  CHECK_STATUS(run("avg_pool3d", false, a3, 7, &Y0, 1), INVALID_ARGUMENT);
  /* adaptive: output 2x3x3 of 4x5x6 -> windows [0,2)x[0,2)x[0,2) first */
  tpurt_arg_t ad[2] = {T(&X), L((const int64_t[]){OD, OH, OW}, 3)};
  CHECK_OK(run("adaptive_avg_pool3d", false, ad, 2, &Y0, 1));
  CHECK_OK(run("adaptive_avg_pool3d", true, ad, 2, &Y1, 1));
  CHECK(memcmp(y0, y1, sizeof(y0)) == 0);
  CHECK(fabs(y0[0] - sum / 8.0) < 1e-12);
}

static void test_max(void) {
  enum { D = 3, H = 4, W = 5 };
  float x[D * H * W], y[8], gx[D * H * W], g[8];
  int64_t idx[8];
  for (int i = 0; i < D * H * W; ++i) x[i] = (float)((i * 37) % 61);
  for (int i = 0; i < 8; ++i) g[i] = 1.0f + i;
  tpurt_tensor_t X = vol5(TPURT_DTYPE_FLOAT32, x, 1, 1, D, H, W);
  tpurt_tensor_t outs[2] = {vol5(TPURT_DTYPE_FLOAT32, y, 1, 1, 2, 2, 2), vol5(TPURT_DTYPE_INT64, idx, 1, 1, 2, 2, 2)};
  tpurt_arg_t a[2] = {T(&X), L((const int64_t[]){2, 2, 2}, 3)};
  CHECK_OK(run("adaptive_max_pool3d", false, a, 2, outs, 2));
  int ok = 1;
  for (int o = 0; o < 8; ++o) ok &= x[idx[o]] == y[o]; /* each index points at its max */
  CHECK(ok);
  /* backward scatters g into the argmax positions */
  tpurt_tensor_t G = vol5(TPURT_DTYPE_FLOAT32, g, 1, 1, 2, 2, 2), GX = vol5(TPURT_DTYPE_FLOAT32, gx, 1, 1, D, H, W);
  tpurt_arg_t b[3] = {T(&G), T(&X), T(&outs[1])};
  CHECK_OK(run("adaptive_max_pool3d_backward", false, b, 3, &GX, 1));
  double tot = 0;
  for (int i = 0; i < D * H * W; ++i) tot += gx[i];
  CHECK(tot == 36.0);
  idx[3] = 999;
  CHECK_STATUS(run("adaptive_max_pool3d_backward", false, b, 3, &GX, 1), OUT_OF_RANGE);
  /* integer adaptive max is not implemented: a status */
  int64_t xi[D * H * W] = {0}, yi[8];
  tpurt_tensor_t XI = vol5(TPURT_DTYPE_INT64, xi, 1, 1, D, H, W);
  tpurt_tensor_t oi[2] = {vol5(TPURT_DTYPE_INT64, yi, 1, 1, 2, 2, 2), outs[1]};
  tpurt_arg_t ai[2] = {T(&XI), L((const int64_t[]){2, 2, 2}, 3)};
  CHECK_STATUS(run("adaptive_max_pool3d", false, ai, 2, oi, 2), UNIMPLEMENTED);
}

int main(void) {
  test_avg();
  test_max();
  return test_finish("test_pool3d");
}
