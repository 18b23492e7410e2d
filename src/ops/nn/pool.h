/* Pooling geometry shared by shape inference (src/ops/pool.c) and the kernels, so output
 * sizes and effective pads are computed in one place. */
#ifndef KN_OPS_POOL_H
#define KN_OPS_POOL_H

#include "ops/op.h"

#include <stdbool.h>

#define KN_POOL_MAX_SPATIAL 3

typedef struct kn_pool_geom {
    int nsp; /* spatial dims (1 to 3) */
    int64_t in[KN_POOL_MAX_SPATIAL], out[KN_POOL_MAX_SPATIAL];
    int64_t k[KN_POOL_MAX_SPATIAL], s[KN_POOL_MAX_SPATIAL], d[KN_POOL_MAX_SPATIAL];
    int64_t pb[KN_POOL_MAX_SPATIAL], pe[KN_POOL_MAX_SPATIAL]; /* pads at begin and end */
    bool count_include_pad;
    int64_t storage_order;
    double p; /* LpPool exponent */
} kn_pool_geom;

/* Reads kernel_shape, strides, dilations, pads/auto_pad, ceil_mode, count_include_pad,
 * storage_order and p of MaxPool/AveragePool/LpPool for input shape x (N, C, spatial...), and
 * computes the output spatial sizes. */
kiln_status kn_pool_geom_read(const kn_node *node, const kn_shape *x, kn_pool_geom *g);

#endif
