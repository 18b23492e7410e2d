#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "core/strings.h"
#include "core/fileio.h"
#include "onnx/onnx.pb-c.h"
#include "onnx/onnx_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- building ModelProtos by hand ---------------------------------------------------------
 * Everything is allocated from a test arena and released at once by arena_free(). Repeated
 * fields get a fixed capacity (CAP), plenty for these tiny models. */

#define CAP 32
static void *arena[4096];
static int n_arena;

static void *A(size_t n) {
    void *p = calloc(1, n);
    assert_non_null(p);
    assert_true(n_arena < (int)(sizeof arena / sizeof arena[0]));
    arena[n_arena++] = p;
    return p;
}

static void arena_free(void) {
    while (n_arena > 0)
        free(arena[--n_arena]);
}

static char *S(const char *s) {
    char *p = A(strlen(s) + 1);
    strcpy(p, s);
    return p;
}

#define PUSH(arr, n, item)                                                                         \
    do {                                                                                           \
        if ((arr) == NULL)                                                                         \
            (arr) = A(CAP * sizeof *(arr));                                                        \
        assert_true((n) < CAP);                                                                    \
        (arr)[(n)++] = (item);                                                                     \
    } while (0)

static Onnx__ModelProto *model_new(int64_t opset) {
    Onnx__ModelProto *m = A(sizeof *m);
    onnx__model_proto__init(m);
    m->has_ir_version = 1;
    m->ir_version = 8;
    m->graph = A(sizeof *m->graph);
    onnx__graph_proto__init(m->graph);
    m->graph->name = S("g");
    if (opset > 0) {
        Onnx__OperatorSetIdProto *o = A(sizeof *o);
        onnx__operator_set_id_proto__init(o);
        o->domain = S("");
        o->has_version = 1;
        o->version = opset;
        PUSH(m->opset_import, m->n_opset_import, o);
    }
    return m;
}

static void add_opset(Onnx__ModelProto *m, const char *domain, int64_t version) {
    Onnx__OperatorSetIdProto *o = A(sizeof *o);
    onnx__operator_set_id_proto__init(o);
    o->domain = S(domain);
    o->has_version = 1;
    o->version = version;
    PUSH(m->opset_import, m->n_opset_import, o);
}

/* ins/outs: comma-separated names; "" entries are kept (omitted optionals). */
static void split_names(const char *list, char ***arr, size_t *n) {
    *n = 0;
    if (list == NULL)
        return;
    char *copy = S(list);
    for (char *p = copy;;) {
        char *comma = strchr(p, ',');
        if (comma != NULL)
            *comma = '\0';
        PUSH(*arr, *n, p);
        if (comma == NULL)
            break;
        p = comma + 1;
    }
}

