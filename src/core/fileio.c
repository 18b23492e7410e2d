#include "core/fileio.h"

#include "core/narrow_dtype.h"

#include "core/alloc.h"
#include "core/strings.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens path read-only and checks it is a regular file; returns its size. */
static kiln_status open_regular(const char *path, int *fd_out, size_t *size) {
    if (path == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "file path is NULL");
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return kn_error(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kn_error(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kn_error(KILN_ERR_IO, "'%s' is not a regular file", path);
    }
    if ((uintmax_t)st.st_size > (uintmax_t)SIZE_MAX) {
        close(fd);
        return kn_error(KILN_ERR_IO, "'%s' is too large to load", path);
    }
    *fd_out = fd;
    *size = (size_t)st.st_size;
    return KILN_OK;
}

kiln_status kn_file_map(const char *path, const void **data, size_t *size) {
    int fd = -1;
    size_t n = 0;
    KN_TRY(open_regular(path, &fd, &n));
    if (n == 0) {
        close(fd);
        return kn_error(KILN_ERR_IO, "'%s' is empty", path);
    }
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return kn_error(KILN_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    *data = p;
    *size = n;
    return KILN_OK;
}

void kn_file_unmap(const void *data, size_t size) {
    if (data != NULL && size > 0)
        munmap((void *)data, size);
}

kiln_status kn_file_read(const char *path, void **data, size_t *size) {
    int fd = -1;
    size_t n = 0;
    KN_TRY(open_regular(path, &fd, &n));
    char *buf = kn_malloc(n > 0 ? n : 1);
    if (buf == NULL) {
        close(fd);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to read '%s'", n, path);
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = read(fd, buf + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            close(fd);
            kn_free(buf);
            if (r == 0)
                return kn_error(KILN_ERR_IO, "'%s' shrank while being read", path);
            return kn_error(KILN_ERR_IO, "cannot read '%s': %s", path, strerror(e));
        }
        done += (size_t)r;
    }
    close(fd);
    *data = buf;
    *size = n;
    return KILN_OK;
}

static bool write_all(int fd, const void *data, size_t size) {
    const char *p = data;
    while (size > 0) {
        ssize_t w = write(fd, p, size);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return false;
        }
        p += w;
        size -= (size_t)w;
    }
    return true;
}

/* Makes the rename itself durable; failure here is not worth failing the write for. */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash == NULL ? kn_strdup(".") : kn_strndup(path, (size_t)(slash - path + 1));
    if (dir == NULL)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    kn_free(dir);
}

