/* The entry points the fuzzers drive, shared with tests/unit/test_fuzz_regressions.c so every
 * input a fuzzer once crashed on is replayed by ctest through exactly the same code.
 *
 * Each target returns 0 when kiln handled the input (accepted or refused it cleanly) and -1
 * when the harness caught a broken promise that is not a crash: a failure without a one-line
 * message, an output whose size disagrees with its shape. Crashes and sanitizer reports need
 * no help to be noticed. */
#include "fuzz_targets.h"

#include "builder/builder.h"
#include "core/alloc.h"
#include "core/container.h"
#include "core/fileio.h"
#include "onnx/onnx_import.h"
#include "plan/plan_format.h"
#include "runtime/engine.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A fuzz input is at most a few hundred kilobytes; anything that wants more than this from the
 * allocator is an absurd shape and must be refused, not attempted. */
#define FUZZ_MAX_ALLOC ((size_t)256 << 20)
#define FUZZ_MAX_TOTAL ((size_t)1 << 30)
/* Inputs bigger than this are not worth executing: the run would only measure kernels. */
#define FUZZ_MAX_INPUT_ELEMS ((int64_t)1 << 20)

static void *capped_alloc(void *user, size_t size, size_t align) {
    (void)user;
    if (size > FUZZ_MAX_ALLOC || kiln_allocated_bytes() > FUZZ_MAX_TOTAL - size)
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size) != 0)
        return NULL;
    return p;
}

static void capped_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

static void quiet_log(void *user, kiln_log_level level, const char *message) {
    (void)user;
    (void)level;
    (void)message;
}

void kn_fuzz_setup(void) {
    static const kiln_allocator a = {capped_alloc, capped_free, NULL};
    kiln_set_allocator(&a);
    kiln_set_logger(quiet_log, NULL, KILN_LOG_ERROR);
}

/* A refusal must come with a message on one line. */
static int clean_error(kiln_status rc) {
    if (rc == KILN_OK)
        return 0;
    const char *m = kiln_last_error();
    if (m == NULL || m[0] == '\0' || strchr(m, '\n') != NULL)
        return -1;
    return 0;
}

/* Read every byte so the sanitizer sees a buffer shorter than claimed. */
static unsigned touch(const void *data, size_t size) {
    const volatile unsigned char *p = data;
    unsigned sum = 0;
    for (size_t i = 0; i < size; i++)
        sum += p[i];
    return sum;
}

static int64_t numel_of(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0)
            return -1;
        if (dims[d] != 0 && n > KN_MAX_ELEMENTS / dims[d])
            return -1;
        n *= dims[d];
    }
    return n;
}

static int check_outputs(kiln_context *ctx, const kiln_engine *e) {
    for (int i = 0; i < kiln_engine_num_outputs(e); i++) {
        kiln_io_info info;
        if (kiln_engine_output_info(e, i, &info) != KILN_OK)
            return -1;
        kiln_tensor_view v;
        kiln_status rc = kiln_context_get_output(ctx, info.name, &v);
        if (rc != KILN_OK)
            return clean_error(rc);
        int64_t n = numel_of(v.rank, v.dims);
        if (v.rank < 0 || v.rank > KILN_MAX_RANK || n < 0)
            return -1;
        size_t es = kiln_dtype_size(v.dtype);
        if (es != 0 && v.size != (size_t)n * es)
            return -1;
        if (v.size > 0 && v.data == NULL)
            return -1;
        (void)touch(v.data, v.size);
    }
    return 0;
}

/* Values that find unchecked indices, NaN and overflow in kernels (zeros find none). */
static void fill_extreme(kn_tensor *t) {
    static const double fv[] = {1.0,  -1.0,  0.5,   NAN, INFINITY, -INFINITY,
                                3e38, -3e38, 1e-30, 7.0, 0.0,      -7.5};
    static const int64_t iv[] = {1,    -1,  2, INT64_MAX, INT64_MIN, 127,
                                 -128, 255, 3, 0,         65535,     (int64_t)1 << 31};
    int64_t n = kn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (kn_dtype_is_float(t->dtype))
            kn_tensor_set_f64(t, i, fv[i % 12]);
        else
            kn_tensor_set_i64(t, i, iv[i % 12]);
    }
}

