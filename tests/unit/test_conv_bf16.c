/* Conv and kiln.FusedConv on bfloat16 activations (nn/conv_bf16.c) against a reference in
 * double over the same bf16 inputs, rounded to bf16: 1x1, 3x3, 7x7, strides, padding,
 * dilation, channel tails, batches, bias, residual and activations, width taps folded into
 * few input channels (the stem), NHWC (kiln_nhwc, permuted weights) and NCHW, on the AMX path
 * (where the CPU has it) and the portable one. Inputs the kernel does not take fail with an error.
 * `test_conv_bf16 --bench` times instead a few ResNet-50 layers against the float32-activation
 * path with bf16 weights, on one thread (no checks). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/math/gemm.h"
#include "backend/cpu/math/gemm_bf16.h"
#include "core/alloc.h"
#include "core/threadpool.h"
#include "ops/nn/conv_geom.h"
#include "ops/op.h"
#include "test_node.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint32_t rng_state = 4242;

static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static float bf(uint16_t h) {
    return kn_bf16_to_float(h);
}

typedef struct conv_case {
    int64_t n, c, m, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
    bool bias, residual;
    const char *act; /* kiln_activation, "" for none */
    bool nhwc;
    bool one_d; /* a 1-D conv over w (h, kh, sh, dh, pt, pb ignored) */
    int threads;
} conv_case;

/* Output size along one dim. */
static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

static double act_ref(const char *act, double v) {
    if (strcmp(act, "Relu") == 0)
        return v > 0 ? v : 0;
    if (strcmp(act, "Sigmoid") == 0)
        return 1.0 / (1.0 + exp(-v));
    if (strcmp(act, "Clip") == 0)
        return v < -0.5 ? -0.5 : v > 0.75 ? 0.75 : v;
    if (strcmp(act, "Swish") == 0)
        return v / (1.0 + exp(-v));
    return v;
}

/* Index of logical element (n, c, y, x) of a [N, C, H, W] tensor stored NCHW or NHWC. */
static int64_t at4(bool nhwc, int64_t n, int64_t c, int64_t y, int64_t x, int64_t cc, int64_t h,
                   int64_t w) {
    return nhwc ? ((n * h + y) * w + x) * cc + c : ((n * cc + c) * h + y) * w + x;
}

static uint16_t *rand_bf16(int64_t n, float scale) {
    uint16_t *p = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = kn_float_to_bf16(frand() * scale);
    return p;
}

typedef struct built {
    test_node t;
    kn_tensor in[4], out;
    int n_in;
    int64_t oh, ow;
} built;

