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

/* One build: its private directory and, on success, the library in it. */
typedef struct tpurt_jit_build_t {
  char dir[1100];
  char so_path[1200];
} tpurt_jit_build_t;

/* What, besides the source, decides the code a build produces: a stamp of
 * the runtime's headers and of the compiler's version (fixed when the runtime
 * was built), the compiler run ($TORCH_TPU_CC) and its flags. The generator
 * writes it into every source, so a cache keyed by the source's hash never
 * serves a kernel of another build. */
void tpurt_jit_identity(char* buf, size_t cap);

/* Compiles `source` in a new private directory (0700) under `parent` into a
 * shared library (out->so_path, mode 0600). Compiler messages are shown at
 * TORCH_TPU_LOG_LEVEL=2. UNAVAILABLE also turns tpurt_jit_available() false.
 * Whatever the result, the caller removes out->dir (tpurt_jit_build_remove)
 * once out->so_path has been used. */
tpurt_jit_result_t tpurt_jit_build(const char* source, const char* parent, tpurt_jit_build_t* out);
void tpurt_jit_build_remove(const tpurt_jit_build_t* build);

/* False once a build found no compiler or no runtime source tree; true again
 * after tpurt_jit_retry(). */
bool tpurt_jit_available(void);
void tpurt_jit_retry(void);

/* At process exit: kills the compiler running now; every later build is
 * UNAVAILABLE and tpurt_jit_stopping() is true. */
void tpurt_jit_shutdown(void);
bool tpurt_jit_stopping(void);

#endif /* TPURT_COMPILER_JIT_H_ */
