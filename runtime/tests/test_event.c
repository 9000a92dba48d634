/* Events: query/synchronize, elapsed time, cross-queue waits, re-recording,
 * release while a record is still queued, and argument errors. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

static tpurt_device_t* g_dev;
static _Atomic int g_gate;
static _Atomic int g_produced;
static _Atomic int g_consumer_saw;

static tpurt_status_t k_gate(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  while (!atomic_load(&g_gate)) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return TPURT_OK;
}
static tpurt_status_t k_produce(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  atomic_store(&g_produced, 1);
  return TPURT_OK;
}
static tpurt_status_t k_consume(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  atomic_store(&g_consumer_saw, atomic_load(&g_produced) ? 1 : 2);
  return TPURT_OK;
}
static tpurt_status_t k_sleep(tpurt_kernel_ctx_t* ctx, const tpurt_op_call_t* call) {
  struct timespec ts = {0, 3000000}; /* 3 ms */
  nanosleep(&ts, NULL);
  return TPURT_OK;
}
static const tpurt_op_def_t op_gate = {"gate", k_gate, k_gate, 0};
static const tpurt_op_def_t op_produce = {"produce", k_produce, k_produce, 0};
static const tpurt_op_def_t op_consume = {"consume", k_consume, k_consume, 0};
static const tpurt_op_def_t op_sleep = {"sleep", k_sleep, k_sleep, 0};

static void submit(tpurt_queue_t* q, const tpurt_op_def_t* op) {
  tpurt_op_call_t call = {.name = op->name};
  CHECK_OK(tpurt_queue_submit_kernel(q, op, &call));
}

static void test_query_sync(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  tpurt_event_t* e = NULL;
  CHECK_OK(tpurt_event_create(g_dev, 0, &e));
  CHECK(tpurt_event_query(e)); /* never recorded: reached */
  CHECK_OK(tpurt_event_synchronize(e));
  atomic_store(&g_gate, 0);
  submit(q, &op_gate);
  CHECK_OK(tpurt_event_record(e, q));
  CHECK(!tpurt_event_query(e));
  atomic_store(&g_gate, 1);
  CHECK_OK(tpurt_event_synchronize(e));
  CHECK(tpurt_event_query(e));
  /* NULL queue = the default queue. */
  CHECK_OK(tpurt_event_record(e, NULL));
  CHECK_OK(tpurt_event_synchronize(e));
  /* Without timing, a record on an idle queue is reached at once: it queues
   * nothing for the queue's thread to run. */
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK_OK(tpurt_event_record(e, q));
  CHECK(tpurt_event_query(e));
  tpurt_event_release(e);
}

static void test_elapsed(void) {
  tpurt_queue_t* q = tpurt_device_default_queue(g_dev);
  tpurt_event_t *a, *b, *plain;
  CHECK_OK(tpurt_event_create(g_dev, TPURT_EVENT_TIMING, &a));
  CHECK_OK(tpurt_event_create(g_dev, TPURT_EVENT_TIMING, &b));
  CHECK_OK(tpurt_event_create(g_dev, 0, &plain));
  float ms = -1;
  CHECK_STATUS(tpurt_event_elapsed_ms(a, b, &ms), FAILED_PRECONDITION); /* not recorded */
  CHECK_OK(tpurt_event_record(a, q));
  submit(q, &op_sleep);
  CHECK_OK(tpurt_event_record(b, q));
  CHECK_OK(tpurt_event_synchronize(b));
  CHECK_OK(tpurt_event_elapsed_ms(a, b, &ms));
  /* The kernel slept 3 ms between the two points (a lower bound only). */
  CHECK(isfinite(ms) && ms >= 3.0f);
  CHECK_OK(tpurt_event_record(plain, q));
  CHECK_OK(tpurt_event_synchronize(plain));
  CHECK_STATUS(tpurt_event_elapsed_ms(a, plain, &ms), INVALID_ARGUMENT);
  /* Not reached yet. */
  atomic_store(&g_gate, 0);
  submit(q, &op_gate);
  CHECK_OK(tpurt_event_record(b, q));
  CHECK_STATUS(tpurt_event_elapsed_ms(a, b, &ms), FAILED_PRECONDITION);
  atomic_store(&g_gate, 1);
  CHECK_OK(tpurt_queue_synchronize(q));
  CHECK_OK(tpurt_event_elapsed_ms(a, b, &ms));
  CHECK(ms >= 3.0f);
  CHECK_STATUS(tpurt_event_elapsed_ms(a, NULL, &ms), INVALID_ARGUMENT);
  tpurt_event_release(a);
  tpurt_event_release(b);
  tpurt_event_release(plain);
}

