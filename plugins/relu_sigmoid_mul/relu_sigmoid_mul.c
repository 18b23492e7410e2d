/* ReluSigmoidMul plugin: y = relu(x) * sigmoid(x) in one pass over memory, where the three
 * separate ops read and write the tensor three times. For x <= 0 the product is 0; for x > 0
 * it is x / (1 + e^-x). Writing it as t / (1 + e^-t) with t = max(x, 0) covers both without a
 * branch, and 1 + e^-t stays in [1, 2], where a few Newton steps replace the division, so the
 * float32 loop vectorizes into multiplies and adds.
 *
 * float32 and float16 (x and y share the dtype), any rank and shape; no fields, no workspace,
 * nothing cached per shape or per profile, so configure and on_shape_change are not needed.
 *
 * Built with CUDA (KP_CUDA, relu_sigmoid_mul_cuda.cu) it also runs on the CUDA backend: one
 * kernel launched on the context's stream, no synchronization, so it is declared graph-safe. */
#include "kiln/kiln_plugin.h"

#include "../common/kp_math.h"
#ifdef KP_CUDA
#include "../common/kp_cuda.h"
#endif

#include <stdlib.h>
#include <string.h>

typedef struct rsm {
    const kiln_host_api *host;
} rsm;

static int32_t rsm_num_outputs(void *self) {
    (void)self;
    return 1;
}

static int32_t rsm_output_shapes(void *self, int32_t n_in, const kiln_shape_expr *in, int32_t n_out,
                                 kiln_shape_expr *out, kiln_expr_builder *b) {
    rsm *s = self;
    (void)b;
    if (n_in != 1 || n_out != 1) {
        s->host->set_error("ReluSigmoidMul takes 1 input and makes 1 output; got %d and %d",
                           (int)n_in, (int)n_out);
        return -1;
    }
    out[0] = in[0];
    return 0;
}

static int32_t rsm_supports_format(void *self, int32_t pos, const kiln_tensor_desc *descs,
                                   int32_t n_in, int32_t n_out) {
    (void)self;
    if (pos < 0 || pos >= n_in + n_out || descs[pos].layout != KILN_LAYOUT_LINEAR)
        return 0;
    if (pos == 0)
        return descs[0].dtype == KILN_PLUGIN_FLOAT32 || descs[0].dtype == KILN_PLUGIN_FLOAT16;
    return descs[pos].dtype == descs[0].dtype;
}

KP_CLONES static void rsm_f32(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float t = x[i] <= 0.0f ? 0.0f : x[i]; /* false for NaN, so NaN stays NaN */
        y[i] = t * kiln_math_sigmoid(t);
    }
}

static void rsm_f16(const uint16_t *x, uint16_t *y, int64_t n) {
    float buf[256];
    for (int64_t i = 0; i < n; i += 256) {
        int64_t m = n - i < 256 ? n - i : 256;
        for (int64_t j = 0; j < m; j++)
            buf[j] = kp_half_to_float(x[i + j]);
        rsm_f32(buf, buf, m);
        for (int64_t j = 0; j < m; j++)
            y[i + j] = kp_float_to_half(buf[j]);
    }
}

typedef struct rsm_task {
    const void *x;
    void *y;
    int32_t dtype;
} rsm_task;

static void rsm_range(void *arg, int64_t begin, int64_t end) {
    const rsm_task *t = arg;
    if (t->dtype == KILN_PLUGIN_FLOAT32)
        rsm_f32((const float *)t->x + begin, (float *)t->y + begin, end - begin);
    else
        rsm_f16((const uint16_t *)t->x + begin, (uint16_t *)t->y + begin, end - begin);
}

