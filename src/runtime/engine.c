#include "runtime/engine.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "ir/placement.h"
#include "ops/op.h"
#include "runtime/memory_plan.h"
#include "shape/string_move.h"

#include <string.h>

#define KN_PLUGIN_MAX_IO_ENGINE KN_MAX_NODE_IO

static kiln_status prepare_node(kiln_engine *e, int i) {
    const kn_graph *g = e->plan.graph;
    const kn_node *n = &g->nodes[i];
    kn_backend *b = kn_engine_node_backend(e, i);
    if (kn_node_copy_kind(n) != KN_COPY_NONE)
        return KILN_OK; /* the executor runs copies through the backend's copy */
    const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
    if (op != NULL && (op->flags & KN_OP_SUBGRAPH)) {
        if (e->node_backend[i] != 0)
            return kn_error(KILN_ERR_PLAN, "node '%s' (%s) runs subgraphs and must be on the host",
                            n->name, n->op_type);
        return KILN_OK; /* the executor runs it with its subgraph executor (subgraph.c) */
    }
    if (kn_is_plugin_node(n)) {
        e->kernels[i] = &kn_plugin_kernel;
        if (b->iface->plugin_kernel != NULL)
            e->kernels[i] = b->iface->plugin_kernel(b, &kn_plugin_kernel);
        KN_TRY(kn_plugin_create_for_node(e->registry, n, &e->plugins[i]));
        return kn_plugin_check_backend(n, &e->plugins[i], b->iface->name);
    }
    if (kn_string_moves_in(g, n)) { /* on the host: placement keeps strings there */
        e->kernels[i] = &kn_string_move_kernel;
        return KILN_OK;
    }
    const kn_kernel *k = b->iface->find_kernel(b, n->domain, n->op_type);
    if (k == NULL)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "node '%s': the %s backend has no kernel for op "
                        "'%s'%s%s",
                        n->name, b->iface->name, n->op_type, n->domain[0] ? " in domain " : "",
                        n->domain);
    e->kernels[i] = k;
    if (k->prepare == NULL)
        return KILN_OK;
    kn_tensor in[KN_MAX_NODE_IO];
    if (n->n_in > KN_MAX_NODE_IO)
        return kn_error(KILN_ERR_UNSUPPORTED, "node '%s' has more than %d inputs", n->name,
                        KN_MAX_NODE_IO);
    for (int j = 0; j < n->n_in; j++) {
        memset(&in[j], 0, sizeof in[j]);
        if (n->in[j] < 0)
            continue;
        const kn_value *v = &g->values[n->in[j]];
        if (v->data != NULL) {
            in[j] = kn_value_tensor(v);
        } else {
            in[j].dtype = v->dtype;
            kn_value_shape(v, &in[j].shape);
        }
    }
    kiln_status rc = k->prepare(n, n->n_in, in, &e->states[i]);
    if (rc != KILN_OK)
        return kn_error_prefix(rc, "node '%s' (%s): ", n->name, n->op_type);
    return KILN_OK;
}

/* Each node's thread count (KN_ATTR_THREADS): an int in [1, KN_MAX_THREADS] on a host node. */
static kiln_status read_thread_counts(kiln_engine *e) {
    const kn_graph *g = e->plan.graph;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        const kn_attr *a = kn_node_attr(n, KN_ATTR_THREADS);
        if (a == NULL)
            continue;
        if (a->type != KN_ATTR_INT)
            return kn_error(KILN_ERR_PLAN, "node '%s' (%s): attribute %s must be an int", n->name,
                            n->op_type, KN_ATTR_THREADS);
        if (a->i < 1 || a->i > KN_MAX_THREADS)
            return kn_error(KILN_ERR_PLAN,
                            "node '%s' (%s): attribute %s is %lld, must be between 1 and %d",
                            n->name, n->op_type, KN_ATTR_THREADS, (long long)a->i, KN_MAX_THREADS);
        if (e->node_backend[i] != 0)
            return kn_error(KILN_ERR_PLAN, "node '%s' (%s): attribute %s on a %s node (host only)",
                            n->name, n->op_type, KN_ATTR_THREADS,
                            e->backends[e->node_backend[i]]->iface->name);
        e->node_threads[i] = (uint16_t)a->i;
    }
    return KILN_OK;
}

