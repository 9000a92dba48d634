/* The verified executable cache (header: compiler/cache.h).
 *
 * Memory: an open-addressed table from the source's hash (the full source
 * compared) to its state and kernel. Disk: a directory opened and checked
 * for each use (disk_open), verified loads through one descriptor
 * (disk_load, load_executable), eviction of the least recently used entries
 * (evict), and the walks tools use (tpurt/kernel_cache.h). Builds: one
 * background thread runs the queued builds in order (compiler/jit.h), loads
 * each library through the descriptor of the build's own file (checked the
 * same way) and renames that file into the cache. */
#include "compiler/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/file.h"
#include "base/hash.h"
#include "base/log.h"
#include "compiler/jit.h"
#include "tpurt/kernel_cache.h"

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
  _Atomic uint64_t memory_hits, disk_loads, shared_loads, shared_stores, builds, build_failures, disk_rejects,
      evictions;
} g_stats;

#define STAT_ADD(f) atomic_fetch_add_explicit(&g_stats.f, 1, memory_order_relaxed)

void tpurt_kernel_cache_stats(tpurt_kernel_cache_stats_t* o) {
  o->memory_hits = atomic_load(&g_stats.memory_hits);
  o->disk_loads = atomic_load(&g_stats.disk_loads);
  o->shared_loads = atomic_load(&g_stats.shared_loads);
  o->shared_stores = atomic_load(&g_stats.shared_stores);
  o->builds = atomic_load(&g_stats.builds);
  o->build_failures = atomic_load(&g_stats.build_failures);
  o->disk_rejects = atomic_load(&g_stats.disk_rejects);
  o->evictions = atomic_load(&g_stats.evictions);
}

void tpurt_kernel_cache_stats_reset(void) {
  atomic_store(&g_stats.memory_hits, 0);
  atomic_store(&g_stats.disk_loads, 0);
  atomic_store(&g_stats.shared_loads, 0);
  atomic_store(&g_stats.shared_stores, 0);
  atomic_store(&g_stats.builds, 0);
  atomic_store(&g_stats.build_failures, 0);
  atomic_store(&g_stats.disk_rejects, 0);
  atomic_store(&g_stats.evictions, 0);
}

/* ------------------------------------------------------------------------ */
/* Where the disk cache is, and whether it may be used.                      */

#define DEFAULT_MAX_MB 512
#define FAIL_TTL_S 3600     /* a remembered failure holds this long (then the build is tried again) */
#define LEFTOVER_AGE_S 3600 /* a temporary or build directory this old belongs to no running writer */

typedef struct where_t {
  char root[1000];
  const char* sub; /* below root, or NULL */
  char shown[1020];
} where_t;

/* False when there is no disk cache. The default is this user's cache root
 * (base/file.h; checked, made 0700) and "fused" in it.
 * TORCH_TPU_TIER2_COMPILATION_CACHE, TorchTPU's name for the per-host
 * cache, is read when TORCH_TPU_FUSE_CACHE_DIR is not set. */
static bool cache_where(where_t* w) {
  const char* d = getenv("TORCH_TPU_FUSE_CACHE_DIR");
  if (!d) d = getenv("TORCH_TPU_TIER2_COMPILATION_CACHE");
  w->sub = NULL;
  if (d) {
    if (!d[0]) return false; /* set but empty: no disk cache */
    snprintf(w->root, sizeof w->root, "%s", d);
    snprintf(w->shown, sizeof w->shown, "%s", d);
    return true;
  }
  if (!tpurt_file_user_cache_root(w->root, sizeof w->root)) return false;
  w->sub = "fused";
  snprintf(w->shown, sizeof w->shown, "%s/%s", w->root, w->sub);
  return true;
}

const char* tpurt_kernel_cache_dir(char* buf, size_t cap) {
  where_t w;
  if (!cache_where(&w)) return NULL;
  snprintf(buf, cap, "%s", w.shown);
  return buf;
}

/* The size limit, read here only. */
static uint64_t cache_limit(void) {
  int mb = DEFAULT_MAX_MB;
  tpurt_status_t s = tpurt_env_int("TORCH_TPU_FUSE_CACHE_MAX_MB", 0, 1 << 30, &mb);
  if (s) {
    static _Atomic bool warned;
    if (!atomic_exchange(&warned, true))
      TPURT_LOG(WARNING, "%s; the kernel cache keeps to %d MB", tpurt_status_message(s), DEFAULT_MAX_MB);
    tpurt_status_free(s);
    mb = DEFAULT_MAX_MB;
  }
  return (uint64_t)mb << 20;
}

