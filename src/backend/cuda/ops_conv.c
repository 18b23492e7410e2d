/* Conv on the GPU through cuDNN, NCHW (or NHWC where the layout pass stores a 16-bit conv's
 * tensors so: kiln_nhwc), 1-D and 2-D, groups and dilations. Float32 is strict
 * (CUDNN_FMA_MATH: no TF32) unless the precision pass allowed TF32 (kiln_allow_tf32:
 * CUDNN_TENSOR_OP_MATH); float16 and bfloat16 convolutions keep their tensors in 16 bits,
 * compute in float32 (the convolution descriptor's type) and may use tensor cores. The epilogue of
 * fuse_activations (bias, residual, activation: passes.h) runs as one kernel after the convolution.
 *
 * The algorithm is chosen by timing at build (kc_conv_tune: every candidate cuDNN's heuristic
 * lists, checked against the first one's output) and recorded in the node's kiln_tactic; a run
 * at the shapes it was timed at uses it, any other shape cuDNN's first heuristic choice.
 *
 * Depthwise layers (groups = C = K, 3x3 or 5x5, stride 1 or 2) and 1x1 convolutions of a 1x1
 * image do not go through cuDNN: they run the module's own kernels (kernels_cnn.cu) with the
 * epilogue fused, and have nothing to time. With KILN_CUDA_CONV1X1=1 neither do 16-bit NHWC 1x1
 * convolutions at stride 1 (own_1x1: kernels_conv1x1.cu, the epilogue in its store).
 *
 * The convolution itself goes through cuDNN's legacy API (present through cuDNN 9, marked
 * deprecated there), fused with bias, residual and ReLU by cudnnConvolutionBiasActivationForward
 * where it takes them. With KILN_CUDA_CONV_GRAPH=1, 16-bit NHWC convolutions with the
 * activations that call refuses (SiLU, sigmoid, ReLU6, tanh, GELU) go through cuDNN's graph API
 * with the epilogue as pointwise nodes (conv_graph.c; off by default, see there). conv_run
 * takes X, W, B, Z explicitly, so kiln.FusedConv (inputs X, W, B, Z) needs only its own table
 * entry. */
#include "backend/cuda/cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

typedef kc_conv_geom conv_geom;

/* Geometry of a 1-D or 2-D conv (1-D as H = 1); false when cuDNN's symmetric padding
 * cannot express it. */
static bool conv_geom_of(const kn_node *nd, const kn_shape *x, const kn_shape *wt,
                         const kn_shape *y, conv_geom *g) {
    memset(g, 0, sizeof *g);
    int sp = x->rank - 2;
    if (sp < 1 || sp > 2 || wt->rank != x->rank || y->rank != x->rank)
        return false;
    const int64_t *st, *pads, *dil;
    int64_t nst = kc_attr_ints(nd, "strides", &st);
    int64_t npd = kc_attr_ints(nd, "pads", &pads);
    int64_t ndl = kc_attr_ints(nd, "dilations", &dil);
    const char *ap = kc_attr_string(nd, "auto_pad", "NOTSET");
    int64_t s[2] = {1, 1}, d[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0};
    int64_t in[2] = {1, 1}, ks[2] = {1, 1}, out[2] = {1, 1};
    for (int i = 0; i < sp; i++) {
        int j = 2 - sp + i; /* 1-D fills the W slot */
        in[j] = x->d[2 + i];
        ks[j] = wt->d[2 + i];
        out[j] = y->d[2 + i];
        if (nst == sp)
            s[j] = st[i];
        if (ndl == sp)
            d[j] = dil[i];
        if (strcmp(ap, "NOTSET") == 0 && npd == 2 * sp) {
            pb[j] = pads[i];
            pe[j] = pads[sp + i];
        } else if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
            int64_t t = (out[j] - 1) * s[j] + (ks[j] - 1) * d[j] + 1 - in[j];
            t = t < 0 ? 0 : t;
            pb[j] = strcmp(ap, "SAME_LOWER") == 0 ? (t + 1) / 2 : t / 2;
            pe[j] = t - pb[j];
        }
    }
    if (pb[0] != pe[0] || pb[1] != pe[1])
        return false;
    g->n = (int)x->d[0];
    g->c = (int)x->d[1];
    g->h = (int)in[0];
    g->w = (int)in[1];
    g->k = (int)wt->d[0];
    g->kh = (int)ks[0];
    g->kw = (int)ks[1];
    g->oh = (int)out[0];
    g->ow = (int)out[1];
    g->ph = (int)pb[0];
    g->pw = (int)pb[1];
    g->sh = (int)s[0];
    g->sw = (int)s[1];
    g->dh = (int)d[0];
    g->dw = (int)d[1];
    g->groups = (int)kc_attr_int(nd, "group", 1);
    g->dtype = KILN_DTYPE_FLOAT32;
    return g->groups >= 1 && g->c % g->groups == 0 && wt->d[1] * g->groups == g->c;
}

typedef struct conv_descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} conv_descs;

static void descs_free(conv_descs *d) {
    if (d->conv)
        cudnnDestroyConvolutionDescriptor(d->conv);
    if (d->w)
        cudnnDestroyFilterDescriptor(d->w);
    if (d->y)
        cudnnDestroyTensorDescriptor(d->y);
    if (d->x)
        cudnnDestroyTensorDescriptor(d->x);
}

/* Whether cuDNN may use tensor cores: float16, bfloat16, or float32 with TF32 allowed. */
static bool tensor_cores(const conv_geom *g) {
    return g->dtype != KILN_DTYPE_FLOAT32 || g->tf32;
}

