#include "ir/graph.h"

#include "core/alloc.h"
#include "core/status.h"

#include <stdio.h>
#include <string.h>

kn_graph *kn_graph_create(void) {
    return kn_calloc(1, sizeof(kn_graph));
}

void kn_attr_free(kn_attr *a) {
    kn_free(a->name);
    kn_free(a->s);
    kn_free(a->ints);
    kn_free(a->floats);
    if (a->strings != NULL)
        for (int64_t i = 0; i < a->n; i++)
            kn_free(a->strings[i]);
    kn_free(a->strings);
    if (a->t != NULL) {
        kn_free(a->t->data);
        kn_free(a->t);
    }
    kn_graph_destroy(a->g);
    memset(a, 0, sizeof *a);
}

static void value_free(kn_value *v) {
    kn_free(v->name);
    for (int d = 0; d < KN_MAX_RANK; d++)
        kn_free(v->dims[d].sym);
    if (v->data_owned)
        kn_free(v->data);
}

static void node_free(kn_node *n) {
    kn_free(n->name);
    kn_free(n->op_type);
    kn_free(n->domain);
    kn_free(n->in);
    kn_free(n->out);
    for (int i = 0; i < n->n_attr; i++)
        kn_attr_free(&n->attr[i]);
    kn_free(n->attr);
}

void kn_graph_destroy(kn_graph *g) {
    if (g == NULL)
        return;
    for (int i = 0; i < g->n_values; i++)
        value_free(&g->values[i]);
    for (int i = 0; i < g->n_nodes; i++)
        node_free(&g->nodes[i]);
    for (int i = 0; i < g->n_opsets; i++)
        kn_free(g->opsets[i].domain);
    kn_free(g->values);
    kn_free(g->nodes);
    kn_free(g->inputs);
    kn_free(g->outputs);
    kn_free(g->opsets);
    kn_free(g->name);
    kn_free(g->name_index);
    kn_free(g);
}

static bool grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap)
        return true;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *p = kn_realloc(*arr, (size_t)*cap * elem, (size_t)nc * elem);
    if (p == NULL)
        return false;
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return true;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void kn_graph_names_changed(kn_graph *g) {
    g->n_indexed = 0;
    if (g->name_index != NULL)
        for (int i = 0; i < g->name_cap; i++)
            g->name_index[i] = -1;
}

/* Bring the index up to date with every value; false when memory ran out (lookups then fall
 * back to a scan). */
static bool index_values(kn_graph *g) {
    if (g->n_indexed == g->n_values && g->name_index != NULL)
        return true;
    if (g->name_index == NULL || (int64_t)g->n_values * 2 > g->name_cap) {
        int cap = 64;
        while (cap < g->n_values * 4)
            cap *= 2;
        int *idx = kn_malloc((size_t)cap * sizeof(int));
        if (idx == NULL)
            return false;
        kn_free(g->name_index);
        g->name_index = idx;
        g->name_cap = cap;
        kn_graph_names_changed(g);
    }
    for (; g->n_indexed < g->n_values; g->n_indexed++) {
        size_t mask = (size_t)g->name_cap - 1;
        size_t at = (size_t)name_hash(g->values[g->n_indexed].name) & mask;
        while (g->name_index[at] >= 0)
            at = (at + 1) & mask;
        g->name_index[at] = g->n_indexed;
    }
    return true;
}

int kn_graph_find_value(const kn_graph *g, const char *name) {
    kn_graph *mg = (kn_graph *)g; /* the index is a cache, not part of the graph's value */
    if (index_values(mg)) {
        size_t mask = (size_t)g->name_cap - 1;
        for (size_t at = (size_t)name_hash(name) & mask; g->name_index[at] >= 0;
             at = (at + 1) & mask)
            if (strcmp(g->values[g->name_index[at]].name, name) == 0)
                return g->name_index[at];
        return -1;
    }
    for (int i = g->n_values - 1; i >= 0; i--)
        if (strcmp(g->values[i].name, name) == 0)
            return i;
    return -1;
}

