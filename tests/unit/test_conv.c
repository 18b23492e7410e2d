/* Conv, ConvTranspose, Gemm and MatMul (infer + CPU kernel, with and without packed weights)
 * against naive reference loops written here. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu/math/gemm.h"
#include "backend/cpu/nn/conv.h"
#include "core/alloc.h"
#include "ops/nn/conv_geom.h"
#include "ops/op.h"
#include "test_node.h"

#include <math.h>
#include <string.h>

static uint32_t rng_state = 777;

static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static kn_tensor rand_tensor(int rank, const int64_t *d) {
    kn_tensor t = {.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = rank}};
    for (int i = 0; i < rank; i++)
        t.shape.d[i] = d[i];
    int64_t n = kn_tensor_numel(&t);
    float *p = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand();
    t.data = p;
    return t;
}

/* Threads of the pool in the runs whose weights are prepared. */
static int packed_threads = 2;
/* Threads of the pool in the runs whose weights are not prepared. */
static int plain_threads = 1;

/* Infer, then run the CPU kernel (with prepare when `packed`); returns the output tensor. */
static kn_tensor run_node(test_node *t, int n_in, const kn_tensor *in, bool packed) {
    t->node.n_in = n_in;
    t->node.n_out = 1;
    const kn_op_schema *s = kn_op_find(t->node.domain, t->node.op_type);
    assert_non_null(s);
    kn_tensor out = {0};
    kn_tensor meta[8];
    for (int i = 0; i < n_in; i++)
        meta[i] = (kn_tensor){.dtype = in[i].dtype, .shape = in[i].shape};
    kn_infer_ctx ic = {.node = &t->node, .n_in = n_in, .in = meta, .n_out = 1, .out = &out};
    kiln_status rc = s->infer(&ic);
    if (rc != KILN_OK)
        print_error("infer failed: %s\n", kiln_last_error());
    assert_int_equal(rc, KILN_OK);
    int64_t n = kn_tensor_numel(&out);
    out.data = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(out.data);
    /* NaN in every element first: a kernel that leaves some unwritten fails, even where the
     * allocator hands back the buffer of the run before with its right answer in it */
    for (int64_t i = 0; i < n; i++)
        ((float *)out.data)[i] = NAN;
    const kn_kernel *kern =
        kn_backend_find_kernel(kn_backend_host(), t->node.domain, t->node.op_type);
    assert_non_null(kern);
    void *state = NULL;
    if (packed && kern->prepare != NULL) {
        kn_tensor pin[8];
        for (int i = 0; i < n_in; i++) {
            pin[i] = in[i];
            if (i == 0)
                pin[i].data = NULL; /* activations are never known at prepare */
        }
        assert_int_equal(kern->prepare(&t->node, n_in, pin, &state), KILN_OK);
    }
    kn_threadpool *pool = kn_threadpool_create(packed ? packed_threads : plain_threads);
    kn_kernel_ctx kc = {.node = &t->node,
                        .n_in = n_in,
                        .in = in,
                        .n_out = 1,
                        .out = &out,
                        .state = state,
                        .pool = pool};
    rc = kern->run(&kc);
    if (rc != KILN_OK)
        print_error("run failed: %s\n", kiln_last_error());
    assert_int_equal(rc, KILN_OK);
    if (kern->release != NULL)
        kern->release(state);
    kn_threadpool_destroy(pool);
    return out;
}

static void expect_close(const kn_tensor *got, const float *want, const kn_shape *shape,
                         float tol) {
    assert_true(kn_shape_equal(&got->shape, shape));
    const float *g = got->data;
    for (int64_t i = 0; i < kn_shape_numel(shape); i++)
        if (!(fabsf(g[i] - want[i]) <= tol * (1.0f + fabsf(want[i])))) {
            print_error("element %lld: got %g want %g\n", (long long)i, g[i], want[i]);
            fail();
        }
}

typedef struct conv_case {
    int nsp;
    int64_t n, c, m, group;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
    const char *auto_pad;
    bool bias;
    bool relu_residual;
} conv_case;

/* Reference for any number of spatial dims; also gives the expected output shape. */
static float *ref_conv(const conv_case *cc, const kn_conv_geom *g, const float *x, const float *w,
                       const float *b, const float *res) {
    int64_t os = 1, ks = 1, is = 1;
    for (int i = 0; i < g->nsp; i++) {
        os *= g->out[i];
        ks *= g->k[i];
        is *= g->in[i];
    }
    int64_t cig = g->c_in / g->group, cog = g->c_out / g->group;
    float *y = kn_malloc((size_t)(g->n * g->c_out * os) * sizeof(float));
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t co = 0; co < g->c_out; co++)
            for (int64_t o = 0; o < os; o++) {
                int64_t op[3], u = o;
                for (int i = g->nsp - 1; i >= 0; i--) {
                    op[i] = u % g->out[i];
                    u /= g->out[i];
                }
                double s = b != NULL ? b[co] : 0.0;
                int64_t gi = co / cog;
                for (int64_t ci = 0; ci < cig; ci++)
                    for (int64_t kk = 0; kk < ks; kk++) {
                        int64_t kp[3], v = kk, idx = 0;
                        for (int i = g->nsp - 1; i >= 0; i--) {
                            kp[i] = v % g->k[i];
                            v /= g->k[i];
                        }
                        bool inside = true;
                        for (int i = 0; i < g->nsp; i++) {
                            int64_t q = op[i] * g->stride[i] - g->pad_b[i] + kp[i] * g->dil[i];
                            inside = inside && q >= 0 && q < g->in[i];
                            idx = idx * g->in[i] + q;
                        }
                        if (inside)
                            s += (double)x[(n * g->c_in + gi * cig + ci) * is + idx] *
                                 w[(co * cig + ci) * ks + kk];
                    }
                int64_t at = (n * g->c_out + co) * os + o;
                if (cc->relu_residual) {
                    s += res[at];
                    s = s > 0 ? s : 0;
                }
                y[at] = (float)s;
            }
    return y;
}

