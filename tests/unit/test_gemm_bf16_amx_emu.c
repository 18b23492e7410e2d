/* The AMX path of the bf16 GEMM on emulated tiles, so its layouts, edges, K slices and
 * epilogues are proved on every CPU with AVX512-BF16 (test_gemm_bf16_amx.c runs the same checks
 * on real tiles where the CPU has them). The kernel's file is compiled here with the tile
 * intrinsics replaced by a model of their documented semantics, and its symbols take the
 * place of the library's, so the driver in math/gemm_bf16.c calls the emulated kernel. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <immintrin.h>
#include <stdbool.h>
#include <stdio.h>
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
static void emu_dpbf16ps(int c, int a, int b) {
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

#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#define _tile_loadconfig emu_loadconfig
#define _tile_release emu_release
#define _tile_loadd(t, base, stride) emu_loadd(t, base, stride)
#define _tile_stored(t, base, stride) emu_stored(t, base, stride)
#define _tile_zero(t) emu_zero(t)
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)
#define kn_bf16_amx_supported kn_bf16_amx_supported_cpu
#include "backend/cpu/arch/gemm_bf16_amx.c"
#undef kn_bf16_amx_supported

bool kn_bf16_amx_supported(void);
bool kn_bf16_amx_supported(void) {
    return true;
}

#include "gemm_bf16_check.h"

static void test_emulated_amx(void **state) {
    (void)state;
    unsetenv("KILN_BF16_PORTABLE");
    unsetenv("KILN_CPU_AMX");
    if (!kn_bf16_native()) {
        printf("SKIPPED: this CPU has no AVX512-BF16, which the AMX path's epilogue and its "
               "small products need; the emulated AMX kernel was not run\n");
        skip();
    }
    assert_true(kn_bf16_amx());
    assert_non_null(strstr(kn_bf16_path_name(), "AMX-BF16 tiles"));
    check_shapes(3);
    assert_true(emu_dots > 0);
}

/* KILN_CPU_AMX=0 keeps products off the tiles (and says so). */
static void test_amx_off(void **state) {
    (void)state;
    if (!kn_bf16_native())
        skip();
    setenv("KILN_CPU_AMX", "0", 1);
    assert_false(kn_bf16_amx());
    assert_non_null(strstr(kn_bf16_path_name(), "AMX turned off by KILN_CPU_AMX=0"));
    long before = emu_dots;
    check_shapes(2);
    assert_true(emu_dots == before);
    unsetenv("KILN_CPU_AMX");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emulated_amx),
        cmocka_unit_test(test_amx_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
