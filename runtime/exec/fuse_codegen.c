/* Generated fused kernels (header: exec/fuse_codegen.h).
 *
 * A chain is keyed in memory by what determines its code: each member's loop
 * function (its expression and types), where each input comes from (a member,
 * contiguous memory or a broadcast scalar) and which values are stored. Sizes,
 * pointers and scalar values are arguments, so one kernel serves every size.
 *
 * Life of a key: at first sight its source is generated and the disk is
 * asked (a kernel another process built); at second sight it is queued for
 * the builder thread, which runs the system compiler with the runtime's own
 * flags, verifies and loads the result. Until then the chain runs through the
 * generic tiled path, so a new kernel never stalls the program. A compile
 * that fails marks the key as not buildable (kept on disk as <hash>.fail).
 *
 * On disk (the fused-plan directory of fuse.c): <hash>.so, and <hash>.kernel
 * holding the .so's content hash and the full source; a kernel is loaded only
 * when its source matches, its bytes hash to the recorded value, and both
 * files belong to this user and are writable by no one else (loading runs
 * code). Without a cache directory kernels are built in a private temporary
 * directory that is removed once they are loaded. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/fuse.h"
#include "exec/fuse_codegen.h"

#ifndef TPURT_FGEN_CC
#define TPURT_FGEN_CC "cc"
#endif
#ifndef TPURT_FGEN_CFLAGS
#define TPURT_FGEN_CFLAGS "-O3"
#endif
#ifndef TPURT_FGEN_SRC
#define TPURT_FGEN_SRC "runtime"
#endif
#ifndef TPURT_FGEN_STAMP
#define TPURT_FGEN_STAMP "unstamped"
#endif

extern char** environ;

enum { ST_NEW = 0, ST_BUILDING, ST_READY, ST_FAILED };

#define SLOTS 2048
#define KEY_WORDS (1 + TPURT_FGEN_MAX_OPS * (6 + TPURT_FGEN_MAX_IN))

typedef struct entry_t {
  uint64_t hash;
  int nkey;
  uint64_t* key;
  int state;
  int seen;
  tpurt_fgen_fn_t fn;
} entry_t;

typedef struct job_t {
  struct job_t* next;
  entry_t* entry;
  uint64_t src_hash;
  char* source;
} job_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;      /* a job was queued */
static pthread_cond_t g_idle_cond = PTHREAD_COND_INITIALIZER; /* the queue drained */
static entry_t g_table[SLOTS];
static job_t *g_jobs, **g_jobs_tail = &g_jobs;
static bool g_builder_started, g_building;
static _Atomic bool g_exiting;  /* the process is exiting: load nothing more */
static pid_t g_child;           /* the compiler running now, or 0 */
static _Atomic int g_enabled = -1;
static _Atomic uint64_t g_built, g_loaded, g_failed, g_runs;

bool tpurt_fgen_enabled(void) { return tpurt_env_switch(&g_enabled, "TORCH_TPU_FUSE_CODEGEN", true); }

void tpurt_fgen_set_enabled(bool on) { atomic_store(&g_enabled, on ? 1 : 0); }

void tpurt_fgen_stats(uint64_t* built, uint64_t* loaded, uint64_t* failed, uint64_t* runs) {
  *built = atomic_load(&g_built);
  *loaded = atomic_load(&g_loaded);
  *failed = atomic_load(&g_failed);
  *runs = atomic_load(&g_runs);
}

void tpurt_fgen_stats_reset(void) {
  atomic_store(&g_built, 0);
  atomic_store(&g_loaded, 0);
  atomic_store(&g_failed, 0);
  atomic_store(&g_runs, 0);
}

void tpurt_fgen_note_run(void) { atomic_fetch_add_explicit(&g_runs, 1, memory_order_relaxed); }


/* ------------------------------------------------------------------------ */
/* Source.                                                                   */

typedef struct buf_t {
  char* p;
  size_t n, cap;
  bool oom;
} buf_t;

static void put(buf_t* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf_t* b, const char* fmt, ...) {
  for (;;) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (w < 0) {
      b->oom = true;
      return;
    }
    if (b->p && (size_t)w < b->cap - b->n) {
      b->n += (size_t)w;
      return;
    }
    size_t nc = b->cap ? b->cap : 4096;
    while (nc - b->n <= (size_t)w) nc *= 2;
    char* np = realloc(b->p, nc);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
}

