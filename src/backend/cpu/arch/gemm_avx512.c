/* AVX-512 micro-kernels: 12 x 32 tile held in 24 zmm accumulators; B rows are two vector loads,
 * A elements are broadcast. Edge tiles use masked loads and stores, so no temporary tile is
 * needed, and the epilogue's bias, residual and clamp are applied before the only store.
 * Variants: 6-row and 16-column edge tiles, a narrow kernel for the last <= 4 columns of a
 * panel, one that takes those columns with the tile before them, a one-row kernel, and one that
 * reads an unpacked B in place. */
#include "backend/cpu/math/gemm_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/arch/act_avx512.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define MR 12
#define NR 32
#define PREFETCH_A 1024 /* floats */
#define PREFETCH_MIN_K 64
#define PREFETCH_B 64 /* floats: two tiles along an unpacked row of B */
/* Floats ahead of a packed B panel's row that ukr_b_ahead fetches (64 rows of k, 8 KB; past a
 * panel's last rows, the next panel's first). BERT-base at 1 thread on the 2-core box: 2 KB
 * ahead 103-107 ms, 4 KB 100-104, 8 KB 94-102, 16 and 32 KB as 8. */
#define PREFETCH_B_PACKED 2048
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* The epilogue's fields, read once into locals before the stores: every store may alias *ep for
 * the compiler, which otherwise reloaded and tested each field again for every row (a quarter
 * of a 24-deep 1x1 conv's time went to the epilogue). */
typedef struct ep_fields {
    bool clamp;
    int act;
    const float *bias_row, *res;
    int64_t ldr, pf_c, pf_r;
} ep_fields;

__attribute__((always_inline)) static inline ep_fields ep_read(const kn_ukr_ep *ep) {
    if (ep == NULL)
        return (ep_fields){.act = KN_UKR_ACT_NONE};
    return (ep_fields){.clamp = ep->clamp,
                       .act = ep->act,
                       .bias_row = ep->bias_row,
                       .res = ep->res,
                       .ldr = ep->ldr,
                       .pf_c = ep->pf_c,
                       .pf_r = ep->res != NULL ? ep->pf_r : 0};
}

/* The clamp (Relu, Clip), then sigmoid or SiLU, on a tile row's one or two vectors (one branch
 * on the activation for both: a branch a vector made the 16 -> 96 SiLU conv 8 % slower). */
__attribute__((target("avx512f"), always_inline)) static inline void
ep_act(const ep_fields *e, __m512 *v0, __m512 *v1, const int TWO, __m512 lo, __m512 hi) {
    if (e->clamp) {
        *v0 = _mm512_min_ps(_mm512_max_ps(*v0, lo), hi);
        *v1 = _mm512_min_ps(_mm512_max_ps(*v1, lo), hi);
    }
    if (e->act == KN_UKR_ACT_SWISH) {
        *v0 = kn_silu512(*v0);
        if (TWO)
            *v1 = kn_silu512(*v1);
    } else if (e->act == KN_UKR_ACT_SIGMOID) {
        *v0 = kn_sigmoid512(*v0);
        if (TWO)
            *v1 = kn_sigmoid512(*v1);
    }
}

/* One body, specialised by inlining for the tile shapes below: ROWS_N rows (12 or 6) and one or
 * two 16-wide column vectors. Edge tiles that fit the smaller shapes skip the padded work. */
#define DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
#define FMA(i)                                                                                     \
    if (i < ROWS_N) {                                                                              \
        __m512 ai = _mm512_set1_ps(a[i]);                                                          \
        c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0);                                                \
        if (TWO)                                                                                   \
            c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1);                                            \
    }
