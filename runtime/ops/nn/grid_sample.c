/* grid_sampler_2d / grid_sampler_3d and their backward (nn.functional.grid_sample):
 * bilinear, nearest and (2-D) bicubic sampling with zeros, border or
 * reflection padding, matching PyTorch CPU's formulas in its own precision
 * (grid_sample_impl.h). The forward splits over output rows; the backward over
 * batch entries, each thread adding its grad_input into a double
 * accumulator of one batch entry and storing it once. */
#include <math.h>
#include <string.h>

#include "ops/nn/nn.h"

enum { GS_BILINEAR = 0, GS_NEAREST = 1, GS_BICUBIC = 2 };
enum { GS_PAD_ZEROS = 0, GS_PAD_BORDER = 1, GS_PAD_REFLECTION = 2 };

typedef struct gs_t {
  const tpurt_tensor_t *in, *grid, *out;     /* forward: out = output; backward: gout = grad_output */
  const tpurt_tensor_t *gout, *gin, *ggrid;  /* backward */
  int64_t N, C, D, H, W, OD, OH, OW;         /* D = OD = 1 in 2-D */
  int interp, pad;
  bool align, backward, three_d;
  double* acc;                               /* [threads][C * D * H * W] (backward with grad_input) */
  tpurt_tensor_t v5[6];                      /* 5-D views of the 2-D op's tensors (gs_view5) */
} gs_t;

/* Offset of element [i0..i4] of a tensor seen as 5-D: gs_run lifts the 2-D op's 4-D tensors to
 * 5-D (a size-1 depth dim of stride 0), so one formula serves both ops. */
static inline int64_t off5(const tpurt_tensor_t* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t i4) {
  return i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2] + i3 * t->strides[3] + i4 * t->strides[4];
}
/* t (4-D or 5-D) as 5-D, with a size-1 dim inserted at `dpos` if it is 4-D */
static const tpurt_tensor_t* gs_view5(const tpurt_tensor_t* t, int dpos, tpurt_tensor_t* out) {
  if (!t || t->ndim == 5) return t;
  *out = *t;
  out->ndim = 5;
  for (int d = 4; d > dpos; --d) out->sizes[d] = t->sizes[d - 1], out->strides[d] = t->strides[d - 1];
  out->sizes[dpos] = 1, out->strides[dpos] = 0;
  return out;
}
static inline double gs_in(const gs_t* g, int64_t n, int64_t c, int64_t d, int64_t h, int64_t w) {
  return tpurt_nn_ld(g->in, off5(g->in, n, c, d, h, w));
}
static inline double gs_gout(const gs_t* g, int64_t n, int64_t c, int64_t d, int64_t h, int64_t w) {
  return tpurt_nn_ld(g->gout, off5(g->gout, n, c, d, h, w));
}
static inline void gs_out(const gs_t* g, int64_t n, int64_t c, int64_t d, int64_t h, int64_t w, double v) {
  tpurt_nn_st(g->out, off5(g->out, n, c, d, h, w), v);
}
static inline double gs_grid(const gs_t* g, int64_t n, int64_t d, int64_t h, int64_t w, int k) {
  return tpurt_nn_ld(g->grid, off5(g->grid, n, d, h, w, k));
}
static inline void gs_ggrid(const gs_t* g, int64_t n, int64_t d, int64_t h, int64_t w, double gx, double gy,
                            double gz) {
  if (!g->ggrid) return;
  tpurt_nn_st(g->ggrid, off5(g->ggrid, n, d, h, w, 0), gx);
  tpurt_nn_st(g->ggrid, off5(g->ggrid, n, d, h, w, 1), gy);
  if (g->three_d) tpurt_nn_st(g->ggrid, off5(g->ggrid, n, d, h, w, 2), gz);
}
/* CPU converts a (floored / rounded / clipped) coordinate to an integer by truncation */
static inline bool gs_to_index_any(double v, int64_t* out) {
  if (!(v > -2147483648.0 && v < 2147483648.0)) return false;
  *out = (int64_t)v;
  return true;
}
static inline bool gs_to_index(double v, int64_t size, int64_t* out) {
  return gs_to_index_any(v, out) && *out > -1 && *out < size;
}

