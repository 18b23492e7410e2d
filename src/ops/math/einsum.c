/* Einsum: equation parsing against concrete shapes (shared with the kernel) and inference. */
#include "ops/math/einsum.h"

#include <ctype.h>
#include <string.h>

#define MAX_EQ 256

typedef struct term {
    const char *s;
    int len;
} term;

static int letter_id(char ch) {
    return isupper((unsigned char)ch) ? ch - 'A' : 26 + ch - 'a';
}

/* Splits the compacted equation into input terms and the output term (out->s NULL when
 * implicit). */
static kiln_status split_terms(const char *eq, term *in, int n_in, term *out) {
    const char *arrow = strstr(eq, "->");
    const char *lhs_end = arrow != NULL ? arrow : eq + strlen(eq);
    int n = 0;
    const char *p = eq;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(lhs_end - p));
        const char *e = comma != NULL ? comma : lhs_end;
        if (n == n_in)
            return kn_error(KILN_ERR_MODEL, "equation has more terms than the %d inputs", n_in);
        in[n].s = p;
        in[n++].len = (int)(e - p);
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    if (n != n_in)
        return kn_error(KILN_ERR_MODEL, "equation has %d input terms for %d inputs", n, n_in);
    out->s = arrow != NULL ? arrow + 2 : NULL;
    out->len = arrow != NULL ? (int)strlen(arrow + 2) : 0;
    return KILN_OK;
}

/* Validates a term's characters; counts its letters and whether it has an ellipsis. */
static kiln_status scan_term(const term *t, int *letters, int *ellipsis) {
    *letters = 0;
    *ellipsis = -1;
    for (int i = 0; i < t->len; i++) {
        char ch = t->s[i];
        if (ch == '.') {
            if (*ellipsis >= 0 || i + 2 >= t->len || t->s[i + 1] != '.' || t->s[i + 2] != '.')
                return kn_error(KILN_ERR_MODEL, "equation has a malformed ellipsis");
            *ellipsis = *letters;
            i += 2;
        } else if (isalpha((unsigned char)ch)) {
            (*letters)++;
        } else {
            return kn_error(KILN_ERR_MODEL, "equation has invalid character '%c'", ch);
        }
    }
    return KILN_OK;
}

static kiln_status set_size(kn_einsum *e, int label, int64_t d, bool broadcast) {
    int64_t *s = &e->size[label];
    if (*s < 0 || *s == d)
        *s = d;
    else if (broadcast && (*s == 1 || d == 1))
        *s = *s == 1 ? d : *s;
    else
        return kn_error(KILN_ERR_SHAPE, "einsum dimension sizes %lld and %lld do not match",
                        (long long)*s, (long long)d);
    return KILN_OK;
}

