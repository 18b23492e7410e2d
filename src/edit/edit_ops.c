/* The structural edits: extract, remove, insert-after, rename, set-shape, cleanup. */
#include "edit/edit.h"

#include "core/alloc.h"

#include <stdio.h>
#include <string.h>

static kiln_status oom(void) {
    return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory editing the graph");
}

int kn_edit_find_node(const kn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].name, name) == 0)
            return i;
    return -1;
}

int kn_edit_consumers(const kn_graph *g, int v) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++)
            c += n->in[j] == v;
    }
    return c;
}

void kn_edit_replace_uses(kn_graph *g, int v, int w, bool outputs_too) {
    for (int i = 0; i < g->n_nodes; i++) {
        kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] == v)
                n->in[j] = w;
    }
    if (!outputs_too)
        return;
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v) {
            g->outputs[i] = w;
            g->values[v].is_output = false;
            g->values[w].is_output = true;
        }
}

static kiln_status find_value(const kn_graph *g, const char *name, const char *role, int *out) {
    *out = kn_graph_find_value(g, name);
    if (*out < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "%s '%s': no tensor of that name in the model", role,
                        name);
    return KILN_OK;
}

static kiln_status set_value_name(kn_graph *g, int v, const char *name) {
    char *copy = kn_strdup(name);
    if (copy == NULL)
        return oom();
    kn_free(g->values[v].name);
    g->values[v].name = copy;
    kn_graph_names_changed(g);
    return KILN_OK;
}

/* A fresh value name starting with base. */
static void unique_name(const kn_graph *g, const char *base, char *out, size_t size) {
    snprintf(out, size, "%.500s", base);
    for (int k = 2; kn_graph_find_value(g, out) >= 0; k++)
        snprintf(out, size, "%.500s_%d", base, k);
}

/* Mark the nodes the outputs need, stopping at cut values; fails on a needed graph input
 * that is not a cut. */
static kiln_status mark_needed(const kn_graph *g, const bool *cut, bool *live, bool *needed) {
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && live[n->out[j]] && !cut[n->out[j]])
                needed[i] = true;
        if (!needed[i])
            continue;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && cut[n->out[j]])
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "extract: node '%s' is needed for the outputs but also produces "
                                "the input '%s'",
                                n->name, g->values[n->out[j]].name);
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                live[n->in[j]] = true;
    }
    for (int v = 0; v < g->n_values; v++)
        if (live[v] && !cut[v] && g->values[v].is_input)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "extract: the outputs depend on graph input '%s', which is not among "
                            "the inputs given",
                            g->values[v].name);
    return KILN_OK;
}

static kiln_status set_boundary(kn_graph *g, int n_in, const int *in, int n_out, const int *out) {
    int *ins = kn_calloc((size_t)n_in + 1, sizeof *ins);
    int *outs = kn_calloc((size_t)n_out + 1, sizeof *outs);
    if (ins == NULL || outs == NULL) {
        kn_free(ins);
        kn_free(outs);
        return oom();
    }
    for (int v = 0; v < g->n_values; v++)
        g->values[v].is_input = g->values[v].is_output = false;
    for (int i = 0; i < n_in; i++) {
        ins[i] = in[i];
        g->values[in[i]].is_input = true;
        g->values[in[i]].producer = -1;
    }
    for (int i = 0; i < n_out; i++) {
        outs[i] = out[i];
        g->values[out[i]].is_output = true;
    }
    kn_free(g->inputs);
    kn_free(g->outputs);
    g->inputs = ins, g->n_inputs = n_in;
    g->outputs = outs, g->n_outputs = n_out;
    return KILN_OK;
}

