/* A small JSON tree for Triton's model configuration: Triton hands the backend its config as
 * JSON (TRITONBACKEND_ModelConfig) and takes an auto-completed one back the same way. Numbers
 * keep their text, so nothing is lost on the way back; strings are stored decoded. */
#ifndef KILN_TRITON_CONFIG_JSON_H
#define KILN_TRITON_CONFIG_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum kj_type { KJ_NULL, KJ_BOOL, KJ_NUMBER, KJ_STRING, KJ_ARRAY, KJ_OBJECT } kj_type;

typedef struct kj_node {
    kj_type type;
    char *text; /* number text, decoded string, object member key (in members) */
    int boolean;
    struct kj_node **items;  /* array elements or object members (each member's text is its key) */
    struct kj_node **values; /* object member values, parallel to items */
    size_t count, cap;
} kj_node;

/* NULL with a message in err (size errsz) when text is not JSON. */
kj_node *kj_parse(const char *text, size_t len, char *err, size_t errsz);
void kj_free(kj_node *node);
/* The member `key` of an object, or NULL. */
kj_node *kj_get(const kj_node *object, const char *key);
/* An integer from a number or a numeric string (protobuf's JSON writes int64 as strings). */
int kj_int(const kj_node *node, int64_t *out);
kj_node *kj_new(kj_type type);
kj_node *kj_new_string(const char *s);
kj_node *kj_new_int(int64_t v);
/* Append to an array, or set (replace) an object member; the node is owned by the parent.
 * Return 0, or -1 when out of memory (the node is then freed). */
int kj_push(kj_node *array, kj_node *item);
int kj_set(kj_node *object, const char *key, kj_node *value);
/* Serialized text (malloc'ed, NUL-terminated), or NULL when out of memory. */
char *kj_write(const kj_node *node, size_t *len);

#endif
