/* Stream-graph replay (replay.h). */
#include "runtime/replay.h"

#include "core/alloc.h"
#include "ir/placement.h"

#include <string.h>

typedef struct kn_segment {
    int first, last; /* nodes, in execution order */
    int k;           /* the backend whose stream runs them */
    void *graph;     /* recorded graph, or NULL */
    bool plain;      /* recording failed once: run the kernels as they are */
} kn_segment;

struct kn_replay {
    unsigned generation; /* the context's resolution the segments were found at */
    int runs;            /* runs at that resolution, this one included */
    int n_segs;
    kn_segment *segs;
    int *seg_at;   /* per node: the segment starting there, or -1 */
    int capturing; /* segment being recorded, or -1 */
    void *arena[KN_MAX_PLAN_BACKENDS];
};

/* Profiling times each kernel and value capture (capture.c) copies values out after each
 * node: both need every node to run by itself. */
static bool replay_wanted(const kiln_context *c) {
    return c->layer_ms == NULL && c->capture == NULL;
}

static bool offers_capture(const kn_backend *b) {
    const kn_backend_iface *f = b->iface;
    return f->capture_begin && f->capture_end && f->graph_launch && f->graph_destroy;
}

/* A value whose bytes are the same on every run at this resolution: a constant, or one the
 * host evaluated when shapes were resolved (its producer does not run). */
static bool fixed_value(const kiln_context *c, int v) {
    const kn_graph *g = c->e->plan.graph;
    int root = c->alias[v] >= 0 ? c->alias[v] : v;
    if (g->values[root].data != NULL)
        return true;
    int p = g->values[root].producer;
    return p >= 0 && !kn_context_node_runs(c, p);
}

/* Whether node i may sit in a recorded segment: a kernel of a device backend that offers
 * capture, a plugin only when it declares its enqueue graph-safe, whose host-read inputs are
 * fixed. */
static bool recordable(const kiln_context *c, int i) {
    const kiln_engine *e = c->e;
    const kn_node *n = &e->plan.graph->nodes[i];
    int k = e->node_backend[i];
    if (k == 0 || kn_node_copy_kind(n) != KN_COPY_NONE || !offers_capture(e->backends[k]))
        return false;
    if (c->runs[i].inst.ops != NULL && !kn_plugin_graph_safe(&c->runs[i].inst))
        return false;
    uint64_t host_in = kn_node_host_inputs(n);
    for (int j = 0; j < n->n_in && j < 64; j++)
        if (((host_in >> j) & 1) && n->in[j] >= 0 && !fixed_value(c, n->in[j]))
            return false;
    return true;
}

static void drop_graphs(kiln_context *c) {
    struct kn_replay *r = c->replay;
    for (int s = 0; s < r->n_segs; s++)
        if (r->segs[s].graph != NULL) {
            kn_backend *b = c->e->backends[r->segs[s].k];
            b->iface->graph_destroy(b, r->segs[s].graph);
            r->segs[s].graph = NULL;
        }
}

/* The segments of this resolution: maximal runs of recordable nodes of one backend, among the
 * nodes that run (the others are transparent). None when a node's shapes wait for data (its
 * outputs get memory of their own on each run). */
static kiln_status find_segments(kiln_context *c) {
    const kiln_engine *e = c->e;
    const kn_graph *g = e->plan.graph;
    struct kn_replay *r = c->replay;
    r->n_segs = 0;
    for (int i = 0; i < g->n_nodes; i++)
        r->seg_at[i] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && c->deferred[i])
            return KILN_OK;
    int open = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead || !kn_context_node_runs(c, i))
            continue;
        if (!recordable(c, i)) {
            open = -1;
            continue;
        }
        if (open >= 0 && r->segs[open].k == e->node_backend[i]) {
            r->segs[open].last = i;
            continue;
        }
        open = r->n_segs++;
        r->segs[open] = (kn_segment){.first = i, .last = i, .k = e->node_backend[i]};
        r->seg_at[i] = open;
    }
    return KILN_OK;
}

