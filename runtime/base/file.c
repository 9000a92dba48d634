/* Files the runtime trusts (base/file.h). */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILE_BYTES ((off_t)64 << 20)
#define NAME_TRIES 16 /* names drawn before giving up: 16 collisions of 64 random bits is an attack or a bug */

static bool owned_private(const struct stat* st) { return st->st_uid == geteuid() && !(st->st_mode & 022); }

static void say(char* why, size_t cap, const char* fmt, ...) TPURT_PRINTF(3, 4);
static void say(char* why, size_t cap, const char* fmt, ...) {
  if (!why || !cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, cap, fmt, ap);
  va_end(ap);
}

uint64_t tpurt_file_random(void) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
  static _Atomic uint64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  r = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^
      (atomic_fetch_add(&counter, 1) * 0x9E3779B97F4A7C15ull);
  r ^= r >> 31;
  return r * 0xBF58476D1CE4E5B9ull;
}

/* Checks an opened directory; `shown` names it in the reason. */
static bool dir_fd_trusted(int fd, const char* shown, char* why, size_t cap) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    say(why, cap, "%s: %s", shown, strerror(errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    say(why, cap, "%s is not a directory", shown);
    return false;
  }
  if (st.st_uid != geteuid()) {
    say(why, cap, "%s belongs to uid %u, not to this user (uid %u)", shown, (unsigned)st.st_uid, (unsigned)geteuid());
    return false;
  }
  if (st.st_mode & 022) {
    say(why, cap, "%s is writable by %s (mode %04o)", shown,
        (st.st_mode & 022) == 022 ? "its group and others" : (st.st_mode & 020) ? "its group" : "others",
        (unsigned)(st.st_mode & 07777));
    return false;
  }
  return true;
}

/* Opens directory `name` in `at` (never through a symlink), making it first
 * when missing and `create`, and checks it. */
static int open_dir_at(int at, const char* name, bool create, const char* shown, char* why, size_t cap) {
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = openat(at, name, flags);
  if (fd < 0 && errno == ENOENT && create) {
    if (mkdirat(at, name, 0700) == 0) {
      fd = openat(at, name, flags);
      /* a directory just made is private whatever the umask (an existing one is checked instead) */
      if (fd >= 0) fchmod(fd, 0700);
    } else if (errno == EEXIST) {
      fd = openat(at, name, flags); /* made by another process meanwhile */
    } else {
      say(why, cap, "cannot create %s: %s", shown, strerror(errno));
      return -1;
    }
  }
  if (fd < 0) {
    int e = errno;
    struct stat st;
    if ((e == ELOOP || e == ENOTDIR) && fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
      say(why, cap, "%s is a symlink", shown);
    else if (e == ENOTDIR)
      say(why, cap, "%s is not a directory", shown);
    else if (e == ENOENT)
      say(why, cap, "%s does not exist", shown);
    else
      say(why, cap, "cannot open %s: %s", shown, strerror(e));
    errno = e;
    return -1;
  }
  if (!dir_fd_trusted(fd, shown, why, cap)) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}

int tpurt_file_dir_open_trusted(const char* root, const char* sub, bool create, char* why, size_t cap) {
  char path[1024];
  size_t len = root ? strlen(root) : 0;
  while (len > 1 && root[len - 1] == '/') --len; /* "dir/" would follow a symlink named dir */
  if (len == 0 || len >= sizeof path) {
    say(why, cap, "no usable directory name ('%s')", root ? root : "");
    errno = EINVAL;
    return -1;
  }
  memcpy(path, root, len);
  path[len] = 0;
  if (create) { /* root's parents: made if missing, not checked (the directories opened below are) */
    for (char* p = path + 1; *p; ++p) {
      if (*p != '/') continue;
      *p = 0;
      mkdir(path, 0700);
      *p = '/';
    }
  }
  int fd = open_dir_at(AT_FDCWD, path, create, path, why, cap);
  if (fd < 0 || !sub) return fd;
  char shown[1400], part[256];
  for (const char* s = sub; *s;) {
    size_t n = strcspn(s, "/");
    if (n == 0 || (n == 1 && s[0] == '.')) {
      s += n + (s[n] == '/');
      continue;
    }
    if (n >= sizeof part || (n == 2 && s[0] == '.' && s[1] == '.')) {
      say(why, cap, "no usable subdirectory name in '%s'", sub);
      close(fd);
      errno = EINVAL;
      return -1;
    }
    memcpy(part, s, n);
    part[n] = 0;
    snprintf(shown, sizeof shown, "%s/%.*s", path, (int)(s - sub + n), sub);
    int next = open_dir_at(fd, part, create, shown, why, cap);
    int e = errno;
    close(fd);
    if (next < 0) {
      errno = e;
      return -1;
    }
    fd = next;
    s += n + (s[n] == '/');
  }
  return fd;
}

int tpurt_file_dir_make_new_at(int dirfd, const char* prefix, char* out_name, size_t name_cap) {
  for (int i = 0; i < NAME_TRIES; ++i) {
    if (snprintf(out_name, name_cap, "%s%016llx", prefix, (unsigned long long)tpurt_file_random()) >= (int)name_cap)
      return -1;
    if (mkdirat(dirfd, out_name, 0700) != 0) {
      if (errno == EEXIST) continue;
      return -1;
    }
    int fd = openat(dirfd, out_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && fchmod(fd, 0700) == 0 && dir_fd_trusted(fd, out_name, NULL, 0)) return fd;
    if (fd >= 0) close(fd);
    unlinkat(dirfd, out_name, AT_REMOVEDIR);
    return -1;
  }
  return -1;
}

int tpurt_file_open_owned_at(int dirfd, const char* name, size_t* out_size) {
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !owned_private(&st) || st.st_size >= MAX_FILE_BYTES) {
    close(fd);
    return -1;
  }
  *out_size = (size_t)st.st_size;
  return fd;
}

