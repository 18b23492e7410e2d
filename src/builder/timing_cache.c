#include "builder/timing_cache.h"

#include "core/alloc.h"
#include "core/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void kn_timing_cache_clear(kn_timing_cache *c) {
    for (int i = 0; i < c->n; i++)
        kn_free(c->e[i].key);
    kn_free(c->e);
    memset(c, 0, sizeof *c);
}

static bool key_valid(const char *k, size_t len) {
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)k[i] < 0x20 || k[i] == 0x7f)
            return false;
    return true;
}

const kn_timing_entry *kn_timing_cache_find(const kn_timing_cache *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->e[i].key, key) == 0)
            return &c->e[i];
    return NULL;
}

static kiln_status add_n(kn_timing_cache *c, const char *key, size_t len, const int64_t *v, int n) {
    if (!key_valid(key, len) || n < 1 || n > KN_TACTIC_MAX)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "timing cache: bad key or tactic size %d", n);
    kn_timing_entry *e = NULL;
    for (int i = 0; i < c->n && e == NULL; i++)
        if (strlen(c->e[i].key) == len && memcmp(c->e[i].key, key, len) == 0)
            e = &c->e[i];
    if (e == NULL) {
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 16;
            kn_timing_entry *a =
                kn_realloc(c->e, (size_t)c->cap * sizeof *a, (size_t)cap * sizeof *a);
            if (a == NULL)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
            c->e = a;
            c->cap = cap;
        }
        char *k = kn_malloc(len + 1);
        if (k == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        memcpy(k, key, len);
        k[len] = '\0';
        e = &c->e[c->n++];
        memset(e, 0, sizeof *e);
        e->key = k;
    }
    e->n = n;
    memcpy(e->v, v, (size_t)n * sizeof *v);
    return KILN_OK;
}

kiln_status kn_timing_cache_add(kn_timing_cache *c, const char *key, const int64_t *v, int n) {
    KN_TRY(add_n(c, key, strlen(key), v, n));
    c->added = true;
    return KILN_OK;
}

/* One entry line (without its newline): KEY \t INT( INT)*. */
static bool parse_line(kn_timing_cache *c, const char *p, size_t len, char *why, size_t why_size,
                       int line) {
    const char *tab = memchr(p, '\t', len);
    if (tab == NULL || !key_valid(p, (size_t)(tab - p))) {
        snprintf(why, why_size, "line %d: no key and tab", line);
        return false;
    }
    int64_t v[KN_TACTIC_MAX];
    int n = 0;
    const char *q = tab + 1, *end = p + len;
    while (q < end) {
        if (n == KN_TACTIC_MAX) {
            snprintf(why, why_size, "line %d: more than %d integers", line, KN_TACTIC_MAX);
            return false;
        }
        char num[24];
        size_t k = 0;
        while (q < end && *q != ' ' && k + 1 < sizeof num)
            num[k++] = *q++;
        num[k] = '\0';
        char *stop;
        errno = 0;
        long long x = strtoll(num, &stop, 10);
        if (k == 0 || *stop != '\0' || errno != 0 || (q < end && *q != ' ')) {
            snprintf(why, why_size, "line %d: '%s' is not an integer", line, num);
            return false;
        }
        v[n++] = x;
        if (q < end && ++q == end) { /* a trailing space */
            snprintf(why, why_size, "line %d: trailing space", line);
            return false;
        }
    }
    if (n == 0) {
        snprintf(why, why_size, "line %d: no tactic", line);
        return false;
    }
    if (add_n(c, p, (size_t)(tab - p), v, n) != KILN_OK) {
        snprintf(why, why_size, "line %d: out of memory", line);
        return false;
    }
    return true;
}

