/* Upsampling kernels, nearest and (bi)linear, 1-D and 2-D, forward and
 * backward (upsample_nearest1d/2d, upsample_linear1d, upsample_bilinear2d),
 * on 3-D [C, H, W] or 4-D [N, C, H, W] tensors of any strides (1-D runs as
 * 2-D with a unit height). Work splits over (n, c) planes; the index math
 * follows PyTorch's CPU kernels. The reference is the same loop run
 * serially. Backward passes accumulate a plane in double and round once. */
#include <math.h>
#include <string.h>

#include "ops/nn/plane.h"

/* ---- upsampling: nearest and bilinear, forward and backward ---- */
typedef struct upsample_t {
  const tpurt_tensor_t *src, *dst;
  tpurt_nn_plane_t ps, pd;
  int64_t H, W, OH, OW; /* input and output plane sizes */
  bool bilinear, align_corners, backward, has_sh, has_sw;
  double scale_h, scale_w;
  double* acc;
} upsample_t;

/* PyTorch's index math runs in the op's "opmath" type: float for float and
 * the 16-bit types, double for double. REAL picks it. */
#define DEFINE_SRC_INDEX(SUF, REAL, FLOOR)                                                         \
  static REAL scales_value_##SUF(bool has, double scale, int64_t in, int64_t out) {               \
    return has && scale > 0 ? (REAL)(1.0 / scale) : (REAL)in / (REAL)out;                         \
  }                                                                                               \
  static int64_t nearest_src_##SUF(int64_t o, int64_t in, int64_t out, bool has, double scale) {  \
    if (out == in) return o;                                                                      \
    if (out == 2 * in) return o >> 1;                                                             \
    REAL s = scales_value_##SUF(has, scale, in, out);                                             \
    int64_t i = (int64_t)FLOOR((REAL)o * s);                                                      \
    return i < in - 1 ? i : in - 1;                                                               \
  }                                                                                               \
  static void linear_src_##SUF(int64_t o, int64_t in, int64_t out, bool align, bool has,          \
                               double scale, int64_t* i0, int64_t* i1, double* l0, double* l1) {  \
    if (in == out) {                                                                              \
      *i0 = *i1 = o, *l0 = 1, *l1 = 0;                                                            \
      return;                                                                                     \
    }                                                                                             \
    REAL ratio = align ? (out > 1 ? (REAL)(in - 1) / (REAL)(out - 1) : (REAL)0)                   \
                       : scales_value_##SUF(has, scale, in, out);                                 \
    REAL real = align ? ratio * (REAL)o : ratio * ((REAL)o + (REAL)0.5) - (REAL)0.5;              \
    if (!align && real < 0) real = 0;                                                             \
    *i0 = (int64_t)real;                                                                          \
    *i1 = *i0 + (*i0 < in - 1 ? 1 : 0);                                                           \
    REAL lam = real - (REAL)*i0;                                                                  \
    lam = lam < 0 ? 0 : lam > 1 ? 1 : lam;                                                        \
    *l1 = lam, *l0 = (REAL)1 - lam;                                                               \
  }
DEFINE_SRC_INDEX(f, float, floorf)
DEFINE_SRC_INDEX(d, double, floor)

/* Source pair and weights of output index o along one axis (PyTorch's
 * compute_source_index_and_lambda / nearest_idx). */
static void linear_src(bool dbl, int64_t o, int64_t in, int64_t out, bool align, bool has, double scale, int64_t* i0,
                       int64_t* i1, double* l0, double* l1) {
  if (dbl) linear_src_d(o, in, out, align, has, scale, i0, i1, l0, l1);
  else linear_src_f(o, in, out, align, has, scale, i0, i1, l0, l1);
}
static int64_t nearest_src(bool dbl, int64_t o, int64_t in, int64_t out, bool has, double scale) {
  return dbl ? nearest_src_d(o, in, out, has, scale) : nearest_src_f(o, in, out, has, scale);
}

