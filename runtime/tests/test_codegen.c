/* The code generator and its verified executable cache (runtime/compiler/):
 * the source of a chain depends on its description only; a built kernel
 * computes, bit for bit, what the elementwise library's loops compute when
 * the ops run one by one; the disk cache loads a kernel instead of building
 * it, and refuses (and rebuilds) a tampered, foreign-writable, symlinked or
 * other-ABI library; a failed build is remembered. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"
#include "compiler/cache.h"
#include "compiler/chain_kernel.h"
#include "compiler/codegen.h"
#include "compiler/jit.h"
#include "ops/elementwise/ew_ops.h"
#include "test_util.h"

#define N 4099 /* odd: a tail after the last whole block */
#define NS 4096

static char g_dir[256]; /* the cache directory of this run */

/* ------------------------------------------------------------------------ */
/* A chain of library ops, run one by one and described for the generator.   */

enum { IN_X, IN_B, IN_S, IN_M0 }; /* an input: x, b (contiguous), s (a 0-d scalar), or member k - IN_M0 */

typedef struct op_t {
  const char* name;
  const char* overload;
  int nin;
  int in[3];
  double arg; /* a Scalar argument after the tensors (alpha, negative_slope), or NAN: none */
} op_t;

/* mul(x, s), add(m0, b, alpha 0.5), exp, leaky_relu(0.1), sigmoid, mul(m4, x), tanh, gt(m6, b),
 * lerp(m6, x, m4): scalar, contiguous and member inputs, scalar parameters, a bool value, 3 inputs. */
static const op_t kChain[] = {
    {"mul", "Tensor", 2, {IN_X, IN_S}, NAN},
    {"add", "Tensor", 2, {IN_M0 + 0, IN_B}, 0.5},
    {"exp", "", 1, {IN_M0 + 1}, NAN},
    {"leaky_relu", "", 1, {IN_M0 + 2}, 0.1},
    {"sigmoid", "", 1, {IN_M0 + 3}, NAN},
    {"mul", "Tensor", 2, {IN_M0 + 4, IN_X}, NAN},
    {"tanh", "", 1, {IN_M0 + 5}, NAN},
    {"gt", "Tensor", 2, {IN_M0 + 6, IN_B}, NAN},
    {"lerp", "Tensor", 3, {IN_M0 + 6, IN_X, IN_M0 + 4}, NAN},
};
#define NOPS ((int)(sizeof kChain / sizeof kChain[0]))

typedef struct data_t {
  float *x, *b, s;
  void* out[NOPS]; /* each member's value as the library computes it */
  tpurt_dtype_t out_dtype[NOPS];
  ew_params_t params[NOPS];
  tpurt_codegen_chain_t chain;
} data_t;

/* What the engine was handed: the op's configuration, captured instead of run. */
typedef struct capture_t {
  const tpurt_ew_config_t* cfg;
  ew_params_t params;
  const char* expr;
  tpurt_dtype_t type, out;
  int num_inputs;
} capture_t;

static tpurt_status_t capture(void* user, tpurt_kernel_ctx_t* ctx, const tpurt_ew_config_t* cfg) {
  (void)ctx;
  capture_t* c = user;
  c->cfg = cfg;
  memcpy(&c->params, cfg->user, sizeof c->params);
  c->expr = cfg->expr ? cfg->expr->name : NULL;
  c->type = cfg->loop_dtypes[1];
  c->out = cfg->loop_dtypes[0];
  c->num_inputs = cfg->num_inputs;
  return TPURT_OK;
}

/* Runs op k over the data (its output into d->out[k]); with a capture, only
 * hands its configuration to it. */
