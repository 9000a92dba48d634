/* Convolution kernels (convolution_overrideable and its backward; 1-3
 * spatial dims, stride, padding, dilation, groups, transposed) via im2col /
 * col2im and the strided GEMM entry. The reference kernels are direct nested
 * loops in double, independent of im2col.
 *
 * Everything is phrased on one "regular convolution" geometry: an image side
 * X [N, Cx, xs...], a column side Y [N, Cy, ys...], weight W [Cy, Cx/G, k...]:
 *   fwd:      Y  = conv(X, W)          (regular forward; transposed backward-data)
 *   bwd_data: dX = col2im(W^T dY)      (regular backward-data; transposed forward)
 *   bwd_w:    dW = dY im2col(X)^T      (both; roles of X/Y swap for transposed) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/linalg/gemm.h"
#include "ops/nn/nn.h"

/* im2col buffers are filled a chunk of samples at a time, up to this size. */
enum { COL_BYTES = 32 << 20 };

typedef struct conv_t {
  int64_t N, G, Cx, Cy, K; /* K = product of kernel sizes */
  int64_t xs[3], ys[3], k[3], st[3], pad[3], dil[3];
  int64_t Lx, Ly;
  tpurt_dtype_t dtype;
  size_t es;
} conv_t;

/* (n, c, spatial) view of a tensor with spatial dims right-aligned into 3. */
typedef struct ncs_t {
  char* data;
  int64_t sn, sc, ss[3];
} ncs_t;

static ncs_t ncs_of(const tpurt_tensor_t* t, int nsp) {
  ncs_t v = {(char*)t->data, t->strides[0], t->strides[1], {0, 0, 0}};
  for (int d = 0; d < nsp; ++d) v.ss[3 - nsp + d] = t->strides[2 + d];
  return v;
}

/* Whether the spatial dims collapse into one stride (true for contiguous and
 * channels-last layouts). */
static bool flat_spatial(const ncs_t* v, const int64_t* sizes, int64_t* out_stride) {
  int64_t stride = 1, expect = -1;
  for (int d = 2; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (expect < 0) stride = v->ss[d], expect = v->ss[d] * sizes[d];
    else if (v->ss[d] != expect) return false;
    else expect *= sizes[d];
  }
  *out_stride = stride;
  return true;
}

static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- element moves by size (im2col is a pure copy; zero bits are zero in every dtype) ---- */
static inline void move_elem(char* dst, const char* src, size_t es) {
  switch (es) {
    case 2: *(uint16_t*)dst = *(const uint16_t*)src; break;
    case 4: *(uint32_t*)dst = *(const uint32_t*)src; break;
    case 8: *(uint64_t*)dst = *(const uint64_t*)src; break;
    default: memcpy(dst, src, es);
  }
}

/* im2col of samples [n0, n0+nn): col(n, c*K + kidx, l) at n*col_ns + row*col_rs + l. */
typedef struct im2col_t {
  const conv_t* cv;
  ncs_t x;
  int64_t n0;
  char* col;
  int64_t col_ns, col_rs;
} im2col_t;

static void im2col_rows(void* u, int64_t r0, int64_t r1, int tid) {
  im2col_t* t = (im2col_t*)u;
  const conv_t* cv = t->cv;
  size_t es = cv->es;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t n = r / cv->Cx, c = r % cv->Cx;
    const char* xb = t->x.data + (size_t)((t->n0 + n) * t->x.sn + c * t->x.sc) * es;
    int64_t kidx = 0;
    for (int64_t kz = 0; kz < cv->k[0]; ++kz)
      for (int64_t ky = 0; ky < cv->k[1]; ++ky)
        for (int64_t kx = 0; kx < cv->k[2]; ++kx, ++kidx) {
          char* dst = t->col + (size_t)(n * t->col_ns + (c * cv->K + kidx) * t->col_rs) * es;
          int64_t l = 0;
          for (int64_t oz = 0; oz < cv->ys[0]; ++oz) {
            int64_t iz = oz * cv->st[0] - cv->pad[0] + kz * cv->dil[0];
            bool zok = iz >= 0 && iz < cv->xs[0];
            for (int64_t oy = 0; oy < cv->ys[1]; ++oy) {
              int64_t iy = oy * cv->st[1] - cv->pad[1] + ky * cv->dil[1];
              bool yok = zok && iy >= 0 && iy < cv->xs[1];
              const char* xrow = xb + (size_t)(iz * t->x.ss[0] + iy * t->x.ss[1]) * es;
              for (int64_t ox = 0; ox < cv->ys[2]; ++ox, ++l) {
                int64_t ix = ox * cv->st[2] - cv->pad[2] + kx * cv->dil[2];
                if (yok && ix >= 0 && ix < cv->xs[2])
                  move_elem(dst + (size_t)l * es, xrow + (size_t)(ix * t->x.ss[2]) * es, es);
                else
                  memset(dst + (size_t)l * es, 0, es);
              }
            }
          }
        }
  }
}

/* col2im by gathering: dX[n, c, i] = sum over kernel taps of colgrad + bias[c].
 * Each dX element is written once (parallel over (n, c), rounded once). */
typedef struct col2im_t {
  const conv_t* cv;
  ncs_t dx;
  tpurt_dtype_t dx_dtype;
  int64_t n0;
  const void* col; /* accumulation dtype: float or double */
  bool col_f64;
  int64_t col_ns, col_rs;
  const tpurt_tensor_t* bias;
} col2im_t;

static void col2im_rows(void* u, int64_t r0, int64_t r1, int tid) {
  col2im_t* t = (col2im_t*)u;
  const conv_t* cv = t->cv;
  size_t des = tpurt_dtype_size(t->dx_dtype);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t n = r / cv->Cx, c = r % cv->Cx;
    double b = t->bias ? tpurt_dtype_load_f64(t->bias->dtype, (const char*)t->bias->data +
                                                  (size_t)(c * t->bias->strides[0]) * tpurt_dtype_size(t->bias->dtype))
                       : 0.0;
    char* xb = t->dx.data + (size_t)((t->n0 + n) * t->dx.sn + c * t->dx.sc) * des;
    int64_t base = n * t->col_ns + c * cv->K * t->col_rs;
    for (int64_t iz = 0; iz < cv->xs[0]; ++iz)
      for (int64_t iy = 0; iy < cv->xs[1]; ++iy)
        for (int64_t ix = 0; ix < cv->xs[2]; ++ix) {
          double acc = 0;
          int64_t kidx = 0;
          for (int64_t kz = 0; kz < cv->k[0]; ++kz) {
            int64_t tz = iz + cv->pad[0] - kz * cv->dil[0];
            bool zok = tz >= 0 && tz % cv->st[0] == 0 && tz / cv->st[0] < cv->ys[0];
            for (int64_t ky = 0; ky < cv->k[1]; ++ky) {
              int64_t ty = iy + cv->pad[1] - ky * cv->dil[1];
              bool yok = zok && ty >= 0 && ty % cv->st[1] == 0 && ty / cv->st[1] < cv->ys[1];
              for (int64_t kx = 0; kx < cv->k[2]; ++kx, ++kidx) {
                int64_t tx = ix + cv->pad[2] - kx * cv->dil[2];
                if (!yok || tx < 0 || tx % cv->st[2] != 0 || tx / cv->st[2] >= cv->ys[2]) continue;
                int64_t l = ((tz / cv->st[0]) * cv->ys[1] + ty / cv->st[1]) * cv->ys[2] + tx / cv->st[2];
                int64_t idx = base + kidx * t->col_rs + l;
                acc += t->col_f64 ? ((const double*)t->col)[idx] : ((const float*)t->col)[idx];
              }
            }
          }
          tpurt_dtype_store_f64(t->dx_dtype,
                                xb + (size_t)(iz * t->dx.ss[0] + iy * t->dx.ss[1] + ix * t->dx.ss[2]) * des,
                                acc + b);
        }
  }
}