bool kn_timing_cache_parse(kn_timing_cache *c, const char *text, size_t size, char *why,
                           size_t why_size) {
    kn_timing_cache_clear(c);
    size_t hl = strlen(KN_TIMING_CACHE_HEADER);
    const char *nl = memchr(text, '\n', size);
    const char *prefix = "kiln-timing-cache ";
    if (size < strlen(prefix) || memcmp(text, prefix, strlen(prefix)) != 0) {
        snprintf(why, why_size, "not a kiln timing cache");
        return false;
    }
    if (nl == NULL || (size_t)(nl - text) != hl || memcmp(text, KN_TIMING_CACHE_HEADER, hl) != 0) {
        int len = nl ? (int)(nl - text) : (int)(size < 40 ? size : 40);
        snprintf(why, why_size, "format '%.*s', this build reads '%s'", len < 40 ? len : 40, text,
                 KN_TIMING_CACHE_HEADER);
        return false;
    }
    const char *p = nl + 1, *end = text + size;
    bool ok = true;
    for (int line = 2; p < end && ok; line++) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (e == NULL) {
            snprintf(why, why_size, "line %d: truncated (no newline at the end)", line);
            ok = false;
        } else {
            ok = parse_line(c, p, (size_t)(e - p), why, why_size, line);
            p = e + 1;
        }
    }
    if (!ok)
        kn_timing_cache_clear(c);
    c->added = false;
    return ok;
}

kiln_status kn_timing_cache_load(kn_timing_cache *c, const char *path) {
    kn_timing_cache_clear(c);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT)
        return KILN_OK;
    void *data = NULL;
    size_t size = 0;
    char why[200];
    if (kn_file_read(path, &data, &size) != KILN_OK) {
        kn_log(KILN_LOG_WARNING, "timing cache %s: %s; ignored", path, kiln_last_error());
        return KILN_OK;
    }
    if (!kn_timing_cache_parse(c, data, size, why, sizeof why))
        kn_log(KILN_LOG_WARNING,
               "timing cache %s: %s; ignored (it is rewritten if layers are "
               "timed)",
               path, why);
    kn_free(data);
    return KILN_OK;
}

static int by_key(const void *a, const void *b) {
    return strcmp(((const kn_timing_entry *)a)->key, ((const kn_timing_entry *)b)->key);
}

kiln_status kn_timing_cache_format(const kn_timing_cache *c, char **text, size_t *size) {
    *text = NULL;
    *size = 0;
    kn_timing_entry *sorted = kn_malloc((size_t)(c->n ? c->n : 1) * sizeof *sorted);
    if (sorted == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (c->n > 0)
        memcpy(sorted, c->e, (size_t)c->n * sizeof *sorted);
    qsort(sorted, (size_t)c->n, sizeof *sorted, by_key);
    size_t cap = strlen(KN_TIMING_CACHE_HEADER) + 2; /* with the terminating NUL */
    for (int i = 0; i < c->n; i++)
        cap += strlen(sorted[i].key) + 1 + (size_t)sorted[i].n * 21 + 1;
    char *out = kn_malloc(cap);
    if (out == NULL) {
        kn_free(sorted);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    size_t at = (size_t)snprintf(out, cap, "%s\n", KN_TIMING_CACHE_HEADER);
    for (int i = 0; i < c->n; i++) {
        at += (size_t)snprintf(out + at, cap - at, "%s\t", sorted[i].key);
        for (int j = 0; j < sorted[i].n; j++)
            at += (size_t)snprintf(out + at, cap - at, j ? " %lld" : "%lld",
                                   (long long)sorted[i].v[j]);
        out[at++] = '\n';
    }
    out[at] = '\0';
    kn_free(sorted);
    *text = out;
    *size = at;
    return KILN_OK;
}

kiln_status kn_timing_cache_save(const kn_timing_cache *c, const char *path) {
    char *text;
    size_t size;
    KN_TRY(kn_timing_cache_format(c, &text, &size));
    kiln_status rc = kn_file_write_atomic(path, text, size);
    kn_free(text);
    if (rc != KILN_OK)
        return kn_error_prefix(rc, "writing the timing cache %s: ", path);
    return KILN_OK;
}
