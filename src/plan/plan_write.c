/* Plan writer: lays a kn_plan out as header, section table and sections (docs/plan-format.md).
 * Output is a pure function of the plan: strings are deduplicated in first-use order, every
 * padding byte is zero, no pointer value is ever written. */
#include "plan/plan.h"

#include "core/alloc.h"
#include "plan/plan_format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A growable byte buffer; an allocation failure is sticky and reported once at the end. */
typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom;
} wbuf;

typedef struct weight_ref {
    const void *src;
    uint64_t size;
    uint64_t offset; /* within WEIGHTS */
} weight_ref;

typedef struct writer {
    /* String table: entries in first-use order, bytes (each NUL-terminated) in `blob`. */
    wbuf blob;
    struct {
        uint32_t off, len;
    } * strs;
    uint32_t n_str;
    size_t cap_str;
    uint32_t *slots; /* open addressing: entry index + 1, 0 when empty */
    uint32_t n_slots;
    wbuf graph, profiles;
    weight_ref *weights;
    size_t n_weights, cap_weights;
    uint64_t weights_size;
} writer;

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return true;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *q = *p ? kn_realloc(*p, *cap * elem, cap2 * elem) : kn_malloc(cap2 * elem);
    if (!q)
        return false;
    *p = q;
    *cap = cap2;
    return true;
}

static void put(wbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0)
        return;
    if (!grow((void **)&b->p, &b->cap, b->len + n, 1)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u32(wbuf *b, uint32_t v) {
    put(b, &v, sizeof v);
}
static void put_i32(wbuf *b, int32_t v) {
    put(b, &v, sizeof v);
}
static void put_u64(wbuf *b, uint64_t v) {
    put(b, &v, sizeof v);
}
static void put_i64(wbuf *b, int64_t v) {
    put(b, &v, sizeof v);
}

static uint64_t align_up(uint64_t x) {
    return (x + KN_PLAN_ALIGN - 1) & ~(uint64_t)(KN_PLAN_ALIGN - 1);
}

static bool strtab_rehash(writer *w) {
    uint32_t n_slots = w->n_slots ? w->n_slots * 2 : 256;
    uint32_t *slots = kn_calloc(n_slots, sizeof *slots);
    if (!slots)
        return false;
    for (uint32_t i = 0; i < w->n_str; i++) {
        uint64_t h = XXH64(w->blob.p + w->strs[i].off, w->strs[i].len, 0);
        uint32_t j = (uint32_t)h & (n_slots - 1);
        while (slots[j])
            j = (j + 1) & (n_slots - 1);
        slots[j] = i + 1;
    }
    kn_free(w->slots);
    w->slots = slots;
    w->n_slots = n_slots;
    return true;
}

/* The string table index of s[0..len), adding it on first use. */
static kiln_status str_ref(writer *w, const char *s, size_t len, uint32_t *ref) {
    if (w->n_slots == 0 || (uint64_t)(w->n_str + 1) * 2 > w->n_slots) {
        if (!strtab_rehash(w))
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "plan writer: out of memory (string table)");
    }
    uint64_t h = XXH64(s, len, 0);
    uint32_t j = (uint32_t)h & (w->n_slots - 1);
    for (; w->slots[j]; j = (j + 1) & (w->n_slots - 1)) {
        uint32_t i = w->slots[j] - 1;
        if (w->strs[i].len == len && memcmp(w->blob.p + w->strs[i].off, s, len) == 0) {
            *ref = i;
            return KILN_OK;
        }
    }
    if (len >= UINT32_MAX || w->blob.len + len + 1 >= UINT32_MAX || w->n_str >= UINT32_MAX - 1)
        return kn_error(KILN_ERR_UNSUPPORTED, "plan string table would exceed 4 GiB");
    if (!grow((void **)&w->strs, &w->cap_str, w->n_str + 1, sizeof *w->strs))
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "plan writer: out of memory (string table)");
    w->strs[w->n_str].off = (uint32_t)w->blob.len;
    w->strs[w->n_str].len = (uint32_t)len;
    put(&w->blob, s, len);
    put(&w->blob, "", 1);
    if (w->blob.oom)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "plan writer: out of memory (string table)");
    w->slots[j] = w->n_str + 1;
    *ref = w->n_str++;
    return KILN_OK;
}