/* Strided (n, c, spatial) copy between two views of one dtype (parallel over (n, c)). */
typedef struct ncs_copy_t {
  ncs_t dst, src;
  int64_t C;
  const int64_t* sizes;
  size_t es;
} ncs_copy_t;
static void ncs_copy_rows(void* u, int64_t r0, int64_t r1, int tid) {
  ncs_copy_t* t = (ncs_copy_t*)u;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t n = r / t->C, c = r % t->C;
    for (int64_t z = 0; z < t->sizes[0]; ++z)
      for (int64_t y = 0; y < t->sizes[1]; ++y)
        for (int64_t x = 0; x < t->sizes[2]; ++x) {
          int64_t so = n * t->src.sn + c * t->src.sc + z * t->src.ss[0] + y * t->src.ss[1] + x * t->src.ss[2];
          int64_t dof = n * t->dst.sn + c * t->dst.sc + z * t->dst.ss[0] + y * t->dst.ss[1] + x * t->dst.ss[2];
          move_elem(t->dst.data + (size_t)dof * t->es, t->src.data + (size_t)so * t->es, t->es);
        }
  }
}
static void ncs_copy(tpurt_kernel_ctx_t* ctx, ncs_t dst, ncs_t src, int64_t N, int64_t C,
                     const int64_t* sizes, size_t es) {
  ncs_copy_t t = {dst, src, C, sizes, es};
  tpurt_parallel_for(ctx, N * C, 4, ncs_copy_rows, &t);
}
static ncs_t contiguous_ncs(char* data, int64_t C, const int64_t* sizes) {
  ncs_t v = {data, 0, 0, {sizes[1] * sizes[2], sizes[2], 1}};
  v.sc = sizes[0] * sizes[1] * sizes[2];
  v.sn = C * v.sc;
  return v;
}

/* The weight as a [Cy x Cx/G*K] matrix with unit column stride: the tensor
 * itself when its trailing dims are contiguous, else a packed copy. */
static tpurt_status_t weight_matrix(tpurt_kernel_ctx_t* ctx, const conv_t* cv,
                                    const tpurt_tensor_t* w, const char** out_data,
                                    int64_t* out_rs) {
  int64_t expect = 1;
  bool ok = true;
  for (int d = w->ndim - 1; d >= 1; --d) {
    if (w->sizes[d] != 1 && w->strides[d] != expect) ok = false;
    expect *= w->sizes[d];
  }
  int64_t row = cv->Cx / cv->G * cv->K;
  if (ok) {
    *out_data = (const char*)w->data;
    *out_rs = cv->Cy > 1 ? w->strides[0] : row;
    return TPURT_OK;
  }
  char* p = tpurt_kernel_scratch(ctx, (size_t)(cv->Cy * row) * cv->es + 64);
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "convolution: no scratch for the weight copy");
  for (int64_t o = 0; o < cv->Cy; ++o)
    for (int64_t i = 0; i < row; ++i) {
      int64_t rem = i, off = o * w->strides[0];
      for (int d = w->ndim - 1; d >= 1; --d) {
        off += (rem % w->sizes[d]) * w->strides[d];
        rem /= w->sizes[d];
      }
      move_elem(p + (size_t)(o * row + i) * cv->es, (const char*)w->data + (size_t)off * cv->es, cv->es);
    }
  *out_data = p;
  *out_rs = row;
  return TPURT_OK;
}

static bool is_pointwise(const conv_t* cv) {
  for (int d = 0; d < 3; ++d)
    if (cv->k[d] != 1 || cv->st[d] != 1 || cv->pad[d] != 0) return false;
  return true;
}

static int64_t chunk_for(const conv_t* cv, int64_t per_sample_bytes) {
  int64_t c = per_sample_bytes > 0 ? COL_BYTES / per_sample_bytes : cv->N;
  if (c < 1) c = 1;
  return imin(c, cv->N);
}

static tpurt_status_t run_gemm(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, void** ws,
                               size_t* ws_bytes) {
  size_t need = tpurt_gemm_workspace_bytes(ctx, g);
  if (need > *ws_bytes) { /* grows rarely: sized for the first (largest) chunk */
    *ws = tpurt_kernel_scratch(ctx, need);
    if (!*ws) return TPURT_STATUS(RESOURCE_EXHAUSTED, "convolution: no scratch for GEMM (%zu bytes)", need);
    *ws_bytes = need;
  }
  return tpurt_gemm(ctx, g, *ws);
}

/* Y = conv(X, W) + bias */
static tpurt_status_t conv_fwd(tpurt_kernel_ctx_t* ctx, const conv_t* cv, ncs_t x, const tpurt_tensor_t* w,
                               const tpurt_tensor_t* bias, ncs_t y) {
  const char* wd;
  int64_t w_rs;
  TPURT_RETURN_IF_ERROR(weight_matrix(ctx, cv, w, &wd, &w_rs));
  int64_t Cxg = cv->Cx / cv->G, Cyg = cv->Cy / cv->G, ck = Cxg * cv->K;
  int64_t y_cs = 1, x_cs = 1;
  ncs_t yv = y;
  char* ytmp = NULL;
  if (!flat_spatial(&y, cv->ys, &y_cs)) { /* odd output layout: compute contiguous, copy out */
    ytmp = tpurt_kernel_scratch(ctx, (size_t)(cv->N * cv->Cy * cv->Ly) * cv->es + 64);
    if (!ytmp) return TPURT_STATUS(RESOURCE_EXHAUSTED, "convolution: no scratch for output");
    yv = contiguous_ncs(ytmp, cv->Cy, cv->ys);
    y_cs = 1;
  }
  bool direct = is_pointwise(cv) && flat_spatial(&x, cv->xs, &x_cs);
  int64_t chunk = direct ? cv->N : chunk_for(cv, cv->Cx * cv->K * cv->Ly * (int64_t)cv->es);
  char* col = NULL;
  if (!direct) {
    col = tpurt_kernel_scratch(ctx, (size_t)(chunk * cv->Cx * cv->K * cv->Ly) * cv->es + 64);
    if (!col) return TPURT_STATUS(RESOURCE_EXHAUSTED, "convolution: no scratch for im2col");
  }
  void* ws = NULL;
  size_t ws_bytes = 0;
  size_t es = cv->es;
  for (int64_t n0 = 0; n0 < cv->N; n0 += chunk) {
    int64_t nn = imin(chunk, cv->N - n0);
    if (!direct) {
      im2col_t t = {cv, x, n0, col, cv->Cx * cv->K * cv->Ly, cv->Ly};
      tpurt_parallel_for(ctx, nn * cv->Cx, 1, im2col_rows, &t);
    }
    for (int64_t g = 0; g < cv->G; ++g) {
      tpurt_gemm_t gm = {.m = Cyg, .n = cv->Ly, .k = ck, .ab_dtype = cv->dtype, .c_dtype = cv->dtype,
                         .a = wd + (size_t)(g * Cyg * w_rs) * es, .a_rs = w_rs, .a_cs = 1,
                         .c = yv.data + (size_t)(n0 * yv.sn + g * Cyg * yv.sc) * es,
                         .c_rs = yv.sc, .c_cs = y_cs, .alpha = 1, .beta = 0, .batch = nn,
                         .a_bs = 0, .c_bs = yv.sn};
      if (direct) {
        gm.b = x.data + (size_t)(n0 * x.sn + g * Cxg * x.sc) * es;
        gm.b_rs = x.sc, gm.b_cs = x_cs, gm.b_bs = x.sn;
      } else {
        gm.b = col + (size_t)(g * ck * cv->Ly) * es;
        gm.b_rs = cv->Ly, gm.b_cs = 1, gm.b_bs = cv->Cx * cv->K * cv->Ly;
      }
      if (bias) {
        gm.c_in = (const char*)bias->data + (size_t)(g * Cyg * bias->strides[0]) * es;
        gm.c_in_rs = bias->strides[0], gm.c_in_cs = 0, gm.c_in_bs = 0, gm.beta = 1;
      }
      TPURT_RETURN_IF_ERROR(run_gemm(ctx, &gm, &ws, &ws_bytes));
    }
  }
  if (ytmp) ncs_copy(ctx, y, yv, cv->N, cv->Cy, cv->ys, es);
  return TPURT_OK;
}

