/* RNN family and misc ops: inference and CPU kernels against references computed with numpy
 * (independent Python implementations of the ONNX equations, cross-checked with
 * onnx.reference where it covers the case). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "ops/op.h"
#include "op_test_util.h"

#include <math.h>
#include <string.h>

#define MAX_IO 10

/* One node run through inference and its CPU kernel, as the runtime would. */
typedef struct op_run {
    kn_graph *g;
    int node;
    kn_tensor out[MAX_IO];
    int n_out;
} op_run;

static kn_attr attr_floats(const char *name, int64_t n, const float *v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_FLOATS, .n = n, .floats = (float *)v};
}
static kn_attr attr_strs(const char *name, int64_t n, const char *const *v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_STRINGS, .n = n, .strings = (char **)v};
}

/* Builds the node, infers, allocates outputs and runs the kernel. Returns the first failing
 * status; outputs omitted from `present_out` (a bitmask, 0 = all) are left without data. */
static kiln_status run_op_mask(op_run *r, const char *op, int opset, const kn_attr *attrs,
                               int n_attr, const kn_tensor *in, int n_in, int n_out,
                               unsigned present_out) {
    memset(r, 0, sizeof *r);
    r->g = kn_graph_create();
    assert_non_null(r->g);
    int vin[MAX_IO], vout[MAX_IO];
    for (int i = 0; i < n_in; i++)
        vin[i] = in[i].dtype ? kn_graph_add_value(r->g, NULL) : -1;
    for (int i = 0; i < n_out; i++)
        vout[i] = !present_out || (present_out >> i & 1) ? kn_graph_add_value(r->g, NULL) : -1;
    r->node = kn_graph_add_node(r->g, "n", op, "", opset, n_in, vin, n_out, vout);
    assert_true(r->node >= 0);
    for (int i = 0; i < n_attr; i++)
        assert_int_equal(kn_node_add_attr(r->g, r->node, &attrs[i]), KILN_OK);
    const kn_node *node = &r->g->nodes[r->node];
    const kn_op_schema *s = kn_op_find("", op);
    assert_non_null(s);
    r->n_out = n_out;
    kn_infer_ctx ic = {node, n_in, in, n_out, r->out};
    kiln_status rc = s->infer(&ic);
    if (rc != KILN_OK)
        return rc;
    for (int i = 0; i < n_out; i++) {
        if (vout[i] < 0)
            continue;
        size_t nb = kn_tensor_nbytes(&r->out[i]);
        r->out[i].data = kn_calloc(nb ? nb : 1, 1);
        assert_non_null(r->out[i].data);
    }
    const kn_kernel *k = kn_backend_find_kernel(kn_backend_host(), "", op);
    assert_non_null(k);
    void *state = NULL;
    if (k->prepare != NULL)
        KN_TRY(k->prepare(node, n_in, in, &state));
    kn_kernel_ctx kc = {
        .node = node, .n_in = n_in, .in = in, .n_out = n_out, .out = r->out, .state = state};
    rc = k->run(&kc);
    if (k->release != NULL)
        k->release(state);
    return rc;
}

static kiln_status run_op(op_run *r, const char *op, int opset, const kn_attr *attrs, int n_attr,
                          const kn_tensor *in, int n_in, int n_out) {
    return run_op_mask(r, op, opset, attrs, n_attr, in, n_in, n_out, 0);
}

static void op_free(op_run *r) {
    for (int i = 0; i < r->n_out; i++)
        kn_free(r->out[i].data);
    kn_graph_destroy(r->g);
}

static void check_shape(const kn_tensor *t, int rank, const int64_t *dims) {
    assert_int_equal(t->shape.rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(t->shape.d[i], dims[i]);
}
#define SHAPE(t, ...)                                                                              \
    check_shape(t, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                      \
                (int64_t[]){__VA_ARGS__})

static void check_f32(const kn_tensor *t, const float *want, int64_t n, float tol) {
    assert_int_equal(t->dtype, KILN_DTYPE_FLOAT32);
    assert_int_equal(kn_tensor_numel(t), n);
    const float *got = t->data;
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= tol * (1.0f + fabsf(want[i]))))
            fail_msg("element %lld: got %.7g, want %.7g", (long long)i, (double)got[i],
                     (double)want[i]);
}
#define CHECK_F32(t, want, tol) check_f32(t, want, (int64_t)(sizeof(want) / sizeof(want[0])), tol)

/* ---- RNN family ---- */

/* numpy reference data: seeded uniform inputs rounded to 2 decimals. */
static const float l1_x[] = {0.25f,  0.79f, 0.55f, -0.55f, -0.4f,  0.75f,
                             -0.99f, 0.64f, 0.59f, -0.06f, -0.39f, -0.44f};
static const float l1_w[] = {-0.49f, -0.11f, 0.01f,  0.11f,  0.99f,  0.59f,  0.24f,  0.98f,
                             -0.57f, -0.68f, 0.23f,  -0.91f, -0.93f, 0.03f,  -0.07f, 0.83f,
                             0.26f,  0.03f,  -0.01f, -0.5f,  -0.98f, -0.62f, 0.38f,  -0.6f,
                             -0.26f, -0.99f, 0.66f,  -0.69f, -0.46f, 0.76f,  0.02f,  0.69f};
static const float l1_r[] = {0.28f,  0.48f,  -0.82f, 0.08f, 0.02f,  0.74f,  -0.28f, 0.2f,
                             -0.88f, -0.22f, -0.35f, -0.7f, 0.63f,  -0.24f, 0.96f,  0.18f,
                             0.21f,  0.28f,  0.35f,  -0.7f, -0.12f, -0.52f, -0.2f,  -0.81f,
                             0.94f,  -0.57f, 0.34f,  -0.4f, 0.75f,  0.32f,  -0.74f, 0.69f};
static const float l1_b[] = {0.89f,  0.81f, 0.14f,  -0.71f, -0.62f, 0.86f,  0.1f,   -0.64f,
                             0.77f,  0.28f, 0.14f,  -0.25f, -0.18f, -0.52f, -0.92f, 0.75f,
                             -0.06f, 0.1f,  -0.36f, 0.5f,   -0.95f, -0.26f, -0.94f, -0.75f,
                             0.93f,  0.32f, -0.14f, 0.05f,  0.75f,  -0.31f, 0.18f,  0.37f};
static const float l1_h0[] = {-0.29f, 0.04f, 0.53f, 0.82f, -0.7f, 0.87f, -0.99f, 0.51f};
static const float l1_c0[] = {0.62f, -0.73f, -0.16f, 0.63f, -0.97f, 0.26f, 0.59f, 0.03f};
static const float l1_p[] = {0.45f, -0.55f, -0.6f,  -0.27f, -0.64f, -0.31f,
                             0.9f,  0.15f,  -0.32f, -0.46f, 0.9f,   -0.11f};
static const float l1_y[] = {-0.4320109f, 0.01027405f, -0.5335441f,  0.08141534f, -0.04928083f,
                             0.09251305f, -0.227318f,  -0.1556223f,  -0.4291976f, 0.1189821f,
                             -0.2923164f, 0.1255561f,  -0.0430763f,  0.09252816f, -0.07528102f,
                             0.1032391f,  -0.6223951f, -0.03372757f, 0.0f,        0.0f,
                             -0.1175163f, 0.1676776f,  0.0f,         0.0f};
