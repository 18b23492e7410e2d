/* bf16 GEMM: packing, the two micro-kernel paths and the driver (see gemm_bf16.h). The
 * operand that is not packed ahead of time (the activation) is packed once up front, in
 * parallel, so tasks that split the other dimension share it; then each task sweeps its
 * MR x NR tiles per K slice, the B panel's slice staying in L1 and the A strips' in L2. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif

#include "backend/cpu/math/gemm_bf16.h"

#include "backend/cpu/arch/amx.h"
#include "backend/cpu/arch/gemm_bf16_amx.h"
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
/* Panels of B a task keeps in cache while each strip of A passes once (run_tasks; a panel's
 * KCP slice is 16 KB), and the most a product may have to be split by rows only (choose_grid). */
#define STRIPS_OUTER_MAX_PANELS 4
/* Bytes ahead of a tile's A that its kernel prefetches when A streams front to back (run_tasks'
 * strips-outer order): the weights come from memory, and the hardware prefetcher alone left
 * that order at half the kernel's speed with 2 MB of cold weights (m 2048 x n 49 x k 512). */
#define A_PREFETCH_BYTES 4096
/* The most of B (a task's panels, whole K) that order keeps in L2 (1 MB on the Zen 5 box) while
 * A streams past: ResNet-50's 3x3 convs at 7x7 take 590 KB. */
#define STREAM_B_MAX_BYTES ((int64_t)640 << 10)
#define AMX_MR KN_BF16_AMX_MR
#define KT KN_BF16_KT
/* Products of fewer rows take the AVX512-BF16 kernel: an AMX tile would be mostly padding. */
#define AMX_MIN_M 16
/* A tile does in a cycle what vdpbf16ps does in about eight: tasks and parallel products
 * start at eight times the work, so a task lasts about as long as on the AVX512-BF16 path. */
#define AMX_PARALLEL_MIN_WORK (PARALLEL_MIN_WORK * 8)
#define AMX_MIN_TASK_WORK (MIN_TASK_WORK * 8)
/* Blocks of KT pairs per K slice of the AMX path: an A strip's slice and a B panel's are 16 KiB
 * each. */
#define AMX_KCB 16
/* Blocks of KT pairs of one A strip per packing task (8 KiB of bf16 written). */
#define AMX_PACK_BLOCKS 8
/* Pairs ahead of a packed B panel's row that the AVX512-BF16 kernel fetches when B was packed
 * once at load (a MatMul's constant weights): 64 pair rows, 8 KB, as the float32 GEMM does. */
#define B_PREFETCH_WORDS (64 * NR)
/* tile_native's prefetch flags: A ahead (run_tasks' streaming order), B ahead (packed weights). */
#define PF_A 1
#define PF_B 2

struct kn_bf16_packed {
    int64_t rows, k, kpairs; /* rows: m of an A, n of a B */
    int64_t kstride;         /* pairs a strip or panel holds: kpairs, or padded to KT for AMX */
    bool amx;                /* packed for the AMX kernel (A: its tile layout) */
    uint32_t *data;          /* strips (A) or panels (B) */
};

static bool env_set(const char *name) {
    const char *e = getenv(name);
    return e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
}

bool kn_bf16_native(void) {
    if (env_set("KILN_BF16_PORTABLE"))
        return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bf16");
}

bool kn_bf16_amx(void) {
    return kn_bf16_native() && kn_cpu_amx(KN_AMX_BF16);
}

