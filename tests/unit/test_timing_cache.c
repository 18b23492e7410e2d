/* The timing cache file (builder/timing_cache.h): well-formed files parse and round-trip; a
 * file that is garbage, truncated, of another version or malformed in any line parses to an
 * empty cache with the reason; loading one logs one warning naming the file, and a missing file
 * is an empty cache without a warning. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "builder/timing_cache.h"
#include "core/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool parse(kn_timing_cache *c, const char *text, char *why) {
    return kn_timing_cache_parse(c, text, strlen(text), why, 200);
}

static void parses_entries(void **state) {
    (void)state;
    kn_timing_cache c = {0};
    char why[200] = "";
    const char *text = "kiln-timing-cache 1\n"
                       "cuda conv 1|H200|float16|x 1x3x224x224\t1 6 1 4096 1 3 224 224\n"
                       "a key with spaces\t-5\n";
    assert_true(parse(&c, text, why));
    assert_int_equal(c.n, 2);
    assert_false(c.added);
    const kn_timing_entry *e = kn_timing_cache_find(&c, "cuda conv 1|H200|float16|x 1x3x224x224");
    assert_non_null(e);
    assert_int_equal(e->n, 8);
    assert_int_equal(e->v[1], 6);
    assert_int_equal(e->v[3], 4096);
    e = kn_timing_cache_find(&c, "a key with spaces");
    assert_non_null(e);
    assert_int_equal(e->n, 1);
    assert_int_equal(e->v[0], -5);
    assert_null(kn_timing_cache_find(&c, "cuda conv 1"));
    /* the header alone is an empty cache */
    assert_true(parse(&c, "kiln-timing-cache 1\n", why));
    assert_int_equal(c.n, 0);
    kn_timing_cache_clear(&c);
}

static void round_trips_sorted(void **state) {
    (void)state;
    kn_timing_cache c = {0}, d = {0};
    int64_t a[] = {3, -1, 9000000000LL}, b[] = {7};
    assert_int_equal(kn_timing_cache_add(&c, "zeta", a, 3), KILN_OK);
    assert_int_equal(kn_timing_cache_add(&c, "alpha", b, 1), KILN_OK);
    assert_int_equal(kn_timing_cache_add(&c, "zeta", b, 1), KILN_OK); /* replaces */
    assert_true(c.added);
    assert_int_equal(c.n, 2);
    char *text;
    size_t size;
    assert_int_equal(kn_timing_cache_format(&c, &text, &size), KILN_OK);
    assert_int_equal(size, strlen(text));
    assert_string_equal(text, "kiln-timing-cache 1\nalpha\t7\nzeta\t7\n");
    char why[200];
    assert_true(kn_timing_cache_parse(&d, text, size, why, sizeof why));
    assert_int_equal(d.n, 2);
    kn_free(text);
    assert_int_equal(kn_timing_cache_add(&c, "big", a, 3), KILN_OK);
    assert_int_equal(kn_timing_cache_format(&c, &text, &size), KILN_OK);
    assert_string_equal(text, "kiln-timing-cache 1\nalpha\t7\nbig\t3 -1 9000000000\nzeta\t7\n");
    kn_free(text);
    /* keys with tabs or newlines, and tactics of no or too many integers, are refused */
    int64_t many[KN_TACTIC_MAX + 1] = {0};
    assert_int_not_equal(kn_timing_cache_add(&c, "a\tb", b, 1), KILN_OK);
    assert_int_not_equal(kn_timing_cache_add(&c, "a\nb", b, 1), KILN_OK);
    assert_int_not_equal(kn_timing_cache_add(&c, "", b, 1), KILN_OK);
    assert_int_not_equal(kn_timing_cache_add(&c, "k", many, KN_TACTIC_MAX + 1), KILN_OK);
    assert_int_not_equal(kn_timing_cache_add(&c, "k", many, 0), KILN_OK);
    kn_timing_cache_clear(&c);
    kn_timing_cache_clear(&d);
}

/* Each text is refused, the cache left empty, and the reason contains what. */
static void refused(const char *text, size_t size, const char *what) {
    kn_timing_cache c = {0};
    int64_t v[] = {1};
    assert_int_equal(kn_timing_cache_add(&c, "stale", v, 1), KILN_OK);
    char why[200] = "";
    if (kn_timing_cache_parse(&c, text, size, why, sizeof why))
        fail_msg("accepted: %.*s", (int)size, text);
    assert_int_equal(c.n, 0);
    if (strstr(why, what) == NULL)
        fail_msg("reason '%s' lacks '%s'", why, what);
    kn_timing_cache_clear(&c);
}

