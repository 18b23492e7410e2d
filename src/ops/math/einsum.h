/* An Einsum equation parsed once for inference and the kernels. */
#ifndef KN_OPS_EINSUM_H
#define KN_OPS_EINSUM_H

#include "ops/op.h"

#define KN_EINSUM_MAX_LABELS 64
#define KN_EINSUM_MAX_INPUTS 16

/* An einsum equation resolved against concrete input shapes. Labels are numbered 0..n_labels-1
 * (ellipsis dims get labels of their own). */
typedef struct kn_einsum {
    int n_in, n_labels;
    int64_t size[KN_EINSUM_MAX_LABELS];
    int in_rank[KN_EINSUM_MAX_INPUTS];
    int8_t in_label[KN_EINSUM_MAX_INPUTS][KN_MAX_RANK];
    int out_rank;
    int8_t out_label[KN_MAX_RANK];
} kn_einsum;

kiln_status kn_einsum_parse(const char *equation, int n_in, const kn_tensor *in, kn_einsum *e);

#endif
