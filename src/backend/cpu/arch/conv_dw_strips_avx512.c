/* AVX-512 3x3 depthwise with one row and column of padding before, stride 1 (the plane's size
 * kept) or 2, by strips of up to four vectors walked down the plane (kn_cpu_dw3_strips_avx512).
 * Each input row is read once per strip: at stride 1 its three tap vectors per output vector feed
 * the three output rows that read it (the row below's first taps, its own row's middle taps, the
 * row above's last, which completes that row), so a strip keeps two rows of accumulators and the
 * nine weights in registers, and each output vector costs three loads and nine multiply-adds.
 * The direct kernel's blocks of four output rows read six input rows, three loads each, per 16
 * columns, and kept its weights in memory. */
#include "backend/cpu/nn/conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include "backend/cpu/arch/act_avx512.h"

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) static inline

/* Stride 2 from this many output columns. Inside MobileNetV2, 1 thread, ms, direct kernel ->
 * strips: 96ch 112->56 0.108 -> 0.081, 144ch 56->28 0.052 -> 0.043, 192ch 28->14 0.018 ->
 * 0.016, but 576ch 14->7 0.024 -> 0.027 (that one by pairs of rows, plane_s2_narrow). */
#define STRIDE2_MIN_OW 8

#define PREFETCH_ROWS 4

/* Vectors a strip: 4 x 2 accumulator rows, 9 weights and the taps fill the 32 registers. */
#define STRIP_MAX 4

AVX512 INLINE __mmask16 lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* Where a vector's taps read: INSIDE, columns c - 1 .. c + 16 all in the row; LEFT, c = 0;
 * RIGHT, the row ends before c + 17. */
enum { INSIDE, LEFT, RIGHT };

typedef struct edge_masks {
    __mmask16 left1, left2;           /* LEFT: columns 0 .. 15 and 1 .. 16 */
    __mmask16 right0, right1, right2; /* RIGHT: from c - 1, c and c + 1 */
} edge_masks;

/* The three tap vectors of columns c - 1 + kx, kx = 0, 1, 2, of one input row. */
AVX512 INLINE void taps(const float *row, int64_t c, const int where, const edge_masks *m,
                        __m512 t[3]) {
    if (where == INSIDE) {
        t[0] = _mm512_loadu_ps(row + c - 1);
        t[1] = _mm512_loadu_ps(row + c);
        t[2] = _mm512_loadu_ps(row + c + 1);
    } else if (where == LEFT) {
        t[1] = _mm512_maskz_loadu_ps(m->left1, row);
        t[0] = _mm512_castsi512_ps(
            _mm512_alignr_epi32(_mm512_castps_si512(t[1]), _mm512_setzero_si512(), 15));
        t[2] = _mm512_maskz_loadu_ps(m->left2, row + 1);
    } else {
        t[0] = _mm512_maskz_loadu_ps(m->right0, row + c - 1);
        t[1] = _mm512_maskz_loadu_ps(m->right1, row + c);
        t[2] = _mm512_maskz_loadu_ps(m->right2, row + c + 1);
    }
}

AVX512 INLINE int kind(int v, const int NV, const int L, const int R) {
    return v == 0 && L ? LEFT : v == NV - 1 && R ? RIGHT : INSIDE;
}

/* Output row `oh` of the strip from its accumulators: epilogue in registers, then the store. */
AVX512 INLINE void store_row(const kn_dwd *d, const __m512 *acc, int64_t oh, int64_t c0,
                             __mmask16 last, const int NV) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        int64_t at = oh * d->ow + c0 + 16 * v;
        __mmask16 m = v == NV - 1 ? last : (__mmask16)0xFFFF;
        __m512 r = acc[v];
        if (d->res != NULL)
            r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, d->res + at));
        _mm512_mask_storeu_ps(d->y + at, m, kn_act_in_regs512(d->act, r, d->lo, d->hi));
    }
}

/* NV vectors from column c0, every row. L: the strip starts the row; R: its last vector's taps
 * reach the row's end. */