/* cuDNN's type for a conv tensor of kiln dtype dt (float32, float16 or bfloat16). */
static cudnnDataType_t dnn_type(int dt) {
    return dt == KILN_DTYPE_FLOAT16    ? CUDNN_DATA_HALF
           : dt == KILN_DTYPE_BFLOAT16 ? CUDNN_DATA_BFLOAT16
                                       : CUDNN_DATA_FLOAT;
}

static kiln_status descs_make(const conv_geom *g, conv_descs *d) {
    memset(d, 0, sizeof *d);
    cudnnDataType_t t = dnn_type(g->dtype);
    KC_TRY(kc_check_dnn(cudnnCreateTensorDescriptor(&d->x), "tensor descriptor"));
    KC_TRY(kc_check_dnn(cudnnCreateTensorDescriptor(&d->y), "tensor descriptor"));
    KC_TRY(kc_check_dnn(cudnnCreateFilterDescriptor(&d->w), "filter descriptor"));
    KC_TRY(kc_check_dnn(cudnnCreateConvolutionDescriptor(&d->conv), "convolution descriptor"));
    cudnnTensorFormat_t f = g->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    KC_TRY(kc_check_dnn(cudnnSetTensor4dDescriptor(d->x, f, t, g->n, g->c, g->h, g->w),
                        "input descriptor"));
    KC_TRY(kc_check_dnn(cudnnSetTensor4dDescriptor(d->y, f, t, g->n, g->k, g->oh, g->ow),
                        "output descriptor"));
    KC_TRY(
        kc_check_dnn(cudnnSetFilter4dDescriptor(d->w, t, f, g->k, g->c / g->groups, g->kh, g->kw),
                     "filter descriptor"));
    KC_TRY(kc_check_dnn(cudnnSetConvolution2dDescriptor(d->conv, g->ph, g->pw, g->sh, g->sw, g->dh,
                                                        g->dw, CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT),
                        "convolution descriptor"));
    KC_TRY(kc_check_dnn(cudnnSetConvolutionGroupCount(d->conv, g->groups), "group count"));
    KC_TRY(kc_check_dnn(cudnnSetConvolutionMathType(d->conv, tensor_cores(g) ? CUDNN_TENSOR_OP_MATH
                                                                             : CUDNN_FMA_MATH),
                        "math type"));
    return KILN_OK;
}

/* What one context keeps for one Conv node (kn_local_state): the descriptors and cuDNN's
 * algorithm for the geometry it was made for, so a run at the same shapes only enqueues. */
typedef struct conv_local {
    kn_local_state base;
    conv_geom g;
    conv_descs d;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    /* cuDNN's fused convolution + bias (+ residual) + ReLU/identity, made on first use:
     * fused is 0 until tried, 1 when cuDNN runs it, -1 when it refused (then the epilogue
     * kernel runs after the plain convolution). */
    cudnnTensorDescriptor_t bias;
    cudnnActivationDescriptor_t act;
    int fused_act, fused;
    /* cuDNN's graph-API convolution with the epilogue (conv_graph.c), made on first use for
     * the activations the fused call refuses: graph_state 0 untried, 1 made, -1 refused. */
    kc_conv_graph *graph;
    int graph_state;
} conv_local;

/* A Conv tactic (KN_ATTR_TACTIC): layout version, cuDNN algorithm, math type, workspace bytes,
 * and the input's N, C, H, W it was timed at (the weights, and so the rest, are fixed). */
enum { CT_VERSION = 1, CT_LEN = 8 };

/* The tactic recorded for geometry g, or false. */
static bool conv_tactic(const kn_node *nd, const conv_geom *g, cudnnConvolutionFwdAlgo_t *algo,
                        cudnnMathType_t *math, size_t *ws) {
    const int64_t *t;
    if (kc_attr_ints(nd, KN_ATTR_TACTIC, &t) != CT_LEN || t[0] != CT_VERSION || t[4] != g->n ||
        t[5] != g->c || t[6] != g->h || t[7] != g->w || t[1] < 0 ||
        t[1] >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT || t[3] < 0 ||
        (!tensor_cores(g) && t[2] != CUDNN_FMA_MATH))
        return false;
    *algo = (cudnnConvolutionFwdAlgo_t)t[1];
    *math = (cudnnMathType_t)t[2];
    *ws = (size_t)t[3];
    return true;
}

static void conv_local_free(kn_local_state *self) {
    conv_local *l = (conv_local *)self;
    kc_conv_graph_free(l->graph);
    if (l->act)
        cudnnDestroyActivationDescriptor(l->act);
    if (l->bias)
        cudnnDestroyTensorDescriptor(l->bias);
    descs_free(&l->d);
    kc_host->free(l);
}

