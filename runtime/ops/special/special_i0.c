/* I0 and e^-|x| I0 (i0, special_i0e, special_modified_bessel_i0) by Chebyshev expansions of
 * e^-x I0(x) on [0, 8] (t = x/4 - 1) and of sqrt(x) e^-x I0(x) on [8, inf) (t = 16/x - 1), 30 and
 * 27 terms to 1e-17, fitted here (mpmath, 64 Chebyshev nodes, 50 digits); I1 and e^-|x| I1
 * (special_i1, special_i1e, special_modified_bessel_i1) the same way from e^-x I1(x) / x on [0, 8]
 * and sqrt(x) e^-x I1(x) on [8, inf) (29 terms each, the last under 4e-19), I1 odd. One Clenshaw recurrence
 * serves both ranges, each lane taking its range's coefficient (B's last three are 0), so the
 * vector form (double lanes, ew_simd.h) computes the scalar's bits. e^x is the runtime's double
 * exponential (tpurt_vm_expd, 5e-18) squared from e^(x/2), so I0 overflows only where its value does
 * (713.98); i0 and i0e within 1e-15 of the power series (test_special).
 * This replaced a power series whose data-dependent length and per-term division made i0 on
 * float32 0.7x PyTorch CPU's. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "ops/elementwise/ew_simd.h"
#include "ops/elementwise/ew_vmath.h"
#include "ops/special/special_math.h"

enum { I0_TERMS = 30 };
/* A: e^-x I0(x), x = 4 (t + 1); B: sqrt(x) e^-x I0(x), x = 16 / (t + 1); f = c0/2 + sum c_k T_k(t) */
static const double kA[I0_TERMS] = {
    0.67679527440947608500,    -0.30468267234319839868,   0.17162090152220877535,    -0.094901097048047644421,
    0.049305284239670708488,   -0.023737414805899468816,  0.010546460394594998318,   -0.0043243099950505759443,
    0.0016394756169413357984,  -0.00057637557453858236588, 0.00018850288509584165573, -0.000057541950100821037040,
    0.000016448448070728897089, -4.4167383584587505636e-6, 1.1173875391201037182e-6,  -2.6707938539406117339e-7,
    6.0469950225419189493e-8,  -1.3000250099862480421e-8, 2.6598237246823866503e-9,  -5.1897956016352629067e-10,
    9.6758090353732369122e-11, -1.7268262914415557072e-11, 2.9550526631296398346e-12, -4.8564467831119294609e-13,
    7.6761854986049356169e-14, -1.1685332877993451681e-14, 1.7153912855551330306e-15, -2.4312798465479546936e-16,
    3.3307945188222380978e-17, -4.4153416464793393795e-18};
static const double kB[I0_TERMS] = {
    0.80449041101410883161,    0.0033691164782556940899,  0.000068897583469168239843, 2.8913705208347564830e-6,
    2.0489185894690637418e-7,  2.2666689904981780646e-8,  3.3962320257083863452e-9,  4.9406023882249695891e-10,
    1.1889147107846438342e-11, -3.1499165279632413645e-11, -1.3215811840447713119e-11, -1.7941785315068061178e-12,
    7.1801244513836662337e-13, 3.8527783827421427011e-13, 1.5400862175214098269e-14, -4.1505693472872220866e-14,
    -9.5548466988283076487e-15, 3.8116806693526224207e-15, 1.7725601330565263836e-15, -3.4254856196772191346e-16,
    -2.8276239805165834849e-16, 3.4612228676974610931e-17, 4.4656214202967599990e-17, -4.8305044859441820713e-18,
    -7.2331804878747539546e-18, 9.9214754121736985989e-19, 1.1936508908459820855e-18, 0.0, 0.0, 0.0};

