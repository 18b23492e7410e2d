/* What the fp32 conv path tests share (test_conv_pixels.c, test_conv_stem.c): random data, a
 * reference convolution in double with its epilogue, and a kiln.FusedConv node run through the
 * host's Conv kernel (prepare, run, timing). Include after cmocka.h. */
#ifndef KN_TEST_CONV_FP32_H
#define KN_TEST_CONV_FP32_H

#include "backend/backend.h"
#include "backend/cpu/nn/conv.h"
#include "core/alloc.h"
#include "core/threadpool.h"
#include "test_node.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint32_t conv_rng = 777;

static inline float conv_frand(void) {
    conv_rng = conv_rng * 1664525u + 1013904223u;
    return (float)((conv_rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* n floats in [-1, 1), 64-byte aligned (kn_free). */
static inline float *conv_rand(int64_t n) {
    float *p = kn_aligned_alloc((size_t)(n > 0 ? n : 1) * sizeof *p, 64);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = conv_frand();
    return p;
}

static inline bool conv_avx512(void) {
    return strcmp(kn_gemm_isa(), "avx512") == 0;
}

/* The epilogue's activation in double: CLIP to [lo, hi], LEAKY_RELU with slope 0.1. */
static inline double conv_act_ref(int act, double v, double lo, double hi) {
    switch (act) {
    case KN_ACT_RELU:
        return v > 0 ? v : 0;
    case KN_ACT_CLIP:
        return v < lo ? lo : v > hi ? hi : v;
    case KN_ACT_SIGMOID:
        return 1.0 / (1.0 + exp(-v));
    case KN_ACT_SWISH:
        return v / (1.0 + exp(-v));
    case KN_ACT_LEAKY_RELU:
        return v < 0 ? 0.1 * v : v;
    case KN_ACT_HARD_SWISH:
        return v * fmin(fmax(v / 6 + 0.5, 0), 1);
    default:
        return v;
    }
}

/* Output size along one dim. */
static inline int64_t conv_out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0,
                                   int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

/* How many outputs of y (one image, NCHW, c's geometry, m channels) differ from a reference in
 * double over x (cin planes), w [m, cin, kh, kw], the bias and residual (or NULL) and
 * ep->act, by more than 1e-5 of the products' magnitude; prints the first five. */
static inline int conv_check(const kn_conv2d *c, int64_t cin, int64_t m, const float *x,
                             const float *w, const kn_epilogue *ep, const float *y) {
    int64_t os = c->oh * c->ow;
    int bad = 0;
    for (int64_t o = 0; o < m; o++)
        for (int64_t oy = 0; oy < c->oh; oy++)
            for (int64_t ox = 0; ox < c->ow; ox++) {
                double acc = ep->bias != NULL ? ep->bias[o] : 0, mag = fabs(acc);
                for (int64_t ci = 0; ci < cin; ci++)
                    for (int64_t ky = 0; ky < c->kh; ky++)
                        for (int64_t kx = 0; kx < c->kw; kx++) {
                            int64_t iy = oy * c->sh - c->ph + ky * c->dh;
                            int64_t ix = ox * c->sw - c->pw + kx * c->dw;
                            if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w)
                                continue;
                            double v = (double)x[(ci * c->h + iy) * c->w + ix] *
                                       w[((o * cin + ci) * c->kh + ky) * c->kw + kx];
                            acc += v;
                            mag += fabs(v);
                        }
                int64_t at = o * os + oy * c->ow + ox;
                if (ep->residual != NULL)
                    acc += ep->residual[at];
                double want = conv_act_ref(ep->act, acc, ep->alpha, ep->beta);
                if (!(fabs(y[at] - want) <= 1e-5 * (mag + 1)) && bad++ < 5)
                    print_error("m %lld y %lld x %lld: got %g want %g\n", (long long)o,
                                (long long)oy, (long long)ox, y[at], want);
            }
    return bad;
}

/* A kiln.FusedConv over [n, c, h, h], k x k at stride s, pads p on every side, bias, the
 * activation `act` (Clip: to [0, 6]) and, with residual, a residual input. */
typedef struct conv_node {
    test_node t;
    kn_tensor in[4], out;
    int n_in;
} conv_node;

static inline void conv_node_build(conv_node *b, int64_t n, int64_t c, int64_t m, int64_t h,
                                   int64_t k, int64_t s, int64_t p, const char *act,
                                   bool residual) {
    tn_init_domain(&b->t, "kiln", "FusedConv");
    tn_ints(&b->t, "kernel_shape", 2, (int64_t[]){k, k});
    tn_ints(&b->t, "strides", 2, (int64_t[]){s, s});
    tn_ints(&b->t, "pads", 4, (int64_t[]){p, p, p, p});
    tn_str(&b->t, "kiln_activation", act);
    if (strcmp(act, "Clip") == 0) {
        tn_float(&b->t, "kiln_alpha", 0.0f);
        tn_float(&b->t, "kiln_beta", 6.0f);
    }
    if (residual)
        tn_int(&b->t, "kiln_residual", 1);
    int64_t o = (h + 2 * p - k) / s + 1;
    b->n_in = residual ? 4 : 3;
    b->in[0] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 4, .d = {n, c, h, h}}};
    b->in[1] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 4, .d = {m, c, k, k}}};
    b->in[2] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 1, .d = {m}}};
    b->in[3] = (kn_tensor){.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 4, .d = {n, m, o, o}}};
    b->out = b->in[3];
    for (int i = 0; i < b->n_in; i++)
        b->in[i].data = conv_rand(kn_tensor_numel(&b->in[i]));
    b->out.data = conv_rand(kn_tensor_numel(&b->out));
}

