/* Special-function family: scalar values against known answers (mpmath to 17
 * digits), edge cases (poles, domain errors, infinities), and the optimized
 * kernel against the reference kernel through the op table (broadcast, strides,
 * float32/bfloat16/int64 inputs, two outputs for frexp). */
#include <math.h>
#include <string.h>

#include "ops/special/special_math.h"
#include "test_util.h"

static int close_rel(double got, double want, double rtol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= rtol * fabs(want) + 1e-300;
}

static void test_values(void) {
  /* reference values: mpmath at 30 digits */
  CHECK(close_rel(tpurt_sp_i0(1.0), 1.2660658777520082, 1e-14));
  CHECK(close_rel(tpurt_sp_i0(-25.0), 5774560606.4663103, 1e-13));
  CHECK(close_rel(tpurt_sp_i0e(100.0), 0.039944379299096683, 1e-12));
  CHECK(close_rel(tpurt_sp_i1(-2.5), -2.5167162452886984, 1e-14));
  CHECK(close_rel(tpurt_sp_i1e(50.0), 0.055993123892895400, 1e-12));
  CHECK(close_rel(tpurt_sp_k0(0.1), 2.4270690247020166, 1e-13));
  CHECK(close_rel(tpurt_sp_k1(3.0), 0.040156431128194184, 1e-13));
  CHECK(close_rel(tpurt_sp_k0e(200.0), 0.088567458339296658, 1e-12));
  CHECK(fabs(tpurt_sp_j0(2.404825557695773)) < 1e-14); /* first zero */
  CHECK(close_rel(tpurt_sp_j0(30.0), -0.08636798358104, 1e-11));
  CHECK(close_rel(tpurt_sp_j1(1.0), 0.44005058574493355, 1e-14));
  CHECK(close_rel(tpurt_sp_y0(3.78), 0.07279393618864137, 1e-12));
  CHECK(close_rel(tpurt_sp_y1(4.02), 0.3955287128525685, 1e-12));
  CHECK(close_rel(tpurt_sp_airy_ai(-4.08), -0.006384014356610251, 1e-10));
  CHECK(close_rel(tpurt_sp_airy_ai(1.0), 0.13529241631288141, 1e-13));
  CHECK(close_rel(tpurt_sp_airy_ai(10.0), 1.1047532552898687e-10, 1e-9));
  CHECK(close_rel(tpurt_sp_erfcx(30.0), 0.018795888861416751, 1e-13));
  CHECK(close_rel(tpurt_sp_erfcx(-1.0), 5.00898008076228346, 1e-13));
  CHECK(close_rel(tpurt_sp_ndtri(0.975), 1.959963984540054, 1e-13));
  CHECK(close_rel(tpurt_sp_ndtri(1e-20), -9.2623400897981532, 1e-12));
  /* near 1/2 (the residual without cancelling p) and in both tails, to 1e-15 (mpmath) */
  CHECK(close_rel(tpurt_sp_ndtri(0.4999999), -2.5066282747031065135e-7, 1e-15));
  CHECK(close_rel(tpurt_sp_ndtri(0.5000001), 2.5066282733116483012e-7, 1e-15));
  CHECK(close_rel(tpurt_sp_ndtri(1e-300), -37.047096299361199237, 1e-15));
  CHECK(close_rel(tpurt_sp_ndtri(0.99999999), 5.6120012433055049826, 1e-15));
  CHECK(close_rel(tpurt_sp_zeta(2.0, 1.0), 1.6449340668482264, 1e-14));
  CHECK(close_rel(tpurt_sp_digamma(1.0), -0.5772156649015329, 1e-14));
  CHECK(close_rel(tpurt_sp_polygamma(1.0, 0.5), 4.934802200544679, 1e-13));
  CHECK(close_rel(tpurt_sp_polygamma(3.0, 2.5), 0.22390584881725205, 1e-12));
  CHECK(close_rel(tpurt_sp_igamma(2.0, 3.0), 0.8008517265285442, 1e-13));
  CHECK(close_rel(tpurt_sp_igammac(10.0, 2.5), 0.99972264790537916, 1e-12));
  CHECK(close_rel(tpurt_sp_cheb_t(0.3, 3.0), 4 * 0.027 - 0.9, 1e-14));
  CHECK(close_rel(tpurt_sp_hermite_h(0.5, 3.0), 8 * 0.125 - 12 * 0.5, 1e-14));
  CHECK(close_rel(tpurt_sp_legendre_p(0.5, 2.0), 0.5 * (3 * 0.25 - 1), 1e-14));
  CHECK(close_rel(tpurt_sp_laguerre_l(2.0, 2.0), 0.5 * (4 - 8 + 2), 1e-14));
  /* edges */
  CHECK(isinf(tpurt_sp_k0(0.0)) && isnan(tpurt_sp_k1(-1.0)));
  CHECK(tpurt_sp_y0(0.0) == -INFINITY && isnan(tpurt_sp_y1(-2.0)));
  CHECK(tpurt_sp_ndtri(0.0) == -INFINITY && tpurt_sp_ndtri(1.0) == INFINITY && isnan(tpurt_sp_ndtri(1.5)));
  CHECK(tpurt_sp_zeta(1.0, 2.0) == INFINITY && isnan(tpurt_sp_zeta(0.5, 2.0)));
  CHECK(isnan(tpurt_sp_igamma(-1.0, 2.0)) && tpurt_sp_igamma(0.0, 2.0) == 1.0);
  CHECK(tpurt_sp_cheb_t(0.3, -0.5) == 1.0 && tpurt_sp_cheb_t(0.3, -1.0) == 0.0);
  CHECK(isnan(tpurt_sp_i0(INFINITY)) && tpurt_sp_i0e(INFINITY) == 0.0); /* CPU's NaN at inf */
}