int kn_graph_add_value(kn_graph *g, const char *name) {
    char gen[64];
    if (name == NULL) {
        for (int k = g->n_values;; k++) {
            snprintf(gen, sizeof gen, "kiln_v%d", k);
            if (kn_graph_find_value(g, gen) < 0)
                break;
        }
        name = gen;
    } else if (kn_graph_find_value(g, name) >= 0) {
        kn_error(KILN_ERR_MODEL, "value name '%s' is defined twice", name);
        return -1;
    }
    if (!grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof(kn_value))) {
        kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory adding value '%s'", name);
        return -1;
    }
    kn_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = kn_strdup(name);
    if (v->name == NULL) {
        kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory adding value '%s'", name);
        return -1;
    }
    v->rank = -1;
    v->producer = -1;
    return g->n_values++;
}

int kn_graph_add_node(kn_graph *g, const char *name, const char *op_type, const char *domain,
                      int opset, int n_in, const int *in, int n_out, const int *out) {
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(kn_node)))
        goto fail_oom;
    kn_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    char gen[64];
    if (name == NULL || name[0] == '\0') {
        snprintf(gen, sizeof gen, "%s_%d", op_type, g->n_nodes);
        name = gen;
    }
    n->name = kn_strdup(name);
    n->op_type = kn_strdup(op_type);
    n->domain = kn_strdup(domain ? domain : "");
    n->opset = opset;
    n->n_in = n_in;
    n->n_out = n_out;
    n->in = kn_calloc(n_in ? (size_t)n_in : 1, sizeof(int));
    n->out = kn_calloc(n_out ? (size_t)n_out : 1, sizeof(int));
    if (!n->name || !n->op_type || !n->domain || !n->in || !n->out) {
        node_free(n);
        goto fail_oom;
    }
    if (n_in)
        memcpy(n->in, in, (size_t)n_in * sizeof(int));
    if (n_out)
        memcpy(n->out, out, (size_t)n_out * sizeof(int));
    for (int i = 0; i < n_out; i++)
        if (out[i] >= 0)
            g->values[out[i]].producer = g->n_nodes;
    return g->n_nodes++;
fail_oom:
    kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory adding node '%s'", name ? name : op_type);
    return -1;
}

kiln_status kn_attr_copy(kn_attr *dst, const kn_attr *src) {
    memset(dst, 0, sizeof *dst);
    dst->type = src->type;
    dst->i = src->i;
    dst->f = src->f;
    dst->n = src->n;
    dst->slen = src->slen;
    dst->name = kn_strdup(src->name);
    if (dst->name == NULL)
        goto fail;
    if (src->s != NULL && (dst->s = kn_strndup(src->s, src->slen)) == NULL)
        goto fail;
    if (src->ints != NULL) {
        if ((dst->ints = kn_malloc((size_t)src->n * sizeof(int64_t) + 1)) == NULL)
            goto fail;
        memcpy(dst->ints, src->ints, (size_t)src->n * sizeof(int64_t));
    }
    if (src->floats != NULL) {
        if ((dst->floats = kn_malloc((size_t)src->n * sizeof(float) + 1)) == NULL)
            goto fail;
        memcpy(dst->floats, src->floats, (size_t)src->n * sizeof(float));
    }
    if (src->strings != NULL) {
        if ((dst->strings = kn_calloc((size_t)src->n + 1, sizeof(char *))) == NULL)
            goto fail;
        for (int64_t i = 0; i < src->n; i++)
            if ((dst->strings[i] = kn_strdup(src->strings[i])) == NULL)
                goto fail;
    }
    if (src->t != NULL) {
        if ((dst->t = kn_calloc(1, sizeof(kn_tensor))) == NULL)
            goto fail;
        *dst->t = *src->t;
        size_t nb = kn_tensor_nbytes(src->t);
        dst->t->data = kn_malloc(nb ? nb : 1);
        if (dst->t->data == NULL)
            goto fail;
        if (nb)
            memcpy(dst->t->data, src->t->data, nb);
    }
    if (src->g != NULL && (dst->g = kn_graph_clone(src->g)) == NULL)
        goto fail;
    return KILN_OK;
fail:
    kn_attr_free(dst);
    return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory copying attribute");
}

