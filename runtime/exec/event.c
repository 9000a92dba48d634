/* Events: a point in a queue (everything submitted before the record), with
 * an optional timestamp stamped by the queue's worker when it gets there. */
#include <stdlib.h>

#include "exec/exec_internal.h"

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

void tpurt_event_retain_internal(tpurt_event_t* e) { atomic_fetch_add(&e->refcount, 1); }

void tpurt_event_release(tpurt_event_t* e) {
  if (!e || atomic_fetch_sub(&e->refcount, 1) != 1) return;
  tpurt_queue_release(e->queue);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

tpurt_status_t tpurt_event_record(tpurt_event_t* e, tpurt_queue_t* q) {
  if (!e) return TPURT_STATUS(INVALID_ARGUMENT, "event_record: NULL event");
  if (!q) q = tpurt_device_default_queue(e->device);
  if (!q || q->device != e->device)
    return TPURT_STATUS(INVALID_ARGUMENT, "event_record: queue is not on the event's device");
  return tpurt_queue_push_record(q, e);
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
  tpurt_status_t s = TPURT_OK;
  /* Never recorded, already reached, or the same in-order queue: no wait. */
  if (src && src != q && !tpurt_queue_point_reached(src, point))
    s = tpurt_queue_push_wait(q, src, point);
  tpurt_queue_release(src);
  return s;
}

tpurt_status_t tpurt_event_synchronize(tpurt_event_t* e) {
  if (!e) return TPURT_STATUS(INVALID_ARGUMENT, "event_synchronize: NULL event");
  uint64_t point;
  tpurt_queue_t* q = event_snapshot(e, &point);
  if (q) {
    if (tpurt_queue_current() == q && !tpurt_queue_point_reached(q, point)) {
      tpurt_queue_release(q);
      return TPURT_STATUS(FAILED_PRECONDITION,
                          "event_synchronize from the recording queue's own thread");
    }
    tpurt_queue_wait_point(q, point);
  }
  tpurt_queue_release(q);
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
