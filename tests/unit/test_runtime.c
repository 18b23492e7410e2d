/* The public API end to end: build from ONNX, plan round trip, contexts on several threads,
 * profiles, output shapes before execution, errors, and allocation failures. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/alloc.h"
#include "core/fileio.h"
#include "kiln/kiln.h"
#include "runtime/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "tests/models/resnet_mini"

static char *path(const char *rel) {
    static char buf[4][1024];
    static int k;
    const char *root = getenv("KILN_SOURCE_DIR");
    char *p = buf[k++ & 3];
    snprintf(p, 1024, "%s/%s", root ? root : KILN_SOURCE_DIR, rel);
    return p;
}

static kiln_status build_resnet(void **plan, size_t *size) {
    kiln_builder *b = NULL;
    kiln_network *net = NULL;
    kiln_build_config *cfg = NULL;
    kiln_status rc = kiln_builder_create(&b);
    if (rc == KILN_OK)
        rc = kiln_network_from_onnx_file(b, path(MODEL "/model.onnx"), &net);
    if (rc == KILN_OK)
        rc = kiln_build_config_create(&cfg);
    int64_t mn[] = {1, 3, 32, 32}, op[] = {2, 3, 64, 64}, mx[] = {4, 3, 96, 96};
    if (rc == KILN_OK)
        rc = kiln_build_config_add_profile(cfg, "input", 4, mn, op, mx);
    if (rc == KILN_OK)
        rc = kiln_build(b, net, cfg, plan, size);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
    return rc;
}

/* The resnet plan built in memory and loaded. */
static kiln_engine *resnet_engine(void) {
    void *plan;
    size_t size;
    assert_int_equal(build_resnet(&plan, &size), KILN_OK);
    kiln_engine *e;
    assert_int_equal(kiln_engine_load_memory(plan, size, NULL, &e), KILN_OK);
    kiln_free(plan);
    return e;
}

typedef struct job {
    kiln_engine *e;
    const kn_tensor *x;
    float out[64];
    size_t out_size;
    kiln_status rc;
} job;

static kiln_status run_once(kiln_engine *e, const kn_tensor *x, float *out, size_t *out_size) {
    kiln_context *ctx = NULL;
    kiln_status rc = kiln_context_create(e, &ctx);
    if (rc == KILN_OK)
        rc = kiln_context_set_threads(ctx, 1);
    if (rc == KILN_OK)
        rc = kiln_context_set_input_shape(ctx, "input", x->shape.rank, x->shape.d);
    int rank = 0;
    int64_t dims[8];
    if (rc == KILN_OK)
        rc = kiln_context_get_output_shape(ctx, "logits", &rank, dims);
    if (rc == KILN_OK && (rank != 2 || dims[0] != x->shape.d[0] || dims[1] != 10))
        rc = KILN_ERR_INTERNAL;
    if (rc == KILN_OK)
        rc = kiln_context_set_input(ctx, "input", x->data, kn_tensor_nbytes(x));
    if (rc == KILN_OK)
        rc = kiln_context_execute(ctx);
    kiln_tensor_view v;
    if (rc == KILN_OK)
        rc = kiln_context_get_output(ctx, "logits", &v);
    if (rc == KILN_OK && v.size <= 64 * sizeof(float)) {
        memcpy(out, v.data, v.size);
        *out_size = v.size;
    }
    kiln_context_destroy(ctx);
    return rc;
}

static void *thread_main(void *arg) {
    job *j = arg;
    for (int i = 0; i < 3 && j->rc == KILN_OK; i++)
        j->rc = run_once(j->e, j->x, j->out, &j->out_size);
    return NULL;
}

