/* torchvision's deform_conv2d (deformable convolution v1, and v2 with a
 * mask) and its backward, as torchvision 0.28's CPU kernel computes them:
 * each kernel tap of each output position samples the input bilinearly at
 * its offset position (zero outside the image), scaled by the mask, into
 * columns [C * kh * kw, images * Ho * Wo]; the convolution is then a GEMM per
 * group through the runtime's GEMM (ops/linalg/gemm.h), images taken in
 * chunks that keep the columns near 32 MiB. The backward runs the transposed
 * GEMM for the column gradients, scatters them into grad_input (one task per
 * (image, channel) plane, so no two threads add into one element), gathers
 * grad_offset / grad_mask per (image, offset group, tap), and recomputes the
 * columns for grad_weight's GEMM. Sampling positions and weights are taken
 * in double; columns are stored in the input's dtype (float32, float64,
 * float16), GEMM products accumulate in float32 (float64 for float64). The
 * reference twin is a direct loop over output elements in double. */
#include <math.h>
#include <string.h>

#include "ops/index/index_common.h"
#include "ops/linalg/gemm.h"
#include "ops/nn/nn.h"

enum { DC_COL_BYTES = 32 << 20 };

typedef struct dc_t {
  const tpurt_tensor_t *in, *w, *off, *mask, *bias, *gout;
  int64_t N, C, H, W, Co, kh, kw, K, Ho, Wo, L, G, OG, sh, sw, ph, pw, dh, dw;
  bool use_mask;
  tpurt_dtype_t dt, acc;
  size_t es, aes;
} dc_t;

static inline int64_t off4(const tpurt_tensor_t* t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->strides[0] + b * t->strides[1] + c * t->strides[2] + d * t->strides[3];
}

/* The sampling point of tap k = i * kw + j at output (oy, ox) of image n in offset group og, and
 * its mask value (1 without a mask). */
static inline void dc_point(const dc_t* d, int64_t n, int64_t og, int64_t k, int64_t oy, int64_t ox, double* y,
                            double* x, double* m) {
  int64_t i = k / d->kw, j = k % d->kw;
  double oh = tpurt_nn_ld(d->off, off4(d->off, n, (og * d->K + k) * 2, oy, ox));
  double ow = tpurt_nn_ld(d->off, off4(d->off, n, (og * d->K + k) * 2 + 1, oy, ox));
  *y = (double)(oy * d->sh - d->ph + i * d->dh) + oh;
  *x = (double)(ox * d->sw - d->pw + j * d->dw) + ow;
  *m = d->use_mask ? tpurt_nn_ld(d->mask, off4(d->mask, n, og * d->K + k, oy, ox)) : 1.0;
}

/* The four corners of (y, x) and their bilinear weights; a corner outside the image gets weight 0
 * (and offset 0). False when the point is outside (-1, H) x (-1, W), where the sample is 0. */
static inline bool dc_taps(const dc_t* d, const tpurt_tensor_t* t, double y, double x, int64_t o[4], double w[4]) {
  if (!(y > -1.0 && y < (double)d->H && x > -1.0 && x < (double)d->W)) return false;
  int64_t yl = (int64_t)floor(y), xl = (int64_t)floor(x), yh = yl + 1, xh = xl + 1;
  double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;
  bool vyl = yl >= 0, vyh = yh <= d->H - 1, vxl = xl >= 0, vxh = xh <= d->W - 1;
  int64_t s2 = t->strides[2], s3 = t->strides[3];
  w[0] = vyl && vxl ? hy * hx : 0, o[0] = vyl && vxl ? yl * s2 + xl * s3 : 0;
  w[1] = vyl && vxh ? hy * lx : 0, o[1] = vyl && vxh ? yl * s2 + xh * s3 : 0;
  w[2] = vyh && vxl ? ly * hx : 0, o[2] = vyh && vxl ? yh * s2 + xl * s3 : 0;
  w[3] = vyh && vxh ? ly * lx : 0, o[3] = vyh && vxh ? yh * s2 + xh * s3 : 0;
  return true;
}

static inline double dc_sample(const dc_t* d, int64_t base, double y, double x) {
  int64_t o[4];
  double w[4];
  if (!dc_taps(d, d->in, y, x, o, w)) return 0;
  double v = 0;
  for (int q = 0; q < 4; ++q)
    if (w[q] != 0) v += w[q] * tpurt_nn_ld(d->in, base + o[q]);
  return v;
}

/* torchvision's get_coordinate_weight: d(sample)/dy (dir_y) or d(sample)/dx, from the corners
 * inside the image. Every corner lies outside the image unless the point is inside (-1, H) x
 * (-1, W), so the weight is 0 there (NaN included), as the sample is. */
