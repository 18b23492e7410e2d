#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "core/container.h"

#include <string.h>

/* A container of n float32 items (item i: i + 1 values, each i) written by kn_container_write. */
static kn_tensor make_seq(int n, int kind) {
    kn_tensor items[8];
    float data[8][8];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 8; k++)
            data[i][k] = (float)i;
        items[i] = (kn_tensor){
            .dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 1, .d = {i + 1}}, .data = data[i]};
    }
    size_t nb = kn_container_bytes(n, items);
    kn_tensor t = kn_container_tensor(nb);
    t.data = kn_malloc(nb);
    assert_non_null(t.data);
    kn_container_write(t.data, kind, n ? KILN_DTYPE_FLOAT32 : 0, n, items);
    return t;
}

/* Appends in place or into a grown block: every element reads back, the block stays valid, and
 * growing happens a logarithmic number of times. */
static void test_append_grows_geometrically(void **state) {
    (void)state;
    kn_tensor seq = make_seq(2, KN_CONTAINER_SEQUENCE);
    int moves = 0;
    for (int i = 2; i < 300; i++) {
        float v[5];
        for (int k = 0; k < 5; k++)
            v[k] = (float)(i * 10 + k);
        kn_tensor item = {
            .dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 2, .d = {1, 1 + i % 5}}, .data = v};
        void *before = seq.data;
        bool done = false;
        assert_int_equal(kn_container_append(&seq, &item, &done), KILN_OK);
        assert_true(done);
        moves += seq.data != before;
        kn_container c;
        assert_int_equal(kn_container_open(&seq, "seq", &c), KILN_OK);
        assert_int_equal(c.count, i + 1);
        kn_tensor last = kn_container_item(&c, i);
        assert_int_equal(last.shape.rank, 2);
        assert_int_equal(last.shape.d[1], 1 + i % 5);
        assert_memory_equal(last.data, v, sizeof(float) * (size_t)(1 + i % 5));
    }
    assert_true(moves <= 12);
    kn_container c;
    assert_int_equal(kn_container_open(&seq, "seq", &c), KILN_OK);
    for (int i = 0; i < 2; i++) { /* the elements written before the appends are intact */
        kn_tensor e = kn_container_item(&c, i);
        assert_int_equal(e.shape.d[0], i + 1);
        assert_true(((float *)e.data)[0] == (float)i);
    }
    kn_free(seq.data);
}

/* What the ordinary insert must decide is left alone: another dtype, an optional, a block whose
 * header disagrees with its size. */
static void test_append_declines(void **state) {
    (void)state;
    int64_t iv[1] = {7};
    kn_tensor item = {.dtype = KILN_DTYPE_INT64, .shape = {.rank = 1, .d = {1}}, .data = iv};
    kn_tensor seq = make_seq(3, KN_CONTAINER_SEQUENCE);
    bool done = true;
    assert_int_equal(kn_container_append(&seq, &item, &done), KILN_OK);
    assert_false(done);
    kn_tensor opt = make_seq(1, KN_CONTAINER_OPTIONAL);
    item.dtype = KILN_DTYPE_FLOAT32;
    assert_int_equal(kn_container_append(&opt, &item, &done), KILN_OK);
    assert_false(done);
    seq.shape.d[0] -= 8; /* the header's byte count no longer matches */
    assert_int_equal(kn_container_append(&seq, &item, &done), KILN_OK);
    assert_false(done);
    kn_free(seq.data);
    kn_free(opt.data);
}

static void test_check_kind(void **state) {
    (void)state;
    kn_tensor seq = make_seq(2, KN_CONTAINER_SEQUENCE), opt = make_seq(1, KN_CONTAINER_OPTIONAL);
    kn_tensor none = make_seq(0, KN_CONTAINER_OPTIONAL);
    assert_int_equal(kn_container_check_kind(&seq, KILN_IO_SEQUENCE, "s"), KILN_OK);
    assert_int_equal(kn_container_check_kind(&opt, KILN_IO_OPTIONAL, "o"), KILN_OK);
    assert_int_equal(kn_container_check_kind(&none, KILN_IO_OPTIONAL_SEQUENCE, "o"), KILN_OK);
    assert_int_equal(kn_container_check_kind(&seq, KILN_IO_TENSOR, "s"), KILN_OK);
    assert_int_not_equal(kn_container_check_kind(&opt, KILN_IO_SEQUENCE, "s"), KILN_OK);
    assert_non_null(strstr(kiln_last_error(), "input 's' is a sequence, got an optional tensor"));
    assert_int_not_equal(kn_container_check_kind(&none, KILN_IO_SEQUENCE, "s"), KILN_OK);
    assert_int_not_equal(kn_container_check_kind(&seq, KILN_IO_OPTIONAL, "o"), KILN_OK);
    assert_int_not_equal(kn_container_check_kind(&opt, KILN_IO_OPTIONAL_SEQUENCE, "o"), KILN_OK);
    kn_free(seq.data);
    kn_free(opt.data);
    kn_free(none.data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_grows_geometrically),
        cmocka_unit_test(test_append_declines),
        cmocka_unit_test(test_check_kind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