/* A: e^-x I1(x) / x, x = 4 (t + 1); B: sqrt(x) e^-x I1(x), x = 16 / (t + 1) */
static const double kA1[I0_TERMS] = {
    0.25258718644363365482,    -0.17641651835783405515,   0.10264365868984709538,    -0.052945981208094991427,
    0.024726449030626516828,   -0.010564084894626198156,  0.0041564229443128881567,  -0.001513572450631253149,
    0.0005122859561685757729,  -0.00016176081582589674559, 0.000047815651075500542264, -0.000013273163656039435828,
    3.4702513081376784767e-6,  -8.5687202646954547407e-7, 2.0032947535521352623e-7,  -4.4450591287963280807e-8,
    9.3815373864957717839e-9,  -1.8872497517228292879e-9, 3.625590281552117037e-10,  -6.6634897235020277422e-11,
    1.1736186298890901631e-11, -1.9839743977649437152e-12, 3.2237933659455747098e-13, -5.0421855047279116871e-14,
    7.6006842947354069341e-15, -1.105596947735386308e-15, 1.5536319577362004689e-16, -2.1114212143581660782e-17,
    2.7779141127610463705e-18, -3.5415817725421362052e-19};
static const double kB1[I0_TERMS] = {
    0.77857623501828012047,    -0.0097610974913614684078, -0.00011058893876262371629, -3.8825648088776903935e-6,
    -2.5122362378702089253e-7, -2.6314688468895195068e-8, -3.835380385964237022e-9,  -5.5897434621965838069e-10,
    -1.8974958123505412345e-11, 3.2526035830154882386e-11, 1.4125807436613781332e-11, 2.0356285441470895072e-12,
    -7.1985517762459085121e-13, -4.0835511110921973182e-13, -2.101541842772664313e-14, 4.2724400167119513543e-14,
    1.0420276984128802764e-14, -3.8144030724370078048e-15, -1.8803547755107824485e-15, 3.3082023109209282827e-16,
    2.9626289976459501391e-16, -3.2095259219934239588e-17, -4.6503053684893583256e-17, 4.4143483230717079499e-18,
    7.5172963108421048054e-18, -9.3141788673268833757e-19, -1.2421932751948909561e-18, 2.414276719454848469e-19,
    2.026944384053285179e-19, 0.0};

/* e^-a I_nu(a) for finite a >= 0 from the tables (kA, kB: nu = 0; kA1, kB1: nu = 1, A times a) */
static double ie_abs(double a, const double* ka, const double* kb, bool odd) {
  const bool small = a <= 8.0;
  const double t = small ? fma(a, 0.25, -1.0) : 16.0 / a - 1.0, t2 = t + t;
  double b0 = 0.0, b1 = 0.0, b2 = 0.0;
  for (int k = I0_TERMS - 1; k >= 0; --k) {
    b2 = b1;
    b1 = b0;
    b0 = fma(t2, b1, (small ? ka[k] : kb[k]) - b2);
  }
  const double f = 0.5 * (b0 - b2);
  return small ? (odd ? f * a : f) : f / sqrt(a);
}
static double i0e_abs(double a) { return ie_abs(a, kA, kB, false); }
static double i1e_abs(double a) { return ie_abs(a, kA1, kB1, true); }

double tpurt_sp_i0(double x) {
  if (isnan(x) || isinf(x)) return NAN; /* PyTorch CPU answers NaN at +-inf */
  const double a = fabs(x), h = tpurt_vm_expd(0.5 * (a < 720.0 ? a : 720.0));
  return h * i0e_abs(a) * h;
}
double tpurt_sp_i0e(double x) {
  if (isnan(x)) return x;
  return isinf(x) ? 0.0 : i0e_abs(fabs(x));
}
double tpurt_sp_i1(double x) {
  if (isnan(x) || isinf(x)) return NAN; /* as PyTorch CPU */
  const double a = fabs(x), h = tpurt_vm_expd(0.5 * (a < 720.0 ? a : 720.0)), v = h * i1e_abs(a) * h;
  return x < 0 ? -v : v;
}
double tpurt_sp_i1e(double x) {
  if (isnan(x)) return x;
  const double v = isinf(x) ? 0.0 : i1e_abs(fabs(x));
  return x < 0 ? -v : v;
}

#if EWV_W
/* e^-a I_nu(a) on double lanes (ie_abs). Where all lanes are in one range (most vectors of small
 * activations; about 40% of normal values times 5), only that range's reduction, coefficients and
 * final step are computed; mixed vectors select each per lane, as the scalar's ternaries do. */
#define IE_CLENSHAW(COEF)                                                 \
  for (int k = I0_TERMS - 1; k >= 0; --k) {                               \
    b2 = b1;                                                              \
    b1 = b0;                                                              \
    b0 = ewd_fma(t2, b1, ewd_sub(COEF, b2));                              \
  }
