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
};