const char *kn_bf16_path_name(void) {
    if (kn_bf16_amx())
        return "bf16: AMX-BF16 tiles (tdpbf16ps), fp32 accumulation; AVX512-BF16 for products "
               "of fewer than 16 rows";
    if (kn_bf16_native()) {
        if (kn_cpu_amx_turned_off() && kn_cpu_amx_supported(KN_AMX_BF16))
            return "bf16: AVX512-BF16 dot products (vdpbf16ps), fp32 accumulation; AMX turned "
                   "off by KILN_CPU_AMX=0";
        return "bf16: AVX512-BF16 dot products (vdpbf16ps), fp32 accumulation; no AMX-BF16 on "
               "this CPU (or the kernel did not grant tile data)";
    }
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

/* Pairs of K a strip or panel holds. */
static int64_t kstride_for(int64_t kpairs, bool amx) {
    return amx ? (kpairs + KT - 1) / KT * KT : kpairs;
}

static size_t packed_words(int64_t rows, int width, int64_t kstride) {
    return (size_t)((rows + width - 1) / width * width * (kstride > 0 ? kstride : 1));
}

static kiln_status packed_alloc(int64_t rows, int64_t k, int width, bool amx,
                                kn_bf16_packed **out) {
    kn_bf16_packed *p = kn_calloc(1, sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing bf16 weights");
    p->rows = rows;
    p->k = k;
    p->kpairs = (k + 1) / 2;
    p->kstride = kstride_for(p->kpairs, amx);
    p->amx = amx;
    p->data = kn_aligned_alloc(packed_words(rows, width, p->kstride) * sizeof(uint32_t), 64);
    if (p->data == NULL) {
        kn_free(p);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory packing bf16 weights");
    }
    *out = p;
    return KILN_OK;
}

/* Index of pair kp of row r in an AMX strip of kstride pairs: 16 x KT tiles along K. */
static inline int64_t amx_at(int r, int64_t kp) {
    return kp / KT * (AMX_MR * KT) + r * KT + kp % KT;
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
    bool amx = kn_bf16_amx();
    KN_TRY(packed_alloc(m, k, amx ? AMX_MR : MR, amx, out));
    kn_bf16_packed *p = *out;
    if (amx) {
        for (int64_t s = 0; s * AMX_MR < m; s++)
            for (int64_t kp = 0; kp < p->kstride; kp++)
                for (int r = 0; r < AMX_MR; r++) {
                    int64_t row = s * AMX_MR + r;
                    p->data[s * AMX_MR * p->kstride + amx_at(r, kp)] =
                        pair(op_at(a, dtype, lda, trans, row, 2 * kp, m, k),
                             op_at(a, dtype, lda, trans, row, 2 * kp + 1, m, k));
                }
        return KILN_OK;
    }
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
    KN_TRY(packed_alloc(n, k, NR, kn_bf16_amx(), out));
    kn_bf16_packed *p = *out;
    /* op(B)'s column j is row j of op(B)^T, whose storage is B read with the other trans. */
    for (int64_t pn = 0; pn * NR < n; pn++)
        for (int64_t kp = 0; kp < p->kstride; kp++)
            for (int j = 0; j < NR; j++) {
                int64_t col = pn * NR + j;
                p->data[(pn * p->kstride + kp) * NR + j] =
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
    return p == NULL ? 0 : (size_t)((p->rows + NR - 1) / NR * NR * p->kstride) * sizeof(uint32_t);
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

/* Blocks [kb0, kb1) (pair offsets, multiples of KT) of rows [i0, i0 + AMX_MR) of a float32 op(A)
 * into one AMX strip. A tile row is 2 * KT consecutive elements of one row of op(A) as bf16, in
 * order (a pair's low half is its even element, first in memory on x86), so an untransposed A
 * converts 32 floats at a time into a row of the tile. */
KN_CLONES static void strip_amx_from_f32(const float *a, int64_t lda, bool trans, int64_t i0,
                                         int64_t m, int64_t k, int64_t kb0, int64_t kb1,
                                         uint32_t *dst) {
    int64_t rows = min64(AMX_MR, m - i0);
    for (int64_t kb = kb0; kb < kb1; kb += KT) {
        int64_t k0 = 2 * kb, kc = min64(2 * KT, k - k0);
        for (int r = 0; r < AMX_MR; r++) {
            uint16_t h[2 * KT];
            if (r >= rows || kc <= 0) {
                memset(h, 0, sizeof h);
            } else if (!trans && kc == 2 * KT) {
                const float *s = a + (i0 + r) * lda + k0;
                for (int q = 0; q < 2 * KT; q++)
                    h[q] = (uint16_t)to_bf16(s[q]);
            } else {
                for (int q = 0; q < 2 * KT; q++)
                    h[q] = q >= kc ? 0
                                   : (uint16_t)to_bf16(trans ? a[(k0 + q) * lda + i0 + r]
                                                             : a[(i0 + r) * lda + k0 + q]);
            }
            memcpy(dst + kb * AMX_MR + r * KT, h, sizeof h);
        }
    }
}

typedef struct pack_job {
    const kn_bf16_operand *op;
    int64_t rows, k, kpairs, kstride; /* rows: m for A, n for B */
    uint32_t *dst;
} pack_job;

static void pack_a_range(void *arg, int64_t begin, int64_t end) {
    const pack_job *j = arg;
    for (int64_t s = begin; s < end; s++)
        strip_from_f32(j->op->p, j->op->ld, j->op->trans, s * MR, j->rows, j->k,
                       j->dst + s * j->kpairs * MR);
}

/* A's AMX packing as tasks of one strip's AMX_PACK_BLOCKS blocks of K: BERT's 128 rows are 8
 * strips, which left all but two threads idle while 3072-deep rows were converted. */
static int64_t pack_a_amx_chunks(const pack_job *j) {
    return (j->kstride / KT + AMX_PACK_BLOCKS - 1) / AMX_PACK_BLOCKS;
}

static void pack_a_amx_range(void *arg, int64_t begin, int64_t end) {
    const pack_job *j = arg;
    int64_t chunks = pack_a_amx_chunks(j);
    for (int64_t t = begin; t < end; t++) {
        int64_t s = t / chunks, kb0 = t % chunks * AMX_PACK_BLOCKS * KT;
        strip_amx_from_f32(j->op->p, j->op->ld, j->op->trans, s * AMX_MR, j->rows, j->k, kb0,
                           min64(kb0 + AMX_PACK_BLOCKS * KT, j->kstride),
                           j->dst + s * j->kstride * AMX_MR);
    }
}

/* B's packing in pieces of one panel's PACK_ROWS rows of K (the panel's K padding with its
 * first piece): a 7x7 map is two panels (49 columns), so whole panels left all but two threads
 * idle while ResNet-50's 4608-deep im2col was packed and converted. The pieces are filled inside
 * the product's job by the tasks that read the panel (kn_shared_item_fill): no job and no
 * barrier of their own, and a panel only one task reads is packed by that task, so the
 * products find it in its cache instead of in memory. */
static int32_t pack_b_chunks(const pack_job *j) {
    return (int32_t)((j->k + PACK_ROWS - 1) / PACK_ROWS);
}

static void pack_b_piece(void *arg, int64_t pn, int32_t piece) {
    const pack_job *j = arg;
    const kn_bf16_operand *b = j->op;
    float panel[PACK_ROWS * NR];
    int64_t k0 = (int64_t)piece * PACK_ROWS;
    int64_t n0 = pn * NR, nc = min64(NR, j->rows - n0), kc = min64(PACK_ROWS, j->k - k0);
    uint32_t *d = j->dst + pn * j->kstride * NR;
    if (k0 == 0 && j->kstride > j->kpairs)
        memset(d + j->kpairs * NR, 0, (size_t)((j->kstride - j->kpairs) * NR) * sizeof *d);
    if (b->pack_pairs != NULL) {
        b->pack_pairs(b->pack_arg, k0, kc, n0, nc, d + k0 / 2 * NR);
        return;
    }
    if (b->pack == NULL && !b->trans) {
        rows_to_pairs(b->p + k0 * b->ld + n0, b->ld, kc, nc, d + k0 / 2 * NR);
        return;
    }
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

#define NATIVE __attribute__((target("avx512f,avx512vl,avx512bf16")))

/* The part of the epilogue a tile applies in registers (gemm_bf16_amx.h). */
typedef kn_bf16_tile_ep tile_ep;

/* Column jc of a tile, the last of a panel of 17 (a 7x7 map's 49 = 32 + 17), its sums for the
 * tile's rows in `col`: the same epilogue as the vector part of tile_native, in the same order. */
NATIVE static inline __attribute__((always_inline)) void column_store(int rows, __m256 col, int jc,
                                                                      float *c, int64_t ldc,
                                                                      bool accumulate,
                                                                      const tile_ep *ep) {
    float v[MR];
    _mm256_storeu_ps(v, col);
    for (int r = 0; r < rows; r++) {
        float x = v[r], *cr = c + r * ldc + jc;
        if (accumulate)
            x += *cr;
        if (ep != NULL) {
            x += ep->bias_row != NULL   ? ep->bias_row[r]
                 : ep->bias_col != NULL ? ep->bias_col[jc]
                                        : 0.0f;
            if (ep->res != NULL)
                x += ep->res[r * ep->ldr + jc];
            if (ep->clamp) {
                x = x > ep->lo ? x : ep->lo; /* max_ps, min_ps */
                x = x < ep->hi ? x : ep->hi;
            }
        }
        *cr = x;
    }
}

/* One tile of `rows` rows over kcp pairs: `nv` vectors of 16 columns, the first two from panel
 * b, a third from the next panel b2; with `extra`, one more column (the last of a panel of 17:
 * b2's when nv is 3, else b's) by 8-row dot products, A's pairs against that column's pair
 * broadcast, an eighth of a vector's work. So a panel of 32 takes nv 2, one of 17 nv 1 + extra,
 * one of at most 16 nv 1, and 49 columns (two panels) nv 3 + extra. rows, nv and extra are
 * constants in each caller, so acc stays in registers; ep (the last K slice only) finishes the
 * tile; prefetch: PF_A, A_PREFETCH_BYTES ahead of A (run_tasks' streaming order), PF_B,
 * B_PREFETCH_WORDS ahead of panel b (B packed at load, read from L2 or further by a panel's
 * first strip). */
NATIVE static inline __attribute__((always_inline)) void
tile_native(int rows, int nv, bool extra, int64_t kcp, const uint32_t *a, const uint32_t *b,
            const uint32_t *b2, float *c, int64_t ldc, int nr, bool accumulate, const tile_ep *ep,
            int prefetch) {
    __m512 acc[MR][3];
    __m256 col = _mm256_setzero_ps();
    const uint32_t *bv[3] = {b, b + 16, b2}, *bx = (nv == 3 ? b2 : b) + 16;
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < kcp; kp++) {
        if ((prefetch & PF_A) && kp % 2 == 0) /* a line of A holds two pairs */
            _mm_prefetch((const char *)(a + kp * MR) + A_PREFETCH_BYTES, _MM_HINT_T0);
        if (prefetch & PF_B) { /* a pair row of the panel is two lines */
            _mm_prefetch((const char *)(b + kp * NR + B_PREFETCH_WORDS), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + kp * NR + B_PREFETCH_WORDS + 16), _MM_HINT_T0);
        }
        __m512bh bk[3];
        for (int v = 0; v < nv; v++)
            bk[v] = (__m512bh)_mm512_loadu_si512(bv[v] + kp * NR);
        for (int r = 0; r < rows; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[kp * MR + r]);
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bk[v]);
        }
        if (extra)
            col =
                _mm256_dpbf16_ps(col, (__m256bh)_mm256_loadu_si256((const __m256i *)(a + kp * MR)),
                                 (__m256bh)_mm256_set1_epi32((int)bx[kp * NR]));
    }
    __mmask16 m[3];
    __m512 bc[3];
    for (int v = 0; v < nv; v++) {
        int left = nr - 16 * v;
        m[v] = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        bc[v] = ep != NULL && ep->bias_col != NULL
                    ? _mm512_maskz_loadu_ps(m[v], ep->bias_col + 16 * v)
                    : _mm512_setzero_ps();
    }
    for (int r = 0; r < rows; r++) {
        float *cr = c + r * ldc;
        for (int v = 0; v < nv; v++) {
            __m512 x = acc[r][v];
            if (accumulate)
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m[v], cr + 16 * v));
            if (ep != NULL) {
                x = _mm512_add_ps(x,
                                  ep->bias_row != NULL ? _mm512_set1_ps(ep->bias_row[r]) : bc[v]);
                if (ep->res != NULL)
                    x = _mm512_add_ps(x,
                                      _mm512_maskz_loadu_ps(m[v], ep->res + r * ep->ldr + 16 * v));
                if (ep->clamp)
                    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(ep->lo)),
                                      _mm512_set1_ps(ep->hi));
            }
            _mm512_mask_storeu_ps(cr + 16 * v, m[v], x);
        }
    }
    if (extra)
        column_store(rows, col, 16 * nv, c, ldc, accumulate, ep);
}

