/* The extra op family (attention, rotary embedding, signal ops, quantized linear algebra,
 * TfIdfVectorizer): inference and CPU kernels against references computed independently with
 * numpy (direct softmax attention in float64, numpy.fft) or by hand. */
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

#define MAX_IO 8

typedef struct op_run {
    kn_graph *g;
    kn_tensor out[MAX_IO];
    int n_out;
} op_run;

#define I64(data, rank, ...) tens(KILN_DTYPE_INT64, data, rank, __VA_ARGS__)

/* Infers the node, allocates its outputs and runs its CPU kernel, as the runtime would. */
static kiln_status run_op_in(op_run *r, const char *domain, const char *op, int opset,
                             const kn_attr *attrs, int n_attr, const kn_tensor *in, int n_in,
                             int n_out) {
    memset(r, 0, sizeof *r);
    r->g = kn_graph_create();
    assert_non_null(r->g);
    int vin[MAX_IO], vout[MAX_IO];
    for (int i = 0; i < n_in; i++)
        vin[i] = in[i].dtype ? kn_graph_add_value(r->g, NULL) : -1;
    for (int i = 0; i < n_out; i++)
        vout[i] = kn_graph_add_value(r->g, NULL);
    int node_i = kn_graph_add_node(r->g, "n", op, domain, opset, n_in, vin, n_out, vout);
    assert_true(node_i >= 0);
    for (int i = 0; i < n_attr; i++)
        assert_int_equal(kn_node_add_attr(r->g, node_i, &attrs[i]), KILN_OK);
    const kn_node *node = &r->g->nodes[node_i];
    const kn_op_schema *s = kn_op_find(domain, op);
    assert_non_null(s);
    r->n_out = n_out;
    kn_infer_ctx ic = {node, n_in, in, n_out, r->out};
    kiln_status rc = s->infer(&ic);
    if (rc != KILN_OK)
        return rc;
    for (int i = 0; i < n_out; i++) {
        size_t nb = kn_tensor_nbytes(&r->out[i]);
        r->out[i].data = kn_calloc(nb ? nb : 1, 1);
        assert_non_null(r->out[i].data);
    }
    const kn_kernel *k = kn_backend_find_kernel(kn_backend_host(), domain, op);
    assert_non_null(k);
    kn_kernel_ctx kc = {.node = node, .n_in = n_in, .in = in, .n_out = n_out, .out = r->out};
    return k->run(&kc);
}

static kiln_status run_op(op_run *r, const char *op, int opset, const kn_attr *attrs, int n_attr,
                          const kn_tensor *in, int n_in, int n_out) {
    return run_op_in(r, "", op, opset, attrs, n_attr, in, n_in, n_out);
}

static void op_free(op_run *r) {
    for (int i = 0; i < r->n_out; i++)
        kn_free(r->out[i].data);
    kn_graph_destroy(r->g);
}

static void check_f32(const kn_tensor *t, const float *want, int64_t n, float tol) {
    assert_int_equal(t->dtype, KILN_DTYPE_FLOAT32);
    assert_int_equal(kn_tensor_numel(t), n);
    const float *got = t->data;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > tol)
            fail_msg("element %lld: got %.7g, want %.7g", (long long)i, got[i], want[i]);
}

/* Attention inputs: B=1, Hq=2, Hkv=1 (grouped), Sq=3, T=4, D=2, Dv=3. */
static const float at_q[] = {0.25f,  0.79f, 0.55f, -0.55f, -0.4f,  0.75f,
                             -0.99f, 0.64f, 0.59f, -0.06f, -0.39f, -0.44f};
static const float at_k[] = {-0.49f, -0.11f, 0.01f, 0.11f, 0.99f, 0.59f, 0.24f, 0.98f};
static const float at_v[] = {-0.57f, -0.68f, 0.23f, -0.91f, -0.93f, 0.03f,
                             -0.07f, 0.83f,  0.26f, 0.03f,  -0.01f, -0.5f};
static const float at_mask[] = {-0.99f, -0.81f, -0.31f, -0.8f,  -0.63f, -1.0f,
                                -0.17f, -0.85f, -0.73f, -0.12f, -0.49f, -0.15f};

