/* Gemm and MatMul on the GPU through cuBLASLt. Float32 is strict (CUBLAS_COMPUTE_32F, no TF32)
 * unless the precision pass allowed TF32 (kiln_allow_tf32: CUBLAS_COMPUTE_32F_FAST_TF32);
 * float16 and bfloat16 products keep A, B, C and D in 16 bits and accumulate in float32
 * (CUBLAS_COMPUTE_32F with float scales), the epilogue in float32 math.
 *
 * kiln's tensors are row-major; cuBLASLt's matrices are column-major, so C = A.B runs as
 * C^T = B^T.A^T: the row-major [K, N] B is a column-major N x K matrix as it lies.
 *
 * The epilogue attributes of fuse_activations (passes.h) are honoured: y = act(product + bias
 * + residual). cuBLASLt takes the residual (or Gemm's full C) as its C matrix with beta, a
 * per-column bias as EPILOGUE_BIAS, and Relu or GELU (tanh form; the erf form too in 16 bits)
 * when nothing is left after it; anything else runs in kc_epilogue after the product. gemm_run
 * takes the operands explicitly, so the fused ops kiln.FusedGemm / kiln.FusedMatMul need only their
 * own input numbering. */
#include "backend/cuda/cuda_internal.h"

#include <string.h>

typedef struct gemm_call {
    int64_t m, n, k;
    bool trans_a, trans_b;
    int64_t batch, stride_a, stride_b, stride_c; /* batch 1: no batching */
    float alpha, beta;
    int32_t dtype; /* every operand's kiln dtype */
    bool tf32;     /* float32 with TF32 allowed */
    const void *a, *b;
    const void *c;    /* [M, N] added with beta, or NULL */
    const void *bias; /* [N], or NULL */
    const void *res;  /* [M, N] added, or NULL */
    void *y;
    int act;
    float act_a, act_b;
} gemm_call;

static cudaDataType_t lt_type(int32_t dtype) {
    return dtype == KILN_DTYPE_FLOAT16    ? CUDA_R_16F
           : dtype == KILN_DTYPE_BFLOAT16 ? CUDA_R_16BF
                                          : CUDA_R_32F;
}

static kiln_status layout(cublasLtMatrixLayout_t *l, cudaDataType_t type, int64_t rows,
                          int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    KC_TRY(kc_check_lt(cublasLtMatrixLayoutCreate(l, type, (uint64_t)rows, (uint64_t)cols, ld),
                       "matrix layout"));
    if (batch > 1) {
        int32_t bc = (int32_t)batch;
        KC_TRY(kc_check_lt(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                            &bc, sizeof bc),
                           "batch count"));
        KC_TRY(kc_check_lt(
            cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride, sizeof stride),
            "batch stride"));
    }
    return KILN_OK;
}

/* What decides a product's descriptors and algorithm: shapes, transposes, batching, the Lt
 * epilogue and the workspace it may use. */
typedef struct gemm_key {
    int64_t m, n, k, batch, stride_a, stride_b, stride_c;
    int32_t trans_a, trans_b, epi, dtype, tf32;
    uint32_t align; /* bytes every operand's address is a multiple of (at most 256) */
    uint64_t ws;
} gemm_key;

/* What one context keeps for one Gemm/MatMul node (kn_local_state): Lt's descriptors and the
 * algorithm its heuristic chose for that key. */
typedef struct gemm_local {
    kn_local_state base;
    gemm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} gemm_local;

static void gemm_local_free(kn_local_state *self) {
    gemm_local *l = (gemm_local *)self;
    if (l->lc)
        cublasLtMatrixLayoutDestroy(l->lc);
    if (l->lb)
        cublasLtMatrixLayoutDestroy(l->lb);
    if (l->la)
        cublasLtMatrixLayoutDestroy(l->la);
    if (l->desc)
        cublasLtMatmulDescDestroy(l->desc);
    kc_host->free(l);
}

