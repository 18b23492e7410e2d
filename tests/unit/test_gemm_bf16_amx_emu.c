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

#include <stdio.h>

#include "amx_emu.h"

#include "backend/cpu/arch/gemm_bf16_amx.c"

#include "gemm_bf16_check.h"

static void test_emulated_amx(void **state) {
    (void)state;
    emu_enable();
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
    emu_enable();
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
