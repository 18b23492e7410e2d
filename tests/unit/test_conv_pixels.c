/* The fp32 pixel-row convolution (nn/conv_pixels.c) against a reference in double: 1x1 convs
 * read in place (channel tails, maps of 1 to 196 pixels), stride-2 kernels over phase planes
 * (3x3, the 7x7 stem on 3 channels, 2x2), padded and dilated stride-1 kernels, bias, residual
 * and every kind of activation (in registers or after the store), one and three threads, and
 * three images side by side on four; and the Conv kernel, which takes this path for the shapes
 * kn_cpu_conv_pixels_applies picks for one image, and a batch's convs as each value of
 * KILN_CPU_CONV_PIXELS_BATCH picks them (kn_cpu_conv_pixels_takes), against its own GEMM path
 * (KILN_CPU_CONV_PIXELS=0), also where prepare did not know the input's shape.
 * `test_conv_pixels --bench [THREADS [--cold]]` times instead ResNet-50's and MobileNetV2's
 * layers on this path (mode 2) against the GEMM path through the Conv kernel (no checks). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_conv_fp32.h"

#include <pthread.h>
#include <stdio.h>

typedef struct px_case {
    int64_t c, m, h, w, kh, kw, s, d, pt, pl, pb, pr;
    bool bias, residual;
    int act;
} px_case;

static void geometry(const px_case *pc, kn_conv2d *c) {
    *c = (kn_conv2d){.h = pc->h,
                     .w = pc->w,
                     .kh = pc->kh,
                     .kw = pc->kw,
                     .sh = pc->s,
                     .sw = pc->s,
                     .dh = pc->d,
                     .dw = pc->d,
                     .ph = pc->pt,
                     .pw = pc->pl};
    c->oh = conv_out_dim(pc->h, pc->kh, pc->s, pc->d, pc->pt, pc->pb);
    c->ow = conv_out_dim(pc->w, pc->kw, pc->s, pc->d, pc->pl, pc->pr);
}

/* Runs the case over `images` images side by side on `threads` threads into y (images x m x
 * oh x ow floats), each image against the reference. */
static void run_case(const px_case *pc, int threads, int64_t images, float *y) {
    kn_conv2d c;
    geometry(pc, &c);
    int64_t os = c.oh * c.ow, xi = pc->c * pc->h * pc->w, yi = pc->m * os;
    float *x = conv_rand(images * xi), *w = conv_rand(pc->m * pc->c * pc->kh * pc->kw);
    float *bias = conv_rand(pc->m), *res = conv_rand(images * yi);
    kn_conv_pixels *p;
    assert_int_equal(kn_cpu_conv_pixels_prepare(w, pc->m, pc->c, pc->kh, pc->kw, &p), KILN_OK);
    kn_epilogue ep = {.bias = pc->bias ? bias : NULL,
                      .residual = pc->residual ? res : NULL,
                      .act = pc->act,
                      .alpha = pc->act == KN_ACT_CLIP ? -0.5f : 0.1f,
                      .beta = 0.75f};
    kn_threadpool *pool = kn_threadpool_create(threads);
    assert_int_equal(kn_cpu_conv_pixels(pool, p, &c, images, x, &ep, y), KILN_OK);
    for (int64_t i = 0; i < images; i++) {
        kn_epilogue e = ep;
        e.residual = pc->residual ? res + i * yi : NULL;
        assert_int_equal(conv_check(&c, pc->c, pc->m, x + i * xi, w, &e, y + i * yi), 0);
    }
    kn_threadpool_destroy(pool);
    kn_cpu_conv_pixels_free(p);
    kn_free(x);
    kn_free(w);
    kn_free(bias);
    kn_free(res);
}

static void check_case(const px_case *pc, int threads, int64_t images) {
    kn_conv2d c;
    geometry(pc, &c);
    float *y = conv_rand(images * pc->m * c.oh * c.ow);
    run_case(pc, threads, images, y);
    kn_free(y);
}

