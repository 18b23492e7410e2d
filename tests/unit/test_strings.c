#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/strings.h"

#include <stdlib.h>
#include <string.h>

static kn_tensor make_block(void) {
    kn_shape sh = {.rank = 2, .d = {2, 2}};
    const kn_str items[4] = {{"a", 1}, {"", 0}, {"\xe4\xb8\xad", 3}, {"x\0y", 3}};
    kn_tensor t;
    assert_int_equal(kn_strings_make(&sh, items, &t), KILN_OK);
    return t;
}

static void test_block_roundtrip(void **state) {
    (void)state;
    kn_tensor t = make_block();
    assert_int_equal(t.dtype, KILN_DTYPE_STRING);
    assert_int_equal(t.shape.rank, 1);
    assert_int_equal((size_t)t.shape.d[0], sizeof(kn_strings_header) + 5 * 8 + 7);
    kn_strings s;
    assert_int_equal(kn_strings_open(&t, "x", &s), KILN_OK);
    assert_int_equal(s.shape.rank, 2);
    assert_int_equal(s.count, 4);
    assert_true(kn_str_eq(kn_strings_at(&s, 0), (kn_str){"a", 1}));
    assert_int_equal(kn_strings_at(&s, 1).n, 0);
    assert_true(kn_str_eq(kn_strings_at(&s, 3), (kn_str){"x\0y", 3}));
    kn_free(t.data);
}

/* Every malformed block is a one-line error naming the input, never a read past its end. */
static void test_malformed_blocks(void **state) {
    (void)state;
    kn_tensor t = make_block();
    size_t nb = (size_t)t.shape.d[0];
    unsigned char *copy = kn_malloc(nb);
    kn_strings s;
    size_t offs = sizeof(kn_strings_header);
    struct {
        size_t at;
        uint64_t value;
        const char *says;
    } cases[] = {
        {0, 0x12345678, "not a kiln string block"}, /* magic */
        {offsetof(kn_strings_header, rank), 9, "not a kiln string block"},
        {offsetof(kn_strings_header, count), 5, "element count"}, /* count vs dims */
        {offsetof(kn_strings_header, bytes), 7, "not a kiln string block"},
        {offs + 8, 99, "out of order"}, /* an offset past the chars */
        {offs + 16, 0, "out of order"}, /* decreasing */
        {offs, 1, "out of order"},      /* offsets[0] != 0 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(copy, t.data, nb);
        size_t width = cases[c].at == offsetof(kn_strings_header, rank) ? 4 : 8;
        memcpy(copy + cases[c].at, &cases[c].value, width);
        kn_tensor bad = t;
        bad.data = copy;
        assert_int_equal(kn_strings_open(&bad, "input 'x'", &s), KILN_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(kiln_last_error(), cases[c].says));
        assert_non_null(strstr(kiln_last_error(), "input 'x'"));
    }
    /* truncated: fewer bytes than the header says, or too few for the offsets */
    kn_tensor bad = t;
    for (size_t cut = 0; cut < nb; cut++) {
        bad.shape.d[0] = (int64_t)cut;
        assert_int_not_equal(kn_strings_open(&bad, "x", &s), KILN_OK);
    }
    kn_strings_header h;
    memcpy(&h, t.data, sizeof h);
    h.count = UINT64_MAX / 2;
    memcpy(copy, &h, sizeof h);
    bad = t;
    bad.data = copy;
    assert_int_not_equal(kn_strings_open(&bad, "x", &s), KILN_OK);
    /* random bit flips never crash; what opens reads inside the block */
    srand(11);
    for (int k = 0; k < 5000; k++) {
        memcpy(copy, t.data, nb);
        copy[(size_t)rand() % nb] ^= (unsigned char)(1u << (rand() % 8));
        if (kn_strings_open(&bad, "x", &s) == KILN_OK)
            for (int64_t i = 0; i < s.count; i++) {
                kn_str e = kn_strings_at(&s, i);
                assert_true(e.p >= (const char *)copy && e.p + e.n <= (const char *)copy + nb);
            }
    }
    kn_tensor f32 = {.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 1, .d = {4}}, .data = copy};
    assert_int_equal(kn_strings_open(&f32, "x", &s), KILN_ERR_DTYPE);
    kn_free(copy);
    kn_free(t.data);
}

static void test_npy_unicode_and_bytes(void **state) {
    (void)state;
    kn_tensor t = make_block();
    void *buf;
    size_t n;
    /* "x\0y" is valid UTF-8: unicode, 3 code points wide */
    assert_int_equal(kn_npy_to_bytes(&t, &buf, &n), KILN_OK);
    assert_non_null(memmem(buf, n, "'<U3'", 5));
    assert_non_null(memmem(buf, n, "(2, 2)", 6));
    kn_tensor back;
    assert_int_equal(kn_npy_from_bytes(buf, n, &back), KILN_OK);
    kn_strings s;
    assert_int_equal(kn_strings_open(&back, "x", &s), KILN_OK);
    assert_true(kn_str_eq(kn_strings_at(&s, 2), (kn_str){"\xe4\xb8\xad", 3}));
    assert_true(kn_str_eq(kn_strings_at(&s, 0), (kn_str){"a", 1}));
    kn_free(back.data);
    /* truncated data and a value that is no code point are errors */
    assert_int_equal(kn_npy_from_bytes(buf, n - 1, &back), KILN_ERR_IO);
    unsigned char *bad = kn_malloc(n);
    memcpy(bad, buf, n);
    memset(bad + n - 4, 0xff, 4);
    assert_int_equal(kn_npy_from_bytes(bad, n, &back), KILN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kiln_last_error(), "code point"));
    kn_free(bad);
    kn_free(buf);
    kn_free(t.data);
    /* invalid UTF-8 goes out as bytes ('|S') and comes back unchanged */
    kn_shape sh = {.rank = 1, .d = {2}};
    const kn_str raw[2] = {{"\xff\xfe", 2}, {"ok", 2}};
    assert_int_equal(kn_strings_make(&sh, raw, &t), KILN_OK);
    assert_int_equal(kn_npy_to_bytes(&t, &buf, &n), KILN_OK);
    assert_non_null(memmem(buf, n, "'|S2'", 5));
    assert_int_equal(kn_npy_from_bytes(buf, n, &back), KILN_OK);
    assert_int_equal(kn_tensor_nbytes(&back), kn_tensor_nbytes(&t));
    assert_memory_equal(back.data, t.data, kn_tensor_nbytes(&t));
    kn_free(back.data);
    kn_free(buf);
    kn_free(t.data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_roundtrip),
        cmocka_unit_test(test_malformed_blocks),
        cmocka_unit_test(test_npy_unicode_and_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
