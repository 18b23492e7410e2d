/* Element-wise ops: inference and CPU kernels on small tensors against values worked out by
 * hand or with numpy (quoted beside each case), the fused program, and the fusion pass. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/strings.h"
#include "core/threadpool.h"
#include "ops/fused_elementwise.h"
#include "ops/op.h"
#include "passes/passes.h"

#include <math.h>
#include <string.h>

#define MAX_IO 4

static kn_threadpool *g_pool;

typedef struct run {
    kn_graph *g;
    kn_tensor out;
} run;

static kn_tensor mk(int32_t dtype, const void *data, int rank, const int64_t *dims) {
    kn_tensor t = {.dtype = dtype, .data = (void *)data};
    t.shape.rank = rank;
    for (int i = 0; i < rank; i++)
        t.shape.d[i] = dims[i];
    return t;
}
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define RANK(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define T_(dt, data, ...) mk(KILN_DTYPE_##dt, data, RANK(__VA_ARGS__), DIMS(__VA_ARGS__))
#define SCALAR(dt, data) mk(KILN_DTYPE_##dt, data, 0, NULL)

static kn_attr ai(const char *name, int64_t v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_INT, .i = v};
}
static kn_attr af(const char *name, float v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_FLOAT, .f = v};
}
static kn_attr as(const char *name, const char *v) {
    return (kn_attr){
        .name = (char *)name, .type = KN_ATTR_STRING, .s = (char *)v, .slen = strlen(v)};
}

static kiln_status run_node(run *r, const char *domain, const char *op, int opset,
                            const kn_attr *attrs, int n_attr, const kn_tensor *in, int n_in) {
    memset(r, 0, sizeof *r);
    r->g = kn_graph_create();
    assert_non_null(r->g);
    int vin[MAX_IO], vout = kn_graph_add_value(r->g, NULL);
    for (int i = 0; i < n_in; i++)
        vin[i] = in[i].dtype ? kn_graph_add_value(r->g, NULL) : -1;
    int ni = kn_graph_add_node(r->g, "n", op, domain, opset, n_in, vin, 1, &vout);
    assert_true(ni >= 0);
    for (int i = 0; i < n_attr; i++)
        assert_int_equal(kn_node_add_attr(r->g, ni, &attrs[i]), KILN_OK);
    const kn_node *node = &r->g->nodes[ni];
    const kn_op_schema *s = kn_op_find(domain, op);
    assert_non_null(s);
    assert_true(s->flags & KN_OP_ELEMENTWISE);
    kn_infer_ctx ic = {.node = node, .n_in = n_in, .in = in, .n_out = 1, .out = &r->out};
    KN_TRY(s->infer(&ic));
    r->out.data = kn_calloc(1, kn_tensor_nbytes(&r->out) + 1);
    assert_non_null(r->out.data);
    const kn_kernel *k = kn_backend_find_kernel(kn_backend_host(), domain, op);
    assert_non_null(k);
    void *state = NULL;
    if (k->prepare)
        KN_TRY(k->prepare(node, n_in, in, &state));
    kn_kernel_ctx kc = {.node = node,
                        .n_in = n_in,
                        .in = in,
                        .n_out = 1,
                        .out = &r->out,
                        .state = state,
                        .pool = g_pool};
    kiln_status rc = k->run(&kc);
    if (k->release)
        k->release(state);
    return rc;
}

static void run_free(run *r) {
    kn_free(r->out.data);
    kn_graph_destroy(r->g);
}

static void expect_shape(const run *r, int rank, const int64_t *dims) {
    assert_int_equal(r->out.shape.rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(r->out.shape.d[i], dims[i]);
}

static void expect_f32(const run *r, const float *want, int64_t n, float tol) {
    assert_int_equal(kn_tensor_numel(&r->out), n);
    const float *got = r->out.data;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(want[i])) {
            assert_true(isnan(got[i]));
            continue;
        }
        if (fabsf(got[i] - want[i]) > tol * (1.0f + fabsf(want[i])))
            fail_msg("element %lld: got %.9g, want %.9g", (long long)i, got[i], want[i]);
    }
}

#define EXPECT_ARRAY(r, T, ...)                                                                    \
    do {                                                                                           \
        const T want_[] = {__VA_ARGS__};                                                           \
        int64_t n_ = (int64_t)(sizeof want_ / sizeof want_[0]);                                    \
        assert_int_equal(kn_tensor_numel(&(r)->out), n_);                                          \
        for (int64_t i_ = 0; i_ < n_; i_++)                                                        \
            if (((const T *)(r)->out.data)[i_] != want_[i_])                                       \
                fail_msg("element %lld: got %lld, want %lld", (long long)i_,                       \
                         (long long)((const T *)(r)->out.data)[i_], (long long)want_[i_]);         \
    } while (0)

static void test_add_broadcast(void **state) {
    (void)state;
    run r;
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
    kn_tensor in[2] = {T_(FLOAT32, a, 2, 3), T_(FLOAT32, b, 3)};
    assert_int_equal(run_node(&r, "", "Add", 14, NULL, 0, in, 2), KILN_OK);
    expect_shape(&r, 2, DIMS(2, 3));
    expect_f32(&r, (const float[]){11, 22, 33, 14, 25, 36}, 6, 0);
    run_free(&r);

    /* [2,1] - [1,3] -> [2,3] */
    float c[2] = {1, 2}, d[3] = {10, 20, 30};
    kn_tensor in2[2] = {T_(FLOAT32, c, 2, 1), T_(FLOAT32, d, 1, 3)};
    assert_int_equal(run_node(&r, "", "Sub", 14, NULL, 0, in2, 2), KILN_OK);
    expect_shape(&r, 2, DIMS(2, 3));
    expect_f32(&r, (const float[]){-9, -19, -29, -8, -18, -28}, 6, 0);
    run_free(&r);

    /* scalar * tensor */
    float s = 3;
    kn_tensor in3[2] = {SCALAR(FLOAT32, &s), T_(FLOAT32, a, 6)};
    assert_int_equal(run_node(&r, "", "Mul", 14, NULL, 0, in3, 2), KILN_OK);
    expect_f32(&r, (const float[]){3, 6, 9, 12, 15, 18}, 6, 0);
    run_free(&r);
}

