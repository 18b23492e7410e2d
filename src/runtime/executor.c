/* Execution: bind inputs, run every node's kernel in order, copy outputs out. */
#include "core/alloc.h"
#include "core/container.h"
#include "ir/placement.h"
#include "ops/op.h"
#include "runtime/capture.h"
#include "runtime/engine.h"
#include "runtime/memory_plan.h"
#include "runtime/profile.h"
#include "runtime/replay.h"
#include "runtime/subgraph.h"

#include <stdint.h>
#include <string.h>

/* The first device backend of the plan (where device-bound inputs and outputs live). */
static int device_space(const kiln_engine *e) {
    for (int k = 1; k < e->n_backends; k++)
        if (e->backends[k]->iface->mem == KN_MEM_DEVICE)
            return k;
    return 0;
}

/* A graph input bound as device memory may only be read by copies to the device. */
static kiln_status check_device_input(const kiln_context *c, int input) {
    const kn_graph *g = c->e->plan.graph;
    int v = g->inputs[input], reader = c->e->input_host_reader[input];
    if (device_space(c->e) == 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "input '%s' is bound as device memory, but the plan runs on the host "
                        "only (build it with a device backend)",
                        g->values[v].name);
    if (reader >= 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "input '%s' is bound as device memory, but node '%s' (%s) reads "
                        "it on the host: bind host memory for it",
                        g->values[v].name, g->nodes[reader].name, g->nodes[reader].op_type);
    return KILN_OK;
}

static kiln_status bind_inputs(kiln_context *c) {
    const kn_graph *g = c->e->plan.graph;
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_value *v = &g->values[g->inputs[i]];
        kn_resolved *r = &c->vals[g->inputs[i]];
        size_t need = kn_tensor_nbytes(&r->t);
        if (c->in_data[i] == NULL && need > 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "input '%s' has no data: call "
                            "kiln_context_set_input",
                            v->name);
        if (c->in_size[i] != need) {
            char s[128];
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "input '%s' needs %zu bytes (%s %s), got %zu", v->name, need,
                            kn_dtype_name(r->t.dtype), kn_shape_str(&r->t.shape, s, sizeof s),
                            c->in_size[i]);
        }
        if (c->in_device[i])
            KN_TRY(check_device_input(c, i));
        r->t.data = (void *)c->in_data[i];
        if (v->dtype == KILN_DTYPE_CONTAINER && !c->in_device[i])
            KN_TRY(kn_container_check_kind(&r->t, v->container, v->name));
    }
    return KILN_OK;
}

static bool ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + nb && y < x + na;
}

/* Whether graph output i, bound to host memory, is written by its producer straight into the
 * caller's buffer instead of the arena: the producer is a host kernel that writes the value
 * each run into arena memory of its own (not a view, a copy node, control flow, or a value
 * evaluated when shapes were resolved or sized by data), every node reading it runs on the
 * host (a device stream's recorded graph would keep the arena's address), no other output is
 * the same value, and the buffer is large enough, aligned as the arena is, and apart from
 * every bound input. Otherwise the output is copied to the buffer after the run, as before. */
static bool output_in_place(const kiln_context *c, int i) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    int v = g->outputs[i], p = g->values[v].producer;
    void *dst = c->out_user[i];
    size_t nb = kn_tensor_nbytes(&c->vals[v].t);
    if (dst == NULL || c->out_device[i] || c->out_user_size[i] < nb || nb == 0 ||
        (uintptr_t)dst % KN_ARENA_ALIGN != 0 || p < 0 || !c->in_arena[v] || c->alias[v] >= 0 ||
        e->value_space[v] != 0 || e->node_backend[p] != 0 || c->deferred[p] ||
        e->kernels[p] == NULL || kn_node_copy_kind(&g->nodes[p]) != KN_COPY_NONE)
        return false;
    for (int j = 0; j < g->n_outputs; j++)
        if (j != i && g->outputs[j] == v)
            return false;
    for (int j = 0; j < g->n_inputs; j++)
        if (c->in_data[j] != NULL && !c->in_device[j] &&
            ranges_overlap(dst, nb, c->in_data[j], c->in_size[j]))
            return false;
    for (int k = 0; k < g->n_nodes && e->n_backends > 1; k++) {
        const kn_node *n = &g->nodes[k];
        if (n->dead || e->node_backend[k] == 0)
            continue;
        for (int m = 0; m < n->n_in; m++) {
            int x = n->in[m];
            if (x >= 0 && (x == v || c->alias[x] == v))
                return false;
        }
    }
    return true;
}