static void test_build_plan_run_matches_pytorch(void **state) {
    (void)state;
    kiln_engine *e = resnet_engine();
    kn_tensor x, ref;
    assert_int_equal(kn_npy_read(path(MODEL "/case1_3x3x48x80/input.npy"), &x), KILN_OK);
    assert_int_equal(kn_npy_read(path(MODEL "/case1_3x3x48x80/logits.npy"), &ref), KILN_OK);
    job jobs[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (job){.e = e, .x = &x, .rc = KILN_OK};
        assert_int_equal(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
    }
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    const float *r = ref.data;
    for (int t = 0; t < 4; t++) {
        assert_int_equal(jobs[t].rc, KILN_OK);
        assert_int_equal(jobs[t].out_size, 30 * sizeof(float));
        for (int i = 0; i < 30; i++)
            assert_true(fabsf(jobs[t].out[i] - r[i]) <= 1e-3f + 1e-3f * fabsf(r[i]));
        /* Contexts of one engine give bit-identical results. */
        assert_memory_equal(jobs[t].out, jobs[0].out, 30 * sizeof(float));
    }
    kn_free(x.data);
    kn_free(ref.data);
    kiln_engine_destroy(e);
}

static void test_profile_and_name_errors(void **state) {
    (void)state;
    kiln_engine *e = resnet_engine();
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    int64_t big[] = {8, 3, 64, 64};
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, big), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_last_error(), "input 'input' axis 0"));
    assert_non_null(strstr(kiln_last_error(), "[1, 4]"));
    int64_t chans[] = {1, 4, 64, 64};
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, chans), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_last_error(), "fixed at 3"));
    assert_int_equal(kiln_context_set_input_shape(ctx, "nope", 4, big), KILN_ERR_NOT_FOUND);
    assert_non_null(strstr(kiln_last_error(), "'input'"));
    /* No shape set yet: execute names the input. */
    assert_int_equal(kiln_context_execute(ctx), KILN_ERR_SHAPE);
    assert_non_null(strstr(kiln_last_error(), "input 'input'"));
    int64_t ok[] = {1, 3, 40, 40};
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, ok), KILN_OK);
    float small[4] = {0};
    assert_int_equal(kiln_context_set_input(ctx, "input", small, sizeof small), KILN_OK);
    assert_int_equal(kiln_context_execute(ctx), KILN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kiln_last_error(), "needs 19200 bytes"));
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
}

/* Any layer's output shape follows the input shapes set; unknown names and NULLs are refused. */
static void test_tensor_shapes(void **state) {
    (void)state;
    kiln_engine *e = resnet_engine();
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    const char *pool = NULL, *stem = NULL;
    for (int i = 0; i < kiln_engine_num_layers(e); i++) {
        kiln_layer_info li;
        assert_int_equal(kiln_engine_layer_info(e, i, &li), KILN_OK);
        if (stem == NULL && strstr(li.op_type, "Conv") != NULL)
            stem = li.outputs[0];
        if (pool == NULL && strcmp(li.op_type, "MaxPool") == 0)
            pool = li.outputs[0];
    }
    assert_non_null(stem);
    assert_non_null(pool);
    int rank = 0;
    int64_t d[KILN_MAX_RANK];
    int64_t a[] = {1, 3, 40, 40}, b[] = {2, 3, 64, 96};
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, a), KILN_OK);
    assert_int_equal(kiln_context_get_tensor_shape(ctx, stem, &rank, d), KILN_OK);
    assert_int_equal(rank, 4); /* the 7x7 stride-2 stem: 8 channels at half the size */
    assert_true(d[0] == 1 && d[1] == 8 && d[2] == 20 && d[3] == 20);
    assert_int_equal(kiln_context_get_tensor_shape(ctx, pool, &rank, d), KILN_OK);
    assert_true(rank == 4 && d[0] == 1 && d[1] == 8 && d[2] == 10 && d[3] == 10);
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, b), KILN_OK);
    assert_int_equal(kiln_context_get_tensor_shape(ctx, pool, &rank, d), KILN_OK);
    assert_true(rank == 4 && d[0] == 2 && d[1] == 8 && d[2] == 16 && d[3] == 24);
    /* the graph's input and output are tensors too */
    assert_int_equal(kiln_context_get_tensor_shape(ctx, "input", &rank, d), KILN_OK);
    assert_true(rank == 4 && d[0] == 2 && d[3] == 96);
    assert_int_equal(kiln_context_get_tensor_shape(ctx, "logits", &rank, d), KILN_OK);
    assert_true(rank == 2 && d[0] == 2 && d[1] == 10);
    assert_int_equal(kiln_context_get_tensor_shape(ctx, "nope", &rank, d), KILN_ERR_NOT_FOUND);
    assert_non_null(strstr(kiln_last_error(), "no tensor named 'nope'"));
    assert_int_equal(kiln_context_get_tensor_shape(ctx, NULL, &rank, d), KILN_ERR_INVALID_ARGUMENT);
    assert_int_equal(kiln_context_get_tensor_shape(ctx, pool, NULL, d), KILN_ERR_INVALID_ARGUMENT);
    assert_int_equal(kiln_context_get_tensor_shape(NULL, pool, &rank, d),
                     KILN_ERR_INVALID_ARGUMENT);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
}