static inline void conv_node_free(conv_node *b) {
    for (int i = 0; i < b->n_in; i++)
        kn_free(b->in[i].data);
    kn_free(b->out.data);
}

/* The context of one run of the node's prepared state st on pool, into out. */
static inline kn_kernel_ctx conv_node_ctx(conv_node *b, void *st, kn_threadpool *pool,
                                          kn_tensor *out) {
    return (kn_kernel_ctx){.node = &b->t.node,
                           .n_in = b->n_in,
                           .in = b->in,
                           .n_out = 1,
                           .out = out,
                           .state = st,
                           .pool = pool};
}

/* Prepare (where the paths are chosen) and run the node `runs` times; ms a run after the first.
 * cold: a 64 MB sweep before each timed run, so that weights, input and output come from memory
 * as in a model rather than from the caches. */
static inline double conv_node_run(conv_node *b, kn_threadpool *pool, int runs, bool cold) {
    const kn_kernel *kern = kn_backend_find_kernel(kn_backend_host(), "kiln", "FusedConv");
    assert_non_null(kern);
    void *st = NULL;
    assert_int_equal(kern->prepare(&b->t.node, b->n_in, b->in, &st), KILN_OK);
    kn_kernel_ctx kc = conv_node_ctx(b, st, pool, &b->out);
    assert_int_equal(kern->run(&kc), KILN_OK);
    float *sweep = cold ? calloc(16 << 20, sizeof(float)) : NULL;
    double ms = 0;
    for (int r = 1; r < runs; r++) {
        if (sweep != NULL)
            for (int64_t i = 0; i < (16 << 20); i += 16)
                sweep[i] += 1.0f;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(kern->run(&kc), KILN_OK);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms += (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    }
    kern->release(st);
    free(sweep);
    return runs > 1 ? ms / (runs - 1) : 0;
}

/* The node's 2-D geometry. */
static inline void conv_node_geometry(const conv_node *b, kn_conv2d *c) {
    kn_conv_geom g;
    assert_int_equal(kn_conv_geom_init(&b->t.node, &b->in[0].shape, &b->in[1].shape, false, &g),
                     KILN_OK);
    kn_conv_as_2d(&g, c);
}

/* Elements of `on` further than 1e-4 (relative, plus 1e-4) from the GEMM path's `off`. */
static inline int conv_paths_differ(const float *on, const float *off, int64_t count) {
    int bad = 0;
    for (int64_t i = 0; i < count; i++)
        if (!(fabsf(on[i] - off[i]) <= 1e-4f * (1 + fabsf(off[i]))) && bad++ < 5)
            print_error("element %lld: %g against the GEMM path's %g\n", (long long)i, on[i],
                        off[i]);
    return bad;
}

/* Run the node with a path turned on, then off (toggle), on `threads` threads; how many outputs
 * of the two runs differ (conv_paths_differ). The path is left on. */
static inline int conv_node_paths_differ(conv_node *b, int threads, void (*toggle)(bool on)) {
    kn_threadpool *pool = kn_threadpool_create(threads);
    int64_t count = kn_tensor_numel(&b->out);
    toggle(true);
    conv_node_run(b, pool, 1, false);
    float *on = kn_malloc((size_t)count * sizeof *on);
    assert_non_null(on);
    memcpy(on, b->out.data, (size_t)count * sizeof *on);
    toggle(false);
    conv_node_run(b, pool, 1, false);
    toggle(true);
    int bad = conv_paths_differ(on, b->out.data, count);
    kn_free(on);
    kn_threadpool_destroy(pool);
    return bad;
}

#endif