static void test_cross_queue(void) {
  tpurt_queue_t *q1 = NULL, *q2 = NULL;
  CHECK_OK(tpurt_queue_create(g_dev, 0, &q1));
  CHECK_OK(tpurt_queue_create(g_dev, 0, &q2));
  tpurt_event_t* e = NULL;
  CHECK_OK(tpurt_event_create(g_dev, 0, &e));
  atomic_store(&g_gate, 0);
  atomic_store(&g_produced, 0);
  atomic_store(&g_consumer_saw, 0);
  submit(q1, &op_gate);
  submit(q1, &op_produce);
  CHECK_OK(tpurt_event_record(e, q1));
  CHECK_OK(tpurt_queue_wait_event(q2, e));
  submit(q2, &op_consume);
  /* q2 is held back by q1's gate. */
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
  CHECK(atomic_load(&g_consumer_saw) == 0);
  CHECK(!tpurt_queue_is_idle(q2));
  /* The event may be re-recorded or released at once: the wait kept its point. */
  tpurt_event_release(e);
  atomic_store(&g_gate, 1);
  CHECK_OK(tpurt_queue_synchronize(q2));
  CHECK(atomic_load(&g_consumer_saw) == 1);
  /* Waiting on an unrecorded event or on the same queue does nothing. */
  CHECK_OK(tpurt_event_create(g_dev, 0, &e));
  CHECK_OK(tpurt_queue_wait_event(q2, e));
  CHECK_OK(tpurt_event_record(e, q2));
  CHECK_OK(tpurt_queue_wait_event(q2, e));
  CHECK_OK(tpurt_queue_synchronize(q2));
  /* Re-record on another queue. */
  atomic_store(&g_gate, 0);
  submit(q1, &op_gate);
  CHECK_OK(tpurt_event_record(e, q1));
  CHECK(!tpurt_event_query(e));
  atomic_store(&g_gate, 1);
  CHECK_OK(tpurt_event_synchronize(e));
  CHECK(tpurt_event_query(e));
  /* Released while its record is still queued. */
  atomic_store(&g_gate, 0);
  submit(q1, &op_gate);
  CHECK_OK(tpurt_event_record(e, q1));
  tpurt_event_release(e);
  /* The event holds its queue: releasing the queue first is fine too. */
  tpurt_event_t* e2 = NULL;
  CHECK_OK(tpurt_event_create(g_dev, TPURT_EVENT_TIMING, &e2));
  CHECK_OK(tpurt_event_record(e2, q2));
  tpurt_queue_release(q2);
  CHECK_OK(tpurt_event_synchronize(e2));
  tpurt_event_release(e2);
  atomic_store(&g_gate, 1);
  CHECK_OK(tpurt_device_synchronize(g_dev));
  tpurt_queue_release(q1);

  /* The last reference to a queue dropped by its own worker: a queued record
   * holds the only reference to an event that holds the only one to q3.
   * (A timing event: only its record is a queued command.) */
  tpurt_queue_t* q3 = NULL;
  tpurt_event_t* e3 = NULL;
  CHECK_OK(tpurt_queue_create(g_dev, 0, &q3));
  CHECK_OK(tpurt_event_create(g_dev, TPURT_EVENT_TIMING, &e3));
  atomic_store(&g_gate, 0);
  submit(q3, &op_gate);
  CHECK_OK(tpurt_event_record(e3, q3));
  atomic_store(&g_produced, 0);
  submit(q3, &op_produce);
  tpurt_queue_release(q3);
  tpurt_event_release(e3);
  atomic_store(&g_gate, 1);
  for (int i = 0; i < 2000 && !atomic_load(&g_produced); ++i) nanosleep(&ts, NULL);
  CHECK(atomic_load(&g_produced) == 1); /* work queued after the record still ran */
  nanosleep(&ts, NULL);                 /* let the worker free the queue before exit */
  nanosleep(&ts, NULL);
}

static void test_errors(void) {
  tpurt_event_t* e = NULL;
  CHECK_STATUS(tpurt_event_create(NULL, 0, &e), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_event_create(g_dev, 0x80, &e), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_event_record(NULL, NULL), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_event_synchronize(NULL), INVALID_ARGUMENT);
  CHECK_STATUS(tpurt_queue_wait_event(NULL, NULL), INVALID_ARGUMENT);
  CHECK(tpurt_event_query(NULL));
  tpurt_event_release(NULL);
}

int main(void) {
  CHECK_OK(tpurt_init());
  CHECK_OK(tpurt_device_get(0, &g_dev));
  if (!g_dev) return test_finish("test_event");
  test_query_sync();
  test_elapsed();
  test_cross_queue();
  test_errors();
  return test_finish("test_event");
}
