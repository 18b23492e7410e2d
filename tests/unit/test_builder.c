/* The builder on a network built by code: a shape subgraph (Shape -> Gather -> Concat ->
 * Reshape) over a dynamic batch folds what the profile fixes and is evaluated per context for
 * the rest; invalid network calls are refused at once. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "builder/builder.h"
#include "kiln/kiln.h"

#include <math.h>
#include <string.h>

static int32_t scalar_i64(kiln_network *net, int64_t v) {
    int32_t t;
    assert_int_equal(kiln_network_add_constant(net, NULL, KILN_DTYPE_INT64, 0, NULL, &v, 1, &t),
                     KILN_OK);
    return t;
}

/* Build net into memory and load the plan. */
static kiln_engine *built_engine(kiln_builder *b, kiln_network *net, kiln_build_config *cfg) {
    void *bytes;
    size_t size;
    assert_int_equal(kiln_build(b, net, cfg, &bytes, &size), KILN_OK);
    kiln_engine *e;
    assert_int_equal(kiln_engine_load_memory(bytes, size, NULL, &e), KILN_OK);
    kiln_free(bytes);
    return e;
}

/* y = Reshape(x, [Shape(x)[0], Shape(x)[1] / 2, 2]) * 2 */
static kiln_network *reshape_net(kiln_builder *b) {
    kiln_network *net;
    assert_int_equal(kiln_network_create(b, 17, &net), KILN_OK);
    int64_t dims[2] = {-1, 6};
    const char *syms[2] = {"batch", NULL};
    int32_t x, shape, d0, d1, two_i, half, parts[3], cat, r, two_f, y;
    assert_int_equal(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT32, 2, dims, syms, &x),
                     KILN_OK);
    assert_int_equal(kiln_network_add_layer(net, "shape", "Shape", 1, &x, 0, NULL, 1, &shape),
                     KILN_OK);
    int32_t g0[2] = {shape, scalar_i64(net, 0)}, g1[2] = {shape, scalar_i64(net, 1)};
    assert_int_equal(kiln_network_add_layer(net, "dim0", "Gather", 2, g0, 0, NULL, 1, &d0),
                     KILN_OK);
    assert_int_equal(kiln_network_add_layer(net, "dim1", "Gather", 2, g1, 0, NULL, 1, &d1),
                     KILN_OK);
    two_i = scalar_i64(net, 2);
    assert_int_equal(kiln_network_add_elementwise(net, "half", d1, two_i, KILN_EW_DIV, &half),
                     KILN_OK);
    int32_t in_u[3] = {d0, half, two_i};
    for (int i = 0; i < 3; i++) {
        int32_t a[2] = {in_u[i], -1};
        int64_t one = 1, zero = 0;
        int32_t axes_t;
        assert_int_equal(
            kiln_network_add_constant(net, NULL, KILN_DTYPE_INT64, 1, &one, &zero, 1, &axes_t),
            KILN_OK);
        a[1] = axes_t;
        assert_int_equal(
            kiln_network_add_layer(net, NULL, "Unsqueeze", 2, a, 0, NULL, 1, &parts[i]), KILN_OK);
    }
    assert_int_equal(kiln_network_add_concat(net, "cat", 3, parts, 0, &cat), KILN_OK);
    int32_t rin[2] = {x, cat};
    assert_int_equal(kiln_network_add_layer(net, "reshape", "Reshape", 2, rin, 0, NULL, 1, &r),
                     KILN_OK);
    float two = 2.0f;
    assert_int_equal(
        kiln_network_add_constant(net, NULL, KILN_DTYPE_FLOAT32, 0, NULL, &two, 1, &two_f),
        KILN_OK);
    assert_int_equal(kiln_network_add_elementwise(net, "scale", r, two_f, KILN_EW_MUL, &y),
                     KILN_OK);
    assert_int_equal(kiln_network_set_tensor_name(net, y, "y"), KILN_OK);
    assert_int_equal(kiln_network_mark_output(net, y), KILN_OK);
    return net;
}