/* Large enough for several parallel chunks that start in the middle of broadcast rows. */
static void test_broadcast_parallel(void **state) {
    (void)state;
    enum { N = 3, C = 7, HW = 5003 };
    float *x = kn_malloc(sizeof(float) * N * C * HW), bias[C];
    for (int i = 0; i < N * C * HW; i++)
        x[i] = (float)(i % 1000);
    for (int c = 0; c < C; c++)
        bias[c] = (float)(c * 1000);
    run r;
    kn_tensor in[2] = {T_(FLOAT32, x, N, C, 1, HW), T_(FLOAT32, bias, 1, C, 1, 1)};
    assert_int_equal(run_node(&r, "", "Add", 14, NULL, 0, in, 2), KILN_OK);
    expect_shape(&r, 4, DIMS(N, C, 1, HW));
    const float *y = r.out.data;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) {
                int idx = (n * C + c) * HW + i;
                if (y[idx] != x[idx] + bias[c])
                    fail_msg("at %d: %g", idx, y[idx]);
            }
    run_free(&r);
    kn_free(x);
}

static void test_int_division(void **state) {
    (void)state;
    run r;
    int32_t a[6] = {7, -7, 7, -7, 5, INT32_MIN}, b[6] = {2, 2, -2, -2, 0, -1};
    kn_tensor in[2] = {T_(INT32, a, 6), T_(INT32, b, 6)};
    assert_int_equal(run_node(&r, "", "Div", 14, NULL, 0, in, 2), KILN_OK);
    /* Truncation toward zero; x/0 gives 0; INT_MIN/-1 wraps. */
    EXPECT_ARRAY(&r, int32_t, 3, -3, -3, 3, 0, INT32_MIN);
    run_free(&r);

    uint8_t ua[3] = {200, 7, 9}, ub[1] = {3};
    kn_tensor in2[2] = {T_(UINT8, ua, 3), T_(UINT8, ub, 1)};
    assert_int_equal(run_node(&r, "", "Div", 14, NULL, 0, in2, 2), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 66, 2, 3);
    run_free(&r);

    /* int8 add wraps: 100 + 100 = -56 */
    int8_t c[2] = {100, -128}, d[2] = {100, -1};
    kn_tensor in3[2] = {T_(INT8, c, 2), T_(INT8, d, 2)};
    assert_int_equal(run_node(&r, "", "Add", 14, NULL, 0, in3, 2), KILN_OK);
    EXPECT_ARRAY(&r, int8_t, -56, 127);
    run_free(&r);
}

static void test_mod_sign_rules(void **state) {
    (void)state;
    run r;
    int64_t a[6] = {-4, 7, 5, 4, -7, 8}, b[6] = {2, -3, 8, -2, 3, 5};
    kn_tensor in[2] = {T_(INT64, a, 6), T_(INT64, b, 6)};
    /* numpy.mod: sign of the divisor */
    assert_int_equal(run_node(&r, "", "Mod", 13, NULL, 0, in, 2), KILN_OK);
    EXPECT_ARRAY(&r, int64_t, 0, -2, 5, 0, 2, 3);
    run_free(&r);
    /* numpy.fmod: sign of the dividend */
    kn_attr fm = ai("fmod", 1);
    assert_int_equal(run_node(&r, "", "Mod", 13, &fm, 1, in, 2), KILN_OK);
    EXPECT_ARRAY(&r, int64_t, 0, 1, 5, 0, -1, 3);
    run_free(&r);

    float fa[6] = {-4.3f, 7.2f, 5.0f, 4.3f, -7.2f, 8.0f};
    float fb[6] = {2.1f, -3.4f, 8.0f, -2.1f, 3.4f, 5.0f};
    kn_tensor in2[2] = {T_(FLOAT32, fa, 6), T_(FLOAT32, fb, 6)};
    assert_int_equal(run_node(&r, "", "Mod", 13, &fm, 1, in2, 2), KILN_OK);
    expect_f32(&r, (const float[]){-0.1000004f, 0.3999996f, 5.0f, 0.1000004f, -0.3999996f, 3.0f}, 6,
               1e-6f);
    run_free(&r);
    /* fmod=0 on floats: the floor remainder (numpy.mod), which opset 28 defined */
    assert_int_equal(run_node(&r, "", "Mod", 28, NULL, 0, in2, 2), KILN_OK);
    expect_f32(&r, (const float[]){1.9999995f, -3.0000005f, 5.0f, -1.9999995f, 3.0000005f, 3.0f}, 6,
               1e-6f);
    run_free(&r);
}