/* The node and its tensors for case cc (weights stored as its layout says). */
static void build(const conv_case *cc, built *b) {
    bool fused = cc->residual || cc->act[0] != '\0';
    tn_init_domain(&b->t, fused ? "kiln" : "", fused ? "FusedConv" : "Conv");
    int64_t h = cc->one_d ? 1 : cc->h, kh = cc->one_d ? 1 : cc->kh;
    int64_t sh = cc->one_d ? 1 : cc->sh, dh = cc->one_d ? 1 : cc->dh;
    int64_t pt = cc->one_d ? 0 : cc->pt, pb = cc->one_d ? 0 : cc->pb;
    b->oh = out_dim(h, kh, sh, dh, pt, pb);
    b->ow = out_dim(cc->w, cc->kw, cc->sw, cc->dw, cc->pl, cc->pr);
    if (cc->one_d) {
        tn_ints(&b->t, "kernel_shape", 1, (int64_t[]){cc->kw});
        tn_ints(&b->t, "strides", 1, (int64_t[]){cc->sw});
        tn_ints(&b->t, "dilations", 1, (int64_t[]){cc->dw});
        tn_ints(&b->t, "pads", 2, (int64_t[]){cc->pl, cc->pr});
    } else {
        tn_ints(&b->t, "kernel_shape", 2, (int64_t[]){kh, cc->kw});
        tn_ints(&b->t, "strides", 2, (int64_t[]){sh, cc->sw});
        tn_ints(&b->t, "dilations", 2, (int64_t[]){dh, cc->dw});
        tn_ints(&b->t, "pads", 4, (int64_t[]){pt, cc->pl, pb, cc->pr});
    }
    if (cc->nhwc)
        tn_ints(&b->t, "kiln_nhwc", 2, (int64_t[]){cc->residual ? 11 : 3, 1});
    if (cc->act[0] != '\0')
        tn_str(&b->t, "kiln_activation", cc->act);
    if (strcmp(cc->act, "Clip") == 0) {
        b->t.attr[b->t.node.n_attr++] =
            (kn_attr){.name = "kiln_alpha", .type = KN_ATTR_FLOAT, .f = -0.5f};
        b->t.attr[b->t.node.n_attr++] =
            (kn_attr){.name = "kiln_beta", .type = KN_ATTR_FLOAT, .f = 0.75f};
    }
    if (cc->residual)
        tn_int(&b->t, "kiln_residual", 1);
    memset(b->in, 0, sizeof b->in);
    kn_tensor *x = &b->in[0], *w = &b->in[1];
    *x = (kn_tensor){.dtype = KILN_DTYPE_BFLOAT16};
    *w = (kn_tensor){.dtype = KILN_DTYPE_BFLOAT16};
    if (cc->one_d) {
        x->shape = (kn_shape){.rank = 3, .d = {cc->n, cc->c, cc->w}};
        w->shape = (kn_shape){.rank = 3, .d = {cc->m, cc->c, cc->kw}};
    } else {
        x->shape = (kn_shape){.rank = 4, .d = {cc->n, cc->c, h, cc->w}};
        w->shape = (kn_shape){.rank = 4, .d = {cc->m, cc->c, kh, cc->kw}};
    }
    x->data = rand_bf16(kn_tensor_numel(x), 1.0f);
    float wscale = 1.0f / sqrtf((float)(cc->c * kh * cc->kw));
    w->data = rand_bf16(kn_tensor_numel(w), 2.0f * wscale);
    b->n_in = 2;
    kn_shape ys = {.rank = x->shape.rank, .d = {cc->n, cc->m, b->oh, b->ow}};
    if (cc->one_d)
        ys.d[2] = b->ow;
    if (cc->bias || cc->residual) {
        b->in[2] = (kn_tensor){.dtype = KILN_DTYPE_BFLOAT16, .shape = {.rank = 1, .d = {cc->m}}};
        b->in[2].data = cc->bias ? rand_bf16(cc->m, 0.5f) : NULL;
        if (!cc->bias)
            b->in[2].dtype = 0;
        b->n_in = 3;
    }
    if (cc->residual) {
        b->in[3] = (kn_tensor){.dtype = KILN_DTYPE_BFLOAT16, .shape = ys};
        b->in[3].data = rand_bf16(kn_tensor_numel(&b->in[3]), 1.0f);
        b->n_in = 4;
    }
    b->out = (kn_tensor){.dtype = KILN_DTYPE_BFLOAT16, .shape = ys};
    int64_t ny = kn_tensor_numel(&b->out);
    b->out.data = kn_malloc((size_t)(ny > 0 ? ny : 1) * sizeof(uint16_t));
    assert_non_null(b->out.data);
    memset(b->out.data, 0xff, (size_t)ny * sizeof(uint16_t)); /* NaN: unwritten shows */
    b->t.node.n_in = b->n_in;
    b->t.node.n_out = 1;
}

