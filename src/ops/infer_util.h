/* Checks and readers shared by the infer functions of several categories. */
#ifndef KN_OPS_INFER_UTIL_H
#define KN_OPS_INFER_UTIL_H

#include "ops/op.h"

/* Checks the input count is in [lo, hi], inputs [0, lo) are present and there are between
 * 1 and max_out outputs. */
kiln_status kn_infer_need(const kn_infer_ctx *c, int lo, int hi, int max_out);
/* For ops whose kernels always write output 0 (it may not be left out, though later ones may). */
kiln_status kn_infer_need_output0(const kn_infer_ctx *c);
/* As kn_infer_need, with exactly n_out outputs. */
kiln_status kn_infer_need_exact(const kn_infer_ctx *c, int lo, int hi, int n_out);
bool kn_infer_is_float(int32_t dt);
/* Reads a scalar (or one-element) integer input whose data is known; KN_NEED_DATA if not. */
kiln_status kn_infer_scalar_i64(const kn_infer_ctx *c, int i, const char *name, int64_t *v);
/* numpy matmul shapes: 1-D operands are promoted and the promoted dims dropped again. */
kiln_status kn_infer_matmul_shape(const kn_shape *a, const kn_shape *b, kn_shape *out);

#endif
