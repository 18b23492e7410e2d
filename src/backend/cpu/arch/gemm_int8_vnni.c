/* AVX512-VNNI int8 micro-kernel: a 6 x 32 tile of int32 in 12 zmm accumulators. Each step
 * broadcasts four uint8 of a row of A and multiplies them with four int8 of 16 columns of B
 * (vpdpbusd), so one step covers four k. Rows past m and blocks past nb are not computed. */
#include "backend/cpu/math/gemm_int8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

VNNI __attribute__((always_inline)) static inline void tile(const uint8_t *a, int64_t lda, int mr,
                                                            const int8_t *b0, const int8_t *b1,
                                                            int64_t kp, int32_t *c, int64_t ldc,
                                                            int rows, bool two) {
    __m512i acc[6][2];
    for (int i = 0; i < 6; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_si512();
    for (int64_t e = 0; e < kp; e += 4) {
        __m512i v0 = _mm512_load_si512((const void *)(b0 + e * 16));
        __m512i v1 = two ? _mm512_load_si512((const void *)(b1 + e * 16)) : v0;
        for (int i = 0; i < rows; i++) {
            if (i >= mr)
                break;
            int32_t q;
            memcpy(&q, a + i * lda + e, 4);
            __m512i x = _mm512_set1_epi32(q);
            acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], x, v0);
            if (two)
                acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], x, v1);
        }
    }
    for (int i = 0; i < rows && i < mr; i++) {
        _mm512_storeu_si512((void *)(c + i * ldc), acc[i][0]);
        if (two)
            _mm512_storeu_si512((void *)(c + i * ldc + 16), acc[i][1]);
    }
}

VNNI static void tile6x2(const uint8_t *a, int64_t lda, const int8_t *b0, const int8_t *b1,
                         int64_t kp, int32_t *c, int64_t ldc) {
    tile(a, lda, 6, b0, b1, kp, c, ldc, 6, true);
}

VNNI static void tile6x1(const uint8_t *a, int64_t lda, const int8_t *b0, int64_t kp, int32_t *c,
                         int64_t ldc) {
    tile(a, lda, 6, b0, b0, kp, c, ldc, 6, false);
}

VNNI static void tile_edge(const uint8_t *a, int64_t lda, int mr, const int8_t *b0,
                           const int8_t *b1, int64_t kp, int32_t *c, int64_t ldc, bool two) {
    if (two)
        tile(a, lda, mr, b0, b1, kp, c, ldc, 6, true);
    else
        tile(a, lda, mr, b0, b0, kp, c, ldc, 6, false);
}

void kn_qgemm_u8s8_vnni(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b, int32_t *c,
                        int64_t ldc) {
    int64_t blk = b->kp * 16;
    for (int64_t j = 0; j < b->nb; j += 2) {
        bool two = j + 1 < b->nb;
        const int8_t *b0 = b->packed + j * blk, *b1 = two ? b0 + blk : b0;
        int64_t i = 0;
        for (; i + 6 <= m; i += 6) {
            if (two)
                tile6x2(a + i * lda, lda, b0, b1, b->kp, c + i * ldc + j * 16, ldc);
            else
                tile6x1(a + i * lda, lda, b0, b->kp, c + i * ldc + j * 16, ldc);
        }
        if (i < m)
            tile_edge(a + i * lda, lda, (int)(m - i), b0, b1, b->kp, c + i * ldc + j * 16, ldc,
                      two);
    }
}
#endif