/* dX = col2im(W^T dY) (+ bias on X's channels: the transposed forward) */
static tpurt_status_t conv_bwd_data(tpurt_kernel_ctx_t* ctx, const conv_t* cv, ncs_t dy,
                                    const tpurt_tensor_t* w, const tpurt_tensor_t* bias, ncs_t dx,
                                    tpurt_dtype_t dx_dtype) {
  const char* wd;
  int64_t w_rs;
  TPURT_RETURN_IF_ERROR(weight_matrix(ctx, cv, w, &wd, &w_rs));
  int64_t Cxg = cv->Cx / cv->G, Cyg = cv->Cy / cv->G, ck = Cxg * cv->K;
  size_t es = cv->es;
  int64_t dy_cs;
  ncs_t dyv = dy;
  if (!flat_spatial(&dy, cv->ys, &dy_cs)) {
    char* tmp = tpurt_kernel_scratch(ctx, (size_t)(cv->N * cv->Cy * cv->Ly) * es + 64);
    if (!tmp) return TPURT_STATUS(RESOURCE_EXHAUSTED, "convolution: no scratch for grad copy");
    dyv = contiguous_ncs(tmp, cv->Cy, cv->ys);
    ncs_copy(ctx, dyv, dy, cv->N, cv->Cy, cv->ys, es);
    dy_cs = 1;
  }
  /* col grads accumulate in fp32 for 16-bit dtypes, rounded once in col2im */
  tpurt_dtype_t acc = cv->dtype == TPURT_DTYPE_FLOAT64 ? TPURT_DTYPE_FLOAT64 : TPURT_DTYPE_FLOAT32;
  size_t aes = tpurt_dtype_size(acc);
  int64_t chunk = chunk_for(cv, cv->Cx * cv->K * cv->Ly * (int64_t)aes);
  char* col = tpurt_kernel_scratch(ctx, (size_t)(chunk * cv->Cx * cv->K * cv->Ly) * aes + 64);
  if (!col) return TPURT_STATUS(RESOURCE_EXHAUSTED, "convolution: no scratch for col2im");
  void* ws = NULL;
  size_t ws_bytes = 0;
  for (int64_t n0 = 0; n0 < cv->N; n0 += chunk) {
    int64_t nn = imin(chunk, cv->N - n0);
    for (int64_t g = 0; g < cv->G; ++g) {
      /* A = W_g^T: (ck x Cyg), W_g is (Cyg x ck) with row stride w_rs */
      tpurt_gemm_t gm = {.m = ck, .n = cv->Ly, .k = Cyg, .ab_dtype = cv->dtype, .c_dtype = acc,
                         .a = wd + (size_t)(g * Cyg * w_rs) * es, .a_rs = 1, .a_cs = w_rs,
                         .b = dyv.data + (size_t)(n0 * dyv.sn + g * Cyg * dyv.sc) * es,
                         .b_rs = dyv.sc, .b_cs = dy_cs,
                         .c = col + (size_t)(g * ck * cv->Ly) * aes, .c_rs = cv->Ly, .c_cs = 1,
                         .alpha = 1, .beta = 0, .batch = nn, .a_bs = 0, .b_bs = dyv.sn,
                         .c_bs = cv->Cx * cv->K * cv->Ly};
      TPURT_RETURN_IF_ERROR(run_gemm(ctx, &gm, &ws, &ws_bytes));
    }
    col2im_t t = {cv, dx, dx_dtype, n0, col, acc == TPURT_DTYPE_FLOAT64, cv->Cx * cv->K * cv->Ly,
                  cv->Ly, bias};
    tpurt_parallel_for(ctx, nn * cv->Cx, 1, col2im_rows, &t);
  }
  return TPURT_OK;
}

/* dW = sum_n dY[n] im2col(X[n])^T, as one GEMM per chunk with the samples
 * laid side by side (K = chunk * Ly). */
static tpurt_status_t conv_bwd_weight(tpurt_kernel_ctx_t* ctx, const conv_t* cv, ncs_t x, ncs_t dy,
                                      const tpurt_tensor_t* dw) {
  int64_t Cxg = cv->Cx / cv->G, Cyg = cv->Cy / cv->G, ck = Cxg * cv->K;
  size_t es = cv->es;
  tpurt_dtype_t acc = cv->dtype == TPURT_DTYPE_FLOAT64 ? TPURT_DTYPE_FLOAT64 : TPURT_DTYPE_FLOAT32;
  size_t aes = tpurt_dtype_size(acc);
  char* gw = tpurt_kernel_scratch(ctx, (size_t)(cv->Cy * ck) * aes + 64);
  int64_t chunk = chunk_for(cv, (cv->Cx * cv->K + cv->Cy) * cv->Ly * (int64_t)es);
  char* col = tpurt_kernel_scratch(ctx, (size_t)(chunk * cv->Cx * cv->K * cv->Ly) * es + 64);
  char* gy = tpurt_kernel_scratch(ctx, (size_t)(chunk * cv->Cy * cv->Ly) * es + 64);
  if (!gw || !col || !gy) return TPURT_STATUS(RESOURCE_EXHAUSTED, "convolution backward: no scratch");
  void* ws = NULL;
  size_t ws_bytes = 0;
  for (int64_t n0 = 0; n0 < cv->N; n0 += chunk) {
    int64_t nn = imin(chunk, cv->N - n0), w = nn * cv->Ly;
    im2col_t t = {cv, x, n0, col, cv->Ly, w};
    tpurt_parallel_for(ctx, nn * cv->Cx, 1, im2col_rows, &t);
    /* dY chunk as [Cy, nn * Ly]: element (c, n, l) at c*w + n*Ly + l */
    ncs_t gyv = {gy, cv->Ly, w, {cv->ys[1] * cv->ys[2], cv->ys[2], 1}};
    ncs_t dys = dy;
    dys.data = dy.data + (size_t)(n0 * dy.sn) * es;
    ncs_copy(ctx, gyv, dys, nn, cv->Cy, cv->ys, es);
    for (int64_t g = 0; g < cv->G; ++g) {
      tpurt_gemm_t gm = {.m = Cyg, .n = ck, .k = w, .ab_dtype = cv->dtype, .c_dtype = acc,
                         .a = gy + (size_t)(g * Cyg * w) * es, .a_rs = w, .a_cs = 1,
                         .b = col + (size_t)(g * ck * w) * es, .b_rs = 1, .b_cs = w,
                         .c = gw + (size_t)(g * Cyg * ck) * aes, .c_rs = ck, .c_cs = 1,
                         .alpha = 1, .beta = n0 == 0 ? 0.0 : 1.0};
      TPURT_RETURN_IF_ERROR(run_gemm(ctx, &gm, &ws, &ws_bytes));
    }
  }
  /* store into dW's layout, rounding once */
  size_t oes = tpurt_dtype_size(dw->dtype);
  for (int64_t o = 0; o < cv->Cy; ++o)
    for (int64_t i = 0; i < ck; ++i) {
      int64_t rem = i, off = o * dw->strides[0];
      for (int d = dw->ndim - 1; d >= 1; --d) {
        off += (rem % dw->sizes[d]) * dw->strides[d];
        rem /= dw->sizes[d];
      }
      double v = acc == TPURT_DTYPE_FLOAT64 ? ((double*)gw)[o * ck + i] : ((float*)gw)[o * ck + i];
      tpurt_dtype_store_f64(dw->dtype, (char*)dw->data + (size_t)off * oes, v);
    }
  return TPURT_OK;
}

