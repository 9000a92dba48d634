/* Internal to exec/: events (a point in a queue, with a timestamp the queue
 * stamps when it gets there). Not an ABI. */
#ifndef TPURT_EXEC_EVENT_H_
#define TPURT_EXEC_EVENT_H_

#include "exec/queue.h"

struct tpurt_event_t {
  tpurt_device_t* device;
  uint32_t flags;
  _Atomic int refcount;
  pthread_mutex_t lock;
  tpurt_queue_t* queue; /* last recorded on (retained), or NULL */
  uint64_t point;
  _Atomic uint64_t time_ns; /* stamped when the point is reached */
};

#endif /* TPURT_EXEC_EVENT_H_ */
