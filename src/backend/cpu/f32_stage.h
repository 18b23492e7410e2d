/* Float32 staging of any numeric tensor for kernels that compute in float32. */
#ifndef KN_CPU_F32_STAGE_H
#define KN_CPU_F32_STAGE_H

#include "backend/cpu/cpu.h"

#include <stdbool.h>

/* A float32 buffer standing for a tensor: the tensor's own data when it is float32, else a
 * converted copy (inputs) or scratch converted back on commit (outputs). */
typedef struct kn_cpu_f32 {
    float *p;
    bool owned;
} kn_cpu_f32;

/* Float32 view of any numeric input. */
kiln_status kn_cpu_f32_in(const kn_tensor *t, kn_cpu_f32 *v);
/* Float32 buffer for an output; kn_cpu_f32_commit converts it into the output. */
kiln_status kn_cpu_f32_out(kn_tensor *t, kn_cpu_f32 *v);
void kn_cpu_f32_commit(kn_tensor *t, kn_cpu_f32 *v);
void kn_cpu_f32_release(kn_cpu_f32 *v);
/* True when output i exists and has storage. */
bool kn_cpu_has_out(const kn_kernel_ctx *k, int i);

#endif