static inline ewd_t ie_abs_v(ewd_t a, const double* ka, const double* kb, bool odd) {
  const ewdm_t big = ewd_lt(ewd_set1(8.0), a);
  const unsigned bits = ewdm_bits(big);
  ewd_t b0 = ewd_set1(0.0), b1 = b0, b2 = b0;
  if (bits == 0) {
    const ewd_t t = ewd_fma(a, ewd_set1(0.25), ewd_set1(-1.0)), t2 = ewd_add(t, t);
    IE_CLENSHAW(ewd_set1(ka[k]))
    const ewd_t f = ewd_mul(ewd_set1(0.5), ewd_sub(b0, b2));
    return odd ? ewd_mul(f, a) : f;
  }
  if (bits == (1u << EWD_W) - 1) {
    const ewd_t t = ewd_sub(ewd_div(ewd_set1(16.0), a), ewd_set1(1.0)), t2 = ewd_add(t, t);
    IE_CLENSHAW(ewd_set1(kb[k]))
    return ewd_div(ewd_mul(ewd_set1(0.5), ewd_sub(b0, b2)), ewd_sqrt(a));
  }
  const ewd_t t = ewd_sel(big, ewd_sub(ewd_div(ewd_set1(16.0), a), ewd_set1(1.0)),
                          ewd_fma(a, ewd_set1(0.25), ewd_set1(-1.0)));
  const ewd_t t2 = ewd_add(t, t);
  IE_CLENSHAW(ewd_sel(big, ewd_set1(kb[k]), ewd_set1(ka[k])))
  const ewd_t f = ewd_mul(ewd_set1(0.5), ewd_sub(b0, b2));
  return ewd_sel(big, ewd_div(f, ewd_sqrt(a)), odd ? ewd_mul(f, a) : f);
}
#undef IE_CLENSHAW
#endif

/* y[i] = I_nu(x[i]) (scaled: e^-|x| I_nu) for contiguous doubles, nu = 0 or 1 (odd: I1's sign);
 * the scalar functions' bits */
static void i_run(const double* x, double* y, int64_t n, bool scaled, bool one) {
  int64_t i = 0;
#if EWV_W
  const ewd_t inf = ewd_set1(INFINITY), zero = ewd_set1(0.0);
  for (; i + EWD_W <= n; i += EWD_W) {
    const ewd_t v = ewd_load(x + i), a = ewd_abs(v);
    const ewdm_t finite = ewd_lt(a, inf); /* NaN too: false */
    const ewd_t af = ewd_sel(finite, a, ewd_set1(1.0));
    const ewd_t e = one ? ie_abs_v(af, kA1, kB1, true) : ie_abs_v(af, kA, kB, false);
    ewd_t r;
    if (scaled) {
      r = ewd_sel(finite, e, ewd_sel(ewd_lt(zero, a), zero, v)); /* inf: 0; NaN: itself */
    } else {
      const ewd_t h = ewd_exp(ewd_mul(ewd_set1(0.5), ewd_min_nan_c(af, ewd_set1(720.0))));
      r = ewd_sel(finite, ewd_mul(ewd_mul(h, e), h), ewd_set1(NAN));
    }
    if (one) r = ewd_sel(ewd_lt(v, zero), ewd_xor(r, ewd_set1(-0.0)), r); /* x < 0: -r (NaN stays) */
    ewd_store(y + i, r);
  }
#endif
  for (; i < n; ++i)
    y[i] = one ? (scaled ? tpurt_sp_i1e(x[i]) : tpurt_sp_i1(x[i])) : (scaled ? tpurt_sp_i0e(x[i]) : tpurt_sp_i0(x[i]));
}
void tpurt_sp_i0_vec(const double* x, double* y, int64_t n) { i_run(x, y, n, false, false); }
void tpurt_sp_i0e_vec(const double* x, double* y, int64_t n) { i_run(x, y, n, true, false); }
void tpurt_sp_i1_vec(const double* x, double* y, int64_t n) { i_run(x, y, n, false, true); }
void tpurt_sp_i1e_vec(const double* x, double* y, int64_t n) { i_run(x, y, n, true, true); }