/* An output bound to the caller's buffer is written there; a buffer too small is refused. */
static void test_bound_output(void **state) {
    (void)state;
    kiln_engine *e = resnet_engine();
    kn_tensor x, ref;
    assert_int_equal(kn_npy_read(path(MODEL "/case0_1x3x64x64/input.npy"), &x), KILN_OK);
    assert_int_equal(kn_npy_read(path(MODEL "/case0_1x3x64x64/logits.npy"), &ref), KILN_OK);
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, x.shape.d), KILN_OK);
    assert_int_equal(kiln_context_set_input(ctx, "input", x.data, kn_tensor_nbytes(&x)), KILN_OK);
    float small[4], out[10];
    assert_int_equal(kiln_context_set_output(ctx, "logits", small, sizeof small), KILN_OK);
    assert_int_equal(kiln_context_execute(ctx), KILN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kiln_last_error(), "output 'logits' needs 40 bytes"));
    assert_int_equal(kiln_context_set_output(ctx, "logits", out, sizeof out), KILN_OK);
    assert_int_equal(kiln_context_execute(ctx), KILN_OK);
    kiln_tensor_view v;
    assert_int_equal(kiln_context_get_output(ctx, "logits", &v), KILN_OK);
    assert_ptr_equal(v.data, out);
    const float *r = ref.data;
    for (int i = 0; i < 10; i++)
        assert_true(fabsf(out[i] - r[i]) <= 1e-3f + 1e-3f * fabsf(r[i]));
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kn_free(x.data);
    kn_free(ref.data);
}

static void check_logits(const float *out, const kn_tensor *ref) {
    const float *r = ref->data;
    for (int i = 0; i < 10; i++)
        assert_true(fabsf(out[i] - r[i]) <= 1e-3f + 1e-3f * fabsf(r[i]));
}

static void run_into(kiln_context *ctx, void *buf, size_t size, bool in_place, const void **at) {
    assert_int_equal(kiln_context_set_output(ctx, "logits", buf, size), KILN_OK);
    assert_int_equal(kiln_context_execute(ctx), KILN_OK);
    assert_int_equal(ctx->out_in_place[0], in_place);
    kiln_tensor_view v;
    assert_int_equal(kiln_context_get_output(ctx, "logits", &v), KILN_OK);
    assert_int_equal(v.size, 10 * sizeof(float));
    *at = v.data;
}

/* A bound host output aligned as the arena is, apart from the inputs, is written by its layer
 * straight into the caller's buffer; a misaligned one, one overlapping an input, and one
 * bound as a buffer of a later run are copied to; unbound, the view is the arena's own memory.
 * Every way gives the same values, and a run into a new buffer leaves the last one alone. */
