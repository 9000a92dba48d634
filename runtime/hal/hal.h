/* The device HAL: the interface a chip driver implements, so that nothing
 * above it (exec/: queues' front layer, the caching allocator, the eager
 * modes; compiler/) depends on how a chip is provided. Drivers live in
 * hal/drivers/<name>/ (vtpu: a chip emulated on host cores; null: the
 * template, UNIMPLEMENTED everywhere, that must keep compiling).
 *
 * What a driver provides, as IREE's hal/device.h does:
 *  - a device: its memory (HBM: allocate, free, protect) and properties;
 *  - queues: in-order command streams that run asynchronously to the host.
 *    Each command carries the timeline value its queue reaches when the
 *    command is done (strictly increasing per queue; the caller picks them,
 *    as IREE's semaphore values are picked), so a point of a queue is a
 *    value, and waiting for a point is waiting for the value;
 *  - commands: dispatch a kernel, copy device memory, call host code on the
 *    queue's timeline (its status is the queue's, like a kernel's), signal
 *    an event (a timestamp when the queue gets there), wait for another
 *    queue's value;
 *  - executables: code the device runs, loaded from a verified descriptor
 *    (a generated kernel, a compiled program), looked up by entry name. The
 *    op table (ops/) is the built-in executable: its kernels are dispatched
 *    by their op definition;
 *  - synchronous dispatch: a kernel run now, on the calling thread with the
 *    chip's compute threads (Debug mode, tests).
 *
 * Front layer validates, drivers implement: exec/ checks arguments before it
 * calls a slot. Internal header: the only promise is the struct_size/version
 * check in hal.c. */
#ifndef TPURT_HAL_HAL_H_
#define TPURT_HAL_HAL_H_

#include "hal/kernel_ctx.h"
#include "tpurt/kernel.h"

#define TPURT_HAL_VERSION 3u

typedef struct tpurt_hal_device_t tpurt_hal_device_t;         /* owned by its driver */
typedef struct tpurt_hal_queue_t tpurt_hal_queue_t;           /* owned by its device */
typedef struct tpurt_hal_executable_t tpurt_hal_executable_t; /* owned by its device */

typedef struct tpurt_hal_device_params_t {
  int index;           /* chip index within this process */
  uint64_t hbm_bytes;  /* device memory capacity to provide */
  int num_threads;     /* compute threads (the vTPU's cores) */
  /* The host CPU each compute thread keeps to (num_threads entries: cpus[0] for the default queue's
   * worker, which leads most kernels, cpus[t] for the pool's thread t; other queues' workers keep to
   * all of them), or NULL: the host's scheduler places them. Copied. */
  const int* cpus;
} tpurt_hal_device_params_t;

typedef struct tpurt_hal_device_props_t {
  char name[32];       /* "vtpu" */
  void* hbm_base;      /* host-visible base of device memory (vtpu), or NULL */
  uint64_t hbm_bytes;  /* capacity */
  int hbm_fd;          /* shareable handle to device memory (memfd), or -1 */
  int num_threads;     /* compute threads kernels split over */
} tpurt_hal_device_props_t;

/* ---- commands ---- */

typedef enum tpurt_hal_command_kind_e {
  /* fn(ctx, call): a kernel. `call` (args, lists, strings, tensor descriptors)
   * is copied at submit, so the caller's may go away at once. */
  TPURT_HAL_COMMAND_DISPATCH = 1,
  /* Device-to-device copy of `bytes` (the ranges may overlap). */
  TPURT_HAL_COMMAND_COPY,
  /* Host code on the queue's timeline: fn(user, ctx) with the chip's compute
   * context (it may run kernels itself through ctx: DeferAndFuse's planned
   * graph does), or host_fn(user). An error it returns is kept like a
   * kernel's (a failing collective or host callback surfaces at the next sync). */
  TPURT_HAL_COMMAND_CALL,
  /* reached(user, queue, value, time_ns) when the queue gets here (an event's
   * timestamp). */
  TPURT_HAL_COMMAND_SIGNAL,
  /* Nothing after this runs until `queue` has reached `value`. */
  TPURT_HAL_COMMAND_WAIT,
} tpurt_hal_command_kind_t;