#define STORE(i)                                                                                   \
    if (i < ROWS_N && i < mr) {                                                                    \
        float *ci = c + (int64_t)i * ldc;                                                          \
        __m512 v0 = c##i##0, v1 = c##i##1;                                                         \
        if (scaled) {                                                                              \
            v0 = _mm512_mul_ps(va, v0);                                                            \
            v1 = _mm512_mul_ps(va, v1);                                                            \
        }                                                                                          \
        if (beta != 0.0f) {                                                                        \
            v0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, ci), v0);                           \
            if (TWO)                                                                               \
                v1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, ci + 16), v1);                  \
        }                                                                                          \
        if (e.bias_row != NULL) {                                                                  \
            __m512 br = _mm512_set1_ps(e.bias_row[i]);                                             \
            v0 = _mm512_add_ps(v0, br);                                                            \
            v1 = _mm512_add_ps(v1, br);                                                            \
        }                                                                                          \
        if (bias_col) {                                                                            \
            v0 = _mm512_add_ps(v0, bc0);                                                           \
            v1 = _mm512_add_ps(v1, bc1);                                                           \
        }                                                                                          \
        if (e.res != NULL) {                                                                       \
            const float *ri = e.res + (int64_t)i * e.ldr;                                          \
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ri));                                 \
            if (TWO)                                                                               \
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ri + 16));                        \
        }                                                                                          \
        if (e.pf_r != 0) {                                                                         \
            const float *ri = e.res + (int64_t)i * e.ldr + e.pf_r;                                 \
            _mm_prefetch((const char *)ri, _MM_HINT_T0);                                           \
            if (TWO)                                                                               \
                _mm_prefetch((const char *)(ri + 16), _MM_HINT_T0);                                \
        }                                                                                          \
        if (e.pf_c != 0) {                                                                         \
            _mm_prefetch((const char *)(ci + e.pf_c), _MM_HINT_T0);                                \
            if (TWO)                                                                               \
                _mm_prefetch((const char *)(ci + e.pf_c + 16), _MM_HINT_T0);                       \
        }                                                                                          \
        ep_act(&e, &v0, &v1, TWO, vlo, vhi);                                                       \
        _mm512_mask_storeu_ps(ci, m0, v0);                                                         \
        if (TWO)                                                                                   \
            _mm512_mask_storeu_ps(ci + 16, m1, v1);                                                \
    }

__attribute__((target("avx512f"), always_inline)) static inline void
body(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, float alpha,
     float beta, int mr, int nr, const kn_ukr_ep *ep, const int ROWS_N, const int TWO,
     const int DIRECT, const int B_AHEAD) {
    __mmask16 m0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1);
    ROWS(DECL)
    /* Packed panels are zero-padded; rows of an unpacked B (DIRECT) are read only where they
     * exist: masked loads for a tile narrower than NR (DIRECT 1), plain ones for a full tile
     * (DIRECT 2). An unpacked B is up to 256 row streams a row stride apart (a 1x1 conv's input
     * channels), more than the hardware prefetcher follows: each row's lines two tiles ahead are
     * fetched here (MobileNetV2's 144 -> 24 1x1 at 56x56 0.248 -> 0.191 ms). */
#define KSTEP(PF)                                                                                  \
    {                                                                                              \
        __m512 b0 = DIRECT == 1 ? _mm512_maskz_loadu_ps(m0, b) : _mm512_loadu_ps(b);               \
        __m512 b1 =                                                                                \
            TWO ? (DIRECT == 1 ? _mm512_maskz_loadu_ps(m1, b + 16) : _mm512_loadu_ps(b + 16))      \
                : b0;                                                                              \
        if (PF)                                                                                    \
            _mm_prefetch((const char *)(a + PREFETCH_A), _MM_HINT_T0);                             \
        if (PF && B_AHEAD) {                                                                       \
            _mm_prefetch((const char *)(b + PREFETCH_B_PACKED), _MM_HINT_T0);                      \
            _mm_prefetch((const char *)(b + PREFETCH_B_PACKED + 16), _MM_HINT_T0);                 \
        }                                                                                          \
        if (DIRECT) {                                                                              \
            _mm_prefetch((const char *)(b + PREFETCH_B), _MM_HINT_T0);                             \
            _mm_prefetch((const char *)(b + PREFETCH_B + 16), _MM_HINT_T0);                        \
        }                                                                                          \
        ROWS(FMA)                                                                                  \
        a += MR;                                                                                   \
        b += DIRECT ? ldb : NR;                                                                    \
    }
    /* A deep panel of packed A streams from L2 or L3 (ResNet-50's 2048-deep 1x1 convs) and is
     * fetched 4 KB ahead of its use; a short one (k = 16 at 112x112) is reused by every tile of
     * its row and stays in L1, where the prefetches only took load slots (5-7% slower). */
    if (kc >= PREFETCH_MIN_K)
        for (int64_t k = 0; k < kc; k++)
            KSTEP(1)
    else
        for (int64_t k = 0; k < kc; k++)
            KSTEP(0)
