/* bf16 GEMM (both paths) against a reference that rounds the inputs to bf16 and accumulates in
 * fp64: odd sizes, row and column tails, odd K (both paths multiply pairs along K), every
 * operand form (packed from float32 or bfloat16, plain, transposed, a packing routine), the
 * epilogue, one thread and two; then against an fp32 product. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "gemm_bf16_check.h"

static void run_sizes(void) {
    static const int64_t sizes[][3] = {{1, 1, 1},     {1, 16, 2},    {3, 17, 5},    {7, 33, 64},
                                       {5, 15, 1},    {2, 48, 3},    {9, 100, 257}, {4, 31, 128},
                                       {1, 1000, 70}, {17, 65, 300}, {6, 7, 0},     {64, 96, 513},
                                       {13, 49, 600}, {40, 81, 33}};
    kn_threadpool *pool = kn_threadpool_create(2);
    assert_non_null(pool);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int af = 0; af < CA_FORMS; af++)
            for (int bf = 0; bf < CB_FORMS; bf++) {
                bool a_packed = af == CA_PACKED || af == CA_PACKED_BF16;
                bool b_packed = bf == CB_PACKED || bf == CB_PACKED_TRANS;
                if (a_packed && b_packed)
                    continue; /* one side is always the activation */
                bool ep = (af + bf) % 2 == 0;
                check_product(NULL, sizes[s][0], sizes[s][1], sizes[s][2], af, bf,
                              ep ? CE_ROW_RES_RELU : CE_NONE);
                check_product(pool, sizes[s][0], sizes[s][1], sizes[s][2], af, bf,
                              ep ? CE_NONE : CE_ROW_RES_RELU);
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
        a[i] = check_rand();
    for (int64_t i = 0; i < k * n; i++)
        b[i] = check_rand();
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