static tpurt_status_t run_op(data_t* d, int k, capture_t* cap) {
  const op_t* op = &kChain[k];
  int64_t n = N, one = 1;
  tpurt_tensor_t ts[3], out;
  tpurt_arg_t args[4];
  memset(args, 0, sizeof args);
  for (int i = 0; i < op->nin; ++i) {
    int src = op->in[i];
    if (src == IN_S) {
      ts[i] = test_tensor_dense(TPURT_DTYPE_FLOAT32, &d->s, 0, &one);
    } else {
      void* p = src == IN_X ? (void*)d->x : src == IN_B ? (void*)d->b : d->out[src - IN_M0];
      tpurt_dtype_t dt = src >= IN_M0 ? d->out_dtype[src - IN_M0] : TPURT_DTYPE_FLOAT32;
      ts[i] = test_tensor_dense(dt, p, 1, &n);
    }
    args[i].kind = TPURT_ARG_TENSOR;
    args[i].v.tensor = &ts[i];
  }
  int nargs = op->nin;
  if (!isnan(op->arg)) {
    args[nargs].kind = TPURT_ARG_DOUBLE;
    args[nargs++].v.d = op->arg;
  }
  out = test_tensor_dense(d->out_dtype[k], d->out[k], 1, &n);
  const tpurt_op_def_t* def = tpurt_op_lookup(op->name);
  if (!def) return TPURT_STATUS(NOT_FOUND, "no op %s", op->name);
  tpurt_op_call_t call = {.name = op->name, .overload = op->overload, .num_args = nargs, .args = args,
                          .num_outputs = 1, .outputs = &out};
  tpurt_ew_interceptor_t icpt = {.run = capture, .user = cap};
  const tpurt_ew_interceptor_t* saved = tpurt_ew_tls_interceptor;
  if (cap) tpurt_ew_tls_interceptor = &icpt;
  tpurt_status_t s = tpurt_kernel_run(def->fn, &call);
  tpurt_ew_tls_interceptor = saved;
  return s;
}

static double rnd(void) { return test_rand_unit() * 6 - 3; }

/* The data, the library's results op by op, and the chain's description
 * (every member stored). */
static void data_init(data_t* d) {
  memset(d, 0, sizeof *d);
  d->x = aligned_alloc(64, sizeof(float) * (N + 61));
  d->b = aligned_alloc(64, sizeof(float) * (N + 61));
  for (int i = 0; i < N; ++i) {
    d->x[i] = (float)rnd();
    d->b[i] = (float)rnd();
  }
  d->x[0] = 0.0f;
  d->x[1] = -0.0f;
  d->x[2] = 40.0f; /* exp overflows to inf, tanh saturates */
  d->s = 1.75f;
  d->chain.n = NOPS;
  for (int k = 0; k < NOPS; ++k) {
    d->out_dtype[k] = strcmp(kChain[k].name, "gt") == 0 ? TPURT_DTYPE_BOOL : TPURT_DTYPE_FLOAT32;
    d->out[k] = aligned_alloc(64, 4 * (N + 61));
    memset(d->out[k], 0, 4 * (N + 61));
    capture_t cap = {0};
    CHECK_OK(run_op(d, k, &cap));
    CHECK(cap.cfg != NULL && cap.expr != NULL);
    d->params[k] = cap.params;
    tpurt_codegen_member_t* m = &d->chain.m[k];
    m->expr = cap.expr;
    m->type = cap.type;
    m->out = cap.out;
    m->num_inputs = cap.num_inputs;
    m->store = true;
    CHECK(cap.num_inputs == kChain[k].nin);
    for (int i = 0; i < kChain[k].nin; ++i) {
      int src = kChain[k].in[i];
      m->in[i].src = src >= IN_M0 ? TPURT_CODEGEN_SRC_MEMBER
                     : src == IN_S ? TPURT_CODEGEN_SRC_SCALAR
                                   : TPURT_CODEGEN_SRC_CONTIG;
      m->in[i].member = (int8_t)(src >= IN_M0 ? src - IN_M0 : -1);
    }
    CHECK_OK(run_op(d, k, NULL)); /* the library's own result */
  }
}

static void data_free(data_t* d) {
  free(d->x);
  free(d->b);
  for (int k = 0; k < NOPS; ++k) free(d->out[k]);
}

/* Runs a kernel of d->chain over [0, n) into fresh buffers (a stored member
 * k's value at offset `shift` elements); true when every stored value equals
 * the library's bit for bit. */