/* The tile's kernel for its rows and columns (tile_native): nr columns from panel b, or with
 * `wide`, 49 from b and b2. */
NATIVE static inline __attribute__((always_inline)) void
ukr_rows(int64_t kcp, const uint32_t *a, const uint32_t *b, const uint32_t *b2, float *c,
         int64_t ldc, int mr, int nr, bool accumulate, const tile_ep *ep, int prefetch, bool wide) {
    int cols = wide ? 49 : nr > 17 ? 32 : nr == 17 ? 17 : 16;
    switch (mr * 64 + cols) {
#define TILE(R, C, NV, X)                                                                          \
    case R * 64 + C:                                                                               \
        tile_native(R, NV, X, kcp, a, b, b2, c, ldc, nr, accumulate, ep, prefetch);                \
        break;
#define EACH_ROW_COUNT(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)
#define PANEL(R) TILE(R, 32, 2, false) TILE(R, 17, 1, true) TILE(R, 16, 1, false)
#define WIDE(R) TILE(R, 49, wide ? 3 : 2, wide)
        EACH_ROW_COUNT(PANEL)
        EACH_ROW_COUNT(WIDE)
#undef WIDE
#undef PANEL
#undef EACH_ROW_COUNT
#undef TILE
    default:
        break;
    }
}

