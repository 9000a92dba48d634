/* Source generation for fused elementwise chains (header: compiler/codegen.h).
 *
 * Each member becomes an always-inline function over its inputs whose body is
 * the library's own expression text; the kernel walks a run of elements in
 * blocks of TPURT_GEN_BLOCK and computes every member per element. Sizes,
 * pointers and scalar values are arguments (kernel_abi.h), so one kernel
 * serves every size. */
#include "compiler/codegen.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "compiler/jit.h"
#include "ops/elementwise/elementwise.h"

uint64_t tpurt_codegen_chain_hash(const tpurt_codegen_chain_t* c) {
  uint64_t h = tpurt_fnv1a(&c->n, sizeof c->n, TPURT_FNV_SEED);
  for (int k = 0; k < c->n && k < TPURT_GEN_MAX_OPS; ++k) {
    const tpurt_codegen_member_t* m = &c->m[k];
    h = tpurt_fnv1a_str(m->expr ? m->expr : "", h);
    uint8_t w[4 + 2 * TPURT_GEN_MAX_IN] = {(uint8_t)m->type, (uint8_t)m->out, (uint8_t)m->num_inputs, m->store};
    for (int i = 0; i < m->num_inputs && i < TPURT_GEN_MAX_IN; ++i) {
      w[4 + 2 * i] = m->in[i].src;
      w[5 + 2 * i] = (uint8_t)m->in[i].member;
    }
    h = tpurt_fnv1a(w, sizeof w, h);
  }
  return h;
}

bool tpurt_codegen_chain_equal(const tpurt_codegen_chain_t* a, const tpurt_codegen_chain_t* b) {
  if (a->n != b->n) return false;
  for (int k = 0; k < a->n && k < TPURT_GEN_MAX_OPS; ++k) {
    const tpurt_codegen_member_t *x = &a->m[k], *y = &b->m[k];
    if (x->type != y->type || x->out != y->out || x->num_inputs != y->num_inputs || x->store != y->store)
      return false;
    if (x->expr != y->expr && (!x->expr || !y->expr || strcmp(x->expr, y->expr) != 0)) return false;
    for (int i = 0; i < x->num_inputs && i < TPURT_GEN_MAX_IN; ++i) {
      if (x->in[i].src != y->in[i].src) return false;
      if (x->in[i].src == TPURT_CODEGEN_SRC_MEMBER && x->in[i].member != y->in[i].member) return false;
    }
  }
  return true;
}

/* ------------------------------------------------------------------------ */
/* Text.                                                                     */

typedef struct buf_t {
  char* p;
  size_t n, cap;
  bool oom;
} buf_t;

static void put(buf_t* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf_t* b, const char* fmt, ...) {
  for (;;) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (w < 0) {
      b->oom = true;
      return;
    }
    if (b->p && (size_t)w < b->cap - b->n) {
      b->n += (size_t)w;
      return;
    }
    size_t nc = b->cap ? b->cap : 4096;
    while (nc - b->n <= (size_t)w) nc *= 2;
    char* np = realloc(b->p, nc);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
}

static const char* ctype(tpurt_dtype_t t) {
  switch (t) {
    case TPURT_DTYPE_FLOAT32: return "float";
    case TPURT_DTYPE_FLOAT64: return "double";
    case TPURT_DTYPE_BOOL: return "bool";
    default: return NULL;
  }
}

/* The arity of a loop generator (ew_ops.h), and whether its output is bool. */
static int gen_arity(const char* gen, bool* bool_out) {
  static const struct {
    const char* name;
    int n;
    bool b;
  } kGens[] = {{"EW_L1", 1, false}, {"EW_L2", 2, false}, {"EW_L3", 3, false}, {"EW_L1B", 1, true}, {"EW_L2B", 2, true}};
  for (size_t i = 0; i < sizeof(kGens) / sizeof(kGens[0]); ++i)
    if (gen && strcmp(gen, kGens[i].name) == 0) {
      *bool_out = kGens[i].b;
      return kGens[i].n;
    }
  return -1;
}

/* Each member's expression, checked against the member's types and inputs;
 * false when the chain is not one we generate. */
static bool resolve(const tpurt_codegen_chain_t* c, const tpurt_ew_expr_t** ex) {
  if (c->n < 1 || c->n > TPURT_GEN_MAX_OPS) return false;
  for (int k = 0; k < c->n; ++k) {
    const tpurt_codegen_member_t* m = &c->m[k];
    ex[k] = tpurt_ew_expr_find(m->expr);
    bool bool_out = false;
    if (!ex[k] || !ex[k]->text || gen_arity(ex[k]->gen, &bool_out) != m->num_inputs)
      return false;
    if ((m->type != TPURT_DTYPE_FLOAT32 && m->type != TPURT_DTYPE_FLOAT64) ||
        (bool_out ? m->out != TPURT_DTYPE_BOOL : m->out != m->type))
      return false;
    for (int i = 0; i < m->num_inputs; ++i) {
      const tpurt_codegen_input_t* in = &m->in[i];
      if (in->src > TPURT_CODEGEN_SRC_SCALAR) return false;
      /* a member's value feeds a later member of the same loop type */
      if (in->src == TPURT_CODEGEN_SRC_MEMBER &&
          (in->member < 0 || in->member >= k || c->m[in->member].out != m->type))
        return false;
    }
  }
  return true;
}

