/* Error text: one place builds every message; kiln_last_error() reads it back. */
#ifndef KN_STATUS_H
#define KN_STATUS_H

#include "kiln/kiln.h"

#include <assert.h>

#if defined(__GNUC__)
#define KN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KN_PRINTF(a, b)
#endif

/* Set this thread's error message (printf-style) and return `code`. */
kiln_status kn_error(kiln_status code, const char *fmt, ...) KN_PRINTF(2, 3);
/* Prefix the current message with context, e.g. "node 'conv1' (Conv): ". Returns `code`. */
kiln_status kn_error_prefix(kiln_status code, const char *fmt, ...) KN_PRINTF(2, 3);
/* Internal invariant: a bug in kiln, never reachable from input. */
#define KN_ASSERT(x) assert(x)

#define KN_TRY(expr)                                                                               \
    do {                                                                                           \
        kiln_status kn_try_rc_ = (expr);                                                           \
        if (kn_try_rc_ != KILN_OK)                                                                 \
            return kn_try_rc_;                                                                     \
    } while (0)

void kn_log(kiln_log_level level, const char *fmt, ...) KN_PRINTF(2, 3);

#endif