NATIVE static void ukr_native(int64_t kcp, const uint32_t *a, const uint32_t *b, float *c,
                              int64_t ldc, int mr, int nr, bool accumulate, const tile_ep *ep) {
    ukr_rows(kcp, a, b, NULL, c, ldc, mr, nr, accumulate, ep, 0, false);
}

/* ukr_native with B fetched ahead (B packed once at load). */
NATIVE static void ukr_native_b_ahead(int64_t kcp, const uint32_t *a, const uint32_t *b, float *c,
                                      int64_t ldc, int mr, int nr, bool accumulate,
                                      const tile_ep *ep) {
    ukr_rows(kcp, a, b, NULL, c, ldc, mr, nr, accumulate, ep, PF_B, false);
}

/* run_tasks' streaming order: A prefetched ahead; with b2, 49 columns from panels b and b2. */
NATIVE static void ukr_native_stream(int64_t kcp, const uint32_t *a, const uint32_t *b,
                                     const uint32_t *b2, float *c, int64_t ldc, int mr, int nr,
                                     bool accumulate, const tile_ep *ep) {
    if (b2 != NULL)
        ukr_rows(kcp, a, b, b2, c, ldc, mr, 49, accumulate, ep, PF_A, true);
    else
        ukr_rows(kcp, a, b, NULL, c, ldc, mr, nr, accumulate, ep, PF_A, false);
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
    int64_t kstride_a, kstride_b; /* pairs per A strip, per B panel */
    const uint32_t *a, *b;
    float *c;
    int64_t ldc;
    const kn_epilogue *ep; /* NULL when there is nothing to apply */
    bool native;
    bool b_ahead;   /* B packed at load: the native kernel fetches it ahead */
    int64_t tm, tn; /* tasks along rows (strips; pairs of AMX strips) and columns (panels) */
    /* B packed by the tasks (pack_b_piece), when not packed at load: a shared item a panel */
    const pack_job *b_pack;
    kn_shared_item *b_items;
} gemm_job;