#undef KSTEP
    const ep_fields e = ep_read(ep);
    const bool scaled = alpha != 1.0f, bias_col = ep != NULL && ep->bias_col != NULL;
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    __m512 bc0 = _mm512_setzero_ps(), bc1 = _mm512_setzero_ps();
    __m512 vlo = _mm512_set1_ps(e.clamp ? ep->lo : 0.0f);
    __m512 vhi = _mm512_set1_ps(e.clamp ? ep->hi : 0.0f);
    if (bias_col) {
        bc0 = _mm512_maskz_loadu_ps(m0, ep->bias_col);
        if (TWO)
            bc1 = _mm512_maskz_loadu_ps(m1, ep->bias_col + 16);
    }
    ROWS(STORE)
}

#define VARIANT(name, rows, two, b_ahead)                                                          \
    __attribute__((target("avx512f"))) static void name(                                           \
        int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha,            \
        float beta, int mr, int nr, const kn_ukr_ep *ep) {                                         \
        body(kc, a, b, NR, c, ldc, alpha, beta, mr, nr, ep, rows, two, 0, b_ahead);                \
    }

VARIANT(ukr, 12, 1, 0)
/* B packed once at load (a MatMul's constant weights) comes from L2 or further on the first row
 * tile of each panel: fetched 8 KB ahead (BERT-base 6-9 % faster at 1 and 2 threads on the 2-core
 * box; a conv's B, packed a call before use and in L2, gains nothing from it). */
VARIANT(ukr_b_ahead, 12, 1, 1)
VARIANT(ukr_half_m, 6, 1, 0)
VARIANT(ukr_half_n, 12, 0, 0)
VARIANT(ukr_half_mn, 6, 0, 0)
/* 8- and 4-row edges (M = 32, 64, 128, ... end in them) would otherwise run as 12 and 6 rows. */
VARIANT(ukr_rows8, 8, 1, 0)
VARIANT(ukr_rows8_half_n, 8, 0, 0)
VARIANT(ukr_rows4, 4, 1, 0)
VARIANT(ukr_rows4_half_n, 4, 0, 0)

/* B read in place from a row-major matrix (row stride ldb), for small k: no packing pass. Full
 * tiles (32 columns) load B without masks: with them the 12-row loop reloaded its mask
 * registers from the stack every step (2-core Xeon, one thread, eight alternating runs, median
 * GMAC/s masked -> plain: 64 x 3136 x 256 64 -> 73, 64 x 3136 x 64 75 -> 85, 64 x 96 x 64 74 ->
 * 89). */
#define DIRECT_ROWS(D)                                                                             \
    if (mr <= 4)                                                                                   \
        body(kc, a, b, ldb, c, ldc, alpha, beta, mr, nr, ep, 4, 1, D, 0);                          \
    else if (mr <= 6)                                                                              \
        body(kc, a, b, ldb, c, ldc, alpha, beta, mr, nr, ep, 6, 1, D, 0);                          \
    else if (mr <= 8)                                                                              \
        body(kc, a, b, ldb, c, ldc, alpha, beta, mr, nr, ep, 8, 1, D, 0);                          \
    else                                                                                           \
        body(kc, a, b, ldb, c, ldc, alpha, beta, mr, nr, ep, 12, 1, D, 0);
__attribute__((target("avx512f"))) static void ukr_direct(int64_t kc, const float *a,
                                                          const float *b, int64_t ldb, float *c,
                                                          int64_t ldc, float alpha, float beta,
                                                          int mr, int nr, const kn_ukr_ep *ep) {
    if (nr == NR) {
        DIRECT_ROWS(2)
    } else {
        DIRECT_ROWS(1)
    }
}
#undef DIRECT_ROWS

/* B read in place through per-k row offsets (kn_gemm_gather: strided convs over prepared phase
 * planes, no im2col copy). The two vectors of a tile may be apart in B and in C: one output
 * row of up to 32 columns, or two rows of up to 16. */
#define GDECL(i) __m512 g##i##0 = _mm512_setzero_ps(), g##i##1 = _mm512_setzero_ps();
#define GFMA(i)                                                                                    \
    if (i < ROWS_N) {                                                                              \
        __m512 ai = _mm512_set1_ps(a[i]);                                                          \
        g##i##0 = _mm512_fmadd_ps(ai, b0, g##i##0);                                                \
        g##i##1 = _mm512_fmadd_ps(ai, b1, g##i##1);                                                \
    }
