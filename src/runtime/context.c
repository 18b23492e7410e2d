#include "core/alloc.h"
#include "ops/op.h"
#include "runtime/capture.h"
#include "runtime/engine.h"
#include "ir/placement.h"
#include "runtime/memory_plan.h"
#include "runtime/profile.h"
#include "runtime/replay.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int default_threads(const kiln_engine *e) {
    int t = e->plan.threads;
    if (t <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        t = n > 0 ? (int)n : 1;
    }
    return t;
}

/* One stream per backend, one event per copy node (where the backend has events). */
static kiln_status create_streams(kiln_context *c) {
    const kiln_engine *e = c->e;
    for (int k = 1; k < e->n_backends; k++) {
        kn_backend *b = e->backends[k];
        if (b->iface->stream_create != NULL)
            KN_TRY(b->iface->stream_create(b, &c->streams[k]));
    }
    const kn_graph *g = e->plan.graph;
    for (int i = 0; i < g->n_nodes; i++) {
        kn_backend *b = kn_engine_node_backend(e, i);
        if (kn_node_copy_kind(&g->nodes[i]) != KN_COPY_NONE && b->iface->event_create != NULL)
            KN_TRY(b->iface->event_create(b, &c->copy_done[i]));
    }
    return KILN_OK;
}

static void destroy_streams(kiln_context *c) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    for (int k = 1; k < e->n_backends; k++)
        if (c->streams[k] != NULL && e->backends[k]->iface->stream_sync != NULL)
            (void)e->backends[k]->iface->stream_sync(e->backends[k], c->streams[k]);
    if (c->copy_done)
        for (int i = 0; i < g->n_nodes; i++)
            if (c->copy_done[i] != NULL) {
                kn_backend *b = kn_engine_node_backend(e, i);
                b->iface->event_destroy(b, c->copy_done[i]);
            }
    for (int k = 1; k < e->n_backends; k++)
        if (c->streams[k] != NULL)
            e->backends[k]->iface->stream_destroy(e->backends[k], c->streams[k]);
}

