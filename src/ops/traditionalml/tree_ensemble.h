/* TreeEnsemble's attribute encoding, validated once, read by inference and the kernel. */
#ifndef KN_OPS_EXTRA_TREE_H
#define KN_OPS_EXTRA_TREE_H

#include "ops/infer_util.h"

typedef struct kn_tree_model {
    int64_t n_nodes, n_leaves, n_trees, n_targets, aggregate;
    const int64_t *feat, *tnode, *fnode, *tleaf, *fleaf, *missing_true, *leaf_target, *roots;
    const kn_tensor *modes, *splits, *leaf_w, *members; /* members may be NULL */
} kn_tree_model;

/* Borrows the node's attributes; every index is checked against `features` and the tables. */
kiln_status kn_tree_model_init(const kn_node *n, int64_t features, kn_tree_model *m);

#endif
