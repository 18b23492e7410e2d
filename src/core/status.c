#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define KN_ERROR_CAP 1024

static _Thread_local char last_error[KN_ERROR_CAP];

/* Messages quote names taken from models and plans; a control byte in one must not break the
 * one-line promise of kiln_last_error(). */
static void flatten(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

static kiln_log_fn log_fn;
static void *log_user;
static kiln_log_level log_max = KILN_LOG_WARNING;

kiln_status kn_error(kiln_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    flatten(last_error);
    return code;
}

kiln_status kn_error_prefix(kiln_status code, const char *fmt, ...) {
    char prefix[KN_ERROR_CAP], old[KN_ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t np = strlen(prefix), no = strlen(old);
    if (np > KN_ERROR_CAP - 1)
        np = KN_ERROR_CAP - 1;
    if (no > KN_ERROR_CAP - 1 - np)
        no = KN_ERROR_CAP - 1 - np;
    memcpy(last_error, prefix, np);
    memcpy(last_error + np, old, no);
    last_error[np + no] = '\0';
    flatten(last_error);
    return code;
}

const char *kiln_last_error(void) {
    return last_error;
}

const char *kiln_status_name(kiln_status status) {
    switch (status) {
    case KILN_OK:
        return "ok";
    case KILN_ERR_INVALID_ARGUMENT:
        return "invalid argument";
    case KILN_ERR_IO:
        return "i/o error";
    case KILN_ERR_MODEL:
        return "invalid model";
    case KILN_ERR_UNSUPPORTED:
        return "unsupported";
    case KILN_ERR_SHAPE:
        return "shape error";
    case KILN_ERR_DTYPE:
        return "dtype error";
    case KILN_ERR_OUT_OF_MEMORY:
        return "out of memory";
    case KILN_ERR_PLAN:
        return "invalid plan";
    case KILN_ERR_PLUGIN:
        return "plugin error";
    case KILN_ERR_NOT_FOUND:
        return "not found";
    case KILN_ERR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}

const char *kiln_version_string(void) {
#define KN_STR2(x) #x
#define KN_STR(x) KN_STR2(x)
    return KN_STR(KILN_VERSION_MAJOR) "." KN_STR(KILN_VERSION_MINOR) "." KN_STR(KILN_VERSION_PATCH);
}

void kiln_set_logger(kiln_log_fn fn, void *user, kiln_log_level max_level) {
    log_fn = fn;
    log_user = user;
    log_max = max_level;
}

void kn_log(kiln_log_level level, const char *fmt, ...) {
    if (log_fn == NULL || level > log_max)
        return;
    char msg[KN_ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(log_user, level, msg);
}