static const float l1_yh[] = {-0.6223951f,  -0.03372757f, -0.2923164f, 0.1255561f,
                              -0.04928083f, 0.09251305f,  -0.227318f,  -0.1556223f};
static const float l1_yc[] = {-0.997115f,  -0.1023832f, -0.6269611f, 0.3452275f,
                              -0.2176025f, 0.1853412f,  -0.7063493f, -0.2095749f};
static const int32_t l1_lens[] = {3, 2};
static const float g_x[] = {0.96f, 0.03f,  0.04f,  0.79f, 0.49f, 0.16f, -0.15f, 0.76f, -0.18f,
                            0.85f, -0.86f, -0.14f, 0.04f, 0.9f,  -0.5f, 0.61f,  0.35f, 0.43f};
static const float g_w[] = {0.26f,  0.94f, -0.33f, -0.2f, -0.59f, -0.9f,  -0.57f, 0.83f,  0.68f,
                            -0.78f, 0.21f, -0.04f, 0.19f, 0.32f,  -0.39f, 0.92f,  -0.07f, 0.26f};
static const float g_r[] = {0.27f, -0.63f, -0.88f, -0.18f, 0.53f, 0.63f,
                            0.46f, -0.77f, 0.83f,  0.6f,   0.76f, 0.05f};
static const float g_b[] = {0.83f,  -0.91f, -0.94f, -0.96f, -0.49f, -0.5f,
                            -0.62f, 0.13f,  -0.92f, 0.18f,  -0.67f, 0.36f};
static const float g_h0[] = {-0.96f, -0.38f, 0.88f, 0.08f};
static const float g1_y[] = {-0.7667118f, -0.05257409f, 0.4715887f,   0.3178524f,
                             -0.651715f,  -0.2930407f,  -0.08833292f, 0.4076513f,
                             -0.5801341f, -0.3877894f,  -0.2496854f,  0.3161251f};
static const float g1_yh[] = {-0.5801341f, -0.3877894f, -0.2496854f, 0.3161251f};
static const float g2_y[] = {-0.8914034f, 0.1455279f, -0.5311173f, 0.519238f,
                             0.0f,        0.0f,       -0.3927412f, 0.5789863f,
                             0.0f,        0.0f,       0.3647478f,  0.541706f};
static const float g2_yh[] = {-0.8914034f, 0.1455279f, -0.5311173f, 0.519238f};
static const int32_t g_lens[] = {1, 3};
static const float r_x[] = {0.62f, 0.32f, 0.22f, -0.62f, 0.15f,  -0.92f,
                            0.6f,  0.92f, 0.71f, -0.9f,  -0.32f, -0.36f};
static const float r_w[] = {-0.77f, 0.25f, 0.59f, -0.37f, 0.73f, 0.59f,
                            -0.74f, 0.53f, 0.77f, -0.61f, 0.15f, 0.28f};
static const float r_r[] = {0.22f, -0.81f, 0.32f,  0.26f, 0.65f,  0.61f, -0.35f, 0.44f,  0.73f,
                            0.79f, -0.68f, -0.95f, 0.3f,  -0.57f, 0.13f, 0.89f,  -0.24f, -0.49f};
static const float r_h0[] = {-0.09f, 0.31f,  -0.8f,  -0.24f, -0.73f, 0.32f,  0.66f, -0.25f, -0.26f,
                             0.08f,  -0.57f, -0.51f, -0.34f, -0.09f, -0.84f, 0.51f, 0.16f,  -0.4f};
static const float r_y[] = {
    -0.09243f,     -0.006250004f, 0.2253f,      0.1492935f,  0.4028606f, 0.4294927f,
    -0.02675761f,  0.4685387f,    -0.00111305f, 0.25342f,    0.67999f,   0.29926f,
    -0.008099999f, 0.2794f,       -0.09641f,    0.1091255f,  0.6126562f, 0.3875959f,
    -0.04909472f,  0.1342939f,    1.036192f,    0.69367f,    0.45502f,   0.64165f,
    -0.10424f,     0.09259997f,   -0.05465f,    0.01115868f, 0.7376384f, 0.4131922f,
    0.04097321f,   -0.00558489f,  -0.04086665f, 0.61603f,    0.3949f,    0.53881f};
static const float r_yh[] = {-0.02675761f, 0.4685387f,   -0.00111305f, 0.1492935f,   0.4028606f,
                             0.4294927f,   -0.04909472f, 0.1342939f,   1.036192f,    0.1091255f,
                             0.6126562f,   0.3875959f,   0.04097321f,  -0.00558489f, -0.04086665f,
                             0.01115868f,  0.7376384f,   0.4131922f};
static const float f_x[] = {-0.84f, 0.53f,  -0.74f, -0.73f, -0.74f, -0.84f,
                            0.81f,  -0.46f, -0.39f, 0.67f,  0.24f,  -0.63f};
static const float f_w[] = {-0.13f, 0.77f,  -0.25f, 0.42f,  -0.81f, 0.45f,  0.55f,  0.65f,
                            0.35f,  -0.26f, -0.87f, 0.04f,  0.51f,  -0.62f, -0.47f, 0.07f,
                            0.5f,   0.79f,  -0.75f, -0.63f, 0.6f,   0.29f,  0.44f,  0.99f};
static const float f_r[] = {0.88f, 0.69f,  0.55f,  -0.21f, 0.28f,  -0.63f, 0.52f, 0.52f,
                            0.44f, -0.11f, -0.24f, -0.16f, -0.93f, 0.69f,  0.08f, -0.22f};
static const float f_b[] = {0.1f,  0.44f, -0.24f, 0.66f, 0.84f, -0.23f, -0.72f, 0.52f,
                            0.99f, -0.7f, 0.43f,  0.65f, 0.84f, -0.75f, -0.82f, 0.98f};
static const float f_yh[] = {-0.1421876f, 0.09919235f, -0.3908111f, 0.36992f};
static const float f_yc[] = {-0.6663753f, 0.1130611f, -0.9000695f, 0.572413f};

static void test_lstm_bidirectional_full(void **st) {
    (void)st;
    const char *dir = "bidirectional";
    kn_attr at[] = {attr_s("direction", dir), attr_i("hidden_size", 2)};
    kn_tensor in[] = {F32(l1_x, 3, 3, 2, 2),
                      F32(l1_w, 3, 2, 8, 2),
                      F32(l1_r, 3, 2, 8, 2),
                      F32(l1_b, 2, 2, 16),
                      tens(KILN_DTYPE_INT32, l1_lens, 1, 2),
                      F32(l1_h0, 3, 2, 2, 2),
                      F32(l1_c0, 3, 2, 2, 2),
                      F32(l1_p, 2, 2, 6)};
    op_run r;
    assert_int_equal(run_op(&r, "LSTM", 7, at, 2, in, 8, 3), KILN_OK);
    SHAPE(&r.out[0], 3, 2, 2, 2);
    SHAPE(&r.out[1], 2, 2, 2);
    CHECK_F32(&r.out[0], l1_y, 1e-5f);
    CHECK_F32(&r.out[1], l1_yh, 1e-5f);
    CHECK_F32(&r.out[2], l1_yc, 1e-5f);
    op_free(&r);
}