static inline double dc_coord_weight(const dc_t* d, int64_t base, double y, double x, bool dir_y) {
  if (!(y > -1.0 && y < (double)d->H && x > -1.0 && x < (double)d->W)) return 0;
  int64_t yl = (int64_t)floor(y), xl = (int64_t)floor(x), yh = yl + 1, xh = xl + 1;
  bool vyl = yl >= 0, vyh = yh < d->H, vxl = xl >= 0, vxh = xh < d->W;
  int64_t s2 = d->in->strides[2], s3 = d->in->strides[3];
  double v_yx = vyl && vxl ? tpurt_nn_ld(d->in, base + yl * s2 + xl * s3) : 0;
  double v_yX = vyl && vxh ? tpurt_nn_ld(d->in, base + yl * s2 + xh * s3) : 0;
  double v_Yx = vyh && vxl ? tpurt_nn_ld(d->in, base + yh * s2 + xl * s3) : 0;
  double v_YX = vyh && vxh ? tpurt_nn_ld(d->in, base + yh * s2 + xh * s3) : 0;
  if (dir_y) {
    double dx = x - (double)xl;
    return dx * (v_YX - v_yX) + (1 - dx) * (v_Yx - v_yx);
  }
  double dy = y - (double)yl;
  return dy * (v_YX - v_Yx) + (1 - dy) * (v_yX - v_yx);
}

/* ------------------------------ arguments ------------------------------ */

/* Reads and checks the arguments from index a (the input; a = 1 in the backward), in
 * torchvision's words where its CPU kernel has words. */
static tpurt_status_t dc_parse(const tpurt_op_call_t* call, int a, const char* op, dc_t* d) {
  memset(d, 0, sizeof *d);
  TPURT_RETURN_IF_ERROR(tpurt_arg_need(call, a + 14, 1));
  d->in = tpurt_arg_tensor(call, a), d->w = tpurt_arg_tensor(call, a + 1), d->off = tpurt_arg_tensor(call, a + 2);
  d->mask = tpurt_arg_tensor(call, a + 3), d->bias = tpurt_arg_tensor(call, a + 4);
  if (!d->in || !d->w || !d->off || !d->mask || !d->bias)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: input, weight, offset, mask and bias must be tensors", op);
  d->sh = tpurt_arg_int(call, a + 5, 1), d->sw = tpurt_arg_int(call, a + 6, 1);
  d->ph = tpurt_arg_int(call, a + 7, 0), d->pw = tpurt_arg_int(call, a + 8, 0);
  d->dh = tpurt_arg_int(call, a + 9, 1), d->dw = tpurt_arg_int(call, a + 10, 1);
  d->G = tpurt_arg_int(call, a + 11, 1), d->OG = tpurt_arg_int(call, a + 12, 1);
  d->use_mask = tpurt_arg_bool(call, a + 13, false);
  if (d->in->ndim != 4 || d->off->ndim != 4 || d->w->ndim != 4 || (d->use_mask && d->mask->ndim != 4))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: input, offset, weight (and mask when use_mask) must be 4-D, got %d, %d, %d, %d",
                        op, d->in->ndim, d->off->ndim, d->w->ndim, d->mask->ndim);
  d->dt = d->in->dtype;
  const tpurt_tensor_t* all[5] = {d->w, d->off, d->mask, d->bias, call->num_args > 0 && a == 1 ? tpurt_arg_tensor(call, 0) : NULL};
  for (int i = 0; i < 5; ++i)
    if (all[i] && all[i]->dtype != d->dt)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: input, weight, offset, mask, bias (and grad) must have one dtype", op);
  d->N = d->in->sizes[0], d->C = d->in->sizes[1], d->H = d->in->sizes[2], d->W = d->in->sizes[3];
  d->Co = d->w->sizes[0], d->kh = d->w->sizes[2], d->kw = d->w->sizes[3], d->K = d->kh * d->kw;
  if (!(d->kh > 0 && d->kw > 0))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: weight_h: %lld weight_w: %lld", op, (long long)d->kh, (long long)d->kw);
  if (!(d->sh > 0 && d->sw > 0))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: stride_h: %lld stride_w: %lld", op, (long long)d->sh, (long long)d->sw);
  if (!(d->ph >= 0 && d->pw >= 0))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: pad_h: %lld pad_w: %lld", op, (long long)d->ph, (long long)d->pw);
  if (!(d->dh > 0 && d->dw > 0))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: dilation_h: %lld dilation_w: %lld", op, (long long)d->dh, (long long)d->dw);
  if (d->G <= 0 || d->OG <= 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: groups (%lld) and offset_groups (%lld) must be positive", op,
                        (long long)d->G, (long long)d->OG);
  if (d->w->sizes[1] * d->G != d->C)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: weight.size(1) * groups (%lld * %lld) must equal the input's channels (%lld)",
                        op, (long long)d->w->sizes[1], (long long)d->G, (long long)d->C);
  if (d->Co % d->G != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: weight.size(0) (%lld) must be a multiple of groups (%lld)", op,
                        (long long)d->Co, (long long)d->G);
  if (d->off->sizes[1] != d->OG * 2 * d->K)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: offset.shape[1] is not valid: got: %lld expected: %lld", op,
                        (long long)d->off->sizes[1], (long long)(d->OG * 2 * d->K));
  if (d->use_mask && d->mask->sizes[1] != d->OG * d->K)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: mask.shape[1] is not valid: got: %lld expected: %lld", op,
                        (long long)d->mask->sizes[1], (long long)(d->OG * d->K));
  if (d->C % d->OG != 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: the input's channels (%lld) must be a multiple of offset_groups (%lld)", op,
                        (long long)d->C, (long long)d->OG);
  if (d->off->sizes[0] != d->N) return TPURT_STATUS(INVALID_ARGUMENT, "%s: invalid batch size of offset", op);
  d->Ho = (d->H + 2 * d->ph - (d->dh * (d->kh - 1) + 1)) / d->sh + 1;
  d->Wo = (d->W + 2 * d->pw - (d->dw * (d->kw - 1) + 1)) / d->sw + 1;
  if (d->off->sizes[2] != d->Ho || d->off->sizes[3] != d->Wo)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: offset output dims: (%lld, %lld) - computed output dims: (%lld, %lld)", op,
                        (long long)d->off->sizes[2], (long long)d->off->sizes[3], (long long)d->Ho, (long long)d->Wo);
  if (d->mask->ndim < 1 || d->mask->sizes[0] != d->N)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: invalid batch size of mask", op);
  if (d->use_mask && (d->mask->sizes[2] != d->Ho || d->mask->sizes[3] != d->Wo))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: mask output dims: (%lld, %lld) - computed output dims: (%lld, %lld)", op,
                        (long long)d->mask->sizes[2], (long long)d->mask->sizes[3], (long long)d->Ho, (long long)d->Wo);
  if (!(d->Ho > 0 && d->Wo > 0))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: Calculated output size too small - out_h: %lld out_w: %lld", op,
                        (long long)d->Ho, (long long)d->Wo);
  if (tpurt_tensor_numel(d->bias) != d->Co)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: bias has %lld elements, expected out_channels = %lld", op,
                        (long long)tpurt_tensor_numel(d->bias), (long long)d->Co);
  if (d->H * d->W > INT32_MAX)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: an input plane of %lld x %lld elements is larger than this kernel takes (2^31 - 1)",
                        op, (long long)d->H, (long long)d->W);
  d->L = d->Ho * d->Wo;
  d->es = tpurt_dtype_size(d->dt);
  d->acc = d->dt == TPURT_DTYPE_FLOAT64 ? TPURT_DTYPE_FLOAT64 : TPURT_DTYPE_FLOAT32;
  d->aes = tpurt_dtype_size(d->acc);
  return TPURT_OK;
}