/* The weights of a layout-NHWC node stored [K, R, S, C]: permute in place. */
static void permute_weights(const conv_case *cc, kn_tensor *w) {
    int64_t kh = cc->one_d ? 1 : cc->kh, n = kn_tensor_numel(w);
    uint16_t *src = w->data, *dst = kn_malloc((size_t)n * sizeof *dst);
    assert_non_null(dst);
    for (int64_t k = 0; k < cc->m; k++)
        for (int64_t c = 0; c < cc->c; c++)
            for (int64_t r = 0; r < kh; r++)
                for (int64_t s = 0; s < cc->kw; s++)
                    dst[((k * kh + r) * cc->kw + s) * cc->c + c] =
                        src[((k * cc->c + c) * kh + r) * cc->kw + s];
    kn_free(src);
    w->data = dst;
}

/* Reference, logical NCHW order, rounded to bf16; sumabs: sum of |terms| per element. */
static void reference(const conv_case *cc, const built *b, const uint16_t *x_nchw,
                      const uint16_t *z_nchw, float *want, float *sumabs) {
    int64_t h = b->in[0].shape.rank == 4 ? b->in[0].shape.d[2] : 1, w = cc->w;
    int64_t kh = cc->one_d ? 1 : cc->kh, sh = cc->one_d ? 1 : cc->sh;
    int64_t dh = cc->one_d ? 1 : cc->dh, pt = cc->one_d ? 0 : cc->pt;
    const uint16_t *wt = b->in[1].data, *bias = b->in[2].data;
    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t k = 0; k < cc->m; k++)
            for (int64_t oy = 0; oy < b->oh; oy++)
                for (int64_t ox = 0; ox < b->ow; ox++) {
                    double s = cc->bias ? bf(bias[k]) : 0.0, sa = fabs(s);
                    for (int64_t c = 0; c < cc->c; c++)
                        for (int64_t r = 0; r < kh; r++)
                            for (int64_t q = 0; q < cc->kw; q++) {
                                int64_t iy = oy * sh - pt + r * dh,
                                        ix = ox * cc->sw - cc->pl + q * cc->dw;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                                    continue;
                                double t = (double)bf(x_nchw[((n * cc->c + c) * h + iy) * w + ix]) *
                                           bf(wt[((k * cc->c + c) * kh + r) * cc->kw + q]);
                                s += t;
                                sa += fabs(t);
                            }
                    int64_t o = ((n * cc->m + k) * b->oh + oy) * b->ow + ox;
                    if (cc->residual) {
                        s += bf(z_nchw[o]);
                        sa += fabs(bf(z_nchw[o]));
                    }
                    want[o] = bf(kn_float_to_bf16((float)act_ref(cc->act, s)));
                    sumabs[o] = (float)sa;
                }
}

