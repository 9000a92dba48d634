/* The paged-attention decode kernel's KV-cache read rate against the copy bandwidth of the same
 * core, both timed as the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so time the thread
 * spends descheduled on a shared machine counts on neither side; best of 30 calls, one thread
 * (TORCH_TPU_NUM_THREADS=1 is set here). One decode step: 16 sequences of 1024 tokens, 8 query / 4 kv
 * heads of 64, 16-token blocks in random order, float32 and FP8 (e4m3) caches.
 *
 *   make build/bench/paged_decode && build/bench/paged_decode
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/serve/serve.h"
#include "test_util.h"
#include "tpurt/tpurt.h"

enum { S = 16, CTX = 1024, HQ = 8, HKV = 4, D = 64, BS = 16, NB = S * CTX / BS };

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static tpurt_arg_t targ(const tpurt_tensor_t* t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .v.tensor = t}; }

/* Best thread CPU seconds of one decode step over a cache of dtype dt (float32, or uint8 e4m3 codes). */
static double decode_best(bool fp8) {
  size_t n = (size_t)NB * HKV * BS * 2 * D, es = fp8 ? 1 : 4;
  char* kv = malloc(n * es);
  for (size_t i = 0; i < n; ++i) {
    double r = 2.0 * test_rand_unit() - 1.0;
    /* e4m3 codes of magnitude 2^-3 .. 2^1 with random signs: values like the float cache's */
    if (fp8) kv[i] = (char)((r < 0 ? 0x80 : 0) | (0x20 + (int)(fabs(r) * 0x20)));
    else ((float*)kv)[i] = (float)r;
  }
  float *q = malloc(S * HQ * D * 4), *out = malloc(S * HQ * D * 4);
  for (int i = 0; i < S * HQ * D; ++i) q[i] = (float)test_rand_unit();
  int32_t* bt = malloc(NB * 4);
  for (int i = 0; i < NB; ++i) bt[i] = i;
  for (int i = NB - 1; i > 0; --i) {
    int j = (int)(test_rand_u64() % (uint64_t)(i + 1)), t = bt[i];
    bt[i] = bt[j], bt[j] = t;
  }
  int32_t qsl[S + 1], sl[S];
  for (int i = 0; i <= S; ++i) qsl[i] = i;
  for (int i = 0; i < S; ++i) sl[i] = CTX;
  /* vLLM's head-major cache [NB, HKV, BS, 2D], seen as the kernel's [NB, BS, HKV, 2D] */
  tpurt_tensor_t tkv = {.data = kv, .dtype = fp8 ? TPURT_DTYPE_UINT8 : TPURT_DTYPE_FLOAT32, .ndim = 4,
                        .sizes = {NB, BS, HKV, 2 * D}, .strides = {HKV * BS * 2 * D, 2 * D, BS * 2 * D, 1}};
  tpurt_tensor_t tq = test_tensor_dense(TPURT_DTYPE_FLOAT32, q, 3, (int64_t[]){S, HQ, D}),
                 to = test_tensor_dense(TPURT_DTYPE_FLOAT32, out, 3, (int64_t[]){S, HQ, D}),
                 tqsl = test_tensor_dense(TPURT_DTYPE_INT32, qsl, 1, (int64_t[]){S + 1}),
                 tsl = test_tensor_dense(TPURT_DTYPE_INT32, sl, 1, (int64_t[]){S}),
                 tbt = test_tensor_dense(TPURT_DTYPE_INT32, bt, 2, (int64_t[]){S, CTX / BS});
  tpurt_arg_t a[11] = {targ(&to), targ(&tq), targ(&tkv), targ(&tqsl), targ(&tsl), targ(&tbt),
                       {.kind = TPURT_ARG_DOUBLE, .v.d = 0.125}, {.kind = TPURT_ARG_INT, .v.i = 0},
                       {.kind = TPURT_ARG_DOUBLE, .v.d = 0}, {.kind = TPURT_ARG_NONE},
                       {.kind = TPURT_ARG_STRING, .v.s = fp8 ? "fp8" : "auto"}};
  double best = 1e9;
  for (int it = 0; it < 30; ++it) {
    double c = cpu_now();
    if (test_op_run("torch_tpu::paged_attention", false, a, 11, NULL, 0)) {
      fprintf(stderr, "paged_attention failed\n");
      exit(1);
    }
    c = cpu_now() - c;
    if (c < best) best = c;
  }
  free(kv), free(q), free(out), free(bt);
  return best;
}

int main(void) {
  setenv("TORCH_TPU_NUM_THREADS", "1", 1);
  size_t n = 256u << 20;
  char *src = malloc(n), *dst = malloc(n);
  memset(src, 1, n), memset(dst, 0, n);
  double copy = 1e9;
  for (int it = 0; it < 5; ++it) {
    double c = cpu_now();
    memcpy(dst, src, n);
    c = cpu_now() - c;
    if (c < copy) copy = c;
  }
  double copy_bw = 2.0 * (double)n / copy; /* bytes read and written */
  double t32 = decode_best(false), t8 = decode_best(true);
  double kv32 = (double)S * CTX * HKV * 2 * D * 4, kv8 = kv32 / 4;
  printf("copy (memcpy 256 MiB, read + write): %.1f GB/s\n", copy_bw / 1e9);
  printf("paged decode, float32 cache: %.2f ms, KV read %.1f GB/s = %.0f%% of copy\n", t32 * 1e3, kv32 / t32 / 1e9,
         100 * kv32 / t32 / copy_bw);
  printf("paged decode, fp8 cache:     %.2f ms, KV read %.1f GB/s = %.0f%% of copy (%.2fx the float32 step)\n",
         t8 * 1e3, kv8 / t8 / 1e9, 100 * kv8 / t8 / copy_bw, t32 / t8);
  return 0;
}
