/* Tensor family: inference and CPU kernels against hand-computed references (and, for the
 * bulk movement paths, against naive index loops written independently here). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/alloc.h"
#include "core/strings.h"
#include "core/threadpool.h"
#include "ops/op.h"

#include <string.h>

#define MAX_IO 8
#define I64 KILN_DTYPE_INT64
#define F32 KILN_DTYPE_FLOAT32

typedef struct run {
    kn_node node;
    kn_attr attr[8];
    kn_tensor out[MAX_IO];
    int n_out;
} run;

static kn_tensor T(int32_t dtype, const void *data, int rank, ...) {
    kn_tensor t = {.dtype = dtype, .data = (void *)data};
    t.shape.rank = rank;
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        t.shape.d[i] = va_arg(ap, int64_t);
    va_end(ap);
    return t;
}
#define NONE ((kn_tensor){0})

static kn_attr AI(const char *name, int64_t v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_INT, .i = v};
}
static kn_attr AS(const char *name, const char *v) {
    return (kn_attr){
        .name = (char *)name, .type = KN_ATTR_STRING, .s = (char *)v, .slen = strlen(v)};
}
static kn_attr AINTS(const char *name, int64_t n, const int64_t *v) {
    return (kn_attr){.name = (char *)name, .type = KN_ATTR_INTS, .n = n, .ints = (int64_t *)v};
}

static kn_threadpool *g_pool;

static void free_run(run *r) {
    for (int i = 0; i < r->n_out; i++) {
        kn_free(r->out[i].data);
        r->out[i].data = NULL;
    }
}

/* Infer, allocate outputs, run the kernel; returns the first non-OK status. */
static kiln_status run_op(run *r, const char *op, int opset, const kn_attr *attrs, int n_attr,
                          const kn_tensor *in, int n_in, int n_out) {
    memset(r, 0, sizeof *r);
    if (n_attr > 0)
        memcpy(r->attr, attrs, (size_t)n_attr * sizeof *attrs);
    r->node = (kn_node){.name = "n",
                        .op_type = (char *)op,
                        .domain = "",
                        .opset = opset,
                        .n_in = n_in,
                        .n_out = n_out,
                        .n_attr = n_attr,
                        .attr = r->attr};
    r->n_out = n_out;
    const kn_op_schema *s = kn_op_find("", op);
    assert_non_null(s);
    kn_infer_ctx ic = {.node = &r->node, .n_in = n_in, .in = in, .n_out = n_out, .out = r->out};
    kiln_status rc = s->infer(&ic);
    if (rc != KILN_OK)
        return rc;
    for (int i = 0; i < n_out; i++) {
        r->out[i].data = kn_malloc(kn_tensor_nbytes(&r->out[i]) + 8);
        assert_non_null(r->out[i].data);
    }
    const kn_kernel *k = kn_backend_find_kernel(kn_backend_host(), "", op);
    assert_non_null(k);
    kn_kernel_ctx kc = {
        .node = &r->node, .n_in = n_in, .in = in, .n_out = n_out, .out = r->out, .pool = g_pool};
    return k->run(&kc);
}

static void expect_shape(const kn_tensor *t, int rank, ...) {
    assert_int_equal(t->shape.rank, rank);
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(t->shape.d[i], va_arg(ap, int64_t));
    va_end(ap);
}

static void expect_i64(const kn_tensor *t, const int64_t *want, int64_t n) {
    assert_int_equal(kn_shape_numel(&t->shape), n);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(((const int64_t *)t->data)[i], want[i]);
}

static void expect_f32(const kn_tensor *t, const float *want, int64_t n) {
    assert_int_equal(kn_shape_numel(&t->shape), n);
    for (int64_t i = 0; i < n; i++)
        assert_float_equal(((const float *)t->data)[i], want[i], 0.0f);
}

static void iota_f(float *v, int n) {
    for (int i = 0; i < n; i++)
        v[i] = (float)i;
}

/* ---- reshape family ------------------------------------------------------------------------- */

