/* Cast and CastLike to and from string. Numbers are written in the shortest form that reads
 * back to the same value (%.9g for float32, %.17g for double, trimmed by trying shorter
 * precisions first), NaN as "NaN" and infinities as "INF" / "-INF", bools as "1" and "0"; a
 * string is read as a number in full (surrounding blanks allowed) or the cast fails naming it. */
#include "ops/text/string_ops.h"

#include "core/alloc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool castable(int32_t dt) {
    return dt == KILN_DTYPE_BOOL || dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16 ||
           kn_dtype_is_float(dt) || kn_dtype_is_integer(dt);
}

static int format_number(const kn_tensor *x, int64_t i, char *buf, size_t size) {
    int32_t dt = x->dtype;
    if (kn_dtype_is_integer(dt) || dt == KILN_DTYPE_BOOL) {
        if (dt == KILN_DTYPE_UINT64)
            return snprintf(buf, size, "%llu", (unsigned long long)((const uint64_t *)x->data)[i]);
        return snprintf(buf, size, "%lld", (long long)kn_tensor_get_i64(x, i));
    }
    double v = kn_tensor_get_f64(x, i);
    if (isnan(v))
        return snprintf(buf, size, "NaN");
    if (isinf(v))
        return snprintf(buf, size, v < 0 ? "-INF" : "INF");
    int max = dt == KILN_DTYPE_FLOAT64 ? 17 : 9;
    for (int p = 1; p < max; p++) {
        int len = snprintf(buf, size, "%.*g", p, v);
        bool same = dt == KILN_DTYPE_FLOAT64 ? strtod(buf, NULL) == v
                                             : (float)strtod(buf, NULL) == (float)v;
        if (same)
            return len;
    }
    return snprintf(buf, size, "%.*g", max, v);
}

static kiln_status parse_number(kn_str s, int32_t to, kn_tensor *out, int64_t i) {
    char buf[128];
    if (s.n >= sizeof buf)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "element %lld is too long for a number",
                        (long long)i);
    memcpy(buf, s.p, s.n);
    buf[s.n] = '\0';
    char *end;
    errno = 0;
    bool is_float = kn_dtype_is_float(to) || to == KILN_DTYPE_FLOAT16 || to == KILN_DTYPE_BFLOAT16;
    double d = 0;
    long long ll = 0;
    unsigned long long ull = 0;
    if (is_float)
        d = strtod(buf, &end);
    else if (to == KILN_DTYPE_UINT64)
        ull = strtoull(buf, &end, 10);
    else
        ll = strtoll(buf, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (end == buf || *end != '\0' || (!is_float && errno == ERANGE))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "element %lld ('%.40s') is not a %s number",
                        (long long)i, buf, kn_dtype_name(to));
    if (is_float)
        kn_tensor_set_f64(out, i, d);
    else if (to == KILN_DTYPE_UINT64)
        ((uint64_t *)out->data)[i] = ull;
    else
        kn_tensor_set_i64(out, i, to == KILN_DTYPE_BOOL ? ll != 0 : ll);
    return KILN_OK;
}

kiln_status kn_string_cast(const kn_node *n, const kn_tensor *x, int32_t to, kn_tensor *out) {
    (void)n;
    if (x->dtype == KILN_DTYPE_STRING && to == KILN_DTYPE_STRING) {
        kn_strings s;
        KN_TRY(kn_string_input(x, "input", &s));
        out->dtype = KILN_DTYPE_STRING;
        out->shape = x->shape;
        out->data = kn_malloc(kn_tensor_nbytes(x));
        if (out->data == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        memcpy(out->data, x->data, kn_tensor_nbytes(x));
        return KILN_OK;
    }
    if (x->dtype == KILN_DTYPE_STRING) {
        if (!castable(to))
            return kn_error(KILN_ERR_UNSUPPORTED, "a cast from string to %s is not supported",
                            kn_dtype_name(to));
        kn_strings s;
        KN_TRY(kn_string_input(x, "input", &s));
        kn_tensor r = {.dtype = to, .shape = s.shape};
        r.data = kn_malloc(kn_tensor_nbytes(&r) + 1);
        if (r.data == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        for (int64_t i = 0; i < s.count; i++) {
            kiln_status rc = parse_number(kn_strings_at(&s, i), to, &r, i);
            if (rc != KILN_OK) {
                kn_free(r.data);
                return rc;
            }
        }
        *out = r;
        return KILN_OK;
    }
    if (!castable(x->dtype))
        return kn_error(KILN_ERR_UNSUPPORTED, "a cast from %s to string is not supported",
                        kn_dtype_name(x->dtype));
    kn_strings_builder b;
    KN_TRY(kn_strings_begin(&b, &x->shape));
    for (int64_t i = 0; i < b.count; i++) {
        char buf[64];
        int len = format_number(x, i, buf, sizeof buf);
        kn_strings_add(&b, buf, len > 0 ? (size_t)len : 0);
    }
    return kn_strings_finish(&b, out);
}

bool kn_string_cast_involved(const kn_infer_ctx *c) {
    if (c->n_in > 0 && c->in[0].dtype == KILN_DTYPE_STRING)
        return true;
    if (strcmp(c->node->op_type, "CastLike") == 0)
        return c->n_in > 1 && c->in[1].dtype == KILN_DTYPE_STRING;
    return kn_attr_int(c->node, "to", 0) == KILN_DTYPE_STRING;
}
