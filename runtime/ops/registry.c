/* The op table: every kernel family's table merged into one name -> op map,
 * built once on first lookup. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tpurt/kernel.h"

/* One table per family; each lives in its family's folder. */
extern const tpurt_op_def_t tpurt_ops_elementwise[];
extern const tpurt_op_def_t tpurt_ops_random[];
extern const tpurt_op_def_t tpurt_ops_reduce[];
extern const tpurt_op_def_t tpurt_ops_norm[];
extern const tpurt_op_def_t tpurt_ops_linalg[];
extern const tpurt_op_def_t tpurt_ops_conv[];
extern const tpurt_op_def_t tpurt_ops_index[];
extern const tpurt_op_def_t tpurt_ops_special[];
extern const tpurt_op_def_t tpurt_ops_dense[];
extern const tpurt_op_def_t tpurt_ops_pool3d[];
extern const tpurt_op_def_t tpurt_ops_complex[];
extern const tpurt_op_def_t tpurt_ops_fft[];
extern const tpurt_op_def_t tpurt_ops_linalg_complex[];
extern const tpurt_op_def_t tpurt_ops_index_complex[];
extern const tpurt_op_def_t tpurt_ops_more[];

static const tpurt_op_def_t* const kFamilies[] = {
    tpurt_ops_elementwise, tpurt_ops_random, tpurt_ops_reduce, tpurt_ops_norm,
    tpurt_ops_linalg,      tpurt_ops_conv,   tpurt_ops_index,
    tpurt_ops_special,     tpurt_ops_dense,  tpurt_ops_pool3d,
    tpurt_ops_complex,     tpurt_ops_fft,    tpurt_ops_linalg_complex, tpurt_ops_index_complex,
    tpurt_ops_more,
};

/* Open-addressing hash of op names; sized to a power of two >= 2x entries. */
static const tpurt_op_def_t** g_ops;   /* dense, in family order */
static size_t g_num_ops;
static const tpurt_op_def_t** g_slots;
static size_t g_num_slots;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static uint64_t hash_name(const char* s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; ++s) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static const tpurt_op_def_t** find_slot(const char* name) {
  size_t mask = g_num_slots - 1;
  for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
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
