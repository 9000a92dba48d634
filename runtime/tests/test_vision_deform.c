/* torchvision's ps_roi_align / ps_roi_pool / deform_conv2d kernels
 * (runtime/ops/vision): known answers, each backward against its forward
 * (the adjoint identity <G, F(v)> = <F^T(G), v> for the parts linear in the
 * input; central differences in float64 for the offsets), the optimized
 * deform_conv2d against its direct-loop reference across dtypes, groups,
 * offset groups, masks, strides and dilations, and refusals of bad shapes. */
#include "linalg_test_common.h"

static tbuf_t zeros(tpurt_dtype_t dt, int nd, const int64_t* sizes) {
  tbuf_t b = mk(dt, nd, sizes, false, 0);
  memset(b.mem, 0, (size_t)tpurt_tensor_numel(&b.t) * tpurt_dtype_size(dt));
  return b;
}
static double getd(const tbuf_t* b, int64_t i) { return tpurt_dtype_load_f64(b->t.dtype, (char*)b->mem + i * tpurt_dtype_size(b->t.dtype)); }
static void setd(tbuf_t* b, int64_t i, double v) { tpurt_dtype_store_f64(b->t.dtype, (char*)b->mem + i * tpurt_dtype_size(b->t.dtype), v); }
static double dot(const tbuf_t* a, const tbuf_t* b) {
  double s = 0;
  for (int64_t i = 0; i < tpurt_tensor_numel(&a->t); ++i) s += getd(a, i) * getd(b, i);
  return s;
}
static tpurt_status_t run(const char* name, bool ref, tpurt_arg_t* args, int nargs, tbuf_t* outs, int nout) {
  tpurt_tensor_t o[5];
  for (int i = 0; i < nout; ++i) o[i] = outs[i].t;
  return test_op_run(name, ref, args, nargs, o, nout);
}


/* check_op for up to 5 outputs: the optimized kernel against its reference */
static void check5(const char* name, tpurt_arg_t* args, int nargs, tbuf_t* outs, int nouts, double tol) {
  const tpurt_op_def_t* def = tpurt_op_lookup(name);
  CHECK(def != NULL);
  if (!def) return;
  tpurt_tensor_t o1[5], o2[5];
  void* m2[5];
  for (int i = 0; i < nouts; ++i) {
    o1[i] = o2[i] = outs[i].t;
    size_t bytes = (size_t)span(&outs[i].t) * tpurt_dtype_size(outs[i].t.dtype);
    m2[i] = calloc(bytes ? bytes : 1, 1);
    o2[i].data = m2[i];
  }
  tpurt_op_call_t c1 = {name, "", nargs, args, nouts, o1}, c2 = {name, "", nargs, args, nouts, o2};
  CHECK_OK(tpurt_kernel_run(def->fn, &c1));
  CHECK_OK(tpurt_kernel_run(def->reference, &c2));
  for (int i = 0; i < nouts; ++i) {
    double err = test_max_err(outs[i].t.dtype, outs[i].mem, m2[i], span(&outs[i].t), 1.0);
    if (!(err <= tol)) fprintf(stderr, "%s output %d (%s): err %g\n", name, i, tpurt_dtype_name(outs[i].t.dtype), err);
    CHECK(err <= tol);
    free(m2[i]);
  }
}

/* ---------------- ps_roi_align / ps_roi_pool ---------------- */

