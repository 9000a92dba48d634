/* Programs as bytes (tpurt/program.h: tpurt_program_serialize/deserialize),
 * for torch_tpu.export's artifacts and anything else that keeps a program
 * past its process.
 *
 * A program is its records (kernels by op-table name, copies, frees) and,
 * for every device address a record holds, where it lives (input i, output
 * j, arena) + offset; random ops carry their offset relative to the launch's.
 * Addresses themselves are never written: a program whose record holds
 * device memory that is none of those (a constant the caller kept alive
 * during the capture) cannot be saved, and says so. Kernels that are not in
 * the op table (a test's private op, a kernel the PyTorch layer built at run
 * time) are refused the same way.
 *
 * The reader trusts nothing: every count and length is checked against the
 * bytes left, every op name resolved in this runtime's table, every index
 * against the program's inputs and outputs, every offset against the arena.
 * The layout is this machine's (little-endian, 64-bit); the header says so
 * and a reader on another layout refuses it. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/hash.h"
#include "compiler/graph.h"
#include "exec/defer/program_internal.h"
#include "hal/call_record.h"

#define PROGRAM_MAGIC 0x31475250555054ull /* "TPUPRG1" */
#define PROGRAM_VERSION 2u /* 2: a program that takes sizes keeps them (version 1 is still read) */
#define MAX_VALUES 4096
#define MAX_BLOCKS (1 << 24)

/* This machine's layout: pointer size, and 1 in the next byte if little-endian. */
static uint32_t layout_word(void) {
  const uint16_t one = 1;
  return (uint32_t)sizeof(void*) | (uint32_t)(*(const uint8_t*)&one) << 8;
}

/* ---- writing ---- */

typedef tpurt_bytebuf_t wbuf_t;

static void put(wbuf_t* w, const void* src, size_t n) { tpurt_bytebuf_put(w, src, n); }
static void put_u8(wbuf_t* w, uint8_t v) { put(w, &v, 1); }
static void put_u32(wbuf_t* w, uint32_t v) { put(w, &v, 4); }
static void put_i32(wbuf_t* w, int32_t v) { put(w, &v, 4); }
static void put_u64(wbuf_t* w, uint64_t v) { put(w, &v, 8); }
static void put_i64(wbuf_t* w, int64_t v) { put(w, &v, 8); }
static void put_str(wbuf_t* w, const char* s) {
  uint32_t n = s ? (uint32_t)strlen(s) : 0;
  put_u32(w, n);
  put(w, s, n);
}

/* Relocations sorted by slot address, for lookup by slot while writing. */
typedef struct slot_index_t {
  const void* slot;
  int32_t k;
} slot_index_t;

static int slot_cmp(const void* a, const void* b) {
  uintptr_t x = (uintptr_t)((const slot_index_t*)a)->slot, y = (uintptr_t)((const slot_index_t*)b)->slot;
  return x < y ? -1 : x > y;
}