static void refuses_malformed(void **state) {
    (void)state;
    static const char binary[] = {'\x7f', 'E', 'L', 'F', 0, 1, 2, '\n', 0};
    const struct {
        const char *text, *what;
    } cases[] = {
        {"", "not a kiln timing cache"},
        {"hello world\n", "not a kiln timing cache"},
        {"kiln-timing-cache 2\nk\t1\n", "this build reads 'kiln-timing-cache 1'"},
        {"kiln-timing-cache 1 extra\n", "format"},
        {"kiln-timing-cache 1", "format"}, /* cut inside the header */
        {"kiln-timing-cache 1\nkey\t1 2", "truncated"},
        {"kiln-timing-cache 1\nkey\t1 2\nkey2", "truncated"},
        {"kiln-timing-cache 1\nkey 1 2\n", "no key and tab"},
        {"kiln-timing-cache 1\n\t1\n", "no key and tab"},
        {"kiln-timing-cache 1\nkey\t\n", "no tactic"},
        {"kiln-timing-cache 1\nkey\t1 x\n", "not an integer"},
        {"kiln-timing-cache 1\nkey\t1  2\n", "not an integer"},
        {"kiln-timing-cache 1\nkey\t1 2 \n", "trailing space"},
        {"kiln-timing-cache 1\nkey\t99999999999999999999\n", "not an integer"},
        {"kiln-timing-cache 1\nkey\t0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n", "more than 16"},
        {"kiln-timing-cache 1\ngood\t1\n\n", "line 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        refused(cases[i].text, strlen(cases[i].text), cases[i].what);
    refused(binary, sizeof binary - 1, "not a kiln timing cache");
    /* a NUL inside a key */
    static const char nul_key[] = "kiln-timing-cache 1\nke\0y\t1\n";
    refused(nul_key, sizeof nul_key - 1, "no key and tab");
}

static char logged[4][512];
static int n_logged;

static void logger(void *user, kiln_log_level level, const char *message) {
    (void)user;
    if (level <= KILN_LOG_WARNING && n_logged < 4)
        snprintf(logged[n_logged++], sizeof logged[0], "%s", message);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void load_warns_once(void **state) {
    (void)state;
    char dir[] = "/tmp/kiln_tcache_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[300];
    snprintf(path, sizeof path, "%s/cache.txt", dir);
    kiln_set_logger(logger, NULL, KILN_LOG_INFO);
    kn_timing_cache c = {0};
    n_logged = 0;
    assert_int_equal(kn_timing_cache_load(&c, path), KILN_OK); /* missing: empty, silent */
    assert_int_equal(c.n, 0);
    assert_int_equal(n_logged, 0);
    write_file(path, "kiln-timing-cache 1\nk\t1 2\n");
    assert_int_equal(kn_timing_cache_load(&c, path), KILN_OK);
    assert_int_equal(c.n, 1);
    assert_int_equal(n_logged, 0);
    write_file(path, "kiln-timing-cache 0\ngarbage");
    assert_int_equal(kn_timing_cache_load(&c, path), KILN_OK);
    assert_int_equal(c.n, 0);
    assert_int_equal(n_logged, 1);
    assert_non_null(strstr(logged[0], path));
    assert_non_null(strstr(logged[0], "ignored"));
    assert_null(strchr(logged[0], '\n'));
    /* a directory cannot be read: a warning too, never an error */
    n_logged = 0;
    assert_int_equal(kn_timing_cache_load(&c, dir), KILN_OK);
    assert_int_equal(n_logged, 1);
    /* save writes what parses back */
    int64_t v[] = {4, 5};
    assert_int_equal(kn_timing_cache_add(&c, "saved key", v, 2), KILN_OK);
    assert_int_equal(kn_timing_cache_save(&c, path), KILN_OK);
    n_logged = 0;
    assert_int_equal(kn_timing_cache_load(&c, path), KILN_OK);
    assert_int_equal(n_logged, 0);
    assert_non_null(kn_timing_cache_find(&c, "saved key"));
    kiln_set_logger(NULL, NULL, KILN_LOG_WARNING);
    kn_timing_cache_clear(&c);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_entries),
        cmocka_unit_test(round_trips_sorted),
        cmocka_unit_test(refuses_malformed),
        cmocka_unit_test(load_warns_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
