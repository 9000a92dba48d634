/* Programs whose sizes are run-time parameters (tpurt/program.h: generalize,
 * bind, launch_bound).
 *
 * A capture holds one call's numbers: each kernel's sizes and strides, its
 * int arguments, copy and block bytes, offsets into inputs and the arena.
 * Captures of the same graph at other values of its symbolic sizes differ
 * only in those numbers when the graph is the same program at every size.
 * generalize walks the captures in lockstep: whatever must be equal (kinds,
 * ops, dtypes, ranks, flags, which buffer an address lives in) is compared,
 * and each number that differs must be coef * (a size expression the caller
 * evaluated at each capture), one coef for all captures, or the program keeps
 * its fixed sizes. Random ops' counter offsets are sums of rounded reservations
 * instead: they are explained by that rule (below). A binding evaluates the fields for new values and plans
 * the arena for the new block sizes; a launch writes the fields into the
 * records (on the queue's thread, under the program's lock, as relocation
 * does) and the fusion executor plans chains for what it sees (generated
 * kernels take sizes at run time, so none is built again). */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "exec/defer/program_internal.h"

typedef struct field_t {
  void* slot;
  int32_t type;
  int32_t rec;
  int64_t i; /* the value (integral doubles as ints) */
  double d;
} field_t;

typedef struct walk_t {
  int64_t* tokens;
  int32_t* token_recs; /* the record each token belongs to (messages) */
  int32_t num_tokens, cap_tokens, cap_token_recs;
  field_t* fields;
  int32_t num_fields, cap_fields;
  void** ptrs; /* address slots, in walk order */
  int32_t num_ptrs, cap_ptrs;
  tpurt_rng_t** rngs; /* random ops' slots, in walk order */
  int32_t num_rngs, cap_rngs;
  bool oom;
  int32_t rec;
} walk_t;

static void* grow(void* a, int32_t* cap, int32_t n, size_t elem, bool* oom) {
  if (n < *cap) return a;
  int32_t c = *cap ? *cap * 2 : 256;
  void* b = realloc(a, elem * (size_t)c);
  if (!b) {
    *oom = true;
    return a;
  }
  *cap = c;
  return b;
}

static void token(walk_t* w, int64_t v) {
  w->tokens = grow(w->tokens, &w->cap_tokens, w->num_tokens, sizeof(int64_t), &w->oom);
  w->token_recs = grow(w->token_recs, &w->cap_token_recs, w->num_tokens, sizeof(int32_t), &w->oom);
  if (w->oom) return;
  w->token_recs[w->num_tokens] = w->rec;
  w->tokens[w->num_tokens++] = v;
}

static void field(walk_t* w, void* slot, int32_t type) {
  w->fields = grow(w->fields, &w->cap_fields, w->num_fields, sizeof(field_t), &w->oom);
  if (w->oom) return;
  field_t f = {.slot = slot, .type = type, .rec = w->rec};
  if (type == SYM_I64) f.i = *(int64_t*)slot;
  else if (type == SYM_U64) f.i = (int64_t)*(uint64_t*)slot;
  else f.d = *(double*)slot;
  w->fields[w->num_fields++] = f;
}

static void ptr(walk_t* w, void* slot) {
  w->ptrs = grow(w->ptrs, &w->cap_ptrs, w->num_ptrs, sizeof(void*), &w->oom);
  if (!w->oom) w->ptrs[w->num_ptrs++] = slot;
}

static int64_t str_token(const char* s) { return s ? (int64_t)tpurt_fnv1a(s, strlen(s), TPURT_FNV_SEED) : -1; }

static void walk_tensor(walk_t* w, tpurt_tensor_t* t) {
  token(w, t != NULL);
  if (!t) return;
  token(w, t->dtype);
  token(w, t->ndim);
  token(w, t->data != NULL);
  for (int32_t d = 0; d < t->ndim; ++d) field(w, &t->sizes[d], SYM_I64), field(w, &t->strides[d], SYM_I64);
  if (t->data) ptr(w, &t->data);
}

