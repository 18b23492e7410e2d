/* Gemm and MatMul. Constant B operands (weights) are packed once in prepare: as float32, or
 * as bf16 for the bf16 GEMM when the precision pass stored them in bf16 (kiln_weights); weights
 * stored in float16 are widened to float32 first (storage only). */
#include "backend/cpu/cpu.h"
#include "backend/cpu/f32_stage.h"
#include "backend/cpu/math/gemm.h"
#include "backend/cpu/math/gemm_bf16.h"

#include "core/alloc.h"

#include <stdatomic.h>
#include <string.h>

/* What prepare keeps: one of the two packed forms. */
typedef struct product_state {
    kn_gemm_packed *f32;
    kn_bf16_packed *bf16;
} product_state;

void kn_cpu_packed_release(void *state) {
    product_state *st = state;
    if (st == NULL)
        return;
    kn_gemm_packed_free(st->f32);
    kn_bf16_packed_free(st->bf16);
    kn_free(st);
}

/* Pack constant 2-D weights w (r x c stored; op(W) is k x n) once. */
static kiln_status pack_weights(const kn_node *node, const kn_tensor *w, bool trans, void **state) {
    int64_t r = w->shape.d[0], c = w->shape.d[1];
    int64_t k = trans ? c : r, n = trans ? r : c;
    product_state *st = kn_calloc(1, sizeof *st);
    if (st == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing weights");
    kiln_status rc;
    if (w->dtype == KILN_DTYPE_BFLOAT16 && !kn_cpu_weights_widened(node, w)) {
        rc = kn_bf16_pack_b(w->data, w->dtype, c, trans, k, n, &st->bf16);
    } else {
        kn_cpu_f32 v;
        rc = kn_cpu_f32_in(w, &v);
        if (rc == KILN_OK)
            rc = kn_gemm_pack_b(v.p, c, trans, k, n, &st->f32);
        kn_cpu_f32_release(&v);
    }
    if (rc != KILN_OK) {
        kn_cpu_packed_release(st);
        return rc;
    }
    *state = st;
    return KILN_OK;
}

static bool packable(int n_in, const kn_tensor *in) {
    return n_in >= 2 && in[1].data != NULL && in[1].shape.rank == 2 &&
           (in[1].dtype == KILN_DTYPE_FLOAT32 || in[1].dtype == KILN_DTYPE_BFLOAT16 ||
            in[1].dtype == KILN_DTYPE_FLOAT16);
}

kiln_status kn_cpu_gemm_prepare(const kn_node *node, int n_in, const kn_tensor *in, void **state) {
    *state = NULL;
    if (!packable(n_in, in))
        return KILN_OK;
    return pack_weights(node, &in[1], kn_attr_int(node, "transB", 0) != 0, state);
}

/* Weights in 16 bits reach run only packed (prepare always packs them). */
static kiln_status weights_packed(const kn_kernel_ctx *k) {
    if (k->in[1].dtype != KILN_DTYPE_FLOAT32 && k->state == NULL)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s weights of dtype %s were not packed at load",
                        k->node->op_type, kn_dtype_name(k->in[1].dtype));
    return KILN_OK;
}

/* The bf16 GEMM for Gemm's general case: y holds beta*C (or nothing), alpha scales the product
 * and the epilogue comes last. */
static kiln_status gemm_bf16_general(kn_kernel_ctx *k, int64_t m, int64_t n, int64_t kk,
                                     const kn_bf16_operand *a, const kn_bf16_operand *b,
                                     float alpha, float gemm_beta, const kn_epilogue *ep,
                                     float *y) {
    float *t = kn_aligned_alloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(float), 64);
    if (t == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Gemm");
    kiln_status rc = kn_gemm_bf16(k->pool, m, n, kk, a, b, t, n, NULL);
    for (int64_t i = 0; rc == KILN_OK && i < m * n; i++)
        y[i] = alpha * t[i] + (gemm_beta != 0.0f ? y[i] : 0.0f);
    if (rc == KILN_OK && (ep->bias != NULL || ep->residual != NULL || ep->act != KN_ACT_NONE))
        kn_epilogue_apply(ep, y, n, 0, 0, m, n);
    kn_free(t);
    return rc;
}

