/* Runs a torch_tpu.export artifact with no Python: the runtime's public API
 * only (tpurt/tpurt.h). Inputs are raw files of the input tensors' bytes
 * (contiguous, in the artifact's input order); each output is written to
 * OUTDIR/<index>.bin the same way.
 *
 *   build/examples/run_export [-s NAME=VALUE ...] model.tpuexp OUTDIR [input0.bin input1.bin ...]
 *
 * An artifact exported with dynamic sizes (torch.export's Dim) runs at the
 * sizes it was saved with, or at those -s gives (e.g. -s batch=13).
 * It prints the artifact's sizes and tensors first, so a user sees what to
 * feed it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpurt/tpurt.h"

static int fail(tpurt_status_t s, const char* what) {
  fprintf(stderr, "run_export: %s: %s\n", what, tpurt_status_message(s));
  tpurt_status_free(s);
  return 1;
}

#define MAX_SYMBOLS 64

static size_t tensor_bytes(const tpurt_export_tensor_t* t) {
  size_t n = tpurt_dtype_traits[t->dtype].size;
  for (int32_t d = 0; d < t->ndim; ++d) n *= (size_t)t->sizes[d];
  return n;
}

int main(int argc, char** argv) {
  const char* sets[MAX_SYMBOLS];
  int n_sets = 0;
  while (argc > 2 && strcmp(argv[1], "-s") == 0 && n_sets < MAX_SYMBOLS) {
    sets[n_sets++] = argv[2];
    argv += 2;
    argc -= 2;
  }
  if (argc < 3) {
    fprintf(stderr, "usage: %s [-s NAME=VALUE ...] ARTIFACT OUTDIR [INPUT.bin ...]\n", argv[0]);
    return 2;
  }
  tpurt_status_t s = tpurt_init();
  if (s) return fail(s, "init");
  tpurt_device_t* dev = NULL;
  if ((s = tpurt_device_get(0, &dev))) return fail(s, "device");
  tpurt_export_t* e = NULL;
  if ((s = tpurt_export_load(argv[1], &e))) return fail(s, "load");
  /* The sizes: the saved ones, then what -s says. */
  int64_t symbols[MAX_SYMBOLS];
  int32_t ns = tpurt_export_num_symbols(e);
  if (ns > MAX_SYMBOLS) return 2;
  for (int32_t k = 0; k < ns; ++k) {
    int64_t lo, hi;
    const char* name = tpurt_export_symbol(e, k, &lo, &hi, &symbols[k]);
    printf("size   %-24s %lld (exported for %lld to %lld)\n", name, (long long)symbols[k], (long long)lo,
           (long long)hi);
  }
  for (int i = 0; i < n_sets; ++i) {
    const char* eq = strchr(sets[i], '=');
    int32_t k = 0;
    while (eq && k < ns && (strlen(tpurt_export_symbol(e, k, NULL, NULL, NULL)) != (size_t)(eq - sets[i]) ||
                            strncmp(tpurt_export_symbol(e, k, NULL, NULL, NULL), sets[i], (size_t)(eq - sets[i]))))
      ++k;
    if (!eq || k == ns) {
      fprintf(stderr, "run_export: -s %s names no size of the artifact\n", sets[i]);
      return 2;
    }
    symbols[k] = strtoll(eq + 1, NULL, 10);
  }
  int32_t n = tpurt_export_num_tensors(e), n_in = 0, n_out = 0;
  tpurt_export_tensor_t* at = calloc((size_t)n + 1, sizeof(*at));
  for (int32_t i = 0; i < n; ++i)
    if ((s = tpurt_export_tensor_at(e, i, symbols, &at[i]))) return fail(s, "sizes");
  for (int32_t i = 0; i < n; ++i) {
    const tpurt_export_tensor_t* t = &at[i];
    static const char* roles[] = {"weight", "input", "output"};
    printf("%-6s %-24s %s [", roles[t->role], t->name, tpurt_dtype_name(t->dtype));
    for (int32_t d = 0; d < t->ndim; ++d) printf(d ? ", %lld" : "%lld", (long long)t->sizes[d]);
    printf("]\n");
    n_in += t->role == TPURT_EXPORT_INPUT;
    n_out += t->role == TPURT_EXPORT_OUTPUT;
  }
  if (argc - 3 != n_in) {
    fprintf(stderr, "run_export: the artifact takes %d inputs, %d given\n", n_in, argc - 3);
    return 2;
  }
  const void** ins = calloc((size_t)n_in + 1, sizeof(void*));
  void** outs = calloc((size_t)n_out + 1, sizeof(void*));
  int32_t k_in = 0, k_out = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpurt_export_tensor_t* t = &at[i];
    size_t bytes = tensor_bytes(t);
    if (t->role == TPURT_EXPORT_OUTPUT) outs[k_out++] = malloc(bytes ? bytes : 1);
    if (t->role != TPURT_EXPORT_INPUT) continue;
    const char* path = argv[3 + k_in];
    FILE* f = fopen(path, "rb");
    void* buf = malloc(bytes ? bytes : 1);
    size_t got = f ? fread(buf, 1, bytes, f) : 0;
    if (f) fclose(f);
    if (got != bytes) {
      fprintf(stderr, "run_export: input %d (%s) wants %zu bytes from %s, read %zu\n", k_in, t->name, bytes, path, got);
      return 2;
    }
    ins[k_in++] = buf;
  }
  tpurt_export_session_t* sess = NULL;
  if ((s = tpurt_export_session_create(e, dev, NULL, &sess))) return fail(s, "session");
  if ((s = tpurt_export_session_run_at(sess, symbols, ins, outs))) return fail(s, "run");
  k_out = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpurt_export_tensor_t* t = &at[i];
    if (t->role != TPURT_EXPORT_OUTPUT) continue;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%d.bin", argv[2], k_out);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(outs[k_out], 1, tensor_bytes(t), f) != tensor_bytes(t)) {
      fprintf(stderr, "run_export: cannot write %s\n", path);
      return 1;
    }
    fclose(f);
    k_out++;
  }
  tpurt_export_session_free(sess);
  tpurt_export_free(e);
  free(at);
  for (int32_t i = 0; i < n_in; ++i) free((void*)ins[i]);
  for (int32_t i = 0; i < n_out; ++i) free(outs[i]);
  free(ins);
  free(outs);
  return 0;
}
