#include "core/container.h"

#include <stdio.h>
#include <string.h>

static size_t align_up(size_t n) {
    return (n + KN_CONTAINER_ALIGN - 1) / KN_CONTAINER_ALIGN * KN_CONTAINER_ALIGN;
}

static size_t records_end(int n) {
    return align_up(sizeof(kn_container_header) + (size_t)n * sizeof(kn_container_record));
}

size_t kn_container_bytes(int n, const kn_tensor *items) {
    size_t at = records_end(n);
    for (int i = 0; i < n; i++)
        at += align_up(kn_tensor_nbytes(&items[i]));
    return at;
}

void kn_container_write(void *dst, int kind, int32_t elem_dtype, int n, const kn_tensor *items) {
    char *base = dst;
    size_t total = kn_container_bytes(n, items);
    kn_container_header h = {.magic = KN_CONTAINER_MAGIC,
                             .kind = kind,
                             .elem_dtype = elem_dtype,
                             .count = n,
                             .bytes = total};
    memset(base, 0, records_end(n));
    memcpy(base, &h, sizeof h);
    size_t at = records_end(n);
    for (int i = 0; i < n; i++) {
        kn_container_record r = {.dtype = items[i].dtype, .rank = items[i].shape.rank};
        memcpy(r.dims, items[i].shape.d, sizeof r.dims);
        r.offset = at;
        r.nbytes = kn_tensor_nbytes(&items[i]);
        memcpy(base + sizeof h + (size_t)i * sizeof r, &r, sizeof r);
        if (items[i].data != NULL && r.nbytes)
            memcpy(base + at, items[i].data, r.nbytes);
        at += align_up(r.nbytes);
    }
}

kiln_status kn_container_open(const kn_tensor *t, const char *what, kn_container *out) {
    if (t->dtype != KILN_DTYPE_CONTAINER)
        return kn_error(KILN_ERR_DTYPE, "%s is a %s tensor, not a sequence or optional", what,
                        kn_dtype_name(t->dtype));
    size_t nb = kn_tensor_nbytes(t);
    kn_container_header h;
    if (t->data == NULL || nb < sizeof h)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: not a kiln sequence/optional block", what);
    memcpy(&h, t->data, sizeof h);
    if (h.magic != KN_CONTAINER_MAGIC || h.bytes != nb || h.count < 0 ||
        (h.kind != KN_CONTAINER_SEQUENCE && h.kind != KN_CONTAINER_OPTIONAL) ||
        (h.kind == KN_CONTAINER_OPTIONAL && h.count > 1) ||
        (size_t)h.count > (nb - sizeof h) / sizeof(kn_container_record))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: not a kiln sequence/optional block", what);
    *out = (kn_container){.kind = h.kind,
                          .elem_dtype = h.elem_dtype,
                          .count = h.count,
                          .items = (const kn_container_record *)((char *)t->data + sizeof h),
                          .base = t->data};
    for (int i = 0; i < h.count; i++) {
        const kn_container_record *r = &out->items[i];
        bool ok = r->rank >= 0 && r->rank <= KN_MAX_RANK && kn_dtype_size(r->dtype) != 0;
        kn_tensor e = kn_container_item(out, i);
        ok = ok && kn_shape_valid(&e.shape) && r->offset <= nb && r->nbytes <= nb - r->offset &&
             r->nbytes == kn_tensor_nbytes(&e);
        if (!ok)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s: element %d is malformed", what, i);
    }
    return KILN_OK;
}

static const char *kind_name(int32_t kind) {
    return kind == KILN_IO_SEQUENCE            ? "a sequence"
           : kind == KILN_IO_OPTIONAL          ? "an optional tensor"
           : kind == KILN_IO_OPTIONAL_SEQUENCE ? "an optional sequence"
                                               : "a sequence or optional";
}

kiln_status kn_container_check_kind(const kn_tensor *t, int32_t kind, const char *name) {
    char what[300];
    snprintf(what, sizeof what, "input '%.250s'", name);
    kn_container c;
    KN_TRY(kn_container_open(t, what, &c));
    if (kind == KILN_IO_TENSOR)
        return KILN_OK;
    bool nested = c.count == 1 && c.items[0].dtype == KILN_DTYPE_CONTAINER;
    int32_t got = c.kind == KN_CONTAINER_SEQUENCE ? KILN_IO_SEQUENCE
                  : c.count == 0                  ? -1 /* an empty optional fits either */
                  : nested                        ? KILN_IO_OPTIONAL_SEQUENCE
                                                  : KILN_IO_OPTIONAL;
    if (got == kind || (got == -1 && kind != KILN_IO_SEQUENCE))
        return KILN_OK;
    return kn_error(KILN_ERR_INVALID_ARGUMENT, "%s is %s, got %s", what, kind_name(kind),
                    got == -1 ? "an empty optional" : kind_name(got));
}

kn_tensor kn_container_item(const kn_container *c, int i) {
    const kn_container_record *r = &c->items[i];
    kn_tensor t = {.dtype = r->dtype, .shape.rank = r->rank, .data = c->base + r->offset};
    for (int d = 0; d < r->rank && d < KN_MAX_RANK; d++)
        t.shape.d[d] = r->dims[d];
    return t;
}

kn_tensor kn_container_tensor(size_t bytes) {
    return (kn_tensor){.dtype = KILN_DTYPE_CONTAINER, .shape = {.rank = 1, .d = {(int64_t)bytes}}};
}