static kiln_status run_case(const conv_case *cc, bool check) {
    built b;
    build(cc, &b);
    int64_t ny = kn_tensor_numel(&b.out);
    int64_t h = b.in[0].shape.rank == 4 ? b.in[0].shape.d[2] : 1;
    /* Reference inputs in NCHW order, before any reordering. */
    int64_t nx = kn_tensor_numel(&b.in[0]);
    uint16_t *x_nchw = kn_malloc((size_t)nx * sizeof *x_nchw);
    assert_non_null(x_nchw);
    memcpy(x_nchw, b.in[0].data, (size_t)nx * sizeof *x_nchw);
    uint16_t *z_nchw = NULL;
    if (cc->residual) {
        z_nchw = kn_malloc((size_t)ny * sizeof *z_nchw);
        assert_non_null(z_nchw);
        memcpy(z_nchw, b.in[3].data, (size_t)ny * sizeof *z_nchw);
    }
    float *want = kn_malloc((size_t)ny * sizeof *want), *sumabs = kn_malloc((size_t)ny * 4);
    assert_non_null(want);
    assert_non_null(sumabs);
    if (check)
        reference(cc, &b, x_nchw, z_nchw, want, sumabs);
    if (cc->nhwc) {
        uint16_t *xd = b.in[0].data;
        for (int64_t n = 0; n < cc->n; n++)
            for (int64_t c = 0; c < cc->c; c++)
                for (int64_t y = 0; y < h; y++)
                    for (int64_t x = 0; x < cc->w; x++)
                        xd[at4(true, n, c, y, x, cc->c, h, cc->w)] =
                            x_nchw[at4(false, n, c, y, x, cc->c, h, cc->w)];
        if (cc->residual) {
            uint16_t *zd = b.in[3].data;
            for (int64_t n = 0; n < cc->n; n++)
                for (int64_t c = 0; c < cc->m; c++)
                    for (int64_t y = 0; y < b.oh; y++)
                        for (int64_t x = 0; x < b.ow; x++)
                            zd[at4(true, n, c, y, x, cc->m, b.oh, b.ow)] =
                                z_nchw[at4(false, n, c, y, x, cc->m, b.oh, b.ow)];
        }
        permute_weights(cc, &b.in[1]);
    }
    const kn_kernel *kern =
        kn_backend_find_kernel(kn_backend_host(), b.t.node.domain, b.t.node.op_type);
    assert_non_null(kern);
    kn_tensor pin[4];
    memcpy(pin, b.in, sizeof pin);
    pin[0].data = NULL;
    void *state = NULL;
    kiln_status rc = kern->prepare(&b.t.node, b.n_in, pin, &state);
    kn_threadpool *pool = kn_threadpool_create(cc->threads > 0 ? cc->threads : 2);
    kn_kernel_ctx kc = {.node = &b.t.node,
                        .n_in = b.n_in,
                        .in = b.in,
                        .n_out = 1,
                        .out = &b.out,
                        .state = state,
                        .pool = pool};
    if (rc == KILN_OK)
        rc = kern->run(&kc);
    if (rc == KILN_OK && check) {
        const uint16_t *y = b.out.data;
        int bad = 0;
        for (int64_t n = 0; n < cc->n; n++)
            for (int64_t c = 0; c < cc->m; c++)
                for (int64_t oy = 0; oy < b.oh; oy++)
                    for (int64_t ox = 0; ox < b.ow; ox++) {
                        int64_t o = at4(false, n, c, oy, ox, cc->m, b.oh, b.ow);
                        float got = bf(y[at4(cc->nhwc, n, c, oy, ox, cc->m, b.oh, b.ow)]);
                        /* An ulp of the larger of the two (both rounded to bf16), plus fp32
                         * summation-order slack. */
                        float tol = fmaxf(fabsf(want[o]), fabsf(got)) / 128.0f * 1.01f +
                                    1e-5f * sumabs[o] + 1e-6f;
                        if (!(fabsf(got - want[o]) <= tol) && bad++ < 5)
                            print_error("n %lld c %lld y %lld x %lld: got %g want %g\n",
                                        (long long)n, (long long)c, (long long)oy, (long long)ox,
                                        got, want[o]);
                    }
        assert_int_equal(bad, 0);
    }
    kern->release(state);
    kn_threadpool_destroy(pool);
    for (int i = 0; i < 4; i++)
        kn_free(b.in[i].data);
    kn_free(b.out.data);
    kn_free(x_nchw);
    kn_free(z_nchw);
    kn_free(want);
    kn_free(sumabs);
    return rc;
}

