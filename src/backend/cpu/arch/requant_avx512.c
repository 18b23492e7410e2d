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
 * The fast form (with AVX512-VBMI, where the constants allow: r never NaN, y's scale positive
 * and finite) takes 64 pixels a step and fewer operations, with the same bytes:
 * - The activation's clamp to [lo, hi] before the division by ys and y's clamp to [qlo, qhi]
 *   after it as one: x -> fl(x / ys) is non-decreasing, so it commutes with max and min,
 *   fl(clamp(r, lo, hi) / ys) = clamp(fl(r / ys), fl(lo / ys), fl(hi / ys)), and a clamp to
 *   [a, b] then one to [c, d] (c <= d) is the clamp to [clamp(a, c, d), clamp(b, c, d)]. Equal
 *   values may differ in the sign of a zero, which no later step tells apart.
 * - The rounding and y's zero point as one addition: with |v|, |yz| < 2^16 and M = 1.5 * 2^23 + yz
 *   even, fl(v + M) = M + rne(v) (a tie goes to the even sum, and M + n has n's parity), a float
 *   in [2^23, 2^24) whose low byte is (yz + rne(v)) mod 256, y's byte. An odd yz takes M - 1 and
 *   adds 1 to the bytes.
 * - The low bytes of four such vectors gathered by two vpermt2b and a blend into one store,
 *   where a vpmovdb and a masked 16-byte store a vector cost more.
 * The ones row's sums come multiplied by 128 (requant.h), which saves a shift in both forms.
 * On the Zen 5 box (a micro-benchmark, 256 rows of 256 pixels) 0.106 -> 0.066 ns a pixel, with
 * a residual 0.207 -> 0.142; the pitched form of a 14x14 map (pitch 15), which was one call an
 * output row, 0.19 -> 0.117 a kept pixel (0.35 -> 0.216 with a residual).
 *
 * Tried and left out: the quotients as a multiplication by the reciprocal, redone by the
 * division in the lanes within 2^-12 of a half-integer (where the product's error could change
 * the rounding). On the Zen 5 box vdivps is cheap enough that the test costs more than it
 * saves: 0.15 against 0.105 ns a pixel on one row of 196 (0.28 against 0.21 with a residual). */
#include "backend/cpu/quantization/requant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define RQ __attribute__((target("avx512f,avx512bw,avx512vl")))
#define RQ_INLINE RQ __attribute__((always_inline)) static inline
#define RQV __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))
#define RQV_INLINE RQV __attribute__((always_inline)) static inline

/* No cache: __builtin_cpu_supports reads bits libgcc sets before main, and a static written
 * by the first callers (the threads of a job) was a data race. */
bool kn_qrequant_avx512_ok(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

static bool vbmi_ok(void) {
    return kn_qrequant_avx512_ok() && __builtin_cpu_supports("avx512vbmi");
}

/* The constants of a call, in lanes; with fast, lo and hi are the quotient's one clamp. */
typedef struct rqv {
    __m512 lo, hi, ys, qlo, qhi, cs, cmin, cmax, rs, magic;
    __m512i yz, rzu, one, rflip;
} rqv;

/* Whether the fast form gives the reference's bytes: no r is NaN (finite channel constants;
 * with a residual, its grid's values and the residual's far from overflowing), ys positive and
 * finite, y's range ordered and small, yz an integer. */
static bool fast_ok(const kn_qrequant *q) {
    if (!vbmi_ok() || !q->finite)
        return false;
    if (!(q->ys > 0.0f && isfinite(q->ys) && q->qlo <= q->qhi && fabsf(q->qlo) < 65536.0f &&
          fabsf(q->qhi) < 65536.0f && !isnan(q->lo) && !isnan(q->hi) && fabsf(q->yz) < 65536.0f &&
          q->yz == rintf(q->yz)))
        return false;
    if (q->residual && !(fabsf(q->cs) < 1e30f && fabsf(q->rs) < 1e30f && fabsf(q->cmin) < 1e6f &&
                         fabsf(q->cmax) < 1e6f))
        return false;
    return true;
}

/* x clamped to [lo, hi] as vmaxps then vminps do it. */
static float clampf(float x, float lo, float hi) {
    x = x > lo ? x : lo;
    return x < hi ? x : hi;
}

RQ_INLINE rqv make_rqv(const kn_qrequant *q, bool fast) {
    rqv v;
    v.ys = _mm512_set1_ps(q->ys);
    v.qlo = _mm512_set1_ps(q->qlo);
    v.qhi = _mm512_set1_ps(q->qhi);
    v.lo = _mm512_set1_ps(fast ? clampf(q->lo / q->ys, q->qlo, q->qhi) : q->lo);
    v.hi = _mm512_set1_ps(fast ? clampf(q->hi / q->ys, q->qlo, q->qhi) : q->hi);
    int32_t yz = fast ? (int32_t)q->yz : 0;
    v.yz = _mm512_set1_epi32((int32_t)q->yz);
    v.magic = _mm512_set1_ps(12582912.0f + (float)(yz - (yz & 1)));
    v.one = _mm512_set1_epi8((char)(yz & 1));
    v.cs = _mm512_set1_ps(q->cs);
    v.cmin = _mm512_set1_ps(q->cmin);
    v.cmax = _mm512_set1_ps(q->cmax);
    v.rs = _mm512_set1_ps(q->rs);
    v.rzu = _mm512_set1_epi32(q->rzu);
    v.rflip = _mm512_set1_epi8((char)q->rflip);
    return v;
}

/* clamp(r / d, lo, hi) */
RQ_INLINE __m512 quotient(__m512 r, __m512 d, __m512 lo, __m512 hi) {
    return _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(r, d), lo), hi);
}

