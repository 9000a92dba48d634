/* Upsampling through per-axis tap tables, for the modes upsample.c does not
 * cover: the backward of nearest 3-D, nearest-exact 1/2/3-D, trilinear and
 * bicubic; antialiased bilinear and bicubic (_upsample_bi*2d_aa), forward
 * too; the forward of bicubic; and the uint8 forward of bilinear and bicubic.
 * Every mode is a tensor product of 1-D maps, so each axis gets a table of
 * (source index, weight) taps per output index, computed with
 * PyTorch CPU's index math (UpSample.h: float for float and the 16-bit types,
 * double for double); the backward then scatters each output gradient into a
 * double accumulator of its (N, C) plane and stores it once. Work splits over
 * planes; the reference runs the same loop serially. */
#include <math.h>
#include <string.h>

#include "ops/nn/nn.h"

typedef enum up_mode_e { UP_NEAREST, UP_NEAREST_EXACT, UP_LINEAR, UP_CUBIC, UP_LINEAR_AA, UP_CUBIC_AA } up_mode_t;

enum { kMaxTaps = 4 };

typedef struct up_axis_t {
  int64_t in, out;      /* input (grad_input) and output (grad_output) sizes */
  int64_t sin, sout;    /* strides of grad_input / grad_output along this axis */
  int taps;
  int64_t* idx;         /* [out * taps] source indices */
  double* w;            /* [out * taps] weights */
} up_axis_t;

/* ---- PyTorch CPU's index math, in its opmath type ---- */

#define DEFINE_TAPS(SUF, REAL)                                                                    \
  static REAL scales_value_##SUF(bool has, double scale, int64_t in, int64_t out) {              \
    return has && scale > 0 ? (REAL)(1.0 / scale) : (REAL)in / (REAL)out;                        \
  }                                                                                              \
  static REAL pixel_scale_##SUF(int64_t in, int64_t out, bool align, bool has, double scale) {   \
    if (align) return out > 1 ? (REAL)(in - 1) / (REAL)(out - 1) : (REAL)0;                      \
    return scales_value_##SUF(has, scale, in, out);                                              \
  }                                                                                              \
  static REAL source_index_##SUF(REAL scale, int64_t o, bool align, bool cubic) {                \
    if (align) return scale * (REAL)o;                                                           \
    REAL src = scale * ((REAL)o + (REAL)0.5) - (REAL)0.5;                                         \
    return (!cubic && src < 0) ? (REAL)0 : src;                                                  \
  }                                                                                              \
  /* guard_index_and_lambda (floorf even for double, as PyTorch writes it) */                    \
  static void guard_##SUF(REAL real, int64_t in, int64_t* idx, REAL* lam) {                      \
    int64_t i = (int64_t)floorf((float)real);                                                    \
    *idx = i < in - 1 ? i : in - 1;                                                              \
    REAL l = real - (REAL)*idx;                                                                  \
    *lam = l < 0 ? (REAL)0 : l > 1 ? (REAL)1 : l;                                                \
  }                                                                                              \
  static void linear_taps_##SUF(up_axis_t* a, bool align, bool has, double scale) {              \
    REAL ratio = pixel_scale_##SUF(a->in, a->out, align, has, scale);                            \
    for (int64_t o = 0; o < a->out; ++o) {                                                       \
      int64_t* ix = a->idx + o * 2;                                                              \
      double* w = a->w + o * 2;                                                                  \
      if (a->in == a->out) {                                                                     \
        ix[0] = ix[1] = o, w[0] = 1, w[1] = 0;                                                   \
        continue;                                                                                \
      }                                                                                          \
      int64_t i0;                                                                                \
      REAL l1;                                                                                   \
      guard_##SUF(source_index_##SUF(ratio, o, align, false), a->in, &i0, &l1);                  \
      ix[0] = i0, ix[1] = i0 + (i0 < a->in - 1 ? 1 : 0);                                         \
      w[0] = (REAL)1 - l1, w[1] = l1;                                                            \
    }                                                                                            \
  }                                                                                              \
  /* get_cubic_upsample_coefficients with A = -0.75; taps clamped to the border */               \
  static void cubic_taps_##SUF(up_axis_t* a, bool align, bool has, double scale) {               \
    const REAL A = (REAL)-0.75;                                                                  \
    REAL ratio = pixel_scale_##SUF(a->in, a->out, align, has, scale);                            \
    for (int64_t o = 0; o < a->out; ++o) {                                                       \
      int64_t i0;                                                                                \
      REAL t;                                                                                    \
      guard_##SUF(source_index_##SUF(ratio, o, align, true), a->in, &i0, &t);                    \
      REAL x1 = t + 1, x2 = 1 - t, x3 = 2 - t;                                                   \
      REAL c[4] = {((A * x1 - 5 * A) * x1 + 8 * A) * x1 - 4 * A,                                 \
                   ((A + 2) * t - (A + 3)) * t * t + 1,                                          \
                   ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1,                                       \
                   ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A};                                \
      for (int k = 0; k < 4; ++k) {                                                              \
        int64_t i = i0 - 1 + k;                                                                  \
        a->idx[o * 4 + k] = i < 0 ? 0 : i > a->in - 1 ? a->in - 1 : i;                           \
        a->w[o * 4 + k] = c[k];                                                                  \
      }                                                                                          \
    }                                                                                            \
  }
