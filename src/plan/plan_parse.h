/* Reader internals shared by plan_read.c (container: header, section table, checksums, string
 * table) and plan_parse.c (the GRAPH and PROFILES sections). */
#ifndef KN_PLAN_PARSE_H
#define KN_PLAN_PARSE_H

#include "plan/plan.h"
#include "plan/plan_format.h"

#include <stddef.h>
#include <stdint.h>

/* A plan whose header, sections and string table have been checked. */
typedef struct kn_plan_reader {
    const uint8_t *base;
    size_t size;
    /* Known sections by id (NULL if absent); bounds and checksums already verified. */
    const uint8_t *sec[KN_PLAN_SEC_PLUGINS + 1];
    uint64_t sec_size[KN_PLAN_SEC_PLUGINS + 1];
    uint32_t n_str;
    const uint8_t *str_entries; /* n_str entries of {u32 offset, u32 length} */
    const char *str_blob;       /* every entry's bytes are inside and NUL-terminated */
} kn_plan_reader;

const char *kn_plan_section_name(uint32_t id); /* NULL for ids this kiln does not know */

/* Build the graph from GRAPH (constants point into WEIGHTS, not owned). */
kiln_status kn_plan_parse_graph(const kn_plan_reader *r, kn_graph **out);
/* Fill plan->profiles and plan->threads from PROFILES; plan->graph must be parsed. */
kiln_status kn_plan_parse_profiles(const kn_plan_reader *r, kn_plan *plan);

#endif
