/* The verified executable cache (DESIGN §6): generated kernels in memory and
 * on disk, keyed by content (the hash of the generated source, which names
 * the headers, compiler and flags it is built with; compiler/jit.h), never by
 * anything process-local. Loading runs code, so a kernel is loaded from disk
 * only after its owner, mode and content hash are checked through the very
 * descriptor that is then loaded; a corrupt, foreign or other-ABI entry is
 * discarded (and so rebuilt); a failed build is remembered on disk, for the
 * compiler that failed and for an hour, so no process builds it again
 * meanwhile.
 *
 * On disk ($TORCH_TPU_FUSE_CACHE_DIR, else ~/.cache/torch_tpu/fused; set but
 * empty: none): <hash>.so, the library; <hash>.kernel, its record (the ABI
 * version, the library's content hash, the full source); <hash>.fail, a
 * source whose build failed (with the compiler and the time). The directory
 * is used only when it, and every directory from its root down, belongs to
 * this user and no one else may write it (base/file.h); otherwise a warning
 * says why, once, and kernels are built for this process only. Every file is
 * created whole, under a fresh unpredictable name, in the directory opened
 * and checked, then renamed into place. The cache keeps to
 * $TORCH_TPU_FUSE_CACHE_MAX_MB (default 512): storing an entry first removes
 * the least recently used ones (a library is touched when it is loaded), and
 * only files the cache owns (its names; regular files of this user). Without
 * a usable cache directory a kernel is built in a private temporary directory
 * that is removed once it is loaded.
 *
 * A shared cache for many hosts ($TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT/fused,
 * TorchTPU's tier 3; for example a network file system): checked, read and
 * written the same way. A kernel missing from this host's cache is looked up
 * there and, loaded, copied into this host's cache; a kernel built here is
 * published there too. Tools: tpurt/kernel_cache.h. Internal. */
#ifndef TPURT_COMPILER_CACHE_H_
#define TPURT_COMPILER_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler/kernel_abi.h"

/* Loading runs on the device: the executor installs how (the HAL's
 * executable slots). load: the executable in a verified descriptor (the
 * loader loads that descriptor, never a path), or NULL; lookup: an entry's
 * address, or NULL; release: unloads a refused one. Until a loader is
 * installed nothing loads and chains stay on the generic path. */
typedef struct tpurt_kernel_loader_t {
  void* (*load)(void* user, int fd);
  void* (*lookup)(void* user, void* executable, const char* name);
  void (*release)(void* user, void* executable);
  void* user;
} tpurt_kernel_loader_t;
void tpurt_kernel_cache_set_loader(const tpurt_kernel_loader_t* loader);

typedef enum tpurt_kernel_cache_state_e {
  TPURT_KERNEL_CACHE_ABSENT = 0, /* neither loaded nor on disk: build it */
  TPURT_KERNEL_CACHE_READY,      /* loaded */
  TPURT_KERNEL_CACHE_BUILDING,   /* queued for the builder, or being built */
  TPURT_KERNEL_CACHE_FAILED,     /* its build failed, in this process or (remembered on disk) another */
} tpurt_kernel_cache_state_t;

/* The kernel for `source`: from memory, else loaded from disk (verified).
 * *out_state says what is known; the result is non-NULL exactly when READY. */
tpurt_gen_fn_t tpurt_kernel_cache_find(const char* source, tpurt_kernel_cache_state_t* out_state);

/* Queues a background build of `source` (state ABSENT only); true when
 * queued, and then done(user, kernel or NULL) is called on the builder
 * thread when it is over. A built kernel is stored on disk and loaded
 * through the same verified path as any other. */
typedef void (*tpurt_kernel_cache_done_fn_t)(void* user, tpurt_gen_fn_t fn);
bool tpurt_kernel_cache_build(const char* source, tpurt_kernel_cache_done_fn_t done, void* user);

/* Blocks until no build is queued or running. */
void tpurt_kernel_cache_wait(void);

/* Forgets the in-memory table (after waiting for builds). Libraries stay
 * loaded (kernels may still run); the disk stays. */
void tpurt_kernel_cache_clear(void);

/* Stores the library open at so_fd on disk as `source`'s entry (its bytes
 * copied into a new private file, its record written); true on success. */
bool tpurt_kernel_cache_install(const char* source, int so_fd);

/* The cache directory (in buf), or NULL when there is none. */
const char* tpurt_kernel_cache_dir(char* buf, size_t cap);
/* The path of `source`'s entry file with extension ext (".so", ".kernel",
 * ".fail") in the cache directory; false without one. */
bool tpurt_kernel_cache_entry_path(const char* source, const char* ext, char* buf, size_t cap);

typedef struct tpurt_kernel_cache_stats_t {
  uint64_t memory_hits;    /* finds answered by a kernel loaded in this process */
  uint64_t disk_loads;     /* kernels loaded from disk (verified) instead of built */
  uint64_t shared_loads;   /* ... from the shared cache (TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT), then copied to this host's */
  uint64_t shared_stores;  /* kernels built here and published to the shared cache */
  uint64_t builds;         /* kernels compiled (and loaded) */
  uint64_t build_failures; /* builds that gave no kernel (compiler refused, no toolchain, refused at load) */
  uint64_t disk_rejects;   /* disk entries refused and discarded: content, owner, mode, symlink, ABI */
  uint64_t evictions;      /* entries removed to keep the disk cache within its size limit */
} tpurt_kernel_cache_stats_t;
void tpurt_kernel_cache_stats(tpurt_kernel_cache_stats_t* out_stats);
void tpurt_kernel_cache_stats_reset(void);

#endif /* TPURT_COMPILER_CACHE_H_ */
