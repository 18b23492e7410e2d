/* Graph surgery on an imported ONNX graph: the operations `kiln edit`, kiln_model_* and
 * kiln.edit apply, each leaving a graph that exports to a valid model. Every operation works
 * on a graph in topological order and leaves it so; on failure the graph may be partly
 * changed (callers edit a copy when they need to keep the original). */
#ifndef KN_EDIT_H
#define KN_EDIT_H

#include "core/status.h"
#include "ir/graph.h"

/* Fill the dtype and shape of every value whose producer's inputs all have fixed shapes, by
 * the op's own inference (values of ops kiln cannot infer keep what the model declared). */
kiln_status kn_edit_infer_types(kn_graph *g);

/* Keep only the subgraph that computes outputs from inputs: inputs become the graph inputs
 * (their producers dropped), outputs the graph outputs. A needed value that comes from a graph
 * input not listed is an error naming it. */
kiln_status kn_edit_extract(kn_graph *g, int n_in, const char *const *inputs, int n_out,
                            const char *const *outputs);
/* Remove node `name`; its consumers (and graph outputs) read its first input instead. */
kiln_status kn_edit_remove(kn_graph *g, const char *name);
/* A new node op_type(tensor, attrs) whose output takes tensor's place for every consumer and
 * graph output; the output keeps the name `tensor`, the original value is renamed. */
kiln_status kn_edit_insert_after(kn_graph *g, const char *tensor, const char *op_type,
                                 const char *domain, int n_attr, const kn_attr *attrs);
/* Rename a value or, if no value has that name, a node. */
kiln_status kn_edit_rename(kn_graph *g, const char *old_name, const char *new_name);
/* Give a graph input or output (or any value) a shape: dims[d] >= 0 fixed, else symbols[d]
 * names the dynamic dim. Then types are inferred again. */
kiln_status kn_edit_set_shape(kn_graph *g, const char *name, int rank, const int64_t *dims,
                              const char *const *symbols);
/* Evaluate every node whose inputs are all constants (CPU kernels) into constants. */
kiln_status kn_edit_fold_constants(kn_graph *g);
/* Drop nodes that reach no output, unused initializers and unused graph inputs. */
kiln_status kn_edit_cleanup(kn_graph *g);
/* Set the default-domain opset to `version` when no node's op changed between the two. */
kiln_status kn_edit_set_opset(kn_graph *g, int version);

/* Patterns kn_edit_replace_pattern knows. */
typedef enum kn_edit_pattern {
    KN_PATTERN_SWISH,            /* x * Sigmoid(x), optionally + constant bias */
    KN_PATTERN_RELU_SIGMOID_MUL, /* Relu(x) * Sigmoid(x) */
    KN_PATTERN_GELU,             /* x * 0.5 * (1 + Erf(x / sqrt 2)), any order of products */
    KN_PATTERN_LAYER_NORM,       /* (x - mean) / sqrt(var + eps) * scale + bias, as exported */
} kn_edit_pattern;

/* Parse "swish", "relu-sigmoid-mul", "gelu", "layer-norm"; false if unknown. */
bool kn_edit_pattern_parse(const char *s, kn_edit_pattern *out);
/* Replace every match with one node op_type=plugin in domain `domain` (NULL: "kiln.plugins")
 * whose inputs are the pattern's (x, then bias / scale when the pattern has them) and whose
 * attributes are plugin_version / plugin_namespace (when given) and attrs. *count receives
 * the number of matches replaced. */
kiln_status kn_edit_replace_pattern(kn_graph *g, kn_edit_pattern pattern, const char *plugin,
                                    const char *version, const char *plugin_namespace,
                                    const char *domain, int n_attr, const kn_attr *attrs,
                                    int *count);

/* Shared by the edit files: consumers of value v are rewired to read w instead (graph outputs
 * too when outputs_too). */
void kn_edit_replace_uses(kn_graph *g, int v, int w, bool outputs_too);
/* The node index named `name`, or -1. */
int kn_edit_find_node(const kn_graph *g, const char *name);
/* Number of live nodes reading value v (graph outputs not counted). */
int kn_edit_consumers(const kn_graph *g, int v);

#endif