/* Work a run would do that is legitimate but too slow for a fuzzer's time limit: a value of
 * more than 2^22 elements, or a pooling whose windows read more than 2^26 inputs in all (a
 * window as wide as a large padded input at every output). Such inputs are skipped, not
 * reported: what they find is the size of the model, not a bug. */
static bool too_slow(kiln_context *ctx) {
    if (kn_context_resolve(ctx) != KILN_OK)
        return false; /* the run reports the error itself */
    const kn_graph *g = ctx->e->plan.graph;
    for (int v = 0; v < g->n_values; v++)
        if (ctx->vals[v].known && kn_tensor_numel(&ctx->vals[v].t) > ((int64_t)1 << 22))
            return true;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead || n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0 ||
            strstr(n->op_type, "Pool") == NULL)
            continue;
        const kn_tensor *x = &ctx->vals[n->in[0]].t, *y = &ctx->vals[n->out[0]].t;
        const int64_t *ks;
        int64_t nk = kn_attr_ints(n, "kernel_shape", &ks);
        double taps = 1;
        for (int64_t d = 0; d < nk && d + 2 < x->shape.rank; d++)
            taps *= (double)(ks[d] < x->shape.d[d + 2] ? ks[d] : x->shape.d[d + 2]);
        if ((double)kn_tensor_numel(y) * taps > (double)((int64_t)1 << 26))
            return true;
    }
    return false;
}

/* A sequence or optional input has no profile (its value sizes it): a valid block of the kind
 * the model declares, empty, or (extreme) holding float32 elements of fill_extreme's values,
 * so the ops that open it run. The element dtype is the common one, not the model's: a model
 * that wants another refuses it, which is checked too. */
static void *container_input(const kiln_io_info *info, bool extreme, size_t *size) {
    float v[3] = {0};
    kn_tensor items[2] = {{.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 1, .d = {3}}, .data = v},
                          {.dtype = KILN_DTYPE_FLOAT32, .shape = {.rank = 1, .d = {2}}, .data = v}};
    if (extreme)
        fill_extreme(&items[0]);
    int n = extreme ? (info->kind == KILN_IO_SEQUENCE ? 2 : 1) : 0;
    int kind = info->kind == KILN_IO_SEQUENCE ? KN_CONTAINER_SEQUENCE : KN_CONTAINER_OPTIONAL;
    void *seq = NULL;
    if (info->kind == KILN_IO_OPTIONAL_SEQUENCE && extreme) { /* the optional's element */
        size_t nb = kn_container_bytes(2, items);
        if ((seq = malloc(nb)) == NULL)
            return NULL;
        kn_container_write(seq, KN_CONTAINER_SEQUENCE, KILN_DTYPE_FLOAT32, 2, items);
        items[0] = kn_container_tensor(nb);
        items[0].data = seq;
    }
    *size = kn_container_bytes(n, items);
    void *block = calloc(*size, 1);
    if (block != NULL)
        kn_container_write(block, kind, n ? items[0].dtype : 0, n, items);
    free(seq);
    return block;
}

/* One execution at the smallest shape each input's profile allows, with every input zero or
 * (extreme) filled with fill_extreme's values. */
