/* Placement: every node goes to one backend, decided here at build and never at run time.
 *
 * Backends are asked in the configured order whether they run a node at the profile's min,
 * opt and max shapes; the host is the last resort. As onnxruntime's CPU-preferred nodes, some
 * nodes stay on the host whatever a device could do: shape-only ops, nodes whose output shapes
 * depend on data (their inference reads data on the host), and the small integer subgraphs
 * whose results a device kernel reads on the host anyway (a Reshape's shape, a Slice's
 * starts). Views (Reshape, Squeeze, ...) follow their input, so they stay free. */
#include "core/alloc.h"
#include "ir/placement.h"
#include "ops/op.h"
#include "passes/passes.h"
#include "plugin/plugin.h"
#include "shape/resolve.h"

#include <stdio.h>
#include <string.h>

typedef struct placer {
    kn_graph *g;
    const kn_placement *p;
    int *chosen;       /* per node: index into p->order, or -1 for the host */
    uint64_t *host_in; /* per node: inputs the first device backend would read on the host */
    char (*reason)[160];
} placer;

/* Ask backend b about node i at each resolution. */
static bool supported_everywhere(const placer *P, kn_backend *b, int i, kn_caps *caps) {
    const kn_node *n = &P->g->nodes[i];
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    if (kn_is_plugin_node(n)) {
        const kiln_plugin_instance *inst =
            P->p->plugin_of ? P->p->plugin_of(P->p->plugin_user, n, i) : NULL;
        memset(caps, 0, sizeof *caps);
        if (!kn_plugin_supports_backend(inst, b->iface->name)) {
            snprintf(caps->reason, sizeof caps->reason, "plugin '%s' does not run on %s",
                     n->op_type, b->iface->name);
            return false;
        }
        return true;
    }
    uint64_t host_in = 0;
    for (int r = 0; r < P->p->n_at; r++) {
        const kn_resolved *at = P->p->at[r];
        for (int j = 0; j < n->n_in; j++)
            in[j] = n->in[j] >= 0 ? at[n->in[j]].t : (kn_tensor){0};
        for (int j = 0; j < n->n_out; j++)
            out[j] = n->out[j] >= 0 ? at[n->out[j]].t : (kn_tensor){0};
        if (!kn_backend_supports(b, n, n->n_in, in, n->n_out, out, caps))
            return false;
        host_in |= caps->host_in;
    }
    caps->host_in = host_in;
    return true;
}

static bool deferred_anywhere(const placer *P, int i) {
    for (int r = 0; r < P->p->n_at; r++)
        if (P->p->deferred[r] != NULL && P->p->deferred[r][i])
            return true;
    return false;
}

static bool is_small_int(const kn_value *v) {
    return v->dtype == KILN_DTYPE_INT64 || v->dtype == KILN_DTYPE_INT32;
}

/* Nodes whose every output is read only on the host (as a device kernel's host input, by a
 * node no device runs, or by another such node) and is a small integer tensor: the host
 * computes them, no copy needed. */
static void mark_host_preferred(placer *P, bool *host_pref, const bool *device_ok) {
    kn_graph *g = P->g;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || n->n_out == 0)
            continue;
        bool all = true;
        for (int o = 0; o < n->n_out && all; o++) {
            int v = n->out[o];
            if (v < 0)
                continue;
            if (g->values[v].is_output || !is_small_int(&g->values[v])) {
                all = false;
                break;
            }
            bool read = false;
            for (int c = i + 1; c < g->n_nodes && all; c++) {
                const kn_node *m = &g->nodes[c];
                if (m->dead)
                    continue;
                for (int j = 0; j < m->n_in; j++)
                    if (m->in[j] == v) {
                        read = true;
                        if (!host_pref[c] && device_ok[c] && !(j < 64 && (P->host_in[c] >> j) & 1))
                            all = false;
                    }
            }
            all = all && read;
        }
        host_pref[i] = all;
    }
}

static kiln_status record(placer *P, int i) {
    kn_graph *g = P->g;
    if (P->chosen[i] < 0) {
        if (P->reason[i][0] != '\0')
            return kn_node_set_attr_string(g, i, KN_ATTR_PLACEMENT_REASON, P->reason[i]);
        return KILN_OK;
    }
    kn_backend *b = P->p->order[P->chosen[i]];
    KN_TRY(kn_node_set_attr_string(g, i, KN_ATTR_BACKEND, b->iface->name));
    if (P->host_in[i] != 0)
        KN_TRY(kn_node_set_attr_int(g, i, KN_ATTR_HOST_INPUTS, (int64_t)P->host_in[i]));
    return KILN_OK;
}

/* A plugin node left on the host (chosen NULL: every node) must say it runs there: one that
 * declares only device backends is refused here, at build, naming the node and the plugin. */