/* Panels [p0, p1) of B packed, where the tasks pack them. */
static void need_panels(const gemm_job *j, int64_t p0, int64_t p1) {
    if (j->b_pack == NULL)
        return;
    int32_t pieces = pack_b_chunks(j->b_pack);
    for (int64_t pn = p0; pn < p1; pn++)
        kn_shared_item_fill(&j->b_items[pn], pn, pieces, pack_b_piece, (void *)j->b_pack);
}

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

/* The tile at (strip s, panel pn) over pairs [kb, kb + kcp), A prefetched ahead; with wide, the
 * last two panels, 49 columns (a 7x7 map), in one tile. */
static void stream_tile(const gemm_job *j, int64_t s, int64_t pn, int64_t kb, int64_t kcp,
                        bool wide) {
    bool last = kb + kcp >= j->kpairs;
    int64_t i0 = s * MR, j0 = pn * NR;
    int mr = (int)min64(MR, j->m - i0), nr = wide ? 49 : (int)min64(NR, j->n - j0);
    float *ct = j->c + i0 * j->ldc + j0;
    const uint32_t *bp = j->b + (pn * j->kstride_b + kb) * NR;
    tile_ep te;
    const tile_ep *tep = last && j->ep != NULL ? make_tile_ep(j, i0, j0, &te) : NULL;
    ukr_native_stream(kcp, j->a + (s * j->kstride_a + kb) * MR, bp,
                      wide ? bp + j->kstride_b * NR : NULL, ct, j->ldc, mr, nr, kb > 0, tep);
    if (tep != NULL)
        tile_epilogue(j, tep, ct, i0, j0, mr, nr);
}