static void upsample_planes(void* u, int64_t p0, int64_t p1, int tid) {
  upsample_t* a = (upsample_t*)u;
  tpurt_dtype_t sd = a->src->dtype, dd = a->dst->dtype;
  double* acc = a->backward ? a->acc + (size_t)tid * (size_t)(a->H * a->W) : NULL;
  bool dbl = dd == TPURT_DTYPE_FLOAT64;
  for (int64_t p = p0; p < p1; ++p) {
    if (acc) memset(acc, 0, (size_t)(a->H * a->W) * sizeof(double));
    for (int64_t oh = 0; oh < a->OH; ++oh) {
      int64_t h0, h1;
      double lh0 = 1, lh1 = 0;
      if (a->bilinear) linear_src(dbl, oh, a->H, a->OH, a->align_corners, a->has_sh, a->scale_h, &h0, &h1, &lh0, &lh1);
      else h0 = h1 = nearest_src(dbl, oh, a->H, a->OH, a->has_sh, a->scale_h);
      for (int64_t ow = 0; ow < a->OW; ++ow) {
        int64_t w0, w1;
        double lw0 = 1, lw1 = 0;
        if (a->bilinear) linear_src(dbl, ow, a->W, a->OW, a->align_corners, a->has_sw, a->scale_w, &w0, &w1, &lw0, &lw1);
        else w0 = w1 = nearest_src(dbl, ow, a->W, a->OW, a->has_sw, a->scale_w);
        if (a->backward) {
          double g = tpurt_dtype_load_f64(sd, tpurt_nn_plane_at(a->src, &a->ps, p, oh, ow));
          if (!a->bilinear) {
            acc[h0 * a->W + w0] += g;
          } else {
            acc[h0 * a->W + w0] += lh0 * lw0 * g;
            acc[h0 * a->W + w1] += lh0 * lw1 * g;
            acc[h1 * a->W + w0] += lh1 * lw0 * g;
            acc[h1 * a->W + w1] += lh1 * lw1 * g;
          }
          continue;
        }
        char* o = tpurt_nn_plane_at(a->dst, &a->pd, p, oh, ow);
        if (!a->bilinear) {
          memcpy(o, tpurt_nn_plane_at(a->src, &a->ps, p, h0, w0), tpurt_dtype_size(dd));
          continue;
        }
        double v = lh0 * (lw0 * tpurt_dtype_load_f64(sd, tpurt_nn_plane_at(a->src, &a->ps, p, h0, w0)) +
                          lw1 * tpurt_dtype_load_f64(sd, tpurt_nn_plane_at(a->src, &a->ps, p, h0, w1))) +
                   lh1 * (lw0 * tpurt_dtype_load_f64(sd, tpurt_nn_plane_at(a->src, &a->ps, p, h1, w0)) +
                          lw1 * tpurt_dtype_load_f64(sd, tpurt_nn_plane_at(a->src, &a->ps, p, h1, w1)));
        tpurt_dtype_store_f64(dd, o, v);
      }
    }
    if (acc)
      for (int64_t h = 0; h < a->H; ++h)
        for (int64_t w = 0; w < a->W; ++w) tpurt_dtype_store_f64(dd, tpurt_nn_plane_at(a->dst, &a->pd, p, h, w), acc[h * a->W + w]);
  }
}

static tpurt_status_t upsample_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const tpurt_tensor_t* src,
                                   const tpurt_tensor_t* dst, bool bilinear, bool backward, bool align,
                                   bool has_sh, double sh, bool has_sw, double sw, bool ref) {
  upsample_t a = {src, dst};
  TPURT_RETURN_IF_ERROR(tpurt_nn_planes_check(call, src, dst, &a.ps, &a.pd));
  if (src->dtype != dst->dtype || (!tpurt_dtype_is_floating(dst->dtype) && (bilinear || backward)))
    return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for %s", call->name, tpurt_dtype_name(dst->dtype));
  a.bilinear = bilinear, a.backward = backward, a.align_corners = align;
  a.has_sh = has_sh, a.scale_h = sh, a.has_sw = has_sw, a.scale_w = sw;
  const tpurt_nn_plane_t* in_plane = backward ? &a.pd : &a.ps;
  const tpurt_nn_plane_t* out_plane = backward ? &a.ps : &a.pd;
  a.H = in_plane->H, a.W = in_plane->W, a.OH = out_plane->H, a.OW = out_plane->W;
  if (tpurt_tensor_numel(dst) == 0) return TPURT_OK;
  if (a.H == 0 || a.W == 0) return TPURT_STATUS(INVALID_ARGUMENT, "%s: empty input plane", call->name);
  if (backward) {
    int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
    a.acc = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)(a.H * a.W) * sizeof(double));
    if (!a.acc) return TPURT_STATUS(RESOURCE_EXHAUSTED, "%s: no scratch", call->name);
  }
  tpurt_nn_planes_run(ctx, ref, a.pd.count, upsample_planes, &a);
  return TPURT_OK;
}

