/* The AMX-INT8 kernel of the int8 GEMM on the CPU's tiles against a plain int32 product
 * (gemm_int8_check.h). On a CPU without AMX-INT8 (or where the kernel does not grant tile data)
 * there is nothing to run: the test says so and passes; test_gemm_int8_amx_emu.c proves the
 * same kernel on emulated tiles there. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "gemm_int8_check.h"

#include <stdio.h>
#include <stdlib.h>

static void test_amx_tiles(void **state) {
    (void)state;
    unsetenv("KILN_CPU_AMX");
    if (!kn_qgemm_has_amx()) {
        printf("SKIPPED: no AMX-INT8 here (or no tile data granted, or no AVX512-VNNI); the "
               "AMX kernel was not run\n");
        skip();
    }
    check_qgemm_shapes();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_amx_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