static Onnx__NodeProto *add_node(Onnx__GraphProto *g, const char *op, const char *name,
                                 const char *ins, const char *outs) {
    Onnx__NodeProto *n = A(sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = S(op);
    n->name = name ? S(name) : NULL;
    split_names(ins, &n->input, &n->n_input);
    split_names(outs, &n->output, &n->n_output);
    PUSH(g->node, g->n_node, n);
    return n;
}

static Onnx__AttributeProto *add_attr(Onnx__NodeProto *n, const char *name, int type) {
    Onnx__AttributeProto *a = A(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = S(name);
    a->has_type = 1;
    a->type = type;
    PUSH(n->attribute, n->n_attribute, a);
    return a;
}

static void attr_i(Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = add_attr(n, name, KN_ATTR_INT);
    a->has_i = 1;
    a->i = v;
}

static void attr_f(Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = add_attr(n, name, KN_ATTR_FLOAT);
    a->has_f = 1;
    a->f = v;
}

static Onnx__TensorProto *tensor(const char *name, int dtype, int rank, const int64_t *dims) {
    Onnx__TensorProto *t = A(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = name ? S(name) : NULL;
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)rank;
    t->dims = A(sizeof(int64_t) * (size_t)(rank + 1));
    if (rank > 0)
        memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
    return t;
}

static void set_raw(Onnx__TensorProto *t, const void *data, size_t n) {
    t->has_raw_data = 1;
    t->raw_data.len = n;
    t->raw_data.data = A(n + 1);
    memcpy(t->raw_data.data, data, n);
}

static Onnx__TensorProto *f32_raw(const char *name, int rank, const int64_t *dims, const float *v,
                                  size_t n) {
    Onnx__TensorProto *t = tensor(name, KILN_DTYPE_FLOAT32, rank, dims);
    set_raw(t, v, n * sizeof(float));
    return t;
}

static Onnx__TypeProto *tensor_type(int elem, int rank, const char *const *dims) {
    Onnx__TypeProto *tp = A(sizeof *tp);
    onnx__type_proto__init(tp);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = A(sizeof *tp->tensor_type);
    onnx__type_proto__tensor__init(tp->tensor_type);
    tp->tensor_type->has_elem_type = 1;
    tp->tensor_type->elem_type = elem;
    if (rank < 0)
        return tp;
    Onnx__TensorShapeProto *sh = A(sizeof *sh);
    onnx__tensor_shape_proto__init(sh);
    for (int i = 0; i < rank; i++) {
        Onnx__TensorShapeProto__Dimension *d = A(sizeof *d);
        onnx__tensor_shape_proto__dimension__init(d);
        /* "7": dim_value, "?": neither, anything else: dim_param */
        if (dims[i][0] == '-' || (dims[i][0] >= '0' && dims[i][0] <= '9')) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = strtoll(dims[i], NULL, 10);
        } else if (strcmp(dims[i], "?") != 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = S(dims[i]);
        }
        PUSH(sh->dim, sh->n_dim, d);
    }
    tp->tensor_type->shape = sh;
    return tp;
}

static Onnx__ValueInfoProto *value_info(const char *name, int elem, int rank,
                                        const char *const *dims) {
    Onnx__ValueInfoProto *vi = A(sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = S(name);
    vi->type = tensor_type(elem, rank, dims);
    return vi;
}

static void add_input(Onnx__GraphProto *g, const char *name, int elem, int rank,
                      const char *const *dims) {
    PUSH(g->input, g->n_input, value_info(name, elem, rank, dims));
}

static void add_output(Onnx__GraphProto *g, const char *name, int elem) {
    PUSH(g->output, g->n_output, value_info(name, elem, -1, NULL));
}

static uint8_t *pack(const Onnx__ModelProto *m, size_t *size) {
    *size = onnx__model_proto__get_packed_size(m);
    uint8_t *buf = A(*size + 1);
    assert_int_equal(onnx__model_proto__pack(m, buf), *size);
    return buf;
}

static kiln_status import(const Onnx__ModelProto *m, const char *base_dir, kn_graph **g) {
    size_t size;
    uint8_t *buf = pack(m, &size);
    return kn_onnx_import(buf, size, base_dir, g);
}

static void assert_error(kiln_status got, kiln_status want, const char *a, const char *b) {
    if (got != want)
        fail_msg("status %d, wanted %d: %s", (int)got, (int)want, kiln_last_error());
    if (a != NULL && strstr(kiln_last_error(), a) == NULL)
        fail_msg("'%s' not in: %s", a, kiln_last_error());
    if (b != NULL && strstr(kiln_last_error(), b) == NULL)
        fail_msg("'%s' not in: %s", b, kiln_last_error());
}

static int find_node(const kn_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0)
            return i;
    return -1;
}

/* y = Relu(Add(x, W)), x: float [N, 3], W: raw initializer [3]. */
static const float W3[3] = {1.0f, -2.0f, 0.5f};

static Onnx__ModelProto *small_model(void) {
    Onnx__ModelProto *m = model_new(13);
    Onnx__GraphProto *g = m->graph;
    PUSH(g->initializer, g->n_initializer, f32_raw("W", 1, (int64_t[]){3}, W3, 3));
    add_input(g, "x", KILN_DTYPE_FLOAT32, 2, (const char *[]){"N", "3"});
    add_node(g, "Add", "add", "x,W", "s");
    Onnx__NodeProto *r = add_node(g, "Relu", NULL, "s", "y");
    attr_i(r, "unused", 4);
    add_output(g, "y", KILN_DTYPE_FLOAT32);
    return m;
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_small_model(void **state) {
    (void)state;
    kn_graph *g;
    assert_int_equal(import(small_model(), NULL, &g), KILN_OK);
    assert_int_equal(g->n_nodes, 2);
    assert_int_equal(g->n_inputs, 1);
    assert_int_equal(g->n_outputs, 1);
    assert_int_equal(g->ir_version, 8);
    assert_int_equal(kn_graph_opset(g, ""), 13);
    const kn_value *x = &g->values[g->inputs[0]];
    assert_string_equal(x->name, "x");
    assert_true(x->is_input);
    assert_int_equal(x->dtype, KILN_DTYPE_FLOAT32);
    assert_int_equal(x->rank, 2);
    assert_int_equal(x->dims[0].value, -1);
    assert_string_equal(x->dims[0].sym, "N");
    assert_int_equal(x->dims[1].value, 3);
    assert_null(x->dims[1].sym);
    int w = kn_graph_find_value(g, "W");
    assert_true(kn_value_is_const(&g->values[w]));
    assert_false(g->values[w].is_input);
    assert_memory_equal(g->values[w].data, W3, sizeof W3);
    const kn_node *add = &g->nodes[find_node(g, "add")];
    assert_string_equal(add->op_type, "Add");
    assert_string_equal(add->domain, "");
    assert_int_equal(add->opset, 13);
    assert_int_equal(add->in[0], g->inputs[0]);
    assert_int_equal(add->in[1], w);
    int relu = find_node(g, "Relu_1"); /* generated from op_type and index */
    assert_true(relu > add - g->nodes);
    assert_int_equal(kn_attr_int(&g->nodes[relu], "unused", 0), 4);
    const kn_value *y = &g->values[g->outputs[0]];
    assert_string_equal(y->name, "y");
    assert_true(y->is_output);
    assert_int_equal(y->producer, relu);
    kn_graph_destroy(g);
    arena_free();
}

static void test_typed_initializers(void **state) {
    (void)state;
    Onnx__ModelProto *m = model_new(13);
    Onnx__GraphProto *g = m->graph;
    struct {
        const char *name;
        int dtype;
    } cases[] = {{"i8", KILN_DTYPE_INT8},       {"u8", KILN_DTYPE_UINT8},
                 {"i16", KILN_DTYPE_INT16},     {"u16", KILN_DTYPE_UINT16},
                 {"b", KILN_DTYPE_BOOL},        {"f16", KILN_DTYPE_FLOAT16},
                 {"bf16", KILN_DTYPE_BFLOAT16}, {"i32", KILN_DTYPE_INT32}};
    int32_t ivals[3] = {-1, 0, 200}, hvals[3] = {0x3C00, 0xC000, 0x3800};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Onnx__TensorProto *t = tensor(cases[c].name, cases[c].dtype, 1, (int64_t[]){3});
        t->n_int32_data = 3;
        t->int32_data = ivals;
        if (cases[c].dtype == KILN_DTYPE_FLOAT16 || cases[c].dtype == KILN_DTYPE_BFLOAT16)
            t->int32_data = hvals;
        PUSH(g->initializer, g->n_initializer, t);
    }
    Onnx__TensorProto *t = tensor("f32", KILN_DTYPE_FLOAT32, 2, (int64_t[]){1, 2});
    t->n_float_data = 2;
    t->float_data = (float[]){2.5f, -1.0f};
    PUSH(g->initializer, g->n_initializer, t);
    t = tensor("i64", KILN_DTYPE_INT64, 1, (int64_t[]){2});
    t->n_int64_data = 2;
    t->int64_data = (int64_t[]){-5, (int64_t)1 << 40};
    PUSH(g->initializer, g->n_initializer, t);
    t = tensor("f64", KILN_DTYPE_FLOAT64, 0, NULL);
    t->n_double_data = 1;
    t->double_data = (double[]){0.125};
    PUSH(g->initializer, g->n_initializer, t);
    t = tensor("u32", KILN_DTYPE_UINT32, 1, (int64_t[]){2});
    t->n_uint64_data = 2;
    t->uint64_data = (uint64_t[]){4000000000u, 3};
    PUSH(g->initializer, g->n_initializer, t);
    t = tensor("u64", KILN_DTYPE_UINT64, 1, (int64_t[]){1});
    t->n_uint64_data = 1;
    t->uint64_data = (uint64_t[]){UINT64_MAX};
    PUSH(g->initializer, g->n_initializer, t);
    t = tensor("empty", KILN_DTYPE_FLOAT32, 2, (int64_t[]){0, 4});
    PUSH(g->initializer, g->n_initializer, t);
    add_node(g, "Identity", NULL, "i8", "out");
    add_output(g, "out", KILN_DTYPE_INT8);

    kn_graph *kg;
    assert_int_equal(import(m, NULL, &kg), KILN_OK);
#define VAL(n) (&kg->values[kn_graph_find_value(kg, n)])
    assert_memory_equal(VAL("i8")->data, ((int8_t[]){-1, 0, (int8_t)200}), 3);
    assert_memory_equal(VAL("u8")->data, ((uint8_t[]){255, 0, 200}), 3);
    assert_memory_equal(VAL("i16")->data, ((int16_t[]){-1, 0, 200}), 6);
    assert_memory_equal(VAL("u16")->data, ((uint16_t[]){65535, 0, 200}), 6);
    assert_memory_equal(VAL("b")->data, ((uint8_t[]){1, 0, 1}), 3);
    assert_memory_equal(VAL("i32")->data, ivals, 12);
    const uint16_t *h = VAL("f16")->data;
    assert_true(kn_half_to_float(h[0]) == 1.0f && kn_half_to_float(h[1]) == -2.0f &&
                kn_half_to_float(h[2]) == 0.5f);
    assert_int_equal(VAL("bf16")->dtype, KILN_DTYPE_BFLOAT16);
    assert_memory_equal(VAL("bf16")->data, ((uint16_t[]){0x3C00, 0xC000, 0x3800}), 6);
    assert_memory_equal(VAL("f32")->data, ((float[]){2.5f, -1.0f}), 8);
    assert_int_equal(VAL("f32")->rank, 2);
    assert_memory_equal(VAL("i64")->data, ((int64_t[]){-5, (int64_t)1 << 40}), 16);
    assert_int_equal(VAL("f64")->rank, 0);
    assert_true(*(double *)VAL("f64")->data == 0.125);
    assert_memory_equal(VAL("u32")->data, ((uint32_t[]){4000000000u, 3}), 8);
    assert_true(*(uint64_t *)VAL("u64")->data == UINT64_MAX);
    assert_true(kn_value_is_const(VAL("empty")));
    assert_int_equal(VAL("empty")->dims[0].value, 0);
#undef VAL
    kn_graph_destroy(kg);
    arena_free();
}

static void test_initializer_errors(void **state) {
    (void)state;
    kn_graph *g;
    /* raw_data of the wrong length */
    Onnx__ModelProto *m = small_model();
    m->graph->initializer[0]->raw_data.len = 8;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "initializer 'W'", "raw_data has 8 bytes");
    arena_free();
    /* typed field with the wrong count */
    m = small_model();
    Onnx__TensorProto *t = m->graph->initializer[0];
    t->has_raw_data = 0;
    t->n_float_data = 2;
    t->float_data = (float[]){1, 2};
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "initializer 'W'", "2 values");
    arena_free();
    /* no data at all */
    m = small_model();
    m->graph->initializer[0]->has_raw_data = 0;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "initializer 'W'", "0 values");
    arena_free();
    /* negative and absurd dims */
    m = small_model();
    m->graph->initializer[0]->dims[0] = -3;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "initializer 'W'", "negative");
    arena_free();
    m = small_model();
    t = tensor("big", KILN_DTYPE_FLOAT32, 3, (int64_t[]){1 << 20, 1 << 20, 1 << 20});
    PUSH(m->graph->initializer, m->graph->n_initializer, t);
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "initializer 'big'", "elements");
    arena_free();
    /* strings: string_data must match the dims and raw_data is refused; segments, unsupported
     * dtype, duplicates */
    m = small_model();
    t = tensor("s", KILN_DTYPE_STRING, 0, NULL);
    PUSH(m->graph->initializer, m->graph->n_initializer, t);
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "initializer 's'", "holds 0 strings");
    arena_free();
    m = small_model();
    t = tensor("s", KILN_DTYPE_STRING, 1, (int64_t[]){2});
    set_raw(t, "ab", 2);
    PUSH(m->graph->initializer, m->graph->n_initializer, t);
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "initializer 's'", "string_data");
    arena_free();
    m = small_model();
    t = tensor("names", KILN_DTYPE_STRING, 1, (int64_t[]){2});
    t->n_string_data = 2;
    t->string_data = A(2 * sizeof *t->string_data);
    t->string_data[0] = (ProtobufCBinaryData){3, (uint8_t *)S("abc")};
    t->string_data[1] = (ProtobufCBinaryData){0, (uint8_t *)S("")};
    PUSH(m->graph->initializer, m->graph->n_initializer, t);
    assert_int_equal(import(m, NULL, &g), KILN_OK);
    const kn_value *sv = &g->values[kn_graph_find_value(g, "names")];
    assert_int_equal(sv->dtype, KILN_DTYPE_STRING);
    kn_tensor st = {
        .dtype = sv->dtype, .shape = {.rank = 1, .d = {sv->dims[0].value}}, .data = sv->data};
    kn_strings ss;
    assert_int_equal(kn_strings_open(&st, "names", &ss), KILN_OK);
    assert_int_equal(ss.count, 2);
    assert_true(kn_str_eq(kn_strings_at(&ss, 0), (kn_str){"abc", 3}));
    assert_int_equal(kn_strings_at(&ss, 1).n, 0);
    kn_graph_destroy(g);
    arena_free();
    m = small_model();
    t = m->graph->initializer[0];
    t->segment = A(sizeof *t->segment);
    onnx__tensor_proto__segment__init(t->segment);
    assert_error(import(m, NULL, &g), KILN_ERR_UNSUPPORTED, "initializer 'W'", "segment");
    arena_free();
    m = small_model();
    m->graph->initializer[0]->data_type = 14; /* complex64 */
    assert_error(import(m, NULL, &g), KILN_ERR_UNSUPPORTED, "initializer 'W'", "14");
    arena_free();
    m = small_model();
    PUSH(m->graph->initializer, m->graph->n_initializer, m->graph->initializer[0]);
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "initializer 'W'", "twice");
    arena_free();
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void set_external(Onnx__TensorProto *t, const char *loc, const char *off, const char *len) {
    t->has_raw_data = 0;
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    const char *kv[3][2] = {{"location", loc}, {"offset", off}, {"length", len}};
    for (int i = 0; i < 3; i++) {
        if (kv[i][1] == NULL)
            continue;
        Onnx__StringStringEntryProto *e = A(sizeof *e);
        onnx__string_string_entry_proto__init(e);
        e->key = S(kv[i][0]);
        e->value = S(kv[i][1]);
        PUSH(t->external_data, t->n_external_data, e);
    }
}