/* upsample_nearest2d(self, output_size, scales_h?, scales_w?)
 * upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h?, scales_w?)
 * upsample_bilinear2d(self, output_size, align_corners, scales_h?, scales_w?)
 * upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, scales_h?, scales_w?) */
static tpurt_status_t upsample_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool bilinear,
                                    bool backward, bool ref) {
  const tpurt_tensor_t *src = NULL, *dst = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &src));
  TPURT_RETURN_IF_ERROR(tpurt_nn_output(call, 0, &dst));
  int next = backward ? 3 : 2;
  bool align = bilinear ? tpurt_arg_bool(call, next++, false) : false;
  double sh = 0, sw = 0;
  bool has_sh = tpurt_arg_opt_double(call, next, &sh), has_sw = tpurt_arg_opt_double(call, next + 1, &sw);
  return upsample_run(ctx, call, src, dst, bilinear, backward, align, has_sh, sh, has_sw, sw, ref);
}

/* A 3-D [N, C, W] tensor as [N, C, 1, W]. */
static tpurt_tensor_t with_unit_h(const tpurt_tensor_t* t) {
  tpurt_tensor_t v = *t;
  v.ndim = 4;
  v.sizes[3] = t->sizes[2], v.strides[3] = t->strides[2];
  v.sizes[2] = 1, v.strides[2] = 0;
  return v;
}

/* upsample_nearest1d(self, output_size, scales?) / _backward(grad_output, output_size, input_size, scales?)
 * upsample_linear1d(self, output_size, align_corners, scales?) / _backward(..., input_size, align_corners, scales?)
 * run as the 2-D kernels on [N, C, 1, W]. */
static tpurt_status_t upsample1d_impl(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool linear,
                                      bool backward, bool ref) {
  const tpurt_tensor_t *src = NULL, *dst = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, 3, &src));
  TPURT_RETURN_IF_ERROR(tpurt_nn_output(call, 0, &dst));
  if (dst->ndim != 3) return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected a 3-D output", call->name);
  int next = backward ? 3 : 2;
  bool align = linear ? tpurt_arg_bool(call, next++, false) : false;
  double sw = 0;
  bool has_sw = tpurt_arg_opt_double(call, next, &sw);
  tpurt_tensor_t s4 = with_unit_h(src), d4 = with_unit_h(dst);
  return upsample_run(ctx, call, &s4, &d4, linear, backward, align, false, 0, has_sw, sw, ref);
}
TPURT_NN_PAIR(upsample_nearest2d, upsample_impl(ctx, call, false, false, ref))
TPURT_NN_PAIR(upsample_nearest2d_backward, upsample_impl(ctx, call, false, true, ref))
TPURT_NN_PAIR(upsample_bilinear2d,
              tpurt_arg_tensor(call, 0) && tpurt_arg_tensor(call, 0)->dtype == TPURT_DTYPE_UINT8
                  ? (ref ? tpurt_nn_upsample_linear_fwd_ref(ctx, call) : tpurt_nn_upsample_linear_fwd(ctx, call))
                  : upsample_impl(ctx, call, true, false, ref))
TPURT_NN_PAIR(upsample_bilinear2d_backward, upsample_impl(ctx, call, true, true, ref))
TPURT_NN_PAIR(upsample_nearest1d, upsample1d_impl(ctx, call, false, false, ref))
TPURT_NN_PAIR(upsample_nearest1d_backward, upsample1d_impl(ctx, call, false, true, ref))
TPURT_NN_PAIR(upsample_linear1d, upsample1d_impl(ctx, call, true, false, ref))
TPURT_NN_PAIR(upsample_linear1d_backward, upsample1d_impl(ctx, call, true, true, ref))