kiln_status kn_file_write_atomic(const char *path, const void *data, size_t size) {
    if (path == NULL || (data == NULL && size > 0))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "file path or data is NULL");
    size_t len = strlen(path);
    char *tmp = kn_malloc(len + sizeof ".tmp.XXXXXX");
    if (tmp == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing '%s'", path);
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    kiln_status rc = KILN_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = kn_error(KILN_ERR_IO, "cannot create a temporary file beside '%s': %s", path,
                      strerror(errno));
        goto out_free;
    }
    /* mkstemp creates 0600; outputs are meant to be shared like any other file. */
    fchmod(fd, 0644);
    if (!write_all(fd, data, size)) {
        rc = kn_error(KILN_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
        goto fail_close;
    }
    if (fsync(fd) != 0) {
        rc = kn_error(KILN_ERR_IO, "cannot sync '%s': %s", tmp, strerror(errno));
        goto fail_close;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = kn_error(KILN_ERR_IO, "cannot close '%s': %s", tmp, strerror(errno));
        goto fail_unlink;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        rc = kn_error(KILN_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        goto fail_unlink;
    }
    sync_parent_dir(path);
    goto out_free;

fail_close:
    close(fd);
fail_unlink:
    unlink(tmp);
out_free:
    kn_free(tmp);
    return rc;
}

/* ---- .npy ---------------------------------------------------------------------------- */

static const char npy_magic[6] = {(char)0x93, 'N', 'U', 'M', 'P', 'Y'};

typedef struct npy_dtype {
    int32_t dtype;
    const char *descr; /* as written; readers also accept '=' and '<' for one-byte types */
} npy_dtype;

/* numpy has no bfloat16, float8 or 4-bit dtypes of its own and saves ml_dtypes' ones as raw
 * bytes ('|V1', '|V2'), losing the type. kiln writes them as a one-field record of unsigned
 * integers named after the ml_dtypes type ([('float8_e4m3fn', '|u1')]): a plain numpy load keeps
 * the name, and arr[name].view(ml_dtypes.<name>) gives the typed array. The 4- and 2-bit codes
 * sit in the low bits of each byte, as in ml_dtypes. */
static const npy_dtype npy_records[] = {
    {KILN_DTYPE_FLOAT8E4M3FN, "float8_e4m3fn"},
    {KILN_DTYPE_FLOAT8E4M3FNUZ, "float8_e4m3fnuz"},
    {KILN_DTYPE_FLOAT8E5M2, "float8_e5m2"},
    {KILN_DTYPE_FLOAT8E5M2FNUZ, "float8_e5m2fnuz"},
    {KILN_DTYPE_UINT4, "uint4"},
    {KILN_DTYPE_INT4, "int4"},
    {KILN_DTYPE_UINT2, "uint2"},
    {KILN_DTYPE_INT2, "int2"},
    {KILN_DTYPE_FLOAT4E2M1, "float4_e2m1fn"},
    {KILN_DTYPE_FLOAT8E8M0, "float8_e8m0fnu"},
    {KILN_DTYPE_BFLOAT16, "bfloat16"},
};
#define N_NPY_RECORDS (sizeof npy_records / sizeof npy_records[0])

static const npy_dtype npy_dtypes[] = {
    {KILN_DTYPE_FLOAT32, "<f4"}, {KILN_DTYPE_FLOAT64, "<f8"}, {KILN_DTYPE_FLOAT16, "<f2"},
    {KILN_DTYPE_INT64, "<i8"},   {KILN_DTYPE_INT32, "<i4"},   {KILN_DTYPE_INT16, "<i2"},
    {KILN_DTYPE_INT8, "|i1"},    {KILN_DTYPE_UINT8, "|u1"},   {KILN_DTYPE_UINT16, "<u2"},
    {KILN_DTYPE_UINT32, "<u4"},  {KILN_DTYPE_UINT64, "<u8"},  {KILN_DTYPE_BOOL, "|b1"},
};
#define N_NPY_DTYPES (sizeof npy_dtypes / sizeof npy_dtypes[0])

static const char *npy_descr_of(int32_t dtype) {
    for (size_t i = 0; i < N_NPY_DTYPES; i++)
        if (npy_dtypes[i].dtype == dtype)
            return npy_dtypes[i].descr;
    return NULL;
}

/* A cursor over the header's Python dict literal. */
typedef struct npy_cursor {
    const char *p, *end;
} npy_cursor;

static void skip_space(npy_cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(npy_cursor *c, char ch) {
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string ('...' or "..."), without escapes (npy headers never need them). */
static bool parse_str(npy_cursor *c, const char **s, size_t *n) {
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    char q = *c->p++;
    const char *start = c->p;
    while (c->p < c->end && *c->p != q)
        c->p++;
    if (c->p >= c->end)
        return false;
    *s = start;
    *n = (size_t)(c->p - start);
    c->p++;
    return true;
}

static bool parse_word(npy_cursor *c, const char *w) {
    skip_space(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* Element count with overflow checks: false past KN_MAX_ELEMENTS. */
static bool numel_checked(const kn_shape *s, int64_t *out) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->d[i] < 0 || (s->d[i] > 0 && n > KN_MAX_ELEMENTS / s->d[i]))
            return false;
        n *= s->d[i];
    }
    *out = n;
    return true;
}

static bool parse_shape(npy_cursor *c, kn_shape *shape) {
    if (!eat(c, '('))
        return false;
    shape->rank = 0;
    for (;;) {
        if (eat(c, ')'))
            return true;
        skip_space(c);
        int64_t v = 0;
        const char *start = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (KN_MAX_ELEMENTS - 9) / 10)
                return false;
            v = v * 10 + (*c->p - '0');
            c->p++;
        }
        if (c->p == start || shape->rank >= KN_MAX_RANK)
            return false;
        if (c->p < c->end && *c->p == 'L') /* Python 2 long suffix */
            c->p++;
        shape->d[shape->rank++] = v;
        if (!eat(c, ',')) {
            if (!eat(c, ')'))
                return false;
            return true;
        }
    }
}

