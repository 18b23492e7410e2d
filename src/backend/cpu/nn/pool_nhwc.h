/* Pooling over bf16 activations stored NHWC (nn/pool_nhwc.c). */
#ifndef KN_CPU_POOL_NHWC_H
#define KN_CPU_POOL_NHWC_H

#include "backend/cpu/cpu.h"
#include "ops/nn/pool.h"

/* Whether a MaxPool of input shape x and geometry g can run NHWC in bf16. */
bool kn_cpu_maxpool_nhwc_bf16_applies(const kn_shape *x, const kn_pool_geom *g);
/* MaxPool with X and Y bf16 stored NHWC (the node's kiln_nhwc), no indices output. */
kiln_status kn_cpu_maxpool_nhwc_bf16(kn_kernel_ctx *k, const kn_pool_geom *g);

#endif
