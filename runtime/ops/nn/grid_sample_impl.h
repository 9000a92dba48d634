/* Grid sampling in one precision: included by grid_sample.c twice, with GS_REAL
 * float (float32 and the 16-bit types, PyTorch's opmath) and double, and
 * GS_FN(name) adding the suffix. The 2-D code follows PyTorch CPU's
 * vectorized kernel (GridSamplerKernel.cpp), the 3-D code its scalar kernel
 * (GridSampler.cpp): the two unnormalize, reflect and weigh differently, and
 * a sample near a cell border or a cancelling cubic weight agrees with CPU
 * only if the same formulas run in the same precision. The vectorized kernel
 * is built with FMA contraction (GCC fuses the first product of a sum into
 * the add), so the 2-D code spells those fused multiply-adds out (GS_FMA);
 * the scalar 3-D kernel is built without FMA. grad_input accumulates in
 * double. */

typedef GS_REAL GS_FN(real_t);

/* ---- 2-D coordinates (vectorized kernel) ---- */

static GS_REAL GS_FN(v_scale)(int64_t size, bool align) {
  return align ? (GS_REAL)(size - 1) / 2 : (GS_REAL)size / 2;
}
static GS_REAL GS_FN(v_unnorm)(GS_REAL in, int64_t size, bool align) {
  GS_REAL sf = GS_FN(v_scale)(size, align);
  return align ? (in + 1) * sf : GS_FMA(in + 1, sf, (GS_REAL)-0.5);
}
/* clamp to [0, size - 1]; NaN goes to 0 (CPU orders the clamp's operands for that) */
static GS_REAL GS_FN(v_clip)(GS_REAL in, int64_t size) {
  GS_REAL r = in > 0 ? in : 0, mx = (GS_REAL)(size - 1);
  return r < mx ? r : mx;
}
/* reflection by whole double spans (trunc), then one more flip if past the span */
static GS_REAL GS_FN(v_reflect)(GS_REAL in, int64_t size, bool align, GS_REAL* out_grad) {
  if (align && size <= 1) {
    if (out_grad) *out_grad = 0;
    return 0;
  }
  GS_REAL low = align ? 0 : (GS_REAL)-0.5;
  GS_REAL twice = align ? (GS_REAL)(size - 1) * 2 : (GS_REAL)size * 2;
  GS_REAL rel = in - low;
  bool neg = rel < 0;
  GS_REAL a = rel < 0 ? -rel : rel;
  GS_REAL flips = GS_TRUNC(a / twice);
  GS_REAL extra = GS_FMA(-flips, twice, a);
  GS_REAL refl = twice - extra;
  bool more = extra > refl;
  if (out_grad) *out_grad = (more != neg) ? -1 : 1;
  return (more ? refl : extra) + low;
}
/* the sampled coordinate of grid value `in` along an axis (ComputeLocation::apply, and with
 * out_mult, apply_get_grad's d(coordinate)/d(grid)) */
static GS_REAL GS_FN(v_apply)(GS_REAL in, int64_t size, int pad, bool align, GS_REAL* out_mult) {
  GS_REAL x = GS_FN(v_unnorm)(in, size, align), mult = GS_FN(v_scale)(size, align), g = 1;
  if (pad == GS_PAD_REFLECTION) {
    x = GS_FN(v_reflect)(x, size, align, &g);
    mult = g * mult;
  }
  if (pad != GS_PAD_ZEROS) {
    /* clip_coordinates_get_grad: borders count as outside */
    GS_REAL lo = x > 0 || x != x ? x : 0; /* maximum() keeps NaN */
    GS_REAL mx = (GS_REAL)(size - 1);
    GS_REAL r = lo < mx || lo != lo ? lo : mx;
    if (!(lo != 0 && r != mx)) mult = 0;
    x = out_mult ? r : GS_FN(v_clip)(x, size);
  }
  if (out_mult) *out_mult = mult;
  return x;
}
/* ComputeLocation::compute_coordinates (bicubic taps) */
static GS_REAL GS_FN(v_coord)(GS_REAL in, int64_t size, int pad, bool align) {
  if (pad == GS_PAD_BORDER) return GS_FN(v_clip)(in, size);
  if (pad == GS_PAD_REFLECTION) return GS_FN(v_clip)(GS_FN(v_reflect)(in, size, align, NULL), size);
  return in;
}