DEFINE_TAPS(f, float)
DEFINE_TAPS(d, double)

/* antialiased linear and cubic (_compute_indices_min_size_weights_aa with the triangle filter, or
 * the cubic one with a = -0.5): a window of support max(scale, 1) * interp_size / 2 around each
 * output center (interp_size 2 linear, 4 cubic), normalized weights, in PyTorch's mixed
 * float/double promotions; a->taps is the window bound ceil(support) * 2 + 1 */
#define DEFINE_AA_TAPS(SUF, REAL)                                                                  \
  static REAL aa_support_##SUF(REAL scale, int half, bool aa) {                                   \
    return scale >= 1.0 && aa ? (REAL)((half * 1.0) * scale) : (REAL)(half * 1.0);                \
  }                                                                                               \
  static REAL aa_filter_##SUF(REAL x, bool cubic) {                                               \
    x = x < 0 ? -x : x;                                                                           \
    if (!cubic) return x < 1 ? 1 - x : 0;                                                         \
    const REAL a = (REAL)-0.5;                                                                    \
    if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;                                        \
    if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;                                            \
    return 0;                                                                                     \
  }                                                                                               \
  static void aa_taps_##SUF(up_axis_t* a, bool align, bool has, double scale_arg, bool cubic, bool aa) { \
    REAL scale = pixel_scale_##SUF(a->in, a->out, align, has, scale_arg);                        \
    REAL support = aa_support_##SUF(scale, cubic ? 2 : 1, aa);                                    \
    REAL invscale = scale >= 1.0 && aa ? (REAL)(1.0 / scale) : (REAL)1.0;                         \
    double delta = align && !aa ? 0.5 : 0.0; /* align_corners without antialias */                \
    for (int64_t o = 0; o < a->out; ++o) {                                                        \
      REAL center = (REAL)(scale * ((double)o + 0.5 - delta));                                    \
      int64_t xmin = (int64_t)((double)(center - support) + 0.5 + delta);                         \
      if (xmin < 0) xmin = 0;                                                                     \
      int64_t xmax = (int64_t)((double)(center + support) + 0.5 + delta);                         \
      int64_t xsize = (xmax < a->in ? xmax : a->in) - xmin;                                       \
      xsize = xsize < 0 ? 0 : xsize > a->taps ? a->taps : xsize;                                  \
      double* w = a->w + o * a->taps;                                                             \
      REAL total = 0;                                                                             \
      for (int64_t j = 0; j < a->taps; ++j) {                                                     \
        REAL x = (REAL)(((double)((REAL)(j + xmin) - center) + 0.5 - delta) * (double)invscale); \
        REAL wj = j < xsize ? aa_filter_##SUF(x, cubic) : 0;                                      \
        w[j] = (double)wj;                                                                        \
        total += wj;                                                                              \
        a->idx[o * a->taps + j] = j < xsize ? xmin + j : (xmin < a->in ? xmin : 0);               \
      }                                                                                           \
      if (total != 0)                                                                             \
        for (int64_t j = 0; j < xsize; ++j) w[j] = (double)((REAL)w[j] / total);                  \
    }                                                                                             \
  }                                                                                               \
  static int aa_window_##SUF(int64_t in, int64_t out, bool align, bool has, double scale_arg, bool cubic, bool aa) { \
    REAL support = aa_support_##SUF(pixel_scale_##SUF(in, out, align, has, scale_arg), cubic ? 2 : 1, aa); \
    return (int)ceil((double)support) * 2 + 1;                                                    \
  }
DEFINE_AA_TAPS(f, float)
DEFINE_AA_TAPS(d, double)

