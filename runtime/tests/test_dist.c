/* tpurt dist: the topology (coordinates, neighbours, mesh layouts against
 * hand-worked answers) and the collectives between forked processes, each
 * with its own memfd "device memory": every collective and reduction against
 * a formula, mismatched calls, a killed rank, a rank that never comes, the
 * /dev/shm cleanup, and the queued path on real chips. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/futex.h"
#include "dist/reduce.h"
#include "test_util.h"

/* ---- topology ---- */

static void check_layout(const char* topo, int nd, const int64_t* mesh, const int64_t* dcn, const int64_t* want,
                         int n) {
  tpurt_dist_topology_t t;
  CHECK_OK(tpurt_dist_topology_parse(topo, &t));
  int64_t got[64];
  CHECK_OK(tpurt_dist_mesh_layout(&t, nd, mesh, dcn, got, 64));
  int same = 1;
  for (int i = 0; i < n; ++i) same &= got[i] == want[i];
  if (!same) {
    fprintf(stderr, "layout %s:", topo);
    for (int i = 0; i < n; ++i) fprintf(stderr, " %lld", (long long)got[i]);
    fprintf(stderr, "\n");
  }
  CHECK(same);
}

static void test_topology(void) {
  tpurt_dist_topology_t t;
  CHECK_OK(tpurt_dist_topology_parse("2x2x1", &t));
  CHECK(t.ndims == 3 && t.num_chips == 4 && t.dims[0] == 2 && t.dims[1] == 2 && t.dims[2] == 1);
  CHECK_STATUS(tpurt_dist_topology_parse("2x", &t), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_dist_topology_parse("0", &t), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_dist_topology_parse("8x8x8", &t), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_dist_topology_parse("2y2", &t), INVALID_ARGUMENT);

  /* 4x2: chip 5 is (1, 1); its x ring is 4,5,6,7 (neighbours 4, 6), y has 2 chips (1). */
  CHECK_OK(tpurt_dist_topology_parse("4x2", &t));
  int c[3], nb[6], nn = 0;
  CHECK_OK(tpurt_dist_topology_coords(&t, 5, c));
  CHECK(c[0] == 1 && c[1] == 1 && c[2] == 0);
  CHECK_OK(tpurt_dist_topology_neighbors(&t, 5, nb, &nn));
  CHECK(nn == 3 && nb[0] == 1 && nb[1] == 4 && nb[2] == 6);
  /* wrap-around: chip 0 of the ring of 4 links to chip 3 */
  CHECK_OK(tpurt_dist_topology_neighbors(&t, 0, nb, &nn));
  CHECK(nn == 3 && nb[0] == 1 && nb[1] == 3 && nb[2] == 4);
  CHECK_STATUS(tpurt_dist_topology_coords(&t, 8, c), OUT_OF_RANGE);
  /* 2x2x2: chip 7 = (1,1,1) links to 6, 5, 3 */
  CHECK_OK(tpurt_dist_topology_parse("2x2x2", &t));
  CHECK_OK(tpurt_dist_topology_neighbors(&t, 7, nb, &nn));
  CHECK(nn == 3 && nb[0] == 3 && nb[1] == 5 && nb[2] == 6);

  /* 1-D: a ring of 4 is itself. */
  check_layout("4", 1, (int64_t[]){4}, NULL, (int64_t[]){0, 1, 2, 3}, 4);
  /* 2x2 as a ring of 4: snake 0,1,3,2 (each step and the wrap 2->0 is a link) */
  check_layout("2x2", 1, (int64_t[]){4}, NULL, (int64_t[]){0, 1, 3, 2}, 4);
  /* 2x2 as 2x2: rows along x */
  check_layout("2x2", 2, (int64_t[]){2, 2}, NULL, (int64_t[]){0, 1, 2, 3}, 4);
  /* 4x2 as (2, 4): the last dimension is the x ring */
  check_layout("4x2", 2, (int64_t[]){2, 4}, NULL, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
  /* 4x2 as (4, 2): each dimension the size of an axis takes it: the last runs along y, the first
   * along the x ring: row i = (x=i, y=0), (x=i, y=1) */
  check_layout("4x2", 2, (int64_t[]){4, 2}, NULL, (int64_t[]){0, 4, 1, 5, 2, 6, 3, 7}, 8);
  /* 8x1 as (2, 4): the x axis is split, its inner 4 to the last dimension */
  check_layout("8", 2, (int64_t[]){2, 4}, NULL, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
  /* 3x2 as (3, 2) and (2, 3) */
  check_layout("3x2", 2, (int64_t[]){3, 2}, NULL, (int64_t[]){0, 3, 1, 4, 2, 5}, 6);
  check_layout("3x2", 2, (int64_t[]){2, 3}, NULL, (int64_t[]){0, 1, 2, 3, 4, 5}, 6);
  /* 4x2 as a ring of 8: 0 1 2 3 7 6 5 4 (closes: 4 -> 0) */
  check_layout("4x2", 1, (int64_t[]){8}, NULL, (int64_t[]){0, 1, 2, 3, 7, 6, 5, 4}, 8);
  /* 3-D: 2x2x2 as a ring of 8 = the reflected Gray code */
  check_layout("2x2x2", 1, (int64_t[]){8}, NULL, (int64_t[]){0, 1, 3, 2, 6, 7, 5, 4}, 8);
  /* 2x2x2 as (2, 4): z outer, each row the x-y ring */
  check_layout("2x2x2", 2, (int64_t[]){2, 4}, NULL, (int64_t[]){0, 1, 3, 2, 4, 5, 7, 6}, 8);
  /* 2x2x2 as (2, 2, 2) */
  check_layout("2x2x2", 3, (int64_t[]){2, 2, 2}, NULL, (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
  /* two hosts of 2x2 over DCN, mesh (2, 4) with dcn (2, 1): host 1's ranks 4..7 in the second row */
  check_layout("2x2", 2, (int64_t[]){1, 4}, (int64_t[]){2, 1}, (int64_t[]){0, 1, 3, 2, 4, 5, 7, 6}, 8);
  /* dcn on the last dimension: (1, 2) x (1, 2) over 2 hosts of 2 chips: [0, 1, 2, 3] */
  check_layout("2", 2, (int64_t[]){1, 2}, (int64_t[]){1, 2}, (int64_t[]){0, 1, 2, 3}, 4);
  int64_t out[8];
  CHECK_OK(tpurt_dist_topology_parse("2x2", &t));
  CHECK_STATUS(tpurt_dist_mesh_layout(&t, 1, (int64_t[]){3}, NULL, out, 8), INVALID_ARGUMENT);
  CHECK_OK(tpurt_dist_topology_parse("3x2", &t));
  CHECK_STATUS(tpurt_dist_mesh_layout(&t, 1, (int64_t[]){6}, NULL, out, 8), OK); /* x then y, snake */
  CHECK(out[0] == 0 && out[1] == 1 && out[2] == 2 && out[3] == 5 && out[4] == 4 && out[5] == 3);
  CHECK_OK(tpurt_dist_topology_parse("6", &t));
  CHECK_STATUS(tpurt_dist_mesh_layout(&t, 2, (int64_t[]){4, 1}, NULL, out, 8), INVALID_ARGUMENT);
}

/* ---- collectives between forked ranks ---- */

#define MEM_BYTES (64u << 20)
static int g_rank, g_size, g_first;
static uint8_t* g_mem;
static char g_name[64];

typedef void (*rank_fn)(tpurt_dist_comm_t* c);

static tpurt_dist_comm_t* join(uint64_t timeout_ms) {
  int fd = memfd_create("test-hbm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, MEM_BYTES) != 0) return NULL;
  g_mem = mmap(NULL, MEM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  tpurt_dist_comm_params_t p = {.name = g_name, .rank = g_rank, .size = g_size, .timeout_ms = timeout_ms,
                                .mem_fd = fd, .mem_base = g_mem, .mem_bytes = MEM_BYTES, .first_rank = g_first};
  tpurt_dist_comm_t* c = NULL;
  CHECK_OK(tpurt_dist_comm_create(&p, &c));
  return c;
}

/* Runs fn on `size` forked ranks; each exits with its failure count. Returns
 * the number of ranks that failed. */
static int spawn(int size, rank_fn fn, uint64_t timeout_ms) {
  static int counter;
  snprintf(g_name, sizeof(g_name), "/tpurt_dist_%d_test%d", (int)getpid(), counter++);
  pid_t pids[16];
  for (int r = 0; r < size; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      g_rank = r;
      g_size = size;
      g_test_failed = 0;
      tpurt_dist_comm_t* c = join(timeout_ms);
      if (c) fn(c);
      else ++g_test_failed;
      tpurt_dist_comm_destroy(c);
      fflush(stderr);
      _exit(g_test_failed > 100 ? 100 : g_test_failed);
    }
  }
  int bad = 0;
  for (int r = 0; r < size; ++r) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d of %d: %s %d\n", r, size, WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      ++bad;
    }
  }
  return bad;
}

/* Each rank's value of element i: small integers, so every dtype and every
 * reduction is exact and the expected answer is a formula. */
static double val(int r, uint64_t i) { return (double)((int)((i * 7 + (uint64_t)r * 3) % 5) + r - 1); }

static double expect_red(tpurt_dist_redop_t op, uint64_t i, int n) {
  double acc = val(0, i);
  for (int r = 1; r < n; ++r) {
    double v = val(r, i);
    switch (op) {
      case TPURT_DIST_SUM: case TPURT_DIST_AVG: acc += v; break;
      case TPURT_DIST_PRODUCT: acc *= v; break;
      case TPURT_DIST_MIN: acc = v < acc ? v : acc; break;
      case TPURT_DIST_MAX: acc = v > acc ? v : acc; break;
      case TPURT_DIST_BAND: acc = (double)((int64_t)acc & (int64_t)v); break;
      case TPURT_DIST_BOR: acc = (double)((int64_t)acc | (int64_t)v); break;
      case TPURT_DIST_BXOR: acc = (double)((int64_t)acc ^ (int64_t)v); break;
      default: break;
    }
  }
  return op == TPURT_DIST_AVG ? acc / n : acc;
}

static void store(tpurt_dtype_t dt, void* p, uint64_t i, double v) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT32: ((float*)p)[i] = (float)v; break;
    case TPURT_DTYPE_FLOAT64: ((double*)p)[i] = v; break;
    case TPURT_DTYPE_BFLOAT16: ((uint16_t*)p)[i] = tpurt_f32_to_bf16((float)v); break;
    case TPURT_DTYPE_FLOAT16: ((uint16_t*)p)[i] = tpurt_f32_to_f16((float)v); break;
    case TPURT_DTYPE_INT32: ((int32_t*)p)[i] = (int32_t)v; break;
    case TPURT_DTYPE_INT64: ((int64_t*)p)[i] = (int64_t)v; break;
    case TPURT_DTYPE_INT8: ((int8_t*)p)[i] = (int8_t)v; break;
    case TPURT_DTYPE_INT16: ((int16_t*)p)[i] = (int16_t)v; break;
    case TPURT_DTYPE_UINT8: ((uint8_t*)p)[i] = (uint8_t)(int)v; break;
    case TPURT_DTYPE_BOOL: ((uint8_t*)p)[i] = v != 0; break;
    case TPURT_DTYPE_COMPLEX64: ((float*)p)[2 * i] = (float)v; ((float*)p)[2 * i + 1] = 0; break;
    case TPURT_DTYPE_COMPLEX128: ((double*)p)[2 * i] = v; ((double*)p)[2 * i + 1] = 0; break;
    default: break;
  }
}

static double load(tpurt_dtype_t dt, const void* p, uint64_t i) {
  switch (dt) {
    case TPURT_DTYPE_FLOAT32: return ((const float*)p)[i];
    case TPURT_DTYPE_FLOAT64: return ((const double*)p)[i];
    case TPURT_DTYPE_BFLOAT16: return tpurt_bf16_to_f32(((const uint16_t*)p)[i]);
    case TPURT_DTYPE_FLOAT16: return tpurt_f16_to_f32(((const uint16_t*)p)[i]);
    case TPURT_DTYPE_INT32: return ((const int32_t*)p)[i];
    case TPURT_DTYPE_INT64: return (double)((const int64_t*)p)[i];
    case TPURT_DTYPE_INT8: return ((const int8_t*)p)[i];
    case TPURT_DTYPE_INT16: return ((const int16_t*)p)[i];
    case TPURT_DTYPE_UINT8: return ((const uint8_t*)p)[i];
    case TPURT_DTYPE_BOOL: return ((const uint8_t*)p)[i];
    case TPURT_DTYPE_COMPLEX64: return ((const float*)p)[2 * i];
    case TPURT_DTYPE_COMPLEX128: return ((const double*)p)[2 * i];
    default: return 0;
  }
}

static bool is_bool(tpurt_dtype_t dt) { return dt == TPURT_DTYPE_BOOL; }
static double as_dtype(tpurt_dtype_t dt, double v) {
  if (is_bool(dt)) return v != 0;
  if (dt == TPURT_DTYPE_UINT8) return (double)(uint8_t)(int)v;
  return v;
}

/* Bool inputs are val != 0; their reductions are logical. */
static double expect_bool(tpurt_dist_redop_t op, uint64_t i, int n) {
  int acc = val(0, i) != 0;
  for (int r = 1; r < n; ++r) {
    int v = val(r, i) != 0;
    if (op == TPURT_DIST_SUM || op == TPURT_DIST_MAX || op == TPURT_DIST_BOR) acc |= v;
    else if (op == TPURT_DIST_BXOR) acc ^= v;
    else acc &= v;
  }
  return acc;
}

static const uint64_t kCount = 100003; /* spans several blocks and splits unevenly over ranks */

static void rank_allreduce_all(tpurt_dist_comm_t* c) {
  const tpurt_dtype_t dts[] = {TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT64, TPURT_DTYPE_BFLOAT16, TPURT_DTYPE_FLOAT16,
                               TPURT_DTYPE_INT32, TPURT_DTYPE_INT64, TPURT_DTYPE_INT8, TPURT_DTYPE_INT16,
                               TPURT_DTYPE_UINT8, TPURT_DTYPE_BOOL, TPURT_DTYPE_COMPLEX64, TPURT_DTYPE_COMPLEX128};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); ++d) {
    tpurt_dtype_t dt = dts[d];
    for (int op = 0; op < TPURT_DIST_REDOP_COUNT; ++op) {
      /* uint8: val may be negative -> wraps; skip products/min/max there (covered by int types). */
      tpurt_status_t undefined = tpurt_dist_redop_check(dt, op, "t");
      bool skip = undefined != TPURT_OK;
      tpurt_status_free(undefined);
      if (skip) continue;
      if (dt == TPURT_DTYPE_UINT8 && op != TPURT_DIST_SUM && op != TPURT_DIST_BOR) continue;
      uint64_t n = dt == TPURT_DTYPE_FLOAT32 ? kCount : 4099;
      size_t es = tpurt_dtype_size(dt);
      uint8_t* in = g_mem;
      uint8_t* out = g_mem + (32u << 20);
      for (uint64_t i = 0; i < n; ++i) store(dt, in, i, val(g_rank, i));
      bool inplace = op == TPURT_DIST_SUM;
      tpurt_dist_op_t o = {.kind = TPURT_DIST_ALLREDUCE, .dtype = dt, .redop = op, .count = n, .in = in,
                           .out = inplace ? in : out};
      CHECK_OK(tpurt_dist_run(c, &o));
      const uint8_t* res = inplace ? in : out;
      uint64_t bad = 0;
      for (uint64_t i = 0; i < n; ++i) {
        double want = is_bool(dt) ? expect_bool(op, i, g_size) : as_dtype(dt, expect_red(op, i, g_size));
        if (dt == TPURT_DTYPE_INT8) want = (double)(int8_t)(int64_t)want;
        if (dt == TPURT_DTYPE_INT16) want = (double)(int16_t)(int64_t)want;
        double got = load(dt, res, i);
        double tol = (dt == TPURT_DTYPE_BFLOAT16 || dt == TPURT_DTYPE_FLOAT16) ? 1e-2 * (1 + (want < 0 ? -want : want)) : 1e-9;
        if (!(got - want <= tol && want - got <= tol)) {
          if (!bad) fprintf(stderr, "rank %d: allreduce %s %s [%llu]: %g, want %g\n", g_rank, tpurt_dtype_name(dt),
                            tpurt_dist_redop_name(op), (unsigned long long)i, got, want);
          ++bad;
        }
      }
      (void)es;
      CHECK(bad == 0);
    }
  }
}

