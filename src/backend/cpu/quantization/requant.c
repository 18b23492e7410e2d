/* The int8 convolution's requantization (see requant.h): the reference by IEEE divisions and
 * the dispatch to the AVX-512 form. */
#include "backend/cpu/quantization/requant.h"

#include "backend/cpu/clones.h"

#include <math.h>
#include <stddef.h>

/* y's byte for the real value r: the fused activation's clamp, the division by y's scale, the
 * clamp to y's range, rounding half to even by adding and taking away 1.5 * 2^23 (the
 * quotients are clamped well inside 2^22). Inlined into loops the compiler vectorizes. */
static inline uint8_t quantize(float r, float lo, float hi, float ys, float qlo, float qhi,
                               float yz) {
    r = r > lo ? r : lo;
    r = r < hi ? r : hi;
    return (uint8_t)(int32_t)(kn_q8_rne(r / ys, qlo, qhi) + yz);
}

/* One row. */
KN_CLONES static void row_ref(const kn_qrequant *q, float sc, float b, int32_t corr,
                              const int32_t *acc, const int32_t *e, int64_t m, uint8_t *y) {
    float qlo = q->qlo, qhi = q->qhi, lo = q->lo, hi = q->hi, ys = q->ys, yz = q->yz;
    for (int64_t i = 0; i < m; i++)
        y[i] = quantize((float)(acc[i] - e[i] + corr) * sc + b, lo, hi, ys, qlo, qhi, yz);
}

/* The same with the residual row res. */
KN_CLONES static void row_residual_ref(const kn_qrequant *q, float sc, float b, int32_t corr,
                                       const int32_t *acc, const int32_t *e, const uint8_t *res,
                                       int64_t m, uint8_t *y) {
    float qlo = q->qlo, qhi = q->qhi, lo = q->lo, hi = q->hi, ys = q->ys, yz = q->yz;
    float rs = q->rs, cs = q->cs, cmin = q->cmin, cmax = q->cmax;
    int32_t rzu = q->rzu;
    uint8_t rflip = q->rflip;
    for (int64_t i = 0; i < m; i++) {
        float r = kn_q8_rne(((float)(acc[i] - e[i] + corr) * sc + b) / cs, cmin, cmax) * cs;
        r += (float)((int32_t)(uint8_t)(res[i] ^ rflip) - rzu) * rs;
        y[i] = quantize(r, lo, hi, ys, qlo, qhi, yz);
    }
}

void kn_qrequant_rows_ref(const kn_qrequant *q, const float *sc, const float *b,
                          const int32_t *corr, const int32_t *acc, int64_t ldc, const int32_t *e,
                          const uint8_t *res, int64_t m, int64_t rows, uint8_t *y, int64_t ldy) {
    for (int64_t j = 0; j < rows; j++) {
        if (q->residual)
            row_residual_ref(q, sc[j], b[j], corr[j], acc + j * ldc, e, res + j * ldy, m,
                             y + j * ldy);
        else
            row_ref(q, sc[j], b[j], corr[j], acc + j * ldc, e, m, y + j * ldy);
    }
}

void kn_qrequant_rows(const kn_qrequant *q, const float *sc, const float *b, const int32_t *corr,
                      const int32_t *acc, int64_t ldc, const int32_t *e, const uint8_t *res,
                      int64_t m, int64_t rows, uint8_t *y, int64_t ldy) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (kn_qrequant_avx512_ok()) {
        kn_qrequant_rows_avx512(q, sc, b, corr, acc, ldc, e, res, m, rows, y, ldy);
        return;
    }
#endif
    kn_qrequant_rows_ref(q, sc, b, corr, acc, ldc, e, res, m, rows, y, ldy);
}

void kn_qrequant_note_channels(kn_qrequant *q, const float *sc, const float *b, int64_t n) {
    q->finite = true;
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(sc[j]) || !isfinite(b[j]))
            q->finite = false;
}

typedef void rows_fn(const kn_qrequant *q, const float *sc, const float *b, const int32_t *corr,
                     const int32_t *acc, int64_t ldc, const int32_t *e, const uint8_t *res,
                     int64_t m, int64_t rows, uint8_t *y, int64_t ldy);

/* The pitched form as one call of fn per output row's run of kept columns. */
static void rows_by_runs(rows_fn *fn, const kn_qrequant *q, const float *sc, const float *b,
                         const int32_t *corr, const int32_t *acc, int64_t ldc, const int32_t *e,
                         const uint8_t *res, int64_t c0, int64_t m, int64_t pitch, int64_t ow,
                         int64_t rows, uint8_t *y, int64_t ldy) {
    for (int64_t oy = c0 / pitch; oy * pitch < c0 + m; oy++) {
        int64_t q0 = oy * pitch, q1 = q0 + ow;
        q0 = q0 > c0 ? q0 : c0;
        q1 = q1 < c0 + m ? q1 : c0 + m;
        if (q1 <= q0)
            continue;
        int64_t p = oy * ow + (q0 - oy * pitch);
        fn(q, sc, b, corr, acc + (q0 - c0), ldc, e + (q0 - c0), res != NULL ? res + p : NULL,
           q1 - q0, rows, y + p, ldy);
    }
}

void kn_qrequant_rows_pitched_ref(const kn_qrequant *q, const float *sc, const float *b,
                                  const int32_t *corr, const int32_t *acc, int64_t ldc,
                                  const int32_t *e, const uint8_t *res, int64_t c0, int64_t m,
                                  int64_t pitch, int64_t ow, int64_t rows, uint8_t *y,
                                  int64_t ldy) {
    rows_by_runs(kn_qrequant_rows_ref, q, sc, b, corr, acc, ldc, e, res, c0, m, pitch, ow, rows, y,
                 ldy);
}

void kn_qrequant_rows_pitched(const kn_qrequant *q, const float *sc, const float *b,
                              const int32_t *corr, const int32_t *acc, int64_t ldc,
                              const int32_t *e, const uint8_t *res, int64_t c0, int64_t m,
                              int64_t pitch, int64_t ow, int64_t rows, uint8_t *y, int64_t ldy) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (kn_qrequant_avx512_ok() && kn_qrequant_rows_pitched_avx512(q, sc, b, corr, acc, ldc, e, res,
                                                                   c0, m, pitch, ow, rows, y, ldy))
        return;
#endif
    rows_by_runs(kn_qrequant_rows, q, sc, b, corr, acc, ldc, e, res, c0, m, pitch, ow, rows, y,
                 ldy);
}
