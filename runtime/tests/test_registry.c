/* The op table's shared rules: resolving an operator to its kernel (the one
 * rule the PyTorch layer, the decompositions and the compiler use) and the
 * elementwise expression table the code generator reads by name. */
#include <string.h>

#include "ops/elementwise/elementwise.h"
#include "test_util.h"

static void test_base_name(void) {
  char b[64];
  CHECK(strcmp(tpurt_op_base_name("aten::add_", b, sizeof b), "add") == 0);
  CHECK(strcmp(tpurt_op_base_name("aten::add", b, sizeof b), "add") == 0);
  CHECK(strcmp(tpurt_op_base_name("mul_", b, sizeof b), "mul") == 0);
  CHECK(strcmp(tpurt_op_base_name("aten::__ilshift__", b, sizeof b), "__ilshift__") == 0);
  CHECK(strcmp(tpurt_op_base_name("aten::_", b, sizeof b), "_") == 0);
  CHECK(strcmp(tpurt_op_base_name("aten::relu_", b, 3), "re") == 0); /* cut to the buffer */
}

static void test_resolve(void) {
  /* overload first, then the base name */
  CHECK(tpurt_op_resolve("aten::add_", "Tensor", 0) == tpurt_op_lookup("add"));
  CHECK(tpurt_op_resolve("aten::sum", "dim_IntList", 0) == tpurt_op_lookup("sum"));
  CHECK(tpurt_op_resolve("aten::add", "out", 0) == tpurt_op_lookup("add"));
  CHECK(tpurt_op_resolve("aten::no_such_op", "", 0) == NULL);
  CHECK(tpurt_op_resolve("", "", 0) == NULL);
  /* complex calls: "complex::<name>" first, else a kernel that takes complex */
  const tpurt_op_def_t* c = tpurt_op_resolve("aten::add", "Tensor", TPURT_RESOLVE_COMPLEX);
  CHECK(c != NULL && c == tpurt_op_lookup("complex::add"));
  const tpurt_op_def_t* r = tpurt_op_resolve("aten::add", "Tensor", 0);
  CHECK(r != NULL && !(r->flags & TPURT_OP_COMPLEX) && r != c);
  const tpurt_op_def_t* polar = tpurt_op_resolve("aten::polar", "", TPURT_RESOLVE_COMPLEX);
  CHECK(polar != NULL && (polar->flags & TPURT_OP_COMPLEX));
  /* a real-only kernel has no complex form */
  CHECK(tpurt_op_resolve("aten::lgamma", "", TPURT_RESOLVE_COMPLEX) == NULL);
}

static void test_expressions(void) {
  size_t n = tpurt_ew_expr_count();
  CHECK(n > 60);
  for (size_t i = 0; i < n; ++i) {
    const tpurt_ew_expr_t* e = tpurt_ew_expr_at(i);
    CHECK(e && e->name && e->text && e->gen && strncmp(e->gen, "EW_L", 4) == 0);
    CHECK(tpurt_ew_expr_find(e->name) == e); /* names are unique */
  }
  CHECK(tpurt_ew_expr_at(n) == NULL);
  const tpurt_ew_expr_t* add = tpurt_ew_expr_find("add");
  CHECK(add && strcmp(add->gen, "EW_L2") == 0 && strstr(add->text, "a") != NULL);
  CHECK(tpurt_ew_expr_find("gelu_tanh") && tpurt_ew_expr_find("gelu_erf"));
  CHECK(tpurt_ew_expr_find("gcd") == NULL); /* integer-only: no float expression */
  CHECK(tpurt_ew_expr_find("copy") == NULL); /* loops written by hand */
  CHECK(tpurt_ew_expr_find(NULL) == NULL);
}

int main(void) {
  test_base_name();
  test_resolve();
  test_expressions();
  return test_finish("test_registry");
}
