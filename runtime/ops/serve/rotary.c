/* Rotary position embedding in place, as vLLM's rotary_embedding op: for each
 * token t and head, the first rot_dim elements are rotated by the angle row
 * cos_sin_cache[positions[t]] = [cos(rot_dim / 2), sin(rot_dim / 2)]; NeoX
 * style pairs element i with i + rot_dim / 2, GPT-J style pairs 2i with
 * 2i + 1. Query and key are [tokens, heads * head_size] rows (any row stride:
 * vLLM passes views of its fused QKV output); float32/bfloat16/float16,
 * computed in float32 and rounded once. One pass replaces the dozen generic
 * ops of vLLM's native version (index_select, chunk, mul, sub, cat, ...). */
#include <stdatomic.h>
#include <string.h>

#include "ops/serve/serve.h"

typedef struct rope_job_t {
  const tpurt_tensor_t *pos, *cache, *x[2];
  int64_t T, hs, rot, maxpos;
  bool neox;
  float* tmp; /* per thread: hs floats for a head row, rot floats for cos/sin */
  _Atomic int bad_pos;
} rope_job_t;

static inline int64_t ld_pos(const tpurt_tensor_t* t, int64_t i) {
  if (t->dtype == TPURT_DTYPE_INT32) return ((const int32_t*)t->data)[i * t->strides[0]];
  return ((const int64_t*)t->data)[i * t->strides[0]];
}

static void rope_range(void* user, int64_t begin, int64_t end, int tid) {
  rope_job_t* j = user;
  const int64_t hs = j->hs, rot = j->rot, half = rot / 2;
  float* row = j->tmp + (int64_t)tid * (hs + rot);
  float* cs = row + hs;
  size_t ces = tpurt_dtype_size(j->cache->dtype);
  for (int64_t t = begin; t < end; ++t) {
    int64_t p = ld_pos(j->pos, t);
    if (p < 0 || p >= j->maxpos) { atomic_store(&j->bad_pos, 1); continue; }
    const char* c = (const char*)j->cache->data + (size_t)(p * j->cache->strides[0]) * ces;
    for (int64_t i = 0; i < rot; ++i) cs[i] = (float)tpurt_dtype_load_f64(j->cache->dtype, c + (size_t)(i * j->cache->strides[1]) * ces);
    for (int w = 0; w < 2; ++w) {
      const tpurt_tensor_t* x = j->x[w];
      if (!x) continue;
      size_t es = tpurt_dtype_size(x->dtype);
      int64_t heads = x->sizes[1] / hs;
      for (int64_t h = 0; h < heads; ++h) {
        char* base = (char*)x->data + (size_t)(t * x->strides[0] + h * hs * x->strides[1]) * es;
        for (int64_t i = 0; i < rot; ++i) row[i] = (float)tpurt_dtype_load_f64(x->dtype, base + (size_t)(i * x->strides[1]) * es);
        for (int64_t i = 0; i < half; ++i) {
          int64_t a = j->neox ? i : 2 * i, b = j->neox ? i + half : 2 * i + 1;
          float x1 = row[a], x2 = row[b], co = cs[i], si = cs[half + i];
          float o1 = x1 * co - x2 * si, o2 = x2 * co + x1 * si;
          tpurt_dtype_store_f64(x->dtype, base + (size_t)(a * x->strides[1]) * es, o1);
          tpurt_dtype_store_f64(x->dtype, base + (size_t)(b * x->strides[1]) * es, o2);
        }
      }
    }
  }
}

/* args: positions [T] (int32/int64), query (written) [T, Hq * hs], key
 * (written, or None) [T, Hkv * hs], cos_sin_cache [max_pos, rot_dim],
 * head_size, is_neox. */
static tpurt_status_t rope_run(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* c) {
  rope_job_t j;
  memset(&j, 0, sizeof j);
  j.pos = tpurt_arg_tensor(c, 0);
  j.x[0] = tpurt_arg_tensor(c, 1);
  j.x[1] = tpurt_arg_tensor(c, 2);
  j.cache = tpurt_arg_tensor(c, 3);
  j.hs = tpurt_arg_int(c, 4, 0);
  j.neox = tpurt_arg_bool(c, 5, true);
  if (!j.pos || j.pos->ndim != 1 || (j.pos->dtype != TPURT_DTYPE_INT32 && j.pos->dtype != TPURT_DTYPE_INT64) ||
      !j.x[0] || !j.cache || j.cache->ndim != 2 || j.hs <= 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "rotary_embedding: expects int positions [tokens], query [tokens, heads * "
                        "head_size], an optional key like it, cos_sin_cache [positions, rot_dim] and head_size > 0");
  j.T = j.pos->sizes[0];
  j.rot = j.cache->sizes[1];
  j.maxpos = j.cache->sizes[0];
  for (int w = 0; w < 2; ++w)
    if (j.x[w] && (j.x[w]->ndim != 2 || j.x[w]->sizes[0] < j.T || j.x[w]->sizes[1] % j.hs != 0))
      return TPURT_STATUS(INVALID_ARGUMENT, "rotary_embedding: query/key must be [tokens, heads * %lld]", (long long)j.hs);
  if (j.rot % 2 != 0 || j.rot > j.hs)
    return TPURT_STATUS(INVALID_ARGUMENT, "rotary_embedding: rotary dim %lld must be even and at most head_size %lld",
                        (long long)j.rot, (long long)j.hs);
  int nt = tpurt_kernel_num_threads(ctx);
  j.tmp = tpurt_kernel_scratch(ctx, (size_t)(nt > 0 ? nt : 1) * (size_t)(j.hs + j.rot) * sizeof(float));
  if (!j.tmp) return TPURT_STATUS(RESOURCE_EXHAUSTED, "rotary_embedding: no scratch");
  atomic_init(&j.bad_pos, 0);
  tpurt_parallel_for(ctx, j.T, 16, rope_range, &j);
  if (atomic_load(&j.bad_pos))
    return TPURT_STATUS(OUT_OF_RANGE, "rotary_embedding: a position is outside the cache's %lld", (long long)j.maxpos);
  return TPURT_STATUS_OK;
}

/* A few multiplies per element through the dtype table: the kernel is its own reference. */
tpurt_status_t tpurt_serve_rotary_embedding(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return rope_run(ctx, call);
}
tpurt_status_t tpurt_serve_rotary_embedding_ref(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return rope_run(ctx, call);
}