static kiln_status conv_local_make(kn_stream *st, const kn_node *nd, const conv_geom *g,
                                   conv_local **out) {
    conv_local *l = kc_host->alloc(sizeof *l);
    if (l == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory for a convolution's state");
    memset(l, 0, sizeof *l);
    l->base.release = conv_local_free;
    l->g = *g;
    kiln_status rc = descs_make(g, &l->d);
    cudnnMathType_t math;
    if (rc == KILN_OK && conv_tactic(nd, g, &l->algo, &math, &l->ws)) {
        rc = kc_check_dnn(cudnnSetConvolutionMathType(l->d.conv, math), "math type");
        if (rc != KILN_OK) {
            conv_local_free(&l->base);
            return rc;
        }
        *out = l;
        return KILN_OK;
    }
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int found = 0;
    if (rc == KILN_OK)
        rc = kc_check_dnn(cudnnGetConvolutionForwardAlgorithm_v7(st->dnn, l->d.x, l->d.w, l->d.conv,
                                                                 l->d.y, 8, &found, perf),
                          "choosing an algorithm");
    int pick = -1;
    for (int i = 0; i < found && rc == KILN_OK && pick < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS &&
            (tensor_cores(g) || perf[i].mathType == CUDNN_FMA_MATH))
            pick = i;
    if (rc == KILN_OK && pick < 0)
        rc = kc_fail(KILN_ERR_UNSUPPORTED, "cuDNN offers no %salgorithm here",
                     tensor_cores(g) ? "" : "strict float32 ");
    if (rc != KILN_OK) {
        conv_local_free(&l->base);
        return rc;
    }
    l->algo = perf[pick].algo;
    l->ws = perf[pick].memory;
    *out = l;
    return KILN_OK;
}

/* The state for geometry g: the context's if it was made for g, else a new one (kept in the
 * context's slot when there is one; *temp tells the caller to free it otherwise). */
static kiln_status conv_local_get(kn_kernel_ctx *k, const conv_geom *g, conv_local **out,
                                  bool *temp) {
    conv_local *have = k->local ? (conv_local *)*k->local : NULL;
    *temp = false;
    if (have != NULL && memcmp(&have->g, g, sizeof *g) == 0) {
        *out = have;
        return KILN_OK;
    }
    kc_device_call_begin(); /* cuDNN's algorithm query and descriptors */
    kiln_status rc = conv_local_make(k->stream, k->node, g, out);
    kc_device_call_end();
    KC_TRY(rc);
    if (k->local == NULL) {
        *temp = true;
        return KILN_OK;
    }
    if (have != NULL)
        conv_local_free(&have->base);
    *k->local = &(*out)->base;
    return KILN_OK;
}

/* The own depthwise kernel's parameters for g (kernels_cnn.cu), or false when g is not
 * a depthwise layer it takes: those run it instead of cuDNN, with the epilogue fused. */
static bool depthwise_of(const conv_geom *g, int act, float aa, float ab, kc_dwconv *p) {
    if (g->groups != g->c || g->k != g->c || g->kh != g->kw || g->sh != g->sw || g->dh != 1 ||
        g->dw != 1)
        return false;
    *p = (kc_dwconv){.n = g->n,
                     .c = g->c,
                     .h = g->h,
                     .w = g->w,
                     .oh = g->oh,
                     .ow = g->ow,
                     .k = g->kh,
                     .s = g->sh,
                     .ph = g->ph,
                     .pw = g->pw,
                     .nhwc = g->nhwc,
                     .act = act,
                     .alpha = aa,
                     .beta = ab,
                     .in_act = KC_ACT_NONE};
    return kc_dwconv_takes(p) != 0;
}

/* Whether g is a 1x1 convolution of a 1x1 image (squeeze-and-excitation's layers), which the
 * module's own kernel runs as the small matrix product it is. */
static bool pointwise_1x1(const conv_geom *g) {
    return g->h == 1 && g->w == 1 && g->kh == 1 && g->kw == 1 && g->oh == 1 && g->ow == 1 &&
           g->groups == 1;
}

/* Whether the own tensor-core 1x1 kernel (kernels_conv1x1.cu) runs the 1x1 convolutions it
 * takes: only with KILN_CUDA_CONV1X1=1. Off by default because it measured slower than cuDNN's
 * convolution plus the epilogue kernel even where it saves that pass (EfficientNet-B0 fp16 at
 * batch 64 4.22 against 3.54 ms on the H200, MobileNetV2 2.29 against 2.02; perf-notes.md).
 * Read once a process. */
static bool conv1x1_on(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("KILN_CUDA_CONV1X1");
        on = e != NULL && strcmp(e, "1") == 0;
    }
    return on != 0;
}

/* Whether g is a 1x1, stride-1, unpadded NHWC convolution in 16 bits that the own kernel runs
 * (the pointers are checked at the call: kc_conv1x1_takes). */
static bool own_1x1(const conv_geom *g) {
    return conv1x1_on() && g->nhwc && g->dtype != KILN_DTYPE_FLOAT32 && g->kh == 1 && g->kw == 1 &&
           g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && g->groups == 1 &&
           g->oh == g->h && g->ow == g->w && g->c % 8 == 0 && g->k % 8 == 0;
}

/* Whether cuDNN's fused convolution may be tried (KILN_CUDA_CONV_FUSE=0: never). */
static bool fuse_allowed(void) {
    static int allowed = -1;
    if (allowed < 0) {
        const char *e = getenv("KILN_CUDA_CONV_FUSE");
        allowed = e == NULL || strcmp(e, "0") != 0;
    }
    return allowed != 0;
}

/* y = act(conv(x, w) + b + z) in one cuDNN call (cudnnConvolutionBiasActivationForward), for
 * act ReLU or none; *done false when cuDNN refuses this geometry or algorithm (remembered in l,
 * so the refusal costs one call a context), and the caller runs the convolution and the
 * epilogue kernel instead. Saves the epilogue's pass over y (read y and z, write y). */
