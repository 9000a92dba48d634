/* GEMM entry and matmul-family kernels: optimized vs reference across dtypes,
 * strides (transposed, padded, broadcast), batches, k = 0 and empty shapes;
 * then GFLOP/s figures (printed, never asserted). */
#include <math.h>
#include <string.h>
#include <time.h>

#include "ops/linalg/gemm.h"
#include "linalg_test_common.h"

typedef struct gemm_case_t {
  tpurt_gemm_t g;
  void* ws;
} gemm_case_t;

static tpurt_status_t run_gemm_kernel(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  gemm_case_t* gc = (gemm_case_t*)(uintptr_t)call->args[0].v.i;
  return tpurt_gemm(ctx, &gc->g, gc->ws);
}
static tpurt_status_t gemm_via_ctx(tpurt_gemm_t* g) {
  gemm_case_t gc = {*g, NULL};
  tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = (int64_t)(uintptr_t)&gc};
  tpurt_op_call_t call = {.name = "gemm", .overload = "", .num_args = 1, .args = &arg};
  return tpurt_kernel_run(run_gemm_kernel, &call);
}

/* One GEMM case: layouts chosen by flags; C_in separate when sep_cin. */
static void gemm_case(tpurt_dtype_t ab, tpurt_dtype_t cd, int64_t batch, int64_t m, int64_t n,
                      int64_t k, bool ta, bool tb, bool tc, int pad, bool sep_cin, bool bcast_cin,
                      double alpha, double beta, bool own) {
  int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = (tc ? m : n) + pad;
  int64_t sa = (ta ? k : m) * lda, sb = (tb ? n : k) * ldb, sc = (tc ? n : m) * ldc;
  void* A = test_rand_buf(ab, batch * sa);
  void* B = test_rand_buf(ab, batch * sb);
  void* C0 = test_rand_buf(cd, batch * sc);
  void* C1 = malloc((size_t)(batch * sc > 0 ? batch * sc : 1) * tpurt_dtype_size(cd));
  memcpy(C1, C0, (size_t)(batch * sc) * tpurt_dtype_size(cd));
  void* Cin = test_rand_buf(cd, batch * (n + 1) * (m + 1));
  tpurt_gemm_t g = {.m = m, .n = n, .k = k, .ab_dtype = ab, .c_dtype = cd,
                    .a = A, .a_rs = ta ? 1 : lda, .a_cs = ta ? lda : 1,
                    .b = B, .b_rs = tb ? 1 : ldb, .b_cs = tb ? ldb : 1,
                    .c = C0, .c_rs = tc ? 1 : ldc, .c_cs = tc ? ldc : 1,
                    .alpha = alpha, .beta = beta, .batch = batch,
                    .a_bs = sa, .b_bs = sb, .c_bs = sc};
  if (sep_cin) {
    g.c_in = Cin;
    g.c_in_rs = bcast_cin ? 0 : n + 1;
    g.c_in_cs = 1;
    g.c_in_bs = bcast_cin ? 0 : (n + 1) * (m + 1);
  }
  tpurt_gemm_set_fp32_own(own);
  CHECK_OK(gemm_via_ctx(&g));
  tpurt_gemm_set_fp32_own(false);
  g.c = C1;
  CHECK_OK(tpurt_gemm_reference(&g));
  double err = test_max_err(cd, C0, C1, batch * sc, 1.0 + sqrt((double)k));
  bool ok = err <= tol_for(cd);
  if (!ok)
    fprintf(stderr, "gemm %s->%s b=%lld m=%lld n=%lld k=%lld ta=%d tb=%d tc=%d pad=%d own=%d: err %g\n",
            tpurt_dtype_name(ab), tpurt_dtype_name(cd), (long long)batch, (long long)m,
            (long long)n, (long long)k, ta, tb, tc, pad, own, err);
  CHECK(ok);
  free(A), free(B), free(C0), free(C1), free(Cin);
}

