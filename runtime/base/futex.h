/* Internal: futex wait/wake on a 32-bit atomic word, plus a CPU pause hint and
 * a monotonic clock. Idle runtime threads sleep here instead of spinning. */
#ifndef TPURT_BASE_FUTEX_H_
#define TPURT_BASE_FUTEX_H_

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *word == expected (returns at once if it already differs). */
static inline void tpurt_futex_wait(_Atomic uint32_t* word, uint32_t expected) {
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

/* The same, giving up after `ns` nanoseconds. */
static inline void tpurt_futex_wait_ns(_Atomic uint32_t* word, uint32_t expected, uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
}
static inline void tpurt_futex_wake(_Atomic uint32_t* word, int count) {
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

static inline void tpurt_futex_wake_all(_Atomic uint32_t* word) { tpurt_futex_wake(word, INT_MAX); }

#include <sched.h>

/* One step of a bounded spin-wait. Yielding rather than pausing: when the
 * machine has more runnable threads than cores, the thread we wait for may
 * need this core; when cores are idle, sched_yield returns at once. */
static inline void tpurt_spin_step(void) {
#ifdef TPURT_SPIN_PAUSE
  for (int i = 0; i < 8; ++i) __builtin_ia32_pause();
#else
  sched_yield();
#endif
}

static inline void tpurt_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static inline uint64_t tpurt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* TPURT_BASE_FUTEX_H_ */