/* {c, m, h, w, kh, kw, stride, dilation, pt, pl, pb, pr, bias, residual, act} */
static const px_case cases[] = {
    {576, 96, 14, 14, 1, 1, 1, 1, 0, 0, 0, 0, true, false, KN_ACT_NONE},       /* 1x1 */
    {160, 320, 7, 7, 1, 1, 1, 1, 0, 0, 0, 0, true, true, KN_ACT_RELU},         /* 7x7 map */
    {64, 40, 5, 5, 1, 1, 1, 1, 0, 0, 0, 0, false, true, KN_ACT_CLIP},          /* channel tail */
    {70, 17, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, true, false, KN_ACT_SIGMOID},       /* one pixel */
    {33, 50, 3, 11, 1, 1, 1, 1, 0, 0, 0, 0, true, true, KN_ACT_SWISH},         /* odd */
    {128, 128, 56, 56, 3, 3, 2, 1, 1, 1, 1, 1, true, false, KN_ACT_RELU},      /* stride 2 */
    {64, 96, 14, 14, 3, 3, 2, 1, 1, 1, 1, 1, true, true, KN_ACT_RELU},         /* s2 7x7 out */
    {3, 64, 37, 41, 7, 7, 2, 1, 3, 3, 3, 3, true, false, KN_ACT_RELU},         /* the stem */
    {24, 48, 15, 13, 2, 2, 2, 1, 0, 0, 0, 0, false, false, KN_ACT_HARD_SWISH}, /* 2x2 */
    {40, 36, 13, 12, 3, 3, 2, 1, 0, 1, 1, 0, true, true, KN_ACT_LEAKY_RELU},   /* odd pads */
    {64, 33, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, true, true, KN_ACT_CLIP},           /* 3x3 */
    {48, 64, 13, 11, 3, 3, 1, 2, 2, 2, 2, 2, true, false, KN_ACT_SIGMOID},     /* dilation 2 */
    {32, 80, 10, 9, 5, 5, 1, 1, 2, 2, 2, 2, false, true, KN_ACT_SWISH},        /* 5x5 */
    {64, 32, 8, 8, 3, 3, 1, 1, 0, 0, 0, 0, true, false, KN_ACT_NONE},          /* unpadded */
    {20, 24, 9, 30, 3, 1, 1, 1, 1, 0, 2, 0, true, true, KN_ACT_HARD_SWISH},    /* 3x1, wide */
    {40, 48, 9, 11, 1, 1, 2, 1, 0, 0, 0, 0, true, true, KN_ACT_RELU},          /* 1x1 s2 */
    {64, 32, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, true, false, KN_ACT_NONE},          /* 1x1 padded */
};

/* A square 2-D conv's geometry: h x h in, oh x oh out, a k x k kernel, stride s, padding p. */
static kn_conv2d square_conv(int64_t h, int64_t oh, int64_t k, int64_t s, int64_t p) {
    return (kn_conv2d){.h = h,
                       .w = h,
                       .oh = oh,
                       .ow = oh,
                       .kh = k,
                       .kw = k,
                       .sh = s,
                       .sw = s,
                       .ph = p,
                       .pw = p,
                       .dh = 1,
                       .dw = 1};
}

static void test_cases(void **state) {
    (void)state;
    if (!conv_avx512()) {
        print_message("no AVX-512: the pixel-row conv does not run here\n");
        kn_conv2d c7 = square_conv(7, 7, 1, 1, 0);
        assert_false(kn_cpu_conv_pixels_applies(&c7, 256, 256, 16));
        return;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_case(&cases[i], 1, 1);
        check_case(&cases[i], 3, 1);
        check_case(&cases[i], 4, 3); /* three images side by side */
    }
    /* an empty map: nothing read or written */
    /* a flat conv's X read in place (the default) or copied into 16-channel planes by a job
     * (KILN_CPU_CONV_PIXELS_COPY=job): the reference's results at 1 to 16 threads (8 threads over
     * a 7x7 map's 4 tiles; 16 over a 14x14 map's 14), and the same bits both ways (the same K
     * order) */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const px_case *pc = &cases[i];
        if (pc->kh != 1 || pc->kw != 1 || pc->s != 1)
            continue;
        kn_conv2d c;
        geometry(pc, &c);
        int64_t n = pc->m * c.oh * c.ow;
        for (int threads = 1; threads <= 16; threads *= 2) {
            float *in_place = conv_rand(n), *job = conv_rand(n);
            conv_rng = 1234u; /* the same x, w, bias and residual */
            run_case(pc, threads, 1, in_place);
            kn_cpu_conv_pixels_set_copy(KN_PIXELS_COPY_JOB);
            conv_rng = 1234u;
            run_case(pc, threads, 1, job);
            kn_cpu_conv_pixels_set_copy(KN_PIXELS_IN_PLACE);
            assert_memory_equal(in_place, job, (size_t)n * sizeof(float));
            kn_free(in_place);
            kn_free(job);
        }
    }
    kn_conv_pixels *p;
    float w[64 * 16];
    memset(w, 0, sizeof w);
    assert_int_equal(kn_cpu_conv_pixels_prepare(w, 16, 64, 1, 1, &p), KILN_OK);
    kn_conv2d c = {.kh = 1, .kw = 1, .sh = 1, .sw = 1, .dh = 1, .dw = 1};
    kn_epilogue ep = {0};
    assert_int_equal(kn_cpu_conv_pixels(NULL, p, &c, 1, NULL, &ep, NULL), KILN_OK);
    kn_cpu_conv_pixels_free(p);
}

