/* Plan writer and reader: round trips, determinism, and refusal of damaged plans. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "plan/plan.h"
#include "plan/plan_format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- a sample plan with every attribute type, symbolic dims and constants ---------------- */

static const float w_data[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12.5f};
static const int64_t b_data[4] = {-1, 0, INT64_MAX, INT64_MIN};
static const uint16_t h_data[4] = {0x3c00, 0xc000, 0x7bff, 0x0001}; /* 1, -2, 65504, 2^-24 */
static const uint8_t u8_data[5] = {0, 1, 127, 128, 255};
static const double d_data[1] = {3.141592653589793};
static const int32_t t_data[6] = {1, -2, 3, -4, 5, -6};

static int add_value(kn_graph *g, const char *name, int32_t dtype, int rank, const int64_t *dims,
                     const char *const *syms) {
    int v = kn_graph_add_value(g, name);
    assert_true(v >= 0);
    kn_value *val = &g->values[v];
    val->dtype = dtype;
    val->rank = rank;
    for (int d = 0; d < rank; d++) {
        val->dims[d].value = dims[d];
        if (syms && syms[d])
            val->dims[d].sym = kn_strdup(syms[d]);
    }
    return v;
}

static int add_const(kn_graph *g, const char *name, int32_t dtype, int rank, const int64_t *dims,
                     const void *data) {
    int v = kn_graph_add_value(g, name);
    assert_true(v >= 0);
    kn_tensor t = {.dtype = dtype, .shape = {.rank = rank}, .data = (void *)data};
    for (int d = 0; d < rank; d++)
        t.shape.d[d] = dims[d];
    assert_int_equal(kn_value_set_const(g, v, &t), KILN_OK);
    return v;
}

static void add_attrs(kn_graph *g, int node) {
    kn_attr a = {.name = "alpha", .type = KN_ATTR_FLOAT, .f = 1.5f};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
    a = (kn_attr){.name = "axis", .type = KN_ATTR_INT, .i = -7};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
    a = (kn_attr){.name = "mode", .type = KN_ATTR_STRING, .s = "a\0b", .slen = 3};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
    kn_tensor t = {
        .dtype = KILN_DTYPE_INT32, .shape = {.rank = 2, .d = {2, 3}}, .data = (void *)t_data};
    a = (kn_attr){.name = "value", .type = KN_ATTR_TENSOR, .t = &t};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
    kn_graph *body = kn_graph_create(); /* one enclosing-scope input passed straight out */
    assert_non_null(body);
    int bv = kn_graph_add_value(body, "outer");
    body->values[bv].dtype = KILN_DTYPE_FLOAT32;
    assert_int_equal(kn_graph_add_input(body, bv), KILN_OK);
    assert_int_equal(kn_graph_add_output(body, bv), KILN_OK);
    body->n_outer = 1;
    a = (kn_attr){.name = "body", .type = KN_ATTR_GRAPH, .g = body};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
    kn_graph_destroy(body);
    float floats[3] = {0.5f, -2.0f, NAN};
    a = (kn_attr){.name = "scales", .type = KN_ATTR_FLOATS, .n = 3, .floats = floats};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
    int64_t ints[3] = {1, -2, INT64_MAX};
    a = (kn_attr){.name = "pads", .type = KN_ATTR_INTS, .n = 3, .ints = ints};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
    char *strs[3] = {"relu", "tanh", ""};
    a = (kn_attr){.name = "acts", .type = KN_ATTR_STRINGS, .n = 3, .strings = strs};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
    a = (kn_attr){.name = "none", .type = KN_ATTR_INTS, .n = 0};
    assert_int_equal(kn_node_add_attr(g, node, &a), KILN_OK);
}