/* ---- kernels through the op table ---- */
static tpurt_tensor_t tensor1d(tpurt_dtype_t dt, void* data, int64_t n, int64_t stride) {
  tpurt_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.dtype = dt;
  t.ndim = 1;
  t.sizes[0] = n;
  t.strides[0] = stride;
  return t;
}

static void run_both(const char* name, tpurt_arg_t* args, int nargs, tpurt_tensor_t* outs0,
                     tpurt_tensor_t* outs1, int nout) {
  const tpurt_op_def_t* def = tpurt_op_lookup(name);
  CHECK(def != NULL);
  if (!def) return;
  tpurt_op_call_t call = {.name = name, .overload = "out", .num_args = nargs, .args = args,
                          .num_outputs = nout, .outputs = outs0};
  CHECK_OK(tpurt_kernel_run(def->fn, &call));
  call.outputs = outs1;
  CHECK_OK(tpurt_kernel_run(def->reference, &call));
}

static void test_kernels(void) {
  const char* unary[] = {"i0", "special_i0e", "special_i1", "special_i1e", "special_modified_bessel_k0",
                         "special_scaled_modified_bessel_k1", "special_bessel_j0", "special_bessel_y1",
                         "special_airy_ai", "special_spherical_bessel_j0", "special_erfcx",
                         "special_ndtri"};
  enum { N = 257 };
  double x[2 * N];
  for (int i = 0; i < 2 * N; ++i) x[i] = 20.0 * test_rand_unit() - 6.0;
  for (size_t u = 0; u < sizeof(unary) / sizeof(unary[0]); ++u) {
    float o0[N], o1[N];
    tpurt_tensor_t in = tensor1d(TPURT_DTYPE_FLOAT64, x, N, 2); /* strided input */
    tpurt_tensor_t out0 = tensor1d(TPURT_DTYPE_FLOAT32, o0, N, 1), out1 = tensor1d(TPURT_DTYPE_FLOAT32, o1, N, 1);
    tpurt_arg_t a = {.kind = TPURT_ARG_TENSOR, .v.tensor = &in};
    run_both(unary[u], &a, 1, &out0, &out1, 1);
    int same = 1;
    for (int i = 0; i < N; ++i) {
      double want = 0;
      if (!strcmp(unary[u], "special_bessel_j0")) want = tpurt_sp_j0(x[2 * i]);
      else if (!strcmp(unary[u], "i0")) want = tpurt_sp_i0(x[2 * i]);
      else want = o1[i];
      if (!(memcmp(&o0[i], &o1[i], 4) == 0 && close_rel(o0[i], (float)want, 0))) same = 0;
    }
    if (!same) fprintf(stderr, "special kernel %s differs from its reference\n", unary[u]);
    CHECK(same);
  }
  /* binary with a broadcast Scalar: polygamma(int n, int64 tensor) -> float32 */
  int64_t xi[6] = {1, 2, 3, 4, 5, 6};
  float p0[6], p1[6];
  tpurt_tensor_t tin = tensor1d(TPURT_DTYPE_INT64, xi, 6, 1);
  tpurt_tensor_t po0 = tensor1d(TPURT_DTYPE_FLOAT32, p0, 6, 1), po1 = tensor1d(TPURT_DTYPE_FLOAT32, p1, 6, 1);
  tpurt_arg_t pargs[2] = {{.kind = TPURT_ARG_INT, .v.i = 2}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &tin}};
  run_both("polygamma", pargs, 2, &po0, &po1, 1);
  CHECK(memcmp(p0, p1, sizeof(p0)) == 0);
  CHECK(close_rel(p0[0], (float)-2.4041138063191885, 1e-6)); /* psi''(1) = -2 zeta(3) */
  /* bfloat16 in and out: igamma(a, x) */
  uint16_t a16[4], x16[4], r0[4], r1[4];
  for (int i = 0; i < 4; ++i) a16[i] = tpurt_f32_to_bf16(1.0f + i), x16[i] = tpurt_f32_to_bf16(0.5f * (i + 1));
  tpurt_tensor_t ta = tensor1d(TPURT_DTYPE_BFLOAT16, a16, 4, 1), tx = tensor1d(TPURT_DTYPE_BFLOAT16, x16, 4, 1);
  tpurt_tensor_t ro0 = tensor1d(TPURT_DTYPE_BFLOAT16, r0, 4, 1), ro1 = tensor1d(TPURT_DTYPE_BFLOAT16, r1, 4, 1);
  tpurt_arg_t iargs[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &tx}};
  run_both("igamma", iargs, 2, &ro0, &ro1, 1);
  CHECK(memcmp(r0, r1, sizeof(r0)) == 0);
  CHECK(close_rel(tpurt_bf16_to_f32(r0[0]), 1.0 - exp(-0.5), 1e-2));
  /* frexp: two outputs */
  float fx[3] = {8.0f, -0.375f, 0.0f}, m0[3], m1[3];
  int32_t e0[3], e1[3];
  tpurt_tensor_t fin = tensor1d(TPURT_DTYPE_FLOAT32, fx, 3, 1);
  tpurt_tensor_t fo0[2] = {tensor1d(TPURT_DTYPE_FLOAT32, m0, 3, 1), tensor1d(TPURT_DTYPE_INT32, e0, 3, 1)};
  tpurt_tensor_t fo1[2] = {tensor1d(TPURT_DTYPE_FLOAT32, m1, 3, 1), tensor1d(TPURT_DTYPE_INT32, e1, 3, 1)};
  tpurt_arg_t fa = {.kind = TPURT_ARG_TENSOR, .v.tensor = &fin};
  run_both("frexp", &fa, 1, fo0, fo1, 2);
  CHECK(m0[0] == 0.5f && e0[0] == 4 && m0[1] == -0.75f && e0[1] == -1 && m0[2] == 0.0f && e0[2] == 0);
  CHECK(memcmp(m0, m1, sizeof(m0)) == 0 && memcmp(e0, e1, sizeof(e0)) == 0);
  /* an integer output dtype is refused, not silently wrong */
  int64_t bad[6];
  tpurt_tensor_t tbad = tensor1d(TPURT_DTYPE_INT64, bad, 6, 1);
  const tpurt_op_def_t* def = tpurt_op_lookup("special_i0e");
  tpurt_arg_t ua = {.kind = TPURT_ARG_TENSOR, .v.tensor = &tin};
  tpurt_op_call_t call = {.name = "special_i0e", .overload = "out", .num_args = 1, .args = &ua,
                          .num_outputs = 1, .outputs = &tbad};
  CHECK_STATUS(tpurt_kernel_run(def->fn, &call), UNIMPLEMENTED);
}