static kiln_status conv_fused(kn_stream *st, conv_local *l, const void *x, const void *w,
                              const void *b, const void *z, void *y, int act, bool *done) {
    *done = false;
    if (l->fused < 0 || (l->fused > 0 && l->fused_act != act) || !fuse_allowed())
        return KILN_OK;
    const conv_geom *g = &l->g;
    if (l->bias == NULL) {
        cudnnDataType_t t = dnn_type(g->dtype);
        KC_TRY(kc_check_dnn(cudnnCreateTensorDescriptor(&l->bias), "tensor descriptor"));
        KC_TRY(kc_check_dnn(
            cudnnSetTensor4dDescriptor(l->bias, g->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, t,
                                       1, g->k, 1, 1),
            "bias descriptor"));
    }
    if (l->act == NULL)
        KC_TRY(kc_check_dnn(cudnnCreateActivationDescriptor(&l->act), "activation descriptor"));
    if (l->fused == 0 || l->fused_act != act)
        KC_TRY(kc_check_dnn(
            cudnnSetActivationDescriptor(
                l->act, act == KC_ACT_RELU ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                CUDNN_PROPAGATE_NAN, 0.0),
            "activation descriptor"));
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t s = cudnnConvolutionBiasActivationForward(
        st->dnn, &one, l->d.x, x, l->d.w, w, l->d.conv, l->algo, st->ws, st->ws_size,
        z != NULL ? &one : &zero, l->d.y, z != NULL ? z : y, l->bias, b, l->act, l->d.y, y);
    if (s == CUDNN_STATUS_SUCCESS) {
        l->fused = 1;
        l->fused_act = act;
        *done = true;
        return KILN_OK;
    }
    /* cuDNN 9's bad-parameter (2xxx) and not-supported (3xxx) classes: a refusal, not a fault */
    if (l->fused == 0 && s >= CUDNN_STATUS_BAD_PARAM && s < CUDNN_STATUS_INTERNAL_ERROR) {
        l->fused = -1;
        return KILN_OK;
    }
    return kc_check_dnn(s, "fused convolution");
}

/* The graph-API convolution of l for this epilogue, made on first use (NULL when cuDNN made no
 * plan: remembered, so the refusal costs one try a context; the verbose log says which). */
static kiln_status conv_graph_get(kn_stream *st, conv_local *l, bool bias, bool residual, int act,
                                  float aa, float ab, kc_conv_graph **out) {
    *out = NULL;
    if (l->graph_state == 0) {
        const char *why;
        kc_device_call_begin(); /* the plan's kernel is compiled and loaded here */
        kiln_status rc =
            kc_conv_graph_make(st->dnn, &l->g, bias, residual, act, aa, ab, &l->graph, &why);
        kc_device_call_end();
        KC_TRY(rc);
        l->graph_state = l->graph != NULL ? 1 : -1;
        const conv_geom *g = &l->g;
        char msg[200];
        snprintf(msg, sizeof msg,
                 "cuda: conv %dx%dx%dx%d -> %d, %dx%d window: epilogue %s cuDNN's graph API%s%s",
                 g->n, g->c, g->h, g->w, g->k, g->kh, g->kw,
                 l->graph != NULL ? "fused by" : "kept apart: no plan from",
                 why != NULL ? ": " : "", why != NULL ? why : "");
        kc_host->log(KILN_LOG_VERBOSE, msg);
    }
    *out = l->graph;
    return KILN_OK;
}

/* y = act(conv(x, w) + b + z); b and z may be NULL. */
static kiln_status conv_run(kn_kernel_ctx *k, const conv_geom *g, const void *x, const void *w,
                            const void *b, const void *z, void *y, int act, float aa, float ab) {
    if ((int64_t)g->n * g->k * g->oh * g->ow == 0)
        return KILN_OK;
    kn_stream *st = k->stream;
    kc_dwconv dw;
    if (depthwise_of(g, act, aa, ab, &dw))
        return KC_LAUNCH(kc_dwconv_run(st->s, g->dtype, &dw, x, w, b, z, NULL, y),
                         "depthwise convolution");
    if (pointwise_1x1(g))
        return KC_LAUNCH(
            kc_pointwise_1x1(st->s, g->dtype, g->n, g->c, g->k, x, w, b, z, y, act, aa, ab),
            "1x1 convolution");
    int64_t pixels = (int64_t)g->n * g->h * g->w;
    if (own_1x1(g) && kc_conv1x1_takes(g->dtype, pixels, g->k, g->c, x, w, b, z, y))
        return KC_LAUNCH(
            kc_conv1x1_run(st->s, g->dtype, pixels, g->k, g->c, x, w, b, z, y, act, aa, ab),
            "1x1 convolution");
    conv_local *l;
    bool temp;
    KC_TRY(conv_local_get(k, g, &l, &temp));
    kiln_status rc = kc_workspace(st, l->ws);
    bool done = false;
    bool legacy = b != NULL && (act == KC_ACT_NONE || act == KC_ACT_RELU);
    kc_conv_graph *cg = NULL;
    if (rc == KILN_OK && legacy)
        rc = conv_fused(st, l, x, w, b, z, y, act, &done);
    else if (rc == KILN_OK && act != KC_ACT_NONE && kc_conv_graph_takes(g, act))
        rc = conv_graph_get(st, l, b != NULL, z != NULL, act, aa, ab, &cg);
    if (rc == KILN_OK && cg != NULL) {
        rc = kc_workspace(st, kc_conv_graph_workspace(cg));
        if (rc == KILN_OK)
            rc = kc_conv_graph_run(st->dnn, cg, x, w, b, z, y, st->ws);
        done = rc == KILN_OK;
    }
    const float one = 1.0f, zero = 0.0f;
    if (rc == KILN_OK && !done)
        rc = kc_check_dnn(cudnnConvolutionForward(st->dnn, &one, l->d.x, x, l->d.w, w, l->d.conv,
                                                  l->algo, st->ws, st->ws_size, &zero, l->d.y, y),
                          "convolution");
    if (temp)
        conv_local_free(&l->base);
    KC_TRY(rc);
    if (done)
        return KILN_OK;
    /* NHWC: the channel is the last dim of [N * OH * OW, K] */
    int64_t outer = g->nhwc ? (int64_t)g->n * g->oh * g->ow : g->n;
    int64_t inner = g->nhwc ? 1 : (int64_t)g->oh * g->ow;
    if (b != NULL || z != NULL || act != KC_ACT_NONE)
        KC_TRY(KC_LAUNCH(kc_epilogue(st->s, g->dtype, y, b, z, outer, g->k, inner, act, aa, ab),
                         "conv epilogue"));
    return KILN_OK;
}

