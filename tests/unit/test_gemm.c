/* GEMM, epilogue and thread pool against naive reference loops. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu/math/gemm.h"
#include "core/alloc.h"
#include "core/threadpool.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

static uint32_t rng_state = 12345;

static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static float *rand_buf(int64_t n) {
    float *p = kn_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static float ref_act(int act, float a, float b, float x) {
    switch (act) {
    case KN_ACT_RELU:
        return x > 0 ? x : 0;
    case KN_ACT_CLIP:
        return x < a ? a : (x > b ? b : x);
    case KN_ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-x));
    case KN_ACT_SWISH:
        return x / (1.0f + expf(-x));
    case KN_ACT_LEAKY_RELU:
        return x < 0 ? a * x : x;
    default:
        return x;
    }
}

/* Reference: c = act(alpha*op(A)op(B) + beta*c + bias + residual), accumulated in double. */
static void ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                     const kn_epilogue *ep) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++) {
                float av = ta ? a[p * lda + i] : a[i * lda + p];
                float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += (double)av * bv;
            }
            double v = alpha * s + (beta != 0.0f ? beta * (double)c[i * ldc + j] : 0.0);
            if (ep != NULL) {
                if (ep->bias != NULL)
                    v += ep->bias_per_row ? ep->bias[i] : ep->bias[j];
                if (ep->residual != NULL)
                    v += ep->residual[i * ep->ldr + j];
                v = ref_act(ep->act, ep->alpha, ep->beta, (float)v);
            }
            c[i * ldc + j] = (float)v;
        }
}

static void check_close(const float *got, const float *want, int64_t m, int64_t n, int64_t ld,
                        int64_t k) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float g = got[i * ld + j], w = want[i * ld + j];
            float tol = 1e-5f * (float)(k + 4) * (1.0f + fabsf(w));
            if (!(fabsf(g - w) <= tol)) {
                print_error("mismatch at (%lld,%lld): got %g want %g\n", (long long)i, (long long)j,
                            g, w);
                fail();
            }
        }
}

typedef struct gemm_case {
    bool ta, tb;
    int64_t m, n, k;
    float alpha, beta;
    int pack; /* 0 none, 1 pack A, 2 pack B */
    bool use_ep;
    int act;
    float act_a, act_b;
    int bias_mode; /* 0 none, 1 per column, 2 per row */
    bool residual;
} gemm_case;

static void run_case(kn_threadpool *pool, const gemm_case *t) {
    int64_t lda = (t->ta ? t->m : t->k) + 3, ldb = (t->tb ? t->k : t->n) + 1, ldc = t->n + 5;
    int64_t arows = t->ta ? t->k : t->m, brows = t->tb ? t->n : t->k;
    float *a = rand_buf(arows * lda), *b = rand_buf(brows * ldb);
    float *c = rand_buf(t->m * ldc), *want = kn_malloc((size_t)(t->m * ldc + 1) * sizeof(float));
    memcpy(want, c, (size_t)(t->m * ldc) * sizeof(float));
    kn_epilogue ep = {.act = t->act, .alpha = t->act_a, .beta = t->act_b};
    float *bias = NULL, *res = NULL;
    if (t->bias_mode != 0) {
        bias = rand_buf(t->m > t->n ? t->m : t->n);
        ep.bias = bias;
        ep.bias_per_row = t->bias_mode == 2;
    }
    if (t->residual) {
        res = rand_buf(t->m * (t->n + 2));
        ep.residual = res;
        ep.ldr = t->n + 2;
    }
    kn_gemm_packed *pk = NULL;
    kn_gemm_operand oa = {.p = a, .ld = lda, .trans = t->ta};
    kn_gemm_operand ob = {.p = b, .ld = ldb, .trans = t->tb};
    if (t->pack == 1) {
        assert_int_equal(kn_gemm_pack_a(a, lda, t->ta, t->m, t->k, &pk), KILN_OK);
        oa = (kn_gemm_operand){.packed = pk};
    } else if (t->pack == 2) {
        assert_int_equal(kn_gemm_pack_b(b, ldb, t->tb, t->k, t->n, &pk), KILN_OK);
        ob = (kn_gemm_operand){.packed = pk};
    }
    assert_int_equal(kn_gemm(pool, t->m, t->n, t->k, t->alpha, &oa, &ob, t->beta, c, ldc,
                             t->use_ep ? &ep : NULL),
                     KILN_OK);
    ref_gemm(t->ta, t->tb, t->m, t->n, t->k, t->alpha, a, lda, b, ldb, t->beta, want, ldc,
             t->use_ep ? &ep : NULL);
    check_close(c, want, t->m, t->n, ldc, t->k);
    kn_gemm_packed_free(pk);
    kn_free(a);
    kn_free(b);
    kn_free(c);
    kn_free(want);
    kn_free(bias);
    kn_free(res);
}

