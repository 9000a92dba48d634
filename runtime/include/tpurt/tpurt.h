/* tpurt: the torch_tpu device runtime. Umbrella header; knows nothing of
 * PyTorch or Python. */
#ifndef TPURT_TPURT_H_
#define TPURT_TPURT_H_
#include "tpurt/base.h"
#include "tpurt/dtype.h"
#include "tpurt/tensor.h"
#include "tpurt/kernel.h"
#include "tpurt/device.h"
#include "tpurt/program.h"
#include "tpurt/export.h"
#include "tpurt/dist.h"
#endif
