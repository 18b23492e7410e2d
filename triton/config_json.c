#include "config_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *p, *end;
    char *err;
    size_t errsz;
    int depth;
} parser;

static void fail(parser *ps, const char *what) {
    if (ps->err && ps->err[0] == '\0')
        snprintf(ps->err, ps->errsz, "model config JSON: %s", what);
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

kj_node *kj_new(kj_type type) {
    kj_node *n = calloc(1, sizeof *n);
    if (n)
        n->type = type;
    return n;
}

kj_node *kj_new_string(const char *s) {
    kj_node *n = kj_new(KJ_STRING);
    if (n && !(n->text = strdup(s))) {
        free(n);
        return NULL;
    }
    return n;
}

kj_node *kj_new_int(int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    kj_node *n = kj_new(KJ_NUMBER);
    if (n && !(n->text = strdup(buf))) {
        free(n);
        return NULL;
    }
    return n;
}

void kj_free(kj_node *node) {
    if (!node)
        return;
    for (size_t i = 0; i < node->count; i++) {
        kj_free(node->items[i]);
        if (node->values)
            kj_free(node->values[i]);
    }
    free(node->items);
    free(node->values);
    free(node->text);
    free(node);
}

static int grow(kj_node *n) {
    if (n->count < n->cap)
        return 0;
    size_t cap = n->cap ? n->cap * 2 : 8;
    kj_node **items = realloc(n->items, cap * sizeof *items);
    if (!items)
        return -1;
    n->items = items;
    if (n->type == KJ_OBJECT) {
        kj_node **values = realloc(n->values, cap * sizeof *values);
        if (!values)
            return -1;
        n->values = values;
    }
    n->cap = cap;
    return 0;
}

int kj_push(kj_node *array, kj_node *item) {
    if (!item || grow(array) != 0) {
        kj_free(item);
        return -1;
    }
    array->items[array->count++] = item;
    return 0;
}

int kj_set(kj_node *object, const char *key, kj_node *value) {
    if (!value)
        return -1;
    for (size_t i = 0; i < object->count; i++)
        if (strcmp(object->items[i]->text, key) == 0) {
            kj_free(object->values[i]);
            object->values[i] = value;
            return 0;
        }
    kj_node *k = kj_new_string(key);
    if (!k || grow(object) != 0) {
        kj_free(k);
        kj_free(value);
        return -1;
    }
    object->items[object->count] = k;
    object->values[object->count++] = value;
    return 0;
}

kj_node *kj_get(const kj_node *object, const char *key) {
    if (!object || object->type != KJ_OBJECT)
        return NULL;
    for (size_t i = 0; i < object->count; i++)
        if (strcmp(object->items[i]->text, key) == 0)
            return object->values[i];
    return NULL;
}

int kj_int(const kj_node *node, int64_t *out) {
    if (!node || (node->type != KJ_NUMBER && node->type != KJ_STRING) || !node->text[0])
        return -1;
    char *stop;
    long long v = strtoll(node->text, &stop, 10);
    if (*stop != '\0')
        return -1;
    *out = v;
    return 0;
}

static char *parse_string_text(parser *ps) {
    /* ps->p is at the opening quote. \u escapes outside ASCII are kept as '?': model config
     * names that matter (tensors, parameters) are ASCII. */
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    ps->p++;
    while (ps->p < ps->end && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            if (ps->p >= ps->end)
                break;
            char e = *ps->p++;
            switch (e) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            case 'u': {
                if (ps->end - ps->p < 4) {
                    fail(ps, "truncated \\u escape");
                    free(s);
                    return NULL;
                }
                unsigned v = (unsigned)strtoul((char[]){ps->p[0], ps->p[1], ps->p[2], ps->p[3], 0},
                                               NULL, 16);
                ps->p += 4;
                c = v < 0x80 ? (char)v : '?';
                break;
            }
            default:
                c = e;
                break;
            }
        }
        if (n + 2 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) {
                free(s);
                return NULL;
            }
            s = t;
        }
        s[n++] = c;
    }
    if (ps->p >= ps->end) {
        fail(ps, "unterminated string");
        free(s);
        return NULL;
    }
    ps->p++;
    s[n] = '\0';
    return s;
}

static kj_node *parse_value(parser *ps);