static const int64_t sizes[][3] = {
    {1, 1, 1},     {1, 7, 3},     {5, 1, 9},      {13, 33, 17},  {12, 32, 256},
    {25, 65, 257}, {64, 49, 64},  {121, 70, 300}, {3, 100, 513}, {130, 2100, 5},
    {37, 31, 600}, {24, 97, 200}, {7, 2500, 16},
};

static void sweep(kn_threadpool *pool) {
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int tr = 0; tr < 4; tr++)
            for (int pack = 0; pack < 3; pack++) {
                gemm_case t = {.ta = tr & 1,
                               .tb = (tr >> 1) & 1,
                               .m = sizes[s][0],
                               .n = sizes[s][1],
                               .k = sizes[s][2],
                               .alpha = 1.0f,
                               .beta = 0.0f,
                               .pack = pack};
                if ((s + tr) % 3 == 1) {
                    t.alpha = 0.5f;
                    t.beta = -1.25f;
                } else if ((s + tr) % 3 == 2) {
                    t.beta = 1.0f;
                }
                run_case(pool, &t);
            }
}

static void epilogue_cases(kn_threadpool *pool) {
    int acts[] = {KN_ACT_NONE,    KN_ACT_RELU,  KN_ACT_CLIP,
                  KN_ACT_SIGMOID, KN_ACT_SWISH, KN_ACT_LEAKY_RELU};
    /* 75 = 64 + 11 (half-width edge), 49 = 32 + 16 + 1 and 36 = 32 + 4 (narrow edges). Rows:
     * 29 ends in a 5-row tile, 13 in a one-row tile, 20 in an 8-row and 16 in a 4-row one; up
     * to 24 rows read a plain B in place when k is small. */
    const int64_t ns[] = {75, 49, 36}, ms[] = {29, 13, 20, 16};
    for (size_t ai = 0; ai < sizeof acts / sizeof acts[0]; ai++)
        for (int vi = 0; vi < 4 * 3 * 4; vi++) {
            int variant = vi % 4;
            gemm_case t = {.m = ms[vi / 12],
                           .n = ns[vi % 12 / 4],
                           .k = variant % 2 ? 300 : 40,
                           .alpha = 1.0f,
                           .beta = variant == 2 ? 0.5f : 0.0f,
                           .pack = variant % 3,
                           .use_ep = true};
            t.act = acts[ai];
            t.act_a = acts[ai] == KN_ACT_CLIP ? -0.5f : 0.1f;
            t.act_b = 0.75f;
            t.bias_mode = variant == 3 ? 0 : (variant == 1 ? 2 : 1);
            t.residual = variant >= 2;
            run_case(pool, &t);
            run_case(NULL, &t);
        }
}

static void test_gemm_all_isas(void **state) {
    (void)state;
    const char *isas[] = {"avx512", "avx2", "scalar"};
    const char *orig = kn_gemm_isa();
    kn_threadpool *pool = kn_threadpool_create(3);
    assert_non_null(pool);
    for (size_t i = 0; i < 3; i++) {
        if (!kn_gemm_force_isa(isas[i]))
            continue;
        assert_string_equal(kn_gemm_isa(), isas[i]);
        sweep(NULL);
        sweep(pool);
        epilogue_cases(pool);
    }
    kn_threadpool_destroy(pool);
    assert_true(kn_gemm_force_isa(orig));
}

static void test_gemm_epilogue(void **state) {
    (void)state;
    kn_threadpool *pool = kn_threadpool_create(2);
    epilogue_cases(pool);
    kn_threadpool_destroy(pool);
}

/* One column with A packed and C contiguous (squeeze-excitation 1x1 convs on 1x1 maps) takes
 * the matrix-vector path: row counts that leave partial and single panels, more than the
 * panels a step, several K slices, a strided x, bias per row and activations, with and without
 * threads, and past the path's row limit (the tile path again); every ISA. */
