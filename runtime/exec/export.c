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
#define EXPORT_VERSION 1u
#define HEADER_BYTES (8 + 4 + 4 + 8 * 8)
#define DATA_ALIGN 64u
#define FNV_SEED 14695981039346656037ull

struct tpurt_export_t {
  uint8_t* file;
  size_t file_bytes;
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
  if (!path || !program || n < 0 || (n && !ts) || (manifest_bytes && !manifest))
    return TPURT_STATUS(INVALID_ARGUMENT, "export_save: NULL or negative argument");
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
  uint64_t sections[8] = {table_off, table.n, manifest_off, manifest_bytes, prog_off, prog_bytes, data_off, data_bytes};
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

void tpurt_export_free(tpurt_export_t* e) {
  if (!e) return;
  if (e->tensors)
    for (int32_t i = 0; i < e->num_tensors; ++i) free((char*)e->tensors[i].name);
  free(e->tensors);
  free(e->out_bytes);
  tpurt_program_release(e->program);
  free(e->file);
  free(e);
}

static tpurt_status_t parse(tpurt_export_t* e, const char* path) {
  const uint8_t* f = e->file;
  size_t n = e->file_bytes;
  if (n < HEADER_BYTES + 8 || memcmp(f, EXPORT_MAGIC, 8) != 0)
    return TPURT_STATUS(DATA_LOSS, "export_load: %s is not a torch_tpu export artifact", path);
  uint64_t h;
  memcpy(&h, f + n - 8, 8);
  if (tpurt_fnv1a(f, n - 8, FNV_SEED) != h)
    return TPURT_STATUS(DATA_LOSS, "export_load: %s is damaged or truncated (its check does not match)", path);
  in_t r = {.p = f, .n = n - 8, .at = 8};
  uint32_t version, count;
  uint64_t sec[8];
  IN(&r, version);
  IN(&r, count);
  in(&r, sec, sizeof(sec));
  if (version != EXPORT_VERSION)
    return TPURT_STATUS(FAILED_PRECONDITION, "export_load: %s is artifact version %u, this runtime reads %u", path,
                        version, EXPORT_VERSION);
  for (int k = 0; k < 4; ++k)
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
  return check_table(e->tensors, e->num_tensors, &info);
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
};

void tpurt_export_session_free(tpurt_export_session_t* s) {
  if (!s) return;
  if (s->inputs) {
    tpurt_queue_synchronize(s->q);
    for (int32_t i = 0; i < s->num_inputs; ++i)
      if (s->inputs[i]) tpurt_memory_free(s->dev, s->inputs[i]);
  }
  free(s->inputs);
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
  tpurt_status_t st = s->inputs ? TPURT_OK : TPURT_STATUS(RESOURCE_EXHAUSTED, "export_session_create: out of host memory");
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    const tpurt_export_tensor_t* t = &e->tensors[i];
    if (t->role == TPURT_EXPORT_OUTPUT) continue;
    if (t->role == TPURT_EXPORT_INPUT && !is_contiguous_view(t))
      st = TPURT_STATUS(UNIMPLEMENTED, "export_session_create: input %d (%s) is not contiguous; the C runner takes "
                                       "contiguous inputs", i, t->name);
    if (!st) st = tpurt_memory_allocate(dev, s->q, t->storage_bytes ? t->storage_bytes : 1, &s->inputs[t->program_index]);
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

tpurt_status_t tpurt_export_session_run(tpurt_export_session_t* s, const void* const* inputs, void* const* outputs) {
  if (!s) return TPURT_STATUS(INVALID_ARGUMENT, "export_session_run: NULL session");
  const tpurt_export_t* e = s->e;
  tpurt_status_t st = TPURT_OK;
  int32_t k_in = 0, no = s->info.num_outputs;
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    const tpurt_export_tensor_t* t = &e->tensors[i];
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
  for (int32_t j = 0; j < no && !st; ++j) st = tpurt_memory_allocate(s->dev, s->q, e->out_bytes[j], &outs[j]);
  if (!st && s->arena_bytes) st = tpurt_memory_allocate(s->dev, s->q, s->arena_bytes, &arena);
  /* Random ops draw from one stream per process: seed 0, offsets advancing. */
  static _Atomic uint64_t rng_next;
  tpurt_rng_t rng = {0, atomic_fetch_add(&rng_next, s->rng_count)};
  if (!st)
    st = tpurt_program_launch_bound(e->program, s->binding, s->q, s->inputs, s->num_inputs, outs, no, arena, rng);
  /* Updated weights (a mutated buffer) go back into the weight's storage. */
  for (int32_t i = 0; i < e->num_tensors && !st; ++i) {
    const tpurt_export_tensor_t* t = &e->tensors[i];
    if (t->role != TPURT_EXPORT_OUTPUT || t->writes_back < 0) continue;
    const tpurt_export_tensor_t* w = &e->tensors[t->writes_back];
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
    const tpurt_export_tensor_t* t = &e->tensors[i];
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
