/* The JIT build (header: compiler/jit.h). The Makefile gives this object the
 * compiler, flags and source tree the runtime was built with, and a stamp of
 * the runtime's headers and the compiler's version. */
#include "compiler/jit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/env.h"
#include "base/file.h"
#include "base/log.h"

#ifndef TPURT_JIT_CC
#define TPURT_JIT_CC "cc"
#endif
#ifndef TPURT_JIT_CFLAGS
#define TPURT_JIT_CFLAGS "-O3"
#endif
#ifndef TPURT_JIT_SRC
#define TPURT_JIT_SRC "runtime"
#endif
#ifndef TPURT_JIT_STAMP
#define TPURT_JIT_STAMP "unstamped"
#endif

extern char** environ;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_child; /* the compiler running now, or 0 */
static bool g_stopping;
static _Atomic bool g_unavailable;

static const char* jit_cc(void) {
  const char* cc = tpurt_env_str("TORCH_TPU_CC");
  return cc ? cc : TPURT_JIT_CC;
}

static const char* jit_src(void) {
  const char* s = tpurt_env_str("TORCH_TPU_RUNTIME_SRC");
  return s ? s : TPURT_JIT_SRC;
}

/* The instruction set the kernels are built for: the flags say -march=native, so a kernel built on
 * one CPU may use instructions another lacks (AVX-512 on one machine, AVX2 only on the next, both
 * reading a cache directory shared between hosts). cpuid's vendor, family/model/stepping and
 * feature words name it; the identity (and so the cache key of every kernel) includes them. */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static void jit_isa(char* buf, size_t cap) {
  unsigned a = 0, b = 0, c = 0, d = 0, max = __get_cpuid_max(0, NULL);
  if (max == 0) {
    snprintf(buf, cap, "(no cpuid)");
    return;
  }
  unsigned v[3] = {0}, f1[3] = {0}, f7[4] = {0};
  __get_cpuid(0, &a, &v[0], &v[2], &v[1]);
  if (max >= 1) __get_cpuid(1, &f1[0], &b, &f1[1], &f1[2]);
  if (max >= 7) __get_cpuid_count(7, 0, &a, &f7[0], &f7[1], &f7[2]);
  if (max >= 7) __get_cpuid_count(7, 1, &f7[3], &b, &c, &d);
  char vendor[13];
  memcpy(vendor, v, 12);
  vendor[12] = 0;
  snprintf(buf, cap, "%s %x %x.%x %x.%x.%x.%x", vendor, f1[0], f1[1], f1[2], f7[0], f7[1], f7[2], f7[3]);
}
#else
static void jit_isa(char* buf, size_t cap) { snprintf(buf, cap, "(cpu features not read on this architecture)"); }
#endif

void tpurt_jit_identity(char* buf, size_t cap) {
  char isa[128];
  jit_isa(isa, sizeof isa);
  snprintf(buf, cap, "runtime headers and compiler %s; cc %s; flags %s; cpu %s", TPURT_JIT_STAMP, jit_cc(),
           TPURT_JIT_CFLAGS, isa);
}

