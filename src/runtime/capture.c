/* Capturing intermediate values for layer-by-layer comparison. Marking a tensor as a graph
 * output would change the plan (fusion stops at outputs, the memory plan keeps them alive), so
 * the run being debugged would no longer be the run that failed. Instead the executor calls
 * kn_capture_node after each layer, and the values it wrote that were asked for are copied to
 * host memory the context owns while they are still valid. */
#include "runtime/capture.h"

#include "core/alloc.h"
#include "runtime/engine.h"

#include <string.h>

struct kn_capture {
    bool *want;  /* per value */
    bool *got;   /* per value: copied during the last execute */
    void **data; /* per value: host copy */
    size_t *cap;
    kn_tensor *t; /* per value: dtype and shape of the copy */
};

void kn_capture_destroy(kn_capture *cap, int n_values) {
    if (cap == NULL)
        return;
    for (int v = 0; cap->data != NULL && v < n_values; v++)
        kn_free(cap->data[v]);
    kn_free(cap->want), kn_free(cap->got), kn_free(cap->data), kn_free(cap->cap);
    kn_free(cap->t);
    kn_free(cap);
}

static kn_capture *capture_create(int n_values) {
    kn_capture *cap = kn_calloc(1, sizeof *cap);
    if (cap == NULL)
        return NULL;
    size_t n = (size_t)n_values + 1;
    cap->want = kn_calloc(n, sizeof *cap->want);
    cap->got = kn_calloc(n, sizeof *cap->got);
    cap->data = kn_calloc(n, sizeof *cap->data);
    cap->cap = kn_calloc(n, sizeof *cap->cap);
    cap->t = kn_calloc(n, sizeof *cap->t);
    if (!cap->want || !cap->got || !cap->data || !cap->cap || !cap->t) {
        kn_capture_destroy(cap, n_values);
        return NULL;
    }
    return cap;
}

/* Value v is written by a live node of the plan. */
static bool layer_writes(const kn_graph *g, int v) {
    int p = g->values[v].producer;
    return p >= 0 && !g->nodes[p].dead;
}

kiln_status kiln_context_set_capture(kiln_context *c, const char *const *names, int count) {
    if (c == NULL || (count > 0 && names == NULL))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_capture: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    if (count == 0) {
        kn_capture_destroy(c->capture, g->n_values);
        c->capture = NULL;
        return KILN_OK;
    }
    kn_capture *cap = capture_create(g->n_values);
    if (cap == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the capture");
    for (int v = 0; count < 0 && v < g->n_values; v++)
        cap->want[v] = layer_writes(g, v);
    for (int i = 0; i < count; i++) {
        int v = names[i] != NULL ? kn_graph_find_value(g, names[i]) : -1;
        if (v < 0 || !layer_writes(g, v)) {
            kn_capture_destroy(cap, g->n_values);
            return kn_error(KILN_ERR_NOT_FOUND,
                            "kiln_context_set_capture: no layer of the plan writes a tensor "
                            "named '%s' (it may have been fused away or folded)",
                            names[i] ? names[i] : "(null)");
        }
        cap->want[v] = true;
    }
    kn_capture_destroy(c->capture, g->n_values);
    c->capture = cap;
    return KILN_OK;
}

kiln_status kn_capture_node(kiln_context *c, int node) {
    kn_capture *cap = c->capture;
    const kiln_engine *e = c->e;
    const kn_node *n = &e->plan.graph->nodes[node];
    for (int j = 0; j < n->n_out; j++) {
        int v = n->out[j];
        if (v < 0 || !cap->want[v])
            continue;
        const kn_tensor *t = &c->vals[v].t;
        size_t nb = kn_tensor_nbytes(t);
        if (nb > cap->cap[v]) {
            void *p = kn_malloc(nb);
            if (p == NULL)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory capturing '%s'",
                                e->plan.graph->values[v].name);
            kn_free(cap->data[v]);
            cap->data[v] = p;
            cap->cap[v] = nb;
        }
        int k = e->value_space[v];
        if (nb > 0 && k == 0) {
            memcpy(cap->data[v], t->data, nb);
        } else if (nb > 0) {
            /* Device memory: the layer may still be in flight on the stream. */
            kn_backend *b = e->backends[k];
            KN_TRY(b->iface->copy(b, c->streams[k], cap->data[v], KN_MEM_HOST, t->data,
                                  KN_MEM_DEVICE, nb));
            if (b->iface->stream_sync != NULL)
                KN_TRY(b->iface->stream_sync(b, c->streams[k]));
        }
        cap->t[v] = *t;
        cap->t[v].data = cap->data[v];
        cap->got[v] = true;
    }
    return KILN_OK;
}

kiln_status kiln_context_get_captured(const kiln_context *c, const char *name,
                                      kiln_tensor_view *view) {
    if (c == NULL || name == NULL || view == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_get_captured: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    int v = kn_graph_find_value(g, name);
    if (c->capture == NULL || v < 0 || !c->capture->want[v])
        return kn_error(KILN_ERR_NOT_FOUND, "'%s' is not captured (kiln_context_set_capture)",
                        name);
    if (!c->executed || !c->capture->got[v])
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "'%s': the context has not been executed since the capture was set", name);
    const kn_tensor *t = &c->capture->t[v];
    memset(view, 0, sizeof *view);
    view->dtype = (kiln_dtype)t->dtype;
    view->rank = t->shape.rank;
    memcpy(view->dims, t->shape.d, (size_t)t->shape.rank * sizeof(int64_t));
    view->size = kn_tensor_nbytes(t);
    view->data = t->data;
    return KILN_OK;
}