/* Elements per rank in rank_collectives: small messages go through the
 * control block's slots, large ones between the ranks' device memory. */
static uint64_t g_cnt = 1001;
static uint32_t g_out_mib = 16; /* where rank_collectives' output starts in device memory */

static void rank_collectives(tpurt_dist_comm_t* c) {
  int r = g_rank, n = g_size;
  const uint64_t cnt = g_cnt;
  float* in = (float*)g_mem;
  float* out = (float*)(g_mem + ((size_t)g_out_mib << 20));
  for (uint64_t i = 0; i < cnt * n; ++i) in[i] = (float)val(r, i);
  /* broadcast from the last rank, in place */
  tpurt_dist_op_t o = {.kind = TPURT_DIST_BROADCAST, .dtype = TPURT_DTYPE_FLOAT32, .root = n - 1, .count = cnt,
                       .in = r == n - 1 ? in : NULL, .out = in};
  CHECK_OK(tpurt_dist_run(c, &o));
  int bad = 0;
  for (uint64_t i = 0; i < cnt; ++i) bad += in[i] != (float)val(n - 1, i);
  CHECK(bad == 0);
  for (uint64_t i = 0; i < cnt * n; ++i) in[i] = (float)val(r, i);
  /* reduce (max) to rank 1 */
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_REDUCE, .dtype = TPURT_DTYPE_FLOAT32, .redop = TPURT_DIST_MAX, .root = 1,
                        .count = cnt, .in = in, .out = r == 1 ? out : NULL};
  CHECK_OK(tpurt_dist_run(c, &o));
  bad = 0;
  if (r == 1)
    for (uint64_t i = 0; i < cnt; ++i) bad += out[i] != (float)expect_red(TPURT_DIST_MAX, i, n);
  CHECK(bad == 0);
  /* all_gather */
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_ALLGATHER, .dtype = TPURT_DTYPE_FLOAT32, .count = cnt, .in = in, .out = out};
  CHECK_OK(tpurt_dist_run(c, &o));
  bad = 0;
  for (int p = 0; p < n; ++p)
    for (uint64_t i = 0; i < cnt; ++i) bad += out[p * cnt + i] != (float)val(p, i);
  CHECK(bad == 0);
  /* reduce_scatter (sum): rank r gets block r of the sum */
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_REDUCE_SCATTER, .dtype = TPURT_DTYPE_FLOAT32, .redop = TPURT_DIST_SUM,
                        .count = cnt, .in = in, .out = out};
  CHECK_OK(tpurt_dist_run(c, &o));
  bad = 0;
  for (uint64_t i = 0; i < cnt; ++i) bad += out[i] != (float)expect_red(TPURT_DIST_SUM, r * cnt + i, n);
  CHECK(bad == 0);
  /* gather to 0, scatter from 0 */
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_GATHER, .dtype = TPURT_DTYPE_FLOAT32, .root = 0, .count = cnt, .in = in,
                        .out = r == 0 ? out : NULL};
  CHECK_OK(tpurt_dist_run(c, &o));
  bad = 0;
  if (r == 0)
    for (int p = 0; p < n; ++p)
      for (uint64_t i = 0; i < cnt; ++i) bad += out[p * cnt + i] != (float)val(p, i);
  CHECK(bad == 0);
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_SCATTER, .dtype = TPURT_DTYPE_FLOAT32, .root = 0, .count = cnt,
                        .in = r == 0 ? in : NULL, .out = out};
  CHECK_OK(tpurt_dist_run(c, &o));
  bad = 0;
  for (uint64_t i = 0; i < cnt; ++i) bad += out[i] != (float)val(0, r * cnt + i);
  CHECK(bad == 0);
  /* all_to_all, uneven: rank p sends (p + q + 1) elements to rank q, values 1000 p + 10 q + k */
  uint64_t sc[16], so[16], rc[16], ro[16], off = 0, roff = 0;
  for (int q = 0; q < n; ++q) {
    sc[q] = (uint64_t)(r + q + 1);
    so[q] = off;
    for (uint64_t k = 0; k < sc[q]; ++k) in[off + k] = (float)(1000 * r + 10 * q + (int)k);
    off += sc[q];
    rc[q] = (uint64_t)(q + r + 1);
    ro[q] = roff;
    roff += rc[q];
  }
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_ALLTOALL, .dtype = TPURT_DTYPE_FLOAT32, .in = in, .out = out,
                        .send_counts = sc, .send_offsets = so, .recv_counts = rc, .recv_offsets = ro};
  CHECK_OK(tpurt_dist_run(c, &o));
  bad = 0;
  for (int p = 0; p < n; ++p)
    for (uint64_t k = 0; k < rc[p]; ++k) bad += out[ro[p] + k] != (float)(1000 * p + 10 * r + (int)k);
  CHECK(bad == 0);
  /* barrier, then a ring of send/recv: even ranks send first */
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_BARRIER, .dtype = TPURT_DTYPE_FLOAT32};
  CHECK_OK(tpurt_dist_run(c, &o));
  for (uint64_t i = 0; i < cnt; ++i) in[i] = (float)(r * 100000 + (int)i);
  tpurt_dist_op_t snd = {.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = (r + 1) % n, .tag = 7,
                         .count = cnt, .in = in};
  tpurt_dist_op_t rcv = {.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = (r + n - 1) % n, .tag = 7,
                         .count = cnt, .out = out};
  if (r % 2 == 0) {
    CHECK_OK(tpurt_dist_run(c, &snd));
    CHECK_OK(tpurt_dist_run(c, &rcv));
  } else {
    CHECK_OK(tpurt_dist_run(c, &rcv));
    CHECK_OK(tpurt_dist_run(c, &snd));
  }
  bad = 0;
  for (uint64_t i = 0; i < cnt; ++i) bad += out[i] != (float)(((r + n - 1) % n) * 100000 + (int)i);
  CHECK(bad == 0);
  /* a buffer outside device memory is refused, naming it (and the group is aborted: peers
   * waiting in that collective would never see this rank) */
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_BARRIER, .dtype = TPURT_DTYPE_FLOAT32};
  CHECK_OK(tpurt_dist_run(c, &o));
  float host[4];
  o = (tpurt_dist_op_t){.kind = TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32, .count = 4, .in = host, .out = host};
  if (r == 0) CHECK_STATUS(tpurt_dist_run(c, &o), INVALID_ARGUMENT);
}

