#include "builder/builder.h"

#include "core/alloc.h"
#include "onnx/onnx_import.h"

#include <string.h>

kiln_status kiln_builder_create(kiln_builder **out) {
    if (out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_create: NULL argument");
    *out = kn_calloc(1, sizeof **out);
    return *out ? KILN_OK : kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
}

void kiln_builder_destroy(kiln_builder *b) {
    kn_free(b);
}

kiln_status kiln_builder_set_registry(kiln_builder *b, kiln_registry *registry) {
    if (b == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_set_registry: NULL builder");
    b->registry = registry;
    return KILN_OK;
}

kiln_status kiln_build_config_prefer_plugin(kiln_build_config *c, const char *op_type) {
    if (c == NULL || op_type == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_config_prefer_plugin: NULL "
                                                   "argument");
    char **p = kn_realloc(c->prefer_plugin, (size_t)c->n_prefer * sizeof *p,
                          (size_t)(c->n_prefer + 1) * sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    c->prefer_plugin = p;
    if ((p[c->n_prefer] = kn_strdup(op_type)) == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    c->n_prefer++;
    return KILN_OK;
}

static kiln_status wrap(kiln_builder *b, kn_graph *g, kiln_network **out) {
    kiln_network *n = kn_calloc(1, sizeof *n);
    if (n == NULL) {
        kn_graph_destroy(g);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    n->graph = g;
    n->builder = b;
    n->opset = (int)kn_graph_opset(g, "");
    *out = n;
    return KILN_OK;
}

kiln_status kiln_network_from_onnx_file(kiln_builder *b, const char *path, kiln_network **out) {
    if (b == NULL || path == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_network_from_onnx_file: NULL argument");
    *out = NULL;
    kn_graph *g = NULL;
    kiln_status rc = kn_onnx_import_file(path, &g);
    if (rc != KILN_OK)
        return rc;
    return wrap(b, g, out);
}

kiln_status kiln_network_from_onnx_memory(kiln_builder *b, const void *data, size_t size,
                                          kiln_network **out) {
    if (b == NULL || data == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_network_from_onnx_memory: NULL argument");
    *out = NULL;
    kn_graph *g = NULL;
    KN_TRY(kn_onnx_import(data, size, NULL, &g));
    return wrap(b, g, out);
}

void kiln_network_destroy(kiln_network *n) {
    if (n == NULL)
        return;
    kn_graph_destroy(n->graph);
    kn_free(n);
}

kiln_status kiln_build_config_create(kiln_build_config **out) {
    if (out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_config_create: NULL argument");
    *out = kn_calloc(1, sizeof **out);
    return *out ? KILN_OK : kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
}

void kiln_build_config_destroy(kiln_build_config *c) {
    if (c == NULL)
        return;
    for (int i = 0; i < c->n_profiles; i++)
        kn_free(c->profiles[i].input);
    kn_free(c->profiles);
    for (int i = 0; i < c->n_prefer; i++)
        kn_free(c->prefer_plugin[i]);
    kn_free(c->prefer_plugin);
    for (int i = 0; i < c->n_backends; i++)
        kn_free(c->backends[i]);
    kn_free(c->backends);
    for (int i = 0; i < c->n_layer_precision; i++)
        kn_free(c->layer_precision[i].pattern);
    kn_free(c->layer_precision);
    kn_free(c->timing_cache);
    kn_free(c->calibration_dir);
    kn_free(c->calibration_cache);
    kn_free(c);
}

static bool precision_valid(kiln_precision p) {
    return p == KILN_PRECISION_FP32 || p == KILN_PRECISION_TF32 || p == KILN_PRECISION_FP16 ||
           p == KILN_PRECISION_BF16;
}

kiln_status kiln_build_config_set_precision(kiln_build_config *c, kiln_precision precision) {
    if (c == NULL || !precision_valid(precision))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_build_config_set_precision: NULL config or unknown precision %d",
                        (int)precision);
    c->precision = (int)precision;
    return KILN_OK;
}

kiln_status kiln_build_config_set_tactics(kiln_build_config *c, kiln_tactics tactics) {
    if (c == NULL || (tactics != KILN_TACTICS_AUTO && tactics != KILN_TACTICS_TIMED &&
                      tactics != KILN_TACTICS_HEURISTIC))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_build_config_set_tactics: NULL config or unknown choice %d",
                        (int)tactics);
    c->tactics = (int)tactics;
    return KILN_OK;
}

kiln_status kiln_build_config_set_timing_cache(kiln_build_config *c, const char *path) {
    if (c == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_build_config_set_timing_cache: NULL config");
    char *copy = NULL;
    if (path != NULL && path[0] != '\0' && (copy = kn_strdup(path)) == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kn_free(c->timing_cache);
    c->timing_cache = copy;
    return KILN_OK;
}

kiln_status kiln_build_config_set_int8(kiln_build_config *c, const char *calibration_dir,
                                       kiln_calibration_method method, const char *cache) {
    if (c == NULL || (method != KILN_CALIBRATION_ENTROPY && method != KILN_CALIBRATION_MINMAX))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_build_config_set_int8: NULL config or unknown method %d",
                        (int)method);
    char *dir = NULL, *file = NULL;
    if ((calibration_dir != NULL && calibration_dir[0] != '\0' &&
         (dir = kn_strdup(calibration_dir)) == NULL) ||
        (cache != NULL && cache[0] != '\0' && (file = kn_strdup(cache)) == NULL)) {
        kn_free(dir);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    kn_free(c->calibration_dir);
    kn_free(c->calibration_cache);
    c->int8 = true;
    c->calibration_method = (int)method;
    c->calibration_dir = dir;
    c->calibration_cache = file;
    return KILN_OK;
}

kiln_status kiln_build_config_set_layer_precision(kiln_build_config *c, const char *pattern,
                                                  kiln_precision precision) {
    if (c == NULL || pattern == NULL || pattern[0] == '\0' || !precision_valid(precision))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_build_config_set_layer_precision: NULL config, empty pattern or "
                        "unknown precision");
    kn_layer_precision *l = kn_realloc(c->layer_precision, (size_t)c->n_layer_precision * sizeof *l,
                                       (size_t)(c->n_layer_precision + 1) * sizeof *l);
    if (l == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    c->layer_precision = l;
    char *p = kn_strdup(pattern);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    l[c->n_layer_precision++] = (kn_layer_precision){.pattern = p, .precision = (int)precision};
    return KILN_OK;
}

kiln_status kiln_build_config_set_backends(kiln_build_config *c, const char *const *names,
                                           int count) {
    if (c == NULL || count < 0 || count > 8 || (count > 0 && names == NULL))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "kiln_build_config_set_backends: NULL config or names, or more than 8");
    for (int i = 0; i < count; i++) {
        if (names[i] == NULL || names[i][0] == '\0')
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "backend %d has an empty name", i);
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return kn_error(KILN_ERR_INVALID_ARGUMENT, "backend '%s' is listed twice",
                                names[i]);
    }
    char **list = kn_calloc((size_t)count + 1, sizeof *list);
    if (list == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < count; i++)
        if ((list[i] = kn_strdup(names[i])) == NULL) {
            for (int j = 0; j < i; j++)
                kn_free(list[j]);
            kn_free(list);
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    for (int i = 0; i < c->n_backends; i++)
        kn_free(c->backends[i]);
    kn_free(c->backends);
    c->backends = list;
    c->n_backends = count;
    return KILN_OK;
}

kiln_status kiln_build_config_set_threads(kiln_build_config *c, int threads) {
    if (c == NULL || threads < 0 || threads > 1024)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "thread count must be between 0 and 1024");
    c->threads = threads;
    return KILN_OK;
}

kiln_status kiln_build_config_set_progress(kiln_build_config *c, kiln_progress_fn fn, void *user) {
    if (c == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_config_set_progress: NULL config");
    c->progress = fn;
    c->progress_user = user;
    return KILN_OK;
}

kiln_status kiln_build_config_add_profile(kiln_build_config *c, const char *input, int rank,
                                          const int64_t *min, const int64_t *opt,
                                          const int64_t *max) {
    if (c == NULL || input == NULL || (rank > 0 && (!min || !opt || !max)))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_build_config_add_profile: NULL argument");
    if (rank < 0 || rank > KN_MAX_RANK)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "profile for '%s': rank %d is not in [0, %d]",
                        input, rank, KN_MAX_RANK);
    for (int d = 0; d < rank; d++)
        if (min[d] < 0 || min[d] > opt[d] || opt[d] > max[d] || max[d] > KN_MAX_ELEMENTS)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "profile for '%s' axis %d: need 0 <= min <= opt <= max, got "
                            "%lld, %lld, %lld",
                            input, d, (long long)min[d], (long long)opt[d], (long long)max[d]);
    for (int i = 0; i < c->n_profiles; i++)
        if (strcmp(c->profiles[i].input, input) == 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "input '%s' has two profiles", input);
    kn_profile *p = kn_realloc(c->profiles, (size_t)c->n_profiles * sizeof *p,
                               (size_t)(c->n_profiles + 1) * sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    c->profiles = p;
    kn_profile *np = &p[c->n_profiles];
    memset(np, 0, sizeof *np);
    np->input = kn_strdup(input);
    if (np->input == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    np->rank = rank;
    for (int d = 0; d < rank; d++) {
        np->min[d] = min[d];
        np->opt[d] = opt[d];
        np->max[d] = max[d];
    }
    c->n_profiles++;
    return KILN_OK;
}
