/* Device memory: alignment, reuse, split/merge, the exact capacity limit,
 * out-of-memory messages and recovery, stats, empty_cache, stream-ordered
 * frees, record_queue and is_device_ptr. Runs on a 64 MiB chip. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

#define MiB ((size_t)1 << 20)
#define CAP (64 * MiB)

static tpurt_device_t* g_dev;

static tpurt_memory_stats_t stats(void) {
  tpurt_memory_stats_t s;
  memset(&s, 0xff, sizeof s);
  CHECK_OK(tpurt_memory_stats(g_dev, &s));
  return s;
}

static void test_basic(void) {
  tpurt_memory_stats_t s0 = stats();
  CHECK(s0.capacity_bytes == CAP);
  CHECK(s0.allocated_bytes == 0);
  void* p[6] = {0};
  size_t sizes[6] = {1, 0, 513, 4096, 3 * MiB + 5, 0};
  for (int i = 0; i < 6; ++i) {
    CHECK_OK(tpurt_memory_allocate(g_dev, NULL, sizes[i], &p[i]));
    CHECK(p[i] != NULL);
    CHECK(((uintptr_t)p[i] & 511) == 0);
    CHECK(tpurt_memory_is_device_ptr(g_dev, p[i]));
    CHECK(tpurt_memory_is_device_ptr(NULL, p[i]));
  }
  CHECK(p[1] != p[5]); /* zero-byte allocations are unique */
  tpurt_memory_stats_t s1 = stats();
  CHECK(s1.allocated_bytes == 512 + 512 + 1024 + 4096 + (3 * MiB + 512) + 512);
  CHECK(s1.num_allocs == s0.num_allocs + 6);
  /* Device memory is usable from the host side of the emulator. */
  memset(p[4], 0x5a, sizes[4]);
  CHECK(((uint8_t*)p[4])[sizes[4] - 1] == 0x5a);
  int on_stack = 0;
  void* heap = malloc(16);
  CHECK(!tpurt_memory_is_device_ptr(g_dev, &on_stack));
  CHECK(!tpurt_memory_is_device_ptr(g_dev, heap));
  CHECK(!tpurt_memory_is_device_ptr(g_dev, NULL));
  free(heap);
  for (int i = 0; i < 6; ++i) tpurt_memory_free(g_dev, p[i]);
  tpurt_memory_free(g_dev, NULL);
  tpurt_memory_stats_t s2 = stats();
  CHECK(s2.allocated_bytes == 0);
  CHECK(s2.num_frees == s0.num_frees + 6);
  CHECK(s2.peak_allocated_bytes >= s1.allocated_bytes);
  CHECK_OK(tpurt_device_synchronize(g_dev));
}

