/* RegexFullMatch. ONNX specifies RE2 syntax; kiln translates the common subset of it into a POSIX
 * extended regular expression (<regex.h>) anchored at both ends, matched in the C.UTF-8 locale
 * so that `.` and bracket expressions take whole code points. Whether a whole string matches
 * does not depend on RE2's leftmost-first versus POSIX's leftmost-longest rule, so the subset
 * gives RE2's answers. What cannot be translated (lazy or possessive quantifiers, (?...) groups
 * other than (?:...), \p classes, \x escapes, \A \z, back-references, negated classes inside
 * brackets) is refused when the engine is built. docs/strings.md lists the subset. */
#include "ops/text/string_ops.h"

#include "core/alloc.h"

#include <locale.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

typedef struct ere {
    char *s;
    size_t len, cap;
    bool oom;
} ere;

static void put(ere *e, const char *s) {
    size_t n = strlen(s);
    if (e->len + n + 1 > e->cap) {
        size_t cap = (e->cap ? e->cap * 2 : 64) + n;
        char *p = kn_realloc(e->s, e->cap, cap);
        if (p == NULL) {
            e->oom = true;
            return;
        }
        e->s = p;
        e->cap = cap;
    }
    memcpy(e->s + e->len, s, n + 1);
    e->len += n;
}

static void put_char(ere *e, char c) {
    char s[2] = {c, 0};
    put(e, s);
}

/* The bracket content (no brackets) of a Perl class escape, or NULL; *neg for \W \D \S. */
static const char *perl_class(char c, bool *neg) {
    *neg = c == 'W' || c == 'D' || c == 'S';
    switch (c) {
    case 'w':
    case 'W':
        return "0-9A-Za-z_";
    case 'd':
    case 'D':
        return "0-9";
    case 's':
    case 'S':
        return " \t\n\f\r";
    default:
        return NULL;
    }
}

/* The ASCII ranges of a POSIX class name (name[0..n)), or NULL. */
static const char *posix_class(const char *name, size_t n) {
    static const char *const classes[][2] = {
        {"alpha", "A-Za-z"},        {"digit", "0-9"},        {"alnum", "0-9A-Za-z"},
        {"upper", "A-Z"},           {"lower", "a-z"},        {"space", " \t\n\v\f\r"},
        {"blank", " \t"},           {"xdigit", "0-9A-Fa-f"}, {"word", "0-9A-Za-z_"},
        {"punct", "!-/:-@[-`{-~"},  {"print", " -~"},        {"graph", "!-~"},
        {"cntrl", "\x01-\x1f\x7f"}, {"ascii", "\x01-\x7f"},
    };
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        if (strlen(classes[i][0]) == n && memcmp(classes[i][0], name, n) == 0)
            return classes[i][1];
    return NULL;
}

static kiln_status refuse(const char *pat, const char *what) {
    return kn_error(KILN_ERR_UNSUPPORTED,
                    "pattern '%.120s': %s is RE2 syntax kiln cannot run (see docs/strings.md)", pat,
                    what);
}

/* A bracket expression starting at p (just after '['); appends its ERE form, returns the
 * position after its ']'. */
static kiln_status bracket(const char *pat, const char **pp, ere *e) {
    const char *p = *pp;
    bool neg = *p == '^', close = false, dash = false;
    if (neg)
        p++;
    ere body = {0};
    for (bool first = true; *p && (first || *p != ']'); first = false) {
        char c = *p++;
        if (c == '[' && *p == ':') { /* a POSIX class: ASCII in RE2, so spelled as ranges */
            const char *end = strstr(p, ":]");
            const char *cls = end != NULL ? posix_class(p + 1, (size_t)(end - p - 1)) : NULL;
            if (cls == NULL) {
                kn_free(body.s);
                return refuse(pat, "this [:class:]");
            }
            put(&body, cls);
            p = end + 2;
            continue;
        }
        if (c == '\\') {
            c = *p++;
            bool cneg;
            const char *cls = perl_class(c, &cneg);
            if (cls != NULL && cneg) {
                kn_free(body.s);
                return refuse(pat, "a negated class (\\W, \\D, \\S) inside brackets");
            }
            if (cls != NULL) {
                put(&body, cls);
                continue;
            }
            if (c == 'n' || c == 't' || c == 'r' || c == 'f' || c == 'v')
                c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c == 'f' ? '\f' : '\v';
            else if (c == '\0' || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
                     (c >= 'a' && c <= 'z')) {
                kn_free(body.s);
                return refuse(pat, "this escape inside brackets");
            }
        }
        /* ']' and '-' as literals go first and last, where ERE reads them as such */
        if (c == ']') {
            close = true;
            continue;
        }
        if (c == '-' && (body.len == 0 || *p == ']' || p[-2] == '\\')) {
            dash = true;
            continue;
        }
        if (c == '^') { /* as a collating symbol: first in the brackets it would negate */
            put(&body, "[.^.]");
            continue;
        }
        put_char(&body, c);
    }
    if (*p != ']') {
        kn_free(body.s);
        return kn_error(KILN_ERR_MODEL, "pattern '%.120s': a '[' is not closed", pat);
    }
    put(e, neg ? "[^" : "[");
    if (close)
        put(e, "]");
    if (body.s != NULL)
        put(e, body.s);
    if (dash)
        put(e, "-");
    put(e, "]");
    e->oom |= body.oom;
    kn_free(body.s);
    *pp = p + 1;
    return KILN_OK;
}

