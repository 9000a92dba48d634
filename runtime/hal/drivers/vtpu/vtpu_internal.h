/* Internal to the vtpu driver: the device its files share, and the entry
 * points vtpu_driver.c's table gathers from vtpu_queue.c and
 * vtpu_executable.c. */
#ifndef TPURT_HAL_DRIVERS_VTPU_VTPU_INTERNAL_H_
#define TPURT_HAL_DRIVERS_VTPU_VTPU_INTERNAL_H_

#include "hal/drivers/vtpu/vtpu_driver.h"

/* The chip's index (thread names). */
int tpurt_vtpu_device_index(tpurt_hal_device_t* device);
/* The host CPUs the chip's compute threads keep to (*n of them: [0] the default queue's worker,
 * [t] the pool's thread t), or NULL (*n = 0) when the scheduler places them. */
const int* tpurt_vtpu_device_cpus(tpurt_hal_device_t* device, int* n);
/* A dispatch context over the chip's compute pool and `scratch`. */
void tpurt_vtpu_kernel_ctx(tpurt_hal_device_t* device, tpurt_scratch_t* scratch, bool debug,
                           tpurt_kernel_ctx_t* out_ctx);

/* vtpu_queue.c */
tpurt_status_t tpurt_vtpu_queue_create(tpurt_hal_device_t* device, const tpurt_hal_queue_params_t* params,
                                       tpurt_hal_queue_t** out_queue);
void tpurt_vtpu_queue_destroy(tpurt_hal_queue_t* queue);
tpurt_status_t tpurt_vtpu_queue_submit(tpurt_hal_queue_t* queue, const tpurt_hal_command_t* command);
uint64_t tpurt_vtpu_queue_completed(tpurt_hal_queue_t* queue);
tpurt_status_t tpurt_vtpu_queue_wait(tpurt_hal_queue_t* queue, uint64_t value, bool interruptible);
tpurt_status_t tpurt_vtpu_queue_take_error(tpurt_hal_queue_t* queue, uint64_t issuer);
void tpurt_vtpu_queue_cancel(tpurt_hal_queue_t* queue, tpurt_status_t reason);
bool tpurt_vtpu_queue_is_current(tpurt_hal_queue_t* queue);

/* vtpu_executable.c */
tpurt_status_t tpurt_vtpu_executable_load(tpurt_hal_device_t* device, const tpurt_hal_executable_params_t* params,
                                          tpurt_hal_executable_t** out_executable);
tpurt_status_t tpurt_vtpu_executable_lookup(tpurt_hal_executable_t* executable, const char* name, void** out_entry);
void tpurt_vtpu_executable_release(tpurt_hal_executable_t* executable);

#endif /* TPURT_HAL_DRIVERS_VTPU_VTPU_INTERNAL_H_ */