/* Write a string reference; NULL becomes KN_PLAN_NO_STRING unless the string is required. */
static kiln_status put_str(writer *w, wbuf *b, const char *s, const char *what) {
    uint32_t ref = KN_PLAN_NO_STRING;
    if (!s) {
        if (what)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: %s is NULL", what);
    } else {
        KN_TRY(str_ref(w, s, strlen(s), &ref));
    }
    put_u32(b, ref);
    return KILN_OK;
}

/* Reserve room in WEIGHTS for `size` bytes from src; returns the 64-byte aligned offset. */
static kiln_status add_weight(writer *w, const void *src, uint64_t size, uint64_t *offset) {
    size_t cap = w->cap_weights;
    if (!grow((void **)&w->weights, &cap, w->n_weights + 1, sizeof *w->weights))
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "plan writer: out of memory (weights)");
    w->cap_weights = cap;
    *offset = align_up(w->weights_size);
    w->weights[w->n_weights++] = (weight_ref){src, size, *offset};
    w->weights_size = *offset + size;
    return KILN_OK;
}

/* Byte size of a tensor of dtype and dims; refuses what a plan cannot hold. */
static kiln_status data_size(int32_t dtype, int32_t rank, const int64_t *dims, const char *what,
                             const char *name, uint64_t *size) {
    size_t esize = kn_dtype_size(dtype);
    if (esize == 0)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "plan writer: %s '%s' has dtype %s, which plans cannot store", what, name,
                        kn_dtype_name(dtype));
    kn_shape s = {.rank = rank};
    if (rank < 0 || rank > KN_MAX_RANK)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: %s '%s' has rank %d", what, name,
                        (int)rank);
    for (int i = 0; i < rank; i++)
        s.d[i] = dims[i];
    if (!kn_shape_valid(&s))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: %s '%s' has an invalid shape",
                        what, name);
    *size = (uint64_t)kn_shape_numel(&s) * esize;
    return KILN_OK;
}

static kiln_status write_value(writer *w, const kn_value *v) {
    wbuf *b = &w->graph;
    if (v->rank < -1 || v->rank > KN_MAX_RANK)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: value '%s' has rank %d",
                        v->name ? v->name : "?", (int)v->rank);
    uint32_t flags = 0;
    uint64_t offset = 0, size = 0;
    if (kn_value_is_const(v)) {
        int64_t dims[KN_MAX_RANK];
        for (int i = 0; i < v->rank; i++) {
            if (v->dims[i].sym)
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "plan writer: constant '%s' has a symbolic dim", v->name);
            dims[i] = v->dims[i].value;
        }
        KN_TRY(data_size(v->dtype, v->rank, dims, "constant", v->name, &size));
        KN_TRY(add_weight(w, v->data, size, &offset));
        flags |= KN_PLAN_VALUE_CONST;
    }
    if (v->dtype == KILN_DTYPE_CONTAINER && v->container > 0 &&
        v->container <= KILN_IO_OPTIONAL_SEQUENCE)
        flags |= (uint32_t)v->container << KN_PLAN_VALUE_KIND_SHIFT;
    KN_TRY(put_str(w, b, v->name, "a value name"));
    put_i32(b, v->dtype);
    put_i32(b, v->rank);
    put_u32(b, flags);
    put_u64(b, offset);
    put_u64(b, size);
    for (int i = 0; i < v->rank; i++) {
        int64_t d = v->dims[i].value;
        if (d < -1 || d > KN_MAX_ELEMENTS || (v->dims[i].sym && d != -1))
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: value '%s' dim %d is %lld%s",
                            v->name, i, (long long)d, v->dims[i].sym ? " with a symbol" : "");
        put_i64(b, d);
        KN_TRY(put_str(w, b, v->dims[i].sym, NULL));
        put_u32(b, 0);
    }
    return KILN_OK;
}

static kiln_status write_graph(writer *w, const kn_graph *g);

