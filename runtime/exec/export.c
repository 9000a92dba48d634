/* Exported programs (tpurt/export.h): the artifact file, and running one
 * from C. The file's layout, all little-endian as the machine's:
 *
 *   header   magic "TPUEXPT1", u32 version, u32 tensor count, then
 *            (offset, length) u64 pairs of: table, manifest, program, data
 *   table    per tensor: u32 role, u32 dtype, i32 ndim, i32 program index,
 *            u8 from_input, i32 writes_back, sizes[ndim], strides[ndim],
 *            i64 storage offset, u64 storage bytes, u64 data offset (in the
 *            data section), u32 name length, name
 *   manifest the writer's text
 *   program  tpurt_program_serialize's bytes
 *   data     weights, each 64-byte aligned
 *   check    u64 FNV-1a of everything before it */
#include "tpurt/export.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/hash.h"

#define EXPORT_MAGIC "TPUEXPT1"
#define EXPORT_VERSION 2u /* 2: a fifth section, the sizes (version 1 is still read) */
#define HEADER_BYTES_V1 (8 + 4 + 4 + 8 * 8)
#define HEADER_BYTES (8 + 4 + 4 + 10 * 8)
#define MAX_SYMBOLS 64
#define DATA_ALIGN 64u
#define FNV_SEED 14695981039346656037ull

/* A number of the table at run time: coef * values[k] + c (k -1: the constant c). */
typedef struct rule_t {
  int32_t k;
  int64_t coef, c;
} rule_t;

typedef struct xsym_t {
  char* name;
  int64_t lo, hi, saved; /* hi -1: unbounded */
} xsym_t;

/* An artifact whose program takes sizes (the fifth section): its symbols, the program's size values
 * as integer polynomials of them, and per table tensor the rules of its sizes, strides, offset and
 * (outputs) storage bytes. */
typedef struct xsizes_t {
  int32_t num_symbols, num_values;
  xsym_t* syms;
  int32_t* term_start; /* num_values + 1 */
  int64_t* coefs;      /* per term */
  uint8_t* exps;       /* per term, num_symbols each */
  int32_t* rule_start; /* per tensor: its first rule (2 * ndim + 2 of them), -1 for none */
  rule_t* rules;
} xsizes_t;

struct tpurt_export_t {
  uint8_t* file;
  size_t file_bytes;
  xsizes_t* sizes; /* NULL: the program's sizes are fixed */
  tpurt_export_tensor_t* tensors;
  int32_t num_tensors;
  const char* manifest;
  size_t manifest_bytes;
  tpurt_program_t* program;
  uint64_t* out_bytes; /* per program output storage: its size (the largest view the table gives of it) */
  int32_t num_out;
};

/* ---- writing ---- */

typedef tpurt_bytebuf_t obuf_t;

static void out(obuf_t* b, const void* src, size_t n) { tpurt_bytebuf_put(b, src, n); }
#define OUT(b, v) out((b), &(v), sizeof(v))

static int64_t elem_size(tpurt_dtype_t dt) { return dt >= 0 && dt < TPURT_DTYPE_COUNT ? tpurt_dtype_traits[dt].size : 0; }

/* The last byte a view reads, plus one, from its storage's start (0 for an empty view). */
static bool view_fits(const tpurt_export_tensor_t* t) {
  int64_t es = elem_size(t->dtype);
  if (es == 0 || t->ndim < 0 || t->ndim > TPURT_MAX_DIMS || t->storage_offset < 0) return false;
  int64_t hi = t->storage_offset;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] < 0 || t->strides[d] < 0) return false;
    if (t->sizes[d] == 0) return true;
    hi += (t->sizes[d] - 1) * t->strides[d];
  }
  return (uint64_t)(hi + 1) * (uint64_t)es <= t->storage_bytes;
}

static tpurt_status_t check_table(const tpurt_export_tensor_t* ts, int32_t n, const tpurt_program_info_t* info) {
  int32_t seen_inputs = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpurt_export_tensor_t* t = &ts[i];
    const char* nm = t->name ? t->name : "?";
    if (!view_fits(t))
      return TPURT_STATUS(INVALID_ARGUMENT, "export: tensor %d (%s): its sizes, strides and offset do not fit its "
                                            "%llu-byte storage", i, nm, (unsigned long long)t->storage_bytes);
    if (t->role == TPURT_EXPORT_WEIGHT || t->role == TPURT_EXPORT_INPUT) {
      if (t->program_index < 0 || t->program_index >= info->num_inputs)
        return TPURT_STATUS(INVALID_ARGUMENT, "export: tensor %d (%s) names program input %d of %d", i, nm,
                            t->program_index, info->num_inputs);
      seen_inputs++;
    } else if (t->role == TPURT_EXPORT_OUTPUT) {
      int32_t limit = t->from_input ? info->num_inputs : info->num_outputs;
      if (t->program_index < 0 || t->program_index >= limit)
        return TPURT_STATUS(INVALID_ARGUMENT, "export: output %d (%s) names %s %d of %d", i, nm,
                            t->from_input ? "program input" : "program output", t->program_index, limit);
      if (t->writes_back >= 0 && (t->writes_back >= n || ts[t->writes_back].role != TPURT_EXPORT_WEIGHT))
        return TPURT_STATUS(INVALID_ARGUMENT, "export: output %d (%s) writes back into tensor %d, not a weight", i,
                            nm, t->writes_back);
    } else {
      return TPURT_STATUS(INVALID_ARGUMENT, "export: tensor %d (%s) has role %d", i, nm, (int)t->role);
    }
  }
  if (seen_inputs != info->num_inputs)
    return TPURT_STATUS(INVALID_ARGUMENT, "export: the table names %d program inputs, the program has %d",
                        seen_inputs, info->num_inputs);
  return TPURT_OK;
}

