/* Runs a torch_tpu.export artifact with no Python: the runtime's public API
 * only (tpurt/tpurt.h). Inputs are raw files of the input tensors' bytes
 * (contiguous, in the artifact's input order); each output is written to
 * OUTDIR/<index>.bin the same way.
 *
 *   build/examples/run_export model.tpuexp OUTDIR [input0.bin input1.bin ...]
 *
 * It prints the artifact's tensors first, so a user sees what to feed it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpurt/tpurt.h"

static int fail(tpurt_status_t s, const char* what) {
  fprintf(stderr, "run_export: %s: %s\n", what, tpurt_status_message(s));
  tpurt_status_free(s);
  return 1;
}

static size_t tensor_bytes(const tpurt_export_tensor_t* t) {
  size_t n = tpurt_dtype_traits[t->dtype].size;
  for (int32_t d = 0; d < t->ndim; ++d) n *= (size_t)t->sizes[d];
  return n;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s ARTIFACT OUTDIR [INPUT.bin ...]\n", argv[0]);
    return 2;
  }
  tpurt_status_t s = tpurt_init();
  if (s) return fail(s, "init");
  tpurt_device_t* dev = NULL;
  if ((s = tpurt_device_get(0, &dev))) return fail(s, "device");
  tpurt_export_t* e = NULL;
  if ((s = tpurt_export_load(argv[1], &e))) return fail(s, "load");
  int32_t n = tpurt_export_num_tensors(e), n_in = 0, n_out = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpurt_export_tensor_t* t = tpurt_export_tensor(e, i);
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
    const tpurt_export_tensor_t* t = tpurt_export_tensor(e, i);
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
  if ((s = tpurt_export_session_run(sess, ins, outs))) return fail(s, "run");
  k_out = 0;
  for (int32_t i = 0; i < n; ++i) {
    const tpurt_export_tensor_t* t = tpurt_export_tensor(e, i);
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
  for (int32_t i = 0; i < n_in; ++i) free((void*)ins[i]);
  for (int32_t i = 0; i < n_out; ++i) free(outs[i]);
  free(ins);
  free(outs);
  return 0;
}
