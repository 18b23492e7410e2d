/* bf16 GEMM (both paths) against a reference that rounds the inputs to bf16 and accumulates in
 * fp64: odd sizes, row and column tails, odd K (both paths multiply pairs along K), every
 * operand form (packed from float32 or bfloat16, plain, transposed, a packing routine), the
 * epilogue, one thread and two; then against an fp32 product. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu/math/gemm_bf16.h"
#include "core/alloc.h"
#include "core/tensor.h"
#include "core/threadpool.h"

#include <math.h>
#include <stdlib.h>

static uint32_t rng_state = 777;

static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static float round_bf16(float x) {
    return kn_bf16_to_float(kn_float_to_bf16(x));
}

/* A kn_gemm_pack_fn over a row-major k x n matrix: what convolution's im2col packers do. */
typedef struct panel_src {
    const float *b;
    int64_t ldb;
} panel_src;

static void pack_panel(void *arg, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *dst) {
    const panel_src *s = arg;
    for (int64_t p = 0; p * KN_BF16_NR < nc; p++)
        for (int64_t q = 0; q < kc; q++)
            for (int64_t j = 0; j < KN_BF16_NR; j++) {
                int64_t col = p * KN_BF16_NR + j;
                dst[(p * kc + q) * KN_BF16_NR + j] =
                    col < nc ? s->b[(k0 + q) * s->ldb + n0 + col] : 0.0f;
            }
}

enum { A_PACKED, A_PACKED_BF16, A_PLAIN, A_TRANS };
enum { B_PACKED, B_PACKED_TRANS, B_PLAIN, B_TRANS, B_PACK_FN };

static void check(kn_threadpool *pool, int64_t m, int64_t n, int64_t k, int af, int bf,
                  bool epilogue) {
    int64_t lda = k + 3, ldb = n + 1, ldc = n + 2;
    float *a = kn_malloc((size_t)(m * lda + 1) * sizeof(float));
    float *at = kn_malloc((size_t)(k * m + 1) * sizeof(float));
    uint16_t *a16 = kn_malloc((size_t)(m * lda + 1) * sizeof(uint16_t));
    float *b = kn_malloc((size_t)(k * ldb + 1) * sizeof(float));
    float *bt = kn_malloc((size_t)(n * k + 1) * sizeof(float));
    float *c = kn_malloc((size_t)(m * ldc + 1) * sizeof(float));
    float *res = kn_malloc((size_t)(m * n + 1) * sizeof(float));
    float *bias = kn_malloc((size_t)(m + 1) * sizeof(float));
    assert_true(a && at && a16 && b && bt && c && res && bias);
    for (int64_t i = 0; i < m * lda; i++) {
        a[i] = frand();
        a16[i] = kn_float_to_bf16(a[i]);
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t q = 0; q < k; q++)
            at[q * m + i] = a[i * lda + q];
    for (int64_t i = 0; i < k * ldb; i++)
        b[i] = frand();
    for (int64_t q = 0; q < k; q++)
        for (int64_t j = 0; j < n; j++)
            bt[j * k + q] = b[q * ldb + j];
    for (int64_t i = 0; i < m * n; i++)
        res[i] = frand();
    for (int64_t i = 0; i < m; i++)
        bias[i] = frand();
    for (int64_t i = 0; i < m * ldc; i++)
        c[i] = 1234.5f; /* the padding columns between n and ldc must survive */
    kn_bf16_packed *pa = NULL, *pb = NULL;
    kn_bf16_operand oa = {0}, ob = {0};
    panel_src ps = {.b = b, .ldb = ldb};
    switch (af) {
    case A_PACKED:
        assert_int_equal(kn_bf16_pack_a(a, KILN_DTYPE_FLOAT32, lda, false, m, k, &pa), KILN_OK);
        oa.packed = pa;
        break;
    case A_PACKED_BF16:
        assert_int_equal(kn_bf16_pack_a(a16, KILN_DTYPE_BFLOAT16, lda, false, m, k, &pa), KILN_OK);
        oa.packed = pa;
        break;
    case A_PLAIN:
        oa = (kn_bf16_operand){.p = a, .ld = lda};
        break;
    default:
        oa = (kn_bf16_operand){.p = at, .ld = m, .trans = true};
        break;
    }
    switch (bf) {
    case B_PACKED:
        assert_int_equal(kn_bf16_pack_b(b, KILN_DTYPE_FLOAT32, ldb, false, k, n, &pb), KILN_OK);
        ob.packed = pb;
        break;
    case B_PACKED_TRANS:
        assert_int_equal(kn_bf16_pack_b(bt, KILN_DTYPE_FLOAT32, k, true, k, n, &pb), KILN_OK);
        ob.packed = pb;
        break;
    case B_PLAIN:
        ob = (kn_bf16_operand){.p = b, .ld = ldb};
        break;
    case B_TRANS:
        ob = (kn_bf16_operand){.p = bt, .ld = k, .trans = true};
        break;
    default:
        ob = (kn_bf16_operand){.pack = pack_panel, .pack_arg = &ps};
        break;
    }
    kn_epilogue ep = {
        .bias = bias, .bias_per_row = true, .residual = res, .ldr = n, .act = KN_ACT_RELU};
    assert_int_equal(kn_gemm_bf16(pool, m, n, k, &oa, &ob, c, ldc, epilogue ? &ep : NULL), KILN_OK);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            for (int64_t q = 0; q < k; q++) {
                double p = (double)round_bf16(a[i * lda + q]) * round_bf16(b[q * ldb + j]);
                ref += p;
                mag += fabs(p);
            }
            if (epilogue) {
                ref += (double)bias[i] + res[i * n + j];
                ref = ref > 0 ? ref : 0;
            }
            /* fp32 accumulation of exact bf16 products: error bounded by k ulps of the sum of
             * magnitudes. */
            double tol = 1e-6 + (double)k * 6e-8 * mag;
            if (fabs(c[i * ldc + j] - ref) > tol)
                fail_msg("m=%lld n=%lld k=%lld a=%d b=%d at (%lld,%lld): %g vs %g", (long long)m,
                         (long long)n, (long long)k, af, bf, (long long)i, (long long)j,
                         (double)c[i * ldc + j], ref);
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

static void run_sizes(void) {
    static const int64_t sizes[][3] = {{1, 1, 1},     {1, 16, 2},    {3, 17, 5},    {7, 33, 64},
                                       {5, 15, 1},    {2, 48, 3},    {9, 100, 257}, {4, 31, 128},
                                       {1, 1000, 70}, {17, 65, 300}, {6, 7, 0},     {64, 96, 513}};
    kn_threadpool *pool = kn_threadpool_create(2);
    assert_non_null(pool);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int af = A_PACKED; af <= A_TRANS; af++)
            for (int bf = B_PACKED; bf <= B_PACK_FN; bf++) {
                bool a_packed = af == A_PACKED || af == A_PACKED_BF16;
                bool b_packed = bf == B_PACKED || bf == B_PACKED_TRANS;
                if (a_packed && b_packed)
                    continue; /* one side is always the activation */
                bool ep = (af + bf) % 2 == 0;
                check(NULL, sizes[s][0], sizes[s][1], sizes[s][2], af, bf, ep);
                check(pool, sizes[s][0], sizes[s][1], sizes[s][2], af, bf, !ep);
            }
    kn_threadpool_destroy(pool);
}

