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

/* A block the capture saw made: when and by how much (for the arena plan). */
typedef struct prog_block_t {
  int32_t made_at, freed_at; /* record indices; freed_at INT32_MAX: alive at the end */
  uint64_t bytes;            /* asked for */
  uint64_t arena_off;        /* the capture's plan */
  bool in_arena;             /* made and freed inside, and used: an arena block */
} prog_block_t;

/* A field of the program that is a size (program_sizes.c): value = coef * values[value] at launch. */
typedef struct sym_field_t {
  void* slot;
  int32_t type; /* SYM_I64, SYM_U64, SYM_F64 */
  int32_t value;
  int64_t coef;
} sym_field_t;

enum { SYM_I64 = 0, SYM_U64, SYM_F64 };

/* A dim of a random record's tensor, for its counter reservation at launch (program_sizes.c):
 * coef * values[value], or coef itself where value is -1. `last` ends its tensor. */
typedef struct rng_dim_t {
  int32_t value;
  bool last;
  int64_t coef;
} rng_dim_t;

/* A program's sizes bound to values (tpurt_program_bind). */
struct tpurt_program_binding_t {
  int64_t* values;
  uint64_t* arena_off; /* per block */
  uint64_t arena_bytes, rng_count;
  uint64_t* need; /* a program read from bytes: the bytes each input, then each output, reaches (else NULL) */
  uint64_t* rng_rel; /* per random offset (p->rngs), where the program's take sizes (rng_dims); else NULL */
};

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
  prog_block_t* blocks; /* every block the capture saw made (NULL for a deserialized program) */
  int32_t num_blocks;
  /* Sizes as run-time parameters (program_sizes.c): num_values > 0 once generalized. Arena
   * relocations then hold offsets inside their block, placed by the binding's plan. */
  int32_t num_values;
  sym_field_t* syms;
  int32_t num_syms;
  sym_field_t* block_syms; /* per block: its bytes (value -1: constant) */
  sym_field_t rng_sym;     /* rng_count (value -1: constant) */
  int64_t* values0;        /* the expressions' values at the first capture: its own sizes */
  bool untrusted;          /* read from bytes (program_io.c): a binding checks every address it makes */
  /* Random offsets by the reservation rule (tpurt_rng_reservation), where they follow no single size:
   * p->rngs[r]'s record's tensors are rng_dims[rng_dim_start[r] .. rng_dim_start[r + 1]); NULL when
   * the offsets and count are constants or sym fields. */
  rng_dim_t* rng_dims;
  int32_t* rng_dim_start;
  pthread_mutex_t bind_lock;
  tpurt_program_binding_t** bindings;
  int32_t num_bindings, cap_bindings;
};

/* The element count below which a program's chains run kernel by kernel
 * (TORCH_TPU_PROGRAM_FUSE_MIN_NUMEL, read once). */
int64_t tpurt_program_fuse_min_numel(void);
/* How far a program's kernels' grains are shifted right (capture.c; TORCH_TPU_PROGRAM_GRAIN_SHIFT). */
int tpurt_program_grain_shift(void);

/* The static memory plan (capture.c): out_off[i] for each in_arena block, size[i] its bytes; the
 * arena's bytes, UINT64_MAX without memory. */
uint64_t tpurt_program_plan_arena(const prog_block_t* blocks, int32_t num_blocks, const uint64_t* size,
                                  uint64_t* out_off);
/* Applies a binding's values to the program's fields (run_lock held; program_sizes.c). */
void tpurt_program_apply_binding(tpurt_program_t* p, const tpurt_program_binding_t* b);
/* The numbers of p a size expression can stand for, in an order that depends only on its records
 * (the same for a program and its copy read from bytes): the records' sizes, strides and int, float
 * and byte-count fields in walk order, then the offset of each relocated address (walk order), then
 * each random op's counter offset (walk order). *slots and *types (SYM_*) are malloc'ed. */
tpurt_status_t tpurt_program_number_slots(const tpurt_program_t* p, void*** slots, int32_t** types, int32_t* n);
/* Frees what program_sizes.c added (tpurt_program_release). */
void tpurt_program_sizes_free(tpurt_program_t* p);

/* An empty program (refcount 1) for a builder to fill; NULL without memory. */
tpurt_program_t* tpurt_program_alloc(void);
/* Appends a relocation / a random-offset relocation to p, growing its array (*cap: its capacity,
 * kept by the builder); false without memory (p unchanged). */
bool tpurt_program_push_reloc(tpurt_program_t* p, int32_t* cap, reloc_t r);
bool tpurt_program_push_rng(tpurt_program_t* p, int32_t* cap, rng_reloc_t r);

#endif /* TPURT_EXEC_DEFER_PROGRAM_INTERNAL_H_ */
