/* The engine (immutable, shared by threads) and the execution context (one per thread). */
#ifndef KN_ENGINE_H
#define KN_ENGINE_H

#include "backend/backend.h"
#include "plan/plan.h"
#include "plugin/plugin.h"
#include "shape/resolve.h"

/* Host evaluation at shape time is for shape subgraphs: small by nature. */
#define KN_RUNTIME_EVAL_ELEMS 4096

/* Most backends one plan may use (the host included). */
#define KN_MAX_PLAN_BACKENDS 4

/* A constant mirrored into one device backend's memory for the nodes placed there. */
typedef struct kn_device_weights {
    kn_buffer buf;
    void **ptr; /* per value: its device copy, or NULL */
} kn_device_weights;

struct kiln_engine {
    kn_plan plan;
    int n_backends;
    kn_backend *backends[KN_MAX_PLAN_BACKENDS]; /* [0] is the host */
    kn_device_weights weights[KN_MAX_PLAN_BACKENDS];
    uint8_t *node_backend;     /* per node: index into backends */
    uint8_t *value_space;      /* per value: the backend whose memory holds it (0: host memory) */
    int *input_host_reader;    /* per graph input: a node reading it on the host, or -1 */
    const kn_kernel **kernels; /* per node; NULL for copy nodes */
    void **states;             /* per node, from prepare */
    uint16_t *node_threads;    /* per node: KN_ATTR_THREADS, or 0 for the whole pool */
    const kn_profile **input_profile; /* per graph input; NULL when static */
    const void *map;                  /* mapping of a plan file, or NULL */
    size_t map_size;
    void *copy;                    /* aligned copy of a plan given in memory, or NULL */
    kiln_registry *registry;       /* borrowed */
    kiln_plugin_instance *plugins; /* per node: the prototype instance of a plugin node */
};

/* One memory space of a context: an arena sized so it never moves at the profile's max. */
typedef struct kn_space_arena {
    void *base;
    size_t size;
    kn_buffer buf; /* device spaces: the backend's buffer behind base */
} kn_space_arena;

struct kiln_context {
    kiln_engine *e;
    kn_stream *streams[KN_MAX_PLAN_BACKENDS]; /* per engine backend */
    kn_event **copy_done;                     /* per node: recorded after a copy node */
    bool *copy_pending;                       /* per node: copy_done not yet waited for */
    bool *in_device;                          /* per graph input: data is device memory */
    bool *out_device;                         /* per graph output: bound buffer is device memory */
    bool enqueued;                            /* work in flight since the last synchronize */
    int pending_copies;                       /* copies not yet waited for */
    kn_threadpool *pool;
    int threads;
    kn_shape *in_shape; /* per graph input */
    bool *in_shape_set;
    const void **in_data;
    size_t *in_size;
    void **out_user; /* per graph output: caller's buffer or NULL */
    size_t *out_user_size;
    void **out_buf; /* per graph output: context-owned copy */
    size_t *out_cap;
    const void **out_data; /* per graph output: where the last execute left it */
    bool *out_in_place;    /* per graph output: its producer writes the bound buffer (executor.c) */
    kn_resolved *vals;     /* per value */
    bool *deferred;        /* per node */
    bool *in_arena;        /* per value */
    size_t *offsets;       /* per value */
    int *alias;            /* per value: the value whose memory a view shares, or -1 */
    void **dyn;            /* per value: heap data of deferred host outputs */
    kn_buffer *dyn_dev;    /* per value: device data of deferred device outputs */
    kn_plugin_run *runs;   /* per node: this context's clone of a plugin node */
    kn_local_state **locals; /* per node: the kernel's state in this context (backend.h) */
    double *layer_ms;       /* per node: time of the last execute, when profiling (see profile.c) */
    kn_event **prof_events; /* per node: start and end events of a device layer, profiling */
    bool *prof_pending;     /* per node: its events wait to be read */
    kn_event *run_events[2]; /* around a whole execute on the device stream (profile.c) */
    bool run_timed;          /* run_events recorded, not yet read */
    double device_ms;        /* the last execute's device time */
    bool device_ms_valid;
    struct kn_capture *capture; /* values copied out after their layer runs (see capture.c) */
    bool resolved;
    bool executed;
    unsigned generation;      /* counts resolutions: what was recorded at another is stale */
    struct kn_replay *replay; /* stream graphs of this context (replay.h), or NULL */
    kn_space_arena arenas[KN_MAX_PLAN_BACKENDS]; /* per memory space (0: host) */
};

/* Create an engine from a parsed plan (takes ownership of plan's contents). */
kiln_status kn_engine_create(kn_plan *plan, kiln_registry *registry, kiln_engine **out);
/* Infer shapes for the context's current input shapes and lay out its arena (no-op when
 * nothing changed). */
kiln_status kn_context_resolve(kiln_context *c);
/* Wait for everything the context has enqueued on its streams. */
kiln_status kn_context_finish_work(kiln_context *c);
/* The backend (and its stream in context c) of node i. */
static inline kn_backend *kn_engine_node_backend(const kiln_engine *e, int i) {
    return e->backends[e->node_backend[i]];
}
/* Whether node i runs at execute time (not evaluated on the host when shapes were resolved,
 * and not a view that shares its input's memory). */
static inline bool kn_context_node_runs(const kiln_context *c, int i) {
    const kn_node *n = &c->e->plan.graph->nodes[i];
    if (c->deferred[i])
        return true;
    for (int j = 0; j < n->n_out; j++)
        if (n->out[j] >= 0 && c->in_arena[n->out[j]])
            return true;
    return false;
}
/* Tell plugin node `node` its current shapes and size its workspace. */
kiln_status kn_context_plugin_shapes(kiln_context *c, int node);

#endif
