/* Sequence and optional values. Both travel through kiln as one position-independent block of
 * bytes of dtype KILN_DTYPE_CONTAINER and shape [bytes]: a header, one record per element, then
 * the elements' data. Being plain bytes, a container moves through everything that moves
 * tensors (Identity, If and Loop state, the arena, plan constants, graph inputs and outputs)
 * unchanged and is freed with the buffer holding it; only the ops that look inside
 * (Sequence*, SplitToSequence, ConcatFromSequence, Optional*) parse it. */
#ifndef KN_CONTAINER_H
#define KN_CONTAINER_H

#include "core/status.h"
#include "core/tensor.h"

#define KN_CONTAINER_MAGIC 0x51534e4bu /* "KNSQ" */
#define KN_CONTAINER_SEQUENCE 0
#define KN_CONTAINER_OPTIONAL 1 /* zero elements (empty) or one */
#define KN_CONTAINER_ALIGN 64   /* every element's data starts at a multiple of this */

typedef struct kn_container_header {
    uint32_t magic;
    int32_t kind;       /* KN_CONTAINER_SEQUENCE or KN_CONTAINER_OPTIONAL */
    int32_t elem_dtype; /* every element's dtype (a container's own for nested ones); 0 unknown */
    int32_t count;
    uint64_t bytes; /* the whole block */
} kn_container_header;

typedef struct kn_container_record {
    int32_t dtype;
    int32_t rank;
    int64_t dims[KN_MAX_RANK];
    uint64_t offset; /* from the block's start */
    uint64_t nbytes;
} kn_container_record;

/* A parsed, validated container (a view: nothing owned). */
typedef struct kn_container {
    int kind;
    int32_t elem_dtype;
    int count;
    const kn_container_record *items;
    char *base;
} kn_container;

/* Bytes of a container holding items[0..n) (their dtypes and shapes; data not read). */
size_t kn_container_bytes(int n, const kn_tensor *items);
/* Write a container into dst (kn_container_bytes(n, items) bytes), copying each item's data
 * where it is not NULL (the rest is left for the caller to fill through kn_container_item). */
void kn_container_write(void *dst, int kind, int32_t elem_dtype, int n, const kn_tensor *items);
/* Append item to the sequence *t (its data kn_malloc'd and owned by the caller) as
 * SequenceInsert without a position does: in place when the block has room for one more record
 * and the item's bytes, else into a new block (the old one freed) with room for about as many
 * elements and bytes again, so n appends copy O(n) bytes. Such a block holds unused bytes,
 * which the format allows (records point at their data). *done is false, and nothing changed,
 * where the ordinary insert must decide (the item's dtype is not the sequence's). */
kiln_status kn_container_append(kn_tensor *t, const kn_tensor *item, bool *done);
/* Parse t as a container; a malformed block (user input) is a one-line error naming `what`. */
kiln_status kn_container_open(const kn_tensor *t, const char *what, kn_container *out);
/* Parse t as the value of graph input `name`, which the model declares as holding `kind` (a
 * kiln_io_kind; KILN_IO_TENSOR: undeclared, any container): a sequence where an optional is
 * declared, or the other way round, is a one-line error. */
kiln_status kn_container_check_kind(const kn_tensor *t, int32_t kind, const char *name);
/* Element i as a tensor whose data points into the block. */
kn_tensor kn_container_item(const kn_container *c, int i);
/* The tensor a container of n bytes has (dtype, shape [n], no data). */
kn_tensor kn_container_tensor(size_t bytes);

#endif
