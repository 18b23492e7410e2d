/* A model of the AMX tile instructions the kernels use, after their documented semantics,
 * for tests that compile a kernel file with the intrinsics replaced (include <immintrin.h>
 * first, then this header, then the kernel's .c file and arch/amx.c). Their symbols take the
 * library's place, so the drivers call the emulated kernels; after emu_enable() AMX reads as
 * supported. emu_dots counts the dot-product instructions run. */
#ifndef KN_TEST_AMX_EMU_H
#define KN_TEST_AMX_EMU_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Eight tiles of 16 rows x 64 bytes and the loaded configuration, per thread as on the CPU. */
static _Thread_local struct {
    bool configured;
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t data[8][16][64];
} emu;
static _Atomic long emu_dots;

static void emu_loadconfig(const void *cfg) {
    const uint8_t *p = cfg;
    assert_int_equal(p[0], 1); /* palette 1 */
    for (int t = 0; t < 8; t++) {
        memcpy(&emu.colsb[t], p + 16 + 2 * t, 2);
        emu.rows[t] = p[48 + t];
        assert_true(emu.rows[t] <= 16 && emu.colsb[t] <= 64);
    }
    emu.configured = true;
}

static void emu_release(void) {
    assert_true(emu.configured);
    emu.configured = false;
}

static void emu_zero(int t) {
    assert_true(emu.configured);
    memset(emu.data[t], 0, sizeof emu.data[t]);
}

static void emu_loadd(int t, const void *base, size_t stride) {
    assert_true(emu.configured);
    for (int r = 0; r < emu.rows[t]; r++)
        memcpy(emu.data[t][r], (const uint8_t *)base + r * stride, emu.colsb[t]);
}

static void emu_stored(int t, void *base, size_t stride) {
    assert_true(emu.configured);
    for (int r = 0; r < emu.rows[t]; r++)
        memcpy((uint8_t *)base + r * stride, emu.data[t][r], emu.colsb[t]);
}

static float emu_bf16(const uint8_t *p) {
    uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* tdpbf16ps: C[m][n] += A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1] in fp32. */
__attribute__((unused)) static void emu_dpbf16ps(int c, int a, int b) {
    assert_true(emu.configured);
    assert_int_equal(emu.rows[c], emu.rows[a]);
    assert_int_equal(emu.colsb[c], emu.colsb[b]);
    assert_int_equal(emu.colsb[a] / 4, emu.rows[b]);
    for (int m = 0; m < emu.rows[c]; m++)
        for (int n = 0; n < emu.colsb[c] / 4; n++) {
            float acc;
            memcpy(&acc, &emu.data[c][m][4 * n], 4);
            for (int k = 0; k < emu.colsb[a] / 4; k++) {
                acc += emu_bf16(&emu.data[a][m][4 * k]) * emu_bf16(&emu.data[b][k][4 * n]);
                acc += emu_bf16(&emu.data[a][m][4 * k + 2]) * emu_bf16(&emu.data[b][k][4 * n + 2]);
            }
            memcpy(&emu.data[c][m][4 * n], &acc, 4);
        }
    emu_dots++;
}

/* tdpbusd: C[m][n] += sum over i < 4 of A[m][4k + i] (uint8) * B[k][4n + i] (int8), int32. */
__attribute__((unused)) static void emu_dpbusd(int c, int a, int b) {
    assert_true(emu.configured);
    assert_int_equal(emu.rows[c], emu.rows[a]);
    assert_int_equal(emu.colsb[c], emu.colsb[b]);
    assert_int_equal(emu.colsb[a] / 4, emu.rows[b]);
    for (int m = 0; m < emu.rows[c]; m++)
        for (int n = 0; n < emu.colsb[c] / 4; n++) {
            int32_t acc;
            memcpy(&acc, &emu.data[c][m][4 * n], 4);
            for (int k = 0; k < emu.colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++)
                    acc += (int32_t)emu.data[a][m][4 * k + i] * (int8_t)emu.data[b][k][4 * n + i];
            memcpy(&emu.data[c][m][4 * n], &acc, 4);
        }
    emu_dots++;
}

#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#undef _tile_dpbusd
#define _tile_loadconfig emu_loadconfig
#define _tile_release emu_release
#define _tile_loadd(t, base, stride) emu_loadd(t, base, stride)
#define _tile_stored(t, base, stride) emu_stored(t, base, stride)
#define _tile_zero(t) emu_zero(t)
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)
#define _tile_dpbusd(c, a, b) emu_dpbusd(c, a, b)
#include "backend/cpu/arch/amx.c"

/* Make every AMX feature available (after the real probe has run, so it cannot undo this). */
static void emu_enable(void) {
    pthread_once(&probe_once, probe);
    amx_features = KN_AMX_TILE | KN_AMX_BF16 | KN_AMX_INT8;
}

#endif