/* The shared cache for many hosts (TorchTPU's tier 3):
 * TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT, with "fused" in it; false when it
 * is not set (or set empty). Kernels found there are verified as in the
 * per-host cache and copied into it; kernels built are published to it. */
static bool shared_where(where_t* w) {
  const char* d = getenv("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT");
  if (!d || !d[0]) return false;
  snprintf(w->root, sizeof w->root, "%s", d);
  w->sub = "fused";
  snprintf(w->shown, sizeof w->shown, "%s/fused", d);
  return true;
}

static pthread_mutex_t g_warn_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_warned[1100]; /* the last directory refused with a warning */

/* A cache directory opened and checked (base/file.h), or -1: none, missing
 * (without create), or refused, which is said once per directory. */
static int where_open(bool have, const where_t* w, bool create, char* why, size_t why_cap) {
  if (!have) {
    snprintf(why, why_cap, "no disk cache (TORCH_TPU_FUSE_CACHE_DIR is set but empty, or no HOME)");
    errno = ENOENT;
    return -1;
  }
  int fd = tpurt_file_dir_open_trusted(w->root, w->sub, create, why, why_cap);
  if (fd >= 0 || (!create && errno == ENOENT)) return fd;
  int e = errno;
  pthread_mutex_lock(&g_warn_lock);
  bool say = strcmp(g_warned, w->shown) != 0;
  if (say) snprintf(g_warned, sizeof g_warned, "%s", w->shown);
  pthread_mutex_unlock(&g_warn_lock);
  if (say)
    TPURT_LOG(WARNING,
              "kernel cache: not using %s: %s. Generated kernels are built for this process only; a cache "
              "directory, and every one from its root down, must belong to this user and be writable by no one "
              "else (README, Security)",
              w->shown, why);
  errno = e;
  return -1;
}

/* The per-host cache directory (-1: none or refused). */
static int disk_open(bool create, char* why, size_t why_cap) {
  where_t w;
  bool have = cache_where(&w);
  return where_open(have, &w, create, why, why_cap);
}

/* The shared cache directory (-1: not configured, missing or refused). */
static int shared_open(bool create, char* why, size_t why_cap) {
  where_t w;
  if (!shared_where(&w)) return -1;
  return where_open(true, &w, create, why, why_cap);
}

/* ------------------------------------------------------------------------ */
/* Entries on disk.                                                          */

enum { KIND_SO = 1, KIND_KERNEL = 2, KIND_FAIL = 4 };
static const char* const kExt[] = {".so", ".kernel", ".fail"};

static void name_of(char* out, size_t cap, uint64_t h, unsigned kind) {
  snprintf(out, cap, "%016llx%s", (unsigned long long)h, kExt[kind == KIND_SO ? 0 : kind == KIND_KERNEL ? 1 : 2]);
}

/* <16 lower-case hex digits>.so|.kernel|.fail: a name the cache owns. */
static bool entry_name(const char* name, uint64_t* out_hash, unsigned* out_kind) {
  uint64_t h = 0;
  for (int i = 0; i < 16; ++i) {
    char c = name[i];
    if (c >= '0' && c <= '9') h = h << 4 | (uint64_t)(c - '0');
    else if (c >= 'a' && c <= 'f') h = h << 4 | (uint64_t)(c - 'a' + 10);
    else return false;
  }
  for (unsigned k = 0; k < 3; ++k) {
    if (strcmp(name + 16, kExt[k]) == 0) {
      if (out_hash) *out_hash = h;
      if (out_kind) *out_kind = 1u << k;
      return true;
    }
  }
  return false;
}

static bool is_entry_name(const char* name) { return entry_name(name, NULL, NULL); }

static uint64_t source_hash(const char* source) { return tpurt_fnv1a_str(source, TPURT_FNV_SEED); }