static bool kernel_matches(data_t* d, tpurt_gen_fn_t fn, int64_t n, int stream) {
  tpurt_gen_args_t a;
  memset(&a, 0, sizeof a);
  a.struct_size = sizeof a;
  void* got[NOPS] = {0};
  for (int k = 0; k < NOPS; ++k) {
    const op_t* op = &kChain[k];
    for (int i = 0; i < op->nin; ++i) {
      int src = op->in[i];
      a.mem[k][i + 1] = src == IN_X ? (char*)d->x : src == IN_B ? (char*)d->b : src == IN_S ? (char*)&d->s : NULL;
    }
    if (d->chain.m[k].store) {
      got[k] = aligned_alloc(64, 4 * (N + 61));
      memset(got[k], 0xA5, 4 * (N + 61));
      a.mem[k][0] = got[k];
    }
    a.params[k] = &d->params[k];
  }
  bool ok = fn(&a, 0, n, stream) == 0;
  for (int k = 0; k < NOPS; ++k) {
    if (!got[k]) continue;
    size_t es = d->out_dtype[k] == TPURT_DTYPE_BOOL ? 1 : 4;
    if (memcmp(got[k], d->out[k], es * (size_t)n) != 0) {
      fprintf(stderr, "member %d (%s) differs from the library's\n", k, kChain[k].name);
      ok = false;
    }
    free(got[k]);
  }
  return ok;
}

/* ------------------------------------------------------------------------ */

static void test_source(void) {
  /* exp(m) stored; mul(v0, m); add(m, s, alpha) */
  tpurt_codegen_chain_t a = {.n = 3};
  a.m[0] = (tpurt_codegen_member_t){"exp", TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 1,
                                    {{TPURT_CODEGEN_SRC_CONTIG, -1}}, true};
  a.m[1] = (tpurt_codegen_member_t){"mul", TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 2,
                                    {{TPURT_CODEGEN_SRC_MEMBER, 0}, {TPURT_CODEGEN_SRC_CONTIG, -1}}, true};
  a.m[2] = (tpurt_codegen_member_t){"add", TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 2,
                                    {{TPURT_CODEGEN_SRC_CONTIG, -1}, {TPURT_CODEGEN_SRC_SCALAR, -1}}, false};
  char* s1 = tpurt_codegen_source(&a);
  tpurt_codegen_chain_t a2 = a; /* the same description, its names elsewhere */
  char names[3][8] = {"exp", "mul", "add"};
  for (int k = 0; k < 3; ++k) a2.m[k].expr = names[k];
  char* s2 = tpurt_codegen_source(&a2);
  CHECK(s1 && s2 && strcmp(s1, s2) == 0);
  CHECK(tpurt_codegen_chain_equal(&a, &a2) && tpurt_codegen_chain_hash(&a) == tpurt_codegen_chain_hash(&a2));
  CHECK(s1 && strstr(s1, "compiler/gen_prelude.h") && strstr(s1, "tpurt_kernel_abi_version"));

  /* One member's input source, or one member's type, changed: another source. */
  tpurt_codegen_chain_t v[4] = {a, a, a, a};
  v[0].m[1].in[0] = (tpurt_codegen_input_t){TPURT_CODEGEN_SRC_CONTIG, -1}; /* memory, not member 0 */
  v[1].m[2].in[1].src = TPURT_CODEGEN_SRC_CONTIG;                       /* contiguous, not a scalar */
  v[2].m[2].type = v[2].m[2].out = TPURT_DTYPE_FLOAT64;                 /* add in double */
  v[3].m[0].store = false;                                              /* exp's value not stored */
  for (int i = 0; i < 4; ++i) {
    char* sv = tpurt_codegen_source(&v[i]);
    CHECK(sv && s1 && strcmp(sv, s1) != 0);
    CHECK(!tpurt_codegen_chain_equal(&v[i], &a));
    free(sv);
  }
  /* Not chains we generate: an unknown expression, a wrong arity, a value from a later member, a
   * member's value into a member of another type. */
  tpurt_codegen_chain_t bad[4] = {a, a, a, a};
  bad[0].m[1].expr = "no_such_expression";
  bad[1].m[0].num_inputs = 2;
  bad[2].m[1].in[0].member = 2;
  bad[3].m[1].type = bad[3].m[1].out = TPURT_DTYPE_FLOAT64;
  for (int i = 0; i < 4; ++i) CHECK(tpurt_codegen_source(&bad[i]) == NULL);
  free(s1);
  free(s2);
}

/* A built kernel gives the library's bits: every value stored, then only the last ones (the rest in
 * registers), plain stores over an odd size and streamed stores over whole aligned blocks. */