/* nearest_idx / nearest_exact_idx: PyTorch computes these in float for every dtype */
static void nearest_taps(up_axis_t* a, bool exact, bool has, double scale) {
  float s = has && scale > 0 ? (float)(1.0 / scale) : (float)a->in / (float)a->out;
  for (int64_t o = 0; o < a->out; ++o) {
    int64_t i;
    if (exact) {
      i = (int64_t)floorf((float)(((double)o + 0.5) * (double)s));
    } else if (a->out == a->in) {
      i = o;
    } else if (a->out == 2 * a->in) {
      i = o >> 1;
    } else {
      i = (int64_t)floorf((float)o * s);
    }
    a->idx[o] = i < a->in - 1 ? i : a->in - 1;
    a->w[o] = 1;
  }
}

typedef struct up_bwd_t {
  const tpurt_tensor_t *go, *gi;
  up_axis_t ax[3];   /* depth, height, width (unused leading axes have size 1) */
  int64_t C, plane;  /* channels; elements in one input plane */
  double* acc;       /* [threads][plane] */
} up_bwd_t;

static void up_bwd_planes(void* u, int64_t p0, int64_t p1, int tid) {
  up_bwd_t* a = (up_bwd_t*)u;
  const up_axis_t *A0 = &a->ax[0], *A1 = &a->ax[1], *A2 = &a->ax[2];
  double* acc = a->acc + (size_t)tid * (size_t)a->plane;
  for (int64_t p = p0; p < p1; ++p) {
    int64_t n = p / a->C, c = p % a->C;
    int64_t gbase = n * a->go->strides[0] + c * a->go->strides[1];
    int64_t ibase = n * a->gi->strides[0] + c * a->gi->strides[1];
    memset(acc, 0, (size_t)a->plane * sizeof(double));
    for (int64_t o0 = 0; o0 < A0->out; ++o0) {
      for (int64_t o1 = 0; o1 < A1->out; ++o1) {
        for (int64_t o2 = 0; o2 < A2->out; ++o2) {
          double g = tpurt_nn_ld(a->go, gbase + o0 * A0->sout + o1 * A1->sout + o2 * A2->sout);
          for (int t0 = 0; t0 < A0->taps; ++t0) {
            double g0 = g * A0->w[o0 * A0->taps + t0];
            int64_t r0 = A0->idx[o0 * A0->taps + t0] * A1->in;
            for (int t1 = 0; t1 < A1->taps; ++t1) {
              double g1 = g0 * A1->w[o1 * A1->taps + t1];
              int64_t r1 = (r0 + A1->idx[o1 * A1->taps + t1]) * A2->in;
              for (int t2 = 0; t2 < A2->taps; ++t2)
                acc[r1 + A2->idx[o2 * A2->taps + t2]] += g1 * A2->w[o2 * A2->taps + t2];
            }
          }
        }
      }
    }
    for (int64_t i0 = 0; i0 < A0->in; ++i0)
      for (int64_t i1 = 0; i1 < A1->in; ++i1)
        for (int64_t i2 = 0; i2 < A2->in; ++i2)
          tpurt_nn_st(a->gi, ibase + i0 * A0->sin + i1 * A1->sin + i2 * A2->sin,
                        acc[(i0 * A1->in + i1) * A2->in + i2]);
  }
}

/* forward (the AA modes): out[o] = sum over the taps of w0 w1 w2 in[idx], per plane */
static void up_fwd_planes(void* u, int64_t p0, int64_t p1, int tid) {
  up_bwd_t* a = (up_bwd_t*)u;
  const up_axis_t *A0 = &a->ax[0], *A1 = &a->ax[1], *A2 = &a->ax[2];
  const tpurt_tensor_t *src = a->gi, *dst = a->go; /* forward: gi holds the input, go the output */
  for (int64_t p = p0; p < p1; ++p) {
    int64_t n = p / a->C, c = p % a->C;
    int64_t sbase = n * src->strides[0] + c * src->strides[1];
    int64_t dbase = n * dst->strides[0] + c * dst->strides[1];
    for (int64_t o0 = 0; o0 < A0->out; ++o0)
      for (int64_t o1 = 0; o1 < A1->out; ++o1)
        for (int64_t o2 = 0; o2 < A2->out; ++o2) {
          double acc = 0;
          for (int t0 = 0; t0 < A0->taps; ++t0) {
            double w0 = A0->w[o0 * A0->taps + t0];
            int64_t s0 = A0->idx[o0 * A0->taps + t0] * A0->sin;
            for (int t1 = 0; t1 < A1->taps; ++t1) {
              double w1 = w0 * A1->w[o1 * A1->taps + t1];
              int64_t s1 = s0 + A1->idx[o1 * A1->taps + t1] * A1->sin;
              for (int t2 = 0; t2 < A2->taps; ++t2) {
                double w = w1 * A2->w[o2 * A2->taps + t2];
                if (w != 0) acc += w * tpurt_nn_ld(src, sbase + s1 + A2->idx[o2 * A2->taps + t2] * A2->sin);
              }
            }
          }
          tpurt_nn_st(dst, dbase + o0 * A0->sout + o1 * A1->sout + o2 * A2->sout, acc);
        }
  }
}