static kiln_status write_attr(writer *w, const kn_node *n, const kn_attr *a) {
    wbuf *b = &w->graph;
    KN_TRY(put_str(w, b, a->name, "an attribute name"));
    put_u32(b, (uint32_t)a->type);
    bool list = a->type == KN_ATTR_FLOATS || a->type == KN_ATTR_INTS || a->type == KN_ATTR_STRINGS;
    const void *items = a->type == KN_ATTR_FLOATS ? (const void *)a->floats
                        : a->type == KN_ATTR_INTS ? (const void *)a->ints
                                                  : (const void *)a->strings;
    if (list && (a->n < 0 || a->n > UINT32_MAX || (a->n > 0 && !items)))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "plan writer: node '%s' attribute '%s' has %lld elements", n->name, a->name,
                        (long long)a->n);
    switch (a->type) {
    case KN_ATTR_FLOAT:
        put(b, &a->f, sizeof a->f);
        break;
    case KN_ATTR_INT:
        put_i64(b, a->i);
        break;
    case KN_ATTR_STRING: {
        uint32_t ref;
        KN_TRY(str_ref(w, a->s ? a->s : "", a->s ? a->slen : 0, &ref));
        put_u32(b, ref);
        break;
    }
    case KN_ATTR_TENSOR: {
        const kn_tensor *t = a->t;
        uint64_t size = 0, offset = 0;
        if (!t)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "plan writer: node '%s' tensor attribute '%s' has no tensor", n->name,
                            a->name);
        KN_TRY(data_size(t->dtype, t->shape.rank, t->shape.d, "tensor attribute", a->name, &size));
        if (size > 0 && !t->data)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "plan writer: node '%s' tensor attribute '%s' has no data", n->name,
                            a->name);
        KN_TRY(add_weight(w, t->data, size, &offset));
        put_i32(b, t->dtype);
        put_i32(b, t->shape.rank);
        for (int i = 0; i < t->shape.rank; i++)
            put_i64(b, t->shape.d[i]);
        put_u64(b, offset);
        put_u64(b, size);
        break;
    }
    case KN_ATTR_GRAPH:
        if (a->g == NULL)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "plan writer: node '%s' subgraph attribute '%s' has no body", n->name,
                            a->name);
        put_u32(b, (uint32_t)a->g->n_outer);
        put_u32(b, 0);
        KN_TRY(write_graph(w, a->g));
        break;
    case KN_ATTR_FLOATS:
        put_u32(b, (uint32_t)a->n);
        put(b, a->floats, (size_t)a->n * sizeof(float));
        break;
    case KN_ATTR_INTS:
        put_u32(b, (uint32_t)a->n);
        put(b, a->ints, (size_t)a->n * sizeof(int64_t));
        break;
    case KN_ATTR_STRINGS:
        put_u32(b, (uint32_t)a->n);
        for (int64_t i = 0; i < a->n; i++)
            KN_TRY(put_str(w, b, a->strings[i], "a strings attribute element"));
        break;
    default:
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "plan writer: node '%s' attribute '%s' has unknown type %d", n->name,
                        a->name, (int)a->type);
    }
    return KILN_OK;
}

static kiln_status check_index(const kn_graph *g, int v, bool optional, const char *what) {
    if ((optional && v == -1) || (v >= 0 && v < g->n_values))
        return KILN_OK;
    return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: %s refers to value %d of %d", what, v,
                    g->n_values);
}

static kiln_status write_node(writer *w, const kn_graph *g, const kn_node *n) {
    wbuf *b = &w->graph;
    if (n->n_in < 0 || n->n_out < 0 || n->n_attr < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: node '%s' has negative counts",
                        n->name ? n->name : "?");
    KN_TRY(put_str(w, b, n->name, "a node name"));
    KN_TRY(put_str(w, b, n->op_type, "a node op_type"));
    KN_TRY(put_str(w, b, n->domain ? n->domain : "", NULL));
    put_i32(b, n->opset);
    put_u32(b, n->dead ? KN_PLAN_NODE_DEAD : 0);
    put_u32(b, (uint32_t)n->n_in);
    put_u32(b, (uint32_t)n->n_out);
    put_u32(b, (uint32_t)n->n_attr);
    for (int i = 0; i < n->n_in; i++) {
        KN_TRY(check_index(g, n->in[i], true, "a node input"));
        put_i32(b, n->in[i]);
    }
    for (int i = 0; i < n->n_out; i++) {
        KN_TRY(check_index(g, n->out[i], true, "a node output"));
        put_i32(b, n->out[i]);
    }
    for (int i = 0; i < n->n_attr; i++)
        KN_TRY(write_attr(w, n, &n->attr[i]));
    return KILN_OK;
}