/* e^-x I0(x) by its power series in long double (positive terms, no cancellation) */
static long double i0e_series(long double x) {
  long double q = x * x / 4, term = 1, sum = 1;
  for (int k = 1; k < 5000 && term > sum * 1e-22L; ++k) {
    term *= q / ((long double)k * k);
    sum += term;
  }
  return sum * expl(-x);
}

typedef void (*vec_fn_t)(const double*, double*, int64_t);
typedef double (*scalar_fn_t)(double);
/* the vector loops (I_nu and e^-|x| I_nu) give the scalar functions' bits at every length (the vector
 * tails), over random values of both signs and the specials: rounds in (-6, 6) (every lane in the
 * small range), (-15, 15) (mixed vectors) and (-750, 750) (most vectors past 8) */
static void check_vec_bits(const char* name, vec_fn_t vec[2], scalar_fn_t one[2], const double* sp, int nsp) {
  enum { N = 203 };
  double x[N], y[N];
  int bad = 0;
  for (int r = 0; r < 200; ++r) {
    for (int i = 0; i < N; ++i) x[i] = i % 17 == 5 ? sp[(r + i) % nsp] : (test_rand_unit() - 0.5) * (r % 5 == 1 ? 12.0 : r % 3 ? 30.0 : 1500.0);
    for (int scaled = 0; scaled < 2; ++scaled) {
      const int n = N - r % 9;
      vec[scaled](x, y, n);
      for (int i = 0; i < n; ++i) {
        const double want = one[scaled](x[i]);
        if (memcmp(&want, &y[i], 8) != 0 && !(isnan(want) && isnan(y[i])))
          if (bad++ < 3) printf("  %s%s(%a): %a, scalar %a\n", name, scaled ? "e" : "", x[i], y[i], want);
      }
    }
  }
  CHECK(bad == 0);
}

