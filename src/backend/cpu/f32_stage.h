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
/* Float32 views of a two-input kernel's inputs and its output (kn_cpu_f32_in twice, then
 * kn_cpu_f32_out); on failure all three are released. */
kiln_status kn_cpu_f32_binary(kn_kernel_ctx *k, kn_cpu_f32 *a, kn_cpu_f32 *b, kn_cpu_f32 *y);
/* Whether a product's 16-bit weights (kiln_weights) are widened to float32 when the engine is
 * made: float16 ones always (storage only), bfloat16 ones where the precision pass marked the
 * node kiln_compute = "fp32" (a Winograd conv). */
bool kn_cpu_weights_widened(const kn_node *n, const kn_tensor *w);
/* True when output i exists and has storage. */
bool kn_cpu_has_out(const kn_kernel_ctx *k, int i);

#endif