static void free_space(kiln_context *c, int k) {
    kn_space_arena *a = &c->arenas[k];
    if (k == 0)
        kn_free(a->base);
    else if (a->buf.base != NULL)
        c->e->backends[k]->iface->buffer_free(c->e->backends[k], &a->buf);
    memset(a, 0, sizeof *a);
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
    c->out_data = kn_calloc(no, sizeof *c->out_data);
    c->out_in_place = kn_calloc(no, sizeof *c->out_in_place);
    c->vals = kn_calloc(nv, sizeof *c->vals);
    c->in_arena = kn_calloc(nv, sizeof *c->in_arena);
    c->offsets = kn_calloc(nv, sizeof *c->offsets);
    c->alias = kn_calloc(nv, sizeof *c->alias);
    c->dyn = kn_calloc(nv, sizeof *c->dyn);
    c->deferred = kn_calloc(nn, sizeof *c->deferred);
    c->runs = kn_calloc(nn, sizeof *c->runs);
    c->locals = kn_calloc(nn, sizeof *c->locals);
    c->dyn_dev = kn_calloc(nv, sizeof *c->dyn_dev);
    c->copy_done = kn_calloc(nn, sizeof *c->copy_done);
    c->copy_pending = kn_calloc(nn, sizeof *c->copy_pending);
    c->in_device = kn_calloc(ni, sizeof *c->in_device);
    c->out_device = kn_calloc(no, sizeof *c->out_device);
    if (!c->dyn_dev || !c->copy_done || !c->copy_pending || !c->in_device || !c->out_device ||
        !c->runs || !c->locals || !c->in_shape || !c->in_shape_set || !c->in_data || !c->in_size ||
        !c->out_user || !c->out_user_size || !c->out_buf || !c->out_cap || !c->out_data ||
        !c->out_in_place || !c->vals || !c->in_arena || !c->offsets || !c->alias || !c->dyn ||
        !c->deferred) {
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
    if (rc == KILN_OK)
        rc = create_streams(c);
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
    destroy_streams(c);
    /* After the streams: no enqueued work may still use a kernel's state. */
    if (c->locals)
        for (int i = 0; i < c->e->plan.graph->n_nodes; i++)
            if (c->locals[i] != NULL)
                c->locals[i]->release(c->locals[i]);
    kn_free(c->locals);
    kn_replay_destroy(c);
    kn_threadpool_destroy(c->pool);
    if (c->vals)
        kn_resolved_release(c->vals, c->e->plan.graph->n_values);
    if (c->dyn)
        for (int v = 0; v < c->e->plan.graph->n_values; v++)
            kn_free(c->dyn[v]);
    if (c->dyn_dev)
        for (int v = 0; v < c->e->plan.graph->n_values; v++)
            if (c->dyn_dev[v].base != NULL) {
                kn_backend *b = c->e->backends[c->e->value_space[v]];
                b->iface->buffer_free(b, &c->dyn_dev[v]);
            }
    if (c->out_buf)
        for (int i = 0; i < c->e->plan.graph->n_outputs; i++)
            kn_free(c->out_buf[i]);
    if (c->runs)
        for (int i = 0; i < c->e->plan.graph->n_nodes; i++) {
            kn_plugin_run *r = &c->runs[i];
            if (r->inst.ops && !r->shared && r->inst.self)
                r->inst.ops->destroy(r->inst.self);
            kn_free(r->ws);
            if (r->dws.base != NULL)
                r->wb->iface->buffer_free(r->wb, &r->dws);
        }
    kn_free(c->runs);
    kn_profile_release(c);
    kn_profile_run_release(c);
    kn_capture_destroy(c->capture, c->e->plan.graph->n_values);
    kn_free(c->in_shape);
    kn_free(c->in_shape_set);
    kn_free(c->in_data);
    kn_free(c->in_size);
    kn_free(c->out_user);
    kn_free(c->out_user_size);
    kn_free(c->out_buf);
    kn_free(c->out_cap);
    kn_free(c->out_data);
    kn_free(c->out_in_place);
    kn_free(c->vals);
    kn_free(c->in_arena);
    kn_free(c->offsets);
    kn_free(c->alias);
    kn_free(c->dyn);
    kn_free(c->deferred);
    kn_free(c->dyn_dev);
    kn_free(c->copy_done);
    kn_free(c->copy_pending);
    kn_free(c->in_device);
    kn_free(c->out_device);
    for (int k = 0; k < c->e->n_backends; k++)
        free_space(c, k);
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
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    if (n->n_in > KN_MAX_NODE_IO || n->n_out > KN_MAX_NODE_IO)
        return kn_error(KILN_ERR_PLUGIN, "node '%s' has too many inputs or outputs", n->name);
    for (int j = 0; j < n->n_in; j++)
        in[j] = n->in[j] >= 0 ? c->vals[n->in[j]].t : (kn_tensor){0};
    for (int j = 0; j < n->n_out; j++)
        out[j] = n->out[j] >= 0 ? c->vals[n->out[j]].t : (kn_tensor){0};
    int k = c->e->node_backend[node];
    return kn_plugin_shapes_changed(n, &c->runs[node], in, out, c->e->backends[k], c->streams[k]);
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

/* What one resolution lays out: which values get arena memory, which share another's, where
 * each lives in its space's arena, and how large each arena must be. */
typedef struct kn_layout {
    const kn_resolved *vals;
    const bool *deferred;
    bool *in_arena;
    int *alias;
    size_t *offsets;
    size_t total[KN_MAX_PLAN_BACKENDS];
} kn_layout;

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity, and Transposes that move only size-1 dims,
 * only relabel their input's bytes: their output shares the input's arena memory (in the same
 * memory space), and the executor skips them. */
static void alias_views(const kiln_engine *e, kn_layout *L) {
    const kn_graph *g = e->plan.graph;
    for (int v = 0; v < g->n_values; v++)
        L->alias[v] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || L->deferred[i] || n->n_in < 1 || n->n_out != 1 || n->in[0] < 0 ||
            n->out[0] < 0 || !L->in_arena[n->out[0]])
            continue;
        const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
        int x = n->in[0], y = n->out[0];
        if (op == NULL || (!(op->flags & KN_OP_VIEW) && !transpose_is_view(n, &L->vals[x].t.shape)))
            continue;
        int root = L->alias[x] >= 0 ? L->alias[x] : x;
        if (!L->in_arena[root] || e->value_space[root] != e->value_space[y] ||
            kn_tensor_nbytes(&L->vals[y].t) != kn_tensor_nbytes(&L->vals[root].t))
            continue;
        L->alias[y] = root;
        L->in_arena[y] = false;
    }
}

