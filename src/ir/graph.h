/* The IR: a graph of nodes over values. Shared by the importer, the passes, the plan and the
 * runtime. Values and nodes live in growable arrays and are referred to by index. */
#ifndef KN_GRAPH_H
#define KN_GRAPH_H

#include "core/tensor.h"
#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One dimension of a value's declared shape: a constant, or a named symbol (ONNX dim_param or
 * a generated name) whose value is fixed per context by the input shapes. */
typedef struct kn_dim {
    int64_t value; /* >= 0 when fixed; -1 when symbolic (then `sym` is set) */
    char *sym;     /* owned; NULL when fixed */
} kn_dim;

typedef enum kn_attr_type {
    KN_ATTR_FLOAT = 1,
    KN_ATTR_INT = 2,
    KN_ATTR_STRING = 3,
    KN_ATTR_TENSOR = 4,
    KN_ATTR_GRAPH = 5,
    KN_ATTR_FLOATS = 6,
    KN_ATTR_INTS = 7,
    KN_ATTR_STRINGS = 8,
} kn_attr_type; /* ONNX AttributeProto numbering */

typedef struct kn_attr {
    char *name;
    int32_t type; /* kn_attr_type */
    int64_t i;
    float f;
    char *s; /* owned, NUL-terminated; slen bytes (may hold NULs) */
    size_t slen;
    int64_t n; /* element count of ints/floats/strings */
    int64_t *ints;
    float *floats;
    char **strings;
    kn_tensor *t;       /* owned tensor and data (KN_ATTR_TENSOR) */
    struct kn_graph *g; /* owned subgraph body (KN_ATTR_GRAPH: If, Loop, Scan) */
} kn_attr;

typedef struct kn_value {
    char *name;    /* unique in the graph; never NULL */
    int32_t dtype; /* kiln_dtype; 0 if not yet inferred */
    int32_t rank;  /* -1 if unknown */
    kn_dim dims[KN_MAX_RANK];
    int producer;   /* node index, or -1 for graph inputs and constants */
    bool is_input;  /* a graph input (not an initializer) */
    bool is_output; /* a graph output */
    /* kiln_io_kind: what a KILN_DTYPE_CONTAINER value holds, where the model declares it */
    int32_t container;
    /* Constant data (initializer, folded value): `data` is either owned (data_owned) or points
     * into a mapping that outlives the graph (external data, a plan's weight section). */
    void *data;
    bool data_owned;
} kn_value;

/* Most inputs or outputs one node may have (the importer and the builder refuse more), so
 * per-node scratch arrays can be fixed-size. */
#define KN_MAX_NODE_IO 64

typedef struct kn_node {
    char *name; /* never NULL (generated if the model has none) */
    char *op_type;
    char *domain; /* "" for the default ONNX domain */
    int opset;    /* opset version in force for this node's domain */
    int n_in, n_out;
    int *in;  /* value indices; -1 marks an omitted optional input */
    int *out; /* value indices; -1 marks an omitted optional output */
    int n_attr;
    kn_attr *attr;
    bool dead; /* removed by a pass; skipped everywhere and dropped by kn_graph_compact */
} kn_node;

/* The newest default-domain opset kiln's operator table is written against (onnx 1.23). */
#define KN_ONNX_MAX_OPSET 28

typedef struct kn_opset_import {
    char *domain;
    int64_t version;
} kn_opset_import;

typedef struct kn_graph {
    char *name;
    kn_value *values;
    int n_values, cap_values;
    kn_node *nodes; /* kept in topological order by kn_graph_toposort */
    int n_nodes, cap_nodes;
    int *inputs; /* value indices of graph inputs, in order */
    int n_inputs;
    int *outputs; /* value indices of graph outputs, in order */
    int n_outputs;
    kn_opset_import *opsets;
    int n_opsets;
    int64_t ir_version;
    /* A subgraph body: its last n_outer graph inputs are values of enclosing scopes that the
     * body reads. The node holding the body passes them as its last n_outer inputs (after the
     * op's own), in the same order; every body of one node has the same list. */
    int n_outer;
    /* Name -> value index hash (open addressing, -1 empty), covering values [0, n_indexed).
     * Rebuilt lazily; kn_graph_names_changed() drops it after a rename or renumbering. */
    int *name_index;
    int name_cap;
    int n_indexed;
} kn_graph;