static const char* ctype(tpurt_dtype_t t) {
  switch (t) {
    case TPURT_DTYPE_FLOAT32: return "float";
    case TPURT_DTYPE_FLOAT64: return "double";
    case TPURT_DTYPE_BOOL: return "bool";
    default: return NULL;
  }
}

static int gen_arity(const char* gen, bool* bool_out) {
  static const struct {
    const char* name;
    int n;
    bool b;
  } kGens[] = {{"EW_L1", 1, false}, {"EW_L2", 2, false}, {"EW_L3", 3, false}, {"EW_L1B", 1, true}, {"EW_L2B", 2, true}};
  for (size_t i = 0; i < sizeof(kGens) / sizeof(kGens[0]); ++i)
    if (gen && strcmp(gen, kGens[i].name) == 0) {
      *bool_out = kGens[i].b;
      return kGens[i].n;
    }
  return -1;
}

/* The kernel's C source, or NULL when the chain is not one we generate. */
static char* gen_source(const tpurt_fgen_chain_t* c) {
  static const char kArg[TPURT_FGEN_MAX_IN] = {'a', 'b', 'c'};
  buf_t b = {0};
  put(&b, "/* torch_tpu fused kernel: %d ops (generated by runtime/exec/fuse_codegen.c) */\n", c->n);
  put(&b, "/* runtime headers and compiler: %s; flags: %s */\n", TPURT_FGEN_STAMP, TPURT_FGEN_CFLAGS);
  put(&b, "#include \"exec/fuse_gen_prelude.h\"\n\n");
  for (int k = 0; k < c->n; ++k) {
    const tpurt_fgen_member_t* m = &c->m[k];
    bool bool_out = false;
    const char *t = ctype(m->type), *to = ctype(m->out);
    if (gen_arity(m->gen, &bool_out) != m->num_inputs || !m->expr || !t || !to ||
        m->type == TPURT_DTYPE_BOOL || (bool_out ? m->out != TPURT_DTYPE_BOOL : m->out != m->type)) {
      free(b.p);
      return NULL;
    }
    put(&b, "static inline __attribute__((always_inline)) %s f%d_(const ew_params_t p, int* err_", to, k);
    for (int i = 0; i < m->num_inputs; ++i) put(&b, ", const %s %c", t, kArg[i]);
    put(&b, ") {\n  typedef %s T;\n  (void)p; (void)err_;\n  return (%s)(%s);\n}\n", t, to, m->expr);
  }
  put(&b, "\nvoid tpurt_fused_kernel(const tpurt_fgen_args_t* A_, int64_t begin_, int64_t end_, int stream_) {\n");
  for (int k = 0; k < c->n; ++k) {
    const tpurt_fgen_member_t* m = &c->m[k];
    const char *t = ctype(m->type), *to = ctype(m->out);
    put(&b, "  const ew_params_t p%d_ = *(const ew_params_t*)A_->params[%d];\n", k, k);
    put(&b, "  int* e%d_ = &((ew_params_t*)A_->params[%d])->err;\n", k, k);
    for (int i = 0; i < m->num_inputs; ++i) {
      if (m->src[i] >= 0) continue;
      if (m->scalar[i]) put(&b, "  const %s s%d_%d = *(const %s*)A_->mem[%d][%d];\n", t, k, i, t, k, i + 1);
      else put(&b, "  const %s* m%d_%d = (const %s*)A_->mem[%d][%d];\n", t, k, i, t, k, i + 1);
    }
    if (m->store) put(&b, "  %s* o%d_ = (%s*)A_->mem[%d][0];\n", to, k, to, k);
  }
  /* The body, per block of TPURT_FGEN_BLOCK elements: one loop per segment.
   * A member with a vector-math call (exp, tanh, erf, log1p) is a segment of
   * its own and the cheap members between them form one: a single loop over
   * everything spills registers and runs slower than the sum of its parts.
   * So is pow, whose loop-invariant branch on the exponent the compiler
   * unswitches only in a small loop (in a big one the loop stays scalar).
   * Values crossing segments live in block arrays (L1); the rest in registers. */
  int seg[TPURT_FGEN_MAX_OPS], nseg = 0;
  bool prev_heavy = false;
  for (int k = 0; k < c->n; ++k) {
    bool heavy = strstr(c->m[k].expr, "tpurt_") || strstr(c->m[k].expr, "powf");
    if (k == 0 || heavy || prev_heavy) ++nseg;
    seg[k] = nseg - 1;
    prev_heavy = heavy;
  }
  bool crosses[TPURT_FGEN_MAX_OPS] = {false};
  for (int k = 0; k < c->n; ++k)
    for (int i = 0; i < c->m[k].num_inputs; ++i)
      if (c->m[k].src[i] >= 0 && seg[c->m[k].src[i]] != seg[k]) crosses[c->m[k].src[i]] = true;
  put(&b, "  for (int64_t b_ = begin_; b_ < end_; b_ += TPURT_FGEN_BLOCK) {\n");
  put(&b, "    const int64_t n_ = end_ - b_ < TPURT_FGEN_BLOCK ? end_ - b_ : TPURT_FGEN_BLOCK;\n");
  for (int k = 0; k < c->n; ++k) {
    if (crosses[k]) put(&b, "    _Alignas(64) %s t%d_[TPURT_FGEN_BLOCK];\n", ctype(c->m[k].out), k);
    if (c->m[k].store) put(&b, "    _Alignas(64) %s w%d_[TPURT_FGEN_BLOCK];\n", ctype(c->m[k].out), k);
  }
  for (int sg = 0; sg < nseg; ++sg) {
    put(&b, "    _Pragma(\"GCC ivdep\") for (int64_t j_ = 0; j_ < n_; ++j_) {\n      const int64_t i_ = b_ + j_;\n");
    put(&b, "      (void)i_;\n");
    for (int k = 0; k < c->n; ++k) {
      if (seg[k] != sg) continue;
      const tpurt_fgen_member_t* m = &c->m[k];
      put(&b, "      const %s v%d_ = f%d_(p%d_, e%d_", ctype(m->out), k, k, k, k);
      for (int i = 0; i < m->num_inputs; ++i) {
        int j = m->src[i];
        if (j >= 0 && seg[j] == sg) put(&b, ", v%d_", j);
        else if (j >= 0) put(&b, ", t%d_[j_]", j);
        else if (m->scalar[i]) put(&b, ", s%d_%d", k, i);
        else put(&b, ", m%d_%d[i_]", k, i);
      }
      put(&b, ");\n");
      if (crosses[k]) put(&b, "      t%d_[j_] = v%d_;\n", k, k);
      if (m->store) put(&b, "      if (stream_) w%d_[j_] = v%d_; else o%d_[i_] = v%d_;\n", k, k, k, k);
    }
    put(&b, "    }\n");
  }
  put(&b, "    if (stream_) {\n");
  for (int k = 0; k < c->n; ++k)
    if (c->m[k].store)
      put(&b, "      for (int q_ = 0; q_ < (int)sizeof(w%d_); q_ += 64) ew_stream_store64((char*)(o%d_ + b_) + q_, "
              "(const char*)w%d_ + q_);\n", k, k, k);
  put(&b, "    }\n  }\n}\n");
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  return b.p;
}

