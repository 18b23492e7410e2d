#include "core/alloc.h"
#include "ops/op.h"
#include "runtime/engine.h"
#include "runtime/memory_plan.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Host evaluation at shape time is for shape subgraphs: small by nature. */
#define KN_RUNTIME_EVAL_ELEMS 4096

static int default_threads(const kiln_engine *e) {
    int t = e->plan.threads;
    if (t <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        t = n > 0 ? (int)n : 1;
    }
    return t;
}

kiln_status kiln_context_create(kiln_engine *e, kiln_context **out) {
    if (e == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_create: NULL argument");
    *out = NULL;
    const kn_graph *g = e->plan.graph;
    size_t ni = (size_t)g->n_inputs + 1, no = (size_t)g->n_outputs + 1;
    size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
    kiln_context *c = kn_calloc(1, sizeof *c);
    if (c == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a context");
    c->e = e;
    c->in_shape = kn_calloc(ni, sizeof *c->in_shape);
    c->in_shape_set = kn_calloc(ni, sizeof *c->in_shape_set);
    c->in_data = kn_calloc(ni, sizeof *c->in_data);
    c->in_size = kn_calloc(ni, sizeof *c->in_size);
    c->out_user = kn_calloc(no, sizeof *c->out_user);
    c->out_user_size = kn_calloc(no, sizeof *c->out_user_size);
    c->out_buf = kn_calloc(no, sizeof *c->out_buf);
    c->out_cap = kn_calloc(no, sizeof *c->out_cap);
    c->vals = kn_calloc(nv, sizeof *c->vals);
    c->in_arena = kn_calloc(nv, sizeof *c->in_arena);
    c->offsets = kn_calloc(nv, sizeof *c->offsets);
    c->alias = kn_calloc(nv, sizeof *c->alias);
    c->dyn = kn_calloc(nv, sizeof *c->dyn);
    c->deferred = kn_calloc(nn, sizeof *c->deferred);
    c->runs = kn_calloc(nn, sizeof *c->runs);
    if (!c->runs || !c->in_shape || !c->in_shape_set || !c->in_data || !c->in_size ||
        !c->out_user || !c->out_user_size || !c->out_buf || !c->out_cap || !c->vals ||
        !c->in_arena || !c->offsets || !c->alias || !c->dyn || !c->deferred) {
        kiln_context_destroy(c);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a context");
    }
    for (int i = 0; i < g->n_inputs; i++)
        c->in_shape_set[i] = kn_value_shape(&g->values[g->inputs[i]], &c->in_shape[i]);
    kiln_status rc = KILN_OK;
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++) {
        const kiln_plugin_instance *proto = &e->plugins[i];
        if (proto->ops == NULL)
            continue;
        c->runs[i].inst = *proto;
        c->runs[i].shared = true;
        if (proto->ops->clone != NULL) {
            void *self = proto->ops->clone(proto->self);
            if (self == NULL)
                rc = kn_error(KILN_ERR_PLUGIN, "node '%s': plugin '%s' clone failed",
                              g->nodes[i].name, g->nodes[i].op_type);
            c->runs[i].inst.self = self;
            c->runs[i].shared = false;
        }
    }
    if (rc != KILN_OK) {
        kiln_context_destroy(c);
        return rc;
    }
    rc = kiln_context_set_threads(c, default_threads(e));
    if (rc != KILN_OK) {
        kiln_context_destroy(c);
        return rc;
    }
    *out = c;
    return KILN_OK;
}

void kiln_context_destroy(kiln_context *c) {
    if (c == NULL)
        return;
    kn_threadpool_destroy(c->pool);
    if (c->vals)
        kn_resolved_release(c->vals, c->e->plan.graph->n_values);
    if (c->dyn)
        for (int v = 0; v < c->e->plan.graph->n_values; v++)
            kn_free(c->dyn[v]);
    if (c->out_buf)
        for (int i = 0; i < c->e->plan.graph->n_outputs; i++)
            kn_free(c->out_buf[i]);
    if (c->runs)
        for (int i = 0; i < c->e->plan.graph->n_nodes; i++) {
            kn_plugin_run *r = &c->runs[i];
            if (r->inst.ops && !r->shared && r->inst.self)
                r->inst.ops->destroy(r->inst.self);
            kn_free(r->ws);
        }
    kn_free(c->runs);
    kn_free(c->in_shape);
    kn_free(c->in_shape_set);
    kn_free(c->in_data);
    kn_free(c->in_size);
    kn_free(c->out_user);
    kn_free(c->out_user_size);
    kn_free(c->out_buf);
    kn_free(c->out_cap);
    kn_free(c->vals);
    kn_free(c->in_arena);
    kn_free(c->offsets);
    kn_free(c->alias);
    kn_free(c->dyn);
    kn_free(c->deferred);
    kn_free(c->arena);
    kn_free(c);
}

kiln_status kiln_context_set_threads(kiln_context *c, int threads) {
    if (c == NULL || threads < 1 || threads > 1024)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "thread count must be between 1 and 1024");
    kn_threadpool *p = kn_threadpool_create(threads);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "cannot start %d threads", threads);
    kn_threadpool_destroy(c->pool);
    c->pool = p;
    c->threads = threads;
    return KILN_OK;
}