/* grad_bias[c] = sum over n and spatial of dOut[n, c, ...] */
typedef struct bias_t {
  const conv_t* cv;
  ncs_t g;
  const int64_t* sizes;
  tpurt_dtype_t dtype;
  const tpurt_tensor_t* out;
} bias_t;
static void bias_rows(void* u, int64_t c0, int64_t c1, int tid) {
  bias_t* b = (bias_t*)u;
  size_t es = tpurt_dtype_size(b->dtype);
  for (int64_t c = c0; c < c1; ++c) {
    double acc = 0;
    for (int64_t n = 0; n < b->cv->N; ++n)
      for (int64_t z = 0; z < b->sizes[0]; ++z)
        for (int64_t y = 0; y < b->sizes[1]; ++y)
          for (int64_t x = 0; x < b->sizes[2]; ++x)
            acc += tpurt_dtype_load_f64(b->dtype, b->g.data + (size_t)(n * b->g.sn + c * b->g.sc + z * b->g.ss[0] +
                                                                      y * b->g.ss[1] + x * b->g.ss[2]) * es);
    tpurt_dtype_store_f64(b->out->dtype, (char*)b->out->data +
                                             (size_t)(c * b->out->strides[0]) * tpurt_dtype_size(b->out->dtype), acc);
  }
}

/* ---- argument parsing ---- */
typedef struct conv_args_t {
  const tpurt_tensor_t *input, *weight, *bias, *grad_out;
  bool transposed;
  int64_t groups;
  bool mask[3];
  conv_t cv;
  int nsp;
} conv_args_t;

/* An int[nsp] argument (one value, or an int, for every dim), right-aligned into 3 dims; absent: dflt. */
static tpurt_status_t int_list(const tpurt_op_call_t* call, int i, int nsp, int64_t dflt, int64_t* out) {
  for (int d = 0; d < 3; ++d) out[d] = dflt;
  if (!tpurt_arg_at(call, i)) return TPURT_OK;
  if (tpurt_arg_is(call, i, TPURT_ARG_INT)) {
    for (int d = 0; d < nsp; ++d) out[3 - nsp + d] = tpurt_arg_int(call, i, dflt);
    return TPURT_OK;
  }
  int32_t count;
  const int64_t* v = tpurt_arg_ints(call, i, &count);
  if (!v) return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must be an int list", call->name, i);
  if (count != nsp && count != 1)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d has %d values for %d spatial dims",
                        call->name, i, (int)count, nsp);
  for (int d = 0; d < nsp; ++d) out[3 - nsp + d] = v[count == 1 ? 0 : d];
  return TPURT_OK;
}

/* Fills the regular-conv geometry. img/col: the image-side and column-side
 * tensors (for transposed, img is the op's output and col its input). */
/* Parsed convolution parameters (right-aligned into 3 spatial dims). */
typedef struct conv_params_t {
  int64_t st[3], pad[3], dil[3];
  int64_t groups;
  bool transposed;
} conv_params_t;

/* allow_int: integer dtypes are accepted (the forward, non-transposed convolution only: CPU has
 * integer convolution forward and no integer gradients). */
static tpurt_status_t geometry(const tpurt_op_call_t* call, const conv_params_t* prm, const tpurt_tensor_t* img,
                               const tpurt_tensor_t* colt, const tpurt_tensor_t* w, bool allow_int, conv_t* cv,
                               int* out_nsp) {
  int64_t groups = prm->groups;
  int nsp = w->ndim - 2;
  if (nsp < 1 || nsp > 3 || img->ndim != w->ndim || colt->ndim != w->ndim)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: %d-D input with %d-D weight (1-3 spatial dims, batched, are supported)",
                        call->name, (int)img->ndim, (int)w->ndim);
  bool dtype_ok = tpurt_dtype_is_floating(w->dtype) || (allow_int && tpurt_dtype_is_integral(w->dtype));
  if (!dtype_ok || img->dtype != w->dtype || colt->dtype != w->dtype)
    return TPURT_STATUS(UNIMPLEMENTED, "%s: dtypes %s/%s/%s (all equal and floating point, or integer for a "
                        "non-transposed forward, supported)",
                        call->name, tpurt_dtype_name(img->dtype), tpurt_dtype_name(w->dtype),
                        tpurt_dtype_name(colt->dtype));
  memset(cv, 0, sizeof(*cv));
  cv->dtype = w->dtype;
  cv->es = tpurt_dtype_size(w->dtype);
  cv->N = img->sizes[0];
  cv->G = groups;
  cv->Cx = img->sizes[1];
  cv->Cy = colt->sizes[1];
  if (groups < 1 || cv->Cx % groups || cv->Cy % groups || w->sizes[0] != cv->Cy ||
      w->sizes[1] * groups != cv->Cx || colt->sizes[0] != cv->N)
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "%s: channels do not match: image %lld, columns %lld, weight [%lld, %lld], groups %lld",
                        call->name, (long long)cv->Cx, (long long)cv->Cy, (long long)w->sizes[0],
                        (long long)w->sizes[1], (long long)groups);
  for (int d = 0; d < 3; ++d) cv->xs[d] = cv->ys[d] = cv->k[d] = 1;
  for (int d = 0; d < nsp; ++d) {
    cv->xs[3 - nsp + d] = img->sizes[2 + d];
    cv->ys[3 - nsp + d] = colt->sizes[2 + d];
    cv->k[3 - nsp + d] = w->sizes[2 + d];
  }
  memcpy(cv->st, prm->st, sizeof(cv->st));
  memcpy(cv->pad, prm->pad, sizeof(cv->pad));
  memcpy(cv->dil, prm->dil, sizeof(cv->dil));
  for (int d = 0; d < 3; ++d) {
    if (cv->st[d] < 1 || cv->dil[d] < 1 || cv->pad[d] < 0)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: stride %lld, dilation %lld, padding %lld", call->name,
                          (long long)cv->st[d], (long long)cv->dil[d], (long long)cv->pad[d]);
  }
  cv->K = cv->k[0] * cv->k[1] * cv->k[2];
  cv->Lx = cv->xs[0] * cv->xs[1] * cv->xs[2];
  cv->Ly = cv->ys[0] * cv->ys[1] * cv->ys[2];
  *out_nsp = nsp;
  return TPURT_OK;
}