static void walk_program(walk_t* w, const tpurt_program_t* p) {
  const tpurt_defer_list_t* l = p->list;
  w->rec = -1;
  token(w, l->num_recs), token(w, p->num_inputs), token(w, p->num_outputs);
  for (int32_t r = 0; r < l->num_recs && !w->oom; ++r) {
    tpurt_defer_rec_t* rec = &l->recs[r];
    w->rec = r;
    token(w, rec->kind);
    if (rec->kind == TPURT_DEFER_COPY) {
      field(w, &rec->bytes, SYM_U64);
      ptr(w, &rec->dst);
      ptr(w, (void*)&rec->src);
      continue;
    }
    if (rec->kind == TPURT_DEFER_FREE) {
      field(w, &rec->bytes, SYM_U64);
      ptr(w, &rec->dst);
      continue;
    }
    tpurt_op_call_t* call = &rec->call;
    /* The op and its name say which kernel runs; the overload string is not compared: the boxed
     * fallback's fast path for a signature it has seen leaves it empty where the first call names it. */
    token(w, (int64_t)(uintptr_t)rec->op), token(w, str_token(call->name));
    token(w, call->num_outputs);
    for (int32_t o = 0; o < call->num_outputs; ++o) walk_tensor(w, (tpurt_tensor_t*)&call->outputs[o]);
    token(w, call->num_args);
    for (int32_t a = 0; a < call->num_args; ++a) {
      tpurt_arg_t* arg = (tpurt_arg_t*)&call->args[a];
      token(w, arg->kind);
      switch (arg->kind) {
        case TPURT_ARG_TENSOR: walk_tensor(w, (tpurt_tensor_t*)arg->v.tensor); break;
        case TPURT_ARG_TENSOR_LIST:
          token(w, arg->count);
          for (int32_t e = 0; e < arg->count; ++e) walk_tensor(w, (tpurt_tensor_t*)arg->v.tensors[e]);
          break;
        case TPURT_ARG_INT: field(w, &arg->v.i, SYM_I64); break;
        case TPURT_ARG_DOUBLE: field(w, &arg->v.d, SYM_F64); break;
        case TPURT_ARG_BOOL: token(w, arg->v.b); break;
        case TPURT_ARG_DTYPE:
        case TPURT_ARG_OTHER: token(w, arg->v.i); break;
        case TPURT_ARG_INT_LIST:
          token(w, arg->count);
          for (int32_t e = 0; e < arg->count; ++e) field(w, (int64_t*)&arg->v.ints[e], SYM_I64);
          break;
        case TPURT_ARG_DOUBLE_LIST:
          token(w, arg->count);
          for (int32_t e = 0; e < arg->count; ++e) field(w, (double*)&arg->v.doubles[e], SYM_F64);
          break;
        case TPURT_ARG_BOOL_LIST:
          token(w, arg->count);
          for (int32_t e = 0; e < arg->count; ++e) token(w, arg->v.bools[e]);
          break;
        case TPURT_ARG_STRING: token(w, str_token(arg->v.s)); break;
        case TPURT_ARG_RNG:
          w->rngs = grow(w->rngs, &w->cap_rngs, w->num_rngs, sizeof(tpurt_rng_t*), &w->oom);
          if (!w->oom) w->rngs[w->num_rngs++] = &arg->v.rng;
          break;
        default: break; /* NONE */
      }
    }
  }
}

static void walk_free(walk_t* w) {
  free(w->tokens);
  free(w->token_recs);
  free(w->fields);
  free(w->ptrs);
  free(w->rngs);
}

/* Relocation index of each address slot (sorted by slot), for lookups. */
typedef struct slot_k_t {
  void* slot;
  int32_t k;
} slot_k_t;

static int slot_cmp(const void* a, const void* b) {
  uintptr_t x = (uintptr_t)((const slot_k_t*)a)->slot, y = (uintptr_t)((const slot_k_t*)b)->slot;
  return x < y ? -1 : x > y;
}

static slot_k_t* reloc_index(const tpurt_program_t* p) {
  slot_k_t* idx = malloc(sizeof(slot_k_t) * (size_t)(p->num_relocs + 1));
  if (!idx) return NULL;
  for (int32_t k = 0; k < p->num_relocs; ++k) idx[k] = (slot_k_t){p->relocs[k].slot, k};
  qsort(idx, (size_t)p->num_relocs, sizeof(slot_k_t), slot_cmp);
  return idx;
}

static int32_t reloc_of(const slot_k_t* idx, int32_t n, void* slot) {
  slot_k_t key = {slot, 0};
  const slot_k_t* f = bsearch(&key, idx, (size_t)n, sizeof(slot_k_t), slot_cmp);
  return f ? f->k : -1;
}

tpurt_status_t tpurt_program_number_slots(const tpurt_program_t* p, void*** slots, int32_t** types, int32_t* n) {
  *slots = NULL;
  *types = NULL;
  *n = 0;
  walk_t w = {0};
  walk_program(&w, p);
  slot_k_t* idx = reloc_index(p);
  int32_t cap = w.num_fields + w.num_ptrs + w.num_rngs + 1;
  void** sl = malloc(sizeof(void*) * (size_t)cap);
  int32_t* ty = malloc(sizeof(int32_t) * (size_t)cap);
  tpurt_status_t s = TPURT_OK;
  if (w.oom || !idx || !sl || !ty) {
    s = TPURT_STATUS(RESOURCE_EXHAUSTED, "program sizes: out of host memory");
    goto done;
  }
  int32_t k = 0;
  for (int32_t f = 0; f < w.num_fields; ++f) sl[k] = w.fields[f].slot, ty[k++] = w.fields[f].type;
  for (int32_t a = 0; a < w.num_ptrs; ++a) {
    int32_t r = reloc_of(idx, p->num_relocs, w.ptrs[a]);
    if (r >= 0) sl[k] = &p->relocs[r].off, ty[k++] = SYM_I64;
  }
  for (int32_t a = 0; a < w.num_rngs; ++a)
    for (int32_t r = 0; r < p->num_rngs; ++r)
      if (p->rngs[r].slot == w.rngs[a]) {
        sl[k] = &p->rngs[r].rel, ty[k++] = SYM_U64;
        break;
      }
  *slots = sl;
  *types = ty;
  *n = k;
  sl = NULL;
  ty = NULL;
done:
  walk_free(&w);
  free(idx);
  free(sl);
  free(ty);
  return s;
}

static int64_t reloc_inner(const tpurt_program_t* p, const reloc_t* r) {
  return r->where == WHERE_ARENA ? r->off - (int64_t)p->blocks[r->index].arena_off : r->off;
}

/* The value of a field at capture k as an int; false for a non-integral double. */
static bool as_int(const field_t* f, int64_t* out) {
  if (f->type != SYM_F64) {
    *out = f->i;
    return true;
  }
  double d = f->d;
  if (!(d >= -4.6e18 && d <= 4.6e18) || (double)(int64_t)d != d) return false;
  *out = (int64_t)d;
  return true;
}