static void test_gemm(void) {
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT64, TPURT_DTYPE_BFLOAT16,
                               TPURT_DTYPE_FLOAT16, TPURT_DTYPE_INT64,   TPURT_DTYPE_INT32,
                               TPURT_DTYPE_INT16,   TPURT_DTYPE_INT8,    TPURT_DTYPE_UINT8,
                               TPURT_DTYPE_BOOL};
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3},   {13, 17, 19}, {6, 16, 256},
                               {37, 70, 300}, {0, 5, 3}, {4, 0, 3},   {5, 4, 0}, {150, 33, 9}};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); ++d)
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
      for (int lay = 0; lay < 8; ++lay) {
        bool ta = lay & 1, tb = lay & 2, tc = lay & 4;
        double beta = (s % 3 == 0) ? 0.0 : (s % 3 == 1 ? 1.0 : -0.5);
        if (tpurt_dtype_is_integral(dts[d]) || dts[d] == TPURT_DTYPE_BOOL) beta = beta < 0 ? 2 : beta;
        double alpha = tpurt_dtype_is_floating(dts[d]) ? 1.5 : 3;
        if (dts[d] == TPURT_DTYPE_BOOL) alpha = 1, beta = beta != 0;
        gemm_case(dts[d], dts[d], 1, shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, tc,
                  lay % 3, false, false, alpha, beta, false);
        if (dts[d] == TPURT_DTYPE_FLOAT32)
          gemm_case(dts[d], dts[d], 1, shapes[s][0], shapes[s][1], shapes[s][2], ta, tb, tc,
                    lay % 3, false, false, alpha, beta, true);
      }
  /* separate / broadcast C_in, batched, mixed C dtypes */
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]) - 1; ++d) {
    gemm_case(dts[d], dts[d], 3, 9, 20, 11, false, true, false, 1, true, false, 2, 1, false);
    gemm_case(dts[d], dts[d], 3, 9, 20, 11, true, false, true, 0, true, true, 1, 2, false);
    gemm_case(dts[d], dts[d], 40, 5, 6, 7, false, false, false, 0, true, false, 1, 1, false);
  }
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT32, 2, 30, 40, 50, true, false, false, 0, false,
            false, 1, 0, false);
  gemm_case(TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT32, 1, 30, 40, 600, false, true, true, 1, false,
            false, 1, 1, false);
  gemm_case(TPURT_DTYPE_INT8, TPURT_DTYPE_INT32, 1, 17, 33, 64, false, true, false, 0, false,
            false, 1, 0, false);
  /* 16-bit C written straight from the tiles (k <= one depth block) and
   * through the fp32 workspace (k above it); attention-shaped batches */
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 6, 64, 48, 32, false, true, false, 0, false,
            false, 0.125, 0, false);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 2, 50, 100, 256, false, true, false, 3, true,
            true, 1, 1, false);
  gemm_case(TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT16, 2, 50, 100, 257, true, false, true, 0, true,
            false, 1, -1, false);
  /* larger: several K blocks, N blocks and M chunks */
  gemm_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 1, 2400, 70, 600, false, false, false, 0,
            false, false, 1, 0.5, true);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 1, 70, 1100, 520, true, false, false, 0,
            false, false, 1, 1, false);
  gemm_case(TPURT_DTYPE_FLOAT64, TPURT_DTYPE_FLOAT64, 1, 300, 1030, 300, false, true, false, 0,
            true, true, 1, 1, false);
  /* blocks of B past L1 several times (the fp32 core: row tiles outer, B streamed from L2):
   * fp32 with A packed (column-major, too far apart to read in place) and a column-major C over two
   * column blocks and two depth blocks; 16-bit C written from those tiles in one depth block */
  gemm_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 1, 301, 1300, 700, true, false, true, 1, false,
            false, 1, -0.5, true);
  gemm_case(TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT16, 2, 200, 900, 300, false, true, false, 0, false,
            false, 1.5, 0, false);
  /* A packed once per depth block and read again in every column block (the fp32 core's a_once
   * order): rows split unevenly into the threads' boxes (13 tiles, a partial last), three column
   * blocks, two depth blocks; fp32 C in place and bf16 C through the fp32 workspace, A row-major and
   * column-major */
  gemm_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 1, 150, 1500, 500, false, false, false, 0, false,
            false, 1, 0.5, true);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 1, 100, 1400, 800, true, false, false, 2, false,
            false, 1, 1, false);
  /* 16-bit C accumulated in the fp32 workspace and rounded tile by tile as the last depth block
   * finishes it (flush_tile16): a column-major f16 C with beta 0 (the workspace not zeroed first;
   * test_gemm_ws_passes has C wider than one workspace pass) */
  gemm_case(TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT16, 2, 75, 130, 500, false, false, true, 1, false,
            false, 1, 0, false);
  /* bf16 -> fp32 C in whole 32 x 32 tiles with alpha 1 (the AMX kernel accumulates those in C
   * itself: zeroed for beta 0, loaded as the starting sums for beta 1 and every depth block after
   * the first), with a depth that is not a multiple of the 32-deep tile */
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT32, 1, 64, 96, 300, false, false, false, 0,
            false, false, 1, 0, false);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT32, 2, 96, 64, 45, false, true, false, 0,
            false, false, 1, 1, false);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT32, 1, 128, 160, 600, true, false, false, 0,
            false, false, 1, 1, false);
  /* depths past the AMX path's 2048-deep block: partial sums carried between blocks, in C
   * itself (fp32) and in the fp32 workspace (bf16 C, rounded once) */
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT32, 1, 64, 70, 2100, false, false, false, 0,
            false, false, 1, 1, false);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 1, 40, 64, 4200, false, true, false, 0,
            false, false, 1.5, -0.5, false);
  /* the AMX path's own blocks: B columns past one 2048-wide block (A packed once per block), B
   * packed from row-major rows in 64-deep runs across its panels with a partial last panel, an
   * odd depth (the generic packing), and several tiles per thread (the next panel prefetched) */
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 1, 70, 2100, 130, false, false, false, 0,
            false, false, 1, 0, false);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT32, 1, 300, 600, 77, false, false, false, 0,
            false, false, 1, 1, false);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 1, 260, 520, 2500, false, false, false, 0,
            false, false, 1, 0, false);
  /* the driver's boxes: rows too few for the threads (columns split, each box packing the same A),
   * and 16-bit C written from several row chunks of A per thread */
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 1, 10, 700, 100, false, true, false, 1,
            false, false, 1, 0, false);
  gemm_case(TPURT_DTYPE_FLOAT16, TPURT_DTYPE_FLOAT32, 1, 5, 900, 70, true, false, false, 0,
            false, false, 1, 1, false);
  gemm_case(TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_BFLOAT16, 1, 700, 96, 64, false, false, false, 2,
            false, false, 0.5, 0, false);
  /* beta = 0 ignores NaN in C */
  {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {NAN, NAN, NAN, NAN};
    for (int own = 0; own < 2; ++own) {
      for (int i = 0; i < 4; ++i) c[i] = NAN;
      tpurt_gemm_t g = {.m = 2, .n = 2, .k = 2, .ab_dtype = TPURT_DTYPE_FLOAT32,
                        .c_dtype = TPURT_DTYPE_FLOAT32, .a = a, .a_rs = 2, .a_cs = 1, .b = b,
                        .b_rs = 2, .b_cs = 1, .c = c, .c_rs = 2, .c_cs = 1, .alpha = 1, .beta = 0};
      tpurt_gemm_set_fp32_own(own);
      CHECK_OK(gemm_via_ctx(&g));
      CHECK(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4);
    }
    tpurt_gemm_set_fp32_own(false);
  }
  /* unsupported dtype pair */
  tpurt_gemm_t bad = {.m = 1, .n = 1, .k = 1, .ab_dtype = TPURT_DTYPE_FLOAT32,
                      .c_dtype = TPURT_DTYPE_FLOAT64};
  CHECK_STATUS(gemm_via_ctx(&bad), UNIMPLEMENTED);
}

/* fp32 products with one row or one column (OpenBLAS's sgemv): every layout (a column-major C
 * swaps the operands, so both the row and the column form run), padded strides, alpha/beta, a
 * product large enough to be split between threads, and beta 0 with NaN in C. */
static void test_gemm_vector(void) {
  const int64_t shapes[][3] = {{1, 7, 5}, {9, 1, 13}, {1, 1, 40}, {1, 192, 64}, {256, 1, 64},
                               {1, 300, 1}, {1, 2048, 4100}, {3000, 1, 2900}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
    for (int lay = 0; lay < 8; ++lay) {
      bool ta = lay & 1, tb = lay & 2, tc = lay & 4;
      double beta = lay % 3 == 0 ? 0.0 : lay % 3 == 1 ? 1.0 : -0.5;
      gemm_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 1, shapes[s][0], shapes[s][1], shapes[s][2],
                ta, tb, tc, lay % 3, false, false, 1.5, beta, false);
    }
  gemm_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 2, 1, 70, 33, false, true, false, 1, true, true,
            1, 1, false); /* addmm's broadcast bias row, batched */
  gemm_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 2, 33, 1, 70, true, false, true, 0, true, false,
            1, 2, false);
  for (int form = 0; form < 4; ++form) { /* beta 0 ignores NaN in C: a row, a column, a strided column */
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 2, 1, 0, 3}, c[6];
    for (int i = 0; i < 6; ++i) c[i] = NAN;
    tpurt_gemm_t g = {.ab_dtype = TPURT_DTYPE_FLOAT32, .c_dtype = TPURT_DTYPE_FLOAT32, .a = a,
                      .b = b, .c = c, .alpha = 1, .beta = 0};
    if (form < 2) { /* 1 x 3 = (1 x 2)(2 x 3), B row-major or transposed */
      g.m = 1, g.n = 3, g.k = 2, g.a_rs = 2, g.a_cs = 1;
      g.b_rs = form ? 1 : 3, g.b_cs = form ? 2 : 1, g.c_rs = 3, g.c_cs = 1;
    } else { /* 3 x 1 = (3 x 2)(2 x 1), C's column contiguous or every other element */
      g.m = 3, g.n = 1, g.k = 2, g.a_rs = 2, g.a_cs = 1, g.b_rs = 1, g.b_cs = 1;
      g.c_rs = form == 2 ? 1 : 2, g.c_cs = 1;
    }
    float want[3];
    for (int i = 0; i < 3; ++i) {
      want[i] = 0;
      for (int p = 0; p < 2; ++p)
        want[i] += g.m == 1 ? a[p] * b[p * g.b_rs + i * g.b_cs] : a[i * 2 + p] * b[p];
    }
    CHECK_OK(gemm_via_ctx(&g));
    for (int i = 0; i < 3; ++i) CHECK(c[i * (g.m == 1 ? 1 : g.c_rs)] == want[i]);
  }
}

