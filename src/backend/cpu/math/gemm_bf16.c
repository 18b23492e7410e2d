/* bf16 GEMM: packing, the two micro-kernel paths and the driver (see gemm_bf16.h). The
 * operand that is not packed ahead of time (the activation) is packed once up front, in
 * parallel, so tasks that split the other dimension share it; then each task sweeps its
 * MR x NR tiles per K slice, the B panel's slice staying in L1 and the A strips' in L2. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#include "backend/cpu/math/gemm_bf16.h"

#include "backend/cpu/clones.h"
#include "core/alloc.h"
#include "core/tensor.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MR KN_BF16_MR
#define NR KN_BF16_NR
/* Pairs of K per slice: a B panel's slice is KCP * NR * 4 bytes (16 KiB). */
#define KCP 128
/* Rows of K gathered per call of a B packing routine (its float32 panel lives on the stack). */
#define PACK_ROWS 64
#define PARALLEL_MIN_WORK ((int64_t)1 << 17)
#define TASKS_PER_THREAD 4
#define MIN_TASK_WORK ((int64_t)1 << 16)

struct kn_bf16_packed {
    int64_t rows, k, kpairs; /* rows: m of an A, n of a B */
    uint32_t *data;          /* strips (A) or panels (B), kpairs pairs each */
};