static void run_tasks(void *arg, int64_t begin, int64_t end) {
    const gemm_job *j = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t ti = t / j->tn, tj = t % j->tn;
        int64_t s0 = ti * j->strips / j->tm, s1 = (ti + 1) * j->strips / j->tm;
        int64_t p0 = tj * j->panels / j->tn, p1 = (tj + 1) * j->panels / j->tn;
        need_panels(j, p0, p1);
        /* A few panels (7x7 maps: 49 columns are two) whose whole K stays in L2: each strip of
         * A once, its K slices in order, every panel against each slice while it is in L1, so
         * A (the weights, cold in cache) streams through once, front to back, prefetched ahead.
         * The same sums as the order below, in the same order. */
        if (j->native && p1 - p0 <= STRIPS_OUTER_MAX_PANELS &&
            (p1 - p0) * j->kstride_b * NR * (int64_t)sizeof *j->b <= STREAM_B_MAX_BYTES) {
            for (int64_t s = s0; s < s1; s++)
                for (int64_t kb = 0; kb < j->kpairs; kb += KCP)
                    for (int64_t pn = p0; pn < p1; pn++) {
                        bool wide = pn + 2 == j->panels && p1 == j->panels && j->n - pn * NR == 49;
                        stream_tile(j, s, pn, kb, min64(KCP, j->kpairs - kb), wide);
                        pn += wide;
                    }
            continue;
        }
        /* Split by rows only over a few panels (choose_grid; B's slice of them stays in cache):
         * each strip of A once, against every panel (7x7 maps: 49 columns are two panels);
         * otherwise each panel once, against every strip. */
        bool strips_outer = j->tn == 1 && j->tm > 1 && j->panels <= STRIPS_OUTER_MAX_PANELS;
        int64_t n_outer = strips_outer ? s1 - s0 : p1 - p0,
                n_inner = strips_outer ? p1 - p0 : s1 - s0;
        for (int64_t kb = 0; kb < j->kpairs; kb += KCP) {
            int64_t kcp = min64(KCP, j->kpairs - kb);
            bool last = kb + kcp >= j->kpairs;
            for (int64_t o = 0; o < n_outer; o++) {
                for (int64_t in = 0; in < n_inner; in++) {
                    int64_t pn = p0 + (strips_outer ? in : o), s = s0 + (strips_outer ? o : in);
                    const uint32_t *bp = j->b + (pn * j->kstride_b + kb) * NR;
                    int64_t j0 = pn * NR;
                    int nr = (int)min64(NR, j->n - j0);
                    const uint32_t *ap = j->a + (s * j->kstride_a + kb) * MR;
                    int64_t i0 = s * MR;
                    int mr = (int)min64(MR, j->m - i0);
                    float *ct = j->c + i0 * j->ldc + j0;
                    tile_ep te;
                    const tile_ep *tep = NULL;
                    if (last && j->ep != NULL && j->native)
                        tep = make_tile_ep(j, i0, j0, &te);
                    if (j->native)
                        (j->b_ahead ? ukr_native_b_ahead : ukr_native)(kcp, ap, bp, ct, j->ldc, mr,
                                                                       nr, kb > 0, tep);
                    else
                        ukr_portable(kcp, ap, bp, ct, j->ldc, mr, nr, kb > 0);
                    if (last && j->ep != NULL)
                        tile_epilogue(j, tep, ct, i0, j0, mr, nr);
                }
            }
        }
    }
}

