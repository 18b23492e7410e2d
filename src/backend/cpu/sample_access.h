/* Element access in float for the sampling kernels (RoiAlign, GridSample, Col2Im): float32
 * directly, other float types through the generic accessors. */
#ifndef KN_CPU_SAMPLE_ACCESS_H
#define KN_CPU_SAMPLE_ACCESS_H

#include "backend/cpu/cpu.h"

static inline float kn_cpu_sample_load(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_FLOAT32 ? ((const float *)t->data)[i]
                                          : (float)kn_tensor_get_f64(t, i);
}

static inline void kn_cpu_sample_put(kn_tensor *t, int64_t i, double v) {
    if (t->dtype == KILN_DTYPE_FLOAT32)
        ((float *)t->data)[i] = (float)v;
    else
        kn_tensor_set_f64(t, i, v);
}

#endif
