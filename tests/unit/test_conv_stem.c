/* The direct convolution for few input channels (nn/conv_stem.c) against a reference in double:
 * 3x3 and 7x7 stems at stride 2, stride 1, 1 and 4 input channels, odd pads, output channels that
 * do not fill a block, rows that end inside a vector, bias, residual and every kind of
 * activation, one and three threads; and the Conv kernel, which takes it for one image and
 * kernels of 25 taps or more, against its own GEMM path. `test_conv_stem --bench [THREADS]` times
 * instead ResNet-50's stem and a 5x5 one both ways through the Conv kernel (no checks). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/nn/conv.h"
#include "core/alloc.h"
#include "core/threadpool.h"
#include "ops/op.h"
#include "test_node.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint32_t rng_state = 99;

static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static float *rand_floats(int64_t n) {
    float *p = kn_aligned_alloc((size_t)(n > 0 ? n : 1) * sizeof *p, 64);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static bool avx512(void) {
    return strcmp(kn_gemm_isa(), "avx512") == 0;
}

typedef struct stem_case {
    int64_t c, m, h, w, k, s, pt, pl, pb, pr;
    bool bias, residual;
    int act;
} stem_case;

static double act_ref(int act, double v) {
    switch (act) {
    case KN_ACT_RELU:
        return v > 0 ? v : 0;
    case KN_ACT_CLIP:
        return v < 0 ? 0 : v > 6 ? 6 : v;
    case KN_ACT_SIGMOID:
        return 1.0 / (1.0 + exp(-v));
    case KN_ACT_SWISH:
        return v / (1.0 + exp(-v));
    case KN_ACT_HARD_SWISH:
        return v * fmin(fmax(v / 6 + 0.5, 0), 1);
    default:
        return v;
    }
}

static void check_case(const stem_case *sc, int threads) {
    kn_conv2d c = {.h = sc->h,
                   .w = sc->w,
                   .kh = sc->k,
                   .kw = sc->k,
                   .sh = sc->s,
                   .sw = sc->s,
                   .dh = 1,
                   .dw = 1,
                   .ph = sc->pt,
                   .pw = sc->pl};
    c.oh = (sc->h + sc->pt + sc->pb - sc->k) / sc->s + 1;
    c.ow = (sc->w + sc->pl + sc->pr - sc->k) / sc->s + 1;
    assert_true(kn_cpu_conv_stem_geometry(&c, sc->c, sc->m));
    int64_t os = c.oh * c.ow, taps = sc->c * sc->k * sc->k;
    float *x = rand_floats(sc->c * sc->h * sc->w), *w = rand_floats(sc->m * taps);
    float *bias = rand_floats(sc->m), *res = rand_floats(sc->m * os), *y = rand_floats(sc->m * os);
    kn_epilogue ep = {.bias = sc->bias ? bias : NULL,
                      .residual = sc->residual ? res : NULL,
                      .act = sc->act,
                      .alpha = 0.0f,
                      .beta = 6.0f};
    kn_threadpool *pool = kn_threadpool_create(threads);
    assert_int_equal(kn_cpu_conv_stem(pool, &c, sc->c, sc->m, x, w, &ep, y), KILN_OK);
    int bad = 0;
    for (int64_t m = 0; m < sc->m; m++)
        for (int64_t oy = 0; oy < c.oh; oy++)
            for (int64_t ox = 0; ox < c.ow; ox++) {
                double acc = sc->bias ? bias[m] : 0, mag = fabs(acc);
                for (int64_t ci = 0; ci < sc->c; ci++)
                    for (int64_t ky = 0; ky < sc->k; ky++)
                        for (int64_t kx = 0; kx < sc->k; kx++) {
                            int64_t iy = oy * sc->s - sc->pt + ky, ix = ox * sc->s - sc->pl + kx;
                            if (iy < 0 || iy >= sc->h || ix < 0 || ix >= sc->w)
                                continue;
                            double v = (double)x[(ci * sc->h + iy) * sc->w + ix] *
                                       w[((m * sc->c + ci) * sc->k + ky) * sc->k + kx];
                            acc += v;
                            mag += fabs(v);
                        }
                int64_t o = m * os + oy * c.ow + ox;
                if (sc->residual)
                    acc += res[o];
                double want = act_ref(sc->act, acc);
                if (!(fabs(y[o] - want) <= 1e-5 * (mag + 1)) && bad++ < 5)
                    print_error("m %lld y %lld x %lld: got %g want %g\n", (long long)m,
                                (long long)oy, (long long)ox, y[o], want);
            }
    assert_int_equal(bad, 0);
    kn_threadpool_destroy(pool);
    kn_free(x);
    kn_free(w);
    kn_free(bias);
    kn_free(res);
    kn_free(y);
}

/* {c, m, h, w, k, stride, pt, pl, pb, pr, bias, residual, act} */
static const stem_case cases[] = {
    {3, 32, 33, 35, 3, 2, 1, 1, 1, 1, true, false, KN_ACT_CLIP},     /* MobileNetV2 */
    {3, 64, 45, 50, 7, 2, 3, 3, 3, 3, true, false, KN_ACT_RELU},     /* ResNet-50 */
    {3, 16, 40, 141, 3, 2, 1, 1, 1, 1, true, true, KN_ACT_SWISH},    /* wide rows */
    {1, 24, 20, 37, 3, 1, 1, 1, 1, 1, false, false, KN_ACT_SIGMOID}, /* stride 1 */
    {4, 7, 19, 40, 5, 2, 2, 1, 0, 2, true, true, KN_ACT_HARD_SWISH}, /* odd pads */
    {2, 13, 17, 18, 3, 1, 0, 0, 0, 0, false, true, KN_ACT_NONE},     /* unpadded */
    {3, 6, 9, 140, 1, 1, 0, 0, 0, 0, true, false, KN_ACT_RELU},      /* 1x1 */
};