kiln_status kn_node_set_op(kn_node *n, const char *domain, const char *op_type, int opset) {
    char *o = kn_strdup(op_type), *d = kn_strdup(domain);
    if (o == NULL || d == NULL) {
        kn_free(o);
        kn_free(d);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory renaming node '%s'", n->name);
    }
    kn_free(n->op_type);
    kn_free(n->domain);
    n->op_type = o;
    n->domain = d;
    n->opset = opset;
    return KILN_OK;
}

bool kn_node_is(const kn_node *n, const char *domain, const char *op_type) {
    return !n->dead && strcmp(n->domain, domain) == 0 && strcmp(n->op_type, op_type) == 0;
}

kiln_status kn_node_grow_inputs(kn_node *n, int n_in) {
    if (n_in <= n->n_in)
        return KILN_OK;
    int *in = kn_realloc(n->in, (size_t)n->n_in * sizeof(int), (size_t)n_in * sizeof(int));
    if (in == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory adding inputs to node '%s'",
                        n->name);
    for (int j = n->n_in; j < n_in; j++)
        in[j] = -1;
    n->in = in;
    n->n_in = n_in;
    return KILN_OK;
}

kiln_status kn_node_add_attr(kn_graph *g, int node, const kn_attr *attr) {
    kn_node *n = &g->nodes[node];
    kn_attr *arr = kn_realloc(n->attr, (size_t)n->n_attr * sizeof(kn_attr),
                              (size_t)(n->n_attr + 1) * sizeof(kn_attr));
    if (arr == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory adding attribute");
    n->attr = arr;
    KN_TRY(kn_attr_copy(&n->attr[n->n_attr], attr));
    n->n_attr++;
    return KILN_OK;
}

static kiln_status append_index(int **arr, int *n, int v) {
    int *p = kn_realloc(*arr, (size_t)*n * sizeof(int), (size_t)(*n + 1) * sizeof(int));
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    p[*n] = v;
    *arr = p;
    (*n)++;
    return KILN_OK;
}

kiln_status kn_graph_add_input(kn_graph *g, int value) {
    g->values[value].is_input = true;
    return append_index(&g->inputs, &g->n_inputs, value);
}

kiln_status kn_graph_add_output(kn_graph *g, int value) {
    g->values[value].is_output = true;
    return append_index(&g->outputs, &g->n_outputs, value);
}

kiln_status kn_graph_add_opset(kn_graph *g, const char *domain, int64_t version) {
    kn_opset_import *p = kn_realloc(g->opsets, (size_t)g->n_opsets * sizeof *p,
                                    (size_t)(g->n_opsets + 1) * sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    g->opsets = p;
    p[g->n_opsets].domain = kn_strdup(domain ? domain : "");
    if (p[g->n_opsets].domain == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    p[g->n_opsets].version = version;
    g->n_opsets++;
    return KILN_OK;
}

int64_t kn_graph_opset(const kn_graph *g, const char *domain) {
    if (domain == NULL || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    for (int i = 0; i < g->n_opsets; i++) {
        const char *d = g->opsets[i].domain;
        if (strcmp(d, "ai.onnx") == 0)
            d = "";
        if (strcmp(d, domain) == 0)
            return g->opsets[i].version;
    }
    return -1;
}

kiln_status kn_value_set_const(kn_graph *g, int v, const kn_tensor *t) {
    kn_value *val = &g->values[v];
    if (!kn_shape_valid(&t->shape))
        return kn_error(KILN_ERR_SHAPE, "constant '%s' has an invalid shape", val->name);
    size_t nb = kn_tensor_nbytes(t);
    void *copy = kn_malloc(nb ? nb : 1);
    if (copy == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for constant '%s' (%zu bytes)",
                        val->name, nb);
    if (nb)
        memcpy(copy, t->data, nb);
    if (val->data_owned)
        kn_free(val->data);
    val->data = copy;
    val->data_owned = true;
    val->dtype = t->dtype;
    val->rank = t->shape.rank;
    for (int d = 0; d < KN_MAX_RANK; d++) {
        kn_free(val->dims[d].sym);
        val->dims[d].sym = NULL;
        val->dims[d].value = d < t->shape.rank ? t->shape.d[d] : 0;
    }
    return KILN_OK;
}

bool kn_value_is_const(const kn_value *v) {
    return v->data != NULL;
}

bool kn_value_shape(const kn_value *v, kn_shape *out) {
    if (v->rank < 0)
        return false;
    out->rank = v->rank;
    for (int d = 0; d < v->rank; d++) {
        if (v->dims[d].sym != NULL || v->dims[d].value < 0)
            return false;
        out->d[d] = v->dims[d].value;
    }
    return true;
}

kn_tensor kn_value_tensor(const kn_value *v) {
    kn_tensor t = {.dtype = v->dtype, .data = v->data};
    if (!kn_value_shape(v, &t.shape))
        t.shape.rank = 0;
    return t;
}

/* Min-heap of node indices: Kahn's algorithm always takes the earliest ready node, so an
 * already sorted graph keeps its order. */
static void heap_push(int *h, int *n, int v) {
    int i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int heap_pop(int *h, int *n) {
    int top = h[0], v = h[--(*n)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = v;
    return top;
}

kiln_status kn_graph_toposort(kn_graph *g) {
    int n = g->n_nodes, nv = g->n_values, n_edges = 0;
    kiln_status rc = KILN_OK;
    for (int i = 0; i < n; i++)
        n_edges += g->nodes[i].n_in;
    /* Consumers of each value as one flat list (CSR): users[first[v] .. first[v + 1]). */
    int *indeg = kn_calloc((size_t)n + 1, sizeof(int));
    int *order = kn_calloc((size_t)n + 1, sizeof(int));
    int *heap = kn_calloc((size_t)n + 1, sizeof(int));
    int *first = kn_calloc((size_t)nv + 2, sizeof(int));
    int *cursor = kn_calloc((size_t)nv + 1, sizeof(int));
    int *users = kn_calloc((size_t)n_edges + 1, sizeof(int));
    kn_node *sorted = kn_calloc((size_t)n + 1, sizeof(kn_node));
    if (!indeg || !order || !heap || !first || !cursor || !users || !sorted) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory sorting the graph");
        goto out_free;
    }
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            int v = nd->in[j];
            if (v < 0)
                continue;
            const kn_value *val = &g->values[v];
            if (val->producer >= 0) {
                indeg[i]++;
                first[v + 1]++;
            } else if (!val->is_input && val->data == NULL) {
                rc = kn_error(KILN_ERR_MODEL,
                              "node '%s' (%s) reads '%s', which no node, input or "
                              "initializer defines",
                              nd->name, nd->op_type, val->name);
                goto out_free;
            }
        }
    }
    for (int v = 0; v < nv; v++) {
        first[v + 1] += first[v];
        cursor[v] = first[v];
    }
    for (int i = 0; i < n; i++) {
        const kn_node *nd = &g->nodes[i];
        for (int j = 0; j < nd->n_in; j++) {
            int v = nd->in[j];
            if (v >= 0 && g->values[v].producer >= 0)
                users[cursor[v]++] = i;
        }
    }
    int n_heap = 0, count = 0;
    for (int i = 0; i < n; i++)
        if (indeg[i] == 0)
            heap_push(heap, &n_heap, i);
    while (n_heap > 0) {
        int pick = heap_pop(heap, &n_heap);
        order[count++] = pick;
        const kn_node *nd = &g->nodes[pick];
        for (int o = 0; o < nd->n_out; o++) {
            int v = nd->out[o];
            if (v < 0)
                continue;
            for (int u = first[v]; u < first[v + 1]; u++)
                if (--indeg[users[u]] == 0)
                    heap_push(heap, &n_heap, users[u]);
        }
    }
    if (count < n) {
        for (int i = 0; i < n; i++)
            if (indeg[i] > 0) {
                rc = kn_error(KILN_ERR_MODEL, "the graph has a cycle through node '%s' (%s)",
                              g->nodes[i].name, g->nodes[i].op_type);
                break;
            }
        goto out_free;
    }
    for (int i = 0; i < n; i++)
        sorted[i] = g->nodes[order[i]];
    if (n > 0)
        memcpy(g->nodes, sorted, (size_t)n * sizeof(kn_node));
    for (int i = 0; i < n; i++)
        for (int o = 0; o < g->nodes[i].n_out; o++)
            if (g->nodes[i].out[o] >= 0)
                g->values[g->nodes[i].out[o]].producer = i;
out_free:
    kn_free(indeg);
    kn_free(order);
    kn_free(heap);
    kn_free(first);
    kn_free(cursor);
    kn_free(users);
    kn_free(sorted);
    return rc;
}

void kn_graph_truncate(kn_graph *g, int n_values, int n_nodes) {
    while (g->n_nodes > n_nodes)
        node_free(&g->nodes[--g->n_nodes]);
    while (g->n_values > n_values)
        value_free(&g->values[--g->n_values]);
    kn_graph_names_changed(g);
}

kiln_status kn_graph_compact(kn_graph *g) {
    int *remap = kn_malloc(((size_t)g->n_values + 1) * sizeof(int));
    bool *used = kn_calloc((size_t)g->n_values + 1, sizeof(bool));
    if (remap == NULL || used == NULL) {
        kn_free(remap);
        kn_free(used);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory compacting the graph");
    }
    int nn = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) {
            node_free(&g->nodes[i]);
            continue;
        }
        g->nodes[nn++] = g->nodes[i];
    }
    g->n_nodes = nn;
    for (int i = 0; i < g->n_inputs; i++)
        used[g->inputs[i]] = true;
    for (int i = 0; i < g->n_outputs; i++)
        used[g->outputs[i]] = true;
    for (int i = 0; i < nn; i++) {
        const kn_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                used[n->in[j]] = true;
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0)
                used[n->out[j]] = true;
    }
    int nv = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (!used[v]) {
            value_free(&g->values[v]);
            remap[v] = -1;
            continue;
        }
        remap[v] = nv;
        g->values[nv++] = g->values[v];
    }
    g->n_values = nv;
    kn_graph_names_changed(g);
    for (int v = 0; v < nv; v++)
        g->values[v].producer = -1;
    for (int i = 0; i < nn; i++) {
        kn_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0)
                n->in[j] = remap[n->in[j]];
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0) {
                n->out[j] = remap[n->out[j]];
                g->values[n->out[j]].producer = i;
            }
    }
    for (int i = 0; i < g->n_inputs; i++)
        g->inputs[i] = remap[g->inputs[i]];
    for (int i = 0; i < g->n_outputs; i++)
        g->outputs[i] = remap[g->outputs[i]];
    kn_free(remap);
    kn_free(used);
    return KILN_OK;
}