static void test_cast(void **state) {
    (void)state;
    run r;
    float f[7] = {1.9f, -1.9f, 2.5f, 1e10f, -1e10f, NAN, 0.0f};
    kn_tensor x = T_(FLOAT32, f, 7);
    kn_attr to = ai("to", KILN_DTYPE_INT32);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &x, 1), KILN_OK);
    assert_int_equal(r.out.dtype, KILN_DTYPE_INT32);
    /* truncation toward zero; out of range saturates; NaN gives 0 */
    EXPECT_ARRAY(&r, int32_t, 1, -1, 2, INT32_MAX, INT32_MIN, 0, 0);
    run_free(&r);

    to = ai("to", KILN_DTYPE_UINT8);
    float g[4] = {300.0f, -5.0f, 254.7f, 0.5f};
    kn_tensor xg = T_(FLOAT32, g, 4);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &xg, 1), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 255, 0, 254, 0);
    run_free(&r);

    /* integer narrowing wraps modulo 2^8, as numpy's astype */
    int64_t big[3] = {300, -1, 127};
    kn_tensor xb = T_(INT64, big, 3);
    to = ai("to", KILN_DTYPE_INT8);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &xb, 1), KILN_OK);
    EXPECT_ARRAY(&r, int8_t, 44, -1, 127);
    run_free(&r);

    /* float -> float16: numpy gives 0x2E66 0x3555 0x7BFF 0x7C00(inf) 0x8000(-0) */
    float h[5] = {0.1f, 1.0f / 3.0f, 65519.0f, 70000.0f, -2.5e-8f};
    kn_tensor xh = T_(FLOAT32, h, 5);
    to = ai("to", KILN_DTYPE_FLOAT16);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &xh, 1), KILN_OK);
    EXPECT_ARRAY(&r, uint16_t, 11878, 13653, 31743, 31744, 32768);
    run_free(&r);

    /* float -> bfloat16 rounds to nearest even: 0x3F808000 -> 0x3F80, 0x3F818000 -> 0x3F82 */
    float bf[2] = {1.00390625f, 1.01171875f};
    kn_tensor xbf = T_(FLOAT32, bf, 2);
    to = ai("to", KILN_DTYPE_BFLOAT16);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &xbf, 1), KILN_OK);
    EXPECT_ARRAY(&r, uint16_t, 0x3F80, 0x3F82);
    run_free(&r);

    /* bool <-> float, uint64 beyond int64 -> double */
    uint8_t bl[3] = {1, 0, 1};
    kn_tensor xbl = T_(BOOL, bl, 3);
    to = ai("to", KILN_DTYPE_FLOAT64);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &xbl, 1), KILN_OK);
    EXPECT_ARRAY(&r, double, 1.0, 0.0, 1.0);
    run_free(&r);
    uint64_t u[1] = {UINT64_MAX};
    kn_tensor xu = T_(UINT64, u, 1);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &xu, 1), KILN_OK);
    assert_true(((double *)r.out.data)[0] == 18446744073709551615.0);
    run_free(&r);

    /* CastLike takes the dtype of its second input; strings are refused */
    int16_t like = 0;
    kn_tensor cl[2] = {T_(FLOAT32, f, 3), SCALAR(INT16, &like)};
    assert_int_equal(run_node(&r, "", "CastLike", 15, NULL, 0, cl, 2), KILN_OK);
    EXPECT_ARRAY(&r, int16_t, 1, -1, 2);
    run_free(&r);
    /* to string: shortest round-trip form, NaN as "NaN" (ops/text/string_cast.c) */
    to = ai("to", KILN_DTYPE_STRING);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &x, 1), KILN_OK);
    kn_strings s;
    assert_int_equal(kn_strings_open(&r.out, "out", &s), KILN_OK);
    const char *want[7] = {"1.9", "-1.9", "2.5", "1e+10", "-1e+10", "NaN", "0"};
    for (int i = 0; i < 7; i++) {
        kn_str e = kn_strings_at(&s, i);
        assert_int_equal(e.n, strlen(want[i]));
        assert_memory_equal(e.p, want[i], e.n);
    }
    /* and back; a string that is no number fails naming it */
    kn_tensor back = r.out;
    to = ai("to", KILN_DTYPE_FLOAT32);
    run r2;
    assert_int_equal(run_node(&r2, "", "Cast", 13, &to, 1, &back, 1), KILN_OK);
    expect_f32(&r2, f, 7, 0.0f);
    run_free(&r2);
    run_free(&r);
    kn_shape one = {.rank = 1, .d = {1}};
    const kn_str bad[1] = {{"12x", 3}};
    kn_tensor bt;
    assert_int_equal(kn_strings_make(&one, bad, &bt), KILN_OK);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &bt, 1), KILN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kiln_last_error(), "'12x'"));
    run_free(&r);
    kn_free(bt.data);
    to = ai("to", KILN_DTYPE_CONTAINER);
    assert_int_equal(run_node(&r, "", "Cast", 13, &to, 1, &x, 1), KILN_ERR_UNSUPPORTED);
    run_free(&r);
}

static void test_float16_arith(void **state) {
    (void)state;
    run r;
    /* 1.5 + 0.25 = 1.75 (0x3F00); 2 * ... computed through float */
    uint16_t a[3] = {0x3E00, 0x4000, 0xBC00}, b[1] = {0x3400};
    kn_tensor in[2] = {T_(FLOAT16, a, 3), T_(FLOAT16, b, 1)};
    assert_int_equal(run_node(&r, "", "Add", 14, NULL, 0, in, 2), KILN_OK);
    assert_int_equal(r.out.dtype, KILN_DTYPE_FLOAT16);
    EXPECT_ARRAY(&r, uint16_t, 0x3F00, 0x4080, 0xBA00);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "Greater", 13, NULL, 0, in, 2), KILN_OK);
    assert_int_equal(r.out.dtype, KILN_DTYPE_BOOL);
    EXPECT_ARRAY(&r, uint8_t, 1, 1, 0);
    run_free(&r);
    kn_tensor x = T_(FLOAT16, a, 3);
    assert_int_equal(run_node(&r, "", "Relu", 14, NULL, 0, &x, 1), KILN_OK);
    EXPECT_ARRAY(&r, uint16_t, 0x3E00, 0x4000, 0x0000);
    run_free(&r);
    uint16_t nan_h[2] = {0x7E00, 0x3C00};
    kn_tensor xn = T_(FLOAT16, nan_h, 2);
    assert_int_equal(run_node(&r, "", "IsNaN", 13, NULL, 0, &xn, 1), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 1, 0);
    run_free(&r);
}