/* Point each host output the arena holds (and the views of it) at the caller's buffer when
 * it may be written in place, else back at its arena memory. */
static void place_outputs(kiln_context *c) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        c->out_in_place[i] = false;
        if (!c->in_arena[v] || c->alias[v] >= 0 || e->value_space[v] != 0)
            continue;
        void *home = (char *)c->arenas[0].base + c->offsets[v];
        void *want = output_in_place(c, i) ? c->out_user[i] : home;
        c->out_in_place[i] = want != home;
        if (c->vals[v].t.data == want)
            continue;
        c->vals[v].t.data = want;
        for (int w = 0; w < g->n_values; w++)
            if (c->alias[w] == v)
                c->vals[w].t.data = want;
    }
}

/* A node whose shapes depended on data: infer now, with every input known, and give its
 * outputs memory of their own in their space. */
static kiln_status run_deferred_infer(kiln_context *c, int node, const kn_tensor *in,
                                      kn_tensor *out) {
    const kiln_engine *e = c->e;
    const kn_node *n = &e->plan.graph->nodes[node];
    const kiln_plugin_instance *plugin = c->runs[node].inst.ops ? &c->runs[node].inst : NULL;
    kiln_status rc = kn_infer_node(n, plugin, in, out);
    if (rc == KN_NEED_DATA)
        return kn_error(KILN_ERR_INTERNAL,
                        "node '%s' (%s): shape still unknown with all input "
                        "data present",
                        n->name, n->op_type);
    if (rc != KILN_OK)
        return rc;
    for (int j = 0; j < n->n_out; j++) {
        int v = n->out[j];
        if (v < 0)
            continue;
        size_t nb = kn_tensor_nbytes(&out[j]);
        int k = e->value_space[v];
        if (k != 0) {
            kn_backend *b = e->backends[k];
            if (c->dyn_dev[v].base != NULL && c->dyn_dev[v].size < nb) {
                KN_TRY(b->iface->stream_sync(b, c->streams[k]));
                b->iface->buffer_free(b, &c->dyn_dev[v]);
                memset(&c->dyn_dev[v], 0, sizeof c->dyn_dev[v]);
            }
            if (c->dyn_dev[v].base == NULL)
                KN_TRY(b->iface->buffer_alloc(b, KN_MEM_DEVICE, nb ? nb : 1, &c->dyn_dev[v]));
            out[j].data = c->dyn_dev[v].base;
        } else {
            kn_free(c->dyn[v]);
            c->dyn[v] = kn_malloc(nb ? nb : 1);
            if (c->dyn[v] == NULL)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "node '%s': out of memory (%zu bytes)",
                                n->name, nb);
            out[j].data = c->dyn[v];
        }
        c->vals[v].t = out[j];
        c->vals[v].known = true;
    }
    if (plugin != NULL)
        KN_TRY(kn_context_plugin_shapes(c, node));
    return KILN_OK;
}

/* A control-flow node: its bodies run on the host, which learns the output shapes; the outputs
 * get memory of their own, as a deferred node's do. */