bool kn_bf16_native(void) {
    const char *e = getenv("KILN_BF16_PORTABLE");
    if (e != NULL && e[0] != '\0' && strcmp(e, "0") != 0)
        return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

const char *kn_bf16_path_name(void) {
    if (kn_bf16_native())
        return "bf16: AVX512-BF16 dot products (vdpbf16ps), fp32 accumulation";
    return __builtin_cpu_supports("avx512bf16")
               ? "bf16: portable path forced by KILN_BF16_PORTABLE (bf16 widened to fp32, fp32 "
                 "multiply-add; slower)"
               : "bf16: this CPU has no AVX512-BF16; portable path (bf16 widened to fp32, fp32 "
                 "multiply-add; slower)";
}

/* Round to nearest even, NaN kept quiet: kn_float_to_bf16, inline so packing loops vectorize. */
static inline uint32_t to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (x >> 16) | 0x40u;
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

static inline uint32_t pair(uint32_t lo, uint32_t hi) {
    return lo | hi << 16;
}

static inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* Element i of float32 or bfloat16 data, as bf16 bits (bfloat16 data is taken as is). */
static inline uint32_t bf16_at(const void *p, int32_t dtype, int64_t i) {
    if (dtype == KILN_DTYPE_BFLOAT16)
        return ((const uint16_t *)p)[i];
    return to_bf16(((const float *)p)[i]);
}

static kiln_status packed_alloc(int64_t rows, int64_t k, int width, kn_bf16_packed **out) {
    kn_bf16_packed *p = kn_calloc(1, sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing bf16 weights");
    p->rows = rows;
    p->k = k;
    p->kpairs = (k + 1) / 2;
    size_t n = (size_t)((rows + width - 1) / width * width * (p->kpairs > 0 ? p->kpairs : 1));
    p->data = kn_aligned_alloc(n * sizeof(uint32_t), 64);
    if (p->data == NULL) {
        kn_free(p);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing bf16 weights");
    }
    *out = p;
    return KILN_OK;
}

/* Element (r, q) of op(X) for a stored matrix X with leading dimension ld, 0 outside rows x k. */
static inline uint32_t op_at(const void *x, int32_t dtype, int64_t ld, bool trans, int64_t r,
                             int64_t q, int64_t rows, int64_t k) {
    if (r >= rows || q >= k)
        return 0;
    return bf16_at(x, dtype, trans ? q * ld + r : r * ld + q);
}

kiln_status kn_bf16_pack_a(const void *a, int32_t dtype, int64_t lda, bool trans, int64_t m,
                           int64_t k, kn_bf16_packed **out) {
    KN_TRY(packed_alloc(m, k, MR, out));
    kn_bf16_packed *p = *out;
    for (int64_t s = 0; s * MR < m; s++)
        for (int64_t kp = 0; kp < p->kpairs; kp++)
            for (int r = 0; r < MR; r++) {
                int64_t row = s * MR + r;
                p->data[(s * p->kpairs + kp) * MR + r] =
                    pair(op_at(a, dtype, lda, trans, row, 2 * kp, m, k),
                         op_at(a, dtype, lda, trans, row, 2 * kp + 1, m, k));
            }
    return KILN_OK;
}

kiln_status kn_bf16_pack_b(const void *b, int32_t dtype, int64_t ldb, bool trans, int64_t k,
                           int64_t n, kn_bf16_packed **out) {
    KN_TRY(packed_alloc(n, k, NR, out));
    kn_bf16_packed *p = *out;
    /* op(B)'s column j is row j of op(B)^T, whose storage is B read with the other trans. */
    for (int64_t pn = 0; pn * NR < n; pn++)
        for (int64_t kp = 0; kp < p->kpairs; kp++)
            for (int j = 0; j < NR; j++) {
                int64_t col = pn * NR + j;
                p->data[(pn * p->kpairs + kp) * NR + j] =
                    pair(op_at(b, dtype, ldb, !trans, col, 2 * kp, n, k),
                         op_at(b, dtype, ldb, !trans, col, 2 * kp + 1, n, k));
            }
    return KILN_OK;
}

void kn_bf16_packed_free(kn_bf16_packed *p) {
    if (p == NULL)
        return;
    kn_free(p->data);
    kn_free(p);
}

size_t kn_bf16_packed_bytes(const kn_bf16_packed *p) {
    return p == NULL ? 0 : (size_t)((p->rows + NR - 1) / NR * NR * p->kpairs) * sizeof(uint32_t);
}

/* kc rows of a float32 panel (NR wide) into pairs; an odd last row pairs with zero. */
KN_CLONES static void panel_to_pairs(const float *src, int64_t kc, uint32_t *dst) {
    int64_t q = 0;
    for (; q + 1 < kc; q += 2) {
        const float *r0 = src + q * NR, *r1 = r0 + NR;
        uint32_t *d = dst + q / 2 * NR;
        for (int j = 0; j < NR; j++)
            d[j] = pair(to_bf16(r0[j]), to_bf16(r1[j]));
    }
    if (q < kc)
        for (int j = 0; j < NR; j++)
            dst[q / 2 * NR + j] = to_bf16(src[q * NR + j]);
}

/* Rows [0, k) x columns [n0, n0 + nc) of a row-major float32 B (leading dimension ld) into one
 * panel of pairs, straight from the matrix (a 1x1 convolution's image). */
KN_CLONES static void rows_to_pairs(const float *b, int64_t ld, int64_t k, int64_t nc,
                                    uint32_t *dst) {
    int64_t q = 0;
    for (; q + 1 < k; q += 2) {
        const float *r0 = b + q * ld, *r1 = r0 + ld;
        uint32_t *d = dst + q / 2 * NR;
        if (nc == NR) {
            for (int j = 0; j < NR; j++)
                d[j] = pair(to_bf16(r0[j]), to_bf16(r1[j]));
        } else {
            for (int64_t j = 0; j < NR; j++)
                d[j] = j < nc ? pair(to_bf16(r0[j]), to_bf16(r1[j])) : 0;
        }
    }
    if (q < k)
        for (int64_t j = 0; j < NR; j++)
            dst[q / 2 * NR + j] = j < nc ? to_bf16(b[q * ld + j]) : 0;
}

/* Rows [i0, i0 + MR) of a float32 op(A) into one strip. */
KN_CLONES static void strip_from_f32(const float *a, int64_t lda, bool trans, int64_t i0, int64_t m,
                                     int64_t k, uint32_t *dst) {
    int64_t kpairs = (k + 1) / 2, rows = min64(MR, m - i0);
    for (int r = 0; r < MR; r++) {
        if (r >= rows || trans) {
            for (int64_t kp = 0; kp < kpairs; kp++)
                dst[kp * MR + r] =
                    r >= rows ? 0
                              : pair(to_bf16(a[2 * kp * lda + i0 + r]),
                                     2 * kp + 1 < k ? to_bf16(a[(2 * kp + 1) * lda + i0 + r]) : 0);
            continue;
        }
        const float *s = a + (i0 + r) * lda;
        int64_t kp = 0;
        for (; 2 * kp + 1 < k; kp++)
            dst[kp * MR + r] = pair(to_bf16(s[2 * kp]), to_bf16(s[2 * kp + 1]));
        if (kp < kpairs)
            dst[kp * MR + r] = to_bf16(s[2 * kp]);
    }
}

typedef struct pack_job {
    const kn_bf16_operand *op;
    int64_t rows, k, kpairs; /* rows: m for A, n for B */
    uint32_t *dst;
} pack_job;

static void pack_a_range(void *arg, int64_t begin, int64_t end) {
    const pack_job *j = arg;
    for (int64_t s = begin; s < end; s++)
        strip_from_f32(j->op->p, j->op->ld, j->op->trans, s * MR, j->rows, j->k,
                       j->dst + s * j->kpairs * MR);
}

static void pack_b_range(void *arg, int64_t begin, int64_t end) {
    const pack_job *j = arg;
    const kn_bf16_operand *b = j->op;
    float panel[PACK_ROWS * NR];
    for (int64_t pn = begin; pn < end; pn++) {
        int64_t n0 = pn * NR, nc = min64(NR, j->rows - n0);
        uint32_t *d = j->dst + pn * j->kpairs * NR;
        if (b->pack == NULL && !b->trans) {
            rows_to_pairs(b->p + n0, b->ld, j->k, nc, d);
            continue;
        }
        for (int64_t k0 = 0; k0 < j->k; k0 += PACK_ROWS) {
            int64_t kc = min64(PACK_ROWS, j->k - k0);
            if (b->pack != NULL) {
                b->pack(b->pack_arg, k0, kc, n0, nc, panel);
            } else {
                for (int64_t q = 0; q < kc; q++)
                    for (int64_t c = 0; c < NR; c++)
                        panel[q * NR + c] = c >= nc ? 0.0f
                                                    : (b->trans ? b->p[(n0 + c) * b->ld + k0 + q]
                                                                : b->p[(k0 + q) * b->ld + n0 + c]);
            }
            panel_to_pairs(panel, kc, d + k0 / 2 * NR);
        }
    }
}

#define NATIVE __attribute__((target("avx512f,avx512bf16")))

/* The part of the epilogue a tile applies in registers: bias, residual, a clamp (Relu, Clip);
 * other activations run over the tile afterwards. */
typedef struct tile_ep {
    const float *bias_row; /* one per tile row, or NULL */
    const float *bias_col; /* one per tile column, or NULL */
    const float *res;      /* the tile's residual, or NULL */
    int64_t ldr;
    bool clamp;
    float lo, hi;
} tile_ep;

/* One MR x NR tile over kcp pairs, `rows` rows (a constant in each caller, so acc stays in
 * registers); ep (the last K slice only) finishes it. */
NATIVE static inline __attribute__((always_inline)) void
tile_native(int rows, int64_t kcp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
            int nr, bool accumulate, const tile_ep *ep) {
    __m512 acc[MR][2];
    for (int r = 0; r < rows; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < kcp; kp++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + kp * NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + kp * NR + 16);
        for (int r = 0; r < rows; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[kp * MR + r]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
    __mmask16 m0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32   ? (__mmask16)0xFFFF
                   : nr <= 16 ? (__mmask16)0
                              : (__mmask16)((1u << (nr - 16)) - 1);
    __m512 bc0 = _mm512_setzero_ps(), bc1 = _mm512_setzero_ps();
    if (ep != NULL && ep->bias_col != NULL) {
        bc0 = _mm512_maskz_loadu_ps(m0, ep->bias_col);
        bc1 = _mm512_maskz_loadu_ps(m1, ep->bias_col + 16);
    }
    for (int r = 0; r < rows; r++) {
        float *cr = c + r * ldc;
        if (accumulate) {
            acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, cr));
            acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, cr + 16));
        }
        if (ep != NULL) {
            __m512 b0 = bc0, b1 = bc1;
            if (ep->bias_row != NULL)
                b0 = b1 = _mm512_set1_ps(ep->bias_row[r]);
            acc[r][0] = _mm512_add_ps(acc[r][0], b0);
            acc[r][1] = _mm512_add_ps(acc[r][1], b1);
            if (ep->res != NULL) {
                const float *rr = ep->res + r * ep->ldr;
                acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, rr));
                acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, rr + 16));
            }
            if (ep->clamp) {
                __m512 lo = _mm512_set1_ps(ep->lo), hi = _mm512_set1_ps(ep->hi);
                acc[r][0] = _mm512_min_ps(_mm512_max_ps(acc[r][0], lo), hi);
                acc[r][1] = _mm512_min_ps(_mm512_max_ps(acc[r][1], lo), hi);
            }
        }
        _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
        _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
    }
}

