/* The null HAL driver: the template for a new driver. Every entry point
 * answers UNIMPLEMENTED; a real driver fills them in. */
#include "hal/drivers/null/null_driver.h"

static tpurt_status_t null_device_create(const tpurt_hal_device_params_t* params,
                                         tpurt_hal_device_t** out_device) {
  *out_device = NULL;
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: device_create (chip %d)", params->index);
}

static void null_device_destroy(tpurt_hal_device_t* device) { (void)device; }

static tpurt_status_t null_device_query(tpurt_hal_device_t* device,
                                        tpurt_hal_device_props_t* out_props) {
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: device_query");
}

static tpurt_status_t null_memory_alloc(tpurt_hal_device_t* device, uint64_t bytes,
                                        void** out_ptr) {
  *out_ptr = NULL;
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: memory_alloc");
}

static void null_memory_free(tpurt_hal_device_t* device, void* ptr, uint64_t bytes) {}

static tpurt_status_t null_queue_create(tpurt_hal_device_t* device, const tpurt_hal_queue_params_t* params,
                                        tpurt_hal_queue_t** out_queue) {
  *out_queue = NULL;
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: queue_create");
}

static void null_queue_destroy(tpurt_hal_queue_t* queue) { (void)queue; }

static tpurt_status_t null_queue_submit(tpurt_hal_queue_t* queue, const tpurt_hal_command_t* command) {
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: queue_submit");
}

static uint64_t null_queue_completed(tpurt_hal_queue_t* queue) { return 0; }

static tpurt_status_t null_queue_wait(tpurt_hal_queue_t* queue, uint64_t value, bool interruptible) {
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: queue_wait");
}

static void null_queue_cancel(tpurt_hal_queue_t* queue, tpurt_status_t reason) {}

static tpurt_status_t null_queue_take_error(tpurt_hal_queue_t* queue, uint64_t issuer) {
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: queue_take_error");
}

static bool null_queue_is_current(tpurt_hal_queue_t* queue) { return false; }

static tpurt_status_t null_dispatch_sync(tpurt_hal_device_t* device, tpurt_kernel_fn_t fn, uint32_t op_flags,
                                         const tpurt_op_call_t* call, bool debug) {
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: dispatch_sync");
}

static tpurt_status_t null_executable_load(tpurt_hal_device_t* device,
                                           const tpurt_hal_executable_params_t* params,
                                           tpurt_hal_executable_t** out_executable) {
  *out_executable = NULL;
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: executable_load");
}

static tpurt_status_t null_executable_lookup(tpurt_hal_executable_t* executable, const char* name,
                                             void** out_entry) {
  *out_entry = NULL;
  return TPURT_STATUS(UNIMPLEMENTED, "null driver: executable_lookup");
}

static void null_executable_release(tpurt_hal_executable_t* executable) { (void)executable; }

const tpurt_hal_driver_t tpurt_null_driver = {
    .struct_size = sizeof(tpurt_hal_driver_t),
    .version = TPURT_HAL_VERSION,
    .name = "null",
    .device_create = null_device_create,
    .device_destroy = null_device_destroy,
    .device_query = null_device_query,
    .memory_alloc = null_memory_alloc,
    .memory_free = null_memory_free,
    .memory_largest_free = NULL,
    .memory_protect = NULL,
    .queue_create = null_queue_create,
    .queue_destroy = null_queue_destroy,
    .queue_submit = null_queue_submit,
    .queue_completed = null_queue_completed,
    .queue_wait = null_queue_wait,
    .queue_take_error = null_queue_take_error,
    .queue_is_current = null_queue_is_current,
    .queue_cancel = null_queue_cancel,
    .dispatch_sync = null_dispatch_sync,
    .executable_load = null_executable_load,
    .executable_lookup = null_executable_lookup,
    .executable_release = null_executable_release,
};
