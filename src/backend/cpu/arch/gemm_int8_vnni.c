/* AVX512-VNNI int8 micro-kernel: a 6 x 32 tile of int32 in 12 zmm accumulators. Each step
 * broadcasts four uint8 of a row of A and multiplies them with four int8 of 16 columns of B
 * (vpdpbusd), so one step covers four k. Rows past m and blocks past nb are not computed.
 *
 * vpdpbusd's latency needs about a dozen independent sums in flight to keep the Zen 5 box's two
 * vpdpbusd pipes busy (12 chains run at 520 GMAC/s, its peak, 8 at 370; the 6 x 2 tile reaches
 * that peak, so wider tiles gain nothing there: docs/perf-notes.md). The narrower tiles make up
 * their chains otherwise: the last, odd 16-column block takes 16 rows at once, and an edge of
 * four rows or fewer keeps two sums a row and block, one over the even 4-k steps and one over
 * the odd ones, added at the store (int32 sums wrap the same in any order: the same bits). */
#include "backend/cpu/math/gemm_int8.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* The accumulators are named variables, not an array: as an array GCC 12 kept them on the stack
 * at -O2 and copied them between registers every step at -O3 (24 moves for 12 vpdpbusd), which
 * held the kernel to about 60 % of its rate (315 against 510 GMAC/s on a 66 x 576 x 160 product
 * on the Zen 5 box; docs/perf-notes.md). Rows r >= mr are neither computed nor stored: mr is a
 * constant for the full tiles, where the tests fold away, and the edge's row count. */

