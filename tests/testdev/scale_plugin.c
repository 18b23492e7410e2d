/* TestScale: y = x * scale (float32), a plugin whose enqueue runs on the host and on testdev
 * (ABI v2's supports_backend), so placement can put it on either. Built for tests only.
 * Two variants of the same op prove the ABI's compatibility rules: TestScaleDevOnly declares
 * testdev alone (never the host), and TestScaleV1 is the table as an ABI v1 plugin compiled
 * it (struct_size ends before supports_backend), which must still load and run on the host. */
#include <stddef.h>
#include "kiln/kiln_plugin.h"

#include <stdlib.h>
#include <string.h>

typedef struct scale {
    float factor;
    kiln_field field;
} scale;

static const kiln_host_api *host;

static int32_t sc_num_outputs(void *self) {
    (void)self;
    return 1;
}

static int32_t sc_output_shapes(void *self, int32_t n_in, const kiln_shape_expr *in, int32_t n_out,
                                kiln_shape_expr *out, kiln_expr_builder *b) {
    (void)self;
    (void)b;
    if (n_in != 1 || n_out != 1) {
        host->set_error("TestScale takes 1 input and makes 1 output");
        return -1;
    }
    out[0] = in[0];
    return 0;
}

static int32_t sc_enqueue(void *self, int32_t n_in, const kiln_tensor_desc *in_desc,
                          const void *const *inputs, int32_t n_out,
                          const kiln_tensor_desc *out_desc, void *const *outputs, void *workspace,
                          const kiln_stream *stream) {
    (void)n_in;
    (void)n_out;
    (void)out_desc;
    (void)workspace;
    (void)stream;
    const scale *s = self;
    int64_t n = 1;
    for (int d = 0; d < in_desc[0].rank; d++)
        n *= in_desc[0].dims[d];
    const float *x = inputs[0];
    float *y = outputs[0];
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * s->factor;
    return 0;
}

static int32_t sc_get_fields(void *self, kiln_field_list *out) {
    scale *s = self;
    s->field =
        (kiln_field){.name = "factor", .type = KILN_FIELD_FLOAT32, .count = 1, .data = &s->factor};
    out->count = 1;
    out->fields = &s->field;
    return 0;
}

static void *sc_clone(void *self) {
    scale *c = malloc(sizeof *c);
    if (c)
        memcpy(c, self, sizeof *c);
    return c;
}

static void sc_destroy(void *self) {
    free(self);
}

static int32_t sc_supports_backend(void *self, const char *backend) {
    (void)self;
    return strcmp(backend, "cpu") == 0 || strcmp(backend, "testdev") == 0;
}

static const kiln_plugin_ops sc_ops = {
    .struct_size = sizeof(kiln_plugin_ops),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .num_outputs = sc_num_outputs,
    .output_shapes = sc_output_shapes,
    .enqueue = sc_enqueue,
    .get_fields = sc_get_fields,
    .clone = sc_clone,
    .destroy = sc_destroy,
    .supports_backend = sc_supports_backend,
    .flags = KILN_PLUGIN_FLAG_GRAPH_SAFE,
};

static int32_t sc_dev_only(void *self, const char *backend) {
    (void)self;
    return strcmp(backend, "testdev") == 0;
}

static const kiln_plugin_ops sc_dev_only_ops = {
    .struct_size = sizeof(kiln_plugin_ops),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .num_outputs = sc_num_outputs,
    .output_shapes = sc_output_shapes,
    .enqueue = sc_enqueue,
    .get_fields = sc_get_fields,
    .clone = sc_clone,
    .destroy = sc_destroy,
    .supports_backend = sc_dev_only,
};

/* What an ABI v1 plugin's table was: the members after destroy did not exist, so the host
 * must not read them (they hold values an old host never looked at). */
static const kiln_plugin_ops sc_v1_ops = {
    .struct_size = offsetof(kiln_plugin_ops, supports_backend),
    .abi_version = 1,
    .num_outputs = sc_num_outputs,
    .output_shapes = sc_output_shapes,
    .enqueue = sc_enqueue,
    .get_fields = sc_get_fields,
    .clone = sc_clone,
    .destroy = sc_destroy,
    .supports_backend = sc_supports_backend,
    .flags = KILN_PLUGIN_FLAG_GRAPH_SAFE,
};

static const kiln_field_spec sc_specs[] = {
    {.name = "factor", .type = KILN_FIELD_FLOAT32, .required = 1},
};

static int32_t sc_create(const kiln_plugin_creator *c, const kiln_field_list *fields,
                         kiln_plugin_instance *out) {
    scale *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -1;
    s->factor = 1.0f;
    /* Strict about fields: kiln's own node attributes (such as where placement put the node)
     * must never reach a plugin as fields. */
    for (int i = 0; i < fields->count; i++) {
        if (strcmp(fields->fields[i].name, "factor") != 0) {
            host->set_error("TestScale takes only 'factor'; got '%s'", fields->fields[i].name);
            free(s);
            return -1;
        }
        if (fields->fields[i].type == KILN_FIELD_FLOAT32 && fields->fields[i].count == 1)
            s->factor = *(const float *)fields->fields[i].data;
    }
    const char *name = c->name;
    out->ops = strcmp(name, "TestScaleDevOnly") == 0 ? &sc_dev_only_ops
               : strcmp(name, "TestScaleV1") == 0    ? &sc_v1_ops
                                                     : &sc_ops;
    out->self = s;
    return 0;
}

KILN_PLUGIN_EXPORT int32_t kiln_plugin_entry(const kiln_host_api *h, kiln_registry *registry) {
    if (h == NULL || h->abi_version < 1)
        return -1;
    host = h;
    kiln_plugin_creator c = {
        .struct_size = sizeof(kiln_plugin_creator),
        .abi_version = KILN_PLUGIN_ABI_VERSION,
        .name = "TestScale",
        .version = "1",
        .plugin_namespace = "",
        .n_field_specs = 1,
        .field_specs = sc_specs,
        .create = sc_create,
    };
    static const char *const names[] = {"TestScale", "TestScaleDevOnly", "TestScaleV1"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        c.name = names[i];
        if (h->register_creator(registry, &c) != 0)
            return -1;
    }
    return 0;
}