/* Small and large allreduces and broadcasts in turn, ranks drifting apart
 * by up to a millisecond: a fast rank starts call k + 1 (writing its other
 * slot) while a slow one still reads call k's; every result is checked. */
static void rank_alternating(tpurt_dist_comm_t* c) {
  float* buf = (float*)g_mem;
  unsigned seed = 1234u + (unsigned)g_rank;
  int bad = 0;
  for (int it = 0; it < 120; ++it) {
    uint64_t cnt = it % 3 == 2 ? 50000 : (uint64_t)(1 + it * 37 % 3000);
    for (uint64_t i = 0; i < cnt; ++i) buf[i] = (float)(g_rank * 1000 + it + (int)(i % 7));
    if (rand_r(&seed) % 4 == 0) usleep(rand_r(&seed) % 1000);
    bool bcast = it % 5 == 4;
    tpurt_dist_op_t o = {.kind = bcast ? TPURT_DIST_BROADCAST : TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32,
                         .root = it % g_size, .count = cnt, .in = buf, .out = buf};
    if (bcast && g_rank != o.root) o.in = NULL;
    CHECK_OK(tpurt_dist_run(c, &o));
    for (uint64_t i = 0; i < cnt; ++i) {
      float want = 0;
      if (bcast) want = (float)(o.root * 1000 + it + (int)(i % 7));
      else
        for (int r = 0; r < g_size; ++r) want += (float)(r * 1000 + it + (int)(i % 7));
      bad += buf[i] != want;
    }
  }
  CHECK(bad == 0);
}