static void test_gru_linear_before_reset_clip(void **st) {
    (void)st;
    kn_attr at[] = {attr_i("linear_before_reset", 1), attr_f("clip", 0.5f)};
    kn_tensor in[] = {
        F32(g_x, 3, 3, 2, 3), F32(g_w, 3, 1, 6, 3), F32(g_r, 3, 1, 6, 2), F32(g_b, 2, 1, 12), NONE,
        F32(g_h0, 3, 1, 2, 2)};
    op_run r;
    assert_int_equal(run_op(&r, "GRU", 7, at, 2, in, 6, 2), KILN_OK);
    CHECK_F32(&r.out[0], g1_y, 1e-5f);
    CHECK_F32(&r.out[1], g1_yh, 1e-5f);
    op_free(&r);
}

static void test_gru_reverse_sequence_lens(void **st) {
    (void)st;
    kn_attr at[] = {attr_s("direction", "reverse")};
    kn_tensor in[] = {F32(g_x, 3, 3, 2, 3),
                      F32(g_w, 3, 1, 6, 3),
                      F32(g_r, 3, 1, 6, 2),
                      F32(g_b, 2, 1, 12),
                      tens(KILN_DTYPE_INT32, g_lens, 1, 2),
                      F32(g_h0, 3, 1, 2, 2)};
    op_run r;
    assert_int_equal(run_op(&r, "GRU", 14, at, 1, in, 6, 2), KILN_OK);
    CHECK_F32(&r.out[0], g2_y, 1e-5f);
    CHECK_F32(&r.out[1], g2_yh, 1e-5f);
    op_free(&r);
}

static void test_rnn_layout1_custom_activations(void **st) {
    (void)st;
    static const char *const acts[] = {"LeakyRelu", "HardSigmoid"};
    static const float alpha[] = {0.1f, 0.3f}, beta[] = {0.4f};
    kn_attr at[] = {attr_s("direction", "bidirectional"), attr_i("layout", 1),
                    attr_strs("activations", 2, acts), attr_floats("activation_alpha", 2, alpha),
                    attr_floats("activation_beta", 1, beta)};
    kn_tensor in[] = {F32(r_x, 3, 3, 2, 2), F32(r_w, 3, 2, 3, 2), F32(r_r, 3, 2, 3, 3), NONE, NONE,
                      F32(r_h0, 3, 3, 2, 3)};
    op_run r;
    assert_int_equal(run_op(&r, "RNN", 14, at, 5, in, 6, 2), KILN_OK);
    SHAPE(&r.out[0], 3, 2, 2, 3);
    SHAPE(&r.out[1], 3, 2, 3);
    CHECK_F32(&r.out[0], r_y, 1e-5f);
    CHECK_F32(&r.out[1], r_yh, 1e-5f);
    op_free(&r);
}

static void test_lstm_layout1_input_forget_no_y(void **st) {
    (void)st;
    kn_attr at[] = {attr_i("layout", 1), attr_i("input_forget", 1)};
    kn_tensor in[] = {F32(f_x, 3, 2, 2, 3), F32(f_w, 3, 1, 8, 3), F32(f_r, 3, 1, 8, 2),
                      F32(f_b, 2, 1, 16)};
    op_run r;
    assert_int_equal(run_op_mask(&r, "LSTM", 14, at, 2, in, 4, 3, 6u), KILN_OK);
    assert_null(r.out[0].data);
    CHECK_F32(&r.out[1], f_yh, 1e-5f);
    CHECK_F32(&r.out[2], f_yc, 1e-5f);
    op_free(&r);
}

static void test_rnn_infer_errors(void **st) {
    (void)st;
    float z[64] = {0};
    kn_tensor bad_w[] = {F32(z, 3, 2, 1, 3), F32(z, 3, 1, 4, 3), F32(z, 3, 1, 2, 2)};
    op_run r;
    assert_int_equal(run_op(&r, "RNN", 7, NULL, 0, bad_w, 3, 1), KILN_ERR_SHAPE);
    op_free(&r);
    kn_attr layout = attr_i("layout", 1);
    kn_tensor ok[] = {F32(z, 3, 2, 1, 3), F32(z, 3, 1, 2, 3), F32(z, 3, 1, 2, 2)};
    assert_int_equal(run_op(&r, "RNN", 13, &layout, 1, ok, 3, 1), KILN_ERR_MODEL);
    op_free(&r);
    static const char *const one[] = {"Tanh", "Tanh"};
    kn_attr acts = attr_strs("activations", 2, one);
    assert_int_equal(run_op(&r, "RNN", 7, &acts, 1, ok, 3, 1), KILN_ERR_MODEL);
    op_free(&r);
    kn_tensor bad_dtype[] = {tens(KILN_DTYPE_INT32, z, 3, 2, 1, 3), ok[1], ok[2]};
    assert_int_equal(run_op(&r, "RNN", 7, NULL, 0, bad_dtype, 3, 1), KILN_ERR_DTYPE);
    op_free(&r);
}

/* ---- misc family ---- */

/* onnx.reference outputs for seeded inputs rounded to 2 decimals. */
static const float rs_x[] = {-0.82999998f, -0.52999997f, 0.60000002f,   0.16f,
                             -0.81f,       -0.13f,       -0.039999999f, -0.68000001f,
                             0.47f,        -0.76999998f, -0.22f,        0.029999999f};
static const float rs_lin[] = {
    -0.82999998f, -0.67999995f, -0.34166664f, 0.41166669f,  0.38f,         0.16f,
    -0.82499999f, -0.6275f,     -0.28499997f, 0.29500002f,  0.19500001f,   -0.050000004f,
    -0.815f,      -0.52249998f, -0.17166665f, 0.061666675f, -0.175f,       -0.47f,
    -0.49000001f, -0.38999999f, -0.25583333f, -0.11916666f, -0.29374999f,  -0.5025f,
    0.15000001f,  -0.22999999f, -0.53749996f, -0.2475f,     -0.16125f,     -0.14750001f,
    0.47f,        -0.14999999f, -0.67833334f, -0.31166667f, -0.094999999f, 0.029999999f};
static const float rs_cub_ac[] = {-0.82999998f, 0.10437503f,  0.16f,        -0.94f,
                                  0.13469729f,  -0.32656249f, -0.81f,       0.038750004f,
                                  -0.68000001f, -0.168125f,   -0.30412108f, -0.40375f,
                                  0.47f,        -0.63468748f, 0.029999999f};
static const float rs_near_asym[] = {-0.82999998f,  0.60000002f,  0.16f,       -0.81f,
                                     -0.039999999f, -0.68000001f, 0.47f,       -0.22f,
                                     0.029999999f,  0.47f,        -0.22f,      0.029999999f,
                                     0.47f,         -0.22f,       0.029999999f};
static const float rs_crop[] = {-0.6864f, 0.30830005f,  -9.0f,        -0.53560001f, -0.064799994f,
                                -9.0f,    -0.04280002f, -0.20689997f, -9.0f};
static const float rs_axes[] = {-0.82999998f, 0.60000002f, 0.47f, -0.22f};
static const float rs_aa[] = {-0.50874996f, 0.010000015f};
static const float rs_cub_ex[] = {-0.81313658f, 0.086759895f, 0.27694345f,  -0.83526063f,
                                  0.076286778f, -0.20361437f, -0.59153759f, -0.083677053f,
                                  -0.57354039f, 0.20349047f,  -0.52240562f, -0.071332209f};
