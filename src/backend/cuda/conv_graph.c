/* A convolution with its epilogue in one cuDNN kernel through cuDNN's graph (backend) API:
 * y = act(conv(x, w) + b + z), the conv feeding pointwise nodes (add bias, add residual, the
 * activation) on float32 virtual tensors, so only y is written. cuDNN's runtime-fusion engines
 * build the kernel when the execution plan is made (once a context and geometry; NVRTC inside
 * cuDNN, nothing of kiln's own).
 *
 * This is for the activations the legacy fused call (cudnnConvolutionBiasActivationForward)
 * refuses: SiLU, sigmoid, a clip (ReLU6), tanh, GELU. Without it such a conv writes y and the
 * epilogue kernel reads and writes y again, a pass over the largest tensor of each
 * EfficientNet-B0 block. Only 16-bit NHWC convolutions ask (the layouts runtime fusion takes);
 * when cuDNN makes no plan for a graph the caller keeps the conv and the epilogue kernel.
 * KILN_CUDA_CONV_GRAPH=1 turns it on (graph_on: off by default). */
#include "backend/cuda/cuda_internal.h"

#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* Unique ids of the tensors the caller binds; virtual tensors take ids from UID_VIRTUAL up. */
enum { UID_X = 1, UID_W, UID_B, UID_Z, UID_Y, UID_VIRTUAL = 16 };

/* The descriptors of one graph, destroyed together: at most 8 tensors, the convolution and its
 * operation, 3 pointwise descriptors and operations, the operation graph, the heuristic and up
 * to MAX_CFG engine configurations (26; a list of 24 once turned the graphs with a residual
 * into a CUDNN_STATUS_INTERNAL_ERROR of make's own). */
enum { MAX_CFG = 8 };
typedef struct descs {
    cudnnBackendDescriptor_t d[32];
    int n;
} descs;

struct kc_conv_graph {
    descs ds; /* the graph's descriptors, kept as long as the plan made from them */
    cudnnBackendDescriptor_t plan;
    int64_t ws;
    bool bias, residual;
    /* the variant pack of the last run, reused while the pointers are the same */
    cudnnBackendDescriptor_t pack;
    void *ptrs[5], *ws_at;
};

/* Off unless KILN_CUDA_CONV_GRAPH=1 (read once a process, when a plan runs): on the H200 it ran
 * EfficientNet-B0 fp16 level at batch 1 and about 3 % faster at batch 64 than cuDNN's
 * convolution plus the epilogue kernel (0.680 / 2.847 against 0.667 / 2.947 ms, one
 * measurement; docs/perf-notes.md), and the first run of each fused conv compiles cuDNN's
 * runtime-fusion kernel, a cost not measured yet. */
static bool graph_on(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("KILN_CUDA_CONV_GRAPH");
        on = e != NULL && strcmp(e, "1") == 0;
    }
    return on != 0;
}

/* cuDNN's pointwise mode for activation act, or -1 when it has none here. */
static int pointwise_mode(int act) {
    switch (act) {
    case KC_ACT_RELU:
    case KC_ACT_CLIP:
        return CUDNN_POINTWISE_RELU_FWD;
    case KC_ACT_SIGMOID:
        return CUDNN_POINTWISE_SIGMOID_FWD;
    case KC_ACT_SWISH:
        return CUDNN_POINTWISE_SWISH_FWD;
    case KC_ACT_GELU:
        return CUDNN_POINTWISE_GELU_FWD;
    case KC_ACT_TANH:
        return CUDNN_POINTWISE_TANH_FWD;
    default:
        return -1;
    }
}

bool kc_conv_graph_takes(const kc_conv_geom *g, int act) {
    return graph_on() && g->nhwc && g->dtype != KILN_DTYPE_FLOAT32 && pointwise_mode(act) >= 0 &&
           g->groups == 1 && g->c % 8 == 0 && g->k % 8 == 0;
}

static cudnnStatus_t make(descs *ds, cudnnBackendDescriptorType_t type,
                          cudnnBackendDescriptor_t *out) {
    if (ds->n == (int)(sizeof ds->d / sizeof ds->d[0]))
        return CUDNN_STATUS_INTERNAL_ERROR;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(type, out);
    if (s == CUDNN_STATUS_SUCCESS)
        ds->d[ds->n++] = *out;
    return s;
}