bool tpurt_kernel_cache_entry_path(const char* source, const char* ext, char* buf, size_t cap) {
  char dbuf[1100];
  const char* dir = tpurt_kernel_cache_dir(dbuf, sizeof dbuf);
  if (!dir) return false;
  snprintf(buf, cap, "%s/%016llx%s", dir, (unsigned long long)source_hash(source), ext);
  return true;
}

/* Why the file `name` in dirfd is not one the cache may read, or NULL. */
static const char* file_problem(int dirfd, const char* name, char* buf, size_t cap) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) snprintf(buf, cap, "%s: %s", name, strerror(errno));
  else if (S_ISLNK(st.st_mode)) snprintf(buf, cap, "%s is a symlink", name);
  else if (!S_ISREG(st.st_mode)) snprintf(buf, cap, "%s is not a regular file", name);
  else if (st.st_uid != geteuid())
    snprintf(buf, cap, "%s belongs to uid %u, not to this user (uid %u)", name, (unsigned)st.st_uid,
             (unsigned)geteuid());
  else if (st.st_mode & 022) snprintf(buf, cap, "%s is writable by others (mode %04o)", name, st.st_mode & 07777);
  else return NULL;
  return buf;
}

/* The record: this header line, then the source. */
#define RECORD_HEAD "torch_tpu kernel v2 abi %u so %016llx\n"
#define RECORD_SCAN "torch_tpu kernel v2 abi %u so %16llx%n"

/* A remembered failure: this header line (the time and the compiler it
 * holds for), then the source. */
#define FAIL_HEAD "torch_tpu build failure v2 time %lld compiler "
#define FAIL_SCAN "torch_tpu build failure v2 time %lld compiler %n"

/* How executables are loaded: the executor installs the device's loader
 * (exec/defer: the HAL's executable_load / lookup / release). */
static _Atomic(const tpurt_kernel_loader_t*) g_loader;

void tpurt_kernel_cache_set_loader(const tpurt_kernel_loader_t* loader) { atomic_store(&g_loader, loader); }

/* The one place an executable is loaded: `fd` is an open descriptor of a
 * library whose owner and mode (and, from disk, content) were just checked
 * through it; the loader loads exactly that descriptor (never the path
 * again). The library must report this ABI version and follow the
 * struct_size rule (kernel_abi.h): it is called once with too small an args
 * struct, which it must refuse, and once with ours on an empty range, which
 * it must accept. Returns its kernel, or NULL (the executable is released
 * again). Executables that pass stay loaded for the life of the process. */
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

/* The kernel of entry h in dirfd when its record matches `source` and its
 * bytes; NULL otherwise, and an entry that exists but fails a check is
 * removed (so it is rebuilt). A library loaded is touched: its time is its
 * last use, which eviction goes by. */
static tpurt_gen_fn_t disk_load(int dirfd, uint64_t h, const char* source) {
  char meta_name[64], so_name[64], why[300];
  name_of(meta_name, sizeof meta_name, h, KIND_KERNEL);
  name_of(so_name, sizeof so_name, h, KIND_SO);
  size_t mlen = 0;
  char* meta = tpurt_file_read_owned_at(dirfd, meta_name, &mlen);
  if (!meta) {
    struct stat st;
    if (fstatat(dirfd, meta_name, &st, AT_SYMLINK_NOFOLLOW) != 0) return NULL; /* no entry */
  }
  unsigned abi = 0;
  unsigned long long want = 0;
  int head = 0;
  bool ok = meta && sscanf(meta, RECORD_SCAN, &abi, &want, &head) == 2 && head > 0 && meta[head] == '\n' &&
            abi == TPURT_KERNEL_ABI_VERSION && strcmp(meta + head + 1, source) == 0;
  free(meta);
  const char* problem = meta ? NULL : file_problem(dirfd, meta_name, why, sizeof why);
  tpurt_gen_fn_t fn = NULL;
  if (ok) {
    size_t size = 0;
    int fd = tpurt_file_open_owned_at(dirfd, so_name, &size); /* no symlink; ours; writable by no one else */
    if (fd < 0) problem = file_problem(dirfd, so_name, why, sizeof why);
    char* so = fd >= 0 ? tpurt_file_read_fd(fd, size) : NULL;
    ok = so && tpurt_fnv1a(so, size, TPURT_FNV_SEED) == want;
    free(so);
    if (ok) fn = load_executable(fd);
    if (fn) futimens(fd, NULL);
    if (fd >= 0) close(fd);
  }
  if (!fn) { /* a corrupt, foreign or other-ABI entry: discarded, so it is rebuilt */
    if (problem) /* not a stale or damaged entry: a file this user did not make this way */
      TPURT_LOG(WARNING, "kernel cache: entry %s refused and removed: %s", so_name, problem);
    else
      TPURT_LOG(INFO, "codegen: cache entry %s refused (%s)", so_name, ok ? "load" : "record or content");
    unlinkat(dirfd, meta_name, 0);
    unlinkat(dirfd, so_name, 0);
    STAT_ADD(disk_rejects);
  }
  return fn;
}