char* tpurt_file_read_fd(int fd, size_t size) {
  char* p = malloc(size + 1);
  size_t got = 0;
  while (p && got < size) {
    ssize_t r = pread(fd, p + got, size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (!p || got != size) {
    free(p);
    return NULL;
  }
  p[got] = 0;
  return p;
}

char* tpurt_file_read_owned_at(int dirfd, const char* name, size_t* out_len) {
  size_t size = 0;
  int fd = tpurt_file_open_owned_at(dirfd, name, &size);
  if (fd < 0) return NULL;
  char* p = tpurt_file_read_fd(fd, size);
  close(fd);
  if (p) *out_len = size;
  return p;
}

static bool write_all(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

#define TEMP_SUFFIX ".tmp"

bool tpurt_file_write_new_at(int dirfd, const char* name, const void* a, size_t alen, const void* b, size_t blen) {
  if (!name[0] || strchr(name, '/')) return false;
  char tmp[512];
  int fd = -1;
  for (int i = 0; i < NAME_TRIES && fd < 0; ++i) {
    if (snprintf(tmp, sizeof tmp, ".%s.%016llx" TEMP_SUFFIX, name, (unsigned long long)tpurt_file_random()) >=
        (int)sizeof tmp)
      return false;
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) return false;
  }
  if (fd < 0) return false;
  bool ok = fchmod(fd, 0600) == 0 && write_all(fd, a, alen) && (!blen || write_all(fd, b, blen));
  ok = close(fd) == 0 && ok;
  if (!ok || renameat(dirfd, tmp, dirfd, name) != 0) {
    unlinkat(dirfd, tmp, 0);
    return false;
  }
  return true;
}

bool tpurt_file_is_temp_of(const char* name, bool (*is_final)(const char* name)) {
  size_t n = strlen(name), tail = 1 + 16 + strlen(TEMP_SUFFIX); /* ".<16 hex>.tmp" */
  if (n <= 1 + tail || name[0] != '.' || strcmp(name + n - strlen(TEMP_SUFFIX), TEMP_SUFFIX) != 0) return false;
  const char* dot = name + n - tail;
  if (*dot != '.') return false;
  for (int i = 1; i <= 16; ++i)
    if (!dot[i] || !strchr("0123456789abcdef", dot[i])) return false;
  char final[512];
  size_t fl = (size_t)(dot - (name + 1));
  if (fl >= sizeof final) return false;
  memcpy(final, name + 1, fl);
  final[fl] = 0;
  return is_final(final);
}

const char* tpurt_file_user_cache_root(char* buf, size_t cap) {
  const char* x = getenv("XDG_CACHE_HOME");
  const char* h = getenv("HOME");
  int n;
  if (x && x[0]) n = snprintf(buf, cap, "%s/torch_tpu", x);
  else if (h && h[0]) n = snprintf(buf, cap, "%s/.cache/torch_tpu", h);
  else return NULL;
  return n < (int)cap ? buf : NULL;
}
