/* A small CNN built layer by layer with the network API, checked against the same model
 * imported from small_cnn.onnx (written by make_small_cnn.py with the same tensor and layer
 * names, attribute order, weights, graph name "network", ir_version and opset):
 *
 *     input [1,3,16,16] -> conv1 (pad 1) -> relu1 -> pool1 (max 2x2/2) -> conv2 (pad 1)
 *       -> gap (global average) -> flatten -> fc (Gemm, transB) -> softmax -> probs [1,10]
 *
 * Usage: small_cnn DIR, where DIR holds small_cnn.onnx and weights/<name>.npy.
 *
 * Checks, in order of strength: the two plans are byte-identical (reported either way); their
 * outputs on the same random input are bit-identical; the outputs are a probability
 * distribution. Exit code 0 when the outputs agree. */
#include "kiln/kiln.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        kiln_status rc_ = (call);                                                                  \
        if (rc_ != KILN_OK) {                                                                      \
            fprintf(stderr, "%s failed: %s: %s\n", #call, kiln_status_name(rc_),                   \
                    kiln_last_error());                                                            \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

enum { N_WEIGHTS = 6, N_CLASSES = 10, IN_ELEMS = 3 * 16 * 16 };

typedef struct weight {
    const char *name;
    int rank;
    int64_t dims[4];
    float *data;
} weight;

/* In initializer order: an ONNX import creates constants first, so adding them first here
 * gives the same tensor numbering. */
static weight weights[N_WEIGHTS] = {
    {"conv1.weight", 4, {8, 3, 3, 3}, NULL},  {"conv1.bias", 1, {8}, NULL},
    {"conv2.weight", 4, {16, 8, 3, 3}, NULL}, {"conv2.bias", 1, {16}, NULL},
    {"fc.weight", 2, {10, 16}, NULL},         {"fc.bias", 1, {10}, NULL},
};

/* Reads a little-endian float32 C-order .npy file of `count` elements. */
static float *load_npy(const char *path, int64_t count) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        return NULL;
    }
    unsigned char pre[10];
    float *data = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1) {
        fprintf(stderr, "%s is not a version-1 .npy file\n", path);
        goto out;
    }
    size_t hlen = (size_t)pre[8] | ((size_t)pre[9] << 8);
    char header[1024];
    if (hlen >= sizeof header || fread(header, 1, hlen, f) != hlen) {
        fprintf(stderr, "%s: bad .npy header\n", path);
        goto out;
    }
    header[hlen] = '\0';
    if (strstr(header, "'<f4'") == NULL || strstr(header, "'fortran_order': False") == NULL) {
        fprintf(stderr, "%s: expected little-endian float32 in C order\n", path);
        goto out;
    }
    data = malloc((size_t)count * sizeof(float));
    if (data != NULL && fread(data, sizeof(float), (size_t)count, f) != (size_t)count) {
        fprintf(stderr, "%s: expected %lld floats\n", path, (long long)count);
        free(data);
        data = NULL;
    }
out:
    fclose(f);
    return data;
}

static int load_weights(const char *dir) {
    for (int i = 0; i < N_WEIGHTS; i++) {
        char path[4096];
        int64_t count = 1;
        for (int d = 0; d < weights[i].rank; d++)
            count *= weights[i].dims[d];
        snprintf(path, sizeof path, "%s/weights/%s.npy", dir, weights[i].name);
        if ((weights[i].data = load_npy(path, count)) == NULL)
            return -1;
    }
    return 0;
}

/* Every layer output gets the name the ONNX file gives it. t is read only after the call
 * that produced rc has written it (argument evaluation order is unspecified). */
static kiln_status named(kiln_network *net, kiln_status rc, const int32_t *t, const char *name) {
    return rc != KILN_OK ? rc : kiln_network_set_tensor_name(net, *t, name);
}