/* True when a failed build of `source` is remembered in dirfd for the
 * compiler that would run now, less than FAIL_TTL_S ago; any other record
 * (another compiler, older, unreadable) is ignored and the kernel built
 * again. */
static bool disk_failed(int dirfd, uint64_t h, const char* source) {
  char name[64];
  name_of(name, sizeof name, h, KIND_FAIL);
  size_t len = 0;
  char* p = tpurt_file_read_owned_at(dirfd, name, &len);
  if (!p) return false;
  long long when = 0;
  int at = 0;
  char* nl = NULL;
  bool f = sscanf(p, FAIL_SCAN, &when, &at) == 1 && at > 0 && (nl = strchr(p + at, '\n')) != NULL &&
           strcmp(nl + 1, source) == 0;
  if (f) {
    char cc[1400];
    tpurt_jit_compiler_id(cc, sizeof cc);
    *nl = 0;
    long long age = (long long)time(NULL) - when;
    f = strcmp(p + at, cc) == 0 && age >= -60 && age < FAIL_TTL_S;
    if (!f)
      TPURT_LOG(INFO, "codegen: failed build %s not held: %s", name,
                strcmp(p + at, cc) != 0 ? "another compiler" : "too old");
  }
  free(p);
  return f;
}

/* Entries as they are on disk: the files of one hash. */
typedef struct group_t {
  uint64_t hash;
  unsigned kinds;   /* files present (KIND_*) */
  unsigned owned;   /* ... of which regular files of this user: the cache's own */
  uint64_t bytes;   /* of the owned ones */
  int64_t used;     /* their newest modification time */
} group_t;

static int group_cmp_hash(const void* a, const void* b) {
  uint64_t x = ((const group_t*)a)->hash, y = ((const group_t*)b)->hash;
  return x < y ? -1 : x > y;
}

static int group_cmp_used(const void* a, const void* b) {
  const group_t *x = a, *y = b;
  if (x->used != y->used) return x->used < y->used ? -1 : 1;
  return group_cmp_hash(a, b);
}

/* The entries of dirfd, least recently used first, in *out (the caller
 * frees); their count, or -1. */
static ptrdiff_t scan(int dirfd, group_t** out) {
  *out = NULL;
  int dfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  DIR* dir = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!dir) {
    if (dfd >= 0) close(dfd);
    return -1;
  }
  rewinddir(dir);
  size_t n = 0, cap = 0;
  group_t* g = NULL;
  for (struct dirent* de; (de = readdir(dir));) {
    uint64_t h;
    unsigned kind;
    if (!entry_name(de->d_name, &h, &kind)) continue;
    struct stat st;
    if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      group_t* m = realloc(g, cap * sizeof *g);
      if (!m) {
        free(g);
        closedir(dir);
        return -1;
      }
      g = m;
    }
    bool own = S_ISREG(st.st_mode) && st.st_uid == geteuid();
    g[n++] = (group_t){.hash = h, .kinds = kind, .owned = own ? kind : 0u, .bytes = own ? (uint64_t)st.st_size : 0,
                       .used = own ? (int64_t)st.st_mtime : 0};
  }
  closedir(dir);
  if (n) qsort(g, n, sizeof *g, group_cmp_hash);
  size_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (m && g[m - 1].hash == g[i].hash) {
      group_t* a = &g[m - 1];
      a->kinds |= g[i].kinds;
      a->owned |= g[i].owned;
      a->bytes += g[i].bytes;
      if (g[i].used > a->used) a->used = g[i].used;
    } else {
      g[m++] = g[i];
    }
  }
  if (m) qsort(g, m, sizeof *g, group_cmp_used);
  *out = g;
  return (ptrdiff_t)m;
}

