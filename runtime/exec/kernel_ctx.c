/* Kernel context: the services a running kernel may use (parallel_for,
 * scratch memory, the Debug flag).
 * PLACEHOLDER: serial; the runtime-core work replaces this with the chip's
 * compute thread pool. */
#include <stdlib.h>

#include "tpurt/device.h"

struct tpurt_kernel_ctx_t {
  int num_threads;
  bool debug;
  void* scratch[8];
  int num_scratch;
};

void tpurt_parallel_for(tpurt_kernel_ctx_t* ctx, int64_t n, int64_t grain, tpurt_range_fn_t fn,
                        void* user) {
  (void)ctx;
  (void)grain;
  if (n > 0) fn(user, 0, n, 0);
}

int tpurt_kernel_num_threads(const tpurt_kernel_ctx_t* ctx) { return ctx ? ctx->num_threads : 1; }

void* tpurt_kernel_scratch(tpurt_kernel_ctx_t* ctx, size_t bytes) {
  if (ctx->num_scratch == 8) return NULL;
  void* p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
  ctx->scratch[ctx->num_scratch++] = p;
  return p;
}

bool tpurt_kernel_debug(const tpurt_kernel_ctx_t* ctx) { return ctx && ctx->debug; }

tpurt_status_t tpurt_kernel_run(tpurt_kernel_fn_t fn, const tpurt_op_call_t* call) {
  tpurt_kernel_ctx_t ctx = {.num_threads = 1, .debug = false};
  tpurt_status_t s = fn(&ctx, call);
  for (int i = 0; i < ctx.num_scratch; ++i) free(ctx.scratch[i]);
  return s;
}
