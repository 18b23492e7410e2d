/* Kernels and fusions on the transformer encoder's hot path: float32 Erf and Gelu against
 * libm's double erf over a dense sweep, element-wise fusion of graphs shaped like an exported
 * encoder layer, and Softmax and LayerNormalization rows against double references. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/threadpool.h"
#include "ops/fused_elementwise.h"
#include "ops/op.h"
#include "passes/passes.h"

#include <math.h>
#include <string.h>

static kn_threadpool *g_pool;

/* Runs one single-output node on float32 inputs through its schema and CPU kernel. */
static void run_f32(const char *domain, const char *op, int opset, int n_in, const kn_tensor *in,
                    kn_tensor *out) {
    kn_graph *g = kn_graph_create();
    assert_non_null(g);
    int vin[4], vout = kn_graph_add_value(g, NULL);
    for (int i = 0; i < n_in; i++)
        vin[i] = kn_graph_add_value(g, NULL);
    int ni = kn_graph_add_node(g, "n", op, domain, opset, n_in, vin, 1, &vout);
    assert_true(ni >= 0);
    const kn_node *node = &g->nodes[ni];
    kn_infer_ctx ic = {.node = node, .n_in = n_in, .in = in, .n_out = 1, .out = out};
    assert_int_equal(kn_op_find(domain, op)->infer(&ic), KILN_OK);
    const kn_kernel *k = kn_backend_find_kernel(kn_backend_host(), domain, op);
    assert_non_null(k);
    void *state = NULL;
    if (k->prepare)
        assert_int_equal(k->prepare(node, n_in, in, &state), KILN_OK);
    kn_kernel_ctx kc = {.node = node,
                        .n_in = n_in,
                        .in = in,
                        .n_out = 1,
                        .out = out,
                        .state = state,
                        .pool = g_pool};
    assert_int_equal(k->run(&kc), KILN_OK);
    if (k->release)
        k->release(state);
    kn_graph_destroy(g);
}

static kn_tensor vec(float *data, int64_t n) {
    kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .data = data};
    t.shape.rank = 1;
    t.shape.d[0] = n;
    return t;
}

enum { SWEEP = 20001 };

/* x from -6 to 6 in steps of 6e-4, plus the special values at the end. */
static float *sweep(int64_t *n) {
    float *x = kn_malloc((SWEEP + 4) * sizeof(float));
    assert_non_null(x);
    for (int i = 0; i < SWEEP; i++)
        x[i] = -6.0f + 12.0f * (float)i / (SWEEP - 1);
    x[SWEEP] = INFINITY;
    x[SWEEP + 1] = -INFINITY;
    x[SWEEP + 2] = NAN;
    x[SWEEP + 3] = 1e-30f;
    *n = SWEEP + 4;
    return x;
}

static void test_erf_accuracy(void **state) {
    (void)state;
    int64_t n;
    float *x = sweep(&n);
    float *y = kn_malloc((size_t)n * sizeof(float));
    kn_tensor in = vec(x, n), out = {0};
    out.data = y;
    run_f32("", "Erf", 13, 1, &in, &out);
    for (int64_t i = 0; i < n; i++) {
        double want = erf((double)x[i]);
        if (isnan(want)) {
            assert_true(isnan(y[i]));
            continue;
        }
        assert_true(fabsf(y[i]) <= 1.0f);
        if (fabs(y[i] - want) > 1.5e-6 * fabs(want) + 1e-37)
            fail_msg("erf(%.9g): got %.9g, want %.9g", x[i], y[i], want);
    }
    kn_free(x);
    kn_free(y);
}

static void test_gelu_accuracy(void **state) {
    (void)state;
    int64_t n;
    float *x = sweep(&n);
    float *y = kn_malloc((size_t)n * sizeof(float));
    kn_tensor in = vec(x, n), out = {0};
    out.data = y;
    run_f32("", "Gelu", 20, 1, &in, &out);
    for (int64_t i = 0; i < SWEEP; i++) {
        double v = x[i], want = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
        /* erf's absolute error (1e-6 at most) scaled by x/2 bounds the error for x < 0 */
        if (fabs(y[i] - want) > 2e-6 * fabs(want) + 1e-6 * fabs(v))
            fail_msg("gelu(%.9g): got %.9g, want %.9g", x[i], y[i], want);
    }
    assert_true(isinf(y[SWEEP]) && y[SWEEP] > 0);
    assert_true(isnan(y[SWEEP + 2]));
    kn_free(x);
    kn_free(y);
}