static kiln_status write_graph(writer *w, const kn_graph *g) {
    wbuf *b = &w->graph;
    if (g->n_values < 0 || g->n_nodes < 0 || g->n_inputs < 0 || g->n_outputs < 0 || g->n_opsets < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: graph has negative counts");
    KN_TRY(put_str(w, b, g->name, NULL));
    put_u32(b, (uint32_t)g->n_values);
    put_u32(b, (uint32_t)g->n_nodes);
    put_u32(b, (uint32_t)g->n_inputs);
    put_u32(b, (uint32_t)g->n_outputs);
    put_u32(b, (uint32_t)g->n_opsets);
    put_u32(b, 0);
    put_i64(b, g->ir_version);
    for (int i = 0; i < g->n_values; i++)
        KN_TRY(write_value(w, &g->values[i]));
    for (int i = 0; i < g->n_nodes; i++)
        KN_TRY(write_node(w, g, &g->nodes[i]));
    for (int i = 0; i < g->n_inputs; i++) {
        KN_TRY(check_index(g, g->inputs[i], false, "a graph input"));
        put_i32(b, g->inputs[i]);
    }
    for (int i = 0; i < g->n_outputs; i++) {
        KN_TRY(check_index(g, g->outputs[i], false, "a graph output"));
        put_i32(b, g->outputs[i]);
    }
    for (int i = 0; i < g->n_opsets; i++) {
        const kn_opset_import *o = &g->opsets[i];
        KN_TRY(put_str(w, b, o->domain ? o->domain : "", NULL));
        put_u32(b, 0);
        put_i64(b, o->version);
    }
    return KILN_OK;
}

static kiln_status write_profiles(writer *w, const kn_plan *plan) {
    wbuf *b = &w->profiles;
    if (plan->n_profiles < 0 || (plan->n_profiles > 0 && !plan->profiles))
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: bad profile list");
    put_u32(b, (uint32_t)plan->n_profiles);
    put_i32(b, plan->threads);
    for (int i = 0; i < plan->n_profiles; i++) {
        const kn_profile *p = &plan->profiles[i];
        if (p->rank < 0 || p->rank > KN_MAX_RANK)
            return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: profile %d has rank %d", i,
                            (int)p->rank);
        KN_TRY(put_str(w, b, p->input, "a profile input name"));
        put_i32(b, p->rank);
        put(b, p->min, (size_t)p->rank * sizeof(int64_t));
        put(b, p->opt, (size_t)p->rank * sizeof(int64_t));
        put(b, p->max, (size_t)p->rank * sizeof(int64_t));
    }
    return KILN_OK;
}

static void put_at_u32(uint8_t *p, size_t off, uint32_t v) {
    memcpy(p + off, &v, sizeof v);
}
static void put_at_u64(uint8_t *p, size_t off, uint64_t v) {
    memcpy(p + off, &v, sizeof v);
}

static uint64_t target_features(const kn_plan *plan) {
    uint64_t f = plan->features;
#if defined(__x86_64__) || defined(_M_X64)
    f |= KN_PLAN_FEAT_X86_64;
#elif defined(__aarch64__)
    f |= KN_PLAN_FEAT_AARCH64;
#endif
    if (!(f & (KN_PLAN_FEAT_BACKEND_CPU | KN_PLAN_FEAT_BACKEND_CUDA)))
        f |= KN_PLAN_FEAT_BACKEND_CPU;
    return f;
}

enum { N_SECTIONS = 4 };