static bool status_says(tpurt_status_t s, const char* a, const char* b) {
  const char* m = tpurt_status_message(s);
  bool ok = s && strstr(m, a) && (!b || strstr(m, b));
  if (!ok) fprintf(stderr, "rank %d: status '%s' lacks '%s' / '%s'\n", g_rank, m, a, b ? b : "");
  tpurt_status_free(s);
  return ok;
}

static void rank_mismatch(tpurt_dist_comm_t* c) {
  float* buf = (float*)g_mem;
  tpurt_dist_op_t o = {.kind = TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32, .count = g_rank == 1 ? 20 : 10,
                       .in = buf, .out = buf};
  CHECK(status_says(tpurt_dist_run(c, &o), "rank 0 called allreduce(float32, 10 elements, sum)",
                    "rank 1 called allreduce(float32, 20 elements, sum)"));
  /* the group stays aborted: the next call fails at once */
  CHECK(status_says(tpurt_dist_run(c, &o), "aborted", "mismatched"));
}

static void rank_dtype_mismatch(tpurt_dist_comm_t* c) {
  tpurt_dist_op_t o = {.kind = g_rank == 0 ? TPURT_DIST_ALLREDUCE : TPURT_DIST_BROADCAST,
                       .dtype = TPURT_DTYPE_FLOAT32, .count = 8, .in = g_mem, .out = g_mem};
  CHECK(status_says(tpurt_dist_run(c, &o), "rank 0 called allreduce", "called broadcast(float32, 8 elements, root 0)"));
}