static void make_plan(kn_plan *p) {
    memset(p, 0, sizeof *p);
    kn_graph *g = kn_graph_create();
    assert_non_null(g);
    g->name = kn_strdup("sample");
    g->ir_version = 8;
    const char *xs[3] = {"batch", NULL, "seq"};
    int x = add_value(g, "x", KILN_DTYPE_FLOAT32, 3, (int64_t[]){-1, 3, -1}, xs);
    int w = add_const(g, "w", KILN_DTYPE_FLOAT32, 2, (int64_t[]){3, 4}, w_data);
    int b = add_const(g, "b", KILN_DTYPE_INT64, 1, (int64_t[]){4}, b_data);
    add_const(g, "h", KILN_DTYPE_FLOAT16, 2, (int64_t[]){2, 2}, h_data);
    add_const(g, "u8", KILN_DTYPE_UINT8, 1, (int64_t[]){5}, u8_data);
    add_const(g, "pi", KILN_DTYPE_FLOAT64, 0, NULL, d_data);
    add_const(g, "empty", KILN_DTYPE_FLOAT32, 2, (int64_t[]){0, 7}, w_data);
    const char *ys[3] = {"batch", NULL, "seq"};
    int y = add_value(g, "y", KILN_DTYPE_FLOAT32, 3, (int64_t[]){-1, 3, -1}, ys);
    int z = add_value(g, "z", KILN_DTYPE_INT64, 3, (int64_t[]){-1, 3, -1}, ys);
    int z2 = add_value(g, "z2", 0, -1, NULL, NULL);
    int dead = add_value(g, "dead_out", KILN_DTYPE_FLOAT32, 1, (int64_t[]){-1}, NULL);

    int mm = kn_graph_add_node(g, "mm", "MatMul", "", 13, 2, (int[]){x, w}, 1, (int[]){y});
    add_attrs(g, mm);
    int old = kn_graph_add_node(g, "old", "Relu", "", 14, 1, (int[]){y}, 1, (int[]){dead});
    g->nodes[old].dead = true;
    kn_graph_add_node(g, "add", "Add", "", 14, 3, (int[]){y, b, -1}, 2, (int[]){z, -1});
    kn_graph_add_node(g, "custom", "Thing", "com.example", 1, 1, (int[]){z}, 1, (int[]){z2});
    assert_int_equal(kn_graph_add_input(g, x), KILN_OK);
    assert_int_equal(kn_graph_add_output(g, z), KILN_OK);
    assert_int_equal(kn_graph_add_output(g, z2), KILN_OK);
    assert_int_equal(kn_graph_add_opset(g, "", 17), KILN_OK);
    assert_int_equal(kn_graph_add_opset(g, "com.example", 1), KILN_OK);
    p->graph = g;
    p->profiles = kn_calloc(1, sizeof(kn_profile));
    assert_non_null(p->profiles);
    p->n_profiles = 1;
    p->profiles[0] = (kn_profile){.input = kn_strdup("x"),
                                  .rank = 3,
                                  .min = {1, 3, 1},
                                  .opt = {8, 3, 128},
                                  .max = {32, 3, 512}};
    p->threads = 4;
}

static void write_plan(const kn_plan *p, uint8_t **data, size_t *size) {
    void *d = NULL;
    assert_int_equal(kn_plan_write(p, &d, size), KILN_OK);
    *data = d;
}

static void read_ok(const uint8_t *data, size_t size, kn_plan *q) {
    kiln_status rc = kn_plan_read(data, size, q);
    if (rc != KILN_OK)
        print_error("kn_plan_read: %s\n", kiln_last_error());
    assert_int_equal(rc, KILN_OK);
}

/* ---- deep comparison ---------------------------------------------------------------------- */

static void assert_str_eq(const char *a, const char *b) {
    if (!a || !b)
        assert_ptr_equal(a, b);
    else
        assert_string_equal(a, b);
}

static void assert_attr_eq(const kn_attr *a, const kn_attr *b) {
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->type, b->type);
    switch (a->type) {
    case KN_ATTR_FLOAT:
        assert_memory_equal(&a->f, &b->f, sizeof a->f);
        break;
    case KN_ATTR_INT:
        assert_int_equal(a->i, b->i);
        break;
    case KN_ATTR_STRING:
        assert_int_equal(a->slen, b->slen);
        assert_memory_equal(a->s, b->s, a->slen);
        break;
    case KN_ATTR_TENSOR:
        assert_int_equal(a->t->dtype, b->t->dtype);
        assert_true(kn_shape_equal(&a->t->shape, &b->t->shape));
        assert_memory_equal(a->t->data, b->t->data, kn_tensor_nbytes(a->t));
        break;
    case KN_ATTR_FLOATS:
        assert_int_equal(a->n, b->n);
        if (a->n)
            assert_memory_equal(a->floats, b->floats, (size_t)a->n * sizeof(float));
        break;
    case KN_ATTR_INTS:
        assert_int_equal(a->n, b->n);
        if (a->n)
            assert_memory_equal(a->ints, b->ints, (size_t)a->n * sizeof(int64_t));
        break;
    case KN_ATTR_STRINGS:
        assert_int_equal(a->n, b->n);
        for (int64_t i = 0; i < a->n; i++)
            assert_string_equal(a->strings[i], b->strings[i]);
        break;
    }
}