static void test_activations(void **state) {
    (void)state;
    run r;
    float x[5] = {-3.0f, -0.5f, 0.0f, 0.7f, 2.5f};
    kn_tensor in = T_(FLOAT32, x, 5);
    /* numpy references (float64 evaluation rounded) */
    assert_int_equal(run_node(&r, "", "Sigmoid", 13, NULL, 0, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){0.04742587f, 0.37754068f, 0.5f, 0.6681878f, 0.92414182f}, 5,
               1e-6f);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "Gelu", 20, NULL, 0, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){-0.00404969f, -0.15426877f, 0.0f, 0.53062543f, 2.48447584f}, 5,
               1e-6f);
    run_free(&r);
    kn_attr tanh_a = as("approximate", "tanh");
    assert_int_equal(run_node(&r, "", "Gelu", 20, &tanh_a, 1, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){-0.00363739f, -0.15428599f, 0.0f, 0.53057012f, 2.48491573f}, 5,
               1e-6f);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "Softplus", 1, NULL, 0, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){0.04858735f, 0.47407698f, 0.69314718f, 1.10318604f, 2.57888973f},
               5, 1e-6f);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "HardSwish", 14, NULL, 0, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){0.0f, -0.20833333f, 0.0f, 0.43166667f, 2.29166651f}, 5, 1e-6f);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "Mish", 18, NULL, 0, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){-0.14564746f, -0.22074377f, 0.0f, 0.56114837f, 2.47139230f}, 5,
               1e-6f);
    run_free(&r);
    kn_attr alpha = af("alpha", 0.1f);
    assert_int_equal(run_node(&r, "", "LeakyRelu", 16, &alpha, 1, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){-0.3f, -0.05f, 0.0f, 0.7f, 2.5f}, 5, 1e-7f);
    run_free(&r);
    kn_attr shr[2] = {af("bias", 1.0f), af("lambd", 1.0f)};
    assert_int_equal(run_node(&r, "", "Shrink", 9, shr, 2, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){-2.0f, 0.0f, 0.0f, 0.0f, 1.5f}, 5, 0);
    run_free(&r);
    /* round half to even */
    float h[5] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f};
    kn_tensor hin = T_(FLOAT32, h, 5);
    assert_int_equal(run_node(&r, "", "Round", 11, NULL, 0, &hin, 1), KILN_OK);
    expect_f32(&r, (const float[]){0.0f, 2.0f, 2.0f, -0.0f, -2.0f}, 5, 0);
    run_free(&r);
}

/* The float32 sigmoid and tanh have their own exp: sweep them against double references. */
static void test_sigmoid_accuracy(void **state) {
    (void)state;
    enum { N = 4003 };
    float *x = kn_malloc(sizeof(float) * N);
    for (int i = 0; i < N - 3; i++)
        x[i] = -30.0f + 60.0f * (float)i / (float)(N - 4);
    x[N - 3] = 200.0f;
    x[N - 2] = -200.0f;
    x[N - 1] = NAN;
    kn_tensor in = T_(FLOAT32, x, N);
    run r;
    assert_int_equal(run_node(&r, "", "Sigmoid", 13, NULL, 0, &in, 1), KILN_OK);
    const float *y = r.out.data;
    for (int i = 0; i < N - 3; i++) {
        double want = 1.0 / (1.0 + exp(-(double)x[i]));
        if (fabs(y[i] - want) > 4e-7 * want + 1e-30)
            fail_msg("sigmoid(%.9g) = %.9g, want %.9g", x[i], y[i], want);
    }
    assert_true(y[N - 3] == 1.0f);
    assert_true(y[N - 2] >= 0.0f && y[N - 2] < 1e-37f);
    assert_true(isnan(y[N - 1]));
    run_free(&r);

    /* tanh shares the exp; near 0 its polynomial keeps the relative error small */
    x[0] = 1e-6f;
    x[1] = -3e-4f;
    assert_int_equal(run_node(&r, "", "Tanh", 13, NULL, 0, &in, 1), KILN_OK);
    y = r.out.data;
    for (int i = 0; i < N - 3; i++) {
        double want = tanh((double)x[i]);
        if (fabs(y[i] - want) > 4e-7 * fabs(want) + 1e-30)
            fail_msg("tanh(%.9g) = %.9g, want %.9g", x[i], y[i], want);
    }
    assert_true(y[N - 3] == 1.0f && y[N - 2] == -1.0f && isnan(y[N - 1]));
    run_free(&r);
    kn_free(x);
}

