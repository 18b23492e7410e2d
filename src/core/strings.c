#include "core/strings.h"

#include "core/alloc.h"

#include <string.h>

static uint64_t offset_at(const unsigned char *offsets, int64_t i) {
    uint64_t v;
    memcpy(&v, offsets + (size_t)i * sizeof v, sizeof v);
    return v;
}

kiln_status kn_strings_open(const kn_tensor *t, const char *what, kn_strings *s) {
    if (t->dtype != KILN_DTYPE_STRING)
        return kn_error(KILN_ERR_DTYPE, "%s is %s, not string", what, kn_dtype_name(t->dtype));
    size_t nb = kn_tensor_nbytes(t);
    kn_strings_header h;
    if (t->data == NULL || t->shape.rank != 1 || nb < sizeof h)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: not a kiln string block", what);
    memcpy(&h, t->data, sizeof h);
    if (h.magic != KN_STRINGS_MAGIC || h.bytes != nb || h.rank < 0 || h.rank > KN_MAX_RANK)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: not a kiln string block", what);
    memset(&s->shape, 0, sizeof s->shape);
    s->shape.rank = h.rank;
    for (int d = 0; d < h.rank; d++)
        s->shape.d[d] = h.dims[d];
    if (!kn_shape_valid(&s->shape) || (uint64_t)kn_shape_numel(&s->shape) != h.count)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: the string block's shape and element count disagree", what);
    size_t room = nb - sizeof h;
    if (h.count >= room / sizeof(uint64_t))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: the string block is too short for its %llu offsets", what,
                        (unsigned long long)h.count + 1);
    s->count = (int64_t)h.count;
    s->offsets = (const unsigned char *)t->data + sizeof h;
    s->chars = (const char *)s->offsets + (size_t)(h.count + 1) * sizeof(uint64_t);
    size_t chars = room - (size_t)(h.count + 1) * sizeof(uint64_t);
    uint64_t prev = 0;
    for (int64_t i = 0; i <= s->count; i++) {
        uint64_t o = offset_at(s->offsets, i);
        if (o < prev || o > chars || (i == 0 && o != 0) || (i == s->count && o != chars))
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: string offset %lld is out of order",
                            what, (long long)i);
        prev = o;
    }
    return KILN_OK;
}

kn_str kn_strings_at(const kn_strings *s, int64_t i) {
    uint64_t a = offset_at(s->offsets, i), b = offset_at(s->offsets, i + 1);
    return (kn_str){s->chars + a, (size_t)(b - a)};
}

bool kn_str_eq(kn_str a, kn_str b) {
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

kiln_status kn_strings_begin(kn_strings_builder *b, const kn_shape *shape) {
    memset(b, 0, sizeof *b);
    b->shape = *shape;
    b->count = kn_shape_numel(shape);
    b->offsets = kn_calloc((size_t)b->count + 1, sizeof *b->offsets);
    if (b->offsets == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %lld strings",
                        (long long)b->count);
    return KILN_OK;
}

char *kn_strings_grow(kn_strings_builder *b, size_t n) {
    if (b->failed || b->added >= b->count)
        return b->failed = true, NULL;
    if (b->chars == NULL || b->len + n > b->cap) { /* a buffer even for empty strings */
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->len + n)
            cap *= 2;
        char *p = kn_realloc(b->chars, b->cap, cap);
        if (p == NULL)
            return b->failed = true, NULL;
        b->chars = p;
        b->cap = cap;
    }
    b->len += n;
    return b->chars + b->len - n;
}

void kn_strings_end_item(kn_strings_builder *b) {
    if (b->failed || b->added >= b->count) {
        b->failed = true;
        return;
    }
    b->offsets[++b->added] = b->len;
}

void kn_strings_add(kn_strings_builder *b, const char *p, size_t n) {
    char *dst = kn_strings_grow(b, n);
    if (dst != NULL && n)
        memcpy(dst, p, n);
    kn_strings_end_item(b);
}

void kn_strings_abort(kn_strings_builder *b) {
    kn_free(b->offsets);
    kn_free(b->chars);
    memset(b, 0, sizeof *b);
}

kiln_status kn_strings_finish(kn_strings_builder *b, kn_tensor *out) {
    if (b->failed || b->added != b->count) {
        bool oom = b->failed && b->added < b->count;
        kn_strings_abort(b);
        return oom ? kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory building strings")
                   : kn_error(KILN_ERR_INTERNAL, "a string tensor got the wrong element count");
    }
    size_t offs = ((size_t)b->count + 1) * sizeof(uint64_t);
    size_t total = sizeof(kn_strings_header) + offs + b->len;
    char *data = kn_malloc(total);
    if (data == NULL) {
        kn_strings_abort(b);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for a %zu-byte string tensor",
                        total);
    }
    kn_strings_header h = {.magic = KN_STRINGS_MAGIC,
                           .rank = b->shape.rank,
                           .count = (uint64_t)b->count,
                           .bytes = total};
    for (int d = 0; d < b->shape.rank; d++)
        h.dims[d] = b->shape.d[d];
    memcpy(data, &h, sizeof h);
    memcpy(data + sizeof h, b->offsets, offs);
    if (b->len)
        memcpy(data + sizeof h + offs, b->chars, b->len);
    kn_strings_abort(b);
    *out = kn_strings_tensor(total);
    out->data = data;
    return KILN_OK;
}