static void assert_graph_eq(const kn_graph *a, const kn_graph *b) {
    assert_str_eq(a->name, b->name);
    assert_int_equal(a->ir_version, b->ir_version);
    assert_int_equal(a->n_values, b->n_values);
    for (int i = 0; i < a->n_values; i++) {
        const kn_value *x = &a->values[i], *y = &b->values[i];
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->rank, y->rank);
        for (int d = 0; d < x->rank; d++) {
            assert_int_equal(x->dims[d].value, y->dims[d].value);
            assert_str_eq(x->dims[d].sym, y->dims[d].sym);
        }
        assert_int_equal(x->producer, y->producer);
        assert_int_equal(x->is_input, y->is_input);
        assert_int_equal(x->is_output, y->is_output);
        assert_int_equal(kn_value_is_const(x), kn_value_is_const(y));
        if (kn_value_is_const(x)) {
            kn_tensor t = kn_value_tensor(x);
            assert_memory_equal(x->data, y->data, kn_tensor_nbytes(&t));
        }
    }
    assert_int_equal(a->n_nodes, b->n_nodes);
    for (int i = 0; i < a->n_nodes; i++) {
        const kn_node *x = &a->nodes[i], *y = &b->nodes[i];
        assert_string_equal(x->name, y->name);
        assert_string_equal(x->op_type, y->op_type);
        assert_string_equal(x->domain, y->domain);
        assert_int_equal(x->opset, y->opset);
        assert_int_equal(x->dead, y->dead);
        assert_int_equal(x->n_in, y->n_in);
        assert_int_equal(x->n_out, y->n_out);
        assert_memory_equal(x->in, y->in, (size_t)x->n_in * sizeof(int));
        assert_memory_equal(x->out, y->out, (size_t)x->n_out * sizeof(int));
        assert_int_equal(x->n_attr, y->n_attr);
        for (int k = 0; k < x->n_attr; k++)
            assert_attr_eq(&x->attr[k], &y->attr[k]);
    }
    assert_int_equal(a->n_inputs, b->n_inputs);
    assert_memory_equal(a->inputs, b->inputs, (size_t)a->n_inputs * sizeof(int));
    assert_int_equal(a->n_outputs, b->n_outputs);
    assert_memory_equal(a->outputs, b->outputs, (size_t)a->n_outputs * sizeof(int));
    assert_int_equal(a->n_opsets, b->n_opsets);
    for (int i = 0; i < a->n_opsets; i++) {
        assert_string_equal(a->opsets[i].domain, b->opsets[i].domain);
        assert_int_equal(a->opsets[i].version, b->opsets[i].version);
    }
}

/* ---- helpers that damage plans ------------------------------------------------------------ */

static uint8_t *copy_aligned(const uint8_t *src, size_t size) {
    uint8_t *p = kn_malloc(size ? size : 1); /* 64-byte aligned */
    assert_non_null(p);
    if (size)
        memcpy(p, src, size);
    return p;
}

static uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void wr32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
}

static void wr64(uint8_t *p, uint64_t v) {
    memcpy(p, &v, 8);
}

