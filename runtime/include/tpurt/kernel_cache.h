/* tpurt: the on-disk cache of generated kernels, for tools
 * (`python -m torch_tpu.cache`): where it is and whether it may be used, its
 * entries, removing them, checking them. The rules are the runtime's own
 * (runtime/compiler/cache.h; README, "Security"): the cache is used only
 * when its directory, and every one from its root down, belongs to this user
 * and is writable by no one else; files are read only when this user owns
 * them, no one else may write them and they are not symlinks. */
#ifndef TPURT_KERNEL_CACHE_H_
#define TPURT_KERNEL_CACHE_H_

#include "tpurt/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpurt_kernel_cache_info_t {
  char dir[1024];       /* the cache directory; "" when there is none (TORCH_TPU_FUSE_CACHE_DIR set but
                         * empty, or neither it, XDG_CACHE_HOME nor HOME set) */
  bool exists;          /* the directory is there (or reached through a symlink, which is refused) */
  bool trusted;         /* the runtime would use it */
  char why[512];        /* why not, when it exists and is not trusted */
  uint64_t kernels;     /* entries with a library */
  uint64_t failures;    /* remembered failed builds */
  uint64_t bytes;       /* in the cache's own files (entries and failure records) */
  uint64_t limit_bytes; /* TORCH_TPU_FUSE_CACHE_MAX_MB: least recently used entries go beyond it */
} tpurt_kernel_cache_info_t;
TPURT_API void tpurt_kernel_cache_disk_info(tpurt_kernel_cache_info_t* out_info);

/* One entry: the files named <hash>.so (the library), <hash>.kernel (its
 * record: ABI version, the library's content hash, the source) and
 * <hash>.fail (a remembered failed build). */
typedef struct tpurt_kernel_cache_entry_t {
  char name[17];        /* the hash, 16 hex digits */
  bool library, record, failure;
  uint64_t bytes;       /* of its files that are the cache's own */
  int64_t last_used;    /* Unix time of its newest file (a library is touched when it is loaded) */
  const char* problem;  /* verify: why the entry is bad (NULL: good); borrowed for the call */
} tpurt_kernel_cache_entry_t;
typedef void (*tpurt_kernel_cache_entry_fn_t)(void* user, const tpurt_kernel_cache_entry_t* entry);

/* Calls fn for each entry, least recently used first. FAILED_PRECONDITION
 * (naming the reason) when there is no disk cache or it is not trusted. */
TPURT_API tpurt_status_t tpurt_kernel_cache_disk_list(tpurt_kernel_cache_entry_fn_t fn, void* user);

/* Removes the cache's own files: entries and failure records that are
 * regular files of this user, and leftovers of writers and builds that
 * stopped more than an hour ago; nothing else (no symlink's target, no other
 * user's file, no unknown name). *out_removed: files and directories
 * removed. FAILED_PRECONDITION as for list. */
TPURT_API tpurt_status_t tpurt_kernel_cache_disk_clear(uint64_t* out_removed);

/* Checks every entry without loading anything: each file is a regular file
 * of this user that no one else may write; a library has its record and a
 * record its library; the record's ABI version is this runtime's, its source
 * hashes to the entry's name and the library's bytes to the record's hash; a
 * failure record is readable and of its name's source. fn is called for each
 * bad entry (problem set), which is removed when `remove`. *out_good /
 * *out_bad count entries. FAILED_PRECONDITION as for list. */
TPURT_API tpurt_status_t tpurt_kernel_cache_disk_verify(bool remove, tpurt_kernel_cache_entry_fn_t fn, void* user,
                                                        uint64_t* out_good, uint64_t* out_bad);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_KERNEL_CACHE_H_ */
