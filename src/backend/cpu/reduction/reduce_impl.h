/* Private to the CPU reduce, norm and pool kernels: kernel entry points split across files,
 * and conversions between storage types and the float compute type. */
#ifndef KN_CPU_REDUCE_IMPL_H
#define KN_CPU_REDUCE_IMPL_H

#include "backend/cpu/clones.h"
#include "backend/cpu/f32_stage.h"
#include "backend/cpu/cpu.h"

#include <stdbool.h>

/* Mean and (population) variance of n contiguous floats, accumulated in double. */
void cpu_norm_moments(const float *x, int64_t n, double *mean, double *var);

#endif
