/* Reading the process environment (base/env.h). */
#include "base/env.h"

#include <stdlib.h>

bool tpurt_env_switch(_Atomic int* cell, const char* name, bool on_default) {
  int e = atomic_load_explicit(cell, memory_order_relaxed);
  if (e < 0) {
    const char* v = getenv(name);
    e = on_default ? !(v && v[0] == '0') : (v && v[0] == '1');
    atomic_store(cell, e);
  }
  return e != 0;
}

tpurt_status_t tpurt_env_int(const char* name, int lo, int hi, int* out) {
  const char* v = getenv(name);
  if (!v || !*v) return TPURT_OK;
  char* end = NULL;
  long x = strtol(v, &end, 10);
  if (*end || x < lo || x > hi)
    return TPURT_STATUS(INVALID_ARGUMENT, "%s=%s: expected an integer in [%d, %d]", name, v, lo, hi);
  *out = (int)x;
  return TPURT_OK;
}

const char* tpurt_env_str(const char* name) {
  const char* v = getenv(name);
  return v && v[0] ? v : NULL;
}
