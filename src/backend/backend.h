/* The backend interface. A backend is an object, {iface, device, context} as ggml's backends
 * are: the iface is a table of functions shared by every instance of one kind of backend, the
 * device says which device an instance drives, the context is the backend's own state.
 *
 * A backend owns a memory space (host, pinned host or device), offers kernels for
 * (domain, op_type) pairs and answers, per node, whether it can run it with these dtypes,
 * layouts and shapes. Streams and events order its work: the CPU's stream is synchronous, a
 * device's stream is a queue that a kernel's run only enqueues on. The builder places every
 * node on one backend and inserts explicit copies where memory spaces meet; the runtime only
 * follows that placement. Nothing here names a device API: a CUDA backend keeps its types
 * behind kn_stream, kn_event and kn_buffer.impl.
 *
 * Optional slots may be NULL; each says what the host does then. */
#ifndef KN_BACKEND_H
#define KN_BACKEND_H

#include "core/status.h"
#include "core/tensor.h"
#include "core/threadpool.h"
#include "ir/graph.h"

#include <stdbool.h>
#include <stdint.h>

/* Where a tensor's bytes live. Host and pinned host memory are addressable by the CPU;
 * device memory is not (its pointers are only meaningful to the owning backend). */
typedef enum kn_mem {
    KN_MEM_HOST = 0,
    KN_MEM_PINNED = 1,
    KN_MEM_DEVICE = 2,
} kn_mem;

static inline bool kn_mem_host_visible(kn_mem m) {
    return m != KN_MEM_DEVICE;
}

enum { KN_LOWER_FP16 = 1u << 0, KN_LOWER_BF16 = 1u << 1 };

/* Layout bits a backend can accept or produce (kiln_plugin.h's KILN_LAYOUT_* as bits). */
enum { KN_LAYOUT_LINEAR_BIT = 1u << 0, KN_LAYOUT_NHWC_BIT = 1u << 1 };

typedef struct kn_stream kn_stream; /* backend-defined; NULL on the CPU */
typedef struct kn_event kn_event;   /* backend-defined */
typedef struct kn_backend kn_backend;

/* A block of one memory space. base is what tensors point into (a device address for device
 * memory); impl is the backend's own handle. */
typedef struct kn_buffer {
    void *base;
    size_t size;
    kn_mem mem;
    void *impl;
} kn_buffer;

/* A kernel's state in one context for one node (optional): what it derives from shapes and
 * keeps between runs, such as a device library's descriptors and algorithm choices. The kernel
 * makes it on its first run in a context (a struct whose first member is kn_local_state, with
 * release set) and stores it in *kn_kernel_ctx.local; it stays there, for that node and context
 * only, until the context is destroyed, when the runtime calls release once every stream of
 * the context is idle. Shapes may change between runs: a kernel keys what it keeps by the
 * shapes it was made for and remakes it when they differ. Unlike prepare's state it is never
 * shared between contexts, so it needs no lock. */
typedef struct kn_local_state {
    void (*release)(struct kn_local_state *self);
} kn_local_state;

typedef struct kn_kernel_ctx {
    const kn_node *node;
    int n_in;
    const kn_tensor *in; /* every present input has data; omitted ones have dtype 0 */
    int n_out;
    kn_tensor *out;      /* dtype/shape from inference; data allocated by the runtime */
    void *state;         /* what prepare returned (NULL if no prepare) */
    kn_threadpool *pool; /* the context's CPU threads */
    kn_stream *stream;   /* the context's stream of the node's backend (NULL on the CPU) */
    kn_backend *backend; /* the node's backend */
    /* This context's state for this node (see kn_local_state); NULL where a kernel runs
     * outside a context (shape-time evaluation, unit tests): then it keeps nothing. */
    kn_local_state **local;
} kn_kernel_ctx;

/* Runs the node (the CPU) or enqueues it on k->stream (a device). Pointers in k->in and k->out
 * are in the backend's memory space, except inputs the backend reads on the host (caps.host_in),
 * which are host memory and complete when run is called. */
typedef kiln_status (*kn_kernel_fn)(kn_kernel_ctx *k);
/* Called once per node when an engine is created (or a graph is folded). `in` holds every
 * input's dtype; constant inputs (weights) also have shape and data, others have data NULL.
 * Constant data is host memory here. May precompute (e.g. pack weights) into *state. The
 * engine is immutable afterwards: state is shared by all contexts and read-only during
 * execution, except for a cache filled once by whichever run first needs it and published with
 * an atomic compare-and-swap (the CPU Conv's pixel-row weights and, for the convs that may take
 * that path, its GEMM's, nn/conv.c). */
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

