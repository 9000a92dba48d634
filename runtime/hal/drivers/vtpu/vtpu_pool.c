/* The vTPU's compute pool: the chip's cores, the threads tpurt_parallel_for
 * splits a kernel over.
 *
 * The range is cut into one task per logical thread id (tid 0..T-1), always
 * the same cut for the same (n, grain, T), so per-tid partial results are
 * deterministic. The calling thread (normally a queue worker) runs task 0,
 * then runs itself — under their own tid — any task whose pool thread has not
 * claimed it yet: on a loaded machine a descheduled helper then costs
 * nothing instead of stalling the whole kernel. Helpers join a job through
 * one atomic word (generation | closed | active count), so one that wakes
 * late can never read the next job half-written. Idle helpers spin briefly
 * (yielding) and then sleep on a futex, so an idle chip costs no CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/thread.h"
#include "hal/drivers/vtpu/vtpu_pool.h"

/* How long an idle pool thread polls for the next job before sleeping. */
#ifndef POOL_SPIN_NS
#define POOL_SPIN_NS 20000u
#endif

#define STATE_CLOSED (1ull << 31)
#define STATE_ACTIVE_MASK (STATE_CLOSED - 1)
#define STATE_GEN(s) ((uint32_t)((s) >> 32))

typedef struct task_claim_t {
  _Alignas(64) _Atomic uint32_t claimed;
} task_claim_t;

struct tpurt_pool_t {
  int num_threads; /* including the caller */
  pthread_t* threads;
  task_claim_t* claims; /* one per tid */
  _Atomic uint32_t busy;     /* one parallel_for at a time owns the pool */
  _Alignas(64) _Atomic uint64_t state; /* generation << 32 | closed | active helpers */
  _Atomic uint32_t wake_word; /* = generation; idle helpers sleep on it */
  _Atomic uint32_t sleepers;
  _Alignas(64) _Atomic uint32_t done_word;
  _Atomic uint32_t caller_waiting;
  _Atomic bool stop;
  /* The job: written by the caller before the generation is published and
   * left alone until every helper that joined has left. */
  tpurt_range_fn_t fn;
  void* user;
  int64_t n;
  int tasks;
};

typedef struct pool_thread_arg_t {
  tpurt_pool_t* pool;
  int tid;
} pool_thread_arg_t;

/* Set while running a parallel_for task: a nested parallel_for runs inline. */
static _Thread_local bool tls_in_parallel;

static void run_task(tpurt_pool_t* p, int tid) {
  int64_t chunk = p->n / p->tasks, rem = p->n % p->tasks;
  int64_t begin = tid * chunk + (tid < rem ? tid : rem);
  int64_t end = begin + chunk + (tid < rem ? 1 : 0);
  if (end > begin) p->fn(p->user, begin, end, tid);
}

static bool claim(tpurt_pool_t* p, int tid) {
  uint32_t expected = 0;
  return atomic_compare_exchange_strong(&p->claims[tid].claimed, &expected, 1);
}

/* Blocks until the generation differs from `seen` (or stop). */
static void wait_for_job(tpurt_pool_t* p, uint32_t seen) {
  uint64_t t0 = tpurt_now_ns();
  for (unsigned i = 1; atomic_load_explicit(&p->wake_word, memory_order_acquire) == seen; ++i) {
    if (atomic_load(&p->stop)) return;
    if ((i & 7) != 0 || tpurt_now_ns() - t0 < POOL_SPIN_NS) {
      tpurt_spin_step();
      continue;
    }
    atomic_fetch_add(&p->sleepers, 1);
    if (atomic_load(&p->wake_word) == seen && !atomic_load(&p->stop))
      tpurt_futex_wait(&p->wake_word, seen);
    atomic_fetch_sub(&p->sleepers, 1);
  }
}