static const float es_a[] = {
    -0.14f,        0.17f,        0.47999999f,    0.91000003f,  -0.43000001f,   0.30000001f,
    0.38999999f,   -0.41f,       -1.0f,          0.94999999f,  -0.40000001f,   -0.37f,
    0.77999997f,   0.17f,        -0.059999999f,  0.55000001f,  -0.94f,         0.41f,
    -0.25f,        -0.81999999f, 0.31999999f,    0.86000001f,  -0.58999997f,   0.25999999f,
    -0.40000001f,  0.47999999f,  0.44f,          -0.56f,       0.66000003f,    0.31999999f,
    0.37f,         0.63999999f,  -0.14f,         0.51999998f,  0.75999999f,    -0.80000001f,
    0.69999999f,   -0.20999999f, -0.039999999f,  -0.70999998f, 0.40000001f,    -0.41999999f,
    0.74000001f,   -0.44999999f, 0.12f,          -0.2f,        0.23f,          -0.61000001f,
    -0.63999999f,  0.49000001f,  0.5f,           0.13f,        0.83999997f,    -0.58999997f,
    0.69999999f,   -0.66000003f, 0.93000001f,    0.25f,        0.20999999f,    0.94f,
    0.56999999f,   0.57999998f,  -0.88999999f,   -0.25999999f, -0.82999998f,   -0.61000001f,
    -0.56999999f,  0.72000003f,  -0.75f,         -0.41f,       -0.0099999998f, 0.69999999f,
    0.93000001f,   0.41999999f,  -0.56999999f,   0.090000004f, 0.41f,          -0.89999998f,
    0.36000001f,   -0.25999999f, 0.18000001f,    0.34f,        0.34f,          0.050000001f,
    0.11f,         -0.60000002f, -0.0099999998f, -0.75f,       -0.039999999f,  0.07f,
    0.55000001f,   -0.20999999f, -0.95999998f,   0.059999999f, -0.58999997f,   0.47999999f,
    -0.22f,        -0.23999999f, 0.81999999f,    -0.20999999f, -0.30000001f,   -0.30000001f,
    -0.039999999f, -0.81f,       0.090000004f,   0.83999997f,  0.13f,          0.49000001f,
    0.88999999f,   0.68000001f,  0.49000001f,    0.63f,        0.63999999f,    -0.49000001f,
    -0.039999999f, -0.31f,       -0.47999999f,   0.14f,        -0.36000001f,   0.23999999f};
static const float es_b[] = {
    0.16f,         -0.79000002f,   -0.12f,       -0.22f,        0.41f,          -0.81999999f,
    -0.66000003f,  0.029999999f,   -0.19f,       0.33000001f,   -0.33000001f,   -0.61000001f,
    0.86000001f,   -0.50999999f,   -0.70999998f, -0.44f,        -0.31999999f,   -0.55000001f,
    0.07f,         0.87f,          -0.75f,       -0.17f,        0.34f,          0.76999998f,
    1.0f,          -0.70999998f,   0.07f,        0.75999999f,   -0.88999999f,   0.18000001f,
    -0.64999998f,  0.54000002f,    0.88f,        0.079999998f,  -0.98000002f,   -0.87f,
    -0.17f,        0.69f,          -0.52999997f, 0.34f,         -0.19f,         -0.47f,
    0.41f,         -0.38f,         -0.25999999f, 0.52999997f,   -0.0099999998f, 0.56999999f,
    0.029999999f,  -0.68000001f,   -0.11f,       0.75f,         0.13f,          0.93000001f,
    -1.0f,         -0.31999999f,   0.54000002f,  0.37f,         0.12f,          0.33000001f,
    0.75f,         0.37f,          0.090000004f, 0.12f,         0.33000001f,    -0.34999999f,
    0.34f,         0.23f,          0.56999999f,  -0.039999999f, -0.94999999f,   0.07f,
    0.72000003f,   0.28f,          0.28999999f,  -0.22f,        -0.28999999f,   0.44f,
    -0.83999997f,  0.73000002f,    0.75f,        0.92000002f,   -0.73000002f,   -0.76999998f,
    0.79000002f,   -0.2f,          -0.46000001f, -0.23999999f,  0.31999999f,    -0.68000001f,
    -0.029999999f, 0.31999999f,    0.44f,        -0.98000002f,  0.62f,          -0.13f,
    -0.13f,        0.12f,          -0.44f,       0.76999998f,   -0.57999998f,   0.090000004f,
    -0.66000003f,  0.23f,          0.80000001f,  0.76999998f,   -0.73000002f,   0.25f,
    0.79000002f,   -0.60000002f,   -0.17f,       0.43000001f,   0.47999999f,    -0.1f,
    0.28f,         0.34f,          -0.28999999f, 0.30000001f,   0.15000001f,    0.38999999f,
    0.02f,         -0.33000001f,   -0.13f,       0.83999997f,   -0.62f,         -0.69999999f,
    -0.98000002f,  0.69999999f,    0.98000002f,  -0.52999997f,  -0.47f,         -0.60000002f,
    0.2f,          -0.029999999f,  0.63999999f,  -0.57999998f,  0.75999999f,    -0.07f,
    0.62f,         0.60000002f,    0.81999999f,  -0.0f,         0.22f,          0.12f,
    -0.62f,        0.0f,           0.85000002f,  0.81999999f,   -0.95999998f,   0.33000001f,
    -0.34999999f,  -0.73000002f,   -0.72000003f, 0.58999997f,   0.92000002f,    0.039999999f,
    -0.23f,        0.02f,          0.66000003f,  0.49000001f,   -0.87f,         -0.56999999f,
    0.74000001f,   -0.0099999998f, 0.31999999f,  0.56f,         0.27000001f,    0.47f,
    0.090000004f,  -0.54000002f,   -0.63f,       0.99000001f,   -0.98000002f,   0.38f,
    0.75999999f,   -0.54000002f,   -0.89999998f, -0.2f,         -0.34f,         -0.079999998f};
static const float es_att[] = {
    -0.59079999f,  -0.29780003f,  0.1965f,       -0.56720001f,  0.50999999f,  -0.41120002f,
    0.39859998f,   -0.012200036f, -0.85399997f,  0.7252f,       -0.25070006f, 0.56370002f,
    0.072700016f,  0.54350001f,   0.98439991f,   -0.17489998f,  0.69900006f,  0.68879998f,
    0.50020003f,   -0.041399989f, 1.4541999f,    -0.8976f,      -1.1258f,     -0.069800027f,
    0.1500001f,    -1.1055f,      -0.70170003f,  0.1045f,       1.1749001f,   0.042900003f,
    -0.82799995f,  -1.1198f,      -0.86159998f,  -0.26700002f,  0.4982f,      0.061600011f,
    -0.72130001f,  -0.54449993f,  -0.82369995f,  -0.39129999f,  0.14469999f,  0.48860002f,
    1.4058f,       0.21190004f,   -0.063300006f, -0.069100037f, 1.2585f,      0.31719998f,
    0.19680004f,   -0.37389997f,  0.032200042f,  0.82499999f,   -0.18530005f, -0.28999999f,
    -0.034899995f, -0.37649998f,  -0.27020001f,  0.60420001f,   1.3868001f,   -0.45739999f,
    0.65889996f,   -0.30189997f,  0.1767f,       1.2285f,       0.88870001f,  -1.0261999f,
    0.20700002f,   0.68680006f,   1.2035f,       0.49530002f,   0.75900006f,  -0.9278f,
    -0.48289999f,  -0.78099996f,  -0.41479999f,  0.085600004f,  -0.48109999f, -0.60409999f,
    0.63350004f,   0.25410002f,   -0.67320001f,  -0.2201f,      0.16440001f,  -0.098499991f,
    -0.13150001f,  -0.60179996f,  -0.90440005f,  0.38760003f,   0.54750001f,  -0.08669997f,
    -0.78149998f,  -0.5316f,      0.45350003f,   -0.014599967f, -0.37979999f, -0.4057f,
    -0.17900002f,  -0.23050003f,  -0.15169999f,  0.2272f,       0.1602f,      0.55610001f,
    0.011799999f,  -0.17149998f,  0.18400002f,   0.41009998f,   -0.70520002f, -0.56199998f,
    0.62129998f,   -0.47970003f,  -0.70389998f,  -0.72819996f,  0.6128f,      -1.2179999f,
    0.93239993f,   0.62650001f,   -0.30059996f,  -0.046399988f, 0.56939995f,  -1.2403001f,
    -0.042299937f, -0.43430001f,  0.43930003f,   -0.38930002f,  -0.3082f,     0.70819998f,
    0.40899992f,   0.93410003f,   -0.23359998f,  0.44869995f,   -0.02570002f, -1.0256f,
    -1.4181001f,   -0.45550004f,  -0.31970003f,  0.72280002f,   -0.52880001f, -0.78980005f,
    0.36649999f,   -0.019200021f, 0.72729999f,   -0.3994f,      -0.37150002f, 0.67459995f};