/* A backend's answer for one node (see supports). */
typedef struct kn_caps {
    uint64_t host_in;  /* bit j: input j is read on the host (a Reshape's shape, TopK's k) */
    uint32_t layouts;  /* KN_LAYOUT_*_BIT the kernel accepts; 0 means linear */
    bool capture_safe; /* the kernel may be recorded into a stream graph */
    /* KN_LOWER_* bits: reduced-precision float types the backend offers to run this float32
     * node in (its float inputs and outputs in that type, accumulation float32), for the
     * precision pass. 0: float32 only. */
    uint32_t lower;
    /* Of the lower bits, those that pay only inside a region of lowered nodes (a CPU product
     * reading narrow activations in place, where a Cast at each edge would cost more than the
     * narrow product saves): the pass keeps them only where the region's work, lower_work
     * multiply-adds for each element of the node's output summed over the region, is large
     * against the elements Cast at the region's edges; elsewhere the node takes its
     * lower_weights offer. */
    uint32_t lower_region;
    double lower_work;
    /* KN_LOWER_* bits the backend can hold this float32 node's constant weights (input 1) in
     * while the node still reads and writes float32 (a CPU product widens them as it packs):
     * the precision pass stores the weights so where the node is not lowered whole. */
    uint32_t lower_weights;
    /* Of those, the bits where the node widens the weights back to float32 when the engine is
     * made and computes in float32 (storage only); the pass marks such nodes kiln_compute. */
    uint32_t widen_weights;
    /* Why the node stays float32 when reduced precision is asked (a static string), or NULL;
     * the pass records it for kiln inspect. */
    const char *keep_fp32;
    char reason[160]; /* when unsupported: why, for kiln inspect */
} kn_caps;

typedef struct kn_backend_iface {
    const char *name;
    kn_mem mem; /* where this backend's tensors live */

    /* --- kernels --- */
    /* The kernel for (domain, name), or NULL when the backend has none. */
    const kn_kernel *(*find_kernel)(kn_backend *b, const char *domain, const char *name);
    /* Whether the backend runs node n with these inputs and outputs: dtypes and shapes are
     * set; data is set (host memory) for inputs whose values are known at build. Fill caps.
     * Optional: NULL means "every node find_kernel has a kernel for". */
    bool (*supports)(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, kn_caps *caps);
    /* The kernel that runs a plugin node on this backend, given the host's kernel that calls
     * the plugin's enqueue with the backend's stream. Optional: NULL uses the host's kernel. */
    const kn_kernel *(*plugin_kernel)(kn_backend *b, const kn_kernel *host_kernel);

    /* --- memory --- */
    /* Allocate size bytes (64-byte aligned) of space mem. Required for backends whose mem is
     * not host memory; optional otherwise (NULL: the host allocator). */
    kiln_status (*buffer_alloc)(kn_backend *b, kn_mem mem, size_t size, kn_buffer *out);
    void (*buffer_free)(kn_backend *b, kn_buffer *buf);
    /* Copy n bytes between spaces, ordered on stream s (asynchronous on a device: host memory
     * must stay valid and unchanged until an event recorded after it completes). Required for
     * device backends. */
    kiln_status (*copy)(kn_backend *b, kn_stream *s, void *dst, kn_mem dst_mem, const void *src,
                        kn_mem src_mem, size_t n);

    /* --- streams --- */
    /* Optional (NULL: the stream is NULL and synchronous, as on the CPU). */
    kiln_status (*stream_create)(kn_backend *b, kn_stream **out);
    void (*stream_destroy)(kn_backend *b, kn_stream *s);
    /* Wait until everything enqueued on s has run; reports a failure of enqueued work. */
    kiln_status (*stream_sync)(kn_backend *b, kn_stream *s);
    /* The native handle a plugin's enqueue gets in kiln_stream.handle (a cudaStream_t), and
     * the kiln_stream.backend value (KILN_BACKEND_*). Optional: NULL handle, KILN_BACKEND_CPU. */
    void *(*stream_native)(kn_backend *b, kn_stream *s);
    int32_t plugin_stream_kind;

    /* --- events (optional as a group: NULL when the backend's work is synchronous) --- */
    kiln_status (*event_create)(kn_backend *b, kn_event **out);
    void (*event_destroy)(kn_backend *b, kn_event *e);
    /* Mark the point in s's queue that e completes at. */
    kiln_status (*event_record)(kn_backend *b, kn_event *e, kn_stream *s);
    /* Make s wait (without blocking the host) until e has completed. */
    kiln_status (*event_wait)(kn_backend *b, kn_stream *s, kn_event *e);
    /* Block the host until e has completed. */
    kiln_status (*event_sync)(kn_backend *b, kn_event *e);
    /* Milliseconds between two completed events. */
    kiln_status (*event_elapsed)(kn_backend *b, kn_event *start, kn_event *end, float *ms);

    /* --- stream graphs (optional as a group: NULL when capture is not offered) --- */
    /* From capture_begin to capture_end, work enqueued on s (kernels only: the runtime keeps
     * copies and host work out) is recorded instead of run; capture_end returns it as a graph
     * that graph_launch enqueues on s as often as asked, with the same pointers. A capture
     * that fails (a kernel refused recording) is ended with capture_end too, which then
     * reports the failure and returns no graph. */
    kiln_status (*capture_begin)(kn_backend *b, kn_stream *s);
    kiln_status (*capture_end)(kn_backend *b, kn_stream *s, void **graph);
    kiln_status (*graph_launch)(kn_backend *b, kn_stream *s, void *graph);
    void (*graph_destroy)(kn_backend *b, void *graph);

    /* --- build-time tuning (optional as a group: NULL when the backend tunes nothing) --- */
    /* The builder calls these for every node placed on the backend, with its tensors at the
     * profile's opt shapes (dtypes and shapes set; data, host memory, for inputs known at
     * build such as weights). tune_key writes the key of the node's tuning problem: the
     * device, the library versions and the layer's signature (op, dtypes, shapes, the
     * attributes that matter), printable text without tabs or newlines; false when the node
     * has nothing to tune. The timing cache (builder/timing_cache.h) stores choices by it. */
    bool (*tune_key)(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, char *key, size_t size);
    /* Time the node's candidates (cuDNN algorithms, cuBLASLt algorithms, own variants) on
     * buffers of its own, reject those whose output differs from the first candidate's, and
     * write the fastest as up to KN_TACTIC_MAX integers (*n_tactic of them) and a short
     * description for the build's log in note. The builder records the integers in the node's
     * KN_ATTR_TACTIC attribute, which the kernel reads at run time (it checks that the shapes
     * it runs at are those the tactic was timed at, and chooses as without one otherwise). */
    kiln_status (*tune)(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                        const kn_tensor *out, int64_t *tactic, int *n_tactic, char *note,
                        size_t note_size);
    /* What a build's KILN_TACTICS_AUTO means on this backend (kn_tune_auto). */
    int tune_auto;

    /* --- code generation at build (optional: NULL when the backend generates nothing) --- */
    /* Code of the backend's own for node n (dtypes set in in/out; shapes are not known): a
     * kernel compiled for this device, in a form of the backend's choosing, which the builder
     * stores in the node's KN_ATTR_CODE attribute (a byte string in the plan) and the kernel's
     * prepare reads back, so a plan loads without a compiler. *code (from the host allocator,
     * freed by the builder) stays NULL when the node has nothing to generate; note describes
     * the code for the build's log. */
    kiln_status (*generate)(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in,
                            int n_out, const kn_tensor *out, void **code, size_t *size, char *note,
                            size_t note_size);
} kn_backend_iface;