static void test_cases(void **state) {
    (void)state;
    if (!avx512()) {
        print_message("no AVX-512: the stem kernel does not run here\n");
        kn_conv2d c = {.h = 32,
                       .w = 32,
                       .oh = 16,
                       .ow = 16,
                       .kh = 3,
                       .kw = 3,
                       .sh = 2,
                       .sw = 2,
                       .dh = 1,
                       .dw = 1,
                       .ph = 1,
                       .pw = 1};
        assert_false(kn_cpu_conv_stem_geometry(&c, 3, 32));
        return;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_case(&cases[i], 1);
        check_case(&cases[i], 3);
    }
}

/* What the stem kernel does not take. */
static void test_applies(void **state) {
    (void)state;
    kn_conv2d c = {.h = 32,
                   .w = 32,
                   .oh = 16,
                   .ow = 16,
                   .kh = 3,
                   .kw = 3,
                   .sh = 2,
                   .sw = 2,
                   .dh = 1,
                   .dw = 1,
                   .ph = 1,
                   .pw = 1};
    assert_false(kn_cpu_conv_stem_geometry(&c, 5, 32)); /* 5 input channels */
    c.ow = 15;
    assert_false(kn_cpu_conv_stem_geometry(&c, 3, 32)); /* narrower than a vector */
    c.ow = 16;
    c.dh = c.dw = 2;
    assert_false(kn_cpu_conv_stem_geometry(&c, 3, 32)); /* dilated */
    c.dh = c.dw = 1;
    c.sh = c.sw = 3;
    assert_false(kn_cpu_conv_stem_geometry(&c, 3, 32)); /* stride 3 */
    c.sh = c.sw = 2;
    assert_int_equal(kn_cpu_conv_stem_geometry(&c, 3, 32), avx512());
    assert_false(kn_cpu_conv_stem_applies(&c, 3, 32)); /* 3x3: the GEMM's */
    c.kh = c.kw = 7;
    c.ph = c.pw = 3;
    kn_cpu_conv_stem_set_enabled(false);
    assert_false(kn_cpu_conv_stem_applies(&c, 3, 32));
    kn_cpu_conv_stem_set_enabled(true);
    assert_int_equal(kn_cpu_conv_stem_applies(&c, 3, 32), avx512());
}

/* A Conv node over [n, c, h, h], k x k at stride s, pads p, bias and an activation. */
typedef struct conv_node {
    test_node t;
    kn_tensor in[3], out;
} conv_node;

static void node_build(conv_node *b, int64_t n, int64_t c, int64_t m, int64_t h, int64_t k,
                       int64_t s, int64_t p, const char *act) {
    tn_init_domain(&b->t, "kiln", "FusedConv");
    tn_ints(&b->t, "kernel_shape", 2, (int64_t[]){k, k});
    tn_ints(&b->t, "strides", 2, (int64_t[]){s, s});
    tn_ints(&b->t, "pads", 4, (int64_t[]){p, p, p, p});
    tn_str(&b->t, "kiln_activation", act);
    if (strcmp(act, "Clip") == 0) {
        tn_float(&b->t, "kiln_alpha", 0.0f);
        tn_float(&b->t, "kiln_beta", 6.0f);
    }
    int64_t o = (h + 2 * p - k) / s + 1;
    b->in[0] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 4, .d = {n, c, h, h}}};
    b->in[1] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 4, .d = {m, c, k, k}}};
    b->in[2] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 1, .d = {m}}};
    b->out = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 4, .d = {n, m, o, o}}};
    for (int i = 0; i < 3; i++)
        b->in[i].data = rand_floats(kn_tensor_numel(&b->in[i]));
    b->out.data = rand_floats(kn_tensor_numel(&b->out));
}

