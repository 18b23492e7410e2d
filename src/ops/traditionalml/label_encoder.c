/* ai.onnx.ml LabelEncoder (opset 2 and later): maps each input value to the value of the equal
 * key, or to the default. Keys and values are strings, int64s, floats (the *_strings, *_int64s,
 * *_floats attributes) or a tensor of any of those or of int32, int16 or double (*_tensor).
 * Runs as a string op (ops/text/string_ops.h): its keys or values may be strings. */
#include "ops/text/string_ops.h"

#include "core/alloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* One side of the mapping (keys or values): a dtype and n entries from one attribute. */
typedef struct le_list {
    int32_t dtype;
    int64_t n;
    char **strs;         /* *_strings */
    const int64_t *ints; /* *_int64s */
    const float *floats; /* *_floats */
    const kn_tensor *t;  /* *_tensor (numeric) */
    kn_strings blk;      /* *_tensor of strings */
} le_list;

static kiln_status read_list(const kn_node *n, const char *side, le_list *l) {
    memset(l, 0, sizeof *l);
    char name[32];
    int found = 0;
    snprintf(name, sizeof name, "%s_strings", side);
    const kn_attr *a = kn_node_attr(n, name);
    if (a != NULL && a->type == KN_ATTR_STRINGS) {
        *l = (le_list){.dtype = KILN_DTYPE_STRING, .n = a->n, .strs = a->strings};
        found++;
    }
    snprintf(name, sizeof name, "%s_int64s", side);
    if (kn_node_attr(n, name) != NULL) {
        l->dtype = KILN_DTYPE_INT64;
        l->n = kn_attr_ints(n, name, &l->ints);
        found++;
    }
    snprintf(name, sizeof name, "%s_floats", side);
    if (kn_node_attr(n, name) != NULL) {
        l->dtype = KILN_DTYPE_FLOAT32;
        l->n = kn_attr_floats(n, name, &l->floats);
        found++;
    }
    snprintf(name, sizeof name, "%s_tensor", side);
    a = kn_node_attr(n, name);
    if (a != NULL && a->type == KN_ATTR_TENSOR && a->t != NULL) {
        l->dtype = a->t->dtype;
        l->t = a->t;
        found++;
        if (l->dtype == KILN_DTYPE_STRING) {
            KN_TRY(kn_strings_open(a->t, name, &l->blk));
            l->n = l->blk.count;
        } else {
            l->n = kn_tensor_numel(a->t);
        }
    }
    if (found != 1)
        return kn_error(KILN_ERR_MODEL,
                        "exactly one of %s_strings, %s_int64s, %s_floats and %s_tensor must be "
                        "given, got %d",
                        side, side, side, side, found);
    int32_t dt = l->dtype;
    if (dt != KILN_DTYPE_STRING && dt != KILN_DTYPE_INT64 && dt != KILN_DTYPE_FLOAT32 &&
        dt != KILN_DTYPE_INT32 && dt != KILN_DTYPE_INT16 && dt != KILN_DTYPE_FLOAT64)
        return kn_error(KILN_ERR_DTYPE,
                        "%s_tensor is %s; LabelEncoder takes string, int64, "
                        "int32, int16, float or double",
                        side, kn_dtype_name(dt));
    return KILN_OK;
}

static kn_str list_str(const le_list *l, int64_t i) {
    if (l->strs != NULL)
        return (kn_str){l->strs[i], strlen(l->strs[i])};
    return kn_strings_at(&l->blk, i);
}

static double list_f64(const le_list *l, int64_t i) {
    return l->ints ? (double)l->ints[i] : l->floats ? l->floats[i] : kn_tensor_get_f64(l->t, i);
}

static int64_t list_i64(const le_list *l, int64_t i) {
    return l->ints ? l->ints[i] : l->floats ? (int64_t)l->floats[i] : kn_tensor_get_i64(l->t, i);
}

kiln_status kn_label_encoder_check(const kn_node *n, int32_t in_dtype) {
    if (n->opset < 2)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "LabelEncoder of ai.onnx.ml opset 1 (classes_strings) is not supported; "
                        "opset 2 and later are");
    le_list keys, values;
    KN_TRY(read_list(n, "keys", &keys));
    KN_TRY(read_list(n, "values", &values));
    if (keys.n != values.n)
        return kn_error(KILN_ERR_MODEL, "%lld keys but %lld values", (long long)keys.n,
                        (long long)values.n);
    if (in_dtype != 0 && in_dtype != keys.dtype)
        return kn_error(KILN_ERR_DTYPE, "input X is %s but the keys are %s",
                        kn_dtype_name(in_dtype), kn_dtype_name(keys.dtype));
    const kn_attr *d = kn_node_attr(n, "default_tensor");
    if (d != NULL && (d->type != KN_ATTR_TENSOR || d->t == NULL || d->t->dtype != values.dtype ||
                      (d->t->dtype != KILN_DTYPE_STRING && kn_tensor_numel(d->t) != 1)))
        return kn_error(KILN_ERR_MODEL, "default_tensor must hold one %s",
                        kn_dtype_name(values.dtype));
    return KILN_OK;
}

