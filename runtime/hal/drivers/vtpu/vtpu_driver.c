/* vTPU driver: HBM = one memfd of the chip's capacity, mapped MAP_SHARED and
 * carved by a first-fit coalescing range allocator; page protection on request
 * (Debug mode's guard pages). */
#include "hal/drivers/vtpu/vtpu_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/range_alloc.h"

#define VTPU_ALIGN 512u

struct tpurt_hal_device_t {
  int index;
  int fd;
  uint8_t* base;
  uint64_t bytes;
  pthread_mutex_t lock;
  tpurt_range_alloc_t ranges;
};

static tpurt_status_t vtpu_device_create(const tpurt_hal_device_params_t* params,
                                         tpurt_hal_device_t** out_device) {
  *out_device = NULL;
  uint64_t bytes = (params->hbm_bytes + VTPU_ALIGN - 1) & ~(uint64_t)(VTPU_ALIGN - 1);
  if (bytes == 0) return TPURT_STATUS(INVALID_ARGUMENT, "vtpu: HBM capacity must be > 0");
  tpurt_hal_device_t* d = calloc(1, sizeof(*d));
  if (!d) return TPURT_STATUS(RESOURCE_EXHAUSTED, "vtpu: out of host memory");
  d->index = params->index;
  d->bytes = bytes;
  char name[32];
  snprintf(name, sizeof(name), "tpurt-vtpu%d-hbm", params->index);
  d->fd = memfd_create(name, MFD_CLOEXEC);
  if (d->fd >= 0 && ftruncate(d->fd, (off_t)bytes) != 0) {
    int e = errno;
    close(d->fd);
    free(d);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "vtpu: cannot size HBM memfd to %llu bytes: %s",
                        (unsigned long long)bytes, strerror(e));
  }
  /* MAP_NORESERVE: capacity is a limit, not a commitment; pages appear on
   * first touch. Without memfd (old kernels) fall back to anonymous shared. */
  int flags = MAP_SHARED | MAP_NORESERVE | (d->fd < 0 ? MAP_ANONYMOUS : 0);
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, d->fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    if (d->fd >= 0) close(d->fd);
    free(d);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "vtpu: cannot map %llu bytes of HBM: %s",
                        (unsigned long long)bytes, strerror(e));
  }
  d->base = p;
  pthread_mutex_init(&d->lock, NULL);
  tpurt_status_t s = tpurt_range_alloc_init(&d->ranges, bytes);
  if (s) {
    munmap(d->base, bytes);
    if (d->fd >= 0) close(d->fd);
    free(d);
    return s;
  }
  *out_device = d;
  return TPURT_OK;
}

static void vtpu_device_destroy(tpurt_hal_device_t* d) {
  if (!d) return;
  munmap(d->base, d->bytes);
  if (d->fd >= 0) close(d->fd);
  tpurt_range_alloc_deinit(&d->ranges);
  pthread_mutex_destroy(&d->lock);
  free(d);
}

static tpurt_status_t vtpu_device_query(tpurt_hal_device_t* d, tpurt_hal_device_props_t* out) {
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "vtpu");
  out->hbm_base = d->base;
  out->hbm_bytes = d->bytes;
  out->hbm_fd = d->fd;
  return TPURT_OK;
}

static tpurt_status_t vtpu_memory_alloc(tpurt_hal_device_t* d, uint64_t bytes, void** out_ptr) {
  *out_ptr = NULL;
  bytes = (bytes + VTPU_ALIGN - 1) & ~(uint64_t)(VTPU_ALIGN - 1);
  uint64_t off = 0;
  pthread_mutex_lock(&d->lock);
  bool ok = bytes && tpurt_range_alloc_take(&d->ranges, bytes, VTPU_ALIGN, &off);
  pthread_mutex_unlock(&d->lock);
  if (!ok)
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "vtpu: no free HBM range of %llu bytes",
                        (unsigned long long)bytes);
  *out_ptr = d->base + off;
  return TPURT_OK;
}

static void vtpu_memory_free(tpurt_hal_device_t* d, void* ptr, uint64_t bytes) {
  if (!ptr) return;
  bytes = (bytes + VTPU_ALIGN - 1) & ~(uint64_t)(VTPU_ALIGN - 1);
  uint64_t off = (uint64_t)((uint8_t*)ptr - d->base);
  /* Hand the physical pages back (whole pages inside the range only), so a
   * released segment stops costing host RAM. */
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t lo = (off + page - 1) & ~(page - 1), hi = (off + bytes) & ~(page - 1);
  if (hi > lo) {
    if (d->fd < 0 || fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
                               (off_t)(hi - lo)) != 0)
      madvise(d->base + lo, hi - lo, MADV_REMOVE);
  }
  pthread_mutex_lock(&d->lock);
  tpurt_range_alloc_give(&d->ranges, off, bytes);
  pthread_mutex_unlock(&d->lock);
}

static uint64_t vtpu_memory_largest_free(tpurt_hal_device_t* d) {
  pthread_mutex_lock(&d->lock);
  uint64_t r = tpurt_range_alloc_largest(&d->ranges);
  pthread_mutex_unlock(&d->lock);
  return r;
}

/* Debug mode's guards (exec/debug.c): mprotect; REMAP maps the memfd's pages
 * over the range again, undoing a private page the fault handler put there. */
static tpurt_status_t vtpu_memory_protect(tpurt_hal_device_t* d, void* ptr, uint64_t bytes,
                                          uint32_t access) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t off = (uint64_t)((uint8_t*)ptr - d->base);
  if ((uint8_t*)ptr < d->base || off % page || bytes % page || off > d->bytes || bytes > d->bytes - off)
    return TPURT_STATUS(INVALID_ARGUMENT, "vtpu: memory_protect [%p, +%llu) is not a page-aligned "
                        "range of HBM", ptr, (unsigned long long)bytes);
  if (d->fd < 0)
    return TPURT_STATUS(UNIMPLEMENTED, "vtpu: memory guards need memfd-backed HBM");
  if (bytes == 0) return TPURT_OK;
  if ((access & TPURT_HAL_ACCESS_DISCARD) &&
      fallocate(d->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)bytes) != 0)
    madvise(ptr, bytes, MADV_REMOVE);
  int prot = ((access & TPURT_HAL_ACCESS_READ) ? PROT_READ : 0) |
             ((access & TPURT_HAL_ACCESS_WRITE) ? PROT_READ | PROT_WRITE : 0);
  int rc = 0;
  if (access & TPURT_HAL_ACCESS_REMAP) {
    rc = mmap(ptr, bytes, prot, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, d->fd, (off_t)off) == MAP_FAILED
             ? -1 : 0;
  } else {
    rc = mprotect(ptr, bytes, prot);
  }
  if (rc != 0) {
    int e = errno;
    /* ENOMEM is the process's mapping limit (vm.max_map_count): every
     * protected range splits the mapping, and many guarded ranges reach it. */
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "vtpu: cannot set protection of [%p, +%llu): %s", ptr,
                        (unsigned long long)bytes, strerror(e));
  }
  return TPURT_OK;
}

const tpurt_hal_driver_t tpurt_vtpu_driver = {
    .struct_size = sizeof(tpurt_hal_driver_t),
    .version = TPURT_HAL_VERSION,
    .name = "vtpu",
    .device_create = vtpu_device_create,
    .device_destroy = vtpu_device_destroy,
    .device_query = vtpu_device_query,
    .memory_alloc = vtpu_memory_alloc,
    .memory_free = vtpu_memory_free,
    .memory_largest_free = vtpu_memory_largest_free,
    .memory_protect = vtpu_memory_protect,
};