static void node_free(conv_node *b) {
    for (int i = 0; i < 3; i++)
        kn_free(b->in[i].data);
    kn_free(b->out.data);
}

/* Prepare and run the node `runs` times; ms a run after the first. */
static double node_run(conv_node *b, kn_threadpool *pool, int runs) {
    const kn_kernel *kern = kn_backend_find_kernel(kn_backend_host(), "kiln", "FusedConv");
    assert_non_null(kern);
    void *st = NULL;
    assert_int_equal(kern->prepare(&b->t.node, 3, b->in, &st), KILN_OK);
    kn_kernel_ctx kc = {.node = &b->t.node,
                        .n_in = 3,
                        .in = b->in,
                        .n_out = 1,
                        .out = &b->out,
                        .state = st,
                        .pool = pool};
    assert_int_equal(kern->run(&kc), KILN_OK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 1; r < runs; r++)
        assert_int_equal(kern->run(&kc), KILN_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kern->release(st);
    return runs > 1 ? ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / (runs - 1)
                    : 0;
}

static void compare_paths(int64_t n, int64_t c, int64_t m, int64_t h, int64_t k, int64_t s,
                          int64_t p, const char *act) {
    conv_node b;
    node_build(&b, n, c, m, h, k, s, p, act);
    kn_conv_geom g;
    assert_int_equal(kn_conv_geom_init(&b.t.node, &b.in[0].shape, &b.in[1].shape, false, &g),
                     KILN_OK);
    kn_conv2d c2;
    kn_conv_as_2d(&g, &c2);
    assert_true(kn_cpu_conv_stem_applies(&c2, c, m));
    kn_threadpool *pool = kn_threadpool_create(2);
    int64_t count = kn_tensor_numel(&b.out);
    node_run(&b, pool, 1);
    float *on = kn_malloc((size_t)count * sizeof *on);
    assert_non_null(on);
    memcpy(on, b.out.data, (size_t)count * sizeof *on);
    kn_cpu_conv_stem_set_enabled(false);
    node_run(&b, pool, 1);
    kn_cpu_conv_stem_set_enabled(true);
    const float *off = b.out.data;
    int bad = 0;
    for (int64_t i = 0; i < count; i++)
        if (!(fabsf(on[i] - off[i]) <= 1e-4f * (1 + fabsf(off[i]))) && bad++ < 5)
            print_error("element %lld: %g against the GEMM path's %g\n", (long long)i, on[i],
                        off[i]);
    assert_int_equal(bad, 0);
    kn_free(on);
    kn_threadpool_destroy(pool);
    node_free(&b);
}

static void test_conv_kernel(void **state) {
    (void)state;
    if (!avx512())
        return; /* test_cases says why */
    compare_paths(1, 3, 32, 64, 7, 2, 3, "Clip");
    compare_paths(1, 3, 64, 70, 7, 2, 3, "Relu");
    compare_paths(1, 1, 16, 48, 5, 1, 2, "Swish"); /* 5x5, stride 1 */
}

static void bench_one(const char *name, int64_t c, int64_t m, int64_t h, int64_t k, int64_t s,
                      int64_t p, const char *act, int threads) {
    conv_node b;
    node_build(&b, 1, c, m, h, k, s, p, act);
    kn_threadpool *pool = kn_threadpool_create(threads);
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < 5; r++)
        for (int mode = 0; mode < 2; mode++) {
            kn_cpu_conv_stem_set_enabled(mode == 1);
            best[mode] = fmin(best[mode], node_run(&b, pool, 20));
        }
    kn_cpu_conv_stem_set_enabled(true);
    printf("%-34s %d thread(s): GEMM %.3f ms, direct %.3f ms (%.2fx)\n", name, threads, best[0],
           best[1], best[0] / best[1]);
    kn_threadpool_destroy(pool);
    node_free(&b);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        int t = argc > 2 ? atoi(argv[2]) : 1;
        t = t > 0 ? t : 1;
        bench_one("ResNet-50 7x7 s2 3->64 @224", 3, 64, 224, 7, 2, 3, "Relu", t);
        bench_one("5x5 s2 3->32 @224", 3, 32, 224, 5, 2, 2, "Swish", t);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_applies),
        cmocka_unit_test(test_conv_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