/* uint8 images (2-D), as CPU's uint8 resize (UpSampleKernel.cpp's separable uint8 path): each
 * axis's weights quantized to 16-bit fixed point at the largest precision that keeps the biggest
 * weight below 2^15, a horizontal pass into a uint8 image of the input's height, then a vertical
 * one, each rounding (adding half an output step before the shift) and saturating to [0, 255]. */
typedef struct up_u8_t {
  const tpurt_tensor_t *src, *dst;
  const up_axis_t *ah, *aw; /* height, width */
  const int32_t *qh, *qw;   /* quantized weights [out * taps] */
  int ph, pw;               /* their precisions */
  int64_t C;
  uint8_t* tmp;             /* [threads][in_h * out_w] */
} up_u8_t;

/* Taps that read the same (border-clamped) pixel are merged first, and the precision follows the
 * largest weight as CPU accumulates it (_compute_indices_min_size_weights: a running sum per
 * pixel, so a border pixel's 1 - w3 > 1 of bicubic lowers the precision by one bit). */
static int up_u8_quantize(const up_axis_t* a, int32_t* q) {
  double wmax = 0;
  for (int64_t o = 0; o < a->out; ++o) {
    const int64_t* ix = a->idx + o * a->taps;
    double* w = a->w + o * a->taps;
    for (int t = 0; t < a->taps; ++t) {
      int s = 0;
      while (s < t && ix[s] != ix[t]) ++s;
      if (s < t) w[s] += w[t], w[t] = 0;
      wmax = w[s] > wmax ? w[s] : wmax;
    }
  }
  int prec = 0;
  for (; prec < 22; ++prec)
    if ((int)(0.5 + wmax * (double)(1 << (prec + 1))) >= (1 << 15)) break;
  for (int64_t i = 0; i < a->out * a->taps; ++i) {
    double v = a->w[i] * (double)(1 << prec);
    q[i] = (int16_t)(v < 0 ? v - 0.5 : v + 0.5);
  }
  return prec;
}

