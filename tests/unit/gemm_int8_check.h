/* Shared by the AMX tests of the int8 GEMM (test_gemm_int8_amx.c on the CPU's tiles,
 * test_gemm_int8_amx_emu.c on emulated ones) and by test_gemm_int8.c: kn_qgemm_u8s8 against a
 * plain int32 product, with sizes around the tile edges (16 and 32 rows and columns, 64 k a
 * step) and extreme values. */
#ifndef KN_TEST_GEMM_INT8_CHECK_H
#define KN_TEST_GEMM_INT8_CHECK_H

#include "backend/cpu/math/gemm_int8.h"
#include "core/alloc.h"

static uint32_t check_rng = 99;

static inline uint32_t check_next(void) {
    check_rng = check_rng * 1664525u + 1013904223u;
    return check_rng >> 8;
}

/* The dispatched kernel and the portable one against a plain int32 product, B given row-major
 * ([k][n]) or transposed ([n][k], as convolution weights are), and the packing's column sums. */
static inline void check_qgemm_b(int64_t m, int64_t n, int64_t k, bool extreme, bool trans_b) {
    int64_t kp = (k + 3) / 4 * 4, lda = kp + 5;
    uint8_t *a = kn_malloc((size_t)(m * lda + 1));
    int8_t *b = kn_malloc((size_t)(k * n + 1));
    assert_true(a != NULL && b != NULL);
    /* bytes past k in A's rows hold anything, as the contract allows */
    for (int64_t i = 0; i < m * lda; i++)
        a[i] = extreme ? 255 : (uint8_t)check_next();
    for (int64_t i = 0; i < k * n; i++)
        b[i] = extreme ? -128 : (int8_t)check_next();
    kn_qgemm_b pb;
    assert_int_equal(trans_b ? kn_qgemm_pack_b(b, k, n, 1, k, &pb)
                             : kn_qgemm_pack_b(b, k, n, n, 1, &pb),
                     KILN_OK);
    int64_t ldc = pb.nb * 16 + 3;
    int32_t *c = kn_calloc((size_t)(m * ldc + 1), sizeof(int32_t));
    int32_t *c2 = kn_calloc((size_t)(m * ldc + 1), sizeof(int32_t));
    assert_true(c != NULL && c2 != NULL);
    kn_qgemm_u8s8(a, lda, m, &pb, c, ldc);
    kn_qgemm_u8s8_portable(a, lda, m, &pb, c2, ldc);
    for (int64_t j = 0; j < n; j++) {
        int32_t cs = 0;
        for (int64_t e = 0; e < k; e++)
            cs += trans_b ? b[j * k + e] : b[e * n + j];
        assert_int_equal(pb.colsum[j], cs);
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int32_t ref = 0;
            for (int64_t e = 0; e < k; e++)
                ref += (int32_t)a[i * lda + e] * (trans_b ? b[j * k + e] : b[e * n + j]);
            if (c[i * ldc + j] != ref || c2[i * ldc + j] != ref)
                fail_msg("m=%lld n=%lld k=%lld at (%lld, %lld): %d / %d (portable), want %d",
                         (long long)m, (long long)n, (long long)k, (long long)i, (long long)j,
                         c[i * ldc + j], c2[i * ldc + j], ref);
        }
    kn_free(a);
    kn_free(b);
    kn_free(c);
    kn_free(c2);
    kn_qgemm_b_free(&pb);
}

static inline void check_qgemm(int64_t m, int64_t n, int64_t k, bool extreme) {
    check_qgemm_b(m, n, k, extreme, false);
}

static inline void check_qgemm_shapes(void) {
    static const int64_t sizes[][3] = {
        {16, 16, 64},   {32, 32, 64},  {16, 1, 1},     {17, 15, 3},   {31, 17, 4},    {32, 33, 60},
        {33, 32, 63},   {48, 48, 65},  {63, 100, 127}, {64, 16, 128}, {100, 33, 129}, {16, 48, 300},
        {40, 64, 1000}, {96, 96, 576}, {20, 7, 2},     {5, 40, 200},
    };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        check_qgemm(sizes[s][0], sizes[s][1], sizes[s][2], false);
    check_qgemm(32, 32, 1000, true);
    check_qgemm(19, 17, 131, true);
}

#endif