static int run_engine(kiln_engine *e, bool extreme) {
    kiln_context *ctx = NULL;
    kiln_status rc = kiln_context_create(e, &ctx);
    if (rc != KILN_OK)
        return clean_error(rc);
    int result = 0;
    int n_in = kiln_engine_num_inputs(e);
    void **bufs = calloc((size_t)n_in + 1, sizeof *bufs);
    if (bufs == NULL)
        goto out;
    rc = kiln_context_set_threads(ctx, 1);
    for (int i = 0; i < n_in && rc == KILN_OK; i++) {
        kiln_io_info info;
        if ((rc = kiln_engine_input_info(e, i, &info)) != KILN_OK)
            break;
        if (info.dtype == KILN_DTYPE_CONTAINER) {
            size_t nb = 0;
            int64_t dim;
            if ((bufs[i] = container_input(&info, extreme, &nb)) == NULL)
                goto out;
            dim = (int64_t)nb;
            rc = kiln_context_set_input_shape(ctx, info.name, 1, &dim);
            if (rc == KILN_OK)
                rc = kiln_context_set_input(ctx, info.name, bufs[i], nb);
            continue;
        }
        int64_t n = numel_of(info.rank, info.min);
        size_t es = kiln_dtype_size(info.dtype);
        if (n < 0 || n > FUZZ_MAX_INPUT_ELEMS || es == 0)
            goto out;
        if ((rc = kiln_context_set_input_shape(ctx, info.name, info.rank, info.min)) != KILN_OK)
            break;
        bufs[i] = calloc((size_t)n * es + 1, 1);
        if (bufs[i] == NULL)
            goto out;
        if (extreme) {
            kn_tensor t = {.dtype = info.dtype, .shape.rank = info.rank, .data = bufs[i]};
            memcpy(t.shape.d, info.min, sizeof info.min);
            fill_extreme(&t);
        }
        rc = kiln_context_set_input(ctx, info.name, bufs[i], (size_t)n * es);
    }
    if (rc == KILN_OK && too_slow(ctx))
        goto out;
    if (rc == KILN_OK)
        rc = kiln_context_execute(ctx);
    result = rc == KILN_OK ? check_outputs(ctx, e) : clean_error(rc);
out:
    kiln_context_destroy(ctx);
    for (int i = 0; bufs != NULL && i < n_in; i++)
        free(bufs[i]);
    free(bufs);
    return result;
}

/* Dynamic dims get a profile pinned at 1 so every model with a known rank can be built. */
static kiln_status add_profiles(const kiln_network *net, kiln_build_config *cfg) {
    const kn_graph *g = net->graph;
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_value *v = &g->values[g->inputs[i]];
        if (v->rank <= 0 || v->rank > KN_MAX_RANK || v->dtype == KILN_DTYPE_CONTAINER)
            continue; /* a sequence or optional is sized by its value */
        int64_t dims[KN_MAX_RANK];
        bool dynamic = false;
        for (int d = 0; d < v->rank; d++) {
            dynamic |= v->dims[d].sym != NULL || v->dims[d].value < 0;
            dims[d] = v->dims[d].sym != NULL || v->dims[d].value < 0 ? 1 : v->dims[d].value;
        }
        if (dynamic)
            KN_TRY(kiln_build_config_add_profile(cfg, v->name, v->rank, dims, dims, dims));
    }
    return KILN_OK;
}

int kn_fuzz_onnx(const uint8_t *data, size_t size) {
    kiln_builder *b = NULL;
    kiln_network *net = NULL;
    kiln_build_config *cfg = NULL;
    kiln_engine *e = NULL;
    void *plan = NULL;
    size_t plan_size = 0;
    int result = 0;
    kiln_status rc = kiln_builder_create(&b);
    if (rc == KILN_OK)
        rc = kiln_network_from_onnx_memory(b, data, size, &net);
    if (rc == KILN_OK)
        rc = kiln_build_config_create(&cfg);
    if (rc == KILN_OK)
        rc = kiln_build_config_set_threads(cfg, 1);
    if (rc == KILN_OK && add_profiles(net, cfg) != KILN_OK)
        goto out; /* a profile the config refuses is the build's business, not this test's */
    if (rc == KILN_OK)
        rc = kiln_build(b, net, cfg, &plan, &plan_size);
    if (rc == KILN_OK)
        rc = kiln_engine_load_memory(plan, plan_size, NULL, &e);
    result = rc == KILN_OK ? run_engine(e, false) : clean_error(rc);
    if (result == 0 && rc == KILN_OK)
        result = run_engine(e, true);
out:
    kiln_engine_destroy(e);
    kiln_free(plan);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
    return result;
}

static uint32_t get_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void put_u64(uint8_t *p, uint64_t v) {
    memcpy(p, &v, sizeof v);
}