static int add_f32(kn_graph *g, const char *name, int rank, const int64_t *dims) {
    int v = kn_graph_add_value(g, name);
    assert_true(v >= 0);
    g->values[v].dtype = KILN_DTYPE_FLOAT32;
    g->values[v].rank = rank;
    for (int i = 0; i < rank; i++)
        g->values[v].dims[i].value = dims[i];
    return v;
}

static int add_scalar(kn_graph *g, const char *name, float v) {
    int c = add_f32(g, name, 0, NULL);
    kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .data = &v};
    assert_int_equal(kn_value_set_const(g, c, &t), KILN_OK);
    g->values[c].dtype = KILN_DTYPE_FLOAT32;
    g->values[c].rank = 0;
    return c;
}

/* Runs the graph's only live node, a fused program, on inputs named "x" and "bias". */
static void run_fused(const kn_graph *g, const float *x, const float *bias, float *y) {
    const kn_node *fn = NULL;
    int live = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) {
            live++;
            fn = &g->nodes[i];
        }
    assert_int_equal(live, 1);
    assert_string_equal(fn->op_type, KN_FUSED_OP);
    assert_int_equal(fn->n_in, 2);
    kn_tensor in[2];
    for (int i = 0; i < 2; i++) {
        bool is_x = strcmp(g->values[fn->in[i]].name, "x") == 0;
        in[i] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .data = (void *)(is_x ? x : bias)};
        in[i].shape.rank = is_x ? 2 : 1;
        in[i].shape.d[0] = is_x ? 3 : 4;
        in[i].shape.d[1] = 4;
    }
    kn_tensor out = {0};
    kn_infer_ctx ic = {.node = fn, .n_in = 2, .in = in, .n_out = 1, .out = &out};
    assert_int_equal(kn_op_find(KN_DOMAIN, KN_FUSED_OP)->infer(&ic), KILN_OK);
    out.data = y;
    void *state = NULL;
    const kn_kernel *k = kn_backend_find_kernel(kn_backend_host(), KN_DOMAIN, KN_FUSED_OP);
    assert_int_equal(k->prepare(fn, 2, in, &state), KILN_OK);
    kn_kernel_ctx kc = {.node = fn, .n_in = 2, .in = in, .n_out = 1, .out = &out, .state = state};
    assert_int_equal(k->run(&kc), KILN_OK);
    k->release(state);
}

/* h = x + bias, then GELU as PyTorch exports it: Mul(Mul(h, 1 + Erf(h / sqrt2)), 0.5), or
 * (variant 1) Mul(Mul(h, 0.5), 1 + Erf(h * (1 / sqrt2))), or (variant 2) with the products
 * in the other order. The whole chain becomes one fused node (the bias Add included, since
 * h is then read only by the Gelu); the output matches the formula in double. */
static void check_gelu_chain(int variant) {
    kn_graph *g = kn_graph_create();
    const int64_t d2[2] = {3, 4}, d1[1] = {4};
    int x = add_f32(g, "x", 2, d2), bias = add_f32(g, "bias", 1, d1);
    assert_int_equal(kn_graph_add_input(g, x), KILN_OK);
    assert_int_equal(kn_graph_add_input(g, bias), KILN_OK);
    int h = add_f32(g, "h", 2, d2), s = add_f32(g, "s", 2, d2), e = add_f32(g, "e", 2, d2);
    int a = add_f32(g, "a", 2, d2), m = add_f32(g, "m", 2, d2), y = add_f32(g, "y", 2, d2);
    kn_graph_add_node(g, "bias", "Add", "", 14, 2, (int[]){bias, x}, 1, &h);
    if (variant == 1)
        kn_graph_add_node(g, "scale", "Mul", "", 14, 2, (int[]){add_scalar(g, "r", 0.70710678f), h},
                          1, &s);
    else
        kn_graph_add_node(g, "scale", "Div", "", 14, 2, (int[]){h, add_scalar(g, "r", 1.4142135f)},
                          1, &s);
    kn_graph_add_node(g, "erf", "Erf", "", 13, 1, &s, 1, &e);
    kn_graph_add_node(g, "one", "Add", "", 14, 2, (int[]){add_scalar(g, "one", 1.0f), e}, 1, &a);
    int half = add_scalar(g, "half", 0.5f);
    if (variant == 0) {
        kn_graph_add_node(g, "mx", "Mul", "", 14, 2, (int[]){h, a}, 1, &m);
        kn_graph_add_node(g, "mh", "Mul", "", 14, 2, (int[]){m, half}, 1, &y);
    } else if (variant == 1) {
        kn_graph_add_node(g, "hh", "Mul", "", 14, 2, (int[]){h, half}, 1, &m);
        kn_graph_add_node(g, "mx", "Mul", "", 14, 2, (int[]){a, m}, 1, &y);
    } else {
        kn_graph_add_node(g, "mh", "Mul", "", 14, 2, (int[]){half, a}, 1, &m);
        kn_graph_add_node(g, "mx", "Mul", "", 14, 2, (int[]){m, h}, 1, &y);
    }
    assert_int_equal(kn_graph_add_output(g, y), KILN_OK);
    assert_int_equal(kn_pass_fuse_elementwise(g), KILN_OK);

    float xv[12] = {-4, -2.5f, -1, -0.3f, 0, 0.2f, 0.7f, 1, 1.5f, 2, 3, 5};
    float bv[4] = {0.25f, -0.5f, 0.125f, 0}, yv[12];
    run_fused(g, xv, bv, yv);
    for (int i = 0; i < 12; i++) {
        double v = (double)xv[i] + bv[i % 4], want = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
        if (fabs(yv[i] - want) > 2e-6 * (1.0 + fabs(v)))
            fail_msg("variant %d element %d: got %.9g want %.9g", variant, i, yv[i], want);
    }
    kn_graph_destroy(g);
}

