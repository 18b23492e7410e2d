/* Tensor ops (shape, movement, indexing): the attribute/input resolution that the CPU kernels share
 * with them, so build-time inference and run-time execution can never disagree on an op's
 * semantics. */
#ifndef KN_TENSOR_OPS_H
#define KN_TENSOR_OPS_H

#include "core/alloc.h"
#include "ops/op.h"

#include <stdbool.h>
#include <stdint.h>

/* ---- helpers (tensor_util.c) ---------------------------------------------------------------- */

/* Input i is present; else a KILN_ERR_MODEL naming it. */
kiln_status tensor_need_input(const kn_infer_ctx *c, int i, const char *name);
/* The dtype is one kiln can move by element size (everything but strings and undefined). */
kiln_status tensor_check_movable(const kn_tensor *t, const char *what);
/* a * b into *out for non-negative a, b; false when the product exceeds KN_MAX_ELEMENTS. */
bool tensor_mul_ok(int64_t a, int64_t b, int64_t *out);
/* Every dim >= 0, each and the product at most KN_MAX_ELEMENTS. */
kiln_status tensor_check_shape(const kn_shape *s, const char *what);
/* Read a scalar or 1-D int32/int64 tensor with host data into out (at most max_n values). */
kiln_status tensor_read_ints(const kn_tensor *t, const char *what, int64_t max_n, int64_t *out,
                             int64_t *n);
/* Read one integer (scalar or one-element tensor of any integer dtype). */
kiln_status tensor_read_scalar_int(const kn_tensor *t, const char *what, int64_t *out);
/* Normalise a list of axes against rank; duplicates are an error. */
kiln_status tensor_norm_axes(const int64_t *axes, int64_t n, int32_t rank, const char *what,
                             int64_t *out);
/* Three-way compare and non-zero test of one element of any numeric or bool dtype. */
int tensor_elem_cmp(int32_t dtype, const void *a, const void *b);
bool tensor_elem_nonzero(int32_t dtype, const void *p);
/* Every index in idx (int32/int64, host data) lies in [-dim, dim); else
 * KILN_ERR_INVALID_ARGUMENT naming the first bad one. */
kiln_status tensor_check_indices(const kn_tensor *idx, int64_t dim, const char *what);
/* Scatter reduction attribute: 0 none, 1 add, 2 mul, 3 max, 4 min. */
kiln_status tensor_scatter_reduction(const kn_node *node, int *red);
/* Outer/axis/inner split of a shape around axis. */
void tensor_split_dims(const kn_shape *s, int64_t axis, int64_t *outer, int64_t *n, int64_t *inner);

/* ---- resolution shared with kernels --------------------------------------------------------- */

/* Slice: per-axis start and step for every input dim (untouched dims: 0 and 1) and the output
 * shape. KN_NEED_DATA if starts/ends/axes/steps inputs have no host data. */
typedef struct tensor_slice_plan {
    int64_t start[KN_MAX_RANK];
    int64_t step[KN_MAX_RANK];
    kn_shape out;
} tensor_slice_plan;
kiln_status tensor_slice_resolve(const kn_node *node, int n_in, const kn_tensor *in,
                                 tensor_slice_plan *p);

typedef enum tensor_pad_mode {
    TENSOR_PAD_CONSTANT,
    TENSOR_PAD_REFLECT,
    TENSOR_PAD_EDGE,
    TENSOR_PAD_WRAP,
} tensor_pad_mode;
/* Pad: pads before/after every dim (negative crops), the mode, and the output shape. */
typedef struct tensor_pad_plan {
    int64_t before[KN_MAX_RANK];
    int64_t after[KN_MAX_RANK];
    tensor_pad_mode mode;
    kn_shape out;
} tensor_pad_plan;
kiln_status tensor_pad_resolve(const kn_node *node, int n_in, const kn_tensor *in,
                               tensor_pad_plan *p);

/* CenterCropPad as a constant-zero Pad plan: negative pads crop, positive pads pad, centered. */
kiln_status tensor_center_crop_pad_resolve(const kn_node *node, int n_in, const kn_tensor *in,
                                           tensor_pad_plan *p);

/* Split: normalised axis and one size per output. */
kiln_status tensor_split_resolve(const kn_node *node, int n_in, const kn_tensor *in, int n_out,
                                 int64_t *axis, int64_t *sizes);

/* Shape: the clamped [start, end) range of dims it reports (start/end since opset 15). */
void tensor_shape_range(const kn_node *node, int32_t rank, int64_t *start, int64_t *end);

/* Transpose: the permutation (attribute or reversed dims), validated. */
kiln_status tensor_transpose_perm(const kn_node *node, int32_t rank, int64_t *perm);

/* Unique over a whole tensor (has_axis false) or slices along axis. order[u] is the first
 * index (flattened element or slice) of the u-th unique value in output order, inverse[j] the
 * unique position of element/slice j, counts[u] its multiplicity. Arrays are kn_malloc'd with
 * one entry per element/slice; free with tensor_unique_free. */
typedef struct tensor_unique_result {
    int64_t n_unique;
    int64_t n_items; /* elements or slices */
    int64_t axis;    /* normalised; -1 without axis */
    int64_t *order;
    int64_t *inverse;
    int64_t *counts;
} tensor_unique_result;
kiln_status tensor_unique_compute(const kn_node *node, const kn_tensor *x, tensor_unique_result *r);
void tensor_unique_free(tensor_unique_result *r);

#endif