static const float es_red[] = {0.34999999f, 0.9799999f,  0.75999993f, 0.36999997f,  2.5399997f,
                               0.8499999f,  1.12f,       -3.1099999f, 2.45f,        -0.39999998f,
                               2.29f,       -2.2399998f, -2.4300001f, -0.64999998f, 3.22f};
static const float es_c[] = {-0.15000001f, 0.88f,        -0.75999999f, 0.88999999f, -0.91000003f,
                             0.88f,        -0.33000001f, 0.44999999f,  -0.99000001f};
static const float es_d[] = {-0.11f, 0.36000001f, 0.25999999f, 0.61000001f, -0.69f,       -0.2f,
                             0.23f,  -0.94f,      0.67000002f, -0.17f,      -0.50999999f, -0.56f};
static const float es_e[] = {0.30000001f,  -0.89999998f, -0.50999999f, -0.38999999f,
                             -0.47999999f, 0.46000001f,  0.18000001f,  0.81f};
static const float es_three[] = {-0.042657018f, 1.087312f};
static const float es_implicit[] = {-0.23159999f, 0.57230002f, -0.38460001f,
                                    0.043400034f, 0.43170002f, -1.2249f};
static const float q_x[] = {1.2f,  -1.23f, -1.05f,       -2.25f, -1.53f, 0.63f,
                            1.38f, -1.23f, -0.93000001f, 1.83f,  2.76f,  -2.49f};
static const int8_t q_y[] = {60, -62, -11, -35, -20, 1, 69, -62, -9, 47, 23, -30};
static const float dq_y[] = {1.1999999f, -1.24f, -1.0500001f,  -2.25f, -1.5f, 0.60000002f,
                             1.38f,      -1.24f, -0.94999999f, 1.85f,  2.8f,  -2.5f};
static const float det_x[] = {
    -0.86000001f, 0.51999998f,  -0.0099999998f, -0.15000001f, 0.27000001f,   0.51999998f,
    -0.86000001f, 0.92000002f,  0.92000002f,    -0.17f,       -0.059999999f, -0.46000001f,
    0.17f,        -0.58999997f, 0.07f,          0.81f,        0.0099999998f, 0.64999998f};
static const float det_y[] = {0.036073998f, -0.15207399f};

static const float f_one[] = {1.0f, 1.0f, 2.0f, 1.5f};
static const float f_asym[] = {1.0f, 1.0f, 1.7f, 0.8f};
static const float f_aa[] = {1.0f, 1.0f, 0.6f, 0.5f};
static const float f_cub[] = {1.0f, 1.0f, 1.5f, 0.75f};
static const float f_roi[] = {0.0f, 0.0f, 0.2f, 0.1f, 1.0f, 1.0f, 0.9f, 1.2f};
static const int64_t sz_cub[] = {1, 1, 5, 3}, sz_crop[] = {1, 1, 3, 3}, sz_axes[] = {6, 2};

static void resize_case(const char *mode_attrs_name, int opset, const kn_attr *at, int n_attr,
                        const kn_tensor *in, int n_in, const float *want, int64_t n,
                        const int64_t *shape) {
    op_run r;
    kiln_status rc = run_op(&r, "Resize", opset, at, n_attr, in, n_in, 1);
    if (rc != KILN_OK)
        fail_msg("%s: status %d: %s", mode_attrs_name, rc, kiln_last_error());
    check_shape(&r.out[0], 4, shape);
    check_f32(&r.out[0], want, n, 1e-5f);
    op_free(&r);
}

static void test_resize_modes(void **st) {
    (void)st;
    kn_tensor x = F32(rs_x, 4, 1, 1, 3, 4);
    {
        kn_attr at[] = {attr_s("mode", "linear")};
        kn_tensor in[] = {x, NONE, F32(f_one, 1, 4)};
        resize_case("linear", 19, at, 1, in, 3, rs_lin, 36, (int64_t[]){1, 1, 6, 6});
    }
    {
        kn_attr at[] = {attr_s("mode", "cubic"),
                        attr_s("coordinate_transformation_mode", "align_corners")};
        kn_tensor in[] = {x, NONE, NONE, tens(KILN_DTYPE_INT64, sz_cub, 1, 4)};
        resize_case("cubic", 13, at, 2, in, 4, rs_cub_ac, 15, sz_cub);
    }
    {
        kn_attr at[] = {attr_s("mode", "nearest"),
                        attr_s("coordinate_transformation_mode", "asymmetric"),
                        attr_s("nearest_mode", "ceil")};
        kn_tensor in[] = {x, NONE, F32(f_asym, 1, 4)};
        resize_case("nearest", 13, at, 3, in, 3, rs_near_asym, 15, (int64_t[]){1, 1, 5, 3});
    }
    {
        kn_attr at[] = {attr_s("mode", "linear"),
                        attr_s("coordinate_transformation_mode", "tf_crop_and_resize"),
                        attr_f("extrapolation_value", -9.0f)};
        kn_tensor in[] = {x, F32(f_roi, 1, 8), NONE, tens(KILN_DTYPE_INT64, sz_crop, 1, 4)};
        resize_case("crop", 13, at, 3, in, 4, rs_crop, 9, sz_crop);
    }
    {
        static const int64_t axes[] = {2, 3};
        kn_attr at[] = {attr_s("mode", "nearest"), attr_ints("axes", 2, axes),
                        attr_s("keep_aspect_ratio_policy", "not_larger")};
        kn_tensor in[] = {x, NONE, NONE, tens(KILN_DTYPE_INT64, sz_axes, 1, 2)};
        resize_case("axes", 18, at, 3, in, 4, rs_axes, 4, (int64_t[]){1, 1, 2, 2});
    }
    {
        kn_attr at[] = {attr_s("mode", "linear"), attr_i("antialias", 1)};
        kn_tensor in[] = {x, NONE, F32(f_aa, 1, 4)};
        resize_case("antialias", 18, at, 2, in, 3, rs_aa, 2, (int64_t[]){1, 1, 1, 2});
    }
    {
        kn_attr at[] = {attr_s("mode", "cubic"), attr_i("exclude_outside", 1),
                        attr_f("cubic_coeff_a", -0.5f)};
        kn_tensor in[] = {x, NONE, F32(f_cub, 1, 4)};
        resize_case("cubic exclude", 13, at, 3, in, 3, rs_cub_ex, 12, (int64_t[]){1, 1, 4, 3});
    }
}