static void test_ps_known(void) {
  /* ps_roi_align of v = h + 2w over roi (1, 1)-(3, 3), one bin: the mean of samples at
   * (1|2, 1|2) is v(1.5, 1.5) = 4.5 */
  int64_t xs[4] = {1, 1, 4, 4}, rs[2] = {1, 5}, os[4] = {1, 1, 1, 1};
  tbuf_t x = zeros(TPURT_DTYPE_FLOAT64, 4, xs), r = zeros(TPURT_DTYPE_FLOAT64, 2, rs);
  for (int h = 0; h < 4; ++h)
    for (int w = 0; w < 4; ++w) setd(&x, h * 4 + w, h + 2 * w);
  double roi[5] = {0, 1, 1, 3, 3};
  for (int i = 0; i < 5; ++i) setd(&r, i, roi[i]);
  tbuf_t outs[2] = {zeros(TPURT_DTYPE_FLOAT64, 4, os), zeros(TPURT_DTYPE_INT32, 4, os)};
  tpurt_arg_t a[6] = {targ(&x), targ(&r), darg(1.0), iarg(1), iarg(1), iarg(-1)};
  CHECK_OK(run("tv_ps_roi_align", false, a, 6, outs, 2));
  CHECK(fabs(getd(&outs[0], 0) - 4.5) < 1e-12);
  free(x.mem), free(r.mem), free(outs[0].mem), free(outs[1].mem);

  /* ps_roi_pool, 2x2 bins over 4 channels of v = 4h + w + 100c, roi (0, 0)-(3, 3): bin (ph, pw)
   * reads channel 2ph + pw over rows/cols [0, 2) or [1, 3) (the forward clips at H - 1) */
  int64_t xs2[4] = {1, 4, 4, 4}, os2[4] = {1, 1, 2, 2};
  x = zeros(TPURT_DTYPE_FLOAT32, 4, xs2), r = zeros(TPURT_DTYPE_FLOAT32, 2, rs);
  for (int c = 0; c < 4; ++c)
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 4; ++w) setd(&x, (c * 4 + h) * 4 + w, 4 * h + w + 100 * c);
  double roi2[5] = {0, 0, 0, 3, 3};
  for (int i = 0; i < 5; ++i) setd(&r, i, roi2[i]);
  tbuf_t o2[2] = {zeros(TPURT_DTYPE_FLOAT32, 4, os2), zeros(TPURT_DTYPE_INT32, 4, os2)};
  tpurt_arg_t a2[5] = {targ(&x), targ(&r), darg(1.0), iarg(2), iarg(2)};
  CHECK_OK(run("tv_ps_roi_pool", false, a2, 5, o2, 2));
  CHECK(getd(&o2[0], 0) == 2.5);          /* mean(0, 1, 4, 5) */
  CHECK(getd(&o2[0], 3) == 307.5);        /* channel 3, mean(5, 6, 9, 10) + 300 */
  CHECK(getd(&o2[1], 0) == 0 && getd(&o2[1], 1) == 1 && getd(&o2[1], 3) == 3);
  /* a bad batch index and a bad channel count are refused */
  setd(&r, 0, 1);
  CHECK_STATUS(run("tv_ps_roi_pool", false, a2, 5, o2, 2), OUT_OF_RANGE);
  setd(&r, 0, 0);
  tpurt_arg_t a3[5] = {targ(&x), targ(&r), darg(1.0), iarg(3), iarg(1)};
  CHECK_STATUS(run("tv_ps_roi_pool", false, a3, 5, o2, 2), INVALID_ARGUMENT);
  free(x.mem), free(r.mem), free(o2[0].mem), free(o2[1].mem);
}