static kiln_status npy_dtype_from_descr(const char *s, size_t n, int32_t *dtype) {
    if (n == 3 && s[0] == '>' && !(s[2] == '1'))
        return kn_error(KILN_ERR_UNSUPPORTED, ".npy: big-endian data ('%.*s') is not supported",
                        (int)n, s);
    if (n == 3 && (s[0] == '<' || s[0] == '|' || s[0] == '=' || s[0] == '>')) {
        for (size_t i = 0; i < N_NPY_DTYPES; i++) {
            const char *d = npy_dtypes[i].descr;
            if (d[1] == s[1] && d[2] == s[2] && (d[0] == s[0] || s[0] == '=' || d[0] == '|')) {
                *dtype = npy_dtypes[i].dtype;
                return KILN_OK;
            }
        }
    }
    return kn_error(KILN_ERR_UNSUPPORTED, ".npy: dtype '%.*s' is not supported", (int)n, s);
}

static int32_t record_dtype(const char *record) {
    for (size_t i = 0; i < N_NPY_RECORDS; i++)
        if (strcmp(npy_records[i].descr, record) == 0)
            return npy_records[i].dtype;
    return 0;
}

static const char *npy_record_field(int32_t dtype) {
    return dtype == KILN_DTYPE_BFLOAT16 ? "<u2" : "|u1";
}

/* After '[': the one-field record kiln writes for a bfloat16, float8 or 4-bit type (see
 * npy_records). */
static kiln_status npy_record_descr(npy_cursor *c, int32_t *dtype) {
    const char *name, *type;
    size_t nl, tl;
    if (!eat(c, '(') || !parse_str(c, &name, &nl) || !eat(c, ',') || !parse_str(c, &type, &tl) ||
        !eat(c, ')') || !eat(c, ']') || tl != 3)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        ".npy: structured dtypes are not supported (only kiln's one-field records "
                        "of float8 and 4-bit types)");
    for (size_t i = 0; i < N_NPY_RECORDS; i++)
        if (strlen(npy_records[i].descr) == nl && memcmp(npy_records[i].descr, name, nl) == 0) {
            const char *want = npy_record_field(npy_records[i].dtype);
            if (memcmp(type, want, 3) != 0 &&
                !(want[0] == '|' && memcmp(type + 1, want + 1, 2) == 0))
                return kn_error(KILN_ERR_UNSUPPORTED, ".npy: record field '%.*s' must be '%s'",
                                (int)nl, name, want);
            *dtype = npy_records[i].dtype;
            return KILN_OK;
        }
    return kn_error(KILN_ERR_UNSUPPORTED, ".npy: record field '%.*s' names no dtype kiln has",
                    (int)nl, name);
}

/* numpy's fixed-width strings: '<Uw' / '=Uw' / '|Uw' (UTF-32) and '|Sw' (bytes); w > 0. */
static bool npy_string_descr(const char *s, size_t n, size_t *width, bool *unicode) {
    if (n < 3 || (s[0] != '<' && s[0] != '|' && s[0] != '=') || (s[1] != 'U' && s[1] != 'S'))
        return false;
    size_t w = 0;
    for (size_t i = 2; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || w > 100000000)
            return false;
        w = w * 10 + (size_t)(s[i] - '0');
    }
    *width = w;
    *unicode = s[1] == 'U';
    return w > 0;
}

