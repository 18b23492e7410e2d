/* The int8 calibration cache (see calibration_cache.h). The file is
 *   kiln-int8-calibration 1 method=entropy model=0123456789abcdef
 *   0.0235294122 uint8 tensor name
 * one line per tensor: the scale (printed with 9 significant digits, which read back to the
 * same float32, so a build from the cache writes the plan a calibrating build wrote), int8 or
 * uint8, then the tensor's name to the end of the line (names may hold spaces). */
#include "builder/calibration_cache.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "kiln/kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "kiln-int8-calibration"
#define VERSION 1

const char *kn_calibration_method_name(int method) {
    return method == KILN_CALIBRATION_MINMAX ? "minmax" : "entropy";
}

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) {
    return fnv(h, s, strlen(s) + 1);
}

static uint64_t hash_attr(uint64_t h, const kn_attr *a) {
    h = fnv_str(h, a->name);
    h = fnv(h, &a->type, sizeof a->type);
    switch (a->type) {
    case KN_ATTR_INT:
        return fnv(h, &a->i, sizeof a->i);
    case KN_ATTR_FLOAT:
        return fnv(h, &a->f, sizeof a->f);
    case KN_ATTR_STRING:
        return fnv(h, a->s, a->slen);
    case KN_ATTR_INTS:
        return fnv(h, a->ints, (size_t)a->n * sizeof *a->ints);
    case KN_ATTR_FLOATS:
        return fnv(h, a->floats, (size_t)a->n * sizeof *a->floats);
    default:
        return h;
    }
}

uint64_t kn_int8_model_hash(const kn_graph *g) {
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        h = fnv_str(fnv_str(fnv_str(h, n->op_type), n->domain), n->name);
        for (int j = 0; j < n->n_in; j++)
            h = fnv_str(h, n->in[j] >= 0 ? g->values[n->in[j]].name : "");
        for (int j = 0; j < n->n_out; j++)
            h = fnv_str(h, n->out[j] >= 0 ? g->values[n->out[j]].name : "");
        for (int j = 0; j < n->n_attr; j++)
            h = hash_attr(h, &n->attr[j]);
    }
    for (int v = 0; v < g->n_values; v++) {
        const kn_value *val = &g->values[v];
        if (!kn_value_is_const(val))
            continue;
        kn_tensor t = kn_value_tensor(val);
        h = fnv_str(h, val->name);
        h = fnv(h, &t.dtype, sizeof t.dtype);
        h = fnv(h, t.shape.d, (size_t)t.shape.rank * sizeof t.shape.d[0]);
        h = fnv(h, t.data, kn_tensor_nbytes(&t));
    }
    return h;
}

