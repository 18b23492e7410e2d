/* The backend interface. A backend offers kernels for (domain, op_type) pairs; the runtime binds
 * each node to one at engine creation. Streams are part of the interface from the start: the CPU
 * stream is synchronous, a CUDA stream slots in without changing callers. */
#ifndef KN_BACKEND_H
#define KN_BACKEND_H

#include "core/status.h"
#include "core/tensor.h"
#include "core/threadpool.h"
#include "ir/graph.h"

typedef struct kn_stream kn_stream; /* backend-defined; NULL on the CPU */

typedef struct kn_kernel_ctx {
    const kn_node *node;
    int n_in;
    const kn_tensor *in; /* every present input has data; omitted ones have dtype 0 */
    int n_out;
    kn_tensor *out; /* dtype/shape from inference; data allocated by the runtime */
    void *state;    /* what prepare returned (NULL if no prepare) */
    kn_threadpool *pool;
    kn_stream *stream;
} kn_kernel_ctx;

typedef kiln_status (*kn_kernel_fn)(kn_kernel_ctx *k);
/* Called once per node when an engine is created (or a graph is folded). `in` holds every
 * input's dtype; constant inputs (weights) also have shape and data, others have data NULL.
 * May precompute (e.g. pack weights) into *state. The engine is immutable afterwards: state
 * is read-only during execution and shared by all contexts. */
typedef kiln_status (*kn_prepare_fn)(const kn_node *node, int n_in, const kn_tensor *in,
                                     void **state);
typedef void (*kn_release_fn)(void *state);

typedef struct kn_kernel {
    const char *domain; /* "" for ONNX's default domain */
    const char *name;
    kn_kernel_fn run;
    kn_prepare_fn prepare; /* optional */
    kn_release_fn release; /* optional; required when prepare allocates */
} kn_kernel;

typedef struct kn_backend_iface {
    const char *name;
    /* NULL if the backend has no kernel for this op. */
    const kn_kernel *(*find_kernel)(const char *domain, const char *name);
    kiln_status (*stream_create)(kn_stream **out);
    void (*stream_destroy)(kn_stream *s);
    kiln_status (*stream_sync)(kn_stream *s);
} kn_backend_iface;

const kn_backend_iface *kn_backend_cpu(void);

#endif