static void GS_FN(cubic)(GS_REAL t, GS_REAL* c) {
  const GS_REAL A = (GS_REAL)-0.75;
  GS_REAL x = t + 1;
  c[0] = GS_FMA(GS_FMA(GS_FMA(A, x, -5 * A), x, 8 * A), x, -4 * A);
  x = t;
  c[1] = GS_FMA(GS_FMA(A + 2, x, -(A + 3)) * x, x, 1);
  x = 1 - t;
  c[2] = GS_FMA(GS_FMA(A + 2, x, -(A + 3)) * x, x, 1);
  x = 2 - t;
  c[3] = GS_FMA(GS_FMA(GS_FMA(A, x, -5 * A), x, 8 * A), x, -4 * A);
}
static void GS_FN(cubic_grad)(GS_REAL t, GS_REAL* c) {
  const GS_REAL A = (GS_REAL)-0.75;
  GS_REAL x = -1 - t;
  c[0] = GS_FMA(GS_FMA(-3 * A, x, -10 * A), x, -8 * A);
  x = 0 - t;
  c[1] = GS_FMA(-3 * (A + 2), x, -2 * (A + 3)) * x;
  x = 1 - t;
  c[2] = GS_FMA(3 * (A + 2), x, -2 * (A + 3)) * x;
  x = 2 - t;
  c[3] = GS_FMA(GS_FMA(3 * A, x, -10 * A), x, 8 * A);
}

/* value at integer-valued (x, y) after the padding map, 0 outside (zeros padding) */
static GS_REAL GS_FN(v_value)(const gs_t* g, int64_t n, int64_t c, GS_REAL x, GS_REAL y, int64_t* out_off) {
  GS_REAL cx = GS_FN(v_coord)(x, g->W, g->pad, g->align), cy = GS_FN(v_coord)(y, g->H, g->pad, g->align);
  int64_t ix = 0, iy = 0;
  if (!gs_to_index(cx, g->W, &ix) || !gs_to_index(cy, g->H, &iy)) {
    *out_off = -1;
    return 0;
  }
  *out_off = (c * g->H + iy) * g->W + ix;
  return (GS_REAL)gs_in(g, n, c, 0, iy, ix);
}

/* one output location (n, oh, ow) of the 2-D sampler: forward writes out[n, :, oh, ow]; backward
 * adds into gin (the [C, H, W] double accumulator of batch n) and writes grad_grid */