tpurt_status_t tpurt_export_save(const char* path, const tpurt_program_t* program, const tpurt_export_tensor_t* ts,
                                 int32_t n, const char* manifest, size_t manifest_bytes) {
  return tpurt_export_save_sized(path, program, ts, n, manifest, manifest_bytes, NULL, 0);
}

tpurt_status_t tpurt_export_save_sized(const char* path, const tpurt_program_t* program,
                                       const tpurt_export_tensor_t* ts, int32_t n, const char* manifest,
                                       size_t manifest_bytes, const void* sizes, size_t sizes_bytes) {
  if (!path || !program || n < 0 || (n && !ts) || (manifest_bytes && !manifest) || (sizes_bytes && !sizes))
    return TPURT_STATUS(INVALID_ARGUMENT, "export_save: NULL or negative argument");
  if ((sizes_bytes > 0) != (tpurt_program_num_values(program) > 0))
    return TPURT_STATUS(INVALID_ARGUMENT, "export_save: %s", sizes_bytes ? "sizes given for a program of fixed sizes"
                                                                         : "the program takes sizes: give their rules");
  tpurt_program_info_t info;
  tpurt_program_query(program, &info);
  tpurt_status_t s = check_table(ts, n, &info);
  if (s) return s;
  for (int32_t i = 0; i < n; ++i)
    if (ts[i].role == TPURT_EXPORT_WEIGHT && ts[i].storage_bytes && !ts[i].data)
      return TPURT_STATUS(INVALID_ARGUMENT, "export_save: weight %d (%s) has no data", i, ts[i].name ? ts[i].name : "?");
  void* prog = NULL;
  size_t prog_bytes = 0;
  s = tpurt_program_serialize(program, &prog, &prog_bytes);
  if (s) return s;

  obuf_t table = {0};
  uint64_t data_bytes = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpurt_export_tensor_t* t = &ts[i];
    uint32_t role = t->role, dtype = (uint32_t)t->dtype;
    uint8_t from_input = t->from_input;
    uint64_t data_off = 0;
    if (t->role == TPURT_EXPORT_WEIGHT) {
      data_off = data_bytes;
      data_bytes += (t->storage_bytes + DATA_ALIGN - 1) & ~(uint64_t)(DATA_ALIGN - 1);
    }
    OUT(&table, role);
    OUT(&table, dtype);
    OUT(&table, t->ndim);
    OUT(&table, t->program_index);
    OUT(&table, from_input);
    OUT(&table, t->writes_back);
    out(&table, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
    out(&table, t->strides, sizeof(int64_t) * (size_t)t->ndim);
    OUT(&table, t->storage_offset);
    OUT(&table, t->storage_bytes);
    OUT(&table, data_off);
    uint32_t nl = t->name ? (uint32_t)strlen(t->name) : 0;
    OUT(&table, nl);
    out(&table, t->name, nl);
  }
  obuf_t f = {0};
  uint64_t table_off = HEADER_BYTES, manifest_off = table_off + table.n, prog_off = manifest_off + manifest_bytes;
  uint64_t data_off = (prog_off + prog_bytes + DATA_ALIGN - 1) & ~(uint64_t)(DATA_ALIGN - 1);
  uint32_t version = EXPORT_VERSION, count = (uint32_t)n;
  uint64_t sizes_off = data_off + data_bytes;
  uint64_t sections[10] = {table_off, table.n,  manifest_off, manifest_bytes, prog_off,
                           prog_bytes, data_off, data_bytes,   sizes_off,      sizes_bytes};
  out(&f, EXPORT_MAGIC, 8);
  OUT(&f, version);
  OUT(&f, count);
  out(&f, sections, sizeof(sections));
  out(&f, table.p, table.n);
  out(&f, manifest, manifest_bytes);
  out(&f, prog, prog_bytes);
  out(&f, NULL, data_off - (prog_off + prog_bytes));
  for (int32_t i = 0; i < n; ++i)
    if (ts[i].role == TPURT_EXPORT_WEIGHT) {
      out(&f, ts[i].data, ts[i].storage_bytes);
      out(&f, NULL, ((ts[i].storage_bytes + DATA_ALIGN - 1) & ~(uint64_t)(DATA_ALIGN - 1)) - ts[i].storage_bytes);
    }
  out(&f, sizes, sizes_bytes);
  uint64_t h = f.oom ? 0 : tpurt_fnv1a(f.p, f.n, FNV_SEED);
  OUT(&f, h);
  free(prog);
  free(table.p);
  if (f.oom || table.oom) {
    free(f.p);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_save: out of host memory");
  }
  /* A temporary name beside the target, renamed into place: a reader never sees half a file. */
  size_t pl = strlen(path);
  char* tmp = malloc(pl + 32);
  if (!tmp) {
    free(f.p);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_save: out of host memory");
  }
  snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < f.n;) {
    ssize_t w = write(fd, f.p + done, f.n - done);
    if (w < 0 && errno == EINTR) continue;
    ok = w > 0;
    if (ok) done += (size_t)w;
  }
  int err = errno;
  if (fd >= 0 && close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && rename(tmp, path) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) unlink(tmp);
  free(tmp);
  free(f.p);
  return ok ? TPURT_OK : TPURT_STATUS(UNAVAILABLE, "export_save: cannot write %s: %s", path, strerror(err));
}

