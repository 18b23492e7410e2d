/* Reduce, softmax, arg/topk, normalization and pooling ops: shape inference and CPU kernels
 * against references computed by hand or by straightforward loops written here from the
 * ONNX operator definitions (checked against numpy while writing them). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/tensor.h"
#include "core/threadpool.h"
#include "ops/op.h"

#include <math.h>
#include <string.h>

#define MAX_IO 6

typedef struct case_run {
    kn_graph *g;
    kn_tensor out[MAX_IO];
    int n_out;
} case_run;

static kn_threadpool *g_pool;

static kn_tensor mk(int32_t dtype, const void *data, int rank, const int64_t *dims) {
    kn_tensor t = {.dtype = dtype, .data = (void *)data};
    t.shape.rank = rank;
    for (int i = 0; i < rank; i++)
        t.shape.d[i] = dims[i];
    return t;
}
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define RANK(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define F32(data, ...) mk(KILN_DTYPE_FLOAT32, data, RANK(__VA_ARGS__), DIMS(__VA_ARGS__))
#define I64(data, ...) mk(KILN_DTYPE_INT64, data, RANK(__VA_ARGS__), DIMS(__VA_ARGS__))
#define NONE ((kn_tensor){0})

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
static kn_attr ais(const char *name, int64_t n, const int64_t *v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_INTS, .n = n, .ints = (int64_t *)v};
}

/* Infers, allocates outputs and runs the CPU kernel, as the runtime does. */
static kiln_status run_case(case_run *r, const char *op, int opset, const kn_attr *attrs,
                            int n_attr, const kn_tensor *in, int n_in, int n_out) {
    memset(r, 0, sizeof *r);
    r->g = kn_graph_create();
    assert_non_null(r->g);
    int vin[MAX_IO], vout[MAX_IO];
    for (int i = 0; i < n_in; i++)
        vin[i] = in[i].dtype ? kn_graph_add_value(r->g, NULL) : -1;
    for (int i = 0; i < n_out; i++)
        vout[i] = kn_graph_add_value(r->g, NULL);
    int node_i = kn_graph_add_node(r->g, "n", op, "", opset, n_in, vin, n_out, vout);
    assert_true(node_i >= 0);
    for (int i = 0; i < n_attr; i++)
        assert_int_equal(kn_node_add_attr(r->g, node_i, &attrs[i]), KILN_OK);
    const kn_node *node = &r->g->nodes[node_i];
    const kn_op_schema *s = kn_op_find("", op);
    assert_non_null(s);
    r->n_out = n_out;
    kn_infer_ctx ic = {.node = node, .n_in = n_in, .in = in, .n_out = n_out, .out = r->out};
    kiln_status rc = s->infer(&ic);
    if (rc != KILN_OK)
        return rc;
    for (int i = 0; i < n_out; i++) {
        r->out[i].data = kn_calloc(1, kn_tensor_nbytes(&r->out[i]) + 1);
        assert_non_null(r->out[i].data);
    }
    const kn_kernel *kern = kn_backend_find_kernel(kn_backend_host(), "", op);
    assert_non_null(kern);
    kn_kernel_ctx kc = {
        .node = node, .n_in = n_in, .in = in, .n_out = n_out, .out = r->out, .pool = g_pool};
    return kern->run(&kc);
}

static void case_free(case_run *r) {
    for (int i = 0; i < r->n_out; i++)
        kn_free(r->out[i].data);
    kn_graph_destroy(r->g);
}

static void expect_shape(const kn_tensor *t, int rank, const int64_t *d) {
    assert_int_equal(t->shape.rank, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(t->shape.d[i], d[i]);
}

static void expect_f32(const kn_tensor *t, const float *want, int64_t n, float tol) {
    assert_int_equal(kn_tensor_numel(t), n);
    const float *got = t->data;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(want[i])) {
            assert_true(isnan(got[i]));
            continue;
        }
        float err = fabsf(got[i] - want[i]);
        if (err > tol * (1.0f + fabsf(want[i])))
            fail_msg("element %lld: got %.7g, want %.7g", (long long)i, got[i], want[i]);
    }
}

static void expect_i64(const kn_tensor *t, const int64_t *want, int64_t n) {
    assert_int_equal(kn_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(((const int64_t *)t->data)[i], want[i]);
}

static void fill_seq(float *x, int64_t n, float scale, float offset) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * 37) % 23) * scale + offset;
}

/* ---- reductions ------------------------------------------------------------------------ */

static void test_reduce_sum_axes_input(void **state) {
    (void)state;
    float x[24];
    fill_seq(x, 24, 0.5f, -3);
    int64_t axes[] = {-2};
    kn_tensor in[] = {F32(x, 2, 3, 4), I64(axes, 1)};
    kn_attr at[] = {ai("keepdims", 0)};
    case_run r;
    assert_int_equal(run_case(&r, "ReduceSum", 13, at, 1, in, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, DIMS(2, 4));
    float want[8] = {0};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++)
                want[a * 4 + c] += x[(a * 3 + b) * 4 + c];
    expect_f32(&r.out[0], want, 8, 1e-6f);
    case_free(&r);
}

static void test_reduce_mean_attr_axes(void **state) {
    (void)state;
    float x[60];
    fill_seq(x, 60, 0.25f, 1);
    int64_t axes[] = {0, 2};
    kn_tensor in[] = {F32(x, 3, 4, 5)};
    kn_attr at[] = {ais("axes", 2, axes)};
    case_run r;
    assert_int_equal(run_case(&r, "ReduceMean", 11, at, 1, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 3, DIMS(1, 4, 1));
    float want[4] = {0};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 5; c++)
                want[b] += x[(a * 4 + b) * 5 + c] / 15.0f;
    expect_f32(&r.out[0], want, 4, 1e-6f);
    case_free(&r);
}