/* One block of up to 32 x 32 at (i0, j0) over blocks [kb, kb + kcb) of K. A block that runs
 * past C's rows or columns goes through `tmp` (the tiles always store 16 x 16). */
static void amx_block(const gemm_job *j, int64_t i0, int64_t j0, int64_t kb, int64_t kcb, bool last,
                      float *tmp) {
    int mr = (int)min64(2 * AMX_MR, j->m - i0), nr = (int)min64(NR, j->n - j0);
    int rt = mr > AMX_MR ? 2 : 1, ct = nr > 16 ? 2 : 1;
    const uint32_t *a0 = j->a + i0 * j->kstride_a + kb * KT * AMX_MR;
    const uint32_t *a1 = a0 + AMX_MR * j->kstride_a;
    const uint32_t *b = j->b + (j0 / NR * j->kstride_b + kb * KT) * NR;
    float *c = j->c + i0 * j->ldc + j0;
    bool whole = mr == rt * AMX_MR && nr == ct * 16;
    if (whole) {
        kn_bf16_amx_block(rt, ct, a0, a1, b, kcb, c, j->ldc, kb > 0);
    } else {
        if (kb > 0)
            for (int r = 0; r < mr; r++)
                memcpy(tmp + r * NR, c + r * j->ldc, (size_t)nr * sizeof(float));
        kn_bf16_amx_block(rt, ct, a0, a1, b, kcb, tmp, NR, kb > 0);
        for (int r = 0; r < mr; r++)
            memcpy(c + r * j->ldc, tmp + r * NR, (size_t)nr * sizeof(float));
    }
    if (last && j->ep != NULL) {
        tile_ep te;
        kn_bf16_amx_epilogue(c, j->ldc, mr, nr, make_tile_ep(j, i0, j0, &te));
        tile_epilogue(j, &te, c, i0, j0, mr, nr);
    }
}

/* The AMX path's tasks: j->strips counts blocks of 2 * AMX_MR rows here. */
static void run_amx_tasks(void *arg, int64_t begin, int64_t end) {
    const gemm_job *j = arg;
    int64_t kblocks = j->kstride_a / KT;
    float tmp[2 * AMX_MR * NR];
    kn_cpu_amx_begin();
    for (int64_t t = begin; t < end; t++) {
        int64_t ti = t / j->tn, tj = t % j->tn;
        int64_t s0 = ti * j->strips / j->tm, s1 = (ti + 1) * j->strips / j->tm;
        int64_t p0 = tj * j->panels / j->tn, p1 = (tj + 1) * j->panels / j->tn;
        need_panels(j, p0, p1);
        for (int64_t kb = 0; kb < kblocks; kb += AMX_KCB) {
            int64_t kcb = min64(AMX_KCB, kblocks - kb);
            for (int64_t pn = p0; pn < p1; pn++)
                for (int64_t s = s0; s < s1; s++)
                    amx_block(j, s * 2 * AMX_MR, pn * NR, kb, kcb, kb + kcb >= kblocks, tmp);
        }
    }
    kn_cpu_amx_end();
}

/* A few tasks per thread, columns split first (as the float32 GEMM does). */
static void choose_grid(gemm_job *j, int threads, bool amx) {
    j->tm = j->tn = 1;
    int64_t work = j->m * j->n * j->k;
    int64_t min_task = amx ? AMX_MIN_TASK_WORK : MIN_TASK_WORK;
    if (threads <= 1 || work < (amx ? AMX_PARALLEL_MIN_WORK : PARALLEL_MIN_WORK))
        return;
    int64_t target = (int64_t)threads * TASKS_PER_THREAD;
    if (target > work / min_task)
        target = work / min_task > threads ? work / min_task : threads;
    /* Few panels (7x7 maps), many strips: rows only, so A crosses the cache once and every
     * task takes all of B's panels (run_tasks' strips-outer order), as the float32 GEMM does. */
    if (!amx && j->panels <= STRIPS_OUTER_MAX_PANELS && j->strips >= (int64_t)threads * 2) {
        j->tm = min64(j->strips, target);
        return;
    }
    if (j->panels >= target) {
        j->tn = target;
        return;
    }
    j->tn = j->panels;
    j->tm = min64(j->strips, (target + j->tn - 1) / j->tn);
}