static void rank_killed(tpurt_dist_comm_t* c) {
  float* buf = (float*)g_mem;
  tpurt_dist_op_t o = {.kind = TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32, .count = 1000, .in = buf, .out = buf};
  CHECK_OK(tpurt_dist_run(c, &o));
  if (g_rank == 1) raise(SIGKILL); /* dies before its second collective */
  uint64_t t0 = tpurt_now_ns();
  CHECK(status_says(tpurt_dist_run(c, &o), "rank 1", "died"));
  CHECK(tpurt_now_ns() - t0 < 20000000000ull); /* well before the 60 s timeout: death is detected */
  CHECK(status_says(tpurt_dist_run(c, &o), "aborted", "rank 1"));
}

/* One host's part of a group spanning hosts (first_rank 4): errors name the group's ranks and, for a step
 * within the host of a collective across hosts, that collective; the abort hook runs once, in the process
 * that aborted (a shared counter across the forked ranks), with the message. */
static _Atomic int* g_hook_calls;
static char g_hook_msg[512];
static void count_hook(void* user, const char* why) {
  CHECK(user == (void*)g_hook_msg);
  atomic_fetch_add(g_hook_calls, 1);
  snprintf(g_hook_msg, sizeof(g_hook_msg), "%s", why);
}

static void rank_host_part(tpurt_dist_comm_t* c) {
  tpurt_dist_comm_set_abort_hook(c, count_hook, g_hook_msg);
  float* buf = (float*)g_mem;
  tpurt_dist_op_t o = {.kind = TPURT_DIST_REDUCE_SCATTER, .dtype = TPURT_DTYPE_FLOAT32, .count = 8, .in = buf,
                       .out = buf + 64, .part_of = TPURT_DIST_ALLREDUCE};
  CHECK_OK(tpurt_dist_run(c, &o));
  if (g_rank == 1) o.part_of = TPURT_DIST_REDUCE_SCATTER; /* the same op within the host, for another collective */
  CHECK(status_says(tpurt_dist_run(c, &o), "rank 4 called reduce_scatter(float32, 8 elements, sum) within the host, a "
                    "step of allreduce across hosts", "but rank 5 called reduce_scatter(float32, 8 elements, sum) "
                    "within the host, a step of reduce_scatter across hosts"));
  CHECK(g_hook_msg[0] == 0 || strstr(g_hook_msg, "mismatched collectives at call #2"));
}

static void rank_host_part_killed(tpurt_dist_comm_t* c) {
  tpurt_dist_comm_set_abort_hook(c, count_hook, g_hook_msg);
  float* buf = (float*)g_mem;
  tpurt_dist_op_t o = {.kind = TPURT_DIST_ALLGATHER, .dtype = TPURT_DTYPE_FLOAT32, .count = 8, .in = buf,
                       .out = buf + 64, .part_of = TPURT_DIST_ALLREDUCE};
  CHECK_OK(tpurt_dist_run(c, &o));
  if (g_rank == 1) raise(SIGKILL);
  CHECK(status_says(tpurt_dist_run(c, &o), "rank 5 (pid", "died (exited or was killed) before finishing "
                    "all_gather(float32, 8 elements) within the host, a step of allreduce across hosts (call #2"));
  CHECK(g_hook_msg[0] == 0 || strstr(g_hook_msg, "rank 5 (pid"));
}

static void test_host_part(void) {
  g_hook_calls = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(g_hook_calls != MAP_FAILED);
  if (g_hook_calls == MAP_FAILED) return;
  g_first = 4;
  CHECK(spawn(2, rank_host_part, 30000) == 0);
  CHECK(atomic_load(g_hook_calls) == 1);
  atomic_store(g_hook_calls, 0);
  CHECK(spawn(3, rank_host_part_killed, 30000) == 1); /* rank 1 (group rank 5) killed itself */
  CHECK(atomic_load(g_hook_calls) == 1);
  g_first = 0;
  munmap((void*)g_hook_calls, 4096);
}

static void rank_absent(tpurt_dist_comm_t* c) {
  float* buf = (float*)g_mem;
  tpurt_dist_op_t o = {.kind = TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32, .count = 16, .in = buf, .out = buf};
  if (g_rank == 1) {
    usleep(1500000); /* alive, but skips the collective for longer than the timeout */
    CHECK(status_says(tpurt_dist_run(c, &o), "aborted", "rank 1"));
    return;
  }
  CHECK(status_says(tpurt_dist_run(c, &o), "rank 1", "did not join within the 0.5 s timeout: allreduce(float32, 16 "
                    "elements, sum) (call #1"));
}

/* Receives from any source: rank 1 posts a tag-9 message first, ranks 2..
 * post tag-3 ones; rank 0's tag-3 receives take those (whichever comes
 * first, learning each sender) and leave rank 1's for the receive that names
 * tag 9. A matching tag with another size is a mismatch, named, though it
 * comes after the other ranks have left. */