/* An output that was asked for: present, with data or empty. */
static const tpurt_tensor_t* wanted_out(const tpurt_op_call_t* call, int i, bool mask) {
  if (!mask || i >= call->num_outputs) return NULL;
  const tpurt_tensor_t* t = &call->outputs[i];
  if (!t->data && tpurt_tensor_numel(t) != 0) return NULL;
  return t;
}

/* ---- reference: direct loops in double over the regular geometry ---- */
static double ld(const tpurt_tensor_t* t, ncs_t v, int64_t n, int64_t c, int64_t z, int64_t y, int64_t x) {
  return tpurt_dtype_load_f64(t->dtype, v.data + (size_t)(n * v.sn + c * v.sc + z * v.ss[0] + y * v.ss[1] +
                                                          x * v.ss[2]) * tpurt_dtype_size(t->dtype));
}
static double ldw(const tpurt_tensor_t* w, int64_t o, int64_t i, int64_t kz, int64_t ky, int64_t kx) {
  const int64_t kk[3] = {kz, ky, kx};
  int lead = 3 - (w->ndim - 2); /* padded leading spatial dims */
  if (lead < 0 || lead > 3) return 0; /* geometry() admits 1-3 spatial dims */
  int64_t off = o * w->strides[0] + i * w->strides[1];
  for (int d = lead; d < 3; ++d) off += kk[d] * w->strides[2 + d - lead];
  return tpurt_dtype_load_f64(w->dtype, (const char*)w->data + (size_t)off * tpurt_dtype_size(w->dtype));
}

/* mode 0: Y = conv(X) (+bias on Y); mode 1: dX = conv^T(dY) (+bias on X); mode 2: dW. */
static void ref_conv(const conv_t* cv, int mode, const tpurt_tensor_t* xt, ncs_t x, const tpurt_tensor_t* yt,
                     ncs_t y, const tpurt_tensor_t* w, const tpurt_tensor_t* bias) {
  int64_t Cxg = cv->Cx / cv->G, Cyg = cv->Cy / cv->G;
  const tpurt_tensor_t* dst = mode == 0 ? yt : mode == 1 ? xt : w;
  /* zero the destination accumulators: accumulate in a double buffer */
  int64_t dn = mode == 0 ? cv->N * cv->Cy * cv->Ly : mode == 1 ? cv->N * cv->Cx * cv->Lx : cv->Cy * Cxg * cv->K;
  double* acc = calloc((size_t)(dn > 0 ? dn : 1), sizeof(double));
  if (!acc) return;
  for (int64_t n = 0; n < cv->N; ++n)
    for (int64_t g = 0; g < cv->G; ++g)
      for (int64_t oc = 0; oc < Cyg; ++oc)
        for (int64_t ic = 0; ic < Cxg; ++ic)
          for (int64_t kz = 0; kz < cv->k[0]; ++kz)
            for (int64_t ky = 0; ky < cv->k[1]; ++ky)
              for (int64_t kx = 0; kx < cv->k[2]; ++kx)
                for (int64_t oz = 0; oz < cv->ys[0]; ++oz)
                  for (int64_t oy = 0; oy < cv->ys[1]; ++oy)
                    for (int64_t ox = 0; ox < cv->ys[2]; ++ox) {
                      int64_t iz = oz * cv->st[0] - cv->pad[0] + kz * cv->dil[0];
                      int64_t iy = oy * cv->st[1] - cv->pad[1] + ky * cv->dil[1];
                      int64_t ix = ox * cv->st[2] - cv->pad[2] + kx * cv->dil[2];
                      if (iz < 0 || iz >= cv->xs[0] || iy < 0 || iy >= cv->xs[1] || ix < 0 || ix >= cv->xs[2])
                        continue;
                      int64_t co = g * Cyg + oc, ci = g * Cxg + ic;
                      double wv = ldw(w, co, ic, kz, ky, kx);
                      if (mode == 0)
                        acc[(n * cv->Cy + co) * cv->Ly + (oz * cv->ys[1] + oy) * cv->ys[2] + ox] +=
                            wv * ld(xt, x, n, ci, iz, iy, ix);
                      else if (mode == 1)
                        acc[(n * cv->Cx + ci) * cv->Lx + (iz * cv->xs[1] + iy) * cv->xs[2] + ix] +=
                            wv * ld(yt, y, n, co, oz, oy, ox);
                      else
                        acc[(co * Cxg + ic) * cv->K + (kz * cv->k[1] + ky) * cv->k[2] + kx] +=
                            ld(xt, x, n, ci, iz, iy, ix) * ld(yt, y, n, co, oz, oy, ox);
                    }
  size_t es = tpurt_dtype_size(dst->dtype);
  if (mode == 2) {
    for (int64_t o = 0; o < cv->Cy; ++o)
      for (int64_t i = 0; i < Cxg; ++i)
        for (int64_t kz = 0; kz < cv->k[0]; ++kz)
          for (int64_t ky = 0; ky < cv->k[1]; ++ky)
            for (int64_t kx = 0; kx < cv->k[2]; ++kx) {
              int lead = 3 - (w->ndim - 2);
              if (lead < 0 || lead > 3) continue;
              int64_t kk[3] = {kz, ky, kx}, off = o * w->strides[0] + i * w->strides[1];
              for (int d = lead; d < 3; ++d) off += kk[d] * w->strides[2 + d - lead];
              tpurt_dtype_store_f64(w->dtype, (char*)w->data + (size_t)off * es,
                                    acc[(o * Cxg + i) * cv->K + (kz * cv->k[1] + ky) * cv->k[2] + kx]);
            }
  } else {
    ncs_t v = mode == 0 ? y : x;
    int64_t C = mode == 0 ? cv->Cy : cv->Cx;
    const int64_t* s = mode == 0 ? cv->ys : cv->xs;
    for (int64_t n = 0; n < cv->N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        double b = bias ? tpurt_dtype_load_f64(bias->dtype, (const char*)bias->data +
                                                   (size_t)(c * bias->strides[0]) * tpurt_dtype_size(bias->dtype))
                        : 0.0;
        for (int64_t z = 0; z < s[0]; ++z)
          for (int64_t yy = 0; yy < s[1]; ++yy)
            for (int64_t xx = 0; xx < s[2]; ++xx)
              tpurt_dtype_store_f64(dst->dtype, v.data + (size_t)(n * v.sn + c * v.sc + z * v.ss[0] + yy * v.ss[1] +
                                                                  xx * v.ss[2]) * es,
                                    acc[((n * C + c) * s[0] + z) * s[1] * s[2] + yy * s[2] + xx] + b);
      }
  }
  free(acc);
}

