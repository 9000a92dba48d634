/* Internal: starting the runtime's own threads (queue workers, compute pool).
 * They block all signals, so a signal meant for the process (Ctrl-C) reaches
 * the host's threads, and they carry a name visible in top/gdb/py-spy. */
#ifndef TPURT_BASE_THREAD_H_
#define TPURT_BASE_THREAD_H_

#include <pthread.h>

/* pthread_create's result (0 on success). `name` is cut to 15 characters. */
int tpurt_thread_start(pthread_t* out_thread, void* (*fn)(void*), void* arg, const char* name);

#endif /* TPURT_BASE_THREAD_H_ */
