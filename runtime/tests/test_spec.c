/* Speculative decoding's rejection-sampling kernels (ops/serve/spec.c) on
 * hand-worked batches: expand with replacement, greedy acceptance up to the
 * first mismatch with the bonus token after a full accept, random acceptance
 * (target_p / draft_p against the uniform sample; padded drafts rejected),
 * the recovered-token argmax with and without draft probabilities; rows too
 * short, drafts past the vocabulary and out-of-order counts are reported. */
#include <string.h>

#include "ops/serve/serve.h"
#include "test_util.h"
#include "tpurt/tpurt.h"

static tpurt_arg_t targ(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }
static tpurt_arg_t none(void) { return (tpurt_arg_t){.kind = TPURT_ARG_NONE}; }
static tpurt_tensor_t vec(tpurt_dtype_t dt, void* p, int64_t n) { return test_tensor_dense(dt, p, 1, (int64_t[]){n}); }

/* Three requests with 2, 0 and 3 drafts; rows of S + 1 = 4. */
enum { B = 3, N = 5, S = 3, V = 4 };
static int32_t cu[B] = {2, 2, 5};

static void expand_case(void) {
  int64_t in[B] = {7, 1, 9}, out[N];
  memset(out, 0, sizeof out);
  tpurt_tensor_t to = vec(TPURT_DTYPE_INT64, out, N), ti = vec(TPURT_DTYPE_INT64, in, B), tc = vec(TPURT_DTYPE_INT32, cu, B);
  tpurt_arg_t a[5] = {targ(&to), targ(&ti), targ(&tc), {.kind = TPURT_ARG_INT, .v.i = 9}, {.kind = TPURT_ARG_INT, .v.i = 4}};
  CHECK_OK(test_op_run("torch_tpu::spec_expand", false, a, 5, NULL, 0));
  int64_t want[N] = {7, 7, 4, 4, 4};
  CHECK(memcmp(out, want, sizeof want) == 0);
  int32_t bad[B] = {2, 1, 5}; /* out of order */
  tpurt_tensor_t tb = vec(TPURT_DTYPE_INT32, bad, B);
  a[2] = targ(&tb);
  CHECK_STATUS(test_op_run("torch_tpu::spec_expand", false, a, 5, NULL, 0), OUT_OF_RANGE);
}

static void greedy_case(void) {
  /* request 0: drafts 1 2, target 1 2 -> both accepted, bonus 3; request 1: no drafts -> bonus 0;
   * request 2: drafts 3 0 1, target 3 2 1 -> 3 accepted, 0 rejected and replaced by 2, stop */
  int32_t draft[N] = {1, 2, 3, 0, 1}, out[B][S + 1];
  int64_t target[N] = {1, 2, 3, 2, 1}, bonus[B] = {3, 0, 2};
  for (int i = 0; i < B * (S + 1); ++i) (&out[0][0])[i] = -1;
  tpurt_tensor_t to = test_tensor_dense(TPURT_DTYPE_INT32, out, 2, (int64_t[]){B, S + 1}),
                 tc = vec(TPURT_DTYPE_INT32, cu, B), td = vec(TPURT_DTYPE_INT32, draft, N),
                 tt = vec(TPURT_DTYPE_INT64, target, N), tb = vec(TPURT_DTYPE_INT64, bonus, B);
  tpurt_arg_t a[6] = {targ(&to), targ(&tc), targ(&td), targ(&tt), targ(&tb), none()};
  CHECK_OK(test_op_run("torch_tpu::rejection_greedy_sample", false, a, 6, NULL, 0));
  int32_t want[B][S + 1] = {{1, 2, 3, -1}, {0, -1, -1, -1}, {3, 2, -1, -1}};
  CHECK(memcmp(out, want, sizeof want) == 0);
  /* rows of 2 cannot hold request 2's three drafts */
  tpurt_tensor_t short_rows = test_tensor_dense(TPURT_DTYPE_INT32, out, 2, (int64_t[]){B, 2});
  a[0] = targ(&short_rows);
  CHECK_STATUS(test_op_run("torch_tpu::rejection_greedy_sample", false, a, 6, NULL, 0), OUT_OF_RANGE);
}

