/* Queues: in-order execution, async submit, deep copy of the call record,
 * kernel errors surfacing at synchronize with the op's name, Debug mode,
 * multi-threaded submission, copies, host functions, parallel_for coverage,
 * and the submit+execute latency of an empty kernel (printed, not asserted). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

static tpurt_device_t* g_dev;

/* ---- ordering ---- */
static int64_t g_order[4096];
static _Atomic int g_order_n;

static tpurt_status_t k_append(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  int i = atomic_fetch_add(&g_order_n, 1);
  if (i < 4096) g_order[i] = call->args[0].v.i;
  return TPURT_OK;
}
static const tpurt_op_def_t op_append = {"append", k_append, k_append, 0};

static void test_ordering(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  atomic_store(&g_order_n, 0);
  for (int i = 0; i < 3000; ++i) {
    tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = i};
    tpurt_op_call_t call = {.name = "append", .overload = "", .num_args = 1, .args = &arg};
    CHECK_OK(i % 500 == 0 ? tpurt_queue_submit_kernel(q, &op_append, &call)
                          : tpurt_queue_submit_kernel(q, &op_append, &call));
  }
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK(atomic_load(&g_order_n) == 3000);
  int bad = 0;
  for (int i = 0; i < 3000; ++i) bad += g_order[i] != i;
  CHECK(bad == 0);
  CHECK(tpurt_queue_is_idle(q));
}

/* ---- async + deep copy ---- */
static _Atomic int g_gate;
static _Atomic int g_copy_ok;

static tpurt_status_t k_gate_check(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  while (!atomic_load(&g_gate)) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  /* The submitter scribbled over its record after submit returned. */
  bool ok = call->num_args == 5 && strcmp(call->name, "gate") == 0 &&
            strcmp(call->overload, "Tensor") == 0;
  ok = ok && call->args[0].kind == TPURT_ARG_TENSOR && call->args[0].v.tensor->ndim == 2 &&
       call->args[0].v.tensor->sizes[1] == 7;
  ok = ok && call->args[1].count == 3 && call->args[1].v.ints[2] == 30;
  ok = ok && strcmp(call->args[2].v.s, "reduce") == 0;
  ok = ok && call->args[3].count == 2 && call->args[3].v.tensors[0]->sizes[0] == 11 &&
       call->args[3].v.tensors[1] == NULL;
  ok = ok && call->args[4].count == 2 && call->args[4].v.doubles[1] == 2.5;
  ok = ok && call->num_outputs == 1 && call->outputs[0].sizes[0] == 5;
  atomic_store(&g_copy_ok, ok);
  return TPURT_OK;
}
static const tpurt_op_def_t op_gate = {"gate", k_gate_check, k_gate_check, 0};

static void test_async_deep_copy(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  atomic_store(&g_gate, 0);
  atomic_store(&g_copy_ok, 0);
  tpurt_tensor_t t = {.dtype = TPURT_DTYPE_FLOAT32, .ndim = 2, .sizes = {3, 7}, .strides = {7, 1}};
  tpurt_tensor_t t2 = {.dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {11}, .strides = {1}};
  tpurt_tensor_t out = {.dtype = TPURT_DTYPE_FLOAT32, .ndim = 1, .sizes = {5}, .strides = {1}};
  int64_t ints[3] = {10, 20, 30};
  double dbl[2] = {1.5, 2.5};
  char str[16] = "reduce";
  const tpurt_tensor_t* tl[2] = {&t2, NULL};
  char name[8] = "gate", ovl[8] = "Tensor";
  tpurt_arg_t args[5] = {
      {.kind = TPURT_ARG_TENSOR, .v.tensor = &t},
      {.kind = TPURT_ARG_INT_LIST, .count = 3, .v.ints = ints},
      {.kind = TPURT_ARG_STRING, .v.s = str},
      {.kind = TPURT_ARG_TENSOR_LIST, .count = 2, .v.tensors = tl},
      {.kind = TPURT_ARG_DOUBLE_LIST, .count = 2, .v.doubles = dbl},
  };
  tpurt_op_call_t call = {.name = name, .overload = ovl, .num_args = 5, .args = args,
                          .num_outputs = 1, .outputs = &out};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_gate, &call));
  /* Submit returned while the kernel is blocked on the gate: asynchronous. */
  CHECK(!tpurt_queue_is_idle(q));
  memset(&t, 0, sizeof t);
  memset(&t2, 0, sizeof t2);
  memset(&out, 0, sizeof out);
  memset(ints, 0, sizeof ints);
  memset(dbl, 0, sizeof dbl);
  memset(str, 0, sizeof str);
  memset(args, 0, sizeof args);
  memset(name, 0, sizeof name);
  memset(ovl, 0, sizeof ovl);
  tl[0] = NULL;
  atomic_store(&g_gate, 1);
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK(atomic_load(&g_copy_ok) == 1);
}