/* Resizing a leading axis takes the general N-d path rather than the image-plane one. */
static void test_resize_leading_axis(void **st) {
    (void)st;
    static const float rs_gen[] = {
        -0.83f,  -0.68f,   -0.34166664f, 0.41166669f,  0.38f,     0.16f,
        -0.825f, -0.6275f, -0.285f,      0.295f,       0.195f,    -0.05f,
        -0.815f, -0.5225f, -0.17166665f, 0.061666675f, -0.175f,   -0.47f,
        -0.49f,  -0.39f,   -0.25583333f, -0.11916666f, -0.29375f, -0.5025f,
        0.15f,   -0.23f,   -0.5375f,     -0.2475f,     -0.16125f, -0.1475f,
        0.47f,   -0.15f,   -0.67833334f, -0.31166667f, -0.095f,   0.03f};
    static const float scales[] = {2.0f, 1.5f, 1.0f};
    kn_attr at[] = {attr_s("mode", "linear"),
                    attr_s("coordinate_transformation_mode", "pytorch_half_pixel")};
    kn_tensor in[] = {F32(rs_x, 3, 3, 4, 1), NONE, F32(scales, 1, 3)};
    op_run r;
    assert_int_equal(run_op(&r, "Resize", 13, at, 2, in, 3, 1), KILN_OK);
    SHAPE(&r.out[0], 6, 6, 1);
    CHECK_F32(&r.out[0], rs_gen, 1e-5f);
    op_free(&r);
}

static void test_resize_upsample_legacy_and_errors(void **st) {
    (void)st;
    /* Upsample-9 nearest by (2, 3) repeats each element; uint8 data is copied exactly. */
    static const uint8_t x[] = {1, 2, 3, 4};
    static const float scales[] = {1.0f, 1.0f, 2.0f, 3.0f};
    static const uint8_t want[] = {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                   3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4};
    kn_attr mode = attr_s("mode", "nearest");
    kn_tensor in[] = {tens(KILN_DTYPE_UINT8, x, 4, 1, 1, 2, 2), F32(scales, 1, 4)};
    op_run r;
    assert_int_equal(run_op(&r, "Upsample", 9, &mode, 1, in, 2, 1), KILN_OK);
    SHAPE(&r.out[0], 1, 1, 4, 6);
    assert_memory_equal(r.out[0].data, want, sizeof want);
    op_free(&r);
    /* Resize-10 is asymmetric: x / 2 = 0, 0.5, 1, 1.5 over [0, 4], the last clamped. */
    static const float row[] = {0.0f, 4.0f}, row_scales[] = {1.0f, 2.0f}, row_want[] = {0, 2, 4, 4};
    kn_attr linear = attr_s("mode", "linear");
    kn_tensor r10[] = {F32(row, 2, 1, 2), F32(row_scales, 1, 2)};
    assert_int_equal(run_op(&r, "Resize", 10, &linear, 1, r10, 2, 1), KILN_OK);
    CHECK_F32(&r.out[0], row_want, 0.0f);
    op_free(&r);
    /* Upsample-7 takes its scales from an attribute. */
    static const float col[] = {1.0f, 2.0f}, col_want[] = {1.0f, 1.0f, 2.0f, 2.0f};
    static const float attr_scales[] = {2.0f, 1.0f};
    kn_attr up7[] = {mode, attr_floats("scales", 2, attr_scales)};
    kn_tensor c7 = F32(col, 2, 2, 1);
    assert_int_equal(run_op(&r, "Upsample", 7, up7, 2, &c7, 1, 1), KILN_OK);
    SHAPE(&r.out[0], 4, 1);
    CHECK_F32(&r.out[0], col_want, 0.0f);
    op_free(&r);
    /* Scales and sizes together, and a scale of zero, are refused. */
    static const int64_t sizes[] = {1, 1, 4, 6};
    kn_tensor both[] = {F32(scales, 4, 1, 1, 2, 2), NONE, F32(scales, 1, 4),
                        tens(KILN_DTYPE_INT64, sizes, 1, 4)};
    assert_int_equal(run_op(&r, "Resize", 13, NULL, 0, both, 4, 1), KILN_ERR_MODEL);
    op_free(&r);
    static const float zero[] = {1.0f, 1.0f, 0.0f, 1.0f};
    kn_tensor z[] = {F32(scales, 4, 1, 1, 2, 2), NONE, F32(zero, 1, 4)};
    assert_int_equal(run_op(&r, "Resize", 13, NULL, 0, z, 3, 1), KILN_ERR_SHAPE);
    op_free(&r);
    /* Unknown scales data: inference asks for it instead of guessing. */
    kn_tensor unknown[] = {F32(scales, 4, 1, 1, 2, 2), NONE, F32(NULL, 1, 4)};
    const kn_op_schema *s = kn_op_find("", "Resize");
    kn_graph *g = kn_graph_create();
    int v[2] = {kn_graph_add_value(g, NULL), kn_graph_add_value(g, NULL)};
    int in_idx[3] = {v[0], -1, v[1]}, out_idx = kn_graph_add_value(g, NULL);
    int node = kn_graph_add_node(g, "n", "Resize", "", 13, 3, in_idx, 1, &out_idx);
    kn_tensor out = {0};
    kn_infer_ctx ic = {&g->nodes[node], 3, unknown, 1, &out};
    assert_int_equal(s->infer(&ic), KN_NEED_DATA);
    kn_graph_destroy(g);
}

static void einsum_case(const char *eq, const kn_tensor *in, int n_in, const float *want,
                        int64_t n) {
    kn_attr at = attr_s("equation", eq);
    op_run r;
    kiln_status rc = run_op(&r, "Einsum", 12, &at, 1, in, n_in, 1);
    if (rc != KILN_OK)
        fail_msg("%s: status %d: %s", eq, rc, kiln_last_error());
    check_f32(&r.out[0], want, n, 1e-5f);
    op_free(&r);
}

static void test_einsum(void **st) {
    (void)st;
    kn_tensor ab[] = {F32(es_a, 4, 2, 3, 4, 5), F32(es_b, 4, 2, 3, 6, 5)};
    einsum_case("bhqd,bhkd->bhqk", ab, 2, es_att, 2 * 3 * 4 * 6);
    einsum_case("abcd -> db", ab, 1, es_red, 5 * 3);
    kn_tensor cde[] = {F32(es_c, 2, 3, 3), F32(es_d, 2, 3, 4), F32(es_e, 2, 4, 2)};
    einsum_case("ii,ij,jk->k", cde, 3, es_three, 2);
    einsum_case("ij,jk", cde + 1, 2, es_implicit, 6);
    /* Ellipsis broadcasting and a float64 batch diagonal: "...ii->...i". */
    static const double dx[] = {1, 2, 3, 4, 5, 6, 7, 8};
    kn_attr at = attr_s("equation", "...ii->...i");
    kn_tensor d = tens(KILN_DTYPE_FLOAT64, dx, 3, 2, 2, 2);
    op_run r;
    assert_int_equal(run_op(&r, "Einsum", 12, &at, 1, &d, 1, 1), KILN_OK);
    SHAPE(&r.out[0], 2, 2);
    const double *y = r.out[0].data;
    assert_true(y[0] == 1 && y[1] == 4 && y[2] == 5 && y[3] == 8);
    op_free(&r);
    kn_attr bad = attr_s("equation", "ij,jk->ik");
    kn_tensor mism[] = {F32(es_c, 2, 3, 3), F32(es_e, 2, 4, 2)};
    assert_int_equal(run_op(&r, "Einsum", 12, &bad, 1, mism, 2, 1), KILN_ERR_SHAPE);
    op_free(&r);
}

