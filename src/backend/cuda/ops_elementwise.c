/* Element-wise ops on the GPU (float32, float16, bfloat16: the kernels compute in float32):
 * unary and binary ops with broadcasting,
 * comparisons, Where, Cast, kiln.FusedElementwise, and the views (Reshape, Flatten, ...) when
 * the runtime could not alias them. */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

#define STREAM(k) ((void *)(k)->stream->s)

/* --- unary --- */

typedef struct unary_def {
    const char *name;
    int op;            /* kn_ew_unary */
    float pa, pb;      /* ONNX defaults */
    const char *a, *b; /* attribute names of the parameters */
} unary_def;

static const unary_def unary_defs[] = {
    {"Abs", 0, 0, 0, NULL, NULL},
    {"Neg", 1, 0, 0, NULL, NULL},
    {"Reciprocal", 2, 0, 0, NULL, NULL},
    {"Floor", 3, 0, 0, NULL, NULL},
    {"Ceil", 4, 0, 0, NULL, NULL},
    {"Round", 5, 0, 0, NULL, NULL},
    {"Sqrt", 6, 0, 0, NULL, NULL},
    {"Exp", 7, 0, 0, NULL, NULL},
    {"Log", 8, 0, 0, NULL, NULL},
    {"Sin", 9, 0, 0, NULL, NULL},
    {"Cos", 10, 0, 0, NULL, NULL},
    {"Tan", 11, 0, 0, NULL, NULL},
    {"Asin", 12, 0, 0, NULL, NULL},
    {"Acos", 13, 0, 0, NULL, NULL},
    {"Atan", 14, 0, 0, NULL, NULL},
    {"Sinh", 15, 0, 0, NULL, NULL},
    {"Cosh", 16, 0, 0, NULL, NULL},
    {"Asinh", 17, 0, 0, NULL, NULL},
    {"Acosh", 18, 0, 0, NULL, NULL},
    {"Atanh", 19, 0, 0, NULL, NULL},
    {"Erf", 20, 0, 0, NULL, NULL},
    {"Sign", 21, 0, 0, NULL, NULL},
    {"Relu", 22, 0, 0, NULL, NULL},
    {"LeakyRelu", 23, 0.01f, 0, "alpha", NULL},
    {"Elu", 24, 1.0f, 0, "alpha", NULL},
    {"Selu", 25, 1.67326319217681884765625f, 1.05070102214813232421875f, "alpha", "gamma"},
    {"Celu", 26, 1.0f, 0, "alpha", NULL},
    {"Sigmoid", 27, 0, 0, NULL, NULL},
    {"HardSigmoid", 28, 0.2f, 0.5f, "alpha", "beta"},
    {"HardSwish", 29, 0, 0, NULL, NULL},
    {"Tanh", 30, 0, 0, NULL, NULL},
    {"Softplus", 31, 0, 0, NULL, NULL},
    {"Softsign", 32, 0, 0, NULL, NULL},
    {"ThresholdedRelu", 33, 1.0f, 0, "alpha", NULL},
    {"Gelu", 34, 0, 0, NULL, NULL},
    {"Mish", 36, 0, 0, NULL, NULL},
    {"Shrink", 37, 0.0f, 0.5f, "bias", "lambd"},
    {NULL, 0, 0, 0, NULL, NULL},
};

static const unary_def *unary_of(const kn_node *n) {
    for (const unary_def *d = unary_defs; d->name; d++)
        if (strcmp(d->name, n->op_type) == 0)
            return d;
    return NULL;
}

static kiln_status run_unary(kn_kernel_ctx *k) {
    const unary_def *d = unary_of(k->node);
    int op = d->op;
    if (op == 34 && strcmp(kc_attr_string(k->node, "approximate", "none"), "tanh") == 0)
        op = 35;
    float pa = d->a ? kc_attr_float(k->node, d->a, d->pa) : d->pa;
    float pb = d->b ? kc_attr_float(k->node, d->b, d->pb) : d->pb;
    return KC_LAUNCH(kc_unary(STREAM(k), k->out[0].dtype, op, pa, pb, k->in[0].data, k->out[0].data,
                              kn_tensor_numel(&k->out[0])),
                     k->node->op_type);
}

/* Float element-wise kernels: flat, or broadcast over the order the tensors are stored in
 * (kc_bcast_stored), so they take NHWC tensors too. */