static void test_external_data(void **state) {
    (void)state;
    char dir[] = "/tmp/kiln_onnx_ext_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[300];
    snprintf(path, sizeof path, "%s/w.bin", dir);
    unsigned char blob[64] = {0};
    memcpy(blob + 16, W3, sizeof W3);
    write_file(path, blob, sizeof blob);

    struct {
        const char *loc, *off, *len;
        kiln_status want;
        const char *msg;
    } cases[] = {
        {"w.bin", "16", "12", KILN_OK, NULL},
        {"./w.bin", "16", NULL, KILN_OK, NULL},
        {"w.bin", "60", "12", KILN_ERR_MODEL, "outside"},
        {"w.bin", "16", "8", KILN_ERR_MODEL, "length 8"},
        {"w.bin", "x1", "12", KILN_ERR_MODEL, "offset"},
        {"w.bin", "18446744073709551615", "12", KILN_ERR_MODEL, "outside"},
        {"../w.bin", "16", "12", KILN_ERR_MODEL, "relative path inside"},
        {"sub/../../w.bin", "16", "12", KILN_ERR_MODEL, "relative path inside"},
        {path, "16", "12", KILN_ERR_MODEL, "relative path inside"},
        {"nope.bin", "16", "12", KILN_ERR_IO, "nope.bin"},
        {"", "16", "12", KILN_ERR_MODEL, "no location"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Onnx__ModelProto *m = small_model();
        set_external(m->graph->initializer[0], cases[c].loc, cases[c].off, cases[c].len);
        kn_graph *g;
        kiln_status rc = import(m, dir, &g);
        assert_error(rc, cases[c].want, cases[c].want == KILN_OK ? NULL : "initializer 'W'",
                     cases[c].msg);
        if (rc == KILN_OK) {
            assert_memory_equal(g->values[kn_graph_find_value(g, "W")].data, W3, sizeof W3);
            kn_graph_destroy(g);
        }
        arena_free();
    }
    unlink(path);
    rmdir(dir);

    /* A model saved by the onnx package with its weights in a side file. */
    char model[300];
    snprintf(model, sizeof model, "%s/tests/unit/data/onnx_ext.onnx", KILN_SOURCE_DIR);
    kn_graph *g;
    assert_int_equal(kn_onnx_import_file(model, &g), KILN_OK);
    const kn_value *w = &g->values[kn_graph_find_value(g, "W")];
    assert_int_equal(w->rank, 2);
    assert_int_equal(w->dims[0].value, 3);
    assert_int_equal(w->dims[1].value, 2);
    assert_memory_equal(w->data, ((float[]){0, 1, 2, 3, 4, 5}), 24);
    assert_memory_equal(g->values[kn_graph_find_value(g, "B")].data, ((float[]){0.5f, -0.5f}), 8);
    assert_string_equal(g->values[g->inputs[0]].dims[0].sym, "batch");
    kn_graph_destroy(g);
}

static void test_python_typed_model(void **state) {
    (void)state;
    char model[300];
    snprintf(model, sizeof model, "%s/tests/unit/data/onnx_typed.onnx", KILN_SOURCE_DIR);
    kn_graph *g;
    assert_int_equal(kn_onnx_import_file(model, &g), KILN_OK);
    assert_int_equal(g->n_nodes, 7);
    assert_int_equal(kn_graph_opset(g, ""), 17);
#define VAL(n) (&g->values[kn_graph_find_value(g, n)])
    const uint16_t *h = VAL("f16")->data;
    assert_true(kn_half_to_float(h[0]) == 1.0f && kn_half_to_float(h[1]) == -2.0f &&
                kn_half_to_float(h[2]) == 0.5f);
    assert_memory_equal(VAL("i8")->data, ((int8_t[]){-128, 0, 127}), 3);
    assert_memory_equal(VAL("u8")->data, ((uint8_t[]){0, 7, 255}), 3);
    assert_memory_equal(VAL("b")->data, ((uint8_t[]){1, 0, 1}), 3);
    assert_memory_equal(VAL("i64")->data, ((int64_t[]){-((int64_t)1 << 40), 5}), 16);
    assert_memory_equal(VAL("f64")->data, ((double[]){0.25, -1e300}), 16);
    assert_memory_equal(VAL("u32")->data, ((uint32_t[]){4000000000u, 1}), 8);
    assert_int_equal(VAL("u32_out")->dtype, KILN_DTYPE_UINT32); /* from the declared output */
#undef VAL
    kn_graph_destroy(g);
}

static void test_constant_nodes(void **state) {
    (void)state;
    Onnx__ModelProto *m = model_new(13);
    Onnx__GraphProto *g = m->graph;
    Onnx__NodeProto *c1 = add_node(g, "Constant", "c1", NULL, "k1");
    add_attr(c1, "value", KN_ATTR_TENSOR)->t = f32_raw(NULL, 1, (int64_t[]){3}, W3, 3);
    Onnx__NodeProto *c2 = add_node(g, "Constant", "c2", NULL, "k2");
    attr_f(c2, "value_float", 2.5f);
    Onnx__NodeProto *c3 = add_node(g, "Constant", "c3", NULL, "k3");
    Onnx__AttributeProto *a = add_attr(c3, "value_ints", KN_ATTR_INTS);
    a->n_ints = 2;
    a->ints = (int64_t[]){7, -1};
    Onnx__NodeProto *c4 = add_node(g, "Constant", NULL, "", "k4");
    attr_i(c4, "value_int", 42);
    c4->n_input = 0;
    Onnx__NodeProto *c5 = add_node(g, "Constant", NULL, NULL, "k5");
    a = add_attr(c5, "value_floats", KN_ATTR_FLOATS);
    a->n_floats = 2;
    a->floats = (float[]){0.5f, 1.5f};
    add_node(g, "Sum", "sum", "k1,k2,k3,k4,k5", "y");
    add_output(g, "y", KILN_DTYPE_FLOAT32);
    kn_graph *kg;
    assert_int_equal(import(m, NULL, &kg), KILN_OK);
    assert_int_equal(kg->n_nodes, 1);
    assert_string_equal(kg->nodes[0].op_type, "Sum");
    const kn_value *v = &kg->values[kg->nodes[0].in[0]];
    assert_true(kn_value_is_const(v));
    assert_int_equal(v->rank, 1);
    assert_memory_equal(v->data, W3, sizeof W3);
    v = &kg->values[kg->nodes[0].in[1]];
    assert_int_equal(v->dtype, KILN_DTYPE_FLOAT32);
    assert_int_equal(v->rank, 0);
    assert_true(*(float *)v->data == 2.5f);
    v = &kg->values[kg->nodes[0].in[2]];
    assert_int_equal(v->dtype, KILN_DTYPE_INT64);
    assert_int_equal(v->rank, 1);
    assert_int_equal(v->dims[0].value, 2);
    assert_memory_equal(v->data, ((int64_t[]){7, -1}), 16);
    v = &kg->values[kg->nodes[0].in[3]];
    assert_int_equal(v->rank, 0);
    assert_int_equal(*(int64_t *)v->data, 42);
    v = &kg->values[kg->nodes[0].in[4]];
    assert_memory_equal(v->data, ((float[]){0.5f, 1.5f}), 8);
    kn_graph_destroy(kg);
    arena_free();

    const char *refused[] = {"value_string", "sparse_value"};
    for (int i = 0; i < 2; i++) {
        m = model_new(13);
        Onnx__NodeProto *c = add_node(m->graph, "Constant", "cs", NULL, "k");
        add_attr(c, refused[i], KN_ATTR_STRING);
        add_output(m->graph, "k", KILN_DTYPE_FLOAT32);
        assert_error(import(m, NULL, &kg), KILN_ERR_UNSUPPORTED, "node 'cs'", refused[i]);
        arena_free();
    }
    m = model_new(13);
    add_node(m->graph, "Constant", "empty", NULL, "k");
    add_output(m->graph, "k", KILN_DTYPE_FLOAT32);
    assert_error(import(m, NULL, &kg), KILN_ERR_MODEL, "node 'empty'", "exactly one");
    arena_free();
}

static void test_opsets(void **state) {
    (void)state;
    kn_graph *g;
    Onnx__ModelProto *m = small_model();
    m->opset_import[0]->domain = S("ai.onnx");
    m->opset_import[0]->version = 7;
    add_opset(m, "com.example", 3);
    add_opset(m, "ai.onnx.ml", 2);
    add_node(m->graph, "MyOp", "custom", "y", "z")->domain = S("com.example");
    add_output(m->graph, "z", 0);
    assert_int_equal(import(m, NULL, &g), KILN_OK);
    assert_int_equal(g->nodes[find_node(g, "add")].opset, 7);
    const kn_node *c = &g->nodes[find_node(g, "custom")];
    assert_string_equal(c->domain, "com.example");
    assert_int_equal(c->opset, 3);
    assert_int_equal(kn_graph_opset(g, "ai.onnx.ml"), 2);
    kn_graph_destroy(g);
    arena_free();

    m = small_model();
    add_node(m->graph, "MyOp", "lost", "y", "z")->domain = S("com.missing");
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "node 'lost'", "com.missing");
    arena_free();
    m = small_model();
    m->n_opset_import = 0;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "node 'add'", "no opset import");
    arena_free();
    int64_t bad[] = {0, 29};
    for (int i = 0; i < 2; i++) {
        m = small_model();
        m->opset_import[0]->version = bad[i];
        assert_error(import(m, NULL, &g), KILN_ERR_UNSUPPORTED, "opset", "1 to 28");
        arena_free();
    }
    /* Old exports (opsets 1-6) import; each op then checks its own oldest version. */
    m = small_model();
    m->opset_import[0]->version = 6;
    assert_int_equal(import(m, NULL, &g), KILN_OK);
    assert_int_equal(g->nodes[0].opset, 6);
    kn_graph_destroy(g);
    arena_free();
    m = small_model();
    m->opset_import[0]->version = 28;
    assert_int_equal(import(m, NULL, &g), KILN_OK);
    assert_int_equal(g->nodes[0].opset, 28);
    kn_graph_destroy(g);
    arena_free();
    m = small_model();
    add_opset(m, "", 14);
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "imported twice", NULL);
    arena_free();
}