/* act: NULL, or "Swish" / "Sigmoid" fused into the conv (FusedConv, no residual). */
static void run_conv_case_act(const conv_case *cc, const char *act) {
    test_node t;
    tn_init(&t, "Conv");
    int nsp = cc->nsp;
    int64_t pads[6];
    for (int i = 0; i < nsp; i++) {
        pads[i] = cc->pb[i];
        pads[i + nsp] = cc->pe[i];
    }
    tn_ints(&t, "strides", nsp, cc->s);
    tn_ints(&t, "dilations", nsp, cc->d);
    tn_int(&t, "group", cc->group);
    if (cc->auto_pad != NULL)
        tn_str(&t, "auto_pad", cc->auto_pad);
    else
        tn_ints(&t, "pads", 2 * nsp, pads);
    int64_t xd[5] = {cc->n, cc->c}, wd[5] = {cc->m, cc->c / cc->group};
    for (int i = 0; i < nsp; i++) {
        xd[i + 2] = cc->in[i];
        wd[i + 2] = cc->k[i];
    }
    kn_tensor in[4];
    int n_in = 2;
    in[0] = rand_tensor(nsp + 2, xd);
    in[1] = rand_tensor(nsp + 2, wd);
    in[2] = (kn_tensor){0};
    if (cc->bias) {
        in[2] = rand_tensor(1, &cc->m);
        n_in = 3;
    }
    kn_conv_geom g;
    assert_int_equal(kn_conv_geom_init(&t.node, &in[0].shape, &in[1].shape, false, &g), KILN_OK);
    kn_shape oshape;
    kn_conv_geom_out_shape(&g, &oshape);
    if (cc->relu_residual) {
        t.node.op_type = "FusedConv"; /* what the fusion pass makes of Conv + Add + Relu */
        t.node.domain = "kiln";
        tn_str(&t, "kiln_activation", "Relu");
        tn_int(&t, "kiln_residual", 1);
        in[3] = rand_tensor(oshape.rank, oshape.d);
        n_in = 4;
    }
    if (act != NULL) {
        t.node.op_type = "FusedConv";
        t.node.domain = "kiln";
        tn_str(&t, "kiln_activation", act);
    }
    float *want = ref_conv(cc, &g, in[0].data, in[1].data, cc->bias ? in[2].data : NULL,
                           cc->relu_residual ? in[3].data : NULL);
    if (act != NULL) {
        int64_t total = kn_shape_numel(&oshape);
        for (int64_t i = 0; i < total; i++) {
            double v = want[i], sg = 1.0 / (1.0 + exp(-v));
            want[i] = (float)(strcmp(act, "Swish") == 0 ? v * sg : sg);
        }
    }
    /* Winograd (3x3, stride 1, one group, packed weights) rounds more than the direct sum; its
     * error grows with the magnitude of the sums, so with the square root of the kernel size. */
    bool wino = nsp == 2 && cc->group == 1 && cc->k[0] == 3 && cc->k[1] == 3 && cc->s[0] == 1 &&
                cc->s[1] == 1 && cc->d[0] == 1 && cc->d[1] == 1;
    float wino_tol = 1e-4f * (1.0f + sqrtf((float)(cc->c * 9)) / 16.0f);
    for (int packed = 0; packed < 2; packed++) {
        kn_tensor out = run_node(&t, n_in, in, packed);
        expect_close(&out, want, &oshape, packed && wino ? wino_tol : 1e-4f);
        kn_free(out.data);
    }
    kn_free(want);
    for (int i = 0; i < n_in; i++)
        kn_free(in[i].data);
}

static void run_conv_case(const conv_case *cc) {
    run_conv_case_act(cc, NULL);
}

/* Every case (acts[i] fused into case i; acts may be NULL) on every micro-kernel this CPU runs,
 * with the pool of the packed runs at `threads` and of the unprepared ones at `plain`. */
static void run_cases_every_isa(const conv_case *cases, size_t n, const char *const *acts,
                                int threads, int plain) {
    const char *isas[] = {"avx512", "avx2", "scalar"};
    const char *orig = kn_gemm_isa();
    packed_threads = threads;
    plain_threads = plain;
    for (size_t k = 0; k < 3; k++) {
        if (!kn_gemm_force_isa(isas[k]))
            continue;
        for (size_t i = 0; i < n; i++)
            run_conv_case_act(&cases[i], acts != NULL ? acts[i] : NULL);
    }
    packed_threads = 2;
    plain_threads = 1;
    assert_true(kn_gemm_force_isa(orig));
}

/* SiLU and sigmoid fused into the conv, applied in registers: by the gather kernel (stride 2,
 * <= 32 output channels), the GEMM tile, the depthwise kernels; on every ISA. */
static void test_conv_fused_sigmoid_silu(void **state) {
    (void)state;
    const conv_case cases[] = {
        {2, 1, 3, 32, 1, {40, 60}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 8, 20, 1, {17, 31}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 24, 1, {40, 80}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, NULL, false, false},
        {2, 1, 16, 40, 1, {13, 21}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, false},
        {2, 1, 24, 24, 24, {30, 33}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 24, 24, 24, {30, 33}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
    };
    const char *acts[] = {"Swish", "Sigmoid", "Swish", "Swish", "Swish", "Sigmoid"};
    run_cases_every_isa(cases, sizeof cases / sizeof cases[0], acts, 2, 1);
}

/* Pointwise convs of several images split into per-image pixel slices and channel parts over
 * the threads (conv_batched): more threads than images (slices, a worker taking two tasks), as
 * many, fewer; maps too small to slice split into channel parts (7x9 and 14x14: 2 images on 5
 * threads, 5 parts of 130 channels, 3 images of 40 channels); weights prepared and not (130
 * output channels: the serial product's block of A past MC_TARGET rows); with bias, residual +
 * ReLU, SiLU; on every ISA (the slices are NR-wide panels, the parts MR-high tiles). */
static void test_conv_pointwise_batch(void **state) {
    (void)state;
    const conv_case cases[] = {
        {2, 2, 16, 40, 1, {40, 50}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, true},
        {2, 3, 24, 20, 1, {17, 19}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, false},
        {2, 7, 8, 12, 1, {9, 30}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, false, true},
        {2, 2, 24, 130, 1, {7, 9}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, true},
        {2, 3, 16, 40, 1, {14, 14}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, false},
        {2, 2, 300, 25, 1, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, false, true},
    };
    const char *acts[] = {NULL, "Swish", NULL, NULL, "Swish", NULL};
    run_cases_every_isa(cases, sizeof cases / sizeof cases[0], acts, 5, 5);
}

/* Im2col convs of several images, each image's product on threads of its own in channel parts
 * or pixel slices (conv_images): 3 images on 5 threads; 3x3 stride 2 (column phases) with
 * residual + ReLU, a 7x7 stride-2 stem (with prepared weights it takes the gather path instead),
 * 3x3 stride 1 on a map too small for Winograd (channel parts),
 * strided 1x1 (subsampled) convs by parts and by slices, a 1-D conv, gathered stride-2 convs
 * (the images' bands in one job, a residual each); weights prepared and not; on every ISA. */
static void test_conv_images(void **state) {
    (void)state;
    const conv_case cases[] = {
        {2, 3, 24, 40, 1, {31, 29}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 3, 3, 40, 1, {30, 27}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, NULL, true, false},
        {2, 3, 20, 50, 1, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, false, true},
        {2, 3, 16, 36, 1, {11, 12}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, NULL, true, true},
        {2, 3, 16, 20, 1, {23, 25}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, NULL, false, true},
        {1, 4, 8, 30, 1, {40}, {5}, {1}, {2}, {4}, {4}, NULL, true, false},
        /* gathered stride-2 convs (<= 32 output channels) take the images' bands in one job:
         * each image's residual */
        {2, 3, 8, 20, 1, {29, 33}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 4, 3, 16, 1, {31, 40}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 2}, NULL, false, true},
    };
    const char *acts[] = {NULL, "Swish", NULL, NULL, NULL, "Sigmoid", NULL, NULL};
    run_cases_every_isa(cases, sizeof cases / sizeof cases[0], acts, 5, 5);
}