#define GSTORE(i)                                                                                  \
    if (i < ROWS_N && i < mr) {                                                                    \
        float *ci = c + (int64_t)i * ldc;                                                          \
        __m512 v0 = g##i##0, v1 = g##i##1;                                                         \
        if (beta != 0.0f) {                                                                        \
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ci));                                 \
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ci + t->c1));                         \
        }                                                                                          \
        if (e.bias_row != NULL) {                                                                  \
            __m512 br = _mm512_set1_ps(e.bias_row[i]);                                             \
            v0 = _mm512_add_ps(v0, br);                                                            \
            v1 = _mm512_add_ps(v1, br);                                                            \
        }                                                                                          \
        if (e.res != NULL) {                                                                       \
            const float *ri = e.res + (int64_t)i * e.ldr;                                          \
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, ri));                                 \
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, ri + t->c1));                         \
        }                                                                                          \
        ep_act(&e, &v0, &v1, 1, vlo, vhi);                                                         \
        _mm512_mask_storeu_ps(ci, m0, v0);                                                         \
        _mm512_mask_storeu_ps(ci + t->c1, m1, v1);                                                 \
    }

__attribute__((target("avx512f"), always_inline)) static inline void
gather_body(int64_t kc, const float *a, const kn_gather_tile *t, float *c, int64_t ldc, float beta,
            int mr, const kn_ukr_ep *ep, const int ROWS_N, const int FULL) {
    __mmask16 m0 = t->n0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << t->n0) - 1);
    __mmask16 m1 = t->n1 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << t->n1) - 1);
    const float *b = t->b, *bb = t->b + t->b1;
    const int64_t *off = t->off;
    ROWS(GDECL)
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = FULL ? _mm512_loadu_ps(b + off[k]) : _mm512_maskz_loadu_ps(m0, b + off[k]);
        __m512 b1 = FULL ? _mm512_loadu_ps(bb + off[k]) : _mm512_maskz_loadu_ps(m1, bb + off[k]);
        ROWS(GFMA)
        a += MR;
    }
    const ep_fields e = ep_read(ep);
    __m512 vlo = _mm512_set1_ps(e.clamp ? ep->lo : 0.0f);
    __m512 vhi = _mm512_set1_ps(e.clamp ? ep->hi : 0.0f);
    ROWS(GSTORE)
}

/* Full tiles (both vectors 16 columns) load B without masks, as in ukr_direct: strided convs
 * over prepared phase planes, the stems and the detector's stride-2 convs, 3-10 % faster each
 * (2-core Xeon, alternating runs, per-layer minimums: the detector's 16 -> 32 at 320 0.82 ->
 * 0.77 ms, MobileNetV2's and EfficientNet-B0's stems 0.180 -> 0.164 and 0.269 -> 0.242 at two
 * threads). */
#define GATHER_ROWS(FULL)                                                                          \
    if (mr <= 4)                                                                                   \
        gather_body(kc, a, t, c, ldc, beta, mr, ep, 4, FULL);                                      \
    else if (mr <= 8)                                                                              \
        gather_body(kc, a, t, c, ldc, beta, mr, ep, 8, FULL);                                      \
    else                                                                                           \
        gather_body(kc, a, t, c, ldc, beta, mr, ep, 12, FULL);
__attribute__((target("avx512f"))) static void ukr_gather(int64_t kc, const float *a,
                                                          const kn_gather_tile *t, float *c,
                                                          int64_t ldc, float beta, int mr,
                                                          const kn_ukr_ep *ep) {
    if (t->n0 >= 16 && t->n1 >= 16) {
        GATHER_ROWS(1)
    } else {
        GATHER_ROWS(0)
    }
}
#undef GATHER_ROWS

/* One row (batch-1 fully connected layers): the 12-row kernel would do 12x the multiplies.
 * Four k phases keep eight independent accumulators in flight. */
