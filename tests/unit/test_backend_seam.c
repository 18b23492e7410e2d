/* The backend seam with the testdev module (tests/testdev): its poisoned memory space, copies
 * and events; a model split across testdev and the host on 8 threads with 8 contexts of one
 * engine, bit-identical to the host-only plan at several shapes of the profile; enqueue and
 * synchronize; inputs and outputs bound as device memory; per-context kernel state and stream
 * graphs, counted by testdev. KILN_BACKEND_PATH names the folder of
 * libkiln_testdev.so (CTest sets it). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/fileio.h"
#include "kiln/kiln.h"
#include "../testdev/testdev.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "tests/models/resnet_mini/model.onnx"
#define THREADS 8

static char *path(const char *rel) {
    static char buf[1024];
    const char *root = getenv("KILN_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : KILN_SOURCE_DIR, rel);
    return buf;
}

static kn_backend *testdev(void) {
    kn_backend *b = NULL;
    kiln_status rc = kn_backend_get("testdev", &b);
    if (rc != KILN_OK)
        fail_msg("testdev: %s", kiln_last_error());
    return b;
}

static void test_poisoned_memory_copies_and_events(void **state) {
    (void)state;
    kn_backend *b = testdev();
    const kn_backend_iface *f = b->iface;
    assert_int_equal(f->mem, KN_MEM_DEVICE);
    float host[256], back[256];
    for (int i = 0; i < 256; i++)
        host[i] = (float)i * 0.5f;
    kn_buffer buf;
    kn_stream *s;
    kn_event *e0, *e1;
    assert_int_equal(f->buffer_alloc(b, KN_MEM_DEVICE, sizeof host, &buf), KILN_OK);
    assert_int_equal(f->stream_create(b, &s), KILN_OK);
    assert_int_equal(f->event_create(b, &e0), KILN_OK);
    assert_int_equal(f->event_create(b, &e1), KILN_OK);
    assert_int_equal(f->event_record(b, e0, s), KILN_OK);
    assert_int_equal(f->copy(b, s, buf.base, KN_MEM_DEVICE, host, KN_MEM_HOST, sizeof host),
                     KILN_OK);
    assert_int_equal(f->event_record(b, e1, s), KILN_OK);
    assert_int_equal(f->event_sync(b, e1), KILN_OK);
    /* The host's view of device memory is poison: a kernel reading it directly sees NaN. */
    const float *view = buf.base;
    for (int i = 0; i < 256; i++)
        assert_true(isnan(view[i]));
    memset(back, 0, sizeof back);
    assert_int_equal(f->copy(b, s, back, KN_MEM_HOST, buf.base, KN_MEM_DEVICE, sizeof back),
                     KILN_OK);
    assert_int_equal(f->stream_sync(b, s), KILN_OK);
    assert_memory_equal(back, host, sizeof host);
    float ms = -1;
    assert_int_equal(f->event_elapsed(b, e0, e1, &ms), KILN_OK);
    assert_true(ms >= 0);
    f->event_destroy(b, e0);
    f->event_destroy(b, e1);
    f->stream_destroy(b, s);
    f->buffer_free(b, &buf);
}

static void build(const char *backend, void **plan, size_t *size) {
    kiln_builder *b;
    kiln_network *net;
    kiln_build_config *cfg;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    assert_int_equal(kiln_network_from_onnx_file(b, path(MODEL), &net), KILN_OK);
    assert_int_equal(kiln_build_config_create(&cfg), KILN_OK);
    int64_t mn[] = {1, 3, 32, 32}, op[] = {2, 3, 64, 64}, mx[] = {4, 3, 96, 96};
    assert_int_equal(kiln_build_config_add_profile(cfg, "input", 4, mn, op, mx), KILN_OK);
    if (backend != NULL) {
        const char *names[] = {backend, "cpu"};
        assert_int_equal(kiln_build_config_set_backends(cfg, names, 2), KILN_OK);
    }
    kiln_status rc = kiln_build(b, net, cfg, plan, size);
    if (rc != KILN_OK)
        fail_msg("build: %s", kiln_last_error());
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
}

