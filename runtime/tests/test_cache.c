/* The kernel cache's rules on disk (base/file.h, compiler/cache.c): which
 * directories it trusts (this user's, writable by no one else, never through
 * a symlink, checked from the root down), how it writes (never through a
 * planted symlink), that an untrusted directory is left alone while kernels
 * are still built, eviction of the least recently used entries at the size
 * limit, how long and for which compiler a failed build is remembered, and
 * the tools' walks (list, verify, clear) against the directory's contents.
 * Run as root, "another user" is uid 65534 (files handed over with chown);
 * otherwise the wrong-mode cases stand in for it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/file.h"
#include "compiler/cache.h"
#include "compiler/codegen.h"
#include "compiler/jit.h"
#include "ops/elementwise/ew_ops.h"
#include "test_util.h"
#include "tpurt/kernel_cache.h"

#define OTHER_UID 65534
#define N 1000

static char g_dir[256];

static void path(char* out, size_t cap, const char* rel) { snprintf(out, cap, "%s/%s", g_dir, rel); }

static void write_file(const char* p, const char* text) {
  FILE* f = fopen(p, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static bool file_is(const char* p, const char* text) {
  char buf[256] = {0};
  FILE* f = fopen(p, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  return n == strlen(text) && memcmp(buf, text, n) == 0;
}

/* Opens root/sub as the cache would; true when trusted, the reason in why. */
static bool trusted(const char* root, const char* sub, bool create, char* why, size_t cap) {
  why[0] = 0;
  int fd = tpurt_file_dir_open_trusted(root, sub, create, why, cap);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

static void test_trusted_dirs(void) {
  char p[300], q[400], why[600];
  /* made private; its parents made too */
  path(p, sizeof p, "t/new/cache");
  CHECK(trusted(p, "a/b", true, why, sizeof why));
  struct stat st;
  snprintf(q, sizeof q, "%s/a/b", p);
  CHECK(lstat(q, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  /* missing, not made: ENOENT, so callers can tell "none yet" from "refused" */
  path(q, sizeof q, "t/absent");
  CHECK(!trusted(q, NULL, false, why, sizeof why) && errno == ENOENT);
  /* writable by others, or by the group: refused, the root or any directory below it */
  CHECK(chmod(p, 0777) == 0);
  CHECK(!trusted(p, NULL, false, why, sizeof why) && strstr(why, "writable by its group and others (mode 0777)"));
  CHECK(!trusted(p, "a/b", true, why, sizeof why));
  CHECK(chmod(p, 0700) == 0);
  snprintf(q, sizeof q, "%s/a", p);
  CHECK(chmod(q, 0770) == 0);
  CHECK(!trusted(p, "a/b", false, why, sizeof why) && strstr(why, "/a is writable by its group"));
  CHECK(chmod(q, 0700) == 0);
  /* a symlink: refused as the root (with or without a trailing slash) and below it */
  path(q, sizeof q, "t/link");
  CHECK(symlink(p, q) == 0);
  CHECK(!trusted(q, NULL, false, why, sizeof why) && strstr(why, "is a symlink"));
  strcat(q, "/");
  CHECK(!trusted(q, NULL, false, why, sizeof why) && strstr(why, "is a symlink"));
  snprintf(q, sizeof q, "%s/c", p);
  CHECK(symlink("a", q) == 0);
  CHECK(!trusted(p, "c/b", false, why, sizeof why) && strstr(why, "/c is a symlink"));
  CHECK(!trusted(p, "../cache/a", false, why, sizeof why));
  /* another user's */
  if (geteuid() == 0) {
    CHECK(chown(p, OTHER_UID, OTHER_UID) == 0);
    CHECK(!trusted(p, NULL, false, why, sizeof why) && strstr(why, "belongs to uid 65534, not to this user"));
    CHECK(chown(p, 0, 0) == 0);
    snprintf(q, sizeof q, "%s/a", p);
    CHECK(chown(q, OTHER_UID, OTHER_UID) == 0);
    CHECK(!trusted(p, "a/b", false, why, sizeof why) && strstr(why, "belongs to uid 65534"));
    CHECK(chown(q, 0, 0) == 0);
  }
  CHECK(trusted(p, "a/b", false, why, sizeof why));
}

static bool is_fail(const char* name) { return strcmp(name, "entry.fail") == 0; }

static void test_write_new(void) {
  char dir[400], target[400], link[500];
  path(dir, sizeof dir, "w");
  int fd = tpurt_file_dir_open_trusted(dir, NULL, true, NULL, 0);
  CHECK(fd >= 0);
  /* a symlink planted at the name: replaced by the new file, its target untouched */
  path(target, sizeof target, "elsewhere.txt");
  write_file(target, "precious");
  snprintf(link, sizeof link, "%s/entry.fail", dir);
  CHECK(symlink(target, link) == 0);
  CHECK(tpurt_file_write_new_at(fd, "entry.fail", "new ", 4, "record", 6));
  struct stat st;
  CHECK(lstat(link, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600);
  CHECK(file_is(link, "new record") && file_is(target, "precious"));
  CHECK(!tpurt_file_write_new_at(fd, "a/b", "x", 1, NULL, 0)); /* a name, never a path */
  /* nothing left behind but the file; its temporary is recognised as one */
  int n = 0;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
  FILE* ls = popen(cmd, "r");
  CHECK(ls && fscanf(ls, "%d", &n) == 1 && n == 1);
  if (ls) pclose(ls);
  CHECK(tpurt_file_is_temp_of(".entry.fail.00112233aabbccdd.tmp", is_fail));
  CHECK(!tpurt_file_is_temp_of(".entry.fail.00112233aabbccdd.tmpx", is_fail));
  CHECK(!tpurt_file_is_temp_of(".entry.fail.0011223.tmp", is_fail));
  CHECK(!tpurt_file_is_temp_of(".entry.so.00112233aabbccdd.tmp", is_fail));
  /* a file this user does not own is not read */
  if (geteuid() == 0) {
    CHECK(chown(link, OTHER_UID, OTHER_UID) == 0);
    size_t len = 0;
    CHECK(tpurt_file_read_owned_at(fd, "entry.fail", &len) == NULL);
  }
  close(fd);
}

/* ------------------------------------------------------------------------ */
/* The cache itself.                                                         */

static float g_x[N], g_y[N];
static ew_params_t g_params;

static char* source_of(const char* expr) {
  tpurt_codegen_chain_t one = {.n = 1};
  one.m[0] = (tpurt_codegen_member_t){expr, TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 1,
                                      {{TPURT_CODEGEN_SRC_CONTIG, -1}}, true};
  return tpurt_codegen_source(&one);
}

static void done_cb(void* user, tpurt_gen_fn_t fn) { *(tpurt_gen_fn_t*)user = fn; }

static tpurt_gen_fn_t build(const char* src) {
  tpurt_gen_fn_t fn = NULL;
  CHECK(tpurt_kernel_cache_build(src, done_cb, &fn));
  tpurt_kernel_cache_wait();
  return fn;
}

/* fn computes abs over g_x. */
static bool computes_abs(tpurt_gen_fn_t fn) {
  if (!fn) return false;
  tpurt_gen_args_t a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  a.mem[0][0] = (char*)g_y;
  a.mem[0][1] = (char*)g_x;
  a.params[0] = &g_params;
  if (fn(&a, 0, N, 0) != 0) return false;
  for (int i = 0; i < N; ++i)
    if (g_y[i] != (g_x[i] < 0 ? -g_x[i] : g_x[i])) return false;
  return true;
}

static int count_files(const char* dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls -A '%s' 2>/dev/null | wc -l", dir);
  FILE* ls = popen(cmd, "r");
  int n = -1;
  if (ls) {
    if (fscanf(ls, "%d", &n) != 1) n = -1;
    pclose(ls);
  }
  return n;
}

/* Runs fn with stderr going to a file; whether what it wrote contains `want`. */
static bool stderr_has(void (*fn)(void*), void* arg, const char* want) {
  char p[400];
  path(p, sizeof p, "stderr.txt");
  fflush(stderr);
  int saved = dup(2), fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char buf[4096] = {0};
  FILE* f = fopen(p, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  fputs(buf, stderr); /* still shown */
  return strstr(buf, want) != NULL;
}

static void build_abs(void* out) {
  char* src = source_of("abs");
  *(tpurt_gen_fn_t*)out = src ? build(src) : NULL;
  free(src);
}

/* An untrusted cache directory: warned about (once), left empty, kernels still built and loaded. */
static void test_untrusted_dir_not_used(void) {
  char dir[400];
  path(dir, sizeof dir, "open");
  CHECK(mkdir(dir, 0777) == 0 && chmod(dir, 0777) == 0);
  setenv("TORCH_TPU_FUSE_CACHE_DIR", dir, 1);
  tpurt_kernel_cache_clear();
  tpurt_gen_fn_t fn = NULL;
  CHECK(stderr_has(build_abs, &fn, "kernel cache: not using"));
  CHECK(computes_abs(fn));
  CHECK(count_files(dir) == 0);
  tpurt_kernel_cache_clear();
  CHECK(!stderr_has(build_abs, &fn, "kernel cache: not using")); /* said once */
  CHECK(computes_abs(fn) && count_files(dir) == 0);
  tpurt_kernel_cache_info_t info;
  tpurt_kernel_cache_disk_info(&info);
  CHECK(info.exists && !info.trusted && strstr(info.why, "writable by its group and others"));
  uint64_t removed = 0;
  CHECK_STATUS(tpurt_kernel_cache_disk_clear(&removed), FAILED_PRECONDITION);
}

static void touch_at(const char* p, time_t when) {
  struct timespec ts[2] = {{when, 0}, {when, 0}};
  CHECK(utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW) == 0);
}

/* Planted entries (cache-owned by name) of `kb` KiB, `age` seconds old. */
static void plant(const char* dir, const char* hash, int kb, int age) {
  char p[500];
  snprintf(p, sizeof p, "%s/%s.so", dir, hash);
  FILE* f = fopen(p, "w");
  CHECK(f != NULL);
  if (!f) return;
  for (int i = 0; i < kb * 1024; ++i) fputc('x', f);
  fclose(f);
  chmod(p, 0600);
  touch_at(p, time(NULL) - age);
}

static bool present(const char* dir, const char* name) {
  char p[500];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return lstat(p, &st) == 0;
}

static void test_eviction(void) {
  char dir[400];
  path(dir, sizeof dir, "lru");
  setenv("TORCH_TPU_FUSE_CACHE_DIR", dir, 1);
  setenv("TORCH_TPU_FUSE_CACHE_MAX_MB", "1", 1);
  tpurt_kernel_cache_clear();
  tpurt_kernel_cache_stats_reset();
  CHECK(mkdir(dir, 0700) == 0);
  plant(dir, "00000000000000a1", 300, 4000); /* oldest */
  plant(dir, "00000000000000a2", 300, 3000);
  plant(dir, "00000000000000a3", 300, 2000);
  plant(dir, "00000000000000a4", 300, 1000);
  char other[500]; /* not the cache's (by name): never evicted */
  snprintf(other, sizeof other, "%s/notes.txt", dir);
  write_file(other, "mine");
  touch_at(other, 1);
  tpurt_gen_fn_t fn = NULL;
  build_abs(&fn);
  CHECK(computes_abs(fn));
  tpurt_kernel_cache_stats_t s;
  tpurt_kernel_cache_stats(&s);
  /* 1200 KiB planted + the new entry > 1 MiB: the oldest goes, and only it */
  CHECK(s.evictions == 1 && !present(dir, "00000000000000a1.so"));
  CHECK(present(dir, "00000000000000a2.so") && present(dir, "00000000000000a3.so") &&
        present(dir, "00000000000000a4.so") && file_is(other, "mine"));
  tpurt_kernel_cache_info_t info;
  tpurt_kernel_cache_disk_info(&info);
  CHECK(info.trusted && info.kernels == 4 && info.limit_bytes == (1u << 20) && info.bytes <= (1u << 20));
  /* loading the kernel again makes it the most recently used: the next build evicts a2 and a3 before it */
  char* abs_src = source_of("abs");
  char so[600];
  CHECK(tpurt_kernel_cache_entry_path(abs_src, ".kernel", so, sizeof so));
  touch_at(so, time(NULL) - 5000);
  CHECK(tpurt_kernel_cache_entry_path(abs_src, ".so", so, sizeof so));
  touch_at(so, time(NULL) - 5000);
  tpurt_kernel_cache_clear();
  tpurt_kernel_cache_state_t st;
  CHECK(computes_abs(tpurt_kernel_cache_find(abs_src, &st)));
  struct stat sb;
  CHECK(lstat(so, &sb) == 0 && sb.st_mtime >= time(NULL) - 60); /* touched */
  plant(dir, "00000000000000a5", 300, 0);
  char* neg_src = source_of("neg");
  CHECK(neg_src && build(neg_src) != NULL);
  CHECK(!present(dir, "00000000000000a2.so") && present(dir, "00000000000000a4.so") && present(dir, "00000000000000a5.so"));
  CHECK(lstat(so, &sb) == 0);
  free(neg_src);
  /* a limit of 0 keeps nothing on disk; kernels are still built */
  setenv("TORCH_TPU_FUSE_CACHE_MAX_MB", "0", 1);
  char* sq_src = source_of("sqrt");
  CHECK(sq_src && build(sq_src) != NULL);
  CHECK(sq_src && tpurt_kernel_cache_entry_path(sq_src, ".so", so, sizeof so) && !present(dir, strrchr(so, '/') + 1));
  free(sq_src);
  unsetenv("TORCH_TPU_FUSE_CACHE_MAX_MB");
  free(abs_src);
}

/* A remembered failure holds for the compiler that failed, for an hour. */
static void test_failure_records(void) {
  char dir[400];
  path(dir, sizeof dir, "fail");
  setenv("TORCH_TPU_FUSE_CACHE_DIR", dir, 1);
  tpurt_kernel_cache_clear();
  char* ok_src = source_of("abs");
  char* bad = malloc(strlen(ok_src) + 64);
  sprintf(bad, "%s\n#error \"not a kernel\"\n", ok_src);
  CHECK(build(bad) == NULL);
  char fail[600];
  CHECK(tpurt_kernel_cache_entry_path(bad, ".fail", fail, sizeof fail) && access(fail, F_OK) == 0);
  tpurt_kernel_cache_clear();
  tpurt_kernel_cache_state_t st;
  CHECK(tpurt_kernel_cache_find(bad, &st) == NULL && st == TPURT_KERNEL_CACHE_FAILED);
  /* records written by hand over the good source's name: honoured or not */
  char cc[1400], rec[4000 + 1400];
  tpurt_jit_compiler_id(cc, sizeof cc);
  CHECK(tpurt_kernel_cache_entry_path(ok_src, ".fail", fail, sizeof fail));
  struct {
    long long age;
    const char* compiler;
    bool held;
  } cases[] = {{10, cc, true}, {7200, cc, false}, {10, "/usr/bin/cc dev 1 ino 2 size 3 mtime 4.0", false}};
  for (int i = 0; i < 3; ++i) {
    snprintf(rec, sizeof rec, "torch_tpu build failure v2 time %lld compiler %s\n%s",
             (long long)time(NULL) - cases[i].age, cases[i].compiler, ok_src);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.new", fail);
    write_file(tmp, rec);
    chmod(tmp, 0600);
    CHECK(rename(tmp, fail) == 0);
    tpurt_kernel_cache_clear();
    tpurt_gen_fn_t fn = tpurt_kernel_cache_find(ok_src, &st);
    CHECK(fn == NULL && st == (cases[i].held ? TPURT_KERNEL_CACHE_FAILED : TPURT_KERNEL_CACHE_ABSENT));
    if (!cases[i].held) { /* retried: built, and the stale record removed */
      CHECK(computes_abs(build(ok_src)) && access(fail, F_OK) != 0);
      char so[600];
      CHECK(tpurt_kernel_cache_entry_path(ok_src, ".so", so, sizeof so) && unlink(so) == 0);
      CHECK(tpurt_kernel_cache_entry_path(ok_src, ".kernel", so, sizeof so) && unlink(so) == 0);
    }
  }
  free(bad);
  free(ok_src);
}

typedef struct seen_t {
  int n;
  char names[16][17];
  char problems[16][200];
} seen_t;

static void collect(void* user, const tpurt_kernel_cache_entry_t* e) {
  seen_t* s = user;
  if (s->n >= 16) return;
  snprintf(s->names[s->n], 17, "%s", e->name);
  snprintf(s->problems[s->n], 200, "%s", e->problem ? e->problem : "");
  ++s->n;
}

static const char* problem_of(const seen_t* s, const char* name) {
  for (int i = 0; i < s->n; ++i)
    if (strcmp(s->names[i], name) == 0) return s->problems[i];
  return NULL;
}

/* list / verify / clear against what is on disk. */
static void test_tools(void) {
  char dir[400], p[600], target[400];
  path(dir, sizeof dir, "tools");
  setenv("TORCH_TPU_FUSE_CACHE_DIR", dir, 1);
  tpurt_kernel_cache_clear();
  tpurt_gen_fn_t fn = NULL;
  build_abs(&fn); /* one good entry */
  char* abs_src = source_of("abs");
  char good[17];
  CHECK(tpurt_kernel_cache_entry_path(abs_src, ".so", p, sizeof p));
  snprintf(good, sizeof good, "%.16s", strrchr(p, '/') + 1);
  char* neg_src = source_of("neg"); /* a second, then its library corrupted */
  CHECK(build(neg_src) != NULL);
  char corrupt[17], so[600];
  CHECK(tpurt_kernel_cache_entry_path(neg_src, ".so", so, sizeof so));
  snprintf(corrupt, sizeof corrupt, "%.16s", strrchr(so, '/') + 1);
  {
    FILE* f = fopen(so, "r+b");
    CHECK(f != NULL);
    if (f) {
      fseek(f, 100, SEEK_SET);
      int c = fgetc(f);
      fseek(f, 100, SEEK_SET);
      fputc(c ^ 0x5A, f);
      fclose(f);
    }
  }
  snprintf(p, sizeof p, "%s/00000000000000b1.so", dir); /* a library without a record */
  write_file(p, "lonely");
  chmod(p, 0600);
  path(target, sizeof target, "outside.so"); /* a symlink at an entry's name */
  write_file(target, "outside");
  snprintf(p, sizeof p, "%s/00000000000000b2.so", dir);
  CHECK(symlink(target, p) == 0);
  snprintf(p, sizeof p, "%s/README", dir); /* not the cache's */
  write_file(p, "keep me");
  snprintf(p, sizeof p, "%s/.00000000000000b1.so.0123456789abcdef.tmp", dir); /* a writer's leftover */
  write_file(p, "half");
  touch_at(p, time(NULL) - 7200);
  if (geteuid() == 0) { /* another user's file at an entry's name */
    snprintf(p, sizeof p, "%s/00000000000000b3.fail", dir);
    write_file(p, "theirs");
    CHECK(chown(p, OTHER_UID, OTHER_UID) == 0);
  }

  seen_t all = {0};
  CHECK_OK(tpurt_kernel_cache_disk_list(collect, &all));
  int want = geteuid() == 0 ? 5 : 4;
  CHECK(all.n == want && problem_of(&all, good) && problem_of(&all, corrupt) && problem_of(&all, "00000000000000b1"));
  tpurt_kernel_cache_info_t info;
  tpurt_kernel_cache_disk_info(&info);
  CHECK(info.trusted && info.kernels == 3 && info.failures == 0);

  seen_t bad = {0};
  uint64_t ok = 0, nbad = 0;
  CHECK_OK(tpurt_kernel_cache_disk_verify(false, collect, &bad, &ok, &nbad));
  CHECK(ok == 1 && nbad == (uint64_t)want - 1 && !problem_of(&bad, good));
  const char* why = problem_of(&bad, corrupt);
  CHECK(why && strstr(why, "do not hash to its record"));
  why = problem_of(&bad, "00000000000000b1");
  CHECK(why && strstr(why, "without its record"));
  why = problem_of(&bad, "00000000000000b2");
  CHECK(why && strstr(why, "is a symlink"));
  if (geteuid() == 0) {
    why = problem_of(&bad, "00000000000000b3");
    CHECK(why && strstr(why, "belongs to uid 65534"));
  }
  CHECK(count_files(dir) == (geteuid() == 0 ? 9 : 8)); /* nothing removed by a check */
  CHECK_OK(tpurt_kernel_cache_disk_verify(true, NULL, NULL, &ok, &nbad));
  CHECK(ok == 1 && !present(dir, "00000000000000b2.so") && file_is(target, "outside"));
  snprintf(p, sizeof p, "%s.so", corrupt);
  CHECK(!present(dir, p));
  CHECK_OK(tpurt_kernel_cache_disk_verify(false, NULL, NULL, &ok, &nbad));
  CHECK(ok == 1 && nbad == 0);

  uint64_t removed = 0;
  CHECK_OK(tpurt_kernel_cache_disk_clear(&removed));
  CHECK(removed == 3); /* the good entry's two files and the leftover temporary */
  CHECK(count_files(dir) == 1 && present(dir, "README"));
  tpurt_kernel_cache_disk_info(&info);
  CHECK(info.kernels == 0 && info.bytes == 0);
  free(abs_src);
  free(neg_src);
}

int main(void) {
  CHECK_OK(tpurt_init());
  snprintf(g_dir, sizeof g_dir, "%s/tpurt_test_cache.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  for (int i = 0; i < N; ++i) g_x[i] = (float)(i - N / 2) * 0.25f;
  test_trusted_dirs();
  test_write_new();
  test_untrusted_dir_not_used();
  test_eviction();
  test_failure_records();
  test_tools();
  tpurt_kernel_cache_wait();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  CHECK(system(cmd) == 0);
  return test_finish("test_cache");
}