static void test_shape_subgraph_folds_and_runs(void **state) {
    (void)state;
    kiln_builder *b;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    kiln_network *net = reshape_net(b);
    kiln_build_config *cfg;
    assert_int_equal(kiln_build_config_create(&cfg), KILN_OK);
    int64_t mn[2] = {1, 6}, op[2] = {4, 6}, mx[2] = {8, 6};
    assert_int_equal(kiln_build_config_add_profile(cfg, "x", 2, mn, op, mx), KILN_OK);
    kn_plan plan;
    assert_int_equal(kn_build_plan(b, net, cfg, &plan), KILN_OK);
    /* dim1 and half are fixed by the profile and folded away; dim0 follows the batch. */
    bool has_dim0 = false, has_dim1 = false;
    for (int i = 0; i < plan.graph->n_nodes; i++) {
        has_dim0 |= strcmp(plan.graph->nodes[i].name, "dim0") == 0;
        has_dim1 |= strcmp(plan.graph->nodes[i].name, "dim1") == 0;
    }
    assert_true(has_dim0);
    assert_false(has_dim1);
    kn_plan_clear(&plan);

    kiln_engine *e = built_engine(b, net, cfg);
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    for (int64_t batch = 1; batch <= 8; batch += 3) {
        int64_t dims[2] = {batch, 6};
        float x[48];
        for (int i = 0; i < 48; i++)
            x[i] = (float)i - 7.5f;
        assert_int_equal(kiln_context_set_input_shape(ctx, "x", 2, dims), KILN_OK);
        int rank;
        int64_t out[8];
        assert_int_equal(kiln_context_get_output_shape(ctx, "y", &rank, out), KILN_OK);
        assert_int_equal(rank, 3);
        assert_int_equal(out[0], batch);
        assert_int_equal(out[1], 3);
        assert_int_equal(out[2], 2);
        assert_int_equal(kiln_context_set_input(ctx, "x", x, (size_t)batch * 6 * sizeof(float)),
                         KILN_OK);
        assert_int_equal(kiln_context_execute(ctx), KILN_OK);
        kiln_tensor_view v;
        assert_int_equal(kiln_context_get_output(ctx, "y", &v), KILN_OK);
        assert_int_equal(v.size, (size_t)batch * 6 * sizeof(float));
        for (int64_t i = 0; i < batch * 6; i++)
            assert_true(((const float *)v.data)[i] == 2.0f * x[i]);
    }
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
}

static void test_invalid_network_calls(void **state) {
    (void)state;
    kiln_builder *b;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    kiln_network *net;
    assert_int_equal(kiln_network_create(b, 0, &net), KILN_OK);
    int64_t dims[4] = {1, 3, 8, 8};
    int32_t x, y, w;
    assert_int_equal(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT32, 4, dims, NULL, &x),
                     KILN_OK);
    assert_int_equal(kiln_network_add_layer(net, "u", "NoSuchOp", 1, &x, 0, NULL, 1, &y),
                     KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_last_error(), "NoSuchOp"));
    int32_t two[2] = {x, x};
    assert_int_equal(kiln_network_add_layer(net, "r", "Relu", 2, two, 0, NULL, 1, &y),
                     KILN_ERR_MODEL);
    assert_non_null(strstr(kiln_last_error(), "has 2 inputs"));
    int32_t dangling[2] = {x, 999};
    assert_int_equal(kiln_network_add_layer(net, "a", "Add", 2, dangling, 0, NULL, 1, &y),
                     KILN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kiln_last_error(), "tensor 999 does not exist"));
    float wdata[2 * 4 * 3 * 3] = {0};
    int64_t wd[4] = {2, 4, 3, 3}; /* 4 input channels, x has 3 */
    assert_int_equal(kiln_network_add_constant(net, "w", KILN_DTYPE_FLOAT32, 4, wd, wdata, 1, &w),
                     KILN_OK);
    assert_int_not_equal(
        kiln_network_add_convolution(net, "conv", x, w, -1, NULL, NULL, NULL, 1, &y), KILN_OK);
    assert_non_null(strstr(kiln_last_error(), "conv"));
    int32_t i64;
    int64_t one = 1, v = 3;
    assert_int_equal(kiln_network_add_constant(net, "k", KILN_DTYPE_INT64, 1, &one, &v, 1, &i64),
                     KILN_OK);
    int32_t mixed[2] = {x, i64};
    assert_int_not_equal(kiln_network_add_layer(net, "m", "Add", 2, mixed, 0, NULL, 1, &y),
                         KILN_OK);
    /* Failed calls leave nothing behind; a network with no output cannot be built. */
    assert_int_equal(kiln_network_num_layers(net), 0);
    kiln_build_config *cfg;
    assert_int_equal(kiln_build_config_create(&cfg), KILN_OK);
    void *bytes;
    size_t size;
    assert_int_equal(kiln_build(b, net, cfg, &bytes, &size), KILN_ERR_MODEL);
    assert_non_null(strstr(kiln_last_error(), "no outputs"));
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
}

/* Transposes: one that moves only size-1 dims shares its input's memory, one that reorders
 * real dims copies; both must give the transposed values. */
