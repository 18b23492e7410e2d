/* Graph passes run by the builder, in this order. Each takes the graph (topologically sorted)
 * and leaves it sorted; each is idempotent. */
#ifndef KN_PASSES_H
#define KN_PASSES_H

#include "core/status.h"
#include "ir/graph.h"

struct kn_resolved;

/* Turn into constants the outputs of every node that shape resolution evaluated on the host
 * with identical results at the smallest and the largest profile shapes (lo, hi: one entry
 * per value, from kn_resolve): constant subgraphs, and shape subgraphs of static inputs. */
kiln_status kn_pass_fold_constants(kn_graph *g, const struct kn_resolved *lo,
                                   const struct kn_resolved *hi);
/* Remove nodes whose outputs reach no graph output. */
kiln_status kn_pass_eliminate_dead(kn_graph *g);
/* Fold BatchNormalization (inference) into a preceding Conv / Gemm with constant weights. */
kiln_status kn_pass_fold_batchnorm(kn_graph *g);
/* Fuse Relu, Clip (incl. Relu6), Sigmoid, x*sigmoid(x), LeakyRelu and a residual Add into
 * the epilogue of a preceding Conv / Gemm / MatMul. */
kiln_status kn_pass_fuse_activations(kn_graph *g);
/* Collapse chains of element-wise ops into one kiln.FusedElementwise node. */
kiln_status kn_pass_fuse_elementwise(kn_graph *g);

#endif
