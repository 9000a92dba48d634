/* Convolution (forward/backward, 1-3 spatial dims, stride, padding, dilation,
 * groups, transposed, channels-last), pooling and upsampling kernels:
 * optimized vs the direct-loop references, across float dtypes. */
#include "linalg_test_common.h"

static tpurt_arg_t ilist(const int64_t* v, int n) {
  return (tpurt_arg_t){.kind = TPURT_ARG_INT_LIST, .count = n, .v.ints = v};
}
static tpurt_arg_t none_arg(void) { return (tpurt_arg_t){.kind = TPURT_ARG_NONE}; }

typedef struct conv_case_t {
  int nsp;
  int64_t N, Cin, Cout, G;
  int64_t in[3], k[3], st[3], pad[3], dil[3], opad[3];
  bool transposed, bias, channels_last;
} conv_case_t;

static void conv_case(tpurt_dtype_t dt, const conv_case_t* c) {
  int nsp = c->nsp, nd = nsp + 2;
  int64_t xs[5] = {c->N, c->Cin}, ws[5], os[5] = {c->N, c->Cout};
  if (!c->transposed) ws[0] = c->Cout, ws[1] = c->Cin / c->G;
  else ws[0] = c->Cin, ws[1] = c->Cout / c->G;
  for (int d = 0; d < nsp; ++d) {
    xs[2 + d] = c->in[d];
    ws[2 + d] = c->k[d];
    os[2 + d] = c->transposed
                    ? (c->in[d] - 1) * c->st[d] - 2 * c->pad[d] + c->dil[d] * (c->k[d] - 1) + c->opad[d] + 1
                    : (c->in[d] + 2 * c->pad[d] - c->dil[d] * (c->k[d] - 1) - 1) / c->st[d] + 1;
  }
  int order[5] = {0, 1, 2, 3, 4};
  if (c->channels_last) {
    for (int d = 0; d < nsp; ++d) order[1 + d] = 2 + d;
    order[nd - 1] = 1;
  }
  tbuf_t x = mk_order(dt, nd, xs, order), w = mk(dt, nd, ws, false, 0);
  tbuf_t b = mk(dt, 1, (int64_t[]){c->Cout}, false, 0);
  tbuf_t o = mk_order(dt, nd, os, order);
  tpurt_arg_t args[10] = {targ(&x), targ(&w), c->bias ? targ(&b) : none_arg(),
                          ilist(c->st, nsp), ilist(c->pad, nsp), ilist(c->dil, nsp),
                          barg(c->transposed), ilist(c->opad, nsp), iarg(c->G)};
  double tol = tol_for(dt) * 20;
  check_op("convolution_overrideable", "", args, 9, &o, 1, tol);
  /* backward: grad_output shaped like the output */
  tbuf_t go = mk_order(dt, nd, os, order);
  tbuf_t outs[3] = {mk_order(dt, nd, xs, order), mk(dt, nd, ws, false, 0),
                    mk(dt, 1, (int64_t[]){c->Cout}, false, 0)};
  bool mask[3] = {true, true, c->bias};
  tpurt_arg_t bargs[10] = {targ(&go), targ(&x), targ(&w), ilist(c->st, nsp), ilist(c->pad, nsp),
                           ilist(c->dil, nsp), barg(c->transposed), ilist(c->opad, nsp), iarg(c->G),
                           {.kind = TPURT_ARG_BOOL_LIST, .count = 3, .v.bools = mask}};
  check_op("convolution_backward_overrideable", "", bargs, 10, outs, 3, tol * 5);
  free(x.mem), free(w.mem), free(b.mem), free(o.mem), free(go.mem);
  for (int i = 0; i < 3; ++i) free(outs[i].mem);
}