/* --bench --cold: weights, input and output from memory rather than the caches. */
static bool bench_cold;

/* The mode that turns the path on for conv_node_paths_differ. */
static int on_mode = 1;

static void pixels_toggle(bool on) {
    kn_cpu_conv_pixels_set_mode(on ? on_mode : 0);
}

/* The Conv kernel's output with the path on (mode 1: the shapes it picks on 8 threads, on 2
 * where `on_two` and on 1 where `on_one`; 2: wherever the geometry allows) against the GEMM
 * path's. */
static void compare_paths(int mode, int64_t n, int64_t c, int64_t m, int64_t h, int64_t k,
                          int64_t s, int64_t p, bool on_two, bool on_one) {
    conv_node b;
    conv_node_build(&b, n, c, m, h, k, s, p, "Relu", true);
    kn_conv2d c2;
    conv_node_geometry(&b, &c2);
    kn_cpu_conv_pixels_set_mode(mode);
    assert_true(kn_cpu_conv_pixels_applies(&c2, c, m, 8));
    assert_int_equal(kn_cpu_conv_pixels_applies(&c2, c, m, 2), on_two);
    if (mode == 1)
        assert_int_equal(kn_cpu_conv_pixels_applies(&c2, c, m, 1), on_one);
    on_mode = mode;
    assert_int_equal(conv_node_paths_differ(&b, 8, pixels_toggle), 0);
    kn_cpu_conv_pixels_set_mode(1);
    conv_node_free(&b);
}

/* A batch's 3x3 stride-2 conv (padding 1) that the one-image rule leaves to the GEMM and the
 * default batch rule gives the path on 8 threads: its output against the GEMM path's. */
static void compare_batch_paths(int64_t n, int64_t c, int64_t m, int64_t h) {
    conv_node b;
    conv_node_build(&b, n, c, m, h, 3, 2, 1, "Relu", true);
    kn_conv2d c2;
    conv_node_geometry(&b, &c2);
    kn_cpu_conv_pixels_set_mode(1);
    assert_false(kn_cpu_conv_pixels_applies(&c2, c, m, 8));
    assert_true(kn_cpu_conv_pixels_takes(&c2, c, m, n, 8));
    on_mode = 1;
    assert_int_equal(conv_node_paths_differ(&b, 8, pixels_toggle), 0);
    conv_node_free(&b);
}