static int find_io(const kn_graph *g, const int *list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(g->values[list[i]].name, name) == 0)
            return i;
    return -1;
}

static kiln_status no_such(const kn_graph *g, const int *list, int n, const char *what,
                           const char *name) {
    char names[512];
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < n && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s'%s'", i ? ", " : "",
                                 g->values[list[i]].name);
    return kn_error(KILN_ERR_NOT_FOUND, "no %s named '%s' (the model has: %s)", what, name, names);
}

kiln_status kiln_context_set_input_shape(kiln_context *c, const char *name, int rank,
                                         const int64_t *dims) {
    if (c == NULL || name == NULL || (dims == NULL && rank > 0))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_input_shape: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    int i = find_io(g, g->inputs, g->n_inputs, name);
    if (i < 0)
        return no_such(g, g->inputs, g->n_inputs, "input", name);
    const kn_value *v = &g->values[g->inputs[i]];
    if (rank != v->rank)
        return kn_error(KILN_ERR_SHAPE, "input '%s' has rank %d, got a shape of rank %d", name,
                        v->rank, rank);
    const kn_profile *p = c->e->input_profile[i];
    for (int d = 0; d < rank; d++) {
        if (v->dims[d].sym == NULL && dims[d] != v->dims[d].value)
            return kn_error(KILN_ERR_SHAPE, "input '%s' axis %d is fixed at %lld, got %lld", name,
                            d, (long long)v->dims[d].value, (long long)dims[d]);
        if (v->dims[d].sym != NULL && p != NULL && (dims[d] < p->min[d] || dims[d] > p->max[d]))
            return kn_error(KILN_ERR_SHAPE,
                            "input '%s' axis %d (%s): %lld is outside the profile range "
                            "[%lld, %lld]",
                            name, d, v->dims[d].sym, (long long)dims[d], (long long)p->min[d],
                            (long long)p->max[d]);
        if (dims[d] < 0)
            return kn_error(KILN_ERR_SHAPE, "input '%s' axis %d: negative dim %lld", name, d,
                            (long long)dims[d]);
    }
    kn_shape s = {.rank = rank};
    memcpy(s.d, dims, (size_t)rank * sizeof(int64_t));
    if (!c->in_shape_set[i] || !kn_shape_equal(&s, &c->in_shape[i]))
        c->resolved = false;
    c->in_shape[i] = s;
    c->in_shape_set[i] = true;
    return KILN_OK;
}

static void release_resolution(kiln_context *c) {
    const kn_graph *g = c->e->plan.graph;
    kn_resolved_release(c->vals, g->n_values);
    c->executed = false;
}

/* Infer every shape for the current input shapes and lay out the arena. */
static const kiln_plugin_instance *context_plugin(void *user, const kn_node *n, int index) {
    (void)n;
    return &((kiln_context *)user)->runs[index].inst;
}

kiln_status kn_context_plugin_shapes(kiln_context *c, int node) {
    const kn_node *n = &c->e->plan.graph->nodes[node];
    kn_tensor in[64], out[64];
    if (n->n_in > 64 || n->n_out > 64)
        return kn_error(KILN_ERR_PLUGIN, "node '%s' has too many inputs or outputs", n->name);
    for (int j = 0; j < n->n_in; j++)
        in[j] = n->in[j] >= 0 ? c->vals[n->in[j]].t : (kn_tensor){0};
    for (int j = 0; j < n->n_out; j++)
        out[j] = n->out[j] >= 0 ? c->vals[n->out[j]].t : (kn_tensor){0};
    return kn_plugin_shapes_changed(n, &c->runs[node], in, out);
}

/* A Transpose that only moves size-1 dims keeps every byte where it is. */
static bool transpose_is_view(const kn_node *n, const kn_shape *in) {
    if (strcmp(n->op_type, "Transpose") != 0 || n->domain[0] != '\0')
        return false;
    const int64_t *perm;
    int64_t np = kn_attr_ints(n, "perm", &perm);
    if (np != in->rank)
        return false;
    int64_t last = -1;
    for (int64_t i = 0; i < np; i++) {
        if (perm[i] < 0 || perm[i] >= in->rank)
            return false;
        if (in->d[perm[i]] == 1)
            continue;
        if (perm[i] < last)
            return false;
        last = perm[i];
    }
    return true;
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity, and Transposes that move only size-1 dims,
 * only relabel their input's bytes: their output shares the input's arena memory, and the
 * executor skips them. */
static void alias_views(kiln_context *c) {
    const kn_graph *g = c->e->plan.graph;
    for (int v = 0; v < g->n_values; v++)
        c->alias[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || c->deferred[i] || n->n_in < 1 || n->n_out != 1 || n->in[0] < 0 ||
            n->out[0] < 0 || !c->in_arena[n->out[0]])
            continue;
        const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
        int x = n->in[0], y = n->out[0];
        if (op == NULL || (!(op->flags & KN_OP_VIEW) && !transpose_is_view(n, &c->vals[x].t.shape)))
            continue;
        int root = c->alias[x] >= 0 ? c->alias[x] : x;
        if (!c->in_arena[root] ||
            kn_tensor_nbytes(&c->vals[y].t) != kn_tensor_nbytes(&c->vals[root].t))
            continue;
        c->alias[y] = root;
        c->in_arena[y] = false;
    }
}

