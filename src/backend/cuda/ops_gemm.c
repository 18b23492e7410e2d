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
 * own input numbering.
 *
 * The algorithm is chosen by timing at build (kc_gemm_tune: up to 8 candidates of cuBLASLt's
 * heuristic, checked against the first one's output) and recorded in the node's kiln_tactic; a
 * run with the key it was timed at uses it (gemm_use_tactic), any other cuBLASLt's heuristic. */
#include "backend/cuda/cuda_internal.h"

#include <math.h>
#include <stdio.h>
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

static void gemm_descs_free(gemm_local *l) {
    if (l->lc)
        cublasLtMatrixLayoutDestroy(l->lc);
    if (l->lb)
        cublasLtMatrixLayoutDestroy(l->lb);
    if (l->la)
        cublasLtMatrixLayoutDestroy(l->la);
    if (l->desc)
        cublasLtMatmulDescDestroy(l->desc);
}

static void gemm_local_free(kn_local_state *self) {
    gemm_local *l = (gemm_local *)self;
    gemm_descs_free(l);
    kc_host->free(l);
}

/* Lt's descriptor and matrix layouts for l->key. */
static kiln_status gemm_descs_make(gemm_local *l) {
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
    return layout(&l->lc, type, g->n, g->m, g->n, g->batch, g->stride_c);
}

/* Up to want of the heuristic's algorithms for l (made by gemm_descs_make), best first, for
 * the key's workspace and operand alignment. */
static kiln_status gemm_heuristic(kn_stream *st, const gemm_local *l, int want,
                                  cublasLtMatmulHeuristicResult_t *heur, int *found) {
    const gemm_key *g = &l->key;
    *found = 0;
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
    if (rc == KILN_OK)
        rc = kc_check_lt(cublasLtMatmulAlgoGetHeuristic(st->lt, l->desc, l->la, l->lb, l->lc, l->lc,
                                                        pref, want, heur, found),
                         "choosing an algorithm");
    cublasLtMatmulPreferenceDestroy(pref);
    return rc;
}

/* A product's tactic (KN_ATTR_TACTIC): a word naming the layout (high half) and the cuBLASLt
 * version (low half) it was timed with, cuBLASLt's algorithm (its 8 opaque words, meaningful to
 * that version only), then the key it was timed at: M, N, K, batch, a word of the transposes,
 * TF32, dtype and Lt epilogue (tactic_flags), and the operand alignment the candidates were
 * asked for (a run whose operands are at least that aligned may use it). */
enum { GT_VERSION = 1, GT_ALGO = 1, GT_M = 9, GT_N, GT_K, GT_BATCH, GT_FLAGS, GT_ALIGN, GT_LEN };

static int64_t tactic_version(void) {
    return ((int64_t)GT_VERSION << 32) | (int64_t)(cublasLtGetVersion() & 0xffffffffu);
}

static int64_t tactic_flags(const gemm_key *g) {
    return (int64_t)(g->trans_a != 0) | (int64_t)(g->trans_b != 0) << 1 |
           (int64_t)(g->tf32 != 0) << 2 | (int64_t)(g->dtype & 0xff) << 8 |
           (int64_t)(g->epi & 0xffff) << 16;
}

/* Whether node nd's tactic applies to l's key and cuBLASLt takes its algorithm here (then it is
 * in l->algo). A tactic timed at other shapes is passed over silently: the profile's other
 * shapes run the heuristic's choice, as conv tactics do. One of another layout or cuBLASLt
 * version, type, transpose or epilogue, or that cuBLASLt refuses here, gets a verbose line. */
static bool gemm_use_tactic(kn_stream *st, const kn_node *nd, gemm_local *l) {
    const int64_t *t;
    int64_t nt = kc_attr_ints(nd, KN_ATTR_TACTIC, &t);
    const gemm_key *g = &l->key;
    if (nt == 0)
        return false;
    const char *why = NULL;
    if (nt != GT_LEN || t[0] != tactic_version())
        why = "it is of another layout or cuBLASLt version";
    else if (t[GT_M] != g->m || t[GT_N] != g->n || t[GT_K] != g->k || t[GT_BATCH] != g->batch)
        return false;
    else if (t[GT_FLAGS] != tactic_flags(g))
        why = "it was timed for another type, transpose or epilogue";
    else if (t[GT_ALIGN] <= 0 || (int64_t)g->align < t[GT_ALIGN])
        why = "the operands are less aligned than it was timed for";
    if (why == NULL) {
        cublasLtMatmulAlgo_t algo;
        for (int i = 0; i < 8; i++)
            algo.data[i] = (uint64_t)t[GT_ALGO + i];
        cublasLtMatmulHeuristicResult_t r;
        memset(&r, 0, sizeof r);
        if (cublasLtMatmulAlgoCheck(st->lt, l->desc, l->la, l->lb, l->lc, l->lc, &algo, &r) !=
            CUBLAS_STATUS_SUCCESS)
            why = "cuBLASLt refuses its algorithm here";
        else if (r.workspaceSize > g->ws)
            why = "its algorithm needs more workspace than the stream has";
        if (why == NULL) {
            l->algo = algo;
            return true;
        }
    }
    char msg[256];
    snprintf(msg, sizeof msg, "cuda: %s '%s': tactic not used (%s); cuBLASLt's heuristic chooses",
             nd->op_type, nd->name, why);
    kc_host->log(KILN_LOG_VERBOSE, msg);
    return false;
}

static kiln_status gemm_local_init(kn_stream *st, const kn_node *nd, gemm_local *l) {
    const gemm_key *g = &l->key;
    KC_TRY(gemm_descs_make(l));
    if (gemm_use_tactic(st, nd, l))
        return KILN_OK;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    KC_TRY(gemm_heuristic(st, l, 1, &heur, &found));
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
    kiln_status rc = gemm_local_init(k->stream, k->node, l);
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

/* What a call hands cuBLASLt: its C (Gemm's C, else the residual) with beta, the Lt epilogue,
 * and what is left for the epilogue kernel after the product. */
typedef struct gemm_lt {
    const void *c;
    float beta;
    const void *res;
    cublasLtEpilogue_t epi;
    bool own_epilogue;
} gemm_lt;

static void gemm_lt_of(const gemm_call *g, gemm_lt *p) {
    p->c = g->c;
    p->beta = g->beta;
    p->res = g->res;
    if (p->c == NULL && p->res != NULL) {
        p->c = p->res;
        p->beta = 1.0f;
        p->res = NULL;
    }
    if (p->c == NULL)
        p->beta = 0.0f;
    /* Lt's GELU is the tanh form: it stands for the erf form only in 16 bits, where the two
     * differ (at most 5e-4) below the rounding of the result. */
    bool gelu_in_lt =
        g->act == KC_ACT_GELU_TANH || (g->act == KC_ACT_GELU && g->dtype != KILN_DTYPE_FLOAT32);
    p->own_epilogue =
        p->res != NULL || (g->act != KC_ACT_NONE && g->act != KC_ACT_RELU && !gelu_in_lt);
    bool relu_in_lt = g->act == KC_ACT_RELU && !p->own_epilogue;
    gelu_in_lt = gelu_in_lt && !p->own_epilogue;
    p->epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (g->bias != NULL && !p->own_epilogue)
        p->epi = relu_in_lt   ? CUBLASLT_EPILOGUE_RELU_BIAS
                 : gelu_in_lt ? CUBLASLT_EPILOGUE_GELU_BIAS
                              : CUBLASLT_EPILOGUE_BIAS;
    else if (relu_in_lt)
        p->epi = CUBLASLT_EPILOGUE_RELU;
    else if (gelu_in_lt)
        p->epi = CUBLASLT_EPILOGUE_GELU;
}

static bool lt_has_bias(const gemm_lt *p) {
    return p->epi == CUBLASLT_EPILOGUE_BIAS || p->epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
           p->epi == CUBLASLT_EPILOGUE_GELU_BIAS;
}

static void gemm_key_of(const gemm_call *g, const gemm_lt *p, uint32_t align, uint64_t ws,
                        gemm_key *key) {
    memset(key, 0, sizeof *key);
    key->m = g->m;
    key->n = g->n;
    key->k = g->k;
    key->batch = g->batch;
    key->stride_a = g->stride_a;
    key->stride_b = g->stride_b;
    key->stride_c = g->stride_c;
    key->trans_a = g->trans_a;
    key->trans_b = g->trans_b;
    key->epi = (int32_t)p->epi;
    key->dtype = g->dtype;
    key->tf32 = g->tf32;
    key->align = align;
    key->ws = ws;
}

/* The product of call g with algorithm algo of state l, enqueued on st. */
static cublasStatus_t lt_matmul(kn_stream *st, const gemm_local *l, const gemm_call *g,
                                const gemm_lt *p, const cublasLtMatmulAlgo_t *algo) {
    return cublasLtMatmul(st->lt, l->desc, &g->alpha, g->b, l->la, g->a, l->lb, &p->beta,
                          p->c ? p->c : (const void *)g->y, l->lc, g->y, l->lc, algo, st->ws,
                          st->ws_size, st->s);
}

static kiln_status gemm_run(kn_kernel_ctx *kc, gemm_call *g) {
    if (g->m == 0 || g->n == 0)
        return KILN_OK;
    kn_stream *st = kc->stream;
    gemm_lt p;
    gemm_lt_of(g, &p);
    gemm_key key;
    gemm_key_of(g, &p, alignment(g, p.c), st->ws_size, &key);
    gemm_local *l;
    bool temp;
    KC_TRY(gemm_local_get(kc, &key, &l, &temp));
    kiln_status rc = KILN_OK;
    if (lt_has_bias(&p))
        rc = kc_check_lt(cublasLtMatmulDescSetAttribute(l->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &g->bias, sizeof g->bias),
                         "bias");
    if (rc == KILN_OK)
        rc = kc_check_lt(lt_matmul(st, l, g, &p, &l->algo), "matmul");
    if (temp)
        gemm_local_free(&l->base);
    KC_TRY(rc);
    if (p.own_epilogue)
        KC_TRY(KC_LAUNCH(kc_epilogue(st->s, g->dtype, g->y, g->bias, p.res, g->batch * g->m, g->n,
                                     1, g->act, g->act_a, g->act_b),
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

/* The call of Gemm node nd with these tensors (every present input's data is the operand's
 * address). */
static void gemm_call_from(const kn_node *nd, int n_in, const kn_tensor *in, const kn_tensor *out,
                           gemm_call *g) {
    memset(g, 0, sizeof *g);
    g->trans_a = kc_attr_int(nd, "transA", 0) != 0;
    g->trans_b = kc_attr_int(nd, "transB", 0) != 0;
    g->m = out[0].shape.d[0];
    g->n = out[0].shape.d[1];
    g->k = g->trans_a ? in[0].shape.d[0] : in[0].shape.d[1];
    g->batch = 1;
    g->alpha = kc_attr_float(nd, "alpha", 1.0f);
    g->beta = kc_attr_float(nd, "beta", 1.0f);
    g->a = in[0].data;
    g->b = in[1].data;
    int kind = 0;
    gemm_c_kind(n_in > 2 ? &in[2] : NULL, g->m, g->n, &kind);
    if (kind == 1)
        g->c = in[2].data;
    else if (kind == 2)
        g->bias = in[2].data;
    if (kc_attr_int(nd, "kiln_residual", 0) && n_in > 3)
        g->res = in[3].data;
    g->act = kc_activation(nd, &g->act_a, &g->act_b);
    g->y = out[0].data;
    g->dtype = out[0].dtype;
    g->tf32 = g->dtype == KILN_DTYPE_FLOAT32 && kc_attr_int(nd, "kiln_allow_tf32", 0) != 0;
}

static kiln_status run_gemm(kn_kernel_ctx *k) {
    gemm_call g;
    gemm_call_from(k->node, k->n_in, k->in, k->out, &g);
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

/* The call of MatMul node nd with these tensors (as gemm_call_from); false when its shapes are
 * not a product this file runs. */
static bool matmul_call_from(const kn_node *nd, int n_in, const kn_tensor *in, const kn_tensor *out,
                             gemm_call *g) {
    mm_shape s;
    memset(g, 0, sizeof *g);
    if (!mm_shape_of(&in[0].shape, &in[1].shape, &s))
        return false;
    g->m = s.m;
    g->n = s.n;
    g->k = s.k;
    g->batch = s.batch;
    g->stride_a = s.stride_a;
    g->stride_b = s.stride_b;
    g->stride_c = s.m * s.n;
    g->alpha = 1.0f;
    g->a = in[0].data;
    g->b = in[1].data;
    if (kc_attr_int(nd, "kiln_residual", 0) && n_in > 2 && in[2].dtype)
        g->res = in[2].data;
    if (kc_attr_int(nd, "kiln_bias", 0) && n_in > 3 && in[3].dtype)
        g->bias = in[3].data;
    g->act = kc_activation(nd, &g->act_a, &g->act_b);
    g->y = out[0].data;
    g->dtype = out[0].dtype;
    g->tf32 = g->dtype == KILN_DTYPE_FLOAT32 && kc_attr_int(nd, "kiln_allow_tf32", 0) != 0;
    return true;
}

static kiln_status run_matmul(kn_kernel_ctx *k) {
    gemm_call g;
    matmul_call_from(k->node, k->n_in, k->in, k->out, &g);
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

/* --- tactic selection by timing (kn_backend_iface.tune) --- */

/* Candidates asked of cuBLASLt's heuristic, best first. */
#define GEMM_TUNE_CANDIDATES 8
/* The workspace a candidate may need (the stream's default: every stream has it). */
#define GEMM_TUNE_WORKSPACE ((size_t)32 << 20)
/* The operand alignment candidates are asked for: the arena's (runtime/memory_plan.h's
 * KN_ARENA_ALIGN), which every activation's offset is a multiple of; a run less aligned (a view
 * into a tensor) passes the tactic over. Less where a batch stride is less aligned. */
#define GEMM_TUNE_ALIGN 64
/* Each candidate: GEMM_TUNE_RUNS runs in a graph, launched once to warm up, then
 * GEMM_TUNE_LAUNCHES times, each between two events; the fastest launch counts. */
#define GEMM_TUNE_RUNS 10
#define GEMM_TUNE_LAUNCHES 3
/* Once a layer's tuning has run this long, the candidates not yet tried are skipped (the first,
 * the heuristic's own choice, is always timed). */
#define GEMM_TUNE_LAYER_BUDGET_S 0.5
/* Gemm has up to four inputs (A, B, C, residual), MatMul too (A, B, residual, bias). */
#define GEMM_MAX_IN 4

/* The call of product node n with these tensors, input j at address ptr[j] (where present) and
 * the output at y; false when n is not a product this file runs at these shapes, or an empty
 * one (nothing to time). */
static bool product_call(const kn_node *n, int n_in, const kn_tensor *in, const kn_tensor *out,
                         void *const *ptr, void *y, gemm_call *g) {
    memset(g, 0, sizeof *g);
    if (n_in < 2 || n_in > GEMM_MAX_IN)
        return false;
    kn_tensor ti[GEMM_MAX_IN], to = out[0];
    for (int j = 0; j < n_in; j++) {
        ti[j] = in[j];
        ti[j].data = in[j].dtype ? ptr[j] : NULL;
    }
    to.data = y;
    if (strcmp(n->op_type, "Gemm") == 0 || strcmp(n->op_type, "FusedGemm") == 0) {
        if (in[0].shape.rank != 2 || in[1].shape.rank != 2 || out[0].shape.rank != 2)
            return false;
        gemm_call_from(n, n_in, ti, &to, g);
    } else if (!matmul_call_from(n, n_in, ti, &to, g)) {
        return false;
    }
    return g->m > 0 && g->n > 0 && g->k > 0;
}

/* The alignment the candidates for g are asked for (see GEMM_TUNE_ALIGN). */
static uint32_t tune_align(const gemm_call *g) {
    uintptr_t bits = GEMM_TUNE_ALIGN;
    size_t es = g->dtype == KILN_DTYPE_FLOAT32 ? 4 : 2;
    if (g->batch > 1)
        bits |=
            (uintptr_t)g->stride_a * es | (uintptr_t)g->stride_b * es | (uintptr_t)g->stride_c * es;
    return (uint32_t)(bits & (~bits + 1));
}

bool kc_gemm_tune_key(const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                      const kn_tensor *out, char *key, size_t size) {
    /* the data of inputs not known at build is not there: any address says which are present */
    char here;
    void *ptr[GEMM_MAX_IN] = {&here, &here, &here, &here};
    gemm_call g;
    if (n_out < 1 || !product_call(n, n_in, in, out, ptr, &here, &g))
        return false;
    gemm_lt p;
    gemm_lt_of(&g, &p);
    int len =
        snprintf(key, size,
                 "cuda gemm %d|%s|%s%s|m %lld n %lld k %lld|batch %lld|trans %d,%d|"
                 "epilogue %d|c %d|align %u|workspace %zu",
                 GT_VERSION, kc_device_id, kn_dtype_name(g.dtype), g.tf32 ? " tf32" : "",
                 (long long)g.m, (long long)g.n, (long long)g.k, (long long)g.batch, (int)g.trans_a,
                 (int)g.trans_b, (int)p.epi, p.c != NULL, tune_align(&g), GEMM_TUNE_WORKSPACE);
    return len > 0 && (size_t)len < size;
}

/* The device buffers one timing uses. */
typedef struct gemm_bufs {
    void *in[GEMM_MAX_IN]; /* the node's present inputs */
    void *y;
    float *yf, *tmp;  /* y as float32; float32 staging for uploads */
    float *ref, *cur; /* host: the first candidate's output, the current one's (and staging) */
    int64_t ny;
} gemm_bufs;

static void bufs_free(gemm_bufs *t) {
    for (int j = 0; j < GEMM_MAX_IN; j++)
        cudaFree(t->in[j]);
    cudaFree(t->y);
    cudaFree(t->yf);
    cudaFree(t->tmp);
    kc_host->free(t->ref);
    kc_host->free(t->cur);
}

/* Every present input in a device buffer: its data where known at build (weights), else the
 * pattern; the output's buffers. */
static kiln_status bufs_setup(kn_stream *st, int n_in, const kn_tensor *in, const kn_tensor *out,
                              gemm_bufs *t) {
    int32_t dt = out[0].dtype;
    size_t es = kn_dtype_size(dt);
    int64_t big = t->ny = kn_tensor_numel(&out[0]);
    for (int j = 0; j < n_in; j++)
        if (in[j].dtype && kn_tensor_numel(&in[j]) > big)
            big = kn_tensor_numel(&in[j]);
    KC_TRY(kc_check(cudaMalloc(&t->y, (size_t)t->ny * es), "timing buffers"));
    KC_TRY(kc_check(cudaMalloc((void **)&t->yf, (size_t)t->ny * 4), "timing buffers"));
    KC_TRY(kc_check(cudaMalloc((void **)&t->tmp, (size_t)big * 4), "timing buffers"));
    t->ref = kc_host->alloc((size_t)t->ny * 4);
    t->cur = kc_host->alloc((size_t)big * 4);
    if (t->ref == NULL || t->cur == NULL)
        return kc_fail(KILN_ERR_OUT_OF_MEMORY, "out of memory for timing a product");
    for (int j = 0; j < n_in; j++) {
        if (!in[j].dtype)
            continue;
        int64_t n = kn_tensor_numel(&in[j]);
        KC_TRY(kc_check(cudaMalloc(&t->in[j], (size_t)(n ? n : 1) * es), "timing buffers"));
        if (in[j].data != NULL && in[j].dtype == dt) {
            KC_TRY(
                kc_check(cudaMemcpy(t->in[j], in[j].data, (size_t)n * es, cudaMemcpyHostToDevice),
                         "uploading weights"));
            continue;
        }
        kc_tune_pattern(t->cur, n, (uint32_t)j + 1);
        KC_TRY(kc_tune_upload(st, dt, t->cur, t->in[j], t->tmp, n));
    }
    return KILN_OK;
}

/* One candidate's problem: the call on the timing buffers, what Lt gets, and Lt's state. */
typedef struct gemm_trial {
    const gemm_call *g;
    gemm_lt p;
    gemm_local l;
} gemm_trial;

/* Run algo once into y and read the output back into t->cur (as float32). */
static kiln_status tune_run_once(kn_stream *st, const gemm_trial *tr, gemm_bufs *t,
                                 const cublasLtMatmulAlgo_t *algo) {
    int32_t dt = tr->g->dtype;
    KC_TRY(kc_check_lt(lt_matmul(st, &tr->l, tr->g, &tr->p, algo), "matmul"));
    const void *yf = tr->g->y;
    if (dt != KILN_DTYPE_FLOAT32) {
        KC_TRY(KC_LAUNCH(kc_cast(st->s, dt, KILN_DTYPE_FLOAT32, tr->g->y, t->yf, t->ny), "cast"));
        yf = t->yf;
    }
    KC_TRY(kc_check(cudaMemcpyAsync(t->cur, yf, (size_t)t->ny * 4, cudaMemcpyDeviceToHost, st->s),
                    "reading the output"));
    return kc_check(cudaStreamSynchronize(st->s), "running a candidate");
}

static kiln_status tune_enqueue(kn_stream *st, const gemm_trial *tr,
                                const cublasLtMatmulAlgo_t *algo, int runs) {
    for (int i = 0; i < runs; i++)
        KC_TRY(kc_check_lt(lt_matmul(st, &tr->l, tr->g, &tr->p, algo), "matmul"));
    return KILN_OK;
}

/* GEMM_TUNE_RUNS runs of algo recorded as one stream graph, or NULL when they cannot be. */
static cudaGraphExec_t tune_graph(kn_stream *st, const gemm_trial *tr,
                                  const cublasLtMatmulAlgo_t *algo) {
    if (cudaStreamBeginCapture(st->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    kiln_status rc = tune_enqueue(st, tr, algo, GEMM_TUNE_RUNS);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamEndCapture(st->s, &graph) == cudaSuccess && rc == KILN_OK &&
        cudaGraphInstantiateWithFlags(&exec, graph, 0) != cudaSuccess)
        exec = NULL;
    if (graph != NULL)
        cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return exec;
}

/* Milliseconds per run of algo on the GPU. As for convolutions (ops_conv.c), the runs are
 * recorded into a stream graph and the graph is timed, as the runtime replays them, so that
 * cuBLASLt's host work per call is not what is measured; a candidate that cannot be recorded is
 * timed by plain calls. */
static kiln_status tune_time(kn_stream *st, const gemm_trial *tr, const cublasLtMatmulAlgo_t *algo,
                             float *ms) {
    cudaEvent_t e[GEMM_TUNE_LAUNCHES + 1];
    memset(e, 0, sizeof e);
    cudaGraphExec_t graph = tune_graph(st, tr, algo);
    kiln_status rc = KILN_OK;
    for (int i = 0; i <= GEMM_TUNE_LAUNCHES && rc == KILN_OK; i++)
        rc = kc_check(cudaEventCreate(&e[i]), "creating an event");
    /* launch 0 warms up; launch i + 1 runs between events i and i + 1 */
    for (int i = 0; i <= GEMM_TUNE_LAUNCHES && rc == KILN_OK; i++) {
        if (i > 0)
            rc = kc_check(cudaEventRecord(e[i - 1], st->s), "recording an event");
        if (rc == KILN_OK)
            rc = graph != NULL ? kc_check(cudaGraphLaunch(graph, st->s), "launching a graph")
                               : tune_enqueue(st, tr, algo, GEMM_TUNE_RUNS);
    }
    if (rc == KILN_OK)
        rc = kc_check(cudaEventRecord(e[GEMM_TUNE_LAUNCHES], st->s), "recording an event");
    if (rc == KILN_OK)
        rc = kc_check(cudaEventSynchronize(e[GEMM_TUNE_LAUNCHES]), "timing a candidate");
    *ms = INFINITY;
    for (int i = 0; i < GEMM_TUNE_LAUNCHES && rc == KILN_OK; i++) {
        float one = 0.0f;
        rc = kc_check(cudaEventElapsedTime(&one, e[i], e[i + 1]), "timing a candidate");
        *ms = fminf(*ms, one / GEMM_TUNE_RUNS);
    }
    for (int i = 0; i <= GEMM_TUNE_LAUNCHES; i++)
        if (e[i] != NULL)
            cudaEventDestroy(e[i]);
    if (graph != NULL)
        cudaGraphExecDestroy(graph);
    return rc;
}

/* An int32 configuration attribute of algo (for the build's log), or -1. */
static int algo_config(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t a) {
    int32_t v = -1;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, a, &v, sizeof v, &written) !=
            CUBLAS_STATUS_SUCCESS ||
        written != sizeof v)
        return -1;
    return (int)v;
}

/* Run and time each of the heuristic's candidates for tr; the first that runs is the reference
 * the others must match (float32 strict within 1e-4 of its largest magnitude, TF32, float16
 * and bfloat16 within 1e-2); *best is the fastest, or -1. */
static void tune_candidates(kn_stream *st, const gemm_trial *tr, gemm_bufs *t,
                            const cublasLtMatmulHeuristicResult_t *heur, int found, int *best,
                            char *note, size_t note_size) {
    const gemm_call *g = tr->g;
    double tol = g->dtype == KILN_DTYPE_FLOAT32 && !g->tf32 ? 1e-4 : 1e-2;
    int tried = 0, rejected = 0, skipped = 0;
    float best_ms = 0.0f, first_ms = 0.0f;
    bool have_ref = false;
    double t0 = kc_now_s();
    *best = -1;
    for (int i = 0; i < found; i++) {
        const cublasLtMatmulAlgo_t *algo = &heur[i].algo;
        if (*best >= 0 && kc_now_s() - t0 > GEMM_TUNE_LAYER_BUDGET_S) {
            skipped = found - i;
            break;
        }
        if (heur[i].state != CUBLAS_STATUS_SUCCESS || heur[i].workspaceSize > st->ws_size)
            continue;
        /* A candidate that fails to run is skipped, not an error: the heuristic's list is
         * advice. */
        if (tune_run_once(st, tr, t, algo) != KILN_OK) {
            (void)cudaGetLastError();
            continue;
        }
        tried++;
        if (!kc_tune_accept(t->ref, t->cur, t->ny, tol, &have_ref)) {
            rejected++;
            continue;
        }
        float ms = 0.0f;
        if (tune_time(st, tr, algo, &ms) != KILN_OK) {
            (void)cudaGetLastError();
            continue;
        }
        if (*best < 0)
            first_ms = ms;
        if (*best < 0 || ms < best_ms) {
            *best = i;
            best_ms = ms;
        }
    }
    if (*best >= 0) {
        const cublasLtMatmulAlgo_t *a = &heur[*best].algo;
        snprintf(note, note_size,
                 "candidate %d of %d (algorithm %d, tile %d, split-K %d) %.4f ms, cuBLASLt's "
                 "first choice %.4f ms; %d run, %d rejected as different, %d untried",
                 *best + 1, found, algo_config(a, CUBLASLT_ALGO_CONFIG_ID),
                 algo_config(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                 algo_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), (double)best_ms, (double)first_ms,
                 tried, rejected, skipped);
    }
}

/* The heuristic's candidates for call g (on t's buffers), timed; the fastest as the tactic. */
static kiln_status tune_pick(kn_stream *st, const gemm_call *g, gemm_bufs *t, int64_t *tactic,
                             char *note, size_t note_size) {
    gemm_trial tr;
    memset(&tr, 0, sizeof tr);
    tr.g = g;
    gemm_lt_of(g, &tr.p);
    gemm_key_of(g, &tr.p, tune_align(g), GEMM_TUNE_WORKSPACE, &tr.l.key);
    cublasLtMatmulHeuristicResult_t heur[GEMM_TUNE_CANDIDATES];
    int found = 0, best = -1;
    kiln_status rc = gemm_descs_make(&tr.l);
    if (rc == KILN_OK && lt_has_bias(&tr.p))
        rc =
            kc_check_lt(cublasLtMatmulDescSetAttribute(tr.l.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &g->bias, sizeof g->bias),
                        "bias");
    if (rc == KILN_OK)
        rc = gemm_heuristic(st, &tr.l, GEMM_TUNE_CANDIDATES, heur, &found);
    if (rc == KILN_OK)
        tune_candidates(st, &tr, t, heur, found, &best, note, note_size);
    gemm_descs_free(&tr.l);
    KC_TRY(rc);
    if (best < 0)
        return kc_fail(KILN_ERR_UNSUPPORTED, "cuBLASLt offers no algorithm that runs here");
    (void)cudaGetLastError();
    tactic[0] = tactic_version();
    for (int i = 0; i < 8; i++)
        tactic[GT_ALGO + i] = (int64_t)heur[best].algo.data[i];
    tactic[GT_M] = g->m;
    tactic[GT_N] = g->n;
    tactic[GT_K] = g->k;
    tactic[GT_BATCH] = g->batch;
    tactic[GT_FLAGS] = tactic_flags(&tr.l.key);
    tactic[GT_ALIGN] = tr.l.key.align;
    return KILN_OK;
}

kiln_status kc_gemm_tune(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                         const kn_tensor *out, int64_t *tactic, int *n_tactic, char *note,
                         size_t note_size) {
    if (n_in < 2 || n_in > GEMM_MAX_IN || n_out < 1)
        return kc_fail(KILN_ERR_INTERNAL, "cuda: not a product cuBLASLt runs");
    kn_stream *st = NULL;
    KC_TRY(b->iface->stream_create(b, &st));
    gemm_bufs t;
    memset(&t, 0, sizeof t);
    gemm_call g;
    kiln_status rc = bufs_setup(st, n_in, in, out, &t);
    if (rc == KILN_OK && !product_call(n, n_in, in, out, t.in, t.y, &g))
        rc = kc_fail(KILN_ERR_INTERNAL, "cuda: not a product cuBLASLt runs");
    if (rc == KILN_OK)
        rc = kc_workspace(st, GEMM_TUNE_WORKSPACE);
    if (rc == KILN_OK)
        rc = tune_pick(st, &g, &t, tactic, note, note_size);
    b->iface->stream_destroy(b, st);
    bufs_free(&t);
    if (rc == KILN_OK)
        *n_tactic = GT_LEN;
    return rc;
}

const kc_op kc_ops_gemm[] = {
    {{"", "Gemm", run_gemm, NULL, NULL}, sup_gemm},
    {{"", "MatMul", run_matmul, NULL, NULL}, sup_matmul},
    {{"kiln", "FusedGemm", run_gemm, NULL, NULL}, sup_gemm},
    {{"kiln", "FusedMatMul", run_matmul, NULL, NULL}, sup_matmul},
    {{NULL, NULL, NULL, NULL, NULL}, NULL},
};
