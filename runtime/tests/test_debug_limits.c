/* Debug mode at the process's limit of memory mappings (vm.max_map_count):
 * opening a guarded buffer for a kernel or a copy splits its mapping, and
 * when that fails the op and the copy must fail with a status naming the
 * limit (the kernel not run, the data intact), not fault page after page
 * until the process dies; with mappings to spare again, both work. The test
 * takes the mappings itself (alternate protections over an anonymous range). */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_util.h"
#include "tpurt/debug.h"

static tpurt_device_t* g_dev;

static tpurt_status_t touch(void* p, int64_t n, bool write) {
  tpurt_tensor_t t = {.data = p, .dtype = TPURT_DTYPE_UINT8, .ndim = 1, .sizes = {n}, .strides = {1}};
  tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t}, {.kind = TPURT_ARG_BOOL, .v.b = write}};
  tpurt_op_call_t call = {.name = "_debug_touch", .overload = "", .num_args = 2, .args = args};
  return tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), tpurt_debug_touch_op(), &call);
}

static long max_map_count(void) {
  FILE* f = fopen("/proc/sys/vm/max_map_count", "r");
  long v = 0;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1) v = 0;
    fclose(f);
  }
  return v;
}

/* Maps a range and splits it until mprotect fails: the process is then at
 * its mapping limit. Returns the range (munmap gives the mappings back). */
static void* take_all_mappings(size_t* out_bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (size_t)max_map_count() * 2 + 64;
  *out_bytes = pages * page;
  uint8_t* r = mmap(NULL, *out_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return NULL;
  for (size_t i = 1; i < pages; i += 2)
    if (mprotect(r + i * page, page, PROT_READ) != 0) return errno == ENOMEM ? r : (munmap(r, *out_bytes), NULL);
  munmap(r, *out_bytes);
  return NULL;
}

static void test_open_fails_at_mapping_limit(void) {
  size_t n = 3 * 4096;
  uint8_t* host = malloc(n);
  memset(host, 9, n);
  void* a = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, n, &a));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, NULL, a, host, n));
  size_t bytes = 0;
  void* hog = take_all_mappings(&bytes);
  CHECK(hog != NULL);
  if (!hog) return;
  tpurt_status_t s = touch(a, (int64_t)n, true);
  bool refused = tpurt_status_code(s) == TPURT_STATUS_RESOURCE_EXHAUSTED && strstr(tpurt_status_message(s), "vm.max_map_count") &&
                 strstr(tpurt_status_message(s), "aten::_debug_touch") && strstr(tpurt_status_message(s), "(not run)");
  CHECK(refused);
  if (!refused) fprintf(stderr, "kernel: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  s = tpurt_memcpy_d2h(g_dev, NULL, host, a, n);
  refused = tpurt_status_code(s) == TPURT_STATUS_RESOURCE_EXHAUSTED && strstr(tpurt_status_message(s), "vm.max_map_count");
  CHECK(refused);
  if (!refused) fprintf(stderr, "copy: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  munmap(hog, bytes);
  /* Mappings to spare again: the buffer is as it was (the kernel did not run) and usable. */
  memset(host, 0, n);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, host, a, n));
  CHECK(host[0] == 9 && host[n - 1] == 9);
  CHECK_OK(touch(a, (int64_t)n, true));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, host, a, n));
  CHECK(host[0] == 10 && host[n - 1] == 10);
  tpurt_debug_stats_t st;
  tpurt_debug_stats(&st);
  CHECK(st.violations == 0);
  tpurt_memory_free(g_dev, a);
  free(host);
}

int main(void) {
#if defined(__SANITIZE_ADDRESS__)
  /* The sanitizer's own allocator needs new mappings at any time. */
  fprintf(stderr, "test_debug_limits: skipped under AddressSanitizer\n");
  return test_finish("test_debug_limits");
#endif
  long m = max_map_count();
  if (m <= 0 || m > (1L << 20)) { /* no such limit to reach cheaply */
    fprintf(stderr, "test_debug_limits: skipped (vm.max_map_count = %ld)\n", m);
    return test_finish("test_debug_limits");
  }
  setenv("TORCH_TPU_HBM_BYTES", "64M", 1);
  unsetenv("TORCH_TPU_DEBUG_GUARDS");
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  if (!g_dev) return test_finish("test_debug_limits");
  CHECK_OK(tpurt_exec_mode_set(TPURT_EXEC_DEBUG));
  test_open_fails_at_mapping_limit();
  CHECK_OK(tpurt_exec_mode_set(TPURT_EXEC_STRICT));
  return test_finish("test_debug_limits");
}