/* v[k] = coef * values[k][e] for every capture k: the first such e. -1 when none. */
static int32_t explain(const int64_t* v, int32_t rows, const int64_t* values, int32_t num_values, int64_t* coef) {
  for (int32_t e = 0; e < num_values; ++e) {
    int64_t x0 = values[e];
    if (x0 == 0 || v[0] % x0 != 0) continue;
    int64_t c = v[0] / x0;
    if (c == 0) continue;
    bool ok = true;
    for (int32_t k = 1; k < rows && ok; ++k) {
      int64_t x = values[(size_t)k * (size_t)num_values + (size_t)e];
      ok = x != 0 && v[k] % x == 0 && v[k] / x == c;
    }
    if (ok) {
      *coef = c;
      return e;
    }
  }
  return -1;
}

typedef struct syms_t {
  sym_field_t* a;
  int32_t n, cap;
  bool oom;
} syms_t;

static void push_sym(syms_t* s, sym_field_t f) {
  s->a = grow(s->a, &s->cap, s->n, sizeof(sym_field_t), &s->oom);
  if (!s->oom) s->a[s->n++] = f;
}

static const char* rec_name(const tpurt_program_t* p, int32_t r) {
  if (r < 0 || r >= p->list->num_recs) return "the program";
  const tpurt_defer_rec_t* rec = &p->list->recs[r];
  return rec->kind == TPURT_DEFER_KERNEL ? rec->call.name : rec->kind == TPURT_DEFER_COPY ? "a device copy" : "a free";
}

/* A number that differs between captures: a sym field, or the error naming it. */
static tpurt_status_t explain_field(const tpurt_program_t* p, int32_t rec, const char* what, void* slot, int32_t type,
                                    const int64_t* v, int32_t rows, const int64_t* values, int32_t num_values,
                                    syms_t* out) {
  bool same = true;
  for (int32_t k = 1; k < rows; ++k) same = same && v[k] == v[0];
  if (same) return TPURT_OK;
  int64_t coef = 0;
  int32_t e = explain(v, rows, values, num_values, &coef);
  if (e < 0)
    return TPURT_STATUS(FAILED_PRECONDITION,
                        "generalize: %s of %s (record %d) is %lld, then %lld at other sizes: not a multiple of "
                        "any size expression given",
                        what, rec_name(p, rec), rec, (long long)v[0], (long long)v[1]);
  push_sym(out, (sym_field_t){.slot = slot, .type = type, .value = e, .coef = coef});
  return TPURT_OK;
}

/* ---- random offsets by the reservation rule ----
 *
 * A random call reserves tpurt_rng_reservation(its largest tensor's element count) counter values
 * per TPURT_ARG_RNG argument, so a program's random offsets are running sums of rounded counts: no
 * multiple of one size. Where the captures' offsets and count are exactly those sums of their own
 * records' sizes, a binding computes them the same way from the bound sizes. */

/* A record tensor's element count; 0 for none, an output not asked for (data NULL) or an empty one. */
static int64_t tensor_numel(const tpurt_tensor_t* t) {
  if (!t || !t->data) return 0;
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) n *= t->sizes[d];
  return n;
}

/* The largest element count among a call's tensors (outputs, tensor arguments, list entries): what
 * the C++ layer reserves by. */
static int64_t call_max_numel(const tpurt_op_call_t* call) {
  int64_t m = 0, n;
  for (int32_t o = 0; o < call->num_outputs; ++o)
    if ((n = tensor_numel(&call->outputs[o])) > m) m = n;
  for (int32_t a = 0; a < call->num_args; ++a) {
    const tpurt_arg_t* arg = &call->args[a];
    if (arg->kind == TPURT_ARG_TENSOR && (n = tensor_numel(arg->v.tensor)) > m) m = n;
    if (arg->kind == TPURT_ARG_TENSOR_LIST)
      for (int32_t e = 0; e < arg->count; ++e)
        if ((n = tensor_numel(arg->v.tensors[e])) > m) m = n;
  }
  return m;
}

/* Calls fn(q, r, call, user) for each random offset r of q (q->rngs, in record order) with its
 * record's call; false when q->rngs is not its records' RNG arguments in order. */
typedef bool (*rng_fn_t)(const tpurt_program_t* q, int32_t r, const tpurt_op_call_t* call, void* user);

static bool each_rng(const tpurt_program_t* q, rng_fn_t fn, void* user) {
  int32_t r = 0;
  for (int32_t i = 0; i < q->list->num_recs; ++i) {
    const tpurt_defer_rec_t* rec = &q->list->recs[i];
    if (rec->kind != TPURT_DEFER_KERNEL) continue;
    for (int32_t a = 0; a < rec->call.num_args; ++a) {
      if (rec->call.args[a].kind != TPURT_ARG_RNG) continue;
      if (r >= q->num_rngs || q->rngs[r].slot != &rec->call.args[a].v.rng) return false;
      if (!fn(q, r++, &rec->call, user)) return false;
    }
  }
  return r == q->num_rngs;
}

static bool rng_check_one(const tpurt_program_t* q, int32_t r, const tpurt_op_call_t* call, void* user) {
  uint64_t* sum = user;
  if (q->rngs[r].rel != *sum) return false;
  *sum += tpurt_rng_reservation(call_max_numel(call));
  return true;
}

/* Whether q's random offsets and count are the rule's running sums over its own records. */
static bool rng_rule_holds(const tpurt_program_t* q) {
  uint64_t sum = 0;
  return each_rng(q, rng_check_one, &sum) && sum == q->rng_count;
}