static bool sup_float(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, kn_caps *caps) {
    (void)n;
    caps->layouts |= KN_LAYOUT_NHWC_BIT;
    return kc_all_float(in, n_in, caps, "input") && kc_all_float(out, n_out, caps, "output") &&
           kc_one_type(in, n_in, out[0].dtype, caps);
}

/* Clip: bounds as attributes (opset < 11) or as inputs (of the input's type) read on the
 * host. */
static float clip_bound(const kn_kernel_ctx *k, int j, const char *attr, float def) {
    if (k->node->opset < 11)
        return kc_attr_float(k->node, attr, def);
    if (j >= k->n_in || k->in[j].dtype == 0 || k->in[j].data == NULL)
        return def;
    const void *d = k->in[j].data;
    switch (k->in[j].dtype) {
    case KILN_DTYPE_FLOAT16:
        return kn_half_to_float(*(const uint16_t *)d);
    case KILN_DTYPE_BFLOAT16:
        return kn_bf16_to_float(*(const uint16_t *)d);
    default:
        return *(const float *)d;
    }
}

static kiln_status run_clip(kn_kernel_ctx *k) {
    float lo = clip_bound(k, 1, "min", -3.402823466e38f);
    float hi = clip_bound(k, 2, "max", 3.402823466e38f);
    return KC_LAUNCH(kc_unary(STREAM(k), k->out[0].dtype, 38, lo, hi, k->in[0].data, k->out[0].data,
                              kn_tensor_numel(&k->out[0])),
                     "Clip");
}

static bool sup_clip(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, kn_caps *caps) {
    if (!sup_float(n, n_in, in, n_out, out, caps))
        return false;
    caps->host_in = 0x6; /* min and max are read on the host */
    return true;
}

/* --- binary --- */

