/* The verified executable cache (header: compiler/cache.h).
 *
 * Memory: an open-addressed table from the source's hash (the full source
 * compared) to its state and kernel. Disk: verified loads through one
 * descriptor (disk_load, load_executable). Builds: one background thread runs
 * the queued builds in order (compiler/jit.h), stores each library on disk
 * and loads it back through the same verified path as any other. */
#include "compiler/cache.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "base/file.h"
#include "base/hash.h"
#include "base/log.h"
#include "compiler/jit.h"

#define SLOTS 4096

typedef struct entry_t {
  uint64_t hash;
  char* source; /* NULL: free slot */
  tpurt_kernel_cache_state_t state;
  tpurt_gen_fn_t fn;
} entry_t;

typedef struct job_t {
  struct job_t* next;
  entry_t* entry;
  tpurt_kernel_cache_done_fn_t done;
  void* user;
} job_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;      /* a job was queued */
static pthread_cond_t g_idle_cond = PTHREAD_COND_INITIALIZER; /* the queue drained */
static entry_t g_table[SLOTS];
static job_t *g_jobs, **g_jobs_tail = &g_jobs;
static bool g_builder_started, g_building;

static struct {
  _Atomic uint64_t memory_hits, disk_loads, builds, build_failures, disk_rejects;
} g_stats;

#define STAT_ADD(f) atomic_fetch_add_explicit(&g_stats.f, 1, memory_order_relaxed)

void tpurt_kernel_cache_stats(tpurt_kernel_cache_stats_t* o) {
  o->memory_hits = atomic_load(&g_stats.memory_hits);
  o->disk_loads = atomic_load(&g_stats.disk_loads);
  o->builds = atomic_load(&g_stats.builds);
  o->build_failures = atomic_load(&g_stats.build_failures);
  o->disk_rejects = atomic_load(&g_stats.disk_rejects);
}

void tpurt_kernel_cache_stats_reset(void) {
  atomic_store(&g_stats.memory_hits, 0);
  atomic_store(&g_stats.disk_loads, 0);
  atomic_store(&g_stats.builds, 0);
  atomic_store(&g_stats.build_failures, 0);
  atomic_store(&g_stats.disk_rejects, 0);
}

/* ------------------------------------------------------------------------ */
/* Disk.                                                                     */

const char* tpurt_kernel_cache_dir(char* buf, size_t cap) {
  const char* d = getenv("TORCH_TPU_FUSE_CACHE_DIR");
  if (d) return d[0] ? d : NULL; /* set but empty: no disk cache */
  return tpurt_file_user_cache_dir("fused", buf, cap);
}

static void path_of(char* out, size_t cap, const char* dir, uint64_t h, const char* ext) {
  snprintf(out, cap, "%s/%016llx%s", dir, (unsigned long long)h, ext);
}

static uint64_t source_hash(const char* source) { return tpurt_fnv1a_str(source, TPURT_FNV_SEED); }

bool tpurt_kernel_cache_entry_path(const char* source, const char* ext, char* buf, size_t cap) {
  char dbuf[1024];
  const char* dir = tpurt_kernel_cache_dir(dbuf, sizeof dbuf);
  if (!dir) return false;
  path_of(buf, cap, dir, source_hash(source), ext);
  return true;
}

/* The record: this header line, then the source. */
#define RECORD_HEAD "torch_tpu kernel v2 abi %u so %016llx\n"
#define RECORD_SCAN "torch_tpu kernel v2 abi %u so %16llx%n"

/* How executables are loaded: the executor installs the device's loader
 * (exec/defer: the HAL's executable_load / lookup / release). */
static _Atomic(const tpurt_kernel_loader_t*) g_loader;

void tpurt_kernel_cache_set_loader(const tpurt_kernel_loader_t* loader) { atomic_store(&g_loader, loader); }

/* The one place an executable is loaded: `fd` is an open descriptor of a
 * library whose owner, mode and content were just checked through it; the
 * loader loads exactly that descriptor (never the path again). The library
 * must report this ABI version and follow the struct_size rule
 * (kernel_abi.h): it is called once with too small an args struct, which it
 * must refuse, and once with ours on an empty range, which it must accept.
 * Returns its kernel, or NULL (the executable is released again). Executables
 * that pass stay loaded for the life of the process. */