static void test_attention_causal_mask_gqa(void **state) {
    (void)state;
    static const float want_y[] = {
        -0.57f,       -0.68f,       0.23f,       -0.71793127f, -0.788773f,   0.14298161f,
        -0.57105718f, -0.33520237f, 0.14947949f, -0.57f,       -0.68f,       0.23f,
        -0.72552249f, -0.79435477f, 0.13851619f, -0.62324779f, -0.47472037f, 0.14216379f};
    static const float want_p[] = {
        1, 0, 0, 0, 0.56490804f, 0.43509196f, 0, 0, 0.24950917f, 0.44797927f, 0.30251156f, 0,
        1, 0, 0, 0, 0.54258094f, 0.45741906f, 0, 0, 0.3147503f,  0.47127694f, 0.21397276f, 0};
    kn_tensor in[4] = {F32(at_q, 4, 1, 2, 3, 2), F32(at_k, 4, 1, 1, 4, 2), F32(at_v, 4, 1, 1, 4, 3),
                       F32(at_mask, 2, 3, 4)};
    kn_attr a[] = {attr_i("is_causal", 1), attr_i("qk_matmul_output_mode", 3)};
    op_run r;
    assert_int_equal(run_op(&r, "Attention", 23, a, 2, in, 4, 4), KILN_OK);
    check_f32(&r.out[0], want_y, 18, 1e-5f);
    check_f32(&r.out[3], want_p, 24, 1e-5f);
    /* present_key/present_value without a past are K and V themselves. */
    check_f32(&r.out[1], at_k, 8, 0.0f);
    check_f32(&r.out[2], at_v, 12, 0.0f);
    op_free(&r);
}

static void test_attention_softcap_scale(void **state) {
    (void)state;
    static const float want[] = {
        -0.31212578f, -0.086683302f, -0.029444331f, -0.38155028f, -0.15741711f, 0.031032731f,
        -0.35180222f, -0.18947379f,  -0.032107652f, -0.39229297f, -0.28218403f, -0.023763041f,
        -0.34705531f, -0.10469515f,  0.011768759f,  -0.43240637f, -0.29891284f, 0.025551315f};
    kn_tensor in[3] = {F32(at_q, 4, 1, 2, 3, 2), F32(at_k, 4, 1, 1, 4, 2),
                       F32(at_v, 4, 1, 1, 4, 3)};
    kn_attr a[] = {attr_f("softcap", 1.5f), attr_f("scale", 0.5f)};
    op_run r;
    assert_int_equal(run_op(&r, "Attention", 23, a, 2, in, 3, 1), KILN_OK);
    check_f32(&r.out[0], want, 18, 1e-5f);
    op_free(&r);
}

static void test_attention_3d_past(void **state) {
    (void)state;
    static const float q[] = {0.5f, -1.0f}, k[] = {1.0f, 0.25f}, v[] = {2.0f, -1.0f};
    static const float pk[] = {0.1f, 0.2f, -0.3f, 0.4f}, pv[] = {1.0f, 0.0f, 0.0f, 1.0f};
    static const float want_y[] = {1.1860905f, -0.18609046f};
    static const float want_k[] = {0.1f, 0.2f, -0.3f, 0.4f, 1.0f, 0.25f};
    kn_tensor in[6] = {F32(q, 3, 1, 1, 2),     F32(k, 3, 1, 1, 2),    F32(v, 3, 1, 1, 2), NONE,
                       F32(pk, 4, 1, 1, 2, 2), F32(pv, 4, 1, 1, 2, 2)};
    kn_attr a[] = {attr_i("q_num_heads", 1), attr_i("kv_num_heads", 1)};
    op_run r;
    assert_int_equal(run_op(&r, "Attention", 23, a, 2, in, 6, 3), KILN_OK);
    assert_int_equal(r.out[0].shape.rank, 3);
    check_f32(&r.out[0], want_y, 2, 1e-5f);
    assert_int_equal(r.out[1].shape.d[2], 3);
    check_f32(&r.out[1], want_k, 6, 0.0f);
    op_free(&r);
}

