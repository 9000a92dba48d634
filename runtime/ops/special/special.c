/* The special-function kernel family: i0/i0e/i1/i1e, Bessel J/Y/K, Airy Ai,
 * erfcx, ndtri, Hurwitz zeta, polygamma, igamma/igammac, the orthogonal
 * polynomials (special_*_polynomial_*) and frexp. Each is elementwise through
 * the elementwise engine (broadcasting, strides, casts), computing every
 * element in double (special_math.c) and rounding once on store. */
#include <math.h>
#include <string.h>

#include "ops/args.h"
#include "ops/elementwise/elementwise.h"
#include "ops/special/special_math.h"
#include "ops/special/special_single.h"

typedef double (*sp_fn1_t)(double);
typedef double (*sp_fn2_t)(double, double);

typedef struct sp_def_t {
  const char* name;
  sp_fn1_t f1; /* unary, or NULL */
  sp_fn2_t f2; /* binary (args 0 and 1), or NULL */
  sp_fn2_t f2_single; /* f2 for float32 outputs where CPU computes in float, or NULL */
  sp_fn1_t f1_single; /* likewise for f1 */
  void (*f1_vec)(const double* x, double* y, int64_t n); /* f1 over contiguous values, or NULL */
} sp_def_t;

static const sp_def_t kDefs[] = {
    {"i0", tpurt_sp_i0, NULL, NULL, NULL, tpurt_sp_i0_vec},
    {"special_i0e", tpurt_sp_i0e, NULL, NULL, NULL, tpurt_sp_i0e_vec},
    {"special_i1", tpurt_sp_i1, NULL, NULL, NULL, tpurt_sp_i1_vec},
    {"special_i1e", tpurt_sp_i1e, NULL, NULL, NULL, tpurt_sp_i1e_vec},
    {"special_modified_bessel_i0", tpurt_sp_i0, NULL, NULL, NULL, tpurt_sp_i0_vec},
    {"special_modified_bessel_i1", tpurt_sp_i1, NULL, NULL, NULL, tpurt_sp_i1_vec},
    {"special_modified_bessel_k0", tpurt_sp_k0, NULL, NULL, NULL, tpurt_sp_k0_vec},
    {"special_modified_bessel_k1", tpurt_sp_k1, NULL, NULL, NULL, tpurt_sp_k1_vec},
    {"special_scaled_modified_bessel_k0", tpurt_sp_k0e, NULL, NULL, NULL, tpurt_sp_k0e_vec},
    {"special_scaled_modified_bessel_k1", tpurt_sp_k1e, NULL, NULL, NULL, tpurt_sp_k1e_vec},
    {"special_bessel_j0", tpurt_sp_j0, NULL, NULL, NULL, tpurt_sp_j0_vec},
    {"special_bessel_j1", tpurt_sp_j1, NULL, NULL, NULL, tpurt_sp_j1_vec},
    {"special_bessel_y0", tpurt_sp_y0, NULL, NULL, NULL, tpurt_sp_y0_vec},
    {"special_bessel_y1", tpurt_sp_y1, NULL, NULL, NULL, tpurt_sp_y1_vec},
    {"special_airy_ai", tpurt_sp_airy_ai, NULL, NULL, tpurt_sp_airy_ai_single},
    {"special_spherical_bessel_j0", tpurt_sp_spherical_j0, NULL},
    {"special_erfcx", tpurt_sp_erfcx, NULL},
    {"special_ndtri", tpurt_sp_ndtri, NULL},
    {"special_zeta", NULL, tpurt_sp_zeta},
    {"igamma", NULL, tpurt_sp_igamma},
    {"igammac", NULL, tpurt_sp_igammac},
    {"polygamma", NULL, tpurt_sp_polygamma, tpurt_sp_polygamma_single}, /* (int n, Tensor self) */
    {"special_chebyshev_polynomial_t", NULL, tpurt_sp_cheb_t},
    {"special_chebyshev_polynomial_u", NULL, tpurt_sp_cheb_u},
    {"special_chebyshev_polynomial_v", NULL, tpurt_sp_cheb_v},
    {"special_chebyshev_polynomial_w", NULL, tpurt_sp_cheb_w},
    {"special_shifted_chebyshev_polynomial_t", NULL, tpurt_sp_shifted_cheb_t},
    {"special_shifted_chebyshev_polynomial_u", NULL, tpurt_sp_shifted_cheb_u},
    {"special_shifted_chebyshev_polynomial_v", NULL, tpurt_sp_shifted_cheb_v},
    {"special_shifted_chebyshev_polynomial_w", NULL, tpurt_sp_shifted_cheb_w},
    {"special_hermite_polynomial_h", NULL, tpurt_sp_hermite_h},
    {"special_hermite_polynomial_he", NULL, tpurt_sp_hermite_he},
    {"special_laguerre_polynomial_l", NULL, tpurt_sp_laguerre_l},
    {"special_legendre_polynomial_p", NULL, tpurt_sp_legendre_p},
};