static kiln_engine *engine(const char *backend) {
    void *plan;
    size_t size;
    build(backend, &plan, &size);
    kiln_engine *e;
    kiln_status rc = kiln_engine_load_memory(plan, size, NULL, &e);
    if (rc != KILN_OK)
        fail_msg("load: %s", kiln_last_error());
    kiln_free(plan);
    return e;
}

static const int64_t shapes[3][4] = {{1, 3, 32, 32}, {3, 3, 48, 80}, {4, 3, 96, 96}};
static float *inputs[3];
static float *expected[3];
static size_t out_size[3];

static size_t numel(const int64_t *d) {
    return (size_t)(d[0] * d[1] * d[2] * d[3]);
}

/* Run ctx at shape k with enqueue + synchronize; returns a copy of the logits. */
static float *run_shape(kiln_context *ctx, int k, size_t *size) {
    if (kiln_context_set_input_shape(ctx, "input", 4, shapes[k]) != KILN_OK ||
        kiln_context_set_input(ctx, "input", inputs[k], numel(shapes[k]) * sizeof(float)) !=
            KILN_OK ||
        kiln_context_enqueue(ctx) != KILN_OK || kiln_context_synchronize(ctx) != KILN_OK)
        return NULL;
    kiln_tensor_view v;
    if (kiln_context_get_output(ctx, "logits", &v) != KILN_OK)
        return NULL;
    float *copy = malloc(v.size);
    if (copy)
        memcpy(copy, v.data, v.size);
    *size = v.size;
    return copy;
}

static void make_expected(void) {
    if (expected[0] != NULL)
        return;
    unsigned seed = 7;
    for (int k = 0; k < 3; k++) {
        inputs[k] = malloc(numel(shapes[k]) * sizeof(float));
        for (size_t i = 0; i < numel(shapes[k]); i++) {
            seed = seed * 1103515245u + 12345u;
            inputs[k][i] = (float)((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
        }
    }
    kiln_engine *e = engine(NULL);
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    for (int k = 0; k < 3; k++) {
        expected[k] = run_shape(ctx, k, &out_size[k]);
        assert_non_null(expected[k]);
    }
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
}

typedef struct worker_arg {
    kiln_engine *e;
    int id;
    int mismatches;
    int failures;
} worker_arg;

static void *worker(void *p) {
    worker_arg *w = p;
    kiln_context *ctx;
    if (kiln_context_create(w->e, &ctx) != KILN_OK || kiln_context_set_threads(ctx, 1) != KILN_OK) {
        w->failures++;
        return NULL;
    }
    for (int it = 0; it < 6; it++) {
        int k = (w->id + it) % 3;
        size_t size = 0;
        float *got = run_shape(ctx, k, &size);
        if (got == NULL)
            w->failures++;
        else if (size != out_size[k] || memcmp(got, expected[k], size) != 0)
            w->mismatches++;
        free(got);
    }
    kiln_context_destroy(ctx);
    return NULL;
}

static void test_split_model_on_8_threads_matches_host_bit_for_bit(void **state) {
    (void)state;
    make_expected();
    kiln_engine *e = engine("testdev");
    pthread_t t[THREADS];
    worker_arg w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_arg){.e = e, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, worker, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
        assert_int_equal(w[i].mismatches, 0);
    }
    kiln_engine_destroy(e);
}

static void test_device_bound_input_and_output(void **state) {
    (void)state;
    make_expected();
    kn_backend *b = testdev();
    kiln_engine *e = engine("testdev");
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    size_t in_bytes = numel(shapes[1]) * sizeof(float);
    kn_buffer din, dout;
    assert_int_equal(b->iface->buffer_alloc(b, KN_MEM_DEVICE, in_bytes, &din), KILN_OK);
    assert_int_equal(b->iface->buffer_alloc(b, KN_MEM_DEVICE, out_size[1], &dout), KILN_OK);
    assert_int_equal(
        b->iface->copy(b, NULL, din.base, KN_MEM_DEVICE, inputs[1], KN_MEM_HOST, in_bytes),
        KILN_OK);
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, shapes[1]), KILN_OK);
    assert_int_equal(
        kiln_context_set_input_memory(ctx, "input", din.base, in_bytes, KILN_MEMORY_DEVICE),
        KILN_OK);
    assert_int_equal(
        kiln_context_set_output_memory(ctx, "logits", dout.base, out_size[1], KILN_MEMORY_DEVICE),
        KILN_OK);
    testdev_stats *st = b->context;
    long to_host = st->to_host, on_device = st->on_device;
    kiln_status rc = kiln_context_execute(ctx);
    if (rc != KILN_OK)
        fail_msg("execute: %s", kiln_last_error());
    /* the bound input is copied into the plan's device memory and the logits straight into
     * the bound buffer: nothing goes through the host */
    assert_int_equal(st->to_host - to_host, 0);
    assert_int_equal(st->on_device - on_device, 2);
    float *back = malloc(out_size[1]);
    assert_int_equal(
        b->iface->copy(b, NULL, back, KN_MEM_HOST, dout.base, KN_MEM_DEVICE, out_size[1]), KILN_OK);
    assert_memory_equal(back, expected[1], out_size[1]);
    free(back);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    b->iface->buffer_free(b, &din);
    b->iface->buffer_free(b, &dout);
}