/* e^-x I1(x) likewise */
static long double i1e_series(long double x) {
  long double q = x * x / 4, term = x / 2, sum = term;
  for (int k = 1; k < 5000 && term > sum * 1e-22L; ++k) {
    term *= q / ((long double)k * (k + 1));
    sum += term;
  }
  return sum * expl(-x);
}

/* i1 / i1e as test_i0 checks i0 / i0e: odd, against the long-double series over [-700, 700],
 * overflow where the value does, the vector loop's bits */
static void test_i1(void) {
  double worst = 0, worst_e = 0;
  for (int i = 1; i <= 70000; ++i) {
    const double x = i * 0.01, s = i % 2 ? -1.0 : 1.0;
    const long double e = i1e_series(x);
    const double ge = tpurt_sp_i1e(s * x), g = tpurt_sp_i1(s * x);
    const double re = fabs((double)((s * ge - e) / e)), r = fabs((double)((s * g - e * expl(x)) / (e * expl(x))));
    if (re > worst_e) worst_e = re;
    if (x < 709 && r > worst) worst = r;
  }
  for (int i = 1; i < 200; ++i) { /* tiny: I1(x) = x/2 (1 + x^2/8 + ...) */
    const double x = ldexp(1.0, -i * 5);
    const double re = fabs(tpurt_sp_i1e(x) / (double)i1e_series(x) - 1);
    if (re > worst_e) worst_e = re;
  }
  printf("i1e: max rel %.3g, i1: max rel %.3g over [-700, 700]\n", worst_e, worst);
  /* 2.2e-15 near x = 7.8: e^-x I1(x) / x falls from 0.5 to 0.016 over [0, 8], so its expansion's
   * terms (the one Cephes, and so PyTorch CPU, sums there too) are 15 times the value at the end */
  CHECK(worst_e < 3e-15 && worst < 3e-15);
  CHECK(tpurt_sp_i1(713.9) < INFINITY && tpurt_sp_i1(714.0) == INFINITY && tpurt_sp_i1(-714.0) == -INFINITY);
  CHECK(isnan(tpurt_sp_i1(INFINITY)) && isnan(tpurt_sp_i1(-INFINITY)) && isnan(tpurt_sp_i1e(NAN)));
  CHECK(tpurt_sp_i1e(INFINITY) == 0.0 && tpurt_sp_i1e(-INFINITY) == 0.0 && tpurt_sp_i1(0.0) == 0.0);
  const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 8.0, -8.0, 7.999999999999999, 8.000000000000002,
                       713.9, 714.0, -714.0, 1e300, -1e-300};
  check_vec_bits("i1", (vec_fn_t[2]){tpurt_sp_i1_vec, tpurt_sp_i1e_vec}, (scalar_fn_t[2]){tpurt_sp_i1, tpurt_sp_i1e}, sp,
                 (int)(sizeof sp / sizeof sp[0]));
}

