/* tpurt device activity trace: what the device ran, when, on which queue,
 * and which host call issued it, for PyTorch's profiler (torch_tpu/csrc's
 * Kineto plugin turns these events into torch.profiler's device track).
 * Off by default; while off, the runtime pays one predictable branch per
 * command. The events live in one process-wide buffer until taken. */
#ifndef TPURT_TRACE_H_
#define TPURT_TRACE_H_

#include "tpurt/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpurt_trace_kind_e {
  /* Host side: an op handed to a queue (Strict: queued; DeferAndFuse:
   * recorded; Debug: run now). `id` links it to the device event(s) it
   * caused; `corr` is the issuing thread's correlation id at that moment
   * (tpurt_trace_set_correlation), `tid` its thread; flops/bytes: the cost
   * model's (ops/cost.c) for the call. */
  TPURT_TRACE_LAUNCH = 1,
  /* Device side: one kernel, from its start to its end on the device. */
  TPURT_TRACE_KERNEL,
  /* Device side: a DeferAndFuse chain run as one kernel; `name` lists the
   * ops it fused, flops/bytes are the chain's as fused (intermediates not
   * written are not counted); `id` is its first op's. */
  TPURT_TRACE_FUSED,
  /* Device side: a device-to-device copy. */
  TPURT_TRACE_COPY,
  /* Device side: host code run on the queue's timeline (a callback). */
  TPURT_TRACE_CALL,
} tpurt_trace_kind_t;

enum {
  /* The work is matrix products (the matmul family, convolutions): on a TPU
   * it runs on the MXU (exec/project.c costs it at the MXU's peak). */
  TPURT_TRACE_F_MATMUL = 1u << 0,
};

typedef struct tpurt_trace_event_t {
  uint32_t kind;     /* tpurt_trace_kind_t */
  int32_t device;    /* chip index */
  uint64_t queue;    /* queue id (0: the default queue) */
  uint64_t id;       /* launch <-> device event link; 0: none */
  uint64_t corr;     /* LAUNCH: the issuer's correlation id (0: none) */
  uint64_t tid;      /* LAUNCH: the issuing host thread (kernel thread id) */
  uint64_t start_ns; /* CLOCK_MONOTONIC */
  uint64_t end_ns;
  double flops;      /* LAUNCH, FUSED: floating-point (or integer) operations */
  double bytes;      /* LAUNCH, FUSED, COPY: device memory read + written */
  int32_t dtype;     /* LAUNCH, FUSED: the dtype it computes in (tpurt_dtype_t), -1: none */
  uint32_t flags;    /* TPURT_TRACE_F_* */
  char name[104];    /* "mm", "add.Tensor", "fused: sub+mul+mean"; cut to fit */
} tpurt_trace_event_t;

/* Starts (clears what was kept) or stops recording. */
TPURT_API void tpurt_trace_enable(bool on);
TPURT_API bool tpurt_trace_enabled(void);
/* The correlation id the calling thread's next launches carry (PyTorch's
 * profiler pushes one per op; 0: none). */
TPURT_API void tpurt_trace_set_correlation(uint64_t id);
TPURT_API uint64_t tpurt_trace_correlation(void);
/* Moves up to `cap` kept events into out (oldest first) and returns how many. */
TPURT_API size_t tpurt_trace_take(tpurt_trace_event_t* out, size_t cap);
/* Events kept now, and events dropped because the buffer was full. */
TPURT_API size_t tpurt_trace_count(void);
TPURT_API uint64_t tpurt_trace_dropped(void);
/* Nanoseconds the device spent running commands (all queues, all chips)
 * since recording started: what the device events should add up to. */
TPURT_API uint64_t tpurt_trace_busy_ns(void);
/* The trace clock (CLOCK_MONOTONIC, ns) now. */
TPURT_API uint64_t tpurt_trace_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_TRACE_H_ */