static void test_capacity_and_oom(void) {
  CHECK_OK(tpurt_memory_empty_cache(g_dev));
  void* all = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, CAP, &all)); /* exactly the capacity fits */
  void* one = NULL;
  tpurt_memory_stats_t s0 = stats();
  tpurt_status_t s = tpurt_memory_allocate(g_dev, NULL, 1, &one);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_RESOURCE_EXHAUSTED);
  CHECK(one == NULL);
  CHECK(s && strcmp(tpurt_status_message(s),
                    "vTPU out of memory: tried to allocate 1 bytes (1 bytes); 0 bytes (0 bytes) free "
                    "of 64.00 MiB capacity") == 0);
  if (s) printf("OOM message: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  CHECK(stats().num_ooms == s0.num_ooms + 1);
  tpurt_memory_free(g_dev, all);

  /* Over capacity: fails with the requested and free bytes named. */
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 12 * MiB + MiB / 2, &one));
  s = tpurt_memory_allocate(g_dev, NULL, (size_t)3 << 29, &all);
  CHECK(s && strcmp(tpurt_status_message(s),
                    "vTPU out of memory: tried to allocate 1.50 GiB (1610612736 bytes); 51.50 MiB "
                    "(54001664 bytes) free of 64.00 MiB capacity") == 0);
  if (s) printf("OOM message: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  s = tpurt_memory_allocate(g_dev, NULL, CAP + 1, &all);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_RESOURCE_EXHAUSTED);
  tpurt_status_free(s);
  /* ... and the device stays usable. */
  void* again = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 51 * MiB, &again));
  tpurt_memory_free(g_dev, again);
  tpurt_memory_free(g_dev, one);
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, CAP, &again));
  tpurt_memory_free(g_dev, again);

  /* Filling with 1 MiB blocks reaches the capacity exactly. */
  void* blocks[64];
  int got = 0;
  for (int i = 0; i < 64; ++i) {
    s = tpurt_memory_allocate(g_dev, NULL, MiB, &blocks[i]);
    if (s) { tpurt_status_free(s); break; }
    ++got;
  }
  CHECK(got == 64);
  CHECK(stats().allocated_bytes == CAP);
  s = tpurt_memory_allocate(g_dev, NULL, 512, &one);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_RESOURCE_EXHAUSTED);
  tpurt_status_free(s);
  uint64_t fr = 1, tot = 0;
  CHECK_OK(tpurt_memory_get_info(g_dev, &fr, &tot));
  CHECK(fr == 0 && tot == CAP);
  for (int i = 0; i < got; ++i) tpurt_memory_free(g_dev, blocks[i]);
  CHECK(stats().allocated_bytes == 0);
  CHECK_OK(tpurt_memory_get_info(g_dev, &fr, &tot));
  CHECK(fr == CAP);
}

/* A kernel that blocks its queue until the test opens the gate. */
static _Atomic int g_gate;
static tpurt_status_t k_gate(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  while (!atomic_load(&g_gate)) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return TPURT_OK;
}
static const tpurt_op_def_t op_gate = {"gate", k_gate, k_gate, 0};
static void block_queue(tpurt_queue_t* q) {
  atomic_store(&g_gate, 0);
  tpurt_op_call_t call = {.name = "gate"};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_gate, &call));
}

static void* open_gate_later(void* arg) {
  struct timespec ts = {0, 20000000};
  nanosleep(&ts, NULL);
  atomic_store(&g_gate, 1);
  return NULL;
}

static void test_reuse_split_merge(void) {
  CHECK_OK(tpurt_memory_empty_cache(g_dev));
  tpurt_memory_stats_t s0 = stats();
  CHECK(s0.reserved_bytes == 0 && s0.num_segments == 0);
  void *x, *y, *z, *w;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 512, &x));
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 300, &y));
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 512, &z));
  /* Split from one 2 MiB small segment, lowest address first. */
  CHECK((uint8_t*)y == (uint8_t*)x + 512 && (uint8_t*)z == (uint8_t*)y + 512);
  tpurt_memory_stats_t s1 = stats();
  CHECK(s1.reserved_bytes == 2 * MiB && s1.num_segments == 1);
  CHECK(s1.allocated_bytes == 1536);
  /* Reuse: the same size comes back at the same place at once. */
  tpurt_memory_free(g_dev, y);
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 512, &w));
  CHECK(w == y);
  /* Merge: freeing neighbours makes one 1 KiB block, the best fit for 1 KiB. */
  tpurt_memory_free(g_dev, w);
  tpurt_memory_free(g_dev, x);
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 1024, &w));
  CHECK(w == x);
  tpurt_memory_free(g_dev, w);
  tpurt_memory_free(g_dev, z);
  /* Everything merged back: a whole-segment allocation fits in place. */
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, MiB, &w));
  CHECK(w == x);
  CHECK(stats().num_segments == 1);
  tpurt_memory_free(g_dev, w);

  /* Large pool: < 10 MiB takes a 20 MiB segment; 11 MiB then best-fits the
   * 12 MiB left, and its 1 MiB remainder is not split off (PyTorch's rule). */
  void *l1, *l2, *l3;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 3 * MiB, &l1));
  CHECK(stats().reserved_bytes == 22 * MiB);
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 5 * MiB, &l2));
  CHECK((uint8_t*)l2 == (uint8_t*)l1 + 3 * MiB);
  CHECK(stats().reserved_bytes == 22 * MiB);
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 11 * MiB, &l3));
  tpurt_memory_stats_t s2 = stats();
  CHECK(s2.reserved_bytes == 22 * MiB && s2.num_segments == 2);
  CHECK(s2.allocated_bytes == 3 * MiB + 5 * MiB + 12 * MiB);
  CHECK(s2.peak_reserved_bytes >= 22 * MiB);
  void* l4;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 11 * MiB, &l4)); /* a 12 MiB segment */
  CHECK(stats().reserved_bytes == 34 * MiB && stats().num_segments == 3);
  tpurt_memory_free(g_dev, l4);
  tpurt_memory_free(g_dev, l1);
  tpurt_memory_free(g_dev, l2);
  tpurt_memory_free(g_dev, l3);
  tpurt_memory_stats_t s3 = stats();
  CHECK(s3.allocated_bytes == 0 && s3.reserved_bytes == 34 * MiB);
  /* empty_cache hands whole free segments back. */
  CHECK_OK(tpurt_memory_empty_cache(g_dev));
  tpurt_memory_stats_t s4 = stats();
  CHECK(s4.reserved_bytes == 0 && s4.num_segments == 0);
  tpurt_memory_reset_peak(g_dev);
  CHECK(stats().peak_reserved_bytes == 0 && stats().peak_allocated_bytes == 0);
}

