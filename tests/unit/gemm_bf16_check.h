/* Shared by the AMX tests of the bf16 GEMM (test_gemm_bf16_amx.c on the CPU's tiles,
 * test_gemm_bf16_amx_emu.c on emulated ones) and by test_gemm_bf16.c: one product against a
 * reference that rounds the inputs to bf16 and sums in fp64, every operand form, four epilogues,
 * then a table of shapes around the tile edges (16 and 32 rows and columns, 16 pairs of K and the
 * 256-pair K slice). */
#ifndef KN_TEST_GEMM_BF16_CHECK_H
#define KN_TEST_GEMM_BF16_CHECK_H

#include "backend/cpu/math/gemm_bf16.h"
#include "core/alloc.h"
#include "core/tensor.h"
#include "core/threadpool.h"

#include <math.h>
#include <stdlib.h>

static uint32_t check_rng = 4242;

static inline float check_rand(void) {
    check_rng = check_rng * 1664525u + 1013904223u;
    return (float)((check_rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static inline double check_bf16(float x) {
    return kn_bf16_to_float(kn_float_to_bf16(x));
}

typedef struct check_panel_src {
    const float *b;
    int64_t ldb;
} check_panel_src;

/* A kn_gemm_pack_fn over a row-major k x n matrix (what convolution's im2col packers are). */
static inline void check_pack_panel(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                                    float *dst) {
    const check_panel_src *s = arg;
    for (int64_t p = 0; p * KN_BF16_NR < nc; p++)
        for (int64_t q = 0; q < kc; q++)
            for (int64_t j = 0; j < KN_BF16_NR; j++) {
                int64_t col = p * KN_BF16_NR + j;
                dst[(p * kc + q) * KN_BF16_NR + j] =
                    col < nc ? s->b[(k0 + q) * s->ldb + n0 + col] : 0.0f;
            }
}

enum { CA_PACKED, CA_PACKED_BF16, CA_PLAIN, CA_TRANS, CA_FORMS };
enum { CB_PACKED, CB_PLAIN, CB_TRANS, CB_PACK_FN, CB_PACKED_TRANS, CB_FORMS };
/* none; bias per row + Relu; bias per column + residual + Clip; residual + GELU; bias per row
 * + residual + Relu */
enum { CE_NONE, CE_ROW_RELU, CE_COL_RES_CLIP, CE_RES_GELU, CE_ROW_RES_RELU, CE_FORMS };

static inline double check_act(int e, double x) {
    switch (e) {
    case CE_ROW_RELU:
    case CE_ROW_RES_RELU:
        return x > 0 ? x : 0;
    case CE_COL_RES_CLIP:
        return x < -0.5 ? -0.5 : x > 2.0 ? 2.0 : x;
    case CE_RES_GELU:
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default:
        return x;
    }
}

static inline void check_product(kn_threadpool *pool, int64_t m, int64_t n, int64_t k, int af,
                                 int bf, int ef) {
    int64_t lda = k + 3, ldb = n + 1, ldc = n + 2;
    float *a = kn_malloc((size_t)(m * lda + 1) * sizeof(float));
    float *at = kn_malloc((size_t)(k * m + 1) * sizeof(float));
    uint16_t *a16 = kn_malloc((size_t)(m * lda + 1) * sizeof(uint16_t));
    float *b = kn_malloc((size_t)(k * ldb + 1) * sizeof(float));
    float *bt = kn_malloc((size_t)(n * k + 1) * sizeof(float));
    float *c = kn_malloc((size_t)(m * ldc + 1) * sizeof(float));
    float *res = kn_malloc((size_t)(m * n + 1) * sizeof(float));
    float *bias = kn_malloc((size_t)(m + n + 1) * sizeof(float));
    assert_true(a && at && a16 && b && bt && c && res && bias);
    for (int64_t i = 0; i < m * lda; i++) {
        a[i] = check_rand();
        a16[i] = kn_float_to_bf16(a[i]);
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t q = 0; q < k; q++)
            at[q * m + i] = a[i * lda + q];
    for (int64_t i = 0; i < k * ldb; i++)
        b[i] = check_rand();
    for (int64_t q = 0; q < k; q++)
        for (int64_t j = 0; j < n; j++)
            bt[j * k + q] = b[q * ldb + j];
    for (int64_t i = 0; i < m * n; i++)
        res[i] = check_rand();
    for (int64_t i = 0; i < m + n; i++)
        bias[i] = check_rand();
    for (int64_t i = 0; i < m * ldc; i++)
        c[i] = 1234.5f; /* the padding columns between n and ldc must survive */
    kn_bf16_packed *pa = NULL, *pb = NULL;
    kn_bf16_operand oa = {0}, ob = {0};
    check_panel_src ps = {.b = b, .ldb = ldb};
    if (af == CA_PACKED || af == CA_PACKED_BF16) {
        const void *src = af == CA_PACKED ? (const void *)a : (const void *)a16;
        int32_t dt = af == CA_PACKED ? KILN_DTYPE_FLOAT32 : KILN_DTYPE_BFLOAT16;
        assert_int_equal(kn_bf16_pack_a(src, dt, lda, false, m, k, &pa), KILN_OK);
        oa.packed = pa;
    } else if (af == CA_PLAIN) {
        oa = (kn_bf16_operand){.p = a, .ld = lda};
    } else {
        oa = (kn_bf16_operand){.p = at, .ld = m, .trans = true};
    }
    if (bf == CB_PACKED) {
        assert_int_equal(kn_bf16_pack_b(b, KILN_DTYPE_FLOAT32, ldb, false, k, n, &pb), KILN_OK);
        ob.packed = pb;
    } else if (bf == CB_PACKED_TRANS) {
        assert_int_equal(kn_bf16_pack_b(bt, KILN_DTYPE_FLOAT32, k, true, k, n, &pb), KILN_OK);
        ob.packed = pb;
    } else if (bf == CB_PLAIN) {
        ob = (kn_bf16_operand){.p = b, .ld = ldb};
    } else if (bf == CB_TRANS) {
        ob = (kn_bf16_operand){.p = bt, .ld = k, .trans = true};
    } else {
        ob = (kn_bf16_operand){.pack = check_pack_panel, .pack_arg = &ps};
    }
    kn_epilogue ep = {.ldr = n};
    if (ef == CE_ROW_RELU)
        ep = (kn_epilogue){.bias = bias, .bias_per_row = true, .act = KN_ACT_RELU};
    else if (ef == CE_COL_RES_CLIP)
        ep = (kn_epilogue){
            .bias = bias, .residual = res, .ldr = n, .act = KN_ACT_CLIP, .alpha = -0.5f, .beta = 2};
    else if (ef == CE_RES_GELU)
        ep = (kn_epilogue){.residual = res, .ldr = n, .act = KN_ACT_GELU};
    else if (ef == CE_ROW_RES_RELU)
        ep = (kn_epilogue){
            .bias = bias, .bias_per_row = true, .residual = res, .ldr = n, .act = KN_ACT_RELU};
    assert_int_equal(kn_gemm_bf16(pool, m, n, k, &oa, &ob, c, ldc, ef == CE_NONE ? NULL : &ep),
                     KILN_OK);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            for (int64_t q = 0; q < k; q++) {
                double p = check_bf16(a[i * lda + q]) * check_bf16(b[q * ldb + j]);
                ref += p;
                mag += fabs(p);
            }
            if (ep.bias != NULL)
                ref += ep.bias_per_row ? bias[i] : bias[j];
            if (ep.residual != NULL)
                ref += res[i * n + j];
            ref = check_act(ef, ref);
            /* fp32 sums of exact bf16 products: k ulps of the sum of magnitudes; GELU's slope
             * is below 1.13 and its vector form within a few ulps. */
            double tol = 1e-5 + (double)k * 6e-8 * mag * 1.2;
            if (fabs(c[i * ldc + j] - ref) > tol)
                fail_msg("m=%lld n=%lld k=%lld a=%d b=%d ep=%d at (%lld,%lld): %g vs %g",
                         (long long)m, (long long)n, (long long)k, af, bf, ef, (long long)i,
                         (long long)j, (double)c[i * ldc + j], ref);
        }
        for (int64_t j = n; j < ldc; j++)
            assert_true(c[i * ldc + j] == 1234.5f);
    }
    kn_bf16_packed_free(pa);
    kn_bf16_packed_free(pb);
    kn_free(a);
    kn_free(at);
    kn_free(a16);
    kn_free(b);
    kn_free(bt);
    kn_free(c);
    kn_free(res);
    kn_free(bias);
}

/* Every shape with every operand form (one side is always the activation), the epilogues in
 * turn, on one thread and on a pool of `threads`. */
static inline void check_shapes(int threads) {
    static const int64_t sizes[][3] = {
        {16, 16, 32}, {32, 32, 32}, {1, 1, 1},      {16, 1, 1},     {17, 15, 1},    {33, 17, 2},
        {31, 33, 33}, {47, 49, 63}, {64, 64, 512},  {20, 100, 513}, {100, 31, 70},  {48, 80, 1100},
        {5, 40, 300}, {130, 7, 97}, {16, 1000, 64}, {3, 16, 31},    {96, 96, 2050}, {32, 48, 514},
    };
    kn_threadpool *pool = kn_threadpool_create(threads);
    assert_non_null(pool);
    int e = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int af = 0; af < CA_FORMS; af++)
            for (int bf = 0; bf < CB_FORMS; bf++) {
                bool a_packed = af == CA_PACKED || af == CA_PACKED_BF16;
                if (a_packed && (bf == CB_PACKED || bf == CB_PACKED_TRANS))
                    continue; /* one side is always the activation */
                check_product(NULL, sizes[s][0], sizes[s][1], sizes[s][2], af, bf, e++ % CE_FORMS);
                check_product(pool, sizes[s][0], sizes[s][1], sizes[s][2], af, bf, e++ % CE_FORMS);
            }
    kn_threadpool_destroy(pool);
}

#endif
