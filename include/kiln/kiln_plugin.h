/*
 * kiln_plugin.h — the plugin ABI. The only header a plugin includes.
 *
 * A plugin library exports one entry function:
 *
 *     KILN_PLUGIN_EXPORT int32_t kiln_plugin_entry(const kiln_host_api *host,
 *                                                   kiln_registry *registry) {
 *         if (host->abi_version < 1) return -1;      // the host is too old for us
 *         return host->register_creator(registry, &my_creator);
 *     }
 *
 * The host calls it once per load with its API table; the library registers its creators.
 * A creator describes one plugin (name, version, namespace, the fields it accepts) and creates
 * instances from fields. An instance is { ops, self }: ops is the plugin's function table, self
 * its private state.
 *
 * Versioning promise: every table starts with struct_size and abi_version. Members are only
 * ever appended. Before touching a member, the reader checks struct_size covers it (the macro
 * KILN_HAS_MEMBER does this), so an old plugin works with a new host and a new plugin can
 * detect an old host. KILN_PLUGIN_ABI_VERSION changes only when a member is appended.
 *
 * Ownership: everything the host passes to a plugin is borrowed for the duration of the call
 * unless stated otherwise. Everything a plugin returns through a pointer (names, field lists)
 * stays owned by the plugin and must stay valid until the next call on the same object or its
 * destroy. The host never frees plugin memory and plugins never free host memory.
 *
 * Errors: functions returning int32_t return 0 on success. On failure they should call
 * host->set_error() with a one-line reason first; the host adds the plugin and node names.
 *
 * Threads: create, clone and destroy may run on any thread. One instance (clone) is used by
 * one execution context, so calls on one instance never overlap; distinct clones run
 * concurrently. Plugins must not keep global mutable state without their own locking.
 */
#ifndef KILN_PLUGIN_H
#define KILN_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_PLUGIN_ABI_VERSION 2
#define KILN_PLUGIN_MAX_RANK 8

#if defined(__GNUC__)
#define KILN_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define KILN_PLUGIN_EXPORT
#endif

/* True when the table `p` (with struct_size) is large enough to hold `member`. */
#define KILN_HAS_MEMBER(p, type, member)                                                           \
    ((p)->struct_size >= offsetof(type, member) + sizeof(((type *)0)->member))

typedef struct kiln_registry kiln_registry;
typedef struct kiln_expr kiln_expr;                 /* a dimension expression (host-owned) */
typedef struct kiln_expr_builder kiln_expr_builder; /* host-owned, valid during one call */

/* Data types use ONNX's TensorProto numbering, as kiln_dtype in kiln.h. */
enum {
    KILN_PLUGIN_FLOAT32 = 1,
    KILN_PLUGIN_UINT8 = 2,
    KILN_PLUGIN_INT8 = 3,
    KILN_PLUGIN_INT32 = 6,
    KILN_PLUGIN_INT64 = 7,
    KILN_PLUGIN_BOOL = 9,
    KILN_PLUGIN_FLOAT16 = 10,
};

/* Memory layouts. Row-major ("linear") is the only one the CPU backend produces today. */
enum { KILN_LAYOUT_LINEAR = 0, KILN_LAYOUT_NHWC = 1 };

/* Backends a stream can belong to. */
enum { KILN_BACKEND_CPU = 0, KILN_BACKEND_CUDA = 1 };

/* Field types, for creation and serialization. count: elements for arrays, bytes for
 * strings (without a terminator; data is also NUL-terminated when it comes from the host)
 * and raw bytes, 1 for scalars. */
typedef enum kiln_field_type {
    KILN_FIELD_INT64 = 1,
    KILN_FIELD_FLOAT32 = 2,
    KILN_FIELD_STRING = 3,
    KILN_FIELD_INT64S = 4,
    KILN_FIELD_FLOAT32S = 5,
    KILN_FIELD_BYTES = 6,
} kiln_field_type;

typedef struct kiln_field {
    const char *name;
    int32_t type; /* kiln_field_type */
    int64_t count;
    const void *data; /* int64_t*, float*, char* or bytes */
} kiln_field;