static void test_reduce_variants_last_axis(void **state) {
    (void)state;
    float x[] = {1, -2, 3, 0.5f, 4, -1};
    kn_tensor in[] = {F32(x, 2, 3)};
    int64_t axes[] = {1};
    kn_attr at[] = {ais("axes", 1, axes), ai("keepdims", 0)};
    struct {
        const char *op;
        float want[2];
    } cases[] = {
        {"ReduceL1", {6, 5.5f}},
        {"ReduceL2", {sqrtf(14), sqrtf(17.25f)}},
        {"ReduceSumSquare", {14, 17.25f}},
        {"ReduceProd", {-6, -2}},
        {"ReduceMax", {3, 4}},
        {"ReduceMin", {-2, -1}},
        {"ReduceLogSum", {logf(2), logf(3.5f)}},
        {"ReduceLogSumExp",
         {logf(expf(1) + expf(-2) + expf(3)), logf(expf(0.5f) + expf(4) + expf(-1))}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        case_run r;
        assert_int_equal(run_case(&r, cases[i].op, 13, at, 2, in, 1, 1), KILN_OK);
        expect_f32(&r.out[0], cases[i].want, 2, 1e-6f);
        case_free(&r);
    }
}

static void test_reduce_int64_and_noop(void **state) {
    (void)state;
    int64_t x[] = {5, -7, 9, 2, 3000000000LL, -1};
    kn_tensor in[] = {I64(x, 3, 2), NONE};
    case_run r;
    assert_int_equal(run_case(&r, "ReduceMax", 18, NULL, 0, in, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, DIMS(1, 1));
    expect_i64(&r.out[0], (const int64_t[]){3000000000LL}, 1);
    case_free(&r);
    int64_t axes[] = {0};
    kn_tensor in2[] = {I64(x, 3, 2), I64(axes, 1)};
    assert_int_equal(run_case(&r, "ReduceSum", 13, NULL, 0, in2, 2, 1), KILN_OK);
    expect_i64(&r.out[0], (const int64_t[]){5 + 9 + 3000000000LL, -7 + 2 - 1}, 2);
    case_free(&r);
    /* Empty axes with noop_with_empty_axes: identity. */
    kn_attr at[] = {ai("noop_with_empty_axes", 1)};
    int64_t none[1];
    kn_tensor in3[] = {I64(x, 3, 2), I64(none, 0)};
    assert_int_equal(run_case(&r, "ReduceSum", 13, at, 1, in3, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, DIMS(3, 2));
    expect_i64(&r.out[0], x, 6);
    case_free(&r);
}

static void test_reduce_errors(void **state) {
    (void)state;
    float x[6] = {0};
    int64_t dup[] = {1, -1};
    kn_tensor in[] = {F32(x, 2, 3), I64(dup, 2)};
    case_run r;
    assert_int_equal(run_case(&r, "ReduceSum", 13, NULL, 0, in, 2, 1), KILN_ERR_MODEL);
    case_free(&r);
    int64_t bad[] = {2};
    kn_tensor in2[] = {F32(x, 2, 3), I64(bad, 1)};
    assert_int_equal(run_case(&r, "ReduceSum", 13, NULL, 0, in2, 2, 1), KILN_ERR_SHAPE);
    case_free(&r);
    /* Axes input whose values are not known yet. */
    kn_tensor in3[] = {F32(x, 2, 3), I64(NULL, 1)};
    assert_int_equal(run_case(&r, "ReduceMean", 18, NULL, 0, in3, 2, 1), KN_NEED_DATA);
    case_free(&r);
}

/* ---- softmax family -------------------------------------------------------------------- */

static void softmax_ref(const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                        bool log_out) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            double m = -INFINITY, s = 0;
            for (int64_t i = 0; i < n; i++)
                m = fmax(m, x[(o * n + i) * inner + c]);
            for (int64_t i = 0; i < n; i++)
                s += exp(x[(o * n + i) * inner + c] - m);
            for (int64_t i = 0; i < n; i++) {
                double v = x[(o * n + i) * inner + c] - m;
                y[(o * n + i) * inner + c] = (float)(log_out ? v - log(s) : exp(v) / s);
            }
        }
}

static void test_softmax_axis_semantics(void **state) {
    (void)state;
    float x[24], want[24];
    fill_seq(x, 24, 0.3f, -2);
    kn_tensor in[] = {F32(x, 2, 3, 4)};
    kn_attr at[] = {ai("axis", 1)};
    case_run r;
    /* Opset 11: flattened to [2, 12] at axis 1. */
    assert_int_equal(run_case(&r, "Softmax", 11, at, 1, in, 1, 1), KILN_OK);
    softmax_ref(x, want, 2, 12, 1, false);
    expect_f32(&r.out[0], want, 24, 1e-6f);
    case_free(&r);
    /* Opset 13: along axis 1 alone. */
    assert_int_equal(run_case(&r, "Softmax", 13, at, 1, in, 1, 1), KILN_OK);
    softmax_ref(x, want, 2, 3, 4, false);
    expect_f32(&r.out[0], want, 24, 1e-6f);
    case_free(&r);
    assert_int_equal(run_case(&r, "LogSoftmax", 13, at, 1, in, 1, 1), KILN_OK);
    softmax_ref(x, want, 2, 3, 4, true);
    expect_f32(&r.out[0], want, 24, 1e-5f);
    case_free(&r);
    /* Default axis: 1 before 13, -1 from 13. */
    assert_int_equal(run_case(&r, "LogSoftmax", 13, NULL, 0, in, 1, 1), KILN_OK);
    softmax_ref(x, want, 6, 4, 1, true);
    expect_f32(&r.out[0], want, 24, 1e-5f);
    case_free(&r);
}

static void test_softmax_long_rows(void **state) {
    (void)state;
    enum { N = 3, D = 1000 };
    static float x[N * D], want[N * D];
    for (int i = 0; i < N * D; i++)
        x[i] = (float)sin(i * 0.37) * 30.0f;
    x[5] = -INFINITY; /* a masked position */
    kn_tensor in[] = {F32(x, N, D)};
    case_run r;
    assert_int_equal(run_case(&r, "Softmax", 13, NULL, 0, in, 1, 1), KILN_OK);
    softmax_ref(x, want, N, D, 1, false);
    want[5] = 0;
    for (int i = 0; i < N * D; i++)
        if (fabsf(((float *)r.out[0].data)[i] - want[i]) > 1e-6f * (1 + want[i]) + 1e-30f)
            fail_msg("element %d: got %g want %g", i, ((float *)r.out[0].data)[i], want[i]);
    case_free(&r);
}

/* A row (or column) of -inf only is NaN, as exp(x - max) makes it and onnxruntime and the
 * CUDA backend give; a row with one finite element is that element's one-hot. */
static void test_softmax_all_masked(void **state) {
    (void)state;
    enum { R = 3, D = 40 };
    static float x[R * D];
    for (int i = 0; i < R * D; i++)
        x[i] = (float)cos(i * 0.7);
    for (int j = 0; j < D; j++) {
        x[D + j] = -INFINITY;
        x[2 * D + j] = j == 7 ? 1.5f : -INFINITY;
    }
    const char *ops[] = {"Softmax", "LogSoftmax"};
    for (int o = 0; o < 2; o++) {
        kn_tensor in[] = {F32(x, R, D)};
        case_run r;
        assert_int_equal(run_case(&r, ops[o], 13, NULL, 0, in, 1, 1), KILN_OK);
        const float *y = r.out[0].data;
        for (int j = 0; j < D; j++) {
            if (!isnan(y[D + j]))
                fail_msg("%s: masked row element %d is %g, not NaN", ops[o], j, y[D + j]);
            float want = o == 0 ? (j == 7 ? 1.0f : 0.0f) : (j == 7 ? 0.0f : -INFINITY);
            /* (the exp's clamp leaves 1e-38 where -inf meets it: tolerated, as in long rows) */
            if (!(y[2 * D + j] == want || fabsf(y[2 * D + j] - want) <= 1e-30f))
                fail_msg("%s: one-hot row element %d is %g", ops[o], j, y[2 * D + j]);
            if (isnan(y[j]))
                fail_msg("%s: finite row element %d is NaN", ops[o], j);
        }
        case_free(&r);
        /* The same along axis 0 (the column path): column 1 all -inf. */
        float xc[D * R];
        for (int i = 0; i < D; i++)
            for (int c = 0; c < R; c++)
                xc[i * R + c] = c == 1 ? -INFINITY : (float)sin(i + c);
        kn_tensor inc[] = {F32(xc, D, R)};
        kn_attr at[] = {ai("axis", 0)};
        assert_int_equal(run_case(&r, ops[o], 13, at, 1, inc, 1, 1), KILN_OK);
        y = r.out[0].data;
        for (int i = 0; i < D; i++)
            if (!isnan(y[i * R + 1]) || isnan(y[i * R]))
                fail_msg("%s axis 0: element %d: %g %g", ops[o], i, y[i * R], y[i * R + 1]);
        case_free(&r);
    }
}

static void test_hardmax_first_max(void **state) {
    (void)state;
    float x[] = {1, 3, 3, 0, 2, 2, 2, 1};
    kn_tensor in[] = {F32(x, 2, 4)};
    case_run r;
    assert_int_equal(run_case(&r, "Hardmax", 13, NULL, 0, in, 1, 1), KILN_OK);
    float want[] = {0, 1, 0, 0, 1, 0, 0, 0};
    expect_f32(&r.out[0], want, 8, 0);
    case_free(&r);
}

static void test_argmax_select_last(void **state) {
    (void)state;
    float x[] = {2, 5, 5, 1, 0, 0};
    kn_tensor in[] = {F32(x, 2, 3)};
    kn_attr at[] = {ai("axis", 1), ai("keepdims", 1), ai("select_last_index", 1)};
    case_run r;
    assert_int_equal(run_case(&r, "ArgMax", 13, at, 3, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 2, DIMS(2, 1));
    expect_i64(&r.out[0], (const int64_t[]){2, 0}, 2);
    case_free(&r);
    kn_attr a0[] = {ai("axis", 0), ai("keepdims", 0)};
    assert_int_equal(run_case(&r, "ArgMin", 13, a0, 2, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 1, DIMS(3));
    expect_i64(&r.out[0], (const int64_t[]){1, 1, 1}, 3);
    case_free(&r);
    assert_int_equal(run_case(&r, "ArgMin", 13, at, 3, in, 1, 1), KILN_OK);
    expect_i64(&r.out[0], (const int64_t[]){0, 2}, 2);
    case_free(&r);
}

static void test_topk_ties(void **state) {
    (void)state;
    float x[] = {1, 3, 3, 2, 3, 0, 4, 4, 1, 1};
    int64_t k = 3;
    kn_tensor in[] = {F32(x, 2, 5), I64(&k, 1)};
    case_run r;
    assert_int_equal(run_case(&r, "TopK", 11, NULL, 0, in, 2, 2), KILN_OK);
    expect_shape(&r.out[0], 2, DIMS(2, 3));
    expect_f32(&r.out[0], (const float[]){3, 3, 3, 4, 4, 1}, 6, 0);
    expect_i64(&r.out[1], (const int64_t[]){1, 2, 4, 1, 2, 3}, 6);
    case_free(&r);
    kn_attr at[] = {ai("largest", 0), ai("axis", 0)};
    int64_t k1 = 1;
    kn_tensor in2[] = {F32(x, 2, 5), I64(&k1, 1)};
    assert_int_equal(run_case(&r, "TopK", 11, at, 2, in2, 2, 2), KILN_OK);
    expect_shape(&r.out[0], 2, DIMS(1, 5));
    expect_f32(&r.out[0], (const float[]){0, 3, 3, 1, 1}, 5, 0);
    expect_i64(&r.out[1], (const int64_t[]){1, 0, 0, 1, 1}, 5);
    case_free(&r);
    /* Opset 1: k is an attribute. */
    kn_attr at1[] = {ai("k", 2)};
    assert_int_equal(run_case(&r, "TopK", 1, at1, 1, in, 1, 2), KILN_OK);
    expect_i64(&r.out[1], (const int64_t[]){1, 2, 1, 2}, 4);
    case_free(&r);
    int64_t kbig = 6;
    kn_tensor in3[] = {F32(x, 2, 5), I64(&kbig, 1)};
    assert_int_equal(run_case(&r, "TopK", 11, NULL, 0, in3, 2, 2), KILN_ERR_SHAPE);
    case_free(&r);
}

static void test_topk_long_rows_ties(void **state) {
    (void)state;
    float x[100];
    for (int i = 0; i < 100; i++)
        x[i] = (float)((i * 7) % 10); /* every value 0..9 ten times */
    int64_t k = 3;
    kn_tensor in[] = {F32(x, 1, 100), I64(&k, 1)};
    case_run r;
    assert_int_equal(run_case(&r, "TopK", 11, NULL, 0, in, 2, 2), KILN_OK);
    expect_f32(&r.out[0], (const float[]){9, 9, 9}, 3, 0);
    expect_i64(&r.out[1], (const int64_t[]){7, 17, 27}, 3);
    case_free(&r);
    int64_t k4 = 4;
    kn_tensor in4[] = {F32(x, 1, 100), I64(&k4, 1)};
    kn_attr at[] = {ai("largest", 0)};
    assert_int_equal(run_case(&r, "TopK", 11, at, 1, in4, 2, 2), KILN_OK);
    expect_f32(&r.out[0], (const float[]){0, 0, 0, 0}, 4, 0);
    expect_i64(&r.out[1], (const int64_t[]){0, 10, 20, 30}, 4);
    case_free(&r);
}

static void test_float16_and_double_paths(void **state) {
    (void)state;
    float xf[] = {0.5f, -1, 2, 0.25f, 3, -2};
    uint16_t xh[6];
    double xd[6];
    for (int i = 0; i < 6; i++) {
        xh[i] = kn_float_to_half(xf[i]);
        xd[i] = xf[i];
    }
    kn_tensor in[] = {mk(KILN_DTYPE_FLOAT16, xh, 2, DIMS(2, 3))};
    case_run r;
    assert_int_equal(run_case(&r, "Softmax", 13, NULL, 0, in, 1, 1), KILN_OK);
    assert_int_equal(r.out[0].dtype, KILN_DTYPE_FLOAT16);
    float want[6];
    softmax_ref(xf, want, 2, 3, 1, false);
    for (int i = 0; i < 6; i++)
        assert_true(fabsf(kn_half_to_float(((uint16_t *)r.out[0].data)[i]) - want[i]) < 1e-3f);
    case_free(&r);
    int64_t axes[] = {1};
    kn_tensor ind[] = {mk(KILN_DTYPE_FLOAT64, xd, 2, DIMS(2, 3)), I64(axes, 1)};
    assert_int_equal(run_case(&r, "ReduceSum", 13, NULL, 0, ind, 2, 1), KILN_OK);
    assert_int_equal(r.out[0].dtype, KILN_DTYPE_FLOAT64);
    assert_true(fabs(((double *)r.out[0].data)[0] - 1.5) < 1e-12);
    assert_true(fabs(((double *)r.out[0].data)[1] - 1.25) < 1e-12);
    case_free(&r);
}

/* ---- normalization --------------------------------------------------------------------- */

static void test_layernorm_outputs(void **state) {
    (void)state;
    float x[24], sc[12], b[12];
    fill_seq(x, 24, 0.4f, -1);
    fill_seq(sc, 12, 0.1f, 0.5f);
    fill_seq(b, 12, -0.2f, 0.3f);
    kn_tensor in[] = {F32(x, 2, 3, 4), F32(sc, 3, 4), F32(b, 3, 4)};
    kn_attr at[] = {ai("axis", 1), af("epsilon", 1e-3f)};
    case_run r;
    assert_int_equal(run_case(&r, "LayerNormalization", 17, at, 2, in, 3, 3), KILN_OK);
    expect_shape(&r.out[1], 3, DIMS(2, 1, 1));
    float want[24], wm[2], wi[2];
    for (int n = 0; n < 2; n++) {
        double m = 0, v = 0;
        for (int j = 0; j < 12; j++)
            m += x[n * 12 + j] / 12.0;
        for (int j = 0; j < 12; j++)
            v += (x[n * 12 + j] - m) * (x[n * 12 + j] - m) / 12.0;
        double inv = 1 / sqrt(v + 1e-3);
        for (int j = 0; j < 12; j++)
            want[n * 12 + j] = (float)((x[n * 12 + j] - m) * inv * sc[j] + b[j]);
        wm[n] = (float)m;
        wi[n] = (float)inv;
    }
    expect_f32(&r.out[0], want, 24, 1e-5f);
    expect_f32(&r.out[1], wm, 2, 1e-6f);
    expect_f32(&r.out[2], wi, 2, 1e-6f);
    case_free(&r);
}

static void test_batchnorm_inference(void **state) {
    (void)state;
    float x[] = {1, 2, 3, 4, 5, 6, 7, 8}; /* [1, 2, 2, 2] */
    float sc[] = {2, 0.5f}, b[] = {1, -1}, m[] = {2, 6}, v[] = {4, 1};
    kn_tensor in[] = {F32(x, 1, 2, 2, 2), F32(sc, 2), F32(b, 2), F32(m, 2), F32(v, 2)};
    kn_attr at[] = {af("epsilon", 0)};
    case_run r;
    assert_int_equal(run_case(&r, "BatchNormalization", 15, at, 1, in, 5, 1), KILN_OK);
    /* channel 0: (x-2)/2*2+1 = x-1; channel 1: (x-6)*0.5-1 */
    float want[] = {0, 1, 2, 3, -1.5f, -1, -0.5f, 0};
    expect_f32(&r.out[0], want, 8, 1e-6f);
    case_free(&r);
}

static void test_batchnorm_training(void **state) {
    (void)state;
    float x[] = {1, 3, 10, 20, 5, 7, 30, 40}; /* [2, 2, 2] */
    float sc[] = {1, 1}, b[] = {0, 0}, m[] = {0, 10}, v[] = {1, 1};
    kn_tensor in[] = {F32(x, 2, 2, 2), F32(sc, 2), F32(b, 2), F32(m, 2), F32(v, 2)};
    kn_attr at[] = {af("epsilon", 0), ai("training_mode", 1), af("momentum", 0.5f)};
    case_run r;
    assert_int_equal(run_case(&r, "BatchNormalization", 15, at, 3, in, 5, 3), KILN_OK);
    /* channel 0 values {1,3,5,7}: mean 4, var 5; channel 1 {10,20,30,40}: mean 25, var 125 */
    expect_f32(&r.out[1], (const float[]){2, 17.5f}, 2, 1e-6f);
    expect_f32(&r.out[2], (const float[]){3, 63}, 2, 1e-6f);
    float s5 = sqrtf(5), s125 = sqrtf(125);
    float want[] = {-3 / s5, -1 / s5, -15 / s125, -5 / s125, 1 / s5, 3 / s5, 5 / s125, 15 / s125};
    expect_f32(&r.out[0], want, 8, 1e-5f);
    case_free(&r);
}

static void group_norm_ref(const float *x, float *y, int n, int c, int s, int groups,
                           const float *sc, const float *b, bool per_channel, float eps) {
    int cpg = c / groups;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < groups; g++) {
            const float *p = x + (i * c + g * cpg) * s;
            double m = 0, v = 0;
            for (int j = 0; j < cpg * s; j++)
                m += p[j];
            m /= cpg * s;
            for (int j = 0; j < cpg * s; j++)
                v += (p[j] - m) * (p[j] - m);
            v /= cpg * s;
            for (int j = 0; j < cpg * s; j++) {
                int w = per_channel ? g * cpg + j / s : g;
                y[(i * c + g * cpg) * s + j] = (float)((p[j] - m) / sqrt(v + eps) * sc[w] + b[w]);
            }
        }
}

static void test_group_and_instance_norm(void **state) {
    (void)state;
    float x[2 * 4 * 3], want[24];
    fill_seq(x, 24, 0.7f, -4);
    float sc4[] = {1, 2, 0.5f, -1}, b4[] = {0, 1, -1, 0.5f}, sc2[] = {2, 3}, b2[] = {-1, 1};
    kn_attr at[] = {ai("num_groups", 2), af("epsilon", 1e-5f)};
    case_run r;
    kn_tensor in18[] = {F32(x, 2, 4, 3), F32(sc2, 2), F32(b2, 2)};
    assert_int_equal(run_case(&r, "GroupNormalization", 18, at, 2, in18, 3, 1), KILN_OK);
    group_norm_ref(x, want, 2, 4, 3, 2, sc2, b2, false, 1e-5f);
    expect_f32(&r.out[0], want, 24, 1e-5f);
    case_free(&r);
    kn_tensor in21[] = {F32(x, 2, 4, 3), F32(sc4, 4), F32(b4, 4)};
    assert_int_equal(run_case(&r, "GroupNormalization", 21, at, 2, in21, 3, 1), KILN_OK);
    group_norm_ref(x, want, 2, 4, 3, 2, sc4, b4, true, 1e-5f);
    expect_f32(&r.out[0], want, 24, 1e-5f);
    case_free(&r);
    /* Opset 18 wants per-group scales. */
    assert_int_equal(run_case(&r, "GroupNormalization", 18, at, 2, in21, 3, 1), KILN_ERR_SHAPE);
    case_free(&r);
    assert_int_equal(run_case(&r, "InstanceNormalization", 6, at + 1, 1, in21, 3, 1), KILN_OK);
    group_norm_ref(x, want, 2, 4, 3, 4, sc4, b4, true, 1e-5f);
    expect_f32(&r.out[0], want, 24, 1e-5f);
    case_free(&r);
}

static void test_lp_mvn_lrn(void **state) {
    (void)state;
    float x[] = {3, 4, 0, -6, 8, 1};
    kn_tensor in[] = {F32(x, 2, 3)};
    case_run r;
    kn_attr at[] = {ai("axis", 0), ai("p", 1)};
    assert_int_equal(run_case(&r, "LpNormalization", 1, at, 2, in, 1, 1), KILN_OK);
    expect_f32(&r.out[0], (const float[]){1.f / 3, 4.f / 12, 0, -2.f / 3, 8.f / 12, 1}, 6, 1e-6f);
    case_free(&r);
    int64_t axes[] = {1};
    kn_attr am[] = {ais("axes", 1, axes)};
    assert_int_equal(run_case(&r, "MeanVarianceNormalization", 13, am, 1, in, 1, 1), KILN_OK);
    float want[6];
    for (int i = 0; i < 2; i++) {
        double m = (x[i * 3] + x[i * 3 + 1] + x[i * 3 + 2]) / 3.0, v = 0;
        for (int j = 0; j < 3; j++)
            v += (x[i * 3 + j] - m) * (x[i * 3 + j] - m) / 3.0;
        for (int j = 0; j < 3; j++)
            want[i * 3 + j] = (float)((x[i * 3 + j] - m) / (sqrt(v) + 1e-9));
    }
    expect_f32(&r.out[0], want, 6, 1e-5f);
    case_free(&r);
    /* LRN over 3 channels, size 2: window [c, c + 1]. */
    float xl[] = {1, 2, 3, 4, 5, 6}; /* [1, 3, 2] */
    kn_tensor inl[] = {F32(xl, 1, 3, 2)};
    kn_attr al[] = {ai("size", 2), af("alpha", 0.5f), af("beta", 0.5f), af("bias", 2)};
    assert_int_equal(run_case(&r, "LRN", 13, al, 4, inl, 1, 1), KILN_OK);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 2; i++) {
            float s = 0;
            for (int q = c; q <= c + 1 && q < 3; q++)
                s += xl[q * 2 + i] * xl[q * 2 + i];
            want[c * 2 + i] = xl[c * 2 + i] / sqrtf(2 + 0.25f * s);
        }
    expect_f32(&r.out[0], want, 6, 1e-6f);
    case_free(&r);
}

static void test_rms_norm(void **state) {
    (void)state;
    float x[] = {1, -2, 3, 4, 0, -1}, sc[] = {2, 0.5f, 1};
    kn_tensor in[] = {F32(x, 2, 3), F32(sc, 3)};
    kn_attr at[] = {af("epsilon", 0)};
    case_run r;
    assert_int_equal(run_case(&r, "RMSNormalization", 23, at, 1, in, 2, 1), KILN_OK);
    float r0 = sqrtf(14.0f / 3), r1 = sqrtf(17.0f / 3);
    float want[] = {2 / r0, -1 / r0, 3 / r0, 8 / r1, 0, -1 / r1};
    expect_f32(&r.out[0], want, 6, 1e-6f);
    case_free(&r);
}

static void test_losses(void **state) {
    (void)state;
    float lp[] = {-0.5f, -1, -2, -3, -0.25f, -4}; /* [2, 3] log-probabilities */
    int64_t t[] = {0, 2};
    float w[] = {1, 2, 3};
    kn_tensor in[] = {F32(lp, 2, 3), I64(t, 2), F32(w, 3)};
    case_run r;
    assert_int_equal(run_case(&r, "NegativeLogLikelihoodLoss", 13, NULL, 0, in, 3, 1), KILN_OK);
    expect_shape(&r.out[0], 0, NULL);
    expect_f32(&r.out[0], (const float[]){(0.5f * 1 + 4 * 3) / 4.0f}, 1, 1e-6f);
    case_free(&r);
    kn_attr at[] = {as("reduction", "none"), ai("ignore_index", 2)};
    assert_int_equal(run_case(&r, "NegativeLogLikelihoodLoss", 13, at, 2, in, 3, 1), KILN_OK);
    expect_f32(&r.out[0], (const float[]){0.5f, 0}, 2, 1e-6f);
    case_free(&r);
    /* Softmax cross-entropy of uniform scores is log(C); log_prob is -log(C) everywhere. */
    float sc[3] = {0};
    int64_t lab[] = {1};
    kn_tensor ins[] = {F32(sc, 1, 3), I64(lab, 1)};
    assert_int_equal(run_case(&r, "SoftmaxCrossEntropyLoss", 13, NULL, 0, ins, 2, 2), KILN_OK);
    expect_f32(&r.out[0], (const float[]){logf(3)}, 1, 1e-6f);
    expect_f32(&r.out[1], (const float[]){-logf(3), -logf(3), -logf(3)}, 3, 1e-6f);
    case_free(&r);
    int64_t bad[] = {3};
    kn_tensor inb[] = {F32(sc, 1, 3), I64(bad, 1)};
    assert_int_equal(run_case(&r, "SoftmaxCrossEntropyLoss", 13, NULL, 0, inb, 2, 1),
                     KILN_ERR_SHAPE);
    case_free(&r);
}

/* ---- pooling --------------------------------------------------------------------------- */

static void test_maxpool_ceil_mode(void **state) {
    (void)state;
    float x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (float)(i + 1);
    int64_t k[] = {3, 3}, s[] = {2, 2};
    kn_attr at[] = {ais("kernel_shape", 2, k), ais("strides", 2, s), ai("ceil_mode", 1)};
    kn_tensor in[] = {F32(x, 1, 1, 4, 4)};
    case_run r;
    assert_int_equal(run_case(&r, "MaxPool", 12, at, 3, in, 1, 2), KILN_OK);
    expect_shape(&r.out[0], 4, DIMS(1, 1, 2, 2));
    expect_f32(&r.out[0], (const float[]){11, 12, 15, 16}, 4, 0);
    expect_i64(&r.out[1], (const int64_t[]){10, 11, 14, 15}, 4);
    case_free(&r);
    assert_int_equal(run_case(&r, "MaxPool", 12, at, 2, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 4, DIMS(1, 1, 1, 1));
    expect_f32(&r.out[0], (const float[]){11}, 1, 0);
    case_free(&r);
}

static void test_maxpool_indices_storage_order(void **state) {
    (void)state;
    /* [2 channels, 2x3]; 2x2 windows, stride 1 -> 1x2 per channel. */
    float x[] = {1, 9, 2, 3, 4, 8, 7, 1, 1, 1, 6, 5};
    int64_t k[] = {2, 2};
    kn_attr at[] = {ais("kernel_shape", 2, k), ai("storage_order", 1)};
    kn_tensor in[] = {F32(x, 1, 2, 2, 3)};
    case_run r;
    assert_int_equal(run_case(&r, "MaxPool", 12, at, 2, in, 1, 2), KILN_OK);
    expect_f32(&r.out[0], (const float[]){9, 9, 7, 6}, 4, 0);
    /* column-major: h + w * H, offset by plane * 6 */
    expect_i64(&r.out[1], (const int64_t[]){2, 2, 6 + 0, 6 + 3}, 4);
    case_free(&r);
    assert_int_equal(run_case(&r, "MaxPool", 12, at, 1, in, 1, 2), KILN_OK);
    expect_i64(&r.out[1], (const int64_t[]){1, 1, 6 + 0, 6 + 4}, 4);
    case_free(&r);
}

static void test_avgpool_pads_count_include_pad(void **state) {
    (void)state;
    float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int64_t k[] = {2, 2}, p[] = {1, 1, 1, 1};
    kn_attr at[] = {ais("kernel_shape", 2, k), ais("pads", 4, p), ai("count_include_pad", 1)};
    kn_tensor in[] = {F32(x, 1, 1, 3, 3)};
    case_run r;
    assert_int_equal(run_case(&r, "AveragePool", 19, at, 3, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 4, DIMS(1, 1, 4, 4));
    float inc[] = {0.25f, 0.75f, 1.25f, 0.75f, 1.25f, 3,     4,     2.25f,
                   2.75f, 6,     7,     3.75f, 1.75f, 3.75f, 4.25f, 2.25f};
    expect_f32(&r.out[0], inc, 16, 1e-6f);
    case_free(&r);
    assert_int_equal(run_case(&r, "AveragePool", 19, at, 2, in, 1, 1), KILN_OK);
    float exc[] = {1, 1.5f, 2.5f, 3, 2.5f, 3, 4, 4.5f, 5.5f, 6, 7, 7.5f, 7, 7.5f, 8.5f, 9};
    expect_f32(&r.out[0], exc, 16, 1e-6f);
    case_free(&r);
}

static void test_avgpool_ceil_dilation_same(void **state) {
    (void)state;
    float x[5] = {1, 2, 3, 4, 5};
    int64_t k[] = {2}, s[] = {2}, p[] = {0, 1};
    /* 1-D, ceil_mode with an end pad counted: windows [1,2], [3,4], [5,pad]. */
    kn_attr at[] = {ais("kernel_shape", 1, k), ais("strides", 1, s), ais("pads", 2, p),
                    ai("ceil_mode", 1), ai("count_include_pad", 1)};
    kn_tensor in[] = {F32(x, 1, 1, 5)};
    case_run r;
    assert_int_equal(run_case(&r, "AveragePool", 19, at, 5, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 3, DIMS(1, 1, 3));
    expect_f32(&r.out[0], (const float[]){1.5f, 3.5f, 2.5f}, 3, 1e-6f);
    case_free(&r);
    /* Dilation 2, kernel 2: taps i and i + 2. */
    int64_t d[] = {2}, s1[] = {1};
    kn_attr ad[] = {ais("kernel_shape", 1, k), ais("dilations", 1, d), ais("strides", 1, s1)};
    assert_int_equal(run_case(&r, "AveragePool", 19, ad, 3, in, 1, 1), KILN_OK);
    expect_f32(&r.out[0], (const float[]){2, 3, 4}, 3, 1e-6f);
    case_free(&r);
    /* SAME_UPPER, kernel 2 stride 1 on 5: pad 1 at the end. */
    kn_attr as_[] = {ais("kernel_shape", 1, k), as("auto_pad", "SAME_UPPER")};
    assert_int_equal(run_case(&r, "MaxPool", 12, as_, 2, in, 1, 1), KILN_OK);
    expect_f32(&r.out[0], (const float[]){2, 3, 4, 5, 5}, 5, 0);
    case_free(&r);
    kn_attr al[] = {ais("kernel_shape", 1, k), as("auto_pad", "SAME_LOWER")};
    assert_int_equal(run_case(&r, "MaxPool", 12, al, 2, in, 1, 1), KILN_OK);
    expect_f32(&r.out[0], (const float[]){1, 2, 3, 4, 5}, 5, 0);
    case_free(&r);
}

/* MaxPool over bf16 pixels stored NHWC (kiln_nhwc, nn/pool_nhwc.c): 20 channels (a vector and a
 * masked tail), windows cut by the padding and a dilated one, a NaN that must win its windows;
 * against the windows' maxima taken here over the same NHWC bytes. AveragePool marked NHWC is
 * refused with an error. */
static void test_maxpool_nhwc_bf16(void **state) {
    (void)state;
    enum { N = 2, C = 20, H = 7, W = 9 };
    static uint16_t x[N * H * W * C];
    for (int i = 0; i < N * H * W * C; i++)
        x[i] = kn_float_to_bf16((float)((i * 7919) % 1013) / 17.0f - 29.0f);
    x[((1 * H + 3) * W + 4) * C + 17] = 0x7fc0; /* NaN: image 1, pixel (3, 4), channel 17 */
    const int64_t nhwc[2] = {1, 1};
    struct {
        int64_t k, s, p, d;
    } cases[] = {{3, 2, 1, 1}, {2, 1, 0, 2}, {3, 3, 1, 1}};
    for (int ci = 0; ci < 3; ci++) {
        int64_t k[2] = {cases[ci].k, cases[ci].k}, st[2] = {cases[ci].s, cases[ci].s};
        int64_t pads[4] = {cases[ci].p, cases[ci].p, cases[ci].p, cases[ci].p};
        int64_t dil[2] = {cases[ci].d, cases[ci].d};
        kn_attr at[] = {ais("kernel_shape", 2, k), ais("strides", 2, st), ais("pads", 4, pads),
                        ais("dilations", 2, dil), ais("kiln_nhwc", 2, nhwc)};
        kn_tensor in[] = {mk(KILN_DTYPE_BFLOAT16, x, 4, DIMS(N, C, H, W))};
        case_run r;
        assert_int_equal(run_case(&r, "MaxPool", 12, at, 5, in, 1, 1), KILN_OK);
        int64_t oh = r.out[0].shape.d[2], ow = r.out[0].shape.d[3];
        assert_int_equal(r.out[0].dtype, KILN_DTYPE_BFLOAT16);
        const uint16_t *y = r.out[0].data;
        int nans = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t a = 0; a < oh; a++)
                for (int64_t b = 0; b < ow; b++)
                    for (int64_t c = 0; c < C; c++) {
                        float want = -INFINITY;
                        for (int64_t u = 0; u < cases[ci].k; u++)
                            for (int64_t v = 0; v < cases[ci].k; v++) {
                                int64_t ih = a * cases[ci].s - cases[ci].p + u * cases[ci].d;
                                int64_t iw = b * cases[ci].s - cases[ci].p + v * cases[ci].d;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                float f = kn_bf16_to_float(x[((n * H + ih) * W + iw) * C + c]);
                                want = isnan(f) || isnan(want) ? NAN : fmaxf(want, f);
                            }
                        float got = kn_bf16_to_float(y[((n * oh + a) * ow + b) * C + c]);
                        if (isnan(want)) {
                            assert_true(isnan(got));
                            nans++;
                        } else if (got != want) {
                            fail_msg("case %d (%lld,%lld,%lld,%lld): got %g, want %g", ci,
                                     (long long)n, (long long)a, (long long)b, (long long)c, got,
                                     want);
                        }
                    }
        assert_true(nans > 0);
        case_free(&r);
    }
    int64_t k[2] = {2, 2};
    kn_attr at[] = {ais("kernel_shape", 2, k), ais("kiln_nhwc", 2, nhwc)};
    kn_tensor in[] = {mk(KILN_DTYPE_BFLOAT16, x, 4, DIMS(N, C, H, W))};
    case_run r;
    assert_int_equal(run_case(&r, "AveragePool", 19, at, 2, in, 1, 1), KILN_ERR_UNSUPPORTED);
    case_free(&r);
}

/* Stride-1 max pools that keep the size (k x k, k / 2 padding on every side) over small planes
 * go through a framed copy of the whole plane (pool.c, pool2d_same_max_planes): k 3, 5 and 7,
 * square and oblong planes, against the window's maximum. */
static void test_maxpool_same_small_planes(void **state) {
    (void)state;
    struct {
        int64_t k, h, w;
    } cases[] = {{5, 10, 20}, {3, 7, 9}, {7, 12, 5}, {5, 40, 40}, {3, 1, 1}};
    for (int ci = 0; ci < 5; ci++) {
        int64_t kk = cases[ci].k, H = cases[ci].h, W = cases[ci].w, N = 2, C = 3, p = kk / 2;
        float *x = kn_malloc((size_t)(N * C * H * W) * sizeof *x);
        assert_non_null(x);
        for (int64_t i = 0; i < N * C * H * W; i++)
            x[i] = (float)((i * 7919) % 1013) / 13.0f - 40.0f;
        int64_t k[2] = {kk, kk}, pads[4] = {p, p, p, p};
        kn_attr at[] = {ais("kernel_shape", 2, k), ais("pads", 4, pads)};
        kn_tensor in[] = {F32(x, N, C, H, W)};
        case_run r;
        assert_int_equal(run_case(&r, "MaxPool", 12, at, 2, in, 1, 1), KILN_OK);
        assert_int_equal(r.out[0].shape.d[2], H);
        assert_int_equal(r.out[0].shape.d[3], W);
        const float *y = r.out[0].data;
        for (int64_t u = 0; u < N * C; u++)
            for (int64_t a = 0; a < H; a++)
                for (int64_t b = 0; b < W; b++) {
                    float want = -INFINITY;
                    for (int64_t i = a - p; i <= a + p; i++)
                        for (int64_t j = b - p; j <= b + p; j++)
                            if (i >= 0 && i < H && j >= 0 && j < W)
                                want = fmaxf(want, x[(u * H + i) * W + j]);
                    float got = y[(u * H + a) * W + b];
                    if (got != want)
                        fail_msg("k %lld %lldx%lld plane %lld (%lld, %lld): got %g, want %g",
                                 (long long)kk, (long long)H, (long long)W, (long long)u,
                                 (long long)a, (long long)b, got, want);
                }
        case_free(&r);
        kn_free(x);
    }
}

/* ---- NaN in max pools ----------------------------------------------------------------- */

/* A 2-D MaxPool's geometry: kernel, strides, dilations (y, x) and ONNX pads (y0, x0, y1, x1). */
typedef struct pool2d_case {
    const char *name;
    int64_t h, w, k[2], s[2], d[2], pads[4];
} pool2d_case;

/* MaxPool over `planes` planes of h x w as numpy's max over each window: a window's first NaN in
 * row-major order, else its largest value; 0 for a window with no input. ind (may be NULL) gets
 * the taken tap's position, plane offset included (storage_order 0); -1 for no input. */
static void maxpool2d_ref(const pool2d_case *c, const float *x, int64_t planes, int64_t oh,
                          int64_t ow, float *y, int64_t *ind) {
    for (int64_t u = 0; u < planes; u++)
        for (int64_t a = 0; a < oh; a++)
            for (int64_t b = 0; b < ow; b++) {
                float m = -INFINITY;
                int64_t at = -1;
                for (int64_t i = 0; i < c->k[0]; i++)
                    for (int64_t j = 0; j < c->k[1]; j++) {
                        int64_t ih = a * c->s[0] - c->pads[0] + i * c->d[0];
                        int64_t iw = b * c->s[1] - c->pads[1] + j * c->d[1];
                        if (ih < 0 || ih >= c->h || iw < 0 || iw >= c->w)
                            continue;
                        int64_t q = (u * c->h + ih) * c->w + iw;
                        if (isnan(m))
                            continue;
                        if (at < 0 || isnan(x[q]) || x[q] > m) {
                            m = x[q];
                            at = q;
                        }
                    }
                y[(u * oh + a) * ow + b] = at < 0 ? 0 : m;
                if (ind != NULL)
                    ind[(u * oh + a) * ow + b] = at;
            }
}

/* The pixels where a NaN is planted, one plane each: the four corners, the middle of each edge,
 * and the first, middle and last tap of an inner output's window. Returns the count. */
static int nan_sites(const pool2d_case *c, int64_t oh, int64_t ow, int64_t sites[][2]) {
    int64_t h = c->h, w = c->w, n = 0;
    const int64_t fixed[8][2] = {{0, 0},     {0, w - 1}, {h - 1, 0},     {h - 1, w - 1},
                                 {0, w / 2}, {h / 2, 0}, {h - 1, w / 2}, {h / 2, w - 1}};
    for (int i = 0; i < 8; i++, n++) {
        sites[n][0] = fixed[i][0];
        sites[n][1] = fixed[i][1];
    }
    int64_t y0 = oh / 2 * c->s[0] - c->pads[0], x0 = ow / 2 * c->s[1] - c->pads[1];
    for (int t = 0; t < 3; t++, n++) {
        int64_t ty = t == 0 ? 0 : t == 1 ? c->k[0] / 2 : c->k[0] - 1;
        int64_t tx = t == 0 ? 0 : t == 1 ? c->k[1] / 2 : c->k[1] - 1;
        int64_t py = y0 + ty * c->d[0], px = x0 + tx * c->d[1];
        sites[n][0] = py < 0 ? 0 : py >= h ? h - 1 : py;
        sites[n][1] = px < 0 ? 0 : px >= w ? w - 1 : px;
    }
    return (int)n;
}

/* Runs MaxPool (with Indices when `indices`) on planes that each hold one NaN at a site of
 * nan_sites (plane 0 none, the last plane two, one of them a negative NaN), against
 * maxpool2d_ref: NaN where the reference has NaN, the same value (and index) elsewhere. */
static void check_maxpool_nan(const pool2d_case *c, bool indices) {
    int64_t oh = (c->h + c->pads[0] + c->pads[2] - (c->k[0] - 1) * c->d[0] - 1) / c->s[0] + 1;
    int64_t ow = (c->w + c->pads[1] + c->pads[3] - (c->k[1] - 1) * c->d[1] - 1) / c->s[1] + 1;
    int64_t sites[11][2];
    int ns = nan_sites(c, oh, ow, sites);
    int64_t planes = ns + 2, plane = c->h * c->w;
    float *x = kn_malloc((size_t)(planes * plane) * sizeof *x);
    float *want = kn_malloc((size_t)(planes * oh * ow) * sizeof *want);
    int64_t *want_ind = kn_malloc((size_t)(planes * oh * ow) * sizeof *want_ind);
    assert_true(x != NULL && want != NULL && want_ind != NULL);
    for (int64_t i = 0; i < planes * plane; i++)
        x[i] = (float)((i * 7919) % 1013) / 13.0f - 40.0f;
    x[3] = INFINITY; /* infinities are no NaN */
    x[plane + 5] = -INFINITY;
    for (int q = 0; q < ns; q++)
        x[(q + 1) * plane + sites[q][0] * c->w + sites[q][1]] = NAN;
    x[(planes - 1) * plane + plane / 3] = -NAN;
    x[(planes - 1) * plane + plane - 2] = NAN;
    maxpool2d_ref(c, x, planes, oh, ow, want, want_ind);
    kn_attr at[] = {ais("kernel_shape", 2, c->k), ais("strides", 2, c->s),
                    ais("dilations", 2, c->d), ais("pads", 4, c->pads)};
    kn_tensor in[] = {F32(x, 1, planes, c->h, c->w)};
    case_run r;
    assert_int_equal(run_case(&r, "MaxPool", 12, at, 4, in, 1, indices ? 2 : 1), KILN_OK);
    expect_shape(&r.out[0], 4, DIMS(1, planes, oh, ow));
    const float *y = r.out[0].data;
    const int64_t *ind = indices ? r.out[1].data : NULL;
    int nans = 0;
    for (int64_t o = 0; o < planes * oh * ow; o++) {
        nans += isnan(want[o]) ? 1 : 0;
        bool same = isnan(want[o]) ? isnan(y[o]) : y[o] == want[o];
        if (!same || (ind != NULL && ind[o] != want_ind[o]))
            fail_msg("%s%s: plane %lld, output (%lld, %lld): got %g [%lld], want %g [%lld]",
                     c->name, indices ? " with indices" : "", (long long)(o / (oh * ow)),
                     (long long)(o % (oh * ow) / ow), (long long)(o % ow), y[o],
                     (long long)(ind ? ind[o] : 0), want[o], (long long)want_ind[o]);
    }
    assert_true(nans > 0);
    case_free(&r);
    kn_free(x);
    kn_free(want);
    kn_free(want_ind);
}

/* A NaN at any tap of a window makes the output NaN on every path of the float32 MaxPool: the
 * separable 2-D path (pairs of 3-row windows of stride 2, 3-row, 2-row and longer windows,
 * windows cut by the padding or with no input at all), the framed small planes of same-size
 * pools (k 3, 5, 7), and the window walk (dilations, and the Indices output, which names the
 * window's first NaN). */
static void test_maxpool_nan_every_path(void **state) {
    (void)state;
    const pool2d_case cases[] = {
        {"3x3 s2 p1 (stem)", 23, 30, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {"3x3 s2 p0, odd width", 17, 37, {3, 3}, {2, 2}, {1, 1}, {0, 0, 0, 0}},
        {"3x3 s2 p(1,1,0,0)", 16, 19, {3, 3}, {2, 2}, {1, 1}, {1, 1, 0, 0}},
        {"3x3 s3", 15, 20, {3, 3}, {3, 3}, {1, 1}, {0, 0, 0, 0}},
        {"2x2 s2, odd sizes", 13, 9, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}},
        {"3x3 s1 p1 on a large plane", 66, 66, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
        {"5x5 s1 p2 on a large plane", 70, 70, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}},
        {"4x4 s2 p1", 20, 21, {4, 4}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {"4x4 s4", 16, 18, {4, 4}, {4, 4}, {1, 1}, {0, 0, 0, 0}},
        {"1x3 s1 p(0,1,0,1)", 6, 11, {1, 3}, {1, 1}, {1, 1}, {0, 1, 0, 1}},
        {"3x2 s(1,2) p(0,1,2,0)", 7, 9, {3, 2}, {1, 2}, {1, 1}, {0, 1, 2, 0}},
        {"2x2 s2, windows of pads only", 9, 5, {2, 2}, {2, 2}, {1, 1}, {3, 0, 0, 4}},
        {"same 3x3 on 7x9", 7, 9, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
        {"same 5x5 on 20x20 (SPPF)", 20, 20, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}},
        {"same 5x5 on 10x10", 10, 10, {5, 5}, {1, 1}, {1, 1}, {2, 2, 2, 2}},
        {"same 7x7 on 12x5", 12, 5, {7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}},
        {"same 3x3 on 1x1", 1, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
        {"dilated 2x2 d2", 8, 8, {2, 2}, {1, 1}, {2, 2}, {0, 0, 0, 0}},
        {"dilated 3x3 d(2,3) s2 p1", 15, 17, {3, 3}, {2, 2}, {2, 3}, {1, 1, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_maxpool_nan(&cases[i], false);
        check_maxpool_nan(&cases[i], true);
    }
}

/* GlobalMaxPool: NaN first, inside the 32-wide blocks, in the tail and last, on planes of 1, 49
 * (one block and a tail) and 256 (blocks only) values. */
static void test_global_maxpool_nan(void **state) {
    (void)state;
    const int64_t hw[][2] = {{1, 1}, {7, 7}, {16, 16}};
    for (int v = 0; v < 3; v++) {
        int64_t n = hw[v][0] * hw[v][1];
        const int64_t at[] = {0, n / 2, n - 17, n - 1};
        enum { PLANES = 5 };
        float *x = kn_malloc((size_t)(PLANES * n) * sizeof *x);
        assert_non_null(x);
        for (int64_t i = 0; i < PLANES * n; i++)
            x[i] = (float)((i * 37) % 101) / 7.0f - 6.0f;
        for (int q = 0; q < 4; q++)
            if (at[q] >= 0)
                x[(q + 1) * n + at[q]] = q % 2 ? -NAN : NAN;
        kn_tensor in[] = {F32(x, 1, PLANES, hw[v][0], hw[v][1])};
        case_run r;
        assert_int_equal(run_case(&r, "GlobalMaxPool", 1, NULL, 0, in, 1, 1), KILN_OK);
        const float *y = r.out[0].data;
        float m = -INFINITY;
        for (int64_t i = 0; i < n; i++)
            m = fmaxf(m, x[i]);
        assert_true(y[0] == m);
        for (int q = 0; q < 4; q++)
            if (at[q] >= 0 && !isnan(y[q + 1]))
                fail_msg("%lldx%lld: NaN at %lld gave %g", (long long)hw[v][0], (long long)hw[v][1],
                         (long long)at[q], y[q + 1]);
        case_free(&r);
        kn_free(x);
    }
}

/* The bf16 NHWC MaxPool with NaN at the corners, in the vector's channels and the masked tail,
 * and at the first, middle and last tap of a window: against numpy's max over the window. */
static void test_maxpool_nhwc_bf16_nan_sites(void **state) {
    (void)state;
    enum { C = 20, H = 9, W = 11 };
    static uint16_t x[H * W * C];
    const int64_t nhwc[2] = {1, 1};
    const int64_t sites[][3] = {{0, 0, 0},  {0, W - 1, 19}, {H - 1, 0, 3}, {H - 1, W - 1, 16},
                                {3, 3, 5},  {4, 4, 6},      {5, 5, 17},    {0, 5, 7},
                                {4, 0, 18}, {H - 1, 6, 15}, {2, W - 1, 1}};
    for (int i = 0; i < H * W * C; i++)
        x[i] = kn_float_to_bf16((float)((i * 7919) % 1013) / 17.0f - 29.0f);
    for (size_t q = 0; q < sizeof sites / sizeof sites[0]; q++)
        x[(sites[q][0] * W + sites[q][1]) * C + sites[q][2]] = q % 2 ? 0xffc0 : 0x7fc0;
    int64_t k[2] = {3, 3}, st[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
    kn_attr at[] = {ais("kernel_shape", 2, k), ais("strides", 2, st), ais("pads", 4, pads),
                    ais("kiln_nhwc", 2, nhwc)};
    kn_tensor in[] = {mk(KILN_DTYPE_BFLOAT16, x, 4, DIMS(1, C, H, W))};
    case_run r;
    assert_int_equal(run_case(&r, "MaxPool", 12, at, 4, in, 1, 1), KILN_OK);
    int64_t oh = r.out[0].shape.d[2], ow = r.out[0].shape.d[3];
    const uint16_t *y = r.out[0].data;
    for (int64_t a = 0; a < oh; a++)
        for (int64_t b = 0; b < ow; b++)
            for (int64_t c = 0; c < C; c++) {
                float want = -INFINITY;
                for (int64_t i = 2 * a - 1; i <= 2 * a + 1; i++)
                    for (int64_t j = 2 * b - 1; j <= 2 * b + 1; j++)
                        if (i >= 0 && i < H && j >= 0 && j < W) {
                            float f = kn_bf16_to_float(x[(i * W + j) * C + c]);
                            want = isnan(want) || isnan(f) ? NAN : fmaxf(want, f);
                        }
                float got = kn_bf16_to_float(y[(a * ow + b) * C + c]);
                if (isnan(want) ? !isnan(got) : got != want)
                    fail_msg("(%lld, %lld, %lld): got %g, want %g", (long long)a, (long long)b,
                             (long long)c, got, want);
            }
    case_free(&r);
}

static void test_pool_3d_and_global(void **state) {
    (void)state;
    float x[2 * 27];
    fill_seq(x, 54, 1, -5);
    int64_t k[] = {2, 2, 2};
    kn_attr at[] = {ais("kernel_shape", 3, k)};
    kn_tensor in[] = {F32(x, 1, 2, 3, 3, 3)};
    case_run r;
    assert_int_equal(run_case(&r, "MaxPool", 12, at, 1, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 5, DIMS(1, 2, 2, 2, 2));
    float want[16];
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 8; i++) {
            int z = i / 4, y = i / 2 % 2, w = i % 2;
            float m = -INFINITY;
            for (int q = 0; q < 8; q++)
                m = fmaxf(m, x[c * 27 + (z + q / 4) * 9 + (y + q / 2 % 2) * 3 + w + q % 2]);
            want[c * 8 + i] = m;
        }
    expect_f32(&r.out[0], want, 16, 0);
    case_free(&r);
    assert_int_equal(run_case(&r, "GlobalAveragePool", 1, NULL, 0, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 5, DIMS(1, 2, 1, 1, 1));
    for (int c = 0; c < 2; c++) {
        double s = 0;
        for (int i = 0; i < 27; i++)
            s += x[c * 27 + i];
        want[c] = (float)(s / 27);
    }
    expect_f32(&r.out[0], want, 2, 1e-6f);
    case_free(&r);
    kn_attr ap[] = {ai("p", 2)};
    assert_int_equal(run_case(&r, "GlobalLpPool", 2, ap, 1, in, 1, 1), KILN_OK);
    for (int c = 0; c < 2; c++) {
        double s = 0;
        for (int i = 0; i < 27; i++)
            s += x[c * 27 + i] * x[c * 27 + i];
        want[c] = (float)sqrt(s);
    }
    expect_f32(&r.out[0], want, 2, 1e-6f);
    case_free(&r);
    /* Planes of >= 256 take 32 partial sums, then 8, then single adds: 3 planes of 17 x 23 and
     * of 256 (each form alone, and the wide one with both remainders). */
    static float big[3 * 391];
    for (int i = 0; i < 3 * 391; i++)
        big[i] = (float)((i * 37) % 101) / 7.0f - 6.0f;
    const int64_t hw[][2] = {{17, 23}, {16, 16}};
    for (int v = 0; v < 2; v++) {
        int64_t plane = hw[v][0] * hw[v][1];
        kn_tensor bin[] = {F32(big, 1, 3, hw[v][0], hw[v][1])};
        assert_int_equal(run_case(&r, "GlobalAveragePool", 1, NULL, 0, bin, 1, 1), KILN_OK);
        float bw[3];
        for (int c = 0; c < 3; c++) {
            double s = 0;
            for (int64_t i = 0; i < plane; i++)
                s += big[c * plane + i];
            bw[c] = (float)(s / (double)plane);
        }
        expect_f32(&r.out[0], bw, 3, 1e-6f);
        case_free(&r);
    }
}

static void test_lppool_and_unpool(void **state) {
    (void)state;
    float x[] = {3, -4, 1, 2, 2, 0};
    int64_t k[] = {2}, s[] = {2};
    kn_attr at[] = {ais("kernel_shape", 1, k), ais("strides", 1, s), ai("p", 2)};
    kn_tensor in[] = {F32(x, 1, 1, 6)};
    case_run r;
    assert_int_equal(run_case(&r, "LpPool", 18, at, 3, in, 1, 1), KILN_OK);
    expect_f32(&r.out[0], (const float[]){5, sqrtf(5), 2}, 3, 1e-6f);
    case_free(&r);
    float v[] = {5, 6};
    int64_t idx[] = {1, 3}, os[] = {1, 1, 6};
    kn_tensor inu[] = {F32(v, 1, 1, 2), I64(idx, 1, 1, 2), I64(os, 3)};
    kn_attr au[] = {ais("kernel_shape", 1, k), ais("strides", 1, s)};
    assert_int_equal(run_case(&r, "MaxUnpool", 11, au, 2, inu, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 3, DIMS(1, 1, 4));
    expect_f32(&r.out[0], (const float[]){0, 5, 0, 6}, 4, 0);
    case_free(&r);
    assert_int_equal(run_case(&r, "MaxUnpool", 11, au, 2, inu, 3, 1), KILN_OK);
    expect_f32(&r.out[0], (const float[]){0, 5, 0, 6, 0, 0}, 6, 0);
    case_free(&r);
    int64_t bad[] = {1, 4};
    kn_tensor inb[] = {F32(v, 1, 1, 2), I64(bad, 1, 1, 2)};
    assert_int_equal(run_case(&r, "MaxUnpool", 11, au, 2, inb, 2, 1), KILN_ERR_SHAPE);
    case_free(&r);
}

int main(void) {
    g_pool = kn_threadpool_create(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_sum_axes_input),
        cmocka_unit_test(test_reduce_mean_attr_axes),
        cmocka_unit_test(test_reduce_variants_last_axis),
        cmocka_unit_test(test_reduce_int64_and_noop),
        cmocka_unit_test(test_reduce_errors),
        cmocka_unit_test(test_softmax_axis_semantics),
        cmocka_unit_test(test_softmax_long_rows),
        cmocka_unit_test(test_softmax_all_masked),
        cmocka_unit_test(test_hardmax_first_max),
        cmocka_unit_test(test_argmax_select_last),
        cmocka_unit_test(test_topk_ties),
        cmocka_unit_test(test_topk_long_rows_ties),
        cmocka_unit_test(test_float16_and_double_paths),
        cmocka_unit_test(test_layernorm_outputs),
        cmocka_unit_test(test_batchnorm_inference),
        cmocka_unit_test(test_batchnorm_training),
        cmocka_unit_test(test_group_and_instance_norm),
        cmocka_unit_test(test_lp_mvn_lrn),
        cmocka_unit_test(test_rms_norm),
        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_maxpool_ceil_mode),
        cmocka_unit_test(test_maxpool_indices_storage_order),
        cmocka_unit_test(test_avgpool_pads_count_include_pad),
        cmocka_unit_test(test_avgpool_ceil_dilation_same),
        cmocka_unit_test(test_pool_3d_and_global),
        cmocka_unit_test(test_maxpool_nhwc_bf16),
        cmocka_unit_test(test_maxpool_same_small_planes),
        cmocka_unit_test(test_maxpool_nan_every_path),
        cmocka_unit_test(test_global_maxpool_nan),
        cmocka_unit_test(test_maxpool_nhwc_bf16_nan_sites),
        cmocka_unit_test(test_lppool_and_unpool),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kn_threadpool_destroy(g_pool);
    return rc;
}