static void test_gemv_packed(void **state) {
    (void)state;
    const int64_t ms[] = {1, 5, 12, 29, 103, 1152, 4200}, ks[] = {1, 10, 48, 300, 1152};
    const int acts[] = {KN_ACT_NONE, KN_ACT_SIGMOID, KN_ACT_SWISH, KN_ACT_CLIP};
    const char *isas[] = {"avx512", "avx2", "scalar"};
    const char *orig = kn_gemm_isa();
    kn_threadpool *pool = kn_threadpool_create(2);
    assert_non_null(pool);
    for (size_t i = 0; i < 3; i++) {
        if (!kn_gemm_force_isa(isas[i]))
            continue;
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                int64_t m = ms[mi], k = ks[ki], ldb = (mi + ki) % 2 ? 3 : 1;
                float *a = rand_buf(m * k), *b = rand_buf(k * ldb), *bias = rand_buf(m);
                float *c = rand_buf(m), *want = rand_buf(m);
                kn_gemm_packed *pk = NULL;
                assert_int_equal(kn_gemm_pack_a(a, k, false, m, k, &pk), KILN_OK);
                kn_gemm_operand oa = {.packed = pk}, ob = {.p = b, .ld = ldb};
                kn_epilogue ep = {.bias = (mi + ki) % 3 ? bias : NULL,
                                  .bias_per_row = true,
                                  .act = acts[(mi + ki) % 4],
                                  .alpha = -0.5f,
                                  .beta = 0.75f};
                bool use_ep = (mi + ki) % 5 != 0;
                ref_gemm(false, false, m, 1, k, 1.0f, a, k, b, ldb, 0.0f, want, 1,
                         use_ep ? &ep : NULL);
                for (int threads = 0; threads < 2; threads++) {
                    assert_int_equal(kn_gemm(threads ? pool : NULL, m, 1, k, 1.0f, &oa, &ob, 0.0f,
                                             c, 1, use_ep ? &ep : NULL),
                                     KILN_OK);
                    check_close(c, want, m, 1, 1, k);
                }
                kn_gemm_packed_free(pk);
                kn_free(a);
                kn_free(b);
                kn_free(bias);
                kn_free(c);
                kn_free(want);
            }
    }
    kn_threadpool_destroy(pool);
    assert_true(kn_gemm_force_isa(orig));
}

/* The paths picked by shape: packed A with at most two column panels split by rows only on a
 * pool (49 = 32 + 16 + 1 and 64 columns; row counts that end in 1-, 5- and 8-row tiles);
 * 33-64 deep products over >= 1024 columns taking row tiles outside the panels (with 1100 a
 * partial last panel); deep panels that prefetch A (k from 64, across K slices); small
 * products over >= 6 column panels split by columns only (196 = 6 x 32 + 4); short products
 * over wide rows split by columns (97 rows: a one-row last tile; 8300 and 9000 columns: tasks
 * over >= 1024 columns, rows first within them); each with
 * sigmoid and SiLU applied in registers, bias, residual and beta, with and without threads. */
static void test_gemm_shape_paths(void **state) {
    (void)state;
    const int64_t shapes[][3] = {{97, 49, 64},   {512, 49, 300}, {125, 64, 2048}, {29, 1100, 48},
                                 {40, 1024, 64}, {13, 1030, 33}, {30, 200, 63},   {16, 70, 64},
                                 {25, 90, 65},   {96, 196, 576}, {30, 230, 100},  {100, 1100, 64},
                                 {97, 1030, 40}, {30, 8300, 48}, {20, 9000, 16}};
    const int acts[] = {KN_ACT_SWISH, KN_ACT_SIGMOID, KN_ACT_NONE, KN_ACT_RELU};
    kn_threadpool *pool = kn_threadpool_create(2);
    assert_non_null(pool);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 4; v++) {
            gemm_case t = {.m = shapes[s][0],
                           .n = shapes[s][1],
                           .k = shapes[s][2],
                           .alpha = 1.0f,
                           .beta = v == 3 ? 0.5f : 0.0f,
                           .pack = v == 2 ? 0 : 1,
                           .use_ep = true,
                           .act = acts[(s + (size_t)v) % 4],
                           .bias_mode = v % 2 ? 1 : 2,
                           .residual = v >= 2};
            run_case(pool, &t);
            run_case(NULL, &t);
        }
    kn_threadpool_destroy(pool);
}