/* The real values of 16 pixels: the sums a - e + corr scaled, with the residual (its bytes,
 * flipped, in rv's lanes) when residual. */
RQ_INLINE __m512 real16(const rqv *v, __m512i a, __m512i e, __m512i corr, __m512 sc, __m512 b,
                        __m512i rv, bool residual) {
    __m512i s = _mm512_add_epi32(_mm512_sub_epi32(a, e), corr);
    __m512 r = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), sc), b);
    if (residual) {
        __m512 c = quotient(r, v->cs, v->cmin, v->cmax);
        c = _mm512_roundscale_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        rv = _mm512_sub_epi32(rv, v->rzu);
        r = _mm512_add_ps(_mm512_mul_ps(c, v->cs), _mm512_mul_ps(_mm512_cvtepi32_ps(rv), v->rs));
    }
    return r;
}

/* One row in the reference's steps, 16 pixels a step, the last step masked. */
RQ_INLINE void row(const rqv *v, float scf, float bf, int32_t corrv, const int32_t *acc,
                   const int32_t *e, const uint8_t *res, int64_t m, uint8_t *y, bool residual) {
    __m512 sc = _mm512_set1_ps(scf), b = _mm512_set1_ps(bf);
    __m512i corr = _mm512_set1_epi32(corrv);
    for (int64_t i = 0; i < m; i += 16) {
        __mmask16 k = m - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (m - i)) - 1);
        __m512i a = _mm512_maskz_loadu_epi32(k, acc + i), ev = _mm512_maskz_loadu_epi32(k, e + i);
        __m512i rv = _mm512_setzero_si512();
        if (residual)
            rv = _mm512_cvtepu8_epi32(
                _mm_xor_si128(_mm_maskz_loadu_epi8(k, res + i), _mm512_castsi512_si128(v->rflip)));
        __m512 r = real16(v, a, ev, corr, sc, b, rv, residual);
        r = _mm512_min_ps(_mm512_max_ps(r, v->lo), v->hi);
        __m512 t = quotient(r, v->ys, v->qlo, v->qhi);
        __m512i out = _mm512_add_epi32(
            _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), v->yz);
        _mm_mask_storeu_epi8(y + i, k, _mm512_cvtepi32_epi8(out));
    }
}

#define RQ_ROWS(name, residual)                                                                    \
    RQ static void name(const rqv *v, const float *sc, const float *b, const int32_t *corr,        \
                        const int32_t *acc, int64_t ldc, const int32_t *e, const uint8_t *res,     \
                        int64_t m, int64_t rows, uint8_t *y, int64_t ldy) {                        \
        for (int64_t j = 0; j < rows; j++)                                                         \
            row(v, sc[j], b[j], corr[j], acc + j * ldc, e, residual ? res + j * ldy : NULL, m,     \
                y + j * ldy, residual);                                                            \
    }
RQ_ROWS(rows_plain, false)
RQ_ROWS(rows_residual, true)

/* The fast form's step: y's bytes of 64 pixels, the four 16-lane vectors' sums at acc and e
 * (lanes outside ld not loaded); with a residual, its (flipped) bytes rb, spread[u] moving them
 * into the low bytes of vector u's lanes, or with spread NULL in the order of the pixels. */