/* ---- errors ---- */
static _Atomic int g_ran_after_error;
static tpurt_status_t k_fail(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  return TPURT_STATUS(OUT_OF_RANGE, "index %lld is out of bounds", (long long)call->args[0].v.i);
}
static tpurt_status_t k_mark(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  atomic_fetch_add(&g_ran_after_error, 1);
  return TPURT_OK;
}
static const tpurt_op_def_t op_fail = {"index", k_fail, k_fail, 0};
static const tpurt_op_def_t op_mark = {"mark", k_mark, k_mark, 0};

static void test_errors(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  tpurt_arg_t a = {.kind = TPURT_ARG_INT, .v.i = 42};
  tpurt_op_call_t c1 = {.name = "index", .overload = "Tensor", .num_args = 1, .args = &a};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_fail, &c1));
  tpurt_arg_t b = {.kind = TPURT_ARG_INT, .v.i = 7};
  tpurt_op_call_t c2 = {.name = "index", .overload = "", .num_args = 1, .args = &b};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_fail, &c2)); /* second error: dropped */
  tpurt_op_call_t c3 = {.name = "mark", .overload = ""};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_mark, &c3));
  tpurt_status_t s = tpurt_queue_synchronize(q);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_OUT_OF_RANGE);
  CHECK(strcmp(tpurt_status_message(s), "aten::index.Tensor: index 42 is out of bounds") == 0);
  tpurt_status_free(s);
  CHECK(atomic_load(&g_ran_after_error) == 1);
  CHECK_OK(tpurt_queue_synchronize(q)); /* cleared */
  /* A kept error also surfaces at a host copy (a sync point). */
  void* dptr = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, NULL, 64, &dptr));
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_fail, &c2));
  char host[64];
  s = tpurt_memcpy_d2h(g_dev, NULL, host, dptr, 64);
  CHECK(s && strcmp(tpurt_status_message(s), "aten::index: index 7 is out of bounds") == 0);
  tpurt_status_free(s);
  CHECK_OK(tpurt_memcpy_d2h(g_dev, NULL, host, dptr, 64));
  tpurt_memory_free(g_dev, dptr);
  /* Bad records are refused at submit. */
  tpurt_op_call_t bad = {.name = "x", .num_args = 2, .args = NULL};
  CHECK_STATUS(tpurt_queue_submit_kernel(q, &op_mark, &bad), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_queue_submit_kernel(NULL, &op_mark, &c3), INVALID_ARGUMENT);
  tpurt_arg_t badlist = {.kind = TPURT_ARG_INT_LIST, .count = 3, .v.ints = NULL};
  tpurt_op_call_t bad2 = {.name = "x", .num_args = 1, .args = &badlist};
  CHECK_STATUS(tpurt_queue_submit_kernel(q, &op_mark, &bad2), INVALID_ARGUMENT);
}