/* fp32 with few rows of a row-major A (2..64) and B row-major: the unpacked kernels (2-16 rows,
 * small B) and B copied in depth blocks of 256 x 240 columns (17-64 rows, or 2-16 rows against a
 * B of 2^20 elements or more), each thread its own copy buffer; every layout (a column-major C
 * makes op(B)^T the few-rows operand), padded strides, partial 48-column panels and depth blocks,
 * alpha/beta (beta 0 on the first depth block only). Then serially: with the workspace
 * tpurt_gemm_workspace_bytes asks for, and without any (those products go to OpenBLAS). */
static void test_gemm_small_m(void) {
  const int64_t shapes[][3] = {{17, 240, 256}, {23, 241, 257}, {40, 500, 600}, {64, 1030, 300},
                               {33, 260, 1},   {8, 250, 4200}, {12, 1030, 1100}, {16, 300, 3500},
                               {65, 300, 300}, {30, 100, 700}, {2, 300, 700},   {5, 1031, 260},
                               {7, 45, 1100},  {3, 9, 33},     {3, 1100, 1000}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
    for (int lay = 0; lay < 8; ++lay) {
      bool ta = lay & 1, tb = lay & 2, tc = lay & 4;
      int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      if (tc) { /* the few rows as C's columns */
        int64_t t = m;
        m = n, n = t;
      }
      double beta = lay % 3 == 0 ? 0.0 : lay % 3 == 1 ? 1.0 : -0.5;
      gemm_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 1, m, n, k, ta, tb, tc, (int)(s + lay) % 3, false, false,
                s % 2 ? 1.0 : -1.25, beta, false);
    }
  gemm_case(TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 2, 40, 300, 500, false, false, false, 1, true, false, 1, 1,
            false);
  for (int with_ws = 0; with_ws < 2; ++with_ws) {
    int64_t m = 40, n = 300, k = 520;
    float *a = test_rand_buf(TPURT_DTYPE_FLOAT32, m * k), *b = test_rand_buf(TPURT_DTYPE_FLOAT32, k * n);
    float *c = test_rand_buf(TPURT_DTYPE_FLOAT32, m * n), *r = malloc(4 * m * n);
    tpurt_gemm_t g = {.m = m, .n = n, .k = k, .ab_dtype = TPURT_DTYPE_FLOAT32, .c_dtype = TPURT_DTYPE_FLOAT32,
                      .a = a, .a_rs = k, .a_cs = 1, .b = b, .b_rs = n, .b_cs = 1, .c = r, .c_rs = n, .c_cs = 1,
                      .alpha = 0.5, .beta = 0};
    CHECK_OK(tpurt_gemm_reference(&g));
    g.c = c;
    size_t bytes = tpurt_gemm_workspace_bytes(NULL, &g);
    void* ws = with_ws ? malloc(bytes + 4) : NULL;
    CHECK_OK(tpurt_gemm(NULL, &g, with_ws ? (char*)ws + 4 : NULL)); /* not 64-byte aligned */
    CHECK(test_max_err(TPURT_DTYPE_FLOAT32, c, r, m * n, 1.0 + sqrt((double)k)) <= tol_for(TPURT_DTYPE_FLOAT32));
    free(a), free(b), free(c), free(r), free(ws);
  }
}

/* 16-bit products with few rows against a transposed B (a linear layer over a decode step's tokens):
 * bf16 where the CPU has vdpbf16ps, the dot kernels; bf16 without it (mode 0, also forced where the CPU
 * has it) and f16, the widening kernels (A widened once, W as it is read; against W^T and, under
 * AVX-512, W row-major, 4 depth rows x 64 columns a step). 1-16 rows, the depth's tail
 * masked, columns in fours and the rest one at a time, the next rows fetched ahead, depth blocks past
 * 2048 (1024 widening); 16-bit and float32 C, row- and column-major, alpha / beta with C itself, a
 * separate and a broadcast C_in, batched. */
static void test_gemm_bf16_few_rows(void) {
  const int64_t shapes[][3] = {{1, 509, 333}, {1, 7, 32}, {2, 9, 31}, {3, 37, 65}, {4, 64, 1},
                               {5, 130, 100}, {7, 11, 97}, {16, 260, 777}, {13, 8, 64}, {16, 1030, 96},
                               {16, 70, 4200}, {6, 33, 2049}, {9, 9, 4097}, {2, 5, 1025}};
  for (int pass = 0; pass < 3; ++pass) { /* bf16 as the machine chooses, bf16 widened, f16 */
    const tpurt_dtype_t ab = pass == 2 ? TPURT_DTYPE_FLOAT16 : TPURT_DTYPE_BFLOAT16;
    if (pass == 1) tpurt_gemm_set_bf16dp(0);
    const tpurt_dtype_t cds[] = {ab, TPURT_DTYPE_FLOAT32};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
      for (int c = 0; c < 2; ++c)
        for (int v = 0; v < 5; ++v)
          for (int tb = 0; tb < 2; ++tb) /* W^T, and W row-major (x @ W: the widening path's second form) */
            gemm_case(ab, cds[c], v == 3 ? 3 : 1, shapes[s][0], shapes[s][1], shapes[s][2], false, tb, v == 4,
                      (int)(s + v) % 3, v == 1 || v == 2, v == 2, v % 2 ? 0.5 : 1.0,
                      v == 0 ? 0.0 : v == 1 ? 1.0 : -0.5, false);
    tpurt_gemm_set_bf16dp(-1);
  }
}