static void test_integer_unary(void **state) {
    (void)state;
    run r;
    int8_t x[4] = {-128, -5, 0, 7};
    kn_tensor in = T_(INT8, x, 4);
    assert_int_equal(run_node(&r, "", "Abs", 13, NULL, 0, &in, 1), KILN_OK);
    EXPECT_ARRAY(&r, int8_t, -128, 5, 0, 7);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "Neg", 13, NULL, 0, &in, 1), KILN_OK);
    EXPECT_ARRAY(&r, int8_t, -128, 5, 0, -7);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "Sign", 13, NULL, 0, &in, 1), KILN_OK);
    EXPECT_ARRAY(&r, int8_t, -1, -1, 0, 1);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "Relu", 14, NULL, 0, &in, 1), KILN_OK);
    EXPECT_ARRAY(&r, int8_t, 0, 0, 0, 7);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "BitwiseNot", 18, NULL, 0, &in, 1), KILN_OK);
    EXPECT_ARRAY(&r, int8_t, 127, 4, -1, -8);
    run_free(&r);
    /* Sigmoid is float-only */
    assert_int_equal(run_node(&r, "", "Sigmoid", 13, NULL, 0, &in, 1), KILN_ERR_DTYPE);
    run_free(&r);
}

static void test_clip(void **state) {
    (void)state;
    run r;
    float x[5] = {-2, -0.5f, 0, 0.5f, 2};
    kn_tensor in = T_(FLOAT32, x, 5);
    kn_attr mm[2] = {af("min", -1), af("max", 1)};
    assert_int_equal(run_node(&r, "", "Clip", 6, mm, 2, &in, 1), KILN_OK);
    expect_f32(&r, (const float[]){-1, -0.5f, 0, 0.5f, 1}, 5, 0);
    run_free(&r);
    float lo = 0, hi = 0.25f;
    kn_tensor in3[3] = {in, SCALAR(FLOAT32, &lo), SCALAR(FLOAT32, &hi)};
    assert_int_equal(run_node(&r, "", "Clip", 13, NULL, 0, in3, 3), KILN_OK);
    expect_f32(&r, (const float[]){0, 0, 0, 0.25f, 0.25f}, 5, 0);
    run_free(&r);
    /* only max given; min omitted */
    kn_tensor in_max[3] = {in, {0}, SCALAR(FLOAT32, &hi)};
    assert_int_equal(run_node(&r, "", "Clip", 13, NULL, 0, in_max, 3), KILN_OK);
    expect_f32(&r, (const float[]){-2, -0.5f, 0, 0.25f, 0.25f}, 5, 0);
    run_free(&r);
    /* int8 with min > max gives max everywhere, as numpy.clip */
    int8_t xi[3] = {-100, 0, 100}, ilo = 10, ihi = 5;
    kn_tensor ini[3] = {T_(INT8, xi, 3), SCALAR(INT8, &ilo), SCALAR(INT8, &ihi)};
    assert_int_equal(run_node(&r, "", "Clip", 13, NULL, 0, ini, 3), KILN_OK);
    EXPECT_ARRAY(&r, int8_t, 5, 5, 5);
    run_free(&r);
}

static void test_pow(void **state) {
    (void)state;
    run r;
    float x[3] = {1.5f, -2.0f, 3.0f}, two = 2.0f;
    kn_tensor in[2] = {T_(FLOAT32, x, 3), SCALAR(FLOAT32, &two)};
    assert_int_equal(run_node(&r, "", "Pow", 15, NULL, 0, in, 2), KILN_OK);
    expect_f32(&r, (const float[]){2.25f, 4.0f, 9.0f}, 3, 0);
    run_free(&r);
    int32_t b[4] = {2, -3, 5, 1}, e[4] = {10, 3, 0, -2};
    kn_tensor ii[2] = {T_(INT32, b, 4), T_(INT32, e, 4)};
    assert_int_equal(run_node(&r, "", "Pow", 15, NULL, 0, ii, 2), KILN_OK);
    EXPECT_ARRAY(&r, int32_t, 1024, -27, 1, 1);
    run_free(&r);
    int64_t ie[3] = {2, 3, -1};
    kn_tensor fi[2] = {T_(FLOAT32, x, 3), T_(INT64, ie, 3)};
    assert_int_equal(run_node(&r, "", "Pow", 15, NULL, 0, fi, 2), KILN_OK);
    assert_int_equal(r.out.dtype, KILN_DTYPE_FLOAT32);
    expect_f32(&r, (const float[]){2.25f, -8.0f, 1.0f / 3.0f}, 3, 1e-7f);
    run_free(&r);
    /* int base, float exponent: numpy computes in float64 then truncates */
    float fe[4] = {0.5f, 2.0f, 0.5f, 3.0f};
    kn_tensor iff[2] = {T_(INT32, b, 4), T_(FLOAT32, fe, 4)};
    b[0] = 10;
    assert_int_equal(run_node(&r, "", "Pow", 15, NULL, 0, iff, 2), KILN_OK);
    EXPECT_ARRAY(&r, int32_t, 3, 9, 2, 1);
    run_free(&r);
}

