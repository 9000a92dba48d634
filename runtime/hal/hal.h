/* The device HAL: the small interface a chip driver implements so exec/
 * (queues, allocator, events) never depends on how a chip is provided.
 * Drivers live in hal/drivers/<name>/ (vtpu: a chip emulated on host cores;
 * null: the template that answers UNIMPLEMENTED). Internal header: no ABI
 * promise beyond the struct_size/version check below. */
#ifndef TPURT_HAL_HAL_H_
#define TPURT_HAL_HAL_H_

#include "tpurt/base.h"

#define TPURT_HAL_VERSION 1u

typedef struct tpurt_hal_device_t tpurt_hal_device_t; /* owned by its driver */

typedef struct tpurt_hal_device_params_t {
  int index;           /* chip index within this process */
  uint64_t hbm_bytes;  /* device memory capacity to provide */
} tpurt_hal_device_params_t;

typedef struct tpurt_hal_device_props_t {
  char name[32];       /* "vtpu" */
  void* hbm_base;      /* host-visible base of device memory (vtpu), or NULL */
  uint64_t hbm_bytes;  /* capacity */
  int hbm_fd;          /* shareable handle to device memory (memfd), or -1 */
} tpurt_hal_device_props_t;

typedef struct tpurt_hal_driver_t {
  size_t struct_size;  /* sizeof(tpurt_hal_driver_t) the driver was built with */
  uint32_t version;    /* TPURT_HAL_VERSION */
  const char* name;
  tpurt_status_t (*device_create)(const tpurt_hal_device_params_t* params,
                                  tpurt_hal_device_t** out_device);
  void (*device_destroy)(tpurt_hal_device_t* device);
  tpurt_status_t (*device_query)(tpurt_hal_device_t* device, tpurt_hal_device_props_t* out_props);
  /* Takes `bytes` (a multiple of 512) of device memory, 512-byte aligned.
   * RESOURCE_EXHAUSTED when no free range is large enough. Thread-safe. */
  tpurt_status_t (*memory_alloc)(tpurt_hal_device_t* device, uint64_t bytes, void** out_ptr);
  /* Gives back device memory: a range memory_alloc returned or any 512-byte
   * aligned piece of one (the caching allocator trims free segment ends).
   * Its physical pages may be released. Thread-safe. */
  void (*memory_free)(tpurt_hal_device_t* device, void* ptr, uint64_t bytes);
  /* Optional (NULL: unknown, treated as 0): the largest range memory_alloc
   * could return now. */
  uint64_t (*memory_largest_free)(tpurt_hal_device_t* device);
  /* Optional (NULL: not supported; Debug mode then runs without memory
   * guards). Sets how host code may access a page-aligned range of device
   * memory (TPURT_HAL_ACCESS_* bits; 0 = no access: a touch faults). With
   * TPURT_HAL_ACCESS_DISCARD the contents are no longer needed and the
   * physical pages may be released (they read as zero afterwards); with
   * TPURT_HAL_ACCESS_REMAP the device's own pages are mapped over the range
   * again first (undoing a page something else mapped there).
   * Appended for Debug mode's guard pages (exec/debug.c). Thread-safe. */
  tpurt_status_t (*memory_protect)(tpurt_hal_device_t* device, void* ptr, uint64_t bytes,
                                   uint32_t access);
} tpurt_hal_driver_t;

enum {
  TPURT_HAL_ACCESS_READ = 1u << 0,
  TPURT_HAL_ACCESS_WRITE = 1u << 1,
  TPURT_HAL_ACCESS_DISCARD = 1u << 2,
  TPURT_HAL_ACCESS_REMAP = 1u << 3,
};

/* Drivers compiled in, by name ("vtpu", "null"); NULL if absent. */
const tpurt_hal_driver_t* tpurt_hal_driver_find(const char* name);

#endif /* TPURT_HAL_HAL_H_ */