/* Integer Y = conv(X) + bias, the obviously-correct loop with int64 accumulation (wraps like
 * PyTorch CPU's integer convolution on overflow; unsigned arithmetic avoids signed-overflow UB). */
static tpurt_status_t ref_conv_int(const conv_t* cv, const tpurt_tensor_t* xt, ncs_t x, const tpurt_tensor_t* yt,
                                   ncs_t y, const tpurt_tensor_t* w, const tpurt_tensor_t* bias) {
  int64_t Cxg = cv->Cx / cv->G, Cyg = cv->Cy / cv->G;
  size_t xes = tpurt_dtype_size(xt->dtype), yes = tpurt_dtype_size(yt->dtype), wes = tpurt_dtype_size(w->dtype);
  int lead = 3 - (w->ndim - 2);
  for (int64_t n = 0; n < cv->N; ++n)
    for (int64_t co = 0; co < cv->Cy; ++co) {
      int64_t g = co / Cyg;
      uint64_t b = bias ? (uint64_t)tpurt_dtype_load_i64(bias->dtype, (const char*)bias->data +
                                                         (size_t)(co * bias->strides[0]) * tpurt_dtype_size(bias->dtype))
                        : 0;
      for (int64_t oz = 0; oz < cv->ys[0]; ++oz)
        for (int64_t oy = 0; oy < cv->ys[1]; ++oy)
          for (int64_t ox = 0; ox < cv->ys[2]; ++ox) {
            uint64_t acc = b;
            for (int64_t ic = 0; ic < Cxg; ++ic)
              for (int64_t kz = 0; kz < cv->k[0]; ++kz)
                for (int64_t ky = 0; ky < cv->k[1]; ++ky)
                  for (int64_t kx = 0; kx < cv->k[2]; ++kx) {
                    int64_t iz = oz * cv->st[0] - cv->pad[0] + kz * cv->dil[0];
                    int64_t iy = oy * cv->st[1] - cv->pad[1] + ky * cv->dil[1];
                    int64_t ix = ox * cv->st[2] - cv->pad[2] + kx * cv->dil[2];
                    if (iz < 0 || iz >= cv->xs[0] || iy < 0 || iy >= cv->xs[1] || ix < 0 || ix >= cv->xs[2])
                      continue;
                    int64_t kk[3] = {kz, ky, kx}, woff = co * w->strides[0] + ic * w->strides[1];
                    for (int d = lead; d < 3; ++d) woff += kk[d] * w->strides[2 + d - lead];
                    int64_t wv = tpurt_dtype_load_i64(w->dtype, (const char*)w->data + (size_t)woff * wes);
                    int64_t xv = tpurt_dtype_load_i64(
                        xt->dtype, x.data + (size_t)(n * x.sn + (g * Cxg + ic) * x.sc + iz * x.ss[0] + iy * x.ss[1] +
                                                     ix * x.ss[2]) * xes);
                    acc += (uint64_t)wv * (uint64_t)xv;
                  }
            tpurt_dtype_store_i64(yt->dtype, y.data + (size_t)(n * y.sn + co * y.sc + oz * y.ss[0] + oy * y.ss[1] +
                                                               ox * y.ss[2]) * yes,
                                  (int64_t)acc);
          }
    }
  return TPURT_OK;
}

/* ---- the ops ---- */
static tpurt_status_t parse_params(const tpurt_op_call_t* call, int nsp, int i_st, int i_pad, int i_dil,
                                   int i_tr, int i_groups, conv_params_t* prm) {
  TPURT_RETURN_IF_ERROR(int_list(call, i_st, nsp, 1, prm->st));
  TPURT_RETURN_IF_ERROR(int_list(call, i_pad, nsp, 0, prm->pad));
  if (i_dil >= 0) TPURT_RETURN_IF_ERROR(int_list(call, i_dil, nsp, 1, prm->dil));
  else for (int d = 0; d < 3; ++d) prm->dil[d] = 1;
  prm->transposed = tpurt_arg_is(call, i_tr, TPURT_ARG_BOOL) && tpurt_arg_bool(call, i_tr, false);
  prm->groups = tpurt_arg_is(call, i_groups, TPURT_ARG_INT) ? tpurt_arg_int(call, i_groups, 1) : 1;
  return TPURT_OK;
}

static tpurt_status_t forward_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const tpurt_tensor_t* in,
                                  const tpurt_tensor_t* w, const tpurt_tensor_t* bias, const conv_params_t* prm,
                                  const tpurt_tensor_t* out, bool ref) {
  if (tpurt_tensor_numel(out) == 0) return TPURT_OK;
  const tpurt_tensor_t* img = prm->transposed ? out : in;
  const tpurt_tensor_t* colt = prm->transposed ? in : out;
  if (bias && (bias->ndim != 1 || bias->sizes[0] != out->sizes[1] || bias->dtype != w->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: bias must be 1-D of %lld %s", call->name,
                        (long long)out->sizes[1], tpurt_dtype_name(w->dtype));
  conv_t cv;
  int nsp;
  TPURT_RETURN_IF_ERROR(geometry(call, prm, img, colt, w, !prm->transposed, &cv, &nsp));
  ncs_t x = ncs_of(img, nsp), y = ncs_of(colt, nsp);
  if (tpurt_dtype_is_integral(cv.dtype) && (ref || tpurt_tensor_numel(in) == 0 || cv.K == 0))
    return ref_conv_int(&cv, img, x, colt, y, w, bias);
  if (ref || tpurt_tensor_numel(in) == 0 || cv.K == 0) { /* (empty sums: out = bias or 0) */
    ref_conv(&cv, prm->transposed ? 1 : 0, img, x, colt, y, w, bias);
    return TPURT_OK;
  }
  if (prm->transposed) return conv_bwd_data(ctx, &cv, y, w, bias, x, out->dtype);
  return conv_fwd(ctx, &cv, x, w, bias, y);
}

/* gi/gw/gb: NULL when not wanted */
static tpurt_status_t backward_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, const tpurt_tensor_t* go,
                                   const tpurt_tensor_t* in, const tpurt_tensor_t* w, const conv_params_t* prm,
                                   const tpurt_tensor_t* gi, const tpurt_tensor_t* gw, const tpurt_tensor_t* gb,
                                   bool ref) {
  bool transposed = prm->transposed;
  const tpurt_tensor_t* img = transposed ? go : in;
  const tpurt_tensor_t* colt = transposed ? in : go;
  conv_t cv;
  int nsp;
  TPURT_RETURN_IF_ERROR(geometry(call, prm, img, colt, w, false, &cv, &nsp));
  ncs_t x = ncs_of(img, nsp), y = ncs_of(colt, nsp);
  bool empty = cv.N == 0 || cv.Lx == 0 || cv.Ly == 0 || cv.K == 0 || cv.Cx == 0 || cv.Cy == 0;
  if (gi && tpurt_tensor_numel(gi) > 0) {
    if (gi->ndim != in->ndim || gi->dtype != in->dtype)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_input must match input", call->name);
    for (int d = 0; d < in->ndim; ++d)
      if (gi->sizes[d] != in->sizes[d])
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_input must match input", call->name);
    ncs_t giv = ncs_of(gi, nsp);
    if (!transposed) { /* dX = conv^T(dY) */
      if (ref || empty) ref_conv(&cv, 1, gi, giv, colt, y, w, NULL);
      else TPURT_RETURN_IF_ERROR(conv_bwd_data(ctx, &cv, y, w, NULL, giv, gi->dtype));
    } else { /* input is the column side: d(input) = conv(grad_out) */
      if (ref || empty) ref_conv(&cv, 0, img, x, gi, giv, w, NULL);
      else TPURT_RETURN_IF_ERROR(conv_fwd(ctx, &cv, x, w, NULL, giv));
    }
  }
  if (gw && tpurt_tensor_numel(gw) > 0) {
    if (gw->ndim != w->ndim || gw->dtype != w->dtype)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_weight must match weight", call->name);
    for (int d = 0; d < w->ndim; ++d)
      if (gw->sizes[d] != w->sizes[d])
        return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_weight must match weight", call->name);
    if (ref || empty) ref_conv(&cv, 2, img, x, colt, y, gw, NULL);
    else TPURT_RETURN_IF_ERROR(conv_bwd_weight(ctx, &cv, x, y, gw));
  }
  if (gb && tpurt_tensor_numel(gb) > 0) {
    const int64_t* sizes = transposed ? cv.xs : cv.ys;
    ncs_t gv = transposed ? x : y;
    if (gb->ndim != 1 || gb->sizes[0] != go->sizes[1])
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: grad_bias must have %lld elements", call->name,
                          (long long)go->sizes[1]);
    bias_t b = {&cv, gv, sizes, go->dtype, gb};
    if (ref) bias_rows(&b, 0, go->sizes[1], 0);
    else tpurt_parallel_for(ctx, go->sizes[1], 1, bias_rows, &b);
  }
  return TPURT_OK;
}