static tpurt_status_t dc_check_out(const char* op, const tpurt_tensor_t* o, const tpurt_tensor_t* like, int idx) {
  bool ok = o->ndim == like->ndim && o->dtype == like->dtype;
  for (int k = 0; ok && k < o->ndim; ++k) ok = o->sizes[k] == like->sizes[k];
  return ok ? TPURT_OK : TPURT_STATUS(INVALID_ARGUMENT, "%s: output %d has the wrong shape or dtype", op, idx);
}

/* bias element o of a bias of any shape holding Co elements (row-major) */
static inline double dc_bias(const dc_t* d, int64_t o) {
  int64_t rem = o, off = 0;
  for (int k = d->bias->ndim - 1; k >= 0; --k) {
    off += (rem % d->bias->sizes[k]) * d->bias->strides[k];
    rem /= d->bias->sizes[k];
  }
  return tpurt_nn_ld(d->bias, off);
}

/* ------------------------------ optimized ------------------------------ */

/* One sampling point of one (image, offset group, tap, position), shared by the channels of its
 * offset group: the four corners as offsets into an input plane (oi) and into a dense H x W plane
 * (od), with their bilinear weights times the mask (0 for a corner outside the image, whose
 * offsets are then 0). */
typedef struct dc_tap_t {
  int64_t oi[4];
  int32_t od[4];
  double w[4];
} dc_tap_t;

typedef struct dc_job_t {
  const dc_t* d;
  dc_tap_t* taps;       /* [nn][OG][K][L] */
  int64_t n0, nn, M;    /* images [n0, n0 + nn); M = nn * L columns */
  char* col;            /* [C*K][M] in dt */
  char* cg;             /* column grads [C*K][M] in acc */
  double* planes;       /* per-thread H*W accumulators (grad_input) */
  const tpurt_tensor_t *gin, *goff, *gmask;
} dc_job_t;

static inline double ld_acc(const dc_t* d, const char* p, int64_t i) {
  return d->acc == TPURT_DTYPE_FLOAT64 ? ((const double*)p)[i] : (double)((const float*)p)[i];
}

/* the chunk's sampling points: rows (image, offset group, tap) */
static void dc_build_taps(void* u, int64_t r0, int64_t r1, int tid) {
  const dc_job_t* j = u;
  const dc_t* d = j->d;
  tpurt_tensor_t dense = {.dtype = TPURT_DTYPE_FLOAT64, .ndim = 4, .strides = {0, 0, d->W, 1}};
  for (int64_t r = r0; r < r1; ++r) {
    int64_t k = r % d->K, og = (r / d->K) % d->OG, nl = r / (d->K * d->OG), n = j->n0 + nl;
    dc_tap_t* t = j->taps + r * d->L;
    for (int64_t oy = 0; oy < d->Ho; ++oy)
      for (int64_t ox = 0; ox < d->Wo; ++ox, ++t) {
        double y, x, m;
        int64_t od[4] = {0, 0, 0, 0};
        dc_point(d, n, og, k, oy, ox, &y, &x, &m);
        if (!dc_taps(d, d->in, y, x, t->oi, t->w)) {
          memset(t, 0, sizeof *t);
          continue;
        }
        dc_taps(d, &dense, y, x, od, t->w);
        for (int q = 0; q < 4; ++q) t->od[q] = (int32_t)od[q], t->w[q] *= m;
      }
  }
}

