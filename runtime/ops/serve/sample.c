/* The sampler's work on float32 logits [batch, vocab] between the model and
 * the next tokens, as vLLM's PyTorch sampler does it:
 *  - penalties (repetition, frequency, presence) from each row's prompt and
 *    output tokens, touching only the tokens that occur (vLLM counts every
 *    row into a [batch, vocab + 1] int64 histogram and rewrites every logit);
 *  - min-p: logits whose probability is below min_p times the row's largest
 *    become -inf, compared in logit space (x < max + log(min_p)), so a row is a
 *    max and a compare, no softmax;
 *  - the draw: argmax of probs / q for exponential noise q (vLLM's
 *    random_sample: the Gumbel-max trick in its exponential form), one pass.
 *
 * Top-k and top-p (nucleus) filtering of sampling logits in place, as vLLM's
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
#include <stdlib.h>
#include <string.h>

#include "ops/elementwise/ew_expf.h"
#include "ops/elementwise/philox.h"
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

/* ---- penalties ---- */

/* args: logits [B, V] float32 (written), prompt [B, P] and output [B, O] token ids (int32/int64; ids
 * outside [0, V) are padding: vLLM pads with V, and -1 marks a speculative placeholder), presence,
 * frequency, repetition [B] floats. Per row, as vLLM's apply_penalties in float32 and in its order: a
 * logit of a token in the prompt or the output is multiplied by 1/rep where positive, by rep otherwise;
 * then count * frequency and (count > 0) * presence are subtracted, count being its output
 * occurrences. */
#define PEN_PROMPT 0x40000000u
#define PEN_DONE 0x80000000u
#define PEN_COUNT 0x3fffffffu

typedef struct pen_job_t {
  const tpurt_tensor_t *logits, *prompt, *output, *pres, *freq, *rep;
  int64_t V;
  uint32_t* buf; /* per thread: V words, zero between rows */
} pen_job_t;

static inline int64_t ld_tok(const tpurt_tensor_t* t, int64_t r, int64_t i) {
  size_t off = (size_t)(r * t->strides[0] + i * t->strides[1]);
  return t->dtype == TPURT_DTYPE_INT64 ? ((const int64_t*)t->data)[off] : ((const int32_t*)t->data)[off];
}

static void pen_rows(void* user, int64_t rb, int64_t re, int tid) {
  const pen_job_t* j = user;
  const int64_t V = j->V;
  uint32_t* w = j->buf + (size_t)tid * (size_t)V;
  const int64_t P = j->prompt->sizes[1], O = j->output->sizes[1];
  for (int64_t r = rb; r < re; ++r) {
    float* x = (float*)j->logits->data + r * j->logits->strides[0];
    const float rep = (float)ld_num(j->rep, r), freq = (float)ld_num(j->freq, r), pres = (float)ld_num(j->pres, r);
    const float inv_rep = 1.0f / rep;
    for (int64_t i = 0; i < P; ++i) {
      int64_t t = ld_tok(j->prompt, r, i);
      if (t >= 0 && t < V) w[t] |= PEN_PROMPT;
    }
    for (int64_t i = 0; i < O; ++i) {
      int64_t t = ld_tok(j->output, r, i);
      if (t >= 0 && t < V && (w[t] & PEN_COUNT) < PEN_COUNT) ++w[t];
    }
    /* each token once (PEN_DONE), then its word cleared for the next row */
    for (int pass = 0; pass < 2; ++pass) {
      const tpurt_tensor_t* list = pass ? j->output : j->prompt;
      const int64_t n = pass ? O : P;
      for (int64_t i = 0; i < n; ++i) {
        int64_t t = ld_tok(list, r, i);
        if (t < 0 || t >= V || (w[t] & PEN_DONE)) continue;
        w[t] |= PEN_DONE;
        const uint32_t c = w[t] & PEN_COUNT;
        float v = x[t];
        v *= v > 0 ? inv_rep : rep;
        const float fc = freq * (float)c;
        v -= fc;
        const float pm = pres * (c > 0 ? 1.0f : 0.0f);
        v -= pm;
        x[t] = v;
      }
    }
    for (int64_t i = 0; i < P; ++i) {
      int64_t t = ld_tok(j->prompt, r, i);
      if (t >= 0 && t < V) w[t] = 0;
    }
    for (int64_t i = 0; i < O; ++i) {
      int64_t t = ld_tok(j->output, r, i);
      if (t >= 0 && t < V) w[t] = 0;
    }
  }
}

static tpurt_status_t check_rows(const tpurt_tensor_t* t, int64_t B, const char* op, const char* what) {
  if (!t || t->ndim != 1 || t->sizes[0] != B || !tpurt_dtype_is_floating(t->dtype))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: %s must be a float tensor [%lld]", op, what, (long long)B);
  return TPURT_STATUS_OK;
}

