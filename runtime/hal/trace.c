/* The device activity trace's buffer (tpurt/trace.h): events appended under
 * one mutex into chunks allocated as they fill (nothing is allocated while
 * tracing is off), taken oldest first by the profiler. Recording costs a
 * clock read and a copy per command, only while tracing is on. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/futex.h"
#include "hal/trace.h"

#define CHUNK_EVENTS 4096
/* About 50 MB of events at most; past that they are counted as dropped. */
#define MAX_EVENTS ((size_t)1 << 18)

typedef struct chunk_t {
  struct chunk_t* next;
  size_t n;
  tpurt_trace_event_t ev[CHUNK_EVENTS];
} chunk_t;

_Atomic int tpurt_trace_on;
_Thread_local uint64_t tpurt_trace_tls_launch;
static _Thread_local uint64_t tls_corr;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static chunk_t* g_head; /* oldest */
static chunk_t* g_tail;
static size_t g_count;
static size_t g_taken; /* events of g_head already taken */
static _Atomic uint64_t g_dropped;
static _Atomic uint64_t g_busy;
static _Atomic uint64_t g_next_id;

static void clear_locked(void) {
  while (g_head) {
    chunk_t* n = g_head->next;
    free(g_head);
    g_head = n;
  }
  g_tail = NULL;
  g_count = 0;
  g_taken = 0;
}

void tpurt_trace_enable(bool on) {
  pthread_mutex_lock(&g_lock);
  if (on && !atomic_load(&tpurt_trace_on)) {
    clear_locked();
    atomic_store(&g_dropped, 0);
    atomic_store(&g_busy, 0);
  }
  atomic_store(&tpurt_trace_on, on ? 1 : 0);
  pthread_mutex_unlock(&g_lock);
}

bool tpurt_trace_enabled(void) { return atomic_load(&tpurt_trace_on) != 0; }
void tpurt_trace_set_correlation(uint64_t id) { tls_corr = id; }
uint64_t tpurt_trace_correlation(void) { return tls_corr; }
uint64_t tpurt_trace_next_id(void) { return atomic_fetch_add_explicit(&g_next_id, 1, memory_order_relaxed) + 1; }
uint64_t tpurt_trace_dropped(void) { return atomic_load(&g_dropped); }
uint64_t tpurt_trace_busy_ns(void) { return atomic_load(&g_busy); }
void tpurt_trace_add_busy(uint64_t ns) { atomic_fetch_add_explicit(&g_busy, ns, memory_order_relaxed); }
uint64_t tpurt_trace_now_ns(void) { return tpurt_now_ns(); }

uint64_t tpurt_trace_thread_id(void) {
  static _Thread_local uint64_t tid;
  if (!tid) tid = (uint64_t)syscall(SYS_gettid);
  return tid;
}

/* Per traced command: plain copies, not snprintf (a tenth of the cost). */
void tpurt_trace_set_name(char* dst, size_t cap, const char* name, const char* overload) {
  size_t n = 0;
  for (const char* p = name ? name : "?"; *p && n + 1 < cap; ++p) dst[n++] = *p;
  if (overload && overload[0] && n + 1 < cap) {
    dst[n++] = '.';
    for (const char* p = overload; *p && n + 1 < cap; ++p) dst[n++] = *p;
  }
  if (cap) dst[n] = 0;
}

void tpurt_trace_record(const tpurt_trace_event_t* ev) {
  pthread_mutex_lock(&g_lock);
  if (g_count >= MAX_EVENTS) goto drop;
  if (!g_tail || g_tail->n == CHUNK_EVENTS) {
    chunk_t* c = malloc(sizeof(*c));
    if (!c) goto drop;
    c->next = NULL;
    c->n = 0;
    if (g_tail) g_tail->next = c;
    else g_head = c;
    g_tail = c;
  }
  g_tail->ev[g_tail->n++] = *ev;
  g_count++;
  pthread_mutex_unlock(&g_lock);
  return;
drop:
  pthread_mutex_unlock(&g_lock);
  atomic_fetch_add(&g_dropped, 1);
}

size_t tpurt_trace_count(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_count;
  pthread_mutex_unlock(&g_lock);
  return n;
}

size_t tpurt_trace_take(tpurt_trace_event_t* out, size_t cap) {
  size_t got = 0;
  pthread_mutex_lock(&g_lock);
  while (got < cap && g_head) {
    size_t avail = g_head->n - g_taken;
    size_t k = avail < cap - got ? avail : cap - got;
    memcpy(out + got, g_head->ev + g_taken, k * sizeof(*out));
    got += k;
    g_taken += k;
    g_count -= k;
    if (g_taken == g_head->n && (g_head->n == CHUNK_EVENTS || g_head != g_tail)) {
      chunk_t* n = g_head->next;
      free(g_head);
      g_head = n;
      if (!g_head) g_tail = NULL;
      g_taken = 0;
    } else if (g_taken == g_head->n) {
      break; /* the tail chunk, still filling */
    }
  }
  pthread_mutex_unlock(&g_lock);
  return got;
}

uint64_t tpurt_trace_launch(const char* name, int32_t device, uint64_t queue) {
  tpurt_trace_event_t ev = {.kind = TPURT_TRACE_LAUNCH, .device = device, .queue = queue, .id = tpurt_trace_next_id(),
                            .corr = tls_corr, .tid = tpurt_trace_thread_id(), .dtype = -1};
  ev.start_ns = ev.end_ns = tpurt_now_ns();
  snprintf(ev.name, sizeof ev.name, "%s", name);
  tpurt_trace_record(&ev);
  return ev.id;
}