/* When a build that leaves the choice to the backend (KILN_TACTICS_AUTO) times its layers:
 * with a timing cache file only (the default), always, or never. KILN_TACTICS_TIMED and
 * KILN_TACTICS_HEURISTIC override it. */
typedef enum kn_tune_auto {
    KN_TUNE_WITH_CACHE = 0,
    KN_TUNE_ALWAYS = 1,
    KN_TUNE_NEVER = 2,
} kn_tune_auto;

/* The most integers one tactic holds, and the node attribute (ints) that records it. */
#define KN_TACTIC_MAX 16
#define KN_ATTR_TACTIC "kiln_tactic"
/* The node attribute (int, 1..KN_MAX_THREADS) holding how many of the context's threads a host
 * node runs on: the builder's choice by timing (builder/thread_tune.c). Absent: all of them.
 * The executor caps the pool around the node's run, so kernels see it as the pool's size. */
#define KN_ATTR_THREADS "kiln_threads"
#define KN_MAX_THREADS 1024
/* The node attribute (a byte string) holding a backend's generated code (see generate). */
#define KN_ATTR_CODE "kiln_code"

struct kn_backend {
    const kn_backend_iface *iface;
    int device;    /* device ordinal (0 on the CPU) */
    void *context; /* the backend's own state */
};

/* Name of the host backend; every graph input, output and host-read value lives there. */
#define KN_BACKEND_HOST "cpu"

/* The backend registry: backends known to this process, found by name. The CPU backend is
 * built in; others are registered by a module loader or a test. The registry holds one
 * instance per name (device 0), created on first use and kept for the process's life:
 * backends are shared by every engine and context, and their state is immutable or guarded.
 */

/* Find the backend called name. Absent or unusable (no module, no device): KILN_ERR_NOT_FOUND
 * or KILN_ERR_UNSUPPORTED with a message that says why. */
kiln_status kn_backend_get(const char *name, kn_backend **out);
/* The host (CPU) backend; never fails. */
kn_backend *kn_backend_host(void);
/* Make b findable by b->iface->name. b must outlive every engine using it. A name that is
 * already registered is refused. */
kiln_status kn_backend_register(kn_backend *b);
static inline const kn_kernel *kn_backend_find_kernel(kn_backend *b, const char *domain,
                                                      const char *name) {
    return b->iface->find_kernel(b, domain, name);
}
/* Whether the backend called name (found as kn_backend_get does) has a kernel for
 * (domain, op); false when the backend cannot be had. */
bool kn_backend_has_kernel(const char *name, const char *domain, const char *op);
/* Names of the registered backends, comma-separated, for messages. */
const char *kn_backend_names(char *buf, size_t size);

/* Ask b whether it runs node n (see supports); on a backend without supports, whether it has
 * a kernel. caps is always filled. */
bool kn_backend_supports(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                         const kn_tensor *out, kn_caps *caps);

#endif