static tpurt_gen_fn_t load_executable(int fd) {
  const tpurt_kernel_loader_t* ld = atomic_load(&g_loader);
  if (!ld) {
    TPURT_LOG(INFO, "codegen: no executable loader installed");
    return NULL;
  }
  void* exe = ld->load(ld->user, fd);
  if (!exe) return NULL;
  const uint32_t* abi = ld->lookup(ld->user, exe, TPURT_KERNEL_ABI_SYMBOL);
  void* sym = ld->lookup(ld->user, exe, TPURT_KERNEL_FN_SYMBOL);
  tpurt_gen_fn_t fn = NULL;
  if (sym) memcpy(&fn, &sym, sizeof fn);
  bool ok = abi && *abi == TPURT_KERNEL_ABI_VERSION && fn;
  if (ok) {
    tpurt_gen_args_t args;
    memset(&args, 0, sizeof args);
    args.struct_size = sizeof(size_t); /* nothing but the size: a kernel must not read on */
    ok = fn(&args, 0, 1, 0) == TPURT_GEN_ERR_ARGS;
    args.struct_size = sizeof args;
    ok = ok && fn(&args, 0, 0, 0) == 0;
  }
  if (!ok) {
    TPURT_LOG(INFO, "codegen: library refused: ABI version %u (want %u), kernel %s", abi ? *abi : 0u,
              TPURT_KERNEL_ABI_VERSION, fn ? "present" : "missing");
    ld->release(ld->user, exe);
    return NULL;
  }
  return fn;
}

/* The kernel at dir/<h>.so when its record matches `source` and its bytes;
 * NULL otherwise, and an entry that exists but fails a check is removed. */
static tpurt_gen_fn_t disk_load(const char* dir, uint64_t h, const char* source) {
  char meta_path[1200], so_path[1200];
  path_of(meta_path, sizeof meta_path, dir, h, ".kernel");
  path_of(so_path, sizeof so_path, dir, h, ".so");
  size_t mlen = 0;
  char* meta = tpurt_file_read_owned(meta_path, &mlen);
  if (!meta) {
    struct stat st;
    if (lstat(meta_path, &st) != 0) return NULL; /* no entry */
  }
  unsigned abi = 0;
  unsigned long long want = 0;
  int head = 0;
  bool ok = meta && sscanf(meta, RECORD_SCAN, &abi, &want, &head) == 2 && head > 0 && meta[head] == '\n' &&
            abi == TPURT_KERNEL_ABI_VERSION && strcmp(meta + head + 1, source) == 0;
  free(meta);
  tpurt_gen_fn_t fn = NULL;
  if (ok) {
    size_t size = 0;
    int fd = tpurt_file_open_owned(so_path, &size); /* no symlink; ours; writable by no one else */
    char* so = fd >= 0 ? tpurt_file_read_fd(fd, size) : NULL;
    ok = so && tpurt_fnv1a(so, size, TPURT_FNV_SEED) == want;
    free(so);
    if (ok) fn = load_executable(fd);
    if (fd >= 0) close(fd);
  }
  if (!fn) { /* a corrupt, foreign or other-ABI entry: discarded, so it is rebuilt */
    TPURT_LOG(INFO, "codegen: cache entry %s refused (%s)", so_path, ok ? "load" : "record or content");
    unlink(meta_path);
    unlink(so_path);
    STAT_ADD(disk_rejects);
  }
  return fn;
}

static bool disk_failed(const char* dir, uint64_t h, const char* source) {
  char path[1200];
  path_of(path, sizeof path, dir, h, ".fail");
  size_t len = 0;
  char* p = tpurt_file_read_owned(path, &len);
  bool f = p && strcmp(p, source) == 0;
  free(p);
  return f;
}

/* The library first (a reader that finds the new record finds its library). */
static bool install(const char* dir, uint64_t h, const char* source, const char* so_built) {
  size_t len = 0;
  char* so = tpurt_file_read_owned(so_built, &len);
  if (!so) return false;
  char so_path[1200], meta_path[1200], head[128];
  path_of(so_path, sizeof so_path, dir, h, ".so");
  path_of(meta_path, sizeof meta_path, dir, h, ".kernel");
  int hl = snprintf(head, sizeof head, RECORD_HEAD, TPURT_KERNEL_ABI_VERSION,
                    (unsigned long long)tpurt_fnv1a(so, len, TPURT_FNV_SEED));
  bool ok = tpurt_file_write_new(so_path, so, len, NULL, 0) &&
            tpurt_file_write_new(meta_path, head, (size_t)hl, source, strlen(source));
  free(so);
  return ok;
}