/* Removes the files of kinds `kinds` of entry h; how many went. */
static uint64_t remove_files(int dirfd, uint64_t h, unsigned kinds) {
  uint64_t removed = 0;
  char name[64];
  for (unsigned k = KIND_SO; k <= KIND_FAIL; k <<= 1) {
    if (!(kinds & k)) continue;
    name_of(name, sizeof name, h, k);
    removed += unlinkat(dirfd, name, 0) == 0;
  }
  return removed;
}

/* Makes room for `incoming` bytes: removes the least recently used entries
 * (the cache's own files only; never entry `keep`) until the cache's own
 * files and the incoming ones fit the limit. */
static void evict(int dirfd, uint64_t incoming, uint64_t keep, uint64_t limit) {
  group_t* g = NULL;
  ptrdiff_t n = scan(dirfd, &g);
  uint64_t total = 0;
  for (ptrdiff_t i = 0; i < n; ++i) total += g[i].bytes;
  for (ptrdiff_t i = 0; i < n && total + incoming > limit; ++i) {
    if (g[i].hash == keep || !g[i].owned) continue;
    remove_files(dirfd, g[i].hash, g[i].owned);
    total -= g[i].bytes;
    STAT_ADD(evictions);
    TPURT_LOG(INFO, "codegen: cache entry %016llx evicted (least recently used; limit %llu MB)",
              (unsigned long long)g[i].hash, (unsigned long long)(limit >> 20));
  }
  free(g);
}

/* Stores the library open at so_fd (size bytes) as `source`'s entry h in
 * dirfd: the library first (a reader that finds the new record finds its
 * library), renamed from the build `from` when given, else copied; then its
 * record. The least recently used entries make room first; an entry larger
 * than the whole limit is not stored. */
static bool install(int dirfd, uint64_t h, const char* source, int so_fd, size_t size,
                    const tpurt_jit_build_t* from) {
  char* so = tpurt_file_read_fd(so_fd, size);
  if (!so) return false;
  char so_name[64], meta_name[64], head[128];
  name_of(so_name, sizeof so_name, h, KIND_SO);
  name_of(meta_name, sizeof meta_name, h, KIND_KERNEL);
  int hl = snprintf(head, sizeof head, RECORD_HEAD, TPURT_KERNEL_ABI_VERSION,
                    (unsigned long long)tpurt_fnv1a(so, size, TPURT_FNV_SEED));
  uint64_t bytes = size + (uint64_t)hl + strlen(source), limit = cache_limit();
  bool ok = bytes <= limit;
  if (!ok) TPURT_LOG(INFO, "codegen: kernel %s not kept on disk: larger than the cache's limit", so_name);
  if (ok) evict(dirfd, bytes, h, limit);
  ok = ok && (from ? renameat(from->dir_fd, TPURT_JIT_LIBRARY, dirfd, so_name) == 0
                   : tpurt_file_write_new_at(dirfd, so_name, so, size, NULL, 0));
  ok = ok && tpurt_file_write_new_at(dirfd, meta_name, head, (size_t)hl, source, strlen(source));
  free(so);
  return ok;
}

bool tpurt_kernel_cache_install(const char* source, int so_fd) {
  char why[1400];
  int dirfd = disk_open(true, why, sizeof why);
  struct stat st;
  bool ok = dirfd >= 0 && fstat(so_fd, &st) == 0 &&
            install(dirfd, source_hash(source), source, so_fd, (size_t)st.st_size, NULL);
  if (dirfd >= 0) close(dirfd);
  return ok;
}

/* Copies entry h (verified by disk_load just now) from one cache directory
 * into another: its library, then its record. */
static bool copy_entry(int from_fd, int to_fd, uint64_t h, const char* source) {
  char so_name[64];
  name_of(so_name, sizeof so_name, h, KIND_SO);
  size_t size = 0;
  int fd = tpurt_file_open_owned_at(from_fd, so_name, &size);
  if (fd < 0) return false;
  bool ok = install(to_fd, h, source, fd, size, NULL);
  close(fd);
  return ok;
}