/* ------------------------------------------------------------------------ */
/* Disk: verified loading, building.                                         */

static const char kMetaHeader[] = "torch_tpu fused kernel v1 ";

static void path_of(char* out, size_t cap, const char* dir, uint64_t h, const char* ext) {
  snprintf(out, cap, "%s/%016llx%s", dir, (unsigned long long)h, ext);
}

/* The kernel at dir/<h>.so when its record matches `source` and its bytes;
 * NULL otherwise (a corrupt or foreign entry is removed). */
static tpurt_fgen_fn_t disk_load(const char* dir, uint64_t h, const char* source) {
  char meta_path[1200], so_path[1200];
  path_of(meta_path, sizeof meta_path, dir, h, ".kernel");
  path_of(so_path, sizeof so_path, dir, h, ".so");
  size_t mlen = 0, slen = 0;
  char* meta = tpurt_file_read_owned(meta_path, &mlen);
  if (!meta) return NULL;
  char* so = tpurt_file_read_owned(so_path, &slen);
  bool ok = so && mlen > sizeof(kMetaHeader) + 17 &&
            memcmp(meta, kMetaHeader, sizeof(kMetaHeader) - 1) == 0;
  if (ok) {
    unsigned long long want = strtoull(meta + sizeof(kMetaHeader) - 1, NULL, 16);
    const char* src = strchr(meta, '\n');
    ok = src && strcmp(src + 1, source) == 0 && want == tpurt_fnv1a(so, slen, TPURT_FNV_SEED);
  }
  free(meta);
  free(so);
  if (!ok) {
    unlink(meta_path);
    unlink(so_path);
    return NULL;
  }
  void* lib = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    if (tpurt_fuse_trace()) fprintf(stderr, "[fuse] codegen: dlopen %s: %s\n", so_path, dlerror());
    return NULL;
  }
  tpurt_fgen_fn_t fn;
  void* sym = dlsym(lib, "tpurt_fused_kernel");
  memcpy(&fn, &sym, sizeof fn);
  return fn; /* the library stays loaded for the life of the process */
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