/* Integer GEMM whose products and sums pass int64's range: the result wraps
 * modulo 2^64 (PyTorch CPU's answer), computed without signed overflow, which
 * is undefined behaviour (UBSan flags it under make test-c-asan). */
static tpurt_status_t ws_bytes_kernel(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  gemm_case_t* gc = (gemm_case_t*)(uintptr_t)call->args[0].v.i;
  *(size_t*)gc->ws = tpurt_gemm_workspace_bytes(ctx, &gc->g);
  return NULL;
}
static void test_gemm_int_wrap(void) {
  enum { M = 7, N = 9, K = 11, B = 2 };
  int64_t a[B * M * K], b[B * K * N], c[B * M * N], cin[M * N], want[B * M * N];
  for (int i = 0; i < B * M * K; ++i) a[i] = (int64_t)test_rand_u64();
  for (int i = 0; i < B * K * N; ++i) b[i] = (int64_t)test_rand_u64();
  for (int i = 0; i < M * N; ++i) cin[i] = (int64_t)test_rand_u64();
  const int64_t alpha = 3, beta = -5;
  for (int bi = 0; bi < B; ++bi)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        uint64_t acc = 0;
        for (int p = 0; p < K; ++p) acc += (uint64_t)a[bi * M * K + i * K + p] * (uint64_t)b[bi * K * N + p * N + j];
        want[bi * M * N + i * N + j] = (int64_t)((uint64_t)alpha * acc + (uint64_t)beta * (uint64_t)cin[i * N + j]);
      }
  for (int path = 0; path < 3; ++path) { /* across the chip's threads, serial, reference */
    memset(c, 0, sizeof(c));
    tpurt_gemm_t g = {.m = M, .n = N, .k = K, .ab_dtype = TPURT_DTYPE_INT64, .c_dtype = TPURT_DTYPE_INT64,
                      .a = a, .a_rs = K, .a_cs = 1, .b = b, .b_rs = N, .b_cs = 1, .c = c, .c_rs = N, .c_cs = 1,
                      .c_in = cin, .c_in_rs = N, .c_in_cs = 1, .alpha = (double)alpha, .beta = (double)beta,
                      .batch = B, .a_bs = M * K, .b_bs = K * N, .c_bs = M * N, .c_in_bs = 0};
    if (path == 0) CHECK_OK(gemm_via_ctx(&g));
    else if (path == 1) {
      void* ws = malloc(tpurt_gemm_workspace_bytes(NULL, &g) + 1);
      CHECK_OK(tpurt_gemm(NULL, &g, ws));
      free(ws);
    }
    else CHECK_OK(tpurt_gemm_reference(&g));
    CHECK(memcmp(c, want, sizeof(c)) == 0);
  }
  /* beta * C with k = 0 (no product): wraps too */
  {
    int64_t x[2] = {INT64_MAX, INT64_MIN + 1};
    tpurt_gemm_t g = {.m = 1, .n = 2, .k = 0, .ab_dtype = TPURT_DTYPE_INT64, .c_dtype = TPURT_DTYPE_INT64,
                      .a = a, .a_rs = 1, .a_cs = 1, .b = b, .b_rs = 2, .b_cs = 1, .c = x, .c_rs = 2, .c_cs = 1,
                      .alpha = 1, .beta = 4};
    CHECK_OK(gemm_via_ctx(&g));
    CHECK(x[0] == (int64_t)((uint64_t)INT64_MAX * 4u) && x[1] == (int64_t)((uint64_t)(INT64_MIN + 1) * 4u));
  }
  /* The workspace estimate of a batch too large to run does not overflow. */
  {
    size_t bytes = 0;
    gemm_case_t gc = {{.m = (int64_t)1 << 22, .n = (int64_t)1 << 22, .k = (int64_t)1 << 22,
                       .ab_dtype = TPURT_DTYPE_FLOAT64, .c_dtype = TPURT_DTYPE_FLOAT64, .batch = 8},
                      &bytes};
    tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = (int64_t)(uintptr_t)&gc};
    tpurt_op_call_t call = {.name = "gemm", .overload = "", .num_args = 1, .args = &arg};
    CHECK_OK(tpurt_kernel_run(ws_bytes_kernel, &call));
    CHECK(bytes > 0);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#include <immintrin.h>
__attribute__((target("amx-tile"))) static void release_tiles(void) { _tile_release(); }
#else
static void release_tiles(void) {}
#endif

/* AMX tile state belongs to the thread, and other code on it may release it between our products
 * (oneDNN does after each of its own, on PyTorch CPU's bf16 matmuls): serial products on this
 * thread with the tiles released before each still match the reference. */