typedef struct rng_desc_t {
  rng_dim_t* dims;
  int32_t num_dims, cap_dims;
  int32_t* start; /* num_rngs + 1 */
  const slot_k_t* sym_idx; /* the explained fields by slot: k indexes syms */
  const sym_field_t* syms;
  int32_t num_syms;
  bool oom;
} rng_desc_t;

static void desc_tensor(rng_desc_t* d, const tpurt_tensor_t* t) {
  if (!t || !t->data) return; /* counts 0 at every size: the data pointer's presence is compared */
  for (int32_t i = 0; i < (t->ndim ? t->ndim : 1); ++i) {
    d->dims = grow(d->dims, &d->cap_dims, d->num_dims, sizeof(rng_dim_t), &d->oom);
    if (d->oom) return;
    rng_dim_t x = {.value = -1, .last = i + 1 >= t->ndim, .coef = t->ndim ? t->sizes[i] : 1};
    if (t->ndim) {
      int32_t k = reloc_of(d->sym_idx, d->num_syms, (void*)&t->sizes[i]);
      if (k >= 0) x.value = d->syms[k].value, x.coef = d->syms[k].coef;
    }
    d->dims[d->num_dims++] = x;
  }
}

static bool rng_desc_one(const tpurt_program_t* q, int32_t r, const tpurt_op_call_t* call, void* user) {
  rng_desc_t* d = user;
  d->start[r] = d->num_dims;
  for (int32_t o = 0; o < call->num_outputs; ++o) desc_tensor(d, &call->outputs[o]);
  for (int32_t a = 0; a < call->num_args; ++a) {
    const tpurt_arg_t* arg = &call->args[a];
    if (arg->kind == TPURT_ARG_TENSOR) desc_tensor(d, arg->v.tensor);
    if (arg->kind == TPURT_ARG_TENSOR_LIST)
      for (int32_t e = 0; e < arg->count; ++e) desc_tensor(d, arg->v.tensors[e]);
  }
  d->start[r + 1] = d->num_dims;
  return !d->oom;
}

/* The dims of each random record of p: each a size field explained among syms (found by its slot)
 * or a constant. False without memory. */
static bool rng_describe(const tpurt_program_t* p, const sym_field_t* syms, int32_t num_syms, rng_dim_t** out_dims,
                         int32_t** out_start) {
  rng_desc_t d = {.syms = syms, .num_syms = num_syms};
  slot_k_t* idx = malloc(sizeof(slot_k_t) * (size_t)(num_syms + 1));
  d.start = calloc((size_t)p->num_rngs + 1, sizeof(int32_t));
  bool ok = idx && d.start;
  if (ok) {
    for (int32_t k = 0; k < num_syms; ++k) idx[k] = (slot_k_t){syms[k].slot, k};
    qsort(idx, (size_t)num_syms, sizeof(slot_k_t), slot_cmp);
    d.sym_idx = idx;
    ok = each_rng(p, rng_desc_one, &d) && !d.oom;
  }
  free(idx);
  if (!ok) {
    free(d.dims);
    free(d.start);
    return false;
  }
  *out_dims = d.dims;
  *out_start = d.start;
  return true;
}