static kiln_status gemm_local_init(kn_stream *st, gemm_local *l) {
    const gemm_key *g = &l->key;
    cublasComputeType_t compute = g->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t type = lt_type(g->dtype);
    KC_TRY(kc_check_lt(cublasLtMatmulDescCreate(&l->desc, compute, CUDA_R_32F), "descriptor"));
    /* Column-major: Lt's A is our B (N x K), Lt's B is our A (K x M). */
    cublasOperation_t ta = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)g->epi;
    KC_TRY(kc_check_lt(
        cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
        "transa"));
    KC_TRY(kc_check_lt(
        cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
        "transb"));
    KC_TRY(kc_check_lt(
        cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
        "epilogue"));
    int32_t bias_type = (int32_t)type; /* the bias is of the operands' type */
    KC_TRY(kc_check_lt(cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                      &bias_type, sizeof bias_type),
                       "bias type"));
    /* Lt's A: N x K as stored (ld N), or its transpose stored K x N (ld K). */
    KC_TRY(g->trans_b ? layout(&l->la, type, g->k, g->n, g->k, g->batch, g->stride_b)
                      : layout(&l->la, type, g->n, g->k, g->n, g->batch, g->stride_b));
    KC_TRY(g->trans_a ? layout(&l->lb, type, g->m, g->k, g->m, g->batch, g->stride_a)
                      : layout(&l->lb, type, g->k, g->m, g->k, g->batch, g->stride_a));
    KC_TRY(layout(&l->lc, type, g->n, g->m, g->n, g->batch, g->stride_c));
    cublasLtMatmulPreference_t pref = NULL;
    KC_TRY(kc_check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference"));
    uint64_t ws = g->ws;
    kiln_status rc =
        kc_check_lt(cublasLtMatmulPreferenceSetAttribute(
                        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                    "workspace");
    /* Lt's heuristic assumes 256-byte aligned operands unless told otherwise; arena offsets
     * and batch slices may be less aligned, more so in 16 bits. */
    static const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    uint32_t align = g->align;
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0] && rc == KILN_OK; i++)
        rc =
            kc_check_lt(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align),
                        "alignment");
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    if (rc == KILN_OK)
        rc = kc_check_lt(cublasLtMatmulAlgoGetHeuristic(st->lt, l->desc, l->la, l->lb, l->lc, l->lc,
                                                        pref, 1, &heur, &found),
                         "choosing an algorithm");
    cublasLtMatmulPreferenceDestroy(pref);
    KC_TRY(rc);
    if (found == 0)
        return kc_fail(KILN_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for %lldx%lldx%lld",
                       (long long)g->m, (long long)g->n, (long long)g->k);
    l->algo = heur.algo;
    return KILN_OK;
}

/* The state for key: the context's if it was made for key, else a new one (kept in the
 * context's slot when there is one; *temp tells the caller to free it otherwise). */
static kiln_status gemm_local_get(kn_kernel_ctx *k, const gemm_key *key, gemm_local **out,
                                  bool *temp) {
    gemm_local *have = k->local ? (gemm_local *)*k->local : NULL;
    *temp = false;
    if (have != NULL && memcmp(&have->key, key, sizeof *key) == 0) {
        *out = have;
        return KILN_OK;
    }
    gemm_local *l = kc_host->alloc(sizeof *l);
    if (l == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory for a product's state");
    memset(l, 0, sizeof *l);
    l->base.release = gemm_local_free;
    l->key = *key;
    kiln_status rc = gemm_local_init(k->stream, l);
    if (rc != KILN_OK) {
        gemm_local_free(&l->base);
        return rc;
    }
    *out = l;
    if (k->local == NULL) {
        *temp = true;
        return KILN_OK;
    }
    if (have != NULL)
        gemm_local_free(&have->base);
    *k->local = &l->base;
    return KILN_OK;
}

/* The largest power of two (at most 256) dividing every address and batch stride in bytes. */
static uint32_t alignment(const gemm_call *g, const void *c) {
    const void *ptrs[] = {g->a, g->b, c, g->y};
    uintptr_t bits = 256;
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (ptrs[i] != NULL)
            bits |= (uintptr_t)ptrs[i];
    size_t es = g->dtype == KILN_DTYPE_FLOAT32 ? 4 : 2;
    if (g->batch > 1)
        bits |=
            (uintptr_t)g->stride_a * es | (uintptr_t)g->stride_b * es | (uintptr_t)g->stride_c * es;
    return (uint32_t)(bits & (~bits + 1));
}

static kiln_status gemm_run(kn_kernel_ctx *kc, gemm_call *g) {
    if (g->m == 0 || g->n == 0)
        return KILN_OK;
    kn_stream *st = kc->stream;
    /* Lt's C: Gemm's C, else the residual. */
    const void *c = g->c;
    float beta = g->beta;
    const void *res = g->res;
    if (c == NULL && res != NULL) {
        c = res;
        beta = 1.0f;
        res = NULL;
    }
    if (c == NULL)
        beta = 0.0f;
    /* Lt's GELU is the tanh form: it stands for the erf form only in 16 bits, where the two
     * differ (at most 5e-4) below the rounding of the result. */
    bool gelu_in_lt =
        g->act == KC_ACT_GELU_TANH || (g->act == KC_ACT_GELU && g->dtype != KILN_DTYPE_FLOAT32);
    bool own_epilogue =
        res != NULL || (g->act != KC_ACT_NONE && g->act != KC_ACT_RELU && !gelu_in_lt);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    bool relu_in_lt = g->act == KC_ACT_RELU && !own_epilogue;
    gelu_in_lt = gelu_in_lt && !own_epilogue;
    if (g->bias != NULL && !own_epilogue)
        epi = relu_in_lt   ? CUBLASLT_EPILOGUE_RELU_BIAS
              : gelu_in_lt ? CUBLASLT_EPILOGUE_GELU_BIAS
                           : CUBLASLT_EPILOGUE_BIAS;
    else if (relu_in_lt)
        epi = CUBLASLT_EPILOGUE_RELU;
    else if (gelu_in_lt)
        epi = CUBLASLT_EPILOGUE_GELU;
    gemm_key key;
    memset(&key, 0, sizeof key);
    key.m = g->m;
    key.n = g->n;
    key.k = g->k;
    key.batch = g->batch;
    key.stride_a = g->stride_a;
    key.stride_b = g->stride_b;
    key.stride_c = g->stride_c;
    key.trans_a = g->trans_a;
    key.trans_b = g->trans_b;
    key.epi = (int32_t)epi;
    key.dtype = g->dtype;
    key.tf32 = g->tf32;
    key.align = alignment(g, c);
    key.ws = st->ws_size;
    gemm_local *l;
    bool temp;
    KC_TRY(gemm_local_get(kc, &key, &l, &temp));
    kiln_status rc = KILN_OK;
    if (epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
        epi == CUBLASLT_EPILOGUE_GELU_BIAS)
        rc = kc_check_lt(cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &g->bias, sizeof g->bias),
                         "bias");
    if (rc == KILN_OK)
        rc = kc_check_lt(cublasLtMatmul(st->lt, l->desc, &g->alpha, g->b, l->la, g->a, l->lb, &beta,
                                        c ? (const void *)c : (const void *)g->y, l->lc, g->y,
                                        l->lc, &l->algo, st->ws, st->ws_size, st->s),
                         "matmul");
    if (temp)
        gemm_local_free(&l->base);
    KC_TRY(rc);
    if (own_epilogue)
        KC_TRY(KC_LAUNCH(kc_epilogue(st->s, g->dtype, g->y, g->bias, res, g->batch * g->m, g->n, 1,
                                     g->act, g->act_a, g->act_b),
                         "epilogue"));
    return KILN_OK;
}