static int nsp_of(const tpurt_tensor_t* w) { return w->ndim - 2; }

/* convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups) */
static tpurt_status_t conv_forward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *in = NULL, *w = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &in));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &w));
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output", call->name);
  conv_params_t prm;
  TPURT_RETURN_IF_ERROR(parse_params(call, nsp_of(w), 3, 4, 5, 6, 8, &prm));
  return forward_run(ctx, call, in, w, tpurt_arg_tensor(call, 2), &prm, &call->outputs[0], ref);
}

/* convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
 *   transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias) */
static tpurt_status_t conv_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *go = NULL, *in = NULL, *w = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &go));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &in));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 2, -1, &w));
  conv_params_t prm;
  TPURT_RETURN_IF_ERROR(parse_params(call, nsp_of(w), 3, 4, 5, 6, 8, &prm));
  bool mask[3] = {true, true, true};
  tpurt_arg_bool_mask(call, 9, 3, mask);
  return backward_run(ctx, call, go, in, w, &prm, wanted_out(call, 0, mask[0]), wanted_out(call, 1, mask[1]),
                      wanted_out(call, 2, mask[2]), ref);
}

/* The CPU-named convolution ops, which reach the boxed fallback directly:
 *   _slow_conv2d_forward(self, weight, kernel_size, bias?, stride, padding)
 *   slow_conv3d_forward(self, weight, kernel_size, bias?, stride, padding)
 *   slow_conv_dilated2d/3d(self, weight, kernel_size, bias?, stride, padding, dilation)
 *   slow_conv_transpose2d/3d(self, weight, kernel_size, bias?, stride, padding, output_padding, dilation)
 * (kernel_size is implied by the weight). */
static tpurt_status_t slow_conv(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *in = NULL, *w = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &in));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &w));
  if (call->num_outputs < 1) return TPURT_STATUS(INVALID_ARGUMENT, "%s: missing output", call->name);
  bool transposed = strstr(call->name, "transpose") != NULL;
  bool dilated = strstr(call->name, "dilated") != NULL;
  conv_params_t prm;
  TPURT_RETURN_IF_ERROR(parse_params(call, nsp_of(w), 4, 5, transposed ? 7 : dilated ? 6 : -1, -1, -1, &prm));
  prm.transposed = transposed;
  return forward_run(ctx, call, in, w, tpurt_arg_tensor(call, 3), &prm, &call->outputs[0], ref);
}

/* _slow_conv2d_backward.output_mask(grad_output, self, weight, kernel_size, stride, padding, output_mask)
 * _slow_conv2d_backward.grad_input(grad_output, self, weight, kernel_size, stride, padding; 3 outputs) */
static tpurt_status_t slow_conv_backward(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t *go = NULL, *in = NULL, *w = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &go));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 1, -1, &in));
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 2, -1, &w));
  conv_params_t prm;
  TPURT_RETURN_IF_ERROR(parse_params(call, nsp_of(w), 4, 5, -1, -1, -1, &prm));
  bool mask[3] = {true, true, true};
  tpurt_arg_bool_mask(call, 6, 3, mask);
  return backward_run(ctx, call, go, in, w, &prm, wanted_out(call, 0, mask[0]), wanted_out(call, 1, mask[1]),
                      wanted_out(call, 2, mask[2]), ref);
}

/* im2col(self, kernel_size, dilation, padding, stride) -> [N, C*kh*kw, L] (or [C*kh*kw, L]) */
static tpurt_status_t im2col_op(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t* in = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &in));
  if (call->num_outputs < 1 || (in->ndim != 3 && in->ndim != 4))
    return TPURT_STATUS(INVALID_ARGUMENT, "im2col: expected a 3-D or 4-D input");
  const tpurt_tensor_t* out = &call->outputs[0];
  bool batched = in->ndim == 4;
  tpurt_tensor_t img = *in;
  if (!batched) { /* view [C, H, W] as [1, C, H, W] */
    img.ndim = 4;
    for (int d = 3; d >= 1; --d) img.sizes[d] = in->sizes[d - 1], img.strides[d] = in->strides[d - 1];
    img.sizes[0] = 1, img.strides[0] = 0;
  }
  int64_t k[3], dl[3], pd[3], st[3];
  TPURT_RETURN_IF_ERROR(int_list(call, 1, 2, 1, k));
  TPURT_RETURN_IF_ERROR(int_list(call, 2, 2, 1, dl));
  TPURT_RETURN_IF_ERROR(int_list(call, 3, 2, 0, pd));
  TPURT_RETURN_IF_ERROR(int_list(call, 4, 2, 1, st));
  conv_t cv = {.N = img.sizes[0], .G = 1, .Cx = img.sizes[1], .dtype = in->dtype, .es = tpurt_dtype_size(in->dtype)};
  for (int d = 0; d < 3; ++d) {
    cv.k[d] = k[d], cv.dil[d] = dl[d], cv.pad[d] = pd[d], cv.st[d] = st[d];
    if (k[d] < 1 || dl[d] < 1 || pd[d] < 0 || st[d] < 1)
      return TPURT_STATUS(INVALID_ARGUMENT, "im2col: kernel %lld, dilation %lld, padding %lld, stride %lld",
                          (long long)k[d], (long long)dl[d], (long long)pd[d], (long long)st[d]);
  }
  cv.xs[0] = cv.ys[0] = 1;
  cv.xs[1] = img.sizes[2], cv.xs[2] = img.sizes[3];
  for (int d = 1; d < 3; ++d) cv.ys[d] = (cv.xs[d] + 2 * cv.pad[d] - cv.dil[d] * (cv.k[d] - 1) - 1) / cv.st[d] + 1;
  cv.K = cv.k[1] * cv.k[2];
  cv.Ly = cv.ys[1] * cv.ys[2];
  if (cv.ys[1] < 0 || cv.ys[2] < 0) cv.Ly = 0;
  int64_t rows = cv.Cx * cv.K;
  int o = batched ? 1 : 0;
  if (out->ndim != (batched ? 3 : 2) || out->sizes[o] != rows || out->sizes[o + 1] != cv.Ly ||
      (batched && out->sizes[0] != cv.N) || out->dtype != in->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "im2col: output shape does not match");
  if (tpurt_tensor_numel(out) == 0) return TPURT_OK;
  bool dense = out->strides[o + 1] == 1 && (rows == 1 || out->strides[o] == cv.Ly) &&
               (!batched || cv.N == 1 || out->strides[0] == rows * cv.Ly);
  char* col = dense ? (char*)out->data : tpurt_kernel_scratch(ctx, (size_t)(cv.N * rows * cv.Ly) * cv.es + 64);
  if (!col) return TPURT_STATUS(RESOURCE_EXHAUSTED, "im2col: no scratch");
  im2col_t t = {&cv, ncs_of(&img, 2), 0, col, rows * cv.Ly, cv.Ly};
  if (ref) im2col_rows(&t, 0, cv.N * cv.Cx, 0);
  else tpurt_parallel_for(ctx, cv.N * cv.Cx, 1, im2col_rows, &t);
  if (!dense)
    for (int64_t n = 0; n < cv.N; ++n)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t l = 0; l < cv.Ly; ++l)
          move_elem((char*)out->data + (size_t)((batched ? n * out->strides[0] : 0) + r * out->strides[o] +
                                                l * out->strides[o + 1]) * cv.es,
                    col + (size_t)((n * rows + r) * cv.Ly + l) * cv.es, cv.es);
  return TPURT_OK;
}

