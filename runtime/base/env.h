/* Internal: reading the process environment. Each variable the runtime knows
 * is read in exactly one place (its module), through these helpers. */
#ifndef TPURT_BASE_ENV_H_
#define TPURT_BASE_ENV_H_

#include <stdatomic.h>
#include <stdint.h>

#include "tpurt/base.h"

/* A process switch kept in *cell: -1 until first asked, then read from the
 * environment variable `name` (on_default: on unless it starts with '0';
 * otherwise off unless it starts with '1'). Setters store 0 or 1 in the cell. */
bool tpurt_env_switch(_Atomic int* cell, const char* name, bool on_default);

/* The variable as an integer in [lo, hi] into *out (left alone when unset or
 * empty); INVALID_ARGUMENT naming the variable when malformed. */
tpurt_status_t tpurt_env_int(const char* name, int lo, int hi, int* out);

/* The variable's value, or NULL when unset or empty. */
const char* tpurt_env_str(const char* name);

#endif /* TPURT_BASE_ENV_H_ */
