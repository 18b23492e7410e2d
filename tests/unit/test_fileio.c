#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "core/fileio.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_fileio_XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void data_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/tests/unit/data/%s", KILN_SOURCE_DIR, name);
}

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* Files in dir whose name starts with prefix. */
static int count_prefixed(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    if (d != NULL)
        closedir(d);
    return n;
}

static void test_read_and_map(void **state) {
    (void)state;
    char p[300];
    tmp_path(p, sizeof p, "hello.txt");
    assert_int_equal(kn_file_write_atomic(p, "hello", 5), KILN_OK);
    void *data;
    size_t size;
    assert_int_equal(kn_file_read(p, &data, &size), KILN_OK);
    assert_int_equal(size, 5);
    assert_memory_equal(data, "hello", 5);
    kn_free(data);
    const void *m;
    assert_int_equal(kn_file_map(p, &m, &size), KILN_OK);
    assert_int_equal(size, 5);
    assert_memory_equal(m, "hello", 5);
    kn_file_unmap(m, size);

    tmp_path(p, sizeof p, "empty");
    assert_int_equal(kn_file_write_atomic(p, NULL, 0), KILN_OK);
    assert_int_equal(kn_file_map(p, &m, &size), KILN_ERR_IO);
    assert_non_null(strstr(kiln_last_error(), "empty"));
    assert_int_equal(kn_file_read(p, &data, &size), KILN_OK);
    assert_int_equal(size, 0);
    kn_free(data);

    tmp_path(p, sizeof p, "missing");
    assert_int_equal(kn_file_read(p, &data, &size), KILN_ERR_IO);
    assert_non_null(strstr(kiln_last_error(), "missing"));
    assert_int_equal(kn_file_map(tmpdir, &m, &size), KILN_ERR_IO); /* a directory */
}

static void test_atomic_write_failure_keeps_old(void **state) {
    (void)state;
    char p[300], sub[300];
    tmp_path(p, sizeof p, "plan.bin");
    assert_int_equal(kn_file_write_atomic(p, "old", 3), KILN_OK);
    assert_int_equal(kn_file_write_atomic(p, "newer", 5), KILN_OK);
    void *data;
    size_t size;
    assert_int_equal(kn_file_read(p, &data, &size), KILN_OK);
    assert_int_equal(size, 5);
    assert_memory_equal(data, "newer", 5);
    kn_free(data);

    /* Renaming over a non-empty directory fails after the temp file was fully written: the
     * directory and its content survive and the temp file is removed. */
    tmp_path(sub, sizeof sub, "dirtarget");
    assert_int_equal(mkdir(sub, 0755), 0);
    char inner[320];
    snprintf(inner, sizeof inner, "%s/keep", sub);
    assert_int_equal(kn_file_write_atomic(inner, "keep", 4), KILN_OK);
    assert_int_equal(kn_file_write_atomic(sub, "x", 1), KILN_ERR_IO);
    assert_int_equal(kn_file_read(inner, &data, &size), KILN_OK);
    assert_memory_equal(data, "keep", 4);
    kn_free(data);
    assert_int_equal(count_prefixed(tmpdir, "dirtarget.tmp."), 0);

    /* A directory we may not write to: the temp file cannot be created; the old file stays.
     * (root ignores permissions, so only checked for other users.) */
    char ro[300], ro_file[320];
    tmp_path(ro, sizeof ro, "readonly");
    assert_int_equal(mkdir(ro, 0755), 0);
    snprintf(ro_file, sizeof ro_file, "%s/model.plan", ro);
    assert_int_equal(kn_file_write_atomic(ro_file, "old", 3), KILN_OK);
    if (geteuid() != 0) {
        assert_int_equal(chmod(ro, 0555), 0);
        assert_int_equal(kn_file_write_atomic(ro_file, "new!", 4), KILN_ERR_IO);
        assert_non_null(strstr(kiln_last_error(), "model.plan"));
        chmod(ro, 0755);
    }
    assert_int_equal(kn_file_read(ro_file, &data, &size), KILN_OK);
    assert_int_equal(size, 3);
    assert_memory_equal(data, "old", 3);
    kn_free(data);
    assert_int_equal(count_prefixed(ro, "model.plan.tmp."), 0);

    /* The write itself fails part-way (file size limit, which binds root too): the old file
     * keeps its content and no temporary file is left behind. */
    struct rlimit old_lim, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
    lim = old_lim;
    lim.rlim_cur = 4096;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    char *big = kn_calloc(1, 100000);
    kiln_status rc = kn_file_write_atomic(ro_file, big, 100000);
    setrlimit(RLIMIT_FSIZE, &old_lim);
    signal(SIGXFSZ, old_handler);
    kn_free(big);
    assert_int_equal(rc, KILN_ERR_IO);
    assert_int_equal(kn_file_read(ro_file, &data, &size), KILN_OK);
    assert_int_equal(size, 3);
    assert_memory_equal(data, "old", 3);
    kn_free(data);
    assert_int_equal(count_prefixed(ro, "model.plan.tmp."), 0);

    /* A missing parent directory. */
    tmp_path(p, sizeof p, "no/such/dir/file");
    assert_int_equal(kn_file_write_atomic(p, "x", 1), KILN_ERR_IO);
}

