/* Kernel services (tpurt/kernel.h) over a dispatch context (hal/kernel_ctx.h):
 * parallel_for over the driver's compute threads, scratch memory reused
 * across kernels (no malloc once warm), the Debug flag. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/kernel_ctx.h"

/* Scratch kept between kernels is capped so one huge temporary does not pin
 * host memory forever. */
#define SCRATCH_KEEP_MAX ((size_t)256 << 20)
#define SCRATCH_ALIGN 64u

void tpurt_scratch_init(tpurt_scratch_t* s) {
  memset(s, 0, sizeof(*s));
  pthread_mutex_init(&s->lock, NULL);
}

void tpurt_scratch_reset(tpurt_scratch_t* s) {
  size_t high = s->used + s->overflow_bytes;
  while (s->overflow) {
    void* next = *(void**)s->overflow;
    free(s->overflow);
    s->overflow = next;
  }
  if (s->overflow_bytes && high <= SCRATCH_KEEP_MAX) {
    /* Grow the kept buffer to this kernel's total so next time one piece serves. */
    void* nb = NULL;
    size_t ns = (high + 4095) & ~(size_t)4095;
    if (posix_memalign(&nb, SCRATCH_ALIGN, ns) == 0) {
      free(s->base);
      s->base = nb;
      s->size = ns;
    }
  }
  s->used = 0;
  s->overflow_bytes = 0;
}

void tpurt_scratch_deinit(tpurt_scratch_t* s) {
  tpurt_scratch_reset(s);
  free(s->base);
  pthread_mutex_destroy(&s->lock);
  memset(s, 0, sizeof(*s));
}

void* tpurt_kernel_scratch(tpurt_kernel_ctx_t* ctx, size_t bytes) {
  if (!ctx || !ctx->scratch) return NULL;
  tpurt_scratch_t* s = ctx->scratch;
  if (bytes > ((size_t)1 << 62)) return NULL;
  size_t need = (bytes + SCRATCH_ALIGN - 1) & ~(size_t)(SCRATCH_ALIGN - 1);
  if (need == 0) need = SCRATCH_ALIGN;
  void* p = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->size - s->used >= need) {
    p = s->base + s->used;
    s->used += need;
  } else {
    void* chunk = NULL;
    if (posix_memalign(&chunk, SCRATCH_ALIGN, need + SCRATCH_ALIGN) == 0) {
      *(void**)chunk = s->overflow;
      s->overflow = chunk;
      s->overflow_bytes += need;
      p = (uint8_t*)chunk + SCRATCH_ALIGN;
    }
  }
  pthread_mutex_unlock(&s->lock);
  return p;
}

void tpurt_parallel_for(tpurt_kernel_ctx_t* ctx, int64_t n, int64_t grain, tpurt_range_fn_t fn,
                        void* user) {
  if (n <= 0) return;
  if (!ctx || !ctx->pool || ctx->num_threads <= 1) {
    fn(user, 0, n, 0);
    return;
  }
  ctx->parallel_for(ctx->pool, n, tpurt_kernel_grain(ctx, grain), fn, user);
}

int64_t tpurt_kernel_grain(const tpurt_kernel_ctx_t* ctx, int64_t grain) {
  if (ctx && ctx->grain_shift > 0) {
    grain >>= ctx->grain_shift;
    if (grain < 1) grain = 1;
  }
  return grain;
}

int tpurt_kernel_num_threads(const tpurt_kernel_ctx_t* ctx) {
  return (ctx && ctx->pool && ctx->num_threads > 1) ? ctx->num_threads : 1;
}

bool tpurt_kernel_debug(const tpurt_kernel_ctx_t* ctx) { return ctx && ctx->debug; }

tpurt_status_t tpurt_kernel_status_annotate(tpurt_status_t s, const tpurt_op_call_t* call) {
  if (TPURT_LIKELY(s == NULL)) return s;
  const char* name = call->name ? call->name : "?";
  if (call->overload && call->overload[0]) return tpurt_status_annotate(s, "aten::%s.%s", name, call->overload);
  return tpurt_status_annotate(s, "aten::%s", name);
}