/* {n}, {n,} or {n,m} at p (just after '{'): the largest count it allows (n + 1 for {n,}) and
 * the position after '}'; false when p starts no repetition (RE2 then reads '{' literally). */
static bool repetition(const char *p, int64_t *most, const char **after) {
    int64_t n = 0, m = -1;
    const char *q = p;
    if (*q < '0' || *q > '9')
        return false;
    while (*q >= '0' && *q <= '9' && n <= 100000)
        n = n * 10 + (*q++ - '0');
    if (*q == ',') {
        q++;
        m = *q >= '0' && *q <= '9' ? 0 : n + 1;
        while (*q >= '0' && *q <= '9' && m <= 100000)
            m = m * 10 + (*q++ - '0');
    }
    if (*q != '}')
        return false;
    *most = m > n ? m : n;
    *after = q + 1;
    return true;
}

/* RE2 refuses counts above 1000; kiln also bounds how far nested counts expand (POSIX engines
 * expand them), so a pattern cannot ask for unbounded memory. */
#define MAX_REPEAT 1000
#define MAX_EXPANSION 100000
#define MAX_DEPTH 64

static kiln_status translate(const char *pat, ere *e) {
    int64_t sum[MAX_DEPTH + 1] = {0}, last = 0; /* expanded size of each open group, last item */
    int depth = 0;
    put(e, "^(");
    for (const char *p = pat; *p;) {
        char c = *p++;
        if (c == '(') {
            if (depth == MAX_DEPTH)
                return refuse(pat, "groups nested this deep");
            sum[++depth] = 0;
            if (*p == '?') {
                if (p[1] != ':')
                    return refuse(pat, "a (?...) group other than (?:...)");
                p += 2;
            }
            put(e, "(");
            continue;
        }
        if (c == ')' && depth > 0) {
            last = sum[depth--];
            sum[depth] += last;
            put(e, ")");
            continue;
        }
        int64_t most;
        const char *after;
        if (c == '{' && repetition(p, &most, &after)) {
            if (most > MAX_REPEAT)
                return refuse(pat, "a count above 1000");
            sum[depth] += last * (most - 1);
            last *= most;
            if (sum[depth] > MAX_EXPANSION || last > MAX_EXPANSION)
                return refuse(pat, "counts expanding past 100000 items");
            put(e, "{");
            while (p < after)
                put_char(e, *p++);
            if (*p == '?' || *p == '+')
                return refuse(pat, "a lazy or possessive quantifier");
            continue;
        }
        if ((c == '*' || c == '+' || c == '?') && (*p == '?' || *p == '+'))
            return refuse(pat, "a lazy or possessive quantifier");
        if (c == '*' || c == '+' || c == '?' || c == '|' || c == '^' || c == '$') {
            put_char(e, c);
            continue;
        }
        sum[depth]++;
        last = 1;
        if (c == '[') {
            KN_TRY(bracket(pat, &p, e));
            continue;
        }
        if (c == ')')
            return kn_error(KILN_ERR_MODEL, "pattern '%.120s': a ')' has no '('", pat);
        if (c == '{' || c == '}') { /* literal in RE2 here */
            put_char(e, '\\');
            put_char(e, c);
            continue;
        }
        if (c != '\\') {
            put_char(e, c);
            continue;
        }
        c = *p++;
        bool neg;
        const char *cls = perl_class(c, &neg);
        if (cls != NULL) {
            put(e, neg ? "[^" : "[");
            put(e, cls);
            put(e, "]");
        } else if (c == 'b' || c == 'B') {
            put(e, c == 'b' ? "\\b" : "\\B"); /* glibc's word boundary */
        } else if (c == 'n' || c == 't' || c == 'r' || c == 'f' || c == 'v') {
            put_char(e, c == 'n'   ? '\n'
                        : c == 't' ? '\t'
                        : c == 'r' ? '\r'
                        : c == 'f' ? '\f'
                                   : '\v');
        } else if (c == '\0') {
            return kn_error(KILN_ERR_MODEL, "pattern '%.120s' ends in a lone backslash", pat);
        } else if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) {
            char what[40];
            snprintf(what, sizeof what, "the escape \\%c", c);
            return refuse(pat, what);
        } else if (strchr(".[]()*+?{}|^$\\", c) != NULL) {
            put_char(e, '\\');
            put_char(e, c);
        } else {
            put_char(e, c); /* an escaped character with no special meaning */
        }
    }
    if (depth != 0)
        return kn_error(KILN_ERR_MODEL, "pattern '%.120s': a '(' is not closed", pat);
    put(e, ")$");
    return e->oom ? kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
}

