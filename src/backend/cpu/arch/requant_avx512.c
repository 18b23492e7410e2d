/* The int8 convolution's requantization (quantization/requant.h) on 16 lanes of AVX-512, giving
 * the bytes of kn_qrequant_rows_ref.
 *
 * The quotients. v = fl(r / ys) is what the reference rounds; here v' = fl(r * fl(1 / ys)).
 * With u = 2^-24 and z = r / ys exactly, v = z (1 + d3) and v' = z (1 + d1)(1 + d2), |di| <= u
 * (plus at most 2^-149 each where a result is subnormal), so |v - v'| <= 4u |z| + 2^-148.
 * Both are then clamped to [qlo, qhi] with Q = max(|qlo|, |qhi|) <= 256 (kn_qrequant_init
 * takes the reciprocal only then): where |z| > 2Q, v and v' lie beyond the same bound and clamp
 * alike; elsewhere the clamp, which moves no two points further apart, leaves them within
 * 8uQ + 2^-148 < 2^-12. Rounding to nearest (half to even) is constant between two
 * consecutive half-integers, so wherever the clamped v' lies more than 2^-12 from every
 * half-integer the clamped v rounds to the same integer. The lanes that do not (about one in
 * two thousand, and any NaN) are redone by the division. The residual's first quotient, by cs
 * into [cmin, cmax], is taken the same way.
 *
 * The rest is the reference's arithmetic in the same order: the int32 sum, its conversion
 * (rounding to nearest), a multiplication and an addition (no fused multiply-add), the clamps
 * as vmaxps / vminps (which return their second operand unless the first is greater / less,
 * as `x > lo ? x : lo` does), and the final rounding as vcvtps2dq to nearest, the integer
 * being the reference's (v + 1.5 * 2^23) - 1.5 * 2^23 for |v| < 2^22. */
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

/* clamp(r / d, lo, hi), by the reciprocal inv where recip (see above). */
RQ_INLINE __m512 quotient(__m512 r, __m512 d, __m512 inv, __m512 lo, __m512 hi, bool recip) {
    if (!recip)
        return _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(r, d), lo), hi);
    __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(r, inv), lo), hi);
    /* |v - rne(v)| is exact; at least 0.5 - 2^-12 (or NaN): near a half-integer */
    __m512 dist = _mm512_abs_ps(
        _mm512_sub_ps(v, _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    __mmask16 near = _mm512_cmp_ps_mask(dist, _mm512_set1_ps(0.5f - 0x1p-12f), _CMP_NLT_UQ);
    if (near)
        v = _mm512_mask_mov_ps(v, near, _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(r, d), lo), hi));
    return v;
}

/* One row, 16 pixels a step, the last step masked. */
RQ_INLINE void row(const kn_qrequant *q, float scf, float bf, int32_t corrv, const int32_t *acc,
                   const int32_t *e, const uint8_t *res, int64_t m, uint8_t *y, bool residual,
                   bool recip) {
    __m512 sc = _mm512_set1_ps(scf), b = _mm512_set1_ps(bf);
    __m512i corr = _mm512_set1_epi32(corrv), yz = _mm512_set1_epi32((int32_t)q->yz);
    __m512 lo = _mm512_set1_ps(q->lo), hi = _mm512_set1_ps(q->hi);
    __m512 ys = _mm512_set1_ps(q->ys), inv_ys = _mm512_set1_ps(q->inv_ys);
    __m512 qlo = _mm512_set1_ps(q->qlo), qhi = _mm512_set1_ps(q->qhi);
    __m512 cs = _mm512_set1_ps(q->cs), inv_cs = _mm512_set1_ps(q->inv_cs);
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
            __m512 c = quotient(r, cs, inv_cs, cmin, cmax, recip);
            c = _mm512_roundscale_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m128i rb = _mm_xor_si128(_mm_maskz_loadu_epi8(k, res + i), rflip);
            __m512i rv = _mm512_sub_epi32(_mm512_cvtepu8_epi32(rb), rzu);
            r = _mm512_add_ps(_mm512_mul_ps(c, cs), _mm512_mul_ps(_mm512_cvtepi32_ps(rv), rs));
        }
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        __m512 v = quotient(r, ys, inv_ys, qlo, qhi, recip);
        __m512i out = _mm512_add_epi32(
            _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), yz);
        _mm_mask_storeu_epi8(y + i, k, _mm512_cvtepi32_epi8(out));
    }
}

/* The four forms, so the flags fold away inside the loop. */
#define RQ_ROWS(name, residual, recip)                                                             \
    RQ static void name(const kn_qrequant *q, const float *sc, const float *b,                     \
                        const int32_t *corr, const int32_t *acc, int64_t ldc, const int32_t *e,    \
                        const uint8_t *res, int64_t m, int64_t rows, uint8_t *y, int64_t ldy) {    \
        for (int64_t j = 0; j < rows; j++)                                                         \
            row(q, sc[j], b[j], corr[j], acc + j * ldc, e, residual ? res + j * ldy : NULL, m,     \
                y + j * ldy, residual, recip);                                                     \
    }
RQ_ROWS(rows_plain, false, false)
RQ_ROWS(rows_plain_recip, false, true)
RQ_ROWS(rows_residual, true, false)
RQ_ROWS(rows_residual_recip, true, true)

void kn_qrequant_rows_avx512(const kn_qrequant *q, const float *sc, const float *b,
                             const int32_t *corr, const int32_t *acc, int64_t ldc, const int32_t *e,
                             const uint8_t *res, int64_t m, int64_t rows, uint8_t *y, int64_t ldy) {
    if (q->residual)
        (q->recip ? rows_residual_recip : rows_residual)(q, sc, b, corr, acc, ldc, e, res, m, rows,
                                                         y, ldy);
    else
        (q->recip ? rows_plain_recip : rows_plain)(q, sc, b, corr, acc, ldc, e, res, m, rows, y,
                                                   ldy);
}
#endif
