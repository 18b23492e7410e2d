/* The AMX path of the bf16 GEMM on the CPU's tiles: sizes around the tile edges, every operand
 * form and the epilogues against a reference on bf16-rounded inputs (gemm_bf16_check.h). On a
 * CPU without AMX-BF16 (or where the kernel does not grant tile data) there is nothing to run:
 * the test says so and passes; test_gemm_bf16_amx_emu.c proves the same path on emulated tiles
 * there. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "gemm_bf16_check.h"

#include <stdio.h>
#include <string.h>

static void test_amx_tiles(void **state) {
    (void)state;
    unsetenv("KILN_BF16_PORTABLE");
    unsetenv("KILN_CPU_AMX");
    if (!kn_bf16_amx()) {
        printf("SKIPPED: no AMX-BF16 here (%s); the AMX kernel was not run\n", kn_bf16_path_name());
        skip();
    }
    printf("%s\n", kn_bf16_path_name());
    assert_non_null(strstr(kn_bf16_path_name(), "AMX-BF16 tiles"));
    check_shapes(1);
    check_shapes(4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_amx_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