/* <G, F(v)> == <F^T(G), v>: both ops are linear in the input */
static void ps_adjoint(bool align, tpurt_dtype_t dt, int64_t PH, int64_t PW, int64_t sampling, double scale) {
  int64_t B = 2, Cout = 3, C = Cout * PH * PW, H = 9, W = 8, K = 5;
  int64_t xs[4] = {B, C, H, W}, rs[2] = {K, 5}, os[4] = {K, Cout, PH, PW};
  tbuf_t v = mk(dt, 4, xs, false, 0), r = zeros(dt, 2, rs), g = mk(dt, 4, os, false, 0);
  for (int64_t k = 0; k < K; ++k) {
    /* ps_roi_align: rois reaching past the image. ps_roi_pool: rois inside rows/cols [0, H-2],
     * since torchvision's CPU forward clips windows at H - 1 (never reading the last row and
     * column) where its backward clips at H, so the two are adjoint only away from that edge. */
    double ext = align ? 1.0 : 0.5, lo = align ? -1.0 : 0.0;
    double x1 = test_rand_unit() * (W - 2) * ext / scale, y1 = test_rand_unit() * (H - 2) * ext / scale;
    double x2 = x1 + test_rand_unit() * (W - 2) * ext / scale, y2 = y1 + test_rand_unit() * (H - 2) * ext / scale;
    double roi[5] = {(double)(k % B), x1 + lo, y1 + lo, x2, y2};
    for (int i = 0; i < 5; ++i) setd(&r, k * 5 + i, roi[i]);
  }
  tbuf_t outs[2] = {zeros(dt, 4, os), zeros(TPURT_DTYPE_INT32, 4, os)};
  const char* f = align ? "tv_ps_roi_align" : "tv_ps_roi_pool";
  const char* b = align ? "tv_ps_roi_align_backward" : "tv_ps_roi_pool_backward";
  tpurt_arg_t a[6] = {targ(&v), targ(&r), darg(scale), iarg(PH), iarg(PW), iarg(sampling)};
  CHECK_OK(run(f, false, a, align ? 6 : 5, outs, 2));
  tbuf_t gi = mk(dt, 4, xs, false, 0); /* garbage: the backward zeroes it */
  tpurt_arg_t ba[11] = {targ(&g), targ(&r), targ(&outs[1]), darg(scale), iarg(PH), iarg(PW)};
  int n = 6;
  if (align) ba[n++] = iarg(sampling);
  ba[n++] = iarg(B), ba[n++] = iarg(C), ba[n++] = iarg(H), ba[n++] = iarg(W);
  CHECK_OK(run(b, false, ba, n, &gi, 1));
  double lhs = dot(&g, &outs[0]), rhs = dot(&gi, &v);
  double tol = dt == TPURT_DTYPE_FLOAT64 ? 1e-12 : 1e-4;
  if (!(fabs(lhs - rhs) <= tol * (1 + fabs(lhs))))
    fprintf(stderr, "%s adjoint (%s): %g vs %g\n", f, tpurt_dtype_name(dt), lhs, rhs);
  CHECK(fabs(lhs - rhs) <= tol * (1 + fabs(lhs)));
  free(v.mem), free(r.mem), free(g.mem), free(outs[0].mem), free(outs[1].mem), free(gi.mem);
}

/* ---------------- deform_conv2d ---------------- */

typedef struct dcase_t {
  int64_t N, C, Co, H, W, kh, kw, sh, sw, ph, pw, dh, dw, G, OG;
  bool mask;
} dcase_t;

typedef struct dbufs_t {
  tbuf_t x, w, off, mask, bias;
  int64_t Ho, Wo;
  tpurt_arg_t args[15];
} dbufs_t;

static void dc_make(const dcase_t* c, tpurt_dtype_t dt, dbufs_t* b) {
  b->Ho = (c->H + 2 * c->ph - (c->dh * (c->kh - 1) + 1)) / c->sh + 1;
  b->Wo = (c->W + 2 * c->pw - (c->dw * (c->kw - 1) + 1)) / c->sw + 1;
  int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->Co, c->C / c->G, c->kh, c->kw};
  int64_t os[4] = {c->N, c->OG * 2 * c->kh * c->kw, b->Ho, b->Wo}, ms[4] = {c->N, c->OG * c->kh * c->kw, b->Ho, b->Wo};
  int64_t m2[2] = {c->N, 1}, bs[1] = {c->Co};
  b->x = mk(dt, 4, xs, false, 0), b->w = mk(dt, 4, ws, false, 0), b->off = mk(dt, 4, os, false, 0);
  for (int64_t i = 0; i < tpurt_tensor_numel(&b->off.t); ++i) setd(&b->off, i, 1.7 * getd(&b->off, i) + 0.01);
  b->mask = c->mask ? mk(dt, 4, ms, false, 0) : zeros(dt, 2, m2);
  b->bias = mk(dt, 1, bs, false, 0);
  tpurt_arg_t a[14] = {targ(&b->x), targ(&b->w), targ(&b->off), targ(&b->mask), targ(&b->bias),
                       iarg(c->sh), iarg(c->sw), iarg(c->ph), iarg(c->pw), iarg(c->dh), iarg(c->dw),
                       iarg(c->G), iarg(c->OG), barg(c->mask)};
  memcpy(b->args, a, sizeof a);
}
static void dc_free(dbufs_t* b) { free(b->x.mem), free(b->w.mem), free(b->off.mem), free(b->mask.mem), free(b->bias.mem); }

