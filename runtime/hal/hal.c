/* The table of compiled-in HAL drivers. */
#include "hal/hal.h"

#include <string.h>

#include "hal/drivers/null/null_driver.h"
#include "hal/drivers/vtpu/vtpu_driver.h"

const tpurt_hal_driver_t* tpurt_hal_driver_find(const char* name) {
  static const tpurt_hal_driver_t* const kDrivers[] = {&tpurt_vtpu_driver, &tpurt_null_driver};
  if (!name || !*name) name = "vtpu";
  for (size_t i = 0; i < sizeof(kDrivers) / sizeof(kDrivers[0]); ++i) {
    const tpurt_hal_driver_t* d = kDrivers[i];
    if (strcmp(d->name, name) == 0 && d->struct_size >= sizeof(tpurt_hal_driver_t) &&
        d->version == TPURT_HAL_VERSION)
      return d;
  }
  return NULL;
}
