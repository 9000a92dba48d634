/* The compiler's executables run on the device: the kernel cache
 * (compiler/cache.h) loads each verified library through the HAL's
 * executable slots of the default chip, installed here when it comes up. */
#include "compiler/cache.h"
#include "exec/device.h"

static void* load(void* user, int fd) {
  tpurt_device_t* d = user;
  tpurt_hal_executable_params_t params = {.struct_size = sizeof(params), .format = TPURT_HAL_EXECUTABLE_HOST_ELF,
                                          .fd = fd};
  tpurt_hal_executable_t* exe = NULL;
  tpurt_status_t s = d->driver->executable_load ? d->driver->executable_load(d->hal, &params, &exe)
                                                : TPURT_STATUS(UNIMPLEMENTED, "the device loads no code");
  tpurt_status_free(s);
  return exe;
}

static void* lookup(void* user, void* exe, const char* name) {
  tpurt_device_t* d = user;
  void* entry = NULL;
  tpurt_status_free(d->driver->executable_lookup(exe, name, &entry));
  return entry;
}

static void release(void* user, void* exe) {
  tpurt_device_t* d = user;
  d->driver->executable_release(exe);
}

void tpurt_exec_loader_install(tpurt_device_t* device) {
  static tpurt_kernel_loader_t loader = {.load = load, .lookup = lookup, .release = release};
  loader.user = device;
  tpurt_kernel_cache_set_loader(&loader);
}