tpurt_status_t tpurt_program_generalize(tpurt_program_t* p, const tpurt_program_t* const* others, int32_t num_others,
                                        const int64_t* values, int32_t num_values) {
  if (!p || num_others < 1 || !others || num_values < 1 || !values)
    return TPURT_STATUS(INVALID_ARGUMENT, "generalize: a program, at least one other capture and size values needed");
  if (p->num_values > 0) return TPURT_STATUS(FAILED_PRECONDITION, "generalize: the program already takes sizes");
  if (atomic_load(&p->launches) != 0)
    return TPURT_STATUS(FAILED_PRECONDITION, "generalize: the program was launched already");
  int32_t rows = num_others + 1;
  for (int32_t k = 0; k < num_others; ++k)
    if (!others[k] || !others[k]->list) return TPURT_STATUS(INVALID_ARGUMENT, "generalize: NULL capture");
  walk_t* w = calloc((size_t)rows, sizeof(walk_t));
  slot_k_t** idx = calloc((size_t)rows, sizeof(slot_k_t*));
  int64_t* v = malloc(sizeof(int64_t) * (size_t)rows);
  syms_t syms = {0};
  sym_field_t* block_syms = NULL;
  sym_field_t rng_sym = {.value = -1};
  int64_t* values0 = NULL;
  rng_dim_t* rng_dims = NULL;
  int32_t* rng_dim_start = NULL;
  tpurt_status_t s = TPURT_OK;
  if (!w || !idx || !v) {
    s = TPURT_STATUS(RESOURCE_EXHAUSTED, "generalize: out of host memory");
    goto done;
  }
  for (int32_t k = 0; k < rows && !s; ++k) {
    const tpurt_program_t* q = k ? others[k - 1] : p;
    walk_program(&w[k], q);
    idx[k] = reloc_index(q);
    if (w[k].oom || !idx[k]) s = TPURT_STATUS(RESOURCE_EXHAUSTED, "generalize: out of host memory");
  }
  if (s) goto done;
  /* The same program at every size: every token equal, the same numbers of fields and addresses. */
  for (int32_t k = 1; k < rows && !s; ++k) {
    const tpurt_program_t* q = others[k - 1];
    bool same = w[k].num_tokens == w[0].num_tokens && w[k].num_fields == w[0].num_fields &&
                w[k].num_ptrs == w[0].num_ptrs && q->num_rngs == p->num_rngs && q->num_blocks == p->num_blocks &&
                q->num_relocs == p->num_relocs && q->blocks && p->blocks;
    int32_t t = 0;
    while (same && t < w[0].num_tokens && w[k].tokens[t] == w[0].tokens[t]) ++t;
    if (!same || t < w[0].num_tokens) {
      /* The first record that differs in kind or op, for the message. */
      int32_t r = 0, n = p->list->num_recs < q->list->num_recs ? p->list->num_recs : q->list->num_recs;
      while (r < n && p->list->recs[r].kind == q->list->recs[r].kind && p->list->recs[r].op == q->list->recs[r].op)
        ++r;
      if (r == n && t < w[0].num_tokens && t < w[k].num_tokens) r = w[0].token_recs[t];
      s = TPURT_STATUS(FAILED_PRECONDITION,
                       "generalize: the captures at other sizes ran other kernels (%d and %d records; record %d is "
                       "%s here, %s there; item %d: %lld here, %lld there)",
                       p->list->num_recs, q->list->num_recs, r, r < p->list->num_recs ? rec_name(p, r) : "the end",
                       r < q->list->num_recs ? rec_name(q, r) : "the end", t,
                       (long long)(t < w[0].num_tokens ? w[0].tokens[t] : -1),
                       (long long)(t < w[k].num_tokens ? w[k].tokens[t] : -1));
    }
    for (int32_t b = 0; same && !s && b < p->num_blocks; ++b) {
      const prog_block_t *x = &p->blocks[b], *y = &q->blocks[b];
      if (x->made_at != y->made_at || x->freed_at != y->freed_at || x->in_arena != y->in_arena)
        s = TPURT_STATUS(FAILED_PRECONDITION, "generalize: the captures at other sizes made other blocks");
    }
  }
  if (s) goto done;
  /* Numbers in the records. */
  for (int32_t f = 0; f < w[0].num_fields && !s; ++f) {
    bool ok = true;
    for (int32_t k = 0; k < rows && ok; ++k) ok = as_int(&w[k].fields[f], &v[k]);
    const field_t* f0 = &w[0].fields[f];
    if (!ok) {
      bool same = true;
      for (int32_t k = 1; k < rows; ++k) same = same && w[k].fields[f].d == f0->d;
      if (!same)
        s = TPURT_STATUS(FAILED_PRECONDITION,
                         "generalize: a float argument of %s (record %d) changes with the sizes and is no size",
                         rec_name(p, f0->rec), f0->rec);
      continue;
    }
    s = explain_field(p, f0->rec, f0->type == SYM_F64 ? "a float argument" : "a size, stride or count", f0->slot,
                      f0->type, v, rows, values, num_values, &syms);
  }
  /* Addresses: the same buffer at every size, offsets inside it as numbers. */
  for (int32_t a = 0; a < w[0].num_ptrs && !s; ++a) {
    int32_t k0 = reloc_of(idx[0], p->num_relocs, w[0].ptrs[a]);
    for (int32_t k = 1; k < rows && !s; ++k) {
      const tpurt_program_t* q = others[k - 1];
      int32_t kq = reloc_of(idx[k], q->num_relocs, w[k].ptrs[a]);
      bool same = (k0 < 0) == (kq < 0);
      if (same && k0 < 0) same = *(void**)w[0].ptrs[a] == *(void**)w[k].ptrs[a]; /* a fixed address */
      else if (same) {
        const reloc_t *x = &p->relocs[k0], *y = &q->relocs[kq];
        same = x->where == y->where && x->index == y->index;
        v[k] = reloc_inner(q, y);
      }
      if (!same)
        s = TPURT_STATUS(FAILED_PRECONDITION,
                         "generalize: an address of the captures at other sizes lives in another buffer (address "
                         "%d)",
                         a);
    }
    if (s || k0 < 0) continue;
    v[0] = reloc_inner(p, &p->relocs[k0]);
    s = explain_field(p, -1, "an offset into a buffer", &p->relocs[k0].off, SYM_I64, v, rows, values, num_values,
                      &syms);
  }
  /* Random ops' offsets and count: the same at every size, or the reservation rule's sums of each
   * capture's own record sizes (checked at every capture), or else (as any number) coef * a size. */
  bool rng_same = true;
  for (int32_t k = 1; k < rows && rng_same; ++k) {
    const tpurt_program_t* q = others[k - 1];
    rng_same = q->rng_count == p->rng_count;
    for (int32_t r = 0; r < p->num_rngs && rng_same; ++r) rng_same = q->rngs[r].rel == p->rngs[r].rel;
  }
  bool by_rule = !s && !rng_same && !syms.oom;
  for (int32_t k = 0; k < rows && by_rule; ++k) by_rule = rng_rule_holds(k ? others[k - 1] : p);
  if (by_rule && !rng_describe(p, syms.a, syms.n, &rng_dims, &rng_dim_start))
    s = TPURT_STATUS(RESOURCE_EXHAUSTED, "generalize: out of host memory");
  for (int32_t r = 0; r < p->num_rngs && !s && !by_rule; ++r) {
    for (int32_t k = 0; k < rows; ++k) v[k] = (int64_t)(k ? others[k - 1] : p)->rngs[r].rel;
    s = explain_field(p, -1, "a random op's counter offset", &p->rngs[r].rel, SYM_U64, v, rows, values, num_values,
                      &syms);
  }
  if (!s && !by_rule) {
    syms_t one = {0};
    for (int32_t k = 0; k < rows; ++k) v[k] = (int64_t)(k ? others[k - 1] : p)->rng_count;
    s = explain_field(p, -1, "the random counter count", &p->rng_count, SYM_U64, v, rows, values, num_values, &one);
    if (!s && one.n) rng_sym = one.a[0];
    free(one.a);
  }
  /* Block sizes, for the arena plan. */
  if (!s && p->num_blocks) {
    block_syms = malloc(sizeof(sym_field_t) * (size_t)p->num_blocks);
    if (!block_syms) s = TPURT_STATUS(RESOURCE_EXHAUSTED, "generalize: out of host memory");
  }
  for (int32_t b = 0; b < p->num_blocks && !s; ++b) {
    block_syms[b] = (sym_field_t){.slot = NULL, .type = SYM_U64, .value = -1};
    if (!p->blocks[b].in_arena) continue;
    for (int32_t k = 0; k < rows; ++k) v[k] = (int64_t)(k ? others[k - 1] : p)->blocks[b].bytes;
    syms_t one = {0};
    s = explain_field(p, p->blocks[b].made_at, "a block's bytes", NULL, SYM_U64, v, rows, values, num_values, &one);
    if (!s && one.n) block_syms[b] = one.a[0];
    if (one.oom) s = TPURT_STATUS(RESOURCE_EXHAUSTED, "generalize: out of host memory");
    free(one.a);
  }
  if (!s && syms.oom) s = TPURT_STATUS(RESOURCE_EXHAUSTED, "generalize: out of host memory");
  if (!s) {
    values0 = malloc(sizeof(int64_t) * (size_t)num_values);
    if (!values0) s = TPURT_STATUS(RESOURCE_EXHAUSTED, "generalize: out of host memory");
    else memcpy(values0, values, sizeof(int64_t) * (size_t)num_values);
  }
  if (s) goto done;
  /* Commit: arena relocations hold offsets inside their block from now on. */
  pthread_mutex_lock(&p->run_lock);
  for (int32_t k = 0; k < p->num_relocs; ++k)
    if (p->relocs[k].where == WHERE_ARENA) p->relocs[k].off = reloc_inner(p, &p->relocs[k]);
  p->syms = syms.a;
  p->num_syms = syms.n;
  syms.a = NULL;
  p->block_syms = block_syms;
  block_syms = NULL;
  p->rng_sym = rng_sym;
  p->values0 = values0;
  values0 = NULL;
  p->rng_dims = rng_dims;
  p->rng_dim_start = rng_dim_start;
  rng_dims = NULL;
  rng_dim_start = NULL;
  p->num_values = num_values;
  pthread_mutex_unlock(&p->run_lock);
done:
  for (int32_t k = 0; w && k < rows; ++k) walk_free(&w[k]);
  for (int32_t k = 0; idx && k < rows; ++k) free(idx[k]);
  free(w);
  free(idx);
  free(v);
  free(syms.a);
  free(block_syms);
  free(values0);
  free(rng_dims);
  free(rng_dim_start);
  return s;
}

