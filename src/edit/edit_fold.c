/* The edits that evaluate: type inference, constant folding, opset conversion. */
#include "edit/edit.h"

#include "core/alloc.h"
#include "edit/opset_history.h"
#include "ops/op.h"
#include "shape/resolve.h"

#include <string.h>

/* Values computed on the host only to carry shape data forward (Shape -> Reshape) are kept
 * small, as the runtime's own host evaluation is. */
#define KN_EDIT_EVAL_ELEMS 4096

/* Non-deterministic ops must never be folded into constants. */
static bool random_op(const kn_node *n) {
    return n->domain[0] == '\0' && strncmp(n->op_type, "Random", 6) == 0;
}

/* in[] for node n from the values' declared types; data from constants or from host[]. False
 * when an input lacks a dtype or a fixed shape. */
static bool gather_inputs(const kn_graph *g, const kn_node *n, void *const *host, kn_tensor *in) {
    for (int j = 0; j < n->n_in; j++) {
        memset(&in[j], 0, sizeof in[j]);
        int v = n->in[j];
        if (v < 0)
            continue;
        const kn_value *val = &g->values[v];
        if (val->dtype == 0 || !kn_value_shape(val, &in[j].shape))
            return false;
        in[j].dtype = val->dtype;
        in[j].data = val->data != NULL ? val->data : host[v];
    }
    return true;
}

static void set_type(kn_value *v, const kn_tensor *t) {
    v->dtype = t->dtype;
    v->rank = t->shape.rank;
    for (int d = 0; d < KN_MAX_RANK; d++) {
        kn_free(v->dims[d].sym);
        v->dims[d].sym = NULL;
        v->dims[d].value = d < t->shape.rank ? t->shape.d[d] : 0;
    }
}

static bool all_data(const kn_node *n, const kn_tensor *in) {
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j] >= 0 && in[j].data == NULL)
            return false;
    return true;
}

static int64_t out_elems(const kn_node *n, const kn_tensor *out) {
    int64_t e = 0;
    for (int j = 0; j < n->n_out; j++)
        if (n->out[j] >= 0)
            e += kn_tensor_numel(&out[j]);
    return e;
}

/* One node: infer its outputs' types; with fold, turn them into constants when every input is
 * known; else evaluate small results into host[] so shape data flows on. */
static kiln_status infer_node(kn_graph *g, int i, void **host, bool fold) {
    kn_node *n = &g->nodes[i];
    kn_tensor in[64], out[64];
    if (n->dead || n->n_in > 64 || n->n_out > 64 || kn_op_find(n->domain, n->op_type) == NULL)
        return KILN_OK;
    if (!gather_inputs(g, n, host, in))
        return KILN_OK;
    if (kn_infer_node(n, NULL, in, out) != KILN_OK)
        return KILN_OK; /* not inferable statically: the model's declared types stay */
    for (int j = 0; j < n->n_out; j++)
        if (n->out[j] >= 0)
            set_type(&g->values[n->out[j]], &out[j]);
    /* Shape-only ops (Shape, Size) read no data: a static input shape is enough. */
    static const unsigned char no_data;
    if (kn_op_find(n->domain, n->op_type)->flags & KN_OP_SHAPE_ONLY)
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0 && in[j].data == NULL)
                in[j].data = (void *)&no_data;
    bool known = n->n_in > 0 && all_data(n, in) && !random_op(n);
    if (!known || (!fold && out_elems(n, out) > KN_EDIT_EVAL_ELEMS))
        return KILN_OK;
    if (kn_eval_node(kn_backend_host(), n, in, out, NULL) != KILN_OK)
        return KILN_OK; /* no CPU kernel: left as a node */
    kiln_status rc = KILN_OK;
    for (int j = 0; j < n->n_out; j++) {
        int v = n->out[j];
        if (v < 0)
            continue;
        if (fold && rc == KILN_OK) {
            rc = kn_value_set_const(g, v, &out[j]);
            g->values[v].producer = -1;
        } else if (!fold) {
            kn_free(host[v]);
            host[v] = out[j].data;
            out[j].data = NULL;
        }
        kn_free(out[j].data);
    }
    if (fold && rc == KILN_OK)
        n->dead = true;
    return rc;
}

static kiln_status infer_all(kn_graph *g, bool fold) {
    void **host = kn_calloc((size_t)g->n_values + 1, sizeof *host);
    if (host == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inferring types");
    kiln_status rc = KILN_OK;
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++)
        rc = infer_node(g, i, host, fold);
    for (int v = 0; v < g->n_values; v++)
        kn_free(host[v]);
    kn_free(host);
    return rc;
}

kiln_status kn_edit_infer_types(kn_graph *g) {
    return infer_all(g, false);
}

kiln_status kn_edit_fold_constants(kn_graph *g) {
    KN_TRY(infer_all(g, true));
    return kn_graph_compact(g);
}

static const kn_op_history *history_of(const char *op) {
    for (const kn_op_history *h = kn_opset_history; h->name != NULL; h++)
        if (strcmp(h->name, op) == 0)
            return h;
    return NULL;
}

/* The version of op in force at opset `at` (0 if the op does not exist yet). */
static int version_at(const kn_op_history *h, int at) {
    int v = 0;
    for (int k = 0; k < h->n; k++)
        if (h->since[k] <= at)
            v = h->since[k];
    return v;
}

kiln_status kn_edit_set_opset(kn_graph *g, int version) {
    int64_t cur = kn_graph_opset(g, "");
    if (cur < 0)
        return kn_error(KILN_ERR_MODEL, "opset: the model imports no default-domain opset");
    if (version < 7 || version > KN_ONNX_MAX_OPSET)
        return kn_error(KILN_ERR_UNSUPPORTED, "opset: %d is outside the opsets kiln knows (7..%d)",
                        version, KN_ONNX_MAX_OPSET);
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead || n->domain[0] != '\0')
            continue;
        const kn_op_history *h = history_of(n->op_type);
        if (h == NULL)
            return kn_error(KILN_ERR_UNSUPPORTED, "opset: node '%s' has unknown op '%s'", n->name,
                            n->op_type);
        int from = version_at(h, (int)cur), to = version_at(h, version);
        if (from != to)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "opset: node '%s' (%s) is version %d at opset %lld and %d at opset "
                            "%d; converting it is not a plain change of the opset number",
                            n->name, n->op_type, from, (long long)cur, to, version);
    }
    for (int i = 0; i < g->n_opsets; i++)
        if (g->opsets[i].domain[0] == '\0' || strcmp(g->opsets[i].domain, "ai.onnx") == 0)
            g->opsets[i].version = version;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].domain[0] == '\0')
            g->nodes[i].opset = version;
    return KILN_OK;
}
