/* bf16 GEMM (both paths) against a reference that rounds the inputs to bf16 and accumulates in
 * fp64: odd sizes, column tails, odd K (the native path multiplies pairs along K). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu/math/gemm_bf16.h"
#include "core/alloc.h"
#include "core/tensor.h"

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

static void check_sizes(int64_t m, int64_t n, int64_t k) {
    int64_t lda = k + 3, ldb = n + 1, ldc = n + 2;
    float *a = kn_malloc((size_t)(m * lda) * sizeof(float));
    float *b = kn_malloc((size_t)(k * ldb) * sizeof(float));
    float *c = kn_malloc((size_t)(m * ldc) * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    for (int64_t i = 0; i < m * lda; i++)
        a[i] = frand();
    for (int64_t i = 0; i < k * ldb; i++)
        b[i] = frand();
    for (int64_t i = 0; i < m * ldc; i++)
        c[i] = 1234.5f; /* the padding columns between n and ldc must survive */
    kn_bf16_packed_b pb;
    assert_true(kn_bf16_pack_b(&pb, b, ldb, k, n));
    assert_true(kn_gemm_bf16(m, a, lda, &pb, c, ldc));
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            for (int64_t q = 0; q < k; q++) {
                double p = (double)round_bf16(a[i * lda + q]) * round_bf16(b[q * ldb + j]);
                ref += p;
                mag += fabs(p);
            }
            /* fp32 accumulation of exact bf16 products: error bounded by k ulps of the sum of
             * magnitudes. */
            double tol = 1e-6 + (double)k * 6e-8 * mag;
            if (fabs(c[i * ldc + j] - ref) > tol)
                fail_msg("m=%lld n=%lld k=%lld at (%lld,%lld): %g vs %g", (long long)m,
                         (long long)n, (long long)k, (long long)i, (long long)j,
                         (double)c[i * ldc + j], ref);
        }
        for (int64_t j = n; j < ldc; j++)
            assert_true(c[i * ldc + j] == 1234.5f);
    }
    kn_bf16_packed_b_free(&pb);
    kn_free(a);
    kn_free(b);
    kn_free(c);
}

static void run_sizes(void) {
    static const int64_t sizes[][3] = {{1, 1, 1},       {1, 16, 2}, {3, 17, 5},    {7, 33, 64},
                                       {5, 15, 1},      {2, 48, 3}, {9, 100, 257}, {4, 31, 128},
                                       {1, 1000, 2048}, {6, 7, 0}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        check_sizes(sizes[s][0], sizes[s][1], sizes[s][2]);
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
    kn_bf16_packed_b pb;
    assert_true(kn_bf16_pack_b(&pb, b, n, k, n));
    assert_true(kn_gemm_bf16(m, a, k, &pb, c, n));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            for (int64_t q = 0; q < k; q++) {
                ref += (double)a[i * k + q] * b[q * n + j];
                mag += fabs((double)a[i * k + q] * b[q * n + j]);
            }
            assert_true(fabs(c[i * n + j] - ref) < 2 * 0.0078125 * mag / sqrt((double)k) + 1e-3);
        }
    kn_bf16_packed_b_free(&pb);
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