/* The geometry of node nd with these tensors, its type and math. */
static bool conv_node_geom(const kn_node *nd, const kn_tensor *in, const kn_tensor *out,
                           conv_geom *g) {
    bool ok = conv_geom_of(nd, &in[0].shape, &in[1].shape, &out[0].shape, g);
    g->dtype = out[0].dtype;
    g->tf32 = g->dtype == KILN_DTYPE_FLOAT32 && kc_attr_int(nd, "kiln_allow_tf32", 0) != 0;
    g->nhwc = in[0].shape.rank == 4 && (kc_nhwc_in(nd, 0) || kc_nhwc_out(nd, 0));
    return ok;
}

static kiln_status run_conv(kn_kernel_ctx *k) {
    conv_geom g;
    conv_node_geom(k->node, k->in, k->out, &g);
    const void *b = k->n_in > 2 && k->in[2].dtype ? k->in[2].data : NULL;
    const void *z = kc_attr_int(k->node, "kiln_residual", 0) && k->n_in > 3 && k->in[3].dtype
                        ? k->in[3].data
                        : NULL;
    float aa, ab;
    int act = kc_activation(k->node, &aa, &ab);
    return conv_run(k, &g, k->in[0].data, k->in[1].data, b, z, k->out[0].data, act, aa, ab);
}

/* kiln.FusedDepthwiseConv (passes.h): the own depthwise kernel applies the input prologue
 * in_act(x + xb[c]) as it loads where in_act is a clamp (none, Relu, Clip: MobileNetV2's ReLU6,
 * the only activations the pass moves). Other activations (a node written in a model), and
 * geometries the kernel does not take, have
 * the prologue applied to x in place first, one pass as the expansion conv's epilogue was (the
 * node is x's only reader: kn_pass_fuse_depthwise_input moves the prologue only from a sole
 * consumer), then run as a kiln.FusedConv. */
static kiln_status run_dwconv_input(kn_kernel_ctx *k) {
    conv_geom g;
    conv_node_geom(k->node, k->in, k->out, &g);
    const void *b = k->n_in > 2 && k->in[2].dtype ? k->in[2].data : NULL;
    const void *z = k->n_in > 3 && k->in[3].dtype ? k->in[3].data : NULL;
    const void *xb = k->n_in > 4 && k->in[4].dtype ? k->in[4].data : NULL;
    float aa, ab, ia, ib;
    int act = kc_activation(k->node, &aa, &ab);
    int in_act = kc_input_activation(k->node, &ia, &ib);
    void *x = k->in[0].data, *y = k->out[0].data;
    if ((int64_t)g.n * g.k * g.oh * g.ow == 0)
        return KILN_OK;
    kc_dwconv dw;
    bool own = depthwise_of(&g, act, aa, ab, &dw);
    dw.in_act = in_act;
    dw.in_alpha = ia;
    dw.in_beta = ib;
    if (own && kc_dwconv_takes(&dw))
        return KC_LAUNCH(kc_dwconv_run(k->stream->s, g.dtype, &dw, x, k->in[1].data, b, z, xb, y),
                         "depthwise convolution");
    int64_t outer = g.nhwc ? (int64_t)g.n * g.h * g.w : g.n;
    int64_t inner = g.nhwc ? 1 : (int64_t)g.h * g.w;
    KC_TRY(KC_LAUNCH(
        kc_epilogue(k->stream->s, g.dtype, x, xb, NULL, outer, g.c, inner, in_act, ia, ib),
        "depthwise input"));
    return conv_run(k, &g, x, k->in[1].data, b, z, y, act, aa, ab);
}

static bool sup_conv(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, kn_caps *caps);

static bool sup_dwconv_input(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                             const kn_tensor *out, kn_caps *caps) {
    float a, b;
    if (kc_input_activation(n, &a, &b) < 0)
        return kc_reason(caps, "cuda: unknown input activation");
    return sup_conv(n, n_in, in, n_out, out, caps);
}

/* Whether depthwise layers may be stored NHWC (KILN_CUDA_NHWC_DEPTHWISE=0: never). With its taps
 * staged per channel slice the vector NHWC kernel runs MobileNetV2 and EfficientNet-B0 faster
 * than NCHW (whose cuDNN neighbours transpose around every conv): docs/perf-notes.md. */
static bool nhwc_depthwise(void) {
    const char *e = getenv("KILN_CUDA_NHWC_DEPTHWISE");
    return e == NULL || strcmp(e, "0") != 0;
}

