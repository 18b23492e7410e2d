/* Layers of an engine and per-layer timing: the executor stores each node's time in
 * ctx->layer_ms when profiling is on; layers are the live nodes, in execution order. */
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

kiln_status kiln_context_set_profiling(kiln_context *c, int enabled) {
    if (c == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_profiling: NULL context");
    if (!enabled) {
        kn_free(c->layer_ms);
        c->layer_ms = NULL;
        return KILN_OK;
    }
    if (c->layer_ms == NULL) {
        c->layer_ms = kn_calloc((size_t)c->e->plan.graph->n_nodes + 1, sizeof *c->layer_ms);
        if (c->layer_ms == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the profile");
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