/* Fills t with a deterministic pattern valid for its dtype. */
static void fill_pattern(kn_tensor *t) {
    int64_t n = kn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == KILN_DTYPE_BOOL)
            kn_tensor_set_i64(t, i, i % 3 == 0);
        else if (kn_dtype_is_float(t->dtype))
            kn_tensor_set_f64(t, i, (double)i * 0.5 - 3.0);
        else
            kn_tensor_set_i64(t, i, (i * 37) % 100);
    }
}

static void test_npy_roundtrip_all_dtypes(void **state) {
    (void)state;
    const int32_t dtypes[] = {
        KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT64, KILN_DTYPE_FLOAT16, KILN_DTYPE_INT64,
        KILN_DTYPE_INT32, KILN_DTYPE_INT16, KILN_DTYPE_INT8, KILN_DTYPE_UINT8, KILN_DTYPE_UINT16,
        KILN_DTYPE_UINT32, KILN_DTYPE_UINT64, KILN_DTYPE_BOOL,
        /* written as one-field records named after ml_dtypes' types */
        KILN_DTYPE_BFLOAT16, KILN_DTYPE_FLOAT8E4M3FN, KILN_DTYPE_FLOAT8E4M3FNUZ,
        KILN_DTYPE_FLOAT8E5M2, KILN_DTYPE_FLOAT8E5M2FNUZ, KILN_DTYPE_FLOAT8E8M0, KILN_DTYPE_UINT4,
        KILN_DTYPE_INT4, KILN_DTYPE_FLOAT4E2M1};
    const kn_shape shapes[] = {{0, {0}}, {1, {5}}, {3, {2, 3, 4}}, {2, {0, 3}}};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            kn_tensor t = {dtypes[d], shapes[s], NULL};
            size_t nb = kn_tensor_nbytes(&t);
            t.data = kn_calloc(1, nb + 1);
            fill_pattern(&t);
            char p[300];
            tmp_path(p, sizeof p, "rt.npy");
            assert_int_equal(kn_npy_write(p, &t), KILN_OK);
            kn_tensor r;
            assert_int_equal(kn_npy_read(p, &r), KILN_OK);
            assert_int_equal(r.dtype, t.dtype);
            assert_true(kn_shape_equal(&r.shape, &t.shape));
            if (nb > 0)
                assert_memory_equal(r.data, t.data, nb);
            kn_free(r.data);
            kn_free(t.data);
        }
    }
    kn_tensor f8 = {KILN_DTYPE_FLOAT8E4M3FN, {1, {2}}, (uint8_t[]){0x38, 0x7f}};
    void *buf;
    size_t n;
    assert_int_equal(kn_npy_to_bytes(&f8, &buf, &n), KILN_OK);
    const char *want = "{'descr': [('float8_e4m3fn', '|u1')], 'fortran_order': False, "
                       "'shape': (2,), }";
    assert_memory_equal((char *)buf + 10, want, strlen(want));
    assert_memory_equal((char *)buf + n - 2, "\x38\x7f", 2);
    kn_free(buf);
    /* a string tensor is a block (core/strings.h): two stray bytes are none */
    kn_tensor str = {KILN_DTYPE_STRING, {1, {2}}, (uint8_t[]){0, 0}};
    assert_int_equal(kn_npy_to_bytes(&str, &buf, &n), KILN_ERR_INVALID_ARGUMENT);
}