kiln_status kn_replay_start(kiln_context *c) {
    const kiln_engine *e = c->e;
    bool any = false;
    for (int k = 1; k < e->n_backends; k++)
        any |= offers_capture(e->backends[k]);
    if (!any || !replay_wanted(c))
        return KILN_OK;
    int nn = e->plan.graph->n_nodes;
    if (c->replay == NULL) {
        struct kn_replay *r = kn_calloc(1, sizeof *r);
        if (r != NULL) {
            r->segs = kn_calloc((size_t)nn + 1, sizeof *r->segs);
            r->seg_at = kn_calloc((size_t)nn + 1, sizeof *r->seg_at);
        }
        if (r == NULL || r->segs == NULL || r->seg_at == NULL) {
            if (r != NULL) {
                kn_free(r->segs);
                kn_free(r->seg_at);
            }
            kn_free(r);
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for stream graphs");
        }
        r->generation = c->generation - 1;
        r->capturing = -1;
        c->replay = r;
    }
    struct kn_replay *r = c->replay;
    bool moved = false;
    for (int k = 1; k < e->n_backends; k++)
        moved |= r->arena[k] != c->arenas[k].base;
    if (r->generation != c->generation || moved) {
        drop_graphs(c);
        KN_TRY(find_segments(c));
        r->generation = c->generation;
        r->runs = 0;
        for (int k = 1; k < e->n_backends; k++)
            r->arena[k] = c->arenas[k].base;
    }
    r->runs++;
    r->capturing = -1;
    return KILN_OK;
}

static bool active(const kiln_context *c) {
    return c->replay != NULL && replay_wanted(c) && c->replay->generation == c->generation;
}

kiln_status kn_replay_before(kiln_context *c, int i, int *next) {
    *next = i;
    if (!active(c) || c->replay->seg_at[i] < 0)
        return KILN_OK;
    struct kn_replay *r = c->replay;
    kn_segment *s = &r->segs[r->seg_at[i]];
    kn_backend *b = c->e->backends[s->k];
    if (s->graph != NULL) {
        KN_TRY(b->iface->graph_launch(b, c->streams[s->k], s->graph));
        *next = s->last + 1;
        return KILN_OK;
    }
    if (s->plain || r->runs < 2) /* the first run at a resolution is the warm-up */
        return KILN_OK;
    if (b->iface->capture_begin(b, c->streams[s->k]) != KILN_OK) {
        s->plain = true;
        return KILN_OK;
    }
    r->capturing = r->seg_at[i];
    return KILN_OK;
}

kiln_status kn_replay_after(kiln_context *c, int i, int *restart) {
    *restart = -1;
    struct kn_replay *r = c->replay;
    if (r == NULL || r->capturing < 0 || r->segs[r->capturing].last != i)
        return KILN_OK;
    kn_segment *s = &r->segs[r->capturing];
    kn_backend *b = c->e->backends[s->k];
    r->capturing = -1;
    void *graph = NULL;
    if (b->iface->capture_end(b, c->streams[s->k], &graph) != KILN_OK || graph == NULL) {
        /* Nothing of the segment ran: run it plainly, now and from now on. */
        s->plain = true;
        *restart = s->first;
        return KILN_OK;
    }
    s->graph = graph;
    return b->iface->graph_launch(b, c->streams[s->k], graph);
}

bool kn_replay_abort(kiln_context *c, int *restart) {
    struct kn_replay *r = c->replay;
    if (r == NULL || r->capturing < 0)
        return false;
    kn_segment *s = &r->segs[r->capturing];
    kn_backend *b = c->e->backends[s->k];
    void *graph = NULL;
    (void)b->iface->capture_end(b, c->streams[s->k], &graph);
    if (graph != NULL)
        b->iface->graph_destroy(b, graph);
    s->plain = true;
    r->capturing = -1;
    *restart = s->first;
    return true;
}

void kn_replay_destroy(kiln_context *c) {
    if (c->replay == NULL)
        return;
    drop_graphs(c);
    kn_free(c->replay->segs);
    kn_free(c->replay->seg_at);
    kn_free(c->replay);
    c->replay = NULL;
}