static void test_bound_output_in_place(void **state) {
    (void)state;
    kiln_engine *e = resnet_engine();
    kn_tensor x, ref;
    assert_int_equal(kn_npy_read(path(MODEL "/case0_1x3x64x64/input.npy"), &x), KILN_OK);
    assert_int_equal(kn_npy_read(path(MODEL "/case0_1x3x64x64/logits.npy"), &ref), KILN_OK);
    size_t nx = kn_tensor_nbytes(&x);
    float *in = kn_aligned_alloc(nx, 64), *a = kn_aligned_alloc(128, 64);
    float *b = kn_aligned_alloc(128, 64);
    assert_non_null(in), assert_non_null(a), assert_non_null(b);
    memcpy(in, x.data, nx);
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, x.shape.d), KILN_OK);
    assert_int_equal(kiln_context_set_input(ctx, "input", in, nx), KILN_OK);
    const void *at;
    run_into(ctx, a, 128, true, &at);
    assert_ptr_equal(at, a);
    check_logits(a, &ref);
    run_into(ctx, a + 1, 64, false, &at); /* 4 bytes past the alignment */
    assert_ptr_equal(at, a + 1);
    check_logits(a + 1, &ref);
    float first[10];
    memcpy(first, a, sizeof first);
    run_into(ctx, b, 128, true, &at);
    assert_ptr_equal(at, b);
    check_logits(b, &ref);
    assert_memory_equal(a, first, sizeof first);
    /* The input's own buffer as the output: copied after the run, so no layer reads it
     * overwritten. */
    run_into(ctx, in, 64, false, &at);
    assert_ptr_equal(at, in);
    check_logits(in, &ref);
    memcpy(in, x.data, nx);
    /* Unbound: the view is the value's arena memory, valid until the next execute. */
    run_into(ctx, NULL, 0, false, &at);
    const char *base = ctx->arenas[0].base;
    assert_true((const char *)at >= base && (const char *)at < base + ctx->arenas[0].size);
    check_logits(at, &ref);
    /* Bound again after running unbound: written in place again, and right. */
    memset(b, 0, 128);
    run_into(ctx, b, 128, true, &at);
    check_logits(b, &ref);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    kn_free(in), kn_free(a), kn_free(b);
    kn_free(x.data);
    kn_free(ref.data);
}

static void test_bad_plans_refused(void **state) {
    (void)state;
    void *plan;
    size_t size;
    assert_int_equal(build_resnet(&plan, &size), KILN_OK);
    kiln_engine *e = NULL;
    assert_int_equal(kiln_engine_load_memory(plan, size / 2, NULL, &e), KILN_ERR_PLAN);
    assert_null(e);
    unsigned char *bytes = plan;
    bytes[size / 3] ^= 0x10;
    assert_int_equal(kiln_engine_load_memory(plan, size, NULL, &e), KILN_ERR_PLAN);
    assert_null(e);
    kiln_free(plan);
}

/* Every allocation of a build + load + run fails in turn: each ends in a clean error (or
 * success once the countdown passes the last allocation), never a crash or a leak. */
static void test_allocation_failures(void **state) {
    (void)state;
    size_t base = kiln_allocated_bytes();
    kn_tensor x;
    assert_int_equal(kn_npy_read(path(MODEL "/case0_1x3x64x64/input.npy"), &x), KILN_OK);
    int successes = 0;
    for (long n = 1; n < 10000000 && successes < 2; n += n / 16 + 1) {
        kn_alloc_fail_after(n);
        void *plan = NULL;
        size_t size = 0;
        kiln_status rc = build_resnet(&plan, &size);
        kiln_engine *e = NULL;
        if (rc == KILN_OK)
            rc = kiln_engine_load_memory(plan, size, NULL, &e);
        kiln_free(plan);
        float out[64];
        size_t out_size;
        if (rc == KILN_OK)
            rc = run_once(e, &x, out, &out_size);
        kiln_engine_destroy(e);
        kn_alloc_fail_after(0);
        if (rc == KILN_OK)
            successes++;
        else if (!(rc == KILN_ERR_OUT_OF_MEMORY || strstr(kiln_last_error(), "memory")))
            fail_msg("n=%ld rc=%d: %s", n, rc, kiln_last_error());
    }
    assert_true(successes > 0);
    kn_free(x.data);
    assert_int_equal(kiln_allocated_bytes(), base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_plan_run_matches_pytorch),
        cmocka_unit_test(test_profile_and_name_errors),
        cmocka_unit_test(test_tensor_shapes),
        cmocka_unit_test(test_bound_output),
        cmocka_unit_test(test_bound_output_in_place),
        cmocka_unit_test(test_bad_plans_refused),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