static bool sup_conv(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, kn_caps *caps) {
    conv_geom g;
    float a, b;
    if (!kc_all_float(in, n_in, caps, "input") || !kc_all_float(out, n_out, caps, "output") ||
        !kc_one_type(in, n_in, out[0].dtype, caps))
        return false;
    if (in[0].shape.rank != 3 && in[0].shape.rank != 4)
        return kc_reason(caps, "cuda: only 1-D and 2-D Conv run on the GPU so far");
    if (!conv_geom_of(n, &in[0].shape, &in[1].shape, &out[0].shape, &g))
        return kc_reason(caps, "cuda: Conv with asymmetric padding runs on the CPU");
    for (int i = 0; i < in[0].shape.rank; i++)
        if (in[0].shape.d[i] > 2147483647 || out[0].shape.d[i] > 2147483647)
            return kc_reason(caps, "cuda: Conv dims beyond 32 bits");
    if (kc_activation(n, &a, &b) < 0)
        return kc_reason(caps, "cuda: unknown fused activation");
    /* 16-bit: cuDNN's tensor-core layout. Depthwise layers only where the own kernel's vector
     * NHWC form takes them (channels filling 16-byte vectors): its scalar NHWC form measured
     * 2.5x slower than the NCHW one (MobileNetV2 at batch 64, docs/perf-notes.md), and a
     * depthwise layer left NCHW keeps its neighbours NCHW too (the layout pass joins them).
     * KILN_CUDA_NHWC_DEPTHWISE=0 keeps every depthwise layer NCHW (nhwc_depthwise). */
    bool dw = g.groups == g.c && g.k == g.c && g.groups > 1;
    kc_dwconv dwp;
    g.dtype = out[0].dtype;
    if (in[0].shape.rank == 4 && out[0].dtype != KILN_DTYPE_FLOAT32 &&
        (!dw || (nhwc_depthwise() && depthwise_of(&g, KC_ACT_NONE, 0.f, 0.f, &dwp) &&
                 (g.c * kn_dtype_size(g.dtype)) % 16 == 0)))
        caps->layouts |= KN_LAYOUT_NHWC_BIT;
    return true;
}

/* --- tactic selection by timing (kn_backend_iface.tune) --- */

/* Candidates needing more workspace than this are not timed. */
#define KC_TUNE_WORKSPACE_MAX ((size_t)256 << 20)
/* Each candidate: KC_TUNE_RUNS runs in a graph, launched once to warm up, then KC_TUNE_LAUNCHES
 * times timed. */
#define KC_TUNE_RUNS 10
#define KC_TUNE_LAUNCHES 3
/* A candidate that launches more graph nodes than this a run (cuDNN loops over the groups of a
 * grouped convolution for some algorithms: a thousand kernels for a depthwise layer) is not
 * timed: recording and instantiating it costs more than the whole layer's tuning should. */
#define KC_TUNE_MAX_NODES 16
/* Once a layer's tuning has run this long, the candidates not yet tried are skipped (the first,
 * cuDNN's own choice, is always timed): a bound on the build's time, whatever cuDNN lists. */
#define KC_TUNE_LAYER_BUDGET_S 0.5

bool kc_conv_tune_key(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, char *key, size_t size) {
    conv_geom g;
    kc_dwconv dw;
    if (n_in < 2 || n_out < 1 || !conv_node_geom(n, in, out, &g) ||
        (int64_t)g.n * g.k * g.oh * g.ow == 0 || depthwise_of(&g, KC_ACT_NONE, 0.f, 0.f, &dw) ||
        pointwise_1x1(&g) || own_1x1(&g))
        return false; /* the own kernels have no variants to time */
    snprintf(key, size,
             "cuda conv %d|%s|%s%s%s|x %dx%dx%dx%d|w %dx%dx%dx%d|y %dx%d|pad %d,%d|stride %d,%d|"
             "dilation %d,%d|group %d",
             CT_VERSION, kc_device_id, kn_dtype_name(g.dtype), g.tf32 ? " tf32" : "",
             g.nhwc ? " nhwc" : "", g.n, g.c, g.h, g.w, g.k, g.c / g.groups, g.kh, g.kw, g.oh, g.ow,
             g.ph, g.pw, g.sh, g.sw, g.dh, g.dw, g.groups);
    return true;
}

/* The device buffers one timing uses. */
typedef struct tune_bufs {
    void *x, *w, *y;
    float *yf, *tmp;  /* y as float32; float32 staging for uploads */
    float *ref, *cur; /* host: the first candidate's output, the current one's */
    int64_t nx, nw, ny;
} tune_bufs;

static void tune_free(tune_bufs *t) {
    cudaFree(t->x);
    cudaFree(t->w);
    cudaFree(t->y);
    cudaFree(t->yf);
    cudaFree(t->tmp);
    kc_host->free(t->ref);
    kc_host->free(t->cur);
}

