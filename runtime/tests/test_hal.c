/* The HAL and the base helpers under it: the range allocator that carves HBM,
 * the vtpu and null drivers, byte-count parsing/formatting. */
#include <string.h>

#include "base/bytes.h"
#include "base/range_alloc.h"
#include "hal/hal.h"
#include "test_util.h"

static void test_range_alloc(void) {
  tpurt_range_alloc_t ra;
  CHECK_OK(tpurt_range_alloc_init(&ra, 11 * 512));
  uint64_t a, b, c, d;
  CHECK(tpurt_range_alloc_take(&ra, 1024, 512, &a) && a == 0);
  CHECK(tpurt_range_alloc_take(&ra, 2048, 512, &b) && b == 1024);
  CHECK(tpurt_range_alloc_take(&ra, 2048, 512, &c) && c == 3072);
  CHECK(!tpurt_range_alloc_take(&ra, 1024, 512, &d)); /* 512 left */
  CHECK(tpurt_range_alloc_largest(&ra) == 512);
  CHECK(tpurt_range_alloc_give(&ra, a, 1024));
  CHECK(tpurt_range_alloc_take(&ra, 512, 512, &d) && d == 0); /* first fit */
  CHECK(tpurt_range_alloc_give(&ra, d, 512));
  CHECK(tpurt_range_alloc_give(&ra, c, 2048));
  CHECK(tpurt_range_alloc_largest(&ra) == 2048 + 512); /* merged with the tail */
  CHECK(tpurt_range_alloc_give(&ra, b, 2048));
  CHECK(ra.num_free == 1 && ra.used == 0 && tpurt_range_alloc_largest(&ra) == 11 * 512);
  /* Pieces given back out of order (trimmed segment ends) merge fully. */
  CHECK(tpurt_range_alloc_take(&ra, 5120, 512, &a));
  CHECK(tpurt_range_alloc_give(&ra, 1024, 512));
  CHECK(tpurt_range_alloc_give(&ra, 4096, 1024));
  CHECK(tpurt_range_alloc_give(&ra, 0, 1024));
  CHECK(tpurt_range_alloc_give(&ra, 1536, 2560));
  CHECK(ra.num_free == 1 && ra.used == 0);
  /* Alignment larger than the granule. */
  CHECK(tpurt_range_alloc_take(&ra, 512, 512, &a) && a == 0);
  CHECK(tpurt_range_alloc_take(&ra, 512, 2048, &b) && b == 2048);
  CHECK(tpurt_range_alloc_take(&ra, 1024, 512, &c) && c == 512);
  tpurt_range_alloc_deinit(&ra);
}

static void test_bytes(void) {
  uint64_t v = 0;
  CHECK(tpurt_bytes_parse("17179869184", &v) && v == 17179869184ull);
  CHECK(tpurt_bytes_parse("16G", &v) && v == 16ull << 30);
  CHECK(tpurt_bytes_parse("512MiB", &v) && v == 512ull << 20);
  CHECK(tpurt_bytes_parse("64 mb", &v) && v == 64ull << 20);
  CHECK(tpurt_bytes_parse("1k", &v) && v == 1024);
  CHECK(!tpurt_bytes_parse("", &v));
  CHECK(!tpurt_bytes_parse("-1G", &v));
  CHECK(!tpurt_bytes_parse("12X", &v));
  CHECK(!tpurt_bytes_parse("99999999999T", &v));
  char buf[32];
  CHECK(strcmp(tpurt_bytes_format(1610612736ull, buf, sizeof buf), "1.50 GiB") == 0);
  CHECK(strcmp(tpurt_bytes_format(851443712ull, buf, sizeof buf), "812.00 MiB") == 0);
  CHECK(strcmp(tpurt_bytes_format(16ull << 30, buf, sizeof buf), "16.00 GiB") == 0);
  CHECK(strcmp(tpurt_bytes_format(100, buf, sizeof buf), "100 bytes") == 0);
}

static void test_drivers(void) {
  CHECK(tpurt_hal_driver_find("nope") == NULL);
  const tpurt_hal_driver_t* null_drv = tpurt_hal_driver_find("null");
  CHECK(null_drv != NULL);
  tpurt_hal_device_t* nd = NULL;
  tpurt_hal_device_params_t params = {.index = 0, .hbm_bytes = 4 << 20};
  if (null_drv) CHECK_STATUS(null_drv->device_create(&params, &nd), UNIMPLEMENTED);

  const tpurt_hal_driver_t* drv = tpurt_hal_driver_find(NULL); /* default: vtpu */
  CHECK(drv && strcmp(drv->name, "vtpu") == 0);
  if (!drv) return;
  tpurt_hal_device_t* d = NULL;
  CHECK_OK(drv->device_create(&params, &d));
  if (!d) return;
  tpurt_hal_device_props_t props;
  CHECK_OK(drv->device_query(d, &props));
  CHECK(props.hbm_bytes == 4 << 20 && props.hbm_base && strcmp(props.name, "vtpu") == 0);
  void *a = NULL, *b = NULL;
  CHECK_OK(drv->memory_alloc(d, 3 << 20, &a));
  CHECK(a == props.hbm_base);
  CHECK_STATUS(drv->memory_alloc(d, 2 << 20, &b), RESOURCE_EXHAUSTED);
  memset(a, 0x77, 3 << 20); /* pages commit on touch */
  /* Give back the tail piece; its pages read as zero when taken again. */
  drv->memory_free(d, (uint8_t*)a + (2 << 20), 1 << 20);
  CHECK(drv->memory_largest_free(d) == 2 << 20);
  CHECK_OK(drv->memory_alloc(d, 2 << 20, &b));
  CHECK(b == (uint8_t*)a + (2 << 20));
  CHECK(((uint8_t*)b)[0] == 0 && ((uint8_t*)b)[(1 << 20) - 1] == 0);
  drv->memory_free(d, a, 2 << 20);
  drv->memory_free(d, b, 2 << 20);
  CHECK(drv->memory_largest_free(d) == 4 << 20);
  drv->device_destroy(d);
}

int main(void) {
  test_range_alloc();
  test_bytes();
  test_drivers();
  return test_finish("test_hal");
}