/* ---- reading ---- */

typedef struct in_t {
  const uint8_t* p;
  size_t n, at;
  bool bad;
} in_t;

static void in(in_t* r, void* dst, size_t n) {
  if (r->bad || n > r->n - r->at) {
    r->bad = true;
    memset(dst, 0, n);
    return;
  }
  memcpy(dst, r->p + r->at, n);
  r->at += n;
}
#define IN(r, v) in((r), &(v), sizeof(v))

static void sizes_free(xsizes_t* z) {
  if (!z) return;
  for (int32_t i = 0; z->syms && i < z->num_symbols; ++i) free(z->syms[i].name);
  free(z->syms);
  free(z->term_start);
  free(z->coefs);
  free(z->exps);
  free(z->rule_start);
  free(z->rules);
  free(z);
}

void tpurt_export_free(tpurt_export_t* e) {
  if (!e) return;
  sizes_free(e->sizes);
  if (e->tensors)
    for (int32_t i = 0; i < e->num_tensors; ++i) free((char*)e->tensors[i].name);
  free(e->tensors);
  free(e->out_bytes);
  tpurt_program_release(e->program);
  free(e->file);
  free(e);
}

/* The fifth section (xsizes_t): checked whole, as everything else in the file. */
static tpurt_status_t parse_sizes(tpurt_export_t* e, const uint8_t* p, size_t n, const char* path) {
  xsizes_t* z = calloc(1, sizeof(*z));
  if (!z) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
  e->sizes = z;
  in_t r = {.p = p, .n = n};
  uint32_t ns = 0, nv = 0;
  IN(&r, ns);
  if (r.bad || ns < 1 || ns > MAX_SYMBOLS) return TPURT_STATUS(DATA_LOSS, "export_load: %s: bad symbol count", path);
  z->syms = calloc(ns, sizeof(xsym_t));
  if (!z->syms) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
  z->num_symbols = (int32_t)ns;
  for (uint32_t i = 0; i < ns && !r.bad; ++i) {
    xsym_t* y = &z->syms[i];
    uint32_t nl = 0;
    IN(&r, y->lo);
    IN(&r, y->hi);
    IN(&r, y->saved);
    IN(&r, nl);
    if (r.bad || nl > r.n - r.at || y->lo < 0 || (y->hi != -1 && y->hi < y->lo)) {
      r.bad = true;
      break;
    }
    y->name = malloc((size_t)nl + 1);
    if (!y->name) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
    in(&r, y->name, nl);
    y->name[nl] = 0;
  }
  IN(&r, nv);
  if (r.bad || nv != (uint32_t)tpurt_program_num_values(e->program))
    return TPURT_STATUS(DATA_LOSS, "export_load: %s: its sizes do not match its program's", path);
  z->num_values = (int32_t)nv;
  z->term_start = calloc((size_t)nv + 1, sizeof(int32_t));
  if (!z->term_start) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
  size_t each = 8 + ns, cap_terms = (r.n - r.at) / each + 1;
  z->coefs = malloc(sizeof(int64_t) * cap_terms);
  z->exps = malloc(ns * cap_terms);
  if (!z->coefs || !z->exps) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
  int32_t terms = 0;
  for (uint32_t v = 0; v < nv && !r.bad; ++v) {
    uint32_t nt = 0;
    IN(&r, nt);
    if (r.bad || nt > (r.n - r.at) / each) {
      r.bad = true;
      break;
    }
    z->term_start[v] = terms;
    for (uint32_t t = 0; t < nt; ++t, ++terms) {
      IN(&r, z->coefs[terms]);
      in(&r, z->exps + (size_t)terms * ns, ns);
      for (uint32_t k = 0; k < ns; ++k)
        if (z->exps[(size_t)terms * ns + k] > 8) r.bad = true; /* no size is a ninth power */
    }
  }
  z->term_start[nv] = terms;
  z->rule_start = malloc(sizeof(int32_t) * ((size_t)e->num_tensors + 1));
  size_t cap_rules = (r.n - r.at) / 20 + 1;
  z->rules = malloc(sizeof(rule_t) * cap_rules);
  if (!z->rule_start || !z->rules) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
  int32_t rules = 0;
  for (int32_t i = 0; i < e->num_tensors && !r.bad; ++i) {
    uint8_t has = 0;
    IN(&r, has);
    z->rule_start[i] = -1;
    if (!has) continue;
    int32_t nr = 2 * e->tensors[i].ndim + 2;
    if (e->tensors[i].role == TPURT_EXPORT_WEIGHT || (size_t)nr > (r.n - r.at) / 20) {
      r.bad = true;
      break;
    }
    z->rule_start[i] = rules;
    for (int32_t k = 0; k < nr; ++k, ++rules) {
      rule_t* u = &z->rules[rules];
      IN(&r, u->k);
      IN(&r, u->coef);
      IN(&r, u->c);
      if (u->k < -1 || u->k >= (int32_t)nv) r.bad = true;
    }
  }
  if (r.bad || r.at != r.n) return TPURT_STATUS(DATA_LOSS, "export_load: %s: its sizes section is damaged", path);
  /* Each symbol is read off an input: a rule of its sizes must give it (the C caller gives the
   * symbols; the table's inputs follow from them). */
  for (int32_t i = 0; i < e->num_tensors; ++i)
    if (e->tensors[i].role == TPURT_EXPORT_INPUT && z->rule_start[i] < 0)
      return TPURT_STATUS(DATA_LOSS, "export_load: %s: input %s has no size rules", path, e->tensors[i].name);
  return TPURT_OK;
}