void tpurt_jit_compiler_id(char* buf, size_t cap) {
  const char* cc = jit_cc();
  char path[1200];
  struct stat st;
  bool found = false;
  if (strchr(cc, '/')) {
    snprintf(path, sizeof path, "%s", cc);
    found = stat(path, &st) == 0 && S_ISREG(st.st_mode);
  } else { /* as posix_spawnp finds it */
    const char* dirs = getenv("PATH");
    for (const char* d = dirs ? dirs : "/usr/local/bin:/usr/bin:/bin"; !found && d;) {
      const char* end = strchr(d, ':');
      int n = end ? (int)(end - d) : (int)strlen(d);
      snprintf(path, sizeof path, "%.*s/%s", n, n ? d : ".", cc);
      found = stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
      d = end ? end + 1 : NULL;
    }
  }
  if (!found) {
    snprintf(buf, cap, "%s not found", cc);
    return;
  }
  snprintf(buf, cap, "%s dev %llu ino %llu size %lld mtime %lld.%09ld", path, (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

bool tpurt_jit_available(void) { return !atomic_load(&g_unavailable); }
void tpurt_jit_retry(void) { atomic_store(&g_unavailable, false); }

void tpurt_jit_shutdown(void) {
  pthread_mutex_lock(&g_lock);
  g_stopping = true;
  if (g_child > 0) kill(g_child, SIGKILL);
  pthread_mutex_unlock(&g_lock);
}

bool tpurt_jit_stopping(void) {
  pthread_mutex_lock(&g_lock);
  bool s = g_stopping;
  pthread_mutex_unlock(&g_lock);
  return s;
}

/* Runs the compiler in the build's directory (dir_fd) on kernel.c into
 * kernel.so; its messages go to kernel.log. Relative names in a directory of
 * fixed file names: the same source gives the same bytes in every process
 * (the object records its source file's name). The directory is new and only
 * this user may write it, so the names the compiler writes are its own. */
static tpurt_jit_result_t run_compiler(int dir_fd, const char* shown) {
  const char* cc = jit_cc();
  char inc1[1100], inc2[1100];
  snprintf(inc1, sizeof inc1, "-I%s", jit_src());
  snprintf(inc2, sizeof inc2, "-I%s/include", jit_src());
  char flags[] = TPURT_JIT_CFLAGS;
  char* argv[64];
  int n = 0;
  argv[n++] = (char*)cc;
  for (char* save = NULL, *t = strtok_r(flags, " ", &save); t && n < 48; t = strtok_r(NULL, " ", &save)) argv[n++] = t;
  /* an undeclared function (a helper private to the library) must fail the build, not link lazily */
  char* rest[] = {"-fPIC", "-shared", "-Werror=implicit-function-declaration", "-Wl,-z,defs", inc1, inc2,
                  "-o", TPURT_JIT_LIBRARY, "kernel.c", "-lm", NULL};
  for (int i = 0; rest[i]; ++i) argv[n++] = rest[i];
  argv[n] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addfchdir_np(&fa, dir_fd);
  posix_spawn_file_actions_addopen(&fa, 1, "kernel.log", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  pthread_mutex_lock(&g_lock);
  int rc = g_stopping ? ECANCELED : posix_spawnp(&pid, cc, &fa, NULL, argv, environ);
  if (rc == 0) g_child = pid;
  pthread_mutex_unlock(&g_lock);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    TPURT_LOG(INFO, "codegen: cannot run %s: %s", cc, strerror(rc));
    return TPURT_JIT_UNAVAILABLE;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  pthread_mutex_lock(&g_lock);
  g_child = 0;
  bool stopped = g_stopping;
  pthread_mutex_unlock(&g_lock);
  if (stopped) return TPURT_JIT_UNAVAILABLE;
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  /* posix_spawnp reports a missing compiler as the child's exit status 127 */
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    TPURT_LOG(INFO, "codegen: cannot run %s", cc);
    return TPURT_JIT_UNAVAILABLE;
  }
  if (!ok && tpurt_log_enabled(TPURT_LOG_INFO)) {
    size_t len = 0;
    char* log = tpurt_file_read_owned_at(dir_fd, "kernel.log", &len);
    TPURT_LOG(INFO, "codegen: %s failed in %s:\n%.900s", cc, shown, log ? log : "");
    free(log);
  }
  return ok ? TPURT_JIT_OK : TPURT_JIT_REJECTED;
}

tpurt_jit_result_t tpurt_jit_build(const char* source, int parent_fd, tpurt_jit_build_t* out) {
  out->parent_fd = parent_fd;
  out->dir_fd = tpurt_file_dir_make_new_at(parent_fd, TPURT_JIT_BUILD_PREFIX, out->name, sizeof out->name);
  if (out->dir_fd < 0) {
    out->name[0] = 0;
    return TPURT_JIT_REJECTED;
  }
  /* No source tree to compile against: nothing can be built in this
   * process, and that says nothing about this kernel. */
  char prelude[1200];
  snprintf(prelude, sizeof prelude, "%s/compiler/gen_prelude.h", jit_src());
  tpurt_jit_result_t r;
  if (access(prelude, R_OK) != 0) {
    TPURT_LOG(INFO, "codegen: no %s: code generation off for this process", prelude);
    r = TPURT_JIT_UNAVAILABLE;
  } else if (!tpurt_file_write_new_at(out->dir_fd, "kernel.c", source, strlen(source), NULL, 0)) {
    r = TPURT_JIT_REJECTED;
  } else {
    r = run_compiler(out->dir_fd, out->name);
  }
  if (r == TPURT_JIT_UNAVAILABLE && !tpurt_jit_stopping()) atomic_store(&g_unavailable, true);
  return r;
}

int tpurt_jit_build_open_library(const tpurt_jit_build_t* b, size_t* out_size) {
  if (b->dir_fd < 0) return -1;
  int fd = openat(b->dir_fd, TPURT_JIT_LIBRARY, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct stat st;
  /* private whatever the umask: the cache reads only files no one else may write */
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || fchmod(fd, 0600) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return tpurt_file_open_owned_at(b->dir_fd, TPURT_JIT_LIBRARY, out_size);
}

void tpurt_jit_build_remove(tpurt_jit_build_t* b) {
  if (b->dir_fd < 0) return;
  static const char* const kFiles[] = {"kernel.c", TPURT_JIT_LIBRARY, "kernel.log"};
  for (size_t i = 0; i < sizeof kFiles / sizeof kFiles[0]; ++i) unlinkat(b->dir_fd, kFiles[i], 0);
  close(b->dir_fd);
  b->dir_fd = -1;
  unlinkat(b->parent_fd, b->name, AT_REMOVEDIR);
}