typedef struct tpurt_hal_command_t {
  uint32_t kind;  /* tpurt_hal_command_kind_t */
  uint64_t value; /* the queue's timeline value once this command is done */
  /* Who issued it (the thread's token, base/thread.h; 0: anyone): the
   * queue keeps a command's error for its issuer (queue_take_error). */
  uint64_t issuer;
  /* While the queue is full, queue_submit waits for room; with this set it
   * gives up (CANCELLED, the status tpurt_host_interrupted gives) when the
   * host interrupts, and the command is not taken. */
  bool interruptible;
  /* While tracing (hal/trace.h): the launch id of the op it runs (0: none),
   * which the driver puts on the command's device event. */
  uint64_t trace_id;
  union {
    struct {
      tpurt_kernel_fn_t fn;
      const tpurt_op_call_t* call;
      uint32_t op_flags; /* the op's TPURT_OP_* flags (poison rules) */
    } dispatch;
    struct {
      void* dst;
      const void* src;
      size_t bytes;
      /* src is host memory (a staged host-to-device write that the command's
       * done callback frees), not device memory: no poison to check there,
       * and a driver with its own memory copies it across the bus. */
      bool from_host;
    } copy;
    struct {
      tpurt_status_t (*fn)(void* user, tpurt_kernel_ctx_t* ctx); /* or NULL and host_fn */
      tpurt_status_t (*host_fn)(void* user);
      void* user;
      const char* name; /* host_fn's name on the trace (a static string; NULL: "host callback") */
    } call;
    struct {
      void (*reached)(void* user, tpurt_hal_queue_t* queue, uint64_t value, uint64_t time_ns);
      void* user;
    } signal;
    struct {
      tpurt_hal_queue_t* queue;
      uint64_t value;
    } wait;
  } u;
  /* Optional: done(done_user) on the queue's thread once the command has run
   * (releases what the command held: a waited-for queue, an event). */
  void (*done)(void* user);
  void* done_user;
} tpurt_hal_command_t;

typedef struct tpurt_hal_queue_params_t {
  uint64_t id;    /* 0 for the device's default queue */
  int priority;
  /* Optional: exit(exit_user) on the queue's own thread when a queue
   * destroyed from inside one of its commands has run all it was given, just
   * before the driver frees it (the front layer frees its part there). */
  void (*exit)(void* user);
  void* exit_user;
} tpurt_hal_queue_params_t;

/* ---- executables ---- */

enum {
  /* A host shared object (the vTPU runs host code): what compiler/ builds. */
  TPURT_HAL_EXECUTABLE_HOST_ELF = 1,
};

typedef struct tpurt_hal_executable_params_t {
  size_t struct_size; /* sizeof(tpurt_hal_executable_params_t) of the caller */
  uint32_t format;    /* TPURT_HAL_EXECUTABLE_* */
  /* A descriptor of the executable's bytes, already verified by the caller
   * (compiler/cache.c checks owner, mode and content through it): the driver
   * loads exactly these bytes and never opens a path again. The caller keeps
   * and closes it. */
  int fd;
} tpurt_hal_executable_params_t;

/* ---- the driver ---- */

