/* Sequence ops: what their results hold, computed once for inference (which sizes the result)
 * and for the kernel (which fills it). Values are containers (core/container.h). */
#ifndef KN_OPS_SEQUENCE_H
#define KN_OPS_SEQUENCE_H

#include "core/container.h"
#include "ir/graph.h"

/* The elements a container-making op (SequenceEmpty, SequenceConstruct, SequenceInsert,
 * SequenceErase, SplitToSequence, Optional) produces. Each item's data points into the inputs,
 * or is NULL for SplitToSequence's slices, which the kernel copies (kn_seq_split_copy). */
typedef struct kn_seq_result {
    int kind;
    int32_t elem_dtype;
    int n;
    kn_tensor *items; /* kn_malloc'd; kn_seq_result_free */
    int64_t *starts;  /* SplitToSequence: each slice's first index along `axis` */
    int axis;
} kn_seq_result;

/* Errors are plain (the caller prefixes node and op); KN_NEED_DATA when an input's data is not
 * known yet. */
kiln_status kn_seq_elements(const kn_node *node, int n_in, const kn_tensor *in, kn_seq_result *r);
void kn_seq_result_free(kn_seq_result *r);
/* Copy SplitToSequence's slices from src into the container c that r described. */
void kn_seq_split_copy(const kn_seq_result *r, const kn_tensor *src, const kn_container *c);
/* The position input `name` of a sequence of n elements, normalised into [0, n + extra). */
kiln_status kn_seq_position(const kn_tensor *t, const char *name, int n, int extra, int *out);
/* ConcatFromSequence's output shape (dtype and shape) from its container. */
kiln_status kn_seq_concat_shape(const kn_node *node, const kn_container *c, kn_tensor *out,
                                int *axis);

#endif
