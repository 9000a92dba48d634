/* vTPU executables: the vTPU runs host code, so an executable is a host
 * shared object (what compiler/ builds), loaded from the descriptor its
 * caller verified: dlopen of /proc/self/fd/N opens that very file, so nothing
 * can be swapped in between the check and the load. A loaded library stays
 * mapped for the life of the process (entries handed out stay valid). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "hal/drivers/vtpu/vtpu_internal.h"

struct tpurt_hal_executable_t {
  void* lib;
};

tpurt_status_t tpurt_vtpu_executable_load(tpurt_hal_device_t* device, const tpurt_hal_executable_params_t* params,
                                          tpurt_hal_executable_t** out_executable) {
  (void)device;
  *out_executable = NULL;
  if (params->struct_size < sizeof(tpurt_hal_executable_params_t) || params->format != TPURT_HAL_EXECUTABLE_HOST_ELF ||
      params->fd < 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "vtpu: executable_load: not a host shared object descriptor");
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", params->fd);
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return TPURT_STATUS(INVALID_ARGUMENT, "vtpu: executable_load: %s", dlerror());
  tpurt_hal_executable_t* e = malloc(sizeof(*e));
  if (!e) return TPURT_STATUS(RESOURCE_EXHAUSTED, "vtpu: out of host memory loading an executable");
  e->lib = lib;
  *out_executable = e;
  return TPURT_OK;
}

tpurt_status_t tpurt_vtpu_executable_lookup(tpurt_hal_executable_t* e, const char* name, void** out_entry) {
  *out_entry = dlsym(e->lib, name);
  return *out_entry ? TPURT_OK : TPURT_STATUS(NOT_FOUND, "vtpu: executable has no entry %s", name);
}

void tpurt_vtpu_executable_release(tpurt_hal_executable_t* e) {
  free(e); /* the library stays loaded: its entries may still be in use */
}
