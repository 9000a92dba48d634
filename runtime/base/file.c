/* Files the runtime trusts (base/file.h). */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE_BYTES ((off_t)64 << 20)

static bool owned_private(const struct stat* st) {
  return st->st_uid == geteuid() && !(st->st_mode & 022);
}

bool tpurt_file_dir_private(const char* path) {
  char tmp[1024];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return false;
  for (char* p = tmp + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = 0;
    mkdir(tmp, 0700);
    *p = '/';
  }
  mkdir(tmp, 0700);
  struct stat st;
  return lstat(tmp, &st) == 0 && S_ISDIR(st.st_mode) && owned_private(&st);
}

int tpurt_file_open_owned(const char* path, size_t* out_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
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

char* tpurt_file_read_owned(const char* path, size_t* out_len) {
  size_t size = 0;
  int fd = tpurt_file_open_owned(path, &size);
  if (fd < 0) return NULL;
  char* p = tpurt_file_read_fd(fd, size);
  close(fd);
  if (p) *out_len = size;
  return p;
}

bool tpurt_file_write_new(const char* path, const void* a, size_t alen, const void* b, size_t blen) {
  static _Atomic unsigned seq;
  char tmp[1200];
  if (snprintf(tmp, sizeof tmp, "%s.%d.%u.tmp", path, (int)getpid(), atomic_fetch_add(&seq, 1)) >=
      (int)sizeof tmp)
    return false;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write(fd, a, alen) == (ssize_t)alen && (!blen || write(fd, b, blen) == (ssize_t)blen);
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return false;
  }
  return true;
}

const char* tpurt_file_user_cache_dir(const char* sub, char* buf, size_t cap) {
  const char* x = getenv("XDG_CACHE_HOME");
  const char* h = getenv("HOME");
  if (x && x[0]) snprintf(buf, cap, "%s/torch_tpu/%s", x, sub);
  else if (h && h[0]) snprintf(buf, cap, "%s/.cache/torch_tpu/%s", h, sub);
  else return NULL;
  return buf;
}