bool tpurt_kernel_cache_install(const char* source, const char* so_path) {
  char dbuf[1024];
  const char* dir = tpurt_kernel_cache_dir(dbuf, sizeof dbuf);
  return dir && tpurt_file_dir_private(dir) && install(dir, source_hash(source), source, so_path);
}

/* The cache directory when it is private, else a new private temporary one
 * (*tmp) removed after the build. */
static const char* build_dir(char* buf, size_t cap, bool* tmp) {
  const char* d = tpurt_kernel_cache_dir(buf, cap);
  *tmp = false;
  if (d && tpurt_file_dir_private(d)) return d;
  const char* t = tpurt_env_str("TMPDIR");
  snprintf(buf, cap, "%s/torch_tpu_gen.XXXXXX", t ? t : "/tmp");
  if (!mkdtemp(buf)) return NULL;
  *tmp = true;
  return buf;
}

/* Builds one kernel; its loaded function, or NULL. */
static tpurt_gen_fn_t build_one(uint64_t h, const char* source) {
  char dbuf[1024];
  bool tmp = false;
  const char* dir = build_dir(dbuf, sizeof dbuf, &tmp);
  if (!dir) return NULL;
  tpurt_jit_build_t b;
  tpurt_jit_result_t r = tpurt_jit_build(source, dir, &b);
  tpurt_gen_fn_t fn = NULL;
  if (r == TPURT_JIT_OK && install(dir, h, source, b.so_path) && !tpurt_jit_stopping())
    fn = disk_load(dir, h, source);
  tpurt_jit_build_remove(&b);
  if (!fn && r != TPURT_JIT_UNAVAILABLE && !tmp && !tpurt_jit_stopping()) {
    char fail_path[1200]; /* remembered: no process builds it again */
    path_of(fail_path, sizeof fail_path, dir, h, ".fail");
    tpurt_file_write_new(fail_path, source, strlen(source), NULL, 0);
  }
  if (tmp) { /* loaded (or failed): nothing to keep */
    char p[1200];
    path_of(p, sizeof p, dir, h, ".so");
    unlink(p);
    path_of(p, sizeof p, dir, h, ".kernel");
    unlink(p);
    rmdir(dir);
  }
  return fn;
}

/* ------------------------------------------------------------------------ */
/* Memory and the builder.                                                   */

/* The entry for source (hash h); a free slot taken for it when insert; NULL
 * when absent (or the table is full). Under g_lock. */
static entry_t* table_find(uint64_t h, const char* source, bool insert) {
  size_t i = h & (SLOTS - 1);
  for (size_t probe = 0; probe < SLOTS; ++probe, i = (i + 1) & (SLOTS - 1)) {
    entry_t* e = &g_table[i];
    if (!e->source) {
      if (!insert || !(e->source = strdup(source))) return NULL;
      e->hash = h;
      e->state = TPURT_KERNEL_CACHE_ABSENT;
      e->fn = NULL;
      return e;
    }
    if (e->hash == h && strcmp(e->source, source) == 0) return e;
  }
  return NULL;
}