kiln_status kn_calibration_cache_write(const char *path, uint64_t hash, int method,
                                       const kn_graph *g, const int *values, int n,
                                       const kn_int8_range *ranges) {
    size_t cap = 128, used = 0;
    for (int i = 0; i < n; i++)
        cap += strlen(g->values[values[i]].name) + 40;
    char *buf = kn_malloc(cap);
    if (buf == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the calibration cache");
    used += (size_t)snprintf(buf, cap, "%s %d method=%s model=%016llx\n", MAGIC, VERSION,
                             kn_calibration_method_name(method), (unsigned long long)hash);
    for (int i = 0; i < n; i++) {
        const kn_int8_range *r = &ranges[values[i]];
        used += (size_t)snprintf(buf + used, cap - used, "%.9g %s %s\n", (double)r->scale,
                                 r->is_unsigned ? "uint8" : "int8", g->values[values[i]].name);
    }
    kiln_status rc = kn_file_write_atomic(path, buf, used);
    kn_free(buf);
    if (rc != KILN_OK)
        return kn_error_prefix(rc, "calibration cache '%s': ", path);
    return KILN_OK;
}

/* One "SCALE TYPE NAME" line (len bytes, no newline) into *r and its name's span. */
static bool parse_line(const char *p, size_t len, kn_int8_range *r, const char **name,
                       size_t *name_len) {
    char num[64];
    const char *sp = memchr(p, ' ', len);
    if (sp == NULL || (size_t)(sp - p) >= sizeof num)
        return false;
    memcpy(num, p, (size_t)(sp - p));
    num[sp - p] = '\0';
    char *end;
    float s = strtof(num, &end);
    if (*end != '\0' || !isfinite(s) || s <= 0.0f)
        return false;
    const char *rest = sp + 1, *stop = p + len;
    if ((size_t)(stop - rest) > 6 && memcmp(rest, "uint8 ", 6) == 0) {
        r->is_unsigned = true;
        rest += 6;
    } else if ((size_t)(stop - rest) > 5 && memcmp(rest, "int8 ", 5) == 0) {
        r->is_unsigned = false;
        rest += 5;
    } else {
        return false;
    }
    r->scale = s;
    *name = rest;
    *name_len = (size_t)(stop - rest);
    return true;
}

static kiln_status check_header(const char *path, const char *line, size_t len, uint64_t hash,
                                int method) {
    char head[256], m[32];
    int version;
    unsigned long long h;
    if (len >= sizeof head)
        len = sizeof head - 1;
    memcpy(head, line, len);
    head[len] = '\0';
    if (sscanf(head, MAGIC " %d method=%31s model=%llx", &version, m, &h) != 3)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "calibration cache '%s' is not a kiln int8 calibration cache (its first "
                        "line should read '" MAGIC " %d method=... model=...')",
                        path, VERSION);
    if (version != VERSION)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "calibration cache '%s' has format version %d; this kiln reads version %d "
                        "(delete it to calibrate again)",
                        path, version, VERSION);
    if (strcmp(m, kn_calibration_method_name(method)) != 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "calibration cache '%s' is stale: it was made with method %s and this "
                        "build asks for %s (delete it to calibrate again)",
                        path, m, kn_calibration_method_name(method));
    if (h != (unsigned long long)hash)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "calibration cache '%s' is stale: it was made for another model (hash "
                        "%016llx, this model's is %016llx; delete it to calibrate again)",
                        path, h, (unsigned long long)hash);
    return KILN_OK;
}

kiln_status kn_calibration_cache_read(const char *path, uint64_t hash, int method,
                                      const kn_graph *g, const int *values, int n,
                                      kn_int8_range *ranges) {
    void *data;
    size_t size;
    if (kn_file_read(path, &data, &size) != KILN_OK)
        return kn_error_prefix(KILN_ERR_IO, "calibration cache '%s': ", path);
    const char *p = data, *end = p + size;
    kiln_status rc = KILN_OK;
    for (int i = 0; i < n; i++)
        ranges[values[i]].scale = 0.0f;
    for (int line = 1; p < end && rc == KILN_OK; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        if (len > 0 && p[len - 1] == '\r')
            len--;
        if (line == 1) {
            rc = check_header(path, p, len, hash, method);
        } else if (len > 0) {
            kn_int8_range r;
            const char *name;
            size_t nlen;
            if (!parse_line(p, len, &r, &name, &nlen)) {
                rc = kn_error(KILN_ERR_INVALID_ARGUMENT,
                              "calibration cache '%s' line %d: expected 'SCALE int8|uint8 "
                              "TENSOR' with a positive scale",
                              path, line);
                break;
            }
            for (int i = 0; i < n; i++) {
                const char *vn = g->values[values[i]].name;
                if (strlen(vn) == nlen && memcmp(vn, name, nlen) == 0)
                    ranges[values[i]] = r;
            }
        }
        p = nl ? nl + 1 : end;
    }
    if (rc == KILN_OK && size == 0)
        rc = kn_error(KILN_ERR_INVALID_ARGUMENT, "calibration cache '%s' is empty", path);
    for (int i = 0; i < n && rc == KILN_OK; i++)
        if (ranges[values[i]].scale <= 0.0f)
            rc = kn_error(KILN_ERR_INVALID_ARGUMENT,
                          "calibration cache '%s' is stale: it has no scale for tensor '%s' "
                          "(delete it to calibrate again)",
                          path, g->values[values[i]].name);
    kn_free(data);
    return rc;
}
