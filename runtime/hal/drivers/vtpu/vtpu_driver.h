/* The vTPU HAL driver: a chip emulated on host cores. Its HBM is one memfd
 * mapped into this process (pages committed lazily on first touch, released
 * again when a range is freed), so peers in other processes can map it. */
#ifndef TPURT_HAL_DRIVERS_VTPU_VTPU_DRIVER_H_
#define TPURT_HAL_DRIVERS_VTPU_VTPU_DRIVER_H_
#include "hal/hal.h"
extern const tpurt_hal_driver_t tpurt_vtpu_driver;
#endif
