/* AVX-512 sigmoid and SiLU on 16 lanes, for kernels that apply them in registers (the GEMM
 * micro-kernel's store, the depthwise channel-block kernel) and for the activation rows.
 * Same method and accuracy as kiln_math.h's scalar kiln_math_sigmoid / kiln_math_silu
 * (e^-|x| by Cody-Waite and Cephes' degree-7 polynomial, one division, results near the
 * denormals carried at 2^32 so they round once), but 19 vector operations for SiLU instead of
 * the ~32 GCC makes of the scalar form: the rounding is one vrndscaleps instead of the
 * 1.5 * 2^23 trick, 2^n is one vscalefps instead of a convert, add, shift and multiply, the
 * polynomial is Horner (throughput, not latency, bounds these loops) with the 2^32 carried in
 * its coefficients, and the signs are masked operations instead of bit blends. Include only from
 * files that target AVX-512. */
#ifndef KN_CPU_ACT_AVX512_H
#define KN_CPU_ACT_AVX512_H

#include "backend/cpu/math/gemm.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether the CPU runs the functions below (AVX-512F). */
bool kn_cpu_act_avx512_ok(void);
/* act (KN_ACT_SIGMOID or KN_ACT_SWISH) over m rows of n at stride ld, in place; only where
 * kn_cpu_act_avx512_ok(). */
void kn_cpu_act_rows_avx512(int act, float *x, int64_t ld, int64_t m, int64_t n);

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define KN_ACT512 __attribute__((target("avx512f"), always_inline)) static inline

/* t = -|x| clamped at -109.5 (below it every result built on e^t rounds to 0); NaN stays NaN
 * (vmaxps gives its second operand when either is NaN). */
KN_ACT512 __m512 kn_neg_abs512(__m512 x) {
    __m512 t = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
    return _mm512_max_ps(_mm512_set1_ps(-109.5f), t);
}

/* e^t S for t from kn_neg_abs512 and S a power of two (a constant after inlining): the
 * polynomial's coefficients carry S, which is exact, so S costs no operation. The polynomial is
 * Cephes' 1 + r + r^2 q(r) in Horner form, its last step adding the 1. */
KN_ACT512 __m512 kn_exp512(__m512 t, const float S) {
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), t);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 q = _mm512_set1_ps(1.9875691500e-4f * S);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.3981999507e-3f * S));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073e-3f * S));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894e-2f * S));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459e-1f * S));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201e-1f * S));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(S));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(S));
    return _mm512_scalef_ps(q, n);
}

/* 1 / (1 + e) for x >= 0, e / (1 + e) below, e = e^-|x|. */
KN_ACT512 __m512 kn_sigmoid512(__m512 x) {
    __m512 e = kn_exp512(kn_neg_abs512(x), 1.0f);
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512 num = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), neg, e);
    return _mm512_div_ps(num, _mm512_add_ps(e, _mm512_set1_ps(1.0f)));
}

/* x / (1 + e) for x >= 0, x e / (1 + e) below with e carried at 2^32 and taken off after the
 * division; the negative side multiplies by t rather than x, so -Inf gives the limit -0
 * (t = -109.5 there, where the product rounds to 0 anyway). */
KN_ACT512 __m512 kn_silu512(__m512 x) {
    __m512 t = kn_neg_abs512(x);
    __m512 es = kn_exp512(t, 0x1p32f);
    __m512 d = _mm512_fmadd_ps(es, _mm512_set1_ps(0x1p-32f), _mm512_set1_ps(1.0f));
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512 num = _mm512_mask_mul_ps(x, neg, t, es);
    __m512 y = _mm512_div_ps(num, d);
    return _mm512_mask_mul_ps(y, neg, y, _mm512_set1_ps(0x1p-32f));
}

/* The activation a direct kernel applies in registers (kn_dwd.act and the like): KN_ACT_RELU,
 * KN_ACT_CLIP to [lo, hi], KN_ACT_SWISH, KN_ACT_SIGMOID (kn_act_in_regs), or none. */
KN_ACT512 __m512 kn_act_in_regs512(int act, __m512 v, float lo, float hi) {
    if (act == KN_ACT_RELU)
        return _mm512_max_ps(v, _mm512_setzero_ps());
    if (act == KN_ACT_CLIP)
        return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
    if (act == KN_ACT_SWISH)
        return kn_silu512(v);
    if (act == KN_ACT_SIGMOID)
        return kn_sigmoid512(v);
    return v;
}

#endif
#endif