static void GS_FN(sample2d)(const gs_t* g, int64_t n, int64_t oh, int64_t ow, double* gin) {
  GS_REAL gxv = (GS_REAL)gs_grid(g, n, 0, oh, ow, 0), gyv = (GS_REAL)gs_grid(g, n, 0, oh, ow, 1);
  bool bwd = g->backward;
  GS_REAL gx = 0, gy = 0;
  if (g->interp == GS_BILINEAR) {
    GS_REAL mx = 1, my = 1;
    GS_REAL x = GS_FN(v_apply)(gxv, g->W, g->pad, g->align, bwd ? &mx : NULL);
    GS_REAL y = GS_FN(v_apply)(gyv, g->H, g->pad, g->align, bwd ? &my : NULL);
    GS_REAL xw = GS_FLOOR(x), yn = GS_FLOOR(y);
    GS_REAL w = x - xw, e = 1 - w, nn = y - yn, s = 1 - nn;
    GS_REAL wt[4] = {s * e, s * w, nn * e, nn * w}; /* nw, ne, sw, se */
    int64_t ix = 0, iy = 0;
    bool okx = gs_to_index_any(xw, &ix), oky = gs_to_index_any(yn, &iy);
    bool mw = okx && ix > -1 && ix < g->W, me = okx && ix + 1 > -1 && ix + 1 < g->W;
    bool mn = oky && iy > -1 && iy < g->H, ms = oky && iy + 1 > -1 && iy + 1 < g->H;
    bool m[4] = {mw && mn, me && mn, mw && ms, me && ms};
    int64_t cx[4] = {ix, ix + 1, ix, ix + 1}, cy[4] = {iy, iy, iy + 1, iy + 1};
    for (int64_t c = 0; c < g->C; ++c) {
      GS_REAL v[4];
      for (int k = 0; k < 4; ++k) v[k] = m[k] ? (GS_REAL)gs_in(g, n, c, 0, cy[k], cx[k]) : 0;
      if (!bwd) {
        GS_REAL r = GS_FMA(v[3], wt[3], GS_FMA(v[2], wt[2], GS_FMA(v[0], wt[0], v[1] * wt[1])));
        gs_out(g, n, c, 0, oh, ow, r);
        continue;
      }
      GS_REAL go = (GS_REAL)gs_gout(g, n, c, 0, oh, ow);
      if (gin)
        for (int k = 0; k < 4; ++k)
          if (m[k]) gin[(c * g->H + cy[k]) * g->W + cx[k]] += (double)(wt[k] * go);
      gx = GS_FMA(GS_FMA(v[1] - v[0], s, (v[3] - v[2]) * nn), go, gx);
      gy = GS_FMA(GS_FMA(v[2] - v[0], e, (v[3] - v[1]) * w), go, gy);
    }
    if (bwd) gs_ggrid(g, n, 0, oh, ow, gx * mx, gy * my, 0);
    return;
  }
  if (g->interp == GS_NEAREST) {
    GS_REAL x = GS_NEARBYINT(GS_FN(v_apply)(gxv, g->W, g->pad, g->align, NULL));
    GS_REAL y = GS_NEARBYINT(GS_FN(v_apply)(gyv, g->H, g->pad, g->align, NULL));
    int64_t ix = 0, iy = 0;
    bool ok = gs_to_index(x, g->W, &ix) && gs_to_index(y, g->H, &iy);
    for (int64_t c = 0; c < g->C; ++c) {
      if (!bwd) {
        gs_out(g, n, c, 0, oh, ow, ok ? gs_in(g, n, c, 0, iy, ix) : 0);
      } else if (gin && ok) {
        gin[(c * g->H + iy) * g->W + ix] += gs_gout(g, n, c, 0, oh, ow);
      }
    }
    if (bwd) gs_ggrid(g, n, 0, oh, ow, 0, 0, 0);
    return;
  }
  /* bicubic: taps at floor(x) - 1 .. + 2 through the padding map */
  GS_REAL x = GS_FN(v_unnorm)(gxv, g->W, g->align), y = GS_FN(v_unnorm)(gyv, g->H, g->align);
  GS_REAL ix = GS_FLOOR(x), iy = GS_FLOOR(y);
  GS_REAL cxk[4], cyk[4], cxg[4], cyg[4];
  GS_FN(cubic)(x - ix, cxk);
  GS_FN(cubic)(y - iy, cyk);
  if (bwd) {
    GS_FN(cubic_grad)(x - ix, cxg);
    GS_FN(cubic_grad)(y - iy, cyg);
  }
  for (int64_t c = 0; c < g->C; ++c) {
    if (!bwd) {
      GS_REAL rows[4];
      for (int i = 0; i < 4; ++i) {
        GS_REAL yy = iy + (GS_REAL)(-1 + i);
        int64_t off;
        GS_REAL v[4];
        for (int k = 0; k < 4; ++k) v[k] = GS_FN(v_value)(g, n, c, ix + (GS_REAL)(k - 1), yy, &off);
        rows[i] = GS_FMA(cxk[3], v[3], GS_FMA(cxk[2], v[2], GS_FMA(cxk[0], v[0], cxk[1] * v[1])));
      }
      gs_out(g, n, c, 0, oh, ow,
             GS_FMA(cyk[3], rows[3], GS_FMA(cyk[2], rows[2], GS_FMA(cyk[0], rows[0], cyk[1] * rows[1]))));
      continue;
    }
    GS_REAL go = (GS_REAL)gs_gout(g, n, c, 0, oh, ow);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        int64_t off;
        GS_REAL v = GS_FN(v_value)(g, n, c, ix + (GS_REAL)(-1 + i), iy + (GS_REAL)(-1 + j), &off);
        if (gin && off >= 0) gin[off] += (double)(go * cxk[i] * cyk[j]);
        gx = GS_FMA(-(v * go * cxg[i]), cyk[j], gx);
        gy = GS_FMA(-(v * go * cyg[j]), cxk[i], gy);
      }
  }
  if (bwd) gs_ggrid(g, n, 0, oh, ow, gx * GS_FN(v_scale)(g->W, g->align), gy * GS_FN(v_scale)(g->H, g->align), 0);
}