const int64_t* tpurt_program_values(const tpurt_program_t* p) { return p && p->num_values ? p->values0 : NULL; }

int32_t tpurt_program_num_values(const tpurt_program_t* p) { return p ? p->num_values : 0; }

static int64_t eval(const sym_field_t* f, const int64_t* values) { return f->coef * values[f->value]; }

/* [lo, hi): the bytes tensor t reaches, relative to its buffer, when its data pointer is `off` bytes
 * into it. False for a rank, dtype or size no kernel could have, or an overflow. */
static bool tensor_extent(const tpurt_tensor_t* t, int64_t off, int64_t* lo, int64_t* hi) {
  if (t->ndim < 0 || t->ndim > TPURT_MAX_DIMS || t->dtype < 0 || t->dtype >= TPURT_DTYPE_COUNT) return false;
  int64_t es = tpurt_dtype_traits[t->dtype].size, mn = 0, mx = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] < 0) return false;
    if (t->sizes[d] == 0) {
      *lo = *hi = 0; /* reaches nothing */
      return true;
    }
    int64_t span;
    if (__builtin_mul_overflow(t->sizes[d] - 1, t->strides[d], &span)) return false;
    if (span < 0 ? __builtin_add_overflow(mn, span, &mn) : __builtin_add_overflow(mx, span, &mx)) return false;
  }
  int64_t a, b;
  if (__builtin_mul_overflow(mn, es, &a) || __builtin_mul_overflow(mx + 1, es, &b)) return false;
  if (__builtin_add_overflow(off, a, lo) || __builtin_add_overflow(off, b, hi)) return false;
  return true;
}

typedef struct reach_t {
  const tpurt_program_t* p;
  const slot_k_t* idx;
  const uint64_t* block_bytes;
  uint64_t* need; /* inputs, then outputs */
  int32_t rec;
  tpurt_status_t error;
} reach_t;

/* Bytes [lo, hi) reached through the address in `slot` (relative to it; hi == lo: nothing). */
static void reach(reach_t* c, void* slot, int64_t lo, int64_t hi) {
  if (c->error || hi <= lo) return;
  int32_t k = reloc_of(c->idx, c->p->num_relocs, slot);
  if (k < 0) return; /* NULL or fixed: a program read from bytes has none of the latter */
  const reloc_t* r = &c->p->relocs[k];
  int64_t a, b;
  if (__builtin_add_overflow(r->off, lo, &a) || __builtin_add_overflow(r->off, hi, &b) || a < 0) {
    c->error = TPURT_STATUS(DATA_LOSS, "program_bind: record %d reaches before its buffer at these sizes", c->rec);
    return;
  }
  if (r->where == WHERE_ARENA) {
    if ((uint64_t)b > c->block_bytes[r->index])
      c->error = TPURT_STATUS(DATA_LOSS, "program_bind: record %d reaches past its arena block at these sizes",
                              c->rec);
  } else if (r->where == WHERE_INPUT || r->where == WHERE_OUTPUT) {
    uint64_t* n = &c->need[(r->where == WHERE_OUTPUT ? c->p->num_inputs : 0) + r->index];
    if ((uint64_t)b > *n) *n = (uint64_t)b;
  }
}