/* i0 / i0e (special_i0.c): Chebyshev expansions against the long-double series over [0, 700]
 * (relative error under 2e-15), both signs, overflow where the
 * value does; the vector loop gives the scalar functions' bits at every length and for specials */
static void test_i0(void) {
  double worst = 0, worst_e = 0;
  for (int i = 0; i <= 70000; ++i) {
    const double x = i * 0.01, s = i % 2 ? -1.0 : 1.0;
    const long double e = i0e_series(x);
    const double ge = tpurt_sp_i0e(s * x), g = tpurt_sp_i0(s * x);
    const double re = fabs((double)((ge - e) / e)), r = fabs((double)((g - e * expl(x)) / (e * expl(x))));
    if (re > worst_e) worst_e = re;
    if (x < 709 && r > worst) worst = r;
  }
  printf("i0e: max rel %.3g, i0: max rel %.3g over [-700, 700]\n", worst_e, worst);
  CHECK(worst_e < 2e-15 && worst < 2e-15);
  CHECK(tpurt_sp_i0(713.9) < INFINITY && tpurt_sp_i0(714.0) == INFINITY && isnan(tpurt_sp_i0(INFINITY)));
  CHECK(tpurt_sp_i0e(-INFINITY) == 0.0 && isnan(tpurt_sp_i0e(NAN)) && tpurt_sp_i0(0.0) == 1.0);
  const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 8.0, -8.0, 7.999999999999999, 8.000000000000002,
                       713.9, 714.0, 1e300, 1e-300, 720.0};
  check_vec_bits("i0", (vec_fn_t[2]){tpurt_sp_i0_vec, tpurt_sp_i0e_vec}, (scalar_fn_t[2]){tpurt_sp_i0, tpurt_sp_i0e}, sp,
                 (int)(sizeof sp / sizeof sp[0]));
}

/* Bessel J0, J1, Y0, Y1 (special_jy.c): against glibc's j0/j1/y0/y1 over (0, 40] (both signs for J),
 * the error measured against the size of the power series' largest terms where it is summed
 * (|x| <= 12: about I0(x), the cancellation every summed series has; under 4 ulps of it) and
 * absolutely beyond (Hankel's expansion, whose smallest term at 12 is 4e-11); the vector loops
 * give the scalar functions' bits, across 12 and for the specials */
