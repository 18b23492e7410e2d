/* The contract between libkiln and a backend module (a shared library such as
 * libkiln_cuda.so, loaded by the backend registry on first use of its name). libkiln never
 * links a device library: everything device-specific lives in the module, which is built
 * against backend.h and this header.
 *
 * A module exports one symbol, kn_backend_entry. It gets the host's table (errors reach the
 * caller's thread through it: kiln's error text is thread-local and lives in libkiln) and
 * returns its backend, or an error whose message says why it cannot run here (no device,
 * driver too old, other architecture). */
#ifndef KN_BACKEND_MODULE_H
#define KN_BACKEND_MODULE_H

#include "backend/backend.h"

#include <stdint.h>

/* Bumped whenever kn_backend_iface, kn_kernel_ctx, kn_tensor, kn_node or this table change
 * shape: a module built against another version is refused by name and version. */
#define KN_BACKEND_MODULE_VERSION 4
#define KN_BACKEND_ENTRY_SYMBOL "kn_backend_entry"

typedef struct kn_backend_host_api {
    uint32_t struct_size;
    uint32_t version; /* KN_BACKEND_MODULE_VERSION */
    /* Set the calling thread's error message and return code (kn_error). */
    kiln_status (*error)(kiln_status code, const char *message);
    void (*log)(kiln_log_level level, const char *message);
    /* The host's allocator hook (kn_malloc / kn_free). */
    void *(*alloc)(size_t size);
    void (*free)(void *p);
    /* Node attributes (ir/graph.h's kn_attr_*). */
    const kn_attr *(*attr)(const kn_node *n, const char *name);
    int64_t (*attr_int)(const kn_node *n, const char *name, int64_t def);
    float (*attr_float)(const kn_node *n, const char *name, float def);
    int64_t (*attr_ints)(const kn_node *n, const char *name, const int64_t **out);
    /* The host backend, for kernels a module leaves on the CPU. */
    kn_backend *(*host_backend)(void);
} kn_backend_host_api;

typedef kiln_status (*kn_backend_entry_fn)(const kn_backend_host_api *host, uint32_t version,
                                           kn_backend **out);

#endif