/* Folds beta*C into the epilogue bias when C is a row or column vector; otherwise writes the
 * broadcast beta*C into y and returns the GEMM's beta as 1. *scaled is owned by the caller. */
static kiln_status gemm_bias(const kn_tensor *ct, float beta, int64_t m, int64_t n, float *y,
                             kn_epilogue *ep, float **scaled, float *gemm_beta) {
    const kn_shape *s = &ct->shape;
    const float *c = ct->data;
    int64_t rows = s->rank == 2 ? s->d[0] : 1, cols = s->rank >= 1 ? s->d[s->rank - 1] : 1;
    *gemm_beta = 0.0f;
    bool per_col = rows == 1 && cols == n && n > 1, per_row = cols == 1 && rows == m && m > 1;
    if (per_col || per_row) {
        int64_t len = per_col ? n : m;
        if (beta != 1.0f) {
            *scaled = kn_malloc((size_t)len * sizeof(float));
            if (*scaled == NULL)
                return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for Gemm bias");
            for (int64_t i = 0; i < len; i++)
                (*scaled)[i] = beta * c[i];
            c = *scaled;
        }
        ep->bias = c;
        ep->bias_per_row = per_row;
        return KILN_OK;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            y[i * n + j] = beta * c[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
    *gemm_beta = 1.0f;
    return KILN_OK;
}

kiln_status kn_cpu_gemm_run(kn_kernel_ctx *k) {
    const kn_shape *as = &k->in[0].shape, *bs = &k->in[1].shape;
    bool ta = kn_attr_int(k->node, "transA", 0) != 0, tb = kn_attr_int(k->node, "transB", 0) != 0;
    float alpha = kn_attr_float(k->node, "alpha", 1.0f),
          beta = kn_attr_float(k->node, "beta", 1.0f);
    int64_t m = ta ? as->d[1] : as->d[0], kk = ta ? as->d[0] : as->d[1];
    int64_t n = tb ? bs->d[0] : bs->d[1];
    kn_epilogue ep = {0};
    KN_TRY(kn_cpu_fused_epilogue(k, 3, &ep));
    ep.ldr = n;
    float *y = k->out[0].data, *scaled = NULL, gemm_beta = 0.0f;
    if (k->n_in > 2 && k->in[2].dtype != 0 && beta != 0.0f && kn_tensor_numel(&k->in[2]) > 0)
        KN_TRY(gemm_bias(&k->in[2], beta, m, n, y, &ep, &scaled, &gemm_beta));
    const product_state *st = k->state;
    kiln_status rc;
    if (st != NULL && st->bf16 != NULL) {
        kn_bf16_operand a = {.p = k->in[0].data, .ld = as->d[1], .trans = ta};
        kn_bf16_operand b = {.packed = st->bf16};
        rc = alpha == 1.0f && gemm_beta == 0.0f
                 ? kn_gemm_bf16(k->pool, m, n, kk, &a, &b, y, n, &ep)
                 : gemm_bf16_general(k, m, n, kk, &a, &b, alpha, gemm_beta, &ep, y);
    } else if ((rc = weights_packed(k)) == KILN_OK) {
        kn_gemm_operand a = {.p = k->in[0].data, .ld = as->d[1], .trans = ta};
        kn_gemm_operand b = {.p = k->in[1].data, .ld = bs->d[1], .trans = tb};
        if (st != NULL)
            b = (kn_gemm_operand){.packed = st->f32};
        rc = kn_gemm(k->pool, m, n, kk, alpha, &a, &b, gemm_beta, y, n, &ep);
    }
    kn_free(scaled);
    return rc;
}

kiln_status kn_cpu_matmul_prepare(const kn_node *node, int n_in, const kn_tensor *in,
                                  void **state) {
    *state = NULL;
    if (!packable(n_in, in))
        return KILN_OK;
    return pack_weights(node, &in[1], false, state);
}

/* Batched products under this many multiply-adds run one a thread (see kn_cpu_matmul_run). */
#define SMALL_PRODUCT ((int64_t)1 << 22)
#define ITEMS_PER_THREAD 4
#define SLICE_MIN_ROWS 16

typedef struct matmul_job {
    int64_t m, n, k;
    const float *a, *b;
    float *y;
    const kn_epilogue *ep;
    int32_t rank;                             /* batch rank of the output */
    int64_t dims[KN_MAX_RANK];                /* output batch dims */
    int64_t sa[KN_MAX_RANK], sb[KN_MAX_RANK]; /* batch strides in A and B (0 = broadcast) */
    kn_threadpool *pool;        /* for each product; NULL when batches run in parallel */
    int64_t slices, slice_rows; /* each product as slices of slice_rows rows (item t: product
                                   t / slices, rows from (t % slices) * slice_rows) */
    atomic_int failed;
} matmul_job;

static kiln_status matmul_one(matmul_job *j, int64_t item) {
    int64_t t = item / j->slices, r0 = item % j->slices * j->slice_rows;
    int64_t rows = j->m - r0 < j->slice_rows ? j->m - r0 : j->slice_rows;
    if (rows <= 0)
        return KILN_OK;
    int64_t oa = r0 * j->k, ob = 0, u = t;
    for (int i = j->rank - 1; i >= 0; i--) {
        int64_t c = u % j->dims[i];
        u /= j->dims[i];
        oa += c * j->sa[i];
        ob += c * j->sb[i];
    }
    kn_gemm_operand a = {.p = j->a + oa, .ld = j->k}, b = {.p = j->b + ob, .ld = j->n};
    kn_epilogue e = *j->ep;
    if (e.residual != NULL)
        e.residual += (t * j->m + r0) * j->n;
    if (e.bias != NULL && e.bias_per_row)
        e.bias += r0;
    return kn_gemm(j->pool, rows, j->n, j->k, 1.0f, &a, &b, 0.0f, j->y + (t * j->m + r0) * j->n,
                   j->n, &e);
}

static void matmul_range(void *arg, int64_t begin, int64_t end) {
    matmul_job *j = arg;
    for (int64_t t = begin; t < end; t++)
        if (matmul_one(j, t) != KILN_OK)
            atomic_store(&j->failed, 1);
}

/* Right-aligned batch strides of an operand with `rank` dims whose last two are the matrix. */
static void batch_strides(const kn_shape *s, int64_t mat, int32_t out_rank, int64_t *st) {
    int32_t br = s->rank - 2;
    int64_t stride = mat;
    for (int i = out_rank - 1; i >= 0; i--) {
        int bi = i - (out_rank - br);
        if (bi < 0) {
            st[i] = 0;
            continue;
        }
        st[i] = s->d[bi] == 1 ? 0 : stride;
        stride *= s->d[bi];
    }
}

/* float16 and bfloat16 operands (cpu_supports admits them for a plain MatMul): the product
 * in float32, accumulated in float32, rounded once into the output. */
static kiln_status matmul_staged(kn_kernel_ctx *k) {
    kn_cpu_f32 a, b, y;
    KN_TRY(kn_cpu_f32_binary(k, &a, &b, &y));
    kn_tensor in[2] = {k->in[0], k->in[1]}, out = k->out[0];
    in[0].dtype = in[1].dtype = out.dtype = KILN_DTYPE_FLOAT32;
    in[0].data = a.p;
    in[1].data = b.p;
    out.data = y.p;
    kn_kernel_ctx s = *k;
    s.n_in = 2;
    s.in = in;
    s.n_out = 1;
    s.out = &out;
    s.state = NULL;
    kiln_status rc = kn_cpu_matmul_run(&s);
    if (rc == KILN_OK)
        kn_cpu_f32_commit(&k->out[0], &y);
    kn_cpu_f32_release(&a);
    kn_cpu_f32_release(&b);
    kn_cpu_f32_release(&y);
    return rc;
}

kiln_status kn_cpu_matmul_run(kn_kernel_ctx *k) {
    if (k->in[0].dtype != KILN_DTYPE_FLOAT32)
        return matmul_staged(k);
    kn_shape as = k->in[0].shape, bs = k->in[1].shape;
    if (as.rank == 1) {
        as = (kn_shape){.rank = 2, .d = {1, as.d[0]}};
    }
    if (bs.rank == 1) {
        bs = (kn_shape){.rank = 2, .d = {bs.d[0], 1}};
    }
    kn_epilogue ep = {0};
    KN_TRY(kn_cpu_fused_epilogue(k, 2, &ep));
    if (kn_attr_int(k->node, "kiln_bias", 0) != 0 && k->n_in > 3)
        ep.bias = k->in[3].data; /* one value per column */
    matmul_job j = {.m = as.d[as.rank - 2],
                    .k = as.d[as.rank - 1],
                    .n = bs.d[bs.rank - 1],
                    .a = k->in[0].data,
                    .b = k->in[1].data,
                    .y = k->out[0].data,
                    .ep = &ep,
                    .pool = k->pool,
                    .slices = 1};
    ep.ldr = j.n;
    atomic_init(&j.failed, 0);
    if (bs.rank == 2) {
        /* B is shared by every batch: one GEMM over all rows of A. */
        int64_t rows = 1;
        for (int i = 0; i < as.rank - 1; i++)
            rows *= as.d[i];
        const product_state *st = k->state;
        if (st != NULL && st->bf16 != NULL) {
            kn_bf16_operand a = {.p = j.a, .ld = j.k}, b = {.packed = st->bf16};
            return kn_gemm_bf16(k->pool, rows, j.n, j.k, &a, &b, j.y, j.n, &ep);
        }
        KN_TRY(weights_packed(k));
        kn_gemm_operand a = {.p = j.a, .ld = j.k}, b = {.p = j.b, .ld = j.n};
        if (st != NULL)
            b = (kn_gemm_operand){.packed = st->f32};
        return kn_gemm(k->pool, rows, j.n, j.k, 1.0f, &a, &b, 0.0f, j.y, j.n, &ep);
    }
    KN_TRY(weights_packed(k));
    j.rank = (as.rank > bs.rank ? as.rank : bs.rank) - 2;
    int64_t batches = 1;
    for (int i = 0; i < j.rank; i++) {
        int ia = i - (j.rank - (as.rank - 2)), ib = i - (j.rank - (bs.rank - 2));
        int64_t da = ia >= 0 ? as.d[ia] : 1, db = ib >= 0 ? bs.d[ib] : 1;
        j.dims[i] = da > db ? da : db;
        if (da == 0 || db == 0)
            j.dims[i] = 0;
        batches *= j.dims[i];
    }
    batch_strides(&as, j.m * j.k, j.rank, j.sa);
    batch_strides(&bs, j.k * j.n, j.rank, j.sb);
    int threads = kn_threadpool_size(k->pool);
    if (threads > 1 && batches > 0 && j.m * j.n * j.k < SMALL_PRODUCT) {
        /* Small products (attention's per-head ones) run as items of one job, each on one
         * thread: a product per parallel job left all but 2-3 of 16 threads idle in BERT's
         * 12 heads of 128 x 64 x 128, behind 36 barriers a layer. With fewer than
         * ITEMS_PER_THREAD items a thread, products split into slices of SLICE_MIN_ROWS rows
         * or more (12 heads on 8 threads were two rounds, the second a third full). */
        int64_t want = (int64_t)threads * ITEMS_PER_THREAD;
        if (batches < want) {
            int64_t most = (j.m + SLICE_MIN_ROWS - 1) / SLICE_MIN_ROWS;
            j.slices = (want + batches - 1) / batches;
            j.slices = j.slices < most ? j.slices : most;
            j.slices = j.slices > 0 ? j.slices : 1;
        }
        j.slice_rows = (j.m + j.slices - 1) / j.slices;
        j.slices = j.slice_rows > 0 ? (j.m + j.slice_rows - 1) / j.slice_rows : 1;
        j.pool = NULL;
        kn_parallel_for(k->pool, batches * j.slices, 1, matmul_range, &j);
    } else {
        j.slice_rows = j.m;
        matmul_range(&j, 0, batches);
    }
    if (atomic_load(&j.failed))
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in MatMul");
    return KILN_OK;
}