/* cases(pools) under every ISA this CPU has (kn_gemm_force_isa), pools[0] none, pools[1] a pool
 * of 2 threads, pools[2] one of 3; the ISA is restored after. */
static void every_isa(void (*cases)(kn_threadpool *const *pools)) {
    const char *isas[] = {"avx512", "avx2", "scalar"};
    const char *orig = kn_gemm_isa();
    kn_threadpool *pools[] = {NULL, kn_threadpool_create(2), kn_threadpool_create(3)};
    assert_non_null(pools[1]);
    assert_non_null(pools[2]);
    for (size_t i = 0; i < 3; i++)
        if (kn_gemm_force_isa(isas[i]))
            cases(pools);
    kn_threadpool_destroy(pools[1]);
    kn_threadpool_destroy(pools[2]);
    assert_true(kn_gemm_force_isa(orig));
}

/* Widths whose last 1-4 columns the AVX-512 kernels take with the 16 or 32 columns before them
 * in one pass (17-20 = 16 + w; 33-36 = 32 + w, the w from the next panel, and 68, 100, 196 the
 * same at the end; 52 = 32 + 16 + 4 in one panel), with the blocks that take the tail's panel
 * too (516 = 512 + 4 in 512-column blocks, 2052 = 2048 + 4); tall tiles take the fused kernel,
 * 1-8-row edges (13 = 12 + 1, 20 = 12 + 8) the narrow one after the main tile; A packed, B
 * packed or neither, alpha and beta, bias by row and by column, a residual, clamp, SiLU and
 * sigmoid; on 1, 2 and 3 threads (row and column splits, the tail's panel in the last column
 * task) and every ISA. */
static void tail_column_cases(kn_threadpool *const *pools) {
    const int64_t ns[] = {17, 18, 19, 20, 33, 34, 35, 36, 52, 68, 100, 196, 516, 2052};
    const int64_t ms[] = {12, 9, 13, 20, 29, 96};
    const int acts[] = {KN_ACT_NONE, KN_ACT_CLIP, KN_ACT_SWISH, KN_ACT_SIGMOID};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            if (ns[ni] > 500 && ms[mi] > 20)
                continue;
            int v = (int)(ni * 7 + mi);
            gemm_case t = {.m = ms[mi],
                           .n = ns[ni],
                           .k = v % 3 == 0 ? 40 : 300,
                           .alpha = v % 4 == 1 ? 0.5f : 1.0f,
                           .beta = v % 5 == 2 ? -0.75f : 0.0f,
                           .pack = v % 3,
                           .use_ep = v % 6 != 5,
                           .act = acts[v % 4],
                           .act_a = -0.5f,
                           .act_b = 0.75f,
                           .bias_mode = v % 3 == 1 ? 1 : 2,
                           .residual = v % 2 == 0};
            run_case(pools[v % 3], &t);
            run_case(pools[(v + 1) % 3], &t);
        }
}

static void test_gemm_tail_columns(void **state) {
    (void)state;
    every_isa(tail_column_cases);
}

/* Plain B read in place (no packing) up to 64 rows over up to 256 deep: 25-64 rows (two to six
 * row tiles, the last of 1-12 rows), 65 rows and 257 deep (packed again), over widths that end
 * in full, half and narrow panels; A packed or not, beta, bias, residual, clamp and SiLU; on 1,
 * 2 and 3 threads and every ISA. */
static void direct_row_cases(kn_threadpool *const *pools) {
    const int64_t ms[] = {25, 32, 40, 48, 63, 64, 65}, ns[] = {784, 196, 49, 36},
                  ks[] = {144, 256, 257};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int v = (int)(mi * 4 + ni);
            gemm_case t = {.m = ms[mi],
                           .n = ns[ni],
                           .k = ks[v % 3],
                           .alpha = 1.0f,
                           .beta = v % 4 == 3 ? 0.5f : 0.0f,
                           .pack = v % 2,
                           .use_ep = true,
                           .act = v % 3 == 1 ? KN_ACT_SWISH : KN_ACT_CLIP,
                           .act_a = -0.5f,
                           .act_b = 0.75f,
                           .bias_mode = 2,
                           .residual = v % 2 == 0};
            run_case(pools[v % 3], &t);
        }
}