static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;
static locale_t utf8_locale;

static void utf8_init(void) {
    utf8_locale = newlocale(LC_CTYPE_MASK | LC_COLLATE_MASK, "C.UTF-8", (locale_t)0);
}

/* Compile n's pattern; regcomp and regexec read the calling thread's locale, so both run under
 * C.UTF-8 where the system has it (uselocale changes only this thread). */
static kiln_status compile(const kn_node *n, regex_t *re) {
    const kn_attr *a = kn_node_attr(n, "pattern");
    if (a == NULL || a->type != KN_ATTR_STRING || a->s == NULL)
        return kn_error(KILN_ERR_MODEL, "attribute 'pattern' is missing");
    if (strlen(a->s) != a->slen)
        return kn_error(KILN_ERR_UNSUPPORTED, "the pattern holds a NUL byte");
    ere e = {0};
    kiln_status rc = translate(a->s, &e);
    if (rc != KILN_OK) {
        kn_free(e.s);
        return rc;
    }
    pthread_once(&utf8_once, utf8_init);
    locale_t old = utf8_locale != (locale_t)0 ? uselocale(utf8_locale) : (locale_t)0;
    int err = regcomp(re, e.s, REG_EXTENDED | REG_NOSUB);
    if (old != (locale_t)0)
        uselocale(old);
    kn_free(e.s);
    if (err != 0) {
        char msg[128];
        regerror(err, NULL, msg, sizeof msg);
        return kn_error(KILN_ERR_MODEL, "pattern '%.120s' does not compile: %s", a->s, msg);
    }
    return KILN_OK;
}

kiln_status kn_regex_check(const kn_node *n) {
    regex_t re;
    KN_TRY(compile(n, &re));
    regfree(&re);
    return KILN_OK;
}

kiln_status kn_regex_full_match(const kn_node *n, const kn_strings *x, kn_tensor *out) {
    regex_t re;
    KN_TRY(compile(n, &re));
    uint8_t *r = kn_malloc((size_t)x->count + 1);
    char *buf = NULL;
    size_t cap = 0;
    kiln_status rc = r == NULL ? kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory") : KILN_OK;
    locale_t old = utf8_locale != (locale_t)0 ? uselocale(utf8_locale) : (locale_t)0;
    for (int64_t i = 0; rc == KILN_OK && i < x->count; i++) {
        kn_str s = kn_strings_at(x, i);
        if (memchr(s.p, 0, s.n) != NULL) { /* regexec stops at a NUL: such a string never matches */
            r[i] = 0;
            continue;
        }
        if (s.n + 1 > cap) {
            char *p = kn_realloc(buf, cap, s.n + 1);
            if (p == NULL) {
                rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
                break;
            }
            buf = p;
            cap = s.n + 1;
        }
        if (s.n)
            memcpy(buf, s.p, s.n);
        buf[s.n] = '\0';
        r[i] = regexec(&re, buf, 0, NULL, 0) == 0;
    }
    if (old != (locale_t)0)
        uselocale(old);
    regfree(&re);
    kn_free(buf);
    if (rc != KILN_OK) {
        kn_free(r);
        return rc;
    }
    *out = (kn_tensor){.dtype = KILN_DTYPE_BOOL, .shape = x->shape, .data = r};
    return KILN_OK;
}
