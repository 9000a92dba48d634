/* Float32 GEMMs at the TPU MXU's precisions (tpurt/precision.h). HIGH and
 * MEDIUM split the float32 operands into bfloat16 parts (a = hi + lo, hi =
 * bf16(a), lo = bf16(a - hi)) and run the existing bf16 GEMM (bf16 operands,
 * float32 accumulation, as the MXU does) on them: MEDIUM hi*hi, HIGH
 * lo*hi + hi*lo + hi*hi (the small terms first). HIGHEST is the float32 path
 * unchanged. Kept apart from gemm.c so that file's paths stay as they are. */
#include <stdatomic.h>
#include <stdlib.h>

#include "ops/linalg/gemm.h"
#include "tpurt/precision.h"

static tpurt_fp32_precision_t (*_Atomic g_source)(void);
static _Atomic int g_override = -1;

void tpurt_fp32_precision_set_source(tpurt_fp32_precision_t (*source)(void)) { atomic_store(&g_source, source); }
void tpurt_fp32_precision_override(int p) { atomic_store(&g_override, p); }

tpurt_fp32_precision_t tpurt_fp32_precision(void) {
  int o = atomic_load_explicit(&g_override, memory_order_relaxed);
  if (o >= 0) return (tpurt_fp32_precision_t)o;
  tpurt_fp32_precision_t (*s)(void) = atomic_load_explicit(&g_source, memory_order_relaxed);
  return s ? s() : TPURT_FP32_HIGHEST;
}

int tpurt_fp32_precision_passes(tpurt_fp32_precision_t p) {
  return p == TPURT_FP32_MEDIUM ? 1 : p == TPURT_FP32_HIGH ? 3 : 6;
}

bool tpurt_gemm_fp32_split_wanted(const tpurt_gemm_t* g) {
  return g->ab_dtype == TPURT_DTYPE_FLOAT32 && g->c_dtype == TPURT_DTYPE_FLOAT32 && tpurt_fp32_precision() != TPURT_FP32_HIGHEST;
}

/* Packs a strided float32 matrix (rows x cols per batch) into contiguous
 * bf16 hi and (optionally) lo parts. */
typedef struct split_job_t {
  const float* src;
  int64_t rows, cols, rs, cs, bs;
  tpurt_bf16_t* hi;
  tpurt_bf16_t* lo;
} split_job_t;

static void split_rows(void* user, int64_t begin, int64_t end, int tid) {
  const split_job_t* j = user;
  for (int64_t r = begin; r < end; ++r) {
    int64_t b = r / j->rows, i = r % j->rows;
    const float* s = j->src + b * j->bs + i * j->rs;
    tpurt_bf16_t* h = j->hi + r * j->cols;
    tpurt_bf16_t* l = j->lo ? j->lo + r * j->cols : NULL;
    for (int64_t c = 0; c < j->cols; ++c) {
      float v = s[c * j->cs];
      tpurt_bf16_t hv = tpurt_f32_to_bf16(v);
      h[c] = hv;
      if (l) l[c] = tpurt_f32_to_bf16(v - tpurt_bf16_to_f32(hv));
    }
  }
}

tpurt_status_t tpurt_gemm_fp32_split(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g) {
  bool three = tpurt_fp32_precision() == TPURT_FP32_HIGH;
  int64_t nb = g->batch > 0 ? g->batch : 1;
  if (g->m == 0 || g->n == 0) return TPURT_OK;
  size_t ea = (size_t)(nb * g->m * g->k), eb = (size_t)(nb * g->k * g->n);
  size_t parts = three ? 2 : 1;
  size_t bytes = (ea + eb) * parts * sizeof(tpurt_bf16_t);
  tpurt_gemm_t p = *g;
  p.ab_dtype = TPURT_DTYPE_BFLOAT16;
  p.a_rs = g->k, p.a_cs = 1, p.a_bs = g->m * g->k;
  p.b_rs = g->n, p.b_cs = 1, p.b_bs = g->k * g->n;
  /* Without a context (a serial caller) the parts and the bf16 GEMM's
   * workspace come from the heap. */
  size_t ws = ctx ? 0 : (tpurt_gemm_workspace_bytes(NULL, &p) + 63) & ~(size_t)63;
  void* owned = NULL; /* 64-byte aligned, as kernel scratch is (the GEMM's packing needs it) */
  if (!ctx && posix_memalign(&owned, 64, ws + bytes + 64) != 0) owned = NULL;
  tpurt_bf16_t* buf = ctx ? tpurt_kernel_scratch(ctx, bytes) : owned ? (tpurt_bf16_t*)((char*)owned + ws) : NULL;
  void* workspace = ctx || !ws ? NULL : owned;
  if (!buf) return TPURT_STATUS(RESOURCE_EXHAUSTED, "gemm: no scratch for the bf16 split of a float32 product");
  tpurt_bf16_t *a_hi = buf, *a_lo = three ? buf + ea : NULL;
  tpurt_bf16_t *b_hi = buf + ea * parts, *b_lo = three ? b_hi + eb : NULL;
  split_job_t ja = {g->a, g->m, g->k, g->a_rs, g->a_cs, g->a_bs, a_hi, a_lo};
  split_job_t jb = {g->b, g->k, g->n, g->b_rs, g->b_cs, g->b_bs, b_hi, b_lo};
  if (g->k > 0) {
    tpurt_parallel_for(ctx, nb * g->m, 64, split_rows, &ja);
    tpurt_parallel_for(ctx, nb * g->k, 64, split_rows, &jb);
  }
  const tpurt_bf16_t* pa[3] = {a_hi, a_hi, a_hi};
  const tpurt_bf16_t* pb[3] = {b_hi, b_hi, b_hi};
  int npass = 1;
  if (three) {
    pa[0] = a_lo, pb[0] = b_hi;
    pa[1] = a_hi, pb[1] = b_lo;
    npass = 3;
  }
  for (int i = 0; i < npass; ++i) {
    p.a = pa[i];
    p.b = pb[i];
    if (i > 0) { /* accumulate onto what the earlier passes wrote */
      p.c_in = NULL;
      p.beta = 1.0;
    }
    tpurt_status_t s = tpurt_gemm(ctx, &p, workspace);
    if (s) {
      free(owned);
      return s;
    }
  }
  free(owned);
  return TPURT_OK;
}
