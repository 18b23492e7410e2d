/* ai.onnx.ml TreeEnsemble: each row walks every tree from its root to a leaf, and the leaf
 * weights aggregate per target (sum, average, min or max). */
#include "backend/cpu/f32_stage.h"
#include "core/alloc.h"
#include "ops/traditionalml/tree_ensemble.h"

#include <float.h>
#include <math.h>

static bool member_of(const kn_tensor *set, int64_t start, double x) {
    for (int64_t i = start; i < kn_tensor_numel(set); i++) {
        double v = kn_tensor_get_f64(set, i);
        if (isnan(v))
            return false;
        if (v == x)
            return true;
    }
    return false;
}

static bool branch_true(const kn_tree_model *m, const int64_t *set_start, int64_t i, double x) {
    if (m->missing_true != NULL && m->missing_true[i] && isnan(x))
        return true;
    double s = kn_tensor_get_f64(m->splits, i);
    switch (kn_tensor_get_i64(m->modes, i)) {
    case 0:
        return x <= s;
    case 1:
        return x < s;
    case 2:
        return x >= s;
    case 3:
        return x > s;
    case 4:
        return x == s;
    case 5:
        return x != s;
    default:
        return member_of(m->members, set_start[i], x);
    }
}

/* Leaf index reached from the root of tree t, or -1 when the walk does not end (a cycle). */
static int64_t walk(const kn_tree_model *m, const int64_t *set_start, const kn_tensor *x,
                    int64_t row, int64_t t) {
    int64_t i = m->roots[t], f = x->shape.d[1];
    if (m->tleaf[i] && m->fleaf[i] && m->tnode[i] == m->fnode[i])
        return m->tnode[i];
    for (int64_t steps = 0; steps <= m->n_nodes; steps++) {
        bool tb = branch_true(m, set_start, i, kn_tensor_get_f64(x, row * f + m->feat[i]));
        int64_t next = tb ? m->tnode[i] : m->fnode[i];
        if (tb ? m->tleaf[i] : m->fleaf[i])
            return next;
        i = next;
    }
    return -1;
}

kiln_status kn_cpu_tree_ensemble(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_tree_model m;
    KN_TRY(kn_tree_model_init(k->node, x->shape.d[1], &m));
    int64_t *set_start = kn_calloc((size_t)(m.n_nodes > 0 ? m.n_nodes : 1), sizeof(int64_t));
    double *acc = kn_malloc((size_t)m.n_targets * sizeof(double));
    kiln_status rc = KILN_OK;
    if (set_start == NULL || acc == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for the tree ensemble");
        goto out;
    }
    /* Sets follow the order of BRANCH_MEMBER nodes in nodes_modes, each ended by a NaN. */
    for (int64_t i = 0, pos = 0; i < m.n_nodes; i++) {
        if (kn_tensor_get_i64(m.modes, i) != 6)
            continue;
        set_start[i] = pos;
        while (!isnan(kn_tensor_get_f64(m.members, pos)))
            pos++;
        pos++;
    }
    double lim = x->dtype == KILN_DTYPE_FLOAT16   ? 65504.0
                 : x->dtype == KILN_DTYPE_FLOAT64 ? DBL_MAX
                                                  : FLT_MAX;
    double init = m.aggregate == 2 ? lim : (m.aggregate == 3 ? -lim : 0.0);
    for (int64_t row = 0; row < x->shape.d[0]; row++) {
        for (int64_t t = 0; t < m.n_targets; t++)
            acc[t] = init;
        for (int64_t t = 0; t < m.n_trees; t++) {
            int64_t leaf = walk(&m, set_start, x, row, t);
            if (leaf < 0) {
                rc = kn_error(KILN_ERR_MODEL, "tree %lld has a cycle", (long long)t);
                goto out;
            }
            double w = kn_tensor_get_f64(m.leaf_w, leaf);
            double *a = &acc[m.leaf_target[leaf]];
            if (m.aggregate == 2)
                *a = w < *a ? w : *a;
            else if (m.aggregate == 3)
                *a = w > *a ? w : *a;
            else
                *a += m.aggregate == 0 ? w / (double)m.n_trees : w;
        }
        for (int64_t t = 0; t < m.n_targets; t++)
            kn_tensor_set_f64(&k->out[0], row * m.n_targets + t, acc[t]);
    }
out:
    kn_free(set_start);
    kn_free(acc);
    return rc;
}