/* x from the pattern; w the node's weights when known at build (else the pattern). */
static kiln_status tune_setup(kn_stream *st, const conv_geom *g, const kn_tensor *w, tune_bufs *t) {
    size_t es = kn_dtype_size(g->dtype);
    t->nx = (int64_t)g->n * g->c * g->h * g->w;
    t->nw = (int64_t)g->k * (g->c / g->groups) * g->kh * g->kw;
    t->ny = (int64_t)g->n * g->k * g->oh * g->ow;
    int64_t big = t->nx > t->nw ? t->nx : t->nw;
    KC_TRY(kc_check(cudaMalloc(&t->x, (size_t)t->nx * es), "timing buffers"));
    KC_TRY(kc_check(cudaMalloc(&t->w, (size_t)t->nw * es), "timing buffers"));
    KC_TRY(kc_check(cudaMalloc(&t->y, (size_t)t->ny * es), "timing buffers"));
    KC_TRY(kc_check(cudaMalloc((void **)&t->yf, (size_t)t->ny * 4), "timing buffers"));
    KC_TRY(kc_check(cudaMalloc((void **)&t->tmp, (size_t)big * 4), "timing buffers"));
    t->ref = kc_host->alloc((size_t)t->ny * 4);
    t->cur = kc_host->alloc((size_t)(t->ny > big ? t->ny : big) * 4);
    if (t->ref == NULL || t->cur == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory for timing a convolution");
    kc_tune_pattern(t->cur, t->nx, 1);
    KC_TRY(kc_tune_upload(st, g->dtype, t->cur, t->x, t->tmp, t->nx));
    if (w->data != NULL && w->dtype == g->dtype && kn_shape_numel(&w->shape) == t->nw)
        return kc_check(cudaMemcpy(t->w, w->data, (size_t)t->nw * es, cudaMemcpyHostToDevice),
                        "uploading weights");
    kc_tune_pattern(t->cur, t->nw, 2);
    return kc_tune_upload(st, g->dtype, t->cur, t->w, t->tmp, t->nw);
}

/* Run candidate p once into t->y and read the output back into t->cur (as float32). */
static kiln_status tune_run_once(kn_stream *st, const conv_descs *d, tune_bufs *t,
                                 const cudnnConvolutionFwdAlgoPerf_t *p, int dtype) {
    const float one = 1.0f, zero = 0.0f;
    KC_TRY(kc_check_dnn(cudnnSetConvolutionMathType(d->conv, p->mathType), "math type"));
    KC_TRY(kc_workspace(st, p->memory));
    KC_TRY(kc_check_dnn(cudnnConvolutionForward(st->dnn, &one, d->x, t->x, d->w, t->w, d->conv,
                                                p->algo, st->ws, st->ws_size, &zero, d->y, t->y),
                        "convolution"));
    const void *yf = t->y;
    if (dtype != KILN_DTYPE_FLOAT32) {
        KC_TRY(KC_LAUNCH(kc_cast(st->s, dtype, KILN_DTYPE_FLOAT32, t->y, t->yf, t->ny), "cast"));
        yf = t->yf;
    }
    KC_TRY(kc_check(cudaMemcpyAsync(t->cur, yf, (size_t)t->ny * 4, cudaMemcpyDeviceToHost, st->s),
                    "reading the output"));
    return kc_check(cudaStreamSynchronize(st->s), "running a candidate");
}

/* R runs of candidate p enqueued on st. */
static kiln_status tune_enqueue(kn_stream *st, const conv_descs *d, const tune_bufs *t,
                                const cudnnConvolutionFwdAlgoPerf_t *p, int runs) {
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < runs; i++)
        KC_TRY(
            kc_check_dnn(cudnnConvolutionForward(st->dnn, &one, d->x, t->x, d->w, t->w, d->conv,
                                                 p->algo, st->ws, st->ws_size, &zero, d->y, t->y),
                         "convolution"));
    return KILN_OK;
}

/* KC_TUNE_RUNS runs of p recorded as one stream graph, or NULL when p cannot be recorded or
 * launches more than KC_TUNE_MAX_NODES graph nodes a run (*too_many: then it is not timed). */
