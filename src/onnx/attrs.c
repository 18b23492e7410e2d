/* AttributeProto -> kn_attr, and Constant nodes -> tensors. */
#include "onnx/onnx_private.h"

#include "core/alloc.h"

#include <stdio.h>
#include <string.h>

/* Old writers leave `type` unset; the field that is present says what it is. */
static int32_t attr_type(const Onnx__AttributeProto *ap) {
    if (ap->has_type && ap->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED)
        return (int32_t)ap->type;
    if (ap->has_f)
        return KN_ATTR_FLOAT;
    if (ap->has_i)
        return KN_ATTR_INT;
    if (ap->has_s)
        return KN_ATTR_STRING;
    if (ap->t != NULL)
        return KN_ATTR_TENSOR;
    if (ap->g != NULL)
        return KN_ATTR_GRAPH;
    if (ap->n_floats > 0)
        return KN_ATTR_FLOATS;
    if (ap->n_ints > 0)
        return KN_ATTR_INTS;
    if (ap->n_strings > 0)
        return KN_ATTR_STRINGS;
    if (ap->n_graphs > 0)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS;
    if (ap->n_tensors > 0)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
    if (ap->sparse_tensor != NULL)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR;
    return 0;
}

static char *dup_bytes(const ProtobufCBinaryData *b) {
    return kn_strndup(b->len > 0 ? (const char *)b->data : "", b->len);
}

void kn_onnx_attr_release(kn_attr *a) {
    kn_free(a->s);
    if (a->strings != NULL)
        for (int64_t i = 0; i < a->n; i++)
            kn_free(a->strings[i]);
    kn_free(a->strings);
    if (a->t != NULL)
        kn_free(a->t->data);
    kn_free(a->t);
    memset(a, 0, sizeof *a);
}

kiln_status kn_onnx_attr_convert(const Onnx__AttributeProto *ap, const char *base_dir,
                                 const char *label, kn_attr *a) {
    memset(a, 0, sizeof *a);
    const char *name = ap->name != NULL ? ap->name : "";
    if (name[0] == '\0')
        return kn_error(KILN_ERR_MODEL, "%s: an attribute has no name", label);
    if (ap->ref_attr_name != NULL && ap->ref_attr_name[0] != '\0')
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "%s: attribute '%s' refers to function attribute '%s'; function bodies "
                        "are not supported",
                        label, name, ap->ref_attr_name);
    a->name = (char *)name;
    a->type = attr_type(ap);
    switch (a->type) {
    case KN_ATTR_FLOAT:
        a->f = ap->f;
        return KILN_OK;
    case KN_ATTR_INT:
        a->i = ap->i;
        return KILN_OK;
    case KN_ATTR_STRING:
        a->slen = ap->s.len;
        a->s = dup_bytes(&ap->s);
        return a->s != NULL ? KILN_OK : kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    case KN_ATTR_FLOATS:
        a->n = (int64_t)ap->n_floats;
        a->floats = ap->floats;
        return KILN_OK;
    case KN_ATTR_INTS:
        a->n = (int64_t)ap->n_ints;
        a->ints = ap->ints;
        return KILN_OK;
    case KN_ATTR_STRINGS:
        a->strings = kn_calloc(ap->n_strings > 0 ? ap->n_strings : 1, sizeof(char *));
        if (a->strings == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        for (size_t i = 0; i < ap->n_strings; i++) {
            a->strings[i] = dup_bytes(&ap->strings[i]);
            a->n = (int64_t)i + 1;
            if (a->strings[i] == NULL)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
        return KILN_OK;
    case KN_ATTR_TENSOR: {
        if (ap->t == NULL)
            return kn_error(KILN_ERR_MODEL, "%s: tensor attribute '%s' holds no tensor", label,
                            name);
        char what[300];
        snprintf(what, sizeof what, "%s: attribute '%s'", label, name);
        a->t = kn_calloc(1, sizeof *a->t);
        if (a->t == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        return kn_onnx_tensor_convert(ap->t, base_dir, what, a->t);
    }
    case KN_ATTR_GRAPH:
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "%s: attribute '%s' is a subgraph; control flow (If, Loop, Scan) is not "
                        "supported",
                        label, name);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO:
        /* Optional's `type`: only the dtype it names matters to kiln, kept as an int */
        a->type = KN_ATTR_INT;
        a->i = ap->tp == NULL ? 0
               : ap->tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && ap->tp->tensor_type
                   ? ap->tp->tensor_type->elem_type
                   : KILN_DTYPE_CONTAINER;
        return KILN_OK;
    case 0:
        return kn_error(KILN_ERR_MODEL, "%s: attribute '%s' has no type and no value", label, name);
    default:
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "%s: attribute '%s' has type %d (tensors, sparse tensors or type "
                        "protos), which is not supported",
                        label, name, (int)a->type);
    }
}

kiln_status kn_onnx_constant_tensor(const Onnx__NodeProto *np, const char *base_dir,
                                    const char *label, kn_tensor *t) {
    if (np->n_attribute != 1)
        return kn_error(KILN_ERR_MODEL, "%s: a Constant needs exactly one value attribute, got %zu",
                        label, np->n_attribute);
    const Onnx__AttributeProto *ap = np->attribute[0];
    const char *name = ap->name != NULL ? ap->name : "";
    memset(t, 0, sizeof *t);
    if (strcmp(name, "sparse_value") == 0 || strcmp(name, "value_string") == 0 ||
        strcmp(name, "value_strings") == 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: Constant attribute '%s' is not supported", label,
                        name);
    if (ap->ref_attr_name != NULL && ap->ref_attr_name[0] != '\0')
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "%s: attribute '%s' refers to a function attribute; not supported", label,
                        name);
    int32_t type = attr_type(ap);
    if (strcmp(name, "value") == 0 && type == KN_ATTR_TENSOR && ap->t != NULL) {
        char what[300];
        snprintf(what, sizeof what, "%s: attribute 'value'", label);
        return kn_onnx_tensor_convert(ap->t, base_dir, what, t);
    }
    size_t n = 1, es;
    const void *src;
    if (strcmp(name, "value_float") == 0 && type == KN_ATTR_FLOAT) {
        t->dtype = KILN_DTYPE_FLOAT32;
        src = &ap->f;
    } else if (strcmp(name, "value_int") == 0 && type == KN_ATTR_INT) {
        t->dtype = KILN_DTYPE_INT64;
        src = &ap->i;
    } else if (strcmp(name, "value_floats") == 0 && type == KN_ATTR_FLOATS) {
        t->dtype = KILN_DTYPE_FLOAT32;
        t->shape.rank = 1;
        n = ap->n_floats;
        src = ap->floats;
    } else if (strcmp(name, "value_ints") == 0 && type == KN_ATTR_INTS) {
        t->dtype = KILN_DTYPE_INT64;
        t->shape.rank = 1;
        n = ap->n_ints;
        src = ap->ints;
    } else {
        return kn_error(KILN_ERR_MODEL, "%s: Constant attribute '%s' (type %d) is not a value",
                        label, name, (int)type);
    }
    t->shape.d[0] = (int64_t)n;
    es = t->dtype == KILN_DTYPE_FLOAT32 ? sizeof(float) : sizeof(int64_t);
    t->data = kn_malloc(n > 0 ? n * es : 1);
    if (t->data == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (n > 0)
        memcpy(t->data, src, n * es);
    return KILN_OK;
}
