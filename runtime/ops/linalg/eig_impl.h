/* The eigenvalue half of linalg_eig for one precision, included by
 * complex.c once with EIG_R = float (as sgeev computes for float32)
 * and once with double: the order eigenvalues converge in depends on the
 * precision's deflation thresholds, so each dtype iterates in its own. */
#define EIG_CAT2(a, b) a##_##b
#define EIG_CAT(a, b) EIG_CAT2(a, b)
#define EIG_FN(name) EIG_CAT(name, EIG_SUF)

/* gebal's diagonal scaling by powers of 2 (rows and columns of like norm). */
static void EIG_FN(eig_balance)(int64_t n, EIG_R* a) {
  const EIG_R sfmin1 = EIG_SAFMIN / EIG_EPS, sfmax1 = 1 / sfmin1;
  const EIG_R sfmin2 = sfmin1 * 2, sfmax2 = 1 / sfmin2;
  bool noconv = true;
  EIG_R scale_i[64];
  EIG_R* scale = n <= 64 ? scale_i : NULL; /* the overflow guards only; bigger matrices skip them */
  for (int64_t i = 0; scale && i < n; ++i) scale[i] = 1.0;
  for (int iter = 0; noconv && iter < 1000; ++iter) {
    noconv = false;
    for (int64_t i = 0; i < n; ++i) {
      EIG_R c = 0, r = 0, ca = 0, ra = 0;
      for (int64_t k = 0; k < n; ++k) {
        c += a[k * n + i] * a[k * n + i];
        r += a[i * n + k] * a[i * n + k];
        if (EIG_M(fabs)(a[k * n + i]) > ca) ca = EIG_M(fabs)(a[k * n + i]);
        if (EIG_M(fabs)(a[i * n + k]) > ra) ra = EIG_M(fabs)(a[i * n + k]);
      }
      c = EIG_M(sqrt)(c);
      r = EIG_M(sqrt)(r);
      if (c == 0 || r == 0) continue;
      if (isnan(c + ca + r + ra)) return;
      EIG_R g = r / 2.0, f = 1.0, s = c + r;
      while (c < g && EIG_M(fmax)(f, EIG_M(fmax)(c, ca)) < sfmax2 && EIG_M(fmin)(r, EIG_M(fmin)(g, ra)) > sfmin2) {
        f *= 2.0; c *= 2.0; ca *= 2.0; r /= 2.0; g /= 2.0; ra /= 2.0;
      }
      g = c / 2.0;
      while (g >= r && EIG_M(fmax)(r, ra) < sfmax2 && EIG_M(fmin)(EIG_M(fmin)(f, c), EIG_M(fmin)(g, ca)) > sfmin2) {
        f /= 2.0; c /= 2.0; g /= 2.0; ca /= 2.0; r *= 2.0; ra *= 2.0;
      }
      if (c + r >= 0.95 * s) continue;
      if (scale) {
        if (f < 1.0 && scale[i] < 1.0 && f * scale[i] <= sfmin1) continue;
        if (f > 1.0 && scale[i] > 1.0 && scale[i] >= sfmax1 / f) continue;
        scale[i] *= f;
      }
      noconv = true;
      for (int64_t k = 0; k < n; ++k) a[i * n + k] /= f;
      for (int64_t k = 0; k < n; ++k) a[k * n + i] *= f;
    }
  }
}

/* A Householder reflector (larfg): on return x[0] = beta, x[1..nr) = v (v[0] = 1 implied). */
static EIG_R EIG_FN(eig_reflector)(int64_t nr, EIG_R* x, int64_t stride) {
  EIG_R xnorm = 0;
  for (int64_t k = 1; k < nr; ++k) xnorm = EIG_M(hypot)(xnorm, x[k * stride]);
  if (xnorm == 0) return 0.0;
  EIG_R alpha = x[0];
  EIG_R beta = -EIG_M(copysign)(EIG_M(hypot)(alpha, xnorm), alpha);
  EIG_R tau = (beta - alpha) / beta, sc = 1.0 / (alpha - beta);
  for (int64_t k = 1; k < nr; ++k) x[k * stride] *= sc;
  x[0] = beta;
  return tau;
}