/* Values in a device space always get arena memory: one the host evaluated at shape time is
 * uploaded there (see upload_host_values). */
static kiln_status lay_out(const kiln_engine *e, kn_layout *L, size_t *scratch) {
    const kn_graph *g = e->plan.graph;
    for (int v = 0; v < g->n_values; v++) {
        const kn_resolved *r = &L->vals[v];
        bool produced = !g->values[v].is_input && g->values[v].producer >= 0;
        L->in_arena[v] = r->known && produced && (r->t.data == NULL || e->value_space[v] != 0);
    }
    alias_views(e, L);
    bool *mask = (bool *)(scratch + g->n_values);
    for (int k = 0; k < e->n_backends; k++) {
        L->total[k] = 0;
        if (k > 0 && e->backends[k]->iface->mem != KN_MEM_DEVICE)
            continue;
        for (int v = 0; v < g->n_values; v++)
            mask[v] = L->in_arena[v] && e->value_space[v] == k;
        KN_TRY(kn_memory_plan(g, L->vals, mask, L->alias, scratch, &L->total[k]));
        for (int v = 0; v < g->n_values; v++)
            if (mask[v])
                L->offsets[v] = scratch[v];
    }
    return KILN_OK;
}

static kiln_status grow_space(kiln_context *c, int k, size_t need) {
    kn_space_arena *a = &c->arenas[k];
    /* Never left NULL: base + 0 must stay a valid pointer for zero-sized values. */
    if (need <= a->size && a->base != NULL)
        return KILN_OK;
    if (need == 0)
        need = 1;
    if (k == 0) {
        void *p = kn_aligned_alloc(need, KN_ARENA_ALIGN);
        if (p == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "cannot allocate a %zu-byte activation arena",
                            need);
        kn_free(a->base);
        a->base = p;
    } else {
        kn_backend *b = c->e->backends[k];
        /* Work in flight may still use the old arena. */
        if (a->base != NULL && b->iface->stream_sync)
            KN_TRY(b->iface->stream_sync(b, c->streams[k]));
        kn_buffer nb;
        kiln_status rc = b->iface->buffer_alloc(b, KN_MEM_DEVICE, need, &nb);
        if (rc != KILN_OK)
            return kn_error_prefix(rc, "%s activation arena (%zu bytes): ", b->iface->name, need);
        if (a->buf.base != NULL)
            b->iface->buffer_free(b, &a->buf);
        a->buf = nb;
        a->base = nb.base;
    }
    a->size = need;
    return KILN_OK;
}

/* Device arenas are sized once for the profile's max shapes, so they keep their address while
 * shapes change inside the profile (device work and recorded stream graphs point into them). */
