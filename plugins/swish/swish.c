/* Swish plugin: y = x * sigmoid(x) + bias, with bias a 1-D weight broadcast along one axis of x
 * (the channel axis by default). The PyTorch export in examples/swish emits it as the generic
 * op `Plugin` with name="Swish" and a JSON string attribute `info`, e.g. {"bias_axis":1}.
 *
 * info is a JSON object. Swish reads one key, "bias_axis" (an integer, default 1, negative counts
 * from the end); any other key is the exporter's own description and is skipped with one
 * warning line. A malformed object or an unusable bias_axis is refused with a message.
 *
 * float32 and float16 (x, bias and y share the dtype), any rank, any shape the profile allows:
 * the output shape is input 0's. float16 is computed through float; the bias is converted once
 * per run into the workspace.
 *
 * It runs on the CPU and, when built with CUDA (KP_CUDA, swish_cuda.cu), on the CUDA backend:
 * there enqueue launches its kernels on the context's stream with device pointers and a device
 * workspace, and never synchronizes, so it is declared graph-safe. */
#include "kiln/kiln_plugin.h"

#include "../common/kp_math.h"
#ifdef KP_CUDA
#include "../common/kp_cuda.h"
#endif

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SWISH_INFO_MAX 4096

typedef struct swish {
    const kiln_host_api *host;
    int64_t bias_axis; /* as given; may be negative */
    char info[64];     /* canonical info JSON, what get_fields returns */
    kiln_field field;
} swish;

static const kiln_field_spec swish_specs[] = {
    {.name = "info", .type = KILN_FIELD_STRING, .required = 0},
};

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past one JSON string (p at its opening quote), escapes included; NULL if unterminated. */
static const char *skip_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* Past one JSON value of a key Swish does not use (any type, nested up to `depth`); NULL if it
 * is not well-formed. Its content is not checked further: it is the exporter's business. */