static void rank_any_source(tpurt_dist_comm_t* c) {
  float* buf = (float*)g_mem;
  int n = g_size, r = g_rank;
  if (r == 0) {
    uint64_t seen = 0;
    for (int k = 0; k < n - 2; ++k) {
      int src = -2;
      tpurt_dist_op_t o = {.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = TPURT_DIST_ANY_SOURCE,
                           .tag = 3, .count = 5, .out = buf, .out_source = &src};
      CHECK_OK(tpurt_dist_run(c, &o));
      CHECK(src >= 2 && src < n && !(seen & (1ull << src)));
      if (src < 2 || src >= n) return;
      seen |= 1ull << src;
      for (int i = 0; i < 5; ++i) CHECK(buf[i] == (float)(src * 10 + i));
    }
    int src = -2;
    tpurt_dist_op_t o = {.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = TPURT_DIST_ANY_SOURCE,
                         .tag = 9, .count = 2, .out = buf + 8, .out_source = &src};
    CHECK_OK(tpurt_dist_run(c, &o));
    CHECK(src == 1 && buf[8] == 99.0f && buf[9] == 98.0f);
    o = (tpurt_dist_op_t){.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = TPURT_DIST_ANY_SOURCE,
                          .tag = 4, .count = 3, .out = buf};
    CHECK(status_says(tpurt_dist_run(c, &o), "rank 1 sent 6 float32 elements with tag 4", "from any rank"));
    return;
  }
  if (r == 1) {
    buf[8] = 99.0f, buf[9] = 98.0f;
    tpurt_dist_op_t o = {.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = 0, .tag = 9, .count = 2,
                         .in = buf + 8};
    CHECK_OK(tpurt_dist_run(c, &o));
    /* Late: ranks 2.. have destroyed their groups by now, and rank 0's receive from any rank waits for
     * this rank's message rather than failing on them. */
    usleep(200000);
    o = (tpurt_dist_op_t){.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = 0, .tag = 4, .count = 6, .in = buf};
    CHECK(status_says(tpurt_dist_run(c, &o), "mismatched", "tag 4"));
    return;
  }
  for (int i = 0; i < 5; ++i) buf[i] = (float)(r * 10 + i);
  usleep(3000 * (uint32_t)(n - r)); /* after rank 1's post, in reverse rank order */
  tpurt_dist_op_t o = {.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = 0, .tag = 3, .count = 5, .in = buf};
  CHECK_OK(tpurt_dist_run(c, &o));
}

/* tpurt_dist_recv_poll: takes a message with its tag when one is next from
 * some rank, else returns at once; a message with another tag ahead of it
 * waits for its own receive. */
static void rank_recv_poll(tpurt_dist_comm_t* c) {
  float* buf = (float*)g_mem;
  if (g_rank == 1) {
    for (int i = 0; i < 8; ++i) buf[i] = (float)(50 + i);
    tpurt_dist_op_t ops[2] = {
        {.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = 0, .tag = 6, .count = 4, .in = buf},
        {.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = 0, .tag = 5, .count = 4, .in = buf + 4}};
    CHECK_OK(tpurt_dist_run_group(c, ops, 2));
    return;
  }
  int src = -2;
  bool got = true;
  tpurt_dist_op_t any5 = {.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = TPURT_DIST_ANY_SOURCE,
                          .tag = 5, .count = 4, .out = buf + 16, .out_source = &src};
  CHECK_OK(tpurt_dist_recv_poll(c, &any5, &got));
  CHECK(!got && src == -2); /* nothing yet, or the tag-6 message ahead of it */
  tpurt_dist_op_t six = {.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = 1, .tag = 6, .count = 4,
                         .out = buf + 8};
  CHECK(status_says(tpurt_dist_recv_poll(c, &six, &got), "recv from any source", NULL));
  CHECK_OK(tpurt_dist_run(c, &six));
  uint64_t t0 = tpurt_now_ns();
  while (!got && tpurt_now_ns() - t0 < 10000000000ull) CHECK_OK(tpurt_dist_recv_poll(c, &any5, &got));
  CHECK(got && src == 1);
  int bad = 0;
  for (int i = 0; i < 4; ++i) bad += buf[8 + i] != (float)(50 + i) || buf[16 + i] != (float)(54 + i);
  CHECK(bad == 0);
}

/* A group may hold several sends to one peer: each receive gets its own
 * message, in order (they once shared one slot, and both receives got the
 * last). Rank 0 sends 3 to rank 1 and takes 2 back, in one group each way;
 * a group of more sends to one peer than the ring holds is refused. */
static void rank_group_many(tpurt_dist_comm_t* c) {
  float* buf = (float*)g_mem;
  int r = g_rank, peer = 1 - r, nsend = r == 0 ? 3 : 2, nrecv = r == 0 ? 2 : 3;
  for (int k = 0; k < 16; ++k) buf[k] = (float)(r * 100 + k), buf[16 + k] = -1.0f;
  tpurt_dist_op_t ops[6];
  int n = 0;
  for (int k = 0; k < nrecv; ++k)
    ops[n++] = (tpurt_dist_op_t){.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = peer, .count = 4,
                                 .out = buf + 16 + 4 * k};
  for (int k = 0; k < nsend; ++k)
    ops[n++] = (tpurt_dist_op_t){.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = peer, .count = 4,
                                 .in = buf + 4 * k};
  CHECK_OK(tpurt_dist_run_group(c, ops, n));
  int bad = 0;
  for (int k = 0; k < 4 * nrecv; ++k) bad += buf[16 + k] != (float)(peer * 100 + k);
  CHECK(bad == 0);
  tpurt_dist_op_t many[9];
  for (int k = 0; k < 9; ++k)
    many[k] = (tpurt_dist_op_t){.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = peer, .count = 1,
                                .in = buf};
  CHECK(status_says(tpurt_dist_run_group(c, many, 9), "more than 8 sends to rank", NULL));
}

static void rank_nothing(tpurt_dist_comm_t* c) {}

static bool shm_exists(const char* name) {
  char path[128];
  snprintf(path, sizeof(path), "/dev/shm%s", name);
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* A finished child's pid: dead for sure. */
static int dead_pid(void) {
  pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, NULL, 0);
  return p;
}

static void test_shm_cleanup(void) {
  char stale[96];
  snprintf(stale, sizeof(stale), "/tpurt_dist_%d_crashed", dead_pid());
  int fd = shm_open(stale, O_CREAT | O_RDWR, 0600);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK(shm_exists(stale));
  CHECK(spawn(2, rank_nothing, 5000) == 0);
  CHECK(!shm_exists(stale)); /* swept: its creator is dead */
  CHECK(!shm_exists(g_name)); /* unlinked once everyone joined */
}

/* The queued path on real chips: tpurt_init in each rank, an allreduce
 * between two kernels' worth of copies, the error of a timed-out one at sync. */