static kiln_status run_control_flow(kiln_context *c, int node, const kn_tensor *in) {
    const kn_node *n = &c->e->plan.graph->nodes[node];
    kn_tensor out[KN_MAX_NODE_IO];
    KN_TRY(kn_subgraph_run_node(c->e->backends[0], n, in, out, c->pool));
    for (int j = 0; j < n->n_out; j++) {
        int v = n->out[j];
        if (v < 0)
            continue;
        kn_free(c->dyn[v]);
        c->dyn[v] = out[j].data;
        c->vals[v].t = out[j];
        c->vals[v].known = true;
    }
    return KILN_OK;
}

static kiln_status wait_copy(kiln_context *c, int node) {
    if (!c->copy_pending[node])
        return KILN_OK;
    kn_backend *b = kn_engine_node_backend(c->e, node);
    c->copy_pending[node] = false;
    c->pending_copies--;
    if (c->copy_done[node] != NULL)
        return b->iface->event_sync(b, c->copy_done[node]);
    if (b->iface->stream_sync != NULL)
        return b->iface->stream_sync(b, c->streams[c->e->node_backend[node]]);
    return KILN_OK;
}

/* Before node i reads host memory (the inputs in host_mask): copies to the host that made
 * them must be done. A host node may also write any host memory that is dead at its place in
 * the order: a copy to the device may still be reading such memory, and a copy to the host
 * whose readers were all evaluated at shape time (a Shape of it, say) may still be about to
 * write it. So every pending copy is done before a host node runs (overwrite). */
static kiln_status wait_for_host_reads(kiln_context *c, int node, uint64_t host_mask,
                                       bool overwrite) {
    const kn_graph *g = c->e->plan.graph;
    const kn_node *n = &g->nodes[node];
    for (int j = 0; j < n->n_in && host_mask; j++) {
        int v = n->in[j];
        if (v < 0 || (j < 64 && !((host_mask >> j) & 1)))
            continue;
        int root = c->alias[v] >= 0 ? c->alias[v] : v;
        int p = g->values[root].producer;
        if (p >= 0 && kn_node_copy_kind(&g->nodes[p]) == KN_COPY_TO_HOST)
            KN_TRY(wait_copy(c, p));
    }
    if (overwrite && c->pending_copies > 0)
        for (int i = 0; i < node && c->pending_copies > 0; i++)
            if (c->copy_pending[i])
                KN_TRY(wait_copy(c, i));
    return KILN_OK;
}

/* The graph output that copy node i may write straight into the caller's device buffer, or -1:
 * it copies a device value to the host as output j, j is bound to device memory large enough,
 * and nothing else reads the host copy. Then the copy is device to device and copy_outputs
 * leaves that output alone. */
static int direct_device_output(const kiln_context *c, int i) {
    const kn_graph *g = c->e->plan.graph;
    const kn_node *n = &g->nodes[i];
    if (kn_node_copy_kind(n) != KN_COPY_TO_HOST || n->out[0] < 0)
        return -1;
    int v = n->out[0], j = 0;
    while (j < g->n_outputs && g->outputs[j] != v)
        j++;
    if (j == g->n_outputs || !c->out_device[j] || c->out_user[j] == NULL ||
        c->out_user_size[j] < kn_tensor_nbytes(&c->vals[v].t))
        return -1;
    for (int k = 0; k < g->n_nodes; k++)
        for (int m = 0; m < g->nodes[k].n_in && !g->nodes[k].dead; m++)
            if (g->nodes[k].in[m] == v)
                return -1;
    return j;
}