kn_graph *kn_graph_clone(const kn_graph *g) {
    kn_graph *c = kn_graph_create();
    if (c == NULL)
        return NULL;
    if (g->name && (c->name = kn_strdup(g->name)) == NULL)
        goto fail;
    c->ir_version = g->ir_version;
    c->n_outer = g->n_outer;
    for (int v = 0; v < g->n_values; v++) {
        const kn_value *s = &g->values[v];
        int nv = kn_graph_add_value(c, s->name);
        if (nv < 0)
            goto fail;
        kn_value *d = &c->values[nv];
        d->dtype = s->dtype;
        d->rank = s->rank;
        d->is_input = s->is_input;
        d->is_output = s->is_output;
        d->container = s->container;
        for (int k = 0; k < KN_MAX_RANK; k++) {
            d->dims[k].value = s->dims[k].value;
            if (s->dims[k].sym && (d->dims[k].sym = kn_strdup(s->dims[k].sym)) == NULL)
                goto fail;
        }
        if (s->data != NULL) {
            if (s->data_owned) {
                kn_tensor t = kn_value_tensor(s);
                if (kn_value_set_const(c, nv, &t) != KILN_OK)
                    goto fail;
            } else {
                d->data = s->data;
            }
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        int ni = kn_graph_add_node(c, n->name, n->op_type, n->domain, n->opset, n->n_in, n->in,
                                   n->n_out, n->out);
        if (ni < 0)
            goto fail;
        c->nodes[ni].dead = n->dead;
        for (int a = 0; a < n->n_attr; a++)
            if (kn_node_add_attr(c, ni, &n->attr[a]) != KILN_OK)
                goto fail;
    }
    for (int i = 0; i < g->n_values; i++)
        c->values[i].producer = g->values[i].producer;
    for (int i = 0; i < g->n_inputs; i++)
        if (append_index(&c->inputs, &c->n_inputs, g->inputs[i]) != KILN_OK)
            goto fail;
    for (int i = 0; i < g->n_outputs; i++)
        if (append_index(&c->outputs, &c->n_outputs, g->outputs[i]) != KILN_OK)
            goto fail;
    for (int i = 0; i < g->n_opsets; i++)
        if (kn_graph_add_opset(c, g->opsets[i].domain, g->opsets[i].version) != KILN_OK)
            goto fail;
    return c;
fail:
    kn_graph_destroy(c);
    return NULL;
}

int kn_node_n_outer(const kn_node *n) {
    for (int i = 0; i < n->n_attr; i++)
        if (n->attr[i].type == KN_ATTR_GRAPH && n->attr[i].g != NULL)
            return n->attr[i].g->n_outer;
    return 0;
}

const kn_attr *kn_node_attr(const kn_node *n, const char *name) {
    for (int i = 0; i < n->n_attr; i++)
        if (strcmp(n->attr[i].name, name) == 0)
            return &n->attr[i];
    return NULL;
}

int64_t kn_attr_int(const kn_node *n, const char *name, int64_t def) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_INT ? a->i : def;
}

