/* A program built outside kiln's tree against an installed prefix. It loads the outside plugin
 * given as argv[1], builds y = relu(TimesThree(x)) with the network API, runs it and checks
 * every value; it prints the version so the test can compare it with the package's. */
#include <kiln/kiln.h>

#include <stdio.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != KILN_OK) {                                                                   \
            fprintf(stderr, "%s: %s\n", #call, kiln_last_error());                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: app PLUGIN.so\n");
        return 2;
    }
    kiln_registry *reg;
    CHECK(kiln_registry_create(&reg));
    CHECK(kiln_registry_load_library(reg, argv[1]));
    kiln_builder *b;
    CHECK(kiln_builder_create(&b));
    CHECK(kiln_builder_set_registry(b, reg));
    kiln_network *net;
    CHECK(kiln_network_create(b, 0, &net));
    int64_t dims[2] = {2, 3};
    int32_t x, t, y;
    CHECK(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT32, 2, dims, NULL, &x));
    CHECK(kiln_network_add_plugin(net, "times3", "TimesThree", NULL, NULL, 1, &x, 0, NULL, 1, &t));
    CHECK(kiln_network_add_activation(net, "relu", t, KILN_ACT_RELU, 0, 0, &y));
    CHECK(kiln_network_set_tensor_name(net, y, "y"));
    CHECK(kiln_network_mark_output(net, y));
    kiln_build_config *cfg;
    CHECK(kiln_build_config_create(&cfg));
    void *plan;
    size_t plan_size;
    CHECK(kiln_build(b, net, cfg, &plan, &plan_size));
    kiln_engine *e;
    CHECK(kiln_engine_load_memory(plan, plan_size, reg, &e));
    kiln_context *ctx;
    CHECK(kiln_context_create(e, &ctx));
    const float in[6] = {-2.0f, -0.5f, 0.0f, 0.25f, 1.0f, 4.0f};
    CHECK(kiln_context_set_input(ctx, "x", in, sizeof in));
    CHECK(kiln_context_execute(ctx));
    kiln_tensor_view out;
    CHECK(kiln_context_get_output(ctx, "y", &out));
    const float *v = out.data;
    for (int i = 0; i < 6; i++) {
        float want = in[i] > 0 ? 3.0f * in[i] : 0.0f;
        if (v[i] != want) {
            fprintf(stderr, "y[%d] = %g, expected %g\n", i, v[i], want);
            return 1;
        }
    }
    printf("kiln %s ok\n", kiln_version_string());
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kiln_free(plan);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
    kiln_registry_destroy(reg);
    return 0;
}