static void random_case(void) {
  /* target probabilities of each draft token, draft probabilities 1 (n-gram drafts): accepted when
   * target_p >= u. Request 0: 0.5 >= 0.4 accept, 0.2 < 0.3 reject -> recovered 3. Request 1 is
   * greedy (skipped). Request 2: -1 pads: rejected at once -> recovered 0. */
  int32_t draft[N] = {1, 2, -1, 0, 1}, rec[N] = {9, 3, 0, 9, 9}, out[B][S + 1];
  int64_t bonus[B] = {3, 0, 2};
  double u[N] = {0.4, 0.3, 0.0, 0.0, 0.0};
  bool greedy[B] = {false, true, false};
  float tp[N][V] = {{0, 0.5f, 0, 0}, {0, 0, 0.2f, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}, {0, 1, 0, 0}};
  for (int i = 0; i < B * (S + 1); ++i) (&out[0][0])[i] = -1;
  tpurt_tensor_t to = test_tensor_dense(TPURT_DTYPE_INT32, out, 2, (int64_t[]){B, S + 1}),
                 tc = vec(TPURT_DTYPE_INT32, cu, B), td = vec(TPURT_DTYPE_INT32, draft, N),
                 ttp = test_tensor_dense(TPURT_DTYPE_FLOAT32, tp, 2, (int64_t[]){N, V}),
                 tb = vec(TPURT_DTYPE_INT64, bonus, B), tr = vec(TPURT_DTYPE_INT32, rec, N),
                 tu = vec(TPURT_DTYPE_FLOAT64, u, N), tg = vec(TPURT_DTYPE_BOOL, greedy, B);
  tpurt_arg_t a[9] = {targ(&to), targ(&tc), targ(&td), none(), targ(&ttp), targ(&tb), targ(&tr), targ(&tu), targ(&tg)};
  CHECK_OK(test_op_run("torch_tpu::rejection_random_sample", false, a, 9, NULL, 0));
  int32_t want[B][S + 1] = {{1, 3, -1, -1}, {-1, -1, -1, -1}, {0, -1, -1, -1}};
  CHECK(memcmp(out, want, sizeof want) == 0);
  draft[0] = V; /* past the vocabulary */
  CHECK_STATUS(test_op_run("torch_tpu::rejection_random_sample", false, a, 9, NULL, 0), OUT_OF_RANGE);
}

static void recovered_case(void) {
  /* token 0: without draft probabilities the draft (2) is excluded: argmax of (0.125, 0.25, -, 0.375) *
   * inv_q (1, 2, 1, 1) = 0.5 at 1; with draft probabilities max(t - d, 0) * inv_q (exact binary
   * fractions, so the tie below is exact). */
  int32_t cu1[1] = {1}, draft[1] = {2}, out[1] = {-1};
  float tp[1][V] = {{0.125f, 0.25f, 0.5f, 0.375f}}, dp[1][V] = {{0, 0.25f, 0.125f, 0}}, iq[1][V] = {{1, 2, 1, 1}};
  tpurt_tensor_t to = vec(TPURT_DTYPE_INT32, out, 1), tc = vec(TPURT_DTYPE_INT32, cu1, 1),
                 td = vec(TPURT_DTYPE_INT32, draft, 1),
                 ttp = test_tensor_dense(TPURT_DTYPE_FLOAT32, tp, 2, (int64_t[]){1, V}),
                 tdp = test_tensor_dense(TPURT_DTYPE_FLOAT32, dp, 2, (int64_t[]){1, V}),
                 tiq = test_tensor_dense(TPURT_DTYPE_FLOAT32, iq, 2, (int64_t[]){1, V});
  tpurt_arg_t a[6] = {targ(&to), targ(&tc), targ(&td), none(), targ(&ttp), targ(&tiq)};
  CHECK_OK(test_op_run("torch_tpu::sample_recovered_tokens", false, a, 6, NULL, 0));
  CHECK(out[0] == 1);
  /* (0.125, 0, 0.375, 0.375) * (1, 2, 1, 1): the first of the tie, 2 */
  a[3] = targ(&tdp);
  CHECK_OK(test_op_run("torch_tpu::sample_recovered_tokens", false, a, 6, NULL, 0));
  CHECK(out[0] == 2);
}

int main(void) {
  expand_case();
  greedy_case();
  random_case();
  recovered_case();
  return test_finish("test_spec");
}
