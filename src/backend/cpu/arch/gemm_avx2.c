/* AVX2+FMA micro-kernel: 6 x 16 tile in 12 ymm accumulators. Edge tiles go through a small
 * buffer since AVX2 has no cheap per-lane masking for stores of partial rows; the epilogue runs
 * on the stored tile. */
#include "backend/cpu/math/gemm_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define MR 6
#define NR 16
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

#define DECL(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
#define FMA(i)                                                                                     \
    {                                                                                              \
        __m256 ai = _mm256_broadcast_ss(a + i);                                                    \
        c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);                                                \
        c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);                                                \
    }
#define STORE(i)                                                                                   \
    {                                                                                              \
        float *ci = dst + (int64_t)i * ldd;                                                        \
        __m256 v0 = _mm256_mul_ps(va, c##i##0), v1 = _mm256_mul_ps(va, c##i##1);                   \
        if (beta != 0.0f) {                                                                        \
            v0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), v0);                                     \
            v1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), v1);                                 \
        }                                                                                          \
        _mm256_storeu_ps(ci, v0);                                                                  \
        _mm256_storeu_ps(ci + 8, v1);                                                              \
    }

/* Floats ahead of a packed B panel's row that ukr_b_ahead fetches: 128 rows of k, 8 KB. */
#define PREFETCH_B_PACKED 2048

__attribute__((target("avx2,fma"), always_inline)) static inline void
body(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta,
     int mr, int nr, const kn_ukr_ep *ep, const int B_AHEAD) {
    /* Parked in memory: with 12 accumulators, keeping alpha and beta in registers through the
     * loop made the compiler spill an accumulator instead, halving throughput. */
    volatile float alpha_m = alpha, beta_m = beta;
    ROWS(DECL)
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        if (B_AHEAD)
            _mm_prefetch((const char *)(b + PREFETCH_B_PACKED), _MM_HINT_T0);
        ROWS(FMA)
        a += MR;
        b += NR;
    }
    alpha = alpha_m;
    beta = beta_m;
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    if (mr == MR && nr == NR) {
        float *dst = c;
        int64_t ldd = ldc;
        ROWS(STORE)
        if (ep != NULL)
            kn_ukr_ep_apply(ep, c, ldc, mr, nr);
        return;
    }
    float tile[MR * NR] = {0};
    if (beta != 0.0f)
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++)
                tile[i * NR + j] = c[i * ldc + j];
    float *dst = tile;
    int64_t ldd = NR;
    ROWS(STORE)
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[i * ldc + j] = tile[i * NR + j];
    if (ep != NULL)
        kn_ukr_ep_apply(ep, c, ldc, mr, nr);
}

__attribute__((target("avx2,fma"))) static void ukr(int64_t kc, const float *a, const float *b,
                                                    float *c, int64_t ldc, float alpha, float beta,
                                                    int mr, int nr, const kn_ukr_ep *ep) {
    body(kc, a, b, c, ldc, alpha, beta, mr, nr, ep, 0);
}

/* B packed once at load (constant weights), fetched ahead (as the AVX-512 kernel does). */
__attribute__((target("avx2,fma"))) static void ukr_b_ahead(int64_t kc, const float *a,
                                                            const float *b, float *c, int64_t ldc,
                                                            float alpha, float beta, int mr, int nr,
                                                            const kn_ukr_ep *ep) {
    body(kc, a, b, c, ldc, alpha, beta, mr, nr, ep, 1);
}

const kn_gemm_ukr kn_gemm_ukr_avx2 = {
    .name = "avx2", .mr = MR, .nr = NR, .fn = ukr, .fn_b_ahead = ukr_b_ahead};

#else

const kn_gemm_ukr kn_gemm_ukr_avx2 = {.name = "avx2"};

#endif