static uint8_t up_u8_round(int32_t acc, int prec) {
  int32_t v = acc >> prec;
  return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

static void up_u8_planes(void* u, int64_t p0, int64_t p1, int tid) {
  const up_u8_t* a = u;
  const up_axis_t *ah = a->ah, *aw = a->aw;
  uint8_t* tmp = a->tmp + (size_t)tid * (size_t)(ah->in * aw->out);
  const uint8_t* in = a->src->data;
  uint8_t* out = a->dst->data;
  for (int64_t p = p0; p < p1; ++p) {
    int64_t n = p / a->C, c = p % a->C;
    int64_t sb = n * a->src->strides[0] + c * a->src->strides[1];
    int64_t db = n * a->dst->strides[0] + c * a->dst->strides[1];
    for (int64_t y = 0; y < ah->in; ++y)
      for (int64_t x = 0; x < aw->out; ++x) {
        int32_t acc = 1 << (a->pw - 1);
        for (int t = 0; t < aw->taps; ++t)
          acc += a->qw[x * aw->taps + t] * in[sb + y * ah->sin + aw->idx[x * aw->taps + t] * aw->sin];
        tmp[y * aw->out + x] = up_u8_round(acc, a->pw);
      }
    for (int64_t y = 0; y < ah->out; ++y)
      for (int64_t x = 0; x < aw->out; ++x) {
        int32_t acc = 1 << (a->ph - 1);
        for (int t = 0; t < ah->taps; ++t)
          acc += a->qh[y * ah->taps + t] * tmp[ah->idx[y * ah->taps + t] * aw->out + x];
        out[db + y * ah->sout + x * aw->sout] = up_u8_round(acc, a->ph);
      }
  }
}

static tpurt_status_t up_u8_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, up_bwd_t* a, int64_t planes,
                                bool ref) {
  const up_axis_t *ah = &a->ax[1], *aw = &a->ax[2];
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  size_t bytes = (size_t)(ah->out * ah->taps + aw->out * aw->taps + 2) * sizeof(int32_t) +
                 (size_t)nt * (size_t)(ah->in * aw->out);
  char* mem = tpurt_kernel_scratch(ctx, bytes);
  if (!mem) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %zu bytes", call->name, bytes);
  int32_t* qh = (int32_t*)mem;
  int32_t* qw = qh + ah->out * ah->taps + 1;
  up_u8_t j = {a->gi, a->go, ah, aw, qh, qw, 0, 0, a->C, (uint8_t*)(qw + aw->out * aw->taps + 1)};
  j.ph = up_u8_quantize(ah, qh);
  j.pw = up_u8_quantize(aw, qw);
  if (j.ph < 1 || j.pw < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: weights too large to quantize", call->name);
  if (ref) up_u8_planes(&j, 0, planes, 0);
  else tpurt_parallel_for(ctx, planes, 1, up_u8_planes, &j);
  return TPURT_OK;
}

/* <mode>_backward(grad_output, output_size, input_size, [align_corners,] scales...), and for the AA
 * modes and bicubic also the forward <mode>(self, output_size, align_corners, scales...) */
static tpurt_status_t up_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, up_mode_t mode, bool backward,
                             bool ref) {
  const tpurt_tensor_t* t0 = tpurt_arg_tensor(call, 0);
  if (call->num_args < (backward ? 3 : 2) || !t0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected (grad_output, output_size, input_size, ...)", call->name);
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output", call->name);
  /* go: the tensor with the output sizes, gi: the one with the input sizes */
  up_bwd_t a = {backward ? t0 : &call->outputs[0], backward ? &call->outputs[0] : t0};
  const tpurt_tensor_t *go = a.go, *gi = a.gi;
  int nd = go->ndim - 2;
  if (nd < 1 || nd > 3 || gi->ndim != go->ndim)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected grad_output and grad_input of 3 to 5 dims, got %d and %d",
                        call->name, (int)go->ndim, (int)gi->ndim);
  if (go->sizes[0] != gi->sizes[0] || go->sizes[1] != gi->sizes[1])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: batch/channel sizes of grad_output and grad_input differ", call->name);
  /* uint8 images resize forward (torchvision's Resize): up_u8_run */
  bool u8 = !backward && go->dtype == TPURT_DTYPE_UINT8 && gi->dtype == TPURT_DTYPE_UINT8;
  if (!u8 && (!tpurt_dtype_is_floating(go->dtype) || !tpurt_dtype_is_floating(gi->dtype)))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(gi->dtype));
  bool align = false;
  int next = backward ? 3 : 2;
  if (mode != UP_NEAREST && mode != UP_NEAREST_EXACT) align = tpurt_arg_bool(call, next++, false);
  if (u8 && nd != 2) return TPURT_STATUS(UNIMPLEMENTED, "%s: uint8 resizing is 2-D only", call->name);
  /* the output's opmath; uint8's weights are computed in double, as CPU's */
  bool dbl = u8 || (backward ? gi : go)->dtype == TPURT_DTYPE_FLOAT64;
  /* uint8 bilinear takes the antialias taps without antialiasing, as CPU's uint8 path; uint8
   * bicubic the float path's taps (clamped to the border), in double */
  bool windowed = mode == UP_LINEAR_AA || mode == UP_CUBIC_AA || (u8 && mode == UP_LINEAR);
  bool aa = mode == UP_LINEAR_AA || mode == UP_CUBIC_AA;
  int taps = mode == UP_CUBIC ? 4 : mode == UP_LINEAR ? 2 : 1;
  int64_t total = 0;
  for (int k = 0; k < 3; ++k) {
    up_axis_t* ax = &a.ax[k];
    int d = k - (3 - nd); /* spatial dim of this axis, or < 0 for a padding axis */
    if (d < 0) {
      *ax = (up_axis_t){1, 1, 0, 0, 1};
      continue;
    }
    *ax = (up_axis_t){gi->sizes[2 + d], go->sizes[2 + d], gi->strides[2 + d], go->strides[2 + d], taps};
    if (ax->out > 0 && ax->in <= 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: input size along dim %d must be positive", call->name, 2 + d);
    if (windowed) {
      double sc = 0;
      bool has = tpurt_arg_opt_double(call, next + d, &sc);
      bool cubic = mode == UP_CUBIC_AA;
      ax->taps = dbl ? aa_window_d(ax->in, ax->out, align, has, sc, cubic, aa)
                     : aa_window_f(ax->in, ax->out, align, has, sc, cubic, aa);
    }
    total += ax->out * ax->taps;
  }
  a.C = go->sizes[1];
  a.plane = a.ax[0].in * a.ax[1].in * a.ax[2].in;
  int64_t planes = go->sizes[0] * go->sizes[1];
  if (planes == 0 || a.plane == 0) return TPURT_OK;
  int nt = ref || !backward ? 1 : tpurt_kernel_num_threads(ctx);
  size_t bytes = (size_t)(total + 3) * (sizeof(int64_t) + sizeof(double)) + (size_t)nt * (size_t)a.plane * sizeof(double);
  char* mem = tpurt_kernel_scratch(ctx, bytes);
  if (!mem) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch for %zu bytes", call->name, bytes);
  a.acc = (double*)mem;
  mem += (size_t)nt * (size_t)a.plane * sizeof(double);
  static const int64_t kZeroIdx = 0;
  static const double kOneW = 1.0;
  for (int k = 0; k < 3; ++k) {
    up_axis_t* ax = &a.ax[k];
    int d = k - (3 - nd);
    if (d < 0) {
      ax->idx = (int64_t*)&kZeroIdx, ax->w = (double*)&kOneW;
      continue;
    }
    ax->w = (double*)mem;
    mem += (size_t)(ax->out * ax->taps) * sizeof(double);
    ax->idx = (int64_t*)mem;
    mem += (size_t)(ax->out * ax->taps) * sizeof(int64_t);
    double scale = 0;
    bool has = tpurt_arg_opt_double(call, next + d, &scale);
    switch (mode) {
      case UP_NEAREST: nearest_taps(ax, false, has, scale); break;
      case UP_NEAREST_EXACT: nearest_taps(ax, true, has, scale); break;
      case UP_LINEAR:
        if (windowed) aa_taps_d(ax, align, has, scale, false, false);
        else if (dbl) linear_taps_d(ax, align, has, scale);
        else linear_taps_f(ax, align, has, scale);
        break;
      case UP_CUBIC: dbl ? cubic_taps_d(ax, align, has, scale) : cubic_taps_f(ax, align, has, scale); break;
      case UP_LINEAR_AA: dbl ? aa_taps_d(ax, align, has, scale, false, true) : aa_taps_f(ax, align, has, scale, false, true); break;
      case UP_CUBIC_AA: dbl ? aa_taps_d(ax, align, has, scale, true, true) : aa_taps_f(ax, align, has, scale, true, true); break;
    }
  }
  if (u8) return up_u8_run(ctx, call, &a, planes, ref);
  tpurt_range_fn_t fn = backward ? up_bwd_planes : up_fwd_planes;
  if (ref) fn(&a, 0, planes, 0);
  else tpurt_parallel_for(ctx, planes, 1, fn, &a);
  return TPURT_OK;
}