static bool write_file(const char* path, const void* a, size_t alen, const void* b, size_t blen) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write(fd, a, alen) == (ssize_t)alen && (!blen || write(fd, b, blen) == (ssize_t)blen);
  return close(fd) == 0 && ok;
}

static const char* src_dir(void) {
  const char* e = getenv("TORCH_TPU_RUNTIME_SRC");
  return e && e[0] ? e : TPURT_FGEN_SRC;
}

/* Runs the compiler on tmp.c into tmp.so; true on success. Its messages go
 * to tmp.log (shown under TORCH_TPU_FUSE_TRACE=1). */
enum { CC_OK, CC_REJECTED, CC_UNAVAILABLE };

static int compile(const char* c_path, const char* so_path, const char* log_path) {
  const char* cc = getenv("TORCH_TPU_CC");
  if (!cc || !cc[0]) cc = TPURT_FGEN_CC;
  char inc1[1100], inc2[1100];
  snprintf(inc1, sizeof inc1, "-I%s", src_dir());
  snprintf(inc2, sizeof inc2, "-I%s/include", src_dir());
  char flags[] = TPURT_FGEN_CFLAGS;
  char* argv[64];
  int n = 0;
  argv[n++] = (char*)cc;
  for (char* save = NULL, *t = strtok_r(flags, " ", &save); t && n < 48; t = strtok_r(NULL, " ", &save)) argv[n++] = t;
  /* an undeclared function (a helper private to the library) must fail the build, not link lazily */
  char* rest[] = {"-fPIC", "-shared", "-Werror=implicit-function-declaration", "-Wl,-z,defs", inc1, inc2,
                  "-o", (char*)so_path, (char*)c_path, "-lm", NULL};
  for (int i = 0; rest[i]; ++i) argv[n++] = rest[i];
  argv[n] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  pthread_mutex_lock(&g_lock);
  int rc = g_exiting ? ECANCELED : posix_spawnp(&pid, cc, &fa, NULL, argv, environ);
  if (rc == 0) g_child = pid;
  pthread_mutex_unlock(&g_lock);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    if (tpurt_fuse_trace()) fprintf(stderr, "[fuse] codegen: cannot run %s: %s\n", cc, strerror(rc));
    return CC_UNAVAILABLE;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  pthread_mutex_lock(&g_lock);
  g_child = 0;
  pthread_mutex_unlock(&g_lock);
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok && tpurt_fuse_trace()) {
    size_t len = 0;
    char* log = tpurt_file_read_owned(log_path, &len);
    fprintf(stderr, "[fuse] codegen: %s failed on %s:\n%.2000s\n", cc, c_path, log ? log : "");
    free(log);
  }
  return ok ? CC_OK : CC_REJECTED;
}

static const char* cache_dir_or_tmp(char* buf, size_t cap, bool* tmp) {
  const char* d = tpurt_fuse_cache_dir(buf, cap);
  *tmp = false;
  if (d && tpurt_file_dir_private(d)) return d; /* else a private temporary one */
  const char* t = getenv("TMPDIR");
  snprintf(buf, cap, "%s/torch_tpu_fgen.XXXXXX", t && t[0] ? t : "/tmp");
  if (!mkdtemp(buf)) return NULL;
  *tmp = true;
  return buf;
}