/* The directory builds run in when there is no usable cache directory. */
static int temp_parent(void) {
  const char* t = tpurt_env_str("TMPDIR");
  return open(t ? t : "/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Builds one kernel, loads it from the build's own library and, with a
 * usable cache directory, keeps it there (or remembers that it failed); its
 * loaded function, or NULL. Without one, the build runs in a private
 * directory of its own in $TMPDIR that is removed once the kernel is
 * loaded. */
static tpurt_gen_fn_t build_one(uint64_t h, const char* source) {
  char why[1400];
  int dirfd = disk_open(true, why, sizeof why);
  bool cached = dirfd >= 0;
  int parent = cached ? dirfd : temp_parent();
  if (parent < 0) return NULL;
  tpurt_jit_build_t b;
  tpurt_jit_result_t r = tpurt_jit_build(source, parent, &b);
  tpurt_gen_fn_t fn = NULL;
  if (r == TPURT_JIT_OK && !tpurt_jit_stopping()) {
    size_t size = 0;
    int so = tpurt_jit_build_open_library(&b, &size);
    if (so >= 0) {
      fn = load_executable(so);
      int shared = fn ? shared_open(true, why, sizeof why) : -1;
      if (shared >= 0) { /* published for the other hosts (a copy: the build's file goes to this host's cache) */
        if (install(shared, h, source, so, size, NULL)) STAT_ADD(shared_stores);
        close(shared);
      }
      if (fn && cached) install(dirfd, h, source, so, size, &b);
      close(so);
    }
  }
  tpurt_jit_build_remove(&b);
  char fail_name[64];
  name_of(fail_name, sizeof fail_name, h, KIND_FAIL);
  if (cached && fn) {
    unlinkat(dirfd, fail_name, 0); /* a failure remembered for another compiler, or one too old */
  } else if (cached && r != TPURT_JIT_UNAVAILABLE && !tpurt_jit_stopping()) {
    char head[1600], cc[1400]; /* remembered for this compiler, for a while: no process builds it again meanwhile */
    tpurt_jit_compiler_id(cc, sizeof cc);
    int hl = snprintf(head, sizeof head, FAIL_HEAD "%s\n", (long long)time(NULL), cc);
    if (hl > 0 && hl < (int)sizeof head)
      tpurt_file_write_new_at(dirfd, fail_name, head, (size_t)hl, source, strlen(source));
  }
  close(parent);
  return fn;
}

/* ------------------------------------------------------------------------ */
/* The disk cache for tools (tpurt/kernel_cache.h).                          */

void tpurt_kernel_cache_disk_info(tpurt_kernel_cache_info_t* o) {
  memset(o, 0, sizeof *o);
  o->limit_bytes = cache_limit();
  where_t w;
  if (!cache_where(&w)) return;
  snprintf(o->dir, sizeof o->dir, "%s", w.shown);
  int fd = tpurt_file_dir_open_trusted(w.root, w.sub, false, o->why, sizeof o->why);
  o->exists = fd >= 0 || errno != ENOENT;
  o->trusted = fd >= 0;
  if (fd < 0) {
    if (!o->exists) o->why[0] = 0;
    return;
  }
  group_t* g = NULL;
  ptrdiff_t n = scan(fd, &g);
  for (ptrdiff_t i = 0; i < n; ++i) {
    o->kernels += (g[i].owned & KIND_SO) != 0;
    o->failures += (g[i].owned & KIND_FAIL) != 0;
    o->bytes += g[i].bytes;
  }
  free(g);
  close(fd);
}

/* The cache directory for a tool: its descriptor, -1 when it does not exist
 * (nothing to do), or a status when there is none or it is not trusted (the
 * tool reports it: no warning in the log). */
static tpurt_status_t tool_open(int* out_fd) {
  char why[1400];
  where_t w;
  *out_fd = -1;
  if (!cache_where(&w))
    return TPURT_STATUS(FAILED_PRECONDITION, "no disk cache (TORCH_TPU_FUSE_CACHE_DIR is set but empty, or no HOME)");
  *out_fd = tpurt_file_dir_open_trusted(w.root, w.sub, false, why, sizeof why);
  if (*out_fd >= 0 || errno == ENOENT) return TPURT_OK;
  return TPURT_STATUS(FAILED_PRECONDITION, "not trusted: %s", why);
}

static void entry_of(const group_t* g, tpurt_kernel_cache_entry_t* e) {
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%016llx", (unsigned long long)g->hash);
  e->library = g->kinds & KIND_SO;
  e->record = g->kinds & KIND_KERNEL;
  e->failure = g->kinds & KIND_FAIL;
  e->bytes = g->bytes;
  e->last_used = g->used;
}

tpurt_status_t tpurt_kernel_cache_disk_list(tpurt_kernel_cache_entry_fn_t fn, void* user) {
  int fd;
  tpurt_status_t s = tool_open(&fd);
  if (s || fd < 0) return s;
  group_t* g = NULL;
  ptrdiff_t n = scan(fd, &g);
  close(fd);
  if (n < 0) return TPURT_STATUS(INTERNAL, "kernel cache: cannot read the directory");
  for (ptrdiff_t i = 0; i < n; ++i) {
    tpurt_kernel_cache_entry_t e;
    entry_of(&g[i], &e);
    fn(user, &e);
  }
  free(g);
  return TPURT_OK;
}

/* A writer's temporary of an entry, or a build's directory, left more than
 * LEFTOVER_AGE_S ago (a live writer's are younger). */
static bool leftover(int dirfd, const char* name, bool* out_dir) {
  bool temp = tpurt_file_is_temp_of(name, is_entry_name);
  bool build = strncmp(name, TPURT_JIT_BUILD_PREFIX, strlen(TPURT_JIT_BUILD_PREFIX)) == 0;
  struct stat st;
  if ((!temp && !build) || fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid() ||
      (temp && !S_ISREG(st.st_mode)) || (build && !S_ISDIR(st.st_mode)))
    return false;
  *out_dir = build;
  return (long long)time(NULL) - (long long)st.st_mtime > LEFTOVER_AGE_S;
}

/* Removes a build's directory: the files a build makes, then itself. */
static bool remove_build_dir(int dirfd, const char* name) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = fdopendir(fd);
  if (!d) {
    close(fd);
    return false;
  }
  rewinddir(d);
  for (struct dirent* de; (de = readdir(d));)
    if (strncmp(de->d_name, "kernel.", 7) == 0 || strncmp(de->d_name, ".kernel.", 8) == 0)
      unlinkat(fd, de->d_name, 0);
  closedir(d);
  return unlinkat(dirfd, name, AT_REMOVEDIR) == 0;
}

tpurt_status_t tpurt_kernel_cache_disk_clear(uint64_t* out_removed) {
  *out_removed = 0;
  int fd;
  tpurt_status_t s = tool_open(&fd);
  if (s || fd < 0) return s;
  group_t* g = NULL;
  ptrdiff_t n = scan(fd, &g);
  for (ptrdiff_t i = 0; i < n; ++i) *out_removed += remove_files(fd, g[i].hash, g[i].owned);
  free(g);
  int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  DIR* dir = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!dir && dfd >= 0) close(dfd);
  if (dir) rewinddir(dir); /* a duplicate shares the offset scan left at the end */
  for (struct dirent* de; dir && (de = readdir(dir));) {
    bool is_dir = false;
    if (!leftover(fd, de->d_name, &is_dir)) continue;
    *out_removed += is_dir ? remove_build_dir(fd, de->d_name) : unlinkat(fd, de->d_name, 0) == 0;
  }
  if (dir) closedir(dir);
  close(fd);
  return n < 0 ? TPURT_STATUS(INTERNAL, "kernel cache: cannot read the directory") : TPURT_OK;
}

