/* The op table's shared rules: resolving an operator to its kernel (the one
 * rule the PyTorch layer, the decompositions and the compiler use), the dtype
 * and layout every entry declares, and the elementwise expression table the
 * code generator reads by name. */
#include <stdio.h>
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

/* Every entry says what it supports: a nonzero dtype mask (the dtypes of the
 * call's first tensor argument) and the strided layout. Kernels without
 * TPURT_OP_COMPLEX never see a complex tensor, so only those and the
 * complex:: entries may list complex dtypes. */
static void test_dtype_masks(void) {
  size_t n = tpurt_op_count();
  CHECK(n > 300);
  for (size_t i = 0; i < n; ++i) {
    const tpurt_op_def_t* d = tpurt_op_at(i);
    if (!d->dtypes || d->layouts != TPURT_LAYOUT_STRIDED) fprintf(stderr, "  op %s: dtypes 0x%x layouts 0x%x\n", d->name, d->dtypes, d->layouts);
    CHECK(d->dtypes != 0);
    CHECK((d->dtypes & ~(tpurt_dtype_mask_t)TPURT_DTYPES_ALL) == 0);
    CHECK(d->layouts == TPURT_LAYOUT_STRIDED);
    bool complex_ok = (d->flags & TPURT_OP_COMPLEX) || strncmp(d->name, "complex::", 9) == 0;
    if (!complex_ok && (d->dtypes & TPURT_DTYPES_COMPLEX)) fprintf(stderr, "  op %s takes complex dtypes\n", d->name);
    CHECK(complex_ok || !(d->dtypes & TPURT_DTYPES_COMPLEX));
  }
  /* the rule the PyTorch layer applies before queuing a call */
  const tpurt_op_def_t* cdist = tpurt_op_lookup("_cdist_forward");
  CHECK(cdist && tpurt_op_supports_dtype(cdist, TPURT_DTYPE_FLOAT32) && tpurt_op_supports_dtype(cdist, TPURT_DTYPE_FLOAT64));
  CHECK(cdist && !tpurt_op_supports_dtype(cdist, TPURT_DTYPE_FLOAT16) && !tpurt_op_supports_dtype(cdist, TPURT_DTYPE_INT64));
  const tpurt_op_def_t* sqrt_op = tpurt_op_lookup("sqrt");
  CHECK(sqrt_op && tpurt_op_supports_dtype(sqrt_op, TPURT_DTYPE_INT64)); /* integers promote to float */
  const tpurt_op_def_t* band = tpurt_op_lookup("bitwise_and");
  CHECK(band && tpurt_op_supports_dtype(band, TPURT_DTYPE_BOOL) && !tpurt_op_supports_dtype(band, TPURT_DTYPE_FLOAT32));
  const tpurt_op_def_t* fft = tpurt_op_lookup("_fft_c2c");
  CHECK(fft && tpurt_op_supports_dtype(fft, TPURT_DTYPE_COMPLEX64) && !tpurt_op_supports_dtype(fft, TPURT_DTYPE_FLOAT32));
  CHECK(sqrt_op && !tpurt_op_supports_dtype(sqrt_op, TPURT_DTYPE_INVALID) &&
        !tpurt_op_supports_dtype(sqrt_op, TPURT_DTYPE_COUNT));
  CHECK(sqrt_op && tpurt_op_supports_layout(sqrt_op, TPURT_LAYOUT_STRIDED) && !tpurt_op_supports_layout(sqrt_op, 1u << 1));
}

int main(void) {
  test_base_name();
  test_resolve();
  test_expressions();
  test_dtype_masks();
  return test_finish("test_registry");
}