static void test_conv2d_sweep(void **state) {
    (void)state;
    const conv_case cases[] = {
        {2, 1, 3, 8, 1, {7, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 4, 6, 2, {10, 11}, {3, 2}, {2, 1}, {1, 2}, {0, 2}, {1, 0}, NULL, true, false},
        {2, 1, 16, 33, 1, {15, 14}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, false, true},
        {2, 1, 8, 16, 1, {9, 9}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, NULL, true, false},
        {2, 1, 5, 7, 1, {13, 6}, {5, 3}, {3, 2}, {2, 1}, {3, 0}, {2, 1}, NULL, true, true},
        {2, 2, 8, 8, 8, {12, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 6, 6, 6, {9, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, NULL, true, false},
        {2, 1, 4, 4, 4, {11, 11}, {5, 5}, {3, 1}, {2, 2}, {2, 4}, {4, 2}, NULL, false, true},
        {2, 1, 4, 8, 4, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 5, 1, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {0}, {0}, "SAME_UPPER", true, false},
        {2, 1, 3, 5, 1, {7, 8}, {4, 3}, {2, 3}, {1, 1}, {0}, {0}, "SAME_LOWER", false, false},
        {2, 1, 3, 5, 1, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {0}, {0}, "VALID", true, false},
        {2, 1, 40, 70, 1, {30, 33}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 3, 300, 20, 1, {5, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 5, 5, 5, {20, 45}, {3, 3}, {1, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 3, 3, 3, {17, 50}, {3, 5}, {2, 3}, {1, 2}, {1, 2}, {0, 3}, NULL, true, false},
        {2, 2, 4, 4, 4, {9, 40}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, false, true},
        {2, 1, 3, 3, 3, {6, 150}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 2, 2, 2, {5, 80}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 4, 4, 4, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 4, 4, 4, {13, 15}, {3, 3}, {2, 2}, {2, 2}, {2, 1}, {1, 2}, NULL, true, true},
        {2, 2, 2, 2, 2, {11, 12}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 2}, NULL, false, false},
        /* strided 1x1 convs run on a subsampled copy of the input */
        {2, 2, 4, 6, 2, {10, 11}, {1, 1}, {3, 2}, {1, 1}, {0, 0}, {0, 0}, NULL, true, true},
        {2, 1, 24, 40, 1, {13, 14}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, NULL, false, true},
        /* depthwise 3x3 rows of >= 12 outputs (stride 1 and 2): two- and one-block steps */
        {2, 1, 16, 16, 16, {30, 40}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 2, 8, 8, 8, {20, 50}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 8, 8, 8, {25, 37}, {3, 3}, {2, 2}, {1, 1}, {0, 1}, {1, 0}, NULL, false, true},
        {2, 1, 4, 4, 4, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, false},
        /* narrow depthwise rows, two per step (odd row counts too) */
        {2, 1, 8, 8, 8, {27, 26}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 4, 4, 4, {15, 15}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        /* depthwise by blocks of 16 channels: several blocks, a partial one, two images */
        {2, 2, 20, 20, 20, {9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 33, 33, 33, {14, 40}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, NULL, false, true},
        {2, 2, 17, 17, 17, {20, 28}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        /* channel blocks with buffers over 1024 positions (only the padding is cleared) */
        {2, 1, 4, 4, 4, {40, 60}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, NULL, true, true},
        {2, 1, 3, 3, 3, {36, 28}, {3, 3}, {1, 1}, {1, 1}, {0, 1}, {1, 0}, NULL, true, false},
        /* wide stride-2 depthwise planes are padded and phase-split in one pass */
        {2, 1, 4, 4, 4, {9, 101}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, NULL, true, true},
        {2, 1, 4, 4, 4, {8, 112}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, false, false},
        /* stride 2, <= 32 output channels, >= 14 columns: phase planes gathered in place (one
         * output row a tile, two rows of <= 16, an odd last row, two K slices, groups, 7x7) */
        {2, 1, 3, 16, 1, {20, 60}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 2, 32, 13, 1, {17, 31}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 8, 20, 2, {29, 29}, {3, 3}, {2, 2}, {1, 1}, {0, 1}, {1, 0}, NULL, false, true},
        {2, 1, 3, 24, 1, {40, 80}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, NULL, true, false},
        {2, 1, 4, 32, 1, {9, 70}, {5, 4}, {2, 2}, {1, 1}, {2, 1}, {2, 2}, NULL, true, true},
        /* bands of two output rows whose rests past a whole 32-column tile share one tile:
         * 4 and 16 columns, an odd last row */
        {2, 1, 8, 16, 1, {34, 72}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 16, 32, 1, {40, 160}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        /* up to 64 output channels where K is small (a 3 -> 64 7x7 stem) */
        {2, 1, 3, 64, 1, {30, 40}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, NULL, true, true},
        /* deep im2col products over small outputs, split by depth on the two threads (gemm.c's
         * ksplit): stride 2 with more than 32 output channels, two images of odd sizes, and a
         * dilated stride-1 3x3 (no Winograd); halves ending inside a K slice */
        {2, 1, 64, 40, 1, {28, 28}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 2, 48, 36, 1, {15, 17}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, NULL, true, false},
        {2, 1, 40, 36, 1, {12, 13}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}, NULL, false, true},
    };
    run_cases_every_isa(cases, sizeof cases / sizeof cases[0], NULL, 2, 1);
}

/* Shapes that take the Winograd path when weights are packed (3x3, stride 1, >= 16 channels,
 * >= 8 output tiles): odd sizes, partial tiles, asymmetric pads, several row blocks. */
static void test_conv_winograd(void **state) {
    (void)state;
    const conv_case cases[] = {
        {2, 1, 16, 16, 1, {12, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 16, 24, 1, {13, 17}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 33, 20, 1, {9, 30}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, false, false},
        {2, 1, 17, 40, 1, {20, 21}, {3, 3}, {1, 1}, {1, 1}, {2, 0}, {1, 2}, NULL, true, true},
        {2, 1, 16, 16, 1, {184, 40}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 64, 70, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 1, 20, 16, 1, {6, 70}, {3, 3}, {1, 1}, {1, 1}, {0}, {0}, "SAME_UPPER", true, false},
        {2, 1, 16, 17, 1, {3, 90}, {3, 3}, {1, 1}, {1, 1}, {4, 1}, {3, 0}, NULL, false, true},
        /* maps too small for 8 tiles of 4x4 take 2x2 tiles (shapes known at prepare) */
        {2, 1, 32, 24, 1, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 2, 16, 16, 1, {5, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, false, true},
        {2, 1, 16, 16, 1, {9, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 0}, {0, 1}, NULL, true, false},
        {2, 1, 20, 17, 1, {8, 6}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, true},
    };
    run_cases_every_isa(cases, sizeof cases / sizeof cases[0], NULL, 2, 1);
}

/* Winograd convs of several images on several threads (conv_winograd.c): images of up to 64
 * tiles side by side in one product per position (run_cols), larger ones a task a block of tile
 * rows of one image, run from input transform to output rows by one thread (run_tasks);
 * images fewer and more than the threads, 4x4 and 2x2 tiles, a residual per image. */
static void test_conv_winograd_batch(void **state) {
    (void)state;
    const conv_case cases[] = {
        {2, 3, 16, 24, 1, {13, 17}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 5, 17, 16, 1, {20, 21}, {3, 3}, {1, 1}, {1, 1}, {2, 0}, {1, 2}, NULL, true, true},
        {2, 2, 16, 20, 1, {40, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, false, true},
        {2, 4, 32, 24, 1, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 3, 20, 17, 1, {8, 6}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, false},
        /* more than 64 tiles an image: a task a block of tile rows */
        {2, 3, 16, 16, 1, {40, 40}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, true},
        {2, 2, 17, 20, 1, {36, 50}, {3, 3}, {1, 1}, {1, 1}, {1, 0}, {0, 1}, NULL, false, true},
    };
    const int threads[] = {2, 3, 4, 5, 7}; /* images in a row from 4 threads on */
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++)
        run_cases_every_isa(cases, sizeof cases / sizeof cases[0], NULL, threads[t], 1);
}

/* The activation a FusedConv applies after the residual, in double. */
static double ref_act(const char *act, double v, double alpha, double beta) {
    if (strcmp(act, "Relu") == 0)
        return v > 0 ? v : 0;
    if (strcmp(act, "Clip") == 0)
        return v < alpha ? alpha : v > beta ? beta : v;
    if (strcmp(act, "Sigmoid") == 0)
        return 1.0 / (1.0 + exp(-v));
    if (strcmp(act, "Swish") == 0)
        return v / (1.0 + exp(-v));
    if (strcmp(act, "HardSwish") == 0)
        return v * fmin(fmax(v / 6.0 + 0.5, 0.0), 1.0);
    return v;
}

/* Depthwise 3x3 and 5x5 FusedConvs read straight from the unpadded plane (from 8 output
 * columns; 3x3 stride 2 from 7), small stride-1 planes with k / 2 padding (3x3, 5x5, 7x7) from
 * a copy whose rows share their zero columns: each left pad
 * it takes (3x3: 0 and 1, 5x5: 1 and 2) with other pads on the other sides, odd widths and
 * heights (partial vectors, row blocks with a remainder, one-row outputs), several inside
 * vectors, two images; each fused activation (in registers or after the plane), with and
 * without a residual; every ISA, so the AVX-512 kernels are checked beside the portable path. */
static void test_depthwise_direct(void **state) {
    (void)state;
    const conv_case shapes[] = {
        {2, 2, 5, 5, 5, {23, 37}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {9, 71}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, NULL, true, false},
        {2, 1, 4, 4, 4, {6, 33}, {3, 3}, {1, 1}, {1, 1}, {1, 0}, {0, 1}, NULL, false, false},
        {2, 1, 2, 2, 2, {1, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {5, 50}, {3, 3}, {1, 1}, {1, 1}, {0, 1}, {1, 0}, NULL, true, false},
        {2, 2, 3, 3, 3, {15, 75}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 5, 5, 5, {14, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {11, 100}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, NULL, false, false},
        {2, 1, 2, 2, 2, {8, 67}, {3, 3}, {2, 2}, {1, 1}, {0, 1}, {1, 0}, NULL, true, false},
        {2, 1, 3, 3, 3, {3, 96}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, NULL, true, false},
        {2, 2, 3, 3, 3, {13, 14}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 4, 4, 4, {9, 61}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 3, 3, 3, {6, 40}, {5, 5}, {1, 1}, {1, 1}, {1, 1}, {2, 3}, NULL, false, false},
        {2, 1, 2, 2, 2, {4, 8}, {5, 5}, {1, 1}, {1, 1}, {0, 2}, {1, 2}, NULL, true, false},
        {2, 2, 3, 3, 3, {15, 56}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 4, 4, 4, {11, 101}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 3, 3, 3, {8, 80}, {5, 5}, {2, 2}, {1, 1}, {1, 1}, {2, 1}, NULL, false, false},
        {2, 1, 2, 2, 2, {20, 16}, {5, 5}, {2, 2}, {1, 1}, {2, 1}, {1, 2}, NULL, true, false},
        /* stride 1, k / 2 padding, 3x3 up to 28x28 under 14 columns, 5x5 and 7x7 up to 14x14:
         * rows copied w + k / 2 apart (one vector, partial groups of vectors, a whole group of 8
         * and a remainder, 7x7 taps, planes of one row or column, rows of up to 57 columns) */
        {2, 1, 3, 3, 3, {28, 13}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 5, 5, 5, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {8, 8}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 4, 4, 4, {5, 3}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, false, false},
        {2, 1, 3, 3, 3, {1, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {8, 1}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 2, 2, 2, {6, 8}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 3, 3, 3, {7, 5}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 33, 33, 33, {7, 7}, {7, 7}, {1, 1}, {1, 1}, {3, 3}, {3, 3}, NULL, true, false},
        {2, 1, 3, 3, 3, {14, 14}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}, NULL, true, false},
        {2, 1, 3, 3, 3, {28, 28}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, false, false},
        {2, 1, 2, 2, 2, {13, 11}, {7, 7}, {1, 1}, {1, 1}, {3, 3}, {3, 3}, NULL, true, false},
        {2, 1, 3, 3, 3, {1, 1}, {7, 7}, {1, 1}, {1, 1}, {3, 3}, {3, 3}, NULL, true, false},
        {2, 1, 2, 2, 2, {2, 61}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 2, 2, 2, {3, 57}, {7, 7}, {1, 1}, {1, 1}, {3, 3}, {3, 3}, NULL, true, false},
        {2, 1, 17, 17, 17, {9, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        /* 3x3 stride 1 with one row and column of padding on every side, over 28x28, by strips
         * of columns walked down the plane: one vector both first and last (13 and 16 wide), two
         * with a last vector of one column, three and four with the last one full, 65 and 112
         * wide in two strips, 200 wide in four, one and two rows, two images */
        {2, 1, 3, 3, 3, {70, 13}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 2, 2, 2, {50, 16}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {50, 17}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, false, false},
        {2, 1, 2, 2, 2, {60, 48}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {13, 64}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 3, 3, 3, {13, 65}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 2, 2, 2, {20, 112}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 2, 2, 2, {5, 200}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, false, false},
        {2, 1, 3, 3, 3, {1, 900}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 2, 2, 2, {2, 400}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        /* the same at stride 2 from 8 output columns (two input rows an output row): one vector
         * (8 and 15 columns), two with a last vector of one column, two inside, three with a
         * last vector of one column and none in its second load, 112 columns in two strips, no
         * padding after (the output sizes are the same), one and two input rows, two images */
        {2, 1, 3, 3, 3, {16, 16}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 2, 2, 2, {30, 30}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {17, 33}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, false, false},
        {2, 1, 2, 2, 2, {9, 64}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {7, 65}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 2, 2, 2, {5, 224}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {4, 40}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, NULL, true, false},
        {2, 1, 2, 2, 2, {1, 40}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 2, 2, 2, {2, 41}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, false, false},
        /* and onto 7 or 8 output columns from rows of up to 15, two output rows a vector: 14x14
         * (MobileNetV2's 576ch 14->7), 13 (padding after), 15 -> 8 (every lane), an even count
         * of output rows, a plane of one row, two images; over 16 rows the direct kernel's */
        {2, 1, 3, 3, 3, {14, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 2, 2, 2, 2, {13, 13}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {15, 15}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, false, false},
        {2, 1, 2, 2, 2, {16, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 3, 3, 3, {1, 13}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
        {2, 1, 2, 2, 2, {19, 14}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, NULL, true, false},
    };
    const struct {
        const char *name;
        float alpha, beta;
    } acts[] = {{"", 0, 0},        {"Relu", 0, 0},  {"Clip", -0.25f, 0.5f},
                {"Sigmoid", 0, 0}, {"Swish", 0, 0}, {"HardSwish", 0, 0}};
    const char *isas[] = {"avx512", "avx2", "scalar"};
    const char *orig = kn_gemm_isa();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
            for (int residual = 0; residual < 2; residual++) {
                const conv_case *cc = &shapes[s];
                test_node t;
                tn_init(&t, "FusedConv");
                t.node.domain = "kiln";
                int64_t pads[4] = {cc->pb[0], cc->pb[1], cc->pe[0], cc->pe[1]};
                tn_ints(&t, "strides", 2, cc->s);
                tn_ints(&t, "dilations", 2, cc->d);
                tn_int(&t, "group", cc->group);
                tn_ints(&t, "pads", 4, pads);
                tn_str(&t, "kiln_activation", acts[a].name);
                tn_float(&t, "kiln_alpha", acts[a].alpha);
                tn_float(&t, "kiln_beta", acts[a].beta);
                tn_int(&t, "kiln_residual", residual);
                int64_t xd[4] = {cc->n, cc->c, cc->in[0], cc->in[1]};
                int64_t wd[4] = {cc->m, 1, cc->k[0], cc->k[1]};
                kn_tensor in[4] = {rand_tensor(4, xd), rand_tensor(4, wd), {0}, {0}};
                if (cc->bias)
                    in[2] = rand_tensor(1, &cc->m);
                kn_conv_geom g;
                assert_int_equal(kn_conv_geom_init(&t.node, &in[0].shape, &in[1].shape, false, &g),
                                 KILN_OK);
                kn_shape oshape;
                kn_conv_geom_out_shape(&g, &oshape);
                int n_in = 3;
                if (residual) {
                    in[3] = rand_tensor(oshape.rank, oshape.d);
                    n_in = 4;
                }
                float *want =
                    ref_conv(cc, &g, in[0].data, in[1].data, cc->bias ? in[2].data : NULL, NULL);
                const float *res = in[3].data;
                for (int64_t i = 0; i < kn_shape_numel(&oshape); i++)
                    want[i] = (float)ref_act(acts[a].name, (double)want[i] + (res ? res[i] : 0),
                                             acts[a].alpha, acts[a].beta);
                for (size_t k = 0; k < 3; k++) {
                    if (!kn_gemm_force_isa(isas[k]))
                        continue;
                    kn_tensor out = run_node(&t, n_in, in, false);
                    expect_close(&out, want, &oshape, 1e-4f);
                    kn_free(out.data);
                }
                assert_true(kn_gemm_force_isa(orig));
                kn_free(want);
                for (int i = 0; i < 4; i++)
                    kn_free(in[i].data);
            }
}

static void test_conv1d_3d(void **state) {
    (void)state;
    const conv_case cases[] = {
        {1, 2, 4, 6, 1, {20}, {3}, {2}, {1}, {1}, {2}, NULL, true, false},
        {1, 1, 6, 6, 6, {17}, {5}, {1}, {2}, {4}, {4}, NULL, true, true},
        {1, 1, 4, 4, 2, {9}, {2}, {1}, {1}, {0}, {0}, "SAME_UPPER", false, false},
        {1, 1, 4, 6, 1, {20}, {1}, {2}, {1}, {0}, {0}, NULL, true, false},
        {3,
         1,
         3,
         4,
         1,
         {5, 6, 4},
         {3, 2, 3},
         {1, 2, 1},
         {1, 1, 2},
         {1, 0, 2},
         {1, 1, 0},
         NULL,
         true,
         true},
        {3, 2, 4, 4, 2, {4, 4, 4}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0}, {0}, NULL, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_conv_case(&cases[i]);
}

/* ConvTranspose reference: scatter every input element through the kernel. */
static void test_conv_transpose(void **state) {
    (void)state;
    struct {
        int64_t n, c, m, group, h, w, k[2], s[2], d[2], pads[4], opad[2];
        const char *auto_pad;
        int64_t out_shape[2];
    } cases[] = {
        {1, 1, 2, 1, 3, 3, {3, 3}, {1, 1}, {1, 1}, {0}, {0}, NULL, {0}},
        {2, 4, 6, 2, 4, 5, {3, 2}, {2, 3}, {1, 1}, {1, 0, 1, 1}, {1, 0}, NULL, {0}},
        {1, 2, 3, 1, 5, 4, {3, 3}, {2, 2}, {2, 1}, {0}, {0}, NULL, {0}},
        {1, 1, 2, 1, 3, 3, {3, 3}, {3, 2}, {1, 1}, {0}, {0}, NULL, {10, 8}},
        {1, 3, 2, 1, 4, 4, {3, 3}, {2, 2}, {1, 1}, {0}, {0}, "SAME_UPPER", {0}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        test_node t;
        tn_init(&t, "ConvTranspose");
        tn_ints(&t, "strides", 2, cases[ci].s);
        tn_ints(&t, "dilations", 2, cases[ci].d);
        tn_ints(&t, "pads", 4, cases[ci].pads);
        tn_ints(&t, "output_padding", 2, cases[ci].opad);
        tn_int(&t, "group", cases[ci].group);
        if (cases[ci].auto_pad != NULL)
            tn_str(&t, "auto_pad", cases[ci].auto_pad);
        if (cases[ci].out_shape[0] != 0)
            tn_ints(&t, "output_shape", 2, cases[ci].out_shape);
        int64_t cog = cases[ci].m / cases[ci].group, cig = cases[ci].c / cases[ci].group;
        int64_t xd[4] = {cases[ci].n, cases[ci].c, cases[ci].h, cases[ci].w};
        int64_t wd[4] = {cases[ci].c, cog, cases[ci].k[0], cases[ci].k[1]};
        kn_tensor in[3] = {rand_tensor(4, xd), rand_tensor(4, wd), rand_tensor(1, &cases[ci].m)};
        kn_conv_geom g;
        assert_int_equal(kn_conv_geom_init(&t.node, &in[0].shape, &in[1].shape, true, &g), KILN_OK);
        kn_shape os;
        kn_conv_geom_out_shape(&g, &os);
        int64_t oh = os.d[2], ow = os.d[3];
        float *want = kn_calloc((size_t)kn_shape_numel(&os), sizeof(float));
        const float *x = in[0].data, *w = in[1].data, *b = in[2].data;
        for (int64_t n = 0; n < g.n; n++)
            for (int64_t co = 0; co < g.c_out; co++)
                for (int64_t p = 0; p < oh * ow; p++)
                    want[(n * g.c_out + co) * oh * ow + p] = b[co];
        for (int64_t n = 0; n < g.n; n++)
            for (int64_t c = 0; c < g.c_in; c++)
                for (int64_t i = 0; i < g.in[0]; i++)
                    for (int64_t j = 0; j < g.in[1]; j++)
                        for (int64_t mo = 0; mo < cog; mo++)
                            for (int64_t ky = 0; ky < g.k[0]; ky++)
                                for (int64_t kx = 0; kx < g.k[1]; kx++) {
                                    int64_t y = i * g.stride[0] - g.pad_b[0] + ky * g.dil[0];
                                    int64_t xx = j * g.stride[1] - g.pad_b[1] + kx * g.dil[1];
                                    if (y < 0 || y >= oh || xx < 0 || xx >= ow)
                                        continue;
                                    int64_t co = c / cig * cog + mo;
                                    want[((n * g.c_out + co) * oh + y) * ow + xx] +=
                                        x[((n * g.c_in + c) * g.in[0] + i) * g.in[1] + j] *
                                        w[((c * cog + mo) * g.k[0] + ky) * g.k[1] + kx];
                                }
        for (int packed = 0; packed < 2; packed++) {
            kn_tensor out = run_node(&t, 3, in, packed);
            expect_close(&out, want, &os, 1e-4f);
            kn_free(out.data);
        }
        kn_free(want);
        for (int i = 0; i < 3; i++)
            kn_free(in[i].data);
    }
}

static void test_conv_transpose_shapes(void **state) {
    (void)state;
    test_node t;
    tn_init(&t, "ConvTranspose");
    int64_t s[2] = {3, 2}, os[2] = {10, 8};
    tn_ints(&t, "strides", 2, s);
    tn_ints(&t, "output_shape", 2, os);
    kn_shape x = {4, {1, 1, 3, 3}}, w = {4, {1, 2, 3, 3}}, out;
    kn_conv_geom g;
    assert_int_equal(kn_conv_geom_init(&t.node, &x, &w, true, &g), KILN_OK);
    kn_conv_geom_out_shape(&g, &out);
    kn_shape want = {4, {1, 2, 10, 8}};
    assert_true(kn_shape_equal(&out, &want));
}

static void test_gemm_op(void **state) {
    (void)state;
    int64_t m = 7, n = 37, k = 19;
    int64_t cshapes[][3] = {{0, 0, 0}, {1, 1, 0},  {1, 37, 0}, {2, 1, 37},
                            {2, 7, 1}, {2, 7, 37}, {2, 1, 1}};
    for (int tr = 0; tr < 4; tr++)
        for (size_t cs = 0; cs < sizeof cshapes / sizeof cshapes[0]; cs++) {
            bool ta = tr & 1, tb = tr & 2;
            test_node t;
            tn_init(&t, "Gemm");
            tn_int(&t, "transA", ta);
            tn_int(&t, "transB", tb);
            tn_float(&t, "alpha", 0.75f);
            tn_float(&t, "beta", 1.5f);
            int64_t ad[2] = {ta ? k : m, ta ? m : k}, bd[2] = {tb ? n : k, tb ? k : n};
            kn_tensor in[3] = {rand_tensor(2, ad), rand_tensor(2, bd)};
            int n_in = 2;
            if (cshapes[cs][0] != 0) {
                in[2] = rand_tensor((int)cshapes[cs][0], &cshapes[cs][1]);
                n_in = 3;
            }
            float *want = kn_malloc((size_t)(m * n) * sizeof(float));
            const float *a = in[0].data, *b = in[1].data, *c = n_in == 3 ? in[2].data : NULL;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    for (int64_t p = 0; p < k; p++)
                        s += (double)(ta ? a[p * m + i] : a[i * k + p]) *
                             (tb ? b[j * k + p] : b[p * n + j]);
                    s *= 0.75;
                    if (c != NULL) {
                        const kn_shape *sh = &in[2].shape;
                        int64_t rows = sh->rank == 2 ? sh->d[0] : 1, cols = sh->d[sh->rank - 1];
                        s += 1.5 * c[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
                    }
                    want[i * n + j] = (float)s;
                }
            kn_shape os = {2, {m, n}};
            for (int packed = 0; packed < 2; packed++) {
                kn_tensor out = run_node(&t, n_in, in, packed);
                expect_close(&out, want, &os, 1e-4f);
                kn_free(out.data);
            }
            kn_free(want);
            for (int i = 0; i < n_in; i++)
                kn_free(in[i].data);
        }
}

static void test_matmul_op(void **state) {
    (void)state;
    struct {
        int ra, rb;
        int64_t a[4], b[4], out[4];
        int ro;
    } cases[] = {
        {2, 2, {5, 7}, {7, 9}, {5, 9}, 2},
        {1, 2, {7}, {7, 9}, {9}, 1},
        {2, 1, {5, 7}, {7}, {5}, 1},
        {1, 1, {7}, {7}, {0}, 0},
        {3, 2, {3, 5, 7}, {7, 9}, {3, 5, 9}, 3},
        {3, 3, {3, 5, 7}, {1, 7, 9}, {3, 5, 9}, 3},
        {4, 3, {2, 1, 4, 6}, {3, 6, 5}, {2, 3, 4, 5}, 4},
        {1, 3, {6}, {2, 6, 3}, {2, 3}, 2},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        test_node t;
        tn_init(&t, "MatMul");
        kn_tensor in[2] = {rand_tensor(cases[ci].ra, cases[ci].a),
                           rand_tensor(cases[ci].rb, cases[ci].b)};
        kn_shape os = {.rank = cases[ci].ro};
        for (int i = 0; i < os.rank; i++)
            os.d[i] = cases[ci].out[i];
        /* Reference via numpy semantics: promote, broadcast batch, multiply. */
        kn_shape a = in[0].shape, b = in[1].shape;
        if (a.rank == 1)
            a = (kn_shape){2, {1, a.d[0]}};
        if (b.rank == 1)
            b = (kn_shape){2, {b.d[0], 1}};
        int64_t m = a.d[a.rank - 2], k = a.d[a.rank - 1], n = b.d[b.rank - 1];
        int br = (a.rank > b.rank ? a.rank : b.rank) - 2, nb = 1;
        int64_t bd[4];
        for (int i = 0; i < br; i++) {
            int ia = i - (br - (a.rank - 2)), ib = i - (br - (b.rank - 2));
            int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
            bd[i] = da > db ? da : db;
            nb *= (int)bd[i];
        }
        float *want = kn_malloc((size_t)(nb * m * n) * sizeof(float));
        for (int t0 = 0; t0 < nb; t0++) {
            int64_t ia = 0, ib = 0, sa = 1, sb = 1, u = t0;
            for (int i = br - 1; i >= 0; i--) {
                int64_t c = u % bd[i];
                u /= bd[i];
                int xa = i - (br - (a.rank - 2)), xb = i - (br - (b.rank - 2));
                if (xa >= 0) {
                    ia += (a.d[xa] == 1 ? 0 : c) * sa;
                    sa *= a.d[xa];
                }
                if (xb >= 0) {
                    ib += (b.d[xb] == 1 ? 0 : c) * sb;
                    sb *= b.d[xb];
                }
            }
            const float *pa = (const float *)in[0].data + ia * m * k;
            const float *pb = (const float *)in[1].data + ib * k * n;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    for (int64_t p = 0; p < k; p++)
                        s += (double)pa[i * k + p] * pb[p * n + j];
                    want[(t0 * m + i) * n + j] = (float)s;
                }
        }
        for (int packed = 0; packed < 2; packed++) {
            kn_tensor out = run_node(&t, 2, in, packed);
            expect_close(&out, want, &os, 1e-4f);
            kn_free(out.data);
        }
        kn_free(want);
        kn_free(in[0].data);
        kn_free(in[1].data);
    }
}

static void test_infer_errors(void **state) {
    (void)state;
    test_node t;
    tn_init(&t, "Conv");
    t.node.n_in = 2;
    t.node.n_out = 1;
    kn_tensor in[2] = {{.dtype = KILN_DTYPE_FLOAT32, .shape = {4, {1, 3, 8, 8}}},
                       {.dtype = KILN_DTYPE_FLOAT32, .shape = {4, {4, 2, 3, 3}}}};
    kn_tensor out = {0};
    kn_infer_ctx c = {.node = &t.node, .n_in = 2, .in = in, .n_out = 1, .out = &out};
    assert_int_equal(kn_op_find("", "Conv")->infer(&c), KILN_ERR_SHAPE);
    in[1].shape.d[1] = 3;
    in[0].shape.d[2] = 1;
    assert_int_equal(kn_op_find("", "Conv")->infer(&c), KILN_ERR_SHAPE);
    test_node mm;
    tn_init(&mm, "MatMul");
    kn_tensor mi[2] = {{.dtype = KILN_DTYPE_FLOAT32, .shape = {2, {3, 4}}},
                       {.dtype = KILN_DTYPE_FLOAT32, .shape = {2, {5, 6}}}};
    kn_infer_ctx mc = {.node = &mm.node, .n_in = 2, .in = mi, .n_out = 1, .out = &out};
    assert_int_equal(kn_op_find("", "MatMul")->infer(&mc), KILN_ERR_SHAPE);
}

/* to_bf16 of the bf16 GEMM: nearest even, a NaN kept quiet. */
static uint32_t ref_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (x >> 16) | 0x40u;
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

/* Element (k, col) of the column matrix from kn_im2col2d's definition (conv.h), zero at and
 * past column `end`. */
static float im2col_at(const kn_im2col2d *g, int64_t k, int64_t col, int64_t end) {
    if (col >= end)
        return 0.0f;
    int64_t kx = k % g->kw, ky = k / g->kw % g->kh, ci = k / g->kw / g->kh;
    int64_t oh = col / g->ow, ow = col % g->ow, ih = oh * g->sh - g->ph + ky * g->dh;
    int64_t c = ow + g->xoff[kx];
    if (ih < 0 || ih >= g->h || c < 0 || c >= g->width[kx])
        return 0.0f;
    return g->x[ci * g->plane + g->hoff[kx] + ih * g->row + c];
}

/* The im2col's bf16 pairs (kn_cpu_im2col_pairs_avx512) against the float32 panels of
 * kn_cpu_im2col_pack_avx512 paired here, and those panels against the column matrix's definition:
 * stride 1 (pads, dilation, wide and tall kernels, a 9x9 one past the packer's table of taps) and
 * the split stride-2 layout, every panel (the last one partial), pieces of 64 rows of K and odd
 * tails, inputs with NaN, infinities, denormals and values that round to even. */
static void test_im2col_pairs(void **state) {
    (void)state;
    if (!__builtin_cpu_supports("avx512f") || strcmp(kn_gemm_isa(), "avx512") != 0) {
        print_message("no AVX-512 here: the packers under test do not run\n");
        return;
    }
    /* c, h, w, kh, kw, pad, dilation, stride (2: the split layout) */
    static const int64_t geo[][8] = {
        {5, 14, 14, 3, 3, 1, 1, 1}, {3, 7, 7, 3, 3, 1, 1, 1},   {2, 9, 11, 5, 5, 2, 1, 1},
        {4, 10, 6, 1, 7, 3, 1, 1},  {3, 12, 12, 3, 3, 2, 2, 1}, {4, 15, 15, 3, 3, 1, 1, 2},
        {3, 16, 9, 7, 7, 3, 1, 2},  {2, 56, 56, 3, 3, 1, 1, 1}, {2, 12, 13, 9, 9, 4, 1, 1}};
    static const float odd[] = {NAN,     INFINITY,    -INFINITY,   1e-40f,
                                -3e-39f, 1.00390625f, 1.01171875f, -0.0f};
    for (size_t gi = 0; gi < sizeof geo / sizeof geo[0]; gi++) {
        const int64_t *q = geo[gi];
        int64_t c = q[0], h = q[1], w = q[2], kh = q[3], kw = q[4], pad = q[5], dil = q[6],
                st = q[7];
        int64_t oh = (h + 2 * pad - dil * (kh - 1) - 1) / st + 1;
        int64_t ow = (w + 2 * pad - dil * (kw - 1) - 1) / st + 1;
        int64_t w2 = (w + 1) / 2, row = st == 2 ? 2 * w2 : w, plane = h * row;
        float *x = kn_malloc((size_t)(c * plane) * sizeof(float));
        assert_non_null(x);
        for (int64_t i = 0; i < c * plane; i++)
            x[i] = i % 37 == 5 ? odd[(i / 37) % 8] : frand();
        kn_im2col2d g = {.x = x,
                         .plane = plane,
                         .row = row,
                         .h = h,
                         .ow = ow,
                         .kh = kh,
                         .kw = kw,
                         .sh = st,
                         .ph = pad,
                         .dh = dil};
        for (int64_t kx = 0; kx < kw; kx++) {
            int64_t dx = kx * dil - pad;
            if (st == 1) {
                g.xoff[kx] = dx;
                g.width[kx] = w;
            } else { /* the split layout: even columns, then odd ones at w2 */
                int64_t par = dx & 1;
                g.xoff[kx] = (dx - par) / 2;
                g.hoff[kx] = par * w2;
                g.width[kx] = par != 0 ? w / 2 : (w + 1) / 2;
            }
        }
        int64_t k = c * kh * kw, n = oh * ow;
        float panel[64 * 32];
        uint32_t pairs[33 * 32];
        for (int64_t n0 = 0; n0 < n; n0 += 32) {
            int64_t nc = n - n0 < 32 ? n - n0 : 32;
            for (int64_t k0 = 0; k0 < k; k0 += 64) {
                int64_t kc = k - k0 < 64 ? k - k0 : 64;
                for (int tail = 0; tail < 2; tail++) {
                    if (tail == 1 && kc < 2)
                        continue;
                    int64_t kk = tail == 1 ? kc - 1 - (kc % 2 == 0) : kc; /* an odd count */
                    memset(pairs, 0xAB, sizeof pairs);
                    kn_cpu_im2col_pack_avx512(&g, k0, kk, n0, nc, panel);
                    kn_cpu_im2col_pairs_avx512(&g, k0, kk, n0, nc, pairs);
                    /* the float32 panel against the geometry, bit for bit */
                    for (int64_t r = 0; r < kk; r++)
                        for (int64_t j = 0; j < 32; j++) {
                            float want = im2col_at(&g, k0 + r, n0 + j, n0 + nc);
                            if (memcmp(&panel[r * 32 + j], &want, sizeof want) != 0)
                                fail_msg("geometry %zu, panel %lld, row %lld, column %lld: %g, "
                                         "expected %g",
                                         gi, (long long)n0, (long long)(k0 + r), (long long)j,
                                         (double)panel[r * 32 + j], (double)want);
                        }
                    for (int64_t p = 0; 2 * p < kk; p++)
                        for (int64_t j = 0; j < 32; j++) {
                            uint32_t lo = j < nc ? ref_bf16(panel[2 * p * 32 + j]) : 0;
                            uint32_t hi = j < nc && 2 * p + 1 < kk
                                              ? ref_bf16(panel[(2 * p + 1) * 32 + j])
                                              : 0;
                            if (pairs[p * 32 + j] != (lo | hi << 16))
                                fail_msg("geometry %zu, panel %lld, rows %lld+%lld, pair %lld, "
                                         "column %lld: %08x, expected %08x",
                                         gi, (long long)n0, (long long)k0, (long long)kk,
                                         (long long)p, (long long)j, pairs[p * 32 + j],
                                         lo | hi << 16);
                        }
                    /* nothing past the pair rows asked for */
                    assert_int_equal(pairs[(kk + 1) / 2 * 32], 0xABABABABu);
                }
            }
        }
        kn_free(x);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d_sweep),
        cmocka_unit_test(test_conv_pointwise_batch),
        cmocka_unit_test(test_conv_images),
        cmocka_unit_test(test_conv_fused_sigmoid_silu),
        cmocka_unit_test(test_conv1d_3d),
        cmocka_unit_test(test_conv_transpose),
        cmocka_unit_test(test_conv_transpose_shapes),
        cmocka_unit_test(test_gemm_op),
        cmocka_unit_test(test_matmul_op),
        cmocka_unit_test(test_infer_errors),
        cmocka_unit_test(test_conv_winograd),
        cmocka_unit_test(test_conv_winograd_batch),
        cmocka_unit_test(test_depthwise_direct),
        cmocka_unit_test(test_im2col_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