static kiln_status size_device_spaces_at_max(kiln_context *c, size_t *scratch) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    bool any = false;
    for (int k = 1; k < e->n_backends; k++)
        any |= e->backends[k]->iface->mem == KN_MEM_DEVICE && c->arenas[k].base == NULL;
    if (!any)
        return KILN_OK;
    size_t nv = (size_t)g->n_values + 1;
    kn_resolved *vals = kn_calloc(nv, sizeof *vals);
    bool *deferred = kn_calloc((size_t)g->n_nodes + 1, sizeof *deferred);
    bool *in_arena = kn_calloc(nv, sizeof *in_arena);
    int *alias = kn_calloc(nv, sizeof *alias);
    size_t *offsets = kn_calloc(nv, sizeof *offsets);
    kiln_status rc = KILN_OK;
    if (!vals || !deferred || !in_arena || !alias || !offsets) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory resolving shapes");
        goto out;
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_value *v = &g->values[g->inputs[i]];
        const kn_profile *p = e->input_profile[i];
        kn_resolved *r = &vals[g->inputs[i]];
        r->t.dtype = v->dtype;
        r->t.shape.rank = v->rank;
        for (int d = 0; d < v->rank; d++)
            r->t.shape.d[d] = p != NULL ? p->max[d] : c->in_shape[i].d[d];
        r->known = true;
    }
    kn_resolve_opts opts = {
        .max_eval_elems = KN_RUNTIME_EVAL_ELEMS, .plugin_of = context_plugin, .plugin_user = c};
    if ((rc = kn_resolve(g, vals, deferred, &opts)) != KILN_OK)
        goto out;
    kn_layout L = {.vals = vals,
                   .deferred = deferred,
                   .in_arena = in_arena,
                   .alias = alias,
                   .offsets = offsets};
    if ((rc = lay_out(e, &L, scratch)) != KILN_OK)
        goto out;
    for (int k = 1; k < e->n_backends && rc == KILN_OK; k++)
        if (e->backends[k]->iface->mem == KN_MEM_DEVICE && c->arenas[k].base == NULL)
            rc = grow_space(c, k, L.total[k]);
out:
    if (vals != NULL)
        kn_resolved_release(vals, g->n_values);
    kn_free(vals);
    kn_free(deferred);
    kn_free(in_arena);
    kn_free(alias);
    kn_free(offsets);
    return rc;
}

/* A value of a device space that the host computed at shape time (a small shape-dependent
 * constant) is copied into its arena slot once per resolution. */
static kiln_status upload_host_values(kiln_context *c) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    for (int v = 0; v < g->n_values; v++) {
        kn_resolved *r = &c->vals[v];
        int k = e->value_space[v];
        if (k == 0 || !c->in_arena[v] || r->t.data == NULL)
            continue;
        kn_backend *b = e->backends[k];
        void *dst = (char *)c->arenas[k].base + c->offsets[v];
        KN_TRY(b->iface->copy(b, c->streams[k], dst, KN_MEM_DEVICE, r->t.data, KN_MEM_HOST,
                              kn_tensor_nbytes(&r->t)));
        if (r->data_owned) {
            /* The host copy must outlive the asynchronous upload. */
            if (b->iface->stream_sync)
                KN_TRY(b->iface->stream_sync(b, c->streams[k]));
            kn_free(r->t.data);
            r->data_owned = false;
        }
        r->t.data = dst;
    }
    return KILN_OK;
}