static void descs_free(descs *ds) {
    for (int i = ds->n - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(ds->d[i]);
    ds->n = 0;
}

#define SET(desc, attr, type, count, ptr)                                                          \
    do {                                                                                           \
        cudnnStatus_t s_ = cudnnBackendSetAttribute(desc, attr, type, count, ptr);                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return s_;                                                                             \
    } while (0)
#define DNN(expr)                                                                                  \
    do {                                                                                           \
        cudnnStatus_t s_ = (expr);                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                            \
            return s_;                                                                             \
    } while (0)

/* A 4-D tensor [d0, d1, d2, d3] (logical NCHW / KCRS order) laid out channels-last when nhwc. */
static cudnnStatus_t tensor(descs *ds, int64_t uid, cudnnDataType_t type, const int64_t dims[4],
                            bool nhwc, bool virt, cudnnBackendDescriptor_t *out) {
    int64_t st[4];
    if (nhwc) {
        st[1] = 1;
        st[3] = dims[1];
        st[2] = dims[3] * dims[1];
        st[0] = dims[2] * st[2];
    } else {
        st[3] = 1;
        st[2] = dims[3];
        st[1] = dims[2] * dims[3];
        st[0] = dims[1] * st[1];
    }
    int64_t align = 16;
    DNN(make(ds, CUDNN_BACKEND_TENSOR_DESCRIPTOR, out));
    SET(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    SET(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    SET(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st);
    SET(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SET(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    SET(*out, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    return cudnnBackendFinalize(*out);
}

/* A pointwise node y = mode(x [, b]); lo/hi bound RELU_FWD (a clip) when lo < hi. */
static cudnnStatus_t pointwise(descs *ds, int mode, cudnnBackendDescriptor_t x,
                               cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y, float lo,
                               float hi, cudnnBackendDescriptor_t *op) {
    cudnnBackendDescriptor_t pw;
    cudnnPointwiseMode_t m = (cudnnPointwiseMode_t)mode;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    DNN(make(ds, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
    SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &m);
    SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (lo < hi) {
        double l = lo, h = hi;
        SET(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &l);
        SET(pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &h);
    }
    DNN(cudnnBackendFinalize(pw));
    DNN(make(ds, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op));
    SET(*op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SET(*op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b != NULL)
        SET(*op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    SET(*op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    return cudnnBackendFinalize(*op);
}

/* The operation graph of conv -> [+ b] -> [+ z] -> act into *graph (descriptors kept in ds). */
static cudnnStatus_t op_graph(cudnnHandle_t h, const kc_conv_geom *g, bool bias, bool residual,
                              int act, float aa, float ab, descs *ds,
                              cudnnBackendDescriptor_t *graph) {
    cudnnDataType_t t = g->dtype == KILN_DTYPE_BFLOAT16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const int64_t xd[4] = {g->n, g->c, g->h, g->w}, wd[4] = {g->k, g->c / g->groups, g->kh, g->kw};
    const int64_t yd[4] = {g->n, g->k, g->oh, g->ow}, bd[4] = {1, g->k, 1, 1};
    cudnnBackendDescriptor_t x, w, y, b = NULL, z = NULL, v[3], ops[4];
    int64_t uid = UID_VIRTUAL;
    DNN(tensor(ds, UID_X, t, xd, g->nhwc, false, &x));
    DNN(tensor(ds, UID_W, t, wd, g->nhwc, false, &w));
    DNN(tensor(ds, UID_Y, t, yd, g->nhwc, false, &y));
    if (bias)
        DNN(tensor(ds, UID_B, t, bd, g->nhwc, false, &b));
    if (residual)
        DNN(tensor(ds, UID_Z, t, yd, g->nhwc, false, &z));
    int nv = 1 + bias + residual; /* conv output, after the bias, after the residual */
    for (int i = 0; i < nv; i++)
        DNN(tensor(ds, uid++, f32, yd, g->nhwc, true, &v[i]));

    cudnnBackendDescriptor_t conv;
    int64_t dims = 2, pad[2] = {g->ph, g->pw}, stride[2] = {g->sh, g->sw}, dil[2] = {g->dh, g->dw};
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    DNN(make(ds, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    SET(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    SET(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    SET(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    SET(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    SET(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
    SET(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    SET(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    DNN(cudnnBackendFinalize(conv));

    float one = 1.0f, zero = 0.0f;
    DNN(make(ds, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &ops[0]));
    SET(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SET(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    SET(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &v[0]);
    SET(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        1, &conv);
    SET(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one);
    SET(ops[0], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero);
    DNN(cudnnBackendFinalize(ops[0]));
    int n_ops = 1, cur = 0;
    if (bias) {
        DNN(pointwise(ds, CUDNN_POINTWISE_ADD, v[cur], b, v[cur + 1], 0, 0, &ops[n_ops++]));
        cur++;
    }
    if (residual) {
        DNN(pointwise(ds, CUDNN_POINTWISE_ADD, v[cur], z, v[cur + 1], 0, 0, &ops[n_ops++]));
        cur++;
    }
    float lo = act == KC_ACT_CLIP ? aa : 0, hi = act == KC_ACT_CLIP ? ab : 0;
    if (act == KC_ACT_CLIP && !(lo < hi))
        return CUDNN_STATUS_NOT_SUPPORTED;
    DNN(pointwise(ds, pointwise_mode(act), v[cur], NULL, y, lo, hi, &ops[n_ops++]));

    DNN(make(ds, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph));
    SET(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops);
    SET(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    return cudnnBackendFinalize(*graph);
}

/* The first engine of cuDNN's heuristic (mode A) whose execution plan finalizes, into *plan. */
static cudnnStatus_t first_plan(cudnnHandle_t h, cudnnBackendDescriptor_t graph, descs *ds,
                                cudnnBackendDescriptor_t *plan) {
    cudnnBackendDescriptor_t heur;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    DNN(make(ds, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    DNN(cudnnBackendFinalize(heur));
    int64_t count = 0;
    DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 0, &count, NULL));
    if (count > MAX_CFG)
        count = MAX_CFG;
    if (count < 1)
        return CUDNN_STATUS_NOT_SUPPORTED;
    cudnnBackendDescriptor_t cfg[MAX_CFG];
    for (int64_t i = 0; i < count; i++)
        DNN(make(ds, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
    int64_t got = 0;
    DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 count, &got, cfg));
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; i < got; i++) {
        DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan));
        last = cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                        1, &h);
        if (last == CUDNN_STATUS_SUCCESS)
            last = cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (last == CUDNN_STATUS_SUCCESS)
            last = cudnnBackendFinalize(*plan);
        if (last == CUDNN_STATUS_SUCCESS)
            return last;
        cudnnBackendDestroyDescriptor(*plan);
        *plan = NULL;
    }
    return last;
}

kiln_status kc_conv_graph_make(cudnnHandle_t h, const kc_conv_geom *g, bool bias, bool residual,
                               int act, float aa, float ab, kc_conv_graph **out, const char **why) {
    *out = NULL;
    *why = NULL;
    descs ds = {.n = 0};
    cudnnBackendDescriptor_t graph, plan = NULL;
    cudnnStatus_t s = op_graph(h, g, bias, residual, act, aa, ab, &ds, &graph);
    if (s == CUDNN_STATUS_SUCCESS)
        s = first_plan(h, graph, &ds, &plan);
    int64_t ws = 0, got = 0;
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &got, &ws);
    if (s != CUDNN_STATUS_SUCCESS) {
        descs_free(&ds);
        if (plan != NULL)
            cudnnBackendDestroyDescriptor(plan);
        /* No plan for this graph, whatever the reason (cuDNN's refusal, an internal error):
         * the caller runs the unfused path, which computes the same. */
        *why = cudnnGetErrorString(s);
        return KILN_OK;
    }
    kc_conv_graph *cg = kc_host->alloc(sizeof *cg);
    if (cg == NULL) {
        cudnnBackendDestroyDescriptor(plan);
        descs_free(&ds);
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory for a fused convolution");
    }
    memset(cg, 0, sizeof *cg);
    cg->ds = ds;
    cg->plan = plan;
    cg->ws = ws;
    cg->bias = bias;
    cg->residual = residual;
    *out = cg;
    return KILN_OK;
}

size_t kc_conv_graph_workspace(const kc_conv_graph *cg) {
    return (size_t)cg->ws;
}

/* The variant pack binding these pointers and workspace (made anew when one changes). */
static cudnnStatus_t pack_for(kc_conv_graph *cg, void *const ptrs[5], void *ws) {
    if (cg->pack != NULL && memcmp(cg->ptrs, ptrs, sizeof cg->ptrs) == 0 && cg->ws_at == ws)
        return CUDNN_STATUS_SUCCESS;
    if (cg->pack != NULL)
        cudnnBackendDestroyDescriptor(cg->pack);
    cg->pack = NULL;
    int64_t uids[5];
    void *data[5];
    int n = 0;
    const int64_t ids[5] = {UID_X, UID_W, UID_B, UID_Z, UID_Y};
    for (int i = 0; i < 5; i++)
        if (ptrs[i] != NULL) {
            uids[n] = ids[i];
            data[n++] = ptrs[i];
        }
    cudnnBackendDescriptor_t p;
    DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &p));
    cudnnStatus_t s =
        cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                     n, data);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                     &ws);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(p);
    if (s != CUDNN_STATUS_SUCCESS) {
        cudnnBackendDestroyDescriptor(p);
        return s;
    }
    cg->pack = p;
    memcpy(cg->ptrs, ptrs, sizeof cg->ptrs);
    cg->ws_at = ws;
    return CUDNN_STATUS_SUCCESS;
}

kiln_status kc_conv_graph_run(cudnnHandle_t h, kc_conv_graph *cg, const void *x, const void *w,
                              const void *b, const void *z, void *y, void *ws) {
    void *const ptrs[5] = {(void *)x, (void *)w, cg->bias ? (void *)b : NULL,
                           cg->residual ? (void *)z : NULL, y};
    KC_TRY(kc_check_dnn(pack_for(cg, ptrs, ws), "fused convolution's variant pack"));
    return kc_check_dnn(cudnnBackendExecute(h, cg->plan, cg->pack), "fused convolution");
}

void kc_conv_graph_free(kc_conv_graph *cg) {
    if (cg == NULL)
        return;
    if (cg->pack != NULL)
        cudnnBackendDestroyDescriptor(cg->pack);
    if (cg->plan != NULL)
        cudnnBackendDestroyDescriptor(cg->plan);
    descs_free(&cg->ds);
    kc_host->free(cg);
}
