/* vTPU driver: the device. HBM = one memfd of the chip's capacity, mapped
 * MAP_SHARED and carved by a first-fit coalescing range allocator; page
 * protection on request (Debug mode's guard pages); the chip's cores = a
 * compute pool (vtpu_pool.c) every kernel splits its work over. Queues are in
 * vtpu_queue.c, executables in vtpu_executable.c. */
#include "hal/drivers/vtpu/vtpu_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/range_alloc.h"
#include "hal/drivers/vtpu/vtpu_pool.h"

#define VTPU_ALIGN 512u

struct tpurt_hal_device_t {
  int index;
  int fd;
  uint8_t* base;
  uint64_t bytes;
  pthread_mutex_t lock;
  tpurt_range_alloc_t ranges;
  int num_threads;
  int* cpus;      /* the host CPUs of the compute threads (num_threads), or NULL */
  tpurt_pool_t* pool;
  tpurt_poison_t poison; /* what failed or dropped commands should have written */
};

int tpurt_vtpu_device_index(tpurt_hal_device_t* d) { return d->index; }
const int* tpurt_vtpu_device_cpus(tpurt_hal_device_t* d, int* n) {
  *n = d->cpus ? d->num_threads : 0;
  return d->cpus;
}

void tpurt_vtpu_kernel_ctx(tpurt_hal_device_t* d, tpurt_scratch_t* scratch, bool debug, tpurt_kernel_ctx_t* out) {
  out->pool = d->pool;
  out->parallel_for = tpurt_pool_parallel_for;
  out->num_threads = d->num_threads;
  out->debug = debug;
  out->scratch = scratch;
  out->poison = &d->poison;
  out->cancel = NULL;
  out->issuer = 0;
  out->queue_id = 0;
  out->device_index = d->index;
  out->trace_id = 0;
  out->grain_shift = 0;
}

static tpurt_poison_t* vtpu_device_poison(tpurt_hal_device_t* d) { return &d->poison; }

static tpurt_status_t vtpu_dispatch_sync(tpurt_hal_device_t* d, tpurt_kernel_fn_t fn, uint32_t op_flags,
                                         const tpurt_op_call_t* call, bool debug) {
  tpurt_scratch_t scratch;
  tpurt_scratch_init(&scratch);
  tpurt_kernel_ctx_t ctx;
  tpurt_vtpu_kernel_ctx(d, &scratch, debug, &ctx);
  /* Run now, its error returned now (Debug mode raises at the call, as the
   * CPU does), so nothing is poisoned on failure; but it must not compute
   * from poisoned memory, and it makes what it writes good again. */
  tpurt_status_t s = tpurt_poison_check_call(&d->poison, call, op_flags);
  if (!s) {
    s = fn(&ctx, call);
    if (!s) tpurt_poison_clear_call(&d->poison, call);
  }
  tpurt_scratch_deinit(&scratch);
  return s;
}

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
  tpurt_poison_init(&d->poison);
  tpurt_status_t s = tpurt_range_alloc_init(&d->ranges, bytes);
  d->num_threads = params->num_threads > 0 ? params->num_threads : 1;
  if (!s && params->cpus) {
    d->cpus = malloc(sizeof(int) * (size_t)d->num_threads);
    if (d->cpus) memcpy(d->cpus, params->cpus, sizeof(int) * (size_t)d->num_threads);
  }
  if (!s) s = tpurt_pool_create(params->index, d->num_threads, d->cpus, &d->pool);
  if (s) {
    tpurt_range_alloc_deinit(&d->ranges);
    tpurt_poison_deinit(&d->poison);
    pthread_mutex_destroy(&d->lock);
    munmap(d->base, bytes);
    if (d->fd >= 0) close(d->fd);
    free(d->cpus);
    free(d);
    return s;
  }
  *out_device = d;
  return TPURT_OK;
}

static void vtpu_device_destroy(tpurt_hal_device_t* d) {
  if (!d) return;
  tpurt_pool_destroy(d->pool);
  munmap(d->base, d->bytes);
  if (d->fd >= 0) close(d->fd);
  tpurt_range_alloc_deinit(&d->ranges);
  tpurt_poison_deinit(&d->poison);
  pthread_mutex_destroy(&d->lock);
  free(d->cpus);
  free(d);
}

static tpurt_status_t vtpu_device_query(tpurt_hal_device_t* d, tpurt_hal_device_props_t* out) {
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "vtpu");
  out->hbm_base = d->base;
  out->hbm_bytes = d->bytes;
  out->hbm_fd = d->fd;
  out->num_threads = d->num_threads;
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

/* Debug mode's guards (exec/debug/): mprotect; REMAP maps the memfd's pages
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
    .queue_create = tpurt_vtpu_queue_create,
    .queue_destroy = tpurt_vtpu_queue_destroy,
    .queue_submit = tpurt_vtpu_queue_submit,
    .queue_completed = tpurt_vtpu_queue_completed,
    .queue_wait = tpurt_vtpu_queue_wait,
    .queue_take_error = tpurt_vtpu_queue_take_error,
    .queue_is_current = tpurt_vtpu_queue_is_current,
    .queue_cancel = tpurt_vtpu_queue_cancel,
    .device_poison = vtpu_device_poison,
    .dispatch_sync = vtpu_dispatch_sync,
    .executable_load = tpurt_vtpu_executable_load,
    .executable_lookup = tpurt_vtpu_executable_lookup,
    .executable_release = tpurt_vtpu_executable_release,
};