/* ---- Debug mode ---- */
static _Atomic int g_saw_debug;
static tpurt_status_t k_debug(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  atomic_store(&g_saw_debug, tpurt_kernel_debug(ctx) ? 1 : 2);
  return TPURT_OK;
}
static const tpurt_op_def_t op_debug = {"dbg", k_debug, k_debug, 0};

static void test_debug_mode(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  tpurt_exec_mode_set(TPURT_EXEC_DEBUG);
  CHECK(tpurt_exec_mode_get() == TPURT_EXEC_DEBUG);
  atomic_store(&g_order_n, 0);
  tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = 5};
  tpurt_op_call_t call = {.name = "append", .num_args = 1, .args = &arg};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_append, &call));
  CHECK(atomic_load(&g_order_n) == 1); /* ran before submit returned */
  tpurt_arg_t a = {.kind = TPURT_ARG_INT, .v.i = 3};
  tpurt_op_call_t c1 = {.name = "gather", .overload = "out", .num_args = 1, .args = &a};
  tpurt_status_t s = tpurt_queue_submit_kernel(q, &op_fail, &c1);
  CHECK(tpurt_status_code(s) == TPURT_STATUS_OUT_OF_RANGE);
  CHECK(strcmp(tpurt_status_message(s), "aten::gather.out: index 3 is out of bounds") == 0);
  tpurt_status_free(s);
  tpurt_op_call_t c2 = {.name = "dbg"};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_debug, &c2));
  CHECK(atomic_load(&g_saw_debug) == 1);
  CHECK_OK(tpurt_queue_synchronize(q)); /* the Debug error was returned, not kept */
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_debug, &c2));
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK(atomic_load(&g_saw_debug) == 2);
}

/* ---- multi-threaded submit ---- */
#define MT_THREADS 4
#define MT_PER 2000
static int64_t g_last_seen[MT_THREADS];
static _Atomic int g_mt_bad, g_mt_count;
static tpurt_status_t k_mt(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  int t = (int)call->args[0].v.i;
  int64_t seq = call->args[1].v.ints[0];
  if (seq != g_last_seen[t] + 1) atomic_fetch_add(&g_mt_bad, 1);
  g_last_seen[t] = seq; /* only the worker touches this */
  atomic_fetch_add(&g_mt_count, 1);
  return TPURT_OK;
}
static const tpurt_op_def_t op_mt = {"mt", k_mt, k_mt, 0};

typedef struct mt_arg_t {
  tpurt_queue_t* q;
  int t;
  int failures;
} mt_arg_t;

static void* mt_main(void* varg) {
  mt_arg_t* m = varg;
  for (int64_t i = 0; i < MT_PER; ++i) {
    int64_t seq = i;
    tpurt_arg_t args[2] = {{.kind = TPURT_ARG_INT, .v.i = m->t},
                           {.kind = TPURT_ARG_INT_LIST, .count = 1, .v.ints = &seq}};
    tpurt_op_call_t call = {.name = "mt", .num_args = 2, .args = args};
    tpurt_status_t s = tpurt_queue_submit_kernel(m->q, &op_mt, &call);
    if (s) ++m->failures;
    tpurt_status_free(s);
  }
  return NULL;
}

static void test_multithread_submit(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  for (int t = 0; t < MT_THREADS; ++t) g_last_seen[t] = -1;
  pthread_t th[MT_THREADS];
  mt_arg_t ma[MT_THREADS];
  for (int t = 0; t < MT_THREADS; ++t) {
    ma[t] = (mt_arg_t){q, t, 0};
    pthread_create(&th[t], NULL, mt_main, &ma[t]);
  }
  int failures = 0;
  for (int t = 0; t < MT_THREADS; ++t) {
    pthread_join(th[t], NULL);
    failures += ma[t].failures;
  }
  CHECK_OK(tpurt_device_synchronize(g_dev));
  CHECK(failures == 0);
  CHECK(atomic_load(&g_mt_count) == MT_THREADS * MT_PER);
  CHECK(atomic_load(&g_mt_bad) == 0);
}