static void test_amx_after_release(void) {
  if (!tpurt_gemm_bf16dp_supported(3)) return;
  tpurt_gemm_set_bf16dp(3);
  int64_t n = 64;
  void* A = test_rand_buf(TPURT_DTYPE_BFLOAT16, n * n);
  void* B = test_rand_buf(TPURT_DTYPE_BFLOAT16, n * n);
  float *C = malloc(n * n * 4), *R = malloc(n * n * 4);
  tpurt_gemm_t g = {.m = n, .n = n, .k = n, .ab_dtype = TPURT_DTYPE_BFLOAT16, .c_dtype = TPURT_DTYPE_FLOAT32,
                    .a = A, .a_rs = n, .a_cs = 1, .b = B, .b_rs = n, .b_cs = 1, .c = R, .c_rs = n,
                    .c_cs = 1, .alpha = 1, .beta = 0};
  CHECK_OK(tpurt_gemm_reference(&g));
  void* ws = malloc(tpurt_gemm_workspace_bytes(NULL, &g));
  g.c = C;
  for (int rep = 0; rep < 3; ++rep) {
    release_tiles();
    memset(C, 0, n * n * 4);
    CHECK_OK(tpurt_gemm(NULL, &g, ws));
    CHECK(test_max_err(TPURT_DTYPE_FLOAT32, C, R, n * n, 1.0 + sqrt((double)n)) <= tol_for(TPURT_DTYPE_BFLOAT16));
  }
  tpurt_gemm_set_bf16dp(-1);
  free(A), free(B), free(C), free(R), free(ws);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Prints GFLOP/s of a square GEMM (median of 3). No threshold. */
static void bench_one(const char* label, tpurt_dtype_t dt, int64_t n, bool own) {
  void* A = test_rand_buf(dt, n * n);
  void* B = test_rand_buf(dt, n * n);
  void* C = test_rand_buf(dt, n * n);
  tpurt_gemm_t g = {.m = n, .n = n, .k = n, .ab_dtype = dt, .c_dtype = dt, .a = A, .a_rs = n,
                    .a_cs = 1, .b = B, .b_rs = n, .b_cs = 1, .c = C, .c_rs = n, .c_cs = 1,
                    .alpha = 1, .beta = 0};
  tpurt_gemm_set_fp32_own(own);
  double t[3];
  for (int r = 0; r < 3; ++r) {
    double t0 = now_s();
    tpurt_status_t s = gemm_via_ctx(&g);
    t[r] = now_s() - t0;
    tpurt_status_free(s);
  }
  tpurt_gemm_set_fp32_own(false);
  for (int i = 0; i < 3; ++i)
    for (int j = i + 1; j < 3; ++j)
      if (t[j] < t[i]) { double x = t[i]; t[i] = t[j]; t[j] = x; }
  printf("  gemm %-22s %lldx%lld: %7.1f GFLOP/s\n", label, (long long)n, (long long)n,
         2.0 * n * n * n / t[1] * 1e-9);
  free(A), free(B), free(C);
}

static void bench_gemm(void) {
  if (getenv("TPURT_NO_BENCH")) return;
  int64_t n = getenv("TPURT_BENCH_N") ? atoll(getenv("TPURT_BENCH_N")) : 1024;
  printf("GEMM figures (threads of the default chip's kernel context):\n");
  bench_one("fp32 OpenBLAS", TPURT_DTYPE_FLOAT32, n, false);
  bench_one("fp32 own kernel", TPURT_DTYPE_FLOAT32, n, true);
  /* bf16 through each path this CPU can run: widened to fp32 (AVX2/FMA) and,
   * where cpuid reports AVX-512 BF16, pairs through vdpbf16ps. */
  const int modes[] = {0, 1, 3};
  const char* names[] = {"bf16 widened (fp32 acc)", "bf16 vdpbf16ps", "bf16 AMX tiles"};
  for (int i = 0; i < 3; ++i) {
    if (!tpurt_gemm_bf16dp_supported(modes[i])) continue;
    tpurt_gemm_set_bf16dp(modes[i]);
    bench_one(names[i], TPURT_DTYPE_BFLOAT16, n, false);
  }
  tpurt_gemm_set_bf16dp(-1);
  bench_one("f16 own (fp32 acc)", TPURT_DTYPE_FLOAT16, n, false);
  bench_one("f64 own", TPURT_DTYPE_FLOAT64, n, false);
}

static void test_linalg_ops(void);

/* ---- complex linalg_eig and LDL: answers checked by their defining equations ---- */

#include <complex.h>
#undef I
typedef double _Complex zt_t;

static tpurt_tensor_t ztensor(zt_t* data, int nd, const int64_t* sizes) {
  tpurt_tensor_t t = {0};
  t.dtype = TPURT_DTYPE_COMPLEX128;
  t.ndim = nd;
  int64_t st = 1;
  for (int d = nd - 1; d >= 0; --d) t.sizes[d] = sizes[d], t.strides[d] = st, st *= sizes[d];
  t.data = data;
  return t;
}
static tpurt_status_t run_named(const char* name, tpurt_arg_t* args, int nargs, tpurt_tensor_t* outs, int nouts) {
  const tpurt_op_def_t* d = tpurt_op_resolve(name, "", TPURT_RESOLVE_COMPLEX);
  CHECK(d != NULL);
  if (!d) return TPURT_STATUS(NOT_FOUND, "%s", name);
  tpurt_op_call_t c = {name, "", nargs, args, nouts, outs};
  return tpurt_kernel_run(d->fn, &c);
}
static zt_t zrand(void) {
  return CMPLX(2.0 * test_rand_unit() - 1.0, 2.0 * test_rand_unit() - 1.0);
}

static void test_complex_eig(void) {
  enum { N = 9 };
  zt_t a[N * N], w[N], v[N * N];
  const int64_t sz[2] = {N, N};
  for (int kind = 0; kind < 2; ++kind) { /* random; upper triangular (eigenvalues: its diagonal) */
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) a[i * N + j] = kind == 1 && j < i ? 0 : zrand();
    tpurt_tensor_t ta = ztensor(a, 2, sz), outs[2] = {ztensor(w, 1, sz), ztensor(v, 2, sz)};
    tpurt_arg_t args[1] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}};
    CHECK_STATUS(run_named("linalg_eig", args, 1, outs, 2), OK);
    double worst = 0;
    for (int k = 0; k < N; ++k) { /* A v_k = w_k v_k, |v_k| = 1 */
      double nrm = 0;
      for (int i = 0; i < N; ++i) {
        zt_t av = 0;
        for (int j = 0; j < N; ++j) av += a[i * N + j] * v[j * N + k];
        worst = fmax(worst, cabs(av - w[k] * v[i * N + k]));
        nrm += creal(v[i * N + k] * conj(v[i * N + k]));
      }
      worst = fmax(worst, fabs(sqrt(nrm) - 1));
    }
    CHECK(worst < 1e-12);
    if (kind == 1) { /* each diagonal entry is an eigenvalue, each eigenvalue is used once */
      bool used[N] = {false};
      for (int i = 0; i < N; ++i) {
        int best = -1;
        for (int k = 0; k < N; ++k)
          if (!used[k] && (best < 0 || cabs(w[k] - a[i * N + i]) < cabs(w[best] - a[i * N + i]))) best = k;
        used[best] = true;
        CHECK(cabs(w[best] - a[i * N + i]) < 1e-12);
      }
    }
  }
  /* inf / nan is refused with CPU's words */
  a[3] = CMPLX(NAN, 0);
  tpurt_tensor_t ta = ztensor(a, 2, sz), outs[2] = {ztensor(w, 1, sz), ztensor(v, 2, sz)};
  tpurt_arg_t args[1] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}};
  CHECK_STATUS(run_named("linalg_eig", args, 1, outs, 2), INVALID_ARGUMENT);
}

/* ---- complex matmul products (bmm and addbmm, resolved to complex::bmm, complex::addbmm) against a loop in complex double:
 * operands read in place (row-major, column-major, padded rows) and converted (strided columns, the
 * other precision), outputs in place and not (transposed), complex64 and complex128 ---- */

/* a 3-d tensor over buf (complex64 or complex128) with the given element strides */
static tpurt_tensor_t zt3(tpurt_dtype_t dt, void* buf, const int64_t* sizes, const int64_t* strides) {
  tpurt_tensor_t t = {0};
  t.dtype = dt;
  t.ndim = 3;
  for (int d = 0; d < 3; ++d) t.sizes[d] = sizes[d], t.strides[d] = strides[d];
  t.data = buf;
  return t;
}
static zt_t zt_get(const tpurt_tensor_t* t, int64_t b, int64_t i, int64_t j) {
  const int64_t o = b * t->strides[0] + i * t->strides[1] + j * t->strides[2];
  if (t->dtype == TPURT_DTYPE_COMPLEX64) return ((float _Complex*)t->data)[o];
  return ((zt_t*)t->data)[o];
}
static void zt_fill(tpurt_tensor_t* t, int64_t elems) {
  for (int64_t e = 0; e < elems; ++e) {
    if (t->dtype == TPURT_DTYPE_COMPLEX64) ((float _Complex*)t->data)[e] = (float _Complex)zrand();
    else ((zt_t*)t->data)[e] = zrand();
  }
}