static void test_conv_kernel(void **state) {
    (void)state;
    if (!conv_avx512())
        return; /* test_cases says why */
    /* 1x1 over a 14x14 map: 8+ threads, and 1 (narrowing, K >= 160) */
    compare_paths(1, 1, 256, 64, 14, 1, 1, 0, false, true);
    compare_paths(1, 1, 1024, 64, 14, 1, 1, 0, true, true);    /* a deep K narrowed: 2+, 1 */
    compare_paths(1, 1, 576, 96, 7, 1, 1, 0, true, true);      /* narrowing over 7x7 */
    compare_paths(1, 1, 160, 960, 7, 1, 1, 0, false, true);    /* widening a short K: 8+, 1 */
    compare_paths(1, 1, 256, 512, 7, 1, 1, 0, true, true);     /* widening a deep K over 7x7 */
    compare_paths(1, 1, 256, 1024, 14, 1, 1, 0, false, false); /* widening over 14x14: 8+ */
    compare_paths(1, 1, 2048, 512, 7, 1, 1, 0, true, false);   /* 4 MB of weights: 2+ */
    compare_paths(1, 1, 128, 32, 14, 3, 2, 1, true, false);    /* stride 2 into 7x7, K 1152 */
    compare_paths(2, 1, 64, 128, 28, 3, 2, 1, true, false);    /* stride 2 */
    compare_paths(2, 1, 3, 40, 30, 7, 2, 3, true, false);      /* a 7x7 stem, channel tail */
    /* batches: side by side on this path where the switch lets them, else the GEMM's */
    kn_cpu_conv_pixels_set_batches(0);
    compare_paths(1, 3, 1024, 64, 14, 1, 1, 0, true, true);
    kn_cpu_conv_pixels_set_batches(1); /* flat convs */
    compare_paths(1, 3, 1024, 64, 14, 1, 1, 0, true, true);
    compare_paths(1, 5, 256, 512, 7, 1, 1, 0, true, true);
    kn_cpu_conv_pixels_set_order(0); /* a batch's tasks panels first, as for one image */
    compare_paths(1, 5, 256, 512, 7, 1, 1, 0, true, true);
    kn_cpu_conv_pixels_set_order(1);
    kn_cpu_conv_pixels_set_batches(2); /* stride-2 ones too: each image's planes */
    compare_paths(1, 2, 128, 32, 14, 3, 2, 1, true, false);
    compare_paths(2, 3, 64, 40, 15, 3, 2, 1, true, false);
    /* the default: flat convs, and 3x3 stride-2 convs into 50 to 196 pixels from 8 threads */
    kn_cpu_conv_pixels_set_batches(3);
    compare_paths(1, 3, 1024, 64, 14, 1, 1, 0, true, true);
    compare_batch_paths(3, 64, 40, 27); /* into 14x14 */
    compare_batch_paths(4, 32, 48, 20); /* into 10x10 */
    kn_conv2d s14 = square_conv(28, 14, 3, 2, 1), s28 = square_conv(56, 28, 3, 2, 1),
              s7 = square_conv(14, 7, 3, 2, 1);
    assert_true(kn_cpu_conv_pixels_takes(&s14, 256, 256, 8, 16));
    assert_true(kn_cpu_conv_pixels_takes(&s14, 256, 256, 8, 8));
    assert_false(kn_cpu_conv_pixels_takes(&s14, 256, 256, 8, 4));
    assert_false(kn_cpu_conv_pixels_takes(&s14, 256, 256, 64, 16)); /* 118 MB of copies */
    assert_false(kn_cpu_conv_pixels_takes(&s14, 3, 64, 8, 16));     /* a stem */
    assert_false(kn_cpu_conv_pixels_takes(&s28, 128, 128, 8, 16));
    assert_false(kn_cpu_conv_pixels_takes(&s7, 64, 64, 8, 16));
    assert_true(kn_cpu_conv_pixels_applies(&s7, 512, 512, 16));   /* one image: K >= 1024 */
    assert_false(kn_cpu_conv_pixels_takes(&s7, 512, 512, 8, 16)); /* a batch: the GEMM */
    kn_cpu_conv_pixels_set_batches(0);
    assert_false(kn_cpu_conv_pixels_takes(&s14, 256, 256, 8, 16));
    assert_true(kn_cpu_conv_pixels_takes(&s14, 256, 256, 1, 16) ==
                kn_cpu_conv_pixels_applies(&s14, 256, 256, 16)); /* one image: the rule */
    kn_cpu_conv_pixels_set_batches(3);
}

/* The pixel-row weights are packed by the first run that takes the path, not at prepare: a
 * context on 2 threads never packs them; then several contexts of 8 threads race to pack them,
 * one packing is kept, and every output matches the GEMM path's. The GEMM's own packing of such
 * a conv likewise waits for its first run on fewer threads (raced on a fresh state). */
typedef struct lazy_run {
    const kn_kernel *kern;
    conv_node *b;
    void *st;
    float *out;
    int threads;
    kiln_status rc;
} lazy_run;

static void *lazy_worker(void *arg) {
    lazy_run *r = arg;
    kn_threadpool *pool = kn_threadpool_create(r->threads);
    kn_tensor out = r->b->out;
    out.data = r->out;
    kn_kernel_ctx kc = conv_node_ctx(r->b, r->st, pool, &out);
    r->rc = r->kern->run(&kc);
    kn_threadpool_destroy(pool);
    return NULL;
}