static void dc_vs_ref(const dcase_t* c, tpurt_dtype_t dt) {
  dbufs_t b;
  dc_make(c, dt, &b);
  int64_t ys[4] = {c->N, c->Co, b.Ho, b.Wo};
  tbuf_t y = zeros(dt, 4, ys);
  double tol = tol_for(dt) * 50;
  check5("tv_deform_conv2d", b.args, 14, &y, 1, tol);
  tbuf_t g = mk(dt, 4, ys, false, 0);
  tpurt_arg_t ba[15];
  ba[0] = targ(&g);
  memcpy(ba + 1, b.args, sizeof(tpurt_arg_t) * 14);
  tbuf_t outs[5] = {zeros(dt, b.x.t.ndim, b.x.t.sizes), zeros(dt, 4, b.w.t.sizes), zeros(dt, 4, b.off.t.sizes),
                    zeros(dt, b.mask.t.ndim, b.mask.t.sizes), zeros(dt, 1, b.bias.t.sizes)};
  check5("tv_deform_conv2d_backward", ba, 15, outs, 5, tol * 4);
  for (int i = 0; i < 5; ++i) free(outs[i].mem);
  free(y.mem), free(g.mem);
  dc_free(&b);
}

/* float64: the backward's grads against the forward. input, weight, mask and bias enter linearly
 * (adjoint identity, exact); offsets by central differences along a random direction. */
static void dc_grads(const dcase_t* c) {
  tpurt_dtype_t dt = TPURT_DTYPE_FLOAT64;
  dbufs_t b;
  dc_make(c, dt, &b);
  int64_t ys[4] = {c->N, c->Co, b.Ho, b.Wo};
  tbuf_t g = mk(dt, 4, ys, false, 0), y = zeros(dt, 4, ys);
  tpurt_arg_t ba[15];
  ba[0] = targ(&g);
  memcpy(ba + 1, b.args, sizeof(tpurt_arg_t) * 14);
  tbuf_t outs[5] = {zeros(dt, b.x.t.ndim, b.x.t.sizes), zeros(dt, 4, b.w.t.sizes), zeros(dt, 4, b.off.t.sizes),
                    zeros(dt, b.mask.t.ndim, b.mask.t.sizes), zeros(dt, 1, b.bias.t.sizes)};
  CHECK_OK(run("tv_deform_conv2d_backward", false, ba, 15, outs, 5));
  tbuf_t* params[5] = {&b.x, &b.w, &b.off, &b.mask, &b.bias};
  for (int p = 0; p < 5; ++p) {
    if (p == 3 && !c->mask) { /* unused mask: zero grad */
      CHECK(getd(&outs[3], 0) == 0);
      continue;
    }
    tbuf_t* t = params[p];
    int64_t n = tpurt_tensor_numel(&t->t);
    double* saved = malloc((size_t)n * sizeof(double));
    double* dir = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; ++i) saved[i] = getd(t, i), dir[i] = 2 * test_rand_unit() - 1;
    double eps = 1e-6, fd[2];
    for (int s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < n; ++i) setd(t, i, saved[i] + (s ? -eps : eps) * dir[i]);
      CHECK_OK(run("tv_deform_conv2d", false, b.args, 14, &y, 1));
      fd[s] = dot(&g, &y);
    }
    for (int64_t i = 0; i < n; ++i) setd(t, i, saved[i]);
    double num = (fd[0] - fd[1]) / (2 * eps), ana = 0;
    for (int64_t i = 0; i < n; ++i) ana += getd(&outs[p], i) * dir[i];
    bool ok = fabs(num - ana) <= 1e-6 * (1 + fabs(ana));
    if (!ok) fprintf(stderr, "deform_conv2d grad %d: numeric %.10g analytic %.10g\n", p, num, ana);
    CHECK(ok);
    free(saved), free(dir);
  }
  for (int i = 0; i < 5; ++i) free(outs[i].mem);
  free(y.mem), free(g.mem);
  dc_free(&b);
}