static int binary_op(const char *name) {
    static const char *const names[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"};
    for (int i = 0; i < 8; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

static int compare_op(const char *name) {
    static const char *const names[] = {"Equal", "Less", "LessOrEqual", "Greater",
                                        "GreaterOrEqual"};
    for (int i = 0; i < 5; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

static kiln_status bcast2(const kn_kernel_ctx *k, kc_bcast *bc) {
    const kn_shape *s[2] = {&k->in[0].shape, &k->in[1].shape};
    if (!kc_bcast_stored(bc, k->node, &k->out[0].shape, 2, s))
        return kc_fail(KILN_ERR_SHAPE, "%s: inputs do not broadcast to the output",
                       k->node->op_type);
    return KILN_OK;
}

static kiln_status run_binary(kn_kernel_ctx *k) {
    kc_bcast bc;
    KC_TRY(bcast2(k, &bc));
    return KC_LAUNCH(kc_binary(STREAM(k), k->out[0].dtype, binary_op(k->node->op_type), &bc,
                               k->in[0].data, k->in[1].data, k->out[0].data),
                     k->node->op_type);
}

static bool sup_binary(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                       const kn_tensor *out, kn_caps *caps) {
    if ((strcmp(n->op_type, "Max") == 0 || strcmp(n->op_type, "Min") == 0) && n_in != 2)
        return kc_reason(caps, "cuda: %s of %d inputs runs on the CPU", n->op_type, n_in);
    if (out[0].shape.rank > KC_MAX_RANK)
        return kc_reason(caps, "cuda: rank above %d", KC_MAX_RANK);
    return sup_float(n, n_in, in, n_out, out, caps);
}

static kiln_status run_compare(kn_kernel_ctx *k) {
    kc_bcast bc;
    KC_TRY(bcast2(k, &bc));
    return KC_LAUNCH(kc_compare(STREAM(k), k->in[0].dtype, compare_op(k->node->op_type), &bc,
                                k->in[0].data, k->in[1].data, k->out[0].data),
                     k->node->op_type);
}

static bool sup_compare(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                        const kn_tensor *out, kn_caps *caps) {
    (void)n_out;
    (void)out;
    (void)n;
    return kc_all_float(in, n_in, caps, "input") && kc_one_type(in, n_in, in[0].dtype, caps);
}

static kiln_status run_where(kn_kernel_ctx *k) {
    const kn_shape *s[3] = {&k->in[0].shape, &k->in[1].shape, &k->in[2].shape};
    kc_bcast bc;
    if (!kc_bcast_init(&bc, &k->out[0].shape, 3, s))
        return kc_fail(KILN_ERR_SHAPE, "Where: inputs do not broadcast to the output");
    return KC_LAUNCH(kc_where(STREAM(k), &bc, k->in[0].data, k->in[1].data, k->in[2].data,
                              k->out[0].data, (int)kn_dtype_size(k->out[0].dtype)),
                     "Where");
}

static bool sup_where(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, kn_caps *caps) {
    (void)n;
    (void)n_in;
    (void)n_out;
    size_t es = kn_dtype_size(out[0].dtype);
    if (in[0].dtype != KILN_DTYPE_BOOL || es == 0 || es > 8 || (es & (es - 1)) != 0)
        return kc_reason(caps, "cuda: Where of %s", kn_dtype_name(out[0].dtype));
    if (out[0].shape.rank > KC_MAX_RANK)
        return kc_reason(caps, "cuda: rank above %d", KC_MAX_RANK);
    return true;
}

/* --- Cast --- */

static bool cast_type(int32_t dt) {
    return kc_is_float(dt) || dt == KILN_DTYPE_UINT8 || dt == KILN_DTYPE_INT8 ||
           dt == KILN_DTYPE_INT32 || dt == KILN_DTYPE_INT64 || dt == KILN_DTYPE_BOOL ||
           dt == KILN_DTYPE_FLOAT64;
}

static bool float_type(int32_t dt) {
    return kc_is_float(dt) || dt == KILN_DTYPE_FLOAT64;
}

/* A Cast between NCHW and NHWC storage (the edge of an NHWC region): convert into the
 * workspace, then reorder into the output. */
static kiln_status run_cast_reorder(kn_kernel_ctx *k, bool to_nhwc) {
    const kn_shape *s = &k->out[0].shape;
    int64_t n = kn_tensor_numel(&k->out[0]), es = (int64_t)kn_dtype_size(k->out[0].dtype);
    KC_TRY(kc_workspace(k->stream, (size_t)(n * es)));
    KC_TRY(KC_LAUNCH(
        kc_cast(STREAM(k), k->in[0].dtype, k->out[0].dtype, k->in[0].data, k->stream->ws, n),
        "Cast"));
    int64_t N = s->d[0], C = s->d[1], H = s->d[2], W = s->d[3];
    /* output dims in stored order, and the source's element strides along them */
    int64_t to_dims[4] = {N, H, W, C}, to_src[4] = {C * H * W, W, 1, H * W};
    int64_t from_dims[4] = {N, C, H, W}, from_src[4] = {H * W * C, 1, W * C, C};
    return KC_LAUNCH(kc_strided_copy(STREAM(k), 4, to_nhwc ? to_dims : from_dims,
                                     to_nhwc ? to_src : from_src, 0, k->stream->ws, k->out[0].data,
                                     (int)es),
                     "Cast");
}

static kiln_status run_cast(kn_kernel_ctx *k) {
    int64_t n = kn_tensor_numel(&k->out[0]);
    bool in_nhwc = kc_nhwc_in(k->node, 0), out_nhwc = kc_nhwc_out(k->node, 0);
    if (in_nhwc != out_nhwc && k->out[0].shape.rank == 4 && n > 0)
        return run_cast_reorder(k, out_nhwc);
    if (k->in[0].dtype == k->out[0].dtype)
        return kc_check(cudaMemcpyAsync(k->out[0].data, k->in[0].data, kn_tensor_nbytes(&k->out[0]),
                                        cudaMemcpyDeviceToDevice, k->stream->s),
                        "Cast");
    return KC_LAUNCH(
        kc_cast(STREAM(k), k->in[0].dtype, k->out[0].dtype, k->in[0].data, k->out[0].data, n),
        "Cast");
}

static bool sup_cast(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, kn_caps *caps) {
    (void)n;
    (void)n_in;
    (void)n_out;
    if (in[0].dtype == out[0].dtype)
        return true;
    if (kc_is_float(in[0].dtype) && kc_is_float(out[0].dtype))
        caps->layouts |= KN_LAYOUT_NHWC_BIT; /* it reorders between NCHW and NHWC too */
    if (!cast_type(in[0].dtype) || !cast_type(out[0].dtype))
        return kc_reason(caps, "cuda: Cast from %s to %s", kn_dtype_name(in[0].dtype),
                         kn_dtype_name(out[0].dtype));
    /* float to integer conversions of out-of-range values differ between C and the device */
    if (float_type(in[0].dtype) && !float_type(out[0].dtype) && out[0].dtype != KILN_DTYPE_BOOL)
        return kc_reason(caps, "cuda: Cast from float to an integer type runs on the CPU");
    return true;
}

/* --- kiln.FusedElementwise --- */

kiln_status kc_fused_program(const kn_node *node, int n_in, kc_program *p) {
    const int64_t *prog;
    int64_t np = kc_attr_ints(node, "program", &prog);
    const float *consts;
    int64_t nc = kc_attr_floats(node, "constants", &consts);
    if (np % 5 != 0 || np / 5 > KC_MAX_PROGRAM || nc > KC_MAX_CONSTS || n_in > KC_MAX_EW_IN)
        return kc_fail(KILN_ERR_UNSUPPORTED, "FusedElementwise: program too large for the GPU");
    memset(p, 0, sizeof *p);
    p->n_instr = (int32_t)(np / 5);
    for (int64_t i = 0; i < p->n_instr; i++) {
        for (int f = 0; f < 5; f++)
            p->instr[i][f] = (int32_t)prog[i * 5 + f];
        /* registers and indices in range, so the kernels need no checks of their own */
        int32_t *ins = p->instr[i];
        bool ok = ins[0] >= 0 && ins[0] <= 4 && ins[2] >= 0 && ins[2] < 16;
        if (ins[0] == 0)
            ok = ok && ins[3] >= 0 && ins[3] < n_in;
        else if (ins[0] == 1)
            ok = ok && ins[3] >= 0 && ins[3] < nc;
        else if (ins[0] == 2)
            ok = ok && ins[3] >= 0 && ins[3] < 16 && ins[4] >= 0 && ins[4] < KC_MAX_CONSTS;
        else if (ins[0] == 3)
            ok = ok && ins[3] >= 0 && ins[3] < 16 && ins[4] >= 0 && ins[4] < 16;
        else
            ok = ins[3] >= 0 && ins[3] < 16;
        if (!ok)
            return kc_fail(KILN_ERR_MODEL, "FusedElementwise: instruction %lld out of range",
                           (long long)i);
    }
    for (int64_t i = 0; i < nc; i++)
        p->consts[i] = consts[i];
    return KILN_OK;
}

/* The program, and its generated kernel when the plan carries one that loads here. */
typedef struct fused_state {
    kc_program p;
    cudaLibrary_t lib;
    cudaKernel_t kernel;
} fused_state;

static kiln_status fused_prepare(const kn_node *node, int n_in, const kn_tensor *in, void **state) {
    (void)in;
    fused_state *f = kc_host->alloc(sizeof *f);
    if (f == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    memset(f, 0, sizeof *f);
    kiln_status rc = kc_fused_program(node, n_in, &f->p);
    if (rc == KILN_OK) {
        kc_device_call_begin(); /* a module load */
        rc = kc_fused_code_load(node, &f->lib, &f->kernel);
        kc_device_call_end();
    }
    if (rc != KILN_OK) {
        kc_host->free(f);
        return rc;
    }
    *state = f;
    return KILN_OK;
}

static void fused_release(void *state) {
    fused_state *f = state;
    if (f != NULL && f->lib != NULL) {
        kc_device_call_begin();
        cudaLibraryUnload(f->lib);
        kc_device_call_end();
    }
    kc_host->free(state);
}

static kiln_status run_fused(kn_kernel_ctx *k) {
    const kn_shape *s[KC_MAX_EW_IN];
    const void *ptr[KC_MAX_EW_IN];
    for (int j = 0; j < k->n_in; j++) {
        s[j] = &k->in[j].shape;
        ptr[j] = k->in[j].data;
    }
    kc_bcast bc;
    if (!kc_bcast_stored(&bc, k->node, &k->out[0].shape, k->n_in, s))
        return kc_fail(KILN_ERR_SHAPE, "FusedElementwise: inputs do not broadcast");
    const fused_state *f = k->state;
    if (f->lib != NULL)
        return kc_fused_code_launch(f->kernel, k->stream->s, &bc, ptr, k->out[0].data);
    return KC_LAUNCH(kc_fused(STREAM(k), k->out[0].dtype, &f->p, &bc, ptr, k->out[0].data),
                     "FusedElementwise");
}

static bool sup_fused(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, kn_caps *caps) {
    const int64_t *prog;
    const float *consts;
    if (kc_attr_ints(n, "program", &prog) / 5 > KC_MAX_PROGRAM ||
        kc_attr_floats(n, "constants", &consts) > KC_MAX_CONSTS || n_in > KC_MAX_EW_IN)
        return kc_reason(caps, "cuda: fused program larger than the GPU interpreter takes");
    if (out[0].shape.rank > KC_MAX_RANK)
        return kc_reason(caps, "cuda: rank above %d", KC_MAX_RANK);
    return sup_float(n, n_in, in, n_out, out, caps);
}

/* --- views the runtime did not alias: a device-to-device copy --- */

static kiln_status run_view(kn_kernel_ctx *k) {
    size_t nb = kn_tensor_nbytes(&k->out[0]);
    if (nb == 0 || k->out[0].data == k->in[0].data)
        return KILN_OK;
    return kc_check(
        cudaMemcpyAsync(k->out[0].data, k->in[0].data, nb, cudaMemcpyDeviceToDevice, k->stream->s),
        k->node->op_type);
}

static bool sup_view(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, kn_caps *caps) {
    (void)n_in;
    (void)in;
    (void)n_out;
    if (kn_dtype_size(out[0].dtype) == 0)
        return kc_reason(caps, "cuda: %s of %s", n->op_type, kn_dtype_name(out[0].dtype));
    caps->host_in = 0x2; /* Reshape's shape, Squeeze/Unsqueeze's axes */
    return true;
}

#define UNARY(name)                                                                                \
    { {"", name, run_unary, NULL, NULL}, sup_float }
#define BINARY(name)                                                                               \
    { {"", name, run_binary, NULL, NULL}, sup_binary }
#define COMPARE(name)                                                                              \
    { {"", name, run_compare, NULL, NULL}, sup_compare }
#define VIEW(name)                                                                                 \
    { {"", name, run_view, NULL, NULL}, sup_view }

const kc_op kc_ops_elementwise[] = {
    UNARY("Abs"),
    UNARY("Neg"),
    UNARY("Reciprocal"),
    UNARY("Floor"),
    UNARY("Ceil"),
    UNARY("Round"),
    UNARY("Sqrt"),
    UNARY("Exp"),
    UNARY("Log"),
    UNARY("Sin"),
    UNARY("Cos"),
    UNARY("Tan"),
    UNARY("Asin"),
    UNARY("Acos"),
    UNARY("Atan"),
    UNARY("Sinh"),
    UNARY("Cosh"),
    UNARY("Asinh"),
    UNARY("Acosh"),
    UNARY("Atanh"),
    UNARY("Erf"),
    UNARY("Sign"),
    UNARY("Relu"),
    UNARY("LeakyRelu"),
    UNARY("Elu"),
    UNARY("Selu"),
    UNARY("Celu"),
    UNARY("Sigmoid"),
    UNARY("HardSigmoid"),
    UNARY("HardSwish"),
    UNARY("Tanh"),
    UNARY("Softplus"),
    UNARY("Softsign"),
    UNARY("ThresholdedRelu"),
    UNARY("Gelu"),
    UNARY("Mish"),
    UNARY("Shrink"),
    {{"", "Clip", run_clip, NULL, NULL}, sup_clip},
    BINARY("Add"),
    BINARY("Sub"),
    BINARY("Mul"),
    BINARY("Div"),
    BINARY("Pow"),
    BINARY("Max"),
    BINARY("Min"),
    BINARY("PRelu"),
    COMPARE("Equal"),
    COMPARE("Less"),
    COMPARE("LessOrEqual"),
    COMPARE("Greater"),
    COMPARE("GreaterOrEqual"),
    {{"", "Where", run_where, NULL, NULL}, sup_where},
    {{"", "Cast", run_cast, NULL, NULL}, sup_cast},
    {{"kiln", "FusedElementwise", run_fused, fused_prepare, fused_release}, sup_fused},
    VIEW("Reshape"),
    VIEW("Flatten"),
    VIEW("Squeeze"),
    VIEW("Unsqueeze"),
    VIEW("Identity"),
    {{NULL, NULL, NULL, NULL, NULL}, NULL},
};