static void rank_queue(tpurt_dist_comm_t* unused) {
  tpurt_device_t* d = NULL;
  CHECK_OK(tpurt_device_get(0, &d));
  if (!d) return;
  int fd;
  void* base;
  uint64_t bytes;
  CHECK_OK(tpurt_device_shareable_memory(d, &fd, &base, &bytes));
  char name[80];
  snprintf(name, sizeof(name), "%s_q", g_name);
  tpurt_dist_comm_params_t p = {.name = name, .rank = g_rank, .size = g_size, .timeout_ms = 700, .mem_fd = fd,
                                .mem_base = base, .mem_bytes = bytes};
  tpurt_dist_comm_t* c = NULL;
  CHECK_OK(tpurt_dist_comm_create(&p, &c));
  if (!c) return;
  tpurt_queue_t* q = tpurt_device_default_queue(d);
  float host[256], back[256];
  for (int i = 0; i < 256; ++i) host[i] = (float)(g_rank * 1000 + i);
  void *a = NULL, *b = NULL;
  CHECK_OK(tpurt_memory_allocate(d, q, sizeof(host), &a));
  CHECK_OK(tpurt_memory_allocate(d, q, sizeof(host), &b));
  CHECK_OK(tpurt_memcpy_h2d(d, q, a, host, sizeof(host)));
  tpurt_dist_op_t o = {.kind = TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32, .count = 256, .in = a, .out = a};
  CHECK_OK(tpurt_dist_enqueue(c, q, &o));
  CHECK_OK(tpurt_queue_submit_copy(q, b, a, sizeof(host))); /* runs after the collective, in queue order */
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK_OK(tpurt_memcpy_d2h(d, q, back, b, sizeof(back)));
  int bad = 0;
  for (int i = 0; i < 256; ++i) {
    float want = 0;
    for (int r = 0; r < g_size; ++r) want += (float)(r * 1000 + i);
    bad += back[i] != want;
  }
  CHECK(bad == 0);
  /* A queued group holding an all_to_all beside a send and a receive: the
   * group keeps its own copy of the counts (the caller's are overwritten
   * before the queue runs it). Rank r sends 2 + p elements to rank p. */
  int n = g_size, r = g_rank;
  uint64_t sc[4], so[4], rc[4], ro[4], a_off = 0, b_off = 0;
  for (int p2 = 0; p2 < n; ++p2) {
    sc[p2] = 2 + (uint64_t)p2, so[p2] = a_off, a_off += sc[p2];
    rc[p2] = 2 + (uint64_t)r, ro[p2] = b_off, b_off += rc[p2];
  }
  for (int i = 0; i < 256; ++i) host[i] = (float)(r * 1000 + i);
  CHECK_OK(tpurt_memcpy_h2d(d, q, a, host, sizeof(host)));
  tpurt_dist_op_t grp[3] = {
      {.kind = TPURT_DIST_ALLTOALL, .dtype = TPURT_DTYPE_FLOAT32, .in = a, .out = b, .send_counts = sc,
       .send_offsets = so, .recv_counts = rc, .recv_offsets = ro},
      {.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = (r + 1) % n, .count = 8, .in = (float*)a + 200},
      {.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = (r + n - 1) % n, .count = 8,
       .out = (float*)b + 200}};
  CHECK_OK(tpurt_dist_enqueue_group(c, q, grp, 3));
  memset(sc, 0xff, sizeof(sc)), memset(so, 0xff, sizeof(so)), memset(rc, 0xff, sizeof(rc)), memset(ro, 0xff, sizeof(ro));
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK_OK(tpurt_memcpy_d2h(d, q, back, b, sizeof(back)));
  bad = 0;
  uint64_t k = 0;
  for (int p2 = 0; p2 < n; ++p2) {
    uint64_t from = 0; /* where rank p2's part for r starts in its input */
    for (int t = 0; t < r; ++t) from += 2 + (uint64_t)t;
    for (uint64_t i = 0; i < 2 + (uint64_t)r; ++i) bad += back[k++] != (float)(p2 * 1000 + (int)(from + i));
  }
  for (int i = 0; i < 8; ++i) bad += back[200 + i] != (float)(((r + n - 1) % n) * 1000 + 200 + i);
  CHECK(bad == 0);
  /* A send queued outside the issue order (tpurt_dist_enqueue_send, on a queue of its own) holds back no
   * collective: rank 0 sends, then all-reduces; rank 1 receives only after the allreduce. */
  if (g_size == 2) {
    tpurt_queue_t* q2 = NULL;
    CHECK_OK(tpurt_queue_create(d, -1, &q2));
    for (int i = 0; i < 256; ++i) host[i] = (float)(r * 1000 + i);
    CHECK_OK(tpurt_memcpy_h2d(d, q, a, host, sizeof(host)));
    tpurt_dist_op_t s1 = {.kind = TPURT_DIST_SEND, .dtype = TPURT_DTYPE_FLOAT32, .peer = 1, .count = 16, .tag = 5,
                          .in = (float*)a + 100};
    tpurt_dist_op_t r1 = {.kind = TPURT_DIST_RECV, .dtype = TPURT_DTYPE_FLOAT32, .peer = 0, .count = 16, .tag = 5,
                          .out = b};
    tpurt_dist_op_t ar = {.kind = TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32, .count = 4, .in = a, .out = a};
    CHECK(tpurt_dist_enqueue_send(c, q2, &ar) != TPURT_OK); /* a send only */
    if (r == 0) {
      CHECK_OK(tpurt_dist_enqueue_send(c, q2, &s1));
      CHECK_OK(tpurt_dist_enqueue(c, q, &ar));
      CHECK_OK(tpurt_queue_synchronize(q));
      CHECK_OK(tpurt_queue_synchronize(q2));
    } else {
      CHECK_OK(tpurt_dist_enqueue(c, q, &ar));
      CHECK_OK(tpurt_dist_enqueue(c, q, &r1));
      CHECK_OK(tpurt_queue_synchronize(q));
      CHECK_OK(tpurt_memcpy_d2h(d, q, back, b, 16 * sizeof(float)));
      for (int i = 0; i < 16; ++i) CHECK(back[i] == (float)(100 + i));
    }
    CHECK_OK(tpurt_memcpy_d2h(d, q, back, a, 4 * sizeof(float)));
    for (int i = 0; i < 4; ++i) CHECK(back[i] == (float)(1000 + 2 * i));
    tpurt_queue_release(q2);
  }
  /* rank 1 skips the next one: rank 0's error surfaces at its sync, naming rank 1 */
  if (g_rank == 0) {
    CHECK_OK(tpurt_dist_enqueue(c, q, &o));
    CHECK(status_says(tpurt_queue_synchronize(q), "rank 1", "allreduce(float32, 256 elements, sum)"));
  } else {
    usleep(1500000);
  }
  tpurt_memory_free(d, a);
  tpurt_memory_free(d, b);
  tpurt_dist_comm_destroy(c);
}

/* A step between hosts (tpurt_dist_enqueue_host) that fails aborts the communicator with its error: the host's
 * other ranks fail their next collective with it rather than run on without this rank's step. */
