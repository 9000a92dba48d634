/* Top-k and top-p (nucleus) filtering of sampling logits in place, as vLLM's
 * sampler applies them before it samples: per row, logits below the k-th
 * largest become -inf; then, over the softmax of what is left, the smallest
 * logits whose cumulative probability (ascending) stays at or below 1 - p
 * become -inf (the largest always stays). vLLM sorts each row for this; here
 * each threshold is found by a radix select over the logits' order-preserving
 * 32-bit keys: a 256-bucket histogram per byte (of counts for top-k, of
 * probability mass for top-p), keeping only the keys under the prefix chosen
 * so far, so a row costs a few passes over the vocabulary instead of a sort;
 * top-p after top-k works on top-k's survivors alone. Logits tied at a
 * threshold are all kept (a sort keeps an arbitrary subset of them). */
#include <math.h>
#include <string.h>

#include "ops/elementwise/ew_expf.h"
#include "ops/serve/serve.h"

/* Order-preserving key of a float: larger float, larger key (-inf lowest but NaN). */
static inline uint32_t fkey(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The k-th largest of the n keys in key[] (1 <= k <= n). key[] is reordered and shortened as the
 * select goes: after each byte only the keys under the chosen prefix stay (compacted in place), so
 * the passes after the first see a 256th of the row or so. */
static uint32_t kth_largest_key(uint32_t* key, int64_t n, int64_t k) {
  uint32_t prefix = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    int64_t cnt[256] = {0};
    for (int64_t i = 0; i < n; ++i) ++cnt[(key[i] >> shift) & 0xff];
    int b = 255;
    for (; b > 0; --b) {
      if (cnt[b] >= k) break;
      k -= cnt[b];
    }
    prefix |= (uint32_t)b << shift;
    int64_t m = 0;
    for (int64_t i = 0; i < n; ++i)
      if (((key[i] >> shift) & 0xff) == (uint32_t)b) key[m++] = key[i];
    n = m;
  }
  return prefix;
}

/* The smallest key K whose ascending cumulative mass (w[i] summed over key[i] <= K) exceeds target;
 * key[] and w[] are compacted in place as in kth_largest_key. */
static uint32_t mass_threshold_key(uint32_t* key, float* w, int64_t n, double target) {
  uint32_t prefix = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    double m[256] = {0};
    for (int64_t i = 0; i < n; ++i) m[(key[i] >> shift) & 0xff] += w[i];
    int b = 0;
    for (; b < 255; ++b) {
      if (m[b] > target) break;
      target -= m[b];
    }
    prefix |= (uint32_t)b << shift;
    int64_t c = 0;
    for (int64_t i = 0; i < n; ++i)
      if (((key[i] >> shift) & 0xff) == (uint32_t)b) key[c] = key[i], w[c] = w[i], ++c;
    n = c;
  }
  return prefix;
}

typedef struct tkp_job_t {
  const tpurt_tensor_t *logits, *k, *p;
  int64_t V;
  void* buf; /* per thread: V keys and V floats */
  bool ref;
} tkp_job_t;

static double ld_num(const tpurt_tensor_t* t, int64_t r) {
  return tpurt_dtype_load_f64(t->dtype, (const char*)t->data + (size_t)(r * t->strides[0]) * tpurt_dtype_size(t->dtype));
}

static void tkp_rows(void* user, int64_t rb, int64_t re, int tid) {
  const tkp_job_t* j = user;
  const int64_t V = j->V;
  uint32_t* key = (uint32_t*)((char*)j->buf + (size_t)tid * (size_t)V * 8);
  float* w = (float*)(key + V);
  for (int64_t r = rb; r < re; ++r) {
    float* x = (float*)j->logits->data + r * j->logits->strides[0];
    uint32_t t = 0; /* logits whose key is below t become -inf */
    int64_t k = j->k ? (int64_t)ld_num(j->k, r) : V;
    if (k >= 1 && k < V) {
      for (int64_t i = 0; i < V; ++i) key[i] = fkey(x[i]);
      t = kth_largest_key(key, V, k);
    }
    double p = j->p ? ld_num(j->p, r) : 1.0;
    if (p < 1.0) {
      /* the candidates left by top-k (all of the row without it), their keys and exp(x - max) */
      float mx = -INFINITY;
      int64_t n = 0;
      for (int64_t i = 0; i < V; ++i) {
        uint32_t ki = fkey(x[i]);
        if (ki < t || x[i] == -INFINITY) continue;
        key[n] = ki, w[n] = x[i], ++n;
        mx = x[i] > mx ? x[i] : mx;
      }
      if (n > 0) {
        double z = 0;
        for (int64_t i = 0; i < n; ++i) {
          w[i] = j->ref ? expf(w[i] - mx) : tpurt_ew_expf(w[i] - mx);
          z += w[i];
        }
        uint32_t tp = mass_threshold_key(key, w, n, (1.0 - p) * z);
        if (tp > fkey(mx)) tp = fkey(mx); /* the largest stays, whatever the rounding of the sums */
        if (tp > t) t = tp;
      }
    }
    if (t == 0) continue;
    for (int64_t i = 0; i < V; ++i)
      if (fkey(x[i]) < t) x[i] = -INFINITY;
  }
}

/* args: logits [B, V] float32 (written), k [B] integer or None (k >= V: no top-k), p [B] float or
 * None (p >= 1: no top-p). */
static tpurt_status_t tkp_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  tkp_job_t j = {.logits = tpurt_arg_tensor(c, 0), .k = tpurt_arg_tensor(c, 1), .p = tpurt_arg_tensor(c, 2), .ref = ref};
  const tpurt_tensor_t* l = j.logits;
  if (!l || l->ndim != 2 || l->dtype != TPURT_DTYPE_FLOAT32 || (l->sizes[1] > 1 && l->strides[1] != 1))
    return TPURT_STATUS(INVALID_ARGUMENT, "top_k_top_p: logits must be float32 [batch, vocab] with a contiguous vocab dim");
  int64_t B = l->sizes[0];
  j.V = l->sizes[1];
  if (j.k && (j.k->ndim != 1 || j.k->sizes[0] != B || tpurt_dtype_is_floating(j.k->dtype)))
    return TPURT_STATUS(INVALID_ARGUMENT, "top_k_top_p: k must be an integer tensor [%lld]", (long long)B);
  if (j.p && (j.p->ndim != 1 || j.p->sizes[0] != B || !tpurt_dtype_is_floating(j.p->dtype)))
    return TPURT_STATUS(INVALID_ARGUMENT, "top_k_top_p: p must be a float tensor [%lld]", (long long)B);
  if (B == 0 || j.V == 0 || (!j.k && !j.p)) return TPURT_STATUS_OK;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  if (nt < 1) nt = 1;
  j.buf = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)j.V * 8);
  if (!j.buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "top_k_top_p: no scratch for a %lld-token vocabulary", (long long)j.V);
  if (ref) tkp_rows(&j, 0, B, 0);
  else tpurt_parallel_for(ctx, B, 1, tkp_rows, &j);
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_serve_top_k_top_p(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tkp_run(ctx, call, false);
}
/* The reference runs the same selection on one thread with libm's exp: the selection is exact
 * integer work; tests compare both against vLLM's sort-based PyTorch version. */
tpurt_status_t tpurt_serve_top_k_top_p_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return tkp_run(ctx, call, true);
}