kiln_status kn_edit_extract(kn_graph *g, int n_in, const char *const *inputs, int n_out,
                            const char *const *outputs) {
    if (n_out <= 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "extract: give at least one output");
    size_t nv = (size_t)g->n_values + 1;
    bool *cut = kn_calloc(nv, sizeof *cut), *live = kn_calloc(nv, sizeof *live);
    bool *needed = kn_calloc((size_t)g->n_nodes + 1, sizeof *needed);
    int *in = kn_calloc((size_t)n_in + 1, sizeof *in), *out = kn_calloc((size_t)n_out, sizeof *out);
    kiln_status rc = KILN_OK;
    if (!cut || !live || !needed || !in || !out) {
        rc = oom();
        goto out_free;
    }
    for (int i = 0; i < n_in && rc == KILN_OK; i++) {
        rc = find_value(g, inputs[i], "extract input", &in[i]);
        if (rc == KILN_OK && kn_value_is_const(&g->values[in[i]]))
            rc = kn_error(KILN_ERR_INVALID_ARGUMENT, "extract input '%s' is a constant", inputs[i]);
        else if (rc == KILN_OK && g->values[in[i]].dtype == 0)
            rc = kn_error(KILN_ERR_MODEL,
                          "extract input '%s' has no known type (the model declares none and "
                          "kiln cannot infer it); give one with --set-shape first",
                          inputs[i]);
        if (rc == KILN_OK)
            cut[in[i]] = true;
    }
    for (int i = 0; i < n_out && rc == KILN_OK; i++) {
        rc = find_value(g, outputs[i], "extract output", &out[i]);
        if (rc == KILN_OK)
            live[out[i]] = true;
    }
    if (rc == KILN_OK)
        rc = mark_needed(g, cut, live, needed);
    if (rc != KILN_OK)
        goto out_free;
    for (int i = 0; i < g->n_nodes; i++)
        if (!needed[i])
            g->nodes[i].dead = true;
    rc = set_boundary(g, n_in, in, n_out, out);
    if (rc == KILN_OK)
        rc = kn_graph_compact(g);
out_free:
    kn_free(cut), kn_free(live), kn_free(needed), kn_free(in), kn_free(out);
    return rc;
}

kiln_status kn_edit_remove(kn_graph *g, const char *name) {
    int i = kn_edit_find_node(g, name);
    if (i < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "remove: no node named '%s'", name);
    kn_node *n = &g->nodes[i];
    if (n->n_in < 1 || n->in[0] < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "remove: node '%s' (%s) has no first input to reconnect", name, n->op_type);
    for (int j = 1; j < n->n_out; j++)
        if (n->out[j] >= 0 &&
            (kn_edit_consumers(g, n->out[j]) > 0 || g->values[n->out[j]].is_output))
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "remove: output %d ('%s') of node '%s' is used; only the first "
                            "output can be reconnected",
                            j, g->values[n->out[j]].name, name);
    int x = n->in[0], y = n->n_out > 0 ? n->out[0] : -1;
    n->dead = true;
    if (y < 0)
        return kn_graph_compact(g);
    kn_edit_replace_uses(g, y, x, false);
    if (g->values[y].is_output) {
        const kn_value *xv = &g->values[x];
        /* An intermediate x takes the output's name, so the model keeps its interface. */
        if (!xv->is_input && !xv->is_output && !kn_value_is_const(xv)) {
            char *keep = kn_strdup(g->values[y].name);
            char gone[600];
            snprintf(gone, sizeof gone, "%.500s_removed", g->values[y].name);
            kiln_status rc = keep ? set_value_name(g, y, gone) : oom();
            if (rc == KILN_OK)
                rc = set_value_name(g, x, keep);
            kn_free(keep);
            KN_TRY(rc);
        }
        kn_edit_replace_uses(g, y, x, true);
    }
    return kn_graph_compact(g);
}