/* Recompute every checksum so damage reaches the parsers instead of the checksum checks. */
static void reseal(uint8_t *p, size_t size) {
    uint32_t count;
    memcpy(&count, p + KN_PLAN_OFF_SECTION_COUNT, 4);
    if (size < KN_PLAN_HEADER_SIZE || count > KN_PLAN_MAX_SECTIONS ||
        KN_PLAN_HEADER_SIZE + count * KN_PLAN_SECTION_ENTRY_SIZE > size)
        return;
    for (uint32_t i = 0; i < count; i++) {
        uint8_t *e = p + KN_PLAN_HEADER_SIZE + i * KN_PLAN_SECTION_ENTRY_SIZE;
        uint64_t off = rd64(e + KN_PLAN_SEC_OFF_OFFSET), sz = rd64(e + KN_PLAN_SEC_OFF_SIZE);
        if (off <= size && sz <= size - off)
            wr64(e + KN_PLAN_SEC_OFF_CHECKSUM, XXH64(p + off, (size_t)sz, 0));
    }
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, p, KN_PLAN_OFF_HEADER_CHECKSUM);
    XXH64_update(&st, p + KN_PLAN_HEADER_SIZE, count * KN_PLAN_SECTION_ENTRY_SIZE);
    wr64(p + KN_PLAN_OFF_HEADER_CHECKSUM, XXH64_digest(&st));
}

/* A copy of a plan with one more section (id, flags, `n` bytes of 0xAB) at its end. */
static uint8_t *add_section(const uint8_t *src, size_t size, uint32_t id, uint32_t flags, size_t n,
                            size_t *out_size) {
    uint32_t count;
    memcpy(&count, src + KN_PLAN_OFF_SECTION_COUNT, 4);
    size_t shift = KN_PLAN_ALIGN; /* one more table entry pushes every section down */
    size_t extra_off = ((size + shift) + KN_PLAN_ALIGN - 1) / KN_PLAN_ALIGN * KN_PLAN_ALIGN;
    size_t total = extra_off + n;
    uint8_t *p = kn_calloc(1, total);
    assert_non_null(p);
    memcpy(p, src, KN_PLAN_HEADER_SIZE + count * KN_PLAN_SECTION_ENTRY_SIZE);
    size_t first = KN_PLAN_HEADER_SIZE + count * KN_PLAN_SECTION_ENTRY_SIZE;
    first = (first + KN_PLAN_ALIGN - 1) / KN_PLAN_ALIGN * KN_PLAN_ALIGN;
    memcpy(p + first + shift, src + first, size - first);
    for (uint32_t i = 0; i < count; i++) {
        uint8_t *e = p + KN_PLAN_HEADER_SIZE + i * KN_PLAN_SECTION_ENTRY_SIZE;
        wr64(e + KN_PLAN_SEC_OFF_OFFSET, rd64(e + KN_PLAN_SEC_OFF_OFFSET) + shift);
    }
    uint8_t *e = p + KN_PLAN_HEADER_SIZE + count * KN_PLAN_SECTION_ENTRY_SIZE;
    wr32(e + KN_PLAN_SEC_OFF_ID, id);
    wr32(e + KN_PLAN_SEC_OFF_FLAGS, flags);
    wr64(e + KN_PLAN_SEC_OFF_OFFSET, extra_off);
    wr64(e + KN_PLAN_SEC_OFF_SIZE, n);
    memset(p + extra_off, 0xAB, n);
    wr32(p + KN_PLAN_OFF_SECTION_COUNT, count + 1);
    wr64(p + KN_PLAN_OFF_FILE_SIZE, total);
    reseal(p, total);
    *out_size = total;
    return p;
}

