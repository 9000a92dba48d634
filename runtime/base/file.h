/* Internal: files the runtime trusts. Cached generated kernels are code that
 * the process loads, so the cache keeps to these rules, in one place: a
 * directory is used only when it and every directory from its root down
 * belong to this user and no one else may write them, each opened through
 * the one above (never through a symlink, so nothing can be swapped between
 * the check and the use); a file is read only when this user owns it, no one
 * else may write it and it is not a symlink; a file is created whole, under
 * an unpredictable temporary name that must not exist yet, then renamed into
 * place, so a planted file or symlink never redirects a write. */
#ifndef TPURT_BASE_FILE_H_
#define TPURT_BASE_FILE_H_

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>

#include "tpurt/base.h"

/* Opens the directory `root`, then each directory of `sub` below it ("a/b";
 * NULL or "" for none) through the descriptor of the one above (openat,
 * O_NOFOLLOW | O_DIRECTORY). With `create`, missing ones are made with mode
 * 0700 (and root's missing parents, which are not checked: whatever stands
 * there, what is opened must pass). Every directory opened must be a real
 * directory (a symlink, root's last component included, is refused), belong
 * to this user and have no group or other write bit. Returns the last one's
 * descriptor (O_CLOEXEC; the caller closes it), or -1 with the reason in
 * why (naming the directory); errno is ENOENT when one is merely missing
 * (without `create`). */
int tpurt_file_dir_open_trusted(const char* root, const char* sub, bool create, char* why, size_t why_cap);

/* Makes a new directory, mode 0700, named prefix + 16 random hex digits in
 * the directory dirfd (another name is tried when one exists), and opens it
 * (never through a symlink; checked as above). Its descriptor, its name in
 * out_name; -1 on failure. */
int tpurt_file_dir_make_new_at(int dirfd, const char* prefix, char* out_name, size_t name_cap);

/* Opens the regular file `name` in dirfd (AT_FDCWD: a path) for reading, no
 * symlink followed, and returns its descriptor only when this user owns it,
 * no one else may write it and it is smaller than 64 MiB; -1 otherwise.
 * *out_size gets its size. */
int tpurt_file_open_owned_at(int dirfd, const char* name, size_t* out_size);
static inline int tpurt_file_open_owned(const char* path, size_t* out_size) {
  return tpurt_file_open_owned_at(AT_FDCWD, path, out_size);
}

/* Reads all of an open descriptor (size bytes) into a NUL-terminated buffer
 * the caller frees; NULL on a short read or without memory. */
char* tpurt_file_read_fd(int fd, size_t size);

/* tpurt_file_open_owned_at + tpurt_file_read_fd; *out_len without the NUL. */
char* tpurt_file_read_owned_at(int dirfd, const char* name, size_t* out_len);
static inline char* tpurt_file_read_owned(const char* path, size_t* out_len) {
  return tpurt_file_read_owned_at(AT_FDCWD, path, out_len);
}

/* Writes a then b (blen may be 0) to a new private file (0600) in dirfd,
 * created O_EXCL | O_NOFOLLOW under the name "." + name + "." + 16 random hex
 * digits + ".tmp" (another is drawn when that exists), then renamed to
 * `name` (a plain name, no '/'), replacing whatever was there (a symlink
 * itself, never its target); true on success. */
bool tpurt_file_write_new_at(int dirfd, const char* name, const void* a, size_t alen, const void* b, size_t blen);

/* True when `name` is one of tpurt_file_write_new_at's temporaries of a
 * file whose name `is_final` accepts (so tools can remove leftovers of a
 * crashed writer and nothing else). */
bool tpurt_file_is_temp_of(const char* name, bool (*is_final)(const char* name));

/* 64 unpredictable bits (the kernel's random source; a mix of the clock,
 * the process and a counter when that is unavailable). */
uint64_t tpurt_file_random(void);

/* This user's cache root, "$XDG_CACHE_HOME/torch_tpu", else
 * "$HOME/.cache/torch_tpu", in buf; NULL when neither is set. Caches keep
 * their own subdirectory of it, opened with tpurt_file_dir_open_trusted. */
const char* tpurt_file_user_cache_root(char* buf, size_t cap);

#endif /* TPURT_BASE_FILE_H_ */