/* invoke when something is poisoned or the command was dropped. */
static tpurt_status_t invoke_guarded(tpurt_kernel_ctx_t* ctx, tpurt_kernel_fn_t fn, uint32_t op_flags,
                                     const tpurt_op_call_t* call) {
  if (ctx->cancel) {
    tpurt_poison_mark_call(ctx->poison, call, ctx->cancel);
    return TPURT_OK;
  }
  tpurt_status_t in = tpurt_poison_check_call(ctx->poison, call, op_flags);
  if (in) {
    tpurt_poison_mark_call(ctx->poison, call, in);
    tpurt_status_free(in);
    return TPURT_OK;
  }
  tpurt_status_t s = fn(ctx, call);
  if (ctx->scratch) tpurt_scratch_reset(ctx->scratch);
  if (s) {
    s = tpurt_kernel_status_annotate(s, call);
    tpurt_poison_mark_call(ctx->poison, call, s);
  } else {
    tpurt_poison_clear_call(ctx->poison, call);
  }
  return s;
}

tpurt_status_t tpurt_kernel_ctx_invoke(tpurt_kernel_ctx_t* ctx, tpurt_kernel_fn_t fn, uint32_t op_flags,
                                       const tpurt_op_call_t* call) {
  if (TPURT_UNLIKELY(ctx->cancel != NULL || tpurt_poison_armed(ctx->poison)))
    return invoke_guarded(ctx, fn, op_flags, call);
  tpurt_status_t s = fn(ctx, call);
  if (ctx->scratch) tpurt_scratch_reset(ctx->scratch);
  if (TPURT_UNLIKELY(s != NULL)) {
    s = tpurt_kernel_status_annotate(s, call);
    tpurt_poison_mark_call(ctx->poison, call, s);
  }
  return s;
}

void tpurt_kernel_ctx_copy(tpurt_kernel_ctx_t* ctx, void* dst, const void* src, size_t bytes) {
  if (TPURT_UNLIKELY(ctx->cancel != NULL)) {
    tpurt_poison_mark(ctx->poison, dst, bytes, ctx->cancel);
    return;
  }
  if (TPURT_UNLIKELY(tpurt_poison_armed(ctx->poison))) {
    tpurt_status_t in = tpurt_poison_check(ctx->poison, src, bytes);
    if (in) {
      tpurt_poison_mark(ctx->poison, dst, bytes, in);
      tpurt_status_free(in);
      return;
    }
    tpurt_poison_clear(ctx->poison, dst, bytes);
  }
  tpurt_kernel_copy(ctx, dst, src, bytes);
}

void tpurt_kernel_ctx_write(tpurt_kernel_ctx_t* ctx, void* dst, const void* src, size_t bytes) {
  if (TPURT_UNLIKELY(ctx->cancel != NULL)) {
    tpurt_poison_mark(ctx->poison, dst, bytes, ctx->cancel);
    return;
  }
  if (TPURT_UNLIKELY(tpurt_poison_armed(ctx->poison))) tpurt_poison_clear(ctx->poison, dst, bytes);
  memcpy(dst, src, bytes);
}

typedef struct copy_job_t {
  uint8_t* dst;
  const uint8_t* src;
} copy_job_t;

static void copy_chunk(void* user, int64_t begin, int64_t end, int tid) {
  copy_job_t* j = user;
  memcpy(j->dst + begin, j->src + begin, (size_t)(end - begin));
}

void tpurt_kernel_copy(tpurt_kernel_ctx_t* ctx, void* dst, const void* src, size_t bytes) {
  uint8_t* dp = dst;
  const uint8_t* sp = src;
  /* Overlapping ranges must use memmove and stay serial; small ones are not worth a split. */
  bool overlap = dp < sp + bytes && sp < dp + bytes;
  if (overlap || bytes < ((size_t)4 << 20) || tpurt_kernel_num_threads(ctx) <= 1) {
    memmove(dst, src, bytes);
    return;
  }
  copy_job_t job = {dp, sp};
  tpurt_parallel_for(ctx, (int64_t)bytes, (int64_t)1 << 20, copy_chunk, &job);
}