static kiln_status check_host_plugins(const kn_graph *g, const kn_placement *p, const int *chosen) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || !kn_is_plugin_node(n) || (chosen != NULL && chosen[i] >= 0))
            continue;
        const kiln_plugin_instance *inst = p->plugin_of ? p->plugin_of(p->plugin_user, n, i) : NULL;
        if (inst != NULL)
            KN_TRY(kn_plugin_check_backend(n, inst, KN_BACKEND_HOST));
    }
    return KILN_OK;
}

kiln_status kn_pass_assign_backends(kn_graph *g, const kn_placement *p) {
    int devices = 0;
    for (int k = 0; k < p->n_order; k++)
        devices += strcmp(p->order[k]->iface->name, KN_BACKEND_HOST) != 0;
    if (devices == 0)
        return check_host_plugins(g, p, NULL);
    size_t nn = (size_t)g->n_nodes + 1;
    placer P = {.g = g, .p = p};
    P.chosen = kn_malloc(nn * sizeof *P.chosen);
    P.host_in = kn_calloc(nn, sizeof *P.host_in);
    P.reason = kn_calloc(nn, sizeof *P.reason);
    bool *host_pref = kn_calloc(nn, sizeof *host_pref);
    uint64_t *caps_in = kn_calloc(nn * (size_t)(p->n_order + 1), sizeof *caps_in);
    int8_t *ok = kn_calloc(nn * (size_t)(p->n_order + 1), sizeof *ok);
    kiln_status rc = KILN_OK;
    if (!P.chosen || !P.host_in || !P.reason || !host_pref || !caps_in || !ok) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory placing nodes");
        goto out;
    }
    /* Ask every device backend about every node once. */
    for (int i = 0; i < g->n_nodes; i++) {
        P.chosen[i] = -1;
        if (g->nodes[i].dead)
            continue;
        for (int k = 0; k < p->n_order; k++) {
            kn_backend *b = p->order[k];
            if (strcmp(b->iface->name, KN_BACKEND_HOST) == 0)
                continue;
            kn_caps caps;
            ok[i * p->n_order + k] = supported_everywhere(&P, b, i, &caps);
            caps_in[i * p->n_order + k] = caps.host_in;
            if (!ok[i * p->n_order + k] && P.reason[i][0] == '\0')
                snprintf(P.reason[i], sizeof P.reason[i], "%s", caps.reason);
            if (ok[i * p->n_order + k] && P.host_in[i] == 0)
                P.host_in[i] = caps.host_in;
        }
    }
    bool *device_ok = kn_calloc(nn, sizeof *device_ok);
    if (device_ok == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory placing nodes");
        goto out;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < p->n_order; k++)
            device_ok[i] |= ok[i * p->n_order + k] != 0;
    mark_host_preferred(&P, host_pref, device_ok);
    kn_free(device_ok);
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
        P.host_in[i] = 0;
        if (op != NULL && (op->flags & KN_OP_SHAPE_ONLY)) {
            snprintf(P.reason[i], sizeof P.reason[i], "shape-only op: computed on the host");
            continue;
        }
        if (deferred_anywhere(&P, i)) {
            snprintf(P.reason[i], sizeof P.reason[i],
                     "output shape depends on data, which the host reads");
            continue;
        }
        if (host_pref[i]) {
            snprintf(P.reason[i], sizeof P.reason[i],
                     "small integer result read on the host (shape computation)");
            continue;
        }
        int follow = -2; /* a view goes where its input is, if that backend takes it */
        if (op != NULL && (op->flags & KN_OP_VIEW) && n->n_in > 0 && n->in[0] >= 0) {
            int prod = g->values[n->in[0]].producer;
            follow = prod >= 0 ? P.chosen[prod] : -1;
            if (follow < 0)
                snprintf(P.reason[i], sizeof P.reason[i],
                         "a view stays with its input, which is host memory");
        }
        for (int k = 0; k < p->n_order; k++) {
            if (strcmp(p->order[k]->iface->name, KN_BACKEND_HOST) == 0)
                break; /* the host was preferred before the remaining backends */
            if (!ok[i * p->n_order + k] || (follow != -2 && follow != k))
                continue;
            P.chosen[i] = k;
            P.host_in[i] = caps_in[i * p->n_order + k];
            P.reason[i][0] = '\0';
            break;
        }
    }
    rc = check_host_plugins(g, p, P.chosen);
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++)
        if (!g->nodes[i].dead)
            rc = record(&P, i);
out:
    kn_free(P.chosen);
    kn_free(P.host_in);
    kn_free(P.reason);
    kn_free(host_pref);
    kn_free(caps_in);
    kn_free(ok);
    return rc;
}
