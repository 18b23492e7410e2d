/* AVX-512 im2col packers for 2-D convs whose taps read contiguous runs of an input row (stride
 * 1, or stride 2 over the even/odd column halves): float32 panels for the float32 GEMM, bf16
 * pairs for the bf16 GEMM. A panel's split into output-row segments is computed once per call;
 * each row is gathered by masked loads (one or two a segment) into two vectors, and where a call
 * passes over its kernel's taps twice or more, each tap's loads are computed once and reused by
 * every channel. On short segments (28- or 14-wide maps, 32-wide panels) a library copy cost
 * more than the copy itself. */
#include "backend/cpu/nn/conv.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdbool.h>

#define AVX512 __attribute__((target("avx512f")))
#define NR 32
#define MAX_SEGS (NR + 2)

/* The bf16 bits of 16 floats, rounded to nearest even, a NaN kept quiet: the bf16 GEMM's
 * to_bf16, lane by lane, so the pairs match its own packing bit for bit. */
AVX512 static inline __m512i to_bf16(__m512 v) {
    __m512i x = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
}

/* A panel's segments (output-row runs) for columns [col0, col0 + cols). */
typedef struct segs {
    int64_t oh[MAX_SEGS], ow[MAX_SEGS], len[MAX_SEGS], j[MAX_SEGS];
    int n;
} segs;

static void panel_segs(const kn_im2col2d *g, int64_t col0, int64_t cols, segs *s) {
    s->n = 0;
    for (int64_t j = 0, oh = col0 / g->ow, ow = col0 % g->ow; j < cols; s->n++) {
        int64_t len = cols - j < g->ow - ow ? cols - j : g->ow - ow;
        s->oh[s->n] = oh * g->sh - g->ph;
        s->ow[s->n] = ow;
        s->len[s->n] = len;
        s->j[s->n] = j;
        j += len;
        ow += len;
        if (ow == g->ow) {
            ow = 0;
            oh++;
        }
    }
}

/* Lanes [lo, hi) of a 32-lane row, as the masks of its two halves. */
AVX512 static inline void lane_range(int64_t lo, int64_t hi, __mmask16 *m0, __mmask16 *m1) {
    uint32_t m = (hi >= 32 ? 0xFFFFFFFFu : (1u << hi) - 1u) & ~((1u << lo) - 1u);
    *m0 = (__mmask16)m;
    *m1 = (__mmask16)(m >> 16);
}

/* Taps (ky, kx) whose loads a panel computes once for all its channels (a 7x7 kernel's 49). */
#define MAX_TAPS 49

/* The masked loads of one tap over a panel's segments, the same in every channel: offsets from
 * the channel's plane, shifted so lane j reads column j of its segment (masked-off lanes are
 * not read, so an offset may point before the row), and the lanes each fills. Segments whose
 * input row is outside the image, or whose columns all are, load nothing: zeros. */
typedef struct tap_loads {
    int n;
    int64_t off[MAX_SEGS];
    __mmask16 m0[MAX_SEGS], m1[MAX_SEGS];
} tap_loads;

/* Segment i's load for tap (ky, kx): its offset from the channel's plane and its lanes, or
 * false where its input row, or every column of it, is outside the image. */
AVX512 static inline __attribute__((always_inline)) bool seg_load(const kn_im2col2d *g,
                                                                  const segs *s, int i, int64_t ky,
                                                                  int64_t kx, int64_t *off,
                                                                  __mmask16 *m0, __mmask16 *m1) {
    int64_t ih = s->oh[i] + ky * g->dh, len = s->len[i];
    if (ih < 0 || ih >= g->h)
        return false;
    int64_t c0 = s->ow[i] + g->xoff[kx];
    int64_t lo = c0 >= 0 ? 0 : -c0, hi = g->width[kx] - c0 < len ? g->width[kx] - c0 : len;
    if (hi <= lo)
        return false;
    *off = g->hoff[kx] + ih * g->row + c0 - s->j[i];
    lane_range(s->j[i] + lo, s->j[i] + hi, m0, m1);
    return true;
}

AVX512 static void tap_table(const kn_im2col2d *g, const segs *s, int64_t ky, int64_t kx,
                             tap_loads *t) {
    t->n = 0;
    for (int i = 0; i < s->n; i++)
        t->n += seg_load(g, s, i, ky, kx, &t->off[t->n], &t->m0[t->n], &t->m1[t->n]);
}

/* One row of the column matrix (channel plane xc, tap t) into two vectors. */
AVX512 static inline void gather_row(const float *xc, const tap_loads *t, __m512 *v0, __m512 *v1) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    for (int i = 0; i < t->n; i++) {
        a = _mm512_mask_loadu_ps(a, t->m0[i], xc + t->off[i]);
        b = _mm512_mask_loadu_ps(b, t->m1[i], xc + t->off[i] + 16);
    }
    *v0 = a;
    *v1 = b;
}

/* Row (xc, tap) of the column matrix straight from the segments, bounds and all: for calls
 * that use a tap once or so (a 7x7 stem's 147 rows come in pieces of 64), where a table costs
 * more than it saves. */
