/* A chip's compute pool: the threads tpurt_parallel_for splits a kernel over.
 * The thread calling parallel_for (normally a queue worker) is thread 0 and
 * works too; pool threads spin briefly after a job (kernels come back to back)
 * and then sleep on a futex, so an idle chip costs no CPU. */
#include <stdlib.h>

#include "base/futex.h"
#include "exec/exec_internal.h"

/* How long an idle pool thread polls for the next job before sleeping.
 * Short: on small machines the host thread needs the core back. */
#ifndef POOL_SPIN_NS
#define POOL_SPIN_NS 20000u
#endif

struct tpurt_pool_t {
  int num_threads; /* including the caller */
  pthread_t* threads;
  _Atomic uint32_t busy;     /* one parallel_for at a time owns the pool */
  _Atomic uint32_t gen;      /* job generation; workers sleep on it */
  _Atomic uint32_t sleepers;
  _Atomic int32_t pending;   /* pool threads that have not finished the job */
  _Atomic uint32_t done_word;
  _Atomic uint32_t caller_waiting;
  _Atomic bool stop;
  /* The job (written by the caller before bumping gen). */
  tpurt_range_fn_t fn;
  void* user;
  int64_t n;
  int tasks;
};

typedef struct pool_thread_arg_t {
  tpurt_pool_t* pool;
  int tid;
} pool_thread_arg_t;

/* Set while running a parallel_for chunk: a nested parallel_for runs inline. */
static _Thread_local bool tls_in_parallel;

static void run_task(tpurt_pool_t* p, int tid) {
  int64_t chunk = p->n / p->tasks, rem = p->n % p->tasks;
  int64_t begin = tid * chunk + (tid < rem ? tid : rem);
  int64_t end = begin + chunk + (tid < rem ? 1 : 0);
  if (end > begin) p->fn(p->user, begin, end, tid);
}

static void* pool_thread_main(void* varg) {
  pool_thread_arg_t arg = *(pool_thread_arg_t*)varg;
  free(varg);
  tpurt_pool_t* p = arg.pool;
  tls_in_parallel = true;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
    if (g == seen) {
      uint64_t t0 = tpurt_now_ns();
      for (unsigned i = 1;; ++i) {
        tpurt_spin_step();
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) break;
        if ((i & 7) == 0 && tpurt_now_ns() - t0 > POOL_SPIN_NS) break;
      }
      while (g == seen) {
        atomic_fetch_add(&p->sleepers, 1);
        g = atomic_load(&p->gen);
        if (g == seen) tpurt_futex_wait(&p->gen, seen);
        atomic_fetch_sub(&p->sleepers, 1);
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
      }
    }
    if (atomic_load(&p->stop)) break;
    seen = g;
    if (arg.tid < p->tasks) run_task(p, arg.tid);
    if (atomic_fetch_sub(&p->pending, 1) == 1) {
      atomic_fetch_add(&p->done_word, 1);
      if (atomic_load(&p->caller_waiting)) tpurt_futex_wake_all(&p->done_word);
    }
  }
  return NULL;
}

tpurt_status_t tpurt_pool_create(int num_threads, tpurt_pool_t** out_pool) {
  *out_pool = NULL;
  if (num_threads < 1) num_threads = 1;
  tpurt_pool_t* p = calloc(1, sizeof(*p));
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
  p->num_threads = num_threads;
  p->threads = calloc((size_t)num_threads, sizeof(pthread_t));
  if (!p->threads) {
    free(p);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (int t = 1; t < num_threads; ++t) {
    pool_thread_arg_t* a = malloc(sizeof(*a));
    int rc = a ? 0 : -1;
    if (a) {
      *a = (pool_thread_arg_t){p, t};
      rc = pthread_create(&p->threads[t], NULL, pool_thread_main, a);
      if (rc) free(a);
    }
    if (rc) {
      /* Run with the threads we got rather than fail the chip. */
      p->num_threads = t;
      break;
    }
  }
  *out_pool = p;
  return TPURT_OK;
}

void tpurt_pool_destroy(tpurt_pool_t* p) {
  if (!p) return;
  atomic_store(&p->stop, true);
  atomic_fetch_add(&p->gen, 1);
  tpurt_futex_wake_all(&p->gen);
  for (int t = 1; t < p->num_threads; ++t) pthread_join(p->threads[t], NULL);
  free(p->threads);
  free(p);
}

void tpurt_pool_parallel_for(tpurt_pool_t* p, int64_t n, int64_t grain, tpurt_range_fn_t fn,
                             void* user) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t max_tasks = n / grain;
  int tasks = p ? p->num_threads : 1;
  if (max_tasks < tasks) tasks = (int)(max_tasks < 1 ? 1 : max_tasks);
  /* Inline when there is nothing to split, when nested inside a chunk, or when
   * another queue's kernel holds the pool (it is one chip's cores). */
  uint32_t expected = 0;
  if (tasks <= 1 || tls_in_parallel ||
      !atomic_compare_exchange_strong(&p->busy, &expected, 1)) {
    fn(user, 0, n, 0);
    return;
  }
  p->fn = fn;
  p->user = user;
  p->n = n;
  p->tasks = tasks;
  /* Every pool thread acknowledges every job, so none can lag a generation
   * behind and read the next job's fields half-written. */
  atomic_store(&p->pending, p->num_threads - 1);
  atomic_fetch_add(&p->gen, 1);
  if (atomic_load(&p->sleepers)) tpurt_futex_wake_all(&p->gen);

  tls_in_parallel = true;
  run_task(p, 0);
  tls_in_parallel = false;

  if (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
    uint64_t t0 = tpurt_now_ns();
    for (unsigned i = 1; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; ++i) {
      tpurt_spin_step();
      if ((i & 7) == 0 && tpurt_now_ns() - t0 > POOL_SPIN_NS) {
        atomic_store(&p->caller_waiting, 1);
        uint32_t w = atomic_load(&p->done_word);
        if (atomic_load(&p->pending) != 0) tpurt_futex_wait(&p->done_word, w);
        atomic_store(&p->caller_waiting, 0);
      }
    }
  }
  atomic_store_explicit(&p->busy, 0, memory_order_release);
}
