/* Exported programs: one file holding a compiled program (tpurt/program.h),
 * its weights and a table of its inputs and outputs, written by
 * torch_tpu.export.save and run from C with no Python:
 *
 *   tpurt_export_t* e;            tpurt_export_load("model.tpuexp", &e);
 *   tpurt_export_session_t* s;    tpurt_export_session_create(e, dev, NULL, &s);   (weights to the device)
 *   tpurt_export_session_run(s, host_inputs, host_outputs);                        (as often as needed)
 *   tpurt_export_session_free(s); tpurt_export_free(e);
 *
 * The file: a header, the tensor table, a manifest (text the writer chose:
 * torch_tpu.export keeps its Python calling convention there as JSON), the
 * program's bytes and the weights, then an FNV-1a check of everything before
 * it. Loading checks the check, the table against the program (counts,
 * storage sizes) and every address of the program against its storage; an
 * artifact is data, not code, but like any weights file, load only what
 * you trust. */
#ifndef TPURT_EXPORT_H_
#define TPURT_EXPORT_H_

#include "tpurt/program.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpurt_export_role_e {
  TPURT_EXPORT_WEIGHT = 0, /* a program input whose value the file holds (parameters, buffers, constants) */
  TPURT_EXPORT_INPUT = 1,  /* a program input the caller gives at each run */
  TPURT_EXPORT_OUTPUT = 2,
} tpurt_export_role_t;

typedef struct tpurt_export_tensor_t {
  const char* name;
  tpurt_export_role_t role;
  tpurt_dtype_t dtype;
  int32_t ndim;
  int64_t sizes[TPURT_MAX_DIMS];
  int64_t strides[TPURT_MAX_DIMS]; /* elements */
  int64_t storage_offset;          /* elements */
  uint64_t storage_bytes;
  /* Weights and inputs: the program input they are. Outputs: the program
   * output storage they view, or with from_input the program input's. */
  int32_t program_index;
  bool from_input;
  int32_t writes_back;             /* outputs: the weight (table index) a run updates with it, or -1 */
  const void* data;                /* weights: storage_bytes bytes (in the loaded file) */
} tpurt_export_tensor_t;

typedef struct tpurt_export_t tpurt_export_t;

/* Writes an artifact (to a temporary name, then renamed into place). */
TPURT_API tpurt_status_t tpurt_export_save(const char* path, const tpurt_program_t* program,
                                           const tpurt_export_tensor_t* tensors, int32_t num_tensors,
                                           const char* manifest, size_t manifest_bytes);
/* tpurt_export_save for a program that takes sizes (tpurt_program_generalize): `sizes` is the
 * artifact's fifth section, written by torch_tpu.export (its symbols with their ranges and saved
 * values, the program's size values as integer polynomials of them, and the rules of each input's and
 * output's sizes, strides, offset and storage bytes); tpurt_export_load checks it whole. */
TPURT_API tpurt_status_t tpurt_export_save_sized(const char* path, const tpurt_program_t* program,
                                                 const tpurt_export_tensor_t* tensors, int32_t num_tensors,
                                                 const char* manifest, size_t manifest_bytes, const void* sizes,
                                                 size_t sizes_bytes);
/* Reads and checks an artifact. DATA_LOSS for a damaged or truncated file,
 * NOT_FOUND for a kernel this runtime lacks. */
TPURT_API tpurt_status_t tpurt_export_load(const char* path, tpurt_export_t** out);
TPURT_API void tpurt_export_free(tpurt_export_t* e);
TPURT_API int32_t tpurt_export_num_tensors(const tpurt_export_t* e);
TPURT_API const tpurt_export_tensor_t* tpurt_export_tensor(const tpurt_export_t* e, int32_t index);
TPURT_API const char* tpurt_export_manifest(const tpurt_export_t* e, size_t* out_bytes);
TPURT_API tpurt_program_t* tpurt_export_program(const tpurt_export_t* e); /* borrowed */
/* Bytes of program output storage j (what a launch allocates for it). */
TPURT_API uint64_t tpurt_export_output_storage_bytes(const tpurt_export_t* e, int32_t j);

/* Running an artifact from C: the weights live on the device for the
 * session's life. A run copies the inputs (host, contiguous, in table
 * order) to the device, launches the program on q (NULL: the device's
 * default queue), writes updated weights back on the device, waits, and
 * copies every output into outputs (host, contiguous, in table order). */
typedef struct tpurt_export_session_t tpurt_export_session_t;
TPURT_API tpurt_status_t tpurt_export_session_create(const tpurt_export_t* e, tpurt_device_t* device,
                                                     tpurt_queue_t* queue, tpurt_export_session_t** out);
TPURT_API tpurt_status_t tpurt_export_session_run(tpurt_export_session_t* s, const void* const* inputs,
                                                  void* const* outputs);
TPURT_API void tpurt_export_session_free(tpurt_export_session_t* s);

/* Sizes taken at run time (torch.export's dynamic dims, e.g. a batch): an artifact has
 * tpurt_export_num_symbols of them (0: its sizes are fixed). Symbol i's name, range [lo, hi] (hi -1:
 * unbounded; sizes below 2 are never taken) and the value it was saved at; NULL past the last. */
TPURT_API int32_t tpurt_export_num_symbols(const tpurt_export_t* e);
TPURT_API const char* tpurt_export_symbol(const tpurt_export_t* e, int32_t i, int64_t* lo, int64_t* hi,
                                          int64_t* saved);
/* Table tensor i at the symbols' values (num_symbols of them): its sizes, strides, offset and storage
 * bytes there (an input's: contiguous). INVALID_ARGUMENT naming a symbol outside its range. */
TPURT_API tpurt_status_t tpurt_export_tensor_at(const tpurt_export_t* e, int32_t i, const int64_t* symbols,
                                                tpurt_export_tensor_t* out);
/* tpurt_export_session_run at the symbols' values: inputs and outputs are host buffers of the sizes
 * tpurt_export_tensor_at gives (contiguous). The program is bound to the sizes once per size (no
 * capture, no build), every address it reaches there checked against its storages. */
TPURT_API tpurt_status_t tpurt_export_session_run_at(tpurt_export_session_t* s, const int64_t* symbols,
                                                     const void* const* inputs, void* const* outputs);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TPURT_EXPORT_H_ */
