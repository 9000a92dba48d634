/* The eager modes' table and the switch between them (exec/mode.h). A mode
 * is selected per process (tpurt_exec_mode_set; TPU_LAUNCH_BLOCKING=1 starts
 * in Debug mode) from any thread, while other threads submit work.
 *
 * The switch is a reader/writer gate. Every use of a mode's hooks (a submit,
 * a host copy, an allocator hook) is a reader: it holds the gate for the
 * length of the hook (tpurt_exec_mode_hold / _release), so the mode cannot
 * change under it. Readers count themselves in one of NUM_SHARDS padded
 * counters (a thread keeps its shard), so a submit costs one uncontended
 * atomic add and a load, never a shared lock. The switch is the writer: it
 * raises g_switching, waits until every counter is 0 (readers that came
 * after the flag wait for the switch instead), then drains the chips (every
 * queue's pending DeferAndFuse work flushed and everything queued run), and
 * only then calls the old mode's leave and the new one's enter. So no kernel
 * queued under one mode's rules runs while the next mode changes memory
 * protections, and no host copy or allocation sees a mode half-entered.
 *
 * Dekker-style ordering: a reader's counter add and a writer's flag store are
 * both sequentially consistent and each then reads the other's, so at least
 * one of them sees the other. A reader already inside the gate (nested: an
 * allocator hook inside a submit) or running on a queue's own thread (a host
 * callback the drain is waiting for) passes without waiting. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "base/futex.h"
#include "exec/mode.h"

static const tpurt_exec_mode_ops_t* const kModes[] = {&tpurt_exec_strict, &tpurt_exec_debug, &tpurt_exec_defer};
#define NUM_MODES (sizeof(kModes) / sizeof(kModes[0]))
#define NUM_SHARDS 64

static _Atomic(const tpurt_exec_mode_ops_t*) g_mode = &tpurt_exec_strict;
static pthread_mutex_t g_switch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

typedef struct shard_t {
  _Alignas(64) _Atomic uint64_t readers;
} shard_t;
static shard_t g_shards[NUM_SHARDS];
static _Atomic uint32_t g_next_shard;
/* Non-zero while a switch is in progress: new readers wait on it (futex). */
static _Atomic uint32_t g_switching;
/* The thread doing the switch (its own hooks, if any, must not wait for it). */
static _Atomic(pthread_t*) g_switcher;

/* A thread's place in the gate. One variable: in a shared library each
 * thread-local access is a __tls_get_addr call (the initial-exec model would
 * avoid it, but a library loaded by dlopen, as Python loads this one, may
 * find no static TLS room left: "cannot allocate memory in static TLS
 * block"). */
typedef struct gate_tls_t {
  unsigned depth;
  shard_t* shard;
} gate_tls_t;
static _Thread_local gate_tls_t tls_gate;
static _Thread_local pthread_t tls_self_token; /* its address identifies the thread */

/* ---- readers ---- */

/* True on a queue's own thread (its commands are what a switch drains). */
static bool on_queue_thread(void) {
  for (int i = 0, n = tpurt_device_count_internal(); i < n; ++i) {
    tpurt_device_t* d = tpurt_device_at(i);
    bool mine = false;
    pthread_mutex_lock(&d->queues_lock);
    for (tpurt_queue_t* q = d->queues; q && !mine; q = q->next) mine = tpurt_queue_is_current(q);
    pthread_mutex_unlock(&d->queues_lock);
    if (mine) return true;
  }
  return false;
}

/* A switch is in progress: step out of the gate until it is over (unless this
 * thread is the switcher's or one of the queues the switch drains). */
__attribute__((noinline)) static void hold_slow(shard_t* s) {
  if (atomic_load(&g_switcher) == &tls_self_token || on_queue_thread()) return;
  for (;;) {
    atomic_fetch_sub_explicit(&s->readers, 1, memory_order_seq_cst);
    uint32_t v;
    while ((v = atomic_load_explicit(&g_switching, memory_order_seq_cst)) != 0) tpurt_futex_wait(&g_switching, v);
    atomic_fetch_add_explicit(&s->readers, 1, memory_order_seq_cst);
    if (!atomic_load_explicit(&g_switching, memory_order_seq_cst)) return;
  }
}

const tpurt_exec_mode_ops_t* tpurt_exec_mode_hold(void) {
  gate_tls_t* t = &tls_gate;
  if (t->depth++ == 0) {
    shard_t* s = t->shard;
    if (TPURT_UNLIKELY(!s))
      s = t->shard = &g_shards[atomic_fetch_add_explicit(&g_next_shard, 1, memory_order_relaxed) % NUM_SHARDS];
    atomic_fetch_add_explicit(&s->readers, 1, memory_order_seq_cst);
    if (TPURT_UNLIKELY(atomic_load_explicit(&g_switching, memory_order_seq_cst) != 0)) hold_slow(s);
  }
  return atomic_load_explicit(&g_mode, memory_order_acquire);
}

