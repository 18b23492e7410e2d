/* The int8 GEMM (uint8 x int8 -> int32) against a plain C product over odd sizes: k not a
 * multiple of 4, m not a multiple of the 6-row tile, n not a multiple of 16 or 32, extreme
 * values (255 x -128) in every position. Both the dispatched kernel and the portable one. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu/math/gemm_int8.h"
#include "core/alloc.h"

#include <string.h>

static uint32_t rng = 777;

static uint32_t next(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

static void check(int64_t m, int64_t n, int64_t k, bool extreme) {
    int64_t kp = (k + 3) / 4 * 4, lda = kp + 3;
    uint8_t *a = kn_malloc((size_t)(m * lda + 1));
    int8_t *b = kn_malloc((size_t)(k * n + 1));
    assert_non_null(a);
    assert_non_null(b);
    for (int64_t i = 0; i < m * lda; i++)
        a[i] = extreme ? 255 : (uint8_t)next();
    for (int64_t i = 0; i < k * n; i++)
        b[i] = extreme ? -128 : (int8_t)next();
    kn_qgemm_b pb;
    /* B given transposed ([n][k]) as convolution weights are. */
    assert_int_equal(kn_qgemm_pack_b(b, k, n, 1, k, &pb), KILN_OK);
    int64_t ldc = pb.nb * 16;
    int32_t *c = kn_calloc((size_t)(m * ldc + 1), sizeof(int32_t));
    int32_t *c2 = kn_calloc((size_t)(m * ldc + 1), sizeof(int32_t));
    assert_non_null(c);
    assert_non_null(c2);
    kn_qgemm_u8s8(a, lda, m, &pb, c, ldc);
    kn_qgemm_u8s8_portable(a, lda, m, &pb, c2, ldc);
    for (int64_t j = 0; j < n; j++) {
        int32_t cs = 0;
        for (int64_t e = 0; e < k; e++)
            cs += b[j * k + e];
        assert_int_equal(pb.colsum[j], cs);
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int32_t ref = 0;
            for (int64_t e = 0; e < k; e++)
                ref += (int32_t)a[i * lda + e] * b[j * k + e];
            if (c[i * ldc + j] != ref || c2[i * ldc + j] != ref)
                fail_msg("m=%lld n=%lld k=%lld at (%lld, %lld): %d / %d, want %d", (long long)m,
                         (long long)n, (long long)k, (long long)i, (long long)j, c[i * ldc + j],
                         c2[i * ldc + j], ref);
        }
    kn_free(c);
    kn_free(c2);
    kn_qgemm_b_free(&pb);
    kn_free(a);
    kn_free(b);
}

static void test_odd_sizes(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 5, 6, 7, 13};
    static const int64_t ns[] = {1, 15, 16, 17, 33, 48};
    static const int64_t ks[] = {1, 3, 4, 5, 31, 64, 147};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
            for (size_t e = 0; e < sizeof ks / sizeof ks[0]; e++)
                check(ms[i], ns[j], ks[e], false);
}

static void test_extremes(void **state) {
    (void)state;
    check(7, 35, 1027, true);
    check(12, 64, 4608, true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_sizes),
        cmocka_unit_test(test_extremes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
