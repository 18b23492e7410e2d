/* The int8 convolution's requantization (kiln.QConv, qconv.c): output channel j's int32 sums
 * to y's bytes. For pixel i,
 *   r = (float)(acc[i] - e[i] + corr) * sc + b       (no fused multiply-add)
 * where e[i] is 128 times the ones row's sum (qconv.c: the ones row holds 128s), with a fused
 * residual (kn_pass_fuse_qadd) r is first rounded to the conv output's own grid,
 *   r = rne(clamp(r / cs, cmin, cmax)) * cs + (float)((res[i] ^ rflip) - rzu) * rs,
 * then r = clamp(r, lo, hi) (the fused Relu / Clip), and
 *   y[i] = rne(clamp(r / ys, qlo, qhi)) + yz   (as a byte),
 * rne rounding half to even, every clamp `x > lo ? x : lo` then `x < hi ? x : hi`.
 * kn_qrequant_rows_ref computes exactly that in loops the compiler vectorizes; kn_qrequant_rows
 * gives the same bytes, faster where the CPU has AVX-512 (arch/requant_avx512.c: 16 lanes, and
 * fewer operations where the constants allow; GCC's AVX-512 clone of the loop uses 8). */
#ifndef KN_CPU_QUANTIZATION_REQUANT_H
#define KN_CPU_QUANTIZATION_REQUANT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kn_qrequant {
    float ys, yz, qlo, qhi; /* y's scale and zero point; qlo = qmin - yz, qhi = qmax - yz */
    float lo, hi;           /* the fused Relu / Clip bounds (+-inf when none) */
    bool residual;          /* the residual step above */
    float cs, cmin, cmax;   /* the conv output's grid: scale, clamp of the quotient */
    float rs;               /* the residual's scale */
    int32_t rzu;            /* its zero point in the uint8 domain */
    uint8_t rflip;          /* 0x80 for an int8 residual */
    bool finite; /* every channel's sc and b finite (kn_qrequant_note_channels); while false the
                  * AVX-512 form keeps the reference's steps one by one */
} kn_qrequant;

/* Sets q->finite for the channel constants sc[0, n), b[0, n) the calls will take (any rows of
 * them): once, where they are made, not on every call. */
void kn_qrequant_note_channels(kn_qrequant *q, const float *sc, const float *b, int64_t n);

/* Rows [0, rows) of the output: row j's m sums at acc + j * ldc with channel constants
 * sc[j], b[j], corr[j]; e (shared by the rows); the residual's row j at res + j * ldy (only
 * with q->residual; else res may be NULL); the bytes to y + j * ldy. */
void kn_qrequant_rows(const kn_qrequant *q, const float *sc, const float *b, const int32_t *corr,
                      const int32_t *acc, int64_t ldc, const int32_t *e, const uint8_t *res,
                      int64_t m, int64_t rows, uint8_t *y, int64_t ldy);
/* The same by IEEE divisions, in loops the compiler vectorizes (the path of CPUs without
 * AVX-512, and the tests' reference). */
void kn_qrequant_rows_ref(const kn_qrequant *q, const float *sc, const float *b,
                          const int32_t *corr, const int32_t *acc, int64_t ldc, const int32_t *e,
                          const uint8_t *res, int64_t m, int64_t rows, uint8_t *y, int64_t ldy);

/* The same for the product of a padded copy whose rows are pitch columns apart (qconv.c):
 * column i < m is the copy's column c = c0 + i, output pixel (c / pitch, c % pitch) at
 * p = (c / pitch) * ow + c % pitch where c % pitch < ow, and thrown away where not. Row j's
 * byte of pixel p goes to y[j * ldy + p], its residual at res[j * ldy + p]. With AVX-512 (and
 * VBMI) one pass over the columns, the kept bytes packed into place; else one call a run. */
void kn_qrequant_rows_pitched(const kn_qrequant *q, const float *sc, const float *b,
                              const int32_t *corr, const int32_t *acc, int64_t ldc,
                              const int32_t *e, const uint8_t *res, int64_t c0, int64_t m,
                              int64_t pitch, int64_t ow, int64_t rows, uint8_t *y, int64_t ldy);
/* The same by kn_qrequant_rows_ref, a run at a time (the tests' reference). */
void kn_qrequant_rows_pitched_ref(const kn_qrequant *q, const float *sc, const float *b,
                                  const int32_t *corr, const int32_t *acc, int64_t ldc,
                                  const int32_t *e, const uint8_t *res, int64_t c0, int64_t m,
                                  int64_t pitch, int64_t ow, int64_t rows, uint8_t *y, int64_t ldy);

/* v clamped to [lo, hi] (`v > lo ? v : lo`, then `v < hi ? v : hi`: a NaN goes to lo) and
 * rounded half to even by adding and taking away 1.5 * 2^23 (|v| well inside 2^22): the
 * rounding step every int8 output of the CPU shares (requant.c, qdq_product.c,
 * quantize_linear.c). Inline, with scalar arguments, so the loops around it vectorize. */
static inline float kn_q8_rne(float v, float lo, float hi) {
    const float magic = 12582912.0f;
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    return (v + magic) - magic;
}

/* Per-tensor QuantizeLinear of n float32 values with scale s and zero point z to int8 (sgn) or
 * uint8 bytes (quantize_linear.c; also the quantizing STORE of the fused element-wise kernel). */
void kn_cpu_quantize_q8(const float *x, int64_t n, float s, float z, bool sgn, void *y);

/* The AVX-512 form (arch/requant_avx512.c); only where kn_qrequant_avx512_ok(). */
bool kn_qrequant_avx512_ok(void);
void kn_qrequant_rows_avx512(const kn_qrequant *q, const float *sc, const float *b,
                             const int32_t *corr, const int32_t *acc, int64_t ldc, const int32_t *e,
                             const uint8_t *res, int64_t m, int64_t rows, uint8_t *y, int64_t ldy);
/* The pitched form in one pass, where the CPU has AVX512-VBMI and the constants allow the fast
 * form (arch/requant_avx512.c); false, with nothing written, where not. Only where
 * kn_qrequant_avx512_ok(). */
bool kn_qrequant_rows_pitched_avx512(const kn_qrequant *q, const float *sc, const float *b,
                                     const int32_t *corr, const int32_t *acc, int64_t ldc,
                                     const int32_t *e, const uint8_t *res, int64_t c0, int64_t m,
                                     int64_t pitch, int64_t ow, int64_t rows, uint8_t *y,
                                     int64_t ldy);

#endif
