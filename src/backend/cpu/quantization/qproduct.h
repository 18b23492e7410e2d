/* What kiln.QConv (qconv.c) and kiln.QMatMul (qdq_product.c) share: the checks of their
 * constant inputs and the epilogue's parameters (inputs as in passes.h's kn_pass_fuse_qdq). */
#ifndef KN_CPU_QPRODUCT_H
#define KN_CPU_QPRODUCT_H

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

#include <stdint.h>

typedef struct kn_qepilogue {
    double xs;    /* x's scale */
    int32_t xzu;  /* x's zero point in the uint8 domain */
    uint8_t flip; /* 0x80 for int8 x (x ^ flip is x in the uint8 domain), 0 for uint8 */
    float ys, yz; /* y's scale and zero point */
    float lo, hi; /* the fused Relu / Clip bounds */
    float qmin, qmax;
} kn_qepilogue;

/* Check the constant inputs (and a zero w_zero_point) and read the epilogue. */
kiln_status kn_qproduct_epilogue(const kn_node *node, int n_in, const kn_tensor *in,
                                 kn_qepilogue *e);

#endif