static void test_reshape(void **state) {
    (void)state;
    float x[24];
    iota_f(x, 24);
    int64_t shp[] = {0, -1};
    kn_tensor in[] = {T(F32, x, 3, 2, 3, 4), T(I64, shp, 1, 2)};
    run r;
    assert_int_equal(run_op(&r, "Reshape", 13, NULL, 0, in, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 2, 12);
    expect_f32(&r.out[0], x, 24);
    free_run(&r);

    int64_t bad[] = {-1, -1};
    in[1].data = bad;
    assert_int_equal(run_op(&r, "Reshape", 13, NULL, 0, in, 2, 1), KILN_ERR_SHAPE);
    int64_t wrong[] = {5, 5};
    in[1].data = wrong;
    assert_int_equal(run_op(&r, "Reshape", 13, NULL, 0, in, 2, 1), KILN_ERR_SHAPE);
    in[1].data = NULL;
    assert_int_equal(run_op(&r, "Reshape", 13, NULL, 0, in, 2, 1), KN_NEED_DATA);

    /* allowzero=1: a 0 in shape is a real zero dim. */
    int64_t z[] = {0, 4};
    kn_tensor e[] = {T(F32, x, 2, 0, 4), T(I64, z, 1, 2)};
    kn_attr az = AI("allowzero", 1);
    assert_int_equal(run_op(&r, "Reshape", 14, &az, 1, e, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 0, 4);
    free_run(&r);
}

static void test_squeeze_unsqueeze(void **state) {
    (void)state;
    float x[6];
    iota_f(x, 6);
    int64_t ax[] = {0, -1};
    kn_attr a = AINTS("axes", 2, ax);
    kn_tensor in1[] = {T(F32, x, 4, 1, 2, 3, 1)};
    run r;
    assert_int_equal(run_op(&r, "Squeeze", 11, &a, 1, in1, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 2, 3);
    expect_f32(&r.out[0], x, 6);
    free_run(&r);
    kn_tensor in13[] = {T(F32, x, 4, 1, 2, 3, 1), T(I64, ax, 1, 2)};
    assert_int_equal(run_op(&r, "Squeeze", 13, NULL, 0, in13, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 2, 3);
    free_run(&r);
    int64_t ax2[] = {1};
    kn_tensor bad[] = {T(F32, x, 4, 1, 2, 3, 1), T(I64, ax2, 1, 1)};
    assert_int_equal(run_op(&r, "Squeeze", 13, NULL, 0, bad, 2, 1), KILN_ERR_SHAPE);

    int64_t uax[] = {-1, 0};
    kn_tensor u[] = {T(F32, x, 2, 2, 3), T(I64, uax, 1, 2)};
    assert_int_equal(run_op(&r, "Unsqueeze", 13, NULL, 0, u, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 4, 1, 2, 3, 1);
    expect_f32(&r.out[0], x, 6);
    free_run(&r);

    kn_attr fa = AI("axis", -1);
    kn_tensor f[] = {T(F32, x, 3, 1, 2, 3)};
    assert_int_equal(run_op(&r, "Flatten", 13, &fa, 1, f, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 2, 3);
    free_run(&r);
}

static void test_shape_size(void **state) {
    (void)state;
    kn_tensor in[] = {T(F32, NULL, 4, 2, 3, 4, 5)};
    kn_attr a[] = {AI("start", 1), AI("end", -1)};
    run r;
    assert_int_equal(run_op(&r, "Shape", 15, a, 2, in, 1, 1), KILN_OK);
    int64_t want[] = {3, 4};
    expect_i64(&r.out[0], want, 2);
    free_run(&r);
    kn_attr b[] = {AI("start", 10)};
    assert_int_equal(run_op(&r, "Shape", 15, b, 1, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 1, 0);
    free_run(&r);
    assert_int_equal(run_op(&r, "Size", 13, NULL, 0, in, 1, 1), KILN_OK);
    int64_t n = 120;
    expect_i64(&r.out[0], &n, 1);
    free_run(&r);
}

/* ---- transpose ------------------------------------------------------------------------------ */

static void naive_transpose(const float *x, float *y, int rank, const int64_t *d,
                            const int64_t *perm) {
    int64_t st[8], od[8], n = 1;
    for (int i = rank - 1; i >= 0; i--) {
        st[i] = n;
        n *= d[i];
    }
    for (int i = 0; i < rank; i++)
        od[i] = d[perm[i]];
    for (int64_t o = 0; o < n; o++) {
        int64_t rem = o, src = 0;
        for (int i = rank - 1; i >= 0; i--) {
            src += (rem % od[i]) * st[perm[i]];
            rem /= od[i];
        }
        y[o] = x[src];
    }
}

static void check_transpose(int rank, const int64_t *d, const int64_t *perm) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= d[i];
    float *x = kn_malloc((size_t)n * 4), *want = kn_malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)i;
    naive_transpose(x, want, rank, d, perm);
    kn_tensor in = {.dtype = F32, .data = x, .shape = {.rank = rank}};
    memcpy(in.shape.d, d, (size_t)rank * 8);
    kn_attr a = AINTS("perm", rank, perm);
    run r;
    assert_int_equal(run_op(&r, "Transpose", 13, &a, 1, &in, 1, 1), KILN_OK);
    expect_f32(&r.out[0], want, n);
    free_run(&r);
    kn_free(x);
    kn_free(want);
}

static void test_transpose(void **state) {
    (void)state;
    float x[] = {1, 2, 3, 4, 5, 6};
    kn_tensor in = T(F32, x, 2, 2, 3);
    run r;
    assert_int_equal(run_op(&r, "Transpose", 13, NULL, 0, &in, 1, 1), KILN_OK);
    float want[] = {1, 4, 2, 5, 3, 6};
    expect_shape(&r.out[0], 2, 3, 2);
    expect_f32(&r.out[0], want, 6);
    free_run(&r);

    int64_t d3[] = {3, 5, 7}, p1[] = {1, 0, 2}, p2[] = {2, 0, 1}, p3[] = {0, 2, 1};
    check_transpose(3, d3, p1);
    check_transpose(3, d3, p2);
    check_transpose(3, d3, p3);
    int64_t big[] = {67, 131}, pb[] = {1, 0};
    check_transpose(2, big, pb);
    int64_t d4[] = {2, 33, 4, 40}, p4[] = {0, 2, 1, 3}, p5[] = {0, 3, 1, 2}, p6[] = {3, 1, 2, 0};
    check_transpose(4, d4, p4);
    check_transpose(4, d4, p5);
    check_transpose(4, d4, p6);

    /* 8-byte and 1-byte elements through the tiled path. */
    int64_t xi[12];
    for (int i = 0; i < 12; i++)
        xi[i] = (int64_t)1 << (i + 33);
    kn_tensor ti = T(I64, xi, 2, 3, 4);
    assert_int_equal(run_op(&r, "Transpose", 13, NULL, 0, &ti, 1, 1), KILN_OK);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            assert_int_equal(((int64_t *)r.out[0].data)[i * 3 + j], xi[j * 4 + i]);
    free_run(&r);
    uint8_t xb[6] = {1, 2, 3, 4, 5, 6};
    kn_tensor tb = T(KILN_DTYPE_UINT8, xb, 2, 2, 3);
    assert_int_equal(run_op(&r, "Transpose", 13, NULL, 0, &tb, 1, 1), KILN_OK);
    uint8_t wb[6] = {1, 4, 2, 5, 3, 6};
    assert_memory_equal(r.out[0].data, wb, 6);
    free_run(&r);

    int64_t badp[] = {0, 0};
    kn_attr a = AINTS("perm", 2, badp);
    assert_int_equal(run_op(&r, "Transpose", 13, &a, 1, &in, 1, 1), KILN_ERR_SHAPE);
}

/* ---- concat / split / slice ----------------------------------------------------------------- */

static void test_concat_split(void **state) {
    (void)state;
    int64_t a[] = {1, 2}, b[] = {3, 4, 5, 6};
    kn_tensor in[] = {T(I64, a, 2, 2, 1), T(I64, b, 2, 2, 2)};
    kn_attr ax = AI("axis", -1);
    run r;
    assert_int_equal(run_op(&r, "Concat", 13, &ax, 1, in, 2, 1), KILN_OK);
    int64_t want[] = {1, 3, 4, 2, 5, 6};
    expect_shape(&r.out[0], 2, 2, 3);
    expect_i64(&r.out[0], want, 6);
    free_run(&r);
    kn_tensor mism[] = {T(I64, a, 2, 1, 2), T(I64, b, 2, 2, 2)};
    assert_int_equal(run_op(&r, "Concat", 13, &ax, 1, mism, 2, 1), KILN_ERR_SHAPE);

    float x[5] = {1, 2, 3, 4, 5};
    kn_tensor s[] = {T(F32, x, 1, 5)};
    kn_attr num = AI("num_outputs", 3);
    assert_int_equal(run_op(&r, "Split", 18, &num, 1, s, 1, 3), KILN_OK);
    expect_shape(&r.out[0], 1, 2);
    expect_shape(&r.out[2], 1, 1);
    float w0[] = {1, 2}, w1[] = {3, 4}, w2[] = {5};
    expect_f32(&r.out[0], w0, 2);
    expect_f32(&r.out[1], w1, 2);
    expect_f32(&r.out[2], w2, 1);
    free_run(&r);

    int64_t sp[] = {1, 4};
    kn_tensor s13[] = {T(F32, x, 1, 5), T(I64, sp, 1, 2)};
    assert_int_equal(run_op(&r, "Split", 13, NULL, 0, s13, 2, 2), KILN_OK);
    float v1[] = {2, 3, 4, 5};
    expect_f32(&r.out[1], v1, 4);
    free_run(&r);
    assert_int_equal(run_op(&r, "Split", 13, NULL, 0, s, 1, 2), KILN_ERR_SHAPE);

    /* Split on a middle axis of a 2x4x2 tensor. */
    float y[16];
    iota_f(y, 16);
    kn_tensor s3[] = {T(F32, y, 3, 2, 4, 2)};
    kn_attr a1 = AI("axis", 1);
    assert_int_equal(run_op(&r, "Split", 11, &a1, 1, s3, 1, 2), KILN_OK);
    float q0[] = {0, 1, 2, 3, 8, 9, 10, 11}, q1[] = {4, 5, 6, 7, 12, 13, 14, 15};
    expect_f32(&r.out[0], q0, 8);
    expect_f32(&r.out[1], q1, 8);
    free_run(&r);
}

static void test_slice(void **state) {
    (void)state;
    float x[10];
    iota_f(x, 10);
    int64_t st[] = {-1}, en[] = {INT64_MIN}, ax[] = {0}, sp[] = {-3};
    kn_tensor in[] = {T(F32, x, 1, 10), T(I64, st, 1, 1), T(I64, en, 1, 1), T(I64, ax, 1, 1),
                      T(I64, sp, 1, 1)};
    run r;
    assert_int_equal(run_op(&r, "Slice", 13, NULL, 0, in, 5, 1), KILN_OK);
    float want[] = {9, 6, 3, 0};
    expect_f32(&r.out[0], want, 4);
    free_run(&r);

    /* 2-D: rows 1.. (clamped end), columns 3 down to 1. */
    float m[20];
    iota_f(m, 20);
    int64_t s2[] = {1, 3}, e2[] = {INT64_MAX, 0}, a2[] = {0, 1}, p2[] = {1, -1};
    kn_tensor in2[] = {T(F32, m, 2, 4, 5), T(I64, s2, 1, 2), T(I64, e2, 1, 2), T(I64, a2, 1, 2),
                       T(I64, p2, 1, 2)};
    assert_int_equal(run_op(&r, "Slice", 13, NULL, 0, in2, 5, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 3, 3);
    float w2[] = {8, 7, 6, 13, 12, 11, 18, 17, 16};
    expect_f32(&r.out[0], w2, 9);
    free_run(&r);

    /* Opset 1 attributes; start beyond the end yields an empty dim. */
    int64_t as[] = {20}, ae[] = {30};
    kn_attr at[] = {AINTS("starts", 1, as), AINTS("ends", 1, ae)};
    kn_tensor in1[] = {T(F32, x, 1, 10)};
    assert_int_equal(run_op(&r, "Slice", 9, at, 2, in1, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 1, 0);
    free_run(&r);

    int64_t zero[] = {0};
    in[4].data = zero;
    assert_int_equal(run_op(&r, "Slice", 13, NULL, 0, in, 5, 1), KILN_ERR_INVALID_ARGUMENT);
    in[1].data = NULL;
    assert_int_equal(run_op(&r, "Slice", 13, NULL, 0, in, 5, 1), KN_NEED_DATA);
}

/* ---- gather / scatter ----------------------------------------------------------------------- */

static void test_gather(void **state) {
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t idx[] = {2, -3, 1};
    kn_tensor in[] = {T(F32, x, 2, 2, 3), T(I64, idx, 1, 3)};
    kn_attr ax = AI("axis", 1);
    run r;
    assert_int_equal(run_op(&r, "Gather", 13, &ax, 1, in, 2, 1), KILN_OK);
    float want[] = {3, 1, 2, 6, 4, 5};
    expect_shape(&r.out[0], 2, 2, 3);
    expect_f32(&r.out[0], want, 6);
    free_run(&r);

    int64_t bad[] = {3};
    kn_tensor b[] = {T(F32, x, 2, 2, 3), T(I64, bad, 1, 1)};
    assert_int_equal(run_op(&r, "Gather", 13, &ax, 1, b, 2, 1), KILN_ERR_INVALID_ARGUMENT);

    /* Scalar index on axis 0 with int32 indices (a shape subgraph's Gather). */
    int32_t i0 = 1;
    int64_t shp[] = {7, 8, 9};
    kn_tensor g[] = {T(I64, shp, 1, 3), T(KILN_DTYPE_INT32, &i0, 0)};
    assert_int_equal(run_op(&r, "Gather", 13, NULL, 0, g, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 0);
    assert_int_equal(*(int64_t *)r.out[0].data, 8);
    free_run(&r);

    int64_t ge[] = {0, 0, 1, 0};
    float d2[] = {1, 2, 3, 4};
    kn_tensor gi[] = {T(F32, d2, 2, 2, 2), T(I64, ge, 2, 2, 2)};
    assert_int_equal(run_op(&r, "GatherElements", 13, &ax, 1, gi, 2, 1), KILN_OK);
    float we[] = {1, 1, 4, 3};
    expect_f32(&r.out[0], we, 4);
    free_run(&r);

    /* GatherND with batch_dims=1 (spec example 5). */
    int64_t nd[] = {0, 1, 2, 3, 4, 5, 6, 7}, ni[] = {1, 0};
    kn_tensor gn[] = {T(I64, nd, 3, 2, 2, 2), T(I64, ni, 2, 2, 1)};
    kn_attr bd = AI("batch_dims", 1);
    assert_int_equal(run_op(&r, "GatherND", 13, &bd, 1, gn, 2, 1), KILN_OK);
    int64_t wn[] = {2, 3, 4, 5};
    expect_shape(&r.out[0], 2, 2, 2);
    expect_i64(&r.out[0], wn, 4);
    free_run(&r);
    int64_t ni2[] = {1, 1, 0, 1};
    kn_tensor gn2[] = {T(I64, nd, 3, 2, 2, 2), T(I64, ni2, 2, 2, 2)};
    assert_int_equal(run_op(&r, "GatherND", 11, NULL, 0, gn2, 2, 1), KILN_OK);
    int64_t wn2[] = {6, 7, 2, 3};
    expect_i64(&r.out[0], wn2, 4);
    free_run(&r);
    int64_t nbad[] = {2, 0, 0, 0};
    gn2[1].data = nbad;
    assert_int_equal(run_op(&r, "GatherND", 11, NULL, 0, gn2, 2, 1), KILN_ERR_INVALID_ARGUMENT);
    free_run(&r);
}

static void test_scatter(void **state) {
    (void)state;
    float d[] = {1, 2, 3, 4, 5};
    int64_t idx[] = {1, 1, -1};
    float upd[] = {10, 20, 30};
    kn_tensor in[] = {T(F32, d, 2, 1, 5), T(I64, idx, 2, 1, 3), T(F32, upd, 2, 1, 3)};
    kn_attr a[] = {AI("axis", 1), AS("reduction", "add")};
    run r;
    assert_int_equal(run_op(&r, "ScatterElements", 18, a, 2, in, 3, 1), KILN_OK);
    float want[] = {1, 32, 3, 4, 35};
    expect_f32(&r.out[0], want, 5);
    free_run(&r);
    a[1] = AS("reduction", "max");
    float upd2[] = {0, 7, 2};
    in[2].data = upd2;
    assert_int_equal(run_op(&r, "ScatterElements", 18, a, 2, in, 3, 1), KILN_OK);
    float want2[] = {1, 7, 3, 4, 5};
    expect_f32(&r.out[0], want2, 5);
    free_run(&r);
    int64_t bad[] = {1, 5, 0};
    in[1].data = bad;
    assert_int_equal(run_op(&r, "ScatterElements", 18, a, 1, in, 3, 1), KILN_ERR_INVALID_ARGUMENT);
    free_run(&r);

    /* ScatterND: rows 0 and 2 of a 3x2 tensor, multiplied. */
    int64_t x[] = {1, 2, 3, 4, 5, 6}, ni[] = {2, 0}, nu[] = {10, 100, 2, 3};
    kn_tensor n[] = {T(I64, x, 2, 3, 2), T(I64, ni, 2, 2, 1), T(I64, nu, 2, 2, 2)};
    kn_attr m = AS("reduction", "mul");
    assert_int_equal(run_op(&r, "ScatterND", 16, &m, 1, n, 3, 1), KILN_OK);
    int64_t wn[] = {2, 6, 3, 4, 50, 600};
    expect_i64(&r.out[0], wn, 6);
    free_run(&r);
    assert_int_equal(run_op(&r, "ScatterND", 13, NULL, 0, n, 3, 1), KILN_OK);
    int64_t wn0[] = {2, 3, 3, 4, 10, 100};
    expect_i64(&r.out[0], wn0, 6);
    free_run(&r);
}

/* ---- expand / tile / pad -------------------------------------------------------------------- */

static void test_expand_tile(void **state) {
    (void)state;
    float x[] = {1, 2, 3};
    int64_t shp[] = {2, 1, 1};
    kn_tensor in[] = {T(F32, x, 2, 3, 1), T(I64, shp, 1, 3)};
    run r;
    assert_int_equal(run_op(&r, "Expand", 13, NULL, 0, in, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 3, 2, 3, 1);
    float want[] = {1, 2, 3, 1, 2, 3};
    expect_f32(&r.out[0], want, 6);
    free_run(&r);
    int64_t shp2[] = {3, 4};
    kn_tensor in2[] = {T(F32, x, 2, 3, 1), T(I64, shp2, 1, 2)};
    assert_int_equal(run_op(&r, "Expand", 13, NULL, 0, in2, 2, 1), KILN_OK);
    float w2[] = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
    expect_f32(&r.out[0], w2, 12);
    free_run(&r);
    int64_t huge[] = {1 << 30, 1 << 30, 3};
    kn_tensor h[] = {T(F32, x, 2, 3, 1), T(I64, huge, 1, 3)};
    assert_int_equal(run_op(&r, "Expand", 13, NULL, 0, h, 2, 1), KILN_ERR_SHAPE);
    int64_t incompat[] = {2};
    kn_tensor ic[] = {T(F32, x, 1, 3), T(I64, incompat, 1, 1)};
    assert_int_equal(run_op(&r, "Expand", 13, NULL, 0, ic, 2, 1), KILN_ERR_SHAPE);

    float t[] = {1, 2, 3, 4};
    int64_t rep[] = {2, 3};
    kn_tensor ti[] = {T(F32, t, 2, 2, 2), T(I64, rep, 1, 2)};
    assert_int_equal(run_op(&r, "Tile", 13, NULL, 0, ti, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 4, 6);
    float wt[] = {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4};
    expect_f32(&r.out[0], wt, 24);
    free_run(&r);
    int64_t hrep[] = {INT64_MAX / 2, 3};
    ti[1].data = hrep;
    assert_int_equal(run_op(&r, "Tile", 13, NULL, 0, ti, 2, 1), KILN_ERR_SHAPE);
}

static void test_pad(void **state) {
    (void)state;
    float x[] = {1, 2, 3};
    int64_t pads[] = {2, 2};
    kn_tensor in[] = {T(F32, x, 1, 3), T(I64, pads, 1, 2)};
    run r;
    kn_attr m = AS("mode", "reflect");
    assert_int_equal(run_op(&r, "Pad", 13, &m, 1, in, 2, 1), KILN_OK);
    float wr[] = {3, 2, 1, 2, 3, 2, 1};
    expect_f32(&r.out[0], wr, 7);
    free_run(&r);
    m = AS("mode", "edge");
    assert_int_equal(run_op(&r, "Pad", 13, &m, 1, in, 2, 1), KILN_OK);
    float we[] = {1, 1, 1, 2, 3, 3, 3};
    expect_f32(&r.out[0], we, 7);
    free_run(&r);
    m = AS("mode", "wrap");
    assert_int_equal(run_op(&r, "Pad", 19, &m, 1, in, 2, 1), KILN_OK);
    float ww[] = {2, 3, 1, 2, 3, 1, 2};
    expect_f32(&r.out[0], ww, 7);
    free_run(&r);

    /* 2-D constant with a value, one crop: pads (begin r, begin c, end r, end c). */
    float y[] = {1, 2, 3, 4, 5, 6};
    int64_t p2[] = {1, -1, 0, 1};
    float cv = 9;
    kn_tensor in2[] = {T(F32, y, 2, 2, 3), T(I64, p2, 1, 4), T(F32, &cv, 0)};
    assert_int_equal(run_op(&r, "Pad", 13, NULL, 0, in2, 3, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 3, 3);
    float w2[] = {9, 9, 9, 2, 3, 9, 5, 6, 9};
    expect_f32(&r.out[0], w2, 9);
    free_run(&r);

    /* Opset 2: attributes; opset 18: axes input. */
    int64_t ap[] = {0, 1, 0, 0};
    kn_attr at[] = {AINTS("pads", 4, ap),
                    (kn_attr){.name = "value", .type = KN_ATTR_FLOAT, .f = -1}};
    kn_tensor in3[] = {T(F32, y, 2, 2, 3)};
    assert_int_equal(run_op(&r, "Pad", 2, at, 2, in3, 1, 1), KILN_OK);
    float w3[] = {-1, 1, 2, 3, -1, 4, 5, 6};
    expect_f32(&r.out[0], w3, 8);
    free_run(&r);
    int64_t p4[] = {1, 0}, ax4[] = {-1};
    kn_tensor in4[] = {T(F32, y, 2, 2, 3), T(I64, p4, 1, 2), NONE, T(I64, ax4, 1, 1)};
    assert_int_equal(run_op(&r, "Pad", 18, NULL, 0, in4, 4, 1), KILN_OK);
    float w4[] = {0, 1, 2, 3, 0, 4, 5, 6};
    expect_f32(&r.out[0], w4, 8);
    free_run(&r);
}

static void test_center_crop_pad_tensor_scatter(void **state) {
    (void)state;
    /* 3x4 -> 2x6: crop one row off the end (odd difference), pad one column each side. */
    float x[12];
    iota_f(x, 12);
    int64_t shp[] = {2, 6};
    kn_tensor in[] = {T(F32, x, 2, 3, 4), T(I64, shp, 1, 2)};
    run r;
    assert_int_equal(run_op(&r, "CenterCropPad", 18, NULL, 0, in, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 2, 6);
    float w[] = {0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 7, 0};
    expect_f32(&r.out[0], w, 12);
    free_run(&r);

    /* Cache [batch 2, seq 4, 1]; update of 2 steps written at 3 (circular: 3, 0) and 1. */
    float cache[8] = {0}, upd[] = {1, 2, 3, 4};
    int64_t wi[] = {3, 1};
    kn_tensor ts[] = {T(F32, cache, 3, 2, 4, 1), T(F32, upd, 3, 2, 2, 1), T(I64, wi, 1, 2)};
    kn_attr m = AS("mode", "circular");
    assert_int_equal(run_op(&r, "TensorScatter", 24, &m, 1, ts, 3, 1), KILN_OK);
    float wc[] = {2, 0, 0, 1, 0, 3, 4, 0};
    expect_f32(&r.out[0], wc, 8);
    free_run(&r);
    assert_int_equal(run_op(&r, "TensorScatter", 24, NULL, 0, ts, 3, 1), KILN_ERR_INVALID_ARGUMENT);
    free_run(&r);
}

/* ---- generators ----------------------------------------------------------------------------- */

static void test_generators(void **state) {
    (void)state;
    run r;
    int64_t shp[] = {2, 3};
    int32_t v = 7;
    kn_tensor val = T(KILN_DTYPE_INT32, &v, 1, 1);
    kn_attr va = {.name = "value", .type = KN_ATTR_TENSOR, .t = &val};
    kn_tensor in[] = {T(I64, shp, 1, 2)};
    assert_int_equal(run_op(&r, "ConstantOfShape", 20, &va, 1, in, 1, 1), KILN_OK);
    assert_int_equal(r.out[0].dtype, KILN_DTYPE_INT32);
    for (int i = 0; i < 6; i++)
        assert_int_equal(((int32_t *)r.out[0].data)[i], 7);
    free_run(&r);
    int64_t huge[] = {1 << 30, 1 << 30};
    in[0].data = huge;
    assert_int_equal(run_op(&r, "ConstantOfShape", 20, NULL, 0, in, 1, 1), KILN_ERR_SHAPE);
    int64_t neg[] = {-1};
    kn_tensor in_neg[] = {T(I64, neg, 1, 1)};
    assert_int_equal(run_op(&r, "ConstantOfShape", 20, NULL, 0, in_neg, 1, 1), KILN_ERR_SHAPE);

    int64_t s = 10, l = 1, d = -3;
    kn_tensor rg[] = {T(I64, &s, 0), T(I64, &l, 0), T(I64, &d, 0)};
    assert_int_equal(run_op(&r, "Range", 11, NULL, 0, rg, 3, 1), KILN_OK);
    int64_t wr[] = {10, 7, 4};
    expect_i64(&r.out[0], wr, 3);
    free_run(&r);
    int64_t s2 = INT64_MIN, l2 = INT64_MAX, d2 = INT64_MAX;
    kn_tensor rg2[] = {T(I64, &s2, 0), T(I64, &l2, 0), T(I64, &d2, 0)};
    assert_int_equal(run_op(&r, "Range", 11, NULL, 0, rg2, 3, 1), KILN_OK);
    int64_t wr2[] = {INT64_MIN, -1, INT64_MAX - 1};
    expect_i64(&r.out[0], wr2, 3);
    free_run(&r);
    int64_t one = 1;
    rg2[2].data = &one;
    assert_int_equal(run_op(&r, "Range", 11, NULL, 0, rg2, 3, 1), KILN_ERR_SHAPE);
    int64_t zero = 0;
    rg2[2].data = &zero;
    assert_int_equal(run_op(&r, "Range", 11, NULL, 0, rg2, 3, 1), KILN_ERR_INVALID_ARGUMENT);
    float fs = 1, fl = 2, fd = 0.25f;
    kn_tensor rf[] = {T(F32, &fs, 0), T(F32, &fl, 0), T(F32, &fd, 0)};
    assert_int_equal(run_op(&r, "Range", 11, NULL, 0, rf, 3, 1), KILN_OK);
    float wf[] = {1, 1.25f, 1.5f, 1.75f};
    expect_f32(&r.out[0], wf, 4);
    free_run(&r);

    float e[6];
    kn_tensor ei[] = {T(F32, e, 2, 2, 3)};
    kn_attr ea[] = {AI("k", 1), AI("dtype", I64)};
    assert_int_equal(run_op(&r, "EyeLike", 9, ea, 2, ei, 1, 1), KILN_OK);
    int64_t we[] = {0, 1, 0, 0, 0, 1};
    expect_i64(&r.out[0], we, 6);
    free_run(&r);

    int64_t idx[] = {1, -1, 5};
    float depth = 3, vals[] = {0, 2};
    kn_tensor oh[] = {T(I64, idx, 1, 3), T(F32, &depth, 0), T(F32, vals, 1, 2)};
    kn_attr oa = AI("axis", 0);
    assert_int_equal(run_op(&r, "OneHot", 11, &oa, 1, oh, 3, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 3, 3);
    float wo[] = {0, 0, 0, 2, 0, 0, 0, 2, 0};
    expect_f32(&r.out[0], wo, 9);
    free_run(&r);
}

static void test_trilu_cumsum(void **state) {
    (void)state;
    float x[12];
    iota_f(x, 12);
    x[0] = 100;
    int64_t k = -1;
    kn_tensor in[] = {T(F32, x, 2, 3, 4), T(I64, &k, 0)};
    run r;
    assert_int_equal(run_op(&r, "Trilu", 14, NULL, 0, in, 2, 1), KILN_OK);
    float wu[] = {100, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11};
    expect_f32(&r.out[0], wu, 12);
    free_run(&r);
    kn_attr lo = AI("upper", 0);
    k = 1;
    assert_int_equal(run_op(&r, "Trilu", 14, &lo, 1, in, 2, 1), KILN_OK);
    float wl[] = {100, 1, 0, 0, 4, 5, 6, 0, 8, 9, 10, 11};
    expect_f32(&r.out[0], wl, 12);
    free_run(&r);

    int64_t c[] = {1, 2, 3, 4, 5, 6};
    int32_t axis = 1;
    kn_tensor ci[] = {T(I64, c, 2, 2, 3), T(KILN_DTYPE_INT32, &axis, 0)};
    kn_attr ca[] = {AI("exclusive", 1), AI("reverse", 1)};
    assert_int_equal(run_op(&r, "CumSum", 14, ca, 2, ci, 2, 1), KILN_OK);
    int64_t wc[] = {5, 3, 0, 11, 6, 0};
    expect_i64(&r.out[0], wc, 6);
    free_run(&r);
    assert_int_equal(run_op(&r, "CumSum", 14, NULL, 0, ci, 2, 1), KILN_OK);
    int64_t wc2[] = {1, 3, 6, 4, 9, 15};
    expect_i64(&r.out[0], wc2, 6);
    free_run(&r);
}

static void test_depth_space(void **state) {
    (void)state;
    /* 1x8x1x1 -> 1x2x2x2 with blocksize 2. */
    float x[8];
    iota_f(x, 8);
    kn_tensor in[] = {T(F32, x, 4, 1, 8, 1, 1)};
    kn_attr a[] = {AI("blocksize", 2), AS("mode", "DCR")};
    run r;
    assert_int_equal(run_op(&r, "DepthToSpace", 13, a, 2, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 4, 1, 2, 2, 2);
    /* DCR: out[c, h, w] = in[(h*2 + w)*2 + c]. */
    float wd[] = {0, 2, 4, 6, 1, 3, 5, 7};
    expect_f32(&r.out[0], wd, 8);
    free_run(&r);
    a[1] = AS("mode", "CRD");
    assert_int_equal(run_op(&r, "DepthToSpace", 13, a, 2, in, 1, 1), KILN_OK);
    expect_f32(&r.out[0], x, 8);
    free_run(&r);

    /* SpaceToDepth inverts DCR DepthToSpace. */
    float s[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    kn_tensor si[] = {T(F32, s, 4, 1, 2, 2, 2)};
    assert_int_equal(run_op(&r, "SpaceToDepth", 13, a, 1, si, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 4, 1, 8, 1, 1);
    expect_f32(&r.out[0], x, 8);
    free_run(&r);
}

/* ---- data-dependent outputs ----------------------------------------------------------------- */

static void test_nonzero_compress(void **state) {
    (void)state;
    float x[] = {0, 3, 0, -1, 2, 0};
    kn_tensor in[] = {T(F32, NULL, 2, 2, 3)};
    run r;
    assert_int_equal(run_op(&r, "NonZero", 13, NULL, 0, in, 1, 1), KN_NEED_DATA);
    in[0].data = x;
    assert_int_equal(run_op(&r, "NonZero", 13, NULL, 0, in, 1, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 2, 3);
    int64_t w[] = {0, 1, 1, 1, 0, 1};
    expect_i64(&r.out[0], w, 6);
    free_run(&r);

    uint8_t cond[] = {0, 1, 1};
    kn_tensor ci[] = {T(F32, x, 2, 2, 3), T(KILN_DTYPE_BOOL, cond, 1, 3)};
    kn_attr ax = AI("axis", 1);
    assert_int_equal(run_op(&r, "Compress", 11, &ax, 1, ci, 2, 1), KILN_OK);
    expect_shape(&r.out[0], 2, 2, 2);
    float wc[] = {3, 0, 2, 0};
    expect_f32(&r.out[0], wc, 4);
    free_run(&r);
    assert_int_equal(run_op(&r, "Compress", 11, NULL, 0, ci, 2, 1), KILN_OK);
    float wf[] = {3, 0};
    expect_f32(&r.out[0], wf, 2);
    free_run(&r);
}

static void test_unique(void **state) {
    (void)state;
    float x[] = {2, 1, 1, 3, 4, 3};
    kn_tensor in[] = {T(F32, x, 1, 6)};
    kn_attr s0 = AI("sorted", 0);
    run r;
    assert_int_equal(run_op(&r, "Unique", 11, &s0, 1, in, 1, 4), KILN_OK);
    float y[] = {2, 1, 3, 4};
    int64_t idx[] = {0, 1, 3, 4}, inv[] = {0, 1, 1, 2, 3, 2}, cnt[] = {1, 2, 2, 1};
    expect_f32(&r.out[0], y, 4);
    expect_i64(&r.out[1], idx, 4);
    expect_i64(&r.out[2], inv, 6);
    expect_i64(&r.out[3], cnt, 4);
    free_run(&r);
    assert_int_equal(run_op(&r, "Unique", 11, NULL, 0, in, 1, 4), KILN_OK);
    float ys[] = {1, 2, 3, 4};
    int64_t idxs[] = {1, 0, 3, 4}, invs[] = {1, 0, 0, 2, 3, 2}, cnts[] = {2, 1, 2, 1};
    expect_f32(&r.out[0], ys, 4);
    expect_i64(&r.out[1], idxs, 4);
    expect_i64(&r.out[2], invs, 6);
    expect_i64(&r.out[3], cnts, 4);
    free_run(&r);

    /* Rows of [[1,0,0],[1,0,0],[2,3,4]] along axis 0 (spec example 3). */
    int64_t m[] = {1, 0, 0, 1, 0, 0, 2, 3, 4};
    kn_tensor mi[] = {T(I64, m, 2, 3, 3)};
    kn_attr ax = AI("axis", 0);
    assert_int_equal(run_op(&r, "Unique", 11, &ax, 1, mi, 1, 4), KILN_OK);
    expect_shape(&r.out[0], 2, 2, 3);
    int64_t wy[] = {1, 0, 0, 2, 3, 4}, wi[] = {0, 2}, wv[] = {0, 0, 1}, wc[] = {2, 1};
    expect_i64(&r.out[0], wy, 6);
    expect_i64(&r.out[1], wi, 2);
    expect_i64(&r.out[2], wv, 3);
    expect_i64(&r.out[3], wc, 2);
    free_run(&r);
}

static void test_misc(void **state) {
    (void)state;
    /* ReverseSequence, time-major 4x2 (time, batch) with lens {3, 1}. */
    float x[] = {0, 1, 2, 3, 4, 5, 6, 7};
    int64_t lens[] = {3, 1};
    kn_tensor in[] = {T(F32, x, 2, 4, 2), T(I64, lens, 1, 2)};
    run r;
    assert_int_equal(run_op(&r, "ReverseSequence", 10, NULL, 0, in, 2, 1), KILN_OK);
    float w[] = {4, 1, 2, 3, 0, 5, 6, 7};
    expect_f32(&r.out[0], w, 8);
    free_run(&r);
    int64_t bad[] = {5, 1};
    in[1].data = bad;
    assert_int_equal(run_op(&r, "ReverseSequence", 10, NULL, 0, in, 2, 1),
                     KILN_ERR_INVALID_ARGUMENT);
    free_run(&r);

    float d[] = {1, 2, 3};
    kn_tensor di[] = {T(F32, d, 1, 3)};
    assert_int_equal(run_op(&r, "Dropout", 7, NULL, 0, di, 1, 2), KILN_OK);
    expect_f32(&r.out[0], d, 3);
    expect_f32(&r.out[1], (const float[]){1, 1, 1}, 3);
    free_run(&r);
    assert_int_equal(run_op(&r, "Dropout", 13, NULL, 0, di, 1, 2), KILN_OK);
    assert_int_equal(r.out[1].dtype, KILN_DTYPE_BOOL);
    assert_memory_equal(r.out[1].data, ((const uint8_t[]){1, 1, 1}), 3);
    free_run(&r);

    /* a string block (core/strings.h) passes Identity as its bytes; reshaping one is refused */
    kn_shape two = {.rank = 1, .d = {2}};
    const kn_str words[2] = {{"ab", 2}, {"c", 1}};
    kn_tensor s;
    assert_int_equal(kn_strings_make(&two, words, &s), KILN_OK);
    assert_int_equal(run_op(&r, "Identity", 13, NULL, 0, &s, 1, 1), KILN_OK);
    assert_int_equal(r.out[0].dtype, KILN_DTYPE_STRING);
    assert_int_equal(kn_tensor_nbytes(&r.out[0]), kn_tensor_nbytes(&s));
    assert_memory_equal(r.out[0].data, s.data, kn_tensor_nbytes(&s));
    free_run(&r);
    int64_t shape2[] = {1, 2};
    kn_tensor rs[] = {s, T(I64, shape2, 1, 2)};
    assert_int_equal(run_op(&r, "Reshape", 14, NULL, 0, rs, 2, 1), KILN_ERR_UNSUPPORTED);
    kn_free(s.data);
}

/* Extreme values must come back as errors, never as huge allocations or overflowed dims. */
static void test_absurd_values(void **state) {
    (void)state;
    run r;
    float x[4] = {0};
    int64_t big[] = {0, INT64_MAX};
    kn_tensor rs[] = {T(F32, x, 1, 0), T(I64, big, 1, 2)};
    kn_attr az = AI("allowzero", 1);
    assert_int_equal(run_op(&r, "Reshape", 14, &az, 1, rs, 2, 1), KILN_ERR_SHAPE);
    int64_t mn[] = {INT64_MIN};
    kn_tensor rm[] = {T(F32, x, 1, 4), T(I64, mn, 1, 1)};
    assert_int_equal(run_op(&r, "Reshape", 13, NULL, 0, rm, 2, 1), KILN_ERR_SHAPE);

    int64_t pads[] = {INT64_MAX, 0};
    kn_tensor pd[] = {T(F32, x, 1, 4), T(I64, pads, 1, 2)};
    assert_int_equal(run_op(&r, "Pad", 13, NULL, 0, pd, 2, 1), KILN_ERR_SHAPE);
    int64_t crop[] = {-5, 0};
    pd[1].data = crop;
    assert_int_equal(run_op(&r, "Pad", 13, NULL, 0, pd, 2, 1), KILN_ERR_SHAPE);

    float fs = 0, fl = 1e30f, fd = 1e-30f;
    kn_tensor rf[] = {T(F32, &fs, 0), T(F32, &fl, 0), T(F32, &fd, 0)};
    assert_int_equal(run_op(&r, "Range", 11, NULL, 0, rf, 3, 1), KILN_ERR_SHAPE);

    int64_t idx[] = {0};
    float depth = 1e20f, vals[] = {0, 1};
    kn_tensor oh[] = {T(I64, idx, 1, 1), T(F32, &depth, 0), T(F32, vals, 1, 2)};
    assert_int_equal(run_op(&r, "OneHot", 11, NULL, 0, oh, 3, 1), KILN_ERR_INVALID_ARGUMENT);

    int64_t st[] = {INT64_MIN}, en[] = {INT64_MAX}, sp[] = {INT64_MIN};
    kn_tensor sl[] = {T(F32, x, 1, 4), T(I64, st, 1, 1), T(I64, en, 1, 1), NONE, T(I64, sp, 1, 1)};
    assert_int_equal(run_op(&r, "Slice", 13, NULL, 0, sl, 5, 1), KILN_OK);
    expect_shape(&r.out[0], 1, 0);
    free_run(&r);
    sp[0] = INT64_MAX;
    assert_int_equal(run_op(&r, "Slice", 13, NULL, 0, sl, 5, 1), KILN_OK);
    expect_shape(&r.out[0], 1, 1);
    free_run(&r);

    int64_t nd_idx[] = {INT64_MIN};
    kn_tensor gn[] = {T(F32, x, 1, 4), T(I64, nd_idx, 1, 1)};
    assert_int_equal(run_op(&r, "GatherND", 13, NULL, 0, gn, 2, 1), KILN_ERR_INVALID_ARGUMENT);
    free_run(&r);
    assert_int_equal(run_op(&r, "Gather", 13, NULL, 0, gn, 2, 1), KILN_ERR_INVALID_ARGUMENT);
    int64_t cos[] = {(int64_t)1 << 41};
    kn_tensor co[] = {T(I64, cos, 1, 1)};
    assert_int_equal(run_op(&r, "ConstantOfShape", 20, NULL, 0, co, 1, 1), KILN_ERR_SHAPE);
}

/* Large transposes and concats run across a real pool and must match the serial result. */
static void test_parallel(void **state) {
    (void)state;
    g_pool = kn_threadpool_create(4);
    assert_non_null(g_pool);
    int64_t d[] = {8, 64, 12, 64}, p[] = {0, 2, 1, 3}, q[] = {0, 2, 3, 1};
    check_transpose(4, d, p);
    check_transpose(4, d, q);
    int64_t n = 3 * 100000;
    float *a = kn_malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        a[i] = (float)i;
    kn_tensor in[] = {T(F32, a, 2, 3, 100000), T(F32, a, 2, 3, 100000)};
    kn_attr ax = AI("axis", 1);
    run r;
    assert_int_equal(run_op(&r, "Concat", 13, &ax, 1, in, 2, 1), KILN_OK);
    const float *o = r.out[0].data;
    for (int64_t row = 0; row < 3; row++)
        for (int64_t j = 0; j < 200000; j++)
            assert_true(o[row * 200000 + j] == (float)(row * 100000 + j % 100000));
    free_run(&r);
    kn_free(a);
    kn_threadpool_destroy(g_pool);
    g_pool = NULL;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_squeeze_unsqueeze),
        cmocka_unit_test(test_shape_size),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_concat_split),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_gather),
        cmocka_unit_test(test_scatter),
        cmocka_unit_test(test_expand_tile),
        cmocka_unit_test(test_pad),
        cmocka_unit_test(test_center_crop_pad_tensor_scatter),
        cmocka_unit_test(test_generators),
        cmocka_unit_test(test_trilu_cumsum),
        cmocka_unit_test(test_depth_space),
        cmocka_unit_test(test_nonzero_compress),
        cmocka_unit_test(test_unique),
        cmocka_unit_test(test_misc),
        cmocka_unit_test(test_absurd_values),
        cmocka_unit_test(test_parallel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
