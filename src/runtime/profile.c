/* Layers of an engine and per-layer timing: the executor stores each node's time in
 * ctx->layer_ms when profiling is on; layers are the live nodes, in execution order. And the
 * device time of a whole execute: events on the device backend's stream around everything
 * the execute queues there (always on for plans with a device backend: two event records a
 * run). */
#include "runtime/profile.h"

#include "core/alloc.h"
#include "runtime/engine.h"

#include <string.h>
#include <time.h>

double kn_profile_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The node index of layer `index`, or -1. */
static int layer_node(const kiln_engine *e, int index) {
    const kn_graph *g = e->plan.graph;
    for (int i = 0, k = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && k++ == index)
            return i;
    return -1;
}

int kiln_engine_num_layers(const kiln_engine *e) {
    if (e == NULL)
        return 0;
    int n = 0;
    for (int i = 0; i < e->plan.graph->n_nodes; i++)
        n += !e->plan.graph->nodes[i].dead;
    return n;
}

kiln_status kiln_engine_layer_info(const kiln_engine *e, int index, kiln_layer_info *info) {
    if (e == NULL || info == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_layer_info: NULL argument");
    int i = layer_node(e, index);
    if (i < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "layer %d does not exist (the engine has %d)",
                        index, kiln_engine_num_layers(e));
    const kn_graph *g = e->plan.graph;
    const kn_node *n = &g->nodes[i];
    memset(info, 0, sizeof *info);
    info->name = n->name;
    info->op_type = n->op_type;
    info->domain = n->domain;
    info->kernel = e->kernels[i] != NULL ? e->kernels[i]->name : "";
    info->n_inputs = n->n_in < 16 ? n->n_in : 16;
    info->n_outputs = n->n_out < 16 ? n->n_out : 16;
    for (int j = 0; j < info->n_inputs; j++)
        info->inputs[j] = n->in[j] >= 0 ? g->values[n->in[j]].name : NULL;
    for (int j = 0; j < info->n_outputs; j++)
        info->outputs[j] = n->out[j] >= 0 ? g->values[n->out[j]].name : NULL;
    return KILN_OK;
}

/* Whether node i's layer is timed by its backend's events. */
static bool timed_by_events(const kiln_context *c, int i) {
    kn_backend *b = kn_engine_node_backend(c->e, i);
    return c->e->node_backend[i] != 0 && b->iface->event_create != NULL &&
           b->iface->event_record != NULL && b->iface->event_elapsed != NULL;
}

kiln_status kn_profile_begin(kiln_context *c, int i, double *t0) {
    *t0 = kn_profile_now_ms();
    if (c->layer_ms == NULL || !timed_by_events(c, i))
        return KILN_OK;
    kn_backend *b = kn_engine_node_backend(c->e, i);
    for (int k = 0; k < 2; k++)
        if (c->prof_events[2 * i + k] == NULL)
            KN_TRY(b->iface->event_create(b, &c->prof_events[2 * i + k]));
    return b->iface->event_record(b, c->prof_events[2 * i], c->streams[c->e->node_backend[i]]);
}

kiln_status kn_profile_end(kiln_context *c, int i, double t0) {
    if (c->layer_ms == NULL)
        return KILN_OK;
    if (!timed_by_events(c, i)) {
        c->layer_ms[i] = kn_profile_now_ms() - t0;
        return KILN_OK;
    }
    kn_backend *b = kn_engine_node_backend(c->e, i);
    c->prof_pending[i] = true;
    return b->iface->event_record(b, c->prof_events[2 * i + 1], c->streams[c->e->node_backend[i]]);
}

/* The device backend's index in the engine when it times by events, else 0. */
static int run_timer_backend(const kiln_context *c) {
    for (int k = 1; k < c->e->n_backends; k++) {
        const kn_backend_iface *f = c->e->backends[k]->iface;
        if (f->mem == KN_MEM_DEVICE && f->event_create && f->event_record && f->event_elapsed)
            return k;
    }
    return 0;
}

kiln_status kn_profile_run_begin(kiln_context *c) {
    int k = run_timer_backend(c);
    c->run_timed = false;
    if (k == 0)
        return KILN_OK;
    kn_backend *b = c->e->backends[k];
    for (int j = 0; j < 2; j++)
        if (c->run_events[j] == NULL)
            KN_TRY(b->iface->event_create(b, &c->run_events[j]));
    return b->iface->event_record(b, c->run_events[0], c->streams[k]);
}

kiln_status kn_profile_run_end(kiln_context *c) {
    int k = run_timer_backend(c);
    if (k == 0 || c->run_events[1] == NULL)
        return KILN_OK;
    kn_backend *b = c->e->backends[k];
    KN_TRY(b->iface->event_record(b, c->run_events[1], c->streams[k]));
    c->run_timed = true;
    return KILN_OK;
}

static kiln_status run_collect(kiln_context *c) {
    if (!c->run_timed)
        return KILN_OK;
    kn_backend *b = c->e->backends[run_timer_backend(c)];
    float ms = 0;
    c->run_timed = false;
    KN_TRY(b->iface->event_elapsed(b, c->run_events[0], c->run_events[1], &ms));
    c->device_ms = ms;
    c->device_ms_valid = true;
    return KILN_OK;
}

void kn_profile_run_release(kiln_context *c) {
    int k = run_timer_backend(c);
    for (int j = 0; j < 2 && k != 0; j++)
        if (c->run_events[j] != NULL)
            c->e->backends[k]->iface->event_destroy(c->e->backends[k], c->run_events[j]);
    c->run_events[0] = c->run_events[1] = NULL;
}

kiln_status kiln_context_device_time(const kiln_context *c, double *ms) {
    if (c == NULL || ms == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_device_time: NULL argument");
    if (run_timer_backend(c) == 0)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "kiln_context_device_time: the plan runs on the host only (no device "
                        "backend with events)");
    if (!c->device_ms_valid)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_context_device_time: the context has not executed yet");
    *ms = c->device_ms;
    return KILN_OK;
}

kiln_status kn_profile_collect(kiln_context *c) {
    KN_TRY(run_collect(c));
    if (c->layer_ms == NULL)
        return KILN_OK;
    for (int i = 0; i < c->e->plan.graph->n_nodes; i++) {
        if (!c->prof_pending[i])
            continue;
        kn_backend *b = kn_engine_node_backend(c->e, i);
        float ms = 0;
        c->prof_pending[i] = false;
        KN_TRY(b->iface->event_elapsed(b, c->prof_events[2 * i], c->prof_events[2 * i + 1], &ms));
        c->layer_ms[i] = ms;
    }
    return KILN_OK;
}

void kn_profile_release(kiln_context *c) {
    if (c->prof_events != NULL)
        for (int i = 0; i < c->e->plan.graph->n_nodes; i++)
            for (int k = 0; k < 2; k++)
                if (c->prof_events[2 * i + k] != NULL) {
                    kn_backend *b = kn_engine_node_backend(c->e, i);
                    b->iface->event_destroy(b, c->prof_events[2 * i + k]);
                }
    kn_free(c->prof_events);
    kn_free(c->prof_pending);
    kn_free(c->layer_ms);
    c->prof_events = NULL;
    c->prof_pending = NULL;
    c->layer_ms = NULL;
}

kiln_status kiln_context_set_profiling(kiln_context *c, int enabled) {
    if (c == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_profiling: NULL context");
    if (!enabled) {
        KN_TRY(kn_context_finish_work(c));
        kn_profile_release(c);
        return KILN_OK;
    }
    if (c->layer_ms == NULL) {
        size_t nn = (size_t)c->e->plan.graph->n_nodes + 1;
        c->layer_ms = kn_calloc(nn, sizeof *c->layer_ms);
        c->prof_events = kn_calloc(2 * nn, sizeof *c->prof_events);
        c->prof_pending = kn_calloc(nn, sizeof *c->prof_pending);
        if (c->layer_ms == NULL || c->prof_events == NULL || c->prof_pending == NULL) {
            kn_profile_release(c);
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the profile");
        }
    }
    return KILN_OK;
}

kiln_status kiln_context_layer_time(const kiln_context *c, int index, double *ms) {
    if (c == NULL || ms == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_layer_time: NULL argument");
    if (c->layer_ms == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_context_layer_time: profiling is off (kiln_context_set_profiling)");
    int i = layer_node(c->e, index);
    if (i < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "layer %d does not exist", index);
    *ms = c->layer_ms[i];
    return KILN_OK;
}
