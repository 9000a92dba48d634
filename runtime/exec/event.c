/* Events: a point in a queue (everything submitted before the record), with
 * an optional timestamp the queue stamps when it gets there (a HAL SIGNAL
 * command; an event without timing queues nothing). */
#include <stdlib.h>

#include "exec/event.h"

tpurt_status_t tpurt_event_create(tpurt_device_t* device, uint32_t flags, tpurt_event_t** out_event) {
  if (!out_event) return TPURT_STATUS(INVALID_ARGUMENT, "event_create: NULL out_event");
  *out_event = NULL;
  if (!device) return TPURT_STATUS(INVALID_ARGUMENT, "event_create: NULL device");
  if (flags & ~(uint32_t)TPURT_EVENT_TIMING)
    return TPURT_STATUS(INVALID_ARGUMENT, "event_create: unknown flags 0x%x", flags);
  tpurt_event_t* e = calloc(1, sizeof(*e));
  if (!e) return TPURT_STATUS(RESOURCE_EXHAUSTED, "out of host memory creating an event");
  e->device = device;
  e->flags = flags;
  atomic_init(&e->refcount, 1);
  pthread_mutex_init(&e->lock, NULL);
  *out_event = e;
  return TPURT_OK;
}

void tpurt_event_release(tpurt_event_t* e) {
  if (!e || atomic_fetch_sub(&e->refcount, 1) != 1) return;
  tpurt_queue_release(e->queue);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

/* On the queue's thread when the record is reached: stamps the time, unless
 * the event has been recorded again since. */
static void event_reached(void* user, tpurt_hal_queue_t* hal, uint64_t value, uint64_t time_ns) {
  tpurt_event_t* e = user;
  pthread_mutex_lock(&e->lock);
  if (e->queue && e->queue->hal == hal && e->point == value && (e->flags & TPURT_EVENT_TIMING))
    atomic_store(&e->time_ns, time_ns);
  pthread_mutex_unlock(&e->lock);
}

static void event_release_cb(void* user) { tpurt_event_release(user); }

tpurt_status_t tpurt_event_record(tpurt_event_t* e, tpurt_queue_t* q) {
  if (!e) return TPURT_STATUS(INVALID_ARGUMENT, "event_record: NULL event");
  if (!q) q = tpurt_device_default_queue(e->device);
  if (!q || q->device != e->device)
    return TPURT_STATUS(INVALID_ARGUMENT, "event_record: queue is not on the event's device");
  TPURT_RETURN_IF_FORKED();
  pthread_mutex_lock(&q->submit_lock);
  if (!(e->flags & TPURT_EVENT_TIMING) && TPURT_LIKELY(q->capture == NULL)) {
    /* Without a timestamp an event is only a point of the queue's timeline
     * (everything submitted so far): nothing to queue, so recording one
     * never wakes the queue's thread. (A capture refuses it below.) */
    tpurt_queue_retain(q); /* held by the event */
    uint64_t point = tpurt_queue_next_point_locked(q) - 1; /* pending work flushed */
    pthread_mutex_lock(&e->lock);
    tpurt_queue_t* old = e->queue;
    e->queue = q;
    e->point = point;
    pthread_mutex_unlock(&e->lock);
    pthread_mutex_unlock(&q->submit_lock);
    tpurt_queue_release(old);
    return TPURT_OK;
  }
  atomic_fetch_add(&e->refcount, 1); /* held by the command */
  tpurt_queue_retain(q);               /* held by the event */
  tpurt_hal_command_t cmd = {.kind = TPURT_HAL_COMMAND_SIGNAL, .u.signal = {event_reached, e},
                             .done = event_release_cb, .done_user = e};
  /* The event points at the command before the queue can reach it (the
   * queue's thread takes event->lock to stamp it; not held while submitting,
   * which may wait for the queue to make room). */
  uint64_t point = tpurt_queue_next_point_locked(q);
  pthread_mutex_lock(&e->lock);
  tpurt_queue_t* old = e->queue;
  e->queue = q;
  e->point = point;
  atomic_store(&e->time_ns, 0);
  pthread_mutex_unlock(&e->lock);
  tpurt_status_t s = tpurt_queue_submit_locked(q, &cmd, NULL); /* takes `point`: nothing is pending now */
  pthread_mutex_unlock(&q->submit_lock);
  tpurt_queue_release(old);
  if (s) tpurt_event_release(e);
  return s;
}

/* Snapshot of where the event was last recorded (retained queue or NULL). */
static tpurt_queue_t* event_snapshot(tpurt_event_t* e, uint64_t* out_point) {
  pthread_mutex_lock(&e->lock);
  tpurt_queue_t* q = e->queue;
  *out_point = e->point;
  tpurt_queue_retain(q);
  pthread_mutex_unlock(&e->lock);
  return q;
}

tpurt_status_t tpurt_queue_wait_event(tpurt_queue_t* q, tpurt_event_t* e) {
  if (!q || !e) return TPURT_STATUS(INVALID_ARGUMENT, "queue_wait_event: NULL queue or event");
  uint64_t point;
  tpurt_queue_t* src = event_snapshot(e, &point);
  /* Never recorded: no wait. */
  tpurt_status_t s = src ? tpurt_queue_wait_queue_point(q, src, point) : TPURT_OK;
  tpurt_queue_release(src);
  return s;
}

tpurt_status_t tpurt_event_synchronize(tpurt_event_t* e) {
  if (!e) return TPURT_STATUS(INVALID_ARGUMENT, "event_synchronize: NULL event");
  uint64_t point;
  tpurt_queue_t* q = event_snapshot(e, &point);
  if (q) {
    if (tpurt_queue_is_current(q) && !tpurt_queue_point_reached(q, point)) {
      tpurt_queue_release(q);
      return TPURT_STATUS(FAILED_PRECONDITION,
                          "event_synchronize from the recording queue's own thread");
    }
    tpurt_status_t s = tpurt_queue_wait_point_interruptible(q, point);
    tpurt_queue_release(q);
    return s;
  }
  return TPURT_OK;
}

bool tpurt_event_query(tpurt_event_t* e) {
  if (!e) return true;
  uint64_t point;
  tpurt_queue_t* q = event_snapshot(e, &point);
  bool reached = !q || tpurt_queue_point_reached(q, point);
  tpurt_queue_release(q);
  return reached;
}

tpurt_status_t tpurt_event_elapsed_ms(tpurt_event_t* start, tpurt_event_t* end, float* out_ms) {
  if (!start || !end || !out_ms)
    return TPURT_STATUS(INVALID_ARGUMENT, "event_elapsed_ms: NULL argument");
  if (!(start->flags & TPURT_EVENT_TIMING) || !(end->flags & TPURT_EVENT_TIMING))
    return TPURT_STATUS(INVALID_ARGUMENT,
                        "event_elapsed_ms: both events must be created with TPURT_EVENT_TIMING");
  tpurt_event_t* evs[2] = {start, end};
  uint64_t t[2];
  for (int i = 0; i < 2; ++i) {
    uint64_t point;
    tpurt_queue_t* q = event_snapshot(evs[i], &point);
    bool reached = q && tpurt_queue_point_reached(q, point);
    tpurt_queue_release(q);
    if (!q)
      return TPURT_STATUS(FAILED_PRECONDITION, "event_elapsed_ms: %s event was never recorded",
                          i ? "end" : "start");
    if (!reached)
      return TPURT_STATUS(FAILED_PRECONDITION, "event_elapsed_ms: %s event has not completed yet",
                          i ? "end" : "start");
    t[i] = atomic_load(&evs[i]->time_ns);
  }
  *out_ms = (float)(((double)t[1] - (double)t[0]) / 1e6);
  return TPURT_OK;
}