static tpurt_status_t failing_step(void* user) {
  (void)user;
  return TPURT_STATUS(UNAVAILABLE, "gloo: connection closed by rank 7");
}

/* A communicator over this process's chip memory (the queued paths need the device's queue). */
static tpurt_dist_comm_t* device_comm(const char* suffix, uint64_t timeout_ms, tpurt_device_t** out_d) {
  tpurt_device_t* d = NULL;
  CHECK_OK(tpurt_device_get(0, &d));
  if (!d) return NULL;
  int fd;
  void* base;
  uint64_t bytes;
  CHECK_OK(tpurt_device_shareable_memory(d, &fd, &base, &bytes));
  char name[80];
  snprintf(name, sizeof(name), "%s_%s", g_name, suffix);
  tpurt_dist_comm_params_t p = {.name = name, .rank = g_rank, .size = g_size, .timeout_ms = timeout_ms, .mem_fd = fd,
                                .mem_base = base, .mem_bytes = bytes};
  tpurt_dist_comm_t* c = NULL;
  CHECK_OK(tpurt_dist_comm_create(&p, &c));
  *out_d = d;
  return c;
}

static void rank_host_step_fails(tpurt_dist_comm_t* unused) {
  (void)unused;
  tpurt_device_t* d = NULL;
  tpurt_dist_comm_t* c = device_comm("h", 60000, &d);
  if (!c) return;
  tpurt_queue_t* q = tpurt_device_default_queue(d);
  void* a = NULL;
  CHECK_OK(tpurt_memory_allocate(d, q, 1024, &a));
  tpurt_dist_op_t o = {.kind = TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32, .count = 16, .in = a, .out = a};
  if (g_rank == 0) {
    CHECK_OK(tpurt_dist_enqueue_host(c, q, failing_step, NULL));
    CHECK(status_says(tpurt_queue_synchronize(q), "connection closed by rank 7", NULL));
  }
  /* rank 1 waits for rank 0 here: the abort ends the wait at once (not after the 60 s timeout) */
  uint64_t t0 = tpurt_now_ns();
  CHECK(status_says(tpurt_dist_run(c, &o), "aborted", "connection closed by rank 7"));
  CHECK(tpurt_now_ns() - t0 < 50000000000ull);
  tpurt_memory_free(d, a);
  tpurt_dist_comm_destroy(c);
}

/* A peer inside a step between hosts is not blamed for a wait within the host at the timeout: the step waits for
 * another host under a timeout of its own, and its error names who held it up. Rank 0's step takes 3x the 0.4 s
 * timeout; rank 1's allreduce waits for it and succeeds. */
static _Atomic int* g_started; /* shared by the forked ranks */
static tpurt_status_t slow_step(void* user) {
  atomic_store((_Atomic int*)user, 1);
  usleep(1200000);
  return TPURT_OK;
}

static void rank_peer_between_hosts(tpurt_dist_comm_t* unused) {
  (void)unused;
  tpurt_device_t* d = NULL;
  tpurt_dist_comm_t* c = device_comm("b", 400, &d);
  if (!c) return;
  tpurt_queue_t* q = tpurt_device_default_queue(d);
  float host[16];
  for (int i = 0; i < 16; ++i) host[i] = (float)(g_rank + 1);
  void* a = NULL;
  CHECK_OK(tpurt_memory_allocate(d, q, sizeof(host), &a));
  CHECK_OK(tpurt_memcpy_h2d(d, q, a, host, sizeof(host)));
  tpurt_dist_op_t o = {.kind = TPURT_DIST_ALLREDUCE, .dtype = TPURT_DTYPE_FLOAT32, .count = 16, .in = a, .out = a};
  if (g_rank == 0) {
    CHECK_OK(tpurt_dist_enqueue_host(c, q, slow_step, (void*)g_started));
  } else {
    while (!atomic_load(g_started)) usleep(1000); /* rank 0's step has begun: rank 0 is between hosts */
  }
  CHECK_OK(tpurt_dist_enqueue(c, q, &o));
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK_OK(tpurt_memcpy_d2h(d, q, host, a, sizeof(host)));
  for (int i = 0; i < 16; ++i) CHECK(host[i] == 3.0f);
  tpurt_memory_free(d, a);
  tpurt_dist_comm_destroy(c);
}

int main(void) {
  test_topology();
  CHECK(spawn(2, rank_allreduce_all, 30000) == 0);
  CHECK(spawn(4, rank_allreduce_all, 30000) == 0);
  CHECK(spawn(3, rank_collectives, 30000) == 0);
  CHECK(spawn(4, rank_collectives, 30000) == 0);
  g_cnt = 40000; /* 160 KB per rank: the large protocol for every collective */
  CHECK(spawn(3, rank_collectives, 30000) == 0);
  CHECK(spawn(4, rank_collectives, 30000) == 0);
  g_cnt = (2u << 20) + 5; /* 8 MiB + 20 bytes per rank: the copies stream their output, heads and tails unaligned */
  g_out_mib = 32;
  CHECK(spawn(2, rank_collectives, 30000) == 0);
  g_cnt = 1001;
  g_out_mib = 16;
  CHECK(spawn(2, rank_alternating, 30000) == 0);
  CHECK(spawn(4, rank_alternating, 30000) == 0);
  CHECK(spawn(2, rank_mismatch, 30000) == 0);
  CHECK(spawn(3, rank_dtype_mismatch, 30000) == 0);
  CHECK(spawn(3, rank_killed, 60000) == 1); /* rank 1 killed itself; the others passed their checks */
  CHECK(spawn(2, rank_absent, 500) == 0);
  test_host_part();
  CHECK(spawn(3, rank_any_source, 30000) == 0);
  CHECK(spawn(2, rank_group_many, 30000) == 0);
  CHECK(spawn(2, rank_recv_poll, 30000) == 0);
  CHECK(spawn(4, rank_any_source, 30000) == 0);
  test_shm_cleanup();
  setenv("TORCH_TPU_HBM_BYTES", "64M", 1);
  setenv("TORCH_TPU_NUM_THREADS", "1", 1);
  CHECK(spawn(2, rank_queue, 5000) == 0);
  CHECK(spawn(2, rank_host_step_fails, 5000) == 0);
  g_started = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(g_started != MAP_FAILED);
  if (g_started != MAP_FAILED) CHECK(spawn(2, rank_peer_between_hosts, 5000) == 0);
  return test_finish("test_dist");
}
