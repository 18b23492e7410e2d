/* The on-disk layout of a plan, shared by the writer and the reader (and tests that build
 * hand-made plans). docs/plan-format.md describes every field; change both together. All
 * integers are little-endian; records are packed and read field by field, never cast. */
#ifndef KN_PLAN_FORMAT_H
#define KN_PLAN_FORMAT_H

#include <stdint.h>

#define KN_PLAN_MAGIC "KILNPLAN"
#define KN_PLAN_MAGIC_SIZE 8
/* Bumped on any change a reader of the previous version would misread. Adding a section
 * does not need a bump: readers skip section ids they do not know. Version 2: fused products
 * are the explicit ops kiln.FusedConv/FusedGemm/FusedMatMul (version 1 kept ONNX's op types
 * with kiln_* attributes, which ONNX ops no longer read). */
#define KN_PLAN_FORMAT_VERSION 2u
#define KN_PLAN_ENDIAN_MARK 0x01020304u
#define KN_PLAN_VERSION_SIZE 16 /* kiln version text, NUL-padded */

/* Sections and the weights inside WEIGHTS start at multiples of this from the buffer start. */
#define KN_PLAN_ALIGN 64u

/* Header: fixed 64 bytes at offset 0. */
#define KN_PLAN_HEADER_SIZE 64u
#define KN_PLAN_OFF_MAGIC 0
#define KN_PLAN_OFF_FORMAT_VERSION 8
#define KN_PLAN_OFF_ENDIAN 12
#define KN_PLAN_OFF_FILE_SIZE 16
#define KN_PLAN_OFF_FEATURES 24
#define KN_PLAN_OFF_KILN_VERSION 32
#define KN_PLAN_OFF_SECTION_COUNT 48
#define KN_PLAN_OFF_HEADER_FLAGS 52 /* reserved, 0 */
#define KN_PLAN_OFF_HEADER_CHECKSUM 56
/* The header checksum covers header bytes [0, 56) followed by the whole section table. */

/* Section table: section_count entries of 32 bytes right after the header. */
#define KN_PLAN_SECTION_ENTRY_SIZE 32u
#define KN_PLAN_MAX_SECTIONS 32u
#define KN_PLAN_SEC_OFF_ID 0
#define KN_PLAN_SEC_OFF_FLAGS 4
#define KN_PLAN_SEC_OFF_OFFSET 8
#define KN_PLAN_SEC_OFF_SIZE 16
#define KN_PLAN_SEC_OFF_CHECKSUM 24

/* A reader that does not know a section's id refuses the plan when this flag is set and skips
 * the section otherwise. */
#define KN_PLAN_SEC_REQUIRED 1u

enum {
    KN_PLAN_SEC_STRINGS = 1,
    KN_PLAN_SEC_GRAPH = 2,
    KN_PLAN_SEC_PROFILES = 3,
    KN_PLAN_SEC_WEIGHTS = 4,
    KN_PLAN_SEC_PLUGINS = 5, /* reserved: plugin identities and serialized fields */
};

/* String references index the string table; this one means "no string" (NULL). */
#define KN_PLAN_NO_STRING 0xFFFFFFFFu

/* Value record flags. */
#define KN_PLAN_VALUE_CONST 1u
/* Bits 1-2: the kiln_io_kind of a container value (0 for every other dtype). */
#define KN_PLAN_VALUE_KIND_SHIFT 1
#define KN_PLAN_VALUE_KIND_MASK 6u
/* Node record flags. */
#define KN_PLAN_NODE_DEAD 1u

/* Fixed part of records, in bytes (variable parts follow, see docs/plan-format.md). */
#define KN_PLAN_STRINGS_HEAD 8u  /* u32 count, u32 reserved */
#define KN_PLAN_STRING_ENTRY 8u  /* u32 offset, u32 length */
#define KN_PLAN_VALUE_HEAD 32u   /* name, dtype, rank, flags, u64 offset, u64 size */
#define KN_PLAN_DIM_SIZE 16u     /* i64 value, u32 symbol, u32 reserved */
#define KN_PLAN_NODE_HEAD 32u    /* name, op_type, domain, opset, flags, n_in, n_out, n_attr */
#define KN_PLAN_OPSET_SIZE 16u   /* u32 domain, u32 reserved, i64 version */
#define KN_PLAN_PROFILES_HEAD 8u /* u32 count, i32 threads */

/* Upper bound on a thread count the reader accepts. */
#define KN_PLAN_MAX_THREADS 4096

#endif