/* columns: rows (image, channel) of the chunk */
static void dc_im2col(void* u, int64_t r0, int64_t r1, int tid) {
  const dc_job_t* j = u;
  const dc_t* d = j->d;
  tpurt_tensor_t colt = {.data = j->col, .dtype = d->dt};
  int64_t cpg = d->C / d->OG;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t c = r % d->C, nl = r / d->C, n = j->n0 + nl, og = c / cpg;
    int64_t base = n * d->in->strides[0] + c * d->in->strides[1];
    for (int64_t k = 0; k < d->K; ++k) {
      int64_t row = (c * d->K + k) * j->M + nl * d->L;
      const dc_tap_t* t = j->taps + ((nl * d->OG + og) * d->K + k) * d->L;
      for (int64_t l = 0; l < d->L; ++l, ++t) {
        double v = t->w[0] * tpurt_nn_ld(d->in, base + t->oi[0]) + t->w[1] * tpurt_nn_ld(d->in, base + t->oi[1]) +
                   t->w[2] * tpurt_nn_ld(d->in, base + t->oi[2]) + t->w[3] * tpurt_nn_ld(d->in, base + t->oi[3]);
        tpurt_nn_st(&colt, row + l, v);
      }
    }
  }
}

/* grad_input: rows (image, channel), each scattering its column grads into its own plane */
static void dc_col2im(void* u, int64_t r0, int64_t r1, int tid) {
  const dc_job_t* j = u;
  const dc_t* d = j->d;
  int64_t cpg = d->C / d->OG, HW = d->H * d->W;
  double* acc = j->planes + (size_t)tid * (size_t)HW;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t c = r % d->C, nl = r / d->C, n = j->n0 + nl, og = c / cpg;
    memset(acc, 0, (size_t)HW * sizeof(double));
    for (int64_t k = 0; k < d->K; ++k) {
      int64_t row = (c * d->K + k) * j->M + nl * d->L;
      const dc_tap_t* t = j->taps + ((nl * d->OG + og) * d->K + k) * d->L;
      for (int64_t l = 0; l < d->L; ++l, ++t) {
        double g = ld_acc(d, j->cg, row + l);
        for (int q = 0; q < 4; ++q) acc[t->od[q]] += t->w[q] * g;
      }
    }
    const tpurt_tensor_t* gi = j->gin;
    for (int64_t h = 0; h < d->H; ++h)
      for (int64_t w = 0; w < d->W; ++w) tpurt_nn_st(gi, off4(gi, n, c, h, w), acc[h * d->W + w]);
  }
}

/* grad_offset and grad_mask: rows (image, offset group, tap). Per position the four corners of
 * each channel are read once and give both coordinate weights (torchvision's
 * get_coordinate_weight) and the sample the mask's grad needs. */
static void dc_coord(void* u, int64_t r0, int64_t r1, int tid) {
  const dc_job_t* j = u;
  const dc_t* d = j->d;
  int64_t cpg = d->C / d->OG, s2 = d->in->strides[2], s3 = d->in->strides[3];
  for (int64_t r = r0; r < r1; ++r) {
    int64_t k = r % d->K, og = (r / d->K) % d->OG, nl = r / (d->K * d->OG), n = j->n0 + nl;
    for (int64_t oy = 0; oy < d->Ho; ++oy)
      for (int64_t ox = 0; ox < d->Wo; ++ox) {
        double y, x, m, gy = 0, gx = 0, gm = 0;
        dc_point(d, n, og, k, oy, ox, &y, &x, &m);
        if (y > -1.0 && y < (double)d->H && x > -1.0 && x < (double)d->W) {
          int64_t yl = (int64_t)floor(y), xl = (int64_t)floor(x), yh = yl + 1, xh = xl + 1;
          bool vyl = yl >= 0, vyh = yh < d->H, vxl = xl >= 0, vxh = xh < d->W;
          double dy = y - (double)yl, dx = x - (double)xl;
          int64_t o_yx = yl * s2 + xl * s3, o_yX = yl * s2 + xh * s3, o_Yx = yh * s2 + xl * s3, o_YX = yh * s2 + xh * s3;
          for (int64_t c = og * cpg; c < (og + 1) * cpg; ++c) {
            double g = ld_acc(d, j->cg, (c * d->K + k) * j->M + nl * d->L + oy * d->Wo + ox);
            if (g == 0) continue;
            int64_t base = n * d->in->strides[0] + c * d->in->strides[1];
            double v_yx = vyl && vxl ? tpurt_nn_ld(d->in, base + o_yx) : 0;
            double v_yX = vyl && vxh ? tpurt_nn_ld(d->in, base + o_yX) : 0;
            double v_Yx = vyh && vxl ? tpurt_nn_ld(d->in, base + o_Yx) : 0;
            double v_YX = vyh && vxh ? tpurt_nn_ld(d->in, base + o_YX) : 0;
            gy += g * (dx * (v_YX - v_yX) + (1 - dx) * (v_Yx - v_yx));
            gx += g * (dy * (v_YX - v_Yx) + (1 - dy) * (v_yX - v_yx));
            if (d->use_mask)
              gm += g * ((1 - dy) * ((1 - dx) * v_yx + dx * v_yX) + dy * ((1 - dx) * v_Yx + dx * v_YX));
          }
        }
        tpurt_nn_st(j->goff, off4(j->goff, n, (og * d->K + k) * 2, oy, ox), m * gy);
        tpurt_nn_st(j->goff, off4(j->goff, n, (og * d->K + k) * 2 + 1, oy, ox), m * gx);
        if (d->use_mask) tpurt_nn_st(j->gmask, off4(j->gmask, n, og * d->K + k, oy, ox), gm);
      }
  }
}

