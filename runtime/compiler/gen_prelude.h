/* The environment of a generated fused kernel (compiler/codegen.c writes
 * `#include "compiler/gen_prelude.h"` at the top of each): the plugin ABI and
 * the same headers the elementwise family's expressions are compiled with in
 * ew_math.c and ew_core.c, so an expression means here exactly what it means
 * there. The expressions arrive fully macro-expanded (ew_ops.h, EW_STR), so
 * only these headers' functions and types are needed. Included by generated
 * code only. */
#ifndef TPURT_COMPILER_GEN_PRELUDE_H_
#define TPURT_COMPILER_GEN_PRELUDE_H_

#include <float.h>
#include <stdbool.h>
#include <tgmath.h>

#include "compiler/kernel_abi.h"
#include "ops/elementwise/ew_expf.h"
#include "ops/elementwise/ew_nextafter16.h"
#include "ops/elementwise/ew_ops.h"
#include "ops/elementwise/ew_simd.h"
#include "ops/elementwise/ew_vmath.h"

#endif /* TPURT_COMPILER_GEN_PRELUDE_H_ */
