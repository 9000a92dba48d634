/* The JIT build: runs the system compiler, with the flags the runtime itself
 * was built with and against the runtime's own headers, on a generated source
 * in a private build directory, giving a shared library. Nothing here loads
 * code (compiler/cache.c does, after verifying it). Internal. */
#ifndef TPURT_COMPILER_JIT_H_
#define TPURT_COMPILER_JIT_H_

#include <stdbool.h>
#include <stddef.h>

typedef enum tpurt_jit_result_e {
  TPURT_JIT_OK = 0,
  TPURT_JIT_REJECTED,    /* the compiler refused this source (or its files could not be written) */
  TPURT_JIT_UNAVAILABLE, /* no compiler, no runtime source tree, or the process is exiting: says
                          * nothing about the source */
} tpurt_jit_result_t;

/* One build: its private directory (a new one, named at random, in the
 * directory the caller gives; everything in it is made by this build) and,
 * on success, the library kernel.so in it. */
typedef struct tpurt_jit_build_t {
  int parent_fd;  /* the caller's directory (borrowed) */
  int dir_fd;     /* the build's directory, or -1 */
  char name[64];  /* its name in the parent */
} tpurt_jit_build_t;

/* What, besides the source, decides the code a build produces: a stamp of
 * the runtime's headers and of the compiler's version (fixed when the runtime
 * was built), the compiler run ($TORCH_TPU_CC) and its flags. The generator
 * writes it into every source, so a cache keyed by the source's hash never
 * serves a kernel of another build. */
void tpurt_jit_identity(char* buf, size_t cap);

/* The compiler that would run now, as a file: its resolved path, device,
 * inode, size and modification time ("not found" when there is none). A
 * remembered build failure holds for this compiler only: an upgraded or
 * replaced one (same name, same stamp) tries again. */
void tpurt_jit_compiler_id(char* buf, size_t cap);

/* Compiles `source` in a new private directory (0700, checked like every
 * directory the cache trusts: base/file.h) in the directory parent_fd into a
 * shared library. Compiler messages are shown at TORCH_TPU_LOG_LEVEL=2.
 * UNAVAILABLE also turns tpurt_jit_available() false. Whatever the result,
 * the caller removes the build (tpurt_jit_build_remove) once its library has
 * been used, before closing parent_fd. */
tpurt_jit_result_t tpurt_jit_build(const char* source, int parent_fd, tpurt_jit_build_t* out);
/* The built library, opened for reading (no symlink; this user's; made
 * 0600): its descriptor and size, or -1. */
int tpurt_jit_build_open_library(const tpurt_jit_build_t* build, size_t* out_size);
/* The library's name in the build's directory (to rename it elsewhere). */
#define TPURT_JIT_LIBRARY "kernel.so"
/* How a build's directory is named (then 16 random hex digits). */
#define TPURT_JIT_BUILD_PREFIX ".torch_tpu_build."
void tpurt_jit_build_remove(tpurt_jit_build_t* build);

/* False once a build found no compiler or no runtime source tree; true again
 * after tpurt_jit_retry(). */
bool tpurt_jit_available(void);
void tpurt_jit_retry(void);

/* At process exit: kills the compiler running now; every later build is
 * UNAVAILABLE and tpurt_jit_stopping() is true. */
void tpurt_jit_shutdown(void);
bool tpurt_jit_stopping(void);

#endif /* TPURT_COMPILER_JIT_H_ */