static void test_inputs_outputs_value_info(void **state) {
    (void)state;
    Onnx__ModelProto *m = small_model();
    Onnx__GraphProto *gp = m->graph;
    /* W also listed as an input: stays a constant */
    add_input(gp, "W", KILN_DTYPE_FLOAT32, 1, (const char *[]){"3"});
    add_input(gp, "z", KILN_DTYPE_INT64, 3, (const char *[]){"?", "5", "?"});
    add_input(gp, "nodims", KILN_DTYPE_BOOL, -1, NULL);
    PUSH(gp->value_info, gp->n_value_info,
         value_info("s", KILN_DTYPE_FLOAT32, 2, (const char *[]){"N", "3"}));
    gp->output[0] = value_info("y", KILN_DTYPE_FLOAT32, 2, (const char *[]){"N", "?"});
    add_node(gp, "Identity", "pass", "z", "zo");
    add_output(gp, "zo", KILN_DTYPE_INT64);
    add_output(gp, "x", KILN_DTYPE_FLOAT32); /* an input straight out */
    kn_graph *g;
    assert_int_equal(import(m, NULL, &g), KILN_OK);
    assert_int_equal(g->n_inputs, 3);
    assert_string_equal(g->values[g->inputs[1]].name, "z");
    const kn_value *z = &g->values[g->inputs[1]];
    assert_int_equal(z->dtype, KILN_DTYPE_INT64);
    assert_int_equal(z->rank, 3);
    assert_string_equal(z->dims[0].sym, "z_dim0");
    assert_int_equal(z->dims[1].value, 5);
    assert_string_equal(z->dims[2].sym, "z_dim2");
    assert_int_equal(g->values[g->inputs[2]].rank, -1);
    assert_false(g->values[kn_graph_find_value(g, "W")].is_input);
    const kn_value *s = &g->values[kn_graph_find_value(g, "s")];
    assert_int_equal(s->dtype, KILN_DTYPE_FLOAT32);
    assert_int_equal(s->rank, 2);
    assert_string_equal(s->dims[0].sym, "N");
    const kn_value *y = &g->values[g->outputs[0]];
    assert_int_equal(y->rank, 2);
    assert_string_equal(y->dims[1].sym, "y_dim1");
    assert_int_equal(g->n_outputs, 3);
    assert_true(g->values[g->outputs[2]].is_input && g->values[g->outputs[2]].is_output);
    kn_graph_destroy(g);
    arena_free();

    /* input errors */
    m = small_model();
    m->graph->input[0]->type = NULL;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "graph input 'x'", "no type");
    arena_free();
    m = small_model();
    m->graph->input[0]->type->tensor_type->elem_type = 0;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "graph input 'x'", "no data type");
    arena_free();
    m = small_model();
    /* Exporters write an unknown dim as -1 (any negative reads the same): a dynamic dim. */
    m->graph->input[0]->type->tensor_type->shape->dim[1]->dim_value = -2;
    assert_int_equal(import(m, NULL, &g), KILN_OK);
    assert_int_equal(g->values[g->inputs[0]].dims[1].value, -1);
    assert_non_null(g->values[g->inputs[0]].dims[1].sym);
    kn_graph_destroy(g);
    arena_free();
    m = small_model();
    m->graph->input[0]->type->tensor_type->shape->dim[1]->dim_value = (int64_t)1 << 50;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "graph input 'x'", "absurd");
    arena_free();
    m = small_model();
    PUSH(m->graph->input, m->graph->n_input, m->graph->input[0]);
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "graph input 'x'", "twice");
    arena_free();
    m = small_model();
    m->graph->output[0]->name = S("nothing");
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "graph output 'nothing'", "not produced");
    arena_free();
    m = small_model();
    m->graph->n_output = 0;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "no outputs", NULL);
    arena_free();
}