static void test_fuse_gelu_chain(void **state) {
    (void)state;
    for (int v = 0; v < 3; v++)
        check_gelu_chain(v);
}

/* A chain that only looks like GELU (Add 2 instead of 1; Erf's input read twice) is not
 * turned into Gelu, but still becomes one fused node: Div's output is read by two members, so
 * the group is a DAG. The fused program computes the original. */
static void test_fuse_gelu_lookalike(void **state) {
    (void)state;
    kn_graph *g = kn_graph_create();
    const int64_t d2[2] = {3, 4}, d1[1] = {4};
    int x = add_f32(g, "x", 2, d2), bias = add_f32(g, "bias", 1, d1);
    assert_int_equal(kn_graph_add_input(g, x), KILN_OK);
    assert_int_equal(kn_graph_add_input(g, bias), KILN_OK);
    int h = add_f32(g, "h", 2, d2), s = add_f32(g, "s", 2, d2), e = add_f32(g, "e", 2, d2);
    int a = add_f32(g, "a", 2, d2), m = add_f32(g, "m", 2, d2), y = add_f32(g, "y", 2, d2);
    kn_graph_add_node(g, "bias", "Add", "", 14, 2, (int[]){x, bias}, 1, &h);
    kn_graph_add_node(g, "scale", "Div", "", 14, 2, (int[]){h, add_scalar(g, "r", 1.4142135f)}, 1,
                      &s);
    kn_graph_add_node(g, "erf", "Erf", "", 13, 1, &s, 1, &e);
    kn_graph_add_node(g, "two", "Add", "", 14, 2, (int[]){e, add_scalar(g, "two", 2.0f)}, 1, &a);
    kn_graph_add_node(g, "mx", "Mul", "", 14, 2, (int[]){a, s}, 1, &m);
    kn_graph_add_node(g, "mh", "Mul", "", 14, 2, (int[]){m, add_scalar(g, "half", 0.5f)}, 1, &y);
    assert_int_equal(kn_graph_add_output(g, y), KILN_OK);
    assert_int_equal(kn_pass_fuse_elementwise(g), KILN_OK);
    for (int i = 0; i < g->n_nodes; i++)
        assert_true(g->nodes[i].dead || strcmp(g->nodes[i].op_type, "Gelu") != 0);
    float xv[12] = {-4, -2.5f, -1, -0.3f, 0, 0.2f, 0.7f, 1, 1.5f, 2, 3, 5};
    float bv[4] = {0.25f, -0.5f, 0.125f, 0}, yv[12];
    run_fused(g, xv, bv, yv);
    for (int i = 0; i < 12; i++) {
        double v = ((double)xv[i] + bv[i % 4]) / sqrt(2.0);
        double want = (erf(v) + 2.0) * v * 0.5;
        if (fabs(yv[i] - want) > 2e-6 * (1.0 + fabs(v)))
            fail_msg("element %d: got %.9g want %.9g", i, yv[i], want);
    }
    kn_graph_destroy(g);
}

/* Softmax rows of several lengths (vector bodies, masked tails, a single element) against
 * the formula in double, with large magnitudes and -inf entries (exp gives 0 there). */