static tpurt_status_t dc_gemm(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, void** ws, size_t* ws_bytes) {
  size_t need = tpurt_gemm_workspace_bytes(ctx, g);
  if (need > *ws_bytes) {
    *ws = tpurt_kernel_scratch(ctx, need);
    if (!*ws) return TPURT_STATUS(RESOURCE_EXHAUSTED, "deform_conv2d: no scratch for GEMM (%zu bytes)", need);
    *ws_bytes = need;
  }
  return tpurt_gemm(ctx, g, *ws);
}

/* The weight as a [Co, C/G * K] matrix in dt: the tensor itself when its last three dims are one
 * run, else a packed copy. */
static tpurt_status_t dc_weight(tpurt_kernel_ctx_t* ctx, const dc_t* d, const char** wd, int64_t* w_rs) {
  const tpurt_tensor_t* w = d->w;
  int64_t ckg = d->C / d->G * d->K;
  bool run = (w->sizes[3] == 1 || w->strides[3] == 1) && (w->sizes[2] == 1 || w->strides[2] == w->sizes[3]) &&
             (w->sizes[1] == 1 || w->strides[1] == w->sizes[2] * w->sizes[3]);
  if (run) {
    *wd = w->data;
    *w_rs = d->Co > 1 ? w->strides[0] : ckg;
    return TPURT_OK;
  }
  char* p = tpurt_kernel_scratch(ctx, (size_t)(d->Co * ckg) * d->es + 64);
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "deform_conv2d: no scratch for the weight copy");
  tpurt_tensor_t pt = {.data = p, .dtype = d->dt};
  for (int64_t o = 0; o < d->Co; ++o)
    for (int64_t i = 0; i < ckg; ++i)
      tpurt_nn_st(&pt, o * ckg + i, tpurt_nn_ld(w, off4(w, o, i / d->K, (i % d->K) / d->kw, i % d->kw)));
  *wd = p, *w_rs = ckg;
  return TPURT_OK;
}

static int64_t dc_chunk(const dc_t* d, int64_t per_image_bytes) {
  int64_t c = per_image_bytes > 0 ? DC_COL_BYTES / per_image_bytes : d->N;
  if (c < 1) c = 1;
  return c < d->N ? c : d->N;
}

static tpurt_status_t dc_forward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  dc_t d;
  TPURT_RETURN_IF_ERROR(dc_parse(call, 0, "deform_conv2d", &d));
  const tpurt_tensor_t* out = &call->outputs[0];
  if (out->ndim != 4 || out->sizes[0] != d.N || out->sizes[1] != d.Co || out->sizes[2] != d.Ho || out->sizes[3] != d.Wo)
    return TPURT_STATUS(INVALID_ARGUMENT, "deform_conv2d: output is not [%lld, %lld, %lld, %lld]", (long long)d.N,
                        (long long)d.Co, (long long)d.Ho, (long long)d.Wo);
  if (d.N == 0 || d.Co == 0) return TPURT_OK;
  const char* wd;
  int64_t w_rs;
  TPURT_RETURN_IF_ERROR(dc_weight(ctx, &d, &wd, &w_rs));
  int64_t CK = d.C * d.K, ckg = CK / d.G, cog = d.Co / d.G;
  int64_t chunk = dc_chunk(&d, (CK * (int64_t)d.es + d.Co * (int64_t)d.aes + d.OG * d.K * (int64_t)sizeof(dc_tap_t)) * d.L);
  char* col = tpurt_kernel_scratch(ctx, (size_t)(CK * chunk * d.L) * d.es + 64);
  char* ob = tpurt_kernel_scratch(ctx, (size_t)(d.Co * chunk * d.L) * d.aes + 64);
  dc_tap_t* taps = tpurt_kernel_scratch(ctx, (size_t)(chunk * d.OG * d.K * d.L) * sizeof(dc_tap_t) + 64);
  if (!col || !ob || !taps) return TPURT_STATUS(RESOURCE_EXHAUSTED, "deform_conv2d: no scratch for the columns");
  void* ws = NULL;
  size_t ws_bytes = 0;
  for (int64_t n0 = 0; n0 < d.N; n0 += chunk) {
    int64_t nn = d.N - n0 < chunk ? d.N - n0 : chunk, M = nn * d.L;
    dc_job_t j = {.d = &d, .taps = taps, .n0 = n0, .nn = nn, .M = M, .col = col};
    tpurt_parallel_for(ctx, nn * d.OG * d.K, 1, dc_build_taps, &j);
    tpurt_parallel_for(ctx, nn * d.C, 1, dc_im2col, &j);
    for (int64_t g = 0; g < d.G; ++g) {
      tpurt_gemm_t gm = {.m = cog, .n = M, .k = ckg, .ab_dtype = d.dt, .c_dtype = d.acc,
                         .a = wd + (size_t)(g * cog * w_rs) * d.es, .a_rs = w_rs, .a_cs = 1,
                         .b = col + (size_t)(g * ckg * M) * d.es, .b_rs = M, .b_cs = 1,
                         .c = ob + (size_t)(g * cog * M) * d.aes, .c_rs = M, .c_cs = 1, .alpha = 1, .beta = 0};
      TPURT_RETURN_IF_ERROR(dc_gemm(ctx, &gm, &ws, &ws_bytes));
    }
    for (int64_t o = 0; o < d.Co; ++o) {
      double b = dc_bias(&d, o);
      for (int64_t nl = 0; nl < nn; ++nl)
        for (int64_t l = 0; l < d.L; ++l)
          tpurt_nn_st(out, off4(out, n0 + nl, o, l / d.Wo, l % d.Wo), ld_acc(&d, ob, o * M + nl * d.L + l) + b);
    }
  }
  return TPURT_OK;
}