static void reach_tensor(reach_t* c, const tpurt_tensor_t* t) {
  if (!t) return; /* its data pointer is set at launch (NULL until then in a program read from bytes) */
  int64_t lo, hi;
  if (!tensor_extent(t, 0, &lo, &hi)) {
    if (!c->error)
      c->error = TPURT_STATUS(DATA_LOSS, "program_bind: record %d has a tensor no kernel could take at these sizes",
                              c->rec);
    return;
  }
  reach(c, (void*)&t->data, lo, hi);
}

/* A program read from bytes, bound: every address its records make at b's sizes lies inside its arena
 * block, and b->need[] the bytes each input and output storage must hold. Under run_lock: the
 * binding is applied to the records, as a launch does. */
static tpurt_status_t check_reach(tpurt_program_t* p, tpurt_program_binding_t* b, const uint64_t* block_bytes) {
  slot_k_t* idx = reloc_index(p);
  b->need = calloc((size_t)(p->num_inputs + p->num_outputs + 1), sizeof(uint64_t));
  if (!idx || !b->need) {
    free(idx);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "program_bind: out of host memory");
  }
  reach_t c = {.p = p, .idx = idx, .block_bytes = block_bytes, .need = b->need};
  pthread_mutex_lock(&p->run_lock);
  tpurt_program_apply_binding(p, b);
  const tpurt_defer_list_t* l = p->list;
  for (int32_t r = 0; r < l->num_recs && !c.error; ++r) {
    const tpurt_defer_rec_t* rec = &l->recs[r];
    c.rec = r;
    if (rec->kind == TPURT_DEFER_COPY) {
      if (rec->bytes > ((uint64_t)1 << 62)) {
        c.error = TPURT_STATUS(DATA_LOSS, "program_bind: record %d copies %llu bytes", r,
                               (unsigned long long)rec->bytes);
        break;
      }
      reach(&c, (void*)&rec->dst, 0, (int64_t)rec->bytes);
      reach(&c, (void*)&rec->src, 0, (int64_t)rec->bytes);
      continue;
    }
    if (rec->kind != TPURT_DEFER_KERNEL) continue; /* a free reaches nothing */
    const tpurt_op_call_t* call = &rec->call;
    for (int32_t a = 0; a < call->num_args; ++a) {
      const tpurt_arg_t* arg = &call->args[a];
      if (arg->kind == TPURT_ARG_TENSOR) reach_tensor(&c, arg->v.tensor);
      else if (arg->kind == TPURT_ARG_TENSOR_LIST)
        for (int32_t e = 0; e < arg->count; ++e) reach_tensor(&c, arg->v.tensors[e]);
    }
    for (int32_t o = 0; o < call->num_outputs; ++o) reach_tensor(&c, &call->outputs[o]);
  }
  pthread_mutex_unlock(&p->run_lock);
  free(idx);
  return c.error;
}

tpurt_status_t tpurt_program_check_storages(const tpurt_program_t* p, const tpurt_program_binding_t* b,
                                            const uint64_t* in_bytes, int32_t num_in, const uint64_t* out_bytes,
                                            int32_t num_out) {
  if (!p) return TPURT_STATUS(INVALID_ARGUMENT, "program_check_storages: NULL program");
  if (!b || !b->need) return TPURT_OK; /* captured: its sizes came from a run */
  if (num_in != p->num_inputs || num_out != p->num_outputs || (num_in && !in_bytes) || (num_out && !out_bytes))
    return TPURT_STATUS(INVALID_ARGUMENT, "program_check_storages: %d inputs and %d outputs given, the program has "
                                          "%d and %d", num_in, num_out, p->num_inputs, p->num_outputs);
  for (int32_t i = 0; i < num_in + num_out; ++i) {
    uint64_t have = i < num_in ? in_bytes[i] : out_bytes[i - num_in];
    if (b->need[i] > have)
      return TPURT_STATUS(INVALID_ARGUMENT, "program: %s %d is %llu bytes; at these sizes the program reaches %llu",
                          i < num_in ? "input" : "output", i < num_in ? i : i - num_in, (unsigned long long)have,
                          (unsigned long long)b->need[i]);
  }
  return TPURT_OK;
}

/* A binding's random offsets by the reservation rule (p->rng_dims); false when a tensor's element
 * count at these values overflows or is negative. */
static bool bind_rngs(const tpurt_program_t* p, const int64_t* values, uint64_t* rel, uint64_t* count) {
  uint64_t sum = 0;
  for (int32_t r = 0; r < p->num_rngs; ++r) {
    int64_t m = 0, n = 1;
    for (int32_t i = p->rng_dim_start[r]; i < p->rng_dim_start[r + 1]; ++i) {
      const rng_dim_t* d = &p->rng_dims[i];
      int64_t x = d->coef;
      if (d->value >= 0 && __builtin_mul_overflow(d->coef, values[d->value], &x)) return false;
      if (x < 0 || __builtin_mul_overflow(n, x, &n)) return false;
      if (d->last) {
        if (n > m) m = n;
        n = 1;
      }
    }
    rel[r] = sum;
    if (__builtin_add_overflow(sum, tpurt_rng_reservation(m), &sum)) return false;
  }
  *count = sum;
  return true;
}

