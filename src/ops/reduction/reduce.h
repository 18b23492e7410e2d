/* Attribute and axis handling shared by the reduction shape inference (reduction/reduce.c)
 * and the kernels that execute it, so both read a node the same way. */
#ifndef KN_OPS_REDUCE_H
#define KN_OPS_REDUCE_H

#include "ops/op.h"

#include <stdbool.h>

typedef struct kn_reduce_axes {
    bool noop;              /* output is the input unchanged */
    bool mask[KN_MAX_RANK]; /* axes that are reduced */
    bool keepdims;
} kn_reduce_axes;

/* Reads axes (attribute or input 1, depending on op and opset), keepdims and
 * noop_with_empty_axes of a Reduce* node for input `x`. `axes_in` is input 1 or NULL when
 * omitted. Returns KN_NEED_DATA when the axes input's values are not known yet. */
kiln_status kn_reduce_axes_read(const kn_node *node, const kn_shape *x, const kn_tensor *axes_in,
                                kn_reduce_axes *out);
void kn_reduce_out_shape(const kn_shape *x, const kn_reduce_axes *a, kn_shape *out);

/* Softmax/LogSoftmax/Hardmax view their input as [outer, n, inner] with the op applied along
 * n: before opset 13 the input is flattened to 2-D at `axis` (inner == 1), from 13 on a single
 * axis is used. */
kiln_status kn_softmax_geometry(const kn_node *node, const kn_shape *x, int64_t *outer, int64_t *n,
                                int64_t *inner);

/* Splits x at a single axis into [outer, n, inner]. */
void kn_shape_split_axis(const kn_shape *x, int64_t axis, int64_t *outer, int64_t *n,
                         int64_t *inner);

#endif
