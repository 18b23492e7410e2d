/* The int8 GEMM (uint8 x int8 -> int32) against a plain C product over odd sizes: k not a
 * multiple of 4, and 4-k steps both even and odd in number (the split sums of the VNNI edge
 * tiles); m not a multiple of the 6-row tile, with edges of one to five rows, and around the
 * 16 rows the last, odd 16-column block takes at once; n not a multiple of 16 or 32; extreme
 * values (255 x -128) in every position; weights past the VNNI kernel's 256 KiB block of rows,
 * which it takes by blocks of 48 rows (a block ending mid-tile, an odd block and edge rows after
 * the last full block). Both the dispatched kernel and the portable one. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "gemm_int8_check.h"

/* B transposed ([n][k]), as convolution weights are. */
static void check(int64_t m, int64_t n, int64_t k, bool extreme) {
    check_qgemm_b(m, n, k, extreme, true);
}

static void test_odd_sizes(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 2, 4, 5, 6, 7, 10, 13, 16, 17, 33};
    static const int64_t ns[] = {1, 15, 16, 17, 33, 48};
    static const int64_t ks[] = {1, 3, 4, 5, 31, 64, 147};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
            for (size_t e = 0; e < sizeof ks / sizeof ks[0]; e++)
                check(ms[i], ns[j], ks[e], false);
}

static void test_extremes(void **state) {
    (void)state;
    check(7, 35, 1027, true);
    check(12, 64, 4608, true);
    check(36, 48, 4608, true);
    check(4, 48, 2052, true);
}

static void test_row_blocks(void **state) {
    (void)state;
    check(100, 48, 4608, false); /* blocks of 48, 48 and 4 rows */
    check(70, 33, 4100, false);  /* 48 and 22: the odd block's 16-row tile, then an edge of 6 */
    check(53, 17, 8192, true);   /* the smallest block, 48 rows, then 5 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_sizes),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_row_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
