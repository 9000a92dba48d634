/* One thread of the runtime's own blocked GEMM (the driver and microkernel that bf16/f16 products,
 * and fp32 ones where our kernel is chosen, run) beside OpenBLAS's sgemm on the same product in the
 * same run (fp32 operands; for bf16 the fp32 product of the same shape). Best of several calls, each
 * timed by the calling thread's CPU clock, so time the thread spends descheduled on a shared machine
 * counts on neither side. Serial (no kernel context): one core's microkernel, packing and cache
 * blocking, without the chip's thread pool. PyTorch CPU's MKL is not reachable from C; the Python
 * benchmarks compare with it (bench/bench_kernels.py).
 *
 *   make build/bench/gemm_one && build/bench/gemm_one [M N K [f32|bf16 [nn|nt]]]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/linalg/gemm.h"
#include "test_util.h"
#include "tpurt/tpurt.h"

void openblas_set_num_threads(int);

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int64_t m = argc > 3 ? atoll(argv[1]) : 2048, n = argc > 3 ? atoll(argv[2]) : 2048,
                k = argc > 3 ? atoll(argv[3]) : 2048;
  const char* dts = argc > 4 ? argv[4] : "f32";
  const bool nt = argc > 5 && !strcmp(argv[5], "nt"); /* B stored n x k: x @ W^T */
  if (m <= 0 || n <= 0 || k <= 0 || (strcmp(dts, "f32") && strcmp(dts, "bf16"))) {
    fprintf(stderr, "usage: gemm_one [M N K [f32|bf16 [nn|nt]]] (sizes > 0)\n");
    return 2;
  }
  const tpurt_dtype_t dt = !strcmp(dts, "bf16") ? TPURT_DTYPE_BFLOAT16 : TPURT_DTYPE_FLOAT32;
  const size_t es = tpurt_dtype_size(dt);
  float *a32 = malloc((size_t)m * k * 4), *b32 = malloc((size_t)k * n * 4), *c32 = malloc((size_t)m * n * 4);
  for (int64_t i = 0; i < m * k; ++i) a32[i] = (float)test_rand_unit() - 0.5f;
  for (int64_t i = 0; i < k * n; ++i) b32[i] = (float)test_rand_unit() - 0.5f;
  void *a = a32, *b = b32, *c = malloc((size_t)m * n * es);
  if (dt == TPURT_DTYPE_BFLOAT16) { /* the same values, truncated to bf16 */
    uint16_t *a16 = malloc((size_t)m * k * 2), *b16 = malloc((size_t)k * n * 2);
    for (int64_t i = 0; i < m * k; ++i) memcpy(&a16[i], (char*)&a32[i] + 2, 2);
    for (int64_t i = 0; i < k * n; ++i) memcpy(&b16[i], (char*)&b32[i] + 2, 2);
    a = a16, b = b16;
  }
  tpurt_gemm_t g = {.m = m, .n = n, .k = k, .ab_dtype = dt, .c_dtype = dt, .a = a, .a_rs = k, .a_cs = 1,
                    .b = b, .b_rs = nt ? 1 : n, .b_cs = nt ? k : 1, .c = c, .c_rs = n, .c_cs = 1,
                    .alpha = 1, .beta = 0};
  tpurt_gemm_set_fp32_own(true);
  openblas_set_num_threads(1);
  void* ws = malloc(tpurt_gemm_workspace_bytes(NULL, &g) + 64);
  const int reps = (int)(4e10 / (2.0 * m * n * k)) + 3;
  double ours = 1e30, blas = 1e30;
  for (int r = 0; r < reps; ++r) { /* alternating, so both see the same machine */
    double t = cpu_now();
    if (tpurt_gemm(NULL, &g, ws) != TPURT_OK) return 1;
    t = cpu_now() - t;
    if (t < ours) ours = t;
    t = cpu_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, nt ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a32,
                (int)k, b32, nt ? (int)k : (int)n, 0.0f, c32, (int)n);
    t = cpu_now() - t;
    if (t < blas) blas = t;
  }
  const double f = 2.0 * m * n * k * 1e-9;
  printf("%s %s %lldx%lldx%lld, one thread, best of %d: ours %.1f GFLOP/s, OpenBLAS sgemm %.1f, ratio %.2f\n", dts,
         nt ? "nt" : "nn", (long long)m, (long long)n, (long long)k, reps, f / ours, f / blas, blas / ours);
  return 0;
}
