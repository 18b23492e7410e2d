/* CPU kernels of the extra family: shared helpers and the kernels of its other files. */
#ifndef KN_CPU_EXTRA_INTERNAL_H
#define KN_CPU_EXTRA_INTERNAL_H

#include "backend/cpu/cpu.h"

#include <stdbool.h>

/* A float32 buffer standing for a tensor: the tensor's own data when it is float32, else a
 * converted copy (inputs) or scratch converted back on commit (outputs). */
typedef struct cpu_xf32 {
    float *p;
    bool owned;
} cpu_xf32;

/* Float32 view of any numeric input. */
kiln_status cpu_extra_in_f32(const kn_tensor *t, cpu_xf32 *v);
/* Float32 buffer for an output; cpu_extra_commit converts it into the output. */
kiln_status cpu_extra_out_f32(kn_tensor *t, cpu_xf32 *v);
void cpu_extra_commit(kn_tensor *t, cpu_xf32 *v);
void cpu_extra_release(cpu_xf32 *v);
/* True when output i exists and has storage. */
bool cpu_extra_has_out(const kn_kernel_ctx *k, int i);

#endif