static void test_gemm_direct_rows(void **state) {
    (void)state;
    every_isa(direct_row_cases);
}

/* Deep products over small outputs on two threads, split by depth (ksplit in gemm.c): halves
 * that end inside a KC slice of the packed A (600: 300 = 256 + 44), row counts that end in 1-,
 * 5- and 8-row tiles and a single row, widths ending in a 1-column, 4-column (narrow), 16-column
 * (half) and 17-column remainder, B packed or (up to 64 rows over up to 256 deep) read in
 * place; bias by row, a residual, clamp and SiLU after the two halves are summed; the same
 * shapes on 1 and 3 threads (tiles) for comparison; every ISA. */
static void depth_split_cases(kn_threadpool *const *pools) {
    const int64_t shapes[][3] = {{97, 49, 600},  {160, 49, 960}, {96, 196, 576}, {25, 33, 300},
                                 {5, 500, 100},  {1, 1100, 200}, {48, 16, 4096}, {20, 36, 130},
                                 {32, 784, 192}, {40, 196, 240}, {64, 49, 256}};
    const int acts[] = {KN_ACT_NONE, KN_ACT_CLIP, KN_ACT_SWISH};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int p = 0; p < 3; p++) {
            gemm_case t = {.m = shapes[i][0],
                           .n = shapes[i][1],
                           .k = shapes[i][2],
                           .alpha = 1.0f,
                           .pack = 1,
                           .use_ep = (i + (size_t)p) % 3 != 0,
                           .act = acts[(i + (size_t)p) % 3],
                           .act_a = -0.5f,
                           .act_b = 0.75f,
                           .bias_mode = (i + (size_t)p) % 2 == 0 ? 2 : 0,
                           .residual = (i + (size_t)p) % 2 == 1};
            run_case(pools[p], &t);
        }
}

static void test_gemm_depth_split(void **state) {
    (void)state;
    every_isa(depth_split_cases);
}

/* Packed A over one or two column panels, deep enough that the rows are split a row tile a task,
 * more tasks than the pool hands out one at a time (tasks claimed by each thread, run_claimed):
 * 400 rows (34 tiles, the last 4 rows), 33 columns (32 + 1 in one pass), 49 and 64, across K
 * slices; bias, residual and clamp; on 2 and 3 threads and every ISA. */
static void row_task_cases(kn_threadpool *const *pools) {
    const int64_t shapes[][3] = {{400, 49, 600}, {200, 33, 1000}, {397, 64, 700}, {250, 49, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 2; v++) {
            gemm_case t = {.m = shapes[s][0],
                           .n = shapes[s][1],
                           .k = shapes[s][2],
                           .alpha = 1.0f,
                           .beta = v ? 0.5f : 0.0f,
                           .pack = 1,
                           .use_ep = true,
                           .act = KN_ACT_CLIP,
                           .act_a = -0.5f,
                           .act_b = 0.75f,
                           .bias_mode = 2,
                           .residual = v == 0};
            run_case(pools[v + 1], &t);
        }
}

static void test_gemm_row_tasks(void **state) {
    (void)state;
    every_isa(row_task_cases);
}

/* A's rows in one block with B packed in 512-column blocks (k > 64, plain B): 64 rows, 121-132
 * rows taken in one block of up to 11 tiles (133 in two), over widths that end in a partial
 * block (1100 = 2 x 512 + 76) or fit in one (300), across K slices (300 = 256 + 44); with A
 * packed, B packed and neither, with and without threads. */
static void test_gemm_one_block(void **state) {
    (void)state;
    const int64_t shapes[][3] = {{64, 1100, 256},  {121, 1100, 65}, {128, 300, 300},
                                 {132, 1100, 100}, {133, 600, 70},  {1, 1030, 65}};
    kn_threadpool *pool = kn_threadpool_create(2);
    assert_non_null(pool);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 3; v++) {
            gemm_case t = {.m = shapes[s][0],
                           .n = shapes[s][1],
                           .k = shapes[s][2],
                           .alpha = 1.0f,
                           .beta = v == 1 ? 0.5f : 0.0f,
                           .pack = v,
                           .use_ep = true,
                           .act = v == 2 ? KN_ACT_SWISH : KN_ACT_RELU,
                           .bias_mode = 2,
                           .residual = v != 0};
            run_case(pool, &t);
            run_case(NULL, &t);
        }
    kn_threadpool_destroy(pool);
}