AVX512 INLINE void strip(const kn_dwd *d, const __m512 *wv, int64_t c0, const int NV, const int L,
                         const int R) {
    edge_masks m;
    int64_t cl = c0 + 16 * (NV - 1), w = d->w;
    m.left1 = lanes(w);
    m.left2 = lanes(w - 1);
    m.right0 = lanes(w - cl + 1);
    m.right1 = lanes(w - cl);
    m.right2 = lanes(w - cl - 1);
    __mmask16 last = lanes(d->ow - cl);
    __m512 bias = _mm512_set1_ps(d->bias);
    /* above[v]: the output row above the input row, which this input row completes; here[v]:
     * the input row's own output row. */
    __m512 above[STRIP_MAX], here[STRIP_MAX];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        above[v] = here[v] = bias;
    for (int64_t i = 0; i < d->h; i++) {
        const float *row = d->x + i * w;
        __m512 below[STRIP_MAX];
        /* The strip's columns 2 * PREFETCH_ROWS input rows down (see strip2). */
        const float *ahead = row + 2 * PREFETCH_ROWS * w + c0;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm_prefetch((const char *)(ahead + 16 * v), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            __m512 t[3];
            taps(row, c0 + 16 * v, kind(v, NV, L, R), &m, t);
            below[v] = _mm512_fmadd_ps(wv[0], t[0], bias);
            here[v] = _mm512_fmadd_ps(wv[3], t[0], here[v]);
            above[v] = _mm512_fmadd_ps(wv[6], t[0], above[v]);
            below[v] = _mm512_fmadd_ps(wv[1], t[1], below[v]);
            here[v] = _mm512_fmadd_ps(wv[4], t[1], here[v]);
            above[v] = _mm512_fmadd_ps(wv[7], t[1], above[v]);
            below[v] = _mm512_fmadd_ps(wv[2], t[2], below[v]);
            here[v] = _mm512_fmadd_ps(wv[5], t[2], here[v]);
            above[v] = _mm512_fmadd_ps(wv[8], t[2], above[v]);
        }
        if (i > 0)
            store_row(d, above, i - 1, c0, last, NV);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            above[v] = here[v];
            here[v] = below[v];
        }
    }
    store_row(d, above, d->h - 1, c0, last, NV);
}

/* Stride 2: output row r reads input rows 2r - 1, 2r and 2r + 1, so the walk goes two input rows
 * an output row: row 2r gives r its middle taps, row 2r + 1 its last ones (completing it) and row
 * r + 1 its first. Output column c's taps read columns 2c - 1, 2c and 2c + 1: the even and odd
 * columns of two loads (vpermt2ps), and the odd ones moved up a lane with the column before
 * shifted in (the previous vector's last odd column, or the one before the strip). */
typedef struct edge2 {
    __mmask16 lo, hi; /* RIGHT: columns 2c .. 2c + 15 and 2c + 16 .. 2c + 31 inside */
    int64_t hi_off;   /* 2c + 16, or 0 where no column of it is inside */
} edge2;

AVX512 INLINE void taps2(const float *row, int64_t c, const int where, const edge2 *e,
                         __m512 before, __m512 t[3]) {
    __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512 lo, hi;
    if (where == RIGHT) {
        lo = _mm512_maskz_loadu_ps(e->lo, row + 2 * c);
        hi = _mm512_maskz_loadu_ps(e->hi, row + e->hi_off);
    } else {
        lo = _mm512_loadu_ps(row + 2 * c);
        hi = _mm512_loadu_ps(row + 2 * c + 16);
    }
    t[1] = _mm512_permutex2var_ps(lo, even, hi);
    t[2] = _mm512_permutex2var_ps(lo, odd, hi);
    t[0] = _mm512_castsi512_ps(
        _mm512_alignr_epi32(_mm512_castps_si512(t[2]), _mm512_castps_si512(before), 15));
}

