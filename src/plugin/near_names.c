#include "plugin/near_names.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define NEAR_MAX_LEN 64

static int lower(char c) {
    return tolower((unsigned char)c);
}

/* Case-insensitive Levenshtein distance; names past NEAR_MAX_LEN are never close. */
static int distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > NEAR_MAX_LEN || lb > NEAR_MAX_LEN)
        return NEAR_MAX_LEN + 1;
    int row[NEAR_MAX_LEN + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (lower(a[i - 1]) != lower(b[j - 1]));
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static bool contains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (n < 3)
        return false;
    for (; *hay != '\0'; hay++) {
        size_t i = 0;
        while (i < n && hay[i] != '\0' && lower(hay[i]) == lower(needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

void kn_near_offer(kn_near_names *nn, const char *want, const char *candidate) {
    if (candidate == NULL || want == NULL || candidate[0] == '\0')
        return;
    for (int i = 0; i < nn->n; i++)
        if (strcmp(nn->name[i], candidate) == 0)
            return;
    int d = distance(want, candidate);
    int limit = (int)strlen(want) / 3;
    limit = limit < 2 ? 2 : limit;
    if (d > limit) {
        if (!contains(candidate, want) && !contains(want, candidate))
            return;
        d = limit + 1; /* a containment ranks after every close spelling */
    }
    int at = nn->n < KN_NEAR_MAX ? nn->n : KN_NEAR_MAX;
    while (at > 0 && nn->dist[at - 1] > d)
        at--;
    if (at >= KN_NEAR_MAX)
        return;
    int last = nn->n < KN_NEAR_MAX ? nn->n : KN_NEAR_MAX - 1;
    for (int i = last; i > at; i--) {
        nn->name[i] = nn->name[i - 1];
        nn->dist[i] = nn->dist[i - 1];
    }
    nn->name[at] = candidate;
    nn->dist[at] = d;
    if (nn->n < KN_NEAR_MAX)
        nn->n++;
}

void kn_near_format(const kn_near_names *nn, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < nn->n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s'%s'", i ? ", " : "", nn->name[i]);
}