/* {n, c, m, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, bias, residual, act} */
static const conv_case cases[] = {
    {1, 64, 256, 14, 14,   1,     1,      1,     1,     1, 1,
     0, 0,  0,   0,  true, false, "Relu", false, false, 0}, /* 1x1 */
    {1, 64, 40, 14, 14,   1,    1,  1,     1,     1, 1,
     0, 0,  0,  0,  true, true, "", false, false, 0}, /* tail 40 */
    {2, 64, 72, 7, 9,     1,    1,      1,     1,     1, 1,
     0, 0,  0,  0, false, true, "Relu", false, false, 0}, /* batch, tail */
    {1, 128, 64, 14, 14,   1,     1,  2,     2,     1, 1,
     0, 0,   0,  0,  true, false, "", false, false, 0}, /* 1x1 stride 2 */
    {1, 64, 64, 14, 14,   3,     3,      1,     1,     1, 1,
     1, 1,  1,  1,  true, false, "Relu", false, false, 0}, /* 3x3 */
    {1, 64, 96, 14, 14,   3,    3,      2,     2,     1, 1,
     1, 1,  1,  1,  true, true, "Relu", false, false, 0}, /* 3x3 stride 2 */
    {1, 32, 64, 30, 30,   7,     7,      2,     2,     1, 1,
     3, 3,  3,  3,  true, false, "Relu", false, false, 0}, /* 7x7 stem */
    {1, 64, 48, 13, 11,   3,     3,         1,     1,     2, 2,
     2, 2,  2,  2,  true, false, "Sigmoid", false, false, 0}, /* dilation 2 */
    {2, 32, 8, 9, 9,     3,     3,       1,     1,     1, 1,
     1, 1,  1, 1, false, false, "Swish", false, false, 0}, /* tail 8 */
    {1, 64, 33, 7, 7,    3,    3,      1,     1,     1, 1,
     1, 1,  1,  1, true, true, "Clip", false, false, 0}, /* 7x7 map */
    {1, 32, 17, 10, 12,   2,     3,  3,     2,     1, 1,
     0, 1,  2,  0,  true, false, "", false, false, 0}, /* odd geometry */
    {1, 3, 16, 16, 16,   3,     3,      2,     2,     1, 1,
     1, 1, 1,  1,  true, false, "Relu", false, false, 0},                             /* C_in 3 */
    {2, 40, 24, 6, 6, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true, true, "", false, false, 0}, /* C_in 40 */
    {1, 64, 32, 8, 8,     3,     3,  1,     1,     1, 1,
     0, 0,  0,  0, false, false, "", false, false, 0}, /* unpadded */
    {3, 32, 64, 5, 5,    1,     1,  1,     1,     1, 1,
     0, 0,  0,  0, true, false, "", false, false, 0}, /* 75 pixels */
    {1, 32, 32, 1, 20, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1, true, false, "", false, true, 0}, /* 1-D */
    /* Width taps folded into the channels (c_in * kw <= 32, or 64 for 16 channels). */
    {2, 3, 64, 37, 41,   7,     7,      2,     2,     1, 1,
     3, 3, 3,  3,  true, false, "Relu", false, false, 0}, /* stem */
    {1, 3, 40, 23, 20,   7,    7,  2,     2,     1, 1,
     3, 3, 3,  3,  true, true, "", false, false, 0}, /* stem, residual */
    {1, 8, 40, 13, 15,   3,    3,      1,     1,     1, 1,
     1, 1, 1,  1,  true, true, "Relu", false, false, 0}, /* C_in 8 */
    {2, 8, 24, 14, 17,   3,    3,      2,     2,     1, 1,
     1, 1, 1,  1,  true, true, "Relu", false, false, 0}, /* C_in 8 stride 2 */
    {1, 4, 16, 11, 12,   3,     3,  1,     1,     2, 2,
     2, 2, 2,  2,  true, false, "", false, false, 0}, /* C_in 4 dilation 2 */
    {1, 16, 32, 9, 10,    3,     3,      1,     1,     1, 1,
     1, 1,  1,  1, false, false, "Relu", false, false, 0}, /* C_in 16: two blocks */
    {1, 5, 16, 1, 30, 1, 5, 1, 2, 1, 1, 0, 2, 0, 2, true, false, "", false, true, 0}, /* 1-D */
};

static void check_all(bool nhwc, int threads) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conv_case cc = cases[i];
        cc.nhwc = nhwc && !cc.one_d;
        cc.threads = threads;
        kiln_status rc = run_case(&cc, true);
        if (rc != KILN_OK)
            print_error("case %zu: %s\n", i, kiln_last_error());
        assert_int_equal(rc, KILN_OK);
    }
}