kiln_status kn_edit_insert_after(kn_graph *g, const char *tensor, const char *op_type,
                                 const char *domain, int n_attr, const kn_attr *attrs) {
    int v;
    KN_TRY(find_value(g, tensor, "insert-after", &v));
    char base[600], renamed[600], node_name[600];
    snprintf(base, sizeof base, "%.400s_before_%.60s", tensor, op_type);
    unique_name(g, base, renamed, sizeof renamed);
    char *orig = kn_strdup(tensor);
    if (orig == NULL)
        return oom();
    kiln_status rc = set_value_name(g, v, renamed);
    int w = rc == KILN_OK ? kn_graph_add_value(g, orig) : -1;
    kn_free(orig);
    if (rc != KILN_OK)
        return rc;
    if (w < 0)
        return oom();
    kn_edit_replace_uses(g, v, w, true);
    snprintf(node_name, sizeof node_name, "%.500s_%.60s", tensor, op_type);
    for (int k = 2; kn_edit_find_node(g, node_name) >= 0; k++)
        snprintf(node_name, sizeof node_name, "%.500s_%.60s_%d", tensor, op_type, k);
    const char *dom = domain != NULL ? domain : "";
    int64_t opset = kn_graph_opset(g, dom);
    int node =
        kn_graph_add_node(g, node_name, op_type, dom, opset > 0 ? (int)opset : 1, 1, &v, 1, &w);
    if (node < 0)
        return oom();
    for (int i = 0; i < n_attr; i++)
        KN_TRY(kn_node_add_attr(g, node, &attrs[i]));
    KN_TRY(kn_graph_toposort(g));
    return kn_edit_infer_types(g);
}

kiln_status kn_edit_rename(kn_graph *g, const char *old_name, const char *new_name) {
    if (new_name[0] == '\0')
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "rename: the new name of '%s' is empty",
                        old_name);
    int v = kn_graph_find_value(g, old_name);
    if (v >= 0) {
        if (kn_graph_find_value(g, new_name) >= 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "rename: a tensor named '%s' already exists",
                            new_name);
        return set_value_name(g, v, new_name);
    }
    int n = kn_edit_find_node(g, old_name);
    if (n < 0)
        return kn_error(KILN_ERR_NOT_FOUND, "rename: no tensor or node named '%s'", old_name);
    if (kn_edit_find_node(g, new_name) >= 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "rename: a node named '%s' already exists",
                        new_name);
    char *copy = kn_strdup(new_name);
    if (copy == NULL)
        return oom();
    kn_free(g->nodes[n].name);
    g->nodes[n].name = copy;
    return KILN_OK;
}

kiln_status kn_edit_set_shape(kn_graph *g, const char *name, int rank, const int64_t *dims,
                              const char *const *symbols) {
    int v;
    KN_TRY(find_value(g, name, "set-shape", &v));
    kn_value *val = &g->values[v];
    if (kn_value_is_const(val))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "set-shape: '%s' is a constant", name);
    if (rank < 0 || rank > KN_MAX_RANK)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "set-shape: rank %d is out of range", rank);
    for (int d = 0; d < KN_MAX_RANK; d++) {
        kn_free(val->dims[d].sym);
        val->dims[d].sym = NULL;
        val->dims[d].value = 0;
        if (d >= rank)
            continue;
        if (dims[d] >= 0) {
            val->dims[d].value = dims[d];
        } else {
            val->dims[d].value = -1;
            val->dims[d].sym = kn_strdup(symbols != NULL && symbols[d] ? symbols[d] : "unk");
            if (val->dims[d].sym == NULL)
                return oom();
        }
    }
    val->rank = rank;
    return kn_edit_infer_types(g);
}

/* Mark dead every node none of whose outputs reaches a graph output (nodes are sorted, so
 * one backward sweep finds them all). */
static kiln_status mark_dead(kn_graph *g) {
    bool *live = kn_calloc((size_t)g->n_values + 1, sizeof *live);
    if (live == NULL)
        return oom();
    for (int i = 0; i < g->n_outputs; i++)
        live[g->outputs[i]] = true;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        kn_node *n = &g->nodes[i];
        bool needed = false;
        for (int j = 0; j < n->n_out && !n->dead; j++)
            needed |= n->out[j] >= 0 && live[n->out[j]];
        if (!needed) {
            n->dead = true;
            continue;
        }
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                live[n->in[j]] = true;
    }
    kn_free(live);
    return KILN_OK;
}

kiln_status kn_edit_cleanup(kn_graph *g) {
    KN_TRY(mark_dead(g));
    int k = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (kn_edit_consumers(g, v) > 0 || g->values[v].is_output)
            g->inputs[k++] = v;
        else
            g->values[v].is_input = false;
    }
    g->n_inputs = k;
    return kn_graph_compact(g);
}