static kiln_status run_copy(kiln_context *c, int i, const kn_tensor *in, const kn_tensor *out) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    const kn_node *n = &g->nodes[i];
    int k = e->node_backend[i];
    kn_backend *b = e->backends[k];
    bool to_host = kn_node_copy_kind(n) == KN_COPY_TO_HOST;
    kn_mem src_mem = to_host ? KN_MEM_DEVICE : KN_MEM_HOST;
    if (!to_host && g->values[n->in[0]].is_input)
        for (int j = 0; j < g->n_inputs; j++)
            if (g->inputs[j] == n->in[0] && c->in_device[j])
                src_mem = KN_MEM_DEVICE;
    const void *src = in[0].data;
    if (!to_host && g->values[n->in[0]].data != NULL && e->weights[k].ptr != NULL &&
        e->weights[k].ptr[n->in[0]] != NULL)
        src = e->weights[k].ptr[n->in[0]], src_mem = KN_MEM_DEVICE;
    if (!to_host)
        KN_TRY(wait_for_host_reads(c, i, 1, false));
    int direct = to_host ? direct_device_output(c, i) : -1;
    if (direct >= 0) /* done by the synchronisation that ends the run */
        return b->iface->copy(b, c->streams[k], c->out_user[direct], KN_MEM_DEVICE, src,
                              KN_MEM_DEVICE, kn_tensor_nbytes(&in[0]));
    KN_TRY(b->iface->copy(b, c->streams[k], out[0].data, to_host ? KN_MEM_HOST : KN_MEM_DEVICE, src,
                          src_mem, kn_tensor_nbytes(&in[0])));
    if (c->copy_done[i] != NULL)
        KN_TRY(b->iface->event_record(b, c->copy_done[i], c->streams[k]));
    c->copy_pending[i] = b->iface->stream_sync != NULL || c->copy_done[i] != NULL;
    if (c->copy_pending[i])
        c->pending_copies++;
    return KILN_OK;
}

/* Input j of node i as its kernel sees it: a constant read on a device is its device copy. */
static void input_tensor(const kiln_context *c, int i, int j, kn_tensor *t) {
    const kiln_engine *e = c->e;
    const kn_node *n = &e->plan.graph->nodes[i];
    memset(t, 0, sizeof *t);
    int v = n->in[j];
    if (v < 0)
        return;
    *t = c->vals[v].t;
    const kn_device_weights *w = &e->weights[e->node_backend[i]];
    if (w->ptr != NULL && w->ptr[v] != NULL)
        t->data = w->ptr[v];
}