static void test_attention_rejects_bad_inputs(void **state) {
    (void)state;
    static const float mask[10] = {0};
    op_run r;
    /* Mask rows (5) do not broadcast to Sq = 3. */
    kn_tensor in[4] = {F32(at_q, 4, 1, 2, 3, 2), F32(at_k, 4, 1, 1, 4, 2), F32(at_v, 4, 1, 1, 4, 3),
                       F32(mask, 2, 5, 2)};
    assert_int_equal(run_op(&r, "Attention", 23, NULL, 0, in, 4, 1), KILN_ERR_SHAPE);
    op_free(&r);
    /* 3 query heads cannot share 2 key/value heads. */
    kn_tensor in2[3] = {F32(at_q, 4, 1, 3, 2, 2), F32(at_k, 4, 1, 2, 2, 2),
                        F32(at_v, 4, 1, 2, 2, 3)};
    assert_int_equal(run_op(&r, "Attention", 23, NULL, 0, in2, 3, 1), KILN_ERR_SHAPE);
    op_free(&r);
    /* 3-D inputs need the head counts. */
    kn_tensor in3[3] = {F32(at_q, 3, 1, 3, 4), F32(at_k, 3, 1, 2, 4), F32(at_v, 3, 1, 2, 6)};
    assert_int_equal(run_op(&r, "Attention", 23, NULL, 0, in3, 3, 1), KILN_ERR_MODEL);
    op_free(&r);
}

static const float rot_x[] = {1.0f, 2.0f, 3.0f, 4.0f, -1.0f, 0.5f, 0.25f, 2.0f};
static const float rot_cos[] = {0.5f, 0.8f, 1.0f, 0.0f}, rot_sin[] = {0.6f, 0.1f, 0.0f, 1.0f};

static void test_rotary_embedding(void **state) {
    (void)state;
    static const float want[] = {-1.3f, 1.2f, 2.1f, 3.4f, -1.0f, -2.0f, 0.25f, 0.5f};
    static const float want_il[] = {-0.7f, 1.6f, 2.0f, 3.5f, -1.0f, 0.5f, -2.0f, 0.25f};
    kn_tensor in[3] = {F32(rot_x, 4, 1, 1, 2, 4), F32(rot_cos, 3, 1, 2, 2),
                       F32(rot_sin, 3, 1, 2, 2)};
    op_run r;
    assert_int_equal(run_op(&r, "RotaryEmbedding", 23, NULL, 0, in, 3, 1), KILN_OK);
    check_f32(&r.out[0], want, 8, 1e-6f);
    op_free(&r);
    kn_attr a = attr_i("interleaved", 1);
    assert_int_equal(run_op(&r, "RotaryEmbedding", 23, &a, 1, in, 3, 1), KILN_OK);
    check_f32(&r.out[0], want_il, 8, 1e-6f);
    op_free(&r);
}

static void test_rotary_position_out_of_range(void **state) {
    (void)state;
    static const int64_t pos[] = {0, 2}; /* the cache has 2 positions */
    kn_tensor in[4] = {F32(rot_x, 4, 1, 1, 2, 4), F32(rot_cos, 2, 2, 2), F32(rot_sin, 2, 2, 2),
                       I64(pos, 2, 1, 2)};
    op_run r;
    assert_int_equal(run_op(&r, "RotaryEmbedding", 23, NULL, 0, in, 4, 1), KILN_ERR_SHAPE);
    op_free(&r);
}

