/* Copies at memory-space boundaries, after placement (as onnxruntime's Memcpy nodes). */
#include "backend/backend.h"
#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/op.h"
#include "passes/passes.h"

#include <stdio.h>
#include <string.h>

/* The device backend whose memory holds what node i makes, or NULL for host memory. */
static const char *node_space(const kn_graph *g, int i) {
    const kn_node *n = &g->nodes[i];
    if (kn_node_copy_kind(n) == KN_COPY_TO_HOST)
        return NULL;
    const char *b = kn_node_backend(n);
    if (strcmp(b, KN_BACKEND_HOST) == 0)
        return NULL;
    kn_backend *be;
    if (kn_backend_get(b, &be) != KILN_OK || be->iface->mem != KN_MEM_DEVICE)
        return NULL;
    return b;
}

static const char *value_space(const kn_graph *g, int v) {
    int p = g->values[v].producer;
    return p >= 0 ? node_space(g, p) : NULL;
}

static bool same_space(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Add a copy of value v into space `to` (NULL: host) run on backend dev; returns the copy's
 * output value or -1. The copy takes v's annotation. */
static int add_copy(kn_graph *g, int v, const char *to, const char *dev) {
    char name[512];
    snprintf(name, sizeof name, "%s:%s", g->values[v].name, to ? to : "host");
    int out = kn_graph_add_value(g, kn_graph_find_value(g, name) < 0 ? name : NULL);
    if (out < 0)
        return -1;
    kn_value *src = &g->values[v], *dst = &g->values[out];
    dst->dtype = src->dtype;
    dst->rank = src->rank;
    for (int d = 0; d < KN_MAX_RANK && d < src->rank; d++) {
        dst->dims[d].value = src->dims[d].value;
        if (src->dims[d].sym && (dst->dims[d].sym = kn_strdup(src->dims[d].sym)) == NULL)
            return -1;
    }
    int in = v;
    int node = kn_graph_add_node(g, name, to ? KN_OP_COPY_TO_DEVICE : KN_OP_COPY_TO_HOST,
                                 KN_COPY_DOMAIN, 1, 1, &in, 1, &out);
    if (node < 0 || kn_node_set_attr_string(g, node, KN_ATTR_BACKEND, dev) != KILN_OK)
        return -1;
    return out;
}

/* A graph output made on a device: its producer writes a new value, and a copy to the host
 * writes the output's own name. Device readers of the output read the device value. */
static kiln_status outputs_to_host(kn_graph *g) {
    for (int o = 0; o < g->n_outputs; o++) {
        int v = g->outputs[o];
        const char *dev = value_space(g, v);
        if (dev == NULL)
            continue;
        int p = g->values[v].producer;
        int dv = add_copy(g, v, NULL, dev); /* placeholder value, renumbered below */
        if (dv < 0)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inserting copies");
        /* add_copy made copy(v) -> dv; swap so producer -> dv (device), copy(dv) -> v. */
        int c = g->values[dv].producer;
        kn_node *pn = &g->nodes[p];
        for (int j = 0; j < pn->n_out; j++)
            if (pn->out[j] == v)
                pn->out[j] = dv;
        g->nodes[c].in[0] = dv;
        g->nodes[c].out[0] = v;
        g->values[dv].producer = p;
        g->values[v].producer = c;
        for (int i = 0; i < g->n_nodes; i++) {
            kn_node *n = &g->nodes[i];
            if (i == c || n->dead || !same_space(node_space(g, i), dev) ||
                kn_node_copy_kind(n) != KN_COPY_NONE)
                continue;
            uint64_t host_in = kn_node_host_inputs(n);
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] == v && !(j < 64 && (host_in >> j) & 1))
                    n->in[j] = dv;
        }
    }
    return KILN_OK;
}

kiln_status kn_pass_insert_copies(kn_graph *g) {
    KN_TRY(outputs_to_host(g));
    int n_nodes = g->n_nodes;
    int n_values = g->n_values;
    /* per value: its copy to the host, and to the (one) device space, once made */
    int *to_host = kn_malloc(((size_t)n_values + 1) * 2 * sizeof(int));
    if (to_host == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inserting copies");
    int *to_dev = to_host + n_values + 1;
    for (int v = 0; v < n_values; v++)
        to_host[v] = to_dev[v] = -1;
    kiln_status rc = KILN_OK;
    for (int i = 0; i < n_nodes && rc == KILN_OK; i++) {
        if (g->nodes[i].dead || kn_node_copy_kind(&g->nodes[i]) != KN_COPY_NONE)
            continue;
        const char *space = node_space(g, i);
        uint64_t host_in = kn_node_host_inputs(&g->nodes[i]);
        const kn_op_schema *op = kn_op_find(g->nodes[i].domain, g->nodes[i].op_type);
        if (op != NULL && (op->flags & KN_OP_SHAPE_ONLY))
            continue; /* reads shapes only, never data: no copy */
        for (int j = 0; j < g->nodes[i].n_in && rc == KILN_OK; j++) {
            int v = g->nodes[i].in[j];
            if (v < 0 || v >= n_values || g->values[v].data != NULL)
                continue;
            const char *want = (j < 64 && (host_in >> j) & 1) ? NULL : space;
            const char *have = value_space(g, v);
            if (same_space(want, have))
                continue;
            int *slot = want ? &to_dev[v] : &to_host[v];
            if (*slot < 0)
                *slot = add_copy(g, v, want, want ? want : have);
            if (*slot < 0)
                rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory inserting copies");
            else
                g->nodes[i].in[j] = *slot;
        }
    }
    kn_free(to_host);
    KN_TRY(rc);
    return kn_graph_toposort(g);
}