static void test_conv(void) {
  const conv_case_t cases[] = {
      /* nsp N Cin Cout G  in        k        st       pad      dil      opad    T  bias  CL */
      {2, 2, 3, 4, 1, {7, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, false, true, false},
      {2, 3, 4, 6, 2, {9, 8}, {3, 2}, {2, 1}, {1, 0}, {1, 2}, {0, 0}, false, true, false},
      {2, 2, 4, 8, 1, {5, 5}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, {0, 0}, false, false, false},
      {2, 2, 4, 8, 4, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, false, true, true},
      {2, 2, 3, 5, 1, {6, 6}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, {0, 0}, false, true, true},
      {1, 3, 2, 3, 1, {11}, {3}, {2}, {2}, {1}, {0}, false, true, false},
      {3, 1, 2, 3, 1, {4, 5, 3}, {2, 3, 1}, {1, 2, 1}, {1, 1, 0}, {1, 1, 1}, {0, 0, 0}, false, true, false},
      {2, 2, 4, 6, 2, {4, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 0}, true, true, false},
      {1, 2, 3, 2, 1, {6}, {4}, {3}, {1}, {2}, {2}, true, false, false},
      {2, 1, 1, 1, 1, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, {0, 0}, false, true, false},
      {2, 40, 3, 4, 1, {12, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, false, true, false},
  };
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT64, TPURT_DTYPE_BFLOAT16,
                               TPURT_DTYPE_FLOAT16};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); ++d)
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) conv_case(dts[d], &cases[i]);
  /* bad channel count names the op */
  {
    conv_case_t c = cases[0];
    int64_t xs[4] = {2, 5, 7, 6}, ws[4] = {4, 3, 3, 3}, os[4] = {2, 4, 7, 6};
    tbuf_t x = mk(TPURT_DTYPE_FLOAT32, 4, xs, false, 0), w = mk(TPURT_DTYPE_FLOAT32, 4, ws, false, 0);
    tbuf_t o = mk(TPURT_DTYPE_FLOAT32, 4, os, false, 0);
    tpurt_arg_t args[9] = {targ(&x), targ(&w), none_arg(), ilist(c.st, 2), ilist(c.pad, 2),
                           ilist(c.dil, 2), barg(false), ilist(c.opad, 2), iarg(1)};
    tpurt_op_call_t call = {"convolution_overrideable", "", 9, args, 1, &o.t};
    CHECK_STATUS(tpurt_kernel_run(tpurt_op_lookup("convolution_overrideable")->fn, &call), INVALID_ARGUMENT);
    free(x.mem), free(w.mem), free(o.mem);
  }
}

static void test_pool(void);

int main(void) {
  test_conv();
  test_pool();
  return test_finish("test_conv");
}

static tbuf_t from_f(const float* v, int nd, const int64_t* sizes) {
  tbuf_t b = mk(TPURT_DTYPE_FLOAT32, nd, sizes, false, 0);
  memcpy(b.mem, v, (size_t)tpurt_tensor_numel(&b.t) * 4);
  return b;
}