/* A graph the reader accepted must hold only in-range indices and constants inside the plan. */
static void assert_graph_sane(const kn_graph *g, const uint8_t *base, size_t size) {
    for (int i = 0; i < g->n_values; i++) {
        const kn_value *v = &g->values[i];
        assert_true(v->rank >= -1 && v->rank <= KN_MAX_RANK);
        if (kn_value_is_const(v)) {
            kn_tensor t = kn_value_tensor(v);
            const uint8_t *d = v->data;
            assert_false(v->data_owned);
            assert_true(d >= base && d + kn_tensor_nbytes(&t) <= base + size);
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            assert_true(n->in[k] >= -1 && n->in[k] < g->n_values);
        for (int k = 0; k < n->n_out; k++)
            assert_true(n->out[k] >= -1 && n->out[k] < g->n_values);
    }
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_round_trip(void **state) {
    (void)state;
    kn_plan p, q;
    make_plan(&p);
    uint8_t *data;
    size_t size;
    write_plan(&p, &data, &size);
    assert_int_equal((uintptr_t)data % 64, 0);
    assert_memory_equal(data, "KILNPLAN", 8);
    assert_int_equal(rd64(data + KN_PLAN_OFF_FILE_SIZE), size);
    read_ok(data, size, &q);
    assert_graph_eq(p.graph, q.graph);
    assert_int_equal(q.threads, 4);
    assert_int_equal(q.n_profiles, 1);
    assert_string_equal(q.profiles[0].input, "x");
    assert_int_equal(q.profiles[0].rank, 3);
    assert_int_equal(q.profiles[0].min[2], 1);
    assert_int_equal(q.profiles[0].opt[2], 128);
    assert_int_equal(q.profiles[0].max[0], 32);
    assert_true(q.features & KN_PLAN_FEAT_BACKEND_CPU);
    /* Constants are used in place: inside the buffer, 64-byte aligned, not owned. */
    int weights_seen = 0;
    for (int i = 0; i < q.graph->n_values; i++) {
        const kn_value *v = &q.graph->values[i];
        if (!kn_value_is_const(v))
            continue;
        const uint8_t *d = v->data;
        assert_false(v->data_owned);
        assert_true(d >= data && d <= data + size);
        assert_int_equal((uintptr_t)d % 64, 0);
        weights_seen++;
    }
    assert_int_equal(weights_seen, 6);
    /* Reference values read independently of the writer. */
    const kn_value *b = &q.graph->values[kn_graph_find_value(q.graph, "b")];
    assert_int_equal(((const int64_t *)b->data)[2], INT64_MAX);
    assert_int_equal(((const int64_t *)b->data)[3], INT64_MIN);
    const kn_value *pi = &q.graph->values[kn_graph_find_value(q.graph, "pi")];
    assert_int_equal(pi->rank, 0);
    assert_true(*(const double *)pi->data == 3.141592653589793);
    const kn_attr *s = kn_node_attr(&q.graph->nodes[0], "mode");
    assert_int_equal(s->slen, 3);
    assert_memory_equal(s->s, "a\0b", 3);
    const kn_attr *t = kn_node_attr(&q.graph->nodes[0], "value");
    assert_int_equal(((const int32_t *)t->t->data)[5], -6);
    const float *fl;
    assert_int_equal(kn_attr_floats(&q.graph->nodes[0], "scales", &fl), 3);
    assert_true(isnan(fl[2]));
    assert_string_equal(q.graph->values[0].dims[2].sym, "seq");
    assert_int_equal(q.graph->values[q.graph->nodes[2].out[0]].producer, 2);
    kn_plan_clear(&q);
    kn_plan_clear(&p);
    kn_free(data);
}

static void test_deterministic(void **state) {
    (void)state;
    kn_plan p, q;
    make_plan(&p);
    uint8_t *a, *b, *c;
    size_t sa, sb, sc;
    write_plan(&p, &a, &sa);
    write_plan(&p, &b, &sb);
    assert_int_equal(sa, sb);
    assert_memory_equal(a, b, sa);
    read_ok(a, sa, &q);
    write_plan(&q, &c, &sc);
    assert_int_equal(sa, sc);
    assert_memory_equal(a, c, sa);
    kn_plan_clear(&q);
    kn_plan_clear(&p);
    kn_free(a);
    kn_free(b);
    kn_free(c);
}

static void test_truncation(void **state) {
    (void)state;
    kn_plan p, q;
    make_plan(&p);
    uint8_t *data;
    size_t size;
    write_plan(&p, &data, &size);
    char want[128];
    for (size_t len = 0; len < size; len++) {
        uint8_t *cut = copy_aligned(data, len);
        assert_int_equal(kn_plan_read(cut, len, &q), KILN_ERR_PLAN);
        assert_null(q.graph);
        if (len >= KN_PLAN_HEADER_SIZE) {
            snprintf(want, sizeof want, "plan is truncated: %zu bytes, header says %zu", len, size);
            assert_string_equal(kiln_last_error(), want);
        } else if (len < 8) {
            assert_non_null(strstr(kiln_last_error(), "plan is truncated"));
        }
        kn_free(cut);
    }
    uint8_t *longer = kn_calloc(1, size + 1);
    memcpy(longer, data, size);
    assert_int_equal(kn_plan_read(longer, size + 1, &q), KILN_ERR_PLAN);
    assert_non_null(strstr(kiln_last_error(), "trailing"));
    kn_free(longer);
    kn_plan_clear(&p);
    kn_free(data);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_bit_flips(void **state) {
    (void)state;
    kn_plan p, q;
    make_plan(&p);
    uint8_t *data;
    size_t size;
    write_plan(&p, &data, &size);
    uint8_t *buf = copy_aligned(data, size);
    /* Every single-bit flip anywhere is caught (checksums, zero padding, header checks). */
    for (size_t bit = 0; bit < size * 8; bit++) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_int_equal(kn_plan_read(buf, size, &q), KILN_ERR_PLAN);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    /* With checksums recomputed the damage reaches the parsers: refused, or a sane graph. */
    int accepted = 0, refused = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(buf, data, size);
        int flips = 1 + (int)(rng() % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(rng() % size);
            if (iter % 4 == 3)
                buf[at] = (uint8_t)rng(); /* whole byte */
            else
                buf[at] ^= (uint8_t)(1u << (rng() % 8));
        }
        reseal(buf, size);
        kiln_status rc = kn_plan_read(buf, size, &q);
        if (rc == KILN_OK) {
            assert_graph_sane(q.graph, buf, size);
            void *again;
            size_t again_size;
            assert_int_equal(kn_plan_write(&q, &again, &again_size), KILN_OK);
            kn_free(again);
            kn_plan_clear(&q);
            accepted++;
        } else {
            assert_int_equal(rc, KILN_ERR_PLAN);
            assert_true(strncmp(kiln_last_error(), "plan", 4) == 0 ||
                        strncmp(kiln_last_error(), "not a kiln plan", 15) == 0);
            refused++;
        }
    }
    print_message("resealed corruption: %d accepted as valid graphs, %d refused\n", accepted,
                  refused);
    assert_true(refused > 0);
    kn_free(buf);
    kn_plan_clear(&p);
    kn_free(data);
}

static void test_messages(void **state) {
    (void)state;
    kn_plan p, q;
    make_plan(&p);
    uint8_t *data;
    size_t size;
    write_plan(&p, &data, &size);
    uint8_t *buf = copy_aligned(data, size);

    wr32(buf + KN_PLAN_OFF_FORMAT_VERSION, 3);
    reseal(buf, size);
    assert_int_equal(kn_plan_read(buf, size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(), "plan format version 3 (made by kiln 0.1.0) is not "
                                           "supported by this kiln 0.1.0 (reads version 2)");
    wr32(buf + KN_PLAN_OFF_FORMAT_VERSION, 1);
    reseal(buf, size);
    assert_int_equal(kn_plan_read(buf, size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(),
                        "plan format version 1 was built by an older kiln (0.1.0): rebuild the "
                        "plan from its model with this kiln 0.1.0 (format 2)");

    memcpy(buf, data, size);
    uint64_t graph_off =
        rd64(buf + KN_PLAN_HEADER_SIZE + KN_PLAN_SECTION_ENTRY_SIZE + KN_PLAN_SEC_OFF_OFFSET);
    buf[graph_off + 5] ^= 0x10;
    assert_int_equal(kn_plan_read(buf, size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(), "plan section GRAPH checksum mismatch (corrupted)");

    memcpy(buf, data, size);
    buf[20] ^= 1;
    assert_int_equal(kn_plan_read(buf, size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(), "plan header checksum mismatch (corrupted)");

    memcpy(buf, data, size);
    buf[0] = 'X';
    assert_int_equal(kn_plan_read(buf, size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(), "not a kiln plan (bad magic)");

    assert_int_equal(kn_plan_read(data + 1, size - 1, &q), KILN_ERR_INVALID_ARGUMENT);
    kn_free(buf);
    kn_plan_clear(&p);
    kn_free(data);
}

static void test_features(void **state) {
    (void)state;
    kn_plan p, q;
    make_plan(&p);
    uint8_t *data;
    size_t size;
    p.features = KN_PLAN_FEAT_BACKEND_CUDA;
    write_plan(&p, &data, &size);
    assert_int_equal(kn_plan_read(data, size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(), "plan needs the CUDA backend, which this kiln lacks");
    kn_free(data);

    p.features = UINT64_C(1) << 50;
    write_plan(&p, &data, &size);
    assert_int_equal(kn_plan_read(data, size, &q), KILN_ERR_PLAN);
    assert_non_null(strstr(kiln_last_error(), "0x4000000000000"));
    kn_free(data);

    uint64_t host = kn_plan_host_features();
    p.features = KN_PLAN_FEAT_AVX512F;
    write_plan(&p, &data, &size);
    if (host & KN_PLAN_FEAT_AVX512F) {
        read_ok(data, size, &q);
        kn_plan_clear(&q);
    } else {
        assert_int_equal(kn_plan_read(data, size, &q), KILN_ERR_PLAN);
        assert_string_equal(kiln_last_error(),
                            "plan needs CPU feature AVX-512F, which this CPU lacks");
    }
    kn_free(data);
    kn_plan_clear(&p);
}

static void test_unknown_sections(void **state) {
    (void)state;
    kn_plan p, q;
    make_plan(&p);
    uint8_t *data, *ext;
    size_t size, ext_size;
    write_plan(&p, &data, &size);

    ext = add_section(data, size, 99, 0, 100, &ext_size);
    read_ok(ext, ext_size, &q);
    assert_graph_eq(p.graph, q.graph);
    kn_plan_clear(&q);
    kn_free(ext);

    ext = add_section(data, size, KN_PLAN_SEC_PLUGINS, 0, 10, &ext_size);
    read_ok(ext, ext_size, &q);
    kn_plan_clear(&q);
    kn_free(ext);

    ext = add_section(data, size, 99, KN_PLAN_SEC_REQUIRED, 100, &ext_size);
    assert_int_equal(kn_plan_read(ext, ext_size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(), "plan needs section 99, which this kiln cannot read "
                                           "(made by a newer kiln?)");
    kn_free(ext);

    ext = add_section(data, size, KN_PLAN_SEC_GRAPH, KN_PLAN_SEC_REQUIRED, 8, &ext_size);
    assert_int_equal(kn_plan_read(ext, ext_size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(), "plan has two GRAPH sections");
    kn_free(ext);
    kn_plan_clear(&p);
    kn_free(data);
}

static void test_writer_refuses(void **state) {
    (void)state;
    kn_plan p;
    make_plan(&p);
    void *data = NULL;
    size_t size;
    kn_value *w = &p.graph->values[kn_graph_find_value(p.graph, "w")];
    w->dtype = KILN_DTYPE_UNDEFINED + 99; /* no dtype kiln has */
    assert_int_equal(kn_plan_write(&p, &data, &size), KILN_ERR_UNSUPPORTED);
    assert_null(data);
    w->dtype = KILN_DTYPE_FLOAT32;
    p.graph->nodes[0].in[0] = 1000;
    assert_int_equal(kn_plan_write(&p, &data, &size), KILN_ERR_INVALID_ARGUMENT);
    p.graph->nodes[0].in[0] = 0;
    assert_int_equal(kn_plan_write(&p, &data, &size), KILN_OK);
    kn_free(data);
    kn_plan_clear(&p);
}

/* The reader refuses graphs the runtime could not run even when every checksum is right. */
static void test_semantic_checks(void **state) {
    (void)state;
    kn_plan p, q;
    uint8_t *data;
    size_t size;

    make_plan(&p);
    kn_node *add = &p.graph->nodes[2];
    int z = add->out[0];
    add->out[0] = kn_graph_find_value(p.graph, "w"); /* writes a constant */
    write_plan(&p, &data, &size);
    assert_int_equal(kn_plan_read(data, size, &q), KILN_ERR_PLAN);
    assert_non_null(strstr(kiln_last_error(), "writes value 'w'"));
    kn_free(data);
    add->out[0] = z;

    int mm_in = p.graph->nodes[0].in[0];
    p.graph->nodes[0].in[0] = kn_graph_find_value(p.graph, "z"); /* read before produced */
    write_plan(&p, &data, &size);
    assert_int_equal(kn_plan_read(data, size, &q), KILN_ERR_PLAN);
    assert_string_equal(kiln_last_error(), "plan GRAPH section, node 0 'mm': reads value 'z' "
                                           "before any node produces it");
    kn_free(data);
    p.graph->nodes[0].in[0] = mm_in;

    kn_free(p.graph->values[1].name);
    p.graph->values[1].name = kn_strdup("x");
    write_plan(&p, &data, &size);
    assert_int_equal(kn_plan_read(data, size, &q), KILN_ERR_PLAN);
    assert_non_null(strstr(kiln_last_error(), "value name 'x' is defined twice"));
    kn_free(data);
    kn_plan_clear(&p);
}

static void test_out_of_memory(void **state) {
    (void)state;
    kn_plan p, q;
    make_plan(&p);
    uint8_t *data;
    size_t size;
    write_plan(&p, &data, &size);
    int failures = 0;
    for (long n = 1;; n++) {
        void *out = NULL;
        size_t out_size;
        kn_alloc_fail_after(n);
        kiln_status rc = kn_plan_write(&p, &out, &out_size);
        kn_alloc_fail_after(0);
        if (rc == KILN_OK) {
            kn_free(out);
            break;
        }
        assert_int_equal(rc, KILN_ERR_OUT_OF_MEMORY);
        failures++;
    }
    for (long n = 1;; n++) {
        kn_alloc_fail_after(n);
        kiln_status rc = kn_plan_read(data, size, &q);
        kn_alloc_fail_after(0);
        if (rc == KILN_OK) {
            kn_plan_clear(&q);
            break;
        }
        assert_int_equal(rc, KILN_ERR_OUT_OF_MEMORY);
        assert_null(q.graph);
        failures++;
    }
    assert_true(failures > 10);
    kn_plan_clear(&p);
    kn_free(data);
}

/* A long chain: no quadratic step in writer or reader, names deduplicated in the table. */
static void test_large_graph(void **state) {
    (void)state;
    enum { N = 5000 };
    kn_plan p = {0}, q;
    kn_graph *g = kn_graph_create();
    assert_non_null(g);
    float *w = kn_calloc(4096, sizeof(float));
    assert_non_null(w);
    for (int i = 0; i < 4096; i++)
        w[i] = (float)i * 0.25f;
    int prev = add_value(g, "in", KILN_DTYPE_FLOAT32, 1, (int64_t[]){4096}, NULL);
    assert_int_equal(kn_graph_add_input(g, prev), KILN_OK);
    int wv = add_const(g, "w", KILN_DTYPE_FLOAT32, 1, (int64_t[]){4096}, w);
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "t%d", i);
        int v = add_value(g, name, KILN_DTYPE_FLOAT32, 1, (int64_t[]){4096}, NULL);
        snprintf(name, sizeof name, "n%d", i);
        int node = kn_graph_add_node(g, name, i % 2 ? "Relu" : "Add", "", 17, i % 2 ? 1 : 2,
                                     (int[]){prev, wv}, 1, (int[]){v});
        assert_true(node >= 0);
        prev = v;
    }
    assert_int_equal(kn_graph_add_output(g, prev), KILN_OK);
    p.graph = g;
    uint8_t *data, *again;
    size_t size, again_size;
    write_plan(&p, &data, &size);
    read_ok(data, size, &q);
    assert_graph_eq(p.graph, q.graph);
    assert_memory_equal(q.graph->values[wv].data, w, 4096 * sizeof(float));
    write_plan(&q, &again, &again_size);
    assert_int_equal(size, again_size);
    assert_memory_equal(data, again, size);
    kn_plan_clear(&q);
    kn_plan_clear(&p);
    kn_free(w);
    kn_free(data);
    kn_free(again);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_truncation),       cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_messages),         cmocka_unit_test(test_features),
        cmocka_unit_test(test_unknown_sections), cmocka_unit_test(test_writer_refuses),
        cmocka_unit_test(test_semantic_checks),  cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_large_graph),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