static void test_native_or_default(void **state) {
    (void)state;
    unsetenv("KILN_BF16_PORTABLE");
    run_sizes();
}

static void test_portable(void **state) {
    (void)state;
    setenv("KILN_BF16_PORTABLE", "1", 1);
    assert_false(kn_bf16_native());
    run_sizes();
    unsetenv("KILN_BF16_PORTABLE");
}

/* Rounding to bf16 loses accuracy the reference sees too; against an fp32 product the error is
 * that of 8-bit mantissas, which the test bounds so a wrong rounding mode shows. */
static void test_against_fp32(void **state) {
    (void)state;
    int64_t m = 4, n = 40, k = 300;
    float *a = kn_malloc((size_t)(m * k) * sizeof(float));
    float *b = kn_malloc((size_t)(k * n) * sizeof(float));
    float *c = kn_malloc((size_t)(m * n) * sizeof(float));
    for (int64_t i = 0; i < m * k; i++)
        a[i] = frand();
    for (int64_t i = 0; i < k * n; i++)
        b[i] = frand();
    kn_bf16_packed *pb;
    assert_int_equal(kn_bf16_pack_b(b, KILN_DTYPE_FLOAT32, n, false, k, n, &pb), KILN_OK);
    kn_bf16_operand oa = {.p = a, .ld = k}, ob = {.packed = pb};
    assert_int_equal(kn_gemm_bf16(NULL, m, n, k, &oa, &ob, c, n, NULL), KILN_OK);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            for (int64_t q = 0; q < k; q++) {
                ref += (double)a[i * k + q] * b[q * n + j];
                mag += fabs((double)a[i * k + q] * b[q * n + j]);
            }
            assert_true(fabs(c[i * n + j] - ref) < 2 * 0.0078125 * mag / sqrt((double)k) + 1e-3);
        }
    kn_bf16_packed_free(pb);
    kn_free(a);
    kn_free(b);
    kn_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_native_or_default),
        cmocka_unit_test(test_portable),
        cmocka_unit_test(test_against_fp32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