/* Find (or load) every backend the plan places nodes on. */
static kiln_status bind_backends(kiln_engine *e) {
    const kn_graph *g = e->plan.graph;
    e->backends[0] = kn_backend_host();
    e->n_backends = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        const char *name = kn_node_backend(&g->nodes[i]);
        int k = 0;
        while (k < e->n_backends && strcmp(e->backends[k]->iface->name, name) != 0)
            k++;
        if (k == e->n_backends) {
            if (k == KN_MAX_PLAN_BACKENDS)
                return kn_error(KILN_ERR_PLAN, "the plan uses more than %d backends",
                                KN_MAX_PLAN_BACKENDS);
            kiln_status rc = kn_backend_get(name, &e->backends[k]);
            if (rc != KILN_OK)
                return kn_error_prefix(rc,
                                       "the plan places node '%s' on backend '%s', which "
                                       "cannot run here: ",
                                       g->nodes[i].name, name);
            e->n_backends++;
        }
        e->node_backend[i] = (uint8_t)k;
    }
    return KILN_OK;
}

static int space_of_backend(const kiln_engine *e, int k) {
    return e->backends[k]->iface->mem == KN_MEM_DEVICE ? k : 0;
}

/* Which memory space holds each value, and a check that every node reads its inputs from the
 * space its backend reads them in: a plan whose copies do not match its placement is refused
 * here rather than handing a kernel a pointer it cannot use. */
static kiln_status place_values(kiln_engine *e) {
    const kn_graph *g = e->plan.graph;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        int space =
            kn_node_copy_kind(n) == KN_COPY_TO_HOST ? 0 : space_of_backend(e, e->node_backend[i]);
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0)
                e->value_space[n->out[j]] = (uint8_t)space;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        kn_copy_kind copy = kn_node_copy_kind(n);
        int space = space_of_backend(e, e->node_backend[i]);
        if (copy != KN_COPY_NONE && space == 0)
            return kn_error(KILN_ERR_PLAN, "copy node '%s' is not placed on a device backend",
                            n->name);
        uint64_t host_in = kn_node_host_inputs(n);
        const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
        if (op != NULL && (op->flags & KN_OP_SHAPE_ONLY))
            continue; /* reads its inputs' shapes only */
        for (int j = 0; j < n->n_in; j++) {
            int v = n->in[j];
            if (v < 0 || g->values[v].data != NULL)
                continue; /* constants are mirrored wherever they are read */
            int want = copy == KN_COPY_TO_DEVICE || (j < 64 && (host_in >> j) & 1) ? 0 : space;
            if (e->value_space[v] != want)
                return kn_error(KILN_ERR_PLAN,
                                "node '%s' (%s) reads '%s' from %s memory but the value lives in "
                                "%s memory: the plan's copies do not match its placement",
                                n->name, n->op_type, g->values[v].name,
                                want ? e->backends[want]->iface->name : "host",
                                e->value_space[v] ? e->backends[e->value_space[v]]->iface->name
                                                  : "host");
        }
    }
    /* A graph input bound as device memory may only feed copies to the device and ops that
     * read nothing but its shape (Shape, Size): the first other reader, if any, is kept for
     * the message that refuses such a binding. */
    for (int k = 0; k < g->n_inputs; k++) {
        e->input_host_reader[k] = -1;
        for (int i = 0; i < g->n_nodes && e->input_host_reader[k] < 0; i++) {
            const kn_node *n = &g->nodes[i];
            const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
            if (n->dead || kn_node_copy_kind(n) == KN_COPY_TO_DEVICE ||
                (op != NULL && (op->flags & KN_OP_SHAPE_ONLY)))
                continue;
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] == g->inputs[k])
                    e->input_host_reader[k] = i;
        }
    }
    for (int i = 0; i < g->n_outputs; i++)
        if (e->value_space[g->outputs[i]] != 0)
            return kn_error(KILN_ERR_PLAN, "graph output '%s' is not in host memory",
                            g->values[g->outputs[i]].name);
    return KILN_OK;
}

/* Constants read by nodes of device backend k go into one device buffer, uploaded once: the
 * engine stays immutable and every context shares the copy. */