/* Three contexts of `threads` threads each run the conv at once on one prepared state: every
 * output matches ref. */
static void race(const kn_kernel *kern, conv_node *b, void *st, int threads, const float *ref,
                 int64_t count) {
    enum { RUNNERS = 3 };
    lazy_run r[RUNNERS];
    pthread_t t[RUNNERS];
    for (int i = 0; i < RUNNERS; i++) {
        r[i] = (lazy_run){.kern = kern, .b = b, .st = st, .threads = threads};
        r[i].out = kn_malloc((size_t)count * sizeof(float));
        assert_non_null(r[i].out);
        assert_int_equal(pthread_create(&t[i], NULL, lazy_worker, &r[i]), 0);
    }
    for (int i = 0; i < RUNNERS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(r[i].rc, KILN_OK);
        assert_int_equal(conv_paths_differ(r[i].out, ref, count), 0);
        kn_free(r[i].out);
    }
}

/* The conv's output on the GEMM path (the reference for the path's runs), kn_malloc'd. */
static float *gemm_output(conv_node *b, int64_t count) {
    kn_cpu_conv_pixels_set_mode(0);
    conv_node_run(b, NULL, 1, false);
    kn_cpu_conv_pixels_set_mode(1);
    float *ref = kn_malloc((size_t)count * sizeof *ref);
    assert_non_null(ref);
    memcpy(ref, b->out.data, (size_t)count * sizeof *ref);
    return ref;
}

/* One run of the prepared state st on a pool of `threads` threads into b->out. */
static void run_once(const kn_kernel *kern, conv_node *b, void *st, int threads) {
    kn_threadpool *pool = kn_threadpool_create(threads);
    kn_kernel_ctx kc = conv_node_ctx(b, st, pool, &b->out);
    assert_int_equal(kern->run(&kc), KILN_OK);
    kn_threadpool_destroy(pool);
}

static void test_weights_on_first_use(void **state) {
    (void)state;
    if (!conv_avx512())
        return; /* test_cases says why */
    kn_cpu_conv_pixels_set_mode(1);
    conv_node b;
    conv_node_build(&b, 1, 160, 960, 7, 1, 1, 0, "Clip", true); /* widening: 8+ threads */
    int64_t count = kn_tensor_numel(&b.out);
    float *ref = gemm_output(&b, count);

    const kn_kernel *kern = kn_backend_find_kernel(kn_backend_host(), "kiln", "FusedConv");
    void *st = NULL;
    assert_int_equal(kern->prepare(&b.t.node, b.n_in, b.in, &st), KILN_OK);
    assert_false(kn_cpu_conv_pixels_packed(st));
    run_once(kern, &b, st, 2);
    assert_false(kn_cpu_conv_pixels_packed(st));
    assert_int_equal(conv_paths_differ(b.out.data, ref, count), 0);

    race(kern, &b, st, 8, ref, count);
    /* contexts on 2 threads racing to pack the GEMM's weights, which a conv that may take the
     * pixel-row path also leaves to its first run that needs them */
    void *fresh = NULL;
    assert_int_equal(kern->prepare(&b.t.node, b.n_in, b.in, &fresh), KILN_OK);
    race(kern, &b, fresh, 2, ref, count);
    assert_false(kn_cpu_conv_pixels_packed(fresh));
    kern->release(fresh);
    assert_true(kn_cpu_conv_pixels_packed(st));
    kern->release(st);
    kn_free(ref);
    conv_node_free(&b);
}

/* An input whose shape prepare does not know (a dynamic batch: its dims read 0 there): the GEMM's
 * weights are packed at prepare, and a run on 8 threads at a shape the rule takes still takes
 * the path (packing its weights), with the GEMM path's output. */