static kiln_status build_by_code(kiln_builder *b, kiln_network **out) {
    kiln_network *net;
    kiln_status rc = kiln_network_create(b, 17, &net);
    if (rc != KILN_OK)
        return rc;
    int32_t w[N_WEIGHTS], x, t;
    for (int i = 0; i < N_WEIGHTS && rc == KILN_OK; i++)
        rc = kiln_network_add_constant(net, weights[i].name, KILN_DTYPE_FLOAT32, weights[i].rank,
                                       weights[i].dims, weights[i].data, 1, &w[i]);
    const int64_t in_dims[4] = {1, 3, 16, 16};
    const int64_t pad1[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
    if (rc == KILN_OK)
        rc = kiln_network_add_input(net, "input", KILN_DTYPE_FLOAT32, 4, in_dims, NULL, &x);
    if (rc == KILN_OK)
        rc = named(
            net, kiln_network_add_convolution(net, "conv1", x, w[0], w[1], NULL, pad1, NULL, 1, &t),
            &t, "conv1_out");
    if (rc == KILN_OK)
        rc = named(net, kiln_network_add_activation(net, "relu1", t, KILN_ACT_RELU, 0, 0, &t), &t,
                   "relu1_out");
    if (rc == KILN_OK)
        rc = named(net,
                   kiln_network_add_pooling(net, "pool1", t, KILN_POOL_MAX, 0, k2, k2, NULL, &t),
                   &t, "pool1_out");
    if (rc == KILN_OK)
        rc = named(
            net, kiln_network_add_convolution(net, "conv2", t, w[2], w[3], NULL, pad1, NULL, 1, &t),
            &t, "conv2_out");
    if (rc == KILN_OK)
        rc = named(
            net,
            kiln_network_add_pooling(net, "gap", t, KILN_POOL_AVERAGE, 1, NULL, NULL, NULL, &t), &t,
            "gap_out");
    if (rc == KILN_OK) {
        kiln_attribute axis = {.name = "axis", .type = KILN_ATTR_INT, .i = 1};
        int32_t in = t;
        rc = named(net, kiln_network_add_layer(net, "flatten", "Flatten", 1, &in, 1, &axis, 1, &t),
                   &t, "flatten_out");
    }
    if (rc == KILN_OK)
        rc = named(net, kiln_network_add_matmul(net, "fc", t, w[4], w[5], 1, &t), &t, "fc_out");
    if (rc == KILN_OK)
        rc = named(net, kiln_network_add_softmax(net, "softmax", t, 1, &t), &t, "probs");
    if (rc == KILN_OK)
        rc = kiln_network_mark_output(net, t);
    if (rc != KILN_OK) {
        kiln_network_destroy(net);
        return rc;
    }
    *out = net;
    return KILN_OK;
}

/* Runs a plan on x and copies the N_CLASSES outputs to y. */
static kiln_status run_plan(const void *plan, size_t size, const float *x, float *y) {
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    kiln_tensor_view out;
    kiln_status rc = kiln_engine_load_memory(plan, size, NULL, &e);
    if (rc == KILN_OK)
        rc = kiln_context_create(e, &ctx);
    if (rc == KILN_OK)
        rc = kiln_context_set_input(ctx, "input", x, IN_ELEMS * sizeof(float));
    if (rc == KILN_OK)
        rc = kiln_context_execute(ctx);
    if (rc == KILN_OK)
        rc = kiln_context_get_output(ctx, "probs", &out);
    if (rc == KILN_OK && out.size != N_CLASSES * sizeof(float)) {
        fprintf(stderr, "output 'probs' has %zu bytes\n", out.size);
        rc = KILN_ERR_INTERNAL;
    }
    if (rc == KILN_OK)
        memcpy(y, out.data, out.size);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    kiln_builder *b = NULL;
    kiln_network *by_code = NULL, *from_onnx = NULL;
    kiln_build_config *cfg = NULL;
    void *plan_code = NULL, *plan_onnx = NULL;
    size_t size_code = 0, size_onnx = 0;
    int ok = 0;

    if (load_weights(dir) != 0)
        goto fail;
    char onnx_path[4096];
    snprintf(onnx_path, sizeof onnx_path, "%s/small_cnn.onnx", dir);

    CHECK(kiln_builder_create(&b));
    CHECK(kiln_build_config_create(&cfg));
    CHECK(build_by_code(b, &by_code));
    printf("network by code: %d layers\n", kiln_network_num_layers(by_code));
    CHECK(kiln_build(b, by_code, cfg, &plan_code, &size_code));
    CHECK(kiln_network_from_onnx_file(b, onnx_path, &from_onnx));
    CHECK(kiln_build(b, from_onnx, cfg, &plan_onnx, &size_onnx));

    int identical = size_code == size_onnx && memcmp(plan_code, plan_onnx, size_code) == 0;
    printf("plans: by code %zu bytes, from ONNX %zu bytes: %s\n", size_code, size_onnx,
           identical ? "byte-identical" : "different bytes");

    float x[IN_ELEMS], y_code[N_CLASSES], y_onnx[N_CLASSES];
    uint32_t seed = 7;
    for (int i = 0; i < IN_ELEMS; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    CHECK(run_plan(plan_code, size_code, x, y_code));
    CHECK(run_plan(plan_onnx, size_onnx, x, y_onnx));
    int same = memcmp(y_code, y_onnx, sizeof y_code) == 0;
    double sum = 0;
    int in_range = 1;
    for (int i = 0; i < N_CLASSES; i++) {
        sum += y_code[i];
        in_range &= y_code[i] > 0.0f && y_code[i] < 1.0f;
    }
    printf("outputs bit-identical: %s; probabilities sum to %.7f\n", same ? "yes" : "no", sum);
    ok = same && in_range && fabs(sum - 1.0) < 1e-5;

fail:
    kiln_free(plan_code);
    kiln_free(plan_onnx);
    kiln_network_destroy(by_code);
    kiln_network_destroy(from_onnx);
    kiln_build_config_destroy(cfg);
    kiln_builder_destroy(b);
    for (int i = 0; i < N_WEIGHTS; i++)
        free(weights[i].data);
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