/* Hessenberg form by Householder reflections from both sides (gehrd). */
static void EIG_FN(eig_hessenberg)(int64_t n, EIG_R* a, EIG_R* v) {
  for (int64_t k = 0; k + 2 < n; ++k) {
    int64_t nr = n - k - 1;
    EIG_R* col = &a[(k + 1) * n + k];
    EIG_R tau = EIG_FN(eig_reflector)(nr, col, n);
    if (tau == 0) continue;
    v[0] = 1.0;
    for (int64_t r = 1; r < nr; ++r) {
      v[r] = col[r * n];
      col[r * n] = 0;
    }
    /* left: rows k+1.., columns k+1.. */
    for (int64_t j = k + 1; j < n; ++j) {
      EIG_R s = 0;
      for (int64_t r = 0; r < nr; ++r) s += v[r] * a[(k + 1 + r) * n + j];
      s *= tau;
      for (int64_t r = 0; r < nr; ++r) a[(k + 1 + r) * n + j] -= s * v[r];
    }
    /* right: all rows, columns k+1.. */
    for (int64_t i = 0; i < n; ++i) {
      EIG_R s = 0;
      for (int64_t r = 0; r < nr; ++r) s += a[i * n + k + 1 + r] * v[r];
      s *= tau;
      for (int64_t r = 0; r < nr; ++r) a[i * n + k + 1 + r] -= s * v[r];
    }
  }
}

/* The eigenvalues of a converged 2x2 block [a b; c d], in lanv2's order. */
static void EIG_FN(eig_block2)(EIG_R a, EIG_R b, EIG_R c, EIG_R d, EIG_R* wr, EIG_R* wi) {
  if (c == 0) {
    wr[0] = a; wr[1] = d; wi[0] = wi[1] = 0;
    return;
  }
  if (b == 0) {
    wr[0] = d; wr[1] = a; wi[0] = wi[1] = 0;
    return;
  }
  EIG_R p = 0.5 * (a - d), bcmax = EIG_M(fmax)(EIG_M(fabs)(b), EIG_M(fabs)(c));
  EIG_R bcmis = EIG_M(fmin)(EIG_M(fabs)(b), EIG_M(fabs)(c)) * EIG_M(copysign)(1.0, b) * EIG_M(copysign)(1.0, c);
  EIG_R scale = EIG_M(fmax)(EIG_M(fabs)(p), bcmax), z = p / scale * p + bcmax / scale * bcmis;
  if (z >= 4 * EIG_EPS) { /* real: the one nearer a first */
    z = p + EIG_M(copysign)(EIG_M(sqrt)(scale) * EIG_M(sqrt)(z), p);
    wr[0] = d + z;
    wr[1] = d - bcmax / z * bcmis;
    wi[0] = wi[1] = 0;
    return;
  }
  EIG_R mean = 0.5 * (a + d), disc = p * p + b * c;
  if (disc < 0) {
    EIG_R im = EIG_M(sqrt)(-disc);
    wr[0] = wr[1] = mean;
    wi[0] = im;
    wi[1] = -im;
  } else {
    EIG_R r = EIG_M(sqrt)(disc);
    wr[0] = mean + r;
    wr[1] = mean - r;
    wi[0] = wi[1] = 0;
  }
}

/* Francis EIG_R-shift QR on the Hessenberg h (lahqr, eigenvalues only).
 * Returns false when it does not converge. */