static void test_jy(void) {
  double worst_series = 0, worst_asym = 0;
  for (int i = 1; i <= 40000; ++i) {
    const double x = i * 0.001 + (i % 7) * 1e-7;
    const double got[4] = {tpurt_sp_j0(i % 2 ? -x : x), tpurt_sp_j1(x), tpurt_sp_y0(x), tpurt_sp_y1(x)};
    const double want[4] = {j0(x), j1(x), y0(x), y1(x)};
    for (int f = 0; f < 4; ++f) {
      const double err = fabs(got[f] - want[f]);
      if (x <= 12) {
        /* the terms' size: I0(x); Y's also carry ln(x/2) J and, for Y1, 2/(pi x) */
        const double size = tpurt_sp_i0(x) * (f >= 2 ? 1 + fabs(log(0.5 * x)) : 1) + (f == 3 ? 1 / x : 0);
        if (err / size > worst_series) worst_series = err / size;
      } else if (err > worst_asym) {
        worst_asym = err;
      }
    }
  }
  printf("bessel j0/j1/y0/y1: series max error %.3g of the terms' size, asymptotic max abs error %.3g\n",
         worst_series, worst_asym);
  CHECK(worst_series < 4 * 1.1e-16 && worst_asym < 1e-10);
  CHECK(tpurt_sp_j0(0.0) == 1.0 && tpurt_sp_j1(-0.0) == 0.0 && tpurt_sp_y0(0.0) == -INFINITY);
  CHECK(isnan(tpurt_sp_y1(-1.0)) && isnan(tpurt_sp_j0(INFINITY)) && isnan(tpurt_sp_y0(NAN)));
  CHECK(tpurt_sp_j1(-3.0) == -tpurt_sp_j1(3.0) && close_rel(tpurt_sp_y0(1e-300), y0(1e-300), 1e-14));
  const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 12.0, -12.0, 11.999999999999998, 12.000000000000002,
                       0x1p-1000, 0x1.0000000000001p-1000, 1e-300, -1e-300, 5e-324, 1e300};
  check_vec_bits("j", (vec_fn_t[2]){tpurt_sp_j0_vec, tpurt_sp_j1_vec}, (scalar_fn_t[2]){tpurt_sp_j0, tpurt_sp_j1}, sp,
                 (int)(sizeof sp / sizeof sp[0]));
  check_vec_bits("y", (vec_fn_t[2]){tpurt_sp_y0_vec, tpurt_sp_y1_vec}, (scalar_fn_t[2]){tpurt_sp_y0, tpurt_sp_y1}, sp,
                 (int)(sizeof sp / sizeof sp[0]));
}

/* e^x K_nu(x) in long double: the same integral by the trapezoid rule at half special_k.c's step,
 * with coshl and expl at every node */
static long double ke_ref(int nu, long double x) {
  long double h = x > 1 ? 0.2L / sqrtl(x) : 0.125L, sum = 0.5L;
  if (h > 0.125L) h = 0.125L;
  for (int i = 1; i < 10000000; ++i) {
    const long double t = i * h, e = x * (coshl(t) - 1);
    if (e - nu * t > 50) break;
    sum += expl(-e) * (nu ? coshl(t) : 1);
  }
  return h * sum;
}

/* K0, K1 and their scaled forms (special_k.c): against the long-double integral over (0, 700] and
 * at tiny x, unscaled K where it underflows, the specials, and the vector loops' bits */