static void test_dft_forward_real(void **state) {
    (void)state;
    static const float x5[] = {1.0f, -2.0f, 0.5f, 3.0f, 0.25f};
    static const float want5[] = {2.75f,       0.0f,       -2.3723392f, 3.6093403f,  3.4973392f,
                                  -1.0551245f, 3.4973392f, 1.0551245f,  -2.3723392f, -3.6093403f};
    static const int64_t axis = 1;
    kn_tensor in[3] = {F32(x5, 3, 1, 5, 1), NONE, I64(&axis, 0, 0)};
    op_run r;
    assert_int_equal(run_op(&r, "DFT", 20, NULL, 0, in, 3, 1), KILN_OK);
    check_f32(&r.out[0], want5, 10, 1e-5f);
    op_free(&r);
    /* Power-of-two length (radix-2 path), onesided, axis as an attribute (opset 17). */
    static const float x8[] = {0.5f, 1.5f, -1.0f, 2.0f, 0.0f, -0.5f, 1.0f, 0.25f};
    static const float want8[] = {3.75f, 0.0f,       0.6767767f,  -0.65165043f, 0.5f,
                                  1.25f, 0.3232233f, -4.6516504f, -2.75f,       0.0f};
    kn_tensor in8[1] = {F32(x8, 3, 1, 8, 1)};
    kn_attr a[] = {attr_i("axis", 1), attr_i("onesided", 1)};
    assert_int_equal(run_op(&r, "DFT", 17, a, 2, in8, 1, 1), KILN_OK);
    assert_int_equal(r.out[0].shape.d[1], 5);
    check_f32(&r.out[0], want8, 10, 1e-5f);
    op_free(&r);
}

static void test_dft_inverse_padded(void **state) {
    (void)state;
    static const float c4[] = {1.0f, 2.0f, -1.0f, 0.5f, 0.25f, -1.0f, 2.0f, 0.0f};
    static const int64_t len = 6;
    static const float want[] = {0.375f,      0.25f,       -0.19866455f, 0.35008016f,
                                 0.34599365f, 0.19457804f, 0.041666667f, 0.083333333f,
                                 0.77900635f, 0.55542196f, -0.34300212f, 0.56658651f};
    kn_tensor in[2] = {F32(c4, 3, 1, 4, 2), I64(&len, 0, 0)};
    kn_attr a[] = {attr_i("inverse", 1), attr_i("axis", 1)};
    op_run r;
    assert_int_equal(run_op(&r, "DFT", 17, a, 2, in, 2, 1), KILN_OK);
    assert_int_equal(r.out[0].shape.d[1], 6);
    check_f32(&r.out[0], want, 12, 1e-6f);
    op_free(&r);
}

static void test_dft_rejects_complex_axis(void **state) {
    (void)state;
    static const float x[4] = {0};
    static const int64_t axis = -1; /* the real/imaginary dim */
    kn_tensor in[3] = {F32(x, 3, 1, 2, 2), NONE, I64(&axis, 0, 0)};
    op_run r;
    assert_int_equal(run_op(&r, "DFT", 20, NULL, 0, in, 3, 1), KILN_ERR_SHAPE);
    op_free(&r);
}

static void test_stft_and_windows(void **state) {
    (void)state;
    static const int64_t four = 4, five = 5, step = 2;
    op_run r;
    kn_tensor sz[1] = {I64(&four, 0, 0)};
    assert_int_equal(run_op(&r, "HannWindow", 17, NULL, 0, sz, 1, 1), KILN_OK);
    static const float hann4[] = {0.0f, 0.5f, 1.0f, 0.5f};
    check_f32(&r.out[0], hann4, 4, 1e-7f);
    float win[4];
    memcpy(win, r.out[0].data, sizeof win);
    op_free(&r);
    static const float blackman4[] = {0.0f, 0.34f, 1.0f, 0.34f};
    assert_int_equal(run_op(&r, "BlackmanWindow", 17, NULL, 0, sz, 1, 1), KILN_OK);
    check_f32(&r.out[0], blackman4, 4, 1e-7f);
    op_free(&r);
    kn_tensor sz5[1] = {I64(&five, 0, 0)};
    kn_attr sym = attr_i("periodic", 0);
    static const float hamming5[] = {0.086956522f, 0.54347826f, 1.0f, 0.54347826f, 0.086956522f};
    assert_int_equal(run_op(&r, "HammingWindow", 17, &sym, 1, sz5, 1, 1), KILN_OK);
    check_f32(&r.out[0], hamming5, 5, 1e-7f);
    op_free(&r);

    static const float sig[] = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, -0.5f, 1.5f, 0.0f};
    static const float want[] = {0.0f,   0.0f,   1.0f, 1.0f,  -2.0f, 0.0f,  1.25f, 0.0f,  -0.5f,
                                 -1.25f, -0.25f, 0.0f, 1.25f, 0.0f,  -1.5f, 0.25f, 1.75f, 0.0f};
    kn_tensor in[3] = {F32(sig, 3, 1, 8, 1), I64(&step, 0, 0), F32(win, 1, 4)};
    assert_int_equal(run_op(&r, "STFT", 17, NULL, 0, in, 3, 1), KILN_OK);
    assert_int_equal(r.out[0].shape.d[1], 3);
    assert_int_equal(r.out[0].shape.d[2], 3);
    check_f32(&r.out[0], want, 18, 1e-6f);
    op_free(&r);
}