static void test_deform(void) {
  const dcase_t cases[] = {
      /* N C Co H W kh kw sh sw ph pw dh dw G OG mask */
      {2, 3, 4, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},
      {1, 4, 6, 8, 9, 3, 2, 2, 1, 1, 0, 1, 2, 2, 2, true},
      {3, 4, 4, 5, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, false},
      {2, 6, 4, 6, 7, 2, 3, 1, 2, 2, 1, 2, 1, 2, 3, false},
      {1, 2, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, true},
  };
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT64, TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT16};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; ++d) dc_vs_ref(&cases[i], dts[d]);
    dc_grads(&cases[i]);
  }
  /* known answer: 1x1 weight 1, zero offsets, mask 0.5: out = 0.5 x + bias; an offset of
   * (+0.5, 0) averages rows h and h+1, with row H counted as zero */
  {
    dcase_t c = {1, 1, 1, 3, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, true};
    dbufs_t b;
    dc_make(&c, TPURT_DTYPE_FLOAT64, &b);
    setd(&b.w, 0, 1), setd(&b.bias, 0, 0.25);
    for (int i = 0; i < 6; ++i) setd(&b.x, i, i + 1), setd(&b.mask, i, 0.5), setd(&b.off, i, 0.5), setd(&b.off, 6 + i, 0);
    int64_t ys[4] = {1, 1, 3, 2};
    tbuf_t y = zeros(TPURT_DTYPE_FLOAT64, 4, ys);
    CHECK_OK(run("tv_deform_conv2d", false, b.args, 14, &y, 1));
    /* x rows: (1 2) (3 4) (5 6); sampled at h + 0.5: (2 3) (4 5) (2.5 3) */
    double want[6] = {2, 3, 4, 5, 2.5, 3};
    for (int i = 0; i < 6; ++i) CHECK(fabs(getd(&y, i) - (0.5 * want[i] + 0.25)) < 1e-12);
    /* refusals in torchvision's words: a wrong offset channel count, a wrong batch */
    int64_t bad[4] = {1, 3, 3, 2};
    tbuf_t off3 = zeros(TPURT_DTYPE_FLOAT64, 4, bad);
    b.args[2] = targ(&off3);
    tpurt_tensor_t yo = y.t;
    tpurt_op_call_t call = {"tv_deform_conv2d", "", 14, b.args, 1, &yo};
    tpurt_status_t st = tpurt_kernel_run(tpurt_op_lookup("tv_deform_conv2d")->fn, &call);
    CHECK(tpurt_status_code(st) == TPURT_STATUS_INVALID_ARGUMENT);
    CHECK(st && strstr(tpurt_status_message(st), "offset.shape[1] is not valid: got: 3 expected: 2") != NULL);
    tpurt_status_free(st);
    free(off3.mem), free(y.mem);
    dc_free(&b);
  }
}

int main(void) {
  test_ps_known();
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT64, TPURT_DTYPE_FLOAT32};
  for (int d = 0; d < 2; ++d) {
    ps_adjoint(true, dts[d], 2, 2, -1, 1.0);
    ps_adjoint(true, dts[d], 3, 2, 2, 0.5);
    ps_adjoint(false, dts[d], 2, 2, 0, 1.0);
    ps_adjoint(false, dts[d], 2, 3, 0, 0.5);
  }
  test_deform();
  return test_finish("test_vision_deform");
}