/* zeros every element of t (the index engine's parallel fill over its coalesced dims) */
static void dc_zero(tpurt_kernel_ctx_t* ctx, const tpurt_tensor_t* t) {
  static const unsigned char zero[16];
  tpurt_index_fill(ctx, t, zero);
}

/* grad_bias = grad summed over images and positions, into bias's shape */
static void dc_grad_bias(const dc_t* d, const tpurt_tensor_t* gb) {
  for (int64_t o = 0; o < d->Co; ++o) {
    double s = 0;
    for (int64_t n = 0; n < d->N; ++n)
      for (int64_t oy = 0; oy < d->Ho; ++oy)
        for (int64_t ox = 0; ox < d->Wo; ++ox) s += tpurt_nn_ld(d->gout, off4(d->gout, n, o, oy, ox));
    int64_t rem = o, off = 0;
    for (int k = gb->ndim - 1; k >= 0; --k) {
      off += (rem % gb->sizes[k]) * gb->strides[k];
      rem /= gb->sizes[k];
    }
    tpurt_nn_st(gb, off, s);
  }
}

static tpurt_status_t dc_backward_outputs(const tpurt_op_call_t* call, dc_t* d) {
  const char* op = "_deform_conv2d_backward";
  if (call->num_outputs < 5) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expects 5 outputs", op);
  d->gout = tpurt_arg_tensor(call, 0);
  if (!d->gout || d->gout->ndim != 4 || d->gout->sizes[0] != d->N || d->gout->sizes[1] != d->Co ||
      d->gout->sizes[2] != d->Ho || d->gout->sizes[3] != d->Wo)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad must be [%lld, %lld, %lld, %lld]", op, (long long)d->N,
                        (long long)d->Co, (long long)d->Ho, (long long)d->Wo);
  const tpurt_tensor_t* like[5] = {d->in, d->w, d->off, d->mask, d->bias};
  for (int i = 0; i < 5; ++i) TPURT_RETURN_IF_ERROR(dc_check_out(op, &call->outputs[i], like[i], i));
  return TPURT_OK;
}