static tpurt_status_t parse(tpurt_export_t* e, const char* path) {
  const uint8_t* f = e->file;
  size_t n = e->file_bytes;
  if (n < HEADER_BYTES_V1 + 8 || memcmp(f, EXPORT_MAGIC, 8) != 0)
    return TPURT_STATUS(DATA_LOSS, "export_load: %s is not a torch_tpu export artifact", path);
  uint64_t h;
  memcpy(&h, f + n - 8, 8);
  if (tpurt_fnv1a(f, n - 8, FNV_SEED) != h)
    return TPURT_STATUS(DATA_LOSS, "export_load: %s is damaged or truncated (its check does not match)", path);
  in_t r = {.p = f, .n = n - 8, .at = 8};
  uint32_t version, count;
  uint64_t sec[10] = {0};
  IN(&r, version);
  IN(&r, count);
  if (version != EXPORT_VERSION && version != 1u)
    return TPURT_STATUS(FAILED_PRECONDITION, "export_load: %s is artifact version %u, this runtime reads %u", path,
                        version, EXPORT_VERSION);
  int sections = version >= 2 ? 5 : 4;
  if (n < (size_t)(version >= 2 ? HEADER_BYTES : HEADER_BYTES_V1) + 8)
    return TPURT_STATUS(DATA_LOSS, "export_load: %s is damaged or truncated (a short header)", path);
  in(&r, sec, sizeof(uint64_t) * 2 * (size_t)sections);
  for (int k = 0; k < sections; ++k)
    if (sec[2 * k] > n - 8 || sec[2 * k + 1] > n - 8 - sec[2 * k])
      return TPURT_STATUS(DATA_LOSS, "export_load: %s: a section lies outside the file", path);
  if (count > (uint32_t)(sec[1] / 40 + 1)) return TPURT_STATUS(DATA_LOSS, "export_load: %s: bad tensor count", path);
  e->tensors = calloc(count + 1, sizeof(tpurt_export_tensor_t));
  if (!e->tensors) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
  e->num_tensors = (int32_t)count;
  in_t t = {.p = f + sec[0], .n = sec[1]};
  for (uint32_t i = 0; i < count && !t.bad; ++i) {
    tpurt_export_tensor_t* x = &e->tensors[i];
    uint32_t role, dtype, nl;
    uint8_t from_input;
    uint64_t data_off;
    IN(&t, role);
    IN(&t, dtype);
    IN(&t, x->ndim);
    IN(&t, x->program_index);
    IN(&t, from_input);
    IN(&t, x->writes_back);
    if (x->ndim < 0 || x->ndim > TPURT_MAX_DIMS || dtype >= TPURT_DTYPE_COUNT) {
      t.bad = true;
      break;
    }
    x->role = (tpurt_export_role_t)role;
    x->dtype = (tpurt_dtype_t)dtype;
    x->from_input = from_input != 0;
    in(&t, x->sizes, sizeof(int64_t) * (size_t)x->ndim);
    in(&t, x->strides, sizeof(int64_t) * (size_t)x->ndim);
    IN(&t, x->storage_offset);
    IN(&t, x->storage_bytes);
    IN(&t, data_off);
    IN(&t, nl);
    if (t.bad || nl > t.n - t.at) {
      t.bad = true;
      break;
    }
    char* name = malloc((size_t)nl + 1);
    if (!name) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
    in(&t, name, nl);
    name[nl] = 0;
    x->name = name;
    if (x->role == TPURT_EXPORT_WEIGHT) {
      if (data_off > sec[7] || x->storage_bytes > sec[7] - data_off) {
        t.bad = true;
        break;
      }
      x->data = f + sec[6] + data_off;
    }
  }
  if (t.bad || t.at != t.n) return TPURT_STATUS(DATA_LOSS, "export_load: %s: its tensor table is damaged", path);
  e->manifest = (const char*)f + sec[2];
  e->manifest_bytes = sec[3];
  /* The storages the table describes: one per program input (a weight or an
   * input), and per program output storage the largest view of it. The
   * program must have exactly these, and every address it holds is checked
   * against them. */
  int32_t ni = 0, no = 0;
  for (int32_t i = 0; i < e->num_tensors; ++i) {
    const tpurt_export_tensor_t* x = &e->tensors[i];
    if (x->program_index < 0 || x->program_index >= e->num_tensors)
      return TPURT_STATUS(DATA_LOSS, "export_load: %s: tensor %d names storage %d", path, i, x->program_index);
    if (x->role != TPURT_EXPORT_OUTPUT) ni++;
    else if (!x->from_input && x->program_index >= no) no = x->program_index + 1;
  }
  uint64_t* in_bytes = calloc((size_t)ni + 1, 8);
  e->out_bytes = calloc((size_t)no + 1, 8);
  if (!in_bytes || !e->out_bytes) {
    free(in_bytes);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory");
  }
  e->num_out = no;
  tpurt_status_t s = TPURT_OK;
  for (int32_t i = 0; i < e->num_tensors && !s; ++i) {
    const tpurt_export_tensor_t* x = &e->tensors[i];
    int32_t k = x->program_index;
    if (x->role != TPURT_EXPORT_OUTPUT && k >= ni)
      s = TPURT_STATUS(DATA_LOSS, "export_load: %s: tensor %d names program input %d of %d", path, i, k, ni);
    else if (x->role != TPURT_EXPORT_OUTPUT) in_bytes[k] = x->storage_bytes;
    else if (!x->from_input && x->storage_bytes > e->out_bytes[k]) e->out_bytes[k] = x->storage_bytes;
  }
  for (int32_t j = 0; j < no && !s; ++j)
    if (!e->out_bytes[j]) s = TPURT_STATUS(DATA_LOSS, "export_load: %s: program output %d has no storage", path, j);
  if (!s) s = tpurt_program_deserialize(f + sec[4], sec[5], in_bytes, ni, e->out_bytes, no, &e->program);
  free(in_bytes);
  if (s) return s;
  tpurt_program_info_t info;
  tpurt_program_query(e->program, &info);
  s = check_table(e->tensors, e->num_tensors, &info);
  if (!s && sec[9]) s = parse_sizes(e, f + sec[8], sec[9], path);
  if (!s && (e->sizes != NULL) != (tpurt_program_num_values(e->program) > 0))
    s = TPURT_STATUS(DATA_LOSS, "export_load: %s: its program %s sizes and its table %s", path,
                     e->sizes ? "takes no" : "takes", e->sizes ? "gives them" : "none");
  return s;
}