static void test_queue_pools(void) {
  tpurt_queue_t* dq = tpurt_device_default_queue(g_dev);
  tpurt_queue_t* q2 = NULL;
  CHECK_OK(tpurt_queue_create(g_dev, 0, &q2));
  /* A block freed on the default queue is not handed to another queue. */
  void *a, *b, *c;
  CHECK_OK(tpurt_memory_allocate(g_dev, dq, 4096, &a));
  tpurt_memory_free(g_dev, a);
  CHECK_OK(tpurt_memory_allocate(g_dev, q2, 4096, &b));
  CHECK(b != a);
  CHECK_OK(tpurt_memory_allocate(g_dev, dq, 4096, &c));
  CHECK(c == a);

  /* Stream-ordered: reused at once on its own queue even while that queue is
   * busy (its queued work runs before any new work). */
  block_queue(dq);
  tpurt_memory_free(g_dev, c);
  CHECK_OK(tpurt_memory_allocate(g_dev, dq, 4096, &c));
  CHECK(c == a);

  /* record_queue: used by q2 too, so not reused until q2 passes the free. */
  block_queue(q2);
  CHECK_OK(tpurt_memory_record_queue(g_dev, c, q2));
  CHECK_OK(tpurt_memory_record_queue(g_dev, c, q2)); /* twice is fine */
  CHECK_OK(tpurt_memory_record_queue(g_dev, c, dq)); /* its own queue: no-op */
  tpurt_memory_free(g_dev, c);
  void* d = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, dq, 4096, &d));
  CHECK(d != a);
  CHECK(stats().allocated_bytes == 2 * 4096); /* b, d: c counts as freed already */
  atomic_store(&g_gate, 1);
  CHECK_OK(tpurt_device_synchronize(g_dev));
  void* e = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, dq, 4096, &e));
  CHECK(e == a);
  CHECK_STATUS(tpurt_memory_record_queue(g_dev, (uint8_t*)e + 512, q2), INVALID_ARGUMENT);
  int host = 0;
  CHECK_STATUS(tpurt_memory_record_queue(g_dev, &host, q2), INVALID_ARGUMENT);
  tpurt_memory_free(g_dev, d);
  tpurt_memory_free(g_dev, e);

  /* A queue going away hands its live blocks' segment to the default queue and
   * returns its free segments. */
  tpurt_queue_t* q3 = NULL;
  CHECK_OK(tpurt_queue_create(g_dev, 0, &q3));
  void *p3, *r3;
  CHECK_OK(tpurt_memory_allocate(g_dev, q3, 2 * MiB + 1, &p3));
  CHECK_OK(tpurt_memory_allocate(g_dev, q3, 100, &r3));
  CHECK_OK(tpurt_memory_record_queue(g_dev, b, q3));
  tpurt_memory_free(g_dev, r3);
  uint64_t before = stats().reserved_bytes;
  tpurt_queue_release(q3); /* r3's small segment is free: returned */
  CHECK(stats().reserved_bytes == before - 2 * MiB);
  tpurt_memory_free(g_dev, p3);
  tpurt_memory_free(g_dev, b);
  void* p4;
  CHECK_OK(tpurt_memory_allocate(g_dev, dq, 2 * MiB + 1, &p4));
  CHECK(p4 == p3); /* now cached for the default queue */
  tpurt_memory_free(g_dev, p4);

  /* Memory cached by another queue is given back when this one needs it
   * (after that queue has finished its work). */
  CHECK_OK(tpurt_memory_allocate(g_dev, q2, 40 * MiB, &p4));
  block_queue(q2);
  tpurt_memory_free(g_dev, p4); /* cached for q2, maybe in use by its queued work */
  pthread_t opener;
  pthread_create(&opener, NULL, open_gate_later, NULL);
  void* p5 = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, dq, 40 * MiB, &p5)); /* waits for q2 */
  CHECK(atomic_load(&g_gate) == 1);
  pthread_join(opener, NULL);
  tpurt_memory_free(g_dev, p5);
  tpurt_queue_release(q2);
  CHECK_OK(tpurt_memory_empty_cache(g_dev));
  CHECK(stats().allocated_bytes == 0 && stats().reserved_bytes == 0);
}