static void test_amx(void **state) {
    (void)state;
    unsetenv("KILN_BF16_PORTABLE");
    unsetenv("KILN_CPU_AMX");
    printf("%s\n", kn_bf16_path_name());
    if (!kn_bf16_amx())
        printf("no AMX-BF16 here: the cases run on the portable path\n");
    check_all(true, 2);
    check_all(false, 2);
    check_all(true, 1);
}

static void test_portable(void **state) {
    (void)state;
    setenv("KILN_BF16_PORTABLE", "1", 1);
    assert_false(kn_bf16_amx());
    check_all(true, 2);
    check_all(false, 1);
    unsetenv("KILN_BF16_PORTABLE");
}

static void test_unsupported(void **state) {
    (void)state;
    conv_case cc = {1, 64, 64, 8, 8,    3,     3,  1,     1,     1, 1,
                    1, 1,  1,  1, true, false, "", false, false, 1};
    built b;
    build(&cc, &b);
    const kn_kernel *kern = kn_backend_find_kernel(kn_backend_host(), "", "Conv");
    /* Two groups: weights [64, 32, 3, 3]. */
    tn_int(&b.t, "group", 2);
    b.in[1].shape.d[1] = 32;
    void *st = NULL;
    kn_tensor pin[4];
    memcpy(pin, b.in, sizeof pin);
    pin[0].data = NULL;
    assert_int_equal(kern->prepare(&b.t.node, b.n_in, pin, &st), KILN_OK);
    kn_kernel_ctx kc = {
        .node = &b.t.node, .n_in = b.n_in, .in = b.in, .n_out = 1, .out = &b.out, .state = st};
    assert_int_equal(kern->run(&kc), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_last_error(), "group 2"));
    kern->release(st);
    /* An output of float32. */
    b.t.node.n_attr--;
    b.in[1].shape.d[1] = 64;
    b.out.dtype = KILN_DTYPE_FLOAT32;
    kc.state = NULL;
    assert_int_equal(kern->run(&kc), KILN_ERR_UNSUPPORTED);
    /* Weights of float32 with bf16 activations. */
    b.out.dtype = KILN_DTYPE_BFLOAT16;
    b.in[1].dtype = KILN_DTYPE_FLOAT32;
    assert_int_equal(kern->run(&kc), KILN_ERR_UNSUPPORTED);
    for (int i = 0; i < 4; i++)
        kn_free(b.in[i].data);
    kn_free(b.out.data);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* X, bias and Y of a built case in float32, the weights left in bf16 (kiln_weights). */
static void to_float_activations(built *b) {
    tn_str(&b->t, "kiln_weights", "bf16");
    kn_tensor *ts[3] = {&b->in[0], &b->in[2], &b->out};
    for (int i = 0; i < 3; i++) {
        kn_tensor *t = ts[i];
        if (t->data == NULL)
            continue;
        int64_t n = kn_tensor_numel(t);
        float *f = kn_malloc((size_t)n * sizeof *f);
        assert_non_null(f);
        for (int64_t e = 0; e < n; e++)
            f[e] = bf(((uint16_t *)t->data)[e]);
        kn_free(t->data);
        t->data = f;
        t->dtype = KILN_DTYPE_FLOAT32;
    }
}

/* One conv timed three ways on one thread: bf16 activations NHWC and NCHW, and float32
 * activations with bf16 weights (kiln_weights: the bf16 GEMM with its packing). The modes take
 * turns, round after round, and each keeps its best round: the machine's noise hits all. */
