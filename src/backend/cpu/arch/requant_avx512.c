/* The int8 convolution's requantization (quantization/requant.h) on 16 lanes of AVX-512, giving
 * the bytes of kn_qrequant_rows_ref: its arithmetic in the same order, the int32 sum, its
 * conversion (rounding to nearest), a multiplication and an addition (no fused multiply-add),
 * IEEE divisions, the clamps as vmaxps / vminps (which return their second operand unless the
 * first is greater / less, as `x > lo ? x : lo` does, NaN included), and the roundings half to
 * even as vrndscaleps / vcvtps2dq to nearest, which for the clamped |v| < 2^22 give the
 * reference's (v + 1.5 * 2^23) - 1.5 * 2^23. GCC's AVX-512 clone of the reference loop works
 * on 8 lanes, with a scalar tail; this form takes 16 lanes with a masked last step (QDQ
 * ResNet-50 at 1 thread about 1.5 ms faster of 20; docs/perf-notes.md).
 *
 * Tried and left out: the quotients as a multiplication by the reciprocal, redone by the
 * division in the lanes within 2^-12 of a half-integer (where the product's error could change
 * the rounding). On the Zen 5 box vdivps is cheap enough that the test costs more than it
 * saves: 0.15 against 0.105 ns a pixel on one row of 196 (0.28 against 0.21 with a residual). */
#include "backend/cpu/quantization/requant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define RQ __attribute__((target("avx512f,avx512bw,avx512vl")))
#define RQ_INLINE RQ __attribute__((always_inline)) static inline

bool kn_qrequant_avx512_ok(void) {
    static int ok = -1;
    if (ok < 0)
        ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    return ok != 0;
}

/* clamp(r / d, lo, hi) */
RQ_INLINE __m512 quotient(__m512 r, __m512 d, __m512 lo, __m512 hi) {
    return _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(r, d), lo), hi);
}

/* One row, 16 pixels a step, the last step masked. */
RQ_INLINE void row(const kn_qrequant *q, float scf, float bf, int32_t corrv, const int32_t *acc,
                   const int32_t *e, const uint8_t *res, int64_t m, uint8_t *y, bool residual) {
    __m512 sc = _mm512_set1_ps(scf), b = _mm512_set1_ps(bf);
    __m512i corr = _mm512_set1_epi32(corrv), yz = _mm512_set1_epi32((int32_t)q->yz);
    __m512 lo = _mm512_set1_ps(q->lo), hi = _mm512_set1_ps(q->hi);
    __m512 ys = _mm512_set1_ps(q->ys);
    __m512 qlo = _mm512_set1_ps(q->qlo), qhi = _mm512_set1_ps(q->qhi);
    __m512 cs = _mm512_set1_ps(q->cs);
    __m512 cmin = _mm512_set1_ps(q->cmin), cmax = _mm512_set1_ps(q->cmax);
    __m512 rs = _mm512_set1_ps(q->rs);
    __m512i rzu = _mm512_set1_epi32(q->rzu);
    __m128i rflip = _mm_set1_epi8((char)q->rflip);
    for (int64_t i = 0; i < m; i += 16) {
        __mmask16 k = m - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (m - i)) - 1);
        __m512i a = _mm512_maskz_loadu_epi32(k, acc + i), ev = _mm512_maskz_loadu_epi32(k, e + i);
        __m512i s = _mm512_add_epi32(_mm512_sub_epi32(a, _mm512_slli_epi32(ev, 7)), corr);
        __m512 r = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), sc), b);
        if (residual) {
            __m512 c = quotient(r, cs, cmin, cmax);
            c = _mm512_roundscale_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m128i rb = _mm_xor_si128(_mm_maskz_loadu_epi8(k, res + i), rflip);
            __m512i rv = _mm512_sub_epi32(_mm512_cvtepu8_epi32(rb), rzu);
            r = _mm512_add_ps(_mm512_mul_ps(c, cs), _mm512_mul_ps(_mm512_cvtepi32_ps(rv), rs));
        }
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        __m512 v = quotient(r, ys, qlo, qhi);
        __m512i out = _mm512_add_epi32(
            _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), yz);
        _mm_mask_storeu_epi8(y + i, k, _mm512_cvtepi32_epi8(out));
    }
}

/* The two forms, so the residual's test folds away inside the loop. */
#define RQ_ROWS(name, residual)                                                                    \
    RQ static void name(const kn_qrequant *q, const float *sc, const float *b,                     \
                        const int32_t *corr, const int32_t *acc, int64_t ldc, const int32_t *e,    \
                        const uint8_t *res, int64_t m, int64_t rows, uint8_t *y, int64_t ldy) {    \
        for (int64_t j = 0; j < rows; j++)                                                         \
            row(q, sc[j], b[j], corr[j], acc + j * ldc, e, residual ? res + j * ldy : NULL, m,     \
                y + j * ldy, residual);                                                            \
    }
RQ_ROWS(rows_plain, false)
RQ_ROWS(rows_residual, true)

void kn_qrequant_rows_avx512(const kn_qrequant *q, const float *sc, const float *b,
                             const int32_t *corr, const int32_t *acc, int64_t ldc, const int32_t *e,
                             const uint8_t *res, int64_t m, int64_t rows, uint8_t *y, int64_t ldy) {
    (q->residual ? rows_residual : rows_plain)(q, sc, b, corr, acc, ldc, e, res, m, rows, y, ldy);
}
#endif