static int32_t slot_find(const slot_index_t* idx, int32_t n, const void* slot) {
  int32_t lo = 0, hi = n - 1;
  while (lo <= hi) {
    int32_t mid = (lo + hi) / 2;
    if (idx[mid].slot == slot) return idx[mid].k;
    if ((uintptr_t)idx[mid].slot < (uintptr_t)slot) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

typedef struct writer_t {
  wbuf_t w;
  const tpurt_program_t* p;
  slot_index_t *relocs, *rngs;
  tpurt_status_t error;
  int32_t rec;
} writer_t;

static const char* rec_name(const tpurt_program_t* p, int32_t r) {
  const tpurt_defer_rec_t* rec = &p->list->recs[r];
  return rec->kind == TPURT_DEFER_KERNEL ? rec->call.name : rec->kind == TPURT_DEFER_COPY ? "a device copy" : "a free";
}

/* An address slot: its relocation (where, index, offset), or an error when
 * it holds a device address the program does not own. */
static void put_addr(writer_t* wr, void* const* slot) {
  if (!*slot) {
    put_u8(&wr->w, 0);
    return;
  }
  int32_t k = slot_find(wr->relocs, wr->p->num_relocs, slot);
  if (k < 0) {
    if (!wr->error)
      wr->error = TPURT_STATUS(FAILED_PRECONDITION,
                               "program_serialize: %s (record %d) holds device memory that is not an input, an "
                               "output or the program's own intermediate (a constant kept alive outside the "
                               "graph): make it an input of the graph to save the program",
                               rec_name(wr->p, wr->rec), wr->rec);
    return;
  }
  const reloc_t* r = &wr->p->relocs[k];
  put_u8(&wr->w, 1);
  put_u8(&wr->w, (uint8_t)r->where);
  put_i32(&wr->w, r->where == WHERE_ARENA && !wr->p->num_values ? 0 : r->index); /* sized: the arena block */
  put_i64(&wr->w, r->off);
}

static void put_tensor(writer_t* wr, const tpurt_tensor_t* t) {
  put_u32(&wr->w, (uint32_t)t->dtype);
  put_i32(&wr->w, t->ndim);
  for (int32_t d = 0; d < t->ndim; ++d) put_i64(&wr->w, t->sizes[d]);
  for (int32_t d = 0; d < t->ndim; ++d) put_i64(&wr->w, t->strides[d]);
  put_addr(wr, (void* const*)&t->data);
}

static void put_arg(writer_t* wr, const tpurt_arg_t* a) {
  wbuf_t* w = &wr->w;
  put_u32(w, (uint32_t)a->kind);
  put_i32(w, a->count);
  switch (a->kind) {
    case TPURT_ARG_NONE: break;
    case TPURT_ARG_TENSOR: put_tensor(wr, a->v.tensor); break;
    case TPURT_ARG_INT:
    case TPURT_ARG_DTYPE:
    case TPURT_ARG_OTHER: put_i64(w, a->v.i); break;
    case TPURT_ARG_DOUBLE: put(w, &a->v.d, 8); break;
    case TPURT_ARG_BOOL: put_u8(w, a->v.b); break;
    case TPURT_ARG_INT_LIST: put(w, a->v.ints, sizeof(int64_t) * (size_t)a->count); break;
    case TPURT_ARG_DOUBLE_LIST: put(w, a->v.doubles, sizeof(double) * (size_t)a->count); break;
    case TPURT_ARG_BOOL_LIST:
      for (int32_t e = 0; e < a->count; ++e) put_u8(w, a->v.bools[e]);
      break;
    case TPURT_ARG_TENSOR_LIST:
      for (int32_t e = 0; e < a->count; ++e) {
        put_u8(w, a->v.tensors[e] != NULL);
        if (a->v.tensors[e]) put_tensor(wr, a->v.tensors[e]);
      }
      break;
    case TPURT_ARG_STRING: put_str(w, a->v.s); break;
    case TPURT_ARG_RNG: {
      int32_t k = slot_find(wr->rngs, wr->p->num_rngs, &a->v.rng);
      if (k < 0 && !wr->error)
        wr->error = TPURT_STATUS(INTERNAL, "program_serialize: record %d draws random numbers the capture did not "
                                           "relocate", wr->rec);
      put_u64(w, k < 0 ? 0 : wr->p->rngs[k].rel);
      break;
    }
    default:
      if (!wr->error)
        wr->error = TPURT_STATUS(UNIMPLEMENTED, "program_serialize: argument kind %d of %s", (int)a->kind,
                                 rec_name(wr->p, wr->rec));
  }
}

tpurt_status_t tpurt_program_serialize(const tpurt_program_t* p, void** out, size_t* out_bytes) {
  if (!p || !out || !out_bytes) return TPURT_STATUS(INVALID_ARGUMENT, "program_serialize: NULL argument");
  *out = NULL;
  *out_bytes = 0;
  if (p->num_values > 0 && (!p->blocks || !p->values0))
    return TPURT_STATUS(INTERNAL, "program_serialize: a program that takes sizes without its blocks");
  writer_t wr = {.p = p};
  wr.relocs = malloc(sizeof(slot_index_t) * (size_t)(p->num_relocs + 1));
  wr.rngs = malloc(sizeof(slot_index_t) * (size_t)(p->num_rngs + 1));
  if (!wr.relocs || !wr.rngs) {
    free(wr.relocs);
    free(wr.rngs);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "program_serialize: out of host memory");
  }
  for (int32_t k = 0; k < p->num_relocs; ++k) wr.relocs[k] = (slot_index_t){p->relocs[k].slot, k};
  for (int32_t k = 0; k < p->num_rngs; ++k) wr.rngs[k] = (slot_index_t){p->rngs[k].slot, k};
  qsort(wr.relocs, (size_t)p->num_relocs, sizeof(slot_index_t), slot_cmp);
  qsort(wr.rngs, (size_t)p->num_rngs, sizeof(slot_index_t), slot_cmp);

  wbuf_t* w = &wr.w;
  put_u64(w, PROGRAM_MAGIC);
  put_u32(w, PROGRAM_VERSION);
  put_u32(w, layout_word());
  put_i32(w, p->num_inputs);
  put_i32(w, p->num_outputs);
  put_u64(w, p->arena_bytes);
  put_u64(w, p->rng_count);
  /* Sizes (program_sizes.c), first part: the values captured at and the blocks the arena is planned
   * from, which the records' arena addresses name. */
  put_u8(w, p->num_values > 0);
  if (p->num_values > 0) {
    put_i32(w, p->num_values);
    for (int32_t e = 0; e < p->num_values; ++e) put_i64(w, p->values0[e]);
    put_i32(w, p->num_blocks);
    for (int32_t b = 0; b < p->num_blocks; ++b) {
      const prog_block_t* bl = &p->blocks[b];
      put_i32(w, bl->made_at);
      put_i32(w, bl->freed_at);
      put_u64(w, bl->bytes);
      put_u8(w, bl->in_arena);
      put_i32(w, p->block_syms[b].value);
      put_i64(w, p->block_syms[b].coef);
    }
  }
  const tpurt_defer_list_t* l = p->list;
  put_i32(w, l->num_recs);
  for (int32_t r = 0; r < l->num_recs && !wr.error; ++r) {
    const tpurt_defer_rec_t* rec = &l->recs[r];
    wr.rec = r;
    put_u32(w, rec->kind);
    if (rec->kind == TPURT_DEFER_COPY) {
      put_u64(w, rec->bytes);
      put_addr(&wr, &rec->dst);
      put_addr(&wr, (void* const*)&rec->src);
    } else if (rec->kind == TPURT_DEFER_FREE) {
      put_u64(w, rec->bytes);
      put_addr(&wr, &rec->dst);
    } else {
      const tpurt_op_call_t* c = &rec->call;
      if (!rec->op || !rec->op->name || tpurt_op_lookup(rec->op->name) != rec->op) {
        wr.error = TPURT_STATUS(FAILED_PRECONDITION,
                                "program_serialize: %s (record %d) runs a kernel that is not in the runtime's op "
                                "table, so no other process could find it",
                                c->name ? c->name : "?", r);
        break;
      }
      put_str(w, rec->op->name);
      put_str(w, c->name);
      put_str(w, c->overload);
      put_i32(w, c->num_args);
      for (int32_t a = 0; a < c->num_args; ++a) put_arg(&wr, &c->args[a]);
      put_i32(w, c->num_outputs);
      for (int32_t o = 0; o < c->num_outputs; ++o) put_tensor(&wr, &c->outputs[o]);
    }
  }
  /* Sizes, second part: which numbers of the records follow which size, by their place among the
   * program's numbers (tpurt_program_number_slots: the same order in the copy a reader builds). */
  if (!wr.error && p->num_values > 0) {
    put_i32(w, p->rng_sym.value);
    put_i64(w, p->rng_sym.coef);
    void** slots = NULL;
    int32_t* types = NULL;
    int32_t n = 0;
    tpurt_status_t ss = tpurt_program_number_slots(p, &slots, &types, &n);
    if (ss) wr.error = ss;
    slot_index_t* idx = ss ? NULL : malloc(sizeof(slot_index_t) * (size_t)(n + 1));
    if (!ss && !idx) wr.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_serialize: out of host memory");
    if (idx) {
      for (int32_t k = 0; k < n; ++k) idx[k] = (slot_index_t){slots[k], k};
      qsort(idx, (size_t)n, sizeof(slot_index_t), slot_cmp);
      put_i32(w, p->num_syms);
      for (int32_t k = 0; k < p->num_syms && !wr.error; ++k) {
        const sym_field_t* f = &p->syms[k];
        int32_t at = slot_find(idx, n, f->slot);
        if (at < 0) {
          wr.error = TPURT_STATUS(INTERNAL, "program_serialize: size %d is none of the program's numbers", k);
          break;
        }
        put_i32(w, at);
        put_i32(w, f->type);
        put_i32(w, f->value);
        put_i64(w, f->coef);
      }
      /* Random offsets by the reservation rule: each random op's tensors' dims, in walk order (the
       * last num_rngs numbers are the random offsets in that order). */
      put_u8(w, p->rng_dim_start != NULL);
      for (int32_t k = n - p->num_rngs; p->rng_dim_start && k < n && !wr.error; ++k) {
        int32_t r = (int32_t)((const rng_reloc_t*)((const char*)slots[k] - offsetof(rng_reloc_t, rel)) - p->rngs);
        put_i32(w, p->rng_dim_start[r + 1] - p->rng_dim_start[r]);
        for (int32_t i = p->rng_dim_start[r]; i < p->rng_dim_start[r + 1]; ++i) {
          put_i32(w, p->rng_dims[i].value);
          put_u8(w, p->rng_dims[i].last);
          put_i64(w, p->rng_dims[i].coef);
        }
      }
    }
    free(idx);
    free(slots);
    free(types);
  }
  uint64_t h = tpurt_fnv1a(w->p, w->n, 14695981039346656037ull);
  put_u64(w, h); /* a check on the whole, last */
  free(wr.relocs);
  free(wr.rngs);
  if (!wr.error && w->oom) wr.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_serialize: out of host memory");
  if (wr.error) {
    free(w->p);
    return wr.error;
  }
  *out = w->p;
  *out_bytes = w->n;
  return TPURT_OK;
}

/* ---- reading ---- */

typedef struct reader_t {
  const uint8_t* p;
  size_t n, at;
  tpurt_status_t error;
  int32_t num_inputs, num_outputs;
  uint64_t arena_bytes;
  /* relocations read for the current record, in the order its tensors come */
  reloc_t* pend;
  int32_t num_pend, cap_pend;
  uint64_t* pend_rng;
  int32_t num_pend_rng, cap_pend_rng;
  tpurt_defer_list_t* scratch; /* the record's temporary call, before it is copied */
  const uint64_t *in_bytes, *out_bytes; /* storage sizes for the bounds check, or NULL */
  /* a program that takes sizes: its blocks (arena addresses name one); bounds are checked at bind */
  bool sized;
  const prog_block_t* blocks;
  int32_t num_blocks;
} reader_t;

static bool take(reader_t* rd, void* dst, size_t n) {
  if (rd->error) return false;
  if (n > rd->n - rd->at) {
    rd->error = TPURT_STATUS(DATA_LOSS, "program_deserialize: truncated at byte %zu (%zu more wanted)", rd->at, n);
    return false;
  }
  if (dst) memcpy(dst, rd->p + rd->at, n);
  rd->at += n;
  return true;
}
#define GETTER(name, type)        \
  static type name(reader_t* rd) { \
    type v = 0;                    \
    take(rd, &v, sizeof v);        \
    return v;                      \
  }
GETTER(get_u8, uint8_t)
GETTER(get_u32, uint32_t)
GETTER(get_i32, int32_t)
GETTER(get_u64, uint64_t)
GETTER(get_i64, int64_t)
#undef GETTER

static void corrupt(reader_t* rd, const char* what) {
  if (!rd->error) rd->error = TPURT_STATUS(DATA_LOSS, "program_deserialize: %s (byte %zu)", what, rd->at);
}

/* A count of items of `each` bytes that the remaining bytes could hold. */
static int32_t get_count(reader_t* rd, size_t each) {
  int32_t n = get_i32(rd);
  if (n < 0 || (each && (size_t)n > (rd->n - rd->at) / each)) {
    corrupt(rd, "a count larger than the data");
    return 0;
  }
  return n;
}

static char* get_str(reader_t* rd) {
  uint32_t n = get_u32(rd);
  if (rd->error) return NULL;
  if (n > rd->n - rd->at) {
    corrupt(rd, "a string longer than the data");
    return NULL;
  }
  char* s = tpurt_defer_list_alloc(rd->scratch, (size_t)n + 1);
  if (!s) {
    rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
    return NULL;
  }
  take(rd, s, n);
  s[n] = 0;
  return s;
}

static void* scratch(reader_t* rd, size_t bytes) {
  void* p = rd->error ? NULL : tpurt_defer_list_alloc(rd->scratch, bytes);
  if (!p && !rd->error) rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
  if (p) memset(p, 0, bytes);
  return p;
}

/* An address: a marker (1) the copied record's slot is found by, and its
 * relocation queued in order. */
static void* get_addr(reader_t* rd) {
  if (!get_u8(rd)) return NULL;
  reloc_t r = {.where = get_u8(rd), .index = get_i32(rd), .off = get_i64(rd)};
  if (rd->error) return NULL;
  bool ok = (r.where == WHERE_INPUT && r.index >= 0 && r.index < rd->num_inputs) ||
            (r.where == WHERE_OUTPUT && r.index >= 0 && r.index < rd->num_outputs) ||
            (r.where == WHERE_ARENA && !rd->sized && r.off >= 0 && (uint64_t)r.off <= rd->arena_bytes) ||
            (r.where == WHERE_ARENA && rd->sized && r.index >= 0 && r.index < rd->num_blocks &&
             rd->blocks[r.index].in_arena && r.off >= 0);
  if (!ok) {
    corrupt(rd, "an address outside the program's inputs, outputs and arena");
    return NULL;
  }
  if (rd->num_pend == rd->cap_pend) {
    int32_t n = rd->cap_pend ? rd->cap_pend * 2 : 32;
    reloc_t* np = realloc(rd->pend, sizeof(*np) * (size_t)n);
    if (!np) {
      rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
      return NULL;
    }
    rd->pend = np;
    rd->cap_pend = n;
  }
  rd->pend[rd->num_pend++] = r;
  return (void*)(uintptr_t)1;
}

static void get_tensor(reader_t* rd, tpurt_tensor_t* t) {
  t->dtype = (tpurt_dtype_t)get_u32(rd);
  t->ndim = get_i32(rd);
  if (t->ndim < 0 || t->ndim > TPURT_MAX_DIMS || t->dtype >= TPURT_DTYPE_COUNT) {
    corrupt(rd, "a tensor with a bad rank or dtype");
    return;
  }
  for (int32_t d = 0; d < t->ndim; ++d) t->sizes[d] = get_i64(rd);
  for (int32_t d = 0; d < t->ndim; ++d) t->strides[d] = get_i64(rd);
  t->data = get_addr(rd);
}

static void get_arg(reader_t* rd, tpurt_arg_t* a) {
  a->kind = (tpurt_arg_kind_t)get_u32(rd);
  a->count = get_i32(rd);
  if (rd->error) return;
  if (a->count < 0 || (size_t)a->count > rd->n - rd->at) {
    corrupt(rd, "an argument list longer than the data");
    return;
  }
  switch (a->kind) {
    case TPURT_ARG_NONE: break;
    case TPURT_ARG_TENSOR: {
      tpurt_tensor_t* t = scratch(rd, sizeof(*t));
      if (t) get_tensor(rd, t);
      a->v.tensor = t;
      break;
    }
    case TPURT_ARG_INT:
    case TPURT_ARG_DTYPE:
    case TPURT_ARG_OTHER: a->v.i = get_i64(rd); break;
    case TPURT_ARG_DOUBLE: take(rd, &a->v.d, 8); break;
    case TPURT_ARG_BOOL: a->v.b = get_u8(rd) != 0; break;
    case TPURT_ARG_INT_LIST:
    case TPURT_ARG_DOUBLE_LIST: {
      void* v = scratch(rd, 8 * (size_t)a->count);
      if (v) take(rd, v, 8 * (size_t)a->count);
      if (a->kind == TPURT_ARG_INT_LIST) a->v.ints = v;
      else a->v.doubles = v;
      break;
    }
    case TPURT_ARG_BOOL_LIST: {
      bool* v = scratch(rd, (size_t)a->count + 1);
      for (int32_t e = 0; v && e < a->count; ++e) v[e] = get_u8(rd) != 0;
      a->v.bools = v;
      break;
    }
    case TPURT_ARG_TENSOR_LIST: {
      const tpurt_tensor_t** v = scratch(rd, sizeof(*v) * ((size_t)a->count + 1));
      for (int32_t e = 0; v && e < a->count && !rd->error; ++e) {
        if (!get_u8(rd)) continue;
        tpurt_tensor_t* t = scratch(rd, sizeof(*t));
        if (t) get_tensor(rd, t);
        v[e] = t;
      }
      a->v.tensors = v;
      break;
    }
    case TPURT_ARG_STRING: a->v.s = get_str(rd); break;
    case TPURT_ARG_RNG: {
      uint64_t rel = get_u64(rd);
      if (rd->num_pend_rng == rd->cap_pend_rng) {
        int32_t n = rd->cap_pend_rng ? rd->cap_pend_rng * 2 : 8;
        uint64_t* np = realloc(rd->pend_rng, sizeof(*np) * (size_t)n);
        if (!np) {
          rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
          return;
        }
        rd->pend_rng = np;
        rd->cap_pend_rng = n;
      }
      rd->pend_rng[rd->num_pend_rng++] = rel;
      break;
    }
    default: corrupt(rd, "an unknown argument kind");
  }
}

/* Whether bytes [lo, hi) relative to the start of where r points lie inside
 * it: the arena always, inputs and outputs when the caller gave their sizes. */
static bool inside(const reader_t* rd, const reloc_t* r, int64_t lo, int64_t hi) {
  if (rd->sized) return true; /* its sizes are known at bind, which checks (program_sizes.c) */
  uint64_t limit = r->where == WHERE_ARENA    ? rd->arena_bytes
                   : r->where == WHERE_INPUT  ? (rd->in_bytes ? rd->in_bytes[r->index] : UINT64_MAX)
                   : r->where == WHERE_OUTPUT ? (rd->out_bytes ? rd->out_bytes[r->index] : UINT64_MAX)
                                              : 0;
  return lo >= 0 && hi >= lo && (uint64_t)hi <= limit;
}

/* The next relocation read, bound to the copied record's tensor t, whose
 * footprint must lie inside where it points. */
static bool bind_tensor(tpurt_program_t* p, int32_t* cap, reader_t* rd, int32_t* next, tpurt_tensor_t* t) {
  if (!t->data) return true;
  if (*next >= rd->num_pend) return false;
  reloc_t r = rd->pend[(*next)++];
  r.slot = &t->data;
  const uintptr_t base = (uintptr_t)1 << 46; /* any address: only the footprint's distance from it matters */
  t->data = (void*)(base + (uintptr_t)r.off);
  tpurt_graph_range_t fp = tpurt_graph_tensor_bytes(t);
  t->data = NULL;
  if (fp.lo != fp.hi && !inside(rd, &r, (int64_t)(fp.lo - base), (int64_t)(fp.hi - base))) return false;
  return tpurt_program_push_reloc(p, cap, r);
}

/* The first part of a sized program's sizes: its values at capture and its blocks. */
static void read_sizes_head(reader_t* rd, tpurt_program_t* p) {
  int32_t nv = get_i32(rd);
  if (rd->error) return;
  if (nv < 1 || nv > MAX_VALUES) {
    corrupt(rd, "a size count out of range");
    return;
  }
  p->values0 = malloc(sizeof(int64_t) * (size_t)nv);
  if (!p->values0) {
    rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
    return;
  }
  for (int32_t e = 0; e < nv; ++e) p->values0[e] = get_i64(rd);
  int32_t nb = get_count(rd, 29);
  if (rd->error) return;
  if (nb > MAX_BLOCKS) {
    corrupt(rd, "a block count out of range");
    return;
  }
  p->blocks = calloc((size_t)nb + 1, sizeof(prog_block_t));
  p->block_syms = calloc((size_t)nb + 1, sizeof(sym_field_t));
  if (!p->blocks || !p->block_syms) {
    rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
    return;
  }
  p->num_blocks = nb;
  for (int32_t b = 0; b < nb && !rd->error; ++b) {
    prog_block_t* bl = &p->blocks[b];
    bl->made_at = get_i32(rd);
    bl->freed_at = get_i32(rd);
    bl->bytes = get_u64(rd);
    bl->in_arena = get_u8(rd) != 0;
    p->block_syms[b] = (sym_field_t){.type = SYM_U64, .value = get_i32(rd), .coef = get_i64(rd)};
    if (bl->made_at < 0 || bl->freed_at < bl->made_at || p->block_syms[b].value < -1 ||
        p->block_syms[b].value >= nv || bl->bytes > ((uint64_t)1 << 62))
      corrupt(rd, "a block with bad lifetimes, bytes or size");
  }
  p->num_values = nv; /* no binding can be made before the whole program is read */
  rd->sized = true;
  rd->blocks = p->blocks;
  rd->num_blocks = nb;
}

/* The second part: which of the program's numbers follow which size. */
static void read_sizes_tail(reader_t* rd, tpurt_program_t* p) {
  p->rng_sym = (sym_field_t){.type = SYM_U64, .value = get_i32(rd), .coef = get_i64(rd)};
  if (p->rng_sym.value < -1 || p->rng_sym.value >= p->num_values) corrupt(rd, "a random count with a bad size");
  int32_t ns = get_count(rd, 20);
  if (rd->error) return;
  void** slots = NULL;
  int32_t* types = NULL;
  int32_t n = 0;
  tpurt_status_t s = tpurt_program_number_slots(p, &slots, &types, &n);
  if (s) {
    rd->error = s;
    return;
  }
  p->syms = calloc((size_t)ns + 1, sizeof(sym_field_t));
  if (!p->syms) rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
  for (int32_t k = 0; k < ns && !rd->error; ++k) {
    int32_t at = get_i32(rd), type = get_i32(rd), value = get_i32(rd);
    int64_t coef = get_i64(rd);
    if (rd->error) break;
    if (at < 0 || at >= n || type != types[at] || value < 0 || value >= p->num_values) {
      corrupt(rd, "a size that names none of the program's numbers, or a number of another type");
      break;
    }
    p->syms[k] = (sym_field_t){.slot = slots[at], .type = type, .value = value, .coef = coef};
    p->num_syms = k + 1;
  }
  if (!rd->error && get_u8(rd)) { /* random offsets by the reservation rule */
    p->rng_dim_start = calloc((size_t)p->num_rngs + 1, sizeof(int32_t));
    size_t cap = (rd->n - rd->at) / 13 + 1;
    p->rng_dims = malloc(sizeof(rng_dim_t) * cap);
    if (!p->rng_dim_start || !p->rng_dims) rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
    int32_t total = 0;
    int32_t* count = calloc((size_t)p->num_rngs + 1, sizeof(int32_t));
    rng_dim_t** at = calloc((size_t)p->num_rngs + 1, sizeof(rng_dim_t*));
    rng_dim_t* tmp = malloc(sizeof(rng_dim_t) * cap);
    if (!count || !at || !tmp) rd->error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
    /* read in walk order, each to its random offset's place */
    for (int32_t k = n - p->num_rngs; k < n && !rd->error; ++k) {
      int32_t r = (int32_t)((const rng_reloc_t*)((const char*)slots[k] - offsetof(rng_reloc_t, rel)) - p->rngs);
      int32_t nd = get_count(rd, 13);
      if (rd->error || (size_t)(total + nd) > cap || r < 0 || r >= p->num_rngs || at[r]) {
        corrupt(rd, "random offsets that name no random op");
        break;
      }
      at[r] = tmp + total;
      count[r] = nd;
      for (int32_t i = 0; i < nd; ++i) {
        rng_dim_t* d = &tmp[total++];
        d->value = get_i32(rd);
        d->last = get_u8(rd) != 0;
        d->coef = get_i64(rd);
        if (d->value < -1 || d->value >= p->num_values) corrupt(rd, "a random op's size that is none");
      }
      if (nd > 0 && !tmp[total - 1].last) corrupt(rd, "a random op's dims that end no tensor");
    }
    if (!rd->error) { /* in p->rngs' order */
      int32_t off = 0;
      for (int32_t r = 0; r < p->num_rngs; ++r) {
        if (!at[r]) {
          corrupt(rd, "a random op without its dims");
          break;
        }
        p->rng_dim_start[r] = off;
        memcpy(p->rng_dims + off, at[r], sizeof(rng_dim_t) * (size_t)count[r]);
        off += count[r];
      }
      p->rng_dim_start[p->num_rngs] = off;
    }
    free(count);
    free(at);
    free(tmp);
  }
  for (int32_t b = 0; b < p->num_blocks && !rd->error; ++b) {
    const prog_block_t* bl = &p->blocks[b];
    if (bl->made_at > p->list->num_recs || (bl->freed_at != INT32_MAX && bl->freed_at > p->list->num_recs))
      corrupt(rd, "a block made or freed past the last record");
  }
  free(slots);
  free(types);
  p->untrusted = true;
}

tpurt_status_t tpurt_program_deserialize(const void* bytes, size_t n, const uint64_t* input_bytes,
                                         int32_t num_input_bytes, const uint64_t* output_bytes,
                                         int32_t num_output_bytes, tpurt_program_t** out) {
  if (!bytes || !out) return TPURT_STATUS(INVALID_ARGUMENT, "program_deserialize: NULL argument");
  *out = NULL;
  if (n < 16) return TPURT_STATUS(DATA_LOSS, "program_deserialize: %zu bytes is not a program", n);
  uint64_t h;
  memcpy(&h, (const uint8_t*)bytes + n - 8, 8);
  if (tpurt_fnv1a(bytes, n - 8, 14695981039346656037ull) != h)
    return TPURT_STATUS(DATA_LOSS, "program_deserialize: the program's check does not match its bytes (corrupt)");
  reader_t rd = {.p = bytes, .n = n - 8, .in_bytes = input_bytes, .out_bytes = output_bytes};
  if (get_u64(&rd) != PROGRAM_MAGIC) return TPURT_STATUS(DATA_LOSS, "program_deserialize: not a program (magic)");
  uint32_t version = get_u32(&rd), layout = get_u32(&rd);
  if (version != PROGRAM_VERSION && version != 1u)
    return TPURT_STATUS(FAILED_PRECONDITION, "program_deserialize: program version %u, this runtime reads %u", version,
                        PROGRAM_VERSION);
  if (layout != layout_word())
    return TPURT_STATUS(FAILED_PRECONDITION, "program_deserialize: the program was written on a machine with "
                                             "another byte order or pointer size");
  tpurt_program_t* p = tpurt_program_alloc();
  rd.scratch = tpurt_defer_list_new();
  if (p) p->list = tpurt_defer_list_new();
  if (!p || !p->list || !rd.scratch) {
    tpurt_program_release(p);
    tpurt_defer_list_free(rd.scratch);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
  }
  p->num_inputs = rd.num_inputs = get_i32(&rd);
  p->num_outputs = rd.num_outputs = get_i32(&rd);
  p->arena_bytes = rd.arena_bytes = get_u64(&rd);
  p->rng_count = get_u64(&rd);
  if (rd.num_inputs < 0 || rd.num_outputs < 0) corrupt(&rd, "negative input or output count");
  if (version >= 2 && get_u8(&rd)) read_sizes_head(&rd, p);
  if ((input_bytes && num_input_bytes != rd.num_inputs) || (output_bytes && num_output_bytes != rd.num_outputs))
    corrupt(&rd, "input or output counts other than the caller's storages");
  int32_t num_recs = get_count(&rd, 4);
  int32_t cap_relocs = 0, cap_rngs = 0;
  tpurt_defer_list_t* l = p->list;
  /* A copy's relocations point into its record: the records must not move while they are read. */
  if (!rd.error && !tpurt_defer_list_reserve(l, num_recs))
    rd.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
  for (int32_t r = 0; r < num_recs && !rd.error; ++r) {
    rd.num_pend = rd.num_pend_rng = 0;
    uint32_t kind = get_u32(&rd);
    tpurt_defer_rec_t* rec = rd.error ? NULL : tpurt_defer_list_push(l);
    if (!rec) {
      if (!rd.error) rd.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
      break;
    }
    rec->kind = kind;
    if (kind == TPURT_DEFER_COPY || kind == TPURT_DEFER_FREE) {
      rec->bytes = get_u64(&rd);
      rec->dst = get_addr(&rd);
      if (kind == TPURT_DEFER_COPY) rec->src = get_addr(&rd);
      int32_t next = 0;
      void** slots[2] = {&rec->dst, (void**)&rec->src};
      for (int s = 0; s < 2 && !rd.error; ++s)
        if (*slots[s]) {
          reloc_t rl = rd.pend[next++];
          rl.slot = slots[s];
          *slots[s] = NULL;
          if (kind == TPURT_DEFER_COPY && !inside(&rd, &rl, rl.off, rl.off + (int64_t)rec->bytes))
            corrupt(&rd, "a copy outside the memory it names");
          else if (!tpurt_program_push_reloc(p, &cap_relocs, rl))
            rd.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
        }
      continue;
    }
    if (kind != TPURT_DEFER_KERNEL) {
      corrupt(&rd, "an unknown record kind");
      break;
    }
    char* opname = get_str(&rd);
    tpurt_op_call_t call = {0};
    call.name = get_str(&rd);
    call.overload = get_str(&rd);
    const tpurt_op_def_t* op = opname ? tpurt_op_lookup(opname) : NULL;
    if (!rd.error && !op) {
      rd.error = TPURT_STATUS(NOT_FOUND, "program_deserialize: record %d runs kernel '%s', which this runtime does "
                                         "not have", r, opname);
      break;
    }
    call.num_args = get_count(&rd, 8);
    tpurt_arg_t* args = scratch(&rd, sizeof(tpurt_arg_t) * ((size_t)call.num_args + 1));
    for (int32_t a = 0; args && a < call.num_args && !rd.error; ++a) get_arg(&rd, &args[a]);
    call.args = args;
    call.num_outputs = get_count(&rd, 8);
    tpurt_tensor_t* outs = scratch(&rd, sizeof(tpurt_tensor_t) * ((size_t)call.num_outputs + 1));
    for (int32_t o = 0; outs && o < call.num_outputs && !rd.error; ++o) get_tensor(&rd, &outs[o]);
    call.outputs = outs;
    if (rd.error) break;
    tpurt_status_t vs = tpurt_call_validate(&call);
    if (vs) {
      rd.error = vs;
      break;
    }
    uint8_t* buf = tpurt_defer_list_alloc(l, tpurt_call_record_size(&call));
    if (!buf) {
      rd.error = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_deserialize: out of host memory");
      break;
    }
    rec->op = op;
    tpurt_call_record_copy(&call, buf, &rec->call);
    l->num_kernels++;
    /* Bind the copy's slots to the relocations read, in the writer's order:
     * each argument's tensors, then the outputs. */
    int32_t next = 0, next_rng = 0;
    bool ok = true;
    for (int32_t a = 0; a < rec->call.num_args && ok; ++a) {
      tpurt_arg_t* arg = (tpurt_arg_t*)&rec->call.args[a];
      if (arg->kind == TPURT_ARG_TENSOR) ok = bind_tensor(p, &cap_relocs, &rd, &next, (tpurt_tensor_t*)arg->v.tensor);
      else if (arg->kind == TPURT_ARG_TENSOR_LIST)
        for (int32_t e = 0; e < arg->count && ok; ++e)
          ok = !arg->v.tensors[e] || bind_tensor(p, &cap_relocs, &rd, &next, (tpurt_tensor_t*)arg->v.tensors[e]);
      else if (arg->kind == TPURT_ARG_RNG)
        ok = next_rng < rd.num_pend_rng &&
             rd.pend_rng[next_rng] < p->rng_count &&
             tpurt_program_push_rng(p, &cap_rngs, (rng_reloc_t){.slot = &arg->v.rng, .rel = rd.pend_rng[next_rng++]});
    }
    for (int32_t o = 0; o < rec->call.num_outputs && ok; ++o)
      ok = bind_tensor(p, &cap_relocs, &rd, &next, (tpurt_tensor_t*)&rec->call.outputs[o]);
    if (!ok || next != rd.num_pend || next_rng != rd.num_pend_rng)
      corrupt(&rd, "addresses outside the memory they name, or that do not match the record");
  }
  if (rd.sized && !rd.error) read_sizes_tail(&rd, p);
  if (!rd.error && rd.at != rd.n) corrupt(&rd, "bytes after the last record");
  free(rd.pend);
  free(rd.pend_rng);
  tpurt_defer_list_free(rd.scratch);
  if (rd.error) {
    tpurt_program_release(p);
    return rd.error;
  }
  l->fuse_min_numel = tpurt_program_fuse_min_numel();
  l->keep_plan = true;
  *out = p;
  return TPURT_OK;
}