char* tpurt_codegen_source(const tpurt_codegen_chain_t* c) {
  static const char kArg[TPURT_GEN_MAX_IN] = {'a', 'b', 'c'};
  const tpurt_ew_expr_t* ex[TPURT_GEN_MAX_OPS];
  if (!resolve(c, ex)) return NULL;
  char ident[1024];
  tpurt_jit_identity(ident, sizeof ident);
  buf_t b = {0};
  put(&b, "/* torch_tpu fused kernel: %d ops (generated by runtime/compiler/codegen.c) */\n", c->n);
  put(&b, "/* for %s */\n", ident);
  put(&b, "#include \"compiler/gen_prelude.h\"\n\n");
  put(&b, "__attribute__((visibility(\"default\"))) const uint32_t tpurt_kernel_abi_version = "
          "TPURT_KERNEL_ABI_VERSION;\n\n");
  for (int k = 0; k < c->n; ++k) {
    const tpurt_codegen_member_t* m = &c->m[k];
    const char *t = ctype(m->type), *to = ctype(m->out);
    put(&b, "/* %s */\n", ex[k]->name);
    put(&b, "static inline __attribute__((always_inline)) %s f%d_(const ew_params_t p, int* err_", to, k);
    for (int i = 0; i < m->num_inputs; ++i) put(&b, ", const %s %c", t, kArg[i]);
    put(&b, ") {\n  typedef %s T;\n  (void)p; (void)err_;\n  return (%s)(%s);\n}\n", t, to, ex[k]->text);
  }
  put(&b, "\n__attribute__((visibility(\"default\"))) int tpurt_fused_kernel(const tpurt_gen_args_t* A_, "
          "int64_t begin_, int64_t end_, int stream_) {\n");
  put(&b, "  if (!TPURT_GEN_ARGS_HAS(A_->struct_size, params)) return TPURT_GEN_ERR_ARGS;\n");
  put(&b, "  if (begin_ >= end_) return 0;\n");
  for (int k = 0; k < c->n; ++k) {
    const tpurt_codegen_member_t* m = &c->m[k];
    const char *t = ctype(m->type), *to = ctype(m->out);
    put(&b, "  const ew_params_t p%d_ = *(const ew_params_t*)A_->params[%d];\n", k, k);
    put(&b, "  int* e%d_ = &((ew_params_t*)A_->params[%d])->err;\n", k, k);
    for (int i = 0; i < m->num_inputs; ++i) {
      if (m->in[i].src == TPURT_CODEGEN_SRC_SCALAR)
        put(&b, "  const %s s%d_%d = *(const %s*)A_->mem[%d][%d];\n", t, k, i, t, k, i + 1);
      else if (m->in[i].src == TPURT_CODEGEN_SRC_CONTIG)
        put(&b, "  const %s* m%d_%d = (const %s*)A_->mem[%d][%d];\n", t, k, i, t, k, i + 1);
    }
    if (m->store) put(&b, "  %s* o%d_ = (%s*)A_->mem[%d][0];\n", to, k, to, k);
  }
  /* The body, per block of TPURT_GEN_BLOCK elements: one loop per segment.
   * A member with a vector-math call (exp, tanh, erf, log1p) is a segment of
   * its own and the cheap members between them form one: a single loop over
   * everything spills registers and runs slower than the sum of its parts.
   * So is pow, whose loop-invariant branch on the exponent the compiler
   * unswitches only in a small loop (in a big one the loop stays scalar).
   * Values crossing segments live in block arrays (L1); the rest in registers. */
  int seg[TPURT_GEN_MAX_OPS], nseg = 0;
  bool prev_heavy = false;
  for (int k = 0; k < c->n; ++k) {
    bool heavy = strstr(ex[k]->text, "tpurt_") || strstr(ex[k]->text, "powf");
    if (k == 0 || heavy || prev_heavy) ++nseg;
    seg[k] = nseg - 1;
    prev_heavy = heavy;
  }
  bool crosses[TPURT_GEN_MAX_OPS] = {false};
  for (int k = 0; k < c->n; ++k)
    for (int i = 0; i < c->m[k].num_inputs; ++i) {
      const tpurt_codegen_input_t* in = &c->m[k].in[i];
      if (in->src == TPURT_CODEGEN_SRC_MEMBER && seg[in->member] != seg[k]) crosses[in->member] = true;
    }
  put(&b, "  for (int64_t b_ = begin_; b_ < end_; b_ += TPURT_GEN_BLOCK) {\n");
  put(&b, "    const int64_t n_ = end_ - b_ < TPURT_GEN_BLOCK ? end_ - b_ : TPURT_GEN_BLOCK;\n");
  for (int k = 0; k < c->n; ++k) {
    if (crosses[k]) put(&b, "    _Alignas(64) %s t%d_[TPURT_GEN_BLOCK];\n", ctype(c->m[k].out), k);
    if (c->m[k].store) put(&b, "    _Alignas(64) %s w%d_[TPURT_GEN_BLOCK];\n", ctype(c->m[k].out), k);
  }
  for (int sg = 0; sg < nseg; ++sg) {
    /* A segment of one float32 member with a vector form (ew_simd.h: the activations and their
     * backwards, and the math functions: exp, log, sin, atan2, ...) runs it on whole vectors, the same bits as the
     * expression, and the block's tail through the expression; builds without vectors keep the
     * expression's loop. */
    int only = -1;
    for (int k = 0; k < c->n; ++k)
      if (seg[k] == sg) only = only == -1 ? k : -2;
    const bool vec = only >= 0 && ex[only]->vtext && c->m[only].type == TPURT_DTYPE_FLOAT32 &&
                     c->m[only].out == TPURT_DTYPE_FLOAT32;
    if (vec) {
      const tpurt_codegen_member_t* m = &c->m[only];
      put(&b, "    {\n#if EWV_W\n    int64_t j_ = 0;\n    for (; j_ + EWV_W <= n_; j_ += EWV_W) {\n");
      for (int i = 0; i < m->num_inputs; ++i) {
        const tpurt_codegen_input_t* in = &m->in[i];
        put(&b, "      const ewv_t v%c = ", kArg[i]);
        if (in->src == TPURT_CODEGEN_SRC_MEMBER) put(&b, "ewv_load(t%d_ + j_);\n", in->member);
        else if (in->src == TPURT_CODEGEN_SRC_SCALAR) put(&b, "ewv_set1(s%d_%d);\n", only, i);
        else put(&b, "ewv_load(m%d_%d + b_ + j_);\n", only, i);
      }
      put(&b, "      const ewv_t r_ = (%s);\n", ex[only]->vtext);
      if (crosses[only]) put(&b, "      ewv_store(t%d_ + j_, r_);\n", only);
      if (m->store) put(&b, "      if (stream_) ewv_store(w%d_ + j_, r_); else ewv_store(o%d_ + b_ + j_, r_);\n", only, only);
      put(&b, "    }\n#else\n    int64_t j_ = 0;\n#endif\n");
      put(&b, "    for (; j_ < n_; ++j_) {\n      const int64_t i_ = b_ + j_;\n");
    } else {
      put(&b, "    _Pragma(\"GCC ivdep\") for (int64_t j_ = 0; j_ < n_; ++j_) {\n      const int64_t i_ = b_ + j_;\n");
    }
    put(&b, "      (void)i_;\n");
    for (int k = 0; k < c->n; ++k) {
      if (seg[k] != sg) continue;
      const tpurt_codegen_member_t* m = &c->m[k];
      put(&b, "      const %s v%d_ = f%d_(p%d_, e%d_", ctype(m->out), k, k, k, k);
      for (int i = 0; i < m->num_inputs; ++i) {
        const tpurt_codegen_input_t* in = &m->in[i];
        if (in->src == TPURT_CODEGEN_SRC_MEMBER && seg[in->member] == sg) put(&b, ", v%d_", in->member);
        else if (in->src == TPURT_CODEGEN_SRC_MEMBER) put(&b, ", t%d_[j_]", in->member);
        else if (in->src == TPURT_CODEGEN_SRC_SCALAR) put(&b, ", s%d_%d", k, i);
        else put(&b, ", m%d_%d[i_]", k, i);
      }
      put(&b, ");\n");
      if (crosses[k]) put(&b, "      t%d_[j_] = v%d_;\n", k, k);
      if (m->store) put(&b, "      if (stream_) w%d_[j_] = v%d_; else o%d_[i_] = v%d_;\n", k, k, k, k);
    }
    put(&b, "    }\n");
    if (vec) put(&b, "    }\n"); /* closes the scope of the vector loop's j_ */
  }
  put(&b, "    if (stream_) {\n");
  for (int k = 0; k < c->n; ++k)
    if (c->m[k].store)
      put(&b, "      for (int q_ = 0; q_ < (int)sizeof(w%d_); q_ += 64) ew_stream_store64((char*)(o%d_ + b_) + q_, "
              "(const char*)w%d_ + q_);\n", k, k, k);
  put(&b, "    }\n  }\n  return 0;\n}\n");
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  return b.p;
}
