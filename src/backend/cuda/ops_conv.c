/* Conv on the GPU through cuDNN, NCHW, 1-D and 2-D, groups and dilations. Float32 is strict
 * (CUDNN_FMA_MATH: no TF32) unless the precision pass allowed TF32 (kiln_allow_tf32:
 * CUDNN_TENSOR_OP_MATH); float16 and bfloat16 convolutions keep their tensors in 16 bits,
 * compute in float32 (the convolution descriptor's type) and may use tensor cores. The epilogue of
 * fuse_activations (bias, residual, activation: passes.h) runs as one kernel after the convolution.
 *
 * This first version uses cuDNN's legacy convolution API (present through cuDNN 9, marked
 * deprecated there): the graph API with fused pointwise epilogues replaces it together with
 * tactic timing. conv_run takes X, W, B, Z explicitly, so kiln.FusedConv (inputs X, W, B, Z)
 * needs only its own table entry. */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

typedef struct conv_geom {
    int n, c, h, w; /* input, as 4-D */
    int k, kh, kw;  /* filters */
    int oh, ow;
    int ph, pw, sh, sw, dh, dw, groups;
    int dtype, tf32; /* the tensors' kiln dtype; float32 with TF32 allowed */
} conv_geom;

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

static kiln_status descs_make(const conv_geom *g, conv_descs *d) {
    memset(d, 0, sizeof *d);
    cudnnDataType_t t = g->dtype == KILN_DTYPE_FLOAT16    ? CUDNN_DATA_HALF
                        : g->dtype == KILN_DTYPE_BFLOAT16 ? CUDNN_DATA_BFLOAT16
                                                          : CUDNN_DATA_FLOAT;
    KC_TRY(kc_check_dnn(cudnnCreateTensorDescriptor(&d->x), "tensor descriptor"));
    KC_TRY(kc_check_dnn(cudnnCreateTensorDescriptor(&d->y), "tensor descriptor"));
    KC_TRY(kc_check_dnn(cudnnCreateFilterDescriptor(&d->w), "filter descriptor"));
    KC_TRY(kc_check_dnn(cudnnCreateConvolutionDescriptor(&d->conv), "convolution descriptor"));
    KC_TRY(
        kc_check_dnn(cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, t, g->n, g->c, g->h, g->w),
                     "input descriptor"));
    KC_TRY(kc_check_dnn(
        cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, t, g->n, g->k, g->oh, g->ow),
        "output descriptor"));
    KC_TRY(kc_check_dnn(cudnnSetFilter4dDescriptor(d->w, t, CUDNN_TENSOR_NCHW, g->k,
                                                   g->c / g->groups, g->kh, g->kw),
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
} conv_local;

static void conv_local_free(kn_local_state *self) {
    conv_local *l = (conv_local *)self;
    descs_free(&l->d);
    kc_host->free(l);
}

static kiln_status conv_local_make(kn_stream *st, const conv_geom *g, conv_local **out) {
    conv_local *l = kc_host->alloc(sizeof *l);
    if (l == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory for a convolution's state");
    memset(l, 0, sizeof *l);
    l->base.release = conv_local_free;
    l->g = *g;
    kiln_status rc = descs_make(g, &l->d);
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
    KC_TRY(conv_local_make(k->stream, g, out));
    if (k->local == NULL) {
        *temp = true;
        return KILN_OK;
    }
    if (have != NULL)
        conv_local_free(&have->base);
    *k->local = &(*out)->base;
    return KILN_OK;
}

/* y = act(conv(x, w) + b + z); b and z may be NULL. */
static kiln_status conv_run(kn_kernel_ctx *k, const conv_geom *g, const void *x, const void *w,
                            const void *b, const void *z, void *y, int act, float aa, float ab) {
    if ((int64_t)g->n * g->k * g->oh * g->ow == 0)
        return KILN_OK;
    kn_stream *st = k->stream;
    conv_local *l;
    bool temp;
    KC_TRY(conv_local_get(k, g, &l, &temp));
    kiln_status rc = kc_workspace(st, l->ws);
    const float one = 1.0f, zero = 0.0f;
    if (rc == KILN_OK)
        rc = kc_check_dnn(cudnnConvolutionForward(st->dnn, &one, l->d.x, x, l->d.w, w, l->d.conv,
                                                  l->algo, st->ws, st->ws_size, &zero, l->d.y, y),
                          "convolution");
    if (temp)
        conv_local_free(&l->base);
    KC_TRY(rc);
    if (b != NULL || z != NULL || act != KC_ACT_NONE)
        KC_TRY(KC_LAUNCH(
            kc_epilogue(st->s, g->dtype, y, b, z, g->n, g->k, (int64_t)g->oh * g->ow, act, aa, ab),
            "conv epilogue"));
    return KILN_OK;
}

static kiln_status run_conv(kn_kernel_ctx *k) {
    conv_geom g;
    conv_geom_of(k->node, &k->in[0].shape, &k->in[1].shape, &k->out[0].shape, &g);
    g.dtype = k->out[0].dtype;
    g.tf32 = g.dtype == KILN_DTYPE_FLOAT32 && kc_attr_int(k->node, "kiln_allow_tf32", 0) != 0;
    const void *b = k->n_in > 2 && k->in[2].dtype ? k->in[2].data : NULL;
    const void *z = kc_attr_int(k->node, "kiln_residual", 0) && k->n_in > 3 && k->in[3].dtype
                        ? k->in[3].data
                        : NULL;
    float aa, ab;
    int act = kc_activation(k->node, &aa, &ab);
    return conv_run(k, &g, k->in[0].data, k->in[1].data, b, z, k->out[0].data, act, aa, ab);
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
    return true;
}

const kc_op kc_ops_conv[] = {
    {{"", "Conv", run_conv, NULL, NULL}, sup_conv},
    {{"kiln", "FusedConv", run_conv, NULL, NULL}, sup_conv},
    {{NULL, NULL, NULL, NULL, NULL}, NULL},
};