static kj_node *parse_container(parser *ps, kj_type type) {
    char close = type == KJ_ARRAY ? ']' : '}';
    kj_node *n = kj_new(type);
    if (!n)
        return NULL;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return n;
    }
    for (;;) {
        skip_ws(ps);
        char *key = NULL;
        if (type == KJ_OBJECT) {
            if (ps->p >= ps->end || *ps->p != '"' || !(key = parse_string_text(ps))) {
                fail(ps, "expected a quoted key");
                goto bad;
            }
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                fail(ps, "expected ':'");
                goto bad;
            }
            ps->p++;
        }
        kj_node *v = parse_value(ps);
        if (!v) {
            free(key);
            goto bad;
        }
        if (type == KJ_OBJECT) {
            int rc = kj_set(n, key, v);
            free(key);
            if (rc != 0)
                goto bad;
        } else if (kj_push(n, v) != 0) {
            goto bad;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return n;
        }
        fail(ps, type == KJ_ARRAY ? "expected ',' or ']'" : "expected ',' or '}'");
        goto bad;
    }
bad:
    kj_free(n);
    return NULL;
}

static kj_node *parse_value(parser *ps) {
    skip_ws(ps);
    if (ps->p >= ps->end) {
        fail(ps, "unexpected end");
        return NULL;
    }
    if (++ps->depth > 64) {
        fail(ps, "nested too deeply");
        return NULL;
    }
    kj_node *n = NULL;
    char c = *ps->p;
    if (c == '{' || c == '[') {
        n = parse_container(ps, c == '{' ? KJ_OBJECT : KJ_ARRAY);
    } else if (c == '"') {
        char *s = parse_string_text(ps);
        if (s && (n = kj_new(KJ_STRING)))
            n->text = s;
        else
            free(s);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        const char *start = ps->p;
        while (ps->p < ps->end && strchr("+-.eE0123456789", *ps->p))
            ps->p++;
        if ((n = kj_new(KJ_NUMBER)) && !(n->text = strndup(start, (size_t)(ps->p - start)))) {
            free(n);
            n = NULL;
        }
    } else {
        static const struct {
            const char *word;
            kj_type type;
            int value;
        } words[] = {{"true", KJ_BOOL, 1}, {"false", KJ_BOOL, 0}, {"null", KJ_NULL, 0}};
        for (size_t i = 0; i < 3; i++) {
            size_t len = strlen(words[i].word);
            if ((size_t)(ps->end - ps->p) >= len && memcmp(ps->p, words[i].word, len) == 0) {
                ps->p += len;
                if ((n = kj_new(words[i].type)))
                    n->boolean = words[i].value;
                break;
            }
        }
        if (!n)
            fail(ps, "unexpected character");
    }
    ps->depth--;
    if (!n)
        fail(ps, "out of memory");
    return n;
}

kj_node *kj_parse(const char *text, size_t len, char *err, size_t errsz) {
    parser ps = {text, text + len, err, errsz, 0};
    if (err && errsz)
        err[0] = '\0';
    kj_node *n = parse_value(&ps);
    skip_ws(&ps);
    if (n && ps.p != ps.end) {
        fail(&ps, "text after the value");
        kj_free(n);
        return NULL;
    }
    return n;
}

typedef struct buf {
    char *s;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const char *s, size_t len) {
    if (b->oom)
        return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + len + 1 > cap)
            cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = 1;
            return;
        }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, len);
    b->n += len;
    b->s[b->n] = '\0';
}

static void put_string(buf *b, const char *s) {
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(b, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            put(b, e, 6);
        } else {
            put(b, (const char *)&c, 1);
        }
    }
    put(b, "\"", 1);
}

static void write_node(buf *b, const kj_node *n) {
    switch (n->type) {
    case KJ_NULL:
        put(b, "null", 4);
        break;
    case KJ_BOOL:
        n->boolean ? put(b, "true", 4) : put(b, "false", 5);
        break;
    case KJ_NUMBER:
        put(b, n->text, strlen(n->text));
        break;
    case KJ_STRING:
        put_string(b, n->text);
        break;
    case KJ_ARRAY:
    case KJ_OBJECT:
        put(b, n->type == KJ_ARRAY ? "[" : "{", 1);
        for (size_t i = 0; i < n->count; i++) {
            if (i)
                put(b, ",", 1);
            if (n->type == KJ_OBJECT) {
                put_string(b, n->items[i]->text);
                put(b, ":", 1);
                write_node(b, n->values[i]);
            } else {
                write_node(b, n->items[i]);
            }
        }
        put(b, n->type == KJ_ARRAY ? "]" : "}", 1);
        break;
    }
}

char *kj_write(const kj_node *node, size_t *len) {
    buf b = {0};
    write_node(&b, node);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    if (len)
        *len = b.n;
    return b.s;
}
