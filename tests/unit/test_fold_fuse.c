/* fold_batchnorm and fuse_activations: graph rewrites checked structurally, and the fused
 * Conv run through its CPU kernel against Conv -> BatchNormalization -> Add -> Relu computed
 * by hand here. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "passes/passes.h"

#include <math.h>
#include <string.h>

static uint32_t rng_state = 99;

static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static int value(kn_graph *g, const char *name, int rank, const int64_t *d) {
    int v = kn_graph_add_value(g, name);
    assert_true(v >= 0);
    g->values[v].dtype = KILN_DTYPE_FLOAT32;
    g->values[v].rank = rank;
    for (int i = 0; i < rank; i++)
        g->values[v].dims[i].value = d[i];
    return v;
}

static int constant(kn_graph *g, const char *name, int rank, const int64_t *d, float lo, float hi) {
    int v = value(g, name, rank, d);
    kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = rank}};
    for (int i = 0; i < rank; i++)
        t.shape.d[i] = d[i];
    int64_t n = kn_tensor_numel(&t);
    float *p = kn_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = lo + (hi - lo) * (frand() + 1.0f) / 2.0f;
    t.data = p;
    assert_int_equal(kn_value_set_const(g, v, &t), KILN_OK);
    kn_free(p);
    return v;
}

static int node(kn_graph *g, const char *op, int n_in, const int *in, int out) {
    int n = kn_graph_add_node(g, NULL, op, "", 17, n_in, in, 1, &out);
    assert_true(n >= 0);
    return n;
}

static int live_nodes(const kn_graph *g, int *last) {
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) {
            c++;
            *last = i;
        }
    return c;
}

static const float *cdata(const kn_graph *g, int v) {
    return g->values[v].data;
}

static void test_conv_bn_add_relu(void **state) {
    (void)state;
    kn_graph *g = kn_graph_create();
    int64_t xs[4] = {1, 4, 6, 5}, ws[4] = {8, 4, 3, 3}, cs[1] = {8}, ys[4] = {1, 8, 6, 5};
    int x = value(g, "x", 4, xs), r = value(g, "r", 4, ys);
    assert_int_equal(kn_graph_add_input(g, x), KILN_OK);
    assert_int_equal(kn_graph_add_input(g, r), KILN_OK);
    g->values[x].is_input = g->values[r].is_input = true;
    int w = constant(g, "w", 4, ws, -1, 1), b = constant(g, "b", 1, cs, -1, 1);
    int sc = constant(g, "scale", 1, cs, 0.5f, 2), bb = constant(g, "bnb", 1, cs, -1, 1);
    int mean = constant(g, "mean", 1, cs, -1, 1), var = constant(g, "var", 1, cs, 0.1f, 2);
    int c = value(g, "c", 4, ys), bn = value(g, "bn", 4, ys), sum = value(g, "sum", 4, ys);
    int y = value(g, "y", 4, ys);
    int conv = node(g, "Conv", 3, (int[]){x, w, b}, c);
    int64_t pads[4] = {1, 1, 1, 1};
    kn_attr pa = {.name = "pads", .type = KN_ATTR_INTS, .n = 4, .ints = pads};
    assert_int_equal(kn_node_add_attr(g, conv, &pa), KILN_OK);
    int bnn = node(g, "BatchNormalization", 5, (int[]){c, sc, bb, mean, var}, bn);
    node(g, "Add", 2, (int[]){r, bn}, sum);
    node(g, "Relu", 1, (int[]){sum}, y);
    assert_int_equal(kn_graph_add_output(g, y), KILN_OK);
    g->values[y].is_output = true;

    /* Reference before any rewrite. */
    float xin[120], rin[240], want[240];
    for (int i = 0; i < 120; i++)
        xin[i] = frand();
    for (int i = 0; i < 240; i++)
        rin[i] = frand();
    const float *W = cdata(g, w), *B = cdata(g, b);
    for (int co = 0; co < 8; co++)
        for (int oy = 0; oy < 6; oy++)
            for (int ox = 0; ox < 5; ox++) {
                double s = B[co];
                for (int ci = 0; ci < 4; ci++)
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int iy = oy - 1 + ky, ix = ox - 1 + kx;
                            if (iy >= 0 && iy < 6 && ix >= 0 && ix < 5)
                                s += xin[(ci * 6 + iy) * 5 + ix] *
                                     W[((co * 4 + ci) * 3 + ky) * 3 + kx];
                        }
                double v =
                    (s - cdata(g, mean)[co]) / sqrt(cdata(g, var)[co] + 1e-5) * cdata(g, sc)[co] +
                    cdata(g, bb)[co];
                int at = (co * 6 + oy) * 5 + ox;
                v += rin[at];
                want[at] = (float)(v > 0 ? v : 0);
            }

    assert_int_equal(kn_pass_fold_batchnorm(g), KILN_OK);
    assert_true(g->nodes[bnn].dead);
    assert_int_equal(g->nodes[conv].out[0], bn);
    assert_int_equal(kn_pass_fuse_activations(g), KILN_OK);
    int last = -1;
    assert_int_equal(live_nodes(g, &last), 1);
    const kn_node *f = &g->nodes[conv];
    assert_int_equal(last, conv);
    assert_int_equal(f->out[0], y);
    assert_int_equal(f->n_in, 4);
    assert_int_equal(f->in[3], r);
    assert_string_equal(kn_attr_string(f, "kiln_activation", ""), "Relu");
    assert_int_equal(kn_attr_int(f, "kiln_residual", 0), 1);
    /* Idempotent: a second run changes nothing. */
    assert_int_equal(kn_pass_fuse_activations(g), KILN_OK);
    assert_int_equal(kn_pass_fold_batchnorm(g), KILN_OK);
    assert_int_equal(g->nodes[conv].n_in, 4);

    kn_tensor in[4];
    for (int i = 0; i < 4; i++)
        in[i] = kn_value_tensor(&g->values[f->in[i]]);
    in[0] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {4, {1, 4, 6, 5}}, .data = xin};
    in[3] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {4, {1, 8, 6, 5}}, .data = rin};
    float got[240];
    kn_tensor out = {.dtype = KILN_DTYPE_FLOAT32, .shape = {4, {1, 8, 6, 5}}, .data = got};
    const kn_kernel *k = kn_backend_find_kernel(kn_backend_host(), "", "Conv");
    void *st = NULL;
    assert_int_equal(k->prepare(f, 4, in, &st), KILN_OK);
    kn_kernel_ctx kc = {.node = f, .n_in = 4, .in = in, .n_out = 1, .out = &out, .state = st};
    assert_int_equal(k->run(&kc), KILN_OK);
    k->release(st);
    for (int i = 0; i < 240; i++)
        assert_float_equal(got[i], want[i], 1e-4 * (1 + fabsf(want[i])));
    kn_graph_destroy(g);
}