static void test_nodes(void **state) {
    (void)state;
    kn_graph *g;
    /* nodes listed out of order, duplicate names, omitted optionals, all attribute kinds */
    Onnx__ModelProto *m = model_new(13);
    Onnx__GraphProto *gp = m->graph;
    add_input(gp, "x", KILN_DTYPE_FLOAT32, 1, (const char *[]){"4"});
    Onnx__NodeProto *clip = add_node(gp, "Clip", "n", "r,,", "y");
    add_node(gp, "Relu", "n", "x", "r");
    Onnx__NodeProto *d = add_node(gp, "Dropout", NULL, "y", "d,");
    attr_f(d, "f", 0.25f);
    Onnx__AttributeProto *a = add_attr(d, "s", KN_ATTR_STRING);
    a->has_s = 1;
    a->s.len = 3;
    a->s.data = (uint8_t *)S("abc");
    a = add_attr(d, "fs", KN_ATTR_FLOATS);
    a->n_floats = 2;
    a->floats = (float[]){1.5f, -2};
    a = add_attr(d, "is", KN_ATTR_INTS);
    a->n_ints = 3;
    a->ints = (int64_t[]){1, 2, 3};
    a = add_attr(d, "ss", KN_ATTR_STRINGS);
    a->n_strings = 2;
    a->strings = A(2 * sizeof *a->strings);
    a->strings[0] = (ProtobufCBinaryData){2, (uint8_t *)S("hi")};
    a->strings[1] = (ProtobufCBinaryData){0, NULL};
    add_attr(d, "t", KN_ATTR_TENSOR)->t = f32_raw(NULL, 1, (int64_t[]){3}, W3, 3);
    a = add_attr(d, "untyped", 0); /* old writers: type inferred from the field */
    a->has_type = 0;
    a->has_i = 1;
    a->i = 9;
    (void)clip;
    add_output(gp, "d", KILN_DTYPE_FLOAT32);
    assert_int_equal(import(m, NULL, &g), KILN_OK);
    assert_int_equal(g->n_nodes, 3);
    assert_string_equal(g->nodes[0].op_type, "Relu"); /* sorted */
    assert_string_equal(g->nodes[1].op_type, "Clip");
    assert_string_equal(g->nodes[0].name, "n_2");
    assert_string_equal(g->nodes[1].name, "n");
    assert_int_equal(g->nodes[1].n_in, 3);
    assert_int_equal(g->nodes[1].in[1], -1);
    assert_int_equal(g->nodes[1].in[2], -1);
    const kn_node *dn = &g->nodes[2];
    assert_string_equal(dn->name, "Dropout_2");
    assert_int_equal(dn->n_out, 2);
    assert_int_equal(dn->out[1], -1);
    assert_true(kn_attr_float(dn, "f", 0) == 0.25f);
    assert_string_equal(kn_attr_string(dn, "s", ""), "abc");
    const float *fs;
    assert_int_equal(kn_attr_floats(dn, "fs", &fs), 2);
    assert_true(fs[0] == 1.5f && fs[1] == -2);
    const int64_t *is;
    assert_int_equal(kn_attr_ints(dn, "is", &is), 3);
    assert_int_equal(is[2], 3);
    const kn_attr *ss = kn_node_attr(dn, "ss");
    assert_int_equal(ss->n, 2);
    assert_string_equal(ss->strings[0], "hi");
    assert_string_equal(ss->strings[1], "");
    const kn_attr *t = kn_node_attr(dn, "t");
    assert_int_equal(t->type, KN_ATTR_TENSOR);
    assert_memory_equal(t->t->data, W3, sizeof W3);
    assert_int_equal(kn_attr_int(dn, "untyped", 0), 9);
    kn_graph_destroy(g);
    arena_free();

    /* dangling input */
    m = small_model();
    m->graph->node[0]->input[1] = S("ghost");
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "node 'add' (Add)", "'ghost'");
    arena_free();
    /* duplicate output */
    m = small_model();
    add_node(m->graph, "Neg", "again", "x", "s");
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "node 'again'", "output 's'");
    arena_free();
    m = small_model();
    add_node(m->graph, "Neg", "shadow", "x", "W");
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "node 'shadow'", "initializer");
    arena_free();
    /* cycle */
    m = small_model();
    m->graph->node[0]->input[0] = S("y");
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "node '", NULL);
    arena_free();
    /* subgraph attribute */
    m = small_model();
    Onnx__NodeProto *ifn = add_node(m->graph, "If", "branch", "x", "o");
    a = add_attr(ifn, "then_branch", KN_ATTR_GRAPH);
    a->g = A(sizeof *a->g);
    onnx__graph_proto__init(a->g);
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "node 'branch' (If), subgraph 'then_branch'",
                 "no outputs");
    arena_free();
    /* function attribute reference */
    m = small_model();
    add_attr(m->graph->node[0], "alpha", KN_ATTR_FLOAT)->ref_attr_name = S("outer");
    assert_error(import(m, NULL, &g), KILN_ERR_UNSUPPORTED, "node 'add'", "outer");
    arena_free();
    /* node without op_type */
    m = small_model();
    m->graph->node[1]->op_type = S("");
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "no op_type", NULL);
    arena_free();
}