AVX512 static inline void gather_row_direct(const kn_im2col2d *g, const segs *s, const float *xc,
                                            int64_t ky, int64_t kx, __m512 *v0, __m512 *v1) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    for (int i = 0; i < s->n; i++) {
        int64_t off;
        __mmask16 m0, m1;
        if (!seg_load(g, s, i, ky, kx, &off, &m0, &m1))
            continue;
        a = _mm512_mask_loadu_ps(a, m0, xc + off);
        b = _mm512_mask_loadu_ps(b, m1, xc + off + 16);
    }
    *v0 = a;
    *v1 = b;
}

/* Row r's channel and tap (ky, kx: tap = ky * kw + kx), stepped row by row. */
typedef struct walk {
    int64_t ci, ky, kx, tap;
} walk;

static inline walk walk_at(const kn_im2col2d *g, int64_t k0) {
    int64_t taps = g->kh * g->kw, tap = k0 % taps;
    return (walk){.ci = k0 / taps, .ky = tap / g->kw, .kx = tap % g->kw, .tap = tap};
}

/* The walk's next row into two vectors (columns 0-15 and 16-31 of the panel): from the table,
 * or straight from the segments. */
AVX512 static inline __attribute__((always_inline)) void next_row(const kn_im2col2d *g,
                                                                  const segs *s,
                                                                  const tap_loads *table, walk *w,
                                                                  __m512 *v0, __m512 *v1) {
    const float *xc = g->x + w->ci * g->plane;
    if (table != NULL)
        gather_row(xc, &table[w->tap], v0, v1);
    else
        gather_row_direct(g, s, xc, w->ky, w->kx, v0, v1);
    w->tap++;
    if (++w->kx == g->kw) {
        w->kx = 0;
        if (++w->ky == g->kh) {
            w->ky = 0;
            w->tap = 0;
            w->ci++;
        }
    }
}

/* A panel's segments, and its taps' loads where the call passes over its taps twice or more (a
 * 3x3's 64 rows are seven channels; a 7x7 stem's 147 rows come in pieces of 64, where a table
 * would be used about once and costs more than it saves): table NULL otherwise. */
AVX512 static const tap_loads *panel_setup(const kn_im2col2d *g, int64_t col0, int64_t cols,
                                           int64_t kc, segs *s, tap_loads *table) {
    panel_segs(g, col0, cols, s);
    int64_t taps = g->kh * g->kw;
    if (taps > MAX_TAPS || kc < 2 * taps)
        return NULL;
    for (int64_t t = 0; t < taps; t++)
        tap_table(g, s, t / g->kw, t % g->kw, &table[t]);
    return table;
}

/* Panels of 32 columns from n0 (nc columns, the last panel zero past them) of rows [k0, k0 +
 * kc), one after another, float32 (kn_gemm_pack_fn). */
AVX512 static void pack(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                        float *dst) {
    tap_loads table[MAX_TAPS];
    for (int64_t p = 0; p * NR < nc; p++) {
        float *d = dst + p * kc * NR;
        segs s;
        int64_t cols = nc - p * NR < NR ? nc - p * NR : NR;
        const tap_loads *tab = panel_setup(g, n0 + p * NR, cols, kc, &s, table);
        walk w = walk_at(g, k0);
        for (int64_t r = 0; r < kc; r++) {
            __m512 v0, v1;
            next_row(g, &s, tab, &w, &v0, &v1);
            _mm512_storeu_ps(d + r * NR, v0);
            _mm512_storeu_ps(d + r * NR + 16, v1);
        }
    }
}

/* One panel (32 columns from n0, nc of them real) of rows [k0, k0 + kc) as bf16 pairs along K:
 * word j of pair row q holds rows k0 + 2q (low half) and k0 + 2q + 1 (high half, zero past
 * kc) of column j, zero past nc. k0 is even. */
AVX512 static void pairs(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                         uint32_t *dst) {
    tap_loads table[MAX_TAPS];
    segs s;
    const tap_loads *tab = panel_setup(g, n0, nc < NR ? nc : NR, kc, &s, table);
    walk w = walk_at(g, k0);
    for (int64_t q = 0; 2 * q < kc; q++) {
        __m512 a0, a1, b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
        next_row(g, &s, tab, &w, &a0, &a1);
        if (2 * q + 1 < kc)
            next_row(g, &s, tab, &w, &b0, &b1);
        __m512i lo0 = to_bf16(a0), lo1 = to_bf16(a1);
        __m512i hi0 = to_bf16(b0), hi1 = to_bf16(b1);
        _mm512_storeu_si512(dst + q * NR, _mm512_or_si512(lo0, _mm512_slli_epi32(hi0, 16)));
        _mm512_storeu_si512(dst + q * NR + 16, _mm512_or_si512(lo1, _mm512_slli_epi32(hi1, 16)));
    }
}

void kn_cpu_im2col_pack_avx512(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                               float *dst) {
    pack(g, k0, kc, n0, nc, dst);
}

void kn_cpu_im2col_pairs_avx512(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0,
                                int64_t nc, uint32_t *dst) {
    pairs(g, k0, kc, n0, nc, dst);
}

#else

void kn_cpu_im2col_pack_avx512(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                               float *dst) {
    (void)g;
    (void)k0;
    (void)kc;
    (void)n0;
    (void)nc;
    (void)dst;
}

void kn_cpu_im2col_pairs_avx512(const kn_im2col2d *g, int64_t k0, int64_t kc, int64_t n0,
                                int64_t nc, uint32_t *dst) {
    (void)g, (void)k0, (void)kc, (void)n0, (void)nc, (void)dst;
}

#endif