static void test_matmul_swish_and_clip(void **state) {
    (void)state;
    kn_graph *g = kn_graph_create();
    int64_t as[2] = {3, 5}, bs[2] = {5, 4}, ys[2] = {3, 4}, one[1] = {1};
    int a = value(g, "a", 2, as), b = constant(g, "b", 2, bs, -1, 1);
    int m = value(g, "m", 2, ys), s = value(g, "s", 2, ys), y = value(g, "y", 2, ys);
    int mm = node(g, "MatMul", 2, (int[]){a, b}, m);
    node(g, "Sigmoid", 1, (int[]){m}, s);
    node(g, "Mul", 2, (int[]){s, m}, y);
    /* A second product feeding Clip(min, max) from constants (opset 11+). */
    int m2 = value(g, "m2", 2, ys), y2 = value(g, "y2", 2, ys);
    int lo = constant(g, "lo", 1, one, 0, 0), hi = constant(g, "hi", 1, one, 6, 6);
    int mm2 = node(g, "MatMul", 2, (int[]){a, b}, m2);
    node(g, "Clip", 3, (int[]){m2, lo, hi}, y2);
    /* A third whose output is also a graph output: must stay unfused. */
    int m3 = value(g, "m3", 2, ys), y3 = value(g, "y3", 2, ys);
    int mm3 = node(g, "MatMul", 2, (int[]){a, b}, m3);
    node(g, "Relu", 1, (int[]){m3}, y3);
    int outs[] = {y, y2, y3, m3};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kn_graph_add_output(g, outs[i]), KILN_OK);
        g->values[outs[i]].is_output = true;
    }
    assert_int_equal(kn_pass_fuse_activations(g), KILN_OK);
    assert_string_equal(kn_attr_string(&g->nodes[mm], "kiln_activation", ""), "Swish");
    assert_int_equal(g->nodes[mm].out[0], y);
    assert_string_equal(kn_attr_string(&g->nodes[mm2], "kiln_activation", ""), "Clip");
    assert_float_equal(kn_attr_float(&g->nodes[mm2], "kiln_alpha", -1), 0.0f, 0);
    assert_float_equal(kn_attr_float(&g->nodes[mm2], "kiln_beta", -1), 6.0f, 0);
    assert_int_equal(g->nodes[mm2].out[0], y2);
    assert_null(kn_node_attr(&g->nodes[mm3], "kiln_activation"));
    assert_int_equal(g->nodes[mm3].out[0], m3);
    int last;
    assert_int_equal(live_nodes(g, &last), 4);
    kn_graph_destroy(g);
}