/* The taps of one input row for the strip's NV vectors. */
AVX512 INLINE void row_taps2(const float *row, int64_t c0, const int NV, const int L, const int R,
                             const edge2 *e, __m512 t[][3]) {
    __m512 before = L ? _mm512_setzero_ps() : _mm512_set1_ps(row[2 * c0 - 1]);
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        taps2(row, c0 + 16 * v, v == NV - 1 && R ? RIGHT : INSIDE, e, before, t[v]);
        before = t[v][2];
    }
}

AVX512 INLINE void strip2(const kn_dwd *d, const __m512 *wv, int64_t c0, const int NV, const int L,
                          const int R) {
    int64_t cl = c0 + 16 * (NV - 1), w = d->w;
    edge2 e = {.lo = lanes(w - 2 * cl), .hi = lanes(w - 2 * cl - 16)};
    e.hi_off = e.hi != 0 ? 2 * cl + 16 : 0;
    __mmask16 last = lanes(d->ow - cl);
    __m512 bias = _mm512_set1_ps(d->bias);
    /* next[v]: output row r + 1 with the taps of input row 2r + 1 */
    __m512 acc[STRIP_MAX], next[STRIP_MAX];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
        next[v] = bias;
    for (int64_t r = 0; r < d->oh; r++) {
        __m512 t[STRIP_MAX][3];
        /* The strip's columns of the two input rows PREFETCH_ROWS output rows down (past the
         * plane's end: the next plane's first rows, which the pool's ranges run next). */
        const float *ahead = d->x + 2 * (r + PREFETCH_ROWS) * w + 2 * c0;
#pragma GCC unroll 8
        for (int v = 0; v < 2 * NV; v++) {
            _mm_prefetch((const char *)(ahead + 16 * v), _MM_HINT_T0);
            _mm_prefetch((const char *)(ahead + w + 16 * v), _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[v] = next[v];
        if (2 * r < d->h) {
            row_taps2(d->x + 2 * r * w, c0, NV, L, R, &e, t);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                acc[v] = _mm512_fmadd_ps(wv[3], t[v][0], acc[v]);
                acc[v] = _mm512_fmadd_ps(wv[4], t[v][1], acc[v]);
                acc[v] = _mm512_fmadd_ps(wv[5], t[v][2], acc[v]);
            }
        }
        if (2 * r + 1 < d->h) {
            row_taps2(d->x + (2 * r + 1) * w, c0, NV, L, R, &e, t);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                next[v] = _mm512_fmadd_ps(wv[0], t[v][0], bias);
                acc[v] = _mm512_fmadd_ps(wv[6], t[v][0], acc[v]);
                next[v] = _mm512_fmadd_ps(wv[1], t[v][1], next[v]);
                acc[v] = _mm512_fmadd_ps(wv[7], t[v][1], acc[v]);
                next[v] = _mm512_fmadd_ps(wv[2], t[v][2], next[v]);
                acc[v] = _mm512_fmadd_ps(wv[8], t[v][2], acc[v]);
            }
        }
        store_row(d, acc, r, c0, last, NV);
    }
}

#define STRIP_INSTANCE(NV, L, R)                                                                   \
    AVX512 static void strip_##NV##_##L##_##R(const kn_dwd *d, const __m512 *wv, int64_t c0) {     \
        strip(d, wv, c0, NV, L, R);                                                                \
    }                                                                                              \
    AVX512 static void strip2_##NV##_##L##_##R(const kn_dwd *d, const __m512 *wv, int64_t c0) {    \
        strip2(d, wv, c0, NV, L, R);                                                               \
    }
#define STRIP_INSTANCES(NV)                                                                        \
    STRIP_INSTANCE(NV, 0, 0)                                                                       \
    STRIP_INSTANCE(NV, 0, 1)                                                                       \
    STRIP_INSTANCE(NV, 1, 0)                                                                       \
    STRIP_INSTANCE(NV, 1, 1)