static void* pool_thread_main(void* varg) {
  pool_thread_arg_t arg = *(pool_thread_arg_t*)varg;
  free(varg);
  tpurt_pool_t* p = arg.pool;
  tls_in_parallel = true;
  uint32_t seen = 0;
  for (;;) {
    wait_for_job(p, seen);
    if (atomic_load(&p->stop)) break;
    uint64_t s = atomic_load(&p->state);
    seen = STATE_GEN(s);
    /* Join the job unless the caller has already closed it (we are late). */
    bool joined = false;
    while (!(s & STATE_CLOSED) && STATE_GEN(s) == seen) {
      if (atomic_compare_exchange_weak(&p->state, &s, s + 1)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    if (arg.tid < p->tasks && claim(p, arg.tid)) run_task(p, arg.tid);
    uint64_t after = atomic_fetch_sub(&p->state, 1) - 1;
    if ((after & STATE_CLOSED) && (after & STATE_ACTIVE_MASK) == 0) {
      atomic_fetch_add(&p->done_word, 1);
      if (atomic_load(&p->caller_waiting)) tpurt_futex_wake_all(&p->done_word);
    }
  }
  return NULL;
}

tpurt_status_t tpurt_pool_create(int chip, int num_threads, const int* cpus, tpurt_pool_t** out_pool) {
  *out_pool = NULL;
  if (num_threads < 1) num_threads = 1;
  tpurt_pool_t* p = aligned_alloc(64, (sizeof(*p) + 63) & ~(size_t)63);
  if (!p) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
  memset(p, 0, sizeof(*p));
  p->num_threads = num_threads;
  p->threads = calloc((size_t)num_threads, sizeof(pthread_t));
  p->claims = aligned_alloc(64, sizeof(task_claim_t) * (size_t)num_threads);
  if (!p->threads || !p->claims) {
    free(p->threads);
    free(p->claims);
    free(p);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory");
  }
  memset(p->claims, 0, sizeof(task_claim_t) * (size_t)num_threads);
  for (int t = 1; t < num_threads; ++t) {
    pool_thread_arg_t* a = malloc(sizeof(*a));
    int rc = a ? 0 : -1;
    if (a) {
      *a = (pool_thread_arg_t){p, t};
      char name[32]; /* cut to 15 characters by the thread helper */
      snprintf(name, sizeof(name), "tpu%d-pool%d", chip, t);
      rc = tpurt_thread_start(&p->threads[t], pool_thread_main, a, name);
      if (rc) free(a);
      else if (cpus && tpurt_thread_pin(p->threads[t], &cpus[t], 1) != 0)
        TPURT_LOG(WARNING, "vtpu: cannot keep %s on host CPU %d; the scheduler places it", name, cpus[t]);
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
  atomic_fetch_add(&p->wake_word, 1);
  tpurt_futex_wake_all(&p->wake_word);
  for (int t = 1; t < p->num_threads; ++t) pthread_join(p->threads[t], NULL);
  free(p->threads);
  free(p->claims);
  free(p);
}

void tpurt_pool_parallel_for(void* pool, int64_t n, int64_t grain, tpurt_range_fn_t fn, void* user) {
  tpurt_pool_t* p = pool;
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t max_tasks = n / grain;
  int tasks = p ? p->num_threads : 1;
  if (max_tasks < tasks) tasks = (int)(max_tasks < 1 ? 1 : max_tasks);
  /* Inline when there is nothing to split, when nested inside a task, or when
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
  for (int t = 0; t < tasks; ++t) atomic_store_explicit(&p->claims[t].claimed, 0, memory_order_relaxed);
  uint32_t gen = STATE_GEN(atomic_load(&p->state)) + 1;
  atomic_store(&p->state, (uint64_t)gen << 32); /* open, no helpers yet */
  atomic_store(&p->wake_word, gen);
  if (atomic_load(&p->sleepers)) tpurt_futex_wake_all(&p->wake_word);

  tls_in_parallel = true;
  claim(p, 0);
  run_task(p, 0);
  /* Tasks no helper has started yet: run them here, under their own tid. */
  for (int t = 1; t < tasks; ++t)
    if (claim(p, t)) run_task(p, t);
  tls_in_parallel = false;

  /* Close the job; wait for the helpers still inside it. */
  uint64_t s = atomic_fetch_or(&p->state, STATE_CLOSED) | STATE_CLOSED;
  if (s & STATE_ACTIVE_MASK) {
    uint64_t t0 = tpurt_now_ns();
    for (unsigned i = 1; atomic_load(&p->state) & STATE_ACTIVE_MASK; ++i) {
      if ((i & 7) != 0 || tpurt_now_ns() - t0 < POOL_SPIN_NS) {
        tpurt_spin_step();
        continue;
      }
      atomic_store(&p->caller_waiting, 1);
      uint32_t w = atomic_load(&p->done_word);
      if (atomic_load(&p->state) & STATE_ACTIVE_MASK) tpurt_futex_wait(&p->done_word, w);
      atomic_store(&p->caller_waiting, 0);
    }
  }
  atomic_store_explicit(&p->busy, 0, memory_order_release);
}