/* Why entry g is bad, or NULL. */
static const char* entry_problem(int dirfd, const group_t* g, char* buf, size_t cap) {
  char name[64];
  for (unsigned k = KIND_SO; k <= KIND_FAIL; k <<= 1) {
    if (!(g->kinds & k)) continue;
    name_of(name, sizeof name, g->hash, k);
    if (file_problem(dirfd, name, buf, cap)) return buf;
  }
  if ((g->kinds & KIND_SO) && !(g->kinds & KIND_KERNEL)) return "a library without its record";
  if ((g->kinds & KIND_KERNEL) && !(g->kinds & KIND_SO)) return "a record without its library";
  if (g->kinds & KIND_KERNEL) {
    name_of(name, sizeof name, g->hash, KIND_KERNEL);
    size_t len = 0, size = 0;
    char* meta = tpurt_file_read_owned_at(dirfd, name, &len);
    unsigned abi = 0;
    unsigned long long want = 0;
    int head = 0;
    const char* bad = NULL;
    if (!meta || sscanf(meta, RECORD_SCAN, &abi, &want, &head) != 2 || head <= 0 || meta[head] != '\n')
      bad = "its record is unreadable";
    else if (abi != TPURT_KERNEL_ABI_VERSION) {
      snprintf(buf, cap, "its record is of kernel ABI %u (this runtime: %u)", abi, TPURT_KERNEL_ABI_VERSION);
      bad = buf;
    }
    else if (source_hash(meta + head + 1) != g->hash)
      bad = "its record's source does not hash to the entry's name";
    free(meta);
    if (bad) return bad;
    name_of(name, sizeof name, g->hash, KIND_SO);
    int fd = tpurt_file_open_owned_at(dirfd, name, &size);
    char* so = fd >= 0 ? tpurt_file_read_fd(fd, size) : NULL;
    if (fd >= 0) close(fd);
    bool same = so && tpurt_fnv1a(so, size, TPURT_FNV_SEED) == want;
    free(so);
    if (!same) return "the library's bytes do not hash to its record";
  }
  if (g->kinds & KIND_FAIL) {
    name_of(name, sizeof name, g->hash, KIND_FAIL);
    size_t len = 0;
    char* p = tpurt_file_read_owned_at(dirfd, name, &len);
    long long when = 0;
    int at = 0;
    char* nl = NULL;
    bool ok = p && sscanf(p, FAIL_SCAN, &when, &at) == 1 && at > 0 && (nl = strchr(p + at, '\n')) != NULL &&
              source_hash(nl + 1) == g->hash;
    free(p);
    if (!ok) return "its failure record is unreadable or not of its name's source";
  }
  return NULL;
}

