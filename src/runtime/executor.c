/* Execution: bind inputs, run every node's kernel in order, copy outputs out. */
#include "core/alloc.h"
#include "ops/op.h"
#include "runtime/engine.h"

#include <string.h>

static kiln_status bind_inputs(kiln_context *c) {
    const kn_graph *g = c->e->plan.graph;
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_value *v = &g->values[g->inputs[i]];
        kn_resolved *r = &c->vals[g->inputs[i]];
        size_t need = kn_tensor_nbytes(&r->t);
        if (c->in_data[i] == NULL && need > 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "input '%s' has no data: call "
                            "kiln_context_set_input",
                            v->name);
        if (c->in_size[i] != need) {
            char s[128];
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "input '%s' needs %zu bytes (%s %s), got %zu", v->name, need,
                            kn_dtype_name(r->t.dtype), kn_shape_str(&r->t.shape, s, sizeof s),
                            c->in_size[i]);
        }
        r->t.data = (void *)c->in_data[i];
    }
    return KILN_OK;
}

/* A node whose shapes depended on data: infer now, with every input known, and give its
 * outputs heap memory of their own. */
static kiln_status run_deferred_infer(kiln_context *c, int node, const kn_tensor *in,
                                      kn_tensor *out) {
    const kn_node *n = &c->e->plan.graph->nodes[node];
    const kiln_plugin_instance *plugin = c->runs[node].inst.ops ? &c->runs[node].inst : NULL;
    kiln_status rc = kn_infer_node(n, plugin, in, out);
    if (rc == KN_NEED_DATA)
        return kn_error(KILN_ERR_INTERNAL,
                        "node '%s' (%s): shape still unknown with all input "
                        "data present",
                        n->name, n->op_type);
    if (rc != KILN_OK)
        return rc;
    for (int j = 0; j < n->n_out; j++) {
        int v = n->out[j];
        if (v < 0)
            continue;
        size_t nb = kn_tensor_nbytes(&out[j]);
        kn_free(c->dyn[v]);
        c->dyn[v] = kn_malloc(nb ? nb : 1);
        if (c->dyn[v] == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "node '%s': out of memory (%zu bytes)", n->name,
                            nb);
        out[j].data = c->dyn[v];
        c->vals[v].t = out[j];
        c->vals[v].known = true;
    }
    if (plugin != NULL)
        KN_TRY(kn_context_plugin_shapes(c, node));
    return KILN_OK;
}

static kiln_status run_nodes(kiln_context *c) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    kn_tensor in[64], out[64];
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        bool done = !c->deferred[i];
        for (int j = 0; j < n->n_out && done; j++)
            if (n->out[j] >= 0 && c->in_arena[n->out[j]])
                done = false;
        if (done) /* evaluated on the host when shapes were resolved */
            continue;
        for (int j = 0; j < n->n_in; j++) {
            memset(&in[j], 0, sizeof in[j]);
            if (n->in[j] >= 0)
                in[j] = c->vals[n->in[j]].t;
        }
        if (c->deferred[i]) {
            KN_TRY(run_deferred_infer(c, i, in, out));
        } else {
            for (int j = 0; j < n->n_out; j++) {
                memset(&out[j], 0, sizeof out[j]);
                if (n->out[j] >= 0)
                    out[j] = c->vals[n->out[j]].t;
            }
        }
        kn_kernel_ctx kc = {.node = n,
                            .n_in = n->n_in,
                            .in = in,
                            .n_out = n->n_out,
                            .out = out,
                            .state = c->runs[i].inst.ops ? (void *)&c->runs[i] : e->states[i],
                            .pool = c->pool};
        kiln_status rc = e->kernels[i]->run(&kc);
        if (rc != KILN_OK)
            return kn_error_prefix(rc, "node '%s' (%s): ", n->name, n->op_type);
    }
    return KILN_OK;
}

static kiln_status copy_outputs(kiln_context *c) {
    const kn_graph *g = c->e->plan.graph;
    for (int i = 0; i < g->n_outputs; i++) {
        const kn_value *v = &g->values[g->outputs[i]];
        const kn_tensor *t = &c->vals[g->outputs[i]].t;
        size_t nb = kn_tensor_nbytes(t);
        if (c->out_user[i] != NULL) {
            if (c->out_user_size[i] < nb)
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "output '%s' needs %zu bytes, the bound buffer has %zu", v->name,
                                nb, c->out_user_size[i]);
            if (nb)
                memcpy(c->out_user[i], t->data, nb);
            continue;
        }
        if (nb > c->out_cap[i]) {
            void *p = kn_malloc(nb);
            if (p == NULL)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for output '%s'", v->name);
            kn_free(c->out_buf[i]);
            c->out_buf[i] = p;
            c->out_cap[i] = nb;
        }
        if (nb)
            memcpy(c->out_buf[i], t->data, nb);
    }
    return KILN_OK;
}

kiln_status kiln_context_execute(kiln_context *c) {
    if (c == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_execute: NULL context");
    c->executed = false;
    KN_TRY(kn_context_resolve(c));
    KN_TRY(bind_inputs(c));
    KN_TRY(run_nodes(c));
    KN_TRY(copy_outputs(c));
    c->executed = true;
    return KILN_OK;
}

kiln_status kiln_context_get_output(kiln_context *c, const char *name, kiln_tensor_view *view) {
    if (c == NULL || name == NULL || view == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_get_output: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    for (int i = 0; i < g->n_outputs; i++) {
        const kn_value *v = &g->values[g->outputs[i]];
        if (strcmp(v->name, name) != 0)
            continue;
        if (!c->executed)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "output '%s': the context has not been "
                            "executed since its shapes last changed",
                            name);
        const kn_tensor *t = &c->vals[g->outputs[i]].t;
        memset(view, 0, sizeof *view);
        view->dtype = (kiln_dtype)t->dtype;
        view->rank = t->shape.rank;
        memcpy(view->dims, t->shape.d, (size_t)t->shape.rank * sizeof(int64_t));
        view->size = kn_tensor_nbytes(t);
        view->data = c->out_user[i] ? c->out_user[i] : c->out_buf[i];
        return KILN_OK;
    }
    return kn_error(KILN_ERR_NOT_FOUND, "no output named '%s'", name);
}