tpurt_status_t tpurt_export_load(const char* path, tpurt_export_t** out_e) {
  if (!path || !out_e) return TPURT_STATUS(INVALID_ARGUMENT, "export_load: NULL argument");
  *out_e = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return TPURT_STATUS(NOT_FOUND, "export_load: cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return TPURT_STATUS(INVALID_ARGUMENT, "export_load: %s is not a regular file", path);
  }
  tpurt_export_t* e = calloc(1, sizeof(*e));
  uint8_t* buf = e ? malloc((size_t)st.st_size + 1) : NULL;
  if (!buf) {
    close(fd);
    free(e);
    return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_load: out of host memory for %lld bytes", (long long)st.st_size);
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  e->file = buf;
  e->file_bytes = got;
  tpurt_status_t s = parse(e, path);
  if (s) {
    tpurt_export_free(e);
    return s;
  }
  *out_e = e;
  return TPURT_OK;
}

int32_t tpurt_export_num_tensors(const tpurt_export_t* e) { return e ? e->num_tensors : 0; }
const tpurt_export_tensor_t* tpurt_export_tensor(const tpurt_export_t* e, int32_t i) {
  return e && i >= 0 && i < e->num_tensors ? &e->tensors[i] : NULL;
}
const char* tpurt_export_manifest(const tpurt_export_t* e, size_t* out_bytes) {
  if (out_bytes) *out_bytes = e ? e->manifest_bytes : 0;
  return e ? e->manifest : NULL;
}
tpurt_program_t* tpurt_export_program(const tpurt_export_t* e) { return e ? e->program : NULL; }
uint64_t tpurt_export_output_storage_bytes(const tpurt_export_t* e, int32_t j) {
  return e && j >= 0 && j < e->num_out ? e->out_bytes[j] : 0;
}

/* ---- sizes ---- */

static bool is_contiguous_view(const tpurt_export_tensor_t* t);

int32_t tpurt_export_num_symbols(const tpurt_export_t* e) { return e && e->sizes ? e->sizes->num_symbols : 0; }

const char* tpurt_export_symbol(const tpurt_export_t* e, int32_t i, int64_t* lo, int64_t* hi, int64_t* saved) {
  if (!e || !e->sizes || i < 0 || i >= e->sizes->num_symbols) return NULL;
  const xsym_t* y = &e->sizes->syms[i];
  if (lo) *lo = y->lo;
  if (hi) *hi = y->hi;
  if (saved) *saved = y->saved;
  return y->name;
}

/* The program's size values at the symbols' values; INVALID_ARGUMENT for a symbol outside its range
 * or a value past 2^40. */
static tpurt_status_t eval_values(const xsizes_t* z, const int64_t* symbols, int64_t* values) {
  for (int32_t k = 0; k < z->num_symbols; ++k) {
    const xsym_t* y = &z->syms[k];
    int64_t lo = y->lo < 2 ? 2 : y->lo, x = symbols[k];
    if (x < lo || (y->hi >= 0 && x > y->hi))
      return TPURT_STATUS(INVALID_ARGUMENT, "export: size %s is %lld; the program was exported for %lld to %lld",
                          y->name, (long long)x, (long long)lo, (long long)y->hi);
  }
  for (int32_t v = 0; v < z->num_values; ++v) {
    int64_t sum = 0;
    bool over = false;
    for (int32_t t = z->term_start[v]; t < z->term_start[v + 1]; ++t) {
      int64_t term = z->coefs[t];
      for (int32_t k = 0; k < z->num_symbols; ++k)
        for (uint8_t m = 0; m < z->exps[(size_t)t * (size_t)z->num_symbols + (size_t)k]; ++m)
          over |= __builtin_mul_overflow(term, symbols[k], &term);
      over |= __builtin_add_overflow(sum, term, &sum);
    }
    if (over || sum < 0 || sum > ((int64_t)1 << 40))
      return TPURT_STATUS(INVALID_ARGUMENT, "export: at these sizes the program's size %d is out of range", v);
    values[v] = sum;
  }
  return TPURT_OK;
}

static bool rule_at(const rule_t* u, const int64_t* values, int64_t* out) {
  int64_t x = 0;
  if (u->k >= 0 && __builtin_mul_overflow(u->coef, values[u->k], &x)) return false;
  return !__builtin_add_overflow(x, u->c, out);
}

/* Table tensor i at the size values (its rules applied; an input's storage is its contiguous bytes). */
static tpurt_status_t tensor_at(const tpurt_export_t* e, int32_t i, const int64_t* values, tpurt_export_tensor_t* out) {
  *out = e->tensors[i];
  int32_t r0 = e->sizes->rule_start[i];
  if (r0 < 0) return TPURT_OK;
  const rule_t* u = &e->sizes->rules[r0];
  int32_t nd = out->ndim;
  int64_t bytes = 0;
  bool ok = true;
  for (int32_t d = 0; d < nd; ++d) ok = ok && rule_at(&u[d], values, &out->sizes[d]);
  for (int32_t d = 0; d < nd; ++d) ok = ok && rule_at(&u[nd + d], values, &out->strides[d]);
  ok = ok && rule_at(&u[2 * nd], values, &out->storage_offset) && rule_at(&u[2 * nd + 1], values, &bytes);
  if (ok && out->role == TPURT_EXPORT_INPUT) {
    bytes = elem_size(out->dtype);
    for (int32_t d = 0; d < nd && ok; ++d) ok = !__builtin_mul_overflow(bytes, out->sizes[d], &bytes);
  } else if (ok && out->from_input) { /* a view of a program input: that storage's bytes here */
    for (int32_t j = 0; j < e->num_tensors; ++j) {
      const tpurt_export_tensor_t* x = &e->tensors[j];
      if (x->role == TPURT_EXPORT_OUTPUT || x->program_index != out->program_index) continue;
      tpurt_export_tensor_t at;
      if (x->role == TPURT_EXPORT_INPUT && tensor_at(e, j, values, &at) == TPURT_OK) bytes = (int64_t)at.storage_bytes;
      else if (x->role == TPURT_EXPORT_WEIGHT) bytes = (int64_t)x->storage_bytes;
      else ok = false;
      break;
    }
  }
  out->storage_bytes = (uint64_t)bytes;
  if (!ok || bytes < 0 || !view_fits(out) || (out->role == TPURT_EXPORT_INPUT && !is_contiguous_view(out)))
    return TPURT_STATUS(INVALID_ARGUMENT, "export: tensor %d (%s) has no valid layout at these sizes", i, out->name);
  return TPURT_OK;
}

tpurt_status_t tpurt_export_tensor_at(const tpurt_export_t* e, int32_t i, const int64_t* symbols,
                                      tpurt_export_tensor_t* out) {
  if (!e || !out || i < 0 || i >= e->num_tensors)
    return TPURT_STATUS(INVALID_ARGUMENT, "export_tensor_at: NULL artifact or output, or no tensor %d", i);
  if (!e->sizes) {
    *out = e->tensors[i];
    return TPURT_OK;
  }
  if (!symbols) return TPURT_STATUS(INVALID_ARGUMENT, "export_tensor_at: the artifact takes sizes: give them");
  int64_t* values = malloc(sizeof(int64_t) * (size_t)e->sizes->num_values);
  if (!values) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_tensor_at: out of host memory");
  tpurt_status_t s = eval_values(e->sizes, symbols, values);
  if (!s) s = tensor_at(e, i, values, out);
  free(values);
  return s;
}

/* ---- running from C ---- */

struct tpurt_export_session_t {
  const tpurt_export_t* e;
  tpurt_device_t* dev;
  tpurt_queue_t* q;
  void** inputs;  /* device storage per program input */
  int32_t num_inputs;
  tpurt_program_info_t info;
  /* a program that takes sizes: bound to the sizes it was saved at */
  tpurt_program_binding_t* binding;
  uint64_t arena_bytes, rng_count;
  uint64_t* in_cap; /* a program that takes sizes: the bytes each input's device storage has */
};

void tpurt_export_session_free(tpurt_export_session_t* s) {
  if (!s) return;
  if (s->inputs) {
    tpurt_queue_synchronize(s->q);
    for (int32_t i = 0; i < s->num_inputs; ++i)
      if (s->inputs[i]) tpurt_memory_free(s->dev, s->inputs[i]);
  }
  free(s->inputs);
  free(s->in_cap);
  free(s);
}

static bool is_contiguous_view(const tpurt_export_tensor_t* t) {
  int64_t expect = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->sizes[d] != 1 && t->strides[d] != expect) return false;
    expect *= t->sizes[d];
  }
  return t->storage_offset == 0;
}