/* --- Gemm: Y = alpha * A' B' + beta * C, then kiln's epilogue --- */

static bool gemm_c_kind(const kn_tensor *c, int64_t m, int64_t n, int *kind) {
    /* 0 absent, 1 full [M, N], 2 per-column [N] or [1, N] */
    if (c == NULL || c->dtype == 0) {
        *kind = 0;
        return true;
    }
    int64_t numel = kn_tensor_numel(c);
    const kn_shape *s = &c->shape;
    if (s->rank == 2 && s->d[0] == m && s->d[1] == n)
        *kind = 1;
    else if (numel == n && (s->rank == 1 || (s->rank == 2 && s->d[0] == 1)) && !(m == 1 && n == 1))
        *kind = 2;
    else if (m * n == numel && numel == 1)
        *kind = 1;
    else
        return false;
    return true;
}

static kiln_status run_gemm(kn_kernel_ctx *k) {
    const kn_node *nd = k->node;
    gemm_call g;
    memset(&g, 0, sizeof g);
    g.trans_a = kc_attr_int(nd, "transA", 0) != 0;
    g.trans_b = kc_attr_int(nd, "transB", 0) != 0;
    g.m = k->out[0].shape.d[0];
    g.n = k->out[0].shape.d[1];
    g.k = g.trans_a ? k->in[0].shape.d[0] : k->in[0].shape.d[1];
    g.batch = 1;
    g.alpha = kc_attr_float(nd, "alpha", 1.0f);
    g.beta = kc_attr_float(nd, "beta", 1.0f);
    g.a = k->in[0].data;
    g.b = k->in[1].data;
    int kind = 0;
    gemm_c_kind(k->n_in > 2 ? &k->in[2] : NULL, g.m, g.n, &kind);
    if (kind == 1)
        g.c = k->in[2].data;
    else if (kind == 2)
        g.bias = k->in[2].data;
    if (kc_attr_int(nd, "kiln_residual", 0) && k->n_in > 3)
        g.res = k->in[3].data;
    g.act = kc_activation(nd, &g.act_a, &g.act_b);
    g.y = k->out[0].data;
    g.dtype = k->out[0].dtype;
    g.tf32 = g.dtype == KILN_DTYPE_FLOAT32 && kc_attr_int(nd, "kiln_allow_tf32", 0) != 0;
    return gemm_run(k, &g);
}