tpurt_status_t tpurt_program_bind(tpurt_program_t* p, const int64_t* values, int32_t num_values,
                                  tpurt_program_binding_t** out, uint64_t* out_arena_bytes, uint64_t* out_rng_count) {
  if (!out) return TPURT_STATUS(INVALID_ARGUMENT, "program_bind: NULL out");
  *out = NULL;
  if (!p || (num_values && !values)) return TPURT_STATUS(INVALID_ARGUMENT, "program_bind: NULL program or values");
  if (num_values != p->num_values || num_values == 0)
    return TPURT_STATUS(INVALID_ARGUMENT, "program_bind: %d values given, the program takes %d", num_values,
                        p->num_values);
  for (int32_t e = 0; e < num_values; ++e)
    if (values[e] < 0 || values[e] > ((int64_t)1 << 40))
      return TPURT_STATUS(INVALID_ARGUMENT, "program_bind: size value %d is %lld", e, (long long)values[e]);
  pthread_mutex_lock(&p->bind_lock);
  for (int32_t i = 0; i < p->num_bindings; ++i)
    if (!memcmp(p->bindings[i]->values, values, sizeof(int64_t) * (size_t)num_values)) {
      *out = p->bindings[i];
      break;
    }
  tpurt_status_t s = TPURT_OK;
  if (!*out) {
    tpurt_program_binding_t* b = calloc(1, sizeof(*b));
    uint64_t* sizes = malloc(sizeof(uint64_t) * (size_t)(p->num_blocks + 1));
    if (b) b->values = malloc(sizeof(int64_t) * (size_t)num_values);
    if (b) b->arena_off = malloc(sizeof(uint64_t) * (size_t)(p->num_blocks + 1));
    p->bindings = grow(p->bindings, &p->cap_bindings, p->num_bindings, sizeof(*p->bindings), &(bool){false});
    if (!b || !sizes || !b->values || !b->arena_off || p->num_bindings >= p->cap_bindings) {
      s = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_bind: out of host memory");
    } else {
      memcpy(b->values, values, sizeof(int64_t) * (size_t)num_values);
      for (int32_t i = 0; i < p->num_blocks && !s; ++i) {
        int64_t n = p->block_syms[i].value >= 0 ? eval(&p->block_syms[i], values) : (int64_t)p->blocks[i].bytes;
        if (n < 0 || n > ((int64_t)1 << 62))
          s = TPURT_STATUS(INVALID_ARGUMENT, "program_bind: a block of %lld bytes at these sizes", (long long)n);
        sizes[i] = n == 0 ? 512u : ((uint64_t)n + 511u) & ~(uint64_t)511u;
      }
      if (!s) {
        b->arena_bytes = tpurt_program_plan_arena(p->blocks, p->num_blocks, sizes, b->arena_off);
        if (b->arena_bytes == UINT64_MAX) s = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_bind: out of host memory");
        int64_t rc = p->rng_sym.value >= 0 ? eval(&p->rng_sym, values) : (int64_t)p->rng_count;
        b->rng_count = rc < 0 ? 0 : (uint64_t)rc;
      }
      if (!s && p->untrusted) s = check_reach(p, b, sizes);
      if (!s && p->rng_dim_start) {
        b->rng_rel = malloc(sizeof(uint64_t) * (size_t)(p->num_rngs + 1));
        if (!b->rng_rel) s = TPURT_STATUS(RESOURCE_EXHAUSTED, "program_bind: out of host memory");
        else if (!bind_rngs(p, values, b->rng_rel, &b->rng_count))
          s = TPURT_STATUS(INVALID_ARGUMENT, "program_bind: a random op's element count overflows at these sizes");
      }
    }
    free(sizes);
    if (!s) {
      p->bindings[p->num_bindings++] = b;
      *out = b;
    } else if (b) {
      free(b->values);
      free(b->arena_off);
      free(b->need);
      free(b->rng_rel);
      free(b);
    }
  }
  pthread_mutex_unlock(&p->bind_lock);
  if (!s) {
    if (out_arena_bytes) *out_arena_bytes = (*out)->arena_bytes;
    if (out_rng_count) *out_rng_count = (*out)->rng_count;
  }
  return s;
}

void tpurt_program_apply_binding(tpurt_program_t* p, const tpurt_program_binding_t* b) {
  for (int32_t k = 0; k < p->num_syms; ++k) {
    const sym_field_t* f = &p->syms[k];
    int64_t x = eval(f, b->values);
    if (f->type == SYM_I64) *(int64_t*)f->slot = x;
    else if (f->type == SYM_U64) *(uint64_t*)f->slot = (uint64_t)x;
    else *(double*)f->slot = (double)x;
  }
}

void tpurt_program_sizes_free(tpurt_program_t* p) {
  free(p->syms);
  free(p->block_syms);
  free(p->rng_dims);
  free(p->rng_dim_start);
  for (int32_t i = 0; i < p->num_bindings; ++i) {
    free(p->bindings[i]->values);
    free(p->bindings[i]->arena_off);
    free(p->bindings[i]->need);
    free(p->bindings[i]->rng_rel);
    free(p->bindings[i]);
  }
  free(p->bindings);
  free(p->values0);
}