static const sp_def_t* find_def(const char* name) {
  for (size_t i = 0; i < sizeof(kDefs) / sizeof(kDefs[0]); ++i)
    if (strcmp(kDefs[i].name, name) == 0) return &kDefs[i];
  return NULL;
}

typedef struct sp_user_t {
  const sp_def_t* def;
  sp_fn1_t f1; /* def->f1, or def->f1_single for a float32 output */
  sp_fn2_t f2; /* def->f2, or def->f2_single for a float32 output */
  bool frexp;
} sp_user_t;

/* data/strides: output(s) first, then inputs; all operands in float64 except
 * frexp's exponent (int32). */
static void sp_loop(char** data, const int64_t* strides, int64_t n, void* user) {
  const sp_user_t* u = user;
  if (u->frexp) {
    for (int64_t i = 0; i < n; ++i) {
      int e = 0;
      double x = *(const double*)(data[2] + i * strides[2]);
      double m = isfinite(x) ? frexp(x, &e) : x;
      *(double*)(data[0] + i * strides[0]) = m;
      *(int32_t*)(data[1] + i * strides[1]) = isfinite(x) ? e : 0;
    }
    return;
  }
  if (u->def->f1) {
    if (u->def->f1_vec && u->f1 == u->def->f1 && strides[0] == 8 && strides[1] == 8) {
      u->def->f1_vec((const double*)data[1], (double*)data[0], n);
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *(double*)(data[0] + i * strides[0]) = u->f1(*(const double*)(data[1] + i * strides[1]));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    *(double*)(data[0] + i * strides[0]) = u->f2(*(const double*)(data[1] + i * strides[1]),
                                                      *(const double*)(data[2] + i * strides[2]));
}

static void sp_ref(tpurt_ew_value_t* out, const tpurt_ew_value_t* in, void* user) {
  const sp_user_t* u = user;
  if (u->frexp) {
    int e = 0;
    double x = in[0].d;
    out[0].d = isfinite(x) ? frexp(x, &e) : x;
    out[1].i = isfinite(x) ? e : 0;
  } else if (u->def->f1) {
    out[0].d = u->f1(in[0].d);
  } else {
    out[0].d = u->f2(in[0].d, in[1].d);
  }
}

static tpurt_status_t sp_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call, bool ref) {
  sp_user_t u = {NULL, NULL, NULL, false};
  if (strcmp(call->name, "frexp") == 0) u.frexp = true;
  else if (!(u.def = find_def(call->name)))
    return TPURT_STATUS(UNIMPLEMENTED, "special: no kernel named %s", call->name);
  int nin = (u.frexp || u.def->f1) ? 1 : 2, nout = u.frexp ? 2 : 1;
  if (!u.frexp && call->num_outputs > 0) {
    bool f32 = call->outputs[0].dtype == TPURT_DTYPE_FLOAT32;
    u.f1 = f32 && u.def->f1_single ? u.def->f1_single : u.def->f1;
    u.f2 = f32 && u.def->f2_single ? u.def->f2_single : u.def->f2;
  }
  if (call->num_args < nin || call->num_outputs < nout)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: expected %d inputs and %d outputs, got %d and %d",
                        call->name, nin, nout, (int)call->num_args, (int)call->num_outputs);
  for (int k = 0; k < nout; ++k) {
    tpurt_dtype_t dt = call->outputs[k].dtype;
    bool ok = k == 1 ? dt == TPURT_DTYPE_INT32 : tpurt_dtype_is_floating(dt);
    if (!ok)
      return TPURT_STATUS(UNIMPLEMENTED, "%s: not implemented for output dtype %s", call->name,
                          tpurt_dtype_name(dt));
  }
  tpurt_ew_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.op = call->name;
  cfg.num_outputs = nout;
  cfg.num_inputs = nin;
  tpurt_tensor_t wrapped[2];
  _Alignas(8) char storage[2][8];
  for (int k = 0; k < nout; ++k) {
    cfg.tensors[k] = &call->outputs[k];
    cfg.loop_dtypes[k] = k == 1 ? TPURT_DTYPE_INT32 : TPURT_DTYPE_FLOAT64;
  }
  for (int k = 0; k < nin; ++k) {
    const tpurt_tensor_t* t = tpurt_arg_as_tensor(tpurt_arg_at(call, k), &wrapped[k], storage[k]);
    if (!t)
      return TPURT_STATUS(INVALID_ARGUMENT, "%s: argument %d must be a tensor or a number",
                          call->name, k);
    cfg.tensors[nout + k] = t;
    cfg.loop_dtypes[nout + k] = TPURT_DTYPE_FLOAT64;
  }
  cfg.loop = sp_loop;
  cfg.user = &u;
  cfg.grain = 2048; /* tens to hundreds of flops an element */
  if (ref) return tpurt_ew_run_reference(&cfg, sp_ref, &u);
  return tpurt_ew_run(ctx, &cfg);
}