static void test_quantize_per_axis(void **st) {
    (void)st;
    static const float sc[] = {0.02f, 0.05f, 0.1f};
    static const int8_t zp[] = {0, 10, -5};
    kn_tensor in[] = {F32(q_x, 3, 2, 3, 2), F32(sc, 1, 3), tens(KILN_DTYPE_INT8, zp, 1, 3)};
    op_run r;
    assert_int_equal(run_op(&r, "QuantizeLinear", 13, NULL, 0, in, 3, 1), KILN_OK);
    assert_int_equal(r.out[0].dtype, KILN_DTYPE_INT8);
    assert_memory_equal(r.out[0].data, q_y, sizeof q_y);
    kn_tensor dq[] = {tens(KILN_DTYPE_INT8, r.out[0].data, 3, 2, 3, 2), in[1], in[2]};
    op_run d;
    assert_int_equal(run_op(&d, "DequantizeLinear", 13, NULL, 0, dq, 3, 1), KILN_OK);
    CHECK_F32(&d.out[0], dq_y, 1e-6f);
    op_free(&d);
    op_free(&r);
    /* Per-tensor uint8 with saturation and ties to even: 2.5 -> 2, 3.5 -> 4, 300 -> 255. */
    static const float x[] = {2.5f, 3.5f, 300.0f, -7.0f};
    static const float one[] = {1.0f};
    static const uint8_t want[] = {2, 4, 255, 0};
    kn_tensor pt[] = {F32(x, 1, 4), F32(one, 0, 0)};
    assert_int_equal(run_op(&r, "QuantizeLinear", 10, NULL, 0, pt, 2, 1), KILN_OK);
    assert_int_equal(r.out[0].dtype, KILN_DTYPE_UINT8);
    assert_memory_equal(r.out[0].data, want, sizeof want);
    op_free(&r);
    /* A per-axis scale of the wrong length names the condition. */
    kn_tensor bad[] = {F32(q_x, 3, 2, 3, 2), F32(sc, 1, 2)};
    assert_int_equal(run_op(&r, "QuantizeLinear", 13, NULL, 0, bad, 2, 1), KILN_ERR_SHAPE);
    op_free(&r);
}

static void test_det_and_matmul_integer(void **st) {
    (void)st;
    kn_tensor x = F32(det_x, 3, 2, 3, 3);
    op_run r;
    assert_int_equal(run_op(&r, "Det", 11, NULL, 0, &x, 1, 1), KILN_OK);
    SHAPE(&r.out[0], 2);
    CHECK_F32(&r.out[0], det_y, 1e-5f);
    op_free(&r);
    /* [[11,7,3],[10,6,2]] - 12 times [[1,4],[2,5],[3,6]] - 3 by hand: A-za = [[-1,-5,-9],
     * [-2,-6,-10]], B-zb = [[-2,1],[-1,2],[0,3]] -> [[7,-38],[10,-44]]. */
    static const uint8_t a[] = {11, 7, 3, 10, 6, 2}, b[] = {1, 4, 2, 5, 3, 6};
    static const uint8_t za[] = {12}, zb[] = {3};
    static const int32_t want[] = {7, -38, 10, -44};
    kn_tensor in[] = {tens(KILN_DTYPE_UINT8, a, 2, 2, 3), tens(KILN_DTYPE_UINT8, b, 2, 3, 2),
                      tens(KILN_DTYPE_UINT8, za, 0, 0), tens(KILN_DTYPE_UINT8, zb, 0, 0)};
    assert_int_equal(run_op(&r, "MatMulInteger", 10, NULL, 0, in, 4, 1), KILN_OK);
    SHAPE(&r.out[0], 2, 2);
    assert_memory_equal(r.out[0].data, want, sizeof want);
    op_free(&r);
}

/* onnx.reference outputs for GridSample, RoiAlign and Col2Im. */
static const float gs_x[] = {0.61000001f, 0.62f,        0.029999999f,   -0.43000001f, -0.88999999f,
                             -0.23f,      -0.18000001f, -0.91000003f,   -0.89999998f, 1.0f,
                             0.30000001f, -0.52999997f, -0.13f,         0.94999999f,  0.80000001f,
                             0.69f,       -0.22f,       -0.0099999998f, 0.34999999f,  -0.88f,
                             0.11f,       -0.46000001f, 0.75999999f,    -0.87f};
static const float gs_g[] = {0.46799999f,  0.96199995f,  -0.71499997f, 1.027f,
                             0.96199995f,  -1.2479999f,  0.53299999f,  -1.3f,
                             0.012999999f, -0.16899998f, -0.76699996f, -0.45499998f};
static const float gs_lin_zero[] = {-0.034467101f, -0.35243651f, -0.031703088f, -0.011518016f,
                                    -0.073563255f, 0.12920251f,  0.027471371f,  0.032210942f,
                                    0.050872393f,  0.036887053f, 0.35471606f,   -0.15318346f};
static const float gs_cub_refl[] = {0.063029051f,  -0.25076577f, -0.49811453f, -0.24040897f,
                                    -0.087014385f, -0.03360806f, 0.54582024f,  -0.16469634f,
                                    0.50367767f,   0.60196465f,  0.42771333f,  -0.038493309f};
static const float gs_near_border[] = {0.30000001f,  -0.89999998f, -0.43000001f, -0.43000001f,
                                       -0.18000001f, 0.61000001f,  0.75999999f,  0.11f,
                                       0.69f,        0.69f,        0.34999999f,  -0.13f};
static const float ra_x[] = {
    0.61000001f,   -0.37f,       -0.69999999f, 0.40000001f,   -0.1f,         0.60000002f,
    -0.52999997f,  -0.36000001f, 0.60000002f,  0.0099999998f, 0.0099999998f, -0.52999997f,
    -0.97000003f,  0.87f,        -0.82999998f, 0.69f,         -0.25999999f,  0.89999998f,
    -0.2f,         0.87f,        0.11f,        -0.51999998f,  0.47999999f,   0.34999999f,
    0.37f,         -0.07f,       -0.56f,       0.28f,         -0.79000002f,  0.38f,
    0.27000001f,   -0.25f,       0.60000002f,  -0.61000001f,  -0.22f,        0.60000002f,
    -0.23999999f,  0.43000001f,  0.23f,        0.88f,         0.98000002f,   0.44999999f,
    0.62f,         -0.69f,       0.43000001f,  0.69999999f,   -0.2f,         0.11f,
    -0.039999999f, 0.92000002f};
static const float ra_y[] = {-0.021237506f, -0.047987476f, 0.23356238f,  0.51320004f,
                             0.27130005f,   0.30881244f,   -0.30597657f, -0.46437496f,
                             0.2451172f,    -0.42374998f,  -0.42015627f, 0.41421878f};