static int64_t numel(const tpurt_export_tensor_t* t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->ndim; ++d) n *= t->sizes[d];
  return n;
}

tpurt_status_t tpurt_export_session_create(const tpurt_export_t* e, tpurt_device_t* dev, tpurt_queue_t* q,
                                           tpurt_export_session_t** out_s) {
  if (!e || !dev || !out_s) return TPURT_STATUS(INVALID_ARGUMENT, "export_session_create: NULL argument");
  *out_s = NULL;
  tpurt_export_session_t* s = calloc(1, sizeof(*s));
  if (!s) return TPURT_STATUS(RESOURCE_EXHAUSTED, "export_session_create: out of host memory");
  s->e = e;
  s->dev = dev;
  s->q = q ? q : tpurt_device_default_queue(dev);
  tpurt_program_query(e->program, &s->info);
  s->num_inputs = s->info.num_inputs;
  s->inputs = calloc((size_t)s->num_inputs + 1, sizeof(void*));
  s->in_cap = calloc((size_t)s->num_inputs + 1, sizeof(uint64_t));
  tpurt_status_t st = s->inputs && s->in_cap ? TPURT_OK
                                             : TPURT_STATUS(RESOURCE_EXHAUSTED, "export_session_create: out of host memory");
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    const tpurt_export_tensor_t* t = &e->tensors[i];
    if (t->role == TPURT_EXPORT_OUTPUT) continue;
    if (t->role == TPURT_EXPORT_INPUT && !is_contiguous_view(t))
      st = TPURT_STATUS(UNIMPLEMENTED, "export_session_create: input %d (%s) is not contiguous; the C runner takes "
                                       "contiguous inputs", i, t->name);
    if (!st) st = tpurt_memory_allocate(dev, s->q, t->storage_bytes ? t->storage_bytes : 1, &s->inputs[t->program_index]);
    if (!st && s->in_cap) s->in_cap[t->program_index] = t->storage_bytes ? t->storage_bytes : 1;
    if (!st && t->role == TPURT_EXPORT_WEIGHT && t->storage_bytes)
      st = tpurt_memcpy_h2d(dev, s->q, s->inputs[t->program_index], t->data, t->storage_bytes);
  }
  s->arena_bytes = s->info.arena_bytes;
  s->rng_count = s->info.rng_count;
  int32_t nv = tpurt_program_num_values(e->program);
  if (!st && nv > 0) {
    st = tpurt_program_bind(e->program, tpurt_program_values(e->program), nv, &s->binding, &s->arena_bytes,
                            &s->rng_count);
    uint64_t* in_bytes = st ? NULL : calloc((size_t)s->num_inputs + 1, sizeof(uint64_t));
    if (!st && !in_bytes) st = TPURT_STATUS(RESOURCE_EXHAUSTED, "export_session_create: out of host memory");
    for (int32_t i = 0; in_bytes && i < e->num_tensors; ++i)
      if (e->tensors[i].role != TPURT_EXPORT_OUTPUT) in_bytes[e->tensors[i].program_index] = e->tensors[i].storage_bytes;
    if (in_bytes)
      st = tpurt_program_check_storages(e->program, s->binding, in_bytes, s->num_inputs, e->out_bytes, e->num_out);
    free(in_bytes);
  }
  if (st) {
    tpurt_export_session_free(s);
    return st;
  }
  *out_s = s;
  return TPURT_OK;
}