static void test_add_prefers_later_product(void **state) {
    (void)state;
    kn_graph *g = kn_graph_create();
    int64_t as[2] = {2, 3}, bs[2] = {3, 3};
    int a = value(g, "a", 2, as), b = constant(g, "b", 2, bs, -1, 1);
    int p = value(g, "p", 2, as), q = value(g, "q", 2, as), y = value(g, "y", 2, as);
    int first = node(g, "MatMul", 2, (int[]){a, b}, p);
    int second = node(g, "MatMul", 2, (int[]){a, b}, q);
    node(g, "Add", 2, (int[]){p, q}, y);
    assert_int_equal(kn_graph_add_output(g, y), KILN_OK);
    g->values[y].is_output = true;
    assert_int_equal(kn_pass_fuse_activations(g), KILN_OK);
    assert_null(kn_node_attr(&g->nodes[first], "kiln_residual"));
    assert_int_equal(kn_attr_int(&g->nodes[second], "kiln_residual", 0), 1);
    assert_int_equal(g->nodes[second].in[2], p);
    assert_int_equal(g->nodes[second].out[0], y);
    kn_graph_destroy(g);
}

static void test_gemm_bn_fold(void **state) {
    (void)state;
    kn_graph *g = kn_graph_create();
    int64_t as[2] = {2, 3}, bs[2] = {4, 3}, cs[1] = {4}, ys[2] = {2, 4};
    int a = value(g, "a", 2, as), b = constant(g, "b", 2, bs, -1, 1),
        c = constant(g, "c", 1, cs, -1, 1);
    int sc = constant(g, "scale", 1, cs, 0.5f, 2), bb = constant(g, "bnb", 1, cs, -1, 1);
    int mean = constant(g, "mean", 1, cs, -1, 1), var = constant(g, "var", 1, cs, 0.1f, 2);
    int gy = value(g, "gy", 2, ys), y = value(g, "y", 2, ys);
    int gemm = node(g, "Gemm", 3, (int[]){a, b, c}, gy);
    kn_attr tb = {.name = "transB", .type = KN_ATTR_INT, .i = 1};
    kn_attr beta = {.name = "beta", .type = KN_ATTR_FLOAT, .f = 0.5f};
    assert_int_equal(kn_node_add_attr(g, gemm, &tb), KILN_OK);
    assert_int_equal(kn_node_add_attr(g, gemm, &beta), KILN_OK);
    int bnn = node(g, "BatchNormalization", 5, (int[]){gy, sc, bb, mean, var}, y);
    assert_int_equal(kn_graph_add_output(g, y), KILN_OK);
    g->values[y].is_output = true;
    float ain[6], want[8];
    for (int i = 0; i < 6; i++)
        ain[i] = frand();
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            double s = 0;
            for (int k = 0; k < 3; k++)
                s += ain[i * 3 + k] * cdata(g, b)[j * 3 + k];
            s += 0.5 * cdata(g, c)[j];
            want[i * 4 + j] =
                (float)((s - cdata(g, mean)[j]) / sqrt(cdata(g, var)[j] + 1e-5) * cdata(g, sc)[j] +
                        cdata(g, bb)[j]);
        }
    assert_int_equal(kn_pass_fold_batchnorm(g), KILN_OK);
    assert_true(g->nodes[bnn].dead);
    const kn_node *f = &g->nodes[gemm];
    assert_int_equal(f->out[0], y);
    kn_tensor in[3];
    for (int i = 1; i < 3; i++)
        in[i] = kn_value_tensor(&g->values[f->in[i]]);
    in[0] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {2, {2, 3}}, .data = ain};
    float got[8];
    kn_tensor out = {.dtype = KILN_DTYPE_FLOAT32, .shape = {2, {2, 4}}, .data = got};
    const kn_kernel *k = kn_backend_find_kernel(kn_backend_host(), "", "Gemm");
    kn_kernel_ctx kc = {.node = f, .n_in = 3, .in = in, .n_out = 1, .out = &out};
    assert_int_equal(k->run(&kc), KILN_OK);
    for (int i = 0; i < 8; i++)
        assert_float_equal(got[i], want[i], 1e-4 * (1 + fabsf(want[i])));
    kn_graph_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_bn_add_relu),
        cmocka_unit_test(test_matmul_swish_and_clip),
        cmocka_unit_test(test_add_prefers_later_product),
        cmocka_unit_test(test_gemm_bn_fold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