static void test_kernel_matches_library(data_t* d) {
  char* src = tpurt_codegen_source(&d->chain);
  CHECK(src != NULL);
  if (!src) return;
  tpurt_kernel_cache_state_t st;
  CHECK(tpurt_kernel_cache_find(src, &st) == NULL && st == TPURT_KERNEL_CACHE_ABSENT);
  CHECK(tpurt_kernel_cache_build(src, NULL, NULL));
  tpurt_kernel_cache_wait();
  tpurt_gen_fn_t fn = tpurt_kernel_cache_find(src, &st);
  CHECK(fn != NULL && st == TPURT_KERNEL_CACHE_READY);
  free(src);
  if (!fn) return;
  CHECK(kernel_matches(d, fn, N, 0));
  CHECK(kernel_matches(d, fn, NS, 1));
  data_t e = *d;
  for (int k = 0; k < NOPS - 2; ++k) e.chain.m[k].store = false;
  src = tpurt_codegen_source(&e.chain);
  CHECK(src && tpurt_kernel_cache_build(src, NULL, NULL));
  tpurt_kernel_cache_wait();
  fn = src ? tpurt_kernel_cache_find(src, &st) : NULL;
  free(src);
  CHECK(fn != NULL);
  if (fn) CHECK(kernel_matches(&e, fn, N, 0));
  /* struct_size: a caller's struct too small for the kernel is refused, nothing written */
  if (fn) {
    float out = 7.0f;
    tpurt_gen_args_t small;
    memset(&small, 0, sizeof small);
    small.struct_size = offsetof(tpurt_gen_args_t, params);
    small.mem[NOPS - 1][0] = (char*)&out;
    CHECK(fn(&small, 0, 1, 0) == TPURT_GEN_ERR_ARGS && out == 7.0f);
  }
}

/* ------------------------------------------------------------------------ */
/* The disk cache.                                                           */

static tpurt_kernel_cache_stats_t stats(void) {
  tpurt_kernel_cache_stats_t s;
  tpurt_kernel_cache_stats(&s);
  return s;
}

static void done_cb(void* user, tpurt_gen_fn_t fn) { *(tpurt_gen_fn_t*)user = fn; }

/* Builds src in the background and waits; its kernel. */
static tpurt_gen_fn_t build(const char* src) {
  tpurt_gen_fn_t fn = NULL;
  CHECK(tpurt_kernel_cache_build(src, done_cb, &fn));
  tpurt_kernel_cache_wait();
  return fn;
}

static bool exists(const char* src, const char* ext) {
  char p[1200];
  struct stat st;
  return tpurt_kernel_cache_entry_path(src, ext, p, sizeof p) && lstat(p, &st) == 0;
}

/* After the memory table is cleared, the entry on disk is refused (discarded, counted) and
 * nothing is loaded; a build then gives a working kernel again. */
static void expect_refused_then_rebuilt(data_t* d, const char* src, const char* what) {
  tpurt_kernel_cache_clear();
  tpurt_kernel_cache_stats_t before = stats();
  tpurt_kernel_cache_state_t st;
  tpurt_gen_fn_t fn = tpurt_kernel_cache_find(src, &st);
  tpurt_kernel_cache_stats_t after = stats();
  if (fn || st != TPURT_KERNEL_CACHE_ABSENT || after.disk_rejects != before.disk_rejects + 1)
    fprintf(stderr, "%s: not refused\n", what);
  CHECK(fn == NULL && st == TPURT_KERNEL_CACHE_ABSENT);
  CHECK(after.disk_rejects == before.disk_rejects + 1 && after.disk_loads == before.disk_loads);
  CHECK(!exists(src, ".so") && !exists(src, ".kernel")); /* discarded */
  fn = build(src);
  CHECK(fn != NULL && stats().builds == before.builds + 1);
  if (fn) CHECK(kernel_matches(d, fn, N, 0));
}

