/* The timing cache: tactics chosen by timing at build (kn_backend_iface.tune), stored by the
 * key of their tuning problem (device, library versions, layer signature), so a rebuild with
 * the same cache times nothing and writes the same plan.
 *
 * The file is text: the line "kiln-timing-cache 1", then one entry a line, the key, a tab and
 * the tactic's integers separated by spaces, sorted by key. A file that is not a cache, of
 * another version, truncated or otherwise malformed is ignored as a whole with a one-line
 * warning (and replaced when the build writes the cache); a missing file is an empty cache. */
#ifndef KN_TIMING_CACHE_H
#define KN_TIMING_CACHE_H

#include "backend/backend.h"
#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KN_TIMING_CACHE_HEADER "kiln-timing-cache 1"

typedef struct kn_timing_entry {
    char *key;
    int n;
    int64_t v[KN_TACTIC_MAX];
} kn_timing_entry;

typedef struct kn_timing_cache {
    kn_timing_entry *e;
    int n, cap;
    bool added; /* entries were added since it was read */
} kn_timing_cache;

/* Parse a cache file's text into c (emptied first). False, with the reason in why, when the
 * text is not a well-formed cache; c is then empty. */
bool kn_timing_cache_parse(kn_timing_cache *c, const char *text, size_t size, char *why,
                           size_t why_size);
/* Read path into c: a missing file gives an empty cache; an unreadable or malformed one an
 * empty cache and a warning (kn_log) naming the file and the reason. */
kiln_status kn_timing_cache_load(kn_timing_cache *c, const char *path);
const kn_timing_entry *kn_timing_cache_find(const kn_timing_cache *c, const char *key);
/* Add (or replace) the entry for key. key must be printable text without tabs or newlines. */
kiln_status kn_timing_cache_add(kn_timing_cache *c, const char *key, const int64_t *v, int n);
/* The file's text (kn_malloc'd and NUL-terminated, the caller frees it; *size excludes the
 * NUL), entries sorted by key. */
kiln_status kn_timing_cache_format(const kn_timing_cache *c, char **text, size_t *size);
/* Write c to path (temporary file, then rename). */
kiln_status kn_timing_cache_save(const kn_timing_cache *c, const char *path);
void kn_timing_cache_clear(kn_timing_cache *c);

#endif