typedef struct kiln_field_list {
    int32_t count;
    const kiln_field *fields;
} kiln_field_list;

/* What a creator accepts: a field's name, type and whether it must be given. */
typedef struct kiln_field_spec {
    const char *name;
    int32_t type;
    int32_t required;
} kiln_field_spec;

/* A tensor as the plugin sees it at configure/enqueue time: concrete dims. */
typedef struct kiln_tensor_desc {
    int32_t dtype;
    int32_t layout;
    int32_t rank;
    int64_t dims[KILN_PLUGIN_MAX_RANK];
} kiln_tensor_desc;

/* A tensor across an optimization profile: dims at opt, and the min and max bounds. */
typedef struct kiln_dynamic_desc {
    kiln_tensor_desc desc; /* dims at the profile's opt shapes */
    int64_t min[KILN_PLUGIN_MAX_RANK];
    int64_t max[KILN_PLUGIN_MAX_RANK];
} kiln_dynamic_desc;

/* Output shape rules are written as expressions of input dims, so one plugin works for every
 * shape in every profile. */
typedef struct kiln_shape_expr {
    int32_t rank;
    const kiln_expr *dims[KILN_PLUGIN_MAX_RANK];
} kiln_shape_expr;

typedef enum kiln_expr_op {
    KILN_EXPR_ADD = 0,
    KILN_EXPR_SUB = 1,
    KILN_EXPR_MUL = 2,
    KILN_EXPR_FLOOR_DIV = 3,
    KILN_EXPR_CEIL_DIV = 4,
    KILN_EXPR_MIN = 5,
    KILN_EXPR_MAX = 6,
} kiln_expr_op;

/* The stream an enqueue runs on. CPU: handle is NULL and work may be split over the
 * context's threads with host->parallel_for(stream, ...). CUDA: handle is a cudaStream_t. */
typedef struct kiln_stream {
    int32_t backend;
    void *handle;
    void *host_private; /* for host->parallel_for; do not touch */
} kiln_stream;

/* The plugin's function table. Optional members may be NULL; the host then uses the default
 * stated for each. */
typedef struct kiln_plugin_ops {
    uint32_t struct_size; /* sizeof(kiln_plugin_ops) as the plugin was compiled */
    uint32_t abi_version; /* KILN_PLUGIN_ABI_VERSION as the plugin was compiled */

    int32_t (*num_outputs)(void *self);
    /* Output dtypes from input dtypes. Optional: default every output = input 0's dtype. */
    int32_t (*output_dtypes)(void *self, int32_t n_in, const int32_t *in_dtypes, int32_t n_out,
                             int32_t *out_dtypes);
    /* Output shapes as expressions of the inputs' dims (use host->expr_* with b). */
    int32_t (*output_shapes)(void *self, int32_t n_in, const kiln_shape_expr *in, int32_t n_out,
                             kiln_shape_expr *out, kiln_expr_builder *b);
    /* Whether the dtype/layout at position pos (inputs first, then outputs) is supported,
     * given the descs at positions < pos already chosen. Return 1 for yes, 0 for no.
     * Optional: default accepts float32 linear only. */
    int32_t (*supports_format)(void *self, int32_t pos, const kiln_tensor_desc *descs, int32_t n_in,
                               int32_t n_out);
    /* Called once per engine (and again on a clone) with the profile ranges. Optional. */
    int32_t (*configure)(void *self, int32_t n_in, const kiln_dynamic_desc *in, int32_t n_out,
                         const kiln_dynamic_desc *out);
    /* Scratch bytes enqueue needs for these shapes. Optional: 0. */
    size_t (*workspace_size)(void *self, int32_t n_in, const kiln_tensor_desc *in, int32_t n_out,
                             const kiln_tensor_desc *out);
    /* Concrete shapes changed (before the next enqueue). Optional. */
    int32_t (*on_shape_change)(void *self, int32_t n_in, const kiln_tensor_desc *in, int32_t n_out,
                               const kiln_tensor_desc *out);
    /* Compute. inputs/outputs are device pointers of the stream's backend (host memory on
     * the CPU), row-major for the linear layout. workspace has workspace_size bytes (64-byte
     * aligned) or is NULL when 0 were asked for. */
    int32_t (*enqueue)(void *self, int32_t n_in, const kiln_tensor_desc *in_desc,
                       const void *const *inputs, int32_t n_out, const kiln_tensor_desc *out_desc,
                       void *const *outputs, void *workspace, const kiln_stream *stream);
    /* The fields that re-create this instance (stored in plans). Owned by the plugin, valid
     * until the next call on self or destroy. Optional: the fields it was created from. */
    int32_t (*get_fields)(void *self, kiln_field_list *out);
    /* A copy for another execution context. Optional: self is shared, so then enqueue must
     * be thread-safe. */
    void *(*clone)(void *self);
    void (*destroy)(void *self);

    /* --- abi_version 2 --- */
    /* Whether enqueue can run on the named backend's stream with that backend's memory
     * ("cpu", "cuda", ...). Optional (or an older plugin): the CPU only. */
    int32_t (*supports_backend)(void *self, const char *backend);
    /* KILN_PLUGIN_FLAG_* bits. */
    uint32_t flags;
} kiln_plugin_ops;

