/* String ops: the shared evaluation and inference, StringNormalizer, StringConcat, StringSplit
 * and Equal on strings (see string_ops.h). */
#include "ops/text/string_ops.h"

#include "core/alloc.h"
#include "ops/infer_util.h"

#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <wctype.h>

kiln_status kn_string_input(const kn_tensor *t, const char *name, kn_strings *s) {
    char what[80];
    snprintf(what, sizeof what, "input '%s'", name);
    return kn_strings_open(t, what, s);
}

void kn_string_results_free(int n_out, kn_tensor *out) {
    for (int i = 0; i < n_out; i++) {
        kn_free(out[i].data);
        out[i].data = NULL;
    }
}

/* --- StringNormalizer --- */

static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;
static locale_t utf8_locale;

static void utf8_init(void) {
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

/* s with every code point lowered (upper = false) or raised, appended to b as one element
 * (invalid UTF-8 bytes are kept as they are). */
static void add_case_changed(kn_strings_builder *b, kn_str s, bool upper) {
    pthread_once(&utf8_once, utf8_init);
    char *dst = kn_strings_grow(b, s.n * 2 + 4); /* a case pair differs by at most 2 bytes */
    if (dst == NULL) {
        kn_strings_end_item(b);
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i < s.n;) {
        size_t len;
        int32_t v = kn_utf8_next((const unsigned char *)s.p + i, s.n - i, &len);
        if (v < 0) {
            dst[at++] = s.p[i];
        } else {
            wint_t w = (wint_t)v;
            if (utf8_locale != (locale_t)0)
                w = upper ? towupper_l(w, utf8_locale) : towlower_l(w, utf8_locale);
            else if (v < 0x80)
                w = (wint_t)(upper ? (v >= 'a' && v <= 'z' ? v - 32 : v)
                                   : (v >= 'A' && v <= 'Z' ? v + 32 : v));
            at += kn_utf8_put((int32_t)w, dst + at);
        }
        i += len;
    }
    b->len -= s.n * 2 + 4 - at; /* give back what the element did not use */
    kn_strings_end_item(b);
}

static kiln_status normalizer_check(const kn_node *n, int *action) {
    const char *a = kn_attr_string(n, "case_change_action", "NONE");
    *action = strcmp(a, "NONE") == 0    ? 0
              : strcmp(a, "LOWER") == 0 ? 1
              : strcmp(a, "UPPER") == 0 ? 2
                                        : -1;
    if (*action < 0)
        return kn_error(KILN_ERR_MODEL, "case_change_action '%s' is not NONE, LOWER or UPPER", a);
    const char *loc = kn_attr_string(n, "locale", "");
    static const char *const known[] = {"",      "C",           "POSIX",     "C.UTF-8",
                                        "en_US", "en_US.UTF-8", "en_US.utf8"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(loc, known[i]) == 0)
            return KILN_OK;
    return kn_error(KILN_ERR_UNSUPPORTED,
                    "locale '%s' is not supported: kiln changes case with Unicode's default "
                    "mappings (locales en_US and C)",
                    loc);
}

static kiln_status string_normalizer(const kn_node *n, const kn_tensor *x, kn_tensor *out) {
    int action;
    KN_TRY(normalizer_check(n, &action));
    kn_strings s;
    KN_TRY(kn_string_input(x, "X", &s));
    if (!(s.shape.rank == 1 || (s.shape.rank == 2 && s.shape.d[0] == 1)))
        return kn_error(KILN_ERR_SHAPE, "input X must be [C] or [1, C]");
    bool sensitive = kn_attr_int(n, "is_case_sensitive", 0) != 0;
    const kn_attr *sw = kn_node_attr(n, "stopwords");
    int64_t n_sw = sw != NULL && sw->type == KN_ATTR_STRINGS ? sw->n : 0;
    /* case-insensitive matching compares lowered forms: lower the stopwords once */
    kn_tensor lowered = {0};
    kn_strings low = {0};
    if (n_sw > 0 && !sensitive) {
        kn_strings_builder b;
        kn_shape sh = {.rank = 1, .d = {n_sw}};
        KN_TRY(kn_strings_begin(&b, &sh));
        for (int64_t i = 0; i < n_sw; i++)
            add_case_changed(&b, (kn_str){sw->strings[i], strlen(sw->strings[i])}, false);
        KN_TRY(kn_strings_finish(&b, &lowered));
        kiln_status rc = kn_strings_open(&lowered, "stopwords", &low);
        if (rc != KILN_OK) {
            kn_free(lowered.data);
            return rc;
        }
    }
    bool *keep = kn_calloc((size_t)s.count + 1, sizeof *keep);
    kn_strings_builder tmp;
    kiln_status rc = keep == NULL ? kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
    int64_t kept = 0;
    for (int64_t i = 0; rc == KILN_OK && i < s.count; i++) {
        kn_str v = kn_strings_at(&s, i);
        keep[i] = true;
        if (sensitive) {
            for (int64_t k = 0; k < n_sw && keep[i]; k++)
                keep[i] = !kn_str_eq(v, (kn_str){sw->strings[k], strlen(sw->strings[k])});
        } else if (n_sw > 0) {
            kn_shape one = {.rank = 0};
            kn_tensor lv = {0};
            kn_strings lvs;
            rc = kn_strings_begin(&tmp, &one);
            if (rc != KILN_OK)
                break;
            add_case_changed(&tmp, v, false);
            rc = kn_strings_finish(&tmp, &lv);
            if (rc == KILN_OK)
                rc = kn_strings_open(&lv, "X", &lvs);
            for (int64_t k = 0; rc == KILN_OK && k < n_sw && keep[i]; k++)
                keep[i] = !kn_str_eq(kn_strings_at(&lvs, 0), kn_strings_at(&low, k));
            kn_free(lv.data);
        }
        kept += keep[i];
    }
    kn_shape os = s.shape;
    os.d[os.rank - 1] = kept;
    if (kept == 0) /* ONNX: all filtered out leaves one empty string */
        os.d[os.rank - 1] = 1;
    kn_strings_builder b;
    if (rc == KILN_OK)
        rc = kn_strings_begin(&b, &os);
    if (rc == KILN_OK) {
        if (kept == 0)
            kn_strings_add(&b, "", 0);
        for (int64_t i = 0; i < s.count; i++) {
            if (!keep[i])
                continue;
            kn_str v = kn_strings_at(&s, i);
            if (action == 0)
                kn_strings_add(&b, v.p, v.n);
            else
                add_case_changed(&b, v, action == 2);
        }
        rc = kn_strings_finish(&b, out);
    }
    kn_free(keep);
    kn_free(lowered.data);
    return rc;
}

/* --- StringConcat and Equal: element-wise with broadcasting --- */

static kiln_status broadcast2(const kn_strings *a, const kn_strings *b, kn_shape *out) {
    if (!kn_shape_broadcast(&a->shape, &b->shape, out)) {
        char sa[128], sb[128];
        return kn_error(KILN_ERR_SHAPE, "shapes %s and %s do not broadcast",
                        kn_shape_str(&a->shape, sa, sizeof sa),
                        kn_shape_str(&b->shape, sb, sizeof sb));
    }
    return KILN_OK;
}

/* Index into s of output element i of shape out (s broadcast to out). */
static int64_t source_index(const kn_shape *out, const kn_shape *s, int64_t i) {
    int64_t idx = 0, stride = 1;
    for (int d = out->rank - 1, ds = s->rank - 1; d >= 0; d--, ds--) {
        int64_t coord = i % out->d[d];
        i /= out->d[d];
        if (ds >= 0) {
            if (s->d[ds] != 1)
                idx += coord * stride;
            stride *= s->d[ds];
        }
    }
    return idx;
}

static kiln_status binary(const kn_node *n, const kn_tensor *in, kn_tensor *out) {
    bool concat = strcmp(n->op_type, "StringConcat") == 0;
    kn_strings a, b;
    KN_TRY(kn_string_input(&in[0], concat ? "X" : "A", &a));
    KN_TRY(kn_string_input(&in[1], concat ? "Y" : "B", &b));
    kn_shape os;
    KN_TRY(broadcast2(&a, &b, &os));
    int64_t count = kn_shape_numel(&os);
    if (!concat) {
        *out = (kn_tensor){.dtype = KILN_DTYPE_BOOL, .shape = os};
        uint8_t *r = kn_malloc((size_t)count + 1);
        if (r == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        for (int64_t i = 0; i < count; i++)
            r[i] = kn_str_eq(kn_strings_at(&a, source_index(&os, &a.shape, i)),
                             kn_strings_at(&b, source_index(&os, &b.shape, i)));
        out->data = r;
        return KILN_OK;
    }
    kn_strings_builder sb;
    KN_TRY(kn_strings_begin(&sb, &os));
    for (int64_t i = 0; i < count; i++) {
        kn_str x = kn_strings_at(&a, source_index(&os, &a.shape, i));
        kn_str y = kn_strings_at(&b, source_index(&os, &b.shape, i));
        char *dst = kn_strings_grow(&sb, x.n + y.n);
        if (dst != NULL && x.n)
            memcpy(dst, x.p, x.n);
        if (dst != NULL && y.n)
            memcpy(dst + x.n, y.p, y.n);
        kn_strings_end_item(&sb);
    }
    return kn_strings_finish(&sb, out);
}

/* --- StringSplit --- */

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* The pieces of s (as Python's str.split(delim, maxsplit) does, but none for an empty s; delim
 * NULL: runs of whitespace, with none at the ends); calls add for each unless it is NULL;
 * returns the count. */
static int64_t split_one(kn_str s, const char *delim, size_t dl, int64_t maxsplit,
                         kn_strings_builder *add) {
    int64_t pieces = 0;
    size_t i = 0;
    if (delim == NULL) {
        while (i < s.n && is_space(s.p[i]))
            i++;
        while (i < s.n) {
            size_t j = i;
            if (maxsplit >= 0 && pieces == maxsplit) {
                j = s.n;
                while (j > i && is_space(s.p[j - 1]))
                    j--;
            } else {
                while (j < s.n && !is_space(s.p[j]))
                    j++;
            }
            if (add != NULL)
                kn_strings_add(add, s.p + i, j - i);
            pieces++;
            i = j;
            while (i < s.n && is_space(s.p[i]))
                i++;
        }
        return pieces;
    }
    if (s.n == 0) /* no pieces, as onnxruntime (Python's split would give one empty one) */
        return 0;
    for (;;) {
        size_t j = i;
        bool found = false;
        if (maxsplit < 0 || pieces < maxsplit)
            for (; j + dl <= s.n; j++)
                if (memcmp(s.p + j, delim, dl) == 0) {
                    found = true;
                    break;
                }
        if (!found)
            j = s.n;
        if (add != NULL)
            kn_strings_add(add, s.p + i, j - i);
        pieces++;
        if (!found)
            return pieces;
        i = j + dl;
    }
}

static kiln_status string_split(const kn_node *n, const kn_tensor *x, kn_tensor *out) {
    kn_strings s;
    KN_TRY(kn_string_input(x, "X", &s));
    if (s.shape.rank >= KN_MAX_RANK)
        return kn_error(KILN_ERR_SHAPE, "input X has rank %d; the result would pass %d",
                        s.shape.rank, KN_MAX_RANK);
    const kn_attr *da = kn_node_attr(n, "delimiter");
    const char *delim = da != NULL && da->type == KN_ATTR_STRING && da->slen > 0 ? da->s : NULL;
    size_t dl = delim != NULL ? da->slen : 0;
    int64_t maxsplit = kn_attr_int(n, "maxsplit", -1);
    if (maxsplit < 0 && kn_node_attr(n, "maxsplit") != NULL)
        return kn_error(KILN_ERR_MODEL, "maxsplit %lld must be non-negative", (long long)maxsplit);
    int64_t widest = 0;
    int64_t *lens = kn_calloc((size_t)s.count + 1, sizeof *lens);
    if (lens == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < s.count; i++) {
        lens[i] = split_one(kn_strings_at(&s, i), delim, dl, maxsplit, NULL);
        widest = lens[i] > widest ? lens[i] : widest;
    }
    kn_shape os = s.shape;
    os.d[os.rank++] = widest;
    kiln_status rc =
        kn_shape_valid(&os) ? KILN_OK : kn_error(KILN_ERR_SHAPE, "the split makes too many pieces");
    kn_strings_builder b;
    if (rc == KILN_OK)
        rc = kn_strings_begin(&b, &os);
    if (rc == KILN_OK) {
        for (int64_t i = 0; i < s.count; i++) {
            split_one(kn_strings_at(&s, i), delim, dl, maxsplit, &b);
            for (int64_t k = lens[i]; k < widest; k++)
                kn_strings_add(&b, "", 0);
        }
        rc = kn_strings_finish(&b, &out[0]);
    }
    if (rc != KILN_OK) {
        kn_free(lens);
        return rc;
    }
    out[1] = (kn_tensor){.dtype = KILN_DTYPE_INT64, .shape = s.shape, .data = lens};
    return KILN_OK;
}

/* --- dispatch and inference --- */

kiln_status kn_string_op_eval(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                              kn_tensor *out) {
    for (int i = 0; i < n_out; i++)
        out[i] = (kn_tensor){0};
    const char *op = n->op_type;
    kiln_status rc;
    if (strcmp(op, "StringNormalizer") == 0)
        rc = string_normalizer(n, &in[0], &out[0]);
    else if (strcmp(op, "StringConcat") == 0 || strcmp(op, "Equal") == 0)
        rc = binary(n, in, &out[0]);
    else if (strcmp(op, "StringSplit") == 0)
        rc = n_out == 2 ? string_split(n, &in[0], out)
                        : kn_error(KILN_ERR_MODEL, "StringSplit makes 2 outputs");
    else if (strcmp(op, "RegexFullMatch") == 0) {
        kn_strings s;
        rc = kn_string_input(&in[0], "X", &s);
        if (rc == KILN_OK)
            rc = kn_regex_full_match(n, &s, &out[0]);
    } else if (strcmp(op, "LabelEncoder") == 0)
        rc = kn_label_encoder(n, &in[0], &out[0]);
    else if (strcmp(op, "Cast") == 0)
        rc = kn_string_cast(n, &in[0], (int32_t)kn_attr_int(n, "to", 0), &out[0]);
    else if (strcmp(op, "CastLike") == 0 && n_in > 1)
        rc = kn_string_cast(n, &in[0], in[1].dtype, &out[0]);
    else
        rc = kn_error(KILN_ERR_INTERNAL, "%s is not a string op", op);
    if (rc != KILN_OK)
        kn_string_results_free(n_out, out);
    return rc;
}

static kiln_status check_attrs(const kn_infer_ctx *c) {
    const kn_node *n = c->node;
    if (strcmp(n->op_type, "StringNormalizer") == 0) {
        int action;
        return normalizer_check(n, &action);
    }
    if (strcmp(n->op_type, "RegexFullMatch") == 0)
        return kn_regex_check(n);
    if (strcmp(n->op_type, "LabelEncoder") == 0)
        return kn_label_encoder_check(n, c->in[0].dtype);
    return KILN_OK;
}

kiln_status kn_infer_string_op(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 2, 2));
    KN_TRY(check_attrs(c));
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].dtype != 0 && c->in[i].data == NULL && kn_tensor_nbytes(&c->in[i]) > 0)
            return KN_NEED_DATA;
    kn_tensor res[2];
    int n_out = c->n_out < 2 ? c->n_out : 2;
    KN_TRY(kn_string_op_eval(c->node, c->n_in, c->in, n_out, res));
    for (int i = 0; i < n_out; i++) {
        c->out[i] = res[i];
        c->out[i].data = NULL;
    }
    kn_string_results_free(n_out, res);
    return KILN_OK;
}