static void test_dynamic_shape(void **state) {
    (void)state;
    if (!conv_avx512())
        return; /* test_cases says why */
    kn_cpu_conv_pixels_set_mode(1);
    conv_node b;
    conv_node_build(&b, 1, 576, 96, 14, 1, 1, 0, "Relu", true); /* narrowing over 14x14 */
    int64_t count = kn_tensor_numel(&b.out);
    float *ref = gemm_output(&b, count);

    const kn_kernel *kern = kn_backend_find_kernel(kn_backend_host(), "kiln", "FusedConv");
    kn_tensor prep[KN_MAX_NODE_IO];
    memcpy(prep, b.in, (size_t)b.n_in * sizeof *prep);
    prep[0].data = NULL;
    prep[0].shape.d[0] = 0; /* the batch dim unknown */
    void *st = NULL;
    assert_int_equal(kern->prepare(&b.t.node, b.n_in, prep, &st), KILN_OK);
    assert_false(kn_cpu_conv_pixels_packed(st));
    memset(b.out.data, 0, (size_t)count * sizeof(float));
    run_once(kern, &b, st, 8);
    assert_true(kn_cpu_conv_pixels_packed(st));
    assert_int_equal(conv_paths_differ(b.out.data, ref, count), 0);
    kern->release(st);
    kn_free(ref);
    conv_node_free(&b);
}

static void bench_one(const char *name, int64_t c, int64_t m, int64_t h, int64_t k, int64_t s,
                      int64_t p, int threads) {
    conv_node b;
    conv_node_build(&b, 1, c, m, h, k, s, p, "Relu", true);
    kn_threadpool *pool = kn_threadpool_create(threads);
    double t[2][5];
    for (int r = 0; r < 5; r++)
        for (int mode = 0; mode < 2; mode++) {
            kn_cpu_conv_pixels_set_mode(mode == 1 ? 2 : 0);
            t[mode][r] = conv_node_run(&b, pool, 20, bench_cold);
        }
    kn_cpu_conv_pixels_set_mode(1);
    double best[2] = {1e30, 1e30};
    for (int mode = 0; mode < 2; mode++)
        for (int r = 0; r < 5; r++)
            best[mode] = fmin(best[mode], t[mode][r]);
    printf("%-36s %d thread(s): GEMM %.3f ms, pixel rows %.3f ms (%.2fx)\n", name, threads, best[0],
           best[1], best[0] / best[1]);
    kn_threadpool_destroy(pool);
    conv_node_free(&b);
}

static void run_bench(int threads) {
    bench_one("R50 layer2.0.conv2 3x3 s2 128@56", 128, 128, 56, 3, 2, 1, threads);
    bench_one("R50 layer3.0.conv2 3x3 s2 256@28", 256, 256, 28, 3, 2, 1, threads);
    bench_one("R50 layer4.0.conv2 3x3 s2 512@14", 512, 512, 14, 3, 2, 1, threads);
    bench_one("R50 stem 7x7 s2 3->64 @224", 3, 64, 224, 7, 2, 3, threads);
    bench_one("R50 layer3 1x1 1024->256 @14", 1024, 256, 14, 1, 1, 0, threads);
    bench_one("R50 layer3 1x1 256->1024 @14", 256, 1024, 14, 1, 1, 0, threads);
    bench_one("R50 layer4 1x1 2048->512 @7", 2048, 512, 7, 1, 1, 0, threads);
    bench_one("R50 layer4 1x1 512->2048 @7", 512, 2048, 7, 1, 1, 0, threads);
    bench_one("R50 layer2 1x1 512->128 @28", 512, 128, 28, 1, 1, 0, threads);
    bench_one("R50 layer2 1x1 128->512 @28", 128, 512, 28, 1, 1, 0, threads);
    bench_one("MNV2 1x1 576->96 @14", 576, 96, 14, 1, 1, 0, threads);
    bench_one("MNV2 1x1 96->576 @14", 96, 576, 14, 1, 1, 0, threads);
    bench_one("MNV2 1x1 960->160 @7", 960, 160, 7, 1, 1, 0, threads);
    bench_one("MNV2 1x1 160->960 @7", 160, 960, 7, 1, 1, 0, threads);
    bench_one("MNV2 1x1 320->1280 @7", 320, 1280, 7, 1, 1, 0, threads);
    bench_one("MNV2 1x1 192->64 @28", 192, 64, 28, 1, 1, 0, threads);
    bench_one("MNV2 stem 3x3 s2 3->32 @224", 3, 32, 224, 3, 2, 1, threads);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        int threads = argc > 2 ? atoi(argv[2]) : 1;
        bench_cold = argc > 3 && strcmp(argv[3], "--cold") == 0;
        run_bench(threads > 0 ? threads : 1);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_conv_kernel),
        cmocka_unit_test(test_weights_on_first_use),
        cmocka_unit_test(test_dynamic_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