/* col2im(self, output_size, kernel_size, dilation, padding, stride): [N, C*kh*kw, L] -> [N, C, H, W] */
static tpurt_status_t col2im_op(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  const tpurt_tensor_t* in = NULL;
  TPURT_RETURN_IF_ERROR(tpurt_arg_tensor_nd(call, 0, -1, &in));
  if (call->num_outputs < 1 || (in->ndim != 2 && in->ndim != 3) || !tpurt_dtype_is_floating(in->dtype))
    return TPURT_STATUS(UNIMPLEMENTED, "col2im: expected a 2-D or 3-D floating input");
  const tpurt_tensor_t* out = &call->outputs[0];
  bool batched = in->ndim == 3;
  int64_t k[3], dl[3], pd[3], st[3];
  TPURT_RETURN_IF_ERROR(int_list(call, 2, 2, 1, k));
  TPURT_RETURN_IF_ERROR(int_list(call, 3, 2, 1, dl));
  TPURT_RETURN_IF_ERROR(int_list(call, 4, 2, 0, pd));
  TPURT_RETURN_IF_ERROR(int_list(call, 5, 2, 1, st));
  tpurt_tensor_t img = *out;
  if (!batched) {
    img.ndim = 4;
    for (int d = 3; d >= 1; --d) img.sizes[d] = out->sizes[d - 1], img.strides[d] = out->strides[d - 1];
    img.sizes[0] = 1, img.strides[0] = 0;
  }
  if (img.ndim != 4 || out->dtype != in->dtype)
    return TPURT_STATUS(INVALID_ARGUMENT, "col2im: output must be %s [N, C, H, W]", tpurt_dtype_name(in->dtype));
  conv_t cv = {.N = img.sizes[0], .G = 1, .Cx = img.sizes[1], .dtype = in->dtype, .es = tpurt_dtype_size(in->dtype)};
  for (int d = 0; d < 3; ++d) {
    cv.k[d] = k[d], cv.dil[d] = dl[d], cv.pad[d] = pd[d], cv.st[d] = st[d];
    if (k[d] < 1 || dl[d] < 1 || pd[d] < 0 || st[d] < 1)
      return TPURT_STATUS(INVALID_ARGUMENT, "col2im: kernel %lld, dilation %lld, padding %lld, stride %lld",
                          (long long)k[d], (long long)dl[d], (long long)pd[d], (long long)st[d]);
  }
  cv.xs[0] = cv.ys[0] = 1;
  cv.xs[1] = img.sizes[2], cv.xs[2] = img.sizes[3];
  for (int d = 1; d < 3; ++d) cv.ys[d] = (cv.xs[d] + 2 * cv.pad[d] - cv.dil[d] * (cv.k[d] - 1) - 1) / cv.st[d] + 1;
  cv.K = cv.k[1] * cv.k[2];
  cv.Ly = cv.ys[1] * cv.ys[2];
  int64_t rows = cv.Cx * cv.K;
  int o = batched ? 1 : 0;
  if (in->sizes[o] != rows || in->sizes[o + 1] != cv.Ly || (batched && in->sizes[0] != cv.N))
    return TPURT_STATUS(INVALID_ARGUMENT, "col2im: input [%lld x %lld] does not match %lld channels x %lld taps x %lld blocks",
                        (long long)in->sizes[o], (long long)in->sizes[o + 1], (long long)cv.Cx, (long long)cv.K,
                        (long long)cv.Ly);
  if (tpurt_tensor_numel(out) == 0) return TPURT_OK;
  /* the gather reads float/double columns: convert once into scratch */
  bool f64 = in->dtype == TPURT_DTYPE_FLOAT64;
  size_t aes = f64 ? 8 : 4;
  char* col = tpurt_kernel_scratch(ctx, (size_t)(cv.N * rows * cv.Ly) * aes + 64);
  if (!col) return TPURT_STATUS(RESOURCE_EXHAUSTED, "col2im: no scratch");
  for (int64_t n = 0; n < cv.N; ++n)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t l = 0; l < cv.Ly; ++l) {
        double v = tpurt_dtype_load_f64(in->dtype, (const char*)in->data + (size_t)((batched ? n * in->strides[0] : 0) +
                                                                                  r * in->strides[o] + l * in->strides[o + 1]) * cv.es);
        size_t idx = (size_t)((n * rows + r) * cv.Ly + l);
        if (f64) ((double*)col)[idx] = v;
        else ((float*)col)[idx] = (float)v;
      }
  col2im_t t = {&cv, ncs_of(&img, 2), out->dtype, 0, col, f64, rows * cv.Ly, cv.Ly, NULL};
  if (ref) col2im_rows(&t, 0, cv.N * cv.Cx, 0);
  else tpurt_parallel_for(ctx, cv.N * cv.Cx, 1, col2im_rows, &t);
  return TPURT_OK;
}

#define CONV_PAIR(NAME, FN)                                                                         \
  tpurt_status_t tpurt_nn_##NAME(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {         \
    return FN(ctx, call, false);                                                                    \
  }                                                                                                 \
  tpurt_status_t tpurt_nn_##NAME##_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {   \
    return FN(ctx, call, true);                                                                     \
  }
CONV_PAIR(conv, conv_forward)
CONV_PAIR(conv_backward, conv_backward)
CONV_PAIR(slow_conv, slow_conv)
CONV_PAIR(slow_conv_backward, slow_conv_backward)
CONV_PAIR(im2col, im2col_op)
CONV_PAIR(col2im, col2im_op)
