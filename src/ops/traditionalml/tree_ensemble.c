/* ai.onnx.ml TreeEnsemble (opset 5): the attribute encoding of the trees, checked once and
 * shared by shape inference and the CPU kernel. */
#include "ops/traditionalml/tree_ensemble.h"

#include <math.h>
#include <string.h>

static int64_t ints_attr(const kn_node *n, const char *name, const int64_t **v) {
    *v = NULL;
    return kn_attr_ints(n, name, v);
}

static const kn_tensor *tensor_attr(const kn_node *n, const char *name) {
    const kn_attr *a = kn_node_attr(n, name);
    return a != NULL && a->type == KN_ATTR_TENSOR ? a->t : NULL;
}

kiln_status kn_tree_model_init(const kn_node *n, int64_t features, kn_tree_model *m) {
    memset(m, 0, sizeof *m);
    m->n_nodes = ints_attr(n, "nodes_featureids", &m->feat);
    if (ints_attr(n, "nodes_truenodeids", &m->tnode) != m->n_nodes ||
        ints_attr(n, "nodes_falsenodeids", &m->fnode) != m->n_nodes ||
        ints_attr(n, "nodes_trueleafs", &m->tleaf) != m->n_nodes ||
        ints_attr(n, "nodes_falseleafs", &m->fleaf) != m->n_nodes)
        return kn_error(KILN_ERR_MODEL, "the nodes_* attributes must all have %lld entries",
                        (long long)m->n_nodes);
    int64_t miss = ints_attr(n, "nodes_missing_value_tracks_true", &m->missing_true);
    if (miss != 0 && miss != m->n_nodes)
        return kn_error(KILN_ERR_MODEL, "nodes_missing_value_tracks_true needs %lld entries",
                        (long long)m->n_nodes);
    m->modes = tensor_attr(n, "nodes_modes");
    m->splits = tensor_attr(n, "nodes_splits");
    m->leaf_w = tensor_attr(n, "leaf_weights");
    m->members = tensor_attr(n, "membership_values");
    if (m->modes == NULL || m->splits == NULL || m->leaf_w == NULL)
        return kn_error(KILN_ERR_MODEL, "attributes nodes_modes, nodes_splits and leaf_weights "
                                        "are required tensors");
    if (kn_tensor_numel(m->modes) != m->n_nodes || kn_tensor_numel(m->splits) != m->n_nodes ||
        !kn_dtype_is_integer(m->modes->dtype) || !kn_dtype_is_float(m->splits->dtype))
        return kn_error(KILN_ERR_MODEL,
                        "nodes_modes (integers) and nodes_splits (floats) need "
                        "%lld entries",
                        (long long)m->n_nodes);
    m->n_leaves = ints_attr(n, "leaf_targetids", &m->leaf_target);
    if (kn_tensor_numel(m->leaf_w) != m->n_leaves || !kn_dtype_is_float(m->leaf_w->dtype))
        return kn_error(KILN_ERR_MODEL, "leaf_weights must be floats matching leaf_targetids");
    m->n_trees = ints_attr(n, "tree_roots", &m->roots);
    m->n_targets = kn_attr_int(n, "n_targets", 0);
    m->aggregate = kn_attr_int(n, "aggregate_function", 1);
    if (m->n_targets < 1 || m->n_trees < 1 || m->aggregate < 0 || m->aggregate > 3)
        return kn_error(KILN_ERR_MODEL, "need n_targets >= 1, one tree root or more and "
                                        "aggregate_function in [0, 3]");
    if (kn_attr_int(n, "post_transform", 0) != 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "post_transform other than NONE is not supported");
    int64_t member_nodes = 0, sets = 0;
    for (int64_t i = 0; i < m->n_nodes; i++) {
        int64_t mode = kn_tensor_get_i64(m->modes, i);
        if (mode < 0 || mode > 6)
            return kn_error(KILN_ERR_MODEL, "nodes_modes[%lld] = %lld is not a mode", (long long)i,
                            (long long)mode);
        member_nodes += mode == 6;
        if (m->feat[i] < 0 || m->feat[i] >= features)
            return kn_error(KILN_ERR_MODEL, "nodes_featureids[%lld] = %lld is outside [0, %lld)",
                            (long long)i, (long long)m->feat[i], (long long)features);
        int64_t tl = m->tleaf[i] ? m->n_leaves : m->n_nodes;
        int64_t fl = m->fleaf[i] ? m->n_leaves : m->n_nodes;
        if (m->tnode[i] < 0 || m->tnode[i] >= tl || m->fnode[i] < 0 || m->fnode[i] >= fl)
            return kn_error(KILN_ERR_MODEL, "node %lld branches outside the nodes or leaves",
                            (long long)i);
    }
    if (m->members != NULL)
        for (int64_t i = 0; i < kn_tensor_numel(m->members); i++)
            sets += isnan(kn_tensor_get_f64(m->members, i));
    if (sets != member_nodes)
        return kn_error(KILN_ERR_MODEL,
                        "membership_values holds %lld NaN-terminated sets for "
                        "%lld BRANCH_MEMBER nodes",
                        (long long)sets, (long long)member_nodes);
    for (int64_t i = 0; i < m->n_leaves; i++)
        if (m->leaf_target[i] < 0 || m->leaf_target[i] >= m->n_targets)
            return kn_error(KILN_ERR_MODEL, "leaf_targetids[%lld] = %lld is outside [0, %lld)",
                            (long long)i, (long long)m->leaf_target[i], (long long)m->n_targets);
    for (int64_t i = 0; i < m->n_trees; i++)
        if (m->roots[i] < 0 || m->roots[i] >= m->n_nodes)
            return kn_error(KILN_ERR_MODEL, "tree_roots[%lld] is not a node", (long long)i);
    return KILN_OK;
}

kiln_status kn_infer_tree_ensemble(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 1, 1));
    const kn_tensor *x = &c->in[0];
    if (!kn_infer_is_float(x->dtype) || x->shape.rank != 2)
        return kn_error(KILN_ERR_SHAPE, "input X must be a float tensor [N, F]");
    kn_tree_model m;
    KN_TRY(kn_tree_model_init(c->node, x->shape.d[1], &m));
    c->out[0].dtype = x->dtype;
    c->out[0].shape = (kn_shape){.rank = 2, .d = {x->shape.d[0], m.n_targets}};
    return KILN_OK;
}