/* ---- many waiters on different points ----
 * The worker wakes sleepers only when the smallest point one of them needs is
 * reached (queue.c, waiter_enter): every waiter must still return, and only
 * once its own point is done, with more waiters than the registry's 8 slots. */
#define WAITERS 12
#define WAIT_STEPS 4
static _Atomic int g_slow_done;
static tpurt_status_t k_slow(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  struct timespec ts = {0, 300000};
  nanosleep(&ts, NULL);
  atomic_fetch_add(&g_slow_done, 1);
  return TPURT_OK;
}
static const tpurt_op_def_t op_slow = {"slow", k_slow, k_slow, 0};
typedef struct waiter_arg_t {
  tpurt_event_t* ev;
  int need, seen;
} waiter_arg_t;
static void* waiter_main(void* u) {
  waiter_arg_t* w = u;
  if (tpurt_event_synchronize(w->ev) == TPURT_OK) w->seen = atomic_load(&g_slow_done);
  return NULL;
}
static void test_many_waiters(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  CHECK_OK(tpurt_queue_synchronize(q));
  atomic_store(&g_slow_done, 0);
  tpurt_event_t* ev[WAITERS];
  waiter_arg_t wa[WAITERS];
  pthread_t th[WAITERS];
  for (int i = 0; i < WAITERS; ++i) {
    /* waiter i needs (WAITERS - i) * WAIT_STEPS kernels: the last recorded is waited on first */
    CHECK_OK(tpurt_event_create(g_dev, 0, &ev[i]));
    wa[i] = (waiter_arg_t){ev[i], 0, -1};
  }
  for (int k = 1, i = WAITERS - 1; k <= WAITERS * WAIT_STEPS; ++k) {
    tpurt_op_call_t call = {.name = "slow", .overload = ""};
    CHECK_OK(tpurt_queue_submit_kernel(q, &op_slow, &call));
    if (k % WAIT_STEPS == 0) {
      CHECK_OK(tpurt_event_record(ev[i], q));
      wa[i].need = k;
      --i;
    }
  }
  for (int i = 0; i < WAITERS; ++i) pthread_create(&th[i], NULL, waiter_main, &wa[i]);
  alarm(60); /* a lost wake-up hangs a waiter: SIGALRM then fails the suite instead */
  int early = 0, missing = 0;
  for (int i = 0; i < WAITERS; ++i) {
    pthread_join(th[i], NULL);
    missing += wa[i].seen < 0;
    early += wa[i].seen >= 0 && wa[i].seen < wa[i].need;
  }
  alarm(0);
  CHECK(missing == 0);
  CHECK(early == 0);
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK(atomic_load(&g_slow_done) == WAITERS * WAIT_STEPS);
  for (int i = 0; i < WAITERS; ++i) tpurt_event_release(ev[i]);
}

/* ---- copies and host functions ---- */
static tpurt_status_t host_fn_append(void* user) {
  int i = atomic_fetch_add(&g_order_n, 1);
  if (i < 4096) g_order[i] = (int64_t)(intptr_t)user;
  return TPURT_OK;
}

/* A host callback that fails (a collective whose peer died, say). */
static tpurt_status_t host_fn_fail(void* user) {
  host_fn_append(user);
  return TPURT_STATUS(UNAVAILABLE, "host callback %d failed", (int)(intptr_t)user);
}