static void test_complex_products(void) {
  enum { B = 3 };
  const int64_t shapes[][3] = {{7, 5, 6}, {40, 33, 37}, {1, 9, 1}};
  int bad = 0;
  for (int dti = 0; dti < 2; ++dti)
    for (int si = 0; si < 3; ++si)
      for (int layout = 0; layout < 4; ++layout) {
        const tpurt_dtype_t dt = dti ? TPURT_DTYPE_COMPLEX128 : TPURT_DTYPE_COMPLEX64;
        /* a of the other precision in layout 3: converted */
        const tpurt_dtype_t adt = layout == 3 ? (dti ? TPURT_DTYPE_COMPLEX64 : TPURT_DTYPE_COMPLEX128) : dt;
        const int64_t m = shapes[si][0], k = shapes[si][1], n = shapes[si][2];
        const int64_t pad = layout == 2 ? 3 : 0, bcs = layout == 1 ? 2 : 1; /* b's padded rows, strided columns */
        const int64_t asz[3] = {B, m, k}, bsz[3] = {B, k, n}, osz[3] = {B, m, n};
        /* a: row-major, or column-major in layouts 1 and 3 */
        const int64_t ast[3] = {m * k, layout % 2 ? 1 : k, layout % 2 ? m : 1};
        const int64_t bst[3] = {k * (n * bcs + pad), n * bcs + pad, bcs};
        /* out: row-major, transposed in layout 2 */
        const int64_t ost[3] = {m * n, layout == 2 ? 1 : n, layout == 2 ? m : 1};
        void* abuf = calloc((size_t)(B * m * k), 16);
        void* bbuf = calloc((size_t)(B * k * (n * bcs + pad)), 16);
        void* obuf = calloc((size_t)(B * m * n), 16);
        void* sbuf = calloc((size_t)(m * n), 16);
        void* o2buf = calloc((size_t)(m * n), 16);
        tpurt_tensor_t ta = zt3(adt, abuf, asz, ast), tb = zt3(dt, bbuf, bsz, bst), to = zt3(dt, obuf, osz, ost);
        zt_fill(&ta, B * m * k);
        zt_fill(&tb, B * k * (n * bcs + pad));
        tpurt_arg_t args[2] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}, {.kind = TPURT_ARG_TENSOR, .v.tensor = &tb}};
        CHECK_STATUS(run_named("bmm", args, 2, &to, 1), OK);
        /* addbmm: 0.5 self + 2 sum_b a_b b_b into an m x n output */
        const int64_t s2[3] = {1, m, n}, st2[3] = {m * n, n, 1};
        tpurt_tensor_t tself = zt3(dt, sbuf, s2, st2), to2 = zt3(dt, o2buf, s2, st2);
        zt_fill(&tself, m * n);
        tself.ndim = to2.ndim = 2;
        for (int d = 0; d < 2; ++d) tself.sizes[d] = to2.sizes[d] = s2[d + 1], tself.strides[d] = to2.strides[d] = st2[d + 1];
        tpurt_arg_t aargs[5] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &tself}, args[0], args[1],
                                {.kind = TPURT_ARG_DOUBLE, .v.d = 0.5}, {.kind = TPURT_ARG_DOUBLE, .v.d = 2.0}};
        CHECK_STATUS(run_named("addbmm", aargs, 5, &to2, 1), OK);
        const double tol = (dti ? 1e-12 : 2e-5) * (double)k;
        double worst = 0, worst2 = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            zt_t sum = 0;
            for (int64_t b = 0; b < B; ++b) {
              zt_t acc = 0;
              for (int64_t q = 0; q < k; ++q) acc += zt_get(&ta, b, i, q) * zt_get(&tb, b, q, j);
              worst = fmax(worst, cabs(acc - zt_get(&to, b, i, j)));
              sum += acc;
            }
            const int64_t o = i * n + j; /* self and the addbmm output are row-major m x n */
            const zt_t self = dti ? ((zt_t*)sbuf)[o] : (zt_t)((float _Complex*)sbuf)[o];
            const zt_t got = dti ? ((zt_t*)o2buf)[o] : (zt_t)((float _Complex*)o2buf)[o];
            const zt_t want = 0.5 * self + 2.0 * sum;
            worst2 = fmax(worst2, cabs(want - got) / 4);
          }
        if (!(worst <= tol && worst2 <= tol)) {
          ++bad;
          fprintf(stderr, "complex products %s m=%lld k=%lld n=%lld layout %d: bmm err %g, addbmm err %g\n",
                  tpurt_dtype_name(dt), (long long)m, (long long)k, (long long)n, layout, worst, worst2);
        }
        free(abuf), free(bbuf), free(obuf), free(sbuf), free(o2buf);
      }
  CHECK(bad == 0);
}

static void test_complex_ldl(void) {
  enum { N = 8, R = 3 };
  zt_t a[N * N], ld[N * N], b[N * R], x[N * R];
  int64_t piv[N], info = -1;
  for (int herm = 0; herm < 2; ++herm) {
    for (int i = 0; i < N; ++i) /* symmetric (herm: Hermitian) and indefinite, so 2x2 pivots occur */
      for (int j = 0; j <= i; ++j) {
        zt_t z = zrand();
        if (i == j && herm) z = creal(z);
        a[i * N + j] = z;
        a[j * N + i] = herm ? conj(z) : z;
      }
    for (int i = 0; i < N * R; ++i) b[i] = zrand();
    const int64_t sz[2] = {N, N}, bsz[2] = {N, R};
    tpurt_tensor_t ta = ztensor(a, 2, sz);
    tpurt_tensor_t outs[3] = {ztensor(ld, 2, sz), {0}, {0}};
    outs[1].dtype = TPURT_DTYPE_INT64, outs[1].ndim = 1, outs[1].sizes[0] = N, outs[1].strides[0] = 1, outs[1].data = piv;
    outs[2].dtype = TPURT_DTYPE_INT64, outs[2].ndim = 0, outs[2].data = &info;
    tpurt_arg_t fa[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &ta}, barg(herm), barg(false)};
    CHECK_STATUS(run_named("linalg_ldl_factor_ex", fa, 3, outs, 3), OK);
    CHECK(info == 0);
    tpurt_tensor_t tb = ztensor(b, 2, bsz), tx = ztensor(x, 2, bsz);
    tpurt_arg_t sa[4] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &outs[0]},
                         {.kind = TPURT_ARG_TENSOR, .v.tensor = &outs[1]},
                         {.kind = TPURT_ARG_TENSOR, .v.tensor = &tb}, barg(herm)};
    CHECK_STATUS(run_named("linalg_ldl_solve", sa, 4, &tx, 1), OK);
    double worst = 0; /* A x = b */
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < R; ++c) {
        zt_t s = 0;
        for (int j = 0; j < N; ++j) s += a[i * N + j] * x[j * R + c];
        worst = fmax(worst, cabs(s - b[i * R + c]));
      }
    CHECK(worst < 1e-10);
  }
}

