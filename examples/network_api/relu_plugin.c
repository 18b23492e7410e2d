/* A ReLU plugin registered statically (no shared library), used in a network built by code:
 * one input of 1x1x10x10, one plugin layer, one output. The program builds the plan, runs it
 * on random data and checks y == max(x, 0) exactly. Exit code 0 when the check passes.
 *
 * The plugin is written against kiln_plugin.h only, as a plugin in its own library would be;
 * the application registers its creator with kiln_registry_register. */
#include "kiln/kiln.h"
#include "kiln/kiln_plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        kiln_status rc_ = (call);                                                                  \
        if (rc_ != KILN_OK) {                                                                      \
            fprintf(stderr, "%s failed: %s: %s\n", #call, kiln_status_name(rc_),                   \
                    kiln_last_error());                                                            \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* ---- the plugin ---------------------------------------------------------------------------- */

static const kiln_host_api *host;

static int32_t relu_num_outputs(void *self) {
    (void)self;
    return 1;
}

static int32_t relu_output_shapes(void *self, int32_t n_in, const kiln_shape_expr *in,
                                  int32_t n_out, kiln_shape_expr *out, kiln_expr_builder *b) {
    (void)self;
    (void)b;
    if (n_in != 1 || n_out != 1) {
        host->set_error("Relu takes one input and makes one output (got %d and %d)", (int)n_in,
                        (int)n_out);
        return -1;
    }
    out[0] = in[0];
    return 0;
}

static int32_t relu_enqueue(void *self, int32_t n_in, const kiln_tensor_desc *in_desc,
                            const void *const *inputs, int32_t n_out,
                            const kiln_tensor_desc *out_desc, void *const *outputs, void *workspace,
                            const kiln_stream *stream) {
    (void)self;
    (void)n_in;
    (void)n_out;
    (void)out_desc;
    (void)workspace;
    (void)stream;
    int64_t n = 1;
    for (int d = 0; d < in_desc[0].rank; d++)
        n *= in_desc[0].dims[d];
    const float *x = inputs[0];
    float *y = outputs[0];
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return 0;
}

/* Stateless: every instance is the same static token, and nothing needs freeing. */
static void relu_destroy(void *self) {
    (void)self;
}

static void *relu_clone(void *self) {
    return self;
}

static const kiln_plugin_ops relu_ops = {
    .struct_size = sizeof(kiln_plugin_ops),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .num_outputs = relu_num_outputs,
    .output_shapes = relu_output_shapes,
    .enqueue = relu_enqueue,
    .clone = relu_clone,
    .destroy = relu_destroy,
};

static int relu_token;

static int32_t relu_create(const kiln_plugin_creator *creator, const kiln_field_list *fields,
                           kiln_plugin_instance *out) {
    (void)creator;
    if (fields != NULL && fields->count != 0) {
        host->set_error("Relu takes no fields (got %d)", (int)fields->count);
        return -1;
    }
    out->ops = &relu_ops;
    out->self = &relu_token;
    return 0;
}

static const kiln_plugin_creator relu_creator = {
    .struct_size = sizeof(kiln_plugin_creator),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .name = "ExampleRelu",
    .version = "1",
    .plugin_namespace = "",
    .n_field_specs = 0,
    .field_specs = NULL,
    .create = relu_create,
};

/* ---- the application ----------------------------------------------------------------------- */

int main(void) {
    enum { N = 100 };
    kiln_registry *reg = NULL;
    kiln_builder *b = NULL;
    kiln_network *net = NULL;
    kiln_build_config *cfg = NULL;
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    void *plan = NULL;
    size_t plan_size = 0;
    int ok = 0;

    host = kiln_host_api_get();
    CHECK(kiln_registry_create(&reg));
    CHECK(kiln_registry_register(reg, &relu_creator));
    CHECK(kiln_builder_create(&b));
    CHECK(kiln_builder_set_registry(b, reg));

    CHECK(kiln_network_create(b, 17, &net));
    const int64_t dims[4] = {1, 1, 10, 10};
    int32_t x, y;
    CHECK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT32, 4, dims, NULL, &x));
    CHECK(kiln_network_add_plugin(net, "relu", "ExampleRelu", NULL, NULL, 1, &x, 0, NULL, 1, &y));
    CHECK(kiln_network_set_tensor_name(net, y, "y"));
    CHECK(kiln_network_mark_output(net, y));

    CHECK(kiln_build_config_create(&cfg));
    CHECK(kiln_build(b, net, cfg, &plan, &plan_size));
    printf("built a %zu-byte plan with %d layer(s)\n", plan_size, kiln_network_num_layers(net));

    CHECK(kiln_engine_load_memory(plan, plan_size, reg, &e));
    CHECK(kiln_context_create(e, &ctx));

    float in[N];
    srand(1234);
    for (int i = 0; i < N; i++)
        in[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    CHECK(kiln_context_set_input(ctx, "x", in, sizeof in));
    CHECK(kiln_context_execute(ctx));
    kiln_tensor_view out;
    CHECK(kiln_context_get_output(ctx, "y", &out));

    int bad = 0;
    if (out.dtype != KILN_DTYPE_FLOAT32 || out.rank != 4 || out.size != sizeof in) {
        fprintf(stderr, "output has dtype %d, rank %d, %zu bytes\n", out.dtype, out.rank, out.size);
        bad = N;
    }
    const float *yv = out.data;
    for (int i = 0; i < N && !bad; i++) {
        float want = in[i] > 0.0f ? in[i] : 0.0f;
        if (memcmp(&yv[i], &want, sizeof want) != 0) {
            fprintf(stderr, "y[%d] = %g, expected %g\n", i, (double)yv[i], (double)want);
            bad++;
        }
    }
    int negatives = 0;
    for (int i = 0; i < N; i++)
        negatives += in[i] < 0.0f;
    printf("%d/%d outputs equal max(x, 0) exactly (%d inputs were negative)\n", N - bad, N,
           negatives);
    ok = bad == 0 && negatives > 0 && negatives < N;

fail:
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kiln_free(plan);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
    kiln_registry_destroy(reg);
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