static void test_copy_host_fn(void) {
  tpurt_queue_t* q = NULL;
  CHECK_OK(tpurt_queue_create(g_dev, 0, &q));
  CHECK(tpurt_queue_id(q) != 0 && tpurt_queue_device(q) == g_dev);
  size_t n = (size_t)9 << 20; /* big enough for the parallel copy path */
  uint8_t* host = malloc(n);
  uint8_t* back = malloc(n);
  for (size_t i = 0; i < n; ++i) host[i] = (uint8_t)(i * 7 + 3);
  void *a = NULL, *b = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, q, n, &a));
  CHECK_OK(tpurt_memory_allocate(g_dev, q, n, &b));
  CHECK_OK(tpurt_memcpy_h2d(g_dev, q, a, host, n));
  CHECK_OK(tpurt_queue_submit_copy(q, b, a, n));
  atomic_store(&g_order_n, 0);
  CHECK_OK(tpurt_queue_submit_host_fn(q, host_fn_append, (void*)(intptr_t)1));
  tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = 2};
  tpurt_op_call_t call = {.name = "append", .num_args = 1, .args = &arg};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_append, &call));
  CHECK_OK(tpurt_queue_submit_host_fn(q, host_fn_append, (void*)(intptr_t)3));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, q, back, b, n)); /* waits for the copy */
  CHECK(memcmp(host, back, n) == 0);
  CHECK(atomic_load(&g_order_n) == 3 && g_order[0] == 1 && g_order[1] == 2 && g_order[2] == 3);
  /* A host callback's error surfaces at the next sync like a kernel's (the
   * first one; everything queued still runs), and the queue goes on. */
  CHECK_OK(tpurt_queue_submit_host_fn(q, host_fn_fail, (void*)(intptr_t)4));
  CHECK_OK(tpurt_queue_submit_host_fn(q, host_fn_fail, (void*)(intptr_t)5));
  CHECK_OK(tpurt_queue_submit_host_fn(q, host_fn_append, (void*)(intptr_t)6));
  tpurt_status_t hs = tpurt_queue_synchronize(q);
  CHECK(tpurt_status_code(hs) == TPURT_STATUS_UNAVAILABLE && strstr(tpurt_status_message(hs), "callback 4") != NULL);
  tpurt_status_free(hs);
  CHECK(atomic_load(&g_order_n) == 6 && g_order[5] == 6);
  CHECK_OK(tpurt_queue_synchronize(q)); /* taken: the queue is clean again */
  /* Host pointers are refused where device memory is required. */
  CHECK_STATUS(tpurt_queue_submit_copy(q, b, host, 16), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_memcpy_h2d(g_dev, q, host, back, 16), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_memcpy_d2h(g_dev, q, back, host, 16), INVALID_ARGUMENT);
  tpurt_memory_free(g_dev, a);
  tpurt_memory_free(g_dev, b);
  tpurt_queue_release(q);
  free(host);
  free(back);
}

/* A small host-to-device copy behind queued work returns before that work
 * has run (its source is staged), and lands in order: a kernel queued before
 * it reads the old bytes, one after it the new. The gate keeps the queue busy
 * until the copy call has returned, so no timing decides it; a copy that
 * waited for the queue would find the gate shut and time out there. */
static atomic_int g_gate;
static tpurt_status_t host_fn_gate(void* user) {
  for (int i = 0; i < 5000 && !atomic_load(&g_gate); ++i) usleep(1000);
  return atomic_load(&g_gate) ? TPURT_OK : TPURT_STATUS(DEADLINE_EXCEEDED, "gate never opened");
}

