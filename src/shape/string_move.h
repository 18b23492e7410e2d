/* The data-movement ops on string tensors (Reshape, Transpose, Gather, Concat, Slice, Split,
 * Where, ...: see string_move.c). A string block (core/strings.h) cannot be moved as bytes by the
 * numeric kernels, so each such node is run on element indices instead: every string input
 * becomes an int64 tensor of its shape counting its elements, the op's own inference and host
 * kernel move those, and the strings the resulting indices name make the output blocks. The
 * shape layer does this because it may call both ops and host kernels. */
#ifndef KN_STRING_MOVE_H
#define KN_STRING_MOVE_H

#include "backend/backend.h"
#include "ir/graph.h"

/* Whether node n, with inputs of these dtypes (in[i].dtype; 0 omitted), moves strings. */
bool kn_string_moves(const kn_node *n, int n_in, const kn_tensor *in);
/* The same, reading the input dtypes from g's values. */
bool kn_string_moves_in(const kn_graph *g, const kn_node *n);
/* Every output of a string-moving node, each with data of its own (kn_malloc); out[] has n_out
 * entries. The inputs must have data. */
kiln_status kn_string_move_eval(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                                kn_tensor *out);
/* Inference for such a node: KN_NEED_DATA until every input's data is known. */
kiln_status kn_string_move_infer(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                                 kn_tensor *out);
/* The kernel the runtime runs for such a node (on the host). */
extern const kn_kernel kn_string_move_kernel;

#endif
