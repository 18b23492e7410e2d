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

static kiln_status cpu_stream_create(kn_stream **out) {
    *out = NULL;
    return KILN_OK;
}

static void cpu_stream_destroy(kn_stream *s) {
    (void)s;
}

static kiln_status cpu_stream_sync(kn_stream *s) {
    (void)s;
    return KILN_OK;
}

static const kn_backend_iface cpu_iface = {
    .name = "cpu",
    .find_kernel = cpu_find_kernel,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
};

const kn_backend_iface *kn_backend_cpu(void) {
    return &cpu_iface;
}