RQV_INLINE __m512i step64(const rqv *v, const int32_t *acc, const int32_t *e, __mmask64 ld,
                          __m512i corr, __m512 sc, __m512 b, __m512i rb, const __m512i *spread,
                          const uint8_t *rp, bool residual) {
    const __m512i low = _mm512_set_epi8(
        124, 120, 116, 112, 108, 104, 100, 96, 92, 88, 84, 80, 76, 72, 68, 64, 60, 56, 52, 48, 44,
        40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0, 124, 120, 116, 112, 108, 104, 100, 96, 92, 88, 84,
        80, 76, 72, 68, 64, 60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
    __m512i t[4];
    for (int u = 0; u < 4; u++) {
        __mmask16 k = (__mmask16)(ld >> (16 * u));
        __m512i a = _mm512_maskz_loadu_epi32(k, acc + 16 * u);
        __m512i ev = _mm512_maskz_loadu_epi32(k, e + 16 * u);
        __m512i rv = _mm512_setzero_si512();
        if (residual && spread != NULL)
            rv = _mm512_maskz_permutexvar_epi8((__mmask64)0x1111111111111111ull, spread[u], rb);
        else if (residual)
            rv = _mm512_cvtepu8_epi32(_mm_xor_si128(_mm_maskz_loadu_epi8(k, rp + 16 * u),
                                                    _mm512_castsi512_si128(v->rflip)));
        __m512 r = real16(v, a, ev, corr, sc, b, rv, residual);
        t[u] = _mm512_castps_si512(_mm512_add_ps(quotient(r, v->ys, v->lo, v->hi), v->magic));
    }
    __m512i lo = _mm512_permutex2var_epi8(t[0], low, t[1]);
    __m512i hi = _mm512_permutex2var_epi8(t[2], low, t[3]);
    __m512i out = _mm512_mask_blend_epi8((__mmask64)0xFFFFFFFF00000000ull, lo, hi);
    return _mm512_add_epi8(out, v->one);
}

RQV_INLINE void rows_fast(const rqv *vp, const float *sc, const float *b, const int32_t *corr,
                          const int32_t *acc, int64_t ldc, const int32_t *e, const uint8_t *res,
                          int64_t m, int64_t rows, uint8_t *y, int64_t ldy, bool residual) {
    /* a copy: through the pointer GCC read the constants from memory every step (4 % slower) */
    rqv vv = *vp;
    const rqv *v = &vv;
    for (int64_t j = 0; j < rows; j++) {
        __m512 scv = _mm512_set1_ps(sc[j]), bv = _mm512_set1_ps(b[j]);
        __m512i corrv = _mm512_set1_epi32(corr[j]);
        const uint8_t *rj = residual ? res + j * ldy : NULL;
        int64_t i = 0;
        for (; i + 64 <= m; i += 64) {
            __m512i out = step64(v, acc + j * ldc + i, e + i, ~(__mmask64)0, corrv, scv, bv,
                                 _mm512_setzero_si512(), NULL, rj + i, residual);
            _mm512_storeu_si512(y + j * ldy + i, out);
        }
        if (i < m) {
            __mmask64 ld = ((__mmask64)1 << (m - i)) - 1;
            __m512i out = step64(v, acc + j * ldc + i, e + i, ld, corrv, scv, bv,
                                 _mm512_setzero_si512(), NULL, rj + i, residual);
            _mm512_mask_storeu_epi8(y + j * ldy + i, ld, out);
        }
    }
}

RQV static void rows_plain_fast(const rqv *v, const float *sc, const float *b, const int32_t *corr,
                                const int32_t *acc, int64_t ldc, const int32_t *e,
                                const uint8_t *res, int64_t m, int64_t rows, uint8_t *y,
                                int64_t ldy) {
    rows_fast(v, sc, b, corr, acc, ldc, e, res, m, rows, y, ldy, false);
}

RQV static void rows_residual_fast(const rqv *v, const float *sc, const float *b,
                                   const int32_t *corr, const int32_t *acc, int64_t ldc,
                                   const int32_t *e, const uint8_t *res, int64_t m, int64_t rows,
                                   uint8_t *y, int64_t ldy) {
    rows_fast(v, sc, b, corr, acc, ldc, e, res, m, rows, y, ldy, true);
}

RQ void kn_qrequant_rows_avx512(const kn_qrequant *q, const float *sc, const float *b,
                                const int32_t *corr, const int32_t *acc, int64_t ldc,
                                const int32_t *e, const uint8_t *res, int64_t m, int64_t rows,
                                uint8_t *y, int64_t ldy) {
    bool fast = fast_ok(q);
    rqv v = make_rqv(q, fast);
    (fast          ? q->residual ? rows_residual_fast : rows_plain_fast
     : q->residual ? rows_residual
                   : rows_plain)(&v, sc, b, corr, acc, ldc, e, res, m, rows, y, ldy);
}

/* 64 columns of the pitched form: the lanes loaded (none past m), the kept ones' count as a
 * store mask at pixel at, the byte permutation that packs the kept bytes to the front, and the
 * residual's spread (byte 4 i of vector u from its kept byte's place at at). */
typedef struct rqblk {
    __m512i pack, spread[4];
    __mmask64 ld, st;
    int64_t at;
} rqblk;

/* Blocks a table holds. */
#define RQ_BLOCKS 8

/* Blocks [0, nb) of 64 columns from the copy's column c0, m columns in all from there. */
RQV static void make_blocks(int64_t c0, int64_t m, int64_t pitch, int64_t ow, int64_t nb,
                            rqblk *t) {
    int64_t oy = c0 / pitch, ox = c0 % pitch;
    for (int64_t bi = 0; bi < nb; bi++) {
        uint8_t pack[64], spread[4][64];
        int n = 0;
        memset(pack, 0, sizeof pack);
        memset(spread, 0, sizeof spread);
        t[bi].ld = 0;
        t[bi].at = 0;
        for (int i = 0; i < 64; i++) {
            if (64 * bi + i < m)
                t[bi].ld |= (__mmask64)1 << i;
            if (64 * bi + i < m && ox < ow) {
                if (n == 0)
                    t[bi].at = oy * ow + ox;
                spread[i / 16][4 * (i % 16)] = (uint8_t)n;
                pack[n++] = (uint8_t)i;
            }
            if (++ox == pitch)
                ox = 0, oy++;
        }
        t[bi].st = n == 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1;
        t[bi].pack = _mm512_loadu_si512(pack);
        for (int u = 0; u < 4; u++)
            t[bi].spread[u] = _mm512_loadu_si512(spread[u]);
    }
}

RQV_INLINE void pitched_fast(const rqv *v, const float *sc, const float *b, const int32_t *corr,
                             const int32_t *acc, int64_t ldc, const int32_t *e, const uint8_t *res,
                             const rqblk *t, int64_t nb, int64_t rows, uint8_t *y, int64_t ldy,
                             bool residual) {
    for (int64_t j = 0; j < rows; j++) {
        __m512 scv = _mm512_set1_ps(sc[j]), bv = _mm512_set1_ps(b[j]);
        __m512i corrv = _mm512_set1_epi32(corr[j]);
        for (int64_t bi = 0; bi < nb; bi++) {
            const rqblk *k = &t[bi];
            __m512i rb = _mm512_setzero_si512();
            if (residual)
                rb = _mm512_xor_si512(_mm512_maskz_loadu_epi8(k->st, res + j * ldy + k->at),
                                      v->rflip);
            __m512i out = step64(v, acc + j * ldc + 64 * bi, e + 64 * bi, k->ld, corrv, scv, bv, rb,
                                 k->spread, NULL, residual);
            _mm512_mask_storeu_epi8(y + j * ldy + k->at, k->st,
                                    _mm512_permutexvar_epi8(k->pack, out));
        }
    }
}

RQV static void pitched_plain_fast(const rqv *v, const float *sc, const float *b,
                                   const int32_t *corr, const int32_t *acc, int64_t ldc,
                                   const int32_t *e, const uint8_t *res, const rqblk *t, int64_t nb,
                                   int64_t rows, uint8_t *y, int64_t ldy) {
    pitched_fast(v, sc, b, corr, acc, ldc, e, res, t, nb, rows, y, ldy, false);
}

RQV static void pitched_residual_fast(const rqv *v, const float *sc, const float *b,
                                      const int32_t *corr, const int32_t *acc, int64_t ldc,
                                      const int32_t *e, const uint8_t *res, const rqblk *t,
                                      int64_t nb, int64_t rows, uint8_t *y, int64_t ldy) {
    pitched_fast(v, sc, b, corr, acc, ldc, e, res, t, nb, rows, y, ldy, true);
}

RQ bool kn_qrequant_rows_pitched_avx512(const kn_qrequant *q, const float *sc, const float *b,
                                        const int32_t *corr, const int32_t *acc, int64_t ldc,
                                        const int32_t *e, const uint8_t *res, int64_t c0, int64_t m,
                                        int64_t pitch, int64_t ow, int64_t rows, uint8_t *y,
                                        int64_t ldy) {
    if (!fast_ok(q))
        return false;
    rqv v = make_rqv(q, true);
    rqblk t[RQ_BLOCKS];
    for (int64_t i0 = 0; i0 < m; i0 += 64 * RQ_BLOCKS) {
        int64_t n = m - i0 < 64 * RQ_BLOCKS ? m - i0 : 64 * RQ_BLOCKS, nb = (n + 63) / 64;
        make_blocks(c0 + i0, n, pitch, ow, nb, t);
        (q->residual ? pitched_residual_fast : pitched_plain_fast)(
            &v, sc, b, corr, acc + i0, ldc, e + i0, res, t, nb, rows, y, ldy);
    }
    return true;
}
#endif
