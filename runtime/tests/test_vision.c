/* torchvision's kernels (ops/vision/): known answers for nms (score order, ties kept in input order,
 * the threshold), roi_align (a constant image, a bilinear sample between pixels), roi_pool (argmax
 * of arange, empty bins) and the backwards, and the errors for bad input (a roi's batch index out of
 * range, mismatched outputs). tests/test_vision_ops.py compares them with plain-Python references
 * through torchvision's API. */
#include <math.h>
#include <string.h>

#include "test_util.h"

static tpurt_arg_t targ(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }
static tpurt_arg_t iarg(int64_t v) { return (tpurt_arg_t){.kind = TPURT_ARG_INT, .v.i = v}; }
static tpurt_arg_t darg(double v) { return (tpurt_arg_t){.kind = TPURT_ARG_DOUBLE, .v.d = v}; }
static tpurt_arg_t barg(bool v) { return (tpurt_arg_t){.kind = TPURT_ARG_BOOL, .v.b = v}; }

static void test_nms(void) {
  float boxes[] = {0, 0, 10, 10, 1, 1, 11, 11, 50, 50, 60, 60, 0, 0, 10, 10};
  float scores[] = {0.5f, 0.9f, 0.7f, 0.5f};
  int64_t keep[4], count = -1;
  tpurt_tensor_t b = test_tensor_dense(TPURT_DTYPE_FLOAT32, boxes, 2, (int64_t[]){4, 4});
  tpurt_tensor_t s = test_tensor_dense(TPURT_DTYPE_FLOAT32, scores, 1, (int64_t[]){4});
  tpurt_tensor_t outs[2] = {test_tensor_dense(TPURT_DTYPE_INT64, keep, 1, (int64_t[]){4}),
                            test_tensor_dense(TPURT_DTYPE_INT64, &count, 1, (int64_t[]){1})};
  /* IoU(1, 0) = 81 / 119 = 0.68: suppressed at 0.5, kept at 0.7 */
  tpurt_arg_t a[3] = {targ(&b), targ(&s), darg(0.5)};
  CHECK_OK(test_op_run("tv_nms", false, a, 3, outs, 2));
  CHECK(count == 2 && keep[0] == 1 && keep[1] == 2);
  a[2] = darg(0.7);
  CHECK_OK(test_op_run("tv_nms", false, a, 3, outs, 2));
  CHECK(count == 3 && keep[0] == 1 && keep[1] == 2 && keep[2] == 0);
  /* a float64 scores with float32 boxes is refused */
  double sd[4] = {0};
  tpurt_tensor_t s64 = test_tensor_dense(TPURT_DTYPE_FLOAT64, sd, 1, (int64_t[]){4});
  a[1] = targ(&s64);
  CHECK_STATUS(test_op_run("tv_nms", false, a, 3, outs, 2), INVALID_ARGUMENT);
}

static void test_roi_align(void) {
  /* one 1 x 1 x 2 x 2 image [[0, 1], [2, 3]]: a 1 x 1 bin with one sample at the box centre */
  double img[4] = {0, 1, 2, 3}, out = -1;
  double roi[5] = {0, 0, 0, 1, 1}; /* aligned: the box [-0.5, 0.5] centred on pixel 0 ... */
  tpurt_tensor_t x = test_tensor_dense(TPURT_DTYPE_FLOAT64, img, 4, (int64_t[]){1, 1, 2, 2});
  tpurt_tensor_t r = test_tensor_dense(TPURT_DTYPE_FLOAT64, roi, 2, (int64_t[]){1, 5});
  tpurt_tensor_t o = test_tensor_dense(TPURT_DTYPE_FLOAT64, &out, 4, (int64_t[]){1, 1, 1, 1});
  tpurt_arg_t a[7] = {targ(&x), targ(&r), darg(1.0), iarg(1), iarg(1), iarg(1), barg(true)};
  CHECK_OK(test_op_run("tv_roi_align", false, a, 7, &o, 1));
  CHECK(fabs(out - 0.0) < 1e-15); /* ... samples (0, 0) exactly */
  a[6] = barg(false);             /* not aligned: the sample is at (0.5, 0.5), the mean of all four */
  CHECK_OK(test_op_run("tv_roi_align", false, a, 7, &o, 1));
  CHECK(fabs(out - 1.5) < 1e-15);
  /* backward of that sample: a quarter of the gradient to each pixel */
  double g = 4.0, gi[4] = {-1, -1, -1, -1};
  tpurt_tensor_t gt = test_tensor_dense(TPURT_DTYPE_FLOAT64, &g, 4, (int64_t[]){1, 1, 1, 1});
  tpurt_tensor_t git = test_tensor_dense(TPURT_DTYPE_FLOAT64, gi, 4, (int64_t[]){1, 1, 2, 2});
  tpurt_arg_t ab[11] = {targ(&gt), targ(&r), darg(1.0), iarg(1), iarg(1), iarg(1), iarg(1),
                        iarg(2), iarg(2), iarg(1), barg(false)};
  CHECK_OK(test_op_run("tv_roi_align_backward", false, ab, 11, &git, 1));
  CHECK(gi[0] == 1.0 && gi[1] == 1.0 && gi[2] == 1.0 && gi[3] == 1.0);
  /* a batch index past the input */
  roi[0] = 1;
  CHECK_STATUS(test_op_run("tv_roi_align", false, a, 7, &o, 1), OUT_OF_RANGE);
  CHECK_STATUS(test_op_run("tv_roi_align_backward", false, ab, 11, &git, 1), OUT_OF_RANGE);
  roi[0] = NAN;
  CHECK_STATUS(test_op_run("tv_roi_align", false, a, 7, &o, 1), OUT_OF_RANGE);
  roi[0] = 0;
  /* a NaN box: with a fixed grid its samples lie nowhere and count 0 (as torchvision's CPU kernel,
   * which checks the sample's range so that NaN never reaches an int cast); with an adaptive grid, as
   * an infinite box, it would need NaN / infinitely many samples, and is refused */
  roi[3] = NAN;
  CHECK_OK(test_op_run("tv_roi_align", false, a, 7, &o, 1));
  CHECK(out == 0.0);
  a[5] = iarg(0);
  CHECK_STATUS(test_op_run("tv_roi_align", false, a, 7, &o, 1), OUT_OF_RANGE);
  roi[3] = INFINITY;
  CHECK_STATUS(test_op_run("tv_roi_align", false, a, 7, &o, 1), OUT_OF_RANGE);
}