void tpurt_exec_mode_release(void) {
  gate_tls_t* t = &tls_gate;
  if (--t->depth == 0) atomic_fetch_sub_explicit(&t->shard->readers, 1, memory_order_release);
}

const tpurt_exec_mode_ops_t* tpurt_exec_mode_ops(void) {
  return atomic_load_explicit(&g_mode, memory_order_acquire);
}

/* ---- the writer ---- */

static uint64_t readers_in_gate(void) {
  uint64_t n = 0;
  for (int i = 0; i < NUM_SHARDS; ++i) n += atomic_load_explicit(&g_shards[i].readers, memory_order_seq_cst);
  return n;
}

/* Waits (yielding, then sleeping briefly) until no reader is inside the gate.
 * Readers leave within one hook; a Debug kernel or a free waiting for its
 * chip can take a while, hence the sleep rather than a spin. */
static void wait_readers_out(void) {
  for (int spins = 0; readers_in_gate() != 0; ++spins) {
    if (spins < 64) {
      tpurt_spin_step();
    } else {
      struct timespec ts = {0, 50 * 1000};
      nanosleep(&ts, NULL);
    }
  }
}

static void set_locked(const tpurt_exec_mode_ops_t* next) {
  const tpurt_exec_mode_ops_t* prev = atomic_load(&g_mode);
  if (prev == next) return;
  atomic_store_explicit(&g_switcher, &tls_self_token, memory_order_seq_cst);
  atomic_store_explicit(&g_switching, 1, memory_order_seq_cst);
  wait_readers_out();
  /* Work queued under the old mode runs under it: flush every queue's
   * pending records and wait for every chip. */
  for (int i = 0, n = tpurt_device_count_internal(); i < n; ++i) tpurt_device_wait_idle(tpurt_device_at(i));
  if (prev->leave) prev->leave();
  atomic_store_explicit(&g_mode, next, memory_order_release);
  if (next->enter) next->enter();
  atomic_store_explicit(&g_switcher, NULL, memory_order_relaxed);
  atomic_store_explicit(&g_switching, 0, memory_order_seq_cst);
  tpurt_futex_wake_all(&g_switching);
}

static void init_once(void) {
  const char* blocking = getenv("TPU_LAUNCH_BLOCKING");
  if (blocking && blocking[0] == '1') {
    pthread_mutex_lock(&g_switch_lock);
    set_locked(&tpurt_exec_debug);
    pthread_mutex_unlock(&g_switch_lock);
  }
}

/* Both read the environment first, so TPU_LAUNCH_BLOCKING cannot later
 * override an explicit choice (nor be missed by an early query). */
tpurt_status_t tpurt_exec_mode_set(tpurt_exec_mode_t mode) {
  pthread_once(&g_once, init_once);
  const tpurt_exec_mode_ops_t* next = NULL;
  for (size_t i = 0; i < NUM_MODES; ++i)
    if (kModes[i]->id == mode) next = kModes[i];
  if (!next)
    return TPURT_STATUS(INVALID_ARGUMENT, "exec_mode_set: %d is not an eager mode (0 strict, 1 debug, 2 "
                        "defer_and_fuse)", (int)mode);
  /* A switch waits for every reader and every queue: from inside a hook or
   * from a queue's own thread it would wait for itself. */
  if (tls_gate.depth != 0 || on_queue_thread())
    return TPURT_STATUS(FAILED_PRECONDITION, "exec_mode_set: cannot switch the eager mode from inside a "
                        "queued host function or a mode hook (it waits for the device to be idle)");
  pthread_mutex_lock(&g_switch_lock);
  set_locked(next);
  pthread_mutex_unlock(&g_switch_lock);
  return TPURT_OK;
}

tpurt_exec_mode_t tpurt_exec_mode_get(void) {
  pthread_once(&g_once, init_once);
  return tpurt_exec_mode_ops()->id;
}

/* Called from tpurt_init, so the variable is read before anything runs. */
void tpurt_exec_mode_init(void) { pthread_once(&g_once, init_once); }

bool tpurt_exec_foreign_free(tpurt_device_t* device, void* ptr) {
  for (size_t i = 0; i < NUM_MODES; ++i)
    if (kModes[i]->foreign_free && kModes[i]->foreign_free(device, ptr)) return true;
  return false;
}

bool tpurt_exec_foreign_live(tpurt_device_t* device, void* ptr) {
  for (size_t i = 0; i < NUM_MODES; ++i)
    if (kModes[i]->foreign_live && kModes[i]->foreign_live(device, ptr)) return true;
  return false;
}
