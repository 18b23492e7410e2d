/* Kernels and fusions on the transformer encoder's hot path: float32 Erf and Gelu against
 * libm's double erf over a dense sweep, and element-wise fusion of graphs shaped like an
 * exported encoder layer. */
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
    const kn_kernel *k = kn_backend_cpu()->find_kernel(domain, op);
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

int main(void) {
    g_pool = kn_threadpool_create(3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_erf_accuracy),
        cmocka_unit_test(test_gelu_accuracy),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kn_threadpool_destroy(g_pool);
    return rc;
}