static void test_disk_cache(data_t* d) {
  char* src = tpurt_codegen_source(&d->chain);
  CHECK(src != NULL);
  if (!src) return;
  char cache[300]; /* a directory of its own: nothing built so far is on its disk */
  snprintf(cache, sizeof cache, "%s/disk", g_dir);
  setenv("TORCH_TPU_FUSE_CACHE_DIR", cache, 1);
  tpurt_kernel_cache_clear();
  tpurt_kernel_cache_stats_reset();
  tpurt_kernel_cache_state_t st;
  /* Built once, then from memory, then (memory cleared) from disk: never built again. */
  tpurt_gen_fn_t fn = tpurt_kernel_cache_find(src, &st);
  CHECK(fn == NULL && st == TPURT_KERNEL_CACHE_ABSENT);
  fn = build(src);
  CHECK(fn != NULL && exists(src, ".so") && exists(src, ".kernel"));
  CHECK(tpurt_kernel_cache_find(src, &st) == fn && stats().memory_hits == 1);
  tpurt_kernel_cache_clear();
  fn = tpurt_kernel_cache_find(src, &st);
  tpurt_kernel_cache_stats_t s = stats();
  CHECK(fn != NULL && st == TPURT_KERNEL_CACHE_READY && s.disk_loads == 1 && s.builds == 1);
  if (fn) CHECK(kernel_matches(d, fn, N, 0));

  /* Two kernels loaded from disk one after the other are two kernels (each load names its
   * descriptor afresh: the dynamic loader would hand back the first for a repeated name). */
  tpurt_codegen_chain_t one = {.n = 1};
  one.m[0] = (tpurt_codegen_member_t){"exp", TPURT_DTYPE_FLOAT32, TPURT_DTYPE_FLOAT32, 1,
                                      {{TPURT_CODEGEN_SRC_CONTIG, -1}}, true};
  char* src1 = tpurt_codegen_source(&one);
  CHECK(src1 && build(src1) != NULL);
  tpurt_kernel_cache_clear();
  tpurt_gen_fn_t f_chain = tpurt_kernel_cache_find(src, &st);
  tpurt_gen_fn_t f_exp = src1 ? tpurt_kernel_cache_find(src1, &st) : NULL;
  CHECK(f_chain && f_exp && f_chain != f_exp);
  if (f_exp) {
    float* y = calloc(N, sizeof(float));
    tpurt_gen_args_t a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.mem[0][0] = (char*)y;
    a.mem[0][1] = (char*)d->b;
    a.params[0] = &d->params[2]; /* exp's */
    CHECK(f_exp(&a, 0, N, 0) == 0);
    float* want = calloc(N, sizeof(float)); /* the library's exp of b */
    int64_t n = N;
    tpurt_tensor_t tb = test_tensor_dense(TPURT_DTYPE_FLOAT32, d->b, 1, &n);
    tpurt_tensor_t to = test_tensor_dense(TPURT_DTYPE_FLOAT32, want, 1, &n);
    tpurt_arg_t arg = {.kind = TPURT_ARG_TENSOR, .v.tensor = &tb};
    CHECK_OK(test_op_run("exp", false, &arg, 1, &to, 1));
    CHECK(memcmp(y, want, sizeof(float) * N) == 0);
    free(y);
    free(want);
  }
  free(src1);

  char so[1200], real[1300];
  CHECK(tpurt_kernel_cache_entry_path(src, ".so", so, sizeof so));

  /* A tampered library (one byte changed, in a new file put in its place) */
  {
    size_t len = 0;
    FILE* f = fopen(so, "rb");
    char* bytes = NULL;
    if (f) {
      fseek(f, 0, SEEK_END);
      len = (size_t)ftell(f);
      fseek(f, 0, SEEK_SET);
      bytes = malloc(len);
      CHECK(bytes && fread(bytes, 1, len, f) == len);
      fclose(f);
    }
    CHECK(bytes != NULL && len > 0);
    if (bytes) {
      bytes[len / 2] ^= 0x5A;
      snprintf(real, sizeof real, "%s.new", so);
      f = fopen(real, "wb");
      CHECK(f && fwrite(bytes, 1, len, f) == len);
      if (f) fclose(f);
      chmod(real, 0600);
      CHECK(rename(real, so) == 0);
      free(bytes);
    }
    expect_refused_then_rebuilt(d, src, "tampered");
  }
  /* ... writable by others */
  CHECK(chmod(so, 0666) == 0);
  expect_refused_then_rebuilt(d, src, "writable by others");
  /* ... reached through a symlink (to an intact copy) */
  snprintf(real, sizeof real, "%s.real", so);
  CHECK(rename(so, real) == 0 && symlink(real, so) == 0);
  expect_refused_then_rebuilt(d, src, "symlink");
  unlink(real);
  /* ... a library of another ABI version, with a correct record */
  {
    const char* key = "tpurt_kernel_abi_version = TPURT_KERNEL_ABI_VERSION;";
    const char* at = strstr(src, key);
    CHECK(at != NULL);
    if (at) {
      size_t pre = (size_t)(at - src);
      char* other = malloc(strlen(src) + 32);
      sprintf(other, "%.*stpurt_kernel_abi_version = 999u;%s", (int)pre, src, at + strlen(key));
      tpurt_jit_build_t b;
      int parent = open(g_dir, O_RDONLY | O_DIRECTORY);
      CHECK(tpurt_jit_build(other, parent, &b) == TPURT_JIT_OK);
      size_t size = 0;
      int so_fd = tpurt_jit_build_open_library(&b, &size);
      CHECK(so_fd >= 0 && tpurt_kernel_cache_install(src, so_fd));
      if (so_fd >= 0) close(so_fd);
      tpurt_jit_build_remove(&b);
      close(parent);
      free(other);
      expect_refused_then_rebuilt(d, src, "ABI 999");
    }
  }
  /* A failed build is remembered on disk: after the memory table is cleared it is known as
   * failed, and nothing is built. */
  {
    char* bad = malloc(strlen(src) + 64);
    sprintf(bad, "%s\n#error \"not a kernel\"\n", src);
    tpurt_kernel_cache_stats_t before = stats();
    CHECK(build(bad) == NULL);
    CHECK(stats().build_failures == before.build_failures + 1 && exists(bad, ".fail"));
    tpurt_kernel_cache_clear();
    CHECK(tpurt_kernel_cache_find(bad, &st) == NULL && st == TPURT_KERNEL_CACHE_FAILED);
    CHECK(!tpurt_kernel_cache_build(bad, NULL, NULL) && stats().builds == before.builds);
    free(bad);
  }
  free(src);
}