static kiln_status upload_weights(kiln_engine *e, int k) {
    const kn_graph *g = e->plan.graph;
    kn_backend *b = e->backends[k];
    kn_device_weights *w = &e->weights[k];
    w->ptr = kn_calloc((size_t)g->n_values + 1, sizeof *w->ptr);
    if (w->ptr == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating the engine");
    size_t *at = kn_calloc((size_t)g->n_values + 1, sizeof *at);
    if (at == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating the engine");
    size_t total = 0;
    for (int v = 0; v < g->n_values; v++)
        at[v] = KN_NO_OFFSET;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || e->node_backend[i] != k || kn_node_copy_kind(n) != KN_COPY_NONE)
            continue;
        uint64_t host_in = kn_node_host_inputs(n);
        for (int j = 0; j < n->n_in; j++) {
            int v = n->in[j];
            if (v < 0 || g->values[v].data == NULL || at[v] != KN_NO_OFFSET ||
                (j < 64 && (host_in >> j) & 1))
                continue;
            kn_tensor t = kn_value_tensor(&g->values[v]);
            at[v] = total;
            total += (kn_tensor_nbytes(&t) + KN_ARENA_ALIGN - 1) / KN_ARENA_ALIGN * KN_ARENA_ALIGN;
        }
    }
    kiln_status rc = KILN_OK;
    kn_stream *s = NULL;
    if (total == 0)
        goto out;
    if ((rc = b->iface->buffer_alloc(b, KN_MEM_DEVICE, total, &w->buf)) != KILN_OK)
        goto out;
    if (b->iface->stream_create && (rc = b->iface->stream_create(b, &s)) != KILN_OK)
        goto out;
    for (int v = 0; v < g->n_values && rc == KILN_OK; v++) {
        if (at[v] == KN_NO_OFFSET)
            continue;
        kn_tensor t = kn_value_tensor(&g->values[v]);
        w->ptr[v] = (char *)w->buf.base + at[v];
        rc = b->iface->copy(b, s, w->ptr[v], KN_MEM_DEVICE, t.data, KN_MEM_HOST,
                            kn_tensor_nbytes(&t));
    }
    if (rc == KILN_OK && b->iface->stream_sync)
        rc = b->iface->stream_sync(b, s);
    if (s != NULL)
        b->iface->stream_destroy(b, s);
out:
    kn_free(at);
    if (rc != KILN_OK)
        return kn_error_prefix(rc, "uploading weights to %s: ", b->iface->name);
    return KILN_OK;
}

static const kiln_plugin_instance *engine_plugin(void *user, const kn_node *n, int index) {
    (void)n;
    return &((kiln_engine *)user)->plugins[index];
}

/* Give each plugin its profile ranges: resolve the graph at the profile's min, opt and max. */
static kiln_status configure_plugins(kiln_engine *e) {
    const kn_graph *g = e->plan.graph;
    bool any = false;
    for (int i = 0; i < g->n_nodes; i++)
        any |= kn_is_plugin_node(&g->nodes[i]);
    if (!any)
        return KILN_OK;
    size_t nv = (size_t)g->n_values + 1;
    kn_resolved *r[3] = {kn_calloc(nv, sizeof(kn_resolved)), kn_calloc(nv, sizeof(kn_resolved)),
                         kn_calloc(nv, sizeof(kn_resolved))};
    kiln_status rc = KILN_OK;
    int done = 0;
    if (!r[0] || !r[1] || !r[2]) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto out_free;
    }
    kn_resolve_opts opts = {
        .max_eval_elems = KN_RUNTIME_EVAL_ELEMS, .plugin_of = engine_plugin, .plugin_user = e};
    for (; done < 3 && rc == KILN_OK; done++) {
        for (int i = 0; i < g->n_inputs; i++) {
            const kn_value *v = &g->values[g->inputs[i]];
            const kn_profile *p = e->input_profile[i];
            kn_resolved *x = &r[done][g->inputs[i]];
            x->t.dtype = v->dtype;
            x->t.shape.rank = v->rank;
            for (int d = 0; d < v->rank; d++)
                x->t.shape.d[d] = p == NULL   ? v->dims[d].value
                                  : done == 0 ? p->min[d]
                                  : done == 1 ? p->opt[d]
                                              : p->max[d];
            x->known = v->dtype != KILN_DTYPE_CONTAINER; /* sized by its value alone */
        }
        rc = kn_resolve(g, r[done], NULL, &opts);
    }
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++) {
        const kn_node *n = &g->nodes[i];
        if (!kn_is_plugin_node(n))
            continue;
        kn_tensor t[6][KN_PLUGIN_MAX_IO_ENGINE];
        if (n->n_in > KN_PLUGIN_MAX_IO_ENGINE || n->n_out > KN_PLUGIN_MAX_IO_ENGINE)
            continue;
        for (int k = 0; k < 3; k++) {
            for (int j = 0; j < n->n_in; j++)
                t[k][j] = n->in[j] >= 0 ? r[k][n->in[j]].t : (kn_tensor){0};
            for (int j = 0; j < n->n_out; j++)
                t[3 + k][j] = n->out[j] >= 0 ? r[k][n->out[j]].t : (kn_tensor){0};
        }
        rc = kn_plugin_configure(n, &e->plugins[i], t[0], t[1], t[2], t[3], t[4], t[5]);
    }