/* bf16 C wider than one pass of the fp32 workspace (4200 rows: 992 columns a pass, gemm.c ws_cols), k
 * past one depth block: each pass's tiles are rounded into C at that pass's columns. Checked against
 * the same product with fp32 C (the reference GEMM would take a minute here), which accumulates the
 * same sums in C itself: the bf16 result is that one rounded. */
static void test_gemm_ws_passes(void) {
  const int64_t m = 4200, n = 1000, k = 390;
  void* A = test_rand_buf(TPURT_DTYPE_BFLOAT16, m * k);
  void* B = test_rand_buf(TPURT_DTYPE_BFLOAT16, n * k);
  float* C32 = malloc((size_t)(m * n) * sizeof(float));
  uint16_t* C16 = malloc((size_t)(m * n) * sizeof(uint16_t));
  float* W = malloc((size_t)(m * n) * sizeof(float));
  tpurt_gemm_t g = {.m = m, .n = n, .k = k, .ab_dtype = TPURT_DTYPE_BFLOAT16, .c_dtype = TPURT_DTYPE_FLOAT32,
                    .a = A, .a_rs = k, .a_cs = 1, .b = B, .b_rs = 1, .b_cs = k, .c = C32, .c_rs = n,
                    .c_cs = 1, .alpha = 0.5, .beta = 0, .batch = 1};
  CHECK_OK(gemm_via_ctx(&g));
  g.c_dtype = TPURT_DTYPE_BFLOAT16, g.c = C16;
  CHECK_OK(gemm_via_ctx(&g));
  for (int64_t i = 0; i < m * n; ++i) W[i] = tpurt_bf16_to_f32(C16[i]);
  /* within bf16's rounding of the fp32 sums (a misplaced tile is off by the sums themselves) */
  double err = test_max_err(TPURT_DTYPE_FLOAT32, W, C32, m * n, 1.0);
  printf("gemm bf16 C over two workspace passes (%lldx%lldx%lld): max err %.3g\n", (long long)m, (long long)n,
         (long long)k, err);
  CHECK(err <= tol_for(TPURT_DTYPE_BFLOAT16));
  free(A), free(B), free(C32), free(C16), free(W);
}

/* bf16 C of one depth block with NaN, infinities and NaN payloads among the inputs: whole tiles are
 * rounded in registers without a NaN test (gemm.c ukr_f32_bf16c), partial ones through the float
 * tile; both must give the bits of the same sums in fp32 C rounded by tpurt_f32_to_bf16. */
static void test_gemm_bf16_c16_specials(void) {
  const int64_t m = 30, n = 80, k = 64; /* two whole 12-row tiles and a partial one; 32 + 32 + 16 columns */
  uint16_t* A = test_rand_buf(TPURT_DTYPE_BFLOAT16, m * k);
  uint16_t* B = test_rand_buf(TPURT_DTYPE_BFLOAT16, k * n);
  const uint16_t sp[] = {0x7fff, 0xffff, 0x7f81, 0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x0000, 0x8000, 0x7f7f};
  for (int i = 0; i < 40; ++i) {
    A[(i * 37) % (m * k)] = sp[i % 10];
    B[(i * 53 + 11) % (k * n)] = sp[(i + 3) % 10];
  }
  float* C32 = malloc((size_t)(m * n) * sizeof(float));
  uint16_t* C16 = malloc((size_t)(m * n) * sizeof(uint16_t));
  tpurt_gemm_t g = {.m = m, .n = n, .k = k, .ab_dtype = TPURT_DTYPE_BFLOAT16, .c_dtype = TPURT_DTYPE_FLOAT32,
                    .a = A, .a_rs = k, .a_cs = 1, .b = B, .b_rs = n, .b_cs = 1, .c = C32, .c_rs = n, .c_cs = 1,
                    .alpha = 1, .beta = 0, .batch = 1};
  CHECK_OK(gemm_via_ctx(&g));
  g.c_dtype = TPURT_DTYPE_BFLOAT16, g.c = C16;
  CHECK_OK(gemm_via_ctx(&g));
  int bad = 0, nans = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    nans += C32[i] != C32[i];
    if (C16[i] != tpurt_f32_to_bf16(C32[i]) && bad++ < 3)
      printf("  bf16 C[%lld] = %#06x, fp32 C rounded %#06x\n", (long long)i, C16[i], tpurt_f32_to_bf16(C32[i]));
  }
  printf("gemm bf16 C with NaN and infinite inputs: %d of %lld NaN, %d differ from fp32 C rounded\n", nans,
         (long long)(m * n), bad);
  CHECK(nans > 0 && bad == 0);
  /* ties: rows of 4s and 5s times ones sum to integers in [256, 320], whose odd ones lie halfway
   * between two bf16 values (ties to even) */
  for (int64_t i = 0; i < m * k; ++i) A[i] = tpurt_f32_to_bf16((float)(4 + (i * 7 % 11 < 4)));
  for (int64_t i = 0; i < k * n; ++i) B[i] = tpurt_f32_to_bf16(1.0f);
  g.c_dtype = TPURT_DTYPE_FLOAT32, g.c = C32;
  CHECK_OK(gemm_via_ctx(&g));
  g.c_dtype = TPURT_DTYPE_BFLOAT16, g.c = C16;
  CHECK_OK(gemm_via_ctx(&g));
  int ties = 0;
  bad = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    ties += C32[i] >= 256 && (int)C32[i] % 2 == 1;
    bad += C16[i] != tpurt_f32_to_bf16(C32[i]);
  }
  printf("gemm bf16 C at ties: %d of %lld sums halfway, %d differ from fp32 C rounded\n", ties, (long long)(m * n),
         bad);
  CHECK(ties > 0 && bad == 0);
  free(A), free(B), free(C32), free(C16);
}

