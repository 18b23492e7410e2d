/* A plugin built outside kiln's tree against an installed prefix: y = 3 * x over float32.
 * It includes only the installed kiln_plugin.h and links nothing of kiln. */
#include <kiln/kiln_plugin.h>

#include <stdlib.h>

static const kiln_host_api *g_host;

static int32_t tt_num_outputs(void *self) {
    (void)self;
    return 1;
}

static int32_t tt_output_shapes(void *self, int32_t n_in, const kiln_shape_expr *in, int32_t n_out,
                                kiln_shape_expr *out, kiln_expr_builder *b) {
    (void)self, (void)b;
    if (n_in != 1 || n_out != 1) {
        g_host->set_error("TimesThree takes 1 input and makes 1 output; got %d and %d", (int)n_in,
                          (int)n_out);
        return -1;
    }
    out[0] = in[0];
    return 0;
}

static int32_t tt_enqueue(void *self, int32_t n_in, const kiln_tensor_desc *in_desc,
                          const void *const *inputs, int32_t n_out,
                          const kiln_tensor_desc *out_desc, void *const *outputs, void *workspace,
                          const kiln_stream *stream) {
    (void)self, (void)n_in, (void)n_out, (void)out_desc, (void)workspace, (void)stream;
    int64_t n = 1;
    for (int32_t d = 0; d < in_desc[0].rank; d++)
        n *= in_desc[0].dims[d];
    const float *x = inputs[0];
    float *y = outputs[0];
    for (int64_t i = 0; i < n; i++)
        y[i] = 3.0f * x[i];
    return 0;
}

static void tt_destroy(void *self) {
    (void)self;
}

static const kiln_plugin_ops tt_ops = {
    .struct_size = sizeof(kiln_plugin_ops),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .num_outputs = tt_num_outputs,
    .output_shapes = tt_output_shapes,
    .enqueue = tt_enqueue,
    .destroy = tt_destroy,
};

static int32_t tt_create(const kiln_plugin_creator *creator, const kiln_field_list *fields,
                         kiln_plugin_instance *out) {
    (void)creator;
    if (fields != NULL && fields->count != 0) {
        g_host->set_error("TimesThree takes no fields");
        return -1;
    }
    out->ops = &tt_ops;
    out->self = NULL;
    return 0;
}

KILN_PLUGIN_EXPORT int32_t kiln_plugin_entry(const kiln_host_api *host, kiln_registry *registry) {
    if (host == NULL || host->abi_version < 1)
        return -1;
    g_host = host;
    static const kiln_plugin_creator creator = {
        .struct_size = sizeof(kiln_plugin_creator),
        .abi_version = KILN_PLUGIN_ABI_VERSION,
        .name = "TimesThree",
        .version = "1",
        .plugin_namespace = "",
        .create = tt_create,
    };
    return host->register_creator(registry, &creator);
}