#define GS_REAL float
#define GS_FN(name) name##_f
#define GS_FLOOR floorf
#define GS_TRUNC truncf
#define GS_NEARBYINT nearbyintf
#define GS_FMOD fmodf
#define GS_FMA fmaf
#include "ops/nn/grid_sample_impl.h"
#undef GS_REAL
#undef GS_FN
#undef GS_FLOOR
#undef GS_TRUNC
#undef GS_NEARBYINT
#undef GS_FMOD
#undef GS_FMA
#define GS_REAL double
#define GS_FN(name) name##_d
#define GS_FLOOR floor
#define GS_TRUNC trunc
#define GS_NEARBYINT nearbyint
#define GS_FMOD fmod
#define GS_FMA fma
#include "ops/nn/grid_sample_impl.h"

static void gs_point(const gs_t* g, int64_t n, int64_t d, int64_t h, int64_t w, double* gin) {
  bool dbl = g->in->dtype == TPURT_DTYPE_FLOAT64;
  if (g->three_d) {
    if (dbl) sample3d_d(g, n, d, h, w, gin);
    else sample3d_f(g, n, d, h, w, gin);
  } else {
    if (dbl) sample2d_d(g, n, h, w, gin);
    else sample2d_f(g, n, h, w, gin);
  }
}

/* forward: rows (n, od, oh) */
static void gs_fwd_rows(void* u, int64_t r0, int64_t r1, int tid) {
  const gs_t* g = u;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t oh = r % g->OH, od = (r / g->OH) % g->OD, n = r / (g->OH * g->OD);
    for (int64_t ow = 0; ow < g->OW; ++ow) gs_point(g, n, od, oh, ow, NULL);
  }
}

/* backward: batch entries */
static void gs_bwd_batches(void* u, int64_t n0, int64_t n1, int tid) {
  const gs_t* g = u;
  int64_t vol = g->C * g->D * g->H * g->W;
  double* acc = g->acc ? g->acc + (size_t)tid * (size_t)vol : NULL;
  for (int64_t n = n0; n < n1; ++n) {
    if (acc) memset(acc, 0, (size_t)vol * sizeof(double));
    for (int64_t od = 0; od < g->OD; ++od)
      for (int64_t oh = 0; oh < g->OH; ++oh)
        for (int64_t ow = 0; ow < g->OW; ++ow) gs_point(g, n, od, oh, ow, acc);
    if (!acc) continue;
    for (int64_t c = 0; c < g->C; ++c)
      for (int64_t d = 0; d < g->D; ++d)
        for (int64_t h = 0; h < g->H; ++h)
          for (int64_t w = 0; w < g->W; ++w)
            tpurt_nn_st(g->gin, off5(g->gin, n, c, d, h, w), acc[((c * g->D + d) * g->H + h) * g->W + w]);
  }
}

/* the tensors of g as 5-D: depth is dim 2 of input/output/gradients, dim 1 of the grids */
static void gs_as_5d(gs_t* g) {
  g->in = gs_view5(g->in, 2, &g->v5[0]);
  g->out = gs_view5(g->out, 2, &g->v5[1]);
  g->gout = gs_view5(g->gout, 2, &g->v5[2]);
  g->gin = gs_view5(g->gin, 2, &g->v5[3]);
  g->grid = gs_view5(g->grid, 1, &g->v5[4]);
  g->ggrid = gs_view5(g->ggrid, 1, &g->v5[5]);
}

/* grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners)
 * grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
 *                              align_corners, output_mask) -> (grad_input, grad_grid) */