/* Builds one kernel; its loaded function, or NULL. */
static tpurt_fgen_fn_t build(uint64_t h, const char* source) {
  char dbuf[1024];
  bool tmp_dir = false;
  const char* dir = cache_dir_or_tmp(dbuf, sizeof dbuf, &tmp_dir);
  if (!dir) return NULL;
  static _Atomic unsigned seq;
  char base[1200], c_path[1300], so_tmp[1300], log_path[1300], so_path[1200], meta_path[1200], meta_tmp[1300];
  /* A private build directory with fixed file names: the same source then
   * gives the same bytes in every process (the object records its source's
   * name), so processes racing to build one kernel agree with its record. */
  snprintf(base, sizeof base, "%s/.build.%016llx.%d.%u", dir, (unsigned long long)h, (int)getpid(),
           atomic_fetch_add(&seq, 1));
  if (mkdir(base, 0700) != 0) {
    if (tmp_dir) rmdir(dir);
    return NULL;
  }
  snprintf(c_path, sizeof c_path, "%s/kernel.c", base);
  snprintf(so_tmp, sizeof so_tmp, "%s/kernel.so", base);
  snprintf(log_path, sizeof log_path, "%s/kernel.log", base);
  snprintf(meta_tmp, sizeof meta_tmp, "%s/kernel.meta", base);
  path_of(so_path, sizeof so_path, dir, h, ".so");
  path_of(meta_path, sizeof meta_path, dir, h, ".kernel");
  tpurt_fgen_fn_t fn = NULL;
  size_t slen = strlen(source);
  /* No compiler or no source tree to compile against: nothing can be built
   * in this process, and that says nothing about this kernel (no .fail). */
  char prelude[1200];
  snprintf(prelude, sizeof prelude, "%s/exec/fuse_gen_prelude.h", src_dir());
  int cc = access(prelude, R_OK) != 0              ? CC_UNAVAILABLE
           : !write_file(c_path, source, slen, NULL, 0) ? CC_REJECTED
                                                    : compile(c_path, so_tmp, log_path);
  if (cc == CC_UNAVAILABLE) {
    if (tpurt_fuse_trace())
      fprintf(stderr, "[fuse] codegen: no compiler or no %s: code generation off for this process\n", prelude);
    tpurt_fgen_set_enabled(false);
  }
  if (cc == CC_OK) {
    size_t len = 0;
    char* so = tpurt_file_read_owned(so_tmp, &len);
    char head[64];
    int hl = snprintf(head, sizeof head, "%s%016llx\n", kMetaHeader, (unsigned long long)tpurt_fnv1a(so, len, TPURT_FNV_SEED));
    bool ok = so && write_file(meta_tmp, head, (size_t)hl, source, slen) && rename(so_tmp, so_path) == 0 &&
              rename(meta_tmp, meta_path) == 0;
    free(so);
    pthread_mutex_lock(&g_lock);
    bool exiting = g_exiting;
    pthread_mutex_unlock(&g_lock);
    if (ok && !exiting) fn = disk_load(dir, h, source);
    if (!fn) {
      unlink(so_path);
      unlink(meta_path);
    }
  }
  if (!fn && cc != CC_UNAVAILABLE && !tmp_dir && !g_exiting) { /* remembered: no process builds it again */
    char fail_path[1200];
    path_of(fail_path, sizeof fail_path, dir, h, ".fail");
    write_file(fail_path, source, slen, NULL, 0);
  }
  unlink(c_path);
  unlink(so_tmp);
  unlink(log_path);
  unlink(meta_tmp);
  rmdir(base);
  if (tmp_dir) { /* loaded (or failed): nothing to keep */
    unlink(so_path);
    unlink(meta_path);
    rmdir(dir);
  }
  return fn;
}

/* At exit: no library is loaded while the process tears down (the build in
 * flight is stopped, its files removed by the builder if it gets the time). */
static void on_exit_stop_builds(void) {
  pthread_mutex_lock(&g_lock);
  g_exiting = true;
  if (g_child > 0) kill(g_child, SIGKILL);
  pthread_mutex_unlock(&g_lock);
}

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
    pthread_mutex_unlock(&g_lock);
    tpurt_fgen_fn_t fn = build(j->src_hash, j->source);
    if (fn) atomic_fetch_add(&g_built, 1);
    else atomic_fetch_add(&g_failed, 1);
    if (tpurt_fuse_trace())
      fprintf(stderr, "[fuse] codegen: kernel %016llx %s\n", (unsigned long long)j->src_hash,
              fn ? "built" : "failed (the chain stays on the generic path)");
    pthread_mutex_lock(&g_lock);
    j->entry->fn = fn;
    j->entry->state = fn ? ST_READY : ST_FAILED;
    free(j->source);
    free(j);
  }
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Lookup.                                                                   */

static int make_key(const tpurt_fgen_chain_t* c, uint64_t* key) {
  int n = 0;
  key[n++] = (uint64_t)c->n;
  for (int k = 0; k < c->n; ++k) {
    const tpurt_fgen_member_t* m = &c->m[k];
    key[n++] = (uint64_t)(uintptr_t)m->loop;
    key[n++] = (uint64_t)(uintptr_t)m->expr;
    key[n++] = (uint64_t)m->type | (uint64_t)m->out << 8 | (uint64_t)m->num_inputs << 16 | (uint64_t)m->store << 24;
    for (int i = 0; i < m->num_inputs; ++i) key[n++] = (uint64_t)(m->src[i] + 2) | (uint64_t)m->scalar[i] << 8;
  }
  return n;
}