kiln_status kn_context_resolve(kiln_context *c) {
    if (c->resolved)
        return KILN_OK;
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    KN_TRY(kn_context_finish_work(c));
    c->generation++;
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
    size_t *scratch = kn_malloc(((size_t)g->n_values + 1) * (sizeof(size_t) + sizeof(bool)));
    if (scratch == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory laying out the arena");
    kn_layout L = {.vals = c->vals,
                   .deferred = c->deferred,
                   .in_arena = c->in_arena,
                   .alias = c->alias,
                   .offsets = c->offsets};
    kiln_status rc = lay_out(e, &L, scratch);
    if (rc == KILN_OK)
        rc = size_device_spaces_at_max(c, scratch);
    kn_free(scratch);
    KN_TRY(rc);
    for (int k = 0; k < e->n_backends; k++)
        if (k == 0 || e->backends[k]->iface->mem == KN_MEM_DEVICE)
            KN_TRY(grow_space(c, k, L.total[k]));
    KN_TRY(upload_host_values(c));
    for (int v = 0; v < g->n_values; v++)
        if (c->in_arena[v] && c->vals[v].t.data == NULL)
            c->vals[v].t.data = (char *)c->arenas[e->value_space[v]].base + c->offsets[v];
    for (int v = 0; v < g->n_values; v++)
        if (c->alias[v] >= 0) {
            /* A view the host also evaluated: its memory is its root's from now on. */
            if (c->vals[v].data_owned)
                kn_free(c->vals[v].t.data);
            c->vals[v].data_owned = false;
            c->vals[v].t.data = c->vals[c->alias[v]].t.data;
        }
    for (int i = 0; i < g->n_nodes; i++)
        if (c->runs[i].inst.ops != NULL && !c->deferred[i])
            KN_TRY(kn_context_plugin_shapes(c, i));
    c->resolved = true;
    return KILN_OK;
}

/* Value v's shape at the context's input shapes (what: "output" or "tensor", for the error). */
static kiln_status value_shape(kiln_context *c, int v, const char *what, const char *name,
                               int *rank, int64_t *dims) {
    KN_TRY(kn_context_resolve(c));
    const kn_resolved *r = &c->vals[v];
    if (!r->known && !c->executed)
        return kn_error(KILN_ERR_SHAPE,
                        "%s '%s' has a data-dependent shape: it is known "
                        "only after execute",
                        what, name);
    *rank = r->t.shape.rank;
    memcpy(dims, r->t.shape.d, (size_t)r->t.shape.rank * sizeof(int64_t));
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
    return value_shape(c, g->outputs[i], "output", name, rank, dims);
}

kiln_status kiln_context_get_tensor_shape(kiln_context *c, const char *name, int *rank,
                                          int64_t *dims) {
    if (c == NULL || name == NULL || rank == NULL || dims == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_get_tensor_shape: NULL argument");
    int v = kn_graph_find_value(c->e->plan.graph, name);
    if (v < 0)
        return kn_error(KILN_ERR_NOT_FOUND,
                        "no tensor named '%s' in the plan (kiln_layer_info names a layer's "
                        "inputs and outputs; others may have been fused away or folded)",
                        name);
    return value_shape(c, v, "tensor", name, rank, dims);
}

kiln_status kiln_context_set_input(kiln_context *c, const char *name, const void *data,
                                   size_t size) {
    return kiln_context_set_input_memory(c, name, data, size, KILN_MEMORY_HOST);
}

kiln_status kiln_context_set_output(kiln_context *c, const char *name, void *data, size_t size) {
    return kiln_context_set_output_memory(c, name, data, size, KILN_MEMORY_HOST);
}

static kiln_status check_memory(kiln_memory m) {
    if (m != KILN_MEMORY_HOST && m != KILN_MEMORY_DEVICE)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "unknown memory kind %d", (int)m);
    return KILN_OK;
}

kiln_status kiln_context_set_input_memory(kiln_context *c, const char *name, const void *data,
                                          size_t size, kiln_memory memory) {
    if (c == NULL || name == NULL || (data == NULL && size > 0))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_input: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    int i = find_io(g, g->inputs, g->n_inputs, name);
    if (i < 0)
        return no_such(g, g->inputs, g->n_inputs, "input", name);
    KN_TRY(check_memory(memory));
    c->in_data[i] = data;
    c->in_size[i] = size;
    c->in_device[i] = memory == KILN_MEMORY_DEVICE;
    return KILN_OK;
}

kiln_status kiln_context_set_output_memory(kiln_context *c, const char *name, void *data,
                                           size_t size, kiln_memory memory) {
    if (c == NULL || name == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_output: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    int i = find_io(g, g->outputs, g->n_outputs, name);
    if (i < 0)
        return no_such(g, g->outputs, g->n_outputs, "output", name);
    KN_TRY(check_memory(memory));
    if (memory == KILN_MEMORY_DEVICE && data == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "output '%s': a device buffer cannot be NULL",
                        name);
    c->out_user[i] = data;
    c->out_user_size[i] = size;
    c->out_device[i] = memory == KILN_MEMORY_DEVICE;
    return KILN_OK;
}