static tpurt_status_t special_kernel(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return sp_run(ctx, call, false);
}
static tpurt_status_t special_reference(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return sp_run(ctx, call, true);
}

/* Every input is read in float64 and every output is floating point, so each
 * op takes every real dtype for its first tensor argument. */
#define SP(NAME) {NAME, special_kernel, special_reference, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_REAL, TPURT_LAYOUT_STRIDED}
/* and uint16/32/64, which CPU's unary special ops (integers promote to float) and its zeta, polygamma
 * and polynomials take too; igamma/igammac and frexp refuse them on CPU */
#define SP_U(NAME)                                                                                    \
  {NAME, special_kernel, special_reference, TPURT_OP_ALIAS_SAFE, TPURT_DTYPES_REAL | TPURT_DTYPES_UINT_WIDE, \
   TPURT_LAYOUT_STRIDED}

const tpurt_op_def_t tpurt_ops_special[] = {
    SP_U("i0"),
    SP_U("special_i0e"),
    SP_U("special_i1"),
    SP_U("special_i1e"),
    SP_U("special_modified_bessel_i0"),
    SP_U("special_modified_bessel_i1"),
    SP_U("special_modified_bessel_k0"),
    SP_U("special_modified_bessel_k1"),
    SP_U("special_scaled_modified_bessel_k0"),
    SP_U("special_scaled_modified_bessel_k1"),
    SP_U("special_bessel_j0"),
    SP_U("special_bessel_j1"),
    SP_U("special_bessel_y0"),
    SP_U("special_bessel_y1"),
    SP_U("special_airy_ai"),
    SP_U("special_spherical_bessel_j0"),
    SP_U("special_erfcx"),
    SP_U("special_ndtri"),
    SP_U("special_zeta"),
    SP("igamma"),
    SP("igammac"),
    SP_U("polygamma"),
    SP_U("special_chebyshev_polynomial_t"),
    SP_U("special_chebyshev_polynomial_u"),
    SP_U("special_chebyshev_polynomial_v"),
    SP_U("special_chebyshev_polynomial_w"),
    SP_U("special_shifted_chebyshev_polynomial_t"),
    SP_U("special_shifted_chebyshev_polynomial_u"),
    SP_U("special_shifted_chebyshev_polynomial_v"),
    SP_U("special_shifted_chebyshev_polynomial_w"),
    SP_U("special_hermite_polynomial_h"),
    SP_U("special_hermite_polynomial_he"),
    SP_U("special_laguerre_polynomial_l"),
    SP_U("special_legendre_polynomial_p"),
    SP("frexp"),
    TPURT_OP_TABLE_END,
};
