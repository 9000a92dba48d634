/* Projected time on a real TPU: a roofline model of one kernel on a chosen
 * TPU generation (exec/project.c holds the table of public figures and
 * says where each comes from, and what the model leaves out). */
#ifndef TPURT_PROJECT_H_
#define TPURT_PROJECT_H_

#include "tpurt/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpurt_project_chip_t {
  const char* name;       /* "v5e", "v5p", "v6e", "v7" */
  double bf16_flops;      /* peak dense bf16 matrix FLOP/s per chip (the MXUs) */
  double hbm_bytes_per_s; /* HBM bandwidth per chip */
  double hbm_bytes;       /* HBM capacity per chip */
  double ici_bytes_per_s; /* inter-chip interconnect, bidirectional, per chip */
  const char* source;     /* where the figures are published */
} tpurt_project_chip_t;

TPURT_API size_t tpurt_project_chip_count(void);
TPURT_API const tpurt_project_chip_t* tpurt_project_chip_at(size_t index);
/* By name ("v6e"; also "tpu7x"/"ironwood" for v7); NULL if unknown. */
TPURT_API const tpurt_project_chip_t* tpurt_project_chip_find(const char* name);

/* Seconds a kernel of `flops` and `bytes` (HBM read + written) takes on
 * `chip`: max(flops / peak, bytes / bandwidth) + launch_s. `matmul`: MXU
 * work, whose peak is bf16_flops / `passes` (bf16 passes per product: 1 for
 * bf16 operands and for float32 at "medium" precision, 3 at "high", 6 at
 * "highest"); other work runs on the vector unit at vpu_fraction of that
 * peak (see project.c). *out_compute_bound (may be NULL): whether the flops
 * term is the larger one. */
TPURT_API double tpurt_project_kernel_s(const tpurt_project_chip_t* chip, double flops, double bytes, bool matmul,
                                        int passes, double launch_s, bool* out_compute_bound);

#ifdef __cplusplus
}
#endif
#endif /* TPURT_PROJECT_H_ */