static void test_qlinear_matmul_saturates(void **state) {
    (void)state;
    /* (100 - 0) * (100 - 0) * 4 * (1 * 1 / 1) + 0 = 40000 saturates to 127; -40000 to -128. */
    static const int8_t a[] = {100, 100, 100, 100, 1, 2, 3, 4};
    static const int8_t b[] = {100, -100, 100, -100, 100, -100, 100, -100};
    static const float one = 1.0f, half = 0.5f;
    static const int8_t zero = 0, yz = 1;
    kn_tensor in[8] = {tens(KILN_DTYPE_INT8, a, 2, 2, 4),
                       F32(&one, 0, 0),
                       tens(KILN_DTYPE_INT8, &zero, 0, 0),
                       tens(KILN_DTYPE_INT8, b, 2, 4, 2),
                       F32(&half, 0, 0),
                       tens(KILN_DTYPE_INT8, &zero, 0, 0),
                       F32(&one, 0, 0),
                       tens(KILN_DTYPE_INT8, &yz, 0, 0)};
    op_run r;
    assert_int_equal(run_op(&r, "QLinearMatMul", 21, NULL, 0, in, 8, 1), KILN_OK);
    /* Row 2: (1+2+3+4)*100*0.5 = 500 -> 127; -500 + 1 -> -128. */
    const int8_t *y = r.out[0].data;
    assert_int_equal(y[0], 127);
    assert_int_equal(y[1], -128);
    assert_int_equal(y[2], 127);
    assert_int_equal(y[3], -128);
    op_free(&r);
}

static void test_conv_integer_padded(void **state) {
    (void)state;
    static const uint8_t x[] = {2, 3, 4, 5, 6, 7, 8, 9, 10};
    static const uint8_t w[] = {1, 1, 1, 1};
    static const uint8_t xz = 1;
    static const int32_t want[] = {1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9};
    static const int64_t pads[] = {1, 1, 1, 1};
    kn_tensor in[3] = {tens(KILN_DTYPE_UINT8, x, 4, 1, 1, 3, 3),
                       tens(KILN_DTYPE_UINT8, w, 4, 1, 1, 2, 2), tens(KILN_DTYPE_UINT8, &xz, 0, 0)};
    kn_attr a = attr_ints("pads", 4, pads);
    op_run r;
    assert_int_equal(run_op(&r, "ConvInteger", 10, &a, 1, in, 3, 1), KILN_OK);
    assert_int_equal(r.out[0].dtype, KILN_DTYPE_INT32);
    assert_memory_equal(r.out[0].data, want, sizeof want);
    op_free(&r);
}

static void test_tfidf_bigrams_with_skips(void **state) {
    (void)state;
    /* Pool: unigram 7 (output 0), bigrams (7, 8) (output 1) and (8, 7) (output 2). With one
     * skip, [7, 9, 8, 7] holds (7, 8) at distance 2 and (8, 7) at distance 1. */
    static const int32_t x[] = {7, 9, 8, 7};
    static const int64_t counts[] = {0, 1}, idx[] = {0, 1, 2}, pool[] = {7, 7, 8, 8, 7};
    kn_attr a[] = {
        attr_i("min_gram_length", 1),
        attr_i("max_gram_length", 2),
        attr_i("max_skip_count", 1),
        attr_s("mode", "TF"),
        attr_ints("ngram_counts", 2, counts),
        attr_ints("ngram_indexes", 3, idx),
        (kn_attr){.name = "pool_int64s", .type = KN_ATTR_INTS, .n = 5, .ints = (int64_t *)pool}};
    kn_tensor in[1] = {tens(KILN_DTYPE_INT32, x, 1, 4)};
    op_run r;
    assert_int_equal(run_op(&r, "TfIdfVectorizer", 9, a, 7, in, 1, 1), KILN_OK);
    static const float want[] = {2.0f, 1.0f, 1.0f};
    check_f32(&r.out[0], want, 3, 0.0f);
    op_free(&r);
}