static void test_npy_matches_numpy(void **state) {
    (void)state;
    char p[300];
    data_path(p, sizeof p, "npy_f32_2x3.npy");
    kn_tensor t;
    assert_int_equal(kn_npy_read(p, &t), KILN_OK);
    assert_int_equal(t.dtype, KILN_DTYPE_FLOAT32);
    assert_int_equal(t.shape.rank, 2);
    assert_int_equal(t.shape.d[0], 2);
    assert_int_equal(t.shape.d[1], 3);
    const float want[] = {1.5f, 2, 3, 4, 5, -6};
    assert_memory_equal(t.data, want, sizeof want);
    /* Our writer produces numpy's bytes exactly (same header text and 64-byte padding). */
    void *ours, *theirs;
    size_t n_ours, n_theirs;
    assert_int_equal(kn_npy_to_bytes(&t, &ours, &n_ours), KILN_OK);
    assert_int_equal(kn_file_read(p, &theirs, &n_theirs), KILN_OK);
    assert_int_equal(n_ours, n_theirs);
    assert_memory_equal(ours, theirs, n_ours);
    kn_free(ours);
    kn_free(theirs);
    kn_free(t.data);

    data_path(p, sizeof p, "npy_bool_4.npy");
    assert_int_equal(kn_npy_read(p, &t), KILN_OK);
    assert_int_equal(t.dtype, KILN_DTYPE_BOOL);
    assert_int_equal(t.shape.rank, 1);
    assert_int_equal(t.shape.d[0], 4);
    assert_memory_equal(t.data, ((uint8_t[]){1, 0, 0, 1}), 4);
    kn_free(t.data);

    data_path(p, sizeof p, "npy_f16_scalar.npy");
    assert_int_equal(kn_npy_read(p, &t), KILN_OK);
    assert_int_equal(t.dtype, KILN_DTYPE_FLOAT16);
    assert_int_equal(t.shape.rank, 0);
    assert_int_equal(*(uint16_t *)t.data, 0xBA00); /* -0.75 in binary16 */
    kn_free(t.data);
}

static void test_npy_refusals(void **state) {
    (void)state;
    char p[300];
    kn_tensor t;
    data_path(p, sizeof p, "npy_i64_be.npy");
    assert_int_equal(kn_npy_read(p, &t), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_last_error(), "big-endian"));
    data_path(p, sizeof p, "npy_f32_fortran.npy");
    assert_int_equal(kn_npy_read(p, &t), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_last_error(), "Fortran"));

    /* Every truncation of a valid file is refused, as is trailing garbage. */
    void *buf;
    size_t n;
    data_path(p, sizeof p, "npy_f32_2x3.npy");
    assert_int_equal(kn_file_read(p, &buf, &n), KILN_OK);
    for (size_t len = 0; len < n; len++)
        assert_int_not_equal(kn_npy_from_bytes(buf, len, &t), KILN_OK);
    unsigned char *longer = kn_malloc(n + 1);
    memcpy(longer, buf, n);
    longer[n] = 0;
    assert_int_equal(kn_npy_from_bytes(longer, n + 1, &t), KILN_ERR_IO);
    /* A shape whose byte size does not match. */
    memcpy(longer, buf, n);
    char *shape = strstr((char *)longer + 10, "(2, 3)");
    assert_non_null(shape);
    shape[1] = '9';
    assert_int_equal(kn_npy_from_bytes(longer, n, &t), KILN_ERR_IO);
    assert_non_null(strstr(kiln_last_error(), "bytes"));
    /* Random corruption of the header never crashes. */
    srand(7);
    for (int k = 0; k < 2000; k++) {
        memcpy(longer, buf, n);
        longer[rand() % 128] ^= (unsigned char)(1u << (rand() % 8));
        if (kn_npy_from_bytes(longer, n, &t) == KILN_OK)
            kn_free(t.data);
    }
    kn_free(longer);
    kn_free(buf);
    assert_int_equal(kn_npy_from_bytes("garbage!!!!!", 12, &t), KILN_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_and_map),
        cmocka_unit_test(test_atomic_write_failure_keeps_old),
        cmocka_unit_test(test_npy_roundtrip_all_dtypes),
        cmocka_unit_test(test_npy_matches_numpy),
        cmocka_unit_test(test_npy_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