static void test_staged_h2d(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  enum { N = 256 };
  uint32_t host[N], back[N], before[N];
  void *a = NULL, *b = NULL;
  CHECK_OK(tpurt_memory_allocate(g_dev, q, sizeof host, &a));
  CHECK_OK(tpurt_memory_allocate(g_dev, q, sizeof host, &b));
  for (int i = 0; i < N; ++i) host[i] = 7u * i;
  CHECK_OK(tpurt_memcpy_h2d(g_dev, q, a, host, sizeof host)); /* idle queue: the direct path */
  atomic_store(&g_gate, 0);
  CHECK_OK(tpurt_queue_submit_host_fn(q, host_fn_gate, NULL));
  CHECK_OK(tpurt_queue_submit_copy(q, b, a, sizeof host));    /* reads the old bytes */
  for (int i = 0; i < N; ++i) host[i] = 3u * i + 1;
  CHECK_OK(tpurt_memcpy_h2d(g_dev, q, a, host, sizeof host)); /* staged: returns with the gate shut */
  CHECK(!tpurt_queue_is_idle(q));
  memset(host, 0xff, sizeof host);                            /* the caller's buffer is free at once */
  atomic_store(&g_gate, 1);
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, q, before, b, sizeof before));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, q, back, a, sizeof back));
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += before[i] != 7u * i || back[i] != 3u * i + 1;
  CHECK(bad == 0);
  /* Debug mode copies at the call, as before (its guarded copy). */
  tpurt_exec_mode_set(TPURT_EXEC_DEBUG);
  for (int i = 0; i < N; ++i) host[i] = 5u * i;
  CHECK_OK(tpurt_memcpy_h2d(g_dev, q, a, host, sizeof host));
  CHECK_OK(tpurt_memcpy_d2h(g_dev, q, back, a, sizeof back));
  CHECK(memcmp(back, host, sizeof host) == 0);
  tpurt_exec_mode_set(TPURT_EXEC_STRICT);
  tpurt_memory_free(g_dev, a);
  tpurt_memory_free(g_dev, b);
}

/* ---- parallel_for ---- */
typedef struct pf_t {
  _Atomic uint8_t* hits;
  int nthreads;
  _Atomic int bad_tid;
  _Atomic int bad_chunk;
  int64_t grain;
  int64_t n;
} pf_t;

static void pf_body(void* user, int64_t begin, int64_t end, int tid) {
  pf_t* p = user;
  if (tid < 0 || tid >= p->nthreads) atomic_store(&p->bad_tid, 1);
  /* Every chunk holds >= grain elements unless it is the whole range. */
  if (end - begin < p->grain && !(begin == 0 && end == p->n)) atomic_store(&p->bad_chunk, 1);
  for (int64_t i = begin; i < end; ++i) atomic_fetch_add(&p->hits[i], 1);
}

static tpurt_status_t k_pf(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  pf_t* p = (pf_t*)(intptr_t)call->args[0].v.i;
  p->nthreads = tpurt_kernel_num_threads(ctx);
  tpurt_parallel_for(ctx, p->n, p->grain, pf_body, p);
  return TPURT_OK;
}
static const tpurt_op_def_t op_pf = {"pf", k_pf, k_pf, 0};

typedef struct pr_t {
  int64_t n;
  int64_t begin[64], end[64];
} pr_t;
static pr_t g_first_ranges;
static void pr_body(void* user, int64_t begin, int64_t end, int tid) {
  pr_t* p = user;
  if (tid < 64) p->begin[tid] = begin, p->end[tid] = end;
}
static tpurt_status_t k_pr(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  pr_t* p = (pr_t*)(intptr_t)call->args[0].v.i;
  tpurt_parallel_for(ctx, p->n, 16, pr_body, p);
  return TPURT_OK;
}
static const tpurt_op_def_t op_pr = {"pr", k_pr, k_pr, 0};

