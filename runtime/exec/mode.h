/* Internal to exec/: the eager modes. Each mode lives in a room of its own
 * (exec/strict, exec/debug, exec/defer) and is one table of hooks; the queue,
 * the allocator and the host copies call the current mode's hooks instead of
 * switching on the mode. mode.c keeps the table of modes and switches
 * between them. Not an ABI. */
#ifndef TPURT_EXEC_MODE_H_
#define TPURT_EXEC_MODE_H_

#include "exec/allocator.h"
#include "exec/queue.h"

typedef struct tpurt_exec_mode_ops_t {
  tpurt_exec_mode_t id;
  const char* name;
  /* A validated kernel call on q: queue it (Strict), run it now (Debug) or
   * record it (DeferAndFuse). */
  tpurt_status_t (*submit_kernel)(tpurt_queue_t* q, const tpurt_op_def_t* op, const tpurt_op_call_t* call);
  /* A device-to-device copy inside HBM (validated), bytes > 0. */
  tpurt_status_t (*submit_copy)(tpurt_queue_t* q, void* dst, const void* src, size_t bytes);
  /* Optional (NULL: memcpy): a host<->device copy, the queue already idle;
   * dev_ptr is the device side. */
  tpurt_status_t (*host_copy)(void* dst, const void* src, size_t bytes, const void* dev_ptr);
  /* Optional: checked at every sync point after the queue's own error. */
  tpurt_status_t (*sync_check)(void);
  /* Optional: entering / leaving the mode (under the switch lock, with no
   * hook of any mode running on another thread and every chip idle). */
  void (*enter)(void);
  void (*leave)(void);
  /* Optional: blocks the mode made that the pools do not know (they may
   * outlive the mode): free one (true when it was the mode's), or tell
   * whether it is a live one. */
  bool (*foreign_free)(tpurt_device_t* device, void* ptr);
  bool (*foreign_live)(tpurt_device_t* device, void* ptr);
  tpurt_allocator_hooks_t alloc;
} tpurt_exec_mode_ops_t;

extern const tpurt_exec_mode_ops_t tpurt_exec_strict;
extern const tpurt_exec_mode_ops_t tpurt_exec_debug;
extern const tpurt_exec_mode_ops_t tpurt_exec_defer;

/* The current mode's hooks (never NULL), for uses a mode change cannot
 * harm (which mode a sync point checks). A call into a mode's hooks holds
 * the mode instead: */
const tpurt_exec_mode_ops_t* tpurt_exec_mode_ops(void);
/* The current mode, held: no switch completes until the matching
 * tpurt_exec_mode_release (a switch waits for every holder, then for the
 * chips to be idle, before it leaves the old mode). Cheap (a per-thread
 * counter); nests; never fails. Hold it around one call of a hook and what
 * must see the same mode (mode.c explains the gate). */
const tpurt_exec_mode_ops_t* tpurt_exec_mode_hold(void);
void tpurt_exec_mode_release(void);
/* Reads TPU_LAUNCH_BLOCKING once (tpurt_init calls it first thing). */
void tpurt_exec_mode_init(void);

#endif /* TPURT_EXEC_MODE_H_ */