/* ---- 3-D coordinates (scalar kernel) ---- */

static GS_REAL GS_FN(s_unnorm)(GS_REAL c, int64_t size, bool align, GS_REAL* out_mult) {
  if (align) {
    if (out_mult) *out_mult = (GS_REAL)(size - 1) / 2;
    return ((c + 1) / 2) * (GS_REAL)(size - 1);
  }
  if (out_mult) *out_mult = (GS_REAL)size / 2;
  return ((c + 1) * (GS_REAL)size - 1) / 2;
}
static GS_REAL GS_FN(s_clip)(GS_REAL in, int64_t size, GS_REAL* out_grad) {
  GS_REAL mx = (GS_REAL)(size - 1);
  if (out_grad) {
    if (in <= 0) { *out_grad = 0; return 0; }
    if (in >= mx) { *out_grad = 0; return mx; }
    *out_grad = 1;
    return in;
  }
  GS_REAL lo = in < 0 ? 0 : in;   /* std::max(in, 0) */
  return mx < lo ? mx : lo;       /* std::min(max, lo) */
}
static GS_REAL GS_FN(s_reflect)(GS_REAL in, int64_t twice_low, int64_t twice_high, GS_REAL* out_grad) {
  if (twice_low == twice_high) {
    if (out_grad) *out_grad = 0;
    return 0;
  }
  GS_REAL mn = (GS_REAL)twice_low / 2, span = (GS_REAL)(twice_high - twice_low) / 2;
  int mult = 1;
  in = in - mn;
  if (in < 0) mult = -1, in = -in;
  GS_REAL extra = GS_FMOD(in, span);
  int flips = (int)GS_FLOOR(in / span);
  if (flips % 2 == 0) {
    if (out_grad) *out_grad = (GS_REAL)mult;
    return extra + mn;
  }
  if (out_grad) *out_grad = (GS_REAL)-mult;
  return span - extra + mn;
}
static GS_REAL GS_FN(s_source)(GS_REAL c, int64_t size, int pad, bool align, GS_REAL* out_mult) {
  GS_REAL m = 1, gc = 1, gr = 1;
  c = GS_FN(s_unnorm)(c, size, align, &m);
  if (pad == GS_PAD_BORDER) {
    c = GS_FN(s_clip)(c, size, out_mult ? &gc : NULL);
    m = m * gc;
  } else if (pad == GS_PAD_REFLECTION) {
    c = align ? GS_FN(s_reflect)(c, 0, 2 * (size - 1), out_mult ? &gr : NULL)
              : GS_FN(s_reflect)(c, -1, 2 * size - 1, out_mult ? &gr : NULL);
    c = GS_FN(s_clip)(c, size, out_mult ? &gc : NULL);
    m = m * gr * gc;
  }
  if (out_mult) *out_mult = m;
  return c;
}