static void bench_one(const char *name, const conv_case *base) {
    built b[3];
    const kn_kernel *kern[3];
    void *st[3];
    kn_threadpool *pool = kn_threadpool_create(1);
    kn_kernel_ctx kc[3];
    double macs = 0, best[3] = {1e9, 1e9, 1e9};
    for (int mode = 0; mode < 3; mode++) {
        conv_case cc = *base;
        cc.nhwc = mode == 0;
        build(&cc, &b[mode]);
        macs = (double)(cc.n * cc.m * b[mode].oh * b[mode].ow) * (double)(cc.c * cc.kh * cc.kw);
        if (cc.nhwc)
            permute_weights(&cc, &b[mode].in[1]);
        if (mode == 2)
            to_float_activations(&b[mode]);
        kern[mode] = kn_backend_find_kernel(kn_backend_host(), b[mode].t.node.domain,
                                            b[mode].t.node.op_type);
        kn_tensor pin[4];
        memcpy(pin, b[mode].in, sizeof pin);
        pin[0].data = NULL;
        assert_int_equal(kern[mode]->prepare(&b[mode].t.node, b[mode].n_in, pin, &st[mode]),
                         KILN_OK);
        kc[mode] = (kn_kernel_ctx){.node = &b[mode].t.node,
                                   .n_in = b[mode].n_in,
                                   .in = b[mode].in,
                                   .n_out = 1,
                                   .out = &b[mode].out,
                                   .state = st[mode],
                                   .pool = pool};
        assert_int_equal(kern[mode]->run(&kc[mode]), KILN_OK);
    }
    for (int round = 0; round < 30; round++)
        for (int mode = 0; mode < 3; mode++) {
            double t0 = now_s();
            for (int i = 0; i < 5; i++)
                kern[mode]->run(&kc[mode]);
            double t = (now_s() - t0) / 5;
            best[mode] = t < best[mode] ? t : best[mode];
        }
    printf("%-30s bf16 NHWC %6.3f ms %4.0f GMAC/s | bf16 NCHW %6.3f ms %4.0f GMAC/s | "
           "fp32 act, bf16 weights %6.3f ms %4.0f GMAC/s\n",
           name, best[0] * 1e3, macs / best[0] * 1e-9, best[1] * 1e3, macs / best[1] * 1e-9,
           best[2] * 1e3, macs / best[2] * 1e-9);
    for (int mode = 0; mode < 3; mode++) {
        kern[mode]->release(st[mode]);
        for (int i = 0; i < 4; i++)
            kn_free(b[mode].in[i].data);
        kn_free(b[mode].out.data);
    }
    kn_threadpool_destroy(pool);
}

static void run_bench(void) {
    unsetenv("KILN_BF16_PORTABLE");
    printf("%s; 1 thread\n", kn_bf16_path_name());
    const conv_case c3 = {1, 128, 128, 28, 28,   3,     3,      1,     1,     1, 1,
                          1, 1,   1,   1,  true, false, "Relu", false, false, 0};
    const conv_case c1 = {1, 256, 64, 56, 56,   1,     1,      1,     1,     1, 1,
                          0, 0,   0,  0,  true, false, "Relu", false, false, 0};
    const conv_case c7 = {1, 512, 512, 7, 7,    3,     3,      1,     1,     1, 1,
                          1, 1,   1,   1, true, false, "Relu", false, false, 0};
    const conv_case c1s = {1, 1024, 2048, 14, 14,   1,     1,  2,     2,     1, 1,
                           0, 0,    0,    0,  true, false, "", false, false, 0};
    bench_one("3x3 128->128 28x28 pad 1", &c3);
    bench_one("1x1 256->64 56x56", &c1);
    bench_one("3x3 512->512 7x7 pad 1", &c7);
    bench_one("1x1 1024->2048 14x14 stride 2", &c1s);
    const conv_case stem = {1, 3, 64, 224, 224,  7,     7,      2,     2,     1, 1,
                            3, 3, 3,  3,   true, false, "Relu", false, false, 0};
    bench_one("7x7 stem 3->64 224x224 stride 2", &stem);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        run_bench();
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_amx),
        cmocka_unit_test(test_portable),
        cmocka_unit_test(test_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