static void test_parallel_for(void) {
  static const int64_t ns[] = {0, 1, 2, 3, 7, 64, 1000, 4097, 100003};
  static const int64_t grains[] = {0, 1, 3, 16, 1000, 1 << 20};
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  int bad = 0;
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; ++i) {
    for (size_t g = 0; g < sizeof grains / sizeof grains[0]; ++g) {
      pf_t p = {.n = ns[i], .grain = grains[g]};
      p.hits = calloc((size_t)ns[i] + 1, 1);
      tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = (int64_t)(intptr_t)&p};
      tpurt_op_call_t call = {.name = "pf", .num_args = 1, .args = &arg};
      /* Both through a queue (worker is thread 0) and synchronously. */
      CHECK_OK(tpurt_queue_submit_kernel(q, &op_pf, &call));
      CHECK_OK(tpurt_queue_synchronize(q));
      CHECK_OK(tpurt_kernel_run(k_pf, &call));
      for (int64_t k = 0; k < ns[i]; ++k) bad += atomic_load(&p.hits[k]) != 2;
      bad += atomic_load(&p.bad_tid) + (grains[g] > 0 ? atomic_load(&p.bad_chunk) : 0);
      free((void*)p.hits);
    }
  }
  CHECK(bad == 0);
  /* The cut is a function of (n, grain, threads) alone: per-tid partial
   * results (reductions) are the same on every run, whoever runs a task. */
  int differ = 0;
  for (int rep = 0; rep < 20; ++rep) {
    pr_t pr = {.n = 100003};
    tpurt_arg_t arg = {.kind = TPURT_ARG_INT, .v.i = (int64_t)(intptr_t)&pr};
    tpurt_op_call_t call = {.name = "pr", .num_args = 1, .args = &arg};
    CHECK_OK(tpurt_queue_submit_kernel(q, &op_pr, &call));
    CHECK_OK(tpurt_queue_synchronize(q));
    if (rep == 0) g_first_ranges = pr;
    differ += memcmp(g_first_ranges.begin, pr.begin, sizeof pr.begin) != 0 ||
              memcmp(g_first_ranges.end, pr.end, sizeof pr.end) != 0;
  }
  CHECK(differ == 0);
  tpurt_device_info_t info;
  CHECK_OK(tpurt_device_query(g_dev, &info));
  CHECK(info.num_threads >= 1 && strcmp(info.name, "vtpu") == 0);
}

/* ---- a full ring, and records too big for it ---- */
static _Atomic int g_sum_bad;
static tpurt_status_t k_list(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  const tpurt_arg_t* a = &call->args[0];
  for (int32_t i = 0; i < a->count; ++i)
    if (a->v.tensors[i]->sizes[0] != i) atomic_store(&g_sum_bad, 1);
  return TPURT_OK;
}
static const tpurt_op_def_t op_list = {"cat", k_list, k_list, 0};

static tpurt_status_t k_block(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  while (!atomic_load(&g_gate)) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return TPURT_OK;
}
static const tpurt_op_def_t op_block = {"block", k_block, k_block, 0};

static void* fill_main(void* arg) {
  tpurt_queue_t* q = arg;
  for (int i = 0; i < 6000; ++i) {
    tpurt_arg_t a = {.kind = TPURT_ARG_INT, .v.i = i};
    tpurt_tensor_t t[2] = {{.ndim = 1, .sizes = {i}}, {.ndim = 1}};
    tpurt_op_call_t call = {.name = "append", .num_args = 1, .args = &a, .num_outputs = 2, .outputs = t};
    tpurt_status_free(tpurt_queue_submit_kernel(q, &op_append, &call));
  }
  return NULL;
}

static void test_full_ring_and_big_records(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  /* 6000 records of ~700 bytes do not fit the ring while the queue is held:
   * the submitter waits for room instead of failing or overwriting. */
  atomic_store(&g_order_n, 0);
  atomic_store(&g_gate, 0);
  tpurt_op_call_t gc = {.name = "block"};
  CHECK_OK(tpurt_queue_submit_kernel(q, &op_block, &gc));
  pthread_t th;
  pthread_create(&th, NULL, fill_main, q);
  struct timespec ts = {0, 20000000};
  nanosleep(&ts, NULL);
  CHECK(atomic_load(&g_order_n) == 0);
  atomic_store(&g_gate, 1);
  pthread_join(th, NULL);
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK(atomic_load(&g_order_n) == 6000);
  int bad = 0;
  for (int i = 0; i < 4096; ++i) bad += g_order[i] != i;
  CHECK(bad == 0);
  /* A record larger than a quarter of the ring goes to a separate buffer. */
  enum { N = 3000 };
  tpurt_tensor_t* ts_ = calloc(N, sizeof(tpurt_tensor_t));
  const tpurt_tensor_t** tl = calloc(N, sizeof(void*));
  for (int i = 0; i < N; ++i) {
    ts_[i].ndim = 1;
    ts_[i].sizes[0] = i;
    tl[i] = &ts_[i];
  }
  tpurt_arg_t a = {.kind = TPURT_ARG_TENSOR_LIST, .count = N, .v.tensors = tl};
  tpurt_op_call_t call = {.name = "cat", .num_args = 1, .args = &a};
  for (int r = 0; r < 3; ++r) CHECK_OK(tpurt_queue_submit_kernel(q, &op_list, &call));
  memset(ts_, 0, N * sizeof(tpurt_tensor_t));
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK(atomic_load(&g_sum_bad) == 0);
  free(ts_);
  free(tl);
}