kiln_status kn_strings_make(const kn_shape *shape, const kn_str *items, kn_tensor *out) {
    kn_strings_builder b;
    KN_TRY(kn_strings_begin(&b, shape));
    for (int64_t i = 0; i < b.count; i++)
        kn_strings_add(&b, items[i].p, items[i].n);
    return kn_strings_finish(&b, out);
}

kn_tensor kn_strings_tensor(size_t bytes) {
    return (kn_tensor){.dtype = KILN_DTYPE_STRING, .shape = {.rank = 1, .d = {(int64_t)bytes}}};
}

int32_t kn_utf8_next(const unsigned char *p, size_t n, size_t *len) {
    *len = 1;
    if (p[0] < 0x80)
        return p[0];
    int k = p[0] >= 0xf0 && p[0] < 0xf5   ? 4
            : p[0] >= 0xe0 && p[0] < 0xf0 ? 3
            : p[0] >= 0xc2 && p[0] < 0xe0 ? 2
                                          : 0;
    if (k == 0 || n < (size_t)k)
        return -1;
    int32_t v = p[0] & (0x7f >> k);
    for (int i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return -1;
        v = v << 6 | (p[i] & 0x3f);
    }
    static const int32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[k] || v > 0x10ffff || (v >= 0xd800 && v < 0xe000))
        return -1;
    *len = (size_t)k;
    return v;
}

size_t kn_utf8_put(int32_t v, char *out) {
    if (v < 0x80) {
        out[0] = (char)v;
        return 1;
    }
    if (v < 0x800) {
        out[0] = (char)(0xc0 | v >> 6);
        out[1] = (char)(0x80 | (v & 0x3f));
        return 2;
    }
    if (v < 0x10000) {
        out[0] = (char)(0xe0 | v >> 12);
        out[1] = (char)(0x80 | (v >> 6 & 0x3f));
        out[2] = (char)(0x80 | (v & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | v >> 18);
    out[1] = (char)(0x80 | (v >> 12 & 0x3f));
    out[2] = (char)(0x80 | (v >> 6 & 0x3f));
    out[3] = (char)(0x80 | (v & 0x3f));
    return 4;
}

kiln_status kn_strings_from_fixed(const void *data, const kn_shape *shape, size_t width,
                                  bool unicode, kn_tensor *out) {
    kn_strings_builder b;
    KN_TRY(kn_strings_begin(&b, shape));
    const unsigned char *p = data;
    size_t unit = unicode ? 4 : 1;
    for (int64_t i = 0; i < b.count; i++, p += width * unit) {
        size_t n = width;
        while (n > 0 && memcmp(p + (n - 1) * unit, "\0\0\0\0", unit) == 0)
            n--;
        if (!unicode) {
            kn_strings_add(&b, (const char *)p, n);
            continue;
        }
        char *dst = kn_strings_grow(&b, n * 4);
        size_t at = 0;
        for (size_t k = 0; dst != NULL && k < n; k++) {
            uint32_t v = (uint32_t)p[4 * k] | (uint32_t)p[4 * k + 1] << 8 |
                         (uint32_t)p[4 * k + 2] << 16 | (uint32_t)p[4 * k + 3] << 24;
            if (v > 0x10ffff || (v >= 0xd800 && v < 0xe000)) {
                kn_strings_abort(&b);
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                ".npy: element %lld holds 0x%x, which is not a Unicode code point",
                                (long long)i, (unsigned)v);
            }
            at += kn_utf8_put((int32_t)v, dst + at);
        }
        if (dst != NULL)
            b.len -= n * 4 - at;
        kn_strings_end_item(&b);
    }
    return kn_strings_finish(&b, out);
}

void kn_strings_fixed_width(const kn_strings *s, size_t *width, bool *unicode) {
    size_t w = 1;
    *unicode = true;
    for (int64_t i = 0; i < s->count; i++) {
        kn_str e = kn_strings_at(s, i);
        size_t units = 0;
        for (size_t k = 0, len; k < e.n; k += len, units++)
            if (kn_utf8_next((const unsigned char *)e.p + k, e.n - k, &len) < 0)
                *unicode = false;
        w = units > w ? units : w;
    }
    if (!*unicode) /* bytes: the widest element's byte count */
        for (int64_t i = 0; i < s->count; i++)
            w = kn_strings_at(s, i).n > w ? kn_strings_at(s, i).n : w;
    *width = w;
}

void kn_strings_to_fixed(const kn_strings *s, size_t width, bool unicode, void *dst) {
    unsigned char *p = dst;
    size_t unit = unicode ? 4 : 1;
    memset(p, 0, (size_t)s->count * width * unit);
    for (int64_t i = 0; i < s->count; i++, p += width * unit) {
        kn_str e = kn_strings_at(s, i);
        if (!unicode) {
            if (e.n)
                memcpy(p, e.p, e.n);
            continue;
        }
        size_t k = 0, at = 0, len;
        for (; k < e.n && at < width; k += len, at++) {
            uint32_t v = (uint32_t)kn_utf8_next((const unsigned char *)e.p + k, e.n - k, &len);
            for (int j = 0; j < 4; j++)
                p[4 * at + (size_t)j] = (unsigned char)(v >> (8 * j));
        }
    }
}