__attribute__((target("avx512f"))) static void ukr_m1(int64_t kc, const float *a, const float *b,
                                                      float *c, int64_t ldc, float alpha,
                                                      float beta, int mr, int nr,
                                                      const kn_ukr_ep *ep) {
    (void)ldc;
    (void)mr;
    __m512 acc[4][2];
    for (int p = 0; p < 4; p++)
        acc[p][0] = acc[p][1] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 3 < kc; k += 4)
        for (int p = 0; p < 4; p++) {
            __m512 av = _mm512_set1_ps(a[(k + p) * MR]);
            acc[p][0] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (k + p) * NR), acc[p][0]);
            acc[p][1] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + (k + p) * NR + 16), acc[p][1]);
        }
    for (; k < kc; k++) {
        __m512 av = _mm512_set1_ps(a[k * MR]);
        acc[0][0] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + k * NR), acc[0][0]);
        acc[0][1] = _mm512_fmadd_ps(av, _mm512_loadu_ps(b + k * NR + 16), acc[0][1]);
    }
    __mmask16 m[2] = {nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1),
                      nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1)};
    for (int h = 0; h < 2; h++) {
        __m512 v =
            _mm512_add_ps(_mm512_add_ps(acc[0][h], acc[1][h]), _mm512_add_ps(acc[2][h], acc[3][h]));
        v = _mm512_mul_ps(_mm512_set1_ps(alpha), v);
        if (beta != 0.0f)
            v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(m[h], c + 16 * h), v);
        if (ep != NULL) {
            if (ep->bias_row != NULL)
                v = _mm512_add_ps(v, _mm512_set1_ps(ep->bias_row[0]));
            if (ep->bias_col != NULL)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[h], ep->bias_col + 16 * h));
            if (ep->res != NULL)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[h], ep->res + 16 * h));
            if (ep->clamp)
                v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(ep->lo)), _mm512_set1_ps(ep->hi));
        }
        _mm512_mask_storeu_ps(c + 16 * h, m[h], v);
    }
}

#define NARROW 4

/* Up to NARROW columns: one accumulator per column holds the tile's 12 rows (a[k*MR..] is one
 * masked load); several sets over consecutive k hide the FMA latency, four for one or two
 * columns (with two sets a single column waited on every multiply-add: a 960 -> 320 1x1 conv at
 * 7x7, 49 = 32 + 16 + 1 columns, spent a tenth of its time on its last column), two for three
 * and four. The few results go through a small buffer to the scalar epilogue. */
__attribute__((target("avx512f"), always_inline)) static inline void
narrow_body(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha,
            float beta, int mr, const int nr, const kn_ukr_ep *ep) {
    const __mmask16 rows = (__mmask16)((1u << MR) - 1);
    const int SETS = nr <= 2 ? 4 : 2;
    __m512 acc[NARROW][4], e[NARROW];
    _Pragma("GCC unroll 4") for (int j = 0; j < NARROW; j++)
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) acc[j][q] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + SETS <= kc; k += SETS) {
        _Pragma("GCC unroll 4") for (int q = 0; q < SETS; q++) {
            __m512 av = _mm512_maskz_loadu_ps(rows, a + (k + q) * MR);
            _Pragma("GCC unroll 4") for (int j = 0; j < NARROW; j++) if (j < nr) acc[j][q] =
                _mm512_fmadd_ps(av, _mm512_set1_ps(b[(k + q) * NR + j]), acc[j][q]);
        }
    }
    for (; k < kc; k++) {
        __m512 av = _mm512_maskz_loadu_ps(rows, a + k * MR);
        _Pragma("GCC unroll 4") for (int j = 0; j < NARROW; j++) if (j < nr) acc[j][0] =
            _mm512_fmadd_ps(av, _mm512_set1_ps(b[k * NR + j]), acc[j][0]);
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < NARROW; j++) e[j] =
        _mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]), _mm512_add_ps(acc[j][2], acc[j][3]));
    __m512 va = _mm512_set1_ps(alpha);
    const float *res = ep != NULL ? ep->res : NULL;
    if (ldc <= INT32_MAX / MR && (res == NULL || ep->ldr <= INT32_MAX / MR)) {
        /* Columns go out as scatters, the epilogue applied in registers: a scalar epilogue
         * cost more than the product when k is short. */
        __mmask16 m = (__mmask16)((1u << mr) - 1);
        __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        __m512i ic = _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)ldc));
        __m512i ir = res != NULL ? _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)ep->ldr)) : iota;
        __m512 br = ep != NULL && ep->bias_row != NULL ? _mm512_maskz_loadu_ps(m, ep->bias_row)
                                                       : _mm512_setzero_ps();
        __m512 lo = _mm512_set1_ps(ep != NULL ? ep->lo : 0.0f);
        __m512 hi = _mm512_set1_ps(ep != NULL ? ep->hi : 0.0f);
        _Pragma("GCC unroll 4") for (int j = 0; j < NARROW; j++) {
            if (j >= nr)
                break;
            __m512 v = _mm512_mul_ps(va, e[j]);
            if (beta != 0.0f)
                v = _mm512_fmadd_ps(_mm512_set1_ps(beta),
                                    _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, ic, c + j, 4),
                                    v);
            if (ep != NULL) {
                v = _mm512_add_ps(v, br);
                if (ep->bias_col != NULL)
                    v = _mm512_add_ps(v, _mm512_set1_ps(ep->bias_col[j]));
                if (res != NULL)
                    v = _mm512_add_ps(
                        v, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, ir, res + j, 4));
                if (ep->clamp)
                    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            }
            _mm512_mask_i32scatter_ps(c + j, m, ic, v, 4);
        }
        return;
    }
    float t[NARROW][16];
    _Pragma("GCC unroll 4") for (int j = 0; j < NARROW; j++) if (j < nr)
        _mm512_storeu_ps(t[j], _mm512_mul_ps(va, e[j]));
    for (int i = 0; i < mr; i++)
        _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++) c[i * ldc + j] =
            beta != 0.0f ? t[j][i] + beta * c[i * ldc + j] : t[j][i];
    if (ep != NULL)
        kn_ukr_ep_apply(ep, c, ldc, mr, nr);
}