static bool key_equal(double a, double b) {
    return a == b || (isnan(a) && isnan(b));
}

kiln_status kn_label_encoder(const kn_node *n, const kn_tensor *x, kn_tensor *out) {
    KN_TRY(kn_label_encoder_check(n, x->dtype));
    le_list keys, values;
    KN_TRY(read_list(n, "keys", &keys));
    KN_TRY(read_list(n, "values", &values));
    const kn_attr *dt = kn_node_attr(n, "default_tensor");
    le_list def = {.dtype = values.dtype, .n = 1};
    static const int64_t minus_one = -1;
    static const float minus_zero = -0.0f;
    const char *def_str = kn_attr_string(n, "default_string", "_Unused");
    int64_t def_int = kn_attr_int(n, "default_int64", -1);
    float def_float = kn_attr_float(n, "default_float", -0.0f);
    if (dt != NULL) {
        def.t = dt->t;
        if (dt->t->dtype == KILN_DTYPE_STRING) {
            KN_TRY(kn_strings_open(dt->t, "default_tensor", &def.blk));
            if (def.blk.count != 1)
                return kn_error(KILN_ERR_MODEL, "default_tensor must hold one string");
        }
    } else if (values.dtype == KILN_DTYPE_STRING) {
        def.strs = (char **)&def_str;
    } else if (values.dtype == KILN_DTYPE_FLOAT32 || values.dtype == KILN_DTYPE_FLOAT64) {
        def.floats = kn_node_attr(n, "default_float") != NULL ? &def_float : &minus_zero;
    } else {
        def.ints = kn_node_attr(n, "default_int64") != NULL ? &def_int : &minus_one;
    }
    kn_strings xs = {0};
    int64_t count;
    kn_shape shape;
    if (x->dtype == KILN_DTYPE_STRING) {
        KN_TRY(kn_string_input(x, "X", &xs));
        count = xs.count;
        shape = xs.shape;
    } else {
        if (x->data == NULL && kn_tensor_nbytes(x) > 0)
            return kn_error(KILN_ERR_INTERNAL, "input X has no data");
        count = kn_tensor_numel(x);
        shape = x->shape;
    }
    kn_strings_builder sb;
    kn_tensor num = {.dtype = values.dtype, .shape = shape};
    if (values.dtype == KILN_DTYPE_STRING) {
        KN_TRY(kn_strings_begin(&sb, &shape));
    } else {
        num.data = kn_malloc(kn_tensor_nbytes(&num) + 1);
        if (num.data == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t hit = -1;
        if (x->dtype == KILN_DTYPE_STRING) {
            kn_str v = kn_strings_at(&xs, i);
            for (int64_t k = 0; k < keys.n && hit < 0; k++)
                if (kn_str_eq(v, list_str(&keys, k)))
                    hit = k;
        } else if (kn_dtype_is_integer(x->dtype)) { /* exact: int64 keys past 2^53 */
            int64_t v = kn_tensor_get_i64(x, i);
            for (int64_t k = 0; k < keys.n && hit < 0; k++)
                if (v == list_i64(&keys, k))
                    hit = k;
        } else {
            double v = kn_tensor_get_f64(x, i);
            for (int64_t k = 0; k < keys.n && hit < 0; k++)
                if (key_equal(v, list_f64(&keys, k)))
                    hit = k;
        }
        const le_list *src = hit >= 0 ? &values : &def;
        int64_t at = hit >= 0 ? hit : 0;
        if (values.dtype == KILN_DTYPE_STRING) {
            kn_str s = list_str(src, at);
            kn_strings_add(&sb, s.p, s.n);
        } else if (values.dtype == KILN_DTYPE_FLOAT32 || values.dtype == KILN_DTYPE_FLOAT64) {
            kn_tensor_set_f64(&num, i, list_f64(src, at));
        } else {
            kn_tensor_set_i64(&num, i, list_i64(src, at));
        }
    }
    if (values.dtype == KILN_DTYPE_STRING)
        return kn_strings_finish(&sb, out);
    *out = num;
    return KILN_OK;
}