static tpurt_status_t dc_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  dc_t d;
  TPURT_RETURN_IF_ERROR(dc_parse(call, 1, "_deform_conv2d_backward", &d));
  TPURT_RETURN_IF_ERROR(dc_backward_outputs(call, &d));
  const tpurt_tensor_t *gin = &call->outputs[0], *gw = &call->outputs[1], *goff = &call->outputs[2],
                       *gmask = &call->outputs[3], *gb = &call->outputs[4];
  dc_zero(ctx, gmask); /* written below only with use_mask */
  dc_grad_bias(&d, gb);
  int64_t CK = d.C * d.K, ckg = CK / d.G, cog = d.Co / d.G;
  if (d.N == 0 || d.Co == 0 || CK == 0) {
    dc_zero(ctx, gin), dc_zero(ctx, gw), dc_zero(ctx, goff);
    return TPURT_OK;
  }
  const char* wd;
  int64_t w_rs;
  TPURT_RETURN_IF_ERROR(dc_weight(ctx, &d, &wd, &w_rs));
  int64_t chunk = dc_chunk(&d, (CK * (int64_t)(d.es + d.aes) + d.Co * (int64_t)d.es + d.OG * d.K * (int64_t)sizeof(dc_tap_t)) * d.L);
  int nt = tpurt_kernel_num_threads(ctx);
  char* col = tpurt_kernel_scratch(ctx, (size_t)(CK * chunk * d.L) * d.es + 64);
  char* cg = tpurt_kernel_scratch(ctx, (size_t)(CK * chunk * d.L) * d.aes + 64);
  char* go = tpurt_kernel_scratch(ctx, (size_t)(d.Co * chunk * d.L) * d.es + 64);
  char* gwa = tpurt_kernel_scratch(ctx, (size_t)(d.Co * ckg) * d.aes + 64);
  double* planes = tpurt_kernel_scratch(ctx, (size_t)(nt < 1 ? 1 : nt) * (size_t)(d.H * d.W) * sizeof(double) + 64);
  dc_tap_t* taps = tpurt_kernel_scratch(ctx, (size_t)(chunk * d.OG * d.K * d.L) * sizeof(dc_tap_t) + 64);
  if (!col || !cg || !go || !gwa || !planes || !taps)
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "_deform_conv2d_backward: no scratch for the columns");
  void* ws = NULL;
  size_t ws_bytes = 0;
  for (int64_t n0 = 0; n0 < d.N; n0 += chunk) {
    int64_t nn = d.N - n0 < chunk ? d.N - n0 : chunk, M = nn * d.L;
    /* grad as [Co][M] in dt */
    tpurt_tensor_t got = {.data = go, .dtype = d.dt};
    for (int64_t o = 0; o < d.Co; ++o)
      for (int64_t nl = 0; nl < nn; ++nl)
        for (int64_t l = 0; l < d.L; ++l)
          tpurt_nn_st(&got, o * M + nl * d.L + l, tpurt_nn_ld(d.gout, off4(d.gout, n0 + nl, o, l / d.Wo, l % d.Wo)));
    /* column grads = W_g^T grad_g */
    for (int64_t g = 0; g < d.G; ++g) {
      tpurt_gemm_t gm = {.m = ckg, .n = M, .k = cog, .ab_dtype = d.dt, .c_dtype = d.acc,
                         .a = wd + (size_t)(g * cog * w_rs) * d.es, .a_rs = 1, .a_cs = w_rs,
                         .b = go + (size_t)(g * cog * M) * d.es, .b_rs = M, .b_cs = 1,
                         .c = cg + (size_t)(g * ckg * M) * d.aes, .c_rs = M, .c_cs = 1, .alpha = 1, .beta = 0};
      TPURT_RETURN_IF_ERROR(dc_gemm(ctx, &gm, &ws, &ws_bytes));
    }
    dc_job_t j = {.d = &d, .taps = taps, .n0 = n0, .nn = nn, .M = M, .col = col, .cg = cg, .planes = planes,
                  .gin = gin, .goff = goff, .gmask = gmask};
    tpurt_parallel_for(ctx, nn * d.OG * d.K, 1, dc_build_taps, &j);
    tpurt_parallel_for(ctx, nn * d.C, 1, dc_col2im, &j);
    tpurt_parallel_for(ctx, nn * d.OG * d.K, 1, dc_coord, &j);
    /* grad_weight += grad_g columns_g^T */
    tpurt_parallel_for(ctx, nn * d.C, 1, dc_im2col, &j);
    for (int64_t g = 0; g < d.G; ++g) {
      tpurt_gemm_t gm = {.m = cog, .n = ckg, .k = M, .ab_dtype = d.dt, .c_dtype = d.acc,
                         .a = go + (size_t)(g * cog * M) * d.es, .a_rs = M, .a_cs = 1,
                         .b = col + (size_t)(g * ckg * M) * d.es, .b_rs = 1, .b_cs = M,
                         .c = gwa + (size_t)(g * cog * ckg) * d.aes, .c_rs = ckg, .c_cs = 1,
                         .alpha = 1, .beta = n0 == 0 ? 0.0 : 1.0};
      TPURT_RETURN_IF_ERROR(dc_gemm(ctx, &gm, &ws, &ws_bytes));
    }
  }
  for (int64_t o = 0; o < d.Co; ++o)
    for (int64_t i = 0; i < ckg; ++i)
      tpurt_nn_st(gw, off4(gw, o, i / d.K, (i % d.K) / d.kw, i % d.kw), ld_acc(&d, gwa, o * ckg + i));
  return TPURT_OK;
}

/* ------------------------------ reference ------------------------------ */

/* Direct loops in double over output elements: out = bias + sum W * mask * sample; the backward
 * differentiates the same sum term by term (grad_input through the bilinear weights, offsets
 * through torchvision's coordinate weights). */