kiln_status kn_einsum_parse(const char *equation, int n_in, const kn_tensor *in, kn_einsum *e) {
    char eq[MAX_EQ];
    size_t len = 0;
    for (const char *p = equation; *p; p++)
        if (!isspace((unsigned char)*p)) {
            if (len + 1 >= sizeof eq)
                return kn_error(KILN_ERR_MODEL, "equation is too long");
            eq[len++] = *p;
        }
    eq[len] = '\0';
    if (n_in < 1 || n_in > KN_EINSUM_MAX_INPUTS)
        return kn_error(KILN_ERR_MODEL, "Einsum takes 1 to %d inputs, got %d", KN_EINSUM_MAX_INPUTS,
                        n_in);
    memset(e, 0, sizeof *e);
    e->n_in = n_in;
    term terms[KN_EINSUM_MAX_INPUTS], out;
    KN_TRY(split_terms(eq, terms, n_in, &out));
    int letters[KN_EINSUM_MAX_INPUTS], ell_pos[KN_EINSUM_MAX_INPUTS], ell_rank = 0;
    for (int i = 0; i < n_in; i++) {
        KN_TRY(scan_term(&terms[i], &letters[i], &ell_pos[i]));
        int32_t rank = in[i].shape.rank;
        int extra = rank - letters[i];
        if (extra < 0 || (ell_pos[i] < 0 && extra != 0))
            return kn_error(KILN_ERR_SHAPE, "input %d has rank %d but its term names %d axes", i,
                            rank, letters[i]);
        ell_rank = extra > ell_rank ? extra : ell_rank;
    }
    /* Labels 0..51 are letters, 52.. the ellipsis dims; renumbered densely at the end. */
    int count[52 + KN_MAX_RANK] = {0};
    e->n_labels = 52 + KN_MAX_RANK;
    for (int l = 0; l < 52 + KN_MAX_RANK; l++)
        e->size[l] = -1;
    for (int i = 0; i < n_in; i++) {
        int32_t rank = in[i].shape.rank, extra = rank - letters[i], ax = 0;
        for (int c = 0; c < terms[i].len; c++) {
            char ch = terms[i].s[c];
            if (ch == '.') {
                for (int k = 0; k < extra; k++, ax++) {
                    int label = 52 + ell_rank - extra + k;
                    e->in_label[i][ax] = (int8_t)label;
                    KN_TRY(set_size(e, label, in[i].shape.d[ax], true));
                    count[label]++;
                }
                c += 2;
                continue;
            }
            int label = letter_id(ch);
            e->in_label[i][ax] = (int8_t)label;
            KN_TRY(set_size(e, label, in[i].shape.d[ax], false));
            count[label]++;
            ax++;
        }
        e->in_rank[i] = rank;
    }
    e->out_rank = 0;
    if (out.s != NULL) {
        int out_letters, out_ell;
        KN_TRY(scan_term(&out, &out_letters, &out_ell));
        for (int c = 0; c < out.len; c++) {
            if (out.s[c] == '.') {
                for (int k = 0; k < ell_rank; k++)
                    e->out_label[e->out_rank++] = (int8_t)(52 + k);
                c += 2;
                continue;
            }
            int label = letter_id(out.s[c]);
            if (count[label] == 0)
                return kn_error(KILN_ERR_MODEL, "output label '%c' is not in any input", out.s[c]);
            for (int k = 0; k < e->out_rank; k++)
                if (e->out_label[k] == label)
                    return kn_error(KILN_ERR_MODEL, "output label '%c' is repeated", out.s[c]);
            if (e->out_rank >= KN_MAX_RANK)
                return kn_error(KILN_ERR_SHAPE, "einsum output rank exceeds %d", KN_MAX_RANK);
            e->out_label[e->out_rank++] = (int8_t)label;
        }
    } else {
        for (int k = 0; k < ell_rank; k++)
            e->out_label[e->out_rank++] = (int8_t)(52 + k);
        for (int label = 0; label < 52; label++)
            if (count[label] == 1) {
                if (e->out_rank >= KN_MAX_RANK)
                    return kn_error(KILN_ERR_SHAPE, "einsum output rank exceeds %d", KN_MAX_RANK);
                e->out_label[e->out_rank++] = (int8_t)label;
            }
    }
    /* Dense renumbering: the kernel iterates only over labels that occur. */
    int8_t map[52 + KN_MAX_RANK];
    int n = 0;
    for (int l = 0; l < 52 + KN_MAX_RANK; l++) {
        map[l] = -1;
        if (count[l] > 0) {
            map[l] = (int8_t)n;
            e->size[n++] = e->size[l];
        }
    }
    e->n_labels = n;
    for (int i = 0; i < n_in; i++)
        for (int a = 0; a < e->in_rank[i]; a++)
            e->in_label[i][a] = map[e->in_label[i][a]];
    for (int a = 0; a < e->out_rank; a++)
        e->out_label[a] = map[e->out_label[a]];
    return KILN_OK;
}

kiln_status kn_infer_einsum(kn_infer_ctx *c) {
    const char *eq = kn_attr_string(c->node, "equation", NULL);
    if (eq == NULL)
        return kn_error(KILN_ERR_MODEL, "attribute 'equation' is required");
    for (int i = 0; i < c->n_in; i++) {
        if (!kn_has_input(c, i))
            return kn_error(KILN_ERR_MODEL, "input %d is missing", i);
        if (c->in[i].dtype != c->in[0].dtype)
            return kn_error(KILN_ERR_DTYPE, "input %d has dtype %s, input 0 has %s", i,
                            kn_dtype_name(c->in[i].dtype), kn_dtype_name(c->in[0].dtype));
    }
    int32_t dt = c->in[0].dtype;
    if (!kn_dtype_is_float(dt) && dt != KILN_DTYPE_INT32 && dt != KILN_DTYPE_INT64 &&
        dt != KILN_DTYPE_UINT32 && dt != KILN_DTYPE_UINT64)
        return kn_error(KILN_ERR_DTYPE, "Einsum does not support dtype %s", kn_dtype_name(dt));
    kn_einsum e;
    KN_TRY(kn_einsum_parse(eq, c->n_in, c->in, &e));
    if (c->n_out != 1)
        return kn_error(KILN_ERR_MODEL, "Einsum has one output");
    c->out[0].dtype = dt;
    c->out[0].shape.rank = e.out_rank;
    for (int a = 0; a < e.out_rank; a++)
        c->out[0].shape.d[a] = e.size[e.out_label[a]];
    return KILN_OK;
}