/* One instance per column count, so the accumulators stay in registers. */
__attribute__((target("avx512f"))) static void ukr_narrow(int64_t kc, const float *a,
                                                          const float *b, float *c, int64_t ldc,
                                                          float alpha, float beta, int mr, int nr,
                                                          const kn_ukr_ep *ep) {
    switch (nr) {
    case 1:
        narrow_body(kc, a, b, c, ldc, alpha, beta, mr, 1, ep);
        break;
    case 2:
        narrow_body(kc, a, b, c, ldc, alpha, beta, mr, 2, ep);
        break;
    case 3:
        narrow_body(kc, a, b, c, ldc, alpha, beta, mr, 3, ep);
        break;
    default:
        narrow_body(kc, a, b, c, ldc, alpha, beta, mr, 4, ep);
        break;
    }
}

/* A 12 x 16 or 12 x 32 tile and the 1 to NARROW columns after it in one pass: the narrow
 * columns' multiply-adds (the tile's 12 rows in one vector, b broadcast) ride along the main
 * tile's, whose A row they share, instead of a pass of their own that reloaded A and waited on
 * few multiply-adds a k (a 576 -> 96 1x1 conv at 14x14, 196 = 6 x 32 + 4 columns, spent 7 % of
 * its time on the last 4; one at 7x7, 49 = 32 + 16 + 1, 10 % on the last column). The narrow
 * columns' b is the main tile's panel after its 16 columns (TWO == 0) or the next panel (TWO).
 * Their results leave by scatters, so ldc (and the residual's ldr) must fit 32 bits / MR. */
#define TAILS(X) X(0) X(1) X(2) X(3)
#define TFMA(j)                                                                                    \
    if (j < W)                                                                                     \
        t##j = _mm512_fmadd_ps(av, _mm512_set1_ps(bt[j]), t##j);
#define TSTORE(j)                                                                                  \
    if (j < W) {                                                                                   \
        __m512 v = scaled ? _mm512_mul_ps(va, t##j) : t##j;                                        \
        if (beta != 0.0f)                                                                          \
            v = _mm512_fmadd_ps(                                                                   \
                vb, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rm, ic, ct + j, 4), v);          \
        v = _mm512_add_ps(v, br);                                                                  \
        if (bias_col)                                                                              \
            v = _mm512_add_ps(v, _mm512_set1_ps(ep->bias_col[off + j]));                           \
        if (e.res != NULL)                                                                         \
            v = _mm512_add_ps(                                                                     \
                v, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rm, ir, e.res + off + j, 4));     \
        __m512 unused = v;                                                                         \
        ep_act(&e, &v, &unused, 0, vlo, vhi);                                                      \
        _mm512_mask_i32scatter_ps(ct + j, rm, ic, v, 4);                                           \
    }

