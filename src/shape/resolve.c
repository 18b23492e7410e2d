#include "shape/resolve.h"

#include "core/alloc.h"
#include "ops/arity.h"
#include "ops/legacy_opset.h"
#include "ops/op.h"
#include "plugin/plugin.h"
#include "shape/string_move.h"

#include <string.h>

/* Ops that read string tensors (core/strings.h) or only move them as bytes. Every other op would
 * take a string block for numbers, so a string input to it is refused. */
static bool takes_strings(const kn_node *n) {
    static const char *const names[] = {"Identity",
                                        "Equal",
                                        "StringNormalizer",
                                        "StringConcat",
                                        "StringSplit",
                                        "RegexFullMatch",
                                        "LabelEncoder",
                                        "Cast",
                                        "CastLike",
                                        "If",
                                        "Loop",
                                        "SequenceConstruct",
                                        "SequenceInsert",
                                        "SequenceAt",
                                        "SequenceErase",
                                        "SequenceLength",
                                        "Optional",
                                        "OptionalGetElement",
                                        "OptionalHasElement"};
    if (strcmp(n->op_type, "LabelEncoder") == 0)
        return strcmp(n->domain, "ai.onnx.ml") == 0;
    return n->domain[0] == '\0' && kn_op_is_one_of(n, names, sizeof names / sizeof names[0]);
}

kiln_status kn_infer_node(const kn_node *n, const kiln_plugin_instance *plugin, const kn_tensor *in,
                          kn_tensor *out) {
    bool moves = kn_string_moves(n, n->n_in, in);
    for (int i = 0; i < n->n_in && !moves && !takes_strings(n); i++)
        if (in[i].dtype == KILN_DTYPE_STRING)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "node '%s' (%s): input %d is a string tensor, which this op "
                            "does not take in kiln (docs/strings.md lists those that do)",
                            n->name, n->op_type, i);
    if (kn_is_plugin_node(n))
        return kn_plugin_infer(n, plugin, in, out);
    const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
    if (op == NULL)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "node '%s': op '%s'%s%s%s is not a built-in op and no plugin provides it",
                        n->name, n->op_type, n->domain[0] ? " (domain '" : "", n->domain,
                        n->domain[0] ? "')" : "");
    if (n->domain[0] == '\0' && n->opset < op->since)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "node '%s' (%s): opset %d is older than %d, the "
                        "first version kiln supports for this op",
                        n->name, n->op_type, n->opset, op->since);
    const kn_arity *ar = n->domain[0] == '\0' ? kn_op_arity(n->op_type) : NULL;
    if (ar != NULL) {
        int n_in = n->n_in - kn_node_n_outer(n); /* enclosing-scope values are no op inputs */
        if (n_in < ar->min_in || (ar->max_in >= 0 && n_in > ar->max_in))
            return kn_error(KILN_ERR_MODEL, "node '%s' (%s) has %d inputs; the op takes %d to %d",
                            n->name, n->op_type, n_in, ar->min_in, ar->max_in);
        if (n->n_out < ar->min_out || (ar->max_out >= 0 && n->n_out > ar->max_out))
            return kn_error(KILN_ERR_MODEL, "node '%s' (%s) has %d outputs; the op makes %d to %d",
                            n->name, n->op_type, n->n_out, ar->min_out, ar->max_out);
        /* Loop's first two inputs are optional, its body checks its own */
        for (int j = 0; j < ar->min_in && !(op->flags & KN_OP_SUBGRAPH); j++)
            if (in[j].dtype == 0)
                return kn_error(KILN_ERR_MODEL, "node '%s' (%s): required input %d is missing",
                                n->name, n->op_type, j);
    }
    KN_TRY(kn_legacy_opset_check(n, in));
    for (int i = 0; i < n->n_out; i++)
        memset(&out[i], 0, sizeof out[i]);
    kn_infer_ctx c = {.node = n, .n_in = n->n_in, .in = in, .n_out = n->n_out, .out = out};
    kiln_status rc = moves ? kn_string_move_infer(n, n->n_in, in, n->n_out, out) : op->infer(&c);
    if (rc == KN_NEED_DATA)
        return rc;
    if (rc != KILN_OK)
        return kn_error_prefix(rc, "node '%s' (%s): ", n->name, n->op_type);
    for (int i = 0; i < n->n_out; i++) {
        if (n->out[i] < 0)
            continue;
        if (!kn_shape_valid(&out[i].shape))
            return kn_error(KILN_ERR_SHAPE,
                            "node '%s' (%s): output %d would have an invalid or absurdly large "
                            "shape (more than 2^40 elements or a negative dim)",
                            n->name, n->op_type, i);
        if (out[i].dtype == 0)
            return kn_error(KILN_ERR_INTERNAL, "node '%s' (%s): output %d has no dtype", n->name,
                            n->op_type, i);
    }
    return KILN_OK;
}