static const float ci_x[] = {-0.37f,      -0.2f,        -1.0f,        -0.16f,       0.25999999f,
                             0.87f,       0.85000002f,  -0.34999999f, 0.98000002f,  -0.62f,
                             0.64999998f, -0.69f,       -0.19f,       -0.85000002f, 0.72000003f,
                             0.66000003f, -0.72000003f, 0.050000001f, -0.47999999f, -0.02f,
                             0.11f,       -0.79000002f, 0.73000002f,  -0.44f};
static const float ci_y[] = {0.85000002f,  -0.2f,        -0.34999999f, -1.0f,
                             -1.1f,        -0.59000003f, 0.63f,        1.59f,
                             -0.79000002f, -0.72000003f, 0.73000002f,  0.050000001f};

static void test_grid_sample(void **st) {
    (void)st;
    kn_tensor in[] = {F32(gs_x, 4, 1, 2, 3, 4), F32(gs_g, 4, 1, 2, 3, 2)};
    struct {
        const char *mode, *pad;
        int align;
        const float *want;
    } cases[] = {{"linear", "zeros", 0, gs_lin_zero},
                 {"cubic", "reflection", 1, gs_cub_refl},
                 {"nearest", "border", 0, gs_near_border}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kn_attr at[] = {attr_s("mode", cases[i].mode), attr_s("padding_mode", cases[i].pad),
                        attr_i("align_corners", cases[i].align)};
        op_run r;
        assert_int_equal(run_op(&r, "GridSample", 20, at, 3, in, 2, 1), KILN_OK);
        SHAPE(&r.out[0], 1, 2, 2, 3);
        check_f32(&r.out[0], cases[i].want, 12, 1e-5f);
        op_free(&r);
    }
    /* Opset 16 names the modes differently and only takes 4-D input. */
    kn_attr old = attr_s("mode", "linear");
    op_run r;
    assert_int_equal(run_op(&r, "GridSample", 16, &old, 1, in, 2, 1), KILN_ERR_MODEL);
    op_free(&r);
}

static void test_roi_align_and_col2im(void **st) {
    (void)st;
    static const float rois[] = {0.5f, 0.5f, 3.2f, 4.1f, 1.0f, 0.0f, 4.0f, 2.5f};
    static const int64_t bi[] = {1, 0};
    kn_attr at[] = {attr_i("output_height", 2), attr_i("output_width", 3),
                    attr_i("sampling_ratio", 2)};
    kn_tensor in[] = {F32(ra_x, 4, 2, 1, 5, 5), F32(rois, 2, 2, 4),
                      tens(KILN_DTYPE_INT64, bi, 1, 2)};
    op_run r;
    assert_int_equal(run_op(&r, "RoiAlign", 16, at, 3, in, 3, 1), KILN_OK);
    SHAPE(&r.out[0], 2, 1, 2, 3);
    CHECK_F32(&r.out[0], ra_y, 1e-5f);
    op_free(&r);
    static const int64_t bad_bi[] = {2, 0};
    in[2].data = (void *)bad_bi;
    assert_int_equal(run_op(&r, "RoiAlign", 16, at, 3, in, 3, 1), KILN_ERR_SHAPE);
    op_free(&r);

    static const int64_t img[] = {3, 4}, blk[] = {2, 2}, strides[] = {1, 2}, pads[] = {0, 1, 0, 1};
    kn_attr ca[] = {attr_ints("strides", 2, strides), attr_ints("pads", 4, pads)};
    kn_tensor ci[] = {F32(ci_x, 3, 1, 4, 6), tens(KILN_DTYPE_INT64, img, 1, 2),
                      tens(KILN_DTYPE_INT64, blk, 1, 2)};
    assert_int_equal(run_op(&r, "Col2Im", 18, ca, 2, ci, 3, 1), KILN_OK);
    SHAPE(&r.out[0], 1, 1, 3, 4);
    CHECK_F32(&r.out[0], ci_y, 1e-6f);
    op_free(&r);
}

/* The suppress-by-IoU layout: boxes 1 and 2 overlap box 0 (IoU 0.82), box 4 overlaps box 3. */
static void test_non_max_suppression(void **st) {
    (void)st;
    static const float boxes[] = {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                  0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101};
    static const float scores[] = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};
    static const int64_t max_out[] = {3};
    static const float iou[] = {0.5f}, score_th[] = {0.4f};
    kn_tensor in[] = {F32(boxes, 3, 1, 6, 4), F32(scores, 3, 1, 1, 6),
                      tens(KILN_DTYPE_INT64, max_out, 1, 1), F32(iou, 1, 1), F32(score_th, 1, 1)};
    op_run r;
    assert_int_equal(run_op(&r, "NonMaxSuppression", 11, NULL, 0, in, 4, 1), KILN_OK);
    SHAPE(&r.out[0], 3, 3);
    static const int64_t want3[] = {0, 0, 3, 0, 0, 0, 0, 0, 5};
    assert_memory_equal(r.out[0].data, want3, sizeof want3);
    op_free(&r);
    assert_int_equal(run_op(&r, "NonMaxSuppression", 11, NULL, 0, in, 5, 1), KILN_OK);
    SHAPE(&r.out[0], 2, 3);
    static const int64_t want2[] = {0, 0, 3, 0, 0, 0};
    assert_memory_equal(r.out[0].data, want2, sizeof want2);
    op_free(&r);
    /* No max_output_boxes_per_class: nothing is selected. */
    assert_int_equal(run_op(&r, "NonMaxSuppression", 11, NULL, 0, in, 2, 1), KILN_OK);
    SHAPE(&r.out[0], 0, 3);
    op_free(&r);
}

/* Range [-1, 2.5] -> scale 3.5/255, zero point round(255/3.5) = 73. */
static void test_dynamic_quantize(void **st) {
    (void)st;
    static const float x[] = {-1.0f, 0.0f, 2.5f, 1.0f};
    kn_tensor in = F32(x, 1, 4);
    op_run r;
    assert_int_equal(run_op(&r, "DynamicQuantizeLinear", 11, NULL, 0, &in, 1, 3), KILN_OK);
    const uint8_t *y = r.out[0].data;
    float scale = *(const float *)r.out[1].data;
    assert_true(fabsf(scale - 3.5f / 255.0f) < 1e-7f);
    assert_int_equal(*(const uint8_t *)r.out[2].data, 73);
    assert_int_equal(y[0], 0);
    assert_int_equal(y[1], 73);
    assert_int_equal(y[2], 255);
    assert_int_equal(y[3], 73 + 73);
    op_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lstm_bidirectional_full),
        cmocka_unit_test(test_gru_linear_before_reset_clip),
        cmocka_unit_test(test_gru_reverse_sequence_lens),
        cmocka_unit_test(test_rnn_layout1_custom_activations),
        cmocka_unit_test(test_lstm_layout1_input_forget_no_y),
        cmocka_unit_test(test_rnn_infer_errors),
        cmocka_unit_test(test_resize_modes),
        cmocka_unit_test(test_resize_leading_axis),
        cmocka_unit_test(test_resize_upsample_legacy_and_errors),
        cmocka_unit_test(test_einsum),
        cmocka_unit_test(test_quantize_per_axis),
        cmocka_unit_test(test_det_and_matmul_integer),
        cmocka_unit_test(test_grid_sample),
        cmocka_unit_test(test_roi_align_and_col2im),
        cmocka_unit_test(test_non_max_suppression),
        cmocka_unit_test(test_dynamic_quantize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
