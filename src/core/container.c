#include "core/container.h"

#include "core/alloc.h"

#include <stdint.h>
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

static void put_record(char *base, int i, const kn_tensor *item, size_t offset) {
    kn_container_record r = {.dtype = item->dtype,
                             .rank = item->shape.rank,
                             .offset = offset,
                             .nbytes = kn_tensor_nbytes(item)};
    memcpy(r.dims, item->shape.d, sizeof r.dims);
    memcpy(base + sizeof(kn_container_header) + (size_t)i * sizeof r, &r, sizeof r);
    if (r.nbytes)
        memcpy(base + offset, item->data, r.nbytes);
}

static kn_container_record get_record(const char *base, int i) {
    kn_container_record r;
    memcpy(&r, base + sizeof(kn_container_header) + (size_t)i * sizeof r, sizeof r);
    return r;
}

/* The element appended at the end of a block with room for it: only the first and last records
 * are read (elements lie in order, as every writer here lays them out), so an append costs
 * O(1); each write is checked to fall inside the block, and whatever reads the block later
 * opens it in full. */
static bool append_fits(kn_tensor *t, kn_container_header *h, const kn_tensor *item) {
    size_t bytes = kn_tensor_nbytes(t), nb = kn_tensor_nbytes(item);
    size_t start = bytes, end = records_end(0);
    if (h->count > 0) {
        kn_container_record first = get_record(t->data, 0),
                            last = get_record(t->data, h->count - 1);
        if (first.offset > bytes || last.offset > bytes || last.nbytes > bytes - last.offset)
            return false;
        start = first.offset;
        end = align_up(last.offset + last.nbytes);
    }
    size_t slot = sizeof *h + (size_t)(h->count + 1) * sizeof(kn_container_record);
    if (slot > start || end > bytes || nb > bytes - end)
        return false;
    put_record(t->data, h->count, item, end);
    return true;
}

/* A new block for c's elements and item, with room for as many elements and bytes again. */
static kiln_status append_grown(kn_tensor *t, const kn_container *c, const kn_tensor *item,
                                kn_container_header *h) {
    int cap = c->count < 4 ? 8 : 2 * c->count;
    size_t used = align_up(kn_tensor_nbytes(item));
    for (int i = 0; i < c->count; i++)
        used += align_up(c->items[i].nbytes);
    size_t first = records_end(cap), total = first + 2 * used;
    char *grown = kn_calloc(total, 1); /* unused bytes are zeros, never stale heap */
    if (grown == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory growing a sequence (%zu bytes)",
                        total);
    size_t at = first;
    for (int i = 0; i < c->count; i++) {
        kn_tensor e = kn_container_item(c, i);
        put_record(grown, i, &e, at);
        at += align_up(kn_tensor_nbytes(&e));
    }
    put_record(grown, c->count, item, at);
    kn_free(t->data);
    t->data = grown;
    t->shape = kn_container_tensor(total).shape;
    h->bytes = total;
    return KILN_OK;
}

kiln_status kn_container_append(kn_tensor *t, const kn_tensor *item, bool *done) {
    *done = false;
    kn_container_header h;
    if (t->dtype != KILN_DTYPE_CONTAINER || t->data == NULL || kn_tensor_nbytes(t) < sizeof h)
        return KILN_OK;
    memcpy(&h, t->data, sizeof h);
    size_t bytes = kn_tensor_nbytes(t);
    if (h.magic != KN_CONTAINER_MAGIC || h.kind != KN_CONTAINER_SEQUENCE || h.bytes != bytes ||
        h.count < 0 || h.count >= INT32_MAX / 4 ||
        (size_t)h.count > (bytes - sizeof h) / sizeof(kn_container_record) ||
        (h.count > 0 && item->dtype != h.elem_dtype))
        return KILN_OK; /* the ordinary insert decides */
    if (!append_fits(t, &h, item)) {
        kn_container c;
        if (kn_container_open(t, "input 'input_sequence'", &c) != KILN_OK)
            return KILN_OK;
        KN_TRY(append_grown(t, &c, item, &h));
    }
    h.count++;
    h.elem_dtype = item->dtype;
    memcpy(t->data, &h, sizeof h);
    *done = true;
    return KILN_OK;
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