tpurt_status_t tpurt_kernel_cache_disk_verify(bool remove, tpurt_kernel_cache_entry_fn_t fn, void* user,
                                              uint64_t* out_good, uint64_t* out_bad) {
  *out_good = *out_bad = 0;
  int fd;
  tpurt_status_t s = tool_open(&fd);
  if (s || fd < 0) return s;
  group_t* g = NULL;
  ptrdiff_t n = scan(fd, &g);
  for (ptrdiff_t i = 0; i < n; ++i) {
    char buf[400];
    const char* problem = entry_problem(fd, &g[i], buf, sizeof buf);
    if (!problem) {
      ++*out_good;
      continue;
    }
    ++*out_bad;
    tpurt_kernel_cache_entry_t e;
    entry_of(&g[i], &e);
    e.problem = problem;
    if (fn) fn(user, &e);
    if (remove) remove_files(fd, g[i].hash, g[i].kinds); /* names in this user's directory: never a target */
  }
  free(g);
  close(fd);
  return n < 0 ? TPURT_STATUS(INTERNAL, "kernel cache: cannot read the directory") : TPURT_OK;
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
  char why[1400];
  int dirfd = disk_open(false, why, sizeof why);
  tpurt_gen_fn_t fn = NULL;
  tpurt_kernel_cache_state_t state = TPURT_KERNEL_CACHE_ABSENT;
  if (dirfd >= 0) {
    fn = disk_load(dirfd, h, source);
    if (fn) {
      state = TPURT_KERNEL_CACHE_READY;
      STAT_ADD(disk_loads);
    } else if (disk_failed(dirfd, h, source)) {
      state = TPURT_KERNEL_CACHE_FAILED;
    }
  }
  if (state == TPURT_KERNEL_CACHE_ABSENT) {
    int shared = shared_open(false, why, sizeof why);
    if (shared >= 0) {
      fn = disk_load(shared, h, source); /* verified as the per-host cache's entries are */
      if (fn) {
        state = TPURT_KERNEL_CACHE_READY;
        STAT_ADD(shared_loads);
        if (dirfd < 0) dirfd = disk_open(true, why, sizeof why);
        if (dirfd >= 0) copy_entry(shared, dirfd, h, source); /* the next process finds it on this host */
      }
      close(shared);
    }
  }
  if (dirfd >= 0) close(dirfd);
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
