/* vTPU executables: the vTPU runs host code, so an executable is a host
 * shared object (what compiler/ builds), loaded from the descriptor its
 * caller verified: dlopen of /proc/self/fd/N opens that very file, so nothing
 * can be swapped in between the check and the load. Released, it is
 * unloaded (its entries are no longer valid). */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hal/drivers/vtpu/vtpu_internal.h"

/* An executable is its dlopen handle (nothing to allocate, nothing to free
 * for one kept for the life of the process). */

tpurt_status_t tpurt_vtpu_executable_load(tpurt_hal_device_t* device, const tpurt_hal_executable_params_t* params,
                                          tpurt_hal_executable_t** out_executable) {
  (void)device;
  *out_executable = NULL;
  if (params->struct_size < sizeof(tpurt_hal_executable_params_t) || params->format != TPURT_HAL_EXECUTABLE_HOST_ELF ||
      params->fd < 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "vtpu: executable_load: not a host shared object descriptor");
  /* glibc returns an already loaded library when the name matches, and a
   * descriptor's number comes back after a close: each load gets a number
   * never named before (a duplicate at or above the last one), so no name
   * repeats. Numbers run out at the descriptor limit; loads then fail. */
  static pthread_mutex_t name_lock = PTHREAD_MUTEX_INITIALIZER;
  static int next_name = 3;
  pthread_mutex_lock(&name_lock);
  int nfd = fcntl(params->fd, F_DUPFD_CLOEXEC, next_name);
  void* lib = NULL;
  const char* err = "no descriptor left to name it";
  if (nfd >= 0) {
    next_name = nfd + 1;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", nfd);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) err = dlerror();
    close(nfd);
  }
  pthread_mutex_unlock(&name_lock);
  if (!lib) return TPURT_STATUS(INVALID_ARGUMENT, "vtpu: executable_load: %s", err);
  *out_executable = (tpurt_hal_executable_t*)lib;
  return TPURT_OK;
}

tpurt_status_t tpurt_vtpu_executable_lookup(tpurt_hal_executable_t* e, const char* name, void** out_entry) {
  *out_entry = dlsym((void*)e, name);
  return *out_entry ? TPURT_OK : TPURT_STATUS(NOT_FOUND, "vtpu: executable has no entry %s", name);
}

void tpurt_vtpu_executable_release(tpurt_hal_executable_t* e) {
  if (e) dlclose((void*)e);
}