static cudaGraphExec_t tune_graph(kn_stream *st, const conv_descs *d, const tune_bufs *t,
                                  const cudnnConvolutionFwdAlgoPerf_t *p, bool *too_many) {
    *too_many = false;
    if (cudaStreamBeginCapture(st->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    kiln_status rc = tune_enqueue(st, d, t, p, KC_TUNE_RUNS);
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    size_t nodes = 0;
    if (cudaStreamEndCapture(st->s, &g) == cudaSuccess && rc == KILN_OK &&
        cudaGraphGetNodes(g, NULL, &nodes) == cudaSuccess &&
        nodes <= (size_t)KC_TUNE_MAX_NODES * KC_TUNE_RUNS &&
        cudaGraphInstantiateWithFlags(&exec, g, 0) != cudaSuccess)
        exec = NULL;
    if (nodes > (size_t)KC_TUNE_MAX_NODES * KC_TUNE_RUNS)
        *too_many = true;
    if (g != NULL)
        cudaGraphDestroy(g);
    (void)cudaGetLastError();
    return exec;
}

/* Milliseconds per run of candidate p on the GPU. The runs are recorded into a stream graph and
 * the graph is timed, as the runtime replays them: timing plain calls back to back would
 * measure cuDNN's host work per call (tens of microseconds for some algorithms, more than the
 * kernel of a small convolution) rather than the kernel. A candidate that cannot be recorded, or
 * the first one when it launches too many nodes, is timed by plain calls (the runtime then runs
 * its segment plainly too). */
static kiln_status tune_time(kn_stream *st, const conv_descs *d, const tune_bufs *t,
                             const cudnnConvolutionFwdAlgoPerf_t *p, bool first, float *ms) {
    cudaEvent_t e[2] = {NULL, NULL};
    bool too_many;
    cudaGraphExec_t graph = tune_graph(st, d, t, p, &too_many);
    if (too_many && !first) /* the first is timed anyway: a layer always gets a choice */
        return kc_fail(KILN_ERR_UNSUPPORTED, "cuDNN: a kernel per group");
    kiln_status rc = kc_check(cudaEventCreate(&e[0]), "creating an event");
    if (rc == KILN_OK)
        rc = kc_check(cudaEventCreate(&e[1]), "creating an event");
    for (int i = 0; i < 1 + KC_TUNE_LAUNCHES && rc == KILN_OK; i++) {
        if (i == 1)
            rc = kc_check(cudaEventRecord(e[0], st->s), "recording an event");
        if (rc == KILN_OK)
            rc = graph != NULL ? kc_check(cudaGraphLaunch(graph, st->s), "launching a graph")
                               : tune_enqueue(st, d, t, p, KC_TUNE_RUNS);
    }
    if (rc == KILN_OK)
        rc = kc_check(cudaEventRecord(e[1], st->s), "recording an event");
    if (rc == KILN_OK)
        rc = kc_check(cudaEventSynchronize(e[1]), "timing a candidate");
    if (rc == KILN_OK)
        rc = kc_check(cudaEventElapsedTime(ms, e[0], e[1]), "timing a candidate");
    *ms /= KC_TUNE_LAUNCHES * KC_TUNE_RUNS;
    for (int i = 0; i < 2; i++)
        if (e[i] != NULL)
            cudaEventDestroy(e[i]);
    if (graph != NULL)
        cudaGraphExecDestroy(graph);
    return rc;
}

/* Time every candidate of cuDNN's list that the math allows and the workspace limit admits;
 * the first that runs is the reference the others must match. */
static kiln_status tune_pick(kn_stream *st, const conv_geom *g, tune_bufs *t, int64_t *tactic,
                             char *note, size_t note_size) {
    conv_descs d;
    kiln_status rc = descs_make(g, &d);
    cudnnConvolutionFwdAlgoPerf_t perf[2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0, best = -1, tried = 0, rejected = 0;
    float best_ms = 0.0f, first_ms = 0.0f;
    bool have_ref = false;
    double tol = g->dtype == KILN_DTYPE_FLOAT32 && !g->tf32 ? 1e-3
                 : g->dtype == KILN_DTYPE_BFLOAT16          ? 4e-2
                                                            : 1e-2;
    if (rc == KILN_OK)
        rc = kc_check_dnn(
            cudnnGetConvolutionForwardAlgorithm_v7(
                st->dnn, d.x, d.w, d.conv, d.y, 2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf),
            "listing algorithms");
    double t0 = kc_now_s();
    int skipped = 0;
    for (int i = 0; i < found && rc == KILN_OK; i++) {
        const cudnnConvolutionFwdAlgoPerf_t *p = &perf[i];
        if (best >= 0 && kc_now_s() - t0 > KC_TUNE_LAYER_BUDGET_S) {
            skipped = found - i;
            break;
        }
        bool seen = false;
        for (int j = 0; j < i; j++)
            seen |= perf[j].algo == p->algo && perf[j].mathType == p->mathType;
        if (seen || p->status != CUDNN_STATUS_SUCCESS ||
            (!tensor_cores(g) && p->mathType != CUDNN_FMA_MATH) ||
            p->memory > KC_TUNE_WORKSPACE_MAX)
            continue;
        float ms = 0.0f;
        /* A candidate that fails to run is skipped, not an error: cuDNN's list is advice. */
        if (tune_run_once(st, &d, t, p, g->dtype) != KILN_OK)
            continue;
        tried++;
        if (!kc_tune_accept(t->ref, t->cur, t->ny, tol, &have_ref)) {
            rejected++;
            continue;
        }
        if (tune_time(st, &d, t, p, best < 0, &ms) != KILN_OK)
            continue;
        if (best < 0)
            first_ms = ms;
        if (best < 0 || ms < best_ms) {
            best = i;
            best_ms = ms;
        }
    }
    descs_free(&d);
    KC_TRY(rc);
    if (best < 0)
        return kc_fail(KILN_ERR_UNSUPPORTED, "cuDNN offers no %salgorithm that runs here",
                       tensor_cores(g) ? "" : "strict float32 ");
    (void)cudaGetLastError();
    int64_t v[CT_LEN] = {CT_VERSION,
                         perf[best].algo,
                         perf[best].mathType,
                         (int64_t)perf[best].memory,
                         g->n,
                         g->c,
                         g->h,
                         g->w};
    memcpy(tactic, v, sizeof v);
    snprintf(note, note_size,
             "algorithm %d (math %d, %zu bytes of workspace) %.4f ms, cuDNN's first choice %.4f "
             "ms; %d candidates run, %d rejected as different, %d left untried (time budget)",
             (int)perf[best].algo, (int)perf[best].mathType, perf[best].memory, best_ms, first_ms,
             tried, rejected, skipped);
    return KILN_OK;
}

kiln_status kc_conv_tune(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                         const kn_tensor *out, int64_t *tactic, int *n_tactic, char *note,
                         size_t note_size) {
    conv_geom g;
    if (n_in < 2 || n_out < 1 || !conv_node_geom(n, in, out, &g))
        return kc_fail(KILN_ERR_INTERNAL, "cuda: not a convolution cuDNN runs");
    kn_stream *st = NULL;
    KC_TRY(b->iface->stream_create(b, &st));
    tune_bufs t;
    memset(&t, 0, sizeof t);
    kiln_status rc = tune_setup(st, &g, &in[1], &t);
    if (rc == KILN_OK)
        rc = tune_pick(st, &g, &t, tactic, note, note_size);
    b->iface->stream_destroy(b, st);
    tune_free(&t);
    if (rc == KILN_OK)
        *n_tactic = CT_LEN;
    return rc;
}

const kc_op kc_ops_conv[] = {
    {{"", "Conv", run_conv, NULL, NULL}, sup_conv},
    {{"kiln", "FusedConv", run_conv, NULL, NULL}, sup_conv},
    {{"kiln", "FusedDepthwiseConv", run_dwconv_input, NULL, NULL}, sup_dwconv_input},
    {{NULL, NULL, NULL, NULL, NULL}, NULL},
};