out_free:
    for (int k = 0; k < 3; k++) {
        if (r[k] && k < done)
            kn_resolved_release(r[k], g->n_values);
        kn_free(r[k]);
    }
    return rc;
}

kiln_status kn_engine_create(kn_plan *plan, kiln_registry *registry, kiln_engine **out) {
    kiln_engine *e = kn_calloc(1, sizeof *e);
    if (e == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating the engine");
    e->plan = *plan;
    memset(plan, 0, sizeof *plan);
    e->registry = registry;
    const kn_graph *g = e->plan.graph;
    e->kernels = kn_calloc((size_t)g->n_nodes + 1, sizeof *e->kernels);
    e->states = kn_calloc((size_t)g->n_nodes + 1, sizeof *e->states);
    e->node_threads = kn_calloc((size_t)g->n_nodes + 1, sizeof *e->node_threads);
    e->input_profile = kn_calloc((size_t)g->n_inputs + 1, sizeof *e->input_profile);
    e->plugins = kn_calloc((size_t)g->n_nodes + 1, sizeof *e->plugins);
    e->node_backend = kn_calloc((size_t)g->n_nodes + 1, sizeof *e->node_backend);
    e->value_space = kn_calloc((size_t)g->n_values + 1, sizeof *e->value_space);
    e->input_host_reader = kn_calloc((size_t)g->n_inputs + 1, sizeof *e->input_host_reader);
    kiln_status rc = KILN_OK;
    if (!e->kernels || !e->states || !e->node_threads || !e->input_profile || !e->plugins ||
        !e->node_backend || !e->value_space || !e->input_host_reader) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory creating the engine");
        goto fail;
    }
    for (int i = 0; i < g->n_inputs; i++)
        for (int p = 0; p < e->plan.n_profiles; p++)
            if (strcmp(e->plan.profiles[p].input, g->values[g->inputs[i]].name) == 0)
                e->input_profile[i] = &e->plan.profiles[p];
    if ((rc = kn_check_in_place_inputs(g)) != KILN_OK || (rc = bind_backends(e)) != KILN_OK ||
        (rc = place_values(e)) != KILN_OK || (rc = read_thread_counts(e)) != KILN_OK)
        goto fail;
    for (int k = 1; k < e->n_backends; k++)
        if (space_of_backend(e, k) == k && (rc = upload_weights(e, k)) != KILN_OK)
            goto fail;
    for (int i = 0; i < g->n_nodes; i++)
        if ((rc = prepare_node(e, i)) != KILN_OK)
            goto fail;
    if ((rc = configure_plugins(e)) != KILN_OK)
        goto fail;
    *out = e;
    return KILN_OK;
fail:
    kiln_engine_destroy(e);
    return rc;
}

