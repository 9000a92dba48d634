/* The FFT for one precision: included by fft.c once with FFT_R = float,
 * FFT_SUF = f32 and once with double / f64, so float32 computes in float and
 * float64 in double, as ATen's CPU FFT does.
 *
 * 1-d plans: mixed-radix Cooley-Tukey (decimation in time, radix 2 and 4
 * butterflies written out, any other radix up to FFT_MAX_RADIX generic) when
 * every prime factor of n is small; otherwise Bluestein's chirp-z, which turns
 * the length-n DFT into a cyclic convolution of power-of-two length m >= 2n-1.
 * Only forward transforms are planned: an inverse one is conj(F(conj(x))).
 * A pass transforms every line of a strided tensor along one dimension, the
 * lines split across the chip's threads, each thread with its own buffers. */

#define FFT_CAT2(a, b) a##_##b
#define FFT_CAT(a, b) FFT_CAT2(a, b)
#define FN(name) FFT_CAT(name, FFT_SUF)

typedef struct FN(cpx_t) {
  FFT_R re, im;
} FN(cpx_t);
#define CPX FN(cpx_t)

static inline CPX FN(cmul)(CPX a, CPX b) {
  CPX r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
  return r;
}

typedef struct FN(plan_t) {
  int64_t n;
  int64_t f[64];               /* radices, outermost butterfly first */
  const CPX* tw;               /* n twiddles exp(-2 pi i k / n) */
  struct FN(plan_t) * inner;   /* Bluestein: the power-of-two plan; NULL for mixed radix */
  int64_t m;                   /* Bluestein: convolution length */
  const CPX* chirp;            /* Bluestein: n values exp(-pi i k^2 / n) */
  const CPX* bfft;             /* Bluestein: m values, the DFT of the conjugate chirp over m */
} FN(plan_t);

/* Bytes a plan for n needs (fft_plan_init's `mem`), 64-byte aligned pieces. */
static size_t FN(fft_plan_bytes)(int64_t n) {
  size_t b = fft_align(sizeof(CPX) * (size_t)n);
  if (!fft_is_smooth(n)) {
    int64_t m = fft_next_pow2(2 * n - 1);
    b += fft_align(sizeof(FN(plan_t))) + FN(fft_plan_bytes)(m) + fft_align(sizeof(CPX) * (size_t)n) +
         2 * fft_align(sizeof(CPX) * (size_t)m);
  }
  return b;
}

/* Complex elements of per-line work space fft_exec needs besides the line. */
static int64_t FN(fft_work_elems)(const FN(plan_t) * p) {
  return p->inner ? p->m + FN(fft_work_elems)(p->inner) : p->n;
}

static void FN(fft_rec)(const CPX* in, int64_t is, CPX* out, int64_t n, const int64_t* f, const CPX* tw,
                        int64_t ts) {
  if (n == 1) {
    out[0] = in[0];
    return;
  }
  const int64_t p = f[0], m = n / p;
  for (int64_t q = 0; q < p; ++q) FN(fft_rec)(in + q * is, is * p, out + q * m, m, f + 1, tw, ts * p);
  /* X[k + r m] = sum_q (Y_q[k] W_n^{q k}) W_p^{q r}, with W_n^j = tw[j ts] */
  if (p == 2) {
    for (int64_t k = 0; k < m; ++k) {
      CPX a = out[k], b = FN(cmul)(out[k + m], tw[k * ts]);
      out[k].re = a.re + b.re;
      out[k].im = a.im + b.im;
      out[k + m].re = a.re - b.re;
      out[k + m].im = a.im - b.im;
    }
  } else if (p == 4) {
    for (int64_t k = 0; k < m; ++k) {
      CPX t0 = out[k], t1 = FN(cmul)(out[k + m], tw[k * ts]);
      CPX t2 = FN(cmul)(out[k + 2 * m], tw[2 * k * ts]), t3 = FN(cmul)(out[k + 3 * m], tw[3 * k * ts]);
      CPX a0 = {t0.re + t2.re, t0.im + t2.im}, a1 = {t0.re - t2.re, t0.im - t2.im};
      CPX a2 = {t1.re + t3.re, t1.im + t3.im}, a3 = {t1.re - t3.re, t1.im - t3.im};
      out[k].re = a0.re + a2.re;
      out[k].im = a0.im + a2.im;
      out[k + 2 * m].re = a0.re - a2.re;
      out[k + 2 * m].im = a0.im - a2.im;
      out[k + m].re = a1.re + a3.im; /* a1 - i a3 */
      out[k + m].im = a1.im - a3.re;
      out[k + 3 * m].re = a1.re - a3.im; /* a1 + i a3 */
      out[k + 3 * m].im = a1.im + a3.re;
    }
  } else {
    CPX t[FFT_MAX_RADIX];
    const int64_t wp = m * ts; /* W_p = tw[wp] */
    for (int64_t k = 0; k < m; ++k) {
      t[0] = out[k];
      for (int64_t q = 1; q < p; ++q) t[q] = FN(cmul)(out[k + q * m], tw[q * k * ts]);
      for (int64_t r = 0; r < p; ++r) {
        CPX acc = t[0];
        for (int64_t q = 1; q < p; ++q) {
          CPX v = FN(cmul)(t[q], tw[((q * r) % p) * wp]);
          acc.re += v.re;
          acc.im += v.im;
        }
        out[k + r * m] = acc;
      }
    }
  }
}

