/* The operator table: for each (domain, op_type), type and shape inference and flags.
 * Kernels live in the backends (src/backend/cpu/...), found by the same (domain, op_type). */
#ifndef KN_OP_H
#define KN_OP_H

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

/* Returned by an infer function when an output shape needs the *data* of an input that is not
 * known yet (e.g. Reshape's shape computed at run time, NonZero's count). Not an error: the
 * runtime infers that node again right before executing it, with every input's data. */
#define KN_NEED_DATA ((kiln_status)100)

/* Domain used for kiln's own fused ops. */
#define KN_DOMAIN "kiln"

typedef struct kn_infer_ctx {
    const kn_node *node;
    int n_in;
    const kn_tensor *in; /* in[i].dtype == 0 when input i is omitted (optional);
                            in[i].data != NULL when its values are known on the host */
    int n_out;
    kn_tensor *out; /* fill dtype and shape of each present output; data stays NULL */
} kn_infer_ctx;

/* Fill out[].dtype and out[].shape from inputs and attributes. Validate everything: a bad
 * attribute, rank, dtype or shape returns an error whose message names the condition (the
 * caller prefixes node name and op). Return KN_NEED_DATA as described above. */
typedef kiln_status (*kn_infer_fn)(kn_infer_ctx *c);

enum {
    /* Output data depends only on input shapes (Shape, Size): evaluated on the host at
     * shape-resolution time even when input data is unknown. */
    KN_OP_SHAPE_ONLY = 1 << 0,
    /* Element-wise (output[i] depends on input[i] after broadcasting): fusible. */
    KN_OP_ELEMENTWISE = 1 << 1,
    /* Output aliases input 0 unchanged in memory (Reshape, Flatten, Squeeze, Unsqueeze,
     * Identity, Dropout in inference): the runtime may skip the copy. */
    KN_OP_VIEW = 1 << 2,
    /* Runs subgraph bodies (If, Loop, Scan): always deferred to execution, where the runtime
     * runs it on the host with its subgraph executor instead of a backend kernel. */
    KN_OP_SUBGRAPH = 1 << 3,
};

typedef struct kn_op_schema {
    const char *domain; /* "" for ONNX's default domain */
    const char *name;
    int since; /* lowest opset version kiln accepts for this op */
    int flags;
    kn_infer_fn infer;
} kn_op_schema;

/* NULL if no built-in op has this (domain, name). "ai.onnx" is treated as "". */
const kn_op_schema *kn_op_find(const char *domain, const char *name);
/* Every schema in op_list.h order, for listing. */
const kn_op_schema *kn_op_next(const kn_op_schema *prev); /* NULL starts; NULL ends */

/* Whether n's op type is one of names[0..count) (any domain). */
bool kn_op_is_one_of(const kn_node *n, const char *const *names, size_t count);
/* Conv, ConvTranspose, Gemm, MatMul and kiln's fused forms of them. */
bool kn_op_is_product(const kn_node *n);
/* ONNX ops that only move or relabel bytes (Transpose, Concat, Slice, Gather, Reshape, ...). */
bool kn_op_moves_data(const kn_node *n);
/* kiln.FusedDepthwiseConv rewrites its input 0 in place where its kernel cannot apply the input
 * prologue as it loads: every such node's input 0 must be computed by a node of the graph, be
 * read by that node alone and not be a graph output (kn_pass_fuse_depthwise_input makes only
 * such nodes). An error naming the node otherwise: checked at build and when a plan loads. */
kiln_status kn_check_in_place_inputs(const kn_graph *g);

/* Helpers shared by infer functions. */
/* Normalise axis into [0, rank) (negative counts from the end); error if out of range. */
kiln_status kn_norm_axis(int64_t axis, int32_t rank, int64_t *out);
/* Number of inputs present (not omitted) — convenience for optional inputs. */
static inline int kn_has_input(const kn_infer_ctx *c, int i) {
    return i < c->n_in && c->in[i].dtype != 0;
}

/* The infer function of every op in op_list.h. */
#define KN_OP(domain, name, since, flags, infer, min_in, max_in, min_out, max_out)                 \
    kiln_status infer(kn_infer_ctx *c);
#include "ops/op_list.h"
#undef KN_OP

#endif