static void test_compare_logic_bitwise(void **state) {
    (void)state;
    run r;
    int32_t a[4] = {1, 5, 3, -2}, b[4] = {1, 2, 4, -2};
    kn_tensor in[2] = {T_(INT32, a, 4), T_(INT32, b, 4)};
    assert_int_equal(run_node(&r, "", "Equal", 13, NULL, 0, in, 2), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 1, 0, 0, 1);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "LessOrEqual", 16, NULL, 0, in, 2), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 1, 0, 1, 1);
    run_free(&r);
    uint8_t p[4] = {1, 1, 0, 0}, q[2] = {1, 0};
    kn_tensor bl[2] = {T_(BOOL, p, 2, 2), T_(BOOL, q, 2)};
    assert_int_equal(run_node(&r, "", "Xor", 7, NULL, 0, bl, 2), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 0, 1, 1, 0);
    run_free(&r);
    uint8_t s[4] = {1, 128, 255, 3}, sh[4] = {1, 1, 8, 2};
    kn_tensor ss[2] = {T_(UINT8, s, 4), T_(UINT8, sh, 4)};
    kn_attr left = as("direction", "LEFT");
    assert_int_equal(run_node(&r, "", "BitShift", 11, &left, 1, ss, 2), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 2, 0, 0, 12);
    run_free(&r);
    kn_attr right = as("direction", "RIGHT");
    assert_int_equal(run_node(&r, "", "BitShift", 11, &right, 1, ss, 2), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 0, 64, 0, 0);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "BitwiseAnd", 18, NULL, 0, ss, 2), KILN_OK);
    EXPECT_ARRAY(&r, uint8_t, 1, 0, 8, 2);
    run_free(&r);
}

static void test_variadic_and_where(void **state) {
    (void)state;
    run r;
    float a[2] = {1, NAN}, b[2][2] = {{5, 0}, {-1, 3}}, c[1] = {2};
    kn_tensor in[3] = {T_(FLOAT32, a, 2), T_(FLOAT32, b, 2, 2), T_(FLOAT32, c, 1)};
    assert_int_equal(run_node(&r, "", "Max", 13, NULL, 0, in, 3), KILN_OK);
    expect_shape(&r, 2, DIMS(2, 2));
    expect_f32(&r, (const float[]){5, NAN, 2, NAN}, 4, 0);
    run_free(&r);
    a[1] = 4;
    assert_int_equal(run_node(&r, "", "Mean", 13, NULL, 0, in, 3), KILN_OK);
    expect_f32(&r, (const float[]){8.0f / 3, 2, 2.0f / 3, 3}, 4, 1e-7f);
    run_free(&r);
    assert_int_equal(run_node(&r, "", "Sum", 13, NULL, 0, in, 1), KILN_OK);
    expect_f32(&r, (const float[]){1, 4}, 2, 0);
    run_free(&r);

    uint8_t cond[2][1] = {{1}, {0}};
    int64_t x[3] = {1, 2, 3}, y = -1;
    kn_tensor w[3] = {T_(BOOL, cond, 2, 1), T_(INT64, x, 3), SCALAR(INT64, &y)};
    assert_int_equal(run_node(&r, "", "Where", 16, NULL, 0, w, 3), KILN_OK);
    expect_shape(&r, 2, DIMS(2, 3));
    EXPECT_ARRAY(&r, int64_t, 1, 2, 3, -1, -1, -1);
    run_free(&r);

    float pr_x[4] = {-2, 3, -4, 5}, slope[2] = {0.5f, 0.25f};
    kn_tensor pr[2] = {T_(FLOAT32, pr_x, 2, 2), T_(FLOAT32, slope, 2)};
    assert_int_equal(run_node(&r, "", "PRelu", 16, NULL, 0, pr, 2), KILN_OK);
    expect_f32(&r, (const float[]){-1, 3, -2, 5}, 4, 0);
    run_free(&r);
}

static void test_infer_errors(void **state) {
    (void)state;
    run r;
    float a[6] = {0}, b[4] = {0};
    int32_t ib[3] = {0};
    kn_tensor bad_shape[2] = {T_(FLOAT32, a, 2, 3), T_(FLOAT32, b, 4)};
    assert_int_equal(run_node(&r, "", "Add", 14, NULL, 0, bad_shape, 2), KILN_ERR_SHAPE);
    run_free(&r);
    kn_tensor bad_dtype[2] = {T_(FLOAT32, a, 3), T_(INT32, ib, 3)};
    assert_int_equal(run_node(&r, "", "Mul", 14, NULL, 0, bad_dtype, 2), KILN_ERR_DTYPE);
    run_free(&r);
    kn_tensor slope[2] = {T_(FLOAT32, a, 3), T_(FLOAT32, b, 2, 3)};
    assert_int_equal(run_node(&r, "", "PRelu", 16, NULL, 0, slope, 2), KILN_ERR_SHAPE);
    run_free(&r);
    kn_attr g = as("approximate", "fast");
    assert_int_equal(run_node(&r, "", "Gelu", 20, &g, 1, slope, 1), KILN_ERR_MODEL);
    run_free(&r);
}

