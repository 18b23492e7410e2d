/* Private to the CPU reduce, norm and pool kernels: kernel entry points split across files,
 * and conversions between storage types and the float compute type. */
#ifndef KN_CPU_REDUCE_IMPL_H
#define KN_CPU_REDUCE_IMPL_H

#include "backend/cpu/clones.h"
#include "backend/cpu/cpu.h"

#include <stdbool.h>

/* Mean and (population) variance of n contiguous floats, accumulated in double. */
void cpu_norm_moments(const float *x, int64_t n, double *mean, double *var);

/* A float32 view of a float tensor: the data itself for float32, else a converted copy
 * (kn_malloc'd; free with cpu_red_f32_release). */
typedef struct cpu_f32_view {
    float *p;
    bool owned;
} cpu_f32_view;
kiln_status cpu_red_f32_acquire(const kn_tensor *t, cpu_f32_view *v);
void cpu_red_f32_release(cpu_f32_view *v);
/* An output's float32 buffer: the output itself for float32, else scratch to be converted
 * by cpu_red_f32_commit (which also frees it). */
kiln_status cpu_red_f32_output(kn_tensor *t, cpu_f32_view *v);
void cpu_red_f32_commit(kn_tensor *t, cpu_f32_view *v);

#endif
