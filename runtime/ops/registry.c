/* The op table: every kernel family's table merged into one name -> op map,
 * built once on first lookup. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "tpurt/kernel.h"

/* One table per family; each lives in its family's folder: elementwise/
 * (elementwise, random, complex, complex_extra), reduce/ (reduce, norm), linalg/, nn/,
 * index/ (index, index_complex), special/, fft/, train/, serve/, vision/ (vision). The order decides which
 * entry wins when two families register one name. */
extern const tpurt_op_def_t tpurt_ops_elementwise[];
extern const tpurt_op_def_t tpurt_ops_random[];
extern const tpurt_op_def_t tpurt_ops_reduce[];
extern const tpurt_op_def_t tpurt_ops_norm[];
extern const tpurt_op_def_t tpurt_ops_linalg[];
extern const tpurt_op_def_t tpurt_ops_nn[];
extern const tpurt_op_def_t tpurt_ops_index[];
extern const tpurt_op_def_t tpurt_ops_special[];
extern const tpurt_op_def_t tpurt_ops_complex[];
extern const tpurt_op_def_t tpurt_ops_fft[];
extern const tpurt_op_def_t tpurt_ops_index_complex[];
extern const tpurt_op_def_t tpurt_ops_train[];
extern const tpurt_op_def_t tpurt_ops_complex_extra[];
extern const tpurt_op_def_t tpurt_ops_serve[];
extern const tpurt_op_def_t tpurt_ops_vision[];

static const tpurt_op_def_t* const kFamilies[] = {
    tpurt_ops_elementwise, tpurt_ops_random, tpurt_ops_reduce,  tpurt_ops_norm,
    tpurt_ops_linalg,      tpurt_ops_nn,     tpurt_ops_index,   tpurt_ops_special,
    tpurt_ops_complex,     tpurt_ops_fft,    tpurt_ops_index_complex, tpurt_ops_train,
    tpurt_ops_complex_extra, tpurt_ops_serve, tpurt_ops_vision,
};

/* Open-addressing hash of op names; sized to a power of two >= 2x entries. */
static const tpurt_op_def_t** g_ops;   /* dense, in family order */
static size_t g_num_ops;
static const tpurt_op_def_t** g_slots;
static size_t g_num_slots;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const tpurt_op_def_t** find_slot(const char* name) {
  size_t mask = g_num_slots - 1;
  for (size_t i = tpurt_fnv1a_str(name, TPURT_FNV_SEED) & mask;; i = (i + 1) & mask) {
    if (!g_slots[i] || strcmp(g_slots[i]->name, name) == 0) return &g_slots[i];
  }
}

static void build(void) {
  size_t n = 0;
  for (size_t f = 0; f < sizeof(kFamilies) / sizeof(kFamilies[0]); ++f)
    for (const tpurt_op_def_t* d = kFamilies[f]; d->name; ++d) ++n;
  g_num_slots = 16;
  while (g_num_slots < 2 * n) g_num_slots <<= 1;
  g_ops = calloc(n ? n : 1, sizeof(*g_ops));
  g_slots = calloc(g_num_slots, sizeof(*g_slots));
  if (!g_ops || !g_slots) { g_num_slots = 0; return; }
  for (size_t f = 0; f < sizeof(kFamilies) / sizeof(kFamilies[0]); ++f) {
    for (const tpurt_op_def_t* d = kFamilies[f]; d->name; ++d) {
      const tpurt_op_def_t** slot = find_slot(d->name);
      if (*slot) continue; /* first registration wins; tests flag duplicates */
      *slot = d;
      g_ops[g_num_ops++] = d;
    }
  }
}

const tpurt_op_def_t* tpurt_op_lookup(const char* name) {
  pthread_once(&g_once, build);
  if (!name || g_num_slots == 0) return NULL;
  return *find_slot(name);
}

size_t tpurt_op_count(void) {
  pthread_once(&g_once, build);
  return g_num_ops;
}

const tpurt_op_def_t* tpurt_op_at(size_t index) {
  pthread_once(&g_once, build);
  return index < g_num_ops ? g_ops[index] : NULL;
}

const char* tpurt_op_base_name(const char* name, char* buf, size_t cap) {
  if (!buf || cap == 0) return buf;
  buf[0] = 0;
  if (!name) return buf;
  const char* colon = strstr(name, "::");
  /* "aten::add_" -> "add_"; "complex::" is not a namespace to strip here */
  if (colon && strncmp(name, "aten::", 6) == 0) name = colon + 2;
  size_t n = strlen(name);
  if (n > 1 && name[n - 1] == '_' && !(n > 2 && name[n - 2] == '_')) --n; /* in place; dunders keep theirs */
  if (n >= cap) n = cap - 1;
  memcpy(buf, name, n);
  buf[n] = 0;
  return buf;
}

/* "prefix base.overload", then "prefix base". */
static const tpurt_op_def_t* lookup2(const char* prefix, const char* base, const char* overload) {
  char full[256];
  if (overload && overload[0]) {
    int w = snprintf(full, sizeof full, "%s%s.%s", prefix, base, overload);
    const tpurt_op_def_t* d = w > 0 && w < (int)sizeof full ? tpurt_op_lookup(full) : NULL;
    if (d) return d;
  }
  int w = snprintf(full, sizeof full, "%s%s", prefix, base);
  return w > 0 && w < (int)sizeof full ? tpurt_op_lookup(full) : NULL;
}

const tpurt_op_def_t* tpurt_op_resolve(const char* name, const char* overload, uint32_t flags) {
  char base[200];
  tpurt_op_base_name(name, base, sizeof base);
  if (!base[0]) return NULL;
  if (!(flags & TPURT_RESOLVE_COMPLEX)) return lookup2("", base, overload);
  const tpurt_op_def_t* d = lookup2("complex::", base, overload);
  if (d) return d;
  d = lookup2("", base, overload);
  return d && (d->flags & TPURT_OP_COMPLEX) ? d : NULL;
}

/* The family whose table holds `op` (its cost rule: ops/cost.c). Each
 * table's end is found once. */
static size_t g_family_len[sizeof(kFamilies) / sizeof(kFamilies[0])];
static pthread_once_t g_family_once = PTHREAD_ONCE_INIT;

static void family_lengths(void) {
  for (size_t f = 0; f < sizeof(kFamilies) / sizeof(kFamilies[0]); ++f)
    while (kFamilies[f][g_family_len[f]].name) ++g_family_len[f];
}

int tpurt_op_family_of(const tpurt_op_def_t* op) {
  pthread_once(&g_family_once, family_lengths);
  for (size_t f = 0; op && f < sizeof(kFamilies) / sizeof(kFamilies[0]); ++f)
    if (op >= kFamilies[f] && op < kFamilies[f] + g_family_len[f]) return (int)f;
  return -1;
}
