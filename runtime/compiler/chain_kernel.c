/* The generated kernel of a fused chain (header: compiler/chain_kernel.h). */
#include "compiler/chain_kernel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "compiler/cache.h"
#include "compiler/jit.h"

enum { ST_NEW = 0, ST_BUILDING, ST_READY, ST_FAILED };

#define SLOTS 2048

typedef struct entry_t {
  uint64_t hash;
  tpurt_codegen_chain_t* key; /* a copy, its names included; NULL: free slot */
  int state;
  int seen;
  tpurt_gen_fn_t fn;
} entry_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t g_table[SLOTS];
static _Atomic int g_enabled = -1;
static _Atomic uint64_t g_lookups, g_hits;

bool tpurt_chain_kernel_enabled(void) {
  return tpurt_env_switch(&g_enabled, "TORCH_TPU_FUSE_CODEGEN", true) && tpurt_jit_available();
}

void tpurt_chain_kernel_set_enabled(bool on) {
  atomic_store(&g_enabled, on ? 1 : 0);
  if (on) tpurt_jit_retry();
}

void tpurt_chain_kernel_stats(tpurt_chain_kernel_stats_t* o) {
  tpurt_kernel_cache_stats_t c;
  tpurt_kernel_cache_stats(&c);
  o->lookups = atomic_load(&g_lookups);
  o->memory_hits = atomic_load(&g_hits) + c.memory_hits;
  o->disk_loads = c.disk_loads;
  o->shared_loads = c.shared_loads;
  o->shared_stores = c.shared_stores;
  o->builds = c.builds;
  o->build_failures = c.build_failures;
  o->disk_rejects = c.disk_rejects;
}

void tpurt_chain_kernel_stats_reset(void) {
  atomic_store(&g_lookups, 0);
  atomic_store(&g_hits, 0);
  tpurt_kernel_cache_stats_reset();
}

/* A copy of c owning its expression names (one allocation). */
static tpurt_codegen_chain_t* key_copy(const tpurt_codegen_chain_t* c) {
  size_t names = 0;
  for (int k = 0; k < c->n; ++k) names += strlen(c->m[k].expr ? c->m[k].expr : "") + 1;
  tpurt_codegen_chain_t* key = malloc(sizeof(*key) + names);
  if (!key) return NULL;
  memcpy(key, c, sizeof(*key));
  char* p = (char*)(key + 1);
  for (int k = 0; k < c->n; ++k) {
    const char* s = c->m[k].expr ? c->m[k].expr : "";
    size_t len = strlen(s) + 1;
    memcpy(p, s, len);
    key->m[k].expr = p;
    p += len;
  }
  return key;
}

/* Under g_lock. */
static entry_t* table_find(uint64_t h, const tpurt_codegen_chain_t* c) {
  size_t i = h & (SLOTS - 1);
  for (size_t probe = 0; probe < SLOTS; ++probe, i = (i + 1) & (SLOTS - 1)) {
    entry_t* e = &g_table[i];
    if (!e->key) {
      if (!(e->key = key_copy(c))) return NULL;
      e->hash = h;
      e->state = ST_NEW;
      e->seen = 0;
      e->fn = NULL;
      return e;
    }
    if (e->hash == h && tpurt_codegen_chain_equal(e->key, c)) return e;
  }
  return NULL; /* full: such chains stay generic */
}

/* The builder is done with entry `user` (the entry outlives the build:
 * clear waits for builds first). */
static void built(void* user, tpurt_gen_fn_t fn) {
  entry_t* e = user;
  pthread_mutex_lock(&g_lock);
  e->fn = fn;
  e->state = fn ? ST_READY : ST_FAILED;
  pthread_mutex_unlock(&g_lock);
}

static int state_of(tpurt_kernel_cache_state_t s) {
  switch (s) {
    case TPURT_KERNEL_CACHE_READY: return ST_READY;
    case TPURT_KERNEL_CACHE_FAILED: return ST_FAILED;
    default: return ST_NEW; /* absent, or another requester's build: ask again at the next sight */
  }
}

tpurt_gen_fn_t tpurt_chain_kernel_find(const tpurt_codegen_chain_t* c) {
  if (c->n < 1 || c->n > TPURT_GEN_MAX_OPS || !tpurt_chain_kernel_enabled()) return NULL;
  atomic_fetch_add_explicit(&g_lookups, 1, memory_order_relaxed);
  uint64_t h = tpurt_codegen_chain_hash(c);
  pthread_mutex_lock(&g_lock);
  entry_t* e = table_find(h, c);
  if (!e || e->state != ST_NEW) {
    tpurt_gen_fn_t fn = e && e->state == ST_READY ? e->fn : NULL;
    pthread_mutex_unlock(&g_lock);
    if (fn) atomic_fetch_add_explicit(&g_hits, 1, memory_order_relaxed);
    return fn;
  }
  int seen = ++e->seen;
  if (seen > 2) { /* raced with a clear, or a build that could not be queued */
    pthread_mutex_unlock(&g_lock);
    return NULL;
  }
  if (seen == 2) e->state = ST_BUILDING; /* before the build is queued: its end may come first */
  pthread_mutex_unlock(&g_lock);

  char* source = tpurt_codegen_source(c);
  tpurt_kernel_cache_state_t cs = TPURT_KERNEL_CACHE_ABSENT;
  tpurt_gen_fn_t fn = NULL;
  int state = ST_FAILED; /* not a chain we generate */
  if (source && seen == 2 && tpurt_kernel_cache_build(source, built, e)) {
    free(source);
    return NULL;
  }
  if (source) {
    fn = tpurt_kernel_cache_find(source, &cs);
    state = state_of(cs);
  }
  free(source);
  pthread_mutex_lock(&g_lock);
  if (e->state == ST_NEW || e->state == ST_BUILDING) {
    e->state = state;
    e->fn = fn;
  }
  pthread_mutex_unlock(&g_lock);
  return fn;
}

void tpurt_chain_kernel_wait(void) { tpurt_kernel_cache_wait(); }

void tpurt_chain_kernel_clear(void) {
  tpurt_kernel_cache_wait();
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < SLOTS; ++i) {
    free(g_table[i].key);
    memset(&g_table[i], 0, sizeof(g_table[i]));
  }
  pthread_mutex_unlock(&g_lock);
  tpurt_kernel_cache_clear();
}