static kiln_status run_nodes(kiln_context *c) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    KN_TRY(kn_replay_start(c));
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        if (!kn_context_node_runs(c, i)) { /* evaluated on the host when shapes were resolved */
            if (c->capture != NULL)
                KN_TRY(kn_capture_node(c, i));
            continue;
        }
        int next;
        KN_TRY(kn_replay_before(c, i, &next));
        if (next != i) { /* a recorded segment ran in its stead */
            i = next - 1;
            continue;
        }
        KN_ASSERT(n->n_in <= KN_MAX_NODE_IO && n->n_out <= KN_MAX_NODE_IO);
        int k = e->node_backend[i];
        if (e->n_backends > 1 && kn_node_copy_kind(n) == KN_COPY_NONE)
            KN_TRY(
                wait_for_host_reads(c, i, k == 0 ? ~(uint64_t)0 : kn_node_host_inputs(n), k == 0));
        for (int j = 0; j < n->n_in; j++)
            input_tensor(c, i, j, &in[j]);
        if (c->e->kernels[i] == NULL && kn_node_copy_kind(n) == KN_COPY_NONE) {
            double t0 = c->layer_ms != NULL ? kn_profile_now_ms() : 0;
            KN_TRY(run_control_flow(c, i, in));
            if (c->layer_ms != NULL)
                c->layer_ms[i] = kn_profile_now_ms() - t0;
            if (c->capture != NULL)
                KN_TRY(kn_capture_node(c, i));
            continue;
        }
        if (c->deferred[i]) {
            /* Inference reads data on the host: constants from the plan, device values not
             * at all (what a device kernel's shape needs is a host input). */
            kn_tensor inf[KN_MAX_NODE_IO];
            for (int j = 0; j < n->n_in; j++) {
                memset(&inf[j], 0, sizeof inf[j]);
                if (n->in[j] >= 0) {
                    inf[j] = c->vals[n->in[j]].t;
                    if (e->value_space[n->in[j]] != 0 && g->values[n->in[j]].data == NULL)
                        inf[j].data = NULL;
                }
            }
            KN_TRY(run_deferred_infer(c, i, inf, out));
        } else {
            for (int j = 0; j < n->n_out; j++) {
                memset(&out[j], 0, sizeof out[j]);
                if (n->out[j] >= 0)
                    out[j] = c->vals[n->out[j]].t;
            }
        }
        if (kn_node_copy_kind(n) != KN_COPY_NONE) {
            double t0;
            KN_TRY(kn_profile_begin(c, i, &t0));
            kiln_status rc = run_copy(c, i, in, out);
            if (rc == KILN_OK)
                rc = kn_profile_end(c, i, t0);
            if (rc != KILN_OK)
                return kn_error_prefix(rc, "node '%s' (%s): ", n->name, n->op_type);
            if (c->capture != NULL)
                KN_TRY(kn_capture_node(c, i));
            continue;
        }
        kn_kernel_ctx kc = {.node = n,
                            .n_in = n->n_in,
                            .in = in,
                            .n_out = n->n_out,
                            .out = out,
                            .state = c->runs[i].inst.ops ? (void *)&c->runs[i] : e->states[i],
                            .pool = c->pool,
                            .stream = c->streams[k],
                            .backend = e->backends[k],
                            .local = &c->locals[i]};
        double t0;
        KN_TRY(kn_profile_begin(c, i, &t0));
        /* A small layer runs on fewer threads than the context has (KN_ATTR_THREADS). */
        int all = e->node_threads[i] ? kn_threadpool_set_limit(c->pool, e->node_threads[i]) : 0;
        kiln_status rc = e->kernels[i]->run(&kc);
        if (all)
            kn_threadpool_set_limit(c->pool, all);
        KN_TRY(kn_profile_end(c, i, t0));
        int restart = -1;
        if (rc != KILN_OK && !kn_replay_abort(c, &restart))
            return kn_error_prefix(rc, "node '%s' (%s): ", n->name, n->op_type);
        if (rc == KILN_OK)
            KN_TRY(kn_replay_after(c, i, &restart));
        if (restart >= 0) { /* its recording failed: the segment runs again, plainly */
            i = restart - 1;
            continue;
        }
        if (c->capture != NULL)
            KN_TRY(kn_capture_node(c, i));
    }
    return KILN_OK;
}

kiln_status kn_context_finish_work(kiln_context *c) {
    const kiln_engine *e = c->e;
    kiln_status first = KILN_OK;
    for (int k = 1; k < e->n_backends; k++) {
        kn_backend *b = e->backends[k];
        if (b->iface->stream_sync == NULL)
            continue;
        kiln_status rc = b->iface->stream_sync(b, c->streams[k]);
        if (rc != KILN_OK && first == KILN_OK)
            first = rc;
    }
    memset(c->copy_pending, 0, (size_t)e->plan.graph->n_nodes * sizeof *c->copy_pending);
    c->pending_copies = 0;
    c->enqueued = false;
    if (first == KILN_OK)
        first = kn_profile_collect(c);
    return first;
}

static kiln_status copy_out(kiln_context *c, int i, void *dst, const void *src, size_t nb) {
    if (!c->out_device[i]) {
        memcpy(dst, src, nb);
        return KILN_OK;
    }
    int k = device_space(c->e);
    kn_backend *b = c->e->backends[k];
    KN_TRY(b->iface->copy(b, c->streams[k], dst, KN_MEM_DEVICE, src, KN_MEM_HOST, nb));
    return b->iface->stream_sync ? b->iface->stream_sync(b, c->streams[k]) : KILN_OK;
}

/* Each output where get_output finds it: the caller's buffer when one is bound (written in
 * place, or copied to now), else the value's own memory, which stays put until the next
 * execute; a graph input returned as an output is copied, as the caller may reuse its buffer. */