/* Many threads allocating and freeing: no block handed out twice, stats exact. */
#define ST_THREADS 4
#define ST_ITERS 3000
static _Atomic int g_stress_bad;
static void* stress_main(void* arg) {
  uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  void* live[16] = {0};
  size_t sz[16] = {0};
  for (int it = 0; it < ST_ITERS; ++it) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    int k = (int)(seed % 16);
    if (live[k]) {
      /* Our stamp must still be there: nobody else got this block. */
      if (*(uint64_t*)live[k] != (uint64_t)(uintptr_t)live[k]) atomic_store(&g_stress_bad, 1);
      tpurt_memory_free(g_dev, live[k]);
      live[k] = NULL;
    } else {
      sz[k] = (size_t)(seed >> 20) % (seed & 1 ? 4096 : 3 * MiB) + 8;
      tpurt_status_t s = tpurt_memory_allocate(g_dev, NULL, sz[k], &live[k]);
      if (s) { live[k] = NULL; tpurt_status_free(s); continue; }
      *(uint64_t*)live[k] = (uint64_t)(uintptr_t)live[k];
    }
  }
  for (int k = 0; k < 16; ++k) tpurt_memory_free(g_dev, live[k]);
  return NULL;
}

static void test_stress(void) {
  pthread_t th[ST_THREADS];
  tpurt_memory_stats_t s0 = stats();
  for (int t = 0; t < ST_THREADS; ++t) pthread_create(&th[t], NULL, stress_main, (void*)(uintptr_t)(t + 1));
  for (int t = 0; t < ST_THREADS; ++t) pthread_join(th[t], NULL);
  tpurt_memory_stats_t s1 = stats();
  CHECK(atomic_load(&g_stress_bad) == 0);
  CHECK(s1.allocated_bytes == 0);
  CHECK(s1.num_allocs - s0.num_allocs == s1.num_frees - s0.num_frees);
  CHECK(s1.reserved_bytes <= CAP);
  CHECK_OK(tpurt_memory_empty_cache(g_dev));
  CHECK(stats().reserved_bytes == 0);
}

int main(void) {
  setenv("TORCH_TPU_HBM_BYTES", "64M", 1);
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  if (!g_dev) return test_finish("test_memory");
  test_basic();
  test_capacity_and_oom();
  test_reuse_split_merge();
  test_queue_pools();
  test_stress();
  return test_finish("test_memory");
}