kn_graph *kn_graph_create(void);
void kn_graph_destroy(kn_graph *g);

/* Add a value; returns its index or -1 (out of memory). name is copied; NULL generates one.
 * Fails (returns -1, error set) if the name is already taken. */
int kn_graph_add_value(kn_graph *g, const char *name);
int kn_graph_find_value(const kn_graph *g, const char *name); /* -1 if absent */
/* Call after renaming or renumbering values outside kn_graph_add_value. */
void kn_graph_names_changed(kn_graph *g);
/* Add a node with n_in/n_out value indices (copied). Returns node index or -1. Sets the
 * producer of each output. Attributes are added with kn_node_add_attr. */
int kn_graph_add_node(kn_graph *g, const char *name, const char *op_type, const char *domain,
                      int opset, int n_in, const int *in, int n_out, const int *out);
/* Append an attribute (deep-copied) to node n. */
kiln_status kn_node_add_attr(kn_graph *g, int node, const kn_attr *attr);
/* Make n a node of op (domain, op_type) at opset (a pass turning a node into a kiln op). */
kiln_status kn_node_set_op(kn_node *n, const char *domain, const char *op_type, int opset);
/* Whether n is a live node of op (domain, op_type); "" is the ONNX domain. */
bool kn_node_is(const kn_node *n, const char *domain, const char *op_type);
/* Give n at least n_in inputs, the new ones absent (-1) (a pass adding inputs to a node). */
kiln_status kn_node_grow_inputs(kn_node *n, int n_in);
kiln_status kn_graph_add_input(kn_graph *g, int value);
kiln_status kn_graph_add_output(kn_graph *g, int value);
kiln_status kn_graph_add_opset(kn_graph *g, const char *domain, int64_t version);
int64_t kn_graph_opset(const kn_graph *g, const char *domain); /* -1 if not imported */

/* Make value v a constant holding a copy of t (dtype/shape/data). */
kiln_status kn_value_set_const(kn_graph *g, int v, const kn_tensor *t);
bool kn_value_is_const(const kn_value *v);
/* Concrete shape of a value whose dims are all fixed; false if any is symbolic/unknown. */
bool kn_value_shape(const kn_value *v, kn_shape *out);
/* A kn_tensor view of a constant value (data not copied). */
kn_tensor kn_value_tensor(const kn_value *v);

/* Sort nodes topologically (stable for already-sorted graphs). Fails with KILN_ERR_MODEL
 * naming a node on a cycle, or a node reading a value nothing produces. */
kiln_status kn_graph_toposort(kn_graph *g);
/* Drop dead nodes and values nothing references; renumbers indices. */
kiln_status kn_graph_compact(kn_graph *g);
/* Drop the values and nodes added after the graph had n_values values and n_nodes nodes
 * (undo of a failed addition). */
void kn_graph_truncate(kn_graph *g, int n_values, int n_nodes);
/* Deep copy. */
kn_graph *kn_graph_clone(const kn_graph *g);

/* Attribute lookup on a node; NULL if absent. */
const kn_attr *kn_node_attr(const kn_node *n, const char *name);
/* How many inputs of live nodes read each value (n_values + 1 ints, caller frees with
 * kn_free); NULL when out of memory. */
int *kn_graph_value_uses(const kn_graph *g);
/* The only live node reading value v, given uses from kn_graph_value_uses (kept current by the
 * caller); -1 when v has several readers or none, or is a graph output. */
int kn_graph_sole_consumer(const kn_graph *g, const int *uses, int v);
int64_t kn_attr_int(const kn_node *n, const char *name, int64_t def);
float kn_attr_float(const kn_node *n, const char *name, float def);
const char *kn_attr_string(const kn_node *n, const char *name, const char *def);
/* ints/floats: returns the count (0 if absent) and sets *out (borrowed). */
int64_t kn_attr_ints(const kn_node *n, const char *name, const int64_t **out);
int64_t kn_attr_floats(const kn_node *n, const char *name, const float **out);
void kn_attr_free(kn_attr *a);
/* How many of node n's inputs are enclosing-scope values its subgraph bodies read (the last
 * ones, see kn_graph.n_outer); 0 for a node without bodies. */
int kn_node_n_outer(const kn_node *n);
kiln_status kn_attr_copy(kn_attr *dst, const kn_attr *src);

#endif