/* The shared cache (TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT): a kernel built on one host is
 * published there; another host (an empty per-host cache) loads it from there, verified, copies it
 * into its own cache and builds nothing; a tampered shared entry is refused and the kernel built. */
static void test_shared_cache(data_t* d) {
  char* src = tpurt_codegen_source(&d->chain); /* built before, but into other directories */
  CHECK(src != NULL);
  if (!src) return;
  char host_a[300], host_b[300], host_c[300], shared[300], path[700];
  snprintf(host_a, sizeof host_a, "%s/host_a", g_dir);
  snprintf(host_b, sizeof host_b, "%s/host_b", g_dir);
  snprintf(host_c, sizeof host_c, "%s/host_c", g_dir);
  snprintf(shared, sizeof shared, "%s/shared", g_dir);
  setenv("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", shared, 1);
  tpurt_kernel_cache_state_t st;

  setenv("TORCH_TPU_FUSE_CACHE_DIR", host_a, 1);
  tpurt_kernel_cache_clear();
  tpurt_kernel_cache_stats_reset();
  CHECK(tpurt_kernel_cache_find(src, &st) == NULL && st == TPURT_KERNEL_CACHE_ABSENT);
  CHECK(build(src) != NULL && stats().builds == 1 && stats().shared_stores == 1);
  snprintf(path, sizeof path, "%s/fused/%016llx.so", shared, (unsigned long long)tpurt_fnv1a_str(src, TPURT_FNV_SEED));
  struct stat sb;
  CHECK(lstat(path, &sb) == 0 && (sb.st_mode & 077) == 0);

  setenv("TORCH_TPU_FUSE_CACHE_DIR", host_b, 1);
  tpurt_kernel_cache_clear();
  tpurt_kernel_cache_stats_reset();
  tpurt_gen_fn_t fn = tpurt_kernel_cache_find(src, &st);
  tpurt_kernel_cache_stats_t s = stats();
  CHECK(fn != NULL && st == TPURT_KERNEL_CACHE_READY && s.shared_loads == 1 && s.disk_loads == 0 && s.builds == 0);
  if (fn) CHECK(kernel_matches(d, fn, N, 0));
  CHECK(exists(src, ".so") && exists(src, ".kernel")); /* copied into host b's cache */
  tpurt_kernel_cache_clear();
  CHECK(tpurt_kernel_cache_find(src, &st) != NULL && stats().disk_loads == 1 && stats().shared_loads == 1);

  /* host c: the shared library's bytes changed under its record: refused, removed, built here */
  FILE* f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 64, SEEK_SET);
    fputc(0x5a ^ fgetc(f), f);
    fclose(f);
  }
  setenv("TORCH_TPU_FUSE_CACHE_DIR", host_c, 1);
  tpurt_kernel_cache_clear();
  tpurt_kernel_cache_stats_reset();
  CHECK(tpurt_kernel_cache_find(src, &st) == NULL && st == TPURT_KERNEL_CACHE_ABSENT);
  s = stats();
  CHECK(s.disk_rejects == 1 && s.shared_loads == 0);
  fn = build(src);
  CHECK(fn != NULL && stats().builds == 1);
  if (fn) CHECK(kernel_matches(d, fn, N, 0));

  unsetenv("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT");
  snprintf(path, sizeof path, "%s/cache", g_dir);
  setenv("TORCH_TPU_FUSE_CACHE_DIR", path, 1);
  tpurt_kernel_cache_clear();
  free(src);
}