static void test_gemm_k_zero(void **state) {
    (void)state;
    float c[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {1, 1, 1};
    kn_epilogue ep = {.bias = bias, .act = KN_ACT_RELU};
    assert_int_equal(
        kn_sgemm(NULL, false, false, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, -2.0f, c, 3, &ep), KILN_OK);
    const float want[6] = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++)
        assert_float_equal(c[i], want[i], 0);
    float d[2] = {1, 1};
    assert_int_equal(
        kn_sgemm(NULL, false, false, 1, 2, 0, 1.0f, NULL, 1, NULL, 2, 0.5f, d, 2, NULL), KILN_OK);
    assert_float_equal(d[0], 0.5f, 0);
}

static void test_act_values(void **state) {
    (void)state;
    float x[5] = {-100.0f, -2.0f, 0.0f, 3.0f, 100.0f};
    kn_act_apply(KN_ACT_SIGMOID, 0, 0, x, 5);
    float want[5] = {0.0f, 0.11920292f, 0.5f, 0.95257413f, 1.0f};
    for (int i = 0; i < 5; i++)
        assert_float_equal(x[i], want[i], 1e-6);
    float y[4] = {-3.0f, -1.0f, 2.0f, 8.0f};
    kn_act_apply(KN_ACT_CLIP, 0.0f, 6.0f, y, 4);
    assert_float_equal(y[0], 0.0f, 0);
    assert_float_equal(y[2], 2.0f, 0);
    assert_float_equal(y[3], 6.0f, 0);
}

typedef struct count_arg {
    atomic_int *hits;
} count_arg;

static void count_range(void *arg, int64_t begin, int64_t end) {
    count_arg *c = arg;
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&c->hits[i], 1);
}

static void test_threadpool_covers_once(void **state) {
    (void)state;
    int sizes_t[] = {1, 2, 4};
    for (int s = 0; s < 3; s++) {
        kn_threadpool *pool = kn_threadpool_create(sizes_t[s]);
        assert_non_null(pool);
        assert_int_equal(kn_threadpool_size(pool), sizes_t[s]);
        for (int64_t n = 0; n < 300; n += 37) {
            for (int64_t grain = 1; grain < 64; grain *= 7) {
                atomic_int hits[300];
                for (int i = 0; i < 300; i++)
                    atomic_init(&hits[i], 0);
                count_arg c = {hits};
                for (int rep = 0; rep < 3; rep++)
                    kn_parallel_for(pool, n, grain, count_range, &c);
                for (int64_t i = 0; i < 300; i++)
                    assert_int_equal(atomic_load(&hits[i]), i < n ? 3 : 0);
            }
        }
        kn_threadpool_destroy(pool);
    }
    assert_int_equal(kn_threadpool_size(NULL), 1);
}

/* Back-to-back jobs with more threads than cores: workers often wake after their job ended (the
 * caller took their chunks) and must neither run a chunk twice nor miss the next job. */
static void test_threadpool_back_to_back(void **state) {
    (void)state;
    kn_threadpool *pool = kn_threadpool_create(5);
    assert_non_null(pool);
    atomic_int hits[64];
    for (int rep = 0; rep < 20000; rep++) {
        int64_t n = 1 + rep % 64;
        for (int i = 0; i < 64; i++)
            atomic_init(&hits[i], 0);
        count_arg c = {hits};
        kn_parallel_for(pool, n, 1, count_range, &c);
        for (int64_t i = 0; i < 64; i++)
            assert_int_equal(atomic_load(&hits[i]), i < n ? 1 : 0);
    }
    kn_threadpool_destroy(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_all_isas),
        cmocka_unit_test(test_gemm_epilogue),
        cmocka_unit_test(test_gemm_k_zero),
        cmocka_unit_test(test_gemv_packed),
        cmocka_unit_test(test_gemm_shape_paths),
        cmocka_unit_test(test_gemm_one_block),
        cmocka_unit_test(test_gemm_tail_columns),
        cmocka_unit_test(test_gemm_row_tasks),
        cmocka_unit_test(test_gemm_direct_rows),
        cmocka_unit_test(test_gemm_depth_split),
        cmocka_unit_test(test_act_values),
        cmocka_unit_test(test_threadpool_covers_once),
        cmocka_unit_test(test_threadpool_back_to_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
