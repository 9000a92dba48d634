/* Internal: starting the runtime's own threads (queue workers, compute pool).
 * They block all signals, so a signal meant for the process (Ctrl-C) reaches
 * the host's threads, and they carry a name visible in top/gdb/py-spy. */
#ifndef TPURT_BASE_THREAD_H_
#define TPURT_BASE_THREAD_H_

#include <pthread.h>
#include <stdint.h>

#include "tpurt/base.h"

/* pthread_create's result (0 on success). `name` is cut to 15 characters. */
int tpurt_thread_start(pthread_t* out_thread, void* (*fn)(void*), void* arg, const char* name);

/* Keeps `thread` on the n host CPUs cpus[0..n) (pthread_setaffinity_np's result, 0 on success). */
int tpurt_thread_pin(pthread_t thread, const int* cpus, int n);

/* The calling thread's issuer token (never 0), or 0 for a thread whose
 * errors any thread may take: one the host hooks call shared (a thread
 * PyTorch's autograd engine runs backward ops on). Commands carry it, so a
 * kernel's error is raised to the thread that issued it. */
uint64_t tpurt_thread_issuer(void);

/* Whether the host wants a blocked wait to give up (Ctrl-C): the status to
 * return (CANCELLED), or OK. Polled by interruptible waits. */
tpurt_status_t tpurt_host_interrupted(void);

#endif /* TPURT_BASE_THREAD_H_ */