static void test_passthrough_without_nodes(void **state) {
    (void)state;
    Onnx__ModelProto *m = model_new(13);
    add_input(m->graph, "x", KILN_DTYPE_FLOAT32, 1, (const char *[]){"2"});
    PUSH(m->graph->initializer, m->graph->n_initializer, f32_raw("W", 1, (int64_t[]){3}, W3, 3));
    add_output(m->graph, "x", KILN_DTYPE_FLOAT32);
    add_output(m->graph, "W", KILN_DTYPE_FLOAT32);
    kn_graph *g;
    assert_int_equal(import(m, NULL, &g), KILN_OK);
    assert_int_equal(g->n_nodes, 0);
    assert_int_equal(g->n_outputs, 2);
    assert_true(kn_value_is_const(&g->values[g->outputs[1]]));
    kn_graph_destroy(g);
    arena_free();
    /* control bytes in names never reach the one-line message */
    m = small_model();
    m->graph->node[0]->input[1] = S("bad\nname");
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "bad?name", NULL);
    arena_free();
}

static void test_garbage(void **state) {
    (void)state;
    kn_graph *g = NULL;
    assert_error(kn_onnx_import("hello world, not a model", 24, NULL, &g), KILN_ERR_MODEL,
                 "protobuf", NULL);
    assert_null(g);
    assert_error(kn_onnx_import("", 0, NULL, &g), KILN_ERR_MODEL, "empty", NULL);
    Onnx__ModelProto *m = small_model();
    m->graph = NULL;
    assert_error(import(m, NULL, &g), KILN_ERR_MODEL, "no graph", NULL);
    arena_free();
    /* Subgraphs nested a hundred thousand deep (graph.node.attribute.g ...): refused before
     * the recursive unpacker can overflow the stack. */
    /* From the outside in: ModelProto.graph, then GraphProto.node, NodeProto.attribute,
     * AttributeProto.g, repeating. Payload sizes first (inside out), then bytes (outside in). */
    enum { LEVELS = 300000 };
    const int fields[3] = {1, 5, 6};
    size_t *payload = malloc(LEVELS * sizeof *payload);
    size_t inner = 0;
    for (int k = LEVELS - 1; k >= 0; k--) {
        payload[k] = inner;
        size_t varint_len = 1;
        for (size_t v = inner; v >= 0x80; v >>= 7)
            varint_len++;
        inner += 1 + varint_len;
    }
    size_t len = inner;
    uint8_t *deep = malloc(len), *w = deep;
    for (int k = 0; k < LEVELS; k++) {
        int num = k == 0 ? 7 : fields[(k - 1) % 3];
        *w++ = (uint8_t)(num << 3 | 2);
        for (size_t v = payload[k];; v >>= 7) {
            *w++ = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
            if (v < 0x80)
                break;
        }
    }
    assert_true(w == deep + len);
    assert_error(kn_onnx_import(deep, len, NULL, &g), KILN_ERR_MODEL, "nest", NULL);
    free(deep);
    free(payload);

    char path[300];
    snprintf(path, sizeof path, "%s/tests/unit/data/does_not_exist.onnx", KILN_SOURCE_DIR);
    assert_error(kn_onnx_import_file(path, &g), KILN_ERR_IO, "does_not_exist", NULL);
}