/* y = x * sigmoid(x) + bias[c], then clip to [-1, 1]; bias broadcast along a row. */
static void test_fused_program(void **state) {
    (void)state;
    enum { ROWS = 3, COLS = 700 };
    const int64_t prog[] = {
        KN_FUSED_LOAD,
        0,
        0,
        0,
        0, /* r0 = x */
        KN_FUSED_UNARY,
        KN_EW_SIGMOID,
        1,
        0,
        0, /* r1 = sigmoid(r0) */
        KN_FUSED_BINARY,
        KN_EW_MUL,
        1,
        0,
        1, /* r1 = r0 * r1 */
        KN_FUSED_LOAD,
        0,
        2,
        1,
        0, /* r2 = bias */
        KN_FUSED_BINARY,
        KN_EW_ADD,
        1,
        1,
        2, /* r1 += r2 */
        KN_FUSED_CONST,
        0,
        3,
        2,
        0, /* r3 = 0.5 */
        KN_FUSED_BINARY,
        KN_EW_MUL,
        1,
        1,
        3, /* r1 *= 0.5 */
        KN_FUSED_UNARY,
        KN_EW_CLIP,
        1,
        1,
        0, /* clip(r1, c0, c1) */
        KN_FUSED_STORE,
        0,
        0,
        1,
        0,
    };
    const float consts[] = {-1.0f, 1.0f, 0.5f};
    kn_attr attrs[2] = {
        {.name = "program", .type = KN_ATTR_INTS, .n = 45, .ints = (int64_t *)prog},
        {.name = "constants", .type = KN_ATTR_FLOATS, .n = 3, .floats = (float *)consts}};
    float *x = kn_malloc(sizeof(float) * ROWS * COLS), bias[ROWS];
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = (float)((i % 97) - 48) / 8.0f;
    for (int i = 0; i < ROWS; i++)
        bias[i] = (float)i - 1.0f;
    kn_tensor in[2] = {T_(FLOAT32, x, ROWS, COLS), T_(FLOAT32, bias, ROWS, 1)};
    run r;
    assert_int_equal(run_node(&r, KN_DOMAIN, KN_FUSED_OP, 1, attrs, 2, in, 2), KILN_OK);
    expect_shape(&r, 2, DIMS(ROWS, COLS));
    const float *y = r.out.data;
    for (int i = 0; i < ROWS * COLS; i++) {
        double v = x[i] / (1.0 + exp(-(double)x[i]));
        v = (v + bias[i / COLS]) * 0.5;
        v = v < -1 ? -1 : v > 1 ? 1 : v;
        if (fabs(y[i] - v) > 1e-6)
            fail_msg("element %d: got %g want %g", i, y[i], v);
    }
    run_free(&r);
    kn_free(x);

    /* Reading a register never written is refused at inference. */
    int64_t bad[] = {KN_FUSED_UNARY, KN_EW_RELU, 0, 5, 0, KN_FUSED_STORE, 0, 0, 0, 0};
    attrs[0].ints = bad;
    attrs[0].n = 10;
    assert_int_equal(run_node(&r, KN_DOMAIN, KN_FUSED_OP, 1, attrs, 2, in, 2), KILN_ERR_MODEL);
    run_free(&r);
}

static int add_value(kn_graph *g, const char *name, int rank, const int64_t *dims) {
    int v = kn_graph_add_value(g, name);
    assert_true(v >= 0);
    g->values[v].dtype = KILN_DTYPE_FLOAT32;
    g->values[v].rank = rank;
    for (int i = 0; i < rank; i++)
        g->values[v].dims[i].value = dims[i];
    return v;
}

/* x -> Sigmoid -> Mul(x, .) -> Add(bias) -> Relu -> out, plus a Mul by a scalar constant, and
 * a Tanh whose result is also a graph output (so it must stay). */
static void test_fuse_pass(void **state) {
    (void)state;
    kn_graph *g = kn_graph_create();
    int x = add_value(g, "x", 2, DIMS(2, 4));
    int bias = add_value(g, "bias", 1, DIMS(4));
    int half = add_value(g, "half", 0, NULL);
    float hv = 0.5f;
    kn_tensor ht = SCALAR(FLOAT32, &hv);
    assert_int_equal(kn_value_set_const(g, half, &ht), KILN_OK);
    g->values[half].dtype = KILN_DTYPE_FLOAT32;
    g->values[half].rank = 0;
    int s = add_value(g, "s", 2, DIMS(2, 4)), m = add_value(g, "m", 2, DIMS(2, 4));
    int a = add_value(g, "a", 2, DIMS(2, 4)), h = add_value(g, "h", 2, DIMS(2, 4));
    int y = add_value(g, "y", 2, DIMS(2, 4)), t = add_value(g, "t", 2, DIMS(2, 4));
    int z = add_value(g, "z", 2, DIMS(2, 4));
    assert_int_equal(kn_graph_add_input(g, x), KILN_OK);
    assert_int_equal(kn_graph_add_input(g, bias), KILN_OK);
    kn_graph_add_node(g, "sig", "Sigmoid", "", 13, 1, &x, 1, &s);
    kn_graph_add_node(g, "mul", "Mul", "", 14, 2, (int[]){x, s}, 1, &m);
    kn_graph_add_node(g, "add", "Add", "", 14, 2, (int[]){m, bias}, 1, &a);
    kn_graph_add_node(g, "half", "Mul", "", 14, 2, (int[]){a, half}, 1, &h);
    kn_graph_add_node(g, "relu", "Relu", "", 14, 1, &h, 1, &y);
    kn_graph_add_node(g, "tanh", "Tanh", "", 13, 1, &x, 1, &t);
    kn_graph_add_node(g, "neg", "Neg", "", 13, 1, &t, 1, &z);
    assert_int_equal(kn_graph_add_output(g, y), KILN_OK);
    assert_int_equal(kn_graph_add_output(g, t), KILN_OK);
    assert_int_equal(kn_graph_add_output(g, z), KILN_OK);

    assert_int_equal(kn_pass_fuse_elementwise(g), KILN_OK);
    int fused = 0, total = 0;
    const kn_node *fn = NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead)
            continue;
        total++;
        if (strcmp(g->nodes[i].op_type, KN_FUSED_OP) == 0) {
            fused++;
            fn = &g->nodes[i];
        }
    }
    /* one fused node for the five-node chain; Tanh (a graph output) and Neg stay */
    assert_int_equal(fused, 1);
    assert_int_equal(total, 3);
    assert_int_equal(fn->n_in, 2);
    assert_string_equal(g->values[fn->out[0]].name, "y");
    assert_int_equal(g->values[fn->out[0]].producer, (int)(fn - g->nodes));

    float xv[8] = {-2, -1, -0.5f, 0, 0.5f, 1, 2, 3}, bv[4] = {0.1f, -0.2f, 0.3f, -0.4f};
    kn_tensor in[2];
    for (int i = 0; i < 2; i++) {
        const char *nm = g->values[fn->in[i]].name;
        in[i] = strcmp(nm, "x") == 0 ? T_(FLOAT32, xv, 2, 4) : T_(FLOAT32, bv, 4);
    }
    kn_tensor out = {0};
    kn_infer_ctx ic = {.node = fn, .n_in = 2, .in = in, .n_out = 1, .out = &out};
    assert_int_equal(kn_op_find(KN_DOMAIN, KN_FUSED_OP)->infer(&ic), KILN_OK);
    float yv[8];
    out.data = yv;
    kn_kernel_ctx kc = {.node = fn, .n_in = 2, .in = in, .n_out = 1, .out = &out};
    assert_int_equal(kn_backend_find_kernel(kn_backend_host(), KN_DOMAIN, KN_FUSED_OP)->run(&kc),
                     KILN_OK);
    for (int i = 0; i < 8; i++) {
        double v = xv[i] / (1.0 + exp(-(double)xv[i]));
        v = (v + bv[i % 4]) * 0.5;
        v = v < 0 ? 0 : v;
        if (fabs(yv[i] - v) > 1e-6)
            fail_msg("element %d: got %g want %g", i, yv[i], v);
    }
    kn_graph_destroy(g);
}