static int32_t rsm_enqueue(void *self, int32_t n_in, const kiln_tensor_desc *in_desc,
                           const void *const *inputs, int32_t n_out,
                           const kiln_tensor_desc *out_desc, void *const *outputs, void *workspace,
                           const kiln_stream *stream) {
    rsm *s = self;
    (void)out_desc, (void)workspace;
    int cuda = stream->backend == KILN_BACKEND_CUDA;
    if (n_in != 1 || n_out != 1 || (stream->backend != KILN_BACKEND_CPU && !cuda)) {
        s->host->set_error("ReluSigmoidMul runs on the CPU or CUDA with 1 input and 1 output");
        return -1;
    }
    int64_t n = 1;
    for (int d = 0; d < in_desc[0].rank; d++)
        n *= in_desc[0].dims[d];
    if (n == 0)
        return 0;
    if (cuda) {
#ifdef KP_CUDA
        const char *err = kp_relu_sigmoid_mul_cuda(
            inputs[0], outputs[0], n, in_desc[0].dtype == KILN_PLUGIN_FLOAT16, stream->handle);
        if (err != NULL) {
            s->host->set_error("CUDA launch failed: %s", err);
            return -1;
        }
        return 0;
#else
        s->host->set_error("this build of ReluSigmoidMul has no CUDA kernels");
        return -1;
#endif
    }
    rsm_task t = {.x = inputs[0], .y = outputs[0], .dtype = in_desc[0].dtype};
    s->host->parallel_for(stream, n, 16384, rsm_range, &t);
    return 0;
}

static int32_t rsm_get_fields(void *self, kiln_field_list *out) {
    (void)self;
    out->count = 0;
    out->fields = NULL;
    return 0;
}

static void *rsm_clone(void *self) {
    rsm *c = malloc(sizeof *c);
    if (c != NULL)
        *c = *(const rsm *)self;
    return c;
}

static void rsm_destroy(void *self) {
    free(self);
}

static int32_t rsm_supports_backend(void *self, const char *backend) {
    (void)self;
#ifdef KP_CUDA
    if (strcmp(backend, "cuda") == 0)
        return 1;
#endif
    return strcmp(backend, "cpu") == 0;
}

static const kiln_plugin_ops rsm_ops = {
    .struct_size = sizeof(kiln_plugin_ops),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .num_outputs = rsm_num_outputs,
    .output_shapes = rsm_output_shapes,
    .supports_format = rsm_supports_format,
    .enqueue = rsm_enqueue,
    .get_fields = rsm_get_fields,
    .clone = rsm_clone,
    .destroy = rsm_destroy,
    .supports_backend = rsm_supports_backend,
    .flags = KILN_PLUGIN_FLAG_GRAPH_SAFE,
};

static int32_t rsm_create(const kiln_plugin_creator *creator, const kiln_field_list *fields,
                          kiln_plugin_instance *out) {
    const kiln_host_api *host = creator->user;
    if (fields != NULL && fields->count > 0) {
        const char *name = fields->fields[0].name;
        host->set_error("ReluSigmoidMul takes no fields; got '%s'", name ? name : "(null)");
        return -1;
    }
    rsm *s = malloc(sizeof *s);
    if (s == NULL) {
        host->set_error("out of memory");
        return -1;
    }
    s->host = host;
    out->ops = &rsm_ops;
    out->self = s;
    return 0;
}

KILN_PLUGIN_EXPORT int32_t kiln_plugin_entry(const kiln_host_api *host, kiln_registry *registry) {
    if (host == NULL || host->abi_version < 1 ||
        !KILN_HAS_MEMBER(host, kiln_host_api, parallel_for))
        return -1;
    kiln_plugin_creator c = {
        .struct_size = sizeof(kiln_plugin_creator),
        .abi_version = KILN_PLUGIN_ABI_VERSION,
        .name = "ReluSigmoidMul",
        .version = "1",
        .plugin_namespace = "",
        .n_field_specs = 0,
        .field_specs = NULL,
        .create = rsm_create,
        .user = (void *)host,
    };
    return host->register_creator(registry, &c);
}
