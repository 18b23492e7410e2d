/* The AMX-INT8 kernel of the int8 GEMM on emulated tiles (amx_emu.h), so its layout, K tail
 * and row edges are proved on every CPU with AVX512-VNNI (the kernel hands the rows past the
 * last whole 16 to VNNI); test_gemm_int8_amx.c runs the same checks on real tiles. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "amx_emu.h"

#include "backend/cpu/arch/gemm_int8_amx.c"

#include "gemm_int8_check.h"

static void test_emulated_amx(void **state) {
    (void)state;
    emu_enable();
    unsetenv("KILN_CPU_AMX");
    if (!kn_qgemm_has_vnni()) {
        printf("SKIPPED: this CPU has no AVX512-VNNI, which the AMX-INT8 path needs for its "
               "edge rows; the emulated AMX kernel was not run\n");
        skip();
    }
    assert_true(kn_qgemm_has_amx());
    check_qgemm_shapes();
    assert_true(emu_dots > 0);
}

/* KILN_CPU_AMX=0 keeps products off the tiles. */
static void test_amx_off(void **state) {
    (void)state;
    emu_enable();
    setenv("KILN_CPU_AMX", "0", 1);
    assert_false(kn_qgemm_has_amx());
    long before = emu_dots;
    check_qgemm_shapes();
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