static kiln_status copy_outputs(kiln_context *c) {
    const kn_graph *g = c->e->plan.graph;
    for (int i = 0; i < g->n_outputs; i++) {
        const kn_value *v = &g->values[g->outputs[i]];
        const kn_tensor *t = &c->vals[g->outputs[i]].t;
        size_t nb = kn_tensor_nbytes(t);
        int p = v->producer;
        c->out_data[i] = c->out_user[i];
        if (c->out_in_place[i] ||
            (p >= 0 && kn_context_node_runs(c, p) && direct_device_output(c, p) == i))
            continue;
        if (c->out_user[i] != NULL) {
            if (c->out_user_size[i] < nb)
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "output '%s' needs %zu bytes, the bound buffer has %zu", v->name,
                                nb, c->out_user_size[i]);
            if (nb)
                KN_TRY(copy_out(c, i, c->out_user[i], t->data, nb));
            continue;
        }
        c->out_data[i] = t->data;
        if (!v->is_input)
            continue;
        if (nb > c->out_cap[i]) {
            void *p = kn_malloc(nb);
            if (p == NULL)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for output '%s'", v->name);
            kn_free(c->out_buf[i]);
            c->out_buf[i] = p;
            c->out_cap[i] = nb;
        }
        if (nb)
            memcpy(c->out_buf[i], t->data, nb);
        c->out_data[i] = c->out_buf[i];
    }
    return KILN_OK;
}

kiln_status kiln_context_enqueue(kiln_context *c) {
    if (c == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_enqueue: NULL context");
    if (c->enqueued)
        KN_TRY(kn_context_finish_work(c));
    c->executed = false;
    KN_TRY(kn_context_resolve(c));
    KN_TRY(bind_inputs(c));
    place_outputs(c);
    c->enqueued = true;
    kiln_status rc = kn_profile_run_begin(c);
    if (rc == KILN_OK)
        rc = run_nodes(c);
    if (rc == KILN_OK)
        rc = kn_profile_run_end(c);
    if (rc != KILN_OK) {
        int restart;
        (void)kn_replay_abort(c, &restart); /* a failure inside a recording ends it */
        (void)kn_context_finish_work(c);
        return rc;
    }
    return KILN_OK;
}

kiln_status kiln_context_synchronize(kiln_context *c) {
    if (c == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_synchronize: NULL context");
    if (!c->enqueued)
        return c->executed ? KILN_OK
                           : kn_error(KILN_ERR_INVALID_ARGUMENT,
                                      "kiln_context_synchronize: nothing was enqueued");
    KN_TRY(kn_context_finish_work(c));
    KN_TRY(copy_outputs(c));
    c->executed = true;
    return KILN_OK;
}

kiln_status kiln_context_execute(kiln_context *c) {
    if (c == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_execute: NULL context");
    KN_TRY(kiln_context_enqueue(c));
    return kiln_context_synchronize(c);
}

kiln_status kiln_context_get_output(kiln_context *c, const char *name, kiln_tensor_view *view) {
    if (c == NULL || name == NULL || view == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_get_output: NULL argument");
    const kn_graph *g = c->e->plan.graph;
    for (int i = 0; i < g->n_outputs; i++) {
        const kn_value *v = &g->values[g->outputs[i]];
        if (strcmp(v->name, name) != 0)
            continue;
        if (!c->executed)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "output '%s': the context has not been "
                            "executed since its shapes last changed",
                            name);
        const kn_tensor *t = &c->vals[g->outputs[i]].t;
        memset(view, 0, sizeof *view);
        view->dtype = (kiln_dtype)t->dtype;
        view->rank = t->shape.rank;
        memcpy(view->dims, t->shape.d, (size_t)t->shape.rank * sizeof(int64_t));
        view->size = kn_tensor_nbytes(t);
        view->data = c->out_data[i];
        return KILN_OK;
    }
    return kn_error(KILN_ERR_NOT_FOUND, "no output named '%s'", name);
}
