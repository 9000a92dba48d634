/* Special functions computed the way PyTorch CPU computes them for float32
 * (its scalar_t is float there), where float rounding is large enough that a
 * double-precision answer no longer matches CPU within test tolerance. */
#ifndef TPURT_OPS_SPECIAL_SINGLE_H_
#define TPURT_OPS_SPECIAL_SINGLE_H_

/* polygamma(n, x) for float32 outputs: trigamma (n = 1) as CPU's
 * calc_trigamma<float>; other orders as tpurt_sp_polygamma. */
double tpurt_sp_polygamma_single(double n, double x);
/* special_airy_ai for float32 outputs: CPU's float phase for x < -8. */
double tpurt_sp_airy_ai_single(double x);

#endif /* TPURT_OPS_SPECIAL_SINGLE_H_ */