kiln_status kn_eval_node(kn_backend *host, const kn_node *n, const kn_tensor *in, kn_tensor *out,
                         kn_threadpool *pool) {
    KN_ASSERT(kn_mem_host_visible(host->iface->mem));
    const kn_kernel *k = kn_string_moves(n, n->n_in, in)
                             ? &kn_string_move_kernel
                             : host->iface->find_kernel(host, n->domain, n->op_type);
    if (k == NULL)
        return kn_error(KILN_ERR_UNSUPPORTED, "node '%s' (%s): no %s kernel", n->name, n->op_type,
                        host->iface->name);
    for (int i = 0; i < n->n_out; i++) {
        out[i].data = NULL;
        if (n->out[i] < 0)
            continue;
        size_t nb = kn_tensor_nbytes(&out[i]);
        out[i].data = kn_malloc(nb ? nb : 1);
        if (out[i].data == NULL) {
            for (int j = 0; j < i; j++) {
                kn_free(out[j].data);
                out[j].data = NULL;
            }
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory (%zu bytes)",
                            n->name, n->op_type, nb);
        }
    }
    void *state = NULL;
    kiln_status rc = KILN_OK;
    if (k->prepare != NULL)
        rc = k->prepare(n, n->n_in, in, &state);
    if (rc == KILN_OK) {
        kn_kernel_ctx kc = {.node = n,
                            .n_in = n->n_in,
                            .in = in,
                            .n_out = n->n_out,
                            .out = out,
                            .state = state,
                            .pool = pool,
                            .backend = host};
        rc = k->run(&kc);
    }
    if (state != NULL && k->release != NULL)
        k->release(state);
    if (rc != KILN_OK) {
        for (int i = 0; i < n->n_out; i++) {
            kn_free(out[i].data);
            out[i].data = NULL;
        }
        return kn_error_prefix(rc, "node '%s' (%s): ", n->name, n->op_type);
    }
    return KILN_OK;
}

void kn_resolved_release(kn_resolved *vals, int n) {
    for (int i = 0; i < n; i++) {
        if (vals[i].data_owned)
            kn_free(vals[i].t.data);
        vals[i].t.data = NULL;
        vals[i].data_owned = false;
    }
}

kiln_status kn_resolve(const kn_graph *g, kn_resolved *vals, bool *deferred,
                       const kn_resolve_opts *opts) {
    kn_backend *host = opts->host ? opts->host : kn_backend_host();
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    for (int v = 0; v < g->n_values; v++) {
        const kn_value *val = &g->values[v];
        if (val->data != NULL) {
            vals[v].t = kn_value_tensor(val);
            vals[v].known = true;
            vals[v].data_owned = false;
        } else if (!val->is_input) {
            memset(&vals[v], 0, sizeof vals[v]);
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (deferred)
            deferred[i] = false;
        if (n->dead)
            continue;
        if (n->n_in > KN_MAX_NODE_IO || n->n_out > KN_MAX_NODE_IO)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "node '%s' (%s) has more than %d inputs or outputs", n->name,
                            n->op_type, KN_MAX_NODE_IO);
        bool all_known = true, all_data = true;
        for (int j = 0; j < n->n_in; j++) {
            memset(&in[j], 0, sizeof in[j]);
            if (n->in[j] < 0)
                continue;
            const kn_resolved *r = &vals[n->in[j]];
            if (!r->known) {
                all_known = false;
                break;
            }
            in[j] = r->t;
            if (r->t.data == NULL)
                all_data = false;
        }
        const kiln_plugin_instance *plugin = NULL;
        if (kn_is_plugin_node(n) && opts->plugin_of)
            plugin = opts->plugin_of(opts->plugin_user, n, i);
        kiln_status rc = all_known ? kn_infer_node(n, plugin, in, out) : KN_NEED_DATA;
        if (rc == KN_NEED_DATA) {
            if (deferred)
                deferred[i] = true;
            continue;
        }
        if (rc != KILN_OK)
            return rc;
        int64_t elems = 0;
        for (int j = 0; j < n->n_out; j++) {
            if (n->out[j] < 0)
                continue;
            elems += kn_tensor_numel(&out[j]);
            vals[n->out[j]].t = out[j];
            vals[n->out[j]].known = true;
        }
        const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
        if (op == NULL) /* plugins never run at shape time */
            continue;
        bool evaluable = all_data || (op->flags & KN_OP_SHAPE_ONLY);
        if (!evaluable || elems > opts->max_eval_elems)
            continue;
        if (host->iface->find_kernel(host, n->domain, n->op_type) == NULL)
            continue;
        KN_TRY(kn_eval_node(host, n, in, out, NULL));
        for (int j = 0; j < n->n_out; j++) {
            if (n->out[j] < 0)
                continue;
            vals[n->out[j]].t.data = out[j].data;
            vals[n->out[j]].data_owned = true;
        }
    }
    return KILN_OK;
}