STRIP_INSTANCES(1)
STRIP_INSTANCES(2)
STRIP_INSTANCES(3)
STRIP_INSTANCES(4)

typedef void (*strip_fn)(const kn_dwd *, const __m512 *, int64_t);
static const strip_fn strips[STRIP_MAX][2][2] = {
    {{strip_1_0_0, strip_1_0_1}, {strip_1_1_0, strip_1_1_1}},
    {{strip_2_0_0, strip_2_0_1}, {strip_2_1_0, strip_2_1_1}},
    {{strip_3_0_0, strip_3_0_1}, {strip_3_1_0, strip_3_1_1}},
    {{strip_4_0_0, strip_4_0_1}, {strip_4_1_0, strip_4_1_1}},
};
static const strip_fn strips2[STRIP_MAX][2][2] = {
    {{strip2_1_0_0, strip2_1_0_1}, {strip2_1_1_0, strip2_1_1_1}},
    {{strip2_2_0_0, strip2_2_0_1}, {strip2_2_1_0, strip2_2_1_1}},
    {{strip2_3_0_0, strip2_3_0_1}, {strip2_3_1_0, strip2_3_1_1}},
    {{strip2_4_0_0, strip2_4_0_1}, {strip2_4_1_0, strip2_4_1_1}},
};

AVX512 static void plane(const kn_dwd *d) {
    __m512 wv[9];
    for (int t = 0; t < 9; t++)
        wv[t] = _mm512_set1_ps(d->wt[t]);
    /* Strips of nearly equal width, at most STRIP_MAX vectors each. */
    int64_t nvec = (d->ow + 15) / 16, nstrips = (nvec + STRIP_MAX - 1) / STRIP_MAX, v0 = 0;
    for (int64_t s = 0; s < nstrips; s++) {
        int64_t nv = (nvec - v0) / (nstrips - s), c0 = 16 * v0, cl = c0 + 16 * (nv - 1);
        if (d->stride == 1)
            strips[nv - 1][c0 == 0][cl + 17 > d->w](d, wv, c0);
        else
            strips2[nv - 1][c0 == 0][2 * cl + 32 > d->w](d, wv, c0);
        v0 += nv;
    }
}

/* Stride 2 onto at most 8 output columns from at most 16 rows of at most 15 (MobileNetV2's 576ch
 * 14->7): a vector holds two output rows, flat as they are stored, so the 7 x 7 plane is four
 * vectors, four independent accumulators, each stored with one masked store. A tap's inputs for
 * both rows come from their two input rows, 2 rows apart, by one vpermt2ps (the even or odd
 * columns, shifted by the tap; the padding from lane 15, zero in every loaded row). The direct
 * kernel ran one vector of 7 lanes a row. Inside MobileNetV2, 576ch 14->7, best medians of 5
 * rounds: 1 thread 0.0243 -> 0.0195 ms, 2 threads 0.0147 -> 0.0126 (one accumulator through the
 * pairs and the permute indices built in scalar code: 0.0293 -> 0.0338, slower). */