__attribute__((target("avx512f"), always_inline)) static inline void
tail_body(int64_t kc, const float *a, const float *b, const float *bt, float *c, int64_t ldc,
          float alpha, float beta, int mr, const kn_ukr_ep *ep, const int TWO, const int W) {
    const int ROWS_N = MR;
    const __mmask16 m0 = (__mmask16)0xFFFF, m1 = TWO ? (__mmask16)0xFFFF : (__mmask16)0;
    const __mmask16 arows = (__mmask16)((1u << MR) - 1);
    ROWS(DECL)
    __m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(b);
        __m512 b1 = TWO ? _mm512_loadu_ps(b + 16) : b0;
        if (kc >= PREFETCH_MIN_K)
            _mm_prefetch((const char *)(a + PREFETCH_A), _MM_HINT_T0);
        ROWS(FMA)
        __m512 av = _mm512_maskz_loadu_ps(arows, a);
        TAILS(TFMA)
        a += MR;
        b += NR;
        bt += NR;
    }
    const ep_fields e = ep_read(ep);
    const bool scaled = alpha != 1.0f, bias_col = ep != NULL && ep->bias_col != NULL;
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    __m512 bc0 = _mm512_setzero_ps(), bc1 = _mm512_setzero_ps();
    __m512 vlo = _mm512_set1_ps(e.clamp ? ep->lo : 0.0f);
    __m512 vhi = _mm512_set1_ps(e.clamp ? ep->hi : 0.0f);
    if (bias_col) {
        bc0 = _mm512_loadu_ps(ep->bias_col);
        if (TWO)
            bc1 = _mm512_loadu_ps(ep->bias_col + 16);
    }
    /* The narrow columns first: the main tile's stores below may alias ep's arrays for the
     * compiler, not these locals. */
    const int off = TWO ? 32 : 16;
    float *ct = c + off;
    __mmask16 rm = (__mmask16)((1u << mr) - 1);
    __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i ic = _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)ldc));
    __m512i ir = e.res != NULL ? _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)e.ldr)) : iota;
    __m512 br = e.bias_row != NULL ? _mm512_maskz_loadu_ps(rm, e.bias_row) : _mm512_setzero_ps();
    TAILS(TSTORE)
    ROWS(STORE)
}
#undef TAILS
#undef TFMA
#undef TSTORE

/* nr = 16 + w or 32 + w columns, 1 <= w <= NARROW; see tail_body. */
__attribute__((target("avx512f"))) static void ukr_tail(int64_t kc, const float *a, const float *b,
                                                        float *c, int64_t ldc, float alpha,
                                                        float beta, int mr, int nr,
                                                        const kn_ukr_ep *ep) {
    const float *bt = nr > NR ? b + NR * kc : b + 16;
    switch (nr) {
    case 17:
        tail_body(kc, a, b, bt, c, ldc, alpha, beta, mr, ep, 0, 1);
        break;
    case 18:
        tail_body(kc, a, b, bt, c, ldc, alpha, beta, mr, ep, 0, 2);
        break;
    case 19:
        tail_body(kc, a, b, bt, c, ldc, alpha, beta, mr, ep, 0, 3);
        break;
    case 20:
        tail_body(kc, a, b, bt, c, ldc, alpha, beta, mr, ep, 0, 4);
        break;
    case 33:
        tail_body(kc, a, b, bt, c, ldc, alpha, beta, mr, ep, 1, 1);
        break;
    case 34:
        tail_body(kc, a, b, bt, c, ldc, alpha, beta, mr, ep, 1, 2);
        break;
    case 35:
        tail_body(kc, a, b, bt, c, ldc, alpha, beta, mr, ep, 1, 3);
        break;
    default:
        tail_body(kc, a, b, bt, c, ldc, alpha, beta, mr, ep, 1, 4);
        break;
    }
}

/* S panels at a time, so S independent chains of multiply-adds hide their latency (k is often
 * 10-48 here: one chain per panel waited on it). */
#define GEMV_PANELS 8
__attribute__((target("avx512f"))) static void ukr_gemv(int64_t kc, const float *a, int64_t strips,
                                                        const float *x, int64_t ldx, float *y) {
    const __mmask16 m = (__mmask16)((1u << MR) - 1);
    int64_t s = 0;
    for (; s + GEMV_PANELS <= strips; s += GEMV_PANELS) {
        const float *as = a + s * kc * MR;
        __m512 acc[GEMV_PANELS];
        for (int q = 0; q < GEMV_PANELS; q++)
            acc[q] = _mm512_maskz_loadu_ps(m, y + (s + q) * MR);
        for (int64_t k = 0; k < kc; k++) {
            __m512 xv = _mm512_set1_ps(x[k * ldx]);
            for (int q = 0; q < GEMV_PANELS; q++)
                acc[q] =
                    _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, as + (q * kc + k) * MR), xv, acc[q]);
        }
        for (int q = 0; q < GEMV_PANELS; q++)
            _mm512_mask_storeu_ps(y + (s + q) * MR, m, acc[q]);
    }
    for (; s < strips; s++) {
        const float *as = a + s * kc * MR;
        __m512 acc0 = _mm512_maskz_loadu_ps(m, y + s * MR), acc1 = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 2 <= kc; k += 2) {
            acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, as + k * MR),
                                   _mm512_set1_ps(x[k * ldx]), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, as + (k + 1) * MR),
                                   _mm512_set1_ps(x[(k + 1) * ldx]), acc1);
        }
        if (k < kc)
            acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, as + k * MR),
                                   _mm512_set1_ps(x[k * ldx]), acc0);
        _mm512_mask_storeu_ps(y + s * MR, m, _mm512_add_ps(acc0, acc1));
    }
}