kiln_status kiln_engine_load_memory(const void *data, size_t size, kiln_registry *registry,
                                    kiln_engine **out) {
    if (data == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_load_memory: NULL argument");
    *out = NULL;
    void *copy = kn_aligned_alloc(size ? size : 1, 64);
    if (copy == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory copying a %zu-byte plan", size);
    memcpy(copy, data, size);
    kn_plan plan;
    kiln_status rc = kn_plan_read(copy, size, &plan);
    if (rc != KILN_OK) {
        kn_free(copy);
        return rc;
    }
    rc = kn_engine_create(&plan, registry, out);
    if (rc != KILN_OK) {
        kn_free(copy);
        return rc;
    }
    (*out)->copy = copy;
    return KILN_OK;
}

kiln_status kiln_engine_load_file(const char *path, kiln_registry *registry, kiln_engine **out) {
    if (path == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_load_file: NULL argument");
    *out = NULL;
    const void *map;
    size_t size;
    KN_TRY(kn_file_map(path, &map, &size));
    kn_plan plan;
    kiln_status rc = kn_plan_read(map, size, &plan);
    if (rc != KILN_OK) {
        kn_file_unmap(map, size);
        return kn_error_prefix(rc, "%s: ", path);
    }
    rc = kn_engine_create(&plan, registry, out);
    if (rc != KILN_OK) {
        kn_file_unmap(map, size);
        return kn_error_prefix(rc, "%s: ", path);
    }
    (*out)->map = map;
    (*out)->map_size = size;
    return KILN_OK;
}

void kiln_engine_destroy(kiln_engine *e) {
    if (e == NULL)
        return;
    if (e->plan.graph != NULL)
        for (int i = 0; i < e->plan.graph->n_nodes; i++)
            if (e->states && e->states[i] && e->kernels[i] && e->kernels[i]->release)
                e->kernels[i]->release(e->states[i]);
    if (e->plugins && e->plan.graph)
        for (int i = 0; i < e->plan.graph->n_nodes; i++)
            kn_plugin_instance_destroy(&e->plugins[i]);
    kn_free(e->plugins);
    for (int k = 1; k < e->n_backends; k++) {
        kn_device_weights *w = &e->weights[k];
        if (w->buf.base != NULL)
            e->backends[k]->iface->buffer_free(e->backends[k], &w->buf);
        kn_free(w->ptr);
    }
    kn_free(e->node_backend);
    kn_free(e->value_space);
    kn_free(e->input_host_reader);
    kn_plan_clear(&e->plan);
    kn_free(e->kernels);
    kn_free(e->states);
    kn_free(e->node_threads);
    kn_free(e->input_profile);
    if (e->map)
        kn_file_unmap(e->map, e->map_size);
    kn_free(e->copy);
    kn_free(e);
}

int kiln_engine_num_inputs(const kiln_engine *e) {
    return e ? e->plan.graph->n_inputs : 0;
}

int kiln_engine_num_outputs(const kiln_engine *e) {
    return e ? e->plan.graph->n_outputs : 0;
}

const char *kiln_engine_device_backend(const kiln_engine *e) {
    for (int k = 1; e && k < e->n_backends; k++)
        if (e->backends[k]->iface->mem == KN_MEM_DEVICE)
            return e->backends[k]->iface->name;
    return NULL;
}

static void fill_info(const kiln_engine *e, int v, const kn_profile *p, kiln_io_info *info) {
    const kn_value *val = &e->plan.graph->values[v];
    memset(info, 0, sizeof *info);
    info->name = val->name;
    info->dtype = (kiln_dtype)val->dtype;
    info->rank = val->rank < 0 ? 0 : val->rank;
    info->kind = val->dtype == KILN_DTYPE_CONTAINER ? (kiln_io_kind)val->container : KILN_IO_TENSOR;
    for (int d = 0; d < info->rank; d++) {
        info->symbols[d] = val->dims[d].sym;
        int64_t fixed = val->dims[d].sym ? -1 : val->dims[d].value;
        info->dims[d] = fixed;
        info->min[d] = info->opt[d] = info->max[d] = fixed;
        if (p != NULL && d < p->rank) {
            info->min[d] = p->min[d];
            info->opt[d] = p->opt[d];
            info->max[d] = p->max[d];
            if (fixed < 0)
                info->dims[d] = p->max[d];
        }
    }
}

kiln_status kiln_engine_input_info(const kiln_engine *e, int index, kiln_io_info *info) {
    if (e == NULL || info == NULL || index < 0 || index >= e->plan.graph->n_inputs)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "input index %d out of range", index);
    fill_info(e, e->plan.graph->inputs[index], e->input_profile[index], info);
    return KILN_OK;
}

kiln_status kiln_engine_output_info(const kiln_engine *e, int index, kiln_io_info *info) {
    if (e == NULL || info == NULL || index < 0 || index >= e->plan.graph->n_outputs)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "output index %d out of range", index);
    fill_info(e, e->plan.graph->outputs[index], NULL, info);
    return KILN_OK;
}