static void test_softmax_rows(void **state) {
    (void)state;
    const int64_t lens[] = {1, 5, 16, 33, 128, 131};
    for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
        int64_t rows = 3, n = lens[c];
        float *x = kn_malloc((size_t)(rows * n) * sizeof(float));
        float *y = kn_malloc((size_t)(rows * n) * sizeof(float));
        for (int64_t i = 0; i < rows * n; i++)
            x[i] = (float)((i * 37) % 23) * 0.7f - 8.0f + (i / n == 2 ? 60.0f : 0.0f);
        if (n > 4)
            x[n + 3] = -INFINITY;
        kn_tensor in = {.dtype = KILN_DTYPE_FLOAT32, .data = x}, out = {0};
        in.shape.rank = 2;
        in.shape.d[0] = rows;
        in.shape.d[1] = n;
        out.data = y;
        run_f32("", "Softmax", 13, 1, &in, &out);
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * n;
            double m = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; i++)
                m = xr[i] > m ? xr[i] : m;
            for (int64_t i = 0; i < n; i++)
                sum += exp((double)xr[i] - m);
            for (int64_t i = 0; i < n; i++) {
                double want = exp((double)xr[i] - m) / sum;
                float got = y[r * n + i];
                if (fabs(got - want) > 2e-6 * want + 1e-30)
                    fail_msg("n %lld row %lld col %lld: got %.9g want %.9g", (long long)n,
                             (long long)r, (long long)i, got, want);
            }
        }
        kn_free(x);
        kn_free(y);
    }
}

/* LayerNormalization over the last axis for row lengths with and without a vector tail,
 * against mean and variance computed in double; rows carry a large offset so a one-pass
 * E[x^2] - mean^2 in float would lose the variance. */
static void test_layernorm_rows(void **state) {
    (void)state;
    const int64_t lens[] = {7, 16, 37, 256};
    for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
        int64_t rows = 5, d = lens[c];
        float *x = kn_malloc((size_t)(rows * d) * sizeof(float));
        float *y = kn_malloc((size_t)(rows * d) * sizeof(float));
        float *sc = kn_malloc((size_t)d * sizeof(float)), *b = kn_malloc((size_t)d * sizeof(float));
        for (int64_t i = 0; i < rows * d; i++)
            x[i] = (float)((i * 29) % 17) * 0.25f + (float)(i / d) * 100.0f;
        for (int64_t j = 0; j < d; j++) {
            sc[j] = 0.5f + (float)j / (float)d;
            b[j] = (float)(j % 5) - 2.0f;
        }
        kn_tensor in[3] = {{.dtype = KILN_DTYPE_FLOAT32, .data = x},
                           {.dtype = KILN_DTYPE_FLOAT32, .data = sc},
                           {.dtype = KILN_DTYPE_FLOAT32, .data = b}};
        in[0].shape.rank = 2;
        in[0].shape.d[0] = rows;
        in[0].shape.d[1] = d;
        for (int i = 1; i < 3; i++) {
            in[i].shape.rank = 1;
            in[i].shape.d[0] = d;
        }
        kn_tensor out = {0};
        out.data = y;
        run_f32("", "LayerNormalization", 17, 3, in, &out);
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * d;
            double m = 0, v = 0;
            for (int64_t j = 0; j < d; j++)
                m += xr[j];
            m /= (double)d;
            for (int64_t j = 0; j < d; j++)
                v += ((double)xr[j] - m) * ((double)xr[j] - m);
            v /= (double)d;
            for (int64_t j = 0; j < d; j++) {
                double want = ((double)xr[j] - m) / sqrt(v + 1e-5) * sc[j] + b[j];
                if (fabs(y[r * d + j] - want) > 5e-5 * (1.0 + fabs(want)))
                    fail_msg("d %lld row %lld col %lld: got %.9g want %.9g", (long long)d,
                             (long long)r, (long long)j, y[r * d + j], want);
            }
        }
        kn_free(x);
        kn_free(y);
        kn_free(sc);
        kn_free(b);
    }
}

int main(void) {
    g_pool = kn_threadpool_create(3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_erf_accuracy),    cmocka_unit_test(test_gelu_accuracy),
        cmocka_unit_test(test_fuse_gelu_chain), cmocka_unit_test(test_fuse_gelu_lookalike),
        cmocka_unit_test(test_softmax_rows),    cmocka_unit_test(test_layernorm_rows),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kn_threadpool_destroy(g_pool);
    return rc;
}
