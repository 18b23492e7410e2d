#include "builder/codegen.h"

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/status.h"
#include "ir/placement.h"
#include "plugin/plugin.h"

#include <stdio.h>
#include <string.h>

/* The node's tensors with dtype and rank as annotated (shapes are not needed to generate). */
static void node_dtypes(const kn_graph *g, const kn_node *n, kn_tensor *in, kn_tensor *out) {
    for (int j = 0; j < n->n_in; j++) {
        in[j] = (kn_tensor){0};
        if (n->in[j] >= 0) {
            in[j].dtype = g->values[n->in[j]].dtype;
            in[j].shape.rank = g->values[n->in[j]].rank;
        }
    }
    for (int j = 0; j < n->n_out; j++) {
        out[j] = (kn_tensor){0};
        if (n->out[j] >= 0) {
            out[j].dtype = g->values[n->out[j]].dtype;
            out[j].shape.rank = g->values[n->out[j]].rank;
        }
    }
}

/* Whether nodes a and b ask for the same code: same backend, op, dtypes and attributes
 * (the program of a fused node is its attributes). */
static bool same_request(const kn_graph *g, const kn_node *a, const kn_node *b) {
    if (!kn_nodes_same_place(a, b) || strcmp(a->op_type, b->op_type) != 0 ||
        strcmp(a->domain, b->domain) != 0 || a->n_in != b->n_in || a->n_out != b->n_out)
        return false;
    for (int j = 0; j < a->n_in; j++)
        if ((a->in[j] < 0) != (b->in[j] < 0) ||
            (a->in[j] >= 0 && g->values[a->in[j]].dtype != g->values[b->in[j]].dtype))
            return false;
    for (int j = 0; j < a->n_out; j++)
        if ((a->out[j] < 0) != (b->out[j] < 0) ||
            (a->out[j] >= 0 && g->values[a->out[j]].dtype != g->values[b->out[j]].dtype))
            return false;
    const kn_attr *code_a = kn_node_attr(a, KN_ATTR_CODE);
    int n_a = a->n_attr - (code_a != NULL),
        n_b = b->n_attr - (kn_node_attr(b, KN_ATTR_CODE) != NULL);
    if (n_a != n_b)
        return false;
    for (int k = 0; k < a->n_attr; k++) {
        const kn_attr *x = &a->attr[k];
        if (strcmp(x->name, KN_ATTR_CODE) == 0 || strcmp(x->name, KN_ATTR_PLACEMENT_REASON) == 0)
            continue;
        const kn_attr *y = kn_node_attr(b, x->name);
        if (y == NULL || y->type != x->type || y->i != x->i || y->n != x->n ||
            memcmp(&y->f, &x->f, sizeof x->f) != 0 || y->slen != x->slen ||
            (x->slen && memcmp(x->s, y->s, x->slen) != 0) ||
            (x->type == KN_ATTR_INTS && x->n && memcmp(x->ints, y->ints, (size_t)x->n * 8) != 0) ||
            (x->type == KN_ATTR_FLOATS && x->n &&
             memcmp(x->floats, y->floats, (size_t)x->n * sizeof(float)) != 0) ||
            x->type == KN_ATTR_TENSOR || x->type == KN_ATTR_GRAPH || x->type == KN_ATTR_STRINGS)
            return false;
    }
    return true;
}

kiln_status kn_build_generate(kn_graph *g) {
    int generated = 0, reused = 0;
    size_t bytes = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        kn_backend *b;
        if (n->dead || kn_is_plugin_node(n) || kn_node_copy_kind(n) != KN_COPY_NONE ||
            kn_backend_get(kn_node_backend(n), &b) != KILN_OK || b->iface->generate == NULL)
            continue;
        /* a node asking for code an earlier one got shares it */
        const kn_attr *prior = NULL;
        for (int k = 0; k < i && prior == NULL; k++) {
            const kn_attr *c = kn_node_attr(&g->nodes[k], KN_ATTR_CODE);
            if (c != NULL && !g->nodes[k].dead && same_request(g, &g->nodes[k], n))
                prior = c;
        }
        if (prior != NULL) {
            kn_attr a = {
                .name = KN_ATTR_CODE, .type = KN_ATTR_STRING, .s = prior->s, .slen = prior->slen};
            KN_TRY(kn_node_set_attr(g, i, &a));
            reused++;
            continue;
        }
        kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
        node_dtypes(g, n, in, out);
        void *code = NULL;
        size_t size = 0;
        char note[160] = "";
        kiln_status rc =
            b->iface->generate(b, n, n->n_in, in, n->n_out, out, &code, &size, note, sizeof note);
        if (rc != KILN_OK) {
            /* the backend's own kernel still runs the node: a failed generation costs speed */
            kn_log(KILN_LOG_WARNING, "code generation for %s '%s' failed (%s); it runs without",
                   n->op_type, n->name, kiln_last_error());
            continue;
        }
        if (code == NULL)
            continue;
        kn_attr a = {.name = KN_ATTR_CODE, .type = KN_ATTR_STRING, .s = code, .slen = size};
        rc = kn_node_set_attr(g, i, &a);
        kn_free(code);
        KN_TRY(rc);
        kn_log(KILN_LOG_INFO, "%s '%s': %s", n->op_type, n->name, note);
        generated++;
        bytes += size;
    }
    if (generated > 0)
        kn_log(KILN_LOG_INFO, "generated code for %d layers (%zu bytes), %d more share it",
               generated, bytes, reused);
    return KILN_OK;
}