/* Forward DFT of x[0..n) in place; work holds fft_work_elems(p) elements. */
static void FN(fft_exec)(const FN(plan_t) * p, CPX* x, CPX* work) {
  const int64_t n = p->n;
  if (!p->inner) {
    FN(fft_rec)(x, 1, work, n, p->f, p->tw, 1);
    memcpy(x, work, sizeof(CPX) * (size_t)n);
    return;
  }
  const int64_t m = p->m;
  CPX *a = work, *w2 = work + m;
  for (int64_t j = 0; j < n; ++j) a[j] = FN(cmul)(x[j], p->chirp[j]);
  for (int64_t j = n; j < m; ++j) a[j].re = a[j].im = 0;
  FN(fft_exec)(p->inner, a, w2);
  for (int64_t j = 0; j < m; ++j) { /* conj(A B): the next forward DFT is then an inverse one */
    a[j] = FN(cmul)(a[j], p->bfft[j]);
    a[j].im = -a[j].im;
  }
  FN(fft_exec)(p->inner, a, w2);
  for (int64_t k = 0; k < n; ++k) {
    CPX c = {a[k].re, -a[k].im};
    x[k] = FN(cmul)(c, p->chirp[k]);
  }
}

static void FN(fft_plan_init)(FN(plan_t) * p, int64_t n, char* mem) {
  memset(p, 0, sizeof(*p));
  p->n = n;
  fft_factorize(n, p->f);
  CPX* tw = (CPX*)mem;
  mem += fft_align(sizeof(CPX) * (size_t)n);
  for (int64_t k = 0; k < n; ++k) { /* angles in double, then rounded */
    double a = -2.0 * M_PI * (double)k / (double)n;
    tw[k].re = (FFT_R)cos(a);
    tw[k].im = (FFT_R)sin(a);
  }
  p->tw = tw;
  if (fft_is_smooth(n)) return;
  int64_t m = fft_next_pow2(2 * n - 1);
  p->m = m;
  p->inner = (FN(plan_t)*)mem;
  mem += fft_align(sizeof(FN(plan_t)));
  FN(fft_plan_init)(p->inner, m, mem);
  mem += FN(fft_plan_bytes)(m);
  CPX* chirp = (CPX*)mem;
  mem += fft_align(sizeof(CPX) * (size_t)n);
  CPX* b = (CPX*)mem;
  mem += fft_align(sizeof(CPX) * (size_t)m);
  CPX* work = (CPX*)mem; /* m elements: the power-of-two plan's work space */
  for (int64_t k = 0; k < n; ++k) { /* k^2 mod 2n keeps the angle small and exact */
    int64_t r = (int64_t)(((unsigned __int128)k * (unsigned __int128)k) % (unsigned __int128)(2 * n));
    double a = -M_PI * (double)r / (double)n;
    chirp[k].re = (FFT_R)cos(a);
    chirp[k].im = (FFT_R)sin(a);
  }
  for (int64_t j = 0; j < m; ++j) b[j].re = b[j].im = 0;
  for (int64_t j = 0; j < n; ++j) {
    CPX c = {chirp[j].re, -chirp[j].im};
    b[j] = c;
    if (j) b[m - j] = c;
  }
  FN(fft_exec)(p->inner, b, work);
  for (int64_t j = 0; j < m; ++j) {
    b[j].re /= (FFT_R)m;
    b[j].im /= (FFT_R)m;
  }
  p->chirp = chirp;
  p->bfft = b;
}

/* The plain reference: the O(n^2) sum, angles reduced exactly (j k mod n). */
static void FN(dft_naive)(CPX* x, int64_t n, CPX* work) {
  for (int64_t k = 0; k < n; ++k) {
    double re = 0, im = 0;
    for (int64_t j = 0; j < n; ++j) {
      double a = -2.0 * M_PI * (double)((j * k) % n) / (double)n, c = cos(a), s = sin(a);
      re += x[j].re * c - x[j].im * s;
      im += x[j].re * s + x[j].im * c;
    }
    work[k].re = (FFT_R)re;
    work[k].im = (FFT_R)im;
  }
  memcpy(x, work, sizeof(CPX) * (size_t)n);
}