AVX512 static void plane_s2_narrow(const kn_dwd *d) {
    int64_t h = d->h, w = d->w, ow = d->ow, oh = d->oh, np = (oh + 1) / 2;
    __mmask16 mrow = lanes(w);
    /* lane i: output row 2p + (i >= ow), column i % ow; taps from column 2 * (i % ow) + kx - 1
     * of the first (a) or the second (b, + 16) row, lane 15 where that is padding */
    __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i vow = _mm512_set1_epi32((int)ow), vw = _mm512_set1_epi32((int)w);
    __mmask16 second = _mm512_cmpge_epi32_mask(iota, vow);
    __mmask16 used = _mm512_cmplt_epi32_mask(iota, _mm512_set1_epi32((int)(2 * ow)));
    __m512i j = _mm512_mask_sub_epi32(iota, second, iota, vow);
    __m512i idx[3];
    for (int kx = 0; kx < 3; kx++) {
        __m512i col = _mm512_add_epi32(_mm512_add_epi32(j, j), _mm512_set1_epi32(kx - 1));
        __mmask16 in = used & _mm512_cmpge_epi32_mask(col, _mm512_setzero_si512()) &
                       _mm512_cmplt_epi32_mask(col, vw);
        col = _mm512_mask_add_epi32(col, second, col, _mm512_set1_epi32(16));
        idx[kx] = _mm512_mask_mov_epi32(_mm512_set1_epi32(15), in, col);
    }
    __m512 acc[4];
    for (int p = 0; p < 4; p++)
        acc[p] = _mm512_set1_ps(d->bias);
    /* input rows 4p - 1 + ky (first output row) and 4p + 1 + ky (second) */
    for (int ky = 0; ky < 3; ky++)
        for (int p = 0; p < 4; p++) {
            if (p >= np)
                break;
            int64_t r0 = 4 * p + ky - 1, r1 = r0 + 2;
            __m512 a = r0 >= 0 && r0 < h ? _mm512_maskz_loadu_ps(mrow, d->x + r0 * w)
                                         : _mm512_setzero_ps();
            __m512 b = r1 < h && 2 * p + 1 < oh ? _mm512_maskz_loadu_ps(mrow, d->x + r1 * w)
                                                : _mm512_setzero_ps();
            for (int kx = 0; kx < 3; kx++)
                acc[p] = _mm512_fmadd_ps(_mm512_permutex2var_ps(a, idx[kx], b),
                                         _mm512_set1_ps(d->wt[ky * 3 + kx]), acc[p]);
        }
    for (int p = 0; p < 4; p++) {
        if (p >= np)
            break;
        int64_t at = 2 * p * ow;
        __mmask16 m = lanes(2 * p + 1 < oh ? 2 * ow : ow);
        __m512 v = acc[p];
        if (d->res != NULL)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, d->res + at));
        _mm512_mask_storeu_ps(d->y + at, m, kn_act_in_regs512(d->act, v, d->lo, d->hi));
    }
}

/* act over n floats of y, as the kernels apply it in registers. */
AVX512 static void act_pass(float *y, int64_t n, int act) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, kn_act_in_regs512(act, _mm512_loadu_ps(y + i), 0, 0));
    if (i < n) {
        __mmask16 m = lanes(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              kn_act_in_regs512(act, _mm512_maskz_loadu_ps(m, y + i), 0, 0));
    }
}

bool kn_cpu_dw3_strips_avx512(const kn_dwd *d) {
    bool s1 = d->stride == 1 && d->oh == d->h && d->ow == d->w;
    bool s2 = d->stride == 2 && d->oh == (d->h - 1) / 2 + 1 && d->ow == (d->w - 1) / 2 + 1;
    if (d->k != 3 || d->ph != 1 || d->pw != 1 || d->w < 1 || d->h < 1 || !(s1 || s2))
        return false;
    if (s2 && d->ow < STRIDE2_MIN_OW) {
        if (d->w > 15 || d->h > 16)
            return false;
        plane_s2_narrow(d);
        return true;
    }
    /* Stride 2 with sigmoid or SiLU in registers left the strip short of registers: inside
     * EfficientNet-B0, 1 thread, 96ch 112->56 + SiLU 0.205 ms (direct kernel) -> 0.208 (strips,
     * SiLU in registers) -> 0.169 (strips, then SiLU over the plane while it is in cache). At
     * stride 1 the pass after was slower (32ch 112x112 0.120 -> 0.155 ms). */
    if (d->stride == 1 || (d->act != KN_ACT_SWISH && d->act != KN_ACT_SIGMOID)) {
        plane(d);
        return true;
    }
    kn_dwd e = *d;
    e.act = KN_ACT_NONE;
    plane(&e);
    act_pass(d->y, d->oh * d->ow, d->act);
    return true;
}

#else

bool kn_cpu_dw3_strips_avx512(const kn_dwd *d) {
    (void)d;
    return false;
}

#endif
