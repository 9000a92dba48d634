/* Source generation for fused elementwise chains (DESIGN §6): a chain of
 * expression ops of the elementwise family (ops/elementwise/ew_ops.h) becomes
 * one C function that computes every member per element in registers. The
 * chain is described by value only (expression names, types, where inputs
 * come from), never by function or loop pointers, so the same chain gives the
 * same description, and the same source, in every process. The generator
 * reads each expression's text from the elementwise library's table
 * (tpurt_ew_expr_find); it never runs a kernel. Internal: not an ABI (the ABI
 * is compiler/kernel_abi.h). */
#ifndef TPURT_COMPILER_CODEGEN_H_
#define TPURT_COMPILER_CODEGEN_H_

#include <stdbool.h>
#include <stdint.h>

#include "compiler/kernel_abi.h"
#include "tpurt/dtype.h"

/* Where a member's input comes from. */
typedef enum tpurt_codegen_src_e {
  TPURT_CODEGEN_SRC_MEMBER = 0, /* an earlier member's value (in a register) */
  TPURT_CODEGEN_SRC_CONTIG,     /* memory, one element per element of the run (mem[k][1 + i]) */
  TPURT_CODEGEN_SRC_SCALAR,     /* memory, one element for the whole run (a broadcast scalar) */
} tpurt_codegen_src_t;

typedef struct tpurt_codegen_input_t {
  uint8_t src;   /* tpurt_codegen_src_t */
  int8_t member; /* the producing member, for TPURT_CODEGEN_SRC_MEMBER */
} tpurt_codegen_input_t;

/* One member: out = expr(inputs), computed in the loop type. */
typedef struct tpurt_codegen_member_t {
  const char* expr;   /* its expression's name (tpurt_ew_expr_t.name: "add", "gelu_tanh") */
  tpurt_dtype_t type; /* the loop type T: float32 or float64 */
  tpurt_dtype_t out;  /* the value's type: T, or bool for the comparisons */
  int num_inputs;     /* the expression's arity (1 to TPURT_GEN_MAX_IN) */
  tpurt_codegen_input_t in[TPURT_GEN_MAX_IN];
  bool store; /* the value is written to memory (mem[k][0]) */
} tpurt_codegen_member_t;

typedef struct tpurt_codegen_chain_t {
  int n;
  tpurt_codegen_member_t m[TPURT_GEN_MAX_OPS];
} tpurt_codegen_chain_t;

/* A hash of the description's content (the names' characters, not their
 * addresses), and equality of content. */
uint64_t tpurt_codegen_chain_hash(const tpurt_codegen_chain_t* chain);
bool tpurt_codegen_chain_equal(const tpurt_codegen_chain_t* a, const tpurt_codegen_chain_t* b);

/* The kernel's C source (malloc'ed, the caller frees it), or NULL when the
 * chain is not one we generate (an unknown expression, a type or arity the
 * expression does not have, an input from a later member) or without memory.
 * The source names the build it is for (tpurt_jit_identity: the runtime's
 * headers, the compiler and its flags), so hashing it keys a cache safely.
 * The function it defines is TPURT_KERNEL_FN_SYMBOL (kernel_abi.h), and it
 * exports TPURT_KERNEL_ABI_SYMBOL. */
char* tpurt_codegen_source(const tpurt_codegen_chain_t* chain);

#endif /* TPURT_COMPILER_CODEGEN_H_ */