typedef struct tpurt_hal_driver_t {
  size_t struct_size;  /* sizeof(tpurt_hal_driver_t) the driver was built with */
  uint32_t version;    /* TPURT_HAL_VERSION */
  const char* name;

  tpurt_status_t (*device_create)(const tpurt_hal_device_params_t* params,
                                  tpurt_hal_device_t** out_device);
  /* Every queue of the device is destroyed first. */
  void (*device_destroy)(tpurt_hal_device_t* device);
  tpurt_status_t (*device_query)(tpurt_hal_device_t* device, tpurt_hal_device_props_t* out_props);

  /* Takes `bytes` (a multiple of 512) of device memory, 512-byte aligned.
   * RESOURCE_EXHAUSTED when no free range is large enough. Thread-safe. */
  tpurt_status_t (*memory_alloc)(tpurt_hal_device_t* device, uint64_t bytes, void** out_ptr);
  /* Gives back device memory: a range memory_alloc returned or any 512-byte
   * aligned piece of one (the caching allocator trims free segment ends).
   * Its physical pages may be released. Thread-safe. */
  void (*memory_free)(tpurt_hal_device_t* device, void* ptr, uint64_t bytes);
  /* Optional (NULL: unknown, treated as 0): the largest range memory_alloc
   * could return now. */
  uint64_t (*memory_largest_free)(tpurt_hal_device_t* device);
  /* Optional (NULL: not supported; Debug mode then runs without memory
   * guards). Sets how host code may access a page-aligned range of device
   * memory (TPURT_HAL_ACCESS_* bits; 0 = no access: a touch faults). With
   * TPURT_HAL_ACCESS_DISCARD the contents are no longer needed and the
   * physical pages may be released (they read as zero afterwards); with
   * TPURT_HAL_ACCESS_REMAP the device's own pages are mapped over the range
   * again first (undoing a page something else mapped there). Thread-safe. */
  tpurt_status_t (*memory_protect)(tpurt_hal_device_t* device, void* ptr, uint64_t bytes,
                                   uint32_t access);

  tpurt_status_t (*queue_create)(tpurt_hal_device_t* device, const tpurt_hal_queue_params_t* params,
                                 tpurt_hal_queue_t** out_queue);
  /* Waits for what the queue was given, then frees it. Called on the queue's
   * own thread (the last reference dropped inside one of its commands), the
   * queue finishes what it holds and frees itself. */
  void (*queue_destroy)(tpurt_hal_queue_t* queue);
  /* Appends one command. Submitters serialize (the caller holds its queue's
   * lock); blocks only while the queue has no room. Only a DISPATCH (whose
   * call record may need memory) or an interruptible command can fail;
   * every other command is taken. */
  tpurt_status_t (*queue_submit)(tpurt_hal_queue_t* queue, const tpurt_hal_command_t* command);
  /* The value of the last command done. Thread-safe, lock-free. */
  uint64_t (*queue_completed)(tpurt_hal_queue_t* queue);
  /* Blocks until the queue has reached `value` (at once on its own thread).
   * `interruptible`: returns early with the status tpurt_host_interrupted
   * (base/thread.h) gives, polled at least every 50 ms. */
  tpurt_status_t (*queue_wait)(tpurt_hal_queue_t* queue, uint64_t value, bool interruptible);
  /* Returns (and clears) the first error a command of `issuer` returned
   * since that issuer's last call (and any error of issuer 0), prefixed with
   * the op's name for a kernel. Errors belong to their issuer: another
   * thread's sync does not take them. */
  tpurt_status_t (*queue_take_error)(tpurt_hal_queue_t* queue, uint64_t issuer);
  /* Drops every command submitted so far that has not started: a dropped
   * dispatch or copy does not run and what it would have written is poisoned
   * with (a copy of) `reason`; a CALL runs with ctx->cancel set so it does
   * the same; host functions, signals, waits and done callbacks still run.
   * The command running now finishes. */
  void (*queue_cancel)(tpurt_hal_queue_t* queue, tpurt_status_t reason);
  /* True on the thread that runs this queue's commands. */
  bool (*queue_is_current)(tpurt_hal_queue_t* queue);

  /* Optional (NULL: not tracked): the device's poisoned memory (hal/poison.h),
   * which its queues keep; the front layer checks host reads against it. */
  tpurt_poison_t* (*device_poison)(tpurt_hal_device_t* device);
  /* Runs a kernel now, on the calling thread with the chip's compute threads;
   * `debug` is what tpurt_kernel_debug reports to it. Unannotated status.
   * A call reading poisoned memory does not run and returns that error; one
   * that runs clears its outputs. */
  tpurt_status_t (*dispatch_sync)(tpurt_hal_device_t* device, tpurt_kernel_fn_t fn, uint32_t op_flags,
                                  const tpurt_op_call_t* call, bool debug);

  /* Optional (NULL: the device loads no code). */
  tpurt_status_t (*executable_load)(tpurt_hal_device_t* device,
                                    const tpurt_hal_executable_params_t* params,
                                    tpurt_hal_executable_t** out_executable);
  /* The entry point `name` as the device calls it; NOT_FOUND if absent. */
  tpurt_status_t (*executable_lookup)(tpurt_hal_executable_t* executable, const char* name,
                                      void** out_entry);
  /* Unloads it: entries looked up are no longer valid. */
  void (*executable_release)(tpurt_hal_executable_t* executable);
} tpurt_hal_driver_t;

enum {
  TPURT_HAL_ACCESS_READ = 1u << 0,
  TPURT_HAL_ACCESS_WRITE = 1u << 1,
  TPURT_HAL_ACCESS_DISCARD = 1u << 2,
  TPURT_HAL_ACCESS_REMAP = 1u << 3,
};

/* Drivers compiled in, by name ("vtpu", "null"; NULL or "": the default,
 * vtpu); NULL if absent or built against another HAL version. */
const tpurt_hal_driver_t* tpurt_hal_driver_find(const char* name);

#endif /* TPURT_HAL_HAL_H_ */
