/* The null HAL driver: compiles, answers UNIMPLEMENTED everywhere. Copy this
 * folder to start a new driver. */
#ifndef TPURT_HAL_DRIVERS_NULL_NULL_DRIVER_H_
#define TPURT_HAL_DRIVERS_NULL_NULL_DRIVER_H_
#include "hal/hal.h"
extern const tpurt_hal_driver_t tpurt_null_driver;
#endif
