/* The environment of a generated fused kernel (exec/fuse_codegen.c writes
 * `#include "exec/fuse_gen_prelude.h"` at the top of each): the same headers
 * the elementwise family's expressions are compiled with in ew_math.c and
 * ew_core.c, so an expression means here exactly what it means there.
 * The expressions arrive fully macro-expanded (ew_ops.h, EW_STR), so only
 * these headers' functions and types are needed. */
#ifndef TPURT_EXEC_FUSE_GEN_PRELUDE_H_
#define TPURT_EXEC_FUSE_GEN_PRELUDE_H_

#define TPURT_FGEN_GENERATED 1
#include <float.h>
#include <stdbool.h>
#include <tgmath.h>

#include "exec/fuse_codegen.h"
#include "ops/elementwise/ew_expf.h"
#include "ops/elementwise/ew_nextafter16.h"
#include "ops/elementwise/ew_ops.h"
#include "ops/elementwise/ew_vmath.h"

#endif /* TPURT_EXEC_FUSE_GEN_PRELUDE_H_ */
