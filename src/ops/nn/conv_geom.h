/* Geometry of Conv and ConvTranspose (output size, padding, strides, dilations) from a node's
 * attributes and the input and weight shapes. Shared by shape inference and the kernels so that
 * both always agree. */
#ifndef KN_CONV_GEOM_H
#define KN_CONV_GEOM_H

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

#include <stdbool.h>

#define KN_CONV_MAX_SP (KN_MAX_RANK - 2)

typedef struct kn_conv_geom {
    int nsp; /* spatial dims */
    int64_t n, c_in, c_out, group;
    int64_t in[KN_CONV_MAX_SP], out[KN_CONV_MAX_SP], k[KN_CONV_MAX_SP];
    int64_t stride[KN_CONV_MAX_SP], dil[KN_CONV_MAX_SP];
    int64_t pad_b[KN_CONV_MAX_SP], pad_e[KN_CONV_MAX_SP];
} kn_conv_geom;

/* x: (N, C, D1..Dn); w: (M, C/group, k1..kn) for Conv, (C, M/group, k1..kn) for
 * ConvTranspose. Validates attributes and shapes; errors name the violated condition. */
kiln_status kn_conv_geom_init(const kn_node *node, const kn_shape *x, const kn_shape *w,
                              bool transpose, kn_conv_geom *g);

/* Output shape (N, M, O1..On). */
void kn_conv_geom_out_shape(const kn_conv_geom *g, kn_shape *out);

/* The fused epilogue attributes set by kn_pass_fuse_activations (see passes.h): activation code
 * (kn_act numbering in backend/cpu/gemm.h), its parameters, and whether a residual is
 * appended. Errors on an unknown activation name. */
kiln_status kn_fused_attrs(const kn_node *node, int *act, float *alpha, float *beta,
                           bool *residual);
/* kiln.FusedDepthwiseConv's input activation (kiln_input_activation, kiln_input_alpha,
 * kiln_input_beta; passes.h), as kn_fused_attrs reads the output's. */
kiln_status kn_fused_input_attrs(const kn_node *node, int *act, float *alpha, float *beta);

#endif