static kiln_status npy_parse_header(const char *h, size_t n, kn_tensor *t, size_t *str_width,
                                    bool *unicode) {
    npy_cursor c = {h, h + n};
    bool have_descr = false, have_order = false, have_shape = false;
    if (!eat(&c, '{'))
        return kn_error(KILN_ERR_IO, ".npy: header is not a dict");
    while (!eat(&c, '}')) {
        const char *key;
        size_t klen;
        if (!parse_str(&c, &key, &klen) || !eat(&c, ':'))
            return kn_error(KILN_ERR_IO, ".npy: malformed header");
        if (klen == 5 && memcmp(key, "descr", 5) == 0) {
            const char *s;
            size_t sl;
            if (eat(&c, '['))
                KN_TRY(npy_record_descr(&c, &t->dtype));
            else if (!parse_str(&c, &s, &sl))
                return kn_error(KILN_ERR_IO, ".npy: malformed descr");
            else if (npy_string_descr(s, sl, str_width, unicode))
                t->dtype = KILN_DTYPE_STRING;
            else
                KN_TRY(npy_dtype_from_descr(s, sl, &t->dtype));
            have_descr = true;
        } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0) {
            if (parse_word(&c, "True"))
                return kn_error(KILN_ERR_UNSUPPORTED,
                                ".npy: Fortran-order arrays are not supported (save in C order)");
            if (!parse_word(&c, "False"))
                return kn_error(KILN_ERR_IO, ".npy: malformed fortran_order");
            have_order = true;
        } else if (klen == 5 && memcmp(key, "shape", 5) == 0) {
            if (!parse_shape(&c, &t->shape))
                return kn_error(KILN_ERR_IO, ".npy: malformed or unsupported shape (rank <= %d)",
                                KN_MAX_RANK);
            have_shape = true;
        } else {
            return kn_error(KILN_ERR_IO, ".npy: unknown header key '%.*s'", (int)klen, key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}'))
                return kn_error(KILN_ERR_IO, ".npy: malformed header");
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return kn_error(KILN_ERR_IO, ".npy: header lacks descr, fortran_order or shape");
    if (!kn_shape_valid(&t->shape)) /* also bounds the dims beside a zero */
        return kn_error(KILN_ERR_IO, ".npy: shape has more than %lld elements",
                        (long long)KN_MAX_ELEMENTS);
    return KILN_OK;
}

kiln_status kn_npy_from_bytes(const void *data, size_t size, kn_tensor *t) {
    const unsigned char *b = data;
    if (data == NULL || t == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, ".npy: NULL argument");
    if (size < 10 || memcmp(b, npy_magic, 6) != 0)
        return kn_error(KILN_ERR_IO, ".npy: not an npy file (bad magic or truncated)");
    unsigned major = b[6];
    size_t hlen, start;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        start = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            return kn_error(KILN_ERR_IO, ".npy: truncated header");
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        start = 12;
    } else {
        return kn_error(KILN_ERR_UNSUPPORTED, ".npy: format version %u is not supported", major);
    }
    if (hlen > size - start)
        return kn_error(KILN_ERR_IO, ".npy: truncated header (%zu bytes declared, %zu present)",
                        hlen, size - start);
    kn_tensor tmp = {0};
    size_t width = 0;
    bool unicode = false;
    KN_TRY(npy_parse_header((const char *)b + start, hlen, &tmp, &width, &unicode));
    if (tmp.dtype == KILN_DTYPE_STRING) { /* into kiln's string block (core/strings.h) */
        size_t avail = size - start - hlen, numel = (size_t)kn_shape_numel(&tmp.shape);
        if (numel > 0 && (avail / numel / (unicode ? 4 : 1) != width ||
                          avail != numel * width * (unicode ? 4 : 1)))
            return kn_error(KILN_ERR_IO,
                            ".npy: data is %zu bytes but %s%zu and the shape need "
                            "more or fewer",
                            avail, unicode ? "U" : "S", width);
        return kn_strings_from_fixed(b + start + hlen, &tmp.shape, width, unicode, t);
    }
    size_t es = kn_dtype_size(tmp.dtype);
    size_t nbytes = (size_t)kn_shape_numel(&tmp.shape) * es; /* bounded by the header check */
    size_t avail = size - start - hlen;
    if (avail != nbytes)
        return kn_error(KILN_ERR_IO, ".npy: data is %zu bytes but dtype %s and shape need %zu",
                        avail, kn_dtype_name(tmp.dtype), nbytes);
    tmp.data = kn_malloc(nbytes > 0 ? nbytes : 1);
    if (tmp.data == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, ".npy: cannot allocate %zu bytes", nbytes);
    memcpy(tmp.data, b + start + hlen, nbytes);
    if (tmp.dtype == KILN_DTYPE_BOOL) {
        unsigned char *p = tmp.data;
        for (size_t i = 0; i < nbytes; i++)
            p[i] = p[i] != 0;
    } else if (kn_dtype_packed_bits(tmp.dtype) != 0) { /* only the low bits carry the value */
        unsigned char *p = tmp.data;
        unsigned char mask = (unsigned char)((1u << kn_dtype_packed_bits(tmp.dtype)) - 1);
        for (size_t i = 0; i < nbytes; i++)
            p[i] &= mask;
    }
    *t = tmp;
    return KILN_OK;
}

kiln_status kn_npy_read(const char *path, kn_tensor *t) {
    void *buf;
    size_t n = 0;
    KN_TRY(kn_file_read(path, &buf, &n));
    kiln_status rc = kn_npy_from_bytes(buf, n, t);
    kn_free(buf);
    if (rc != KILN_OK)
        kn_error_prefix(rc, "'%s': ", path);
    return rc;
}

