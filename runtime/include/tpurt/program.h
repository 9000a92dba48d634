/* Programs: a compiled graph that runs on a chip's queue as one launch.
 *
 * A program is made by capture: while a queue captures, the kernels and
 * device copies submitted to it are recorded instead of run, and the
 * allocator logs the blocks made and freed on it. Ending the capture with
 * the byte ranges of the graph's inputs and outputs turns the recording into
 * a program: every address a record holds becomes (input i | output j |
 * arena | fixed) + offset, blocks made and freed inside the capture get
 * offsets in one arena planned from their lifetimes (a static memory plan),
 * and the random ops' Philox offsets become relative to the launch's.
 * A launch is one command on the queue: the queue's thread rebases the
 * records onto the launch's buffers and runs them through the fusion
 * executor (elementwise chains fused and generated as in DeferAndFuse,
 * library kernels as in Strict). The host returns once it is queued.
 *
 * While capturing, nothing reaches the device: a host copy or synchronize
 * on the queue, or any other command, fails the capture
 * (FAILED_PRECONDITION, "capture: ..."), and so does ending it with a block
 * made during the capture still alive that is not an output. */
#ifndef TPURT_PROGRAM_H_
#define TPURT_PROGRAM_H_

#include "tpurt/device.h"
#include "tpurt/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpurt_program_t tpurt_program_t;

/* A byte range of device memory: an input's or output's storage. */
typedef struct tpurt_program_range_t {
  void* base;
  uint64_t bytes;
} tpurt_program_range_t;

/* Starts capturing on q (FAILED_PRECONDITION if it already captures).
 * Pending DeferAndFuse work is flushed first. */
TPURT_API tpurt_status_t tpurt_capture_begin(tpurt_queue_t* q);
/* Ends the capture on q and builds its program. `rng_seed` and
 * `rng_before`/`rng_after`: the default generator's seed and Philox offset
 * when the capture began and ended (a record drawing from another seed fails
 * the capture). Inputs' storages first match an address; an output's storage
 * must be a block made during the capture (or an input's). */
TPURT_API tpurt_status_t tpurt_capture_end(tpurt_queue_t* q, const tpurt_program_range_t* inputs, int32_t num_inputs,
                                 const tpurt_program_range_t* outputs, int32_t num_outputs, uint64_t rng_seed,
                                 uint64_t rng_before, uint64_t rng_after, tpurt_program_t** out_program);
/* Drops a capture (after an error): nothing was run. */
TPURT_API void tpurt_capture_abort(tpurt_queue_t* q);
/* Whether q is capturing. */
TPURT_API bool tpurt_capture_active(tpurt_queue_t* q);

typedef struct tpurt_program_info_t {
  uint64_t arena_bytes;    /* the launch's scratch: one block */
  uint64_t rng_count;      /* Philox counter values a launch reserves */
  int32_t num_records;     /* kernels, copies and frees */
  int32_t num_kernels;
  int32_t num_inputs, num_outputs;
  uint64_t launches;
} tpurt_program_info_t;

TPURT_API void tpurt_program_query(const tpurt_program_t* p, tpurt_program_info_t* out);

/* Queues one run of p on q: inputs[i] / outputs[j] are the new bases of the
 * capture's inputs and outputs (same sizes), arena at least arena_bytes
 * (device memory of q's chip, free for the launch's span: a block freed
 * right after this call is fine, the allocator orders it behind the launch),
 * rng the Philox key and first offset reserved for it (rng_count values).
 * A kernel error surfaces at the next sync, as in Strict. */
TPURT_API tpurt_status_t tpurt_program_launch(tpurt_program_t* p, tpurt_queue_t* q, void* const* inputs, int32_t num_inputs,
                                    void* const* outputs, int32_t num_outputs, void* arena, tpurt_rng_t rng);

/* Sizes as run-time parameters.
 *
 * A capture records the sizes of one call. When the caller captures the same
 * graph at other values of its symbolic sizes (others: captures at different
 * points, never launched) and gives, for each capture, the values of a list
 * of size expressions (values[k * num_values + e]: expression e at capture k,
 * k = 0 for p), generalize checks that every capture recorded the same
 * kernels, and explains every number that differs between them (a tensor's
 * sizes, strides and offsets, an int or integral float argument, a copy's
 * bytes, a block's bytes) as coef * expression e, the same coef at every
 * capture. Random ops' Philox offsets and the launch's count, which are sums
 * of rounded reservations, may instead be explained by their rule: where every
 * capture's are the running sums of tpurt_rng_reservation over its random
 * kernels' tensor sizes, a binding computes them the same way from its sizes.
 * Then p takes sizes at launch: bind it to the expressions' values
 * at a new point and launch with the binding; the records are rewritten for
 * it and the arena planned for its block sizes (no capture, no C build).
 * FAILED_PRECONDITION naming the first number it cannot explain, or the
 * first record that differs; p is then unchanged. */