static void test_pool(void) {
  /* known answers on one 4x4 plane: x[h][w] = 4h + w */
  float x16[16];
  for (int i = 0; i < 16; ++i) x16[i] = (float)i;
  int64_t s4[4] = {1, 1, 4, 4}, s2[4] = {1, 1, 2, 2};
  tbuf_t x = from_f(x16, 4, s4);
  tbuf_t outs[2] = {mk(TPURT_DTYPE_FLOAT32, 4, s2, false, 0), mk(TPURT_DTYPE_INT64, 4, s2, false, 0)};
  int64_t k2[2] = {2, 2}, none[1] = {0}, zero[2] = {0, 0}, one[2] = {1, 1};
  tpurt_arg_t args[8] = {targ(&x), ilist(k2, 2), ilist(none, 0), ilist(zero, 2), ilist(one, 2), barg(false)};
  tpurt_op_call_t c = {"max_pool2d_with_indices", "out", 6, args, 2, (tpurt_tensor_t[]){outs[0].t, outs[1].t}};
  CHECK_OK(tpurt_kernel_run(tpurt_op_lookup("max_pool2d_with_indices")->fn, &c));
  const float* o = outs[0].mem;
  const int64_t* ix = outs[1].mem;
  CHECK(o[0] == 5 && o[1] == 7 && o[2] == 13 && o[3] == 15);
  CHECK(ix[0] == 5 && ix[1] == 7 && ix[2] == 13 && ix[3] == 15);
  /* avg, padding 1, count_include_pad false vs true */
  int64_t s3[4] = {1, 1, 3, 3}, p1[2] = {1, 1};
  tbuf_t a = mk(TPURT_DTYPE_FLOAT32, 4, s3, false, 0);
  tpurt_arg_t aargs[7] = {targ(&x), ilist(k2, 2), ilist(k2, 2), ilist(p1, 2), barg(true), barg(false),
                          none_arg()};
  tpurt_op_call_t ac = {"avg_pool2d", "out", 7, aargs, 1, &a.t};
  CHECK_OK(tpurt_kernel_run(tpurt_op_lookup("avg_pool2d")->fn, &ac));
  o = a.mem; /* windows: {0}, {1,2}, {3}, ... */
  CHECK(o[0] == 0 && o[1] == 1.5f && o[2] == 3 && o[4] == (5 + 6 + 9 + 10) / 4.0f);
  aargs[5] = barg(true);
  CHECK_OK(tpurt_kernel_run(tpurt_op_lookup("avg_pool2d")->fn, &ac));
  CHECK(o[0] == 0 && o[1] == 0.75f);
  aargs[6] = iarg(2);
  CHECK_OK(tpurt_kernel_run(tpurt_op_lookup("avg_pool2d")->fn, &ac));
  CHECK(o[1] == 1.5f && o[4] == 15.0f);
  /* adaptive avg 4x4 -> 3x3: windows [0,2),[1,3),[2,4) */
  tpurt_arg_t adargs[2] = {targ(&x), ilist((int64_t[]){3, 3}, 2)};
  tpurt_op_call_t adc = {"_adaptive_avg_pool2d", "", 2, adargs, 1, &a.t};
  CHECK_OK(tpurt_kernel_run(tpurt_op_lookup("_adaptive_avg_pool2d")->fn, &adc));
  CHECK(o[0] == 2.5f && o[4] == 7.5f && o[8] == 12.5f);
  /* nearest 2x up of a 2x2 plane; bilinear align_corners of it */
  tbuf_t u = mk(TPURT_DTYPE_FLOAT32, 4, s4, false, 0);
  float x4[4] = {0, 1, 2, 3};
  tbuf_t x2 = from_f(x4, 4, s2);
  tpurt_arg_t uargs[5] = {targ(&x2), ilist((int64_t[]){4, 4}, 2), none_arg(), none_arg()};
  tpurt_op_call_t uc = {"upsample_nearest2d", "out", 4, uargs, 1, &u.t};
  CHECK_OK(tpurt_kernel_run(tpurt_op_lookup("upsample_nearest2d")->fn, &uc));
  o = u.mem;
  CHECK(o[0] == 0 && o[1] == 0 && o[2] == 1 && o[5] == 0 && o[8] == 2 && o[15] == 3);
  tpurt_arg_t bargs[5] = {targ(&x2), ilist((int64_t[]){4, 4}, 2), barg(true), none_arg(), none_arg()};
  tpurt_op_call_t bc = {"upsample_bilinear2d", "out", 5, bargs, 1, &u.t};
  CHECK_OK(tpurt_kernel_run(tpurt_op_lookup("upsample_bilinear2d")->fn, &bc));
  CHECK(fabsf(o[1] - 1.0f / 3) < 1e-6f && o[3] == 1 && o[12] == 2 && fabsf(o[15] - 3) < 1e-6f);
  /* a bad index in backward is OUT_OF_RANGE, not a wild write */
  ((int64_t*)outs[1].mem)[2] = 99;
  tbuf_t gi = mk(TPURT_DTYPE_FLOAT32, 4, s4, false, 0);
  tpurt_arg_t mb[8] = {targ(&outs[0]), targ(&x), ilist(k2, 2), ilist(k2, 2), ilist(zero, 2), ilist(one, 2),
                       barg(false), targ(&outs[1])};
  tpurt_op_call_t mbc = {"max_pool2d_with_indices_backward", "grad_input", 8, mb, 1, &gi.t};
  CHECK_STATUS(tpurt_kernel_run(tpurt_op_lookup("max_pool2d_with_indices_backward")->fn, &mbc), OUT_OF_RANGE);
  free(x.mem), free(outs[0].mem), free(outs[1].mem), free(a.mem), free(u.mem), free(x2.mem), free(gi.mem);

  /* optimized (parallel over planes) vs reference, strided and channels-last, all float dtypes */
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT64, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT16};
  for (size_t d = 0; d < 4; ++d) {
    tpurt_dtype_t dt = dts[d];
    int cl[4] = {0, 2, 3, 1};
    int64_t is[4] = {2, 3, 9, 8}, os[4] = {2, 3, 5, 4}, us[4] = {2, 3, 13, 19};
    tbuf_t in = mk_order(dt, 4, is, cl), go = mk(dt, 4, os, true, 0), gu = mk(dt, 4, us, false, 0);
    tbuf_t o2[2] = {mk(dt, 4, os, false, 0), mk(TPURT_DTYPE_INT64, 4, os, false, 0)};
    tbuf_t gin = mk_order(dt, 4, is, cl), uo = mk(dt, 4, us, false, 0);
    int64_t k3[2] = {3, 2}, st[2] = {2, 2}, pd[2] = {1, 1}, dl[2] = {1, 2};
    tpurt_arg_t ma[6] = {targ(&in), ilist(k3, 2), ilist(st, 2), ilist(pd, 2), ilist(dl, 2), barg(true)};
    check_op("max_pool2d_with_indices", "out", ma, 6, o2, 2, 0);
    /* real indices from the forward for the backward */
    tpurt_op_call_t mc = {"max_pool2d_with_indices", "out", 6, ma, 2, (tpurt_tensor_t[]){o2[0].t, o2[1].t}};
    CHECK_OK(tpurt_kernel_run(tpurt_op_lookup("max_pool2d_with_indices")->fn, &mc));
    tpurt_arg_t mba[8] = {targ(&go), targ(&in), ilist(k3, 2), ilist(st, 2), ilist(pd, 2), ilist(dl, 2),
                          barg(true), targ(&o2[1])};
    check_op("max_pool2d_with_indices_backward", "grad_input", mba, 8, &gin, 1, tol_for(dt));
    tpurt_arg_t aa[7] = {targ(&in), ilist(k3, 2), ilist(st, 2), ilist(pd, 2), barg(true), barg(false), none_arg()};
    check_op("avg_pool2d", "out", aa, 7, &o2[0], 1, tol_for(dt));
    tpurt_arg_t aba[8] = {targ(&go), targ(&in), ilist(k3, 2), ilist(st, 2), ilist(pd, 2), barg(true), barg(true),
                          none_arg()};
    check_op("avg_pool2d_backward", "grad_input", aba, 8, &gin, 1, tol_for(dt));
    tpurt_arg_t ada[2] = {targ(&in), ilist(os + 2, 2)};
    check_op("_adaptive_avg_pool2d", "", ada, 2, &o2[0], 1, tol_for(dt));
    check_op("adaptive_max_pool2d", "out", ada, 2, o2, 2, 0);
    tpurt_arg_t adb[2] = {targ(&go), targ(&in)};
    check_op("_adaptive_avg_pool2d_backward", "", adb, 2, &gin, 1, tol_for(dt));
    tpurt_arg_t ua[5] = {targ(&in), ilist(us + 2, 2), barg(false), none_arg(), none_arg()};
    check_op("upsample_bilinear2d", "out", ua, 5, &uo, 1, tol_for(dt));
    tpurt_arg_t ub[6] = {targ(&gu), ilist(us + 2, 2), ilist(is, 4), barg(false), none_arg(), none_arg()};
    check_op("upsample_bilinear2d_backward", "grad_input", ub, 6, &gin, 1, tol_for(dt));
    tpurt_arg_t na[4] = {targ(&in), ilist(us + 2, 2), none_arg(), none_arg()};
    check_op("upsample_nearest2d", "out", na, 4, &uo, 1, 0);
    tpurt_arg_t nb[5] = {targ(&gu), ilist(us + 2, 2), ilist(is, 4), none_arg(), none_arg()};
    check_op("upsample_nearest2d_backward", "grad_input", nb, 5, &gin, 1, tol_for(dt));
    tbuf_t* all[] = {&in, &go, &gu, &o2[0], &o2[1], &gin, &uo};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) free(all[i]->mem);
  }
}
