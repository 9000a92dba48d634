/* Cost rules, one per op-table family (registry.c's order). Rules:
 *  1. bytes = every tensor argument's elements (the view, each counted once
 *     per argument) + every output's: what a kernel reading its inputs once
 *     and writing its outputs once moves. A broadcast (stride-0) input counts
 *     its distinct elements only. Caches, re-reads and padding are ignored.
 *  2. flops by family: elementwise, random, special, complex: one per output
 *     element (a transcendental counts as one); reduce: one per input
 *     element; norm: five per input element (mean, variance, scale, shift);
 *     linalg: the matmul family 2*M*N*K (+ M*N for a bias), other
 *     factorizations n^3 of their first operand's last dim times the batch;
 *     nn: convolutions 2 * output elements * (input channels / groups) *
 *     kernel elements, their backward twice that; other nn ops one per
 *     output element; index: none (data movement); fft: 5 n log2 n.
 *  3. the dtype is the first tensor operand's (what a kernel computes in). */
#include <math.h>
#include <string.h>

#include "ops/cost.h"

enum { F_ELEMENTWISE, F_RANDOM, F_REDUCE, F_NORM, F_LINALG, F_NN, F_INDEX, F_SPECIAL, F_COMPLEX, F_FFT, F_INDEX_COMPLEX };

double tpurt_op_cost_tensor_bytes(const tpurt_tensor_t* t) {
  if (!t) return 0;
  double n = 1;
  for (int i = 0; i < t->ndim; ++i)
    if (t->strides[i] != 0 || t->sizes[i] == 0) n *= (double)t->sizes[i];
  return n * (double)tpurt_tensor_itemsize(t);
}

static const tpurt_tensor_t* nth_tensor(const tpurt_op_call_t* call, int k) {
  for (int i = 0; i < call->num_args; ++i) {
    if (call->args[i].kind != TPURT_ARG_TENSOR) continue;
    if (k-- == 0) return call->args[i].v.tensor;
  }
  return NULL;
}

static double numel(const tpurt_tensor_t* t) { return t ? (double)tpurt_tensor_numel(t) : 0; }

static double gemm_flops(const char* n, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* out = call->num_outputs > 0 ? &call->outputs[0] : NULL;
  if (!out) return 0;
  /* K: the last dim of the left operand (after a bias for add* forms). */
  bool bias = strncmp(n, "add", 3) == 0 || strcmp(n, "baddbmm") == 0 || strcmp(n, "_addmm_activation") == 0;
  const tpurt_tensor_t* a = nth_tensor(call, bias ? 1 : 0);
  if (!a || a->ndim == 0) return numel(out);
  double k = (double)a->sizes[a->ndim - 1];
  if (strcmp(n, "addr") == 0) k = 1;
  if (strcmp(n, "dot") == 0 || strcmp(n, "vdot") == 0) return 2 * k;
  return 2 * numel(out) * k + (bias ? numel(out) : 0);
}

static bool is_gemm(const char* n) {
  static const char* const k[] = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "addr",
                                  "dot", "vdot", "_int_mm", "_addmm_activation"};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i)
    if (strcmp(n, k[i]) == 0) return true;
  return false;
}

static double conv_flops(const char* n, const tpurt_op_call_t* call) {
  const tpurt_tensor_t* w = nth_tensor(call, strstr(n, "backward") ? 2 : 1);
  const tpurt_tensor_t* out = call->num_outputs > 0 ? &call->outputs[0] : NULL;
  const tpurt_tensor_t* in = nth_tensor(call, strstr(n, "backward") ? 1 : 0);
  if (!w || !out || w->ndim < 2) return numel(out);
  double per = 1;
  for (int i = 1; i < w->ndim; ++i) per *= (double)w->sizes[i];
  /* Transposed: each input element meets the kernel (weight is [Cin, Cout/g, k...]). */
  /* Each output element (transposed: each input element; backward: each
   * grad_output element) meets the whole kernel. */
  double base = strstr(n, "transpose") ? numel(in) : numel(out);
  if (strstr(n, "backward")) base = numel(nth_tensor(call, 0));
  double f = 2 * base * per;
  return strstr(n, "backward") ? 2 * f : f;
}

void tpurt_op_cost(const tpurt_op_def_t* op, const tpurt_op_call_t* call, tpurt_op_cost_t* o) {
  o->flops = 0;
  o->bytes = 0;
  o->dtype = -1;
  o->matmul = false;
  double in_elems = 0, max_in = 0;
  for (int i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind == TPURT_ARG_TENSOR) {
      o->bytes += tpurt_op_cost_tensor_bytes(a->v.tensor);
      double e = numel(a->v.tensor);
      in_elems += e;
      if (e > max_in) max_in = e;
      if (o->dtype < 0) o->dtype = a->v.tensor->dtype;
    } else if (a->kind == TPURT_ARG_TENSOR_LIST) {
      for (int j = 0; j < a->count; ++j) {
        if (!a->v.tensors[j]) continue;
        o->bytes += tpurt_op_cost_tensor_bytes(a->v.tensors[j]);
        in_elems += numel(a->v.tensors[j]);
        if (o->dtype < 0) o->dtype = a->v.tensors[j]->dtype;
      }
    }
  }
  double out_elems = 0;
  for (int i = 0; i < call->num_outputs; ++i) {
    o->bytes += tpurt_op_cost_tensor_bytes(&call->outputs[i]);
    out_elems += numel(&call->outputs[i]);
  }
  if (o->dtype < 0 && call->num_outputs > 0) o->dtype = call->outputs[0].dtype;
  const char* n = call->name ? call->name : (op ? op->name : "");
  if (strncmp(n, "complex::", 9) == 0) n += 9;
  double first = call->num_outputs > 0 ? numel(&call->outputs[0]) : 0;
  switch (op ? tpurt_op_family_of(op) : -1) {
    case F_REDUCE:
      o->flops = max_in;
      break;
    case F_NORM:
      o->flops = 5 * max_in;
      break;
    case F_LINALG:
      if (is_gemm(n)) {
        o->flops = gemm_flops(n, call);
        o->matmul = true;
      } else if (strcmp(n, "trace") == 0) {
        o->flops = first;
      } else {
        const tpurt_tensor_t* a = nth_tensor(call, 0);
        double d = a && a->ndim ? (double)a->sizes[a->ndim - 1] : 0;
        double batch = d > 0 ? numel(a) / (d * (a->ndim >= 2 ? (double)a->sizes[a->ndim - 2] : 1)) : 0;
        o->flops = batch * d * d * d;
      }
      break;
    case F_NN:
      o->matmul = strstr(n, "conv") != NULL && strstr(n, "im2col") == NULL;
      o->flops = o->matmul ? conv_flops(n, call) : (first > 0 ? out_elems : in_elems);
      break;
    case F_INDEX:
    case F_INDEX_COMPLEX:
      o->flops = 0;
      break;
    case F_FFT: {
      double m = first > 1 ? first : 1;
      o->flops = 5 * m * log2(m);
      break;
    }
    default: /* elementwise, random, special, complex, unknown */
      o->flops = out_elems;
      break;
  }
}