/* Kernel state is made once per node and context, remade when shapes change and released with
 * the context; the second run at a shape records stream graphs, later runs launch them, a new
 * shape records anew; every run's logits equal the host-only plan's bit for bit. */
static void test_kernel_state_and_stream_graphs(void **state) {
    (void)state;
    make_expected();
    testdev_stats *st = testdev()->context;
    kiln_engine *e = engine("testdev");
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    long made0 = st->local_made, remade0 = st->local_remade, released0 = st->local_released;
    long captured0 = st->captured, launched0 = st->launched, destroyed0 = st->destroyed;
    long made = 0, segments = 0;
    for (int it = 0; it < 5; it++) {
        size_t size = 0;
        float *got = run_shape(ctx, 1, &size);
        assert_non_null(got);
        assert_int_equal(size, out_size[1]);
        assert_memory_equal(got, expected[1], size);
        free(got);
        if (it == 0) {
            made = st->local_made - made0;
            assert_true(made > 0);
            assert_int_equal(st->captured, captured0); /* the first run is the warm-up */
        }
        if (it == 1) {
            segments = st->captured - captured0;
            assert_true(segments > 0);
        }
    }
    assert_int_equal(st->local_made - made0, made);
    assert_int_equal(st->local_remade, remade0);
    assert_int_equal(st->captured - captured0, segments);
    assert_int_equal(st->launched - launched0, 4 * segments);
    for (int it = 0; it < 3; it++) {
        size_t size = 0;
        float *got = run_shape(ctx, 2, &size);
        assert_non_null(got);
        assert_int_equal(size, out_size[2]);
        assert_memory_equal(got, expected[2], size);
        free(got);
    }
    assert_int_equal(st->local_made - made0, made);
    assert_int_equal(st->local_remade - remade0, made); /* every node's shapes changed */
    assert_int_equal(st->captured - captured0, 2 * segments);
    assert_int_equal(st->destroyed - destroyed0, segments); /* the first shape's graphs */
    assert_int_equal(st->launched - launched0, 6 * segments);
    kiln_context_destroy(ctx);
    assert_int_equal(st->local_released - released0, made);
    assert_int_equal(st->destroyed - destroyed0, 2 * segments);
    kiln_engine_destroy(e);
}

/* Logits of the host-only plan for input x at shape k. */
static float *host_logits(const float *x, int k) {
    kiln_engine *e = engine(NULL);
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    float *save = inputs[k];
    inputs[k] = (float *)x;
    size_t size = 0;
    float *got = run_shape(ctx, k, &size);
    inputs[k] = save;
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    assert_non_null(got);
    return got;
}

/* Copies of graph inputs and outputs stay outside stream graphs: rebinding other device
 * buffers between replays reads the new input and writes the new output. */
