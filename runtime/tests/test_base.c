/* Status objects, dtype traits/promotion/conversions, and the op registry. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static void test_status(void) {
  tpurt_status_t s = TPURT_STATUS(INVALID_ARGUMENT, "bad dim %d", 7);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_INVALID_ARGUMENT);
  CHECK(strcmp(tpurt_status_message(s), "bad dim 7") == 0);
  CHECK(strstr(tpurt_status_location(s), "test_base.c:") != NULL);
  s = tpurt_status_annotate(s, "aten::%s", "add");
  CHECK(strcmp(tpurt_status_message(s), "aten::add: bad dim 7") == 0);
  CHECK(strstr(tpurt_status_location(s), "test_base.c:") != NULL);
  tpurt_status_free(s);
  CHECK(tpurt_status_code(TPURT_OK) == TPURT_STATUS_OK);
  CHECK(tpurt_status_annotate(TPURT_OK, "x") == TPURT_OK);
}

static void test_dtype(void) {
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_UINT8, TPURT_DTYPE_INT8) == TPURT_DTYPE_INT16);
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_FLOAT16, TPURT_DTYPE_BFLOAT16) == TPURT_DTYPE_FLOAT32);
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_INT64, TPURT_DTYPE_FLOAT16) == TPURT_DTYPE_FLOAT16);
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_BOOL, TPURT_DTYPE_BOOL) == TPURT_DTYPE_BOOL);
  CHECK(tpurt_dtype_size(TPURT_DTYPE_BFLOAT16) == 2);
  /* uint16/32/64 promote with themselves, floating and complex only (PyTorch raises otherwise) */
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_UINT16, TPURT_DTYPE_UINT16) == TPURT_DTYPE_UINT16);
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_UINT64, TPURT_DTYPE_FLOAT32) == TPURT_DTYPE_FLOAT32);
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_COMPLEX64, TPURT_DTYPE_UINT32) == TPURT_DTYPE_COMPLEX64);
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_UINT16, TPURT_DTYPE_UINT8) == TPURT_DTYPE_INVALID);
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_INT64, TPURT_DTYPE_UINT32) == TPURT_DTYPE_INVALID);
  CHECK(tpurt_dtype_promote(TPURT_DTYPE_UINT32, TPURT_DTYPE_UINT64) == TPURT_DTYPE_INVALID);
  CHECK(tpurt_dtype_size(TPURT_DTYPE_UINT32) == 4 && !tpurt_dtype_traits[TPURT_DTYPE_UINT64].is_signed);
  {
    /* loads zero-extend, stores truncate; uint64 keeps all 64 bits through int64 */
    uint16_t u16 = 65535;
    uint32_t u32 = 4294967295u;
    uint64_t u64 = 18446744073709551615ull, back = 0;
    CHECK(tpurt_dtype_load_i64(TPURT_DTYPE_UINT16, &u16) == 65535);
    CHECK(tpurt_dtype_load_i64(TPURT_DTYPE_UINT32, &u32) == 4294967295ll);
    CHECK(tpurt_dtype_load_f64(TPURT_DTYPE_UINT64, &u64) == 18446744073709551615.0);
    tpurt_dtype_store_i64(TPURT_DTYPE_UINT64, &back, tpurt_dtype_load_i64(TPURT_DTYPE_UINT64, &u64));
    CHECK(back == u64);
    tpurt_dtype_store_i64(TPURT_DTYPE_UINT16, &u16, 65536 + 7);
    CHECK(u16 == 7);
    tpurt_dtype_store_f64(TPURT_DTYPE_UINT64, &back, 9223372036854775808.0 * 1.5);
    CHECK(back == 13835058055282163712ull);
    double d[2] = {0};
    uint32_t src[2] = {4294967295u, 3};
    tpurt_dtype_convert(TPURT_DTYPE_FLOAT64, d, TPURT_DTYPE_UINT32, src, 2);
    CHECK(d[0] == 4294967295.0 && d[1] == 3.0);
  }
  /* bf16 rounds to nearest even */
  CHECK(tpurt_bf16_to_f32(tpurt_f32_to_bf16(1.0f)) == 1.0f);
  CHECK(tpurt_f32_to_bf16(1.00390625f) == 0x3f80); /* tie -> even */
  CHECK(isnan(tpurt_bf16_to_f32(tpurt_f32_to_bf16(NAN))));
  /* f16: exhaustive round trip of every finite half through float */
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    uint32_t e = (h >> 10) & 0x1f;
    if (e == 0x1f) continue;
    if (tpurt_f32_to_f16_slow(tpurt_f16_to_f32_slow((uint16_t)h)) != h) ++bad;
    if (tpurt_f16_to_f32((uint16_t)h) != tpurt_f16_to_f32_slow((uint16_t)h)) ++bad;
  }
  CHECK(bad == 0);
  CHECK(tpurt_f32_to_f16_slow(65520.0f) == 0x7c00); /* rounds to inf */
  CHECK(tpurt_f32_to_f16_slow(1.0f + 1.0f / 2048) == 0x3c00); /* tie -> even */
  int64_t big = (1ll << 62) + 1, out = 0;
  tpurt_dtype_convert(TPURT_DTYPE_INT64, &out, TPURT_DTYPE_INT64, &big, 1);
  CHECK(out == big);
  int32_t i32 = -5;
  tpurt_dtype_convert(TPURT_DTYPE_INT64, &out, TPURT_DTYPE_INT32, &i32, 1);
  CHECK(out == -5);
}

static void test_registry(void) {
  size_t n = tpurt_op_count();
  for (size_t i = 0; i < n; ++i) {
    const tpurt_op_def_t* d = tpurt_op_at(i);
    CHECK(d && d->fn && d->reference);
    CHECK(tpurt_op_lookup(d->name) == d);
  }
  CHECK(tpurt_op_lookup("no_such_op") == NULL);
}

int main(void) {
  test_status();
  test_dtype();
  test_registry();
  return test_finish("test_base");
}
