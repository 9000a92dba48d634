/* The vTPU's compute pool (vtpu_pool.c): internal to the vtpu driver. */
#ifndef TPURT_HAL_DRIVERS_VTPU_VTPU_POOL_H_
#define TPURT_HAL_DRIVERS_VTPU_VTPU_POOL_H_

#include "hal/kernel_ctx.h"

typedef struct tpurt_pool_t tpurt_pool_t;
/* num_threads counts the caller of parallel_for as thread 0, so the pool
 * starts num_threads - 1 threads of its own. */
/* cpus: NULL, or the host CPU for each thread id (cpus[t] pins pool thread t; cpus[0] is the caller's). */
tpurt_status_t tpurt_pool_create(int chip, int num_threads, const int* cpus, tpurt_pool_t** out_pool);
void tpurt_pool_destroy(tpurt_pool_t* pool);
/* A tpurt_pool_for_fn_t (hal/kernel_ctx.h) over a tpurt_pool_t. */
void tpurt_pool_parallel_for(void* pool, int64_t n, int64_t grain, tpurt_range_fn_t fn, void* user);

#endif /* TPURT_HAL_DRIVERS_VTPU_VTPU_POOL_H_ */