/* Place header, table and sections into one zeroed, 64-byte aligned buffer. */
static kiln_status assemble(writer *w, const kn_plan *plan, void **data, size_t *size) {
    static const uint32_t ids[N_SECTIONS] = {KN_PLAN_SEC_STRINGS, KN_PLAN_SEC_GRAPH,
                                             KN_PLAN_SEC_PROFILES, KN_PLAN_SEC_WEIGHTS};
    uint64_t strings_size =
        KN_PLAN_STRINGS_HEAD + (uint64_t)w->n_str * KN_PLAN_STRING_ENTRY + w->blob.len;
    uint64_t sizes[N_SECTIONS] = {strings_size, w->graph.len, w->profiles.len, w->weights_size};
    uint64_t offs[N_SECTIONS];
    uint64_t end = KN_PLAN_HEADER_SIZE + N_SECTIONS * KN_PLAN_SECTION_ENTRY_SIZE;
    for (int i = 0; i < N_SECTIONS; i++) {
        offs[i] = align_up(end);
        end = offs[i] + sizes[i];
    }
    if (end > SIZE_MAX)
        return kn_error(KILN_ERR_UNSUPPORTED, "plan of %llu bytes exceeds the address space",
                        (unsigned long long)end);
    uint8_t *p = kn_aligned_alloc((size_t)end, KN_PLAN_ALIGN);
    if (!p)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "plan writer: out of memory (%llu bytes)",
                        (unsigned long long)end);
    memset(p, 0, (size_t)end);

    uint8_t *s = p + offs[0];
    put_at_u32(s, 0, w->n_str);
    for (uint32_t i = 0; i < w->n_str; i++) {
        put_at_u32(s, KN_PLAN_STRINGS_HEAD + i * KN_PLAN_STRING_ENTRY, w->strs[i].off);
        put_at_u32(s, KN_PLAN_STRINGS_HEAD + i * KN_PLAN_STRING_ENTRY + 4, w->strs[i].len);
    }
    if (w->blob.len)
        memcpy(s + KN_PLAN_STRINGS_HEAD + (size_t)w->n_str * KN_PLAN_STRING_ENTRY, w->blob.p,
               w->blob.len);
    if (w->graph.len)
        memcpy(p + offs[1], w->graph.p, w->graph.len);
    if (w->profiles.len)
        memcpy(p + offs[2], w->profiles.p, w->profiles.len);
    for (size_t i = 0; i < w->n_weights; i++)
        if (w->weights[i].size)
            memcpy(p + offs[3] + w->weights[i].offset, w->weights[i].src,
                   (size_t)w->weights[i].size);

    memcpy(p + KN_PLAN_OFF_MAGIC, KN_PLAN_MAGIC, KN_PLAN_MAGIC_SIZE);
    put_at_u32(p, KN_PLAN_OFF_FORMAT_VERSION, KN_PLAN_FORMAT_VERSION);
    put_at_u32(p, KN_PLAN_OFF_ENDIAN, KN_PLAN_ENDIAN_MARK);
    put_at_u64(p, KN_PLAN_OFF_FILE_SIZE, end);
    put_at_u64(p, KN_PLAN_OFF_FEATURES, target_features(plan));
    char version[KN_PLAN_VERSION_SIZE] = {0};
    snprintf(version, sizeof version, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR,
             KILN_VERSION_PATCH);
    memcpy(p + KN_PLAN_OFF_KILN_VERSION, version, sizeof version);
    put_at_u32(p, KN_PLAN_OFF_SECTION_COUNT, N_SECTIONS);
    for (int i = 0; i < N_SECTIONS; i++) {
        size_t e = KN_PLAN_HEADER_SIZE + (size_t)i * KN_PLAN_SECTION_ENTRY_SIZE;
        put_at_u32(p, e + KN_PLAN_SEC_OFF_ID, ids[i]);
        put_at_u32(p, e + KN_PLAN_SEC_OFF_FLAGS, KN_PLAN_SEC_REQUIRED);
        put_at_u64(p, e + KN_PLAN_SEC_OFF_OFFSET, offs[i]);
        put_at_u64(p, e + KN_PLAN_SEC_OFF_SIZE, sizes[i]);
        put_at_u64(p, e + KN_PLAN_SEC_OFF_CHECKSUM, XXH64(p + offs[i], (size_t)sizes[i], 0));
    }
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, p, KN_PLAN_OFF_HEADER_CHECKSUM);
    XXH64_update(&st, p + KN_PLAN_HEADER_SIZE, N_SECTIONS * KN_PLAN_SECTION_ENTRY_SIZE);
    put_at_u64(p, KN_PLAN_OFF_HEADER_CHECKSUM, XXH64_digest(&st));
    *data = p;
    *size = (size_t)end;
    return KILN_OK;
}

kiln_status kn_plan_write(const kn_plan *plan, void **data, size_t *size) {
    if (!plan || !plan->graph || !data || !size)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan writer: NULL plan, graph or output");
    *data = NULL;
    *size = 0;
    writer w = {0};
    kiln_status rc = write_graph(&w, plan->graph);
    if (rc == KILN_OK)
        rc = write_profiles(&w, plan);
    if (rc == KILN_OK && (w.graph.oom || w.profiles.oom || w.blob.oom))
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "plan writer: out of memory");
    if (rc == KILN_OK)
        rc = assemble(&w, plan, data, size);
    kn_free(w.blob.p);
    kn_free(w.strs);
    kn_free(w.slots);
    kn_free(w.graph.p);
    kn_free(w.profiles.p);
    kn_free(w.weights);
    return rc;
}
