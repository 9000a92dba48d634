/* Runtime threads: signals blocked, named. */
#include "base/thread.h"

#include <signal.h>
#include <string.h>

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
