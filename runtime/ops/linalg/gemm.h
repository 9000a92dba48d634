/* The strided GEMM every matmul-family and convolution kernel calls:
 *   C = beta * C_in + alpha * A * B     (A: m x k, B: k x n, C: m x n)
 * with arbitrary row/column strides (a transposed view is just swapped
 * strides; it is never copied when the backend can take it as a transpose).
 * fp32 goes to OpenBLAS; every other dtype runs our own cache-blocked, packed
 * GEMM (fp32 microkernel for float32/bfloat16/float16, float64 microkernel,
 * int64-accumulating kernel for integer types). */
#ifndef TPURT_OPS_LINALG_GEMM_H_
#define TPURT_OPS_LINALG_GEMM_H_

#include "tpurt/kernel.h"

typedef struct tpurt_gemm_t {
  int64_t m, n, k;
  tpurt_dtype_t ab_dtype; /* dtype of A and B */
  tpurt_dtype_t c_dtype;  /* dtype of C and C_in: ab_dtype, or float32 for bf16/f16 A/B,
                             or any integer type for integer A/B (_int_mm: int8 -> int32) */
  const void* a;
  int64_t a_rs, a_cs; /* element (i, p) of A at a[i * a_rs + p * a_cs] */
  const void* b;
  int64_t b_rs, b_cs; /* element (p, j) of B at b[p * b_rs + j * b_cs] */
  void* c;
  int64_t c_rs, c_cs;
  const void* c_in; /* NULL: C itself. May be broadcast (stride 0). Never partially aliases C. */
  int64_t c_in_rs, c_in_cs;
  double alpha, beta; /* beta == 0: C_in is not read, so NaN/Inf in it do not propagate */
  /* Batched: `batch` independent products (0 means 1); *_bs are batch strides. */
  int64_t batch;
  int64_t a_bs, b_bs, c_bs, c_in_bs;
} tpurt_gemm_t;

/* Bytes of workspace tpurt_gemm needs for `g` (an upper bound). A caller that
 * runs many GEMMs in one kernel sizes it once for the largest and passes it to
 * each call, since kernel scratch is limited per call. */
size_t tpurt_gemm_workspace_bytes(const tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g);

/* Runs `g` across the chip's threads (ctx NULL: serially on the caller).
 * workspace NULL: taken from tpurt_kernel_scratch. */
tpurt_status_t tpurt_gemm(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g, void* workspace);

/* The obviously-correct triple loop (double / int64 accumulation). */
tpurt_status_t tpurt_gemm_reference(const tpurt_gemm_t* g);

/* gemm_precision.c: whether a float32 product runs split into bf16 passes
 * at the current precision (tpurt/precision.h), and the split run itself. */
bool tpurt_gemm_fp32_split_wanted(const tpurt_gemm_t* g);
tpurt_status_t tpurt_gemm_fp32_split(tpurt_kernel_ctx_t* ctx, const tpurt_gemm_t* g);

/* Tests and benchmarks: run fp32 through our own kernel instead of OpenBLAS. */
void tpurt_gemm_set_fp32_own(bool own);
/* Tests and benchmarks: fp32 products with few rows (m <= 64, A row-major) run through our
 * unpacked kernels (the default on AVX-512 builds) or, off, through OpenBLAS like the rest. */
void tpurt_gemm_set_small_m(bool on);
/* Tests: run the portable microkernel and scalar packing instead of the
 * vector ones (also TORCH_TPU_GEMM_GENERIC=1 in the environment). */
void tpurt_gemm_set_generic(bool generic);
/* Tests and benchmarks: fp32 A with a unit stride read where it lies by the direct microkernel in
 * products with few columns (on, the default on AVX2/AVX-512 builds; gemm.c a_direct_pays) or always
 * packed (off; also TORCH_TPU_GEMM_A_DIRECT=0). */
void tpurt_gemm_set_a_direct(bool on);
/* The bf16 x bf16 path: 0 widened to fp32 (the AVX2/FMA microkernel), 1 bf16
 * pairs through AVX-512 BF16 vdpbf16ps, 2 the same pairs through a portable
 * microkernel (tests of the packing on machines without the instruction), 3
 * AMX tiles (TDPBF16PS), 4 the AMX packing through a portable microkernel.
 * By default the fastest this CPU has: 3 where cpuid reports AMX-BF16 and the
 * OS grants tile state, else 1 where it reports AVX-512 BF16, else 0;
 * TORCH_TPU_GEMM_BF16DP=0|avx512bf16|emulate|amx|amx-emulate picks one. Set -1
 * to read the CPU and environment again. The mode in force is 0 whenever the
 * generic switch above is on. */
void tpurt_gemm_set_bf16dp(int mode);
int tpurt_gemm_bf16dp_mode(void);
/* Whether this machine can run bf16 path `mode` (the portable ones always). */
bool tpurt_gemm_bf16dp_supported(int mode);
/* Around a loop of AMX tile instructions outside the GEMM (the attention
 * kernel's block products): loads the tile configuration every bf16 AMX user
 * here shares (8 tiles of 16 rows x 64 bytes), and releases it, when the bf16
 * path in force is AMX (mode 3); no-ops otherwise. */
void tpurt_gemm_amx_tiles_begin(void);
void tpurt_gemm_amx_tiles_end(void);

#endif /* TPURT_OPS_LINALG_GEMM_H_ */