static bool EIG_FN(eig_qr)(int64_t n, EIG_R* h, EIG_R* wr, EIG_R* wi) {
#define H(i, j) h[(i) * n + (j)]
  const EIG_R ulp = EIG_EPS, smlnum = EIG_SAFMIN * ((EIG_R)n / ulp);
  const int64_t itmax = 30 * (n > 10 ? n : 10);
  for (int64_t j = 0; j + 3 < n; ++j) H(j + 2, j) = H(j + 3, j) = 0;
  if (n >= 3) H(n - 1, n - 3) = 0;
  int64_t i = n - 1;
  while (i >= 0) {
    int64_t l = 0;
    bool converged = false;
    for (int64_t its = 0; its <= itmax; ++its) {
      int64_t k;
      for (k = i; k > l; --k) { /* a negligible subdiagonal element (Ahues & Tisseur) */
        if (EIG_M(fabs)(H(k, k - 1)) <= smlnum) break;
        EIG_R tst = EIG_M(fabs)(H(k - 1, k - 1)) + EIG_M(fabs)(H(k, k));
        if (tst == 0) {
          if (k - 2 >= 0) tst += EIG_M(fabs)(H(k - 1, k - 2));
          if (k + 1 <= n - 1) tst += EIG_M(fabs)(H(k + 1, k));
        }
        if (EIG_M(fabs)(H(k, k - 1)) <= ulp * tst) {
          EIG_R ab = EIG_M(fmax)(EIG_M(fabs)(H(k, k - 1)), EIG_M(fabs)(H(k - 1, k))), ba = EIG_M(fmin)(EIG_M(fabs)(H(k, k - 1)), EIG_M(fabs)(H(k - 1, k)));
          EIG_R aa = EIG_M(fmax)(EIG_M(fabs)(H(k, k)), EIG_M(fabs)(H(k - 1, k - 1) - H(k, k)));
          EIG_R bb = EIG_M(fmin)(EIG_M(fabs)(H(k, k)), EIG_M(fabs)(H(k - 1, k - 1) - H(k, k)));
          EIG_R s = aa + ab;
          if (ba * (ab / s) <= EIG_M(fmax)(smlnum, ulp * (bb * (aa / s)))) break;
        }
      }
      l = k;
      if (l > 0) H(l, l - 1) = 0;
      if (l >= i - 1) {
        converged = true;
        break;
      }
      EIG_R h11, h12, h21, h22;
      if (its == 10) { /* exceptional shifts */
        EIG_R s = EIG_M(fabs)(H(l + 1, l)) + EIG_M(fabs)(H(l + 2, l + 1));
        h11 = 0.75 * s + H(l, l);
        h12 = -0.4375 * s;
        h21 = s;
        h22 = h11;
      } else if (its == 20) {
        EIG_R s = EIG_M(fabs)(H(i, i - 1)) + EIG_M(fabs)(H(i - 1, i - 2));
        h11 = 0.75 * s + H(i, i);
        h12 = -0.4375 * s;
        h21 = s;
        h22 = h11;
      } else { /* Francis' EIG_R shift: the trailing 2x2's eigenvalues */
        h11 = H(i - 1, i - 1);
        h21 = H(i, i - 1);
        h12 = H(i - 1, i);
        h22 = H(i, i);
      }
      EIG_R rt1r, rt1i, rt2r, rt2i;
      EIG_R s = EIG_M(fabs)(h11) + EIG_M(fabs)(h12) + EIG_M(fabs)(h21) + EIG_M(fabs)(h22);
      if (s == 0) {
        rt1r = rt1i = rt2r = rt2i = 0;
      } else {
        h11 /= s; h21 /= s; h12 /= s; h22 /= s;
        EIG_R tr = (h11 + h22) / 2.0, det = (h11 - tr) * (h22 - tr) - h12 * h21, rtdisc = EIG_M(sqrt)(EIG_M(fabs)(det));
        if (det >= 0) { /* complex conjugate shifts */
          rt1r = rt2r = tr * s;
          rt1i = rtdisc * s;
          rt2i = -rt1i;
        } else { /* real shifts: use the one nearer h22 twice */
          rt1r = tr + rtdisc;
          rt2r = tr - rtdisc;
          if (EIG_M(fabs)(rt1r - h22) <= EIG_M(fabs)(rt2r - h22)) rt2r = rt1r = rt1r * s;
          else rt1r = rt2r = rt2r * s;
          rt1i = rt2i = 0;
        }
      }
      /* where to start the step: two consecutive small subdiagonal elements */
      EIG_R v[3];
      int64_t m;
      for (m = i - 2; m >= l; --m) {
        EIG_R h21s = H(m + 1, m);
        EIG_R sc = EIG_M(fabs)(H(m, m) - rt2r) + EIG_M(fabs)(rt2i) + EIG_M(fabs)(h21s);
        h21s = H(m + 1, m) / sc;
        v[0] = h21s * H(m, m + 1) + (H(m, m) - rt1r) * ((H(m, m) - rt2r) / sc) - rt1i * (rt2i / sc);
        v[1] = h21s * (H(m, m) + H(m + 1, m + 1) - rt1r - rt2r);
        v[2] = h21s * H(m + 2, m + 1);
        sc = EIG_M(fabs)(v[0]) + EIG_M(fabs)(v[1]) + EIG_M(fabs)(v[2]);
        v[0] /= sc; v[1] /= sc; v[2] /= sc;
        if (m == l) break;
        if (EIG_M(fabs)(H(m, m - 1)) * (EIG_M(fabs)(v[1]) + EIG_M(fabs)(v[2])) <=
            ulp * EIG_M(fabs)(v[0]) * (EIG_M(fabs)(H(m - 1, m - 1)) + EIG_M(fabs)(H(m, m)) + EIG_M(fabs)(H(m + 1, m + 1))))
          break;
      }
      /* the EIG_R-shift step: a bulge chased down the active block [l, i] */
      const int64_t i1 = l, i2 = i;
      for (int64_t kk = m; kk <= i - 1; ++kk) {
        int64_t nr = i - kk + 1 < 3 ? i - kk + 1 : 3;
        if (kk > m)
          for (int64_t r = 0; r < nr; ++r) v[r] = H(kk + r, kk - 1);
        EIG_R t1 = EIG_FN(eig_reflector)(nr, v, 1);
        if (kk > m) {
          H(kk, kk - 1) = v[0];
          H(kk + 1, kk - 1) = 0;
          if (kk < i - 1) H(kk + 2, kk - 1) = 0;
        } else if (m > l) {
          H(kk, kk - 1) *= 1.0 - t1;
        }
        EIG_R v2 = v[1], t2 = t1 * v2;
        if (nr == 3) {
          EIG_R v3 = v[2], t3 = t1 * v3;
          for (int64_t j = kk; j <= i2; ++j) {
            EIG_R sum = H(kk, j) + v2 * H(kk + 1, j) + v3 * H(kk + 2, j);
            H(kk, j) -= sum * t1;
            H(kk + 1, j) -= sum * t2;
            H(kk + 2, j) -= sum * t3;
          }
          int64_t jmax = kk + 3 < i ? kk + 3 : i;
          for (int64_t j = i1; j <= jmax; ++j) {
            EIG_R sum = H(j, kk) + v2 * H(j, kk + 1) + v3 * H(j, kk + 2);
            H(j, kk) -= sum * t1;
            H(j, kk + 1) -= sum * t2;
            H(j, kk + 2) -= sum * t3;
          }
        } else if (nr == 2) {
          for (int64_t j = kk; j <= i2; ++j) {
            EIG_R sum = H(kk, j) + v2 * H(kk + 1, j);
            H(kk, j) -= sum * t1;
            H(kk + 1, j) -= sum * t2;
          }
          for (int64_t j = i1; j <= i; ++j) {
            EIG_R sum = H(j, kk) + v2 * H(j, kk + 1);
            H(j, kk) -= sum * t1;
            H(j, kk + 1) -= sum * t2;
          }
        }
      }
    }
    if (!converged) return false;
    if (l == i) {
      wr[i] = H(i, i);
      wi[i] = 0;
    } else {
      EIG_FN(eig_block2)(H(i - 1, i - 1), H(i - 1, i), H(i, i - 1), H(i, i), &wr[i - 1], &wi[i - 1]);
    }
    i = l - 1;
  }
  return true;
#undef H
}

#undef EIG_FN
#undef EIG_CAT
#undef EIG_CAT2
