/* An If whose condition is a constant (after folding) is replaced by the nodes of the branch it
 * takes; the other branch is dropped. The branch's values get fresh names in the graph, its
 * enclosing-scope inputs become the If's own inputs, and its outputs the If's outputs. */
#include "passes/passes.h"

#include "core/alloc.h"

#include <stdio.h>
#include <string.h>

/* A fresh value of g named after the If and the branch's value (suffixed on collision). */
static kiln_status fresh_value(kn_graph *g, const char *node, const char *name, int *out) {
    char want[400];
    snprintf(want, sizeof want, "%.190s/%.190s", node, name);
    int v = kn_graph_find_value(g, want) < 0 ? kn_graph_add_value(g, want) : -1;
    for (int k = 2; v < 0 && k < 1000; k++) {
        char alt[420];
        snprintf(alt, sizeof alt, "%s_%d", want, k);
        if (kn_graph_find_value(g, alt) < 0)
            v = kn_graph_add_value(g, alt);
    }
    if (v < 0 && (v = kn_graph_add_value(g, NULL)) < 0)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inlining node '%s'", node);
    *out = v;
    return KILN_OK;
}

static kiln_status inline_branch(kn_graph *g, int node, const kn_graph *b, int *map) {
    char name[256];
    snprintf(name, sizeof name, "%s", g->nodes[node].name);
    for (int v = 0; v < b->n_values; v++)
        map[v] = -1;
    for (int k = 0; k < b->n_inputs; k++) /* enclosing-scope values: the If's inputs after cond */
        map[b->inputs[k]] = g->nodes[node].in[1 + k];
    bool *bound = kn_calloc((size_t)b->n_outputs + 1, sizeof *bound);
    if (bound == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inlining node '%s'", name);
    for (int o = 0; o < b->n_outputs; o++) { /* a branch output made by a branch node */
        int bv = b->outputs[o], out = g->nodes[node].out[o];
        if (out >= 0 && b->values[bv].producer >= 0 && map[bv] < 0) {
            map[bv] = out;
            bound[o] = true;
        }
    }
    g->nodes[node].dead = true;
    kiln_status rc = KILN_OK;
    for (int v = 0; v < b->n_values && rc == KILN_OK; v++) {
        if (map[v] >= 0 || (b->values[v].producer < 0 && !kn_value_is_const(&b->values[v])))
            continue;
        rc = fresh_value(g, name, b->values[v].name, &map[v]);
        if (rc == KILN_OK && kn_value_is_const(&b->values[v])) {
            kn_tensor t = kn_value_tensor(&b->values[v]);
            rc = kn_value_set_const(g, map[v], &t);
        }
    }
    int in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    for (int i = 0; i < b->n_nodes && rc == KILN_OK; i++) {
        const kn_node *n = &b->nodes[i];
        if (n->dead)
            continue;
        if (n->n_in > KN_MAX_NODE_IO || n->n_out > KN_MAX_NODE_IO) {
            rc = kn_error(KILN_ERR_UNSUPPORTED, "node '%s' has more than %d inputs or outputs",
                          n->name, KN_MAX_NODE_IO);
            break;
        }
        for (int j = 0; j < n->n_in; j++)
            in[j] = n->in[j] >= 0 ? map[n->in[j]] : -1;
        for (int j = 0; j < n->n_out; j++)
            out[j] = n->out[j] >= 0 ? map[n->out[j]] : -1;
        char nn[400];
        snprintf(nn, sizeof nn, "%.190s/%.190s", name, n->name);
        int ni =
            kn_graph_add_node(g, nn, n->op_type, n->domain, n->opset, n->n_in, in, n->n_out, out);
        if (ni < 0)
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inlining node '%s'", name);
        for (int a = 0; a < n->n_attr && rc == KILN_OK; a++)
            rc = kn_node_add_attr(g, ni, &b->nodes[i].attr[a]);
    }
    /* Outputs the branch passes through (an input or constant, or one value twice): copies. */
    for (int o = 0; o < b->n_outputs && rc == KILN_OK; o++) {
        int target = g->nodes[node].out[o];
        if (bound[o] || target < 0)
            continue;
        char nn[400];
        snprintf(nn, sizeof nn, "%.190s/output_%d", name, o);
        int src = map[b->outputs[o]];
        if (kn_graph_add_node(g, nn, "Identity", "", (int)kn_graph_opset(g, ""), 1, &src, 1,
                              &target) < 0)
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inlining node '%s'", name);
    }
    kn_free(bound);
    /* The dead If no longer makes its outputs: left in place, it would still count as their
     * producer when the graph is sorted, and the branch nodes that now make them could land
     * after their readers (and be dropped as dead). */
    for (int o = 0; o < g->nodes[node].n_out; o++)
        g->nodes[node].out[o] = -1;
    return rc;
}

kiln_status kn_pass_inline_if(kn_graph *g, int *inlined) {
    *inlined = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || n->domain[0] != '\0' || strcmp(n->op_type, "If") != 0 || n->n_in < 1 ||
            n->in[0] < 0)
            continue;
        const kn_value *c = &g->values[n->in[0]];
        if (!kn_value_is_const(c) || c->dtype != KILN_DTYPE_BOOL)
            continue;
        kn_tensor t = kn_value_tensor(c);
        if (kn_tensor_numel(&t) != 1)
            continue;
        const kn_attr *a =
            kn_node_attr(n, *(const uint8_t *)c->data ? "then_branch" : "else_branch");
        if (a == NULL || a->g == NULL || a->g->n_outputs != n->n_out ||
            a->g->n_inputs != n->n_in - 1)
            continue; /* malformed: left for inference to report */
        int *map = kn_malloc(((size_t)a->g->n_values + 1) * sizeof *map);
        if (map == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inlining node '%s'", n->name);
        kiln_status rc = inline_branch(g, i, a->g, map);
        kn_free(map);
        KN_TRY(rc);
        (*inlined)++;
    }
    return KILN_OK;
}