static tpurt_status_t dc_reference(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool backward) {
  dc_t d;
  const char* op = backward ? "_deform_conv2d_backward" : "deform_conv2d";
  TPURT_RETURN_IF_ERROR(dc_parse(call, backward ? 1 : 0, op, &d));
  int64_t cpg = d.C / d.OG, cig = d.C / d.G, cog = d.Co / d.G;
  const tpurt_tensor_t *gin = NULL, *gw = NULL, *goff = NULL, *gmask = NULL;
  double *agin = NULL, *agw = NULL, *agoff = NULL, *agmask = NULL;
  if (backward) {
    TPURT_RETURN_IF_ERROR(dc_backward_outputs(call, &d));
    gin = &call->outputs[0], gw = &call->outputs[1], goff = &call->outputs[2], gmask = &call->outputs[3];
    dc_zero(ctx, gmask);
    dc_grad_bias(&d, &call->outputs[4]);
    agin = tpurt_kernel_scratch(ctx, (size_t)(d.N * d.C * d.H * d.W + 1) * sizeof(double));
    agw = tpurt_kernel_scratch(ctx, (size_t)(d.Co * cig * d.K + 1) * sizeof(double));
    agoff = tpurt_kernel_scratch(ctx, (size_t)(d.N * d.OG * 2 * d.K * d.L + 1) * sizeof(double));
    agmask = tpurt_kernel_scratch(ctx, (size_t)(d.N * d.OG * d.K * d.L + 1) * sizeof(double));
    if (!agin || !agw || !agoff || !agmask) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", op);
    memset(agin, 0, (size_t)(d.N * d.C * d.H * d.W) * sizeof(double));
    memset(agw, 0, (size_t)(d.Co * cig * d.K) * sizeof(double));
    memset(agoff, 0, (size_t)(d.N * d.OG * 2 * d.K * d.L) * sizeof(double));
    memset(agmask, 0, (size_t)(d.N * d.OG * d.K * d.L) * sizeof(double));
  } else {
    const tpurt_tensor_t* out = &call->outputs[0];
    if (out->ndim != 4 || out->sizes[0] != d.N || out->sizes[1] != d.Co || out->sizes[2] != d.Ho ||
        out->sizes[3] != d.Wo)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: output has the wrong shape", op);
  }
  tpurt_tensor_t dense = {.dtype = TPURT_DTYPE_FLOAT64, .ndim = 4, .strides = {0, 0, d.W, 1}};
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t o = 0; o < d.Co; ++o)
      for (int64_t oy = 0; oy < d.Ho; ++oy)
        for (int64_t ox = 0; ox < d.Wo; ++ox) {
          int64_t g = o / cog;
          double acc = backward ? 0 : dc_bias(&d, o);
          double go = backward ? tpurt_nn_ld(d.gout, off4(d.gout, n, o, oy, ox)) : 0;
          for (int64_t ci = 0; ci < cig; ++ci) {
            int64_t c = g * cig + ci, og = c / cpg, base = n * d.in->strides[0] + c * d.in->strides[1];
            for (int64_t k = 0; k < d.K; ++k) {
              double y, x, m;
              dc_point(&d, n, og, k, oy, ox, &y, &x, &m);
              double wv = tpurt_nn_ld(d.w, off4(d.w, o, ci, k / d.kw, k % d.kw));
              double v = dc_sample(&d, base, y, x);
              if (!backward) {
                acc += wv * m * v;
                continue;
              }
              agw[(o * cig + ci) * d.K + k] += go * m * v;
              int64_t l = oy * d.Wo + ox, ko = (n * d.OG + og) * d.K + k;
              agmask[ko * d.L + l] += go * wv * v;
              agoff[(((n * d.OG + og) * d.K + k) * 2) * d.L + l] += go * wv * m * dc_coord_weight(&d, base, y, x, true);
              agoff[(((n * d.OG + og) * d.K + k) * 2 + 1) * d.L + l] +=
                  go * wv * m * dc_coord_weight(&d, base, y, x, false);
              int64_t tap[4];
              double tw[4];
              if (dc_taps(&d, &dense, y, x, tap, tw))
                for (int q = 0; q < 4; ++q) agin[(n * d.C + c) * d.H * d.W + tap[q]] += tw[q] * go * wv * m;
            }
          }
          if (!backward) {
            const tpurt_tensor_t* out = &call->outputs[0];
            tpurt_nn_st(out, off4(out, n, o, oy, ox), acc);
          }
        }
  if (!backward) return TPURT_OK;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t w = 0; w < d.W; ++w) tpurt_nn_st(gin, off4(gin, n, c, h, w), agin[((n * d.C + c) * d.H + h) * d.W + w]);
  for (int64_t o = 0; o < d.Co; ++o)
    for (int64_t ci = 0; ci < cig; ++ci)
      for (int64_t k = 0; k < d.K; ++k) tpurt_nn_st(gw, off4(gw, o, ci, k / d.kw, k % d.kw), agw[(o * cig + ci) * d.K + k]);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t ch = 0; ch < d.OG * 2 * d.K; ++ch)
      for (int64_t l = 0; l < d.L; ++l)
        tpurt_nn_st(goff, off4(goff, n, ch, l / d.Wo, l % d.Wo), agoff[(n * d.OG * 2 * d.K + ch) * d.L + l]);
  if (d.use_mask)
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t ch = 0; ch < d.OG * d.K; ++ch)
        for (int64_t l = 0; l < d.L; ++l)
          tpurt_nn_st(gmask, off4(gmask, n, ch, l / d.Wo, l % d.Wo), agmask[(n * d.OG * d.K + ch) * d.L + l]);
  return TPURT_OK;
}

tpurt_status_t tpurt_vision_deform_conv2d(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return dc_forward(ctx, call);
}
tpurt_status_t tpurt_vision_deform_conv2d_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return dc_reference(ctx, call, false);
}
tpurt_status_t tpurt_vision_deform_conv2d_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return dc_backward(ctx, call);
}
tpurt_status_t tpurt_vision_deform_conv2d_backward_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return dc_reference(ctx, call, true);
}