/* Every prefix and thousands of random bit flips: an error or a graph, never a crash or leak
 * (run under AddressSanitizer in the sanitizer build). */
static void test_fuzz_prefixes_and_flips(void **state) {
    (void)state;
    Onnx__ModelProto *m = small_model();
    Onnx__GraphProto *gp = m->graph;
    add_attr(gp->node[0], "t", KN_ATTR_TENSOR)->t = f32_raw("tt", 1, (int64_t[]){3}, W3, 3);
    Onnx__AttributeProto *a = add_attr(gp->node[1], "is", KN_ATTR_INTS);
    a->n_ints = 2;
    a->ints = (int64_t[]){3, -4};
    Onnx__NodeProto *c = add_node(gp, "Constant", "c", NULL, "k");
    attr_f(c, "value_float", 1.5f);
    add_node(gp, "Mul", NULL, "y,k", "z");
    add_output(gp, "z", KILN_DTYPE_FLOAT32);
    PUSH(gp->value_info, gp->n_value_info,
         value_info("s", KILN_DTYPE_FLOAT32, 2, (const char *[]){"N", "?"}));
    size_t size;
    uint8_t *buf = pack(m, &size);
    size_t before = kiln_allocated_bytes();
    int ok = 0;
    kn_graph *g;
    for (size_t len = 0; len < size; len++) {
        uint8_t *copy = malloc(len > 0 ? len : 1); /* exact size so ASan sees overreads */
        memcpy(copy, buf, len);
        if (kn_onnx_import(copy, len, NULL, &g) == KILN_OK) {
            ok++;
            kn_graph_destroy(g);
        }
        free(copy);
    }
    assert_int_equal(kiln_allocated_bytes(), before);
    srand(12345);
    uint8_t *copy = malloc(size);
    for (int k = 0; k < 20000; k++) {
        memcpy(copy, buf, size);
        int flips = 1 + rand() % 3;
        for (int f = 0; f < flips; f++)
            copy[rand() % size] ^= (uint8_t)(1u << (rand() % 8));
        if (kn_onnx_import(copy, size, NULL, &g) == KILN_OK) {
            ok++;
            for (int i = 0; i < g->n_nodes; i++)
                assert_true(g->nodes[i].opset >= 1);
            kn_graph_destroy(g);
        } else {
            assert_true(strlen(kiln_last_error()) > 0);
            assert_null(strchr(kiln_last_error(), '\n'));
        }
    }
    free(copy);
    assert_int_equal(kiln_allocated_bytes(), before);
    assert_true(ok > 0);
    arena_free();
}