static bool sup_gemm(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                     const kn_tensor *out, kn_caps *caps) {
    float a, b;
    if (!kc_all_float(in, n_in, caps, "input") || !kc_all_float(out, n_out, caps, "output") ||
        !kc_one_type(in, n_in, out[0].dtype, caps))
        return false;
    if (in[0].shape.rank != 2 || in[1].shape.rank != 2)
        return kc_reason(caps, "cuda: Gemm needs 2-D A and B");
    int kind;
    if (!gemm_c_kind(n_in > 2 ? &in[2] : NULL, out[0].shape.d[0], out[0].shape.d[1], &kind))
        return kc_reason(caps, "cuda: Gemm's C broadcasts in a way the GPU path lacks");
    if (kind == 2 && kc_attr_float(n, "beta", 1.0f) != 1.0f)
        return kc_reason(caps, "cuda: Gemm with a bias C and beta != 1");
    if (kc_activation(n, &a, &b) < 0)
        return kc_reason(caps, "cuda: unknown fused activation");
    return true;
}

/* --- MatMul: numpy semantics; batches equal, or B (or A) without batch --- */

typedef struct mm_shape {
    int64_t m, n, k, batch, stride_a, stride_b;
    bool fold; /* B has no batch: A's batches fold into M */
} mm_shape;

static bool mm_shape_of(const kn_shape *a, const kn_shape *b, mm_shape *s) {
    memset(s, 0, sizeof *s);
    int ra = a->rank, rb = b->rank;
    if (ra == 0 || rb == 0)
        return false;
    s->m = ra >= 2 ? a->d[ra - 2] : 1;
    s->k = a->d[ra - 1];
    s->n = rb >= 2 ? b->d[rb - 1] : 1;
    int64_t kb = rb >= 2 ? b->d[rb - 2] : b->d[0];
    if (kb != s->k)
        return false;
    int64_t ba = 1, bb = 1;
    for (int d = 0; d < ra - 2; d++)
        ba *= a->d[d];
    for (int d = 0; d < rb - 2; d++)
        bb *= b->d[d];
    if (rb == 1 && ra >= 2) {
        /* [.., M, K] x [K]: the vector as an N = 1 matrix; batches fold into M */
        s->m *= ba;
        s->batch = 1;
        return true;
    }
    if (bb == 1 && rb <= 2) {
        s->m *= ba;
        s->batch = 1;
        s->fold = true;
        return true;
    }
    /* equal batch dims */
    if (ra != rb)
        return false;
    for (int d = 0; d < ra - 2; d++)
        if (a->d[d] != b->d[d])
            return false;
    s->batch = ba;
    s->stride_a = s->m * s->k;
    s->stride_b = s->k * s->n;
    return true;
}

static kiln_status run_matmul(kn_kernel_ctx *k) {
    const kn_node *nd = k->node;
    mm_shape s;
    mm_shape_of(&k->in[0].shape, &k->in[1].shape, &s);
    gemm_call g;
    memset(&g, 0, sizeof g);
    g.m = s.m;
    g.n = s.n;
    g.k = s.k;
    g.batch = s.batch;
    g.stride_a = s.stride_a;
    g.stride_b = s.stride_b;
    g.stride_c = s.m * s.n;
    g.alpha = 1.0f;
    g.a = k->in[0].data;
    g.b = k->in[1].data;
    if (kc_attr_int(nd, "kiln_residual", 0) && k->n_in > 2 && k->in[2].dtype)
        g.res = k->in[2].data;
    if (kc_attr_int(nd, "kiln_bias", 0) && k->n_in > 3 && k->in[3].dtype)
        g.bias = k->in[3].data;
    g.act = kc_activation(nd, &g.act_a, &g.act_b);
    g.y = k->out[0].data;
    g.dtype = k->out[0].dtype;
    g.tf32 = g.dtype == KILN_DTYPE_FLOAT32 && kc_attr_int(nd, "kiln_allow_tf32", 0) != 0;
    return gemm_run(k, &g);
}

static bool sup_matmul(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                       const kn_tensor *out, kn_caps *caps) {
    float a, b;
    if (!kc_all_float(in, n_in, caps, "input") || !kc_all_float(out, n_out, caps, "output") ||
        !kc_one_type(in, n_in, out[0].dtype, caps))
        return false;
    mm_shape s;
    if (!mm_shape_of(&in[0].shape, &in[1].shape, &s))
        return kc_reason(caps, "cuda: MatMul with broadcast batch dims runs on the CPU");
    if (s.batch > 2147483647)
        return kc_reason(caps, "cuda: MatMul batch too large");
    if (kc_activation(n, &a, &b) < 0)
        return kc_reason(caps, "cuda: unknown fused activation");
    return true;
}

const kc_op kc_ops_gemm[] = {
    {{"", "Gemm", run_gemm, NULL, NULL}, sup_gemm},
    {{"", "MatMul", run_matmul, NULL, NULL}, sup_matmul},
    {{"kiln", "FusedGemm", run_gemm, NULL, NULL}, sup_gemm},
    {{"kiln", "FusedMatMul", run_matmul, NULL, NULL}, sup_matmul},
    {{NULL, NULL, NULL, NULL, NULL}, NULL},
};
