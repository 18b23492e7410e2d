/* AMX-BF16 kernel of the bf16 GEMM (see gemm_bf16_amx.h): up to 2 x 2 C tiles (a 32 x 32 fp32
 * block) held in tmm0-3 over the whole K slice, two A tiles in tmm4-5 and two B tiles in
 * tmm6-7, so each step loads four tiles for four tdpbf16ps. Every tile is 16 rows x 64 bytes,
 * the configuration of arch/amx.c for every block shape; partial blocks are the driver's (it
 * hands a scratch block where rows or columns run past C). */
#include "backend/cpu/arch/gemm_bf16_amx.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>
#include <stddef.h>

#define AMX __attribute__((target("amx-tile,amx-bf16")))
#define A_STEP (KN_BF16_KT * KN_BF16_AMX_MR) /* uint32 from one A tile to the next along K */
#define B_STEP (KN_BF16_KT * 32)             /* uint32 from one B block to the next along K */
#define B_STRIDE 128                         /* bytes between a B tile's rows (a panel's row) */

/* rt and ct are constants in each caller, so the unused tiles' instructions drop out. */
AMX static inline __attribute__((always_inline)) void block(int rt, int ct, const uint32_t *a0,
                                                            const uint32_t *a1, const uint32_t *b,
                                                            int64_t kblocks, float *c, int64_t ldc,
                                                            bool accumulate) {
    size_t sc = (size_t)ldc * sizeof(float);
    float *c1 = c + 16 * ldc;
    if (accumulate) {
        _tile_loadd(0, c, sc);
        if (ct > 1)
            _tile_loadd(1, c + 16, sc);
        if (rt > 1)
            _tile_loadd(2, c1, sc);
        if (rt > 1 && ct > 1)
            _tile_loadd(3, c1 + 16, sc);
    } else {
        _tile_zero(0);
        if (ct > 1)
            _tile_zero(1);
        if (rt > 1)
            _tile_zero(2);
        if (rt > 1 && ct > 1)
            _tile_zero(3);
    }
    for (int64_t kb = 0; kb < kblocks; kb++) {
        _tile_loadd(6, b + kb * B_STEP, B_STRIDE);
        if (ct > 1)
            _tile_loadd(7, b + kb * B_STEP + 16, B_STRIDE);
        _tile_loadd(4, a0 + kb * A_STEP, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (ct > 1)
            _tile_dpbf16ps(1, 4, 7);
        if (rt > 1) {
            _tile_loadd(5, a1 + kb * A_STEP, 64);
            _tile_dpbf16ps(2, 5, 6);
            if (ct > 1)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, sc);
    if (ct > 1)
        _tile_stored(1, c + 16, sc);
    if (rt > 1)
        _tile_stored(2, c1, sc);
    if (rt > 1 && ct > 1)
        _tile_stored(3, c1 + 16, sc);
}

AMX void kn_bf16_amx_block(int rt, int ct, const uint32_t *a0, const uint32_t *a1,
                           const uint32_t *b, int64_t kblocks, float *c, int64_t ldc,
                           bool accumulate) {
    if (rt > 1 && ct > 1)
        block(2, 2, a0, a1, b, kblocks, c, ldc, accumulate);
    else if (rt > 1)
        block(2, 1, a0, a1, b, kblocks, c, ldc, accumulate);
    else if (ct > 1)
        block(1, 2, a0, a1, b, kblocks, c, ldc, accumulate);
    else
        block(1, 1, a0, a1, b, kblocks, c, ldc, accumulate);
}

__attribute__((target("avx512f"))) void kn_bf16_amx_epilogue(float *c, int64_t ldc, int rows,
                                                             int nr, const kn_bf16_tile_ep *te) {
    __mmask16 m0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32   ? (__mmask16)0xFFFF
                   : nr <= 16 ? (__mmask16)0
                              : (__mmask16)((1u << (nr - 16)) - 1);
    __m512 bc0 = _mm512_setzero_ps(), bc1 = _mm512_setzero_ps();
    if (te->bias_col != NULL) {
        bc0 = _mm512_maskz_loadu_ps(m0, te->bias_col);
        bc1 = _mm512_maskz_loadu_ps(m1, te->bias_col + 16);
    }
    __m512 lo = _mm512_set1_ps(te->lo), hi = _mm512_set1_ps(te->hi);
    for (int r = 0; r < rows; r++) {
        float *cr = c + r * ldc;
        __m512 x0 = _mm512_maskz_loadu_ps(m0, cr), x1 = _mm512_maskz_loadu_ps(m1, cr + 16);
        __m512 b0 = bc0, b1 = bc1;
        if (te->bias_row != NULL)
            b0 = b1 = _mm512_set1_ps(te->bias_row[r]);
        x0 = _mm512_add_ps(x0, b0);
        x1 = _mm512_add_ps(x1, b1);
        if (te->res != NULL) {
            const float *rr = te->res + r * te->ldr;
            x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(m0, rr));
            x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(m1, rr + 16));
        }
        if (te->clamp) {
            x0 = _mm512_min_ps(_mm512_max_ps(x0, lo), hi);
            x1 = _mm512_min_ps(_mm512_max_ps(x1, lo), hi);
        }
        _mm512_mask_storeu_ps(cr, m0, x0);
        _mm512_mask_storeu_ps(cr + 16, m1, x1);
    }
}

#else

void kn_bf16_amx_block(int rt, int ct, const uint32_t *a0, const uint32_t *a1, const uint32_t *b,
                       int64_t kblocks, float *c, int64_t ldc, bool accumulate) {
    (void)rt, (void)ct, (void)a0, (void)a1, (void)b, (void)kblocks, (void)c, (void)ldc;
    (void)accumulate;
}

void kn_bf16_amx_epilogue(float *c, int64_t ldc, int rows, int nr, const kn_bf16_tile_ep *te) {
    (void)c, (void)ldc, (void)rows, (void)nr, (void)te;
}

#endif