NATIVE static void ukr_native(int64_t kcp, const uint32_t *a, const uint32_t *b, float *c,
                              int64_t ldc, int mr, int nr, bool accumulate, const tile_ep *ep) {
    switch (mr) {
#define ROWS(R)                                                                                    \
    case R:                                                                                        \
        tile_native(R, kcp, a, b, c, ldc, nr, accumulate, ep);                                     \
        break;
        ROWS(1)
        ROWS(2)
        ROWS(3)
        ROWS(4)
        ROWS(5)
        ROWS(6)
        ROWS(7)
        ROWS(8)
#undef ROWS
    default:
        break;
    }
}

static inline float lo_f(uint32_t p) {
    uint32_t bits = p << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float hi_f(uint32_t p) {
    uint32_t bits = p & 0xFFFF0000u;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

KN_CLONES static void ukr_portable(int64_t kcp, const uint32_t *a, const uint32_t *b, float *c,
                                   int64_t ldc, int mr, int nr, bool accumulate) {
    float acc[MR][NR] = {{0}};
    for (int64_t kp = 0; kp < kcp; kp++) {
        float b0[NR], b1[NR];
        for (int j = 0; j < NR; j++) {
            b0[j] = lo_f(b[kp * NR + j]);
            b1[j] = hi_f(b[kp * NR + j]);
        }
        for (int r = 0; r < MR; r++) {
            float a0 = lo_f(a[kp * MR + r]), a1 = hi_f(a[kp * MR + r]);
            for (int j = 0; j < NR; j++)
                acc[r][j] += a0 * b0[j] + a1 * b1[j];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++)
            c[r * ldc + j] = accumulate ? c[r * ldc + j] + acc[r][j] : acc[r][j];
}

typedef struct gemm_job {
    int64_t m, n, k, kpairs, strips, panels;
    const uint32_t *a, *b;
    float *c;
    int64_t ldc;
    const kn_epilogue *ep; /* NULL when there is nothing to apply */
    bool native;
    int64_t tm, tn;
} gemm_job;

/* The epilogue of the tile at (i0, j0): its in-register part for the native kernel, all of it
 * here for the portable one (te NULL). */
static void tile_epilogue(const gemm_job *j, const tile_ep *te, float *ct, int64_t i0, int64_t j0,
                          int mr, int nr) {
    const kn_epilogue *ep = j->ep;
    if (te == NULL && (ep->bias != NULL || ep->residual != NULL)) {
        kn_epilogue e = *ep;
        e.act = KN_ACT_NONE;
        kn_epilogue_apply(&e, ct, j->ldc, i0, j0, mr, nr);
    }
    bool clamped = te != NULL && te->clamp;
    if (ep->act != KN_ACT_NONE && !clamped)
        kn_act_apply_rows(ep->act, ep->alpha, ep->beta, ct, j->ldc, mr, nr);
}

static const tile_ep *make_tile_ep(const gemm_job *j, int64_t i0, int64_t j0, tile_ep *te) {
    const kn_epilogue *ep = j->ep;
    te->bias_row = ep->bias != NULL && ep->bias_per_row ? ep->bias + i0 : NULL;
    te->bias_col = ep->bias != NULL && !ep->bias_per_row ? ep->bias + j0 : NULL;
    te->res = ep->residual != NULL ? ep->residual + i0 * ep->ldr + j0 : NULL;
    te->ldr = ep->ldr;
    te->clamp = ep->act == KN_ACT_RELU || ep->act == KN_ACT_CLIP;
    te->lo = ep->act == KN_ACT_RELU ? 0.0f : ep->alpha;
    te->hi = ep->act == KN_ACT_RELU ? INFINITY : ep->beta;
    return te;
}

static void run_tasks(void *arg, int64_t begin, int64_t end) {
    const gemm_job *j = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t ti = t / j->tn, tj = t % j->tn;
        int64_t s0 = ti * j->strips / j->tm, s1 = (ti + 1) * j->strips / j->tm;
        int64_t p0 = tj * j->panels / j->tn, p1 = (tj + 1) * j->panels / j->tn;
        for (int64_t kb = 0; kb < j->kpairs; kb += KCP) {
            int64_t kcp = min64(KCP, j->kpairs - kb);
            bool last = kb + kcp >= j->kpairs;
            for (int64_t pn = p0; pn < p1; pn++) {
                const uint32_t *bp = j->b + (pn * j->kpairs + kb) * NR;
                int64_t j0 = pn * NR;
                int nr = (int)min64(NR, j->n - j0);
                for (int64_t s = s0; s < s1; s++) {
                    const uint32_t *ap = j->a + (s * j->kpairs + kb) * MR;
                    int64_t i0 = s * MR;
                    int mr = (int)min64(MR, j->m - i0);
                    float *ct = j->c + i0 * j->ldc + j0;
                    tile_ep te;
                    const tile_ep *tep = NULL;
                    if (last && j->ep != NULL && j->native)
                        tep = make_tile_ep(j, i0, j0, &te);
                    if (j->native)
                        ukr_native(kcp, ap, bp, ct, j->ldc, mr, nr, kb > 0, tep);
                    else
                        ukr_portable(kcp, ap, bp, ct, j->ldc, mr, nr, kb > 0);
                    if (last && j->ep != NULL)
                        tile_epilogue(j, tep, ct, i0, j0, mr, nr);
                }
            }
        }
    }
}

/* A few tasks per thread, columns split first (as the float32 GEMM does). */
static void choose_grid(gemm_job *j, int threads) {
    j->tm = j->tn = 1;
    int64_t work = j->m * j->n * j->k;
    if (threads <= 1 || work < PARALLEL_MIN_WORK)
        return;
    int64_t target = (int64_t)threads * TASKS_PER_THREAD;
    if (target > work / MIN_TASK_WORK)
        target = work / MIN_TASK_WORK > threads ? work / MIN_TASK_WORK : threads;
    if (j->panels >= target) {
        j->tn = target;
        return;
    }
    j->tn = j->panels;
    j->tm = min64(j->strips, (target + j->tn - 1) / j->tn);
}

kiln_status kn_gemm_bf16(kn_threadpool *pool, int64_t m, int64_t n, int64_t k,
                         const kn_bf16_operand *a, const kn_bf16_operand *b, float *c, int64_t ldc,
                         const kn_epilogue *ep) {
    if (m <= 0 || n <= 0)
        return KILN_OK;
    const kn_epilogue *epi =
        ep != NULL && (ep->bias != NULL || ep->residual != NULL || ep->act != KN_ACT_NONE) ? ep
                                                                                           : NULL;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++)
            memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        if (epi != NULL)
            kn_epilogue_apply(epi, c, ldc, 0, 0, m, n);
        return KILN_OK;
    }
    gemm_job j = {.m = m,
                  .n = n,
                  .k = k,
                  .kpairs = (k + 1) / 2,
                  .strips = (m + MR - 1) / MR,
                  .panels = (n + NR - 1) / NR,
                  .c = c,
                  .ldc = ldc,
                  .ep = epi,
                  .native = kn_bf16_native()};
    KN_ASSERT(a->packed == NULL || (a->packed->rows == m && a->packed->k == k));
    KN_ASSERT(b->packed == NULL || (b->packed->rows == n && b->packed->k == k));
    size_t a_words = a->packed != NULL ? 0 : (size_t)(j.strips * MR * j.kpairs);
    size_t b_words = b->packed != NULL ? 0 : (size_t)(j.panels * NR * j.kpairs);
    size_t a_bytes = (a_words * sizeof(uint32_t) + 63) / 64 * 64;
    size_t bytes = a_bytes + b_words * sizeof(uint32_t);
    uint8_t *own = NULL, *buf = bytes > 0 ? kn_threadpool_scratch(pool, bytes) : NULL;
    if (bytes > 0 && buf == NULL) {
        buf = own = kn_aligned_alloc(bytes, 64);
        if (own == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for bf16 GEMM packing");
    }
    if (a->packed != NULL) {
        j.a = a->packed->data;
    } else {
        pack_job pj = {.op = a, .rows = m, .k = k, .kpairs = j.kpairs, .dst = (uint32_t *)buf};
        kn_parallel_for(pool, j.strips, 4, pack_a_range, &pj);
        j.a = pj.dst;
    }
    if (b->packed != NULL) {
        j.b = b->packed->data;
    } else {
        pack_job pj = {
            .op = b, .rows = n, .k = k, .kpairs = j.kpairs, .dst = (uint32_t *)(buf + a_bytes)};
        kn_parallel_for(pool, j.panels, 1, pack_b_range, &pj);
        j.b = pj.dst;
    }
    choose_grid(&j, kn_threadpool_size(pool));
    kn_parallel_for(j.tm * j.tn > 1 ? pool : NULL, j.tm * j.tn, 1, run_tasks, &j);
    kn_free(own);
    return KILN_OK;
}
