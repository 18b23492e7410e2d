/* The engine (immutable, shared by threads) and the execution context (one per thread). */
#ifndef KN_ENGINE_H
#define KN_ENGINE_H

#include "backend/backend.h"
#include "plan/plan.h"
#include "plugin/plugin.h"
#include "runtime/resolve.h"

struct kiln_engine {
    kn_plan plan;
    const kn_backend_iface *backend;
    const kn_kernel **kernels;        /* per node */
    void **states;                    /* per node, from prepare */
    const kn_profile **input_profile; /* per graph input; NULL when static */
    const void *map;                  /* mapping of a plan file, or NULL */
    size_t map_size;
    void *copy;                    /* aligned copy of a plan given in memory, or NULL */
    kiln_registry *registry;       /* borrowed */
    kiln_plugin_instance *plugins; /* per node: the prototype instance of a plugin node */
};

struct kiln_context {
    kiln_engine *e;
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
    kn_resolved *vals;   /* per value */
    bool *deferred;      /* per node */
    bool *in_arena;      /* per value */
    size_t *offsets;     /* per value */
    int *alias;          /* per value: the value whose memory a view shares, or -1 */
    void **dyn;          /* per value: heap data of deferred outputs */
    kn_plugin_run *runs; /* per node: this context's clone of a plugin node */
    bool resolved;
    bool executed;
    void *arena;
    size_t arena_size;
};

/* Create an engine from a parsed plan (takes ownership of plan's contents). */
kiln_status kn_engine_create(kn_plan *plan, kiln_registry *registry, kiln_engine **out);
/* Infer shapes for the context's current input shapes and lay out its arena (no-op when
 * nothing changed). */
kiln_status kn_context_resolve(kiln_context *c);
/* Tell plugin node `node` its current shapes and size its workspace. */
kiln_status kn_context_plugin_shapes(kiln_context *c, int node);

#endif