/* One tree over one feature: x <= 1 -> leaf 0 (5); else x in {3, 4} -> leaf 1 (7); else
 * leaf 2 (-1). NaN takes the true branch of node 0 only when missing values track true. */
static void run_tree(op_run *r, const float *x, int64_t rows, const int64_t *missing) {
    static const int64_t feat[] = {0, 0}, tnode[] = {0, 1}, fnode[] = {1, 2}, tleaf[] = {1, 1};
    static const int64_t fleaf[] = {0, 1}, targets[] = {0, 0, 0}, roots[] = {0};
    static const uint8_t modes[] = {0, 6};
    static const float splits[] = {1.0f, 0.0f}, weights[] = {5.0f, 7.0f, -1.0f};
    static float members[3] = {3.0f, 4.0f, 0.0f};
    members[2] = NAN;
    kn_tensor t_modes = tens(KILN_DTYPE_UINT8, modes, 1, 2), t_splits = F32(splits, 1, 2);
    kn_tensor t_w = F32(weights, 1, 3), t_m = F32(members, 1, 3);
    kn_attr a[] = {attr_ints("nodes_featureids", 2, feat),
                   attr_ints("nodes_truenodeids", 2, tnode),
                   attr_ints("nodes_falsenodeids", 2, fnode),
                   attr_ints("nodes_trueleafs", 2, tleaf),
                   attr_ints("nodes_falseleafs", 2, fleaf),
                   attr_ints("leaf_targetids", 3, targets),
                   attr_ints("tree_roots", 1, roots),
                   attr_i("n_targets", 1),
                   (kn_attr){.name = "nodes_modes", .type = KN_ATTR_TENSOR, .t = &t_modes},
                   (kn_attr){.name = "nodes_splits", .type = KN_ATTR_TENSOR, .t = &t_splits},
                   (kn_attr){.name = "leaf_weights", .type = KN_ATTR_TENSOR, .t = &t_w},
                   (kn_attr){.name = "membership_values", .type = KN_ATTR_TENSOR, .t = &t_m},
                   attr_ints("nodes_missing_value_tracks_true", 2, missing)};
    kn_tensor in[1] = {F32(x, 2, rows, 1)};
    assert_int_equal(run_op_in(r, "ai.onnx.ml", "TreeEnsemble", 5, a, missing ? 13 : 12, in, 1, 1),
                     KILN_OK);
}

static void test_tree_ensemble(void **state) {
    (void)state;
    float x[] = {0.5f, 3.0f, 2.0f, NAN, 4.0f};
    static const int64_t missing[] = {1, 0};
    static const float want[] = {5.0f, 7.0f, -1.0f, -1.0f, 7.0f};
    static const float want_missing[] = {5.0f, 7.0f, -1.0f, 5.0f, 7.0f};
    op_run r;
    run_tree(&r, x, 5, NULL);
    check_f32(&r.out[0], want, 5, 0.0f);
    op_free(&r);
    run_tree(&r, x, 5, missing);
    check_f32(&r.out[0], want_missing, 5, 0.0f);
    op_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_causal_mask_gqa),
        cmocka_unit_test(test_attention_softcap_scale),
        cmocka_unit_test(test_attention_3d_past),
        cmocka_unit_test(test_attention_rejects_bad_inputs),
        cmocka_unit_test(test_rotary_embedding),
        cmocka_unit_test(test_rotary_position_out_of_range),
        cmocka_unit_test(test_dft_forward_real),
        cmocka_unit_test(test_dft_inverse_padded),
        cmocka_unit_test(test_dft_rejects_complex_axis),
        cmocka_unit_test(test_stft_and_windows),
        cmocka_unit_test(test_qlinear_matmul_saturates),
        cmocka_unit_test(test_conv_integer_padded),
        cmocka_unit_test(test_tfidf_bigrams_with_skips),
        cmocka_unit_test(test_tree_ensemble),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