TPURT_NN_PAIR(upsample_nearest_bwd, up_run(ctx, call, UP_NEAREST, true, ref))
TPURT_NN_PAIR(upsample_nearest_exact_bwd, up_run(ctx, call, UP_NEAREST_EXACT, true, ref))
TPURT_NN_PAIR(upsample_linear_bwd, up_run(ctx, call, UP_LINEAR, true, ref))
TPURT_NN_PAIR(upsample_bicubic_fwd, up_run(ctx, call, UP_CUBIC, false, ref))
TPURT_NN_PAIR(upsample_bicubic_bwd, up_run(ctx, call, UP_CUBIC, true, ref))
TPURT_NN_PAIR(upsample_bilinear_aa, up_run(ctx, call, UP_LINEAR_AA, false, ref))
TPURT_NN_PAIR(upsample_bilinear_aa_bwd, up_run(ctx, call, UP_LINEAR_AA, true, ref))
TPURT_NN_PAIR(upsample_bicubic_aa, up_run(ctx, call, UP_CUBIC_AA, false, ref))
TPURT_NN_PAIR(upsample_bicubic_aa_bwd, up_run(ctx, call, UP_CUBIC_AA, true, ref))
/* bilinear forward on uint8 (upsample.c's kernel computes in floating point only) */
TPURT_NN_PAIR(upsample_linear_fwd, up_run(ctx, call, UP_LINEAR, false, ref))
