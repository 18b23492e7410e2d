/* Element-wise ops: helpers shared by the infer functions in math/elementwise.c and
 * kiln/fused_elementwise.c. */
#ifndef KN_ELEMENTWISE_INFER_H
#define KN_ELEMENTWISE_INFER_H

#include "ops/op.h"

#include <stdbool.h>

/* Most inputs a variadic op (Max, Min, Sum, Mean) or a fused node may have. */
#define KN_EW_MAX_VARIADIC 64

/* Input i's dtype is in mask (bit d set for dtype d); else a KILN_ERR_DTYPE naming it. */
kiln_status ew_check_dtype(const kn_infer_ctx *c, int i, unsigned mask);
/* min_in..max_in inputs, the first min_in present, and one output. */
kiln_status ew_check_arity(const kn_infer_ctx *c, int min_in, int max_in);
/* Numpy broadcast of the shapes of inputs idx[0..n). */
kiln_status ew_broadcast(const kn_infer_ctx *c, int n, const int *idx, kn_shape *out);
/* The dtypes Cast converts between. */
bool kn_ew_cast_supported(int32_t dtype);

#endif