static tpurt_status_t gs_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool three_d, bool backward,
                             bool ref) {
  int b = backward ? 1 : 0, nd = three_d ? 5 : 4;
  gs_t g;
  memset(&g, 0, sizeof(g));
  if (backward) TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &g.gout));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, b, -1, &g.in));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, b + 1, -1, &g.grid));
  g.interp = (int)tpurt_arg_int(call, b + 2, -1);
  g.pad = (int)tpurt_arg_int(call, b + 3, -1);
  g.align = tpurt_arg_bool(call, b + 4, false);
  g.backward = backward, g.three_d = three_d;
  if (g.in->ndim != nd || g.grid->ndim != nd || g.grid->sizes[nd - 1] != nd - 2)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a %d-D input and a %d-D grid with last size %d", call->name,
                        nd, nd, nd - 2);
  if (g.in->sizes[0] != g.grid->sizes[0])
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: grid and input must have the same batch size", call->name);
  if (g.interp < GS_BILINEAR || g.interp > GS_BICUBIC || (three_d && g.interp == GS_BICUBIC) ||
      g.pad < GS_PAD_ZEROS || g.pad > GS_PAD_REFLECTION)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: bad interpolation (%d) or padding (%d) mode", call->name, g.interp,
                        g.pad);
  if (!tpurt_dtype_is_floating(g.in->dtype) || g.grid->dtype != g.in->dtype)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(g.in->dtype));
  g.N = g.in->sizes[0], g.C = g.in->sizes[1];
  g.D = three_d ? g.in->sizes[2] : 1, g.H = g.in->sizes[nd - 2], g.W = g.in->sizes[nd - 1];
  g.OD = three_d ? g.grid->sizes[1] : 1, g.OH = g.grid->sizes[nd - 3], g.OW = g.grid->sizes[nd - 2];
  if (!backward) {
    if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output", call->name);
    g.out = &call->outputs[0];
    int64_t rows = g.N * g.OD * g.OH;
    if (rows == 0 || g.C == 0 || g.OW == 0) return TPURT_OK;
    if (g.D * g.H * g.W == 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: input spatial size must be non-empty", call->name);
    gs_as_5d(&g);
    if (ref) gs_fwd_rows(&g, 0, rows, 0);
    else tpurt_parallel_for(ctx, rows, 1, gs_fwd_rows, &g);
    return TPURT_OK;
  }
  if (g.gout->ndim != nd) return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_output must be %d-D", call->name, nd);
  bool want_in = true;
  tpurt_arg_bool_mask(call, 6, 1, &want_in);
  if (call->num_outputs > 0 && want_in && call->outputs[0].ndim == nd &&
      tpurt_tensor_numel(&call->outputs[0]) == tpurt_tensor_numel(g.in))
    g.gin = &call->outputs[0];
  if (call->num_outputs > 1 && call->outputs[1].ndim == nd) g.ggrid = &call->outputs[1];
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  int64_t vol = g.C * g.D * g.H * g.W;
  if (g.gin && vol > 0) {
    g.acc = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)vol * sizeof(double));
    if (!g.acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  }
  if (g.N == 0) return TPURT_OK;
  if (vol == 0 && g.OD * g.OH * g.OW > 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: input spatial size must be non-empty", call->name);
  gs_as_5d(&g);
  if (ref) gs_bwd_batches(&g, 0, g.N, 0);
  else tpurt_parallel_for(ctx, g.N, 1, gs_bwd_batches, &g);
  return TPURT_OK;
}

TPURT_NN_PAIR(grid_sampler_2d, gs_run(ctx, call, false, false, ref))
TPURT_NN_PAIR(grid_sampler_2d_backward, gs_run(ctx, call, false, true, ref))
TPURT_NN_PAIR(grid_sampler_3d, gs_run(ctx, call, true, false, ref))
TPURT_NN_PAIR(grid_sampler_3d_backward, gs_run(ctx, call, true, true, ref))