kiln_status kn_context_resolve(kiln_context *c) {
    if (c->resolved)
        return KILN_OK;
    const kn_graph *g = c->e->plan.graph;
    release_resolution(c);
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_value *v = &g->values[g->inputs[i]];
        if (!c->in_shape_set[i])
            return kn_error(KILN_ERR_SHAPE, "input '%s' has dynamic dims: set its shape first",
                            v->name);
        kn_resolved *r = &c->vals[g->inputs[i]];
        memset(r, 0, sizeof *r);
        r->t.dtype = v->dtype;
        r->t.shape = c->in_shape[i];
        r->known = true;
    }
    kn_resolve_opts opts = {
        .max_eval_elems = KN_RUNTIME_EVAL_ELEMS, .plugin_of = context_plugin, .plugin_user = c};
    KN_TRY(kn_resolve(g, c->vals, c->deferred, &opts));
    for (int v = 0; v < g->n_values; v++) {
        const kn_resolved *r = &c->vals[v];
        c->in_arena[v] =
            r->known && r->t.data == NULL && !g->values[v].is_input && g->values[v].producer >= 0;
    }
    alias_views(c);
    size_t total = 0;
    KN_TRY(kn_memory_plan(g, c->vals, c->in_arena, c->alias, c->offsets, &total));
    /* Never left NULL: arena + 0 must stay a valid pointer for zero-sized values. */
    if (total > c->arena_size || c->arena == NULL) {
        void *a = kn_aligned_alloc(total > 0 ? total : 1, KN_ARENA_ALIGN);
        if (a == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "cannot allocate a %zu-byte activation arena",
                            total);
        kn_free(c->arena);
        c->arena = a;
        c->arena_size = total;
    }
    for (int v = 0; v < g->n_values; v++)
        if (c->in_arena[v])
            c->vals[v].t.data = (char *)c->arena + c->offsets[v];
    for (int v = 0; v < g->n_values; v++)
        if (c->alias[v] >= 0)
            c->vals[v].t.data = c->vals[c->alias[v]].t.data;
    for (int i = 0; i < g->n_nodes; i++)
        if (c->runs[i].inst.ops != NULL && !c->deferred[i])
            KN_TRY(kn_context_plugin_shapes(c, i));
    c->resolved = true;
    return KILN_OK;
}

kiln_status kiln_context_get_output_shape(kiln_context *c, const char *name, int *rank,
                                          int64_t *dims) {
    if (c == NULL || name == NULL || rank == NULL || dims == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_get_output_shape: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    int i = find_io(g, g->outputs, g->n_outputs, name);
    if (i < 0)
        return no_such(g, g->outputs, g->n_outputs, "output", name);
    KN_TRY(kn_context_resolve(c));
    const kn_resolved *r = &c->vals[g->outputs[i]];
    if (!r->known && !c->executed)
        return kn_error(KILN_ERR_SHAPE,
                        "output '%s' has a data-dependent shape: it is known "
                        "only after execute",
                        name);
    *rank = r->t.shape.rank;
    memcpy(dims, r->t.shape.d, (size_t)r->t.shape.rank * sizeof(int64_t));
    return KILN_OK;
}

kiln_status kiln_context_set_input(kiln_context *c, const char *name, const void *data,
                                   size_t size) {
    if (c == NULL || name == NULL || (data == NULL && size > 0))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_input: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    int i = find_io(g, g->inputs, g->n_inputs, name);
    if (i < 0)
        return no_such(g, g->inputs, g->n_inputs, "input", name);
    c->in_data[i] = data;
    c->in_size[i] = size;
    return KILN_OK;
}

kiln_status kiln_context_set_output(kiln_context *c, const char *name, void *data, size_t size) {
    if (c == NULL || name == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_output: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    int i = find_io(g, g->outputs, g->n_outputs, name);
    if (i < 0)
        return no_such(g, g->outputs, g->n_outputs, "output", name);
    c->out_user[i] = data;
    c->out_user_size[i] = size;
    return KILN_OK;
}
