/* The API table kiln gives plugins: registration, errors, logging, dimension expressions and
 * the CPU thread pool. */
#include "plugin/plugin.h"

#include "core/status.h"
#include "core/threadpool.h"
#include "plugin/expr.h"

#include <stdarg.h>
#include <stdio.h>

int32_t kn_host_register_creator(kiln_registry *r, const kiln_plugin_creator *c);

static void host_set_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kn_error(KILN_ERR_PLUGIN, "%s", msg);
}

static void host_log(int32_t level, const char *message) {
    if (level < 0)
        level = 0;
    if (level > KILN_LOG_VERBOSE)
        level = KILN_LOG_VERBOSE;
    kn_log((kiln_log_level)level, "%s", message ? message : "");
}

static void host_parallel_for(const kiln_stream *stream, int64_t n, int64_t grain,
                              void (*fn)(void *arg, int64_t begin, int64_t end), void *arg) {
    kn_threadpool *pool = stream ? (kn_threadpool *)stream->host_private : NULL;
    kn_parallel_for(pool, n, grain < 1 ? 1 : grain, fn, arg);
}

static const kiln_host_api host_api = {
    .struct_size = sizeof(kiln_host_api),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .register_creator = kn_host_register_creator,
    .set_error = host_set_error,
    .log = host_log,
    .expr_constant = kn_expr_constant,
    .expr_op = kn_expr_op,
    .expr_value = kn_expr_value,
    .parallel_for = host_parallel_for,
};

const kiln_host_api *kiln_host_api_get(void) {
    return &host_api;
}
