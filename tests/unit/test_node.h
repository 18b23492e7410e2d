/* A node built by hand for the kernel tests: an op with up to 12 attributes, each INTS up to 8
 * values, held in the struct itself. */
#ifndef KN_TEST_NODE_H
#define KN_TEST_NODE_H

#include "ir/graph.h"

#include <string.h>

typedef struct test_node {
    kn_node node;
    kn_attr attr[12];
    int64_t ints[12][8];
} test_node;

/* op of `domain` ("" for ONNX's), opset 17, no attributes yet. */
static inline void tn_init_domain(test_node *t, const char *domain, const char *op) {
    memset(t, 0, sizeof *t);
    t->node.name = "n";
    t->node.op_type = (char *)op;
    t->node.domain = (char *)domain;
    t->node.opset = 17;
    t->node.attr = t->attr;
}

static inline void tn_init(test_node *t, const char *op) {
    tn_init_domain(t, "", op);
}

static inline void tn_ints(test_node *t, const char *name, int n, const int64_t *v) {
    kn_attr *a = &t->attr[t->node.n_attr];
    memcpy(t->ints[t->node.n_attr], v, (size_t)n * sizeof *v);
    *a = (kn_attr){
        .name = (char *)name, .type = KN_ATTR_INTS, .n = n, .ints = t->ints[t->node.n_attr]};
    t->node.n_attr++;
}

static inline void tn_int(test_node *t, const char *name, int64_t v) {
    t->attr[t->node.n_attr++] = (kn_attr){.name = (char *)name, .type = KN_ATTR_INT, .i = v};
}

static inline void tn_float(test_node *t, const char *name, float v) {
    t->attr[t->node.n_attr++] = (kn_attr){.name = (char *)name, .type = KN_ATTR_FLOAT, .f = v};
}

static inline void tn_str(test_node *t, const char *name, const char *v) {
    t->attr[t->node.n_attr++] =
        (kn_attr){.name = (char *)name, .type = KN_ATTR_STRING, .s = (char *)v, .slen = strlen(v)};
}

#endif
