/* A program's inside, shared by capture.c (which builds and launches
 * programs) and program_io.c (which writes them to bytes and reads them
 * back). Internal to exec/. */
#ifndef TPURT_EXEC_DEFER_PROGRAM_INTERNAL_H_
#define TPURT_EXEC_DEFER_PROGRAM_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>

#include "exec/defer/defer.h"
#include "tpurt/program.h"

enum { WHERE_INPUT = 0, WHERE_OUTPUT, WHERE_ARENA, WHERE_FIXED };

typedef struct reloc_t {
  void** slot;
  int32_t where, index;
  int64_t off;
} reloc_t;

typedef struct rng_reloc_t {
  tpurt_rng_t* slot;
  uint64_t rel;
} rng_reloc_t;

struct tpurt_program_t {
  _Atomic int refcount;
  pthread_mutex_t run_lock;
  tpurt_defer_list_t* list;
  reloc_t* relocs;
  int32_t num_relocs;
  rng_reloc_t* rngs;
  int32_t num_rngs;
  uint64_t rng_count, arena_bytes;
  int32_t num_inputs, num_outputs;
  _Atomic uint64_t launches;
};

/* The element count below which a program's chains run kernel by kernel
 * (TORCH_TPU_PROGRAM_FUSE_MIN_NUMEL, read once). */
int64_t tpurt_program_fuse_min_numel(void);

/* An empty program (refcount 1) for a builder to fill; NULL without memory. */
tpurt_program_t* tpurt_program_alloc(void);
/* Appends a relocation / a random-offset relocation to p, growing its array (*cap: its capacity,
 * kept by the builder); false without memory (p unchanged). */
bool tpurt_program_push_reloc(tpurt_program_t* p, int32_t* cap, reloc_t r);
bool tpurt_program_push_rng(tpurt_program_t* p, int32_t* cap, rng_reloc_t r);

#endif /* TPURT_EXEC_DEFER_PROGRAM_INTERNAL_H_ */
