/* The per-element bodies of ps_roi.c in one precision: included twice, with
 * PS_REAL float (float32, float16) and double (float64), so every step is
 * taken in the precision torchvision's CPU kernel takes it in (bin edges by
 * floor/ceil of products in that precision must land where CPU's land). */

static inline PS_REAL PS_FN(roi)(const ps_t* p, int64_t n, int j) {
  return (PS_REAL)tpurt_nn_ld(p->rois, n * p->rois->strides[0] + j * p->rois->strides[1]);
}

/* torchvision's bilinear_interpolate of ps_roi_align: the four taps and
 * weights of point (y, x), or false when it lies outside [-1, H] x [-1, W]
 * (NaN included). */
static inline bool PS_FN(taps)(int64_t H, int64_t W, PS_REAL y, PS_REAL x, int64_t* yl, int64_t* yh, int64_t* xl,
                               int64_t* xh, PS_REAL w[4]) {
  if (!(y >= -1.0 && y <= (PS_REAL)H && x >= -1.0 && x <= (PS_REAL)W)) return false;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  *yl = (int64_t)y, *xl = (int64_t)x;
  if (*yl >= H - 1) *yh = *yl = H - 1, y = (PS_REAL)*yl;
  else *yh = *yl + 1;
  if (*xl >= W - 1) *xh = *xl = W - 1, x = (PS_REAL)*xl;
  else *xh = *xl + 1;
  PS_REAL ly = y - (PS_REAL)*yl, lx = x - (PS_REAL)*xl, hy = (PS_REAL)1 - ly, hx = (PS_REAL)1 - lx;
  w[0] = hy * hx, w[1] = hy * lx, w[2] = ly * hx, w[3] = ly * lx;
  return true;
}

/* One ps_roi_align bin: (roi n, output channel c_out, ph, pw). grad != NULL: the backward, which
 * adds grad * weight / count to grad_input's plane (b, c_in) instead of reading input. */
static inline PS_REAL PS_FN(align_bin)(const ps_t* p, int64_t n, int64_t b, int64_t c_in, int64_t ph, int64_t pw,
                                       const PS_REAL* grad) {
  PS_REAL scale = (PS_REAL)p->scale, half = (PS_REAL)0.5;
  PS_REAL sw = PS_FN(roi)(p, n, 1) * scale - half, sh = PS_FN(roi)(p, n, 2) * scale - half;
  PS_REAL ew = PS_FN(roi)(p, n, 3) * scale - half, eh = PS_FN(roi)(p, n, 4) * scale - half;
  PS_REAL rw = ew - sw, rh = eh - sh;
  PS_REAL bh = rh / (PS_REAL)p->PH, bw = rw / (PS_REAL)p->PW;
  PS_REAL hstart = (PS_REAL)ph * bh + sh, wstart = (PS_REAL)pw * bw + sw;
  int64_t gh = p->sampling > 0 ? p->sampling : (int64_t)ceil(rh / (PS_REAL)p->PH);
  int64_t gw = p->sampling > 0 ? p->sampling : (int64_t)ceil(rw / (PS_REAL)p->PW);
  PS_REAL count = (PS_REAL)(gh * gw);
  const tpurt_tensor_t* t = grad ? p->gin : p->in;
  int64_t base = b * t->strides[0] + c_in * t->strides[1], s2 = t->strides[2], s3 = t->strides[3];
  PS_REAL sum = 0;
  for (int64_t iy = 0; iy < gh; ++iy) {
    PS_REAL y = hstart + (PS_REAL)((float)iy + .5f) * bh / (PS_REAL)gh;
    for (int64_t ix = 0; ix < gw; ++ix) {
      PS_REAL x = wstart + (PS_REAL)((float)ix + .5f) * bw / (PS_REAL)gw;
      int64_t yl, yh, xl, xh;
      PS_REAL w[4];
      if (!PS_FN(taps)(p->H, p->W, y, x, &yl, &yh, &xl, &xh, w)) continue;
      int64_t o[4] = {base + yl * s2 + xl * s3, base + yl * s2 + xh * s3, base + yh * s2 + xl * s3,
                      base + yh * s2 + xh * s3};
      if (grad) {
        for (int q = 0; q < 4; ++q) tpurt_nn_st(t, o[q], tpurt_nn_ld(t, o[q]) + (double)(*grad * w[q] / count));
      } else {
        PS_REAL v[4];
        for (int q = 0; q < 4; ++q) v[q] = (PS_REAL)tpurt_nn_ld(t, o[q]);
        sum += w[0] * v[0] + w[1] * v[1] + w[2] * v[2] + w[3] * v[3];
      }
    }
  }
  return sum / count;
}

/* One ps_roi_pool bin: the average over its integer window (0 when empty). The forward clips the
 * window to [0, H-1] x [0, W-1] and rounds the roi with round(); the backward clips to [0, H] x
 * [0, W] and rounds in float (roundf), as torchvision's CPU kernels do. */
static inline PS_REAL PS_FN(pool_bin)(const ps_t* p, int64_t n, int64_t b, int64_t c_in, int64_t ph, int64_t pw,
                                      const PS_REAL* grad) {
  PS_REAL scale = (PS_REAL)p->scale;
  int64_t s[4];
  for (int j = 0; j < 4; ++j) {
    PS_REAL v = PS_FN(roi)(p, n, j + 1) * scale;
    s[j] = grad ? (int64_t)roundf((float)v) : (int64_t)round((double)v);
  }
  int64_t rw = s[2] - s[0] > 1 ? s[2] - s[0] : 1, rh = s[3] - s[1] > 1 ? s[3] - s[1] : 1;
  PS_REAL bh = (PS_REAL)rh / (PS_REAL)p->PH, bw = (PS_REAL)rw / (PS_REAL)p->PW;
  int64_t hs = (int64_t)floor((PS_REAL)ph * bh), ws = (int64_t)floor((PS_REAL)pw * bw);
  int64_t he = (int64_t)ceil((PS_REAL)(ph + 1) * bh), we = (int64_t)ceil((PS_REAL)(pw + 1) * bw);
  int64_t hmax = grad ? p->H : p->H - 1, wmax = grad ? p->W : p->W - 1;
#define PS_CLIP(v, hi) ((v) < 0 ? 0 : (v) > (hi) ? (hi) : (v))
  hs = PS_CLIP(hs + s[1], hmax), he = PS_CLIP(he + s[1], hmax);
  ws = PS_CLIP(ws + s[0], wmax), we = PS_CLIP(we + s[0], wmax);
#undef PS_CLIP
  if (he <= hs || we <= ws) return 0;
  PS_REAL area = (PS_REAL)((he - hs) * (we - ws));
  const tpurt_tensor_t* t = grad ? p->gin : p->in;
  int64_t base = b * t->strides[0] + c_in * t->strides[1];
  PS_REAL sum = 0, g = grad ? *grad / area : 0;
  for (int64_t h = hs; h < he; ++h)
    for (int64_t w = ws; w < we; ++w) {
      int64_t o = base + h * t->strides[2] + w * t->strides[3];
      if (grad) tpurt_nn_st(t, o, tpurt_nn_ld(t, o) + (double)g);
      else sum += (PS_REAL)tpurt_nn_ld(t, o);
    }
  return sum / area;
}