/* Copies view t of the host bytes `storage` into dst, contiguous. */
static void gather(const tpurt_export_tensor_t* t, const uint8_t* storage, uint8_t* dst) {
  int64_t es = elem_size(t->dtype), n = numel(t);
  int64_t idx[TPURT_MAX_DIMS] = {0};
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = t->storage_offset;
    for (int32_t d = 0; d < t->ndim; ++d) off += idx[d] * t->strides[d];
    memcpy(dst + k * es, storage + off * es, (size_t)es);
    for (int32_t d = t->ndim - 1; d >= 0; --d) {
      if (++idx[d] < t->sizes[d]) break;
      idx[d] = 0;
    }
  }
}

/* One run with the table `ts` (the file's, or at other sizes), the program output storages' bytes and
 * a binding (NULL for fixed sizes). */
static tpurt_status_t run_with(tpurt_export_session_t* s, const tpurt_export_tensor_t* ts, const uint64_t* out_bytes,
                               const tpurt_program_binding_t* binding, uint64_t arena_bytes, uint64_t rng_count,
                               const void* const* inputs, void* const* outputs) {
  const tpurt_export_t* e = s->e;
  tpurt_status_t st = TPURT_OK;
  int32_t k_in = 0, no = s->info.num_outputs;
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    const tpurt_export_tensor_t* t = &ts[i];
    if (t->role != TPURT_EXPORT_INPUT) continue;
    const void* src = inputs ? inputs[k_in] : NULL;
    k_in++;
    if (!src) return TPURT_STATUS(INVALID_ARGUMENT, "export_session_run: input %d (%s) is NULL", k_in - 1, t->name);
    st = tpurt_memcpy_h2d(s->dev, s->q, s->inputs[t->program_index], src,
                          (size_t)(numel(t) * elem_size(t->dtype)));
  }
  if (st) return st;
  void** outs = calloc((size_t)no + 1, sizeof(void*));
  void* arena = NULL;
  if (!outs) st = TPURT_STATUS(RESOURCE_EXHAUSTED, "export_session_run: out of host memory");
  for (int32_t j = 0; j < no && !st; ++j) st = tpurt_memory_allocate(s->dev, s->q, out_bytes[j], &outs[j]);
  if (!st && arena_bytes) st = tpurt_memory_allocate(s->dev, s->q, arena_bytes, &arena);
  /* Random ops draw from one stream per process: seed 0, offsets advancing. */
  static _Atomic uint64_t rng_next;
  tpurt_rng_t rng = {0, atomic_fetch_add(&rng_next, rng_count)};
  if (!st)
    st = tpurt_program_launch_bound(e->program, binding, s->q, s->inputs, s->num_inputs, outs, no, arena, rng);
  /* Updated weights (a mutated buffer) go back into the weight's storage. */
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    const tpurt_export_tensor_t* t = &ts[i];
    if (t->role != TPURT_EXPORT_OUTPUT || t->writes_back < 0) continue;
    const tpurt_export_tensor_t* w = &ts[t->writes_back];
    uint8_t* src = (uint8_t*)(t->from_input ? s->inputs[t->program_index] : outs[t->program_index]);
    if (!is_contiguous_view(t) || !is_contiguous_view(w) || numel(t) * elem_size(t->dtype) != numel(w) * elem_size(w->dtype))
      st = TPURT_STATUS(UNIMPLEMENTED, "export_session_run: output %d (%s) updates weight %s with another layout", i,
                        t->name, w->name);
    else if (src != s->inputs[w->program_index])
      st = tpurt_queue_submit_copy(s->q, s->inputs[w->program_index], src, (size_t)(numel(w) * elem_size(w->dtype)));
  }
  tpurt_status_t sync = tpurt_queue_synchronize(s->q);
  if (!st) st = sync;
  else tpurt_status_free(sync);
  int32_t k_out = 0;
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    const tpurt_export_tensor_t* t = &ts[i];
    if (t->role != TPURT_EXPORT_OUTPUT) continue;
    void* dst = outputs ? outputs[k_out] : NULL;
    k_out++;
    if (!dst) continue; /* the caller does not want it */
    const uint8_t* src = (const uint8_t*)(t->from_input ? s->inputs[t->program_index] : outs[t->program_index]);
    if (is_contiguous_view(t)) {
      st = tpurt_memcpy_d2h(s->dev, s->q, dst, src, (size_t)(numel(t) * elem_size(t->dtype)));
      continue;
    }
    uint8_t* host = malloc(t->storage_bytes ? t->storage_bytes : 1);
    if (!host) {
      st = TPURT_STATUS(RESOURCE_EXHAUSTED, "export_session_run: out of host memory");
      break;
    }
    st = tpurt_memcpy_d2h(s->dev, s->q, host, src, t->storage_bytes);
    if (!st) gather(t, host, dst);
    free(host);
  }
  for (int32_t j = 0; outs && j < no; ++j)
    if (outs[j]) tpurt_memory_free(s->dev, outs[j]);
  if (arena) tpurt_memory_free(s->dev, arena);
  free(outs);
  return st;
}