/* ---- fork ---- */
static void test_fork_child(void) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    /* The child shares the parent's HBM mapping but has no queue threads. */
    int bad = 0;
    void* p = NULL;
    tpurt_status_t s = tpurt_memory_allocate(g_dev, NULL, 64, &p);
    bad += tpurt_status_code(s) != TPURT_STATUS_FAILED_PRECONDITION;
    tpurt_status_free(s);
    tpurt_op_call_t call = {.name = "empty"};
    s = tpurt_queue_submit_kernel(tpurt_device_default_queue(g_dev), &op_mark, &call);
    bad += tpurt_status_code(s) != TPURT_STATUS_FAILED_PRECONDITION;
    tpurt_status_free(s);
    s = tpurt_init();
    bad += tpurt_status_code(s) != TPURT_STATUS_FAILED_PRECONDITION;
    tpurt_status_free(s);
    _exit(bad);
  }
  int st = -1;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK_OK(tpurt_init()); /* the parent is unaffected */
}

/* ---- latency (printed only) ---- */
static tpurt_status_t k_empty(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) { return TPURT_OK; }
static const tpurt_op_def_t op_empty = {"empty", k_empty, k_empty, 0};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_latency(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  tpurt_tensor_t t = {.dtype = TPURT_DTYPE_FLOAT32, .ndim = 2, .sizes = {4, 4}, .strides = {4, 1}};
  tpurt_arg_t args[3] = {{.kind = TPURT_ARG_TENSOR, .v.tensor = &t},
                         {.kind = TPURT_ARG_TENSOR, .v.tensor = &t},
                         {.kind = TPURT_ARG_INT, .v.i = 1}};
  tpurt_op_call_t call = {.name = "add", .overload = "Tensor", .num_args = 3, .args = args,
                          .num_outputs = 1, .outputs = &t};
  const int n = 20000;
  CHECK_OK(tpurt_queue_synchronize(q));
  double t0 = now_s();
  for (int i = 0; i < n; ++i) tpurt_status_free(tpurt_queue_submit_kernel(q, &op_empty, &call));
  double t1 = now_s();
  CHECK_OK(tpurt_queue_synchronize(q));
  double t2 = now_s();
  /* One op at a time: submit then wait, the worst case (no pipelining). */
  const int m = 2000;
  for (int i = 0; i < m; ++i) {
    tpurt_status_free(tpurt_queue_submit_kernel(q, &op_empty, &call));
    tpurt_status_free(tpurt_queue_synchronize(q));
  }
  double t3 = now_s();
  printf("latency: submit %.0f ns/op, submit+execute (pipelined) %.0f ns/op, "
         "submit+sync round trip %.0f ns/op\n",
         (t1 - t0) * 1e9 / n, (t2 - t0) * 1e9 / n, (t3 - t2) * 1e9 / m);
}

int main(void) {
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  CHECK(tpurt_device_count() >= 1);
  CHECK_STATUS(tpurt_device_get(99, &(tpurt_device_t*){NULL}), INVALID_ARGUMENT);
  if (!g_dev) return test_finish("test_queue");
  test_ordering();
  test_async_deep_copy();
  test_errors();
  test_debug_mode();
  test_multithread_submit();
  test_many_waiters();
  test_copy_host_fn();
  test_staged_h2d();
  test_parallel_for();
  test_full_ring_and_big_records();
  test_fork_child();
  test_latency();
  return test_finish("test_queue");
}
