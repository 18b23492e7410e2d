/* "What comes close" for error messages about ops and plugins that are not found: the names
 * nearest to the one looked for, so a typo or a case slip is named in the message. */
#ifndef KN_PLUGIN_NEAR_NAMES_H
#define KN_PLUGIN_NEAR_NAMES_H

#include <stddef.h>

#define KN_NEAR_MAX 3

typedef struct kn_near_names {
    const char *name[KN_NEAR_MAX]; /* borrowed; closest first */
    int dist[KN_NEAR_MAX];
    int n;
} kn_near_names;

/* Offer a candidate; kept when it is close to `want` (case-insensitive edit distance at most a
 * third of the length, at least 2; or one name contains the other) and among the closest. */
void kn_near_offer(kn_near_names *nn, const char *want, const char *candidate);
/* "'A', 'B'" into buf (empty when none were kept). */
void kn_near_format(const kn_near_names *nn, char *buf, size_t size);

#endif