/* Four uint8 of row r of A at k = e, in every lane. */
#define KN_Q_BCAST(x, r, e)                                                                        \
    int32_t x##q;                                                                                  \
    memcpy(&x##q, a + (r)*lda + (e), 4);                                                           \
    __m512i x = _mm512_set1_epi32(x##q);

/* The weights (A) are read once per pair of blocks, mostly from L3 or memory (ResNet-50 holds 25
 * MB of them), as six (or sixteen) streams of 4 bytes a step, which the hardware prefetcher did
 * not keep ahead of: the 7x7 stage's products ran at 360-415 GMAC/s with the weights cold. A
 * prefetch 1 KiB on in each row, once a cache line (past a row's end it reaches the next tiles'
 * rows), brings them to 460-520 (docs/perf-notes.md; 512 bytes or a prefetch to L2 did less). */
#define KN_Q_AHEAD 1024
#define KN_Q_PREFETCH(rows)                                                                        \
    if ((e & 63) == 0)                                                                             \
        for (int r = 0; r < (rows); r++)                                                           \
            _mm_prefetch((const char *)(a + r * lda + e + KN_Q_AHEAD), _MM_HINT_T0);

/* Bytes ahead of a packed B block that the B_AHEAD tiles fetch (128 steps of four k, 8 KB). */
#define KN_Q_B_AHEAD 8192

#define KN_Q_ROW2(r)                                                                               \
    if ((r) < mr) {                                                                                \
        KN_Q_BCAST(x, r, e)                                                                        \
        c##r##0 = _mm512_dpbusd_epi32(c##r##0, x, v0);                                             \
        c##r##1 = _mm512_dpbusd_epi32(c##r##1, x, v1);                                             \
    }
#define KN_Q_STORE2(r)                                                                             \
    if ((r) < mr) {                                                                                \
        _mm512_storeu_si512((void *)(c + (r)*ldc), c##r##0);                                       \
        _mm512_storeu_si512((void *)(c + (r)*ldc + 16), c##r##1);                                  \
    }

/* Up to 6 rows by 32 columns (two 16-column blocks b0, b1). */
VNNI __attribute__((always_inline)) static inline void tile2(const uint8_t *a, int64_t lda, int mr,
                                                             const int8_t *b0, const int8_t *b1,
                                                             int64_t kp, int32_t *c, int64_t ldc,
                                                             const int B_AHEAD) {
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t e = 0; e < kp; e += 4) {
        __m512i v0 = _mm512_load_si512((const void *)(b0 + e * 16));
        __m512i v1 = _mm512_load_si512((const void *)(b1 + e * 16));
        if (B_AHEAD) {
            _mm_prefetch((const char *)(b0 + e * 16 + KN_Q_B_AHEAD), _MM_HINT_T0);
            _mm_prefetch((const char *)(b1 + e * 16 + KN_Q_B_AHEAD), _MM_HINT_T0);
        }
        KN_Q_ROW2(0)
        KN_Q_ROW2(1)
        KN_Q_ROW2(2)
        KN_Q_ROW2(3)
        KN_Q_ROW2(4)
        KN_Q_ROW2(5)
        KN_Q_PREFETCH(mr)
    }
    KN_Q_STORE2(0)
    KN_Q_STORE2(1)
    KN_Q_STORE2(2)
    KN_Q_STORE2(3)
    KN_Q_STORE2(4)
    KN_Q_STORE2(5)
}

/* Row r of a split tile: c over the step at e, d over the step at e + 4. */
#define KN_Q_ROW2S(r)                                                                              \
    if ((r) < mr) {                                                                                \
        KN_Q_BCAST(x, r, e)                                                                        \
        KN_Q_BCAST(y, r, e + 4)                                                                    \
        c##r##0 = _mm512_dpbusd_epi32(c##r##0, x, v0);                                             \
        c##r##1 = _mm512_dpbusd_epi32(c##r##1, x, v1);                                             \
        d##r##0 = _mm512_dpbusd_epi32(d##r##0, y, w0);                                             \
        d##r##1 = _mm512_dpbusd_epi32(d##r##1, y, w1);                                             \
    }
#define KN_Q_STORE2S(r)                                                                            \
    if ((r) < mr) {                                                                                \
        _mm512_storeu_si512((void *)(c + (r)*ldc), _mm512_add_epi32(c##r##0, d##r##0));            \
        _mm512_storeu_si512((void *)(c + (r)*ldc + 16), _mm512_add_epi32(c##r##1, d##r##1));       \
    }

/* Up to 4 rows by 32 columns, two sums a row and block (the edge of a few rows). */
VNNI static void tile_edge2(const uint8_t *a, int64_t lda, int mr, const int8_t *b0,
                            const int8_t *b1, int64_t kp, int32_t *c, int64_t ldc) {
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512i c30 = c00, c31 = c00, d00 = c00, d01 = c00, d10 = c00, d11 = c00, d20 = c00;
    __m512i d21 = c00, d30 = c00, d31 = c00;
    int64_t e = 0;
    for (; e + 8 <= kp; e += 8) {
        __m512i v0 = _mm512_load_si512((const void *)(b0 + e * 16));
        __m512i v1 = _mm512_load_si512((const void *)(b1 + e * 16));
        __m512i w0 = _mm512_load_si512((const void *)(b0 + e * 16 + 64));
        __m512i w1 = _mm512_load_si512((const void *)(b1 + e * 16 + 64));
        KN_Q_ROW2S(0)
        KN_Q_ROW2S(1)
        KN_Q_ROW2S(2)
        KN_Q_ROW2S(3)
        KN_Q_PREFETCH(mr)
    }
    if (e < kp) {
        __m512i v0 = _mm512_load_si512((const void *)(b0 + e * 16));
        __m512i v1 = _mm512_load_si512((const void *)(b1 + e * 16));
        KN_Q_ROW2(0)
        KN_Q_ROW2(1)
        KN_Q_ROW2(2)
        KN_Q_ROW2(3)
    }
    KN_Q_STORE2S(0)
    KN_Q_STORE2S(1)
    KN_Q_STORE2S(2)
    KN_Q_STORE2S(3)
}

#define KN_Q_ROW1(r)                                                                               \
    if ((r) < mr) {                                                                                \
        KN_Q_BCAST(x, r, e)                                                                        \
        c##r##0 = _mm512_dpbusd_epi32(c##r##0, x, v0);                                             \
    }
#define KN_Q_STORE1(r)                                                                             \
    if ((r) < mr)                                                                                  \
        _mm512_storeu_si512((void *)(c + (r)*ldc), c##r##0);

/* Up to 16 rows by 16 columns (the last, odd block). */
VNNI __attribute__((always_inline)) static inline void tile1(const uint8_t *a, int64_t lda, int mr,
                                                             const int8_t *b0, int64_t kp,
                                                             int32_t *c, int64_t ldc) {
    __m512i c00 = _mm512_setzero_si512(), c10 = c00, c20 = c00, c30 = c00, c40 = c00, c50 = c00;
    __m512i c60 = c00, c70 = c00, c80 = c00, c90 = c00, c100 = c00, c110 = c00, c120 = c00;
    __m512i c130 = c00, c140 = c00, c150 = c00;
    for (int64_t e = 0; e < kp; e += 4) {
        __m512i v0 = _mm512_load_si512((const void *)(b0 + e * 16));
        KN_Q_ROW1(0)
        KN_Q_ROW1(1)
        KN_Q_ROW1(2)
        KN_Q_ROW1(3)
        KN_Q_ROW1(4)
        KN_Q_ROW1(5)
        KN_Q_ROW1(6)
        KN_Q_ROW1(7)
        KN_Q_ROW1(8)
        KN_Q_ROW1(9)
        KN_Q_ROW1(10)
        KN_Q_ROW1(11)
        KN_Q_ROW1(12)
        KN_Q_ROW1(13)
        KN_Q_ROW1(14)
        KN_Q_ROW1(15)
        KN_Q_PREFETCH(mr)
    }
    KN_Q_STORE1(0)
    KN_Q_STORE1(1)
    KN_Q_STORE1(2)
    KN_Q_STORE1(3)
    KN_Q_STORE1(4)
    KN_Q_STORE1(5)
    KN_Q_STORE1(6)
    KN_Q_STORE1(7)
    KN_Q_STORE1(8)
    KN_Q_STORE1(9)
    KN_Q_STORE1(10)
    KN_Q_STORE1(11)
    KN_Q_STORE1(12)
    KN_Q_STORE1(13)
    KN_Q_STORE1(14)
    KN_Q_STORE1(15)
}

VNNI static void tile6x2(const uint8_t *a, int64_t lda, const int8_t *b0, const int8_t *b1,
                         int64_t kp, int32_t *c, int64_t ldc) {
    tile2(a, lda, 6, b0, b1, kp, c, ldc, 0);
}

/* tile6x2 with B fetched ahead (B packed at load: kn_qgemm_b.ahead). */
VNNI static void tile6x2_ahead(const uint8_t *a, int64_t lda, const int8_t *b0, const int8_t *b1,
                               int64_t kp, int32_t *c, int64_t ldc) {
    tile2(a, lda, 6, b0, b1, kp, c, ldc, 1);
}

VNNI static void tile16x1(const uint8_t *a, int64_t lda, const int8_t *b0, int64_t kp, int32_t *c,
                          int64_t ldc) {
    tile1(a, lda, 16, b0, kp, c, ldc);
}

/* The last mr < 6 rows of a pair of blocks: five rows keep their ten sums in the plain tile,
 * four or fewer split theirs. */
VNNI static void tile_edge(const uint8_t *a, int64_t lda, int mr, const int8_t *b0,
                           const int8_t *b1, int64_t kp, int32_t *c, int64_t ldc) {
    if (mr <= 4)
        tile_edge2(a, lda, mr, b0, b1, kp, c, ldc);
    else
        tile2(a, lda, mr, b0, b1, kp, c, ldc, 0);
}

/* The last mr < 16 rows of the odd block. */
VNNI static void tile_edge1(const uint8_t *a, int64_t lda, int mr, const int8_t *b0, int64_t kp,
                            int32_t *c, int64_t ldc) {
    tile1(a, lda, mr, b0, kp, c, ldc);
}

/* Weight bytes a block of rows holds at most: each pair of column blocks reads all the rows'
 * weights again, and where they outgrow L2 (the 512- to 2048-channel convolutions at 7x7 hold 1
 * to 2.4 MB) every pair read them from L3; by blocks of rows, each block comes from L3 once. */
#define BLOCK_BYTES (256 * 1024)

/* Rows a block: all where they fit, else a multiple of 48 (whole 6- and 16-row tiles). */
static int64_t block_rows(int64_t m, int64_t kp) {
    if (m * kp <= BLOCK_BYTES)
        return m;
    int64_t rb = BLOCK_BYTES / kp / 48 * 48;
    return rb > 48 ? rb : 48;
}

/* Rows [0, m) by blocks of block_rows: in each, pairs of blocks by tiles of 6 rows, then the
 * odd block by tiles of 16. */
void kn_qgemm_u8s8_vnni(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b, int32_t *c,
                        int64_t ldc) {
    int64_t blk = b->kp * 16, rb = block_rows(m, b->kp);
    for (int64_t r0 = 0; r0 < m; r0 += rb) {
        int64_t r1 = r0 + rb < m ? r0 + rb : m, j = 0;
        for (; j + 2 <= b->nb; j += 2) {
            const int8_t *b0 = b->packed + j * blk;
            int64_t i = r0;
            for (; i + 6 <= r1; i += 6)
                (b->ahead ? tile6x2_ahead : tile6x2)(a + i * lda, lda, b0, b0 + blk, b->kp,
                                                     c + i * ldc + j * 16, ldc);
            if (i < r1)
                tile_edge(a + i * lda, lda, (int)(r1 - i), b0, b0 + blk, b->kp,
                          c + i * ldc + j * 16, ldc);
        }
        if (j < b->nb) {
            const int8_t *b0 = b->packed + j * blk;
            int64_t i = r0;
            for (; i + 16 <= r1; i += 16)
                tile16x1(a + i * lda, lda, b0, b->kp, c + i * ldc + j * 16, ldc);
            if (i < r1)
                tile_edge1(a + i * lda, lda, (int)(r1 - i), b0, b->kp, c + i * ldc + j * 16, ldc);
        }
    }
}
#endif