/* ---- one pass: every line of a tensor along one dimension ---- */

typedef struct FN(pass_t) {
  fft_pass_geom_t g;
  const FN(plan_t) * plan; /* NULL: the naive DFT (the reference kernel) */
  int64_t n;               /* transform length */
  char* bufs;              /* per thread: the line (n) then the work space */
  int64_t buf_elems;
} FN(pass_t);

static void FN(fft_pass_lines)(void* user, int64_t begin, int64_t end, int tid) {
  const FN(pass_t)* ps = user;
  const fft_pass_geom_t* g = &ps->g;
  const int64_t n = ps->n;
  CPX* x = (CPX*)(ps->bufs + (size_t)tid * (size_t)ps->buf_elems * sizeof(CPX));
  CPX* work = x + n;
  for (int64_t line = begin; line < end; ++line) {
    int64_t so = 0, dso = 0, rem = line;
    for (int k = g->nother - 1; k >= 0; --k) {
      int64_t i = rem % g->other_sizes[k];
      rem /= g->other_sizes[k];
      so += i * g->src_other[k];
      dso += i * g->dst_other[k];
    }
    const FFT_R* src = (const FFT_R*)g->src + so * (g->kind == FFT_R2C ? 1 : 2);
    const int64_t ss = g->src_stride * (g->kind == FFT_R2C ? 1 : 2);
    if (g->kind == FFT_R2C) {
      for (int64_t j = 0; j < n; ++j) {
        x[j].re = j < g->src_n ? src[j * ss] : 0;
        x[j].im = 0;
      }
    } else if (g->kind == FFT_C2C) {
      for (int64_t j = 0; j < n; ++j) {
        x[j].re = j < g->src_n ? src[j * ss] : 0;
        x[j].im = j < g->src_n ? src[j * ss + 1] : 0;
      }
    } else { /* C2R: the full spectrum from its first half, X[n-k] = conj(X[k]) */
      int64_t hm = g->src_n < n / 2 + 1 ? g->src_n : n / 2 + 1;
      for (int64_t k = 0; k < n; ++k) {
        if (k < hm) {
          x[k].re = src[k * ss];
          x[k].im = src[k * ss + 1];
        } else if (n - k < hm) {
          x[k].re = src[(n - k) * ss];
          x[k].im = -src[(n - k) * ss + 1];
        } else {
          x[k].re = x[k].im = 0;
        }
      }
    }
    if (g->inverse)
      for (int64_t j = 0; j < n; ++j) x[j].im = -x[j].im;
    if (ps->plan) FN(fft_exec)(ps->plan, x, work);
    else FN(dft_naive)(x, n, work);
    const FFT_R sc = (FFT_R)g->scale, isc = g->inverse ? -sc : sc;
    FFT_R* dst = (FFT_R*)g->dst;
    if (g->kind == FFT_C2R) {
      dst += dso;
      for (int64_t j = 0; j < g->dst_n; ++j) dst[j * g->dst_stride] = x[j].re * sc;
    } else {
      dst += 2 * dso;
      const int64_t ds = 2 * g->dst_stride;
      for (int64_t j = 0; j < g->dst_n; ++j) {
        dst[j * ds] = x[j].re * sc;
        dst[j * ds + 1] = x[j].im * isc;
      }
    }
  }
}

static tpurt_status_t FN(fft_pass)(tpurt_kernel_ctx_t* ctx, const fft_pass_geom_t* g, int64_t n, bool reference) {
  if (g->lines == 0 || n == 0) return TPURT_OK;
  FN(pass_t) ps = {.g = *g, .n = n};
  FN(plan_t) plan;
  if (!reference) {
    char* mem = tpurt_kernel_scratch(ctx, FN(fft_plan_bytes)(n));
    if (!mem) return TPURT_STATUS(RESOURCE_EXHAUSTED, "fft: no scratch memory for a plan of length %lld", (long long)n);
    FN(fft_plan_init)(&plan, n, mem);
    ps.plan = &plan;
  }
  ps.buf_elems = n + (reference ? n : FN(fft_work_elems)(&plan));
  int nt = tpurt_kernel_num_threads(ctx);
  if (nt < 1) nt = 1;
  ps.bufs = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)ps.buf_elems * sizeof(CPX));
  if (!ps.bufs) return TPURT_STATUS(RESOURCE_EXHAUSTED, "fft: no scratch memory for %d line buffers", nt);
  /* about 16K butterflies' worth of work per chunk */
  int64_t grain = 16384 / (n > 0 ? n : 1);
  if (reference) grain = g->lines; /* one thread, in order */
  tpurt_parallel_for(ctx, g->lines, grain < 1 ? 1 : grain, FN(fft_pass_lines), &ps);
  return TPURT_OK;
}

#undef CPX
#undef FN
#undef FFT_CAT
#undef FFT_CAT2