tpurt_gen_fn_t tpurt_kernel_cache_find(const char* source, tpurt_kernel_cache_state_t* out_state) {
  uint64_t h = source_hash(source);
  pthread_mutex_lock(&g_lock);
  entry_t* e = table_find(h, source, false);
  if (e && e->state != TPURT_KERNEL_CACHE_ABSENT) {
    *out_state = e->state;
    tpurt_gen_fn_t fn = e->fn;
    pthread_mutex_unlock(&g_lock);
    if (fn) STAT_ADD(memory_hits);
    return fn;
  }
  pthread_mutex_unlock(&g_lock);
  char dbuf[1024];
  const char* dir = tpurt_kernel_cache_dir(dbuf, sizeof dbuf);
  tpurt_gen_fn_t fn = NULL;
  tpurt_kernel_cache_state_t state = TPURT_KERNEL_CACHE_ABSENT;
  if (dir) {
    fn = disk_load(dir, h, source);
    if (fn) {
      state = TPURT_KERNEL_CACHE_READY;
      STAT_ADD(disk_loads);
    } else if (disk_failed(dir, h, source)) {
      state = TPURT_KERNEL_CACHE_FAILED;
    }
  }
  if (state != TPURT_KERNEL_CACHE_ABSENT) {
    pthread_mutex_lock(&g_lock);
    e = table_find(h, source, true);
    if (e && e->state == TPURT_KERNEL_CACHE_ABSENT) { /* else another thread got there first: keep its */
      e->state = state;
      e->fn = fn;
    }
    pthread_mutex_unlock(&g_lock);
  }
  *out_state = state;
  return fn;
}

/* At exit: no library is loaded while the process tears down (the build in
 * flight is stopped, its files removed by the builder if it gets the time). */
static void on_exit_stop_builds(void) { tpurt_jit_shutdown(); }

static void* builder(void* unused) {
  (void)unused;
  pthread_mutex_lock(&g_lock);
  for (;;) {
    while (!g_jobs) {
      g_building = false;
      pthread_cond_broadcast(&g_idle_cond);
      pthread_cond_wait(&g_cond, &g_lock);
    }
    job_t* j = g_jobs;
    g_jobs = j->next;
    if (!g_jobs) g_jobs_tail = &g_jobs;
    g_building = true;
    entry_t* e = j->entry; /* stays: clear waits for the builder */
    pthread_mutex_unlock(&g_lock);
    tpurt_gen_fn_t fn = build_one(e->hash, e->source);
    if (fn) STAT_ADD(builds);
    else STAT_ADD(build_failures);
    TPURT_LOG(INFO, "codegen: kernel %016llx %s", (unsigned long long)e->hash,
              fn ? "built" : "failed (its users stay on their generic path)");
    pthread_mutex_lock(&g_lock);
    e->fn = fn;
    e->state = fn ? TPURT_KERNEL_CACHE_READY : TPURT_KERNEL_CACHE_FAILED;
    pthread_mutex_unlock(&g_lock);
    if (j->done) j->done(j->user, fn); /* before the queue counts as drained */
    free(j);
    pthread_mutex_lock(&g_lock);
  }
  return NULL;
}

bool tpurt_kernel_cache_build(const char* source, tpurt_kernel_cache_done_fn_t done, void* user) {
  job_t* job = malloc(sizeof(*job));
  if (!job) return false;
  pthread_mutex_lock(&g_lock);
  entry_t* e = table_find(source_hash(source), source, true);
  if (!e || e->state != TPURT_KERNEL_CACHE_ABSENT) {
    pthread_mutex_unlock(&g_lock);
    free(job);
    return false;
  }
  if (!g_builder_started) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    g_builder_started = pthread_create(&t, &attr, builder, NULL) == 0;
    pthread_attr_destroy(&attr);
    if (g_builder_started) atexit(on_exit_stop_builds);
  }
  if (!g_builder_started) { /* no thread: nothing gets built */
    pthread_mutex_unlock(&g_lock);
    free(job);
    return false;
  }
  *job = (job_t){.next = NULL, .entry = e, .done = done, .user = user};
  e->state = TPURT_KERNEL_CACHE_BUILDING;
  *g_jobs_tail = job;
  g_jobs_tail = &job->next;
  g_building = true;
  pthread_cond_signal(&g_cond);
  pthread_mutex_unlock(&g_lock);
  return true;
}

void tpurt_kernel_cache_wait(void) {
  pthread_mutex_lock(&g_lock);
  while (g_building || g_jobs) pthread_cond_wait(&g_idle_cond, &g_lock);
  pthread_mutex_unlock(&g_lock);
}

void tpurt_kernel_cache_clear(void) {
  pthread_mutex_lock(&g_lock);
  while (g_building || g_jobs) pthread_cond_wait(&g_idle_cond, &g_lock);
  for (int i = 0; i < SLOTS; ++i) {
    free(g_table[i].source);
    memset(&g_table[i], 0, sizeof(g_table[i]));
  }
  pthread_mutex_unlock(&g_lock);
}