static void test_roi_pool(void) {
  float img[16];
  for (int i = 0; i < 16; ++i) img[i] = (float)i;
  float roi[10] = {0, 0, 0, 3, 3, 0, 10, 10, 12, 12}; /* the whole 4 x 4 image; a box outside it */
  float out[8];
  int32_t am[8];
  tpurt_tensor_t x = test_tensor_dense(TPURT_DTYPE_FLOAT32, img, 4, (int64_t[]){1, 1, 4, 4});
  tpurt_tensor_t r = test_tensor_dense(TPURT_DTYPE_FLOAT32, roi, 2, (int64_t[]){2, 5});
  tpurt_tensor_t outs[2] = {test_tensor_dense(TPURT_DTYPE_FLOAT32, out, 4, (int64_t[]){2, 1, 2, 2}),
                            test_tensor_dense(TPURT_DTYPE_INT32, am, 4, (int64_t[]){2, 1, 2, 2})};
  tpurt_arg_t a[5] = {targ(&x), targ(&r), darg(1.0), iarg(2), iarg(2)};
  CHECK_OK(test_op_run("tv_roi_pool", false, a, 5, outs, 2));
  CHECK(am[0] == 5 && am[1] == 7 && am[2] == 13 && am[3] == 15);
  CHECK(out[0] == 5 && out[3] == 15);
  for (int k = 4; k < 8; ++k) CHECK(am[k] == -1 && out[k] == 0); /* empty bins */
  float g[8] = {1, 2, 3, 4, 5, 6, 7, 8}, gi[16];
  tpurt_tensor_t gt = test_tensor_dense(TPURT_DTYPE_FLOAT32, g, 4, (int64_t[]){2, 1, 2, 2});
  tpurt_tensor_t git = test_tensor_dense(TPURT_DTYPE_FLOAT32, gi, 4, (int64_t[]){1, 1, 4, 4});
  tpurt_tensor_t amt = test_tensor_dense(TPURT_DTYPE_INT32, am, 4, (int64_t[]){2, 1, 2, 2});
  tpurt_arg_t ab[10] = {targ(&gt), targ(&r), targ(&amt), darg(1.0), iarg(2), iarg(2),
                        iarg(1), iarg(1), iarg(4), iarg(4)};
  CHECK_OK(test_op_run("tv_roi_pool_backward", false, ab, 10, &git, 1));
  float want[16] = {0};
  want[5] = 1, want[7] = 2, want[13] = 3, want[15] = 4;
  CHECK(memcmp(gi, want, sizeof(want)) == 0);
  roi[1] = NAN; /* a NaN box */
  CHECK_STATUS(test_op_run("tv_roi_pool", false, a, 5, outs, 2), OUT_OF_RANGE);
  am[0] = 16; /* an argmax outside the 4 x 4 channel */
  CHECK_STATUS(test_op_run("tv_roi_pool_backward", false, ab, 10, &git, 1), OUT_OF_RANGE);
}

int main(void) {
  test_nms();
  test_roi_align();
  test_roi_pool();
  return test_finish("test_vision");
}