/* Whether this product takes the AMX kernel: A packed for it always does (no other kernel
 * reads that layout); otherwise when AMX is on, there are rows enough, and a packed B has the
 * padded K it needs. */
static bool use_amx(int64_t m, const kn_bf16_operand *a, const kn_bf16_operand *b) {
    if (a->packed != NULL)
        return a->packed->amx;
    if (m < AMX_MIN_M)
        return false;
    if (b->packed != NULL)
        return b->packed->amx;
    return kn_bf16_amx();
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
    bool amx = use_amx(m, a, b);
    int64_t kpairs = (k + 1) / 2, kstride = kstride_for(kpairs, amx);
    int mr = amx ? AMX_MR : MR;
    gemm_job j = {.m = m,
                  .n = n,
                  .k = k,
                  .kpairs = kpairs,
                  .strips = (m + mr - 1) / mr,
                  .panels = (n + NR - 1) / NR,
                  .kstride_a = kstride,
                  .kstride_b = b->packed != NULL ? b->packed->kstride : kstride,
                  .c = c,
                  .ldc = ldc,
                  .ep = epi,
                  .native = amx || kn_bf16_native(),
                  .b_ahead = b->packed != NULL};
    KN_ASSERT(a->packed == NULL || (a->packed->rows == m && a->packed->k == k));
    KN_ASSERT(b->packed == NULL || (b->packed->rows == n && b->packed->k == k));
    KN_ASSERT(!amx || j.kstride_b == kstride);
    size_t a_words = a->packed != NULL ? 0 : (size_t)(j.strips * mr * kstride);
    size_t b_words = b->packed != NULL ? 0 : (size_t)(j.panels * NR * kstride);
    size_t a_bytes = (a_words * sizeof(uint32_t) + 63) / 64 * 64;
    size_t b_bytes = (b_words * sizeof(uint32_t) + 63) / 64 * 64;
    size_t items = b->packed != NULL ? 0 : (size_t)j.panels;
    size_t bytes = a_bytes + b_bytes + items * sizeof(kn_shared_item);
    uint8_t *own = NULL, *buf = bytes > 0 ? kn_threadpool_scratch(pool, bytes) : NULL;
    if (bytes > 0 && buf == NULL) {
        buf = own = kn_aligned_alloc(bytes, 64);
        if (own == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for bf16 GEMM packing");
    }
    if (a->packed != NULL) {
        j.a = a->packed->data;
    } else {
        pack_job pj = {.op = a,
                       .rows = m,
                       .k = k,
                       .kpairs = kpairs,
                       .kstride = kstride,
                       .dst = (uint32_t *)buf};
        if (amx)
            kn_parallel_for(pool, j.strips * pack_a_amx_chunks(&pj), 2, pack_a_amx_range, &pj);
        else
            kn_parallel_for(pool, j.strips, 4, pack_a_range, &pj);
        j.a = pj.dst;
    }
    pack_job bj = {.op = b,
                   .rows = n,
                   .k = k,
                   .kpairs = kpairs,
                   .kstride = kstride,
                   .dst = (uint32_t *)(buf + a_bytes)};
    if (b->packed != NULL) {
        j.b = b->packed->data;
    } else {
        j.b = bj.dst;
        j.b_pack = &bj;
        j.b_items = (kn_shared_item *)(buf + a_bytes + b_bytes);
        memset(j.b_items, 0, items * sizeof(kn_shared_item));
    }
    if (amx)
        j.strips = (m + 2 * AMX_MR - 1) / (2 * AMX_MR);
    choose_grid(&j, kn_threadpool_size(pool), amx);
    kn_parallel_for(j.tm * j.tn > 1 ? pool : NULL, j.tm * j.tn, 1, amx ? run_amx_tasks : run_tasks,
                    &j);
    kn_free(own);
    return KILN_OK;
}