static kiln_status npy_bytes(const char *descr, const char *record, const kn_shape *shape,
                             const void *payload, size_t nbytes, void **data, size_t *size);

/* A string block as numpy's fixed-width unicode ('<Uw'), or bytes ('|Sw') when an element is
 * not valid UTF-8. */
static kiln_status npy_strings_to_bytes(const kn_tensor *t, void **data, size_t *size) {
    kn_strings s;
    KN_TRY(kn_strings_open(t, ".npy: the tensor", &s));
    size_t width;
    bool unicode;
    kn_strings_fixed_width(&s, &width, &unicode);
    size_t unit = unicode ? 4 : 1;
    if (width > SIZE_MAX / unit / ((size_t)s.count + 1))
        return kn_error(KILN_ERR_OUT_OF_MEMORY, ".npy: strings too wide");
    size_t nbytes = (size_t)s.count * width * unit;
    void *fixed = kn_malloc(nbytes + 1);
    if (fixed == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, ".npy: cannot allocate %zu bytes", nbytes);
    kn_strings_to_fixed(&s, width, unicode, fixed);
    char descr[32];
    snprintf(descr, sizeof descr, "%s%zu", unicode ? "<U" : "|S", width);
    kiln_status rc = npy_bytes(descr, NULL, &s.shape, fixed, nbytes, data, size);
    kn_free(fixed);
    return rc;
}

kiln_status kn_npy_to_bytes(const kn_tensor *t, void **data, size_t *size) {
    if (t == NULL || data == NULL || size == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, ".npy: NULL argument");
    if (t->dtype == KILN_DTYPE_STRING)
        return npy_strings_to_bytes(t, data, size);
    const char *descr = npy_descr_of(t->dtype), *record = NULL;
    for (size_t i = 0; i < N_NPY_RECORDS; i++)
        if (npy_records[i].dtype == t->dtype)
            record = npy_records[i].descr;
    if (descr == NULL && record == NULL)
        return kn_error(KILN_ERR_UNSUPPORTED, ".npy: dtype %s has no .npy equivalent",
                        kn_dtype_name(t->dtype));
    int64_t numel = 0;
    if (t->shape.rank < 0 || t->shape.rank > KN_MAX_RANK || !numel_checked(&t->shape, &numel))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, ".npy: invalid shape");
    size_t nbytes = (size_t)numel * kn_dtype_size(t->dtype);
    if (t->data == NULL && nbytes > 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, ".npy: tensor has no data");
    return npy_bytes(descr, record, &t->shape, t->data, nbytes, data, size);
}

static kiln_status npy_bytes(const char *descr, const char *record, const kn_shape *shape,
                             const void *payload, size_t nbytes, void **data, size_t *size) {
    char dict[256];
    int len = record != NULL
                  ? snprintf(dict, sizeof dict,
                             "{'descr': [('%s', '%s')], 'fortran_order': False, "
                             "'shape': (",
                             record, npy_record_field(record_dtype(record)))
                  : snprintf(dict, sizeof dict,
                             "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < shape->rank; i++)
        len += snprintf(dict + len, sizeof dict - (size_t)len, "%lld,%s", (long long)shape->d[i],
                        i + 1 < shape->rank ? " " : "");
    if (shape->rank > 1) /* numpy writes "(3,)" for rank 1 but "(2, 3)" otherwise */
        len--;
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
    /* Pad with spaces and a final newline so the data starts on a 64-byte boundary. */
    size_t total_hdr = 10 + (size_t)len + 1;
    size_t padded = (total_hdr + 63) / 64 * 64;
    size_t hlen = padded - 10;
    size_t n = padded + nbytes;
    unsigned char *buf = kn_malloc(n);
    if (buf == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, ".npy: cannot allocate %zu bytes", n);
    memcpy(buf, npy_magic, 6);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)len);
    memset(buf + 10 + len, ' ', hlen - (size_t)len - 1);
    buf[padded - 1] = '\n';
    if (nbytes > 0)
        memcpy(buf + padded, payload, nbytes);
    *data = buf;
    *size = n;
    return KILN_OK;
}

kiln_status kn_npy_write(const char *path, const kn_tensor *t) {
    void *buf;
    size_t n = 0;
    KN_TRY(kn_npy_to_bytes(t, &buf, &n));
    kiln_status rc = kn_file_write_atomic(path, buf, n);
    kn_free(buf);
    return rc;
}
