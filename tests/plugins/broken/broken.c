/* A deliberately broken plugin, for testing `kiln plugin-check`. Never load it into a real
 * build. It computes y = x * scale, and breaks the ABI's rules in four ways the checker must
 * each report:
 *   1. create does not validate its fields: a missing required `scale` or one of the wrong
 *      type is accepted (the wrong type is even read as a float).
 *   2. output_shapes claims rank 9 (more than KILN_PLUGIN_MAX_RANK) for rank-4 inputs whose
 *      last dim is above 32, without an error.
 *   3. enqueue leaves the last output element unwritten.
 *   4. every instance and clone stages its input through one global buffer, so clones used
 *      from several threads mix each other's data. */
#include "kiln/kiln_plugin.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct broken {
    const kiln_host_api *host;
    float scale;
} broken;

static float g_stage[1 << 16]; /* the shared state that makes clones race */

static const kiln_field_spec broken_specs[] = {
    {.name = "scale", .type = KILN_FIELD_FLOAT32, .required = 1},
};

static int32_t broken_num_outputs(void *self) {
    (void)self;
    return 1;
}

static int32_t broken_output_shapes(void *self, int32_t n_in, const kiln_shape_expr *in,
                                    int32_t n_out, kiln_shape_expr *out, kiln_expr_builder *b) {
    broken *s = self;
    (void)b;
    if (n_in != 1 || n_out != 1) {
        s->host->set_error("Broken takes 1 input");
        return -1;
    }
    out[0] = in[0];
    int64_t last;
    if (in[0].rank == 4 && s->host->expr_value(in[0].dims[3], &last) && last > 32)
        out[0].rank = KILN_PLUGIN_MAX_RANK + 1;
    return 0;
}

static int32_t broken_enqueue(void *self, int32_t n_in, const kiln_tensor_desc *in_desc,
                              const void *const *inputs, int32_t n_out,
                              const kiln_tensor_desc *out_desc, void *const *outputs,
                              void *workspace, const kiln_stream *stream) {
    broken *s = self;
    (void)n_in, (void)n_out, (void)out_desc, (void)workspace, (void)stream;
    int64_t n = 1;
    for (int d = 0; d < in_desc[0].rank; d++)
        n *= in_desc[0].dims[d];
    const float *x = inputs[0];
    float *y = outputs[0];
    for (int64_t i = 0; i + 1 < n; i += (int64_t)(sizeof g_stage / sizeof g_stage[0])) {
        int64_t m = n - 1 - i;
        if (m > (int64_t)(sizeof g_stage / sizeof g_stage[0]))
            m = (int64_t)(sizeof g_stage / sizeof g_stage[0]);
        memcpy(g_stage, x + i, (size_t)m * sizeof(float));
        /* widen the window in which another thread overwrites the stage */
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
        for (int64_t j = 0; j < m; j++)
            y[i + j] = g_stage[j] * s->scale;
    }
    return 0;
}

static void *broken_clone(void *self) {
    broken *c = malloc(sizeof *c);
    if (c != NULL)
        *c = *(const broken *)self;
    return c;
}

static void broken_destroy(void *self) {
    free(self);
}

static const kiln_plugin_ops broken_ops = {
    .struct_size = sizeof(kiln_plugin_ops),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .num_outputs = broken_num_outputs,
    .output_shapes = broken_output_shapes,
    .enqueue = broken_enqueue,
    .clone = broken_clone,
    .destroy = broken_destroy,
};

static int32_t broken_create(const kiln_plugin_creator *creator, const kiln_field_list *fields,
                             kiln_plugin_instance *out) {
    broken *s = malloc(sizeof *s);
    if (s == NULL)
        return -1;
    s->host = creator->user;
    s->scale = 1.0f;
    for (int32_t i = 0; fields && i < fields->count; i++)
        if (fields->fields[i].name && strcmp(fields->fields[i].name, "scale") == 0 &&
            fields->fields[i].data)
            memcpy(&s->scale, fields->fields[i].data, sizeof s->scale);
    out->ops = &broken_ops;
    out->self = s;
    return 0;
}

KILN_PLUGIN_EXPORT int32_t kiln_plugin_entry(const kiln_host_api *host, kiln_registry *registry) {
    kiln_plugin_creator c = {
        .struct_size = sizeof(kiln_plugin_creator),
        .abi_version = KILN_PLUGIN_ABI_VERSION,
        .name = "Broken",
        .version = "1",
        .plugin_namespace = "test",
        .n_field_specs = 1,
        .field_specs = broken_specs,
        .create = broken_create,
        .user = (void *)host,
    };
    return host->register_creator(registry, &c);
}
