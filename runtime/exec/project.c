/* The roofline projection's table of TPU generations (tpurt/project.h).
 *
 * Figures, per chip, from Google Cloud's TPU documentation:
 *  - v5e: 197 TFLOP/s bf16, 16 GB HBM2 at 819 GB/s, ICI 400 GB/s
 *    bidirectional (cloud.google.com/tpu/docs/v5e);
 *  - v5p: 459 TFLOP/s bf16, 95 GB HBM2e at 2765 GB/s, ICI 4800 Gbps
 *    = 600 GB/s (cloud.google.com/tpu/docs/v5p);
 *  - v6e (Trillium): 918 TFLOP/s bf16, 32 GB HBM at 1638 GB/s, ICI
 *    800 GB/s bidirectional (cloud.google.com/tpu/docs/v6e);
 *  - v7 (TPU7x, Ironwood): 2307 TFLOP/s bf16, 192 GiB HBM at 7380 GB/s,
 *    ICI 1200 GB/s bidirectional (cloud.google.com/tpu/docs/tpu7x).
 * No float32 peak is published: the MXU multiplies bf16, and float32
 * products are made of bf16 passes (XLA: 6 at HIGHEST, 3 at HIGH, 1 at
 * DEFAULT), so a float32 product's peak is bf16 peak / passes.
 *
 * What the model leaves out (say so wherever a projection is shown):
 *  - the vector unit's peak is not published; elementwise and reduction
 *    work is costed at VPU_FRACTION of the MXU peak, which makes nearly all
 *    of it memory-bound, as it is on a TPU;
 *  - every kernel reads its operands from HBM and writes its results back
 *    (no VMEM reuse across kernels, no overlap of one kernel with the next);
 *    XLA's own fusion decisions are not modelled: eager kernels are costed
 *    one by one, DeferAndFuse chains as the one kernel they are;
 *  - peak rates: no MXU tiling waste (dimensions not multiples of 128/256
 *    run below peak on a TPU), no HBM efficiency loss;
 *  - a fixed launch cost per kernel (TORCH_TPU_PROJECT_LAUNCH_US, default 1 us);
 *  - the FLOP and byte counts are ops/cost.c's rules, estimates per family. */
#include <string.h>
#include <strings.h>

#include "tpurt/project.h"

/* Vector-unit work at this fraction of the MXU's bf16 peak (see above). */
#define VPU_FRACTION (1.0 / 16.0)

static const tpurt_project_chip_t kChips[] = {
    {"v5e", 197e12, 819e9, 16e9, 400e9, "cloud.google.com/tpu/docs/v5e"},
    {"v5p", 459e12, 2765e9, 95e9, 600e9, "cloud.google.com/tpu/docs/v5p"},
    {"v6e", 918e12, 1638e9, 32e9, 800e9, "cloud.google.com/tpu/docs/v6e"},
    {"v7", 2307e12, 7380e9, 192.0 * 1073741824.0, 1200e9, "cloud.google.com/tpu/docs/tpu7x"},
};

size_t tpurt_project_chip_count(void) { return sizeof kChips / sizeof kChips[0]; }

const tpurt_project_chip_t* tpurt_project_chip_at(size_t i) {
  return i < tpurt_project_chip_count() ? &kChips[i] : NULL;
}

const tpurt_project_chip_t* tpurt_project_chip_find(const char* name) {
  if (!name) return NULL;
  if (strcasecmp(name, "tpu7x") == 0 || strcasecmp(name, "ironwood") == 0 || strcasecmp(name, "v7x") == 0)
    name = "v7";
  if (strcasecmp(name, "trillium") == 0) name = "v6e";
  for (size_t i = 0; i < tpurt_project_chip_count(); ++i)
    if (strcasecmp(kChips[i].name, name) == 0) return &kChips[i];
  return NULL;
}

double tpurt_project_kernel_s(const tpurt_project_chip_t* chip, double flops, double bytes, bool matmul,
                              int passes, double launch_s, bool* out_compute_bound) {
  if (!chip) return 0;
  double peak = chip->bf16_flops / (matmul ? (passes > 0 ? passes : 1) : 1);
  if (!matmul) peak *= VPU_FRACTION;
  double tc = flops > 0 ? flops / peak : 0;
  double tm = bytes > 0 ? bytes / chip->hbm_bytes_per_s : 0;
  if (out_compute_bound) *out_compute_bound = tc > tm;
  return (tc > tm ? tc : tm) + launch_s;
}