float kn_attr_float(const kn_node *n, const char *name, float def) {
    const kn_attr *a = kn_node_attr(n, name);
    if (a && a->type == KN_ATTR_FLOAT)
        return a->f;
    if (a && a->type == KN_ATTR_INT)
        return (float)a->i;
    return def;
}

const char *kn_attr_string(const kn_node *n, const char *name, const char *def) {
    const kn_attr *a = kn_node_attr(n, name);
    return a && a->type == KN_ATTR_STRING && a->s ? a->s : def;
}

int64_t kn_attr_ints(const kn_node *n, const char *name, const int64_t **out) {
    const kn_attr *a = kn_node_attr(n, name);
    if (a == NULL || a->type != KN_ATTR_INTS) {
        *out = NULL;
        return 0;
    }
    *out = a->ints;
    return a->n;
}

int64_t kn_attr_floats(const kn_node *n, const char *name, const float **out) {
    const kn_attr *a = kn_node_attr(n, name);
    if (a == NULL || a->type != KN_ATTR_FLOATS) {
        *out = NULL;
        return 0;
    }
    *out = a->floats;
    return a->n;
}

int kn_graph_sole_consumer(const kn_graph *g, const int *uses, int v) {
    if (v < 0 || g->values[v].is_output || uses[v] != 1)
        return -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        for (int j = 0; !n->dead && j < n->n_in; j++)
            if (n->in[j] == v)
                return i;
    }
    return -1;
}

int *kn_graph_value_uses(const kn_graph *g) {
    int *uses = kn_calloc((size_t)g->n_values + 1, sizeof(int));
    if (uses == NULL)
        return NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (!n->dead)
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] >= 0)
                    uses[n->in[j]]++;
    }
    return uses;
}