static tpurt_status_t check_logits(const tpurt_tensor_t* l, const char* op) {
  if (!l || l->ndim != 2 || l->dtype != TPURT_DTYPE_FLOAT32 || (l->sizes[1] > 1 && l->strides[1] != 1))
    return TPURT_STATUS(INVALID_ARGUMENT, "%s: logits must be float32 [batch, vocab] with a contiguous vocab dim", op);
  return TPURT_STATUS_OK;
}

static tpurt_status_t pen_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  pen_job_t j = {.logits = tpurt_arg_tensor(c, 0), .prompt = tpurt_arg_tensor(c, 1), .output = tpurt_arg_tensor(c, 2),
                 .pres = tpurt_arg_tensor(c, 3), .freq = tpurt_arg_tensor(c, 4), .rep = tpurt_arg_tensor(c, 5)};
  TPURT_RETURN_IF_ERROR(check_logits(j.logits, "apply_penalties"));
  const int64_t B = j.logits->sizes[0];
  j.V = j.logits->sizes[1];
  for (int i = 0; i < 2; ++i) {
    const tpurt_tensor_t* t = i ? j.output : j.prompt;
    if (!t || t->ndim != 2 || t->sizes[0] != B || (t->dtype != TPURT_DTYPE_INT64 && t->dtype != TPURT_DTYPE_INT32))
      return TPURT_STATUS(INVALID_ARGUMENT, "apply_penalties: %s token ids must be int32/int64 [%lld, n]",
                          i ? "output" : "prompt", (long long)B);
  }
  TPURT_RETURN_IF_ERROR(check_rows(j.pres, B, "apply_penalties", "presence penalties"));
  TPURT_RETURN_IF_ERROR(check_rows(j.freq, B, "apply_penalties", "frequency penalties"));
  TPURT_RETURN_IF_ERROR(check_rows(j.rep, B, "apply_penalties", "repetition penalties"));
  if (B == 0 || j.V == 0) return TPURT_STATUS_OK;
  int nt = ref ? 1 : tpurt_kernel_num_threads(ctx);
  if (nt < 1) nt = 1;
  j.buf = tpurt_kernel_scratch(ctx, (size_t)nt * (size_t)j.V * 4);
  if (!j.buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "apply_penalties: no scratch for a %lld-token vocabulary", (long long)j.V);
  memset(j.buf, 0, (size_t)nt * (size_t)j.V * 4);
  if (ref) pen_rows(&j, 0, B, 0);
  else tpurt_parallel_for(ctx, B, 1, pen_rows, &j);
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_serve_apply_penalties(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return pen_run(ctx, call, false);
}
/* The reference is the same per-token arithmetic on one thread (it is exact float32 work; tests compare
 * both against vLLM's dense PyTorch version). */
tpurt_status_t tpurt_serve_apply_penalties_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return pen_run(ctx, call, true);
}

/* ---- min-p ---- */

/* args: logits [B, V] float32 (written), min_p [B] floats (0: the row is left as it is). */
typedef struct minp_job_t {
  const tpurt_tensor_t *logits, *min_p;
  int64_t V;
  bool ref;
} minp_job_t;

static void minp_rows(void* user, int64_t rb, int64_t re, int tid) {
  const minp_job_t* j = user;
  for (int64_t r = rb; r < re; ++r) {
    const double mp = ld_num(j->min_p, r);
    if (!(mp > 0)) continue;
    float* x = (float*)j->logits->data + r * j->logits->strides[0];
    float mx = -INFINITY;
    for (int64_t i = 0; i < j->V; ++i) mx = x[i] > mx ? x[i] : mx;
    if (mx == -INFINITY || isnan(mx)) continue;
    if (j->ref) {
      /* vLLM's form: probs below min_p * the largest prob, the softmax in double */
      double z = 0;
      for (int64_t i = 0; i < j->V; ++i) z += exp((double)x[i] - mx);
      const double thr = mp / z;
      for (int64_t i = 0; i < j->V; ++i)
        if (exp((double)x[i] - mx) / z < thr) x[i] = -INFINITY;
      continue;
    }
    /* p_i < min_p * p_max  <=>  x_i - max < log(min_p) */
    const float t = mx + (float)log(mp);
    for (int64_t i = 0; i < j->V; ++i)
      if (x[i] < t) x[i] = -INFINITY;
  }
}

static tpurt_status_t minp_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  minp_job_t j = {.logits = tpurt_arg_tensor(c, 0), .min_p = tpurt_arg_tensor(c, 1), .ref = ref};
  TPURT_RETURN_IF_ERROR(check_logits(j.logits, "min_p"));
  TPURT_RETURN_IF_ERROR(check_rows(j.min_p, j.logits->sizes[0], "min_p", "min_p"));
  j.V = j.logits->sizes[1];
  if (j.logits->sizes[0] == 0 || j.V == 0) return TPURT_STATUS_OK;
  if (ref) minp_rows(&j, 0, j.logits->sizes[0], 0);
  else tpurt_parallel_for(ctx, j.logits->sizes[0], 1, minp_rows, &j);
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_serve_min_p(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return minp_run(ctx, call, false);
}
tpurt_status_t tpurt_serve_min_p_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return minp_run(ctx, call, true);
}

