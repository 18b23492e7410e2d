/* Replays every input in tests/fuzz/regressions/ through the fuzz entry points, so an input
 * that once crashed kiln (or broke its error promise) stays fixed under ctest and the
 * sanitizer build. A file's name starts with its target: onnx-, plan-, npy-, tensor_proto-. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

/* Compiled in rather than linked: the unit tests link only kiln_static and cmocka. */
#include "../fuzz/fuzz_targets.c"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *regressions_dir(void) {
    static char buf[1024];
    const char *root = getenv("KILN_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/tests/fuzz/regressions", root ? root : KILN_SOURCE_DIR);
    return buf;
}

static uint8_t *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *p = realloc(buf, cap);
            if (p == NULL)
                break;
            buf = p;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    *size = n;
    return buf;
}

typedef struct target {
    const char *prefix;
    int (*entry)(const uint8_t *, size_t);
} target;

static const target targets[] = {
    {"onnx-", kn_fuzz_onnx},
    {"plan-", kn_fuzz_plan},
    {"npy-", kn_fuzz_npy},
    {"tensor_proto-", kn_fuzz_tensor_proto},
};

static int replay_one(const char *name) {
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        size_t len = strlen(targets[i].prefix);
        if (strncmp(name, targets[i].prefix, len) != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", regressions_dir(), name);
        size_t size = 0;
        uint8_t *data = slurp(path, &size);
        assert_non_null(data);
        int rc = targets[i].entry(data, size);
        free(data);
        return rc;
    }
    fail_msg("%s: name does not start with a known target", name);
    return -1;
}

static void test_replay_regressions(void **state) {
    (void)state;
    DIR *d = opendir(regressions_dir());
    assert_non_null(d);
    int replayed = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        print_message("replay %s\n", ent->d_name);
        assert_int_equal(replay_one(ent->d_name), 0);
        assert_int_equal(kiln_allocated_bytes(), 0);
        replayed++;
    }
    closedir(d);
    assert_true(replayed > 0);
}

/* The capped allocator itself: what the fuzzers rely on to turn absurd sizes into errors. */
static void test_capped_allocator_refuses_huge(void **state) {
    (void)state;
    void *p = kn_malloc(FUZZ_MAX_ALLOC + 1);
    assert_null(p);
    p = kn_malloc(4096);
    assert_non_null(p);
    kn_free(p);
}

/* A valid .npy round-trips; a truncated one is refused with a message. */
static void test_npy_entry_accepts_and_refuses(void **state) {
    (void)state;
    static const char hdr[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    uint8_t buf[256] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    size_t hlen = 128 - 10;
    memset(buf + 10, ' ', hlen);
    memcpy(buf + 10, hdr, sizeof hdr - 1);
    buf[10 + hlen - 1] = '\n';
    buf[8] = (uint8_t)hlen;
    float v[2] = {1.5f, -2.0f};
    memcpy(buf + 128, v, sizeof v);
    assert_int_equal(kn_fuzz_npy(buf, 128 + sizeof v), 0);
    kn_tensor t = {0};
    assert_int_equal(kn_npy_from_bytes(buf, 128 + sizeof v, &t), KILN_OK);
    assert_int_equal(t.shape.rank, 1);
    assert_int_equal(t.shape.d[0], 2);
    assert_true(((float *)t.data)[1] == -2.0f);
    kn_free(t.data);
    assert_int_equal(kn_fuzz_npy(buf, 128 + sizeof v - 1), 0);
    assert_int_not_equal(kn_npy_from_bytes(buf, 128 + sizeof v - 1, &t), KILN_OK);
}

int main(void) {
    kn_fuzz_setup();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capped_allocator_refuses_huge),
        cmocka_unit_test(test_npy_entry_accepts_and_refuses),
        cmocka_unit_test(test_replay_regressions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
