/* Internal: files the runtime trusts. Cached generated kernels are code that
 * the process loads, so a cache file is used only when this user owns it and
 * no one else may write it, it is never followed through a symlink, and it is
 * created whole (a private temporary, then rename) so a reader never sees
 * half of one. */
#ifndef TPURT_BASE_FILE_H_
#define TPURT_BASE_FILE_H_

#include <stddef.h>

#include "tpurt/base.h"

/* Creates `path` and its missing parents with mode 0700; true when the final
 * directory exists, is a real directory (not a symlink), belongs to this
 * user and no one else may write it. */
bool tpurt_file_dir_private(const char* path);

/* Opens a regular file for reading (no symlink followed) and returns its
 * descriptor only when this user owns it, no one else may write it and it is
 * smaller than 64 MiB; -1 otherwise. *out_size gets its size. */
int tpurt_file_open_owned(const char* path, size_t* out_size);

/* Reads all of an open descriptor (size bytes) into a NUL-terminated buffer
 * the caller frees; NULL on a short read or without memory. */
char* tpurt_file_read_fd(int fd, size_t size);

/* tpurt_file_open_owned + tpurt_file_read_fd; *out_len without the NUL. */
char* tpurt_file_read_owned(const char* path, size_t* out_len);

/* Writes a then b (blen may be 0) to a new private file (0600) next to
 * `path` and renames it over `path`; true on success. Never writes through
 * a symlink or into an existing file. */
bool tpurt_file_write_new(const char* path, const void* a, size_t alen, const void* b, size_t blen);

/* The user's cache directory for `sub` ("$XDG_CACHE_HOME/torch_tpu/<sub>",
 * else "$HOME/.cache/torch_tpu/<sub>") in buf; NULL when neither is set. */
const char* tpurt_file_user_cache_dir(const char* sub, char* buf, size_t cap);

#endif /* TPURT_BASE_FILE_H_ */