static const char *skip_value(const char *p, const char *end, int depth) {
    p = skip_ws(p, end);
    if (p == end || depth == 0)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = skip_ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (p == end || *p != '"' || (p = skip_string(p, end)) == NULL)
                    return NULL;
                p = skip_ws(p, end);
                if (p == end || *p != ':')
                    return NULL;
                p++;
            }
            if ((p = skip_value(p, end, depth - 1)) == NULL)
                return NULL;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            return p < end && *p == close ? p + 1 : NULL;
        }
    }
    const char *start = p;
    while (p < end && (*p == '-' || *p == '+' || *p == '.' || (*p >= '0' && *p <= '9') ||
                       (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
        p++;
    return p > start ? p : NULL;
}

/* Parse the info object: "bias_axis" (an integer) is read; every other key is a free
 * description written by whoever exported the model (e.g. {"size":555,"shape":[6,7,8]}), so it
 * is skipped and named in one warning line. Only a malformed object or a bias_axis Swish cannot
 * use is refused. */
static int32_t parse_info(const kiln_host_api *host, const char *s, int64_t len, int64_t *axis) {
    const char *p = s, *end = s + len;
    char ignored[160];
    size_t n_ignored = 0;
    *axis = 1;
    p = skip_ws(p, end);
    if (p == end || *p != '{') {
        host->set_error("field 'info' must be a JSON object such as {\"bias_axis\":1}");
        return -1;
    }
    p = skip_ws(p + 1, end);
    bool empty = p < end && *p == '}';
    if (empty)
        p++;
    while (!empty) {
        if (p == end || *p != '"') {
            host->set_error("field 'info': expected a quoted key");
            return -1;
        }
        const char *key = p + 1, *after = skip_string(p, end);
        if (after == NULL) {
            host->set_error("field 'info': unterminated key");
            return -1;
        }
        size_t klen = (size_t)(after - 1 - key);
        p = skip_ws(after, end);
        if (p == end || *p != ':') {
            host->set_error("field 'info': expected ':' after key '%.*s'", (int)klen, key);
            return -1;
        }
        p = skip_ws(p + 1, end);
        if (klen == 9 && memcmp(key, "bias_axis", 9) == 0) {
            char num[24];
            size_t n = 0;
            while (p < end && n + 1 < sizeof num && (*p == '-' || (*p >= '0' && *p <= '9')))
                num[n++] = *p++;
            num[n] = '\0';
            char *stop;
            long long v = strtoll(num, &stop, 10);
            if (n == 0 || *stop != '\0' || v < -KILN_PLUGIN_MAX_RANK || v >= KILN_PLUGIN_MAX_RANK) {
                host->set_error("field 'info': bias_axis must be an integer in [-%d, %d)",
                                KILN_PLUGIN_MAX_RANK, KILN_PLUGIN_MAX_RANK);
                return -1;
            }
            *axis = v;
        } else {
            if ((p = skip_value(p, end, 16)) == NULL) {
                host->set_error("field 'info': the value of key '%.*s' is not valid JSON",
                                (int)klen, key);
                return -1;
            }
            /* Names as far as they fit; the warning is about their presence, not their list. */
            if (n_ignored + klen + 3 < sizeof ignored) {
                if (n_ignored > 0)
                    ignored[n_ignored++] = ',';
                memcpy(ignored + n_ignored, key, klen);
                n_ignored += klen;
            } else if (n_ignored + 4 < sizeof ignored && ignored[n_ignored - 1] != '.') {
                memcpy(ignored + n_ignored, ",...", 4);
                n_ignored += 4;
            }
            ignored[n_ignored] = '\0';
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        host->set_error("field 'info': expected ',' or '}' ending the object");
        return -1;
    }
    if (skip_ws(p, end) != end) {
        host->set_error("field 'info': text after the closing brace");
        return -1;
    }
    if (n_ignored > 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "Swish: field 'info': ignoring keys it does not use: %s",
                 ignored);
        host->log(1, msg);
    }
    return 0;
}

/* The bias axis for a rank, or -1 (with the error set) when it does not exist. */
static int resolve_axis(const swish *s, int32_t rank) {
    int64_t a = s->bias_axis < 0 ? s->bias_axis + rank : s->bias_axis;
    if (a < 0 || a >= rank) {
        s->host->set_error("bias_axis %lld does not exist in input 0 of rank %d",
                           (long long)s->bias_axis, (int)rank);
        return -1;
    }
    return (int)a;
}

static int32_t swish_num_outputs(void *self) {
    (void)self;
    return 1;
}

static int32_t swish_output_shapes(void *self, int32_t n_in, const kiln_shape_expr *in,
                                   int32_t n_out, kiln_shape_expr *out, kiln_expr_builder *b) {
    swish *s = self;
    (void)b;
    if (n_in != 2 || n_out != 1) {
        s->host->set_error("Swish takes 2 inputs (x, bias) and makes 1 output; got %d and %d",
                           (int)n_in, (int)n_out);
        return -1;
    }
    int axis = resolve_axis(s, in[0].rank);
    if (axis < 0)
        return -1;
    if (in[1].rank != 1) {
        s->host->set_error("input 1 (bias) must be 1-D, it has rank %d", (int)in[1].rank);
        return -1;
    }
    int64_t c, nb;
    if (s->host->expr_value(in[0].dims[axis], &c) && s->host->expr_value(in[1].dims[0], &nb) &&
        c != nb) {
        s->host->set_error("input 1 (bias) has %lld values but input 0 has %lld on axis %d",
                           (long long)nb, (long long)c, axis);
        return -1;
    }
    out[0] = in[0];
    return 0;
}

static int32_t swish_supports_format(void *self, int32_t pos, const kiln_tensor_desc *descs,
                                     int32_t n_in, int32_t n_out) {
    (void)self;
    if (pos < 0 || pos >= n_in + n_out || descs[pos].layout != KILN_LAYOUT_LINEAR)
        return 0;
    if (pos == 0)
        return descs[0].dtype == KILN_PLUGIN_FLOAT32 || descs[0].dtype == KILN_PLUGIN_FLOAT16;
    return descs[pos].dtype == descs[0].dtype;
}

/* The bias is a weight, so its length is fixed: a profile letting the bias axis of x vary
 * would admit shapes no run can accept. Refuse it when the engine is made, not at run time. */
static int32_t swish_configure(void *self, int32_t n_in, const kiln_dynamic_desc *in, int32_t n_out,
                               const kiln_dynamic_desc *out) {
    swish *s = self;
    (void)out;
    if (n_in != 2 || n_out != 1) {
        s->host->set_error("Swish takes 2 inputs and makes 1 output");
        return -1;
    }
    int axis = resolve_axis(s, in[0].desc.rank);
    if (axis < 0)
        return -1;
    int64_t c = in[1].desc.dims[0];
    if (in[0].min[axis] != c || in[0].max[axis] != c) {
        s->host->set_error("input 0 axis %d must be %lld (the bias length) across the profile; "
                           "the profile allows %lld..%lld",
                           axis, (long long)c, (long long)in[0].min[axis],
                           (long long)in[0].max[axis]);
        return -1;
    }
    return 0;
}

static size_t swish_workspace_size(void *self, int32_t n_in, const kiln_tensor_desc *in,
                                   int32_t n_out, const kiln_tensor_desc *out) {
    (void)self, (void)n_out, (void)out;
    if (n_in != 2 || in[0].dtype != KILN_PLUGIN_FLOAT16 || in[1].rank != 1)
        return 0;
    return (size_t)in[1].dims[0] * sizeof(float);
}

typedef struct swish_task {
    const void *x;
    const float *bias; /* float, whatever the dtype */
    void *y;
    int64_t channels, inner;
    int32_t dtype;
} swish_task;

KP_CLONES static void swish_row_f32(const float *x, float b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = kiln_math_silu(x[i]) + b;
}

static void swish_row_f16(const uint16_t *x, float b, uint16_t *y, int64_t n) {
    float buf[256];
    for (int64_t i = 0; i < n; i += 256) {
        int64_t m = n - i < 256 ? n - i : 256;
        for (int64_t j = 0; j < m; j++)
            buf[j] = kp_half_to_float(x[i + j]);
        swish_row_f32(buf, b, buf, m);
        for (int64_t j = 0; j < m; j++)
            y[i + j] = kp_float_to_half(buf[j]);
    }
}

/* Rows are (outer index, channel) pairs of `inner` contiguous elements sharing one bias. */
static void swish_rows(void *arg, int64_t begin, int64_t end) {
    const swish_task *t = arg;
    for (int64_t r = begin; r < end; r++) {
        float b = t->bias[r % t->channels];
        int64_t off = r * t->inner;
        if (t->dtype == KILN_PLUGIN_FLOAT32)
            swish_row_f32((const float *)t->x + off, b, (float *)t->y + off, t->inner);
        else
            swish_row_f16((const uint16_t *)t->x + off, b, (uint16_t *)t->y + off, t->inner);
    }
}

static int32_t swish_enqueue(void *self, int32_t n_in, const kiln_tensor_desc *in_desc,
                             const void *const *inputs, int32_t n_out,
                             const kiln_tensor_desc *out_desc, void *const *outputs,
                             void *workspace, const kiln_stream *stream) {
    swish *s = self;
    (void)out_desc;
    bool cuda = stream->backend == KILN_BACKEND_CUDA;
    if (n_in != 2 || n_out != 1 || (stream->backend != KILN_BACKEND_CPU && !cuda)) {
        s->host->set_error("Swish runs on the CPU or CUDA with 2 inputs and 1 output");
        return -1;
    }
    const kiln_tensor_desc *x = &in_desc[0];
    int axis = resolve_axis(s, x->rank);
    if (axis < 0)
        return -1;
    swish_task t = {.x = inputs[0], .y = outputs[0], .dtype = x->dtype, .channels = x->dims[axis]};
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++)
        inner *= x->dims[d];
    t.inner = inner;
    if (in_desc[1].rank != 1 || in_desc[1].dims[0] != t.channels) {
        s->host->set_error("input 1 (bias) must have %lld values", (long long)t.channels);
        return -1;
    }
    if (outer * t.channels * inner == 0)
        return 0;
    if (x->dtype == KILN_PLUGIN_FLOAT16 && workspace == NULL) {
        s->host->set_error("float16 needs the workspace workspace_size asked for");
        return -1;
    }
    if (cuda) {
#ifdef KP_CUDA
        const char *err =
            kp_swish_cuda(inputs[0], inputs[1], outputs[0], outer * t.channels, t.channels, inner,
                          x->dtype == KILN_PLUGIN_FLOAT16, workspace, stream->handle);
        if (err != NULL) {
            s->host->set_error("CUDA launch failed: %s", err);
            return -1;
        }
        return 0;
#else
        s->host->set_error("this build of Swish has no CUDA kernels");
        return -1;
#endif
    }
    if (x->dtype == KILN_PLUGIN_FLOAT16) {
        float *b = workspace;
        const uint16_t *bh = inputs[1];
        for (int64_t c = 0; c < t.channels; c++)
            b[c] = kp_half_to_float(bh[c]);
        t.bias = b;
    } else {
        t.bias = inputs[1];
    }
    /* Chunks of about 16K elements keep the pool's hand-off cost small next to the work. */
    int64_t grain = inner >= 16384 ? 1 : 16384 / inner;
    s->host->parallel_for(stream, outer * t.channels, grain, swish_rows, &t);
    return 0;
}

static void set_info(swish *s) {
    s->info[0] = '\0';
    char num[24];
    int n = 0;
    long long v = s->bias_axis;
    unsigned long long u = v < 0 ? (unsigned long long)(-v) : (unsigned long long)v;
    do
        num[n++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    char *p = s->info;
    memcpy(p, "{\"bias_axis\":", 13);
    p += 13;
    if (v < 0)
        *p++ = '-';
    while (n > 0)
        *p++ = num[--n];
    *p++ = '}';
    *p = '\0';
    s->field = (kiln_field){.name = "info",
                            .type = KILN_FIELD_STRING,
                            .count = (int64_t)(p - s->info),
                            .data = s->info};
}

static int32_t swish_get_fields(void *self, kiln_field_list *out) {
    swish *s = self;
    out->count = 1;
    out->fields = &s->field;
    return 0;
}

static void *swish_clone(void *self) {
    swish *c = malloc(sizeof *c);
    if (c == NULL)
        return NULL;
    *c = *(const swish *)self;
    c->field.data = c->info; /* point at the copy's own text */
    return c;
}

static void swish_destroy(void *self) {
    free(self);
}

static int32_t swish_supports_backend(void *self, const char *backend) {
    (void)self;
#ifdef KP_CUDA
    if (strcmp(backend, "cuda") == 0)
        return 1;
#endif
    return strcmp(backend, "cpu") == 0;
}

static const kiln_plugin_ops swish_ops = {
    .struct_size = sizeof(kiln_plugin_ops),
    .abi_version = KILN_PLUGIN_ABI_VERSION,
    .num_outputs = swish_num_outputs,
    .output_dtypes = NULL, /* the default: y has x's dtype */
    .output_shapes = swish_output_shapes,
    .supports_format = swish_supports_format,
    .configure = swish_configure,
    .workspace_size = swish_workspace_size,
    .on_shape_change = NULL, /* nothing is cached per shape: enqueue reads its descs */
    .enqueue = swish_enqueue,
    .get_fields = swish_get_fields,
    .clone = swish_clone,
    .destroy = swish_destroy,
    .supports_backend = swish_supports_backend,
    .flags = KILN_PLUGIN_FLAG_GRAPH_SAFE,
};

static int32_t swish_create(const kiln_plugin_creator *creator, const kiln_field_list *fields,
                            kiln_plugin_instance *out) {
    const kiln_host_api *host = creator->user;
    int64_t axis = 1;
    for (int32_t i = 0; fields && i < fields->count; i++) {
        const kiln_field *f = &fields->fields[i];
        if (f->name == NULL || strcmp(f->name, "info") != 0) {
            /* An attribute the exporter added for its own reasons: not Swish's to refuse. */
            char msg[160];
            snprintf(msg, sizeof msg, "Swish: ignoring field '%.100s' it does not use",
                     f->name ? f->name : "(null)");
            host->log(1, msg);
            continue;
        }
        if (f->type != KILN_FIELD_STRING && f->type != KILN_FIELD_BYTES) {
            host->set_error("field 'info' must be a string, got field type %d", (int)f->type);
            return -1;
        }
        if (f->count < 0 || f->count > SWISH_INFO_MAX || (f->count > 0 && f->data == NULL)) {
            host->set_error("field 'info' must be a string of at most %d bytes", SWISH_INFO_MAX);
            return -1;
        }
        if (parse_info(host, f->data, f->count, &axis) != 0)
            return -1;
    }
    swish *s = malloc(sizeof *s);
    if (s == NULL) {
        host->set_error("out of memory");
        return -1;
    }
    s->host = host;
    s->bias_axis = axis;
    set_info(s);
    out->ops = &swish_ops;
    out->self = s;
    return 0;
}

KILN_PLUGIN_EXPORT int32_t kiln_plugin_entry(const kiln_host_api *host, kiln_registry *registry) {
    if (host == NULL || host->abi_version < 1 ||
        !KILN_HAS_MEMBER(host, kiln_host_api, parallel_for))
        return -1;
    /* The registry copies the creator; user carries the host table to create(). */
    kiln_plugin_creator c = {
        .struct_size = sizeof(kiln_plugin_creator),
        .abi_version = KILN_PLUGIN_ABI_VERSION,
        .name = "Swish",
        .version = "1",
        .plugin_namespace = "",
        .n_field_specs = (int32_t)(sizeof swish_specs / sizeof swish_specs[0]),
        .field_specs = swish_specs,
        .create = swish_create,
        .user = (void *)host,
    };
    return host->register_creator(registry, &c);
}