static void test_stream_graphs_follow_rebound_device_buffers(void **state) {
    (void)state;
    make_expected();
    kn_backend *b = testdev();
    testdev_stats *st = b->context;
    size_t in_bytes = numel(shapes[1]) * sizeof(float), nb = out_size[1];
    float *neg = malloc(in_bytes);
    for (size_t i = 0; i < numel(shapes[1]); i++)
        neg[i] = -inputs[1][i];
    float *want[2] = {expected[1], host_logits(neg, 1)};
    assert_memory_not_equal(want[0], want[1], nb);
    kn_buffer din[2], dout[2];
    const float *src[2] = {inputs[1], neg};
    for (int j = 0; j < 2; j++) {
        assert_int_equal(b->iface->buffer_alloc(b, KN_MEM_DEVICE, in_bytes, &din[j]), KILN_OK);
        assert_int_equal(b->iface->buffer_alloc(b, KN_MEM_DEVICE, nb, &dout[j]), KILN_OK);
        assert_int_equal(
            b->iface->copy(b, NULL, din[j].base, KN_MEM_DEVICE, src[j], KN_MEM_HOST, in_bytes),
            KILN_OK);
    }
    kiln_engine *e = engine("testdev");
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, shapes[1]), KILN_OK);
    long launched0 = st->launched;
    float *back = malloc(nb);
    for (int it = 0; it < 6; it++) {
        int ji = it % 2, jo = (it / 2) % 2;
        assert_int_equal(
            kiln_context_set_input_memory(ctx, "input", din[ji].base, in_bytes, KILN_MEMORY_DEVICE),
            KILN_OK);
        assert_int_equal(
            kiln_context_set_output_memory(ctx, "logits", dout[jo].base, nb, KILN_MEMORY_DEVICE),
            KILN_OK);
        kiln_status rc = kiln_context_execute(ctx);
        if (rc != KILN_OK)
            fail_msg("execute: %s", kiln_last_error());
        assert_int_equal(
            b->iface->copy(b, NULL, back, KN_MEM_HOST, dout[jo].base, KN_MEM_DEVICE, nb), KILN_OK);
        assert_memory_equal(back, want[ji], nb);
    }
    assert_true(st->launched - launched0 >= 5); /* every run after the warm-up replayed */
    free(back);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    for (int j = 0; j < 2; j++) {
        b->iface->buffer_free(b, &din[j]);
        b->iface->buffer_free(b, &dout[j]);
    }
    free(want[1]);
    free(neg);
}

static void test_device_input_read_on_host_is_refused(void **state) {
    (void)state;
    make_expected();
    kiln_engine *e = engine(NULL); /* host only: no device to bind to */
    kiln_context *ctx;
    assert_int_equal(kiln_context_create(e, &ctx), KILN_OK);
    size_t in_bytes = numel(shapes[0]) * sizeof(float);
    assert_int_equal(kiln_context_set_input_shape(ctx, "input", 4, shapes[0]), KILN_OK);
    assert_int_equal(
        kiln_context_set_input_memory(ctx, "input", inputs[0], in_bytes, KILN_MEMORY_DEVICE),
        KILN_OK);
    assert_int_equal(kiln_context_execute(ctx), KILN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kiln_last_error(), "bound as device memory"));
    assert_int_equal(kiln_context_synchronize(ctx), KILN_ERR_INVALID_ARGUMENT);
    assert_int_equal(kiln_context_set_input_memory(ctx, "input", inputs[0], in_bytes, 7),
                     KILN_ERR_INVALID_ARGUMENT);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
}

static void test_backend_names_and_absent_backends(void **state) {
    (void)state;
    kn_backend *b;
    assert_int_equal(kn_backend_get("cpu", &b), KILN_OK);
    assert_ptr_equal(b, kn_backend_host());
    assert_int_not_equal(kn_backend_get("nosuch", &b), KILN_OK);
    assert_non_null(strstr(kiln_last_error(), "libkiln_nosuch.so"));
    assert_int_not_equal(kn_backend_get("../etc", &b), KILN_OK);
    char names[128];
    testdev();
    assert_non_null(strstr(kn_backend_names(names, sizeof names), "testdev"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_poisoned_memory_copies_and_events),
        cmocka_unit_test(test_split_model_on_8_threads_matches_host_bit_for_bit),
        cmocka_unit_test(test_device_bound_input_and_output),
        cmocka_unit_test(test_kernel_state_and_stream_graphs),
        cmocka_unit_test(test_stream_graphs_follow_rebound_device_buffers),
        cmocka_unit_test(test_device_input_read_on_host_is_refused),
        cmocka_unit_test(test_backend_names_and_absent_backends),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int k = 0; k < 3; k++) {
        free(inputs[k]);
        free(expected[k]);
    }
    return rc;
}
