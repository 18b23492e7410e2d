/* String tensors. A tensor of dtype KILN_DTYPE_STRING travels through kiln as one
 * position-independent block of bytes of shape [bytes]: a header holding the tensor's own
 * (logical) shape, count + 1 offsets, then the UTF-8 characters of every element back to back.
 * Being plain bytes, a string tensor moves through the arena, Identity, If/Loop state, plan
 * constants and graph inputs and outputs unchanged; only the ops that read strings open it, and
 * they check every block they open (a caller's input may be anything). The layout is public:
 * include/kiln/kiln.h describes it for callers of the C API. */
#ifndef KN_STRINGS_H
#define KN_STRINGS_H

#include "core/status.h"
#include "core/tensor.h"

#define KN_STRINGS_MAGIC 0x54534e4bu /* "KNST" */

typedef struct kn_strings_header {
    uint32_t magic;
    int32_t rank;
    int64_t dims[KN_MAX_RANK];
    uint64_t count; /* the product of dims */
    uint64_t bytes; /* the whole block */
} kn_strings_header;
/* then uint64_t offsets[count + 1] into the characters (offsets[0] == 0, non-decreasing,
 * offsets[count] == the characters' length), then the characters (no terminators). */

/* One string: bytes p[0..n), not NUL-terminated. */
typedef struct kn_str {
    const char *p;
    size_t n;
} kn_str;

/* A parsed, validated block (a view: nothing owned). */
typedef struct kn_strings {
    kn_shape shape;
    int64_t count;
    const unsigned char *offsets; /* count + 1 little-endian uint64 (maybe unaligned) */
    const char *chars;
} kn_strings;

/* Parse t (dtype KILN_DTYPE_STRING, a block) into s; a malformed block is a one-line error
 * naming `what`. */
kiln_status kn_strings_open(const kn_tensor *t, const char *what, kn_strings *s);
kn_str kn_strings_at(const kn_strings *s, int64_t i);
bool kn_str_eq(kn_str a, kn_str b);

/* The UTF-8 code point at p[0..n) and its length in *len; -1 (length 1) for a byte that starts
 * no valid sequence. */
int32_t kn_utf8_next(const unsigned char *p, size_t n, size_t *len);
/* Writes code point v (at most 0x10ffff) as 1 to 4 bytes; returns the count. */
size_t kn_utf8_put(int32_t v, char *out);

/* numpy's fixed-width strings (.npy descr '<Uw': w UTF-32 code units per element; '|Sw': w
 * bytes), trailing NUL units dropped as numpy does. */
kiln_status kn_strings_from_fixed(const void *data, const kn_shape *shape, size_t width,
                                  bool unicode, kn_tensor *out);
/* The width the fixed form of s needs, and whether it can be unicode (every element valid
 * UTF-8); bytes otherwise. */
void kn_strings_fixed_width(const kn_strings *s, size_t *width, bool *unicode);
void kn_strings_to_fixed(const kn_strings *s, size_t width, bool unicode, void *dst);

/* Collects a string tensor's elements in order, then writes its block. */
typedef struct kn_strings_builder {
    kn_shape shape;
    int64_t count, added;
    uint64_t *offsets; /* count + 1 */
    char *chars;
    size_t len, cap;
    bool failed; /* out of memory: kn_strings_finish reports it */
} kn_strings_builder;

kiln_status kn_strings_begin(kn_strings_builder *b, const kn_shape *shape);
/* Append the next element; the bytes are copied. */
void kn_strings_add(kn_strings_builder *b, const char *p, size_t n);
/* Reserve n bytes at the end of the element being built (kn_strings_end_item ends it). */
char *kn_strings_grow(kn_strings_builder *b, size_t n);
void kn_strings_end_item(kn_strings_builder *b);
/* The block as a new tensor (its data from kn_malloc, the caller frees it); frees b. */
kiln_status kn_strings_finish(kn_strings_builder *b, kn_tensor *out);
void kn_strings_abort(kn_strings_builder *b);

/* The block of a tensor of `shape` from items[0..numel). */
kiln_status kn_strings_make(const kn_shape *shape, const kn_str *items, kn_tensor *out);
/* The dtype and shape ([bytes]) a block of `bytes` has; data NULL. */
kn_tensor kn_strings_tensor(size_t bytes);

#endif