/* enqueue only enqueues work on its stream: it never synchronizes, allocates or reads device
 * memory on the host, so it may be recorded into a stream graph (a CUDA graph). */
#define KILN_PLUGIN_FLAG_GRAPH_SAFE 1u

typedef struct kiln_plugin_instance {
    const kiln_plugin_ops *ops;
    void *self;
} kiln_plugin_instance;

typedef struct kiln_plugin_creator {
    uint32_t struct_size;
    uint32_t abi_version;
    const char *name;             /* e.g. "Swish" */
    const char *version;          /* e.g. "1" */
    const char *plugin_namespace; /* e.g. "" or "custom" */
    int32_t n_field_specs;
    const kiln_field_spec *field_specs;
    /* Create from fields (ONNX attributes at build, a plan's stored fields at load). Bad or
     * missing fields: set_error and return non-zero. */
    int32_t (*create)(const struct kiln_plugin_creator *creator, const kiln_field_list *fields,
                      kiln_plugin_instance *out);
    void *user; /* for the creator's own use (e.g. a language binding) */
} kiln_plugin_creator;

/* The host's API table, given to kiln_plugin_entry. Stays valid while the library is loaded. */
typedef struct kiln_host_api {
    uint32_t struct_size;
    uint32_t abi_version;
    /* Register a creator. The registry copies the creator table and its strings; the
     * function pointers and `user` must stay valid while the library is loaded. */
    int32_t (*register_creator)(kiln_registry *registry, const kiln_plugin_creator *creator);
    /* Set the error message for the failing call (printf-style, one line). */
    void (*set_error)(const char *fmt, ...);
    /* 0 error, 1 warning, 2 info, 3 verbose. */
    void (*log)(int32_t level, const char *message);
    /* Dimension expressions, valid for the duration of the output_shapes call. */
    const kiln_expr *(*expr_constant)(kiln_expr_builder *b, int64_t value);
    const kiln_expr *(*expr_op)(kiln_expr_builder *b, int32_t op, const kiln_expr *x,
                                const kiln_expr *y);
    /* 1 and *value set if e has a known value in this call; 0 otherwise. */
    int32_t (*expr_value)(const kiln_expr *e, int64_t *value);
    /* Split [0, n) across the stream's CPU threads; fn(arg, begin, end). */
    void (*parallel_for)(const kiln_stream *stream, int64_t n, int64_t grain,
                         void (*fn)(void *arg, int64_t begin, int64_t end), void *arg);
} kiln_host_api;

/* The one symbol a plugin library exports. Returns 0 on success. */
typedef int32_t (*kiln_plugin_entry_fn)(const kiln_host_api *host, kiln_registry *registry);
#define KILN_PLUGIN_ENTRY_SYMBOL "kiln_plugin_entry"

#ifdef __cplusplus
}
#endif
#endif /* KILN_PLUGIN_H */
