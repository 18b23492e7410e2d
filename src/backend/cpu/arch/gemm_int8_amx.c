/* AMX-INT8 kernel of the int8 GEMM: blocks of up to 2 x 2 int32 C tiles (32 rows x 32 columns)
 * in tmm0-3, A tiles (16 rows x 64 k of uint8, read straight from the caller's rows) in tmm4-5,
 * B tiles in tmm6-7. B's packed 16-column blocks ([kp / 4][16 columns][4 k] bytes) are already
 * the tile layout tdpbusd takes: 16 rows of 4 k x 16 columns, 64 bytes a row. K runs in steps of
 * 64; a last partial step takes A's and B's remaining bytes through zero-padded tiles (B's once
 * per column block), so no tile reads past a row of A or a block of B. Rows past the last whole
 * 16 go to the VNNI kernel. */
#include "backend/cpu/math/gemm_int8.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include "backend/cpu/arch/amx.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define AMX __attribute__((target("amx-tile,amx-int8")))
#define KSTEP 64 /* k per A tile row */

/* rt and ct are constants in each caller, so the unused tiles' instructions drop out. */
AMX static inline __attribute__((always_inline)) void
block(int rt, int ct, const uint8_t *a, int64_t lda, const int8_t *b0, const int8_t *b1,
      const int8_t *t0, const int8_t *t1, int64_t kp, int32_t *c, int64_t ldc) {
    size_t sa = (size_t)lda, sc = (size_t)ldc * sizeof(int32_t);
    int64_t kfull = kp / KSTEP * KSTEP;
    _tile_zero(0);
    if (ct > 1)
        _tile_zero(1);
    if (rt > 1)
        _tile_zero(2);
    if (rt > 1 && ct > 1)
        _tile_zero(3);
    for (int64_t e = 0; e < kfull; e += KSTEP) {
        /* a B row holds 4 k of 16 columns: step e starts e / 4 rows (e * 16 bytes) in */
        _tile_loadd(6, b0 + e * 16, 64);
        if (ct > 1)
            _tile_loadd(7, b1 + e * 16, 64);
        _tile_loadd(4, a + e, sa);
        _tile_dpbusd(0, 4, 6);
        if (ct > 1)
            _tile_dpbusd(1, 4, 7);
        if (rt > 1) {
            _tile_loadd(5, a + 16 * lda + e, sa);
            _tile_dpbusd(2, 5, 6);
            if (ct > 1)
                _tile_dpbusd(3, 5, 7);
        }
    }
    if (kfull < kp) {
        uint8_t tail[32][KSTEP];
        memset(tail, 0, sizeof tail);
        for (int r = 0; r < 16 * rt; r++)
            memcpy(tail[r], a + r * lda + kfull, (size_t)(kp - kfull));
        _tile_loadd(6, t0, KSTEP);
        if (ct > 1)
            _tile_loadd(7, t1, KSTEP);
        _tile_loadd(4, tail[0], KSTEP);
        _tile_dpbusd(0, 4, 6);
        if (ct > 1)
            _tile_dpbusd(1, 4, 7);
        if (rt > 1) {
            _tile_loadd(5, tail[16], KSTEP);
            _tile_dpbusd(2, 5, 6);
            if (ct > 1)
                _tile_dpbusd(3, 5, 7);
        }
    }
    _tile_stored(0, c, sc);
    if (ct > 1)
        _tile_stored(1, c + 16, sc);
    if (rt > 1)
        _tile_stored(2, c + 16 * ldc, sc);
    if (rt > 1 && ct > 1)
        _tile_stored(3, c + 16 * ldc + 16, sc);
}

AMX void kn_qgemm_u8s8_amx(const uint8_t *a, int64_t lda, int64_t m, const kn_qgemm_b *b,
                           int32_t *c, int64_t ldc) {
    int64_t blk = b->kp * 16, mfull = m / 16 * 16, kfull = b->kp / KSTEP * KSTEP;
    int8_t t0[16 * KSTEP], t1[16 * KSTEP];
    kn_cpu_amx_begin();
    for (int64_t j = 0; j < b->nb; j += 2) {
        const int8_t *b0 = b->packed + j * blk, *b1 = b0 + blk;
        bool two = j + 1 < b->nb;
        if (kfull < b->kp) {
            /* the tail's (kp - kfull) / 4 rows of B, 64 bytes each */
            size_t bytes = (size_t)((b->kp - kfull) * 16);
            memset(t0 + bytes, 0, sizeof t0 - bytes);
            memset(t1 + bytes, 0, sizeof t1 - bytes);
            memcpy(t0, b0 + kfull * 16, bytes);
            memcpy(t1, two ? b1 + kfull * 16 : b0 + kfull * 16, bytes);
        }
        for (int64_t i = 0; i < mfull; i += 32) {
            const uint8_t *ai = a + i * lda;
            int32_t *ci = c + i * ldc + j * 16;
            if (i + 32 <= mfull && two)
                block(2, 2, ai, lda, b0, b1, t0, t1, b->kp, ci, ldc);
            else if (i + 32 <= mfull)
                block(2, 1, ai, lda, b0, b1, t0, t1, b->kp, ci, ldc);
            else if (two)
                block(1, 2, ai, lda, b0, b1, t0, t1, b->kp, ci, ldc);
            else
                block(1, 1, ai, lda, b0, b1, t0, t1, b->kp, ci, ldc);
        }
    }
    kn_cpu_amx_end();
    if (mfull < m)
        kn_qgemm_u8s8_vnni(a + mfull * lda, lda, m - mfull, b, c + mfull * ldc, ldc);
}

#endif