/* The chain-kernel front: first sight asks the cache, second builds, then memory. */
static void test_chain_kernel(data_t* d) {
  tpurt_chain_kernel_clear();
  tpurt_chain_kernel_set_enabled(true);
  tpurt_codegen_chain_t c = d->chain;
  c.m[0].store = false; /* a chain not built so far */
  tpurt_chain_kernel_stats_reset();
  CHECK(tpurt_chain_kernel_find(&c) == NULL);
  CHECK(tpurt_chain_kernel_find(&c) == NULL);
  tpurt_chain_kernel_wait();
  tpurt_gen_fn_t fn = tpurt_chain_kernel_find(&c);
  tpurt_chain_kernel_stats_t s;
  tpurt_chain_kernel_stats(&s);
  CHECK(fn != NULL && s.lookups == 3 && s.builds == 1 && s.memory_hits == 1 && s.disk_loads == 0);
  tpurt_chain_kernel_clear();
  CHECK(tpurt_chain_kernel_find(&c) == fn); /* from disk now, the library already loaded */
  tpurt_chain_kernel_stats(&s);
  CHECK(s.disk_loads == 1 && s.builds == 1);
  tpurt_chain_kernel_set_enabled(false);
  CHECK(tpurt_chain_kernel_find(&c) == NULL);
  tpurt_chain_kernel_set_enabled(true);
}

static void rm_tree(const char* dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

/* Kernels are built with -march=native, so their identity (in every generated source, hence in the
 * cache key) names the CPU's instruction set: the vendor /proc/cpuinfo reports, and feature words. */
static void test_identity_names_cpu(void) {
  char ident[1024];
  tpurt_jit_identity(ident, sizeof ident);
  const char* cpu = strstr(ident, "; cpu ");
  CHECK(cpu != NULL);
#if defined(__x86_64__)
  FILE* f = fopen("/proc/cpuinfo", "r");
  char line[512], vendor[64] = "";
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "vendor_id : %63s", vendor) == 1) break;
  if (f) fclose(f);
  CHECK(vendor[0] && cpu && strncmp(cpu + 6, vendor, strlen(vendor)) == 0);
  CHECK(cpu && strlen(cpu) > 6 + strlen(vendor) + 8); /* feature words follow */
#endif
}

int main(void) {
  test_identity_names_cpu();
  CHECK_OK(tpurt_init()); /* kernels load through the default chip's HAL */
  snprintf(g_dir, sizeof g_dir, "%s/tpurt_test_codegen.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  char cache[300];
  snprintf(cache, sizeof cache, "%s/cache", g_dir);
  setenv("TORCH_TPU_FUSE_CACHE_DIR", cache, 1);
  test_source();
  data_t d;
  data_init(&d);
  test_kernel_matches_library(&d);
  test_disk_cache(&d);
  test_shared_cache(&d);
  test_chain_kernel(&d);
  data_free(&d);
  tpurt_kernel_cache_wait();
  rm_tree(g_dir);
  return test_finish("test_codegen");
}