/* Recompute the section and header checksums (and the file size) of a mutated plan, so the
 * mutation reaches the section parsers instead of stopping at the checksum. */
static bool reseal_plan(uint8_t *p, size_t size) {
    if (size < KN_PLAN_HEADER_SIZE)
        return false;
    uint32_t count = get_u32(p + KN_PLAN_OFF_SECTION_COUNT);
    uint64_t table_end = KN_PLAN_HEADER_SIZE + (uint64_t)count * KN_PLAN_SECTION_ENTRY_SIZE;
    if (count > KN_PLAN_MAX_SECTIONS || table_end > size)
        return false;
    for (uint32_t i = 0; i < count; i++) {
        uint8_t *ent = p + KN_PLAN_HEADER_SIZE + (size_t)i * KN_PLAN_SECTION_ENTRY_SIZE;
        uint64_t off = get_u64(ent + KN_PLAN_SEC_OFF_OFFSET);
        uint64_t len = get_u64(ent + KN_PLAN_SEC_OFF_SIZE);
        if (off <= size && len <= size - off)
            put_u64(ent + KN_PLAN_SEC_OFF_CHECKSUM, XXH64(p + off, (size_t)len, 0));
    }
    put_u64(p + KN_PLAN_OFF_FILE_SIZE, size);
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, p, KN_PLAN_OFF_HEADER_CHECKSUM);
    XXH64_update(&st, p + KN_PLAN_HEADER_SIZE, (size_t)(table_end - KN_PLAN_HEADER_SIZE));
    put_u64(p + KN_PLAN_OFF_HEADER_CHECKSUM, XXH64_digest(&st));
    return true;
}

static int load_and_run(const uint8_t *data, size_t size) {
    kiln_engine *e = NULL;
    kiln_status rc = kiln_engine_load_memory(data, size, NULL, &e);
    if (rc != KILN_OK)
        return clean_error(rc);
    int result = run_engine(e, false);
    if (result == 0)
        result = run_engine(e, true);
    kiln_engine_destroy(e);
    return result;
}

int kn_fuzz_plan(const uint8_t *data, size_t size) {
    if (load_and_run(data, size) != 0)
        return -1;
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    int result = 0;
    if (reseal_plan(copy, size) && memcmp(copy, data, size) != 0)
        result = load_and_run(copy, size);
    free(copy);
    return result;
}

int kn_fuzz_npy(const uint8_t *data, size_t size) {
    kn_tensor t = {0};
    kiln_status rc = kn_npy_from_bytes(data, size, &t);
    if (rc != KILN_OK)
        return clean_error(rc);
    int result = 0;
    if (!kn_shape_valid(&t.shape) || t.data == NULL) {
        result = -1;
        goto out;
    }
    (void)touch(t.data, kn_tensor_nbytes(&t));
    /* What was read must write back to a file that reads as the same tensor. */
    void *bytes = NULL;
    size_t n = 0;
    rc = kn_npy_to_bytes(&t, &bytes, &n);
    if (rc != KILN_OK) {
        result = clean_error(rc);
        goto out;
    }
    kn_tensor back = {0};
    rc = kn_npy_from_bytes(bytes, n, &back);
    if (rc != KILN_OK || back.dtype != t.dtype || !kn_shape_equal(&back.shape, &t.shape) ||
        memcmp(back.data, t.data, kn_tensor_nbytes(&t)) != 0)
        result = -1;
    kn_free(back.data);
    kn_free(bytes);
out:
    kn_free(t.data);
    return result;
}

int kn_fuzz_tensor_proto(const uint8_t *data, size_t size) {
    kn_tensor t = {0};
    char *name = NULL;
    kiln_status rc = kn_onnx_tensor_from_bytes(data, size, &t, &name);
    if (rc != KILN_OK)
        return clean_error(rc);
    int result = 0;
    if (!kn_shape_valid(&t.shape) || t.data == NULL || name == NULL)
        result = -1;
    else
        (void)touch(t.data, kn_tensor_nbytes(&t));
    kn_free(t.data);
    kn_free(name);
    return result;
}