TPURT_API tpurt_status_t tpurt_program_generalize(tpurt_program_t* p, const tpurt_program_t* const* others,
                                                  int32_t num_others, const int64_t* values, int32_t num_values);
/* Number of size expressions p takes (0: p has fixed sizes). */
TPURT_API int32_t tpurt_program_num_values(const tpurt_program_t* p);

typedef struct tpurt_program_binding_t tpurt_program_binding_t;
/* p's sizes at values[num_values] (the expressions' values, in generalize's
 * order). *out is owned by p and lives as long as it. out_arena_bytes /
 * out_rng_count: what a launch with it needs. INVALID_ARGUMENT for a wrong
 * count, a negative size or an arena beyond 2^62 bytes. */
TPURT_API tpurt_status_t tpurt_program_bind(tpurt_program_t* p, const int64_t* values, int32_t num_values,
                                            tpurt_program_binding_t** out, uint64_t* out_arena_bytes,
                                            uint64_t* out_rng_count);
/* tpurt_program_launch with a binding (required when p takes sizes; NULL: the captured sizes). */
TPURT_API tpurt_status_t tpurt_program_launch_bound(tpurt_program_t* p, const tpurt_program_binding_t* binding,
                                                    tpurt_queue_t* q, void* const* inputs, int32_t num_inputs,
                                                    void* const* outputs, int32_t num_outputs, void* arena,
                                                    tpurt_rng_t rng);

/* The size values p was captured at (generalize's first row; tpurt_program_num_values of them), NULL
 * for a program with fixed sizes: bind to them to run it at its own sizes. */
TPURT_API const int64_t* tpurt_program_values(const tpurt_program_t* p);
/* Whether storages of in_bytes[num_in] / out_bytes[num_out] bytes hold everything a launch of p with
 * binding b reads and writes in them. A program read from bytes (tpurt_program_deserialize) that takes
 * sizes checks its addresses only when bound (where its arena blocks' sizes are known): call this
 * before launching it on storages its file did not size. INVALID_ARGUMENT naming the first storage too
 * small; OK for a captured program (its sizes came from a run). */
TPURT_API tpurt_status_t tpurt_program_check_storages(const tpurt_program_t* p, const tpurt_program_binding_t* b,
                                                      const uint64_t* in_bytes, int32_t num_in,
                                                      const uint64_t* out_bytes, int32_t num_out);

/* A program as bytes, to keep past this process (torch_tpu.export's
 * artifacts), with its sizes when it takes them at launch (generalize).
 * *out is malloc'ed; free() it. FAILED_PRECONDITION when a
 * record holds device memory that is not an input, an output or the
 * program's own intermediate (a constant kept alive outside the graph), or
 * runs a kernel that is not in the op table. */
TPURT_API tpurt_status_t tpurt_program_serialize(const tpurt_program_t* p, void** out, size_t* out_bytes);
/* Reads what tpurt_program_serialize wrote (same runtime version and
 * machine layout). Every count, name and offset is checked; with
 * input_bytes[num_input_bytes] / output_bytes[num_output_bytes] (the
 * storages' sizes; either may be NULL) the program must have that many
 * inputs / outputs and every address must also lie inside its storage, as
 * arena addresses always must. DATA_LOSS for damaged bytes or a mismatch,
 * NOT_FOUND for a kernel this runtime lacks. The program starts with
 * refcount 1. */
TPURT_API tpurt_status_t tpurt_program_deserialize(const void* bytes, size_t n, const uint64_t* input_bytes,
                                                   int32_t num_input_bytes, const uint64_t* output_bytes,
                                                   int32_t num_output_bytes, tpurt_program_t** out);

TPURT_API void tpurt_program_retain(tpurt_program_t* p);
TPURT_API void tpurt_program_release(tpurt_program_t* p);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TPURT_PROGRAM_H_ */
