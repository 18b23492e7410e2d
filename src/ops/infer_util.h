/* The extra op family (attention, signal processing, quantized linear algebra, losses the
 * other families do not cover): infer functions shared between its files. */
#ifndef KN_OPS_EXTRA_INTERNAL_H
#define KN_OPS_EXTRA_INTERNAL_H

#include "ops/op.h"

/* Checks the input count is in [lo, hi], inputs [0, lo) are present and there are between
 * 1 and max_out outputs. */
kiln_status kn_extra_need(const kn_infer_ctx *c, int lo, int hi, int max_out);
bool kn_extra_is_float(int32_t dt);
/* Reads a scalar (or one-element) integer input whose data is known; KN_NEED_DATA if not. */
kiln_status kn_extra_scalar_i64(const kn_infer_ctx *c, int i, const char *name, int64_t *v);

#endif
