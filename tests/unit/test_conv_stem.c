/* The direct convolution for few input channels (nn/conv_stem.c) against a reference in double:
 * 3x3, 4x4, 5x5 and 7x7 stems at stride 2, stride 1, 1 to 4 input channels, odd pads and pads
 * after only, output channels that do not fill a block, rows that end inside a vector, bias,
 * residual and every kind of activation, one and three threads, one image and three side by
 * side; stride 2 both over planes and read in place (tasks of 8 and of 16 channels); and the
 * Conv kernel, which takes it for one image and kernels of 25 taps or more, every stride-2 stem
 * read in place (a batch's too), against its own GEMM path. `test_conv_stem --bench [THREADS
 * [IMAGES]]` times instead four stems three ways through the Conv kernel: the GEMM's paths, the
 * kernel over planes, and read in place (no checks). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_conv_fp32.h"

#include <stdio.h>

typedef struct stem_case {
    int64_t c, m, h, w, k, s, pt, pl, pb, pr;
    bool bias, residual;
    int act;
} stem_case;

/* A k x k geometry of stride s, pads p, over an h x w input, undilated. */
static kn_conv2d stem_geom(int64_t h, int64_t w, int64_t k, int64_t s, int64_t pt, int64_t pl,
                           int64_t pb, int64_t pr) {
    kn_conv2d c = {
        .h = h, .w = w, .kh = k, .kw = k, .sh = s, .sw = s, .dh = 1, .dw = 1, .ph = pt, .pw = pl};
    c.oh = conv_out_dim(h, k, s, 1, pt, pb);
    c.ow = conv_out_dim(w, k, s, 1, pl, pr);
    return c;
}

/* `images` images side by side, each checked against the reference. */
static void check_case(const stem_case *sc, int threads, int64_t images) {
    kn_conv2d c = stem_geom(sc->h, sc->w, sc->k, sc->s, sc->pt, sc->pl, sc->pb, sc->pr);
    assert_true(kn_cpu_conv_stem_geometry(&c, sc->c, sc->m));
    int64_t os = c.oh * c.ow, taps = sc->c * sc->k * sc->k, xs = sc->c * sc->h * sc->w;
    float *x = conv_rand(images * xs), *w = conv_rand(sc->m * taps);
    float *bias = conv_rand(sc->m), *res = conv_rand(images * sc->m * os);
    float *y = conv_rand(images * sc->m * os);
    kn_epilogue ep = {.bias = sc->bias ? bias : NULL,
                      .residual = sc->residual ? res : NULL,
                      .act = sc->act,
                      .alpha = 0.0f,
                      .beta = 6.0f};
    kn_threadpool *pool = kn_threadpool_create(threads);
    assert_int_equal(kn_cpu_conv_stem(pool, &c, sc->c, sc->m, images, x, w, &ep, y), KILN_OK);
    for (int64_t i = 0; i < images; i++) {
        kn_epilogue ei = ep;
        if (ei.residual != NULL)
            ei.residual += i * sc->m * os;
        assert_int_equal(conv_check(&c, sc->c, sc->m, x + i * xs, w, &ei, y + i * sc->m * os), 0);
    }
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
    {3, 40, 30, 67, 3, 2, 0, 0, 1, 1, true, true, KN_ACT_CLIP},      /* pads after only */
    {2, 9, 16, 33, 4, 2, 1, 2, 2, 1, false, false, KN_ACT_RELU},     /* an even kernel */
    {1, 16, 21, 96, 7, 2, 3, 3, 3, 3, true, false, KN_ACT_SWISH},    /* 3 rows of 16 columns */
    {2, 13, 17, 18, 3, 1, 0, 0, 0, 0, false, true, KN_ACT_NONE},     /* unpadded */
    {3, 6, 9, 140, 1, 1, 0, 0, 0, 0, true, false, KN_ACT_RELU},      /* 1x1 */
};

static void test_cases(void **state) {
    (void)state;
    if (!conv_avx512()) {
        print_message("no AVX-512: the stem kernel does not run here\n");
        kn_conv2d c = stem_geom(32, 32, 3, 2, 1, 1, 1, 1);
        assert_false(kn_cpu_conv_stem_geometry(&c, 3, 32));
        return;
    }
    /* stride 2 over planes, then read in place by the rule's tasks, then 8 and 16 channels a
     * task whatever the kernel */
    static const struct {
        bool in_place;
        int group;
    } ways[] = {{false, 0}, {true, 0}, {true, 8}, {true, 16}};
    for (size_t k = 0; k < sizeof ways / sizeof ways[0]; k++) {
        kn_cpu_conv_stem_set_in_place(ways[k].in_place);
        kn_cpu_conv_stem_set_group(ways[k].group);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            check_case(&cases[i], 1, 1);
            check_case(&cases[i], 3, 1);
            check_case(&cases[i], 3, 3); /* a batch: every image's planes, rows of each in bands */
        }
    }
    kn_cpu_conv_stem_set_in_place(true);
    kn_cpu_conv_stem_set_group(0);
    /* an empty map: nothing read or written */
    kn_conv2d c = stem_geom(0, 40, 7, 2, 3, 3, 3, 3);
    c.oh = 0;
    kn_epilogue ep = {0};
    assert_int_equal(kn_cpu_conv_stem(NULL, &c, 3, 8, 1, NULL, NULL, &ep, NULL), KILN_OK);
}

