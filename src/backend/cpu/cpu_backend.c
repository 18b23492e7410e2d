#include "backend/cpu/cpu.h"

#include <string.h>

static const kn_kernel *const families[] = {
    kn_cpu_elementwise, kn_cpu_tensor, kn_cpu_reduce, kn_cpu_nn,    kn_cpu_pool,
    kn_cpu_norm,        kn_cpu_rnn,    kn_cpu_misc,   kn_cpu_extra,
};

static const kn_kernel *cpu_find_kernel(const char *domain, const char *name) {
    if (domain == NULL || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const kn_kernel *k = families[f]; k->name != NULL; k++)
            if (strcmp(k->name, name) == 0 && strcmp(k->domain, domain) == 0)
                return k;
    return NULL;
}

static const kn_kernel *cpu_backend_find_kernel(kn_backend *b, const char *domain,
                                                const char *name) {
    (void)b;
    return cpu_find_kernel(domain, name);
}

/* The CPU runs every kernel synchronously on the calling thread (and the context's pool):
 * no stream, no events, host memory from the host allocator. */
static const kn_backend_iface cpu_iface = {
    .name = KN_BACKEND_HOST,
    .mem = KN_MEM_HOST,
    .find_kernel = cpu_backend_find_kernel,
};

static kn_backend cpu_backend = {.iface = &cpu_iface, .device = 0, .context = NULL};

kn_backend *kn_cpu_backend(void) {
    return &cpu_backend;
}