static void GS_FN(sample3d)(const gs_t* g, int64_t n, int64_t od, int64_t oh, int64_t ow, double* gin) {
  bool bwd = g->backward;
  GS_REAL mx = 1, my = 1, mz = 1;
  GS_REAL x = GS_FN(s_source)((GS_REAL)gs_grid(g, n, od, oh, ow, 0), g->W, g->pad, g->align, bwd ? &mx : NULL);
  GS_REAL y = GS_FN(s_source)((GS_REAL)gs_grid(g, n, od, oh, ow, 1), g->H, g->pad, g->align, bwd ? &my : NULL);
  GS_REAL z = GS_FN(s_source)((GS_REAL)gs_grid(g, n, od, oh, ow, 2), g->D, g->pad, g->align, bwd ? &mz : NULL);
  if (g->interp == GS_NEAREST) {
    int64_t ix = 0, iy = 0, iz = 0;
    bool ok = gs_to_index(GS_NEARBYINT(x), g->W, &ix) && gs_to_index(GS_NEARBYINT(y), g->H, &iy) &&
              gs_to_index(GS_NEARBYINT(z), g->D, &iz);
    for (int64_t c = 0; c < g->C; ++c) {
      if (!bwd) gs_out(g, n, c, od, oh, ow, ok ? gs_in(g, n, c, iz, iy, ix) : 0);
      else if (gin && ok) gin[((c * g->D + iz) * g->H + iy) * g->W + ix] += gs_gout(g, n, c, od, oh, ow);
    }
    if (bwd) gs_ggrid(g, n, od, oh, ow, 0, 0, 0);
    return;
  }
  GS_REAL fx = GS_FLOOR(x), fy = GS_FLOOR(y), fz = GS_FLOOR(z);
  int64_t x0 = 0, y0 = 0, z0 = 0;
  bool okx = gs_to_index_any(fx, &x0), oky = gs_to_index_any(fy, &y0), okz = gs_to_index_any(fz, &z0);
  /* per-axis distances: a[0] to the far (index + 1) side, a[1] to the near one */
  GS_REAL ax[2] = {(GS_REAL)(x0 + 1) - x, x - (GS_REAL)x0};
  GS_REAL ay[2] = {(GS_REAL)(y0 + 1) - y, y - (GS_REAL)y0};
  GS_REAL az[2] = {(GS_REAL)(z0 + 1) - z, z - (GS_REAL)z0};
  GS_REAL wt[8];
  bool m[8];
  int64_t off[8];
  /* corner k: bit 0 = x + 1, bit 1 = y + 1, bit 2 = z + 1 (tnw, tne, tsw, tse, bnw, bne, bsw, bse) */
  for (int k = 0; k < 8; ++k) {
    int bx = k & 1, by = (k >> 1) & 1, bz = (k >> 2) & 1;
    wt[k] = ax[bx] * ay[by] * az[bz];
    int64_t cx = x0 + bx, cy = y0 + by, cz = z0 + bz;
    m[k] = okx && oky && okz && cx >= 0 && cx < g->W && cy >= 0 && cy < g->H && cz >= 0 && cz < g->D;
    off[k] = m[k] ? ((cz * g->H + cy) * g->W + cx) : -1;
  }
  double gx = 0, gy = 0, gz = 0;
  for (int64_t c = 0; c < g->C; ++c) {
    if (!bwd) {
      GS_REAL r = 0;
      for (int k = 0; k < 8; ++k)
        if (m[k]) r += (GS_REAL)gs_in(g, n, c, z0 + ((k >> 2) & 1), y0 + ((k >> 1) & 1), x0 + (k & 1)) * wt[k];
      gs_out(g, n, c, od, oh, ow, r);
      continue;
    }
    GS_REAL go = (GS_REAL)gs_gout(g, n, c, od, oh, ow);
    for (int k = 0; k < 8; ++k) {
      if (!m[k]) continue;
      int bx = k & 1, by = (k >> 1) & 1, bz = (k >> 2) & 1;
      if (gin) gin[c * g->D * g->H * g->W + off[k]] += (double)(wt[k] * go);
      GS_REAL v = (GS_REAL)gs_in(g, n, c, z0 + bz, y0 + by, x0 + bx);
      /* d(weight)/dx is -(y, z weights) at the near corner, + at the far one */
      gx += (double)((bx ? v : -v) * ay[by] * az[bz] * go);
      gy += (double)((by ? v : -v) * ax[bx] * az[bz] * go);
      gz += (double)((bz ? v : -v) * ax[bx] * ay[by] * go);
    }
  }
  if (bwd) gs_ggrid(g, n, od, oh, ow, (double)mx * gx, (double)my * gy, (double)mz * gz);
}