static void test_k(void) {
  double worst = 0;
  for (int i = 1; i <= 7000; ++i) {
    const double x = i < 1000 ? i * 0.001 : (i - 999) * 0.1;
    for (int nu = 0; nu < 2; ++nu) {
      const long double want = ke_ref(nu, x);
      const double got = nu ? tpurt_sp_k1e(x) : tpurt_sp_k0e(x), r = fabs((double)((got - want) / want));
      if (r > worst) worst = r;
      const double gu = nu ? tpurt_sp_k1(x) : tpurt_sp_k0(x);
      CHECK(x > 700 || fabs((double)((gu - want * expl(-x)) / (want * expl(-x)))) < 1e-14);
    }
  }
  for (int i = 1; i < 60; ++i) { /* tiny x: the small-argument expansions, to O(x^4 ln x) relative */
    const long double x = ldexpl(1.0L, -i * 16), l = logl(x / 2) + 0.57721566490153286061L;
    const long double k0 = -l * (1 + x * x / 4) + x * x / 4, k1 = 1 / x + x / 2 * (l - 0.5L);
    CHECK(close_rel(tpurt_sp_k0((double)x), (double)k0, 2e-15) && close_rel(tpurt_sp_k1((double)x), (double)k1, 2e-15));
  }
  printf("k0e/k1e: max rel %.3g over (0, 700]\n", worst);
  CHECK(worst < 2e-15);
  CHECK(tpurt_sp_k0(800.0) == 0.0 && tpurt_sp_k1(740.0) > 0 && tpurt_sp_k1(740.0) < 1e-320);
  CHECK(isinf(tpurt_sp_k1(0.0)) && isnan(tpurt_sp_k0e(-1.0)) && tpurt_sp_k0e(INFINITY) == 0.0 && isnan(tpurt_sp_k1(NAN)));
  const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, 1.0000000000000002, 2.56, 700.0, 700.0000000000001,
                       745.0, 1e-300, -1e-300, 5e-324, 1e300};
  check_vec_bits("k0", (vec_fn_t[2]){tpurt_sp_k0_vec, tpurt_sp_k0e_vec}, (scalar_fn_t[2]){tpurt_sp_k0, tpurt_sp_k0e}, sp,
                 (int)(sizeof sp / sizeof sp[0]));
  check_vec_bits("k1", (vec_fn_t[2]){tpurt_sp_k1_vec, tpurt_sp_k1e_vec}, (scalar_fn_t[2]){tpurt_sp_k1, tpurt_sp_k1e}, sp,
                 (int)(sizeof sp / sizeof sp[0]));
}

/* Airy Ai on [-8, 5] (its Maclaurin series, special_math.c) against the same series in long double,
 * the error measured against the size of its terms (c1 sum |f_k| + c2 sum |g_k|: their cancellation
 * near x = -8 any summed series has); and the known values of test_values at both asymptotic ranges */
static void test_airy(void) {
  double worst = 0, wx = 0;
  for (int i = 0; i <= 13000; ++i) {
    const long double x = -8.0L + i * 0.001L, x3 = x * x * x;
    long double tf = 1, tg = x, f = 1, g = x, af = 1, ag = fabsl(x);
    for (int k = 1; k < 200; ++k) {
      tf *= x3 / ((3.0L * k - 1) * (3.0L * k));
      tg *= x3 / ((3.0L * k) * (3.0L * k + 1));
      f += tf;
      g += tg;
      af += fabsl(tf);
      ag += fabsl(tg);
    }
    const long double c1 = 0.355028053887817239260L, c2 = 0.258819403792806798405L;
    const double err = fabs((double)(tpurt_sp_airy_ai((double)x) - (c1 * f - c2 * g)));
    const double size = (double)(c1 * af + c2 * ag); /* the terms' size */
    if (err / size > worst) worst = err / size, wx = (double)x;
  }
  printf("airy_ai: max error %.3g of the series' size on [-8, 5] (at %g)\n", worst, wx);
  CHECK(worst < 8 * 1.1e-16); /* c1 f - c2 g: two products rounded, then their difference */
  CHECK(close_rel(tpurt_sp_airy_ai(-20.0), -0.17640612707798469, 1e-12));
  CHECK(close_rel(tpurt_sp_airy_ai(8.0), 4.6922076160992316e-08, 1e-12));
}

int main(void) {
  test_values();
  test_kernels();
  test_i0();
  test_i1();
  test_jy();
  test_k();
  test_airy();
  return test_finish("test_special");
}
