/* Runtime threads: signals blocked, named; the host's threads: issuer
 * tokens and the host hooks (tpurt/device.h). */
#include "base/thread.h"

#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "tpurt/device.h"

static _Atomic(bool (*)(void)) g_thread_shared;
static _Atomic(tpurt_status_t (*)(void)) g_interrupted;
static _Atomic uint64_t g_next_issuer = 1;
/* The thread's issuer + 1 (0: not asked yet): one thread-local read per
 * submit. (Not initial-exec: the library is dlopen'ed, and its thread-locals
 * do not all fit the static TLS surplus.) */
static _Thread_local uint64_t tls_issuer;

void tpurt_set_host_hooks(const tpurt_host_hooks_t* hooks) {
  atomic_store(&g_thread_shared, hooks ? hooks->thread_is_shared : NULL);
  atomic_store(&g_interrupted, hooks ? hooks->interrupted : NULL);
}

uint64_t tpurt_thread_issuer(void) {
  if (TPURT_LIKELY(tls_issuer != 0)) return tls_issuer - 1;
  bool (*shared)(void) = atomic_load(&g_thread_shared);
  tls_issuer = (shared && shared() ? 0 : atomic_fetch_add(&g_next_issuer, 1)) + 1;
  return tls_issuer - 1;
}

tpurt_status_t tpurt_host_interrupted(void) {
  tpurt_status_t (*fn)(void) = atomic_load(&g_interrupted);
  return fn ? fn() : TPURT_OK;
}

int tpurt_thread_pin(pthread_t thread, const int* cpus, int n) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < n; ++i) CPU_SET(cpus[i], &set);
  return pthread_setaffinity_np(thread, sizeof(set), &set);
}

int tpurt_thread_start(pthread_t* out_thread, void* (*fn)(void*), void* arg, const char* name) {
  sigset_t all, old;
  sigfillset(&all);
  /* The new thread inherits the mask in force while it is created. */
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(out_thread, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc == 0 && name) {
    char buf[16];
    strncpy(buf, name, sizeof(buf) - 1);
    buf[sizeof(buf) - 1] = '\0';
    pthread_setname_np(*out_thread, buf);
  }
  return rc;
}
