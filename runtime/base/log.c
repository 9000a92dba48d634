/* stderr logging with a level read once from TORCH_TPU_LOG_LEVEL. */
#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Atomic int g_level = -1;

bool tpurt_log_enabled(tpurt_log_level_t level) {
  int l = atomic_load_explicit(&g_level, memory_order_relaxed);
  if (TPURT_UNLIKELY(l < 0)) {
    const char* e = getenv("TORCH_TPU_LOG_LEVEL");
    l = (e && *e) ? atoi(e) : TPURT_LOG_WARNING;
    atomic_store_explicit(&g_level, l, memory_order_relaxed);
  }
  return (int)level <= l;
}

void tpurt_log_write(tpurt_log_level_t level, const char* file, int line, const char* fmt, ...) {
  static const char kTag[] = "EWID";
  const char* base = strrchr(file, '/');
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* One fprintf so lines from different threads do not interleave. */
  fprintf(stderr, "[tpurt %c %s:%d] %s\n", kTag[level & 3], base ? base + 1 : file, line, msg);
}