/* ---- the draw ---- */

/* args: out [B] int64 (written), probs [B, V] float32, q [B, V] float32 (exponential noise), or in
 * place of q the call's Philox reservation (torch_tpu::sample_exponential_noise, a Generator argument):
 * then the noise of element i = r * V + c is what exponential_ on a contiguous [B, V] tensor draws with
 * that reservation (ops/elementwise/random.c: Philox block offset + i / 4, lane i % 4, -log1p(-u) in
 * double rounded to float), so the draw is the one vLLM's random_sample makes with the same generator,
 * without writing and reading the noise, and with the logarithm only where probs is nonzero (a zero
 * probability scores 0 unless its noise is 0, which gives NaN). out[r] is the first index of the
 * largest probs / q of row r, a NaN counting as the largest (torch.argmax's rule), so the token is the
 * one vLLM's probs.div_(q).argmax() gives. */
typedef struct draw_job_t {
  const tpurt_tensor_t *out, *probs, *q;
  const tpurt_rng_t* rng;
  int64_t V;
} draw_job_t;

static void draw_rows(void* user, int64_t rb, int64_t re, int tid) {
  const draw_job_t* j = user;
  for (int64_t r = rb; r < re; ++r) {
    const float* p = (const float*)j->probs->data + r * j->probs->strides[0];
    const float* q = j->q ? (const float*)j->q->data + r * j->q->strides[0] : NULL;
    int64_t best = -1;
    float bv = 0;
    uint64_t block = UINT64_MAX;
    tpurt_philox_out_t ph = {{0}};
    for (int64_t i = 0; i < j->V; ++i) {
      float s;
      if (q) {
        s = p[i] / q[i];
      } else {
        const uint64_t e = (uint64_t)(r * j->V + i);
        if (e / 4 != block) block = e / 4, ph = tpurt_philox4x32_10(j->rng->seed, j->rng->offset + block, 0);
        const uint32_t u = ph.v[e & 3];
        if (p[i] == 0 && (u >> 8) != 0) {
          s = 0; /* 0 / q with q > 0 */
        } else {
          const float qi = (float)(-log1p(-(double)tpurt_philox_u32_to_unit_f(u)));
          s = p[i] / qi;
        }
      }
      if (isnan(s)) {
        best = i;
        break;
      }
      if (best < 0 || s > bv) bv = s, best = i;
    }
    ((int64_t*)j->out->data)[r * j->out->strides[0]] = best;
  }
}

static tpurt_status_t draw_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c, bool ref) {
  draw_job_t j = {.out = tpurt_arg_tensor(c, 0), .probs = tpurt_arg_tensor(c, 1), .q = tpurt_arg_tensor(c, 2),
                  .rng = tpurt_arg_rng(c)};
  TPURT_RETURN_IF_ERROR(check_logits(j.probs, "sample_exponential"));
  const int64_t B = j.probs->sizes[0];
  j.V = j.probs->sizes[1];
  if (!j.q && !j.rng)
    return TPURT_STATUS(INVALID_ARGUMENT, "sample_exponential: needs the noise q or a generator's reservation");
  if (j.q && (j.q->ndim != 2 || j.q->sizes[0] != B || j.q->sizes[1] != j.V || j.q->dtype != TPURT_DTYPE_FLOAT32 ||
      (j.V > 1 && j.q->strides[1] != 1)))
    return TPURT_STATUS(INVALID_ARGUMENT, "sample_exponential: q must be float32 [%lld, %lld] like probs",
                        (long long)B, (long long)j.V);
  if (!j.out || j.out->ndim != 1 || j.out->sizes[0] != B || j.out->dtype != TPURT_DTYPE_INT64)
    return TPURT_STATUS(INVALID_ARGUMENT, "sample_exponential: out must be int64 [%lld]", (long long)B);
  if (B == 0) return TPURT_STATUS_OK;
  if (j.V == 0) return TPURT_STATUS(INVALID_ARGUMENT, "sample_exponential: an empty vocabulary");
  if (ref) draw_rows(&j, 0, B, 0);
  else tpurt_parallel_for(ctx, B, 1, draw_rows, &j);
  return TPURT_STATUS_OK;
}

tpurt_status_t tpurt_serve_sample_exponential(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return draw_run(ctx, call, false);
}
tpurt_status_t tpurt_serve_sample_exponential_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return draw_run(ctx, call, true);
}
