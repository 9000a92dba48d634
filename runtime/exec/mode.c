/* The eager modes' table and the switch between them (exec/mode.h). A mode
 * is selected per process (tpurt_exec_mode_set; TPU_LAUNCH_BLOCKING=1 starts
 * in Debug mode); the current one is read lock-free on every submit. */
#include <stdlib.h>

#include "exec/mode.h"

static const tpurt_exec_mode_ops_t* const kModes[] = {&tpurt_exec_strict, &tpurt_exec_debug, &tpurt_exec_defer};
#define NUM_MODES (sizeof(kModes) / sizeof(kModes[0]))

static _Atomic(const tpurt_exec_mode_ops_t*) g_mode = &tpurt_exec_strict;
static pthread_mutex_t g_switch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void set_locked(const tpurt_exec_mode_ops_t* next) {
  const tpurt_exec_mode_ops_t* prev = atomic_load(&g_mode);
  if (prev == next) return;
  if (prev->leave) prev->leave();
  atomic_store(&g_mode, next);
  if (next->enter) next->enter();
}

static void init_once(void) {
  const char* blocking = getenv("TPU_LAUNCH_BLOCKING");
  if (blocking && blocking[0] == '1') {
    pthread_mutex_lock(&g_switch_lock);
    set_locked(&tpurt_exec_debug);
    pthread_mutex_unlock(&g_switch_lock);
  }
}

const tpurt_exec_mode_ops_t* tpurt_exec_mode_ops(void) {
  return atomic_load_explicit(&g_mode, memory_order_relaxed);
}

/* Both read the environment first, so TPU_LAUNCH_BLOCKING cannot later
 * override an explicit choice (nor be missed by an early query). */
void tpurt_exec_mode_set(tpurt_exec_mode_t mode) {
  pthread_once(&g_once, init_once);
  for (size_t i = 0; i < NUM_MODES; ++i) {
    if (kModes[i]->id != mode) continue;
    pthread_mutex_lock(&g_switch_lock);
    set_locked(kModes[i]);
    pthread_mutex_unlock(&g_switch_lock);
    return;
  }
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