static entry_t* find(uint64_t h, const uint64_t* key, int nkey, bool insert) {
  size_t i = h & (SLOTS - 1);
  for (size_t probe = 0; probe < SLOTS; ++probe, i = (i + 1) & (SLOTS - 1)) {
    entry_t* e = &g_table[i];
    if (!e->key) {
      if (!insert) return NULL;
      e->key = malloc(sizeof(uint64_t) * (size_t)nkey);
      if (!e->key) return NULL;
      memcpy(e->key, key, sizeof(uint64_t) * (size_t)nkey);
      e->nkey = nkey;
      e->hash = h;
      e->state = ST_NEW;
      e->seen = 0;
      e->fn = NULL;
      return e;
    }
    if (e->hash == h && e->nkey == nkey && memcmp(e->key, key, sizeof(uint64_t) * (size_t)nkey) == 0) return e;
  }
  return NULL; /* full: such chains stay generic */
}

tpurt_fgen_fn_t tpurt_fgen_lookup(const tpurt_fgen_chain_t* c) {
  if (!tpurt_fgen_enabled() || c->n < 1 || c->n > TPURT_FGEN_MAX_OPS) return NULL;
  uint64_t key[KEY_WORDS];
  int nkey = make_key(c, key);
  uint64_t h = tpurt_fnv1a(key, sizeof(uint64_t) * (size_t)nkey, TPURT_FNV_SEED);
  pthread_mutex_lock(&g_lock);
  entry_t* e = find(h, key, nkey, true);
  if (!e || e->state != ST_NEW) {
    tpurt_fgen_fn_t fn = e && e->state == ST_READY ? e->fn : NULL;
    pthread_mutex_unlock(&g_lock);
    return fn;
  }
  int seen = ++e->seen;
  if (seen > 2) { /* raced with a clear or a build that could not be queued */
    pthread_mutex_unlock(&g_lock);
    return NULL;
  }
  pthread_mutex_unlock(&g_lock);

  char* source = gen_source(c);
  uint64_t sh = source ? tpurt_fnv1a(source, strlen(source), TPURT_FNV_SEED) : 0;
  char dbuf[1024];
  const char* dir = source ? tpurt_fuse_cache_dir(dbuf, sizeof dbuf) : NULL;
  tpurt_fgen_fn_t fn = NULL;
  int state = source ? ST_NEW : ST_FAILED;
  if (dir && seen == 1) {
    fn = disk_load(dir, sh, source);
    if (fn) {
      state = ST_READY;
      atomic_fetch_add(&g_loaded, 1);
    } else if (disk_failed(dir, sh, source)) {
      state = ST_FAILED;
    }
  }
  job_t* job = NULL;
  if (state == ST_NEW && seen == 2) {
    job = malloc(sizeof(*job));
    if (job) {
      job->next = NULL;
      job->entry = e;
      job->src_hash = sh;
      job->source = source;
      source = NULL;
      state = ST_BUILDING;
    }
  }
  free(source);
  pthread_mutex_lock(&g_lock);
  e->state = state;
  e->fn = fn;
  if (job) {
    *g_jobs_tail = job;
    g_jobs_tail = &job->next;
    g_building = true;
    if (!g_builder_started) {
      pthread_t t;
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      g_builder_started = pthread_create(&t, &attr, builder, NULL) == 0;
      if (g_builder_started) atexit(on_exit_stop_builds);
      pthread_attr_destroy(&attr);
      if (!g_builder_started) { /* no thread: nothing gets built */
        g_jobs = NULL;
        g_jobs_tail = &g_jobs;
        e->state = ST_FAILED;
        g_building = false;
        free(job->source);
        free(job);
      }
    }
    pthread_cond_signal(&g_cond);
  }
  pthread_mutex_unlock(&g_lock);
  return fn;
}

void tpurt_fgen_wait(void) {
  pthread_mutex_lock(&g_lock);
  while (g_building || g_jobs) pthread_cond_wait(&g_idle_cond, &g_lock);
  pthread_mutex_unlock(&g_lock);
}

void tpurt_fgen_clear(void) {
  tpurt_fgen_wait();
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < SLOTS; ++i) {
    free(g_table[i].key);
    memset(&g_table[i], 0, sizeof(g_table[i]));
  }
  pthread_mutex_unlock(&g_lock);
}