/* Failing the Nth allocation anywhere in import gives a clean error and no leak. */
static void test_out_of_memory(void **state) {
    (void)state;
    size_t size;
    uint8_t *buf = pack(small_model(), &size);
    size_t before = kiln_allocated_bytes();
    kn_graph *g;
    for (long n = 1;; n++) {
        kn_alloc_fail_after(n);
        kiln_status rc = kn_onnx_import(buf, size, NULL, &g);
        kn_alloc_fail_after(0);
        if (rc == KILN_OK) {
            kn_graph_destroy(g);
            break;
        }
        if (rc != KILN_ERR_OUT_OF_MEMORY)
            fail_msg("allocation %ld failed: status %d: %s", n, (int)rc, kiln_last_error());
        assert_int_equal(kiln_allocated_bytes(), before);
        assert_true(n < 10000);
    }
    assert_int_equal(kiln_allocated_bytes(), before);
    arena_free();
}

static void test_tensor_files(void **state) {
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/tests/unit/data/tensor_int64.pb", KILN_SOURCE_DIR);
    kn_tensor t;
    char *name;
    assert_int_equal(kn_onnx_read_tensor_file(path, &t, &name), KILN_OK);
    assert_string_equal(name, "ids");
    assert_int_equal(t.dtype, KILN_DTYPE_INT64);
    assert_int_equal(t.shape.rank, 2);
    assert_int_equal(t.shape.d[0], 2);
    assert_int_equal(t.shape.d[1], 3);
    assert_memory_equal(t.data, ((int64_t[]){1, -2, 3, 4, 5, -6}), 48);
    kn_free(t.data);
    kn_free(name);

    Onnx__TensorProto *tp = tensor("v", KILN_DTYPE_FLOAT32, 1, (int64_t[]){3});
    tp->n_float_data = 3;
    tp->float_data = (float *)W3;
    size_t n = onnx__tensor_proto__get_packed_size(tp);
    uint8_t *b = A(n);
    onnx__tensor_proto__pack(tp, b);
    assert_int_equal(kn_onnx_tensor_from_bytes(b, n, &t, NULL), KILN_OK);
    assert_memory_equal(t.data, W3, sizeof W3);
    kn_free(t.data);
    for (size_t len = 0; len < n; len++) {
        if (kn_onnx_tensor_from_bytes(b, len, &t, NULL) == KILN_OK)
            kn_free(t.data);
    }
    assert_error(kn_onnx_tensor_from_bytes(b, n - 1, &t, NULL), KILN_ERR_MODEL, "TensorProto",
                 NULL);
    arena_free();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_model),
        cmocka_unit_test(test_typed_initializers),
        cmocka_unit_test(test_initializer_errors),
        cmocka_unit_test(test_external_data),
        cmocka_unit_test(test_python_typed_model),
        cmocka_unit_test(test_constant_nodes),
        cmocka_unit_test(test_opsets),
        cmocka_unit_test(test_inputs_outputs_value_info),
        cmocka_unit_test(test_nodes),
        cmocka_unit_test(test_passthrough_without_nodes),
        cmocka_unit_test(test_garbage),
        cmocka_unit_test(test_fuzz_prefixes_and_flips),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_tensor_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
