/* The op table's shared rules: resolving an operator to its kernel (the one
 * rule the PyTorch layer, the decompositions and the compiler use), the dtype
 * and layout every entry declares, the argument readers every kernel uses,
 * and the elementwise expression table the code generator reads by name. */
#include <stdio.h>
#include <string.h>

#include "ops/args.h"
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

/* The kernels' one set of argument readers (ops/args.h). */
static void test_args(void) {
  int64_t one_elem = 7, ints[3] = {4, 5, 6};
  double f = 2.5;
  bool mask_in[2] = {false, true};
  int64_t sz1 = 1;
  tpurt_tensor_t t1 = test_tensor_dense(TPURT_DTYPE_INT64, &one_elem, 1, &sz1);
  tpurt_tensor_t t0 = test_tensor_dense(TPURT_DTYPE_FLOAT64, &f, 0, NULL);
  tpurt_arg_t a[10] = {
      {.kind = TPURT_ARG_INT, .v.i = -3},
      {.kind = TPURT_ARG_DOUBLE, .v.d = 2.75},
      {.kind = TPURT_ARG_BOOL, .v.b = true},
      {.kind = TPURT_ARG_NONE},
      {.kind = TPURT_ARG_INT_LIST, .count = 3, .v.ints = ints},
      {.kind = TPURT_ARG_INT_LIST, .count = 0, .v.ints = NULL},
      {.kind = TPURT_ARG_TENSOR, .v.tensor = &t1},
      {.kind = TPURT_ARG_TENSOR, .v.tensor = &t0},
      {.kind = TPURT_ARG_STRING, .v.s = "tanh"},
      {.kind = TPURT_ARG_BOOL_LIST, .count = 2, .v.bools = mask_in},
  };
  tpurt_op_call_t c = {.name = "op", .overload = "", .num_args = 10, .args = a};
  CHECK(tpurt_arg_at(&c, 10) == NULL && tpurt_arg_at(&c, -1) == NULL && tpurt_arg_at(&c, 0) == &a[0]);
  CHECK(tpurt_arg_kind(&c, 99) == TPURT_ARG_NONE && !tpurt_arg_present(&c, 3) && tpurt_arg_present(&c, 2));
  CHECK(tpurt_arg_int(&c, 0, 0) == -3 && tpurt_arg_int(&c, 1, 0) == 2 && tpurt_arg_int(&c, 2, 0) == 1);
  CHECK(tpurt_arg_int(&c, 3, 11) == 11 && tpurt_arg_int(&c, 4, 11) == 11 && tpurt_arg_int(&c, 99, 11) == 11);
  CHECK(tpurt_arg_int(&c, 6, 0) == 7 && tpurt_arg_int(&c, 8, 12) == 12);
  CHECK(tpurt_arg_double(&c, 1, 0) == 2.75 && tpurt_arg_double(&c, 0, 0) == -3 && tpurt_arg_double(&c, 7, 0) == 2.5);
  CHECK(tpurt_arg_double(&c, 3, 1.5) == 1.5 && tpurt_arg_double(&c, 4, 1.5) == 1.5);
  CHECK(tpurt_arg_bool(&c, 2, false) && tpurt_arg_bool(&c, 0, false) && tpurt_arg_bool(&c, 3, true));
  double d = 0;
  CHECK(tpurt_arg_opt_double(&c, 1, &d) && d == 2.75 && !tpurt_arg_opt_double(&c, 3, &d));
  CHECK(strcmp(tpurt_arg_string(&c, 8, "none"), "tanh") == 0 && strcmp(tpurt_arg_string(&c, 0, "none"), "none") == 0);
  CHECK(tpurt_arg_tensor(&c, 6) == &t1 && tpurt_arg_tensor(&c, 0) == NULL && tpurt_arg_tensor(&c, 99) == NULL);
  int32_t n = -1;
  CHECK(tpurt_arg_ints(&c, 4, &n) == ints && n == 3);
  CHECK(tpurt_arg_ints(&c, 5, &n) != NULL && n == 0); /* an empty list is still a list */
  CHECK(tpurt_arg_ints(&c, 0, &n) == NULL && n == 0);
  int64_t one = 0;
  const int64_t* l = tpurt_arg_int_list(&c, 0, &one, &n);
  CHECK(l && n == 1 && l[0] == -3);
  int64_t three[3], dflt[3] = {1, 2, 3};
  CHECK_OK(tpurt_arg_int_n(&c, 0, 3, NULL, three));
  CHECK(three[0] == -3 && three[2] == -3);
  CHECK_OK(tpurt_arg_int_n(&c, 4, 3, NULL, three));
  CHECK(three[0] == 4 && three[2] == 6);
  CHECK_OK(tpurt_arg_int_n(&c, 5, 3, dflt, three));
  CHECK(three[1] == 2);
  CHECK_STATUS(tpurt_arg_int_n(&c, 3, 3, NULL, three), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_arg_int_n(&c, 4, 2, NULL, three), INVALID_ARGUMENT);
  bool mask[3] = {true, true, true};
  tpurt_arg_bool_mask(&c, 9, 3, mask);
  CHECK(!mask[0] && mask[1] && mask[2]);
  const tpurt_tensor_t* t = NULL;
  CHECK_OK(tpurt_arg_tensor_nd(&c, 6, 1, &t));
  CHECK(t == &t1);
  CHECK_STATUS(tpurt_arg_tensor_nd(&c, 6, 2, &t), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_arg_tensor_min_nd(&c, 7, 1, &t), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_arg_tensor_nd(&c, 0, -1, &t), INVALID_ARGUMENT);
  float elem = 0;
  CHECK_OK(tpurt_arg_scalar_store(&c, 1, TPURT_DTYPE_FLOAT32, &elem));
  CHECK(elem == 2.75f);
  CHECK_STATUS(tpurt_arg_scalar_store(&c, 4, TPURT_DTYPE_FLOAT32, &elem), INVALID_ARGUMENT);
  tpurt_tensor_t wrapped;
  _Alignas(8) char storage[8];
  const tpurt_tensor_t* w = tpurt_arg_as_tensor(&a[1], &wrapped, storage);
  CHECK(w && w->ndim == 0 && w->dtype == TPURT_DTYPE_FLOAT64 && *(double*)w->data == 2.75);
  CHECK(tpurt_arg_as_tensor(&a[6], &wrapped, storage) == &t1 && tpurt_arg_as_tensor(&a[3], &wrapped, storage) == NULL);
  CHECK(tpurt_arg_rng(&c) == NULL);
}

/* Every entry says what it supports: a nonzero dtype mask (the dtypes of the
 * call's first tensor argument, uint16/32/64 only where a kernel names them) and the strided layout. Kernels without
 * TPURT_OP_COMPLEX never see a complex tensor, so only those and the
 * complex:: entries may list complex dtypes. */
static void test_dtype_masks(void) {
  size_t n = tpurt_op_count();
  CHECK(n > 300);
  for (size_t i = 0; i < n; ++i) {
    const tpurt_op_def_t* d = tpurt_op_at(i);
    if (!d->dtypes || d->layouts != TPURT_LAYOUT_STRIDED) fprintf(stderr, "  op %s: dtypes 0x%x layouts 0x%x\n", d->name, d->dtypes, d->layouts);
    CHECK(d->dtypes != 0);
    CHECK((d->dtypes & ~(tpurt_dtype_mask_t)(TPURT_DTYPES_ALL | TPURT_DTYPES_UINT_WIDE)) == 0);
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
  test_args();
  return test_finish("test_registry");
}