tpurt_status_t tpurt_export_session_run(tpurt_export_session_t* s, const void* const* inputs, void* const* outputs) {
  if (!s) return TPURT_STATUS(INVALID_ARGUMENT, "export_session_run: NULL session");
  return run_with(s, s->e->tensors, s->e->out_bytes, s->binding, s->arena_bytes, s->rng_count, inputs, outputs);
}

tpurt_status_t tpurt_export_session_run_at(tpurt_export_session_t* s, const int64_t* symbols,
                                           const void* const* inputs, void* const* outputs) {
  if (!s) return TPURT_STATUS(INVALID_ARGUMENT, "export_session_run_at: NULL session");
  const tpurt_export_t* e = s->e;
  if (!e->sizes) return tpurt_export_session_run(s, inputs, outputs);
  if (!symbols) return TPURT_STATUS(INVALID_ARGUMENT, "export_session_run_at: the artifact takes sizes: give them");
  const xsizes_t* z = e->sizes;
  int64_t* values = malloc(sizeof(int64_t) * (size_t)z->num_values);
  tpurt_export_tensor_t* ts = malloc(sizeof(tpurt_export_tensor_t) * ((size_t)e->num_tensors + 1));
  uint64_t* out_bytes = calloc((size_t)e->num_out + 1, sizeof(uint64_t));
  uint64_t* in_bytes = calloc((size_t)s->num_inputs + 1, sizeof(uint64_t));
  tpurt_status_t st = values && ts && out_bytes && in_bytes
                          ? TPURT_OK
                          : TPURT_STATUS(RESOURCE_EXHAUSTED, "export_session_run_at: out of host memory");
  if (!st) st = eval_values(z, symbols, values);
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    st = tensor_at(e, i, values, &ts[i]);
    const tpurt_export_tensor_t* t = &ts[i];
    if (st) break;
    if (t->role != TPURT_EXPORT_OUTPUT) in_bytes[t->program_index] = t->storage_bytes;
    else if (!t->from_input && t->storage_bytes > out_bytes[t->program_index])
      out_bytes[t->program_index] = t->storage_bytes;
  }
  tpurt_program_binding_t* b = NULL;
  uint64_t arena_bytes = 0, rng_count = 0;
  if (!st) st = tpurt_program_bind(e->program, values, z->num_values, &b, &arena_bytes, &rng_count);
  if (!st) st = tpurt_program_check_storages(e->program, b, in_bytes, s->num_inputs, out_bytes, e->num_out);
  /* An input storage grows to its size here (weights keep theirs). */
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    const tpurt_export_tensor_t* t = &ts[i];
    int32_t k = t->program_index;
    if (t->role != TPURT_EXPORT_INPUT || t->storage_bytes <= s->in_cap[k]) continue;
    tpurt_status_t sync = tpurt_queue_synchronize(s->q); /* the old storage may still be read */
    if (sync) {
      st = sync;
      break;
    }
    tpurt_memory_free(s->dev, s->inputs[k]);
    s->inputs[k] = NULL;
    s->in_cap[k] = 0;
    st = tpurt_memory_allocate(s->dev, s->q, t->storage_bytes, &s->inputs[k]);
    if (!st) s->in_cap[k] = t->storage_bytes;
  }
  if (!st) st = run_with(s, ts, out_bytes, b, arena_bytes, rng_count, inputs, outputs);
  free(values);
  free(ts);
  free(out_bytes);
  free(in_bytes);
  return st;
}
