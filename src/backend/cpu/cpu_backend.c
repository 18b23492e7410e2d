#include "backend/cpu/cpu.h"

#include "ops/fused_elementwise.h"

#include <string.h>

static const kn_kernel kernels[] = {
#define KN_CPU_KERNEL(domain, name, run) {domain, name, run, NULL, NULL},
#define KN_CPU_KERNEL_STATE(domain, name, run, prepare, release)                                   \
    {domain, name, run, prepare, release},
#include "backend/cpu/kernel_list.h"
#undef KN_CPU_KERNEL
#undef KN_CPU_KERNEL_STATE
};

static const kn_kernel *cpu_find_kernel(const char *domain, const char *name) {
    if (domain == NULL || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (strcmp(kernels[i].name, name) == 0 && strcmp(kernels[i].domain, domain) == 0)
            return &kernels[i];
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