static void test_transpose_views(void **state) {
    (void)state;
    kiln_builder *b;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    kiln_network *net;
    assert_int_equal(kiln_network_create(b, 17, &net), KILN_OK);
    int64_t dims[4] = {1, 4, 1, 3};
    int32_t x, a, t1, t2, y1, y2, one;
    float onef = 1.0f;
    assert_int_equal(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT32, 4, dims, NULL, &x),
                     KILN_OK);
    assert_int_equal(
        kiln_network_add_constant(net, NULL, KILN_DTYPE_FLOAT32, 0, NULL, &onef, 1, &one), KILN_OK);
    assert_int_equal(kiln_network_add_elementwise(net, "a", x, one, KILN_EW_ADD, &a), KILN_OK);
    int64_t p1[4] = {2, 1, 0, 3}, p2[4] = {0, 3, 2, 1};
    assert_int_equal(kiln_network_add_transpose(net, "t1", a, 4, p1, &t1), KILN_OK);
    assert_int_equal(kiln_network_add_transpose(net, "t2", a, 4, p2, &t2), KILN_OK);
    assert_int_equal(kiln_network_add_elementwise(net, "y1", t1, one, KILN_EW_MUL, &y1), KILN_OK);
    assert_int_equal(kiln_network_add_elementwise(net, "y2", t2, one, KILN_EW_MUL, &y2), KILN_OK);
    assert_int_equal(kiln_network_set_tensor_name(net, y1, "y1"), KILN_OK);
    assert_int_equal(kiln_network_set_tensor_name(net, y2, "y2"), KILN_OK);
    assert_int_equal(kiln_network_mark_output(net, y1), KILN_OK);
    assert_int_equal(kiln_network_mark_output(net, y2), KILN_OK);
    kiln_build_config *cfg;
    assert_int_equal(kiln_build_config_create(&cfg), KILN_OK);
    kiln_engine *e = built_engine(b, net, cfg);
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    float in[12];
    for (int i = 0; i < 12; i++)
        in[i] = (float)(i * i) - 20.0f;
    assert_int_equal(kiln_context_set_input(ctx, "x", in, sizeof in), KILN_OK);
    assert_int_equal(kiln_context_execute(ctx), KILN_OK);
    kiln_tensor_view v1, v2;
    assert_int_equal(kiln_context_get_output(ctx, "y1", &v1), KILN_OK);
    assert_int_equal(kiln_context_get_output(ctx, "y2", &v2), KILN_OK);
    const float *o1 = v1.data, *o2 = v2.data;
    for (int c = 0; c < 4; c++)
        for (int w = 0; w < 3; w++) {
            float want = in[c * 3 + w] + 1.0f;
            assert_true(o1[c * 3 + w] == want); /* [1, 4, 1, 3]: same layout */
            assert_true(o2[w * 4 + c] == want); /* [1, 3, 1, 4]: reordered */
        }
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
}

/* MatMul by constant weights followed by Add of a constant [N] vector: one MatMul with the
 * bias in its epilogue, same values. */
static void test_matmul_bias_fused(void **state) {
    (void)state;
    kiln_builder *b;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    kiln_network *net;
    assert_int_equal(kiln_network_create(b, 17, &net), KILN_OK);
    int64_t xd[3] = {2, 5, 3}, wd[2] = {3, 4}, bd[1] = {4};
    float w[12], bias[4];
    for (int i = 0; i < 12; i++)
        w[i] = 0.25f * (float)(i - 5);
    for (int i = 0; i < 4; i++)
        bias[i] = (float)i - 1.5f;
    int32_t x, wt, bt, mm, y;
    assert_int_equal(kiln_network_add_input(net, "x", KILN_DTYPE_FLOAT32, 3, xd, NULL, &x),
                     KILN_OK);
    assert_int_equal(kiln_network_add_constant(net, "w", KILN_DTYPE_FLOAT32, 2, wd, w, 1, &wt),
                     KILN_OK);
    assert_int_equal(kiln_network_add_constant(net, "b", KILN_DTYPE_FLOAT32, 1, bd, bias, 1, &bt),
                     KILN_OK);
    assert_int_equal(kiln_network_add_matmul(net, "mm", x, wt, -1, 0, &mm), KILN_OK);
    assert_int_equal(kiln_network_add_elementwise(net, "add", bt, mm, KILN_EW_ADD, &y), KILN_OK);
    assert_int_equal(kiln_network_set_tensor_name(net, y, "y"), KILN_OK);
    assert_int_equal(kiln_network_mark_output(net, y), KILN_OK);
    kiln_build_config *cfg;
    assert_int_equal(kiln_build_config_create(&cfg), KILN_OK);
    kn_plan plan;
    assert_int_equal(kn_build_plan(b, net, cfg, &plan), KILN_OK);
    assert_int_equal(plan.graph->n_nodes, 1);
    assert_string_equal(plan.graph->nodes[0].op_type, "FusedMatMul");
    assert_string_equal(plan.graph->nodes[0].domain, "kiln");
    assert_int_equal(kn_attr_int(&plan.graph->nodes[0], "kiln_bias", 0), 1);
    kn_plan_clear(&plan);
    kiln_engine *e = built_engine(b, net, cfg);
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    float in[30];
    for (int i = 0; i < 30; i++)
        in[i] = (float)((i * 7) % 11) - 5.0f;
    assert_int_equal(kiln_context_set_input(ctx, "x", in, sizeof in), KILN_OK);
    assert_int_equal(kiln_context_execute(ctx), KILN_OK);
    kiln_tensor_view v;
    assert_int_equal(kiln_context_get_output(ctx, "y", &v), KILN_OK);
    const float *out = v.data;
    for (int r = 0; r < 10; r++)
        for (int c = 0; c < 4; c++) {
            float want = bias[c];
            for (int k = 0; k < 3; k++)
                want += in[r * 3 + k] * w[k * 4 + c];
            assert_true(fabsf(out[r * 4 + c] - want) <= 1e-5f);
        }
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_subgraph_folds_and_runs),
        cmocka_unit_test(test_invalid_network_calls),
        cmocka_unit_test(test_transpose_views),
        cmocka_unit_test(test_matmul_bias_fused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