/* What the stem kernel does not take. */
static void test_applies(void **state) {
    (void)state;
    kn_conv2d c = stem_geom(32, 32, 3, 2, 1, 1, 1, 1);
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
    assert_int_equal(kn_cpu_conv_stem_geometry(&c, 3, 32), conv_avx512());
    assert_int_equal(kn_cpu_conv_stem_applies(&c, 3, 32), conv_avx512()); /* 3x3: read in place */
    assert_true(kn_cpu_conv_stem_in_place(&c));
    kn_cpu_conv_stem_set_in_place(false);
    assert_false(kn_cpu_conv_stem_in_place(&c));
    assert_false(kn_cpu_conv_stem_applies(&c, 3, 32)); /* ... else the GEMM's */
    kn_cpu_conv_stem_set_in_place(true);
    c.kh = c.kw = 9;
    c.ph = c.pw = 4;
    assert_false(kn_cpu_conv_stem_in_place(&c)); /* wider than 7: planes */
    c.kh = c.kw = 3;
    c.ph = c.pw = 1;
    c.sh = c.sw = 1;
    assert_false(kn_cpu_conv_stem_in_place(&c));       /* stride 1: planes */
    assert_false(kn_cpu_conv_stem_applies(&c, 3, 32)); /* and 3x3 ones the GEMM's */
    c.sh = c.sw = 2;
    c.kh = c.kw = 7;
    c.ph = c.pw = 3;
    kn_cpu_conv_stem_set_enabled(false);
    assert_false(kn_cpu_conv_stem_applies(&c, 3, 32));
    kn_cpu_conv_stem_set_enabled(true);
    assert_int_equal(kn_cpu_conv_stem_applies(&c, 3, 32), conv_avx512());
}

/* The Conv kernel's output with the stem path on against the GEMM path's. */
static void compare_paths(int64_t n, int64_t c, int64_t m, int64_t h, int64_t k, int64_t s,
                          int64_t p, const char *act) {
    conv_node b;
    conv_node_build(&b, n, c, m, h, k, s, p, act, false);
    kn_conv2d c2;
    conv_node_geometry(&b, &c2);
    assert_true(kn_cpu_conv_stem_applies(&c2, c, m));
    assert_int_equal(conv_node_paths_differ(&b, 2, kn_cpu_conv_stem_set_enabled), 0);
    conv_node_free(&b);
}

static void test_conv_kernel(void **state) {
    (void)state;
    if (!conv_avx512())
        return;                           /* test_cases says why */
    kn_cpu_conv_stem_set_in_place(false); /* over planes */
    compare_paths(1, 3, 32, 64, 7, 2, 3, "Clip");
    compare_paths(1, 3, 64, 70, 7, 2, 3, "Relu");
    compare_paths(1, 1, 16, 48, 5, 1, 2, "Swish"); /* 5x5, stride 1 */
    kn_cpu_conv_stem_set_batches(true);            /* a batch's images in one call */
    compare_paths(3, 3, 64, 70, 7, 2, 3, "Relu");
    kn_cpu_conv_stem_set_batches(false);
    kn_cpu_conv_stem_set_in_place(true);
    /* stride 2 read in place, the default: 3x3, and a batch in one call */
    compare_paths(1, 3, 32, 64, 3, 2, 1, "Clip");
    compare_paths(3, 3, 24, 50, 3, 2, 1, "Swish");
    compare_paths(2, 3, 64, 70, 7, 2, 3, "Relu");
}

/* The Conv kernel three ways: the GEMM's paths, the stem kernel over planes, and (stride 2)
 * the stem kernel reading its input in place. */
static void bench_one(const char *name, int64_t n, int64_t c, int64_t m, int64_t h, int64_t k,
                      int64_t s, int64_t p, const char *act, int threads) {
    conv_node b;
    conv_node_build(&b, n, c, m, h, k, s, p, act, false);
    kn_threadpool *pool = kn_threadpool_create(threads);
    double best[3] = {1e30, 1e30, 1e30};
    bool batches = kn_cpu_conv_stem_batches();
    kn_cpu_conv_stem_set_batches(true);
    for (int r = 0; r < 5; r++)
        for (int mode = 0; mode < 3; mode++) {
            kn_cpu_conv_stem_set_enabled(mode > 0);
            kn_cpu_conv_stem_set_in_place(mode == 2);
            best[mode] = fmin(best[mode], conv_node_run(&b, pool, 20, false));
        }
    kn_cpu_conv_stem_set_enabled(true);
    kn_cpu_conv_stem_set_in_place(true);
    kn_cpu_conv_stem_set_batches(batches);
    printf("%-30s x%lld, %d thread(s): GEMM %.3f ms, planes %.3f, in place %.3f (%.2fx, %.2fx)\n",
           name, (long long)n, threads, best[0], best[1], best[2], best[0] / best[2],
           best[1] / best[2]);
    kn_threadpool_destroy(pool);
    conv_node_free(&b);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        int t = argc > 2 ? atoi(argv[2]) : 1;
        t = t > 0 ? t : 1;
        int64_t n = argc > 3 ? atoi(argv[3]) : 1;
        n = n > 0 ? n : 1;
        bench_one("ResNet-50 7x7 s2 3->64 @224", n, 3, 64, 224, 7, 2, 3, "Relu", t);
        bench_one("MobileNetV2 3x3 s2 3->32 @224", n, 3, 32, 224, 3, 2, 1, "Clip", t);
        bench_one("YOLO 3x3 s2 3->16 @320", n, 3, 16, 320, 3, 2, 1, "Swish", t);
        bench_one("5x5 s2 3->32 @224", n, 3, 32, 224, 5, 2, 2, "Swish", t);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_applies),
        cmocka_unit_test(test_conv_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