int main(void) {
  test_gemm();
  test_gemm_ws_passes();
  test_gemm_bf16_c16_specials();
  test_gemm_vector();
  test_gemm_small_m();
  test_gemm_bf16_few_rows();
  /* fp32 A always packed (by default the direct-A kernel takes unit-stride A of products with few
   * columns, gemm.c a_direct_pays, so the cases above ran it) */
  tpurt_gemm_set_a_direct(false);
  test_gemm();
  tpurt_gemm_set_a_direct(true);
  /* again through the portable microkernel and scalar packing */
  tpurt_gemm_set_generic(true);
  test_gemm();
  tpurt_gemm_set_generic(false);
  /* bf16 kept as pairs (the AVX-512 BF16 path's packing, odd depths, driver
   * and tile stores) through the portable pair microkernel, on every machine;
   * then the vdpbf16ps microkernel itself where cpuid reports AVX-512 BF16 */
  tpurt_gemm_set_bf16dp(2);
  CHECK(tpurt_gemm_bf16dp_mode() == 2);
  test_gemm();
  /* the AMX tile panels (32-deep chunks, zero-padded depth, 32 x 32 tiles)
   * through the portable tile kernel, then AMX itself where the CPU has it */
  tpurt_gemm_set_bf16dp(4);
  CHECK(tpurt_gemm_bf16dp_mode() == 4);
  test_gemm();
  const int hw_modes[] = {1, 3};
  const char* hw_names[] = {"the vdpbf16ps microkernel (AVX-512 BF16)", "the AMX tile kernel (AMX-BF16)"};
  for (int i = 0; i < 2; ++i) {
    if (!tpurt_gemm_bf16dp_supported(hw_modes[i])) {
      printf("test_linalg: this CPU cannot run %s: not run\n", hw_names[i]);
      continue;
    }
    tpurt_gemm_set_bf16dp(hw_modes[i]);
    test_gemm();
    printf("test_linalg: ran %s\n", hw_names[i]);
  }
  tpurt_gemm_set_bf16dp(-1);
  test_amx_after_release();
  test_gemm_int_wrap();
  test_linalg_ops();
  test_complex_eig();
  test_complex_products();
  test_complex_ldl();
  bench_gemm();
  return test_finish("test_linalg");
}

static void test_linalg_ops(void) {
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT64, TPURT_DTYPE_BFLOAT16,
                               TPURT_DTYPE_FLOAT16, TPURT_DTYPE_INT64, TPURT_DTYPE_INT32};
  for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); ++di) {
    tpurt_dtype_t dt = dts[di];
    double tol = tol_for(dt) * 10;
    bool fl = tpurt_dtype_is_floating(dt);
    for (int v = 0; v < 3; ++v) {
      int64_t m = v == 2 ? 0 : 23, k = v == 1 ? 0 : 19, n = 31;
      tbuf_t a = mk(dt, 2, (int64_t[]){m, k}, v == 0, 0), b = mk(dt, 2, (int64_t[]){k, n}, false, 2);
      tbuf_t o = mk(dt, 2, (int64_t[]){m, n}, v == 1, 0);
      tbuf_t self1 = mk(dt, 1, (int64_t[]){n}, false, 0);
      tpurt_arg_t args[6] = {targ(&a), targ(&b)};
      check_op("mm", "out", args, 2, &o, 1, tol);
      args[0] = targ(&self1), args[1] = targ(&a), args[2] = targ(&b);
      args[3] = fl ? darg(0.5) : iarg(2), args[4] = fl ? darg(-1.5) : iarg(3);
      check_op("addmm", "out", args, 5, &o, 1, tol);
      args[5] = barg(false);
      check_op("_addmm_activation", "out", args, 6, &o, 1, tol);
      if (fl) {
        args[5] = barg(true);
        check_op("_addmm_activation", "out", args, 6, &o, 1, tol);
      }
      /* batched */
      int64_t bs = v == 2 ? 0 : 5;
      tbuf_t ba = mk(dt, 3, (int64_t[]){bs, m + 1, k}, v == 1, 0);
      tbuf_t bb = mk(dt, 3, (int64_t[]){bs, k, n}, v == 0, 1);
      tbuf_t bo = mk(dt, 3, (int64_t[]){bs, m + 1, n}, false, 0);
      tbuf_t bself = mk(dt, 2, (int64_t[]){1, n}, false, 0);
      tbuf_t ao = mk(dt, 2, (int64_t[]){m + 1, n}, false, 0);
      args[0] = targ(&ba), args[1] = targ(&bb);
      check_op("bmm", "out", args, 2, &bo, 1, tol);
      args[0] = targ(&bself), args[1] = targ(&ba), args[2] = targ(&bb);
      check_op("baddbmm", "out", args, 5, &bo, 1, tol);
      check_op("addbmm", "out", args, 5, &ao, 1, tol);
      /* vectors */
      tbuf_t vec = mk(dt, 1, (int64_t[]){k}, false, 0), vm = mk(dt, 1, (int64_t[]){m}, false, 0);
      tbuf_t vo = mk(dt, 1, (int64_t[]){m}, false, 0), so = mk(dt, 0, NULL, false, 0);
      tbuf_t vn = mk(dt, 1, (int64_t[]){n}, false, 0);
      args[0] = targ(&vm), args[1] = targ(&a), args[2] = targ(&vec);
      check_op("addmv", "out", args, 5, &vo, 1, tol);
      args[0] = targ(&a), args[1] = targ(&vec);
      check_op("mv", "out", args, 2, &vo, 1, tol);
      args[0] = targ(&vec), args[1] = targ(&vec);
      check_op("dot", "", args, 2, &so, 1, tol);
      check_op("vdot", "", args, 2, &so, 1, tol);
      tbuf_t o2 = mk(dt, 2, (int64_t[]){m, n}, false, 0);
      args[0] = targ(&o2), args[1] = targ(&vm), args[2] = targ(&vn);
      check_op("addr", "out", args, 5, &o, 1, tol);
      free(o2.mem);
      args[0] = targ(&o);
      tbuf_t to = mk(fl ? dt : TPURT_DTYPE_INT64, 0, NULL, false, 0);
      check_op("trace", "", args, 1, &to, 1, tol);
      tbuf_t* all[] = {&a, &b, &o, &self1, &ba, &bb, &bo, &bself, &ao, &vec, &vm, &vo, &so, &vn, &to};
      for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) free(all[i]->mem);
    }
  }
  /* _int_mm */
  {
    tbuf_t a = mk(TPURT_DTYPE_INT8, 2, (int64_t[]){17, 40}, false, 0);
    tbuf_t b = mk(TPURT_DTYPE_INT8, 2, (int64_t[]){40, 24}, true, 0);
    tbuf_t o = mk(TPURT_DTYPE_INT32, 2, (int64_t[]){17, 24}, false, 0);
    tpurt_arg_t args[2] = {targ(&a), targ(&b)};
    check_op("_int_mm", "out", args, 2, &o, 1, 0);
    /* bad shapes name the op */
    tpurt_op_call_t c = {"mm", "out", 2, args, 1, &o.t};
    CHECK_STATUS(tpurt_kernel_run(tpurt_op_lookup("mm")->fn, &c), INVALID_ARGUMENT);
    free(a.mem), free(b.mem), free(o.mem);
  }
}