/* Clip (opset 13) with constant bounds fuses with its bounds as parameters; an int64 chain
 * is left alone. */
static void test_fuse_pass_clip_and_dtypes(void **state) {
    (void)state;
    kn_graph *g = kn_graph_create();
    int x = add_value(g, "x", 1, DIMS(5));
    int lo = add_value(g, "lo", 0, NULL), hi = add_value(g, "hi", 0, NULL);
    float lov = 0.0f, hiv = 6.0f;
    kn_tensor lt = SCALAR(FLOAT32, &lov), htt = SCALAR(FLOAT32, &hiv);
    assert_int_equal(kn_value_set_const(g, lo, &lt), KILN_OK);
    assert_int_equal(kn_value_set_const(g, hi, &htt), KILN_OK);
    int m = add_value(g, "m", 1, DIMS(5)), y = add_value(g, "y", 1, DIMS(5));
    int i = add_value(g, "i", 1, DIMS(5)), j = add_value(g, "j", 1, DIMS(5));
    int k = add_value(g, "k", 1, DIMS(5));
    g->values[i].dtype = g->values[j].dtype = g->values[k].dtype = KILN_DTYPE_INT64;
    assert_int_equal(kn_graph_add_input(g, x), KILN_OK);
    assert_int_equal(kn_graph_add_input(g, i), KILN_OK);
    kn_graph_add_node(g, "mul", "Mul", "", 14, 2, (int[]){x, x}, 1, &m);
    kn_graph_add_node(g, "clip", "Clip", "", 13, 3, (int[]){m, lo, hi}, 1, &y);
    kn_graph_add_node(g, "iadd", "Add", "", 14, 2, (int[]){i, i}, 1, &j);
    kn_graph_add_node(g, "ineg", "Neg", "", 13, 1, &j, 1, &k);
    assert_int_equal(kn_graph_add_output(g, y), KILN_OK);
    assert_int_equal(kn_graph_add_output(g, k), KILN_OK);
    assert_int_equal(kn_pass_fuse_elementwise(g), KILN_OK);
    assert_int_equal(g->n_nodes, 3);
    const kn_node *fn = &g->nodes[0];
    assert_string_equal(fn->op_type, KN_FUSED_OP);
    assert_int_equal(fn->n_in, 1);
    assert_string_equal(g->nodes[1].op_type, "Add");
    assert_string_equal(g->nodes[2].op_type, "Neg");

    float xv[5] = {-3, -1, 0.5f, 2, 4}, yv[5];
    kn_tensor in = T_(FLOAT32, xv, 5), out = {0};
    kn_infer_ctx ic = {.node = fn, .n_in = 1, .in = &in, .n_out = 1, .out = &out};
    assert_int_equal(kn_op_find(KN_DOMAIN, KN_FUSED_OP)->infer(&ic), KILN_OK);
    out.data = yv;
    kn_kernel_ctx kc = {.node = fn, .n_in = 1, .in = &in, .n_out = 1, .out = &out};
    assert_int_equal(kn_backend_find_kernel(kn_backend_host(), KN_DOMAIN, KN_FUSED_OP)->run(&kc),
                     KILN_OK);
    const float want[5] = {6, 1, 0.25f, 4, 6};
    for (int e = 0; e < 5; e++)
        assert_true(yv[e] == want[e]);
    kn_graph_destroy(g);
}

int main(void) {
    g_pool = kn_threadpool_create(3);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_broadcast),
        cmocka_unit_test(test_broadcast_parallel),
        cmocka_unit_test(test_int_division),
        cmocka_unit_test(test_mod_sign_rules),
        cmocka_unit_test(test_cast),
        cmocka_unit_test(test_float16_arith),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_sigmoid_accuracy),
        cmocka_unit_test(test_integer_unary),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_pow),
        cmocka_unit_test(test_compare_logic_bitwise),
        cmocka_unit_test(test_variadic_and_where),
        cmocka_unit_test(test_infer_errors),
        cmocka_unit_test(test_fused_program),
        cmocka_unit_test(test_fuse_pass),
        cmocka_unit_test(test_fuse_pass_clip_and_dtypes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kn_threadpool_destroy(g_pool);
    return rc;
}