/* A's panels by 16 x 16 transposes in registers: the scalar packing stored one float at a time
 * with a stride of MR floats, at a few floats a cycle, and took 7 % of BERT-base at 1 thread
 * (its activations, 128 rows, are packed once for every column block and K slice). Each step
 * loads 16 columns of the panel's rows (rows past `rows` zero), transposes them (unpack,
 * 64-bit unpack, two 128-bit lane shuffles) and stores each column's MR floats. */
__attribute__((target("avx512f"))) static void pack_a_panel(const float *a, int64_t lda, int64_t kc,
                                                            int rows, float *dst) {
    const __mmask16 keep = (__mmask16)((1u << MR) - 1);
    for (int64_t k = 0; k < kc; k += 16) {
        int64_t n = kc - k < 16 ? kc - k : 16;
        __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
        __m512 r[16], t[16], u[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(m, a + i * lda + k) : _mm512_setzero_ps();
        /* t[2i], t[2i + 1]: rows 2i and 2i + 1 interleaved by pairs of columns */
        for (int i = 0; i < 8; i++) {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        /* u[4i + c], 128-bit lane L: column 4L + c of rows 4i .. 4i + 3 */
        for (int i = 0; i < 4; i++) {
            __m512d a0 = _mm512_castps_pd(t[4 * i]), a1 = _mm512_castps_pd(t[4 * i + 1]);
            __m512d a2 = _mm512_castps_pd(t[4 * i + 2]), a3 = _mm512_castps_pd(t[4 * i + 3]);
            u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
            u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
            u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
            u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
        }
        /* column 4L + c: lane L of u[c], u[4 + c], u[8 + c], u[12 + c] */
        for (int c = 0; c < 4; c++) {
            __m512 lo01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
            __m512 hi01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
            __m512 lo23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
            __m512 hi23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
            __m512 col[4] = {
                _mm512_shuffle_f32x4(lo01, lo23, 0x88), _mm512_shuffle_f32x4(lo01, lo23, 0xDD),
                _mm512_shuffle_f32x4(hi01, hi23, 0x88), _mm512_shuffle_f32x4(hi01, hi23, 0xDD)};
            for (int l = 0; l < 4; l++)
                if (4 * l + c < n)
                    _mm512_mask_storeu_ps(dst + (k + 4 * l + c) * MR, keep, col[l]);
        }
    }
}

const kn_gemm_ukr kn_gemm_ukr_avx512 = {.name = "avx512",
                                        .mr = MR,
                                        .nr = NR,
                                        .fn = ukr,
                                        .fn_b_ahead = ukr_b_ahead,
                                        .fn_half_m = ukr_half_m,
                                        .fn_half_n = ukr_half_n,
                                        .fn_half_mn = ukr_half_mn,
                                        .fn_narrow_n = ukr_narrow,
                                        .narrow_n = NARROW,
                                        .fn_tail = ukr_tail,
                                        .fn_direct = ukr_direct,
                                        .fn_m1 = ukr_m1,
                                        .fn_rows8 = ukr_rows8,
                                        .fn_rows8_half_n = ukr_rows8_half_n,
                                        .fn_rows4 = ukr_rows4,
                                        .fn_rows4_half_n = ukr_rows4_half_n,
                                        .fn_gather = ukr_gather,
                                        .fn_gemv = ukr_gemv,
                                        .fn_pack_a = pack_a_panel,
                                        .act_in_regs = 1};

#else

const kn_gemm_ukr kn_gemm_ukr_avx512 = {.name = "avx512"};

#endif
