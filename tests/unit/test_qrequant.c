/* The int8 convolution's requantization (backend/cpu/quantization/requant.h): the dispatched
 * form and the AVX-512 one against the reference, byte for byte. The channel scales are chosen
 * so that many quotients land exactly on, or a few ulps from, a half-integer (where the
 * roundings half to even must agree), and sums so large that the clamps at y's range take
 * part; row lengths cover the masked tails of 16 and of 64 pixels, activations' bounds inside,
 * across and outside y's range (the fast form's one clamp), odd and even zero points (its
 * rounding by one addition), and the pitched form's thrown-away columns at every place in its
 * 64-column steps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu/quantization/requant.h"

#include <math.h>
#include <string.h>

static uint32_t rng = 12345;

static uint32_t next(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

/* uniform in [0, 1) */
static float unit(void) {
    return (float)(next() & 0xFFFFFF) / 16777216.0f;
}

#define ROWS 24
#define LDC 160

typedef struct counts {
    long lanes, near; /* quotients checked; of them within 2^-12 of a half-integer */
} counts;

/* One block of ROWS rows of m pixels under q: the dispatched and AVX-512 forms against the
 * reference. Row j's scale puts r / ys (or r / cs) near acc / 2, so odd sums fall near .5. */
static void check_block(kn_qrequant *q, int64_t m, int spread, counts *n) {
    float sc[ROWS], b[ROWS];
    int32_t corr[ROWS], acc[ROWS * LDC], e[LDC];
    uint8_t res[ROWS * LDC], want[ROWS * LDC], got[ROWS * LDC];
    float d = q->residual ? q->cs : q->ys;
    for (int j = 0; j < ROWS; j++) {
        float half = d * 0.5f;
        switch (j % 4) {
        case 0:
            sc[j] = half;
            break;
        case 1:
            sc[j] = nextafterf(half, 0.0f);
            break;
        case 2:
            sc[j] = nextafterf(half, INFINITY);
            break;
        default:
            sc[j] = d * (0.01f + 2.0f * unit());
            break;
        }
        b[j] = (j % 8) < 4 ? 0.0f : d * (float)((int)(next() % 9) - 4) * 0.5f;
        corr[j] = (int32_t)(next() % 2001) - 1000;
    }
    for (int64_t i = 0; i < LDC; i++)
        e[i] = 128 * ((int32_t)(next() % 41) - 20);
    for (int64_t i = 0; i < ROWS * LDC; i++) {
        /* acc - e + corr spans the clamp edges: most within +-spread, some far beyond */
        int32_t v = (int32_t)(next() % (uint32_t)(2 * spread + 1)) - spread;
        if (next() % 16 == 0)
            v *= 1000;
        acc[i] = v;
        res[i] = (uint8_t)next();
    }
    for (int j = 0; j < ROWS; j++)
        for (int64_t i = 0; i < m; i++) {
            float r = (float)(acc[j * LDC + i] - e[i] + corr[j]) * sc[j] + b[j];
            float v = r / d;
            n->lanes++;
            if (fabsf(v) < 1000.0f && fabsf(fabsf(v - rintf(v)) - 0.5f) < 0x1p-12f)
                n->near++;
        }
    kn_qrequant_note_channels(q, sc, b, ROWS);
    memset(want, 0xAA, sizeof want);
    memset(got, 0x55, sizeof got);
    kn_qrequant_rows_ref(q, sc, b, corr, acc, LDC, e, res, m, ROWS, want, LDC);
    kn_qrequant_rows(q, sc, b, corr, acc, LDC, e, res, m, ROWS, got, LDC);
    for (int j = 0; j < ROWS; j++) {
        assert_memory_equal(want + j * LDC, got + j * LDC, (size_t)m);
        /* nothing past m written */
        for (int64_t i = m; i < LDC; i++)
            assert_int_equal(got[j * LDC + i], 0x55);
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (kn_qrequant_avx512_ok()) {
        memset(got, 0x55, sizeof got);
        kn_qrequant_rows_avx512(q, sc, b, corr, acc, LDC, e, res, m, ROWS, got, LDC);
        for (int j = 0; j < ROWS; j++) {
            assert_memory_equal(want + j * LDC, got + j * LDC, (size_t)m);
            for (int64_t i = m; i < LDC; i++)
                assert_int_equal(got[j * LDC + i], 0x55);
        }
    }
#endif
}

/* y uint8 (zero point yz) or int8, with no activation (act 0), a Relu (1), a Clip to [0, 6]
 * (2), or (3 to 6) a Clip whose bounds lie inside y's range, across its ends, below or above it
 * altogether, or reversed (min > max). */
static void set_y(kn_qrequant *q, float ys, bool y_signed, float yz, int act) {
    memset(q, 0, sizeof *q);
    q->ys = ys;
    q->yz = yz;
    q->qlo = (y_signed ? -128.0f : 0.0f) - yz;
    q->qhi = (y_signed ? 127.0f : 255.0f) - yz;
    q->lo = act == 0 ? -INFINITY : 0.0f;
    q->hi = act == 2 ? 6.0f : INFINITY;
    float lo = q->qlo * ys, hi = q->qhi * ys, w = hi - lo;
    switch (act) {
    case 3: /* inside, a few ulps from the half-integers of the quotient */
        q->lo = nextafterf(lo + w * 0.25f, INFINITY);
        q->hi = nextafterf(hi - w * 0.25f, -INFINITY);
        break;
    case 4: /* across both ends */
        q->lo = lo - w * 0.1f;
        q->hi = hi + w * 0.1f;
        break;
    case 5: /* below, then above */
        q->lo = lo - w;
        q->hi = lo - w * 0.5f;
        if (next() % 2) {
            q->lo = hi + w * 0.5f;
            q->hi = hi + w;
        }
        break;
    case 6: /* reversed: Clip gives max */
        q->lo = hi - w * 0.3f;
        q->hi = lo + w * 0.3f;
        break;
    default:
        break;
    }
}

static void test_plain(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 7, 15, 16, 17, 31, 32, 33, 49, 63, 64, 65, 80, 127, 128, 150};
    static const float yss[] = {0.5f, 0.0235294f, 0.1f, 3.0f, 1e-3f, 0.0078125f};
    counts n = {0, 0};
    for (int it = 0; it < 70; it++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            kn_qrequant q;
            bool sgn = it % 2;
            float yz = sgn ? (float)((int)(next() % 21) - 10) : (float)(next() % 256);
            set_y(&q, yss[it % 6] * (0.5f + unit()), sgn, yz, it % 7);
            check_block(&q, ms[mi], it % 5 == 0 ? 20000 : 700, &n);
        }
    /* the boundary cases the test is built for did occur */
    assert_true(n.near > n.lanes / 50);
}

static void test_residual(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 9, 16, 23, 32, 47, 64, 80, 129};
    counts n = {0, 0};
    for (int it = 0; it < 84; it++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            kn_qrequant q;
            set_y(&q, 0.05f * (0.5f + unit()), it % 2,
                  it % 2 ? (float)((int)(next() % 9) - 4) : (float)(next() % 256), it % 7);
            q.residual = true;
            q.cs = 0.03f * (0.5f + unit());
            bool c_signed = it % 4 < 2;
            float cz = c_signed ? (float)((int)(next() % 11) - 5) : (float)(next() % 256);
            q.cmin = (c_signed ? -128.0f : 0.0f) - cz;
            q.cmax = (c_signed ? 127.0f : 255.0f) - cz;
            q.rs = 0.04f * (0.5f + unit());
            q.rflip = it % 3 == 0 ? 0x80 : 0;
            q.rzu = (int32_t)(next() % 256);
            check_block(&q, ms[mi], it % 5 == 0 ? 20000 : 600, &n);
        }
    assert_true(n.near > n.lanes / 50);
}

/* Exact half-integers by a power-of-two scale, every value of the clamp's range and beyond. */
static void test_exact_halves(void **state) {
    (void)state;
    for (int sgn = 0; sgn < 2; sgn++)
        for (int act = 0; act < 7; act++) {
            kn_qrequant q;
            set_y(&q, 0.25f, sgn, sgn ? 3.0f : 128.0f, act);
            enum { N = 2200 };
            static int32_t acc[N], e[N];
            static uint8_t want[N], got[N];
            float sc = 0.0625f, b = 0.0f; /* r / ys = s / 4: quarters, halves, integers */
            int32_t corr = 0;
            kn_qrequant_note_channels(&q, &sc, &b, 1);
            for (int i = 0; i < N; i++) {
                acc[i] = i - N / 2;
                e[i] = 0;
            }
            kn_qrequant_rows_ref(&q, &sc, &b, &corr, acc, N, e, NULL, N, 1, want, N);
            kn_qrequant_rows(&q, &sc, &b, &corr, acc, N, e, NULL, N, 1, got, N);
            assert_memory_equal(want, got, N);
        }
}

/* Scales at the ends of float's range: quotients that overflow to infinity or lie far past the
 * clamps. */
static void test_extreme_scales(void **state) {
    (void)state;
    kn_qrequant q;
    counts n = {0, 0};
    set_y(&q, 3e-39f, false, 7.0f, 1);
    check_block(&q, 33, 5000, &n);
    set_y(&q, 1e30f, true, 0.0f, 0);
    check_block(&q, 33, 5000, &n);
}

/* The pitched form (columns c0 + i, pitch apart by rows of ow pixels) against the reference a
 * run at a time, over whole buffers: a kept byte moved by one place, or a thrown-away one
 * stored, fails. */
static void check_pitched(kn_qrequant *q, int64_t c0, int64_t m, int64_t pitch, int64_t ow,
                          float bad_bias) {
    enum { R = 7, LD = 720, PX = 1100 };
    static float sc[R], b[R];
    static int32_t corr[R], acc[R * LD], e[LD];
    static uint8_t res[R * PX], want[R * PX], got[R * PX];
    float d = q->residual ? q->cs : q->ys;
    for (int j = 0; j < R; j++) {
        sc[j] = j % 3 == 0 ? d * 0.5f : j % 3 == 1 ? nextafterf(d * 0.5f, 0.0f) : d * unit();
        b[j] = j == 4 ? bad_bias : d * (float)((int)(next() % 9) - 4) * 0.5f;
        corr[j] = (int32_t)(next() % 2001) - 1000;
    }
    for (int64_t i = 0; i < LD; i++)
        e[i] = 128 * ((int32_t)(next() % 41) - 20);
    for (int64_t i = 0; i < R * LD; i++)
        acc[i] = (int32_t)(next() % 3001) - 1500 + (next() % 32 == 0 ? 100000 : 0);
    for (int64_t i = 0; i < R * PX; i++)
        res[i] = (uint8_t)next();
    kn_qrequant_note_channels(q, sc, b, R);
    memset(want, 0x5A, sizeof want);
    memset(got, 0x5A, sizeof got);
    kn_qrequant_rows_pitched_ref(q, sc, b, corr, acc, LD, e, res, c0, m, pitch, ow, R, want, PX);
    kn_qrequant_rows_pitched(q, sc, b, corr, acc, LD, e, res, c0, m, pitch, ow, R, got, PX);
    assert_memory_equal(want, got, sizeof want);
#if defined(__x86_64__) && defined(__GNUC__)
    if (kn_qrequant_avx512_ok()) {
        memset(got, 0x5A, sizeof got);
        if (kn_qrequant_rows_pitched_avx512(q, sc, b, corr, acc, LD, e, res, c0, m, pitch, ow, R,
                                            got, PX))
            assert_memory_equal(want, got, sizeof want);
    }
#endif
}

static void test_pitched(void **state) {
    (void)state;
    /* 7x7, 14x14 and 56x56 maps with pads of 1; pads of 3; several pixels thrown away in one
     * vector; none; one kept column a row */
    static const int64_t geo[][2] = {{8, 7}, {15, 14}, {57, 56}, {10, 7},
                                     {4, 3}, {16, 16}, {17, 16}, {3, 1}};
    static const int64_t ms[] = {1, 13, 64, 65, 100, 210, 513, 650};
    for (size_t g = 0; g < sizeof geo / sizeof geo[0]; g++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (int it = 0; it < 4; it++) {
                int64_t pitch = geo[g][0], ow = geo[g][1];
                int64_t c0 = it == 0 ? 0 : it == 1 ? 3 * pitch : it == 2 ? 2 * pitch + ow - 1 : 37;
                kn_qrequant q;
                bool sgn = it % 2;
                set_y(&q, 0.03f * (0.5f + unit()), sgn,
                      sgn ? (float)((int)(next() % 9) - 4) : (float)(next() % 256),
                      (int)(next() % 7));
                check_pitched(&q, c0, ms[mi], pitch, ow, 0.0f);
                q.residual = true;
                q.cs = 0.02f * (0.5f + unit());
                q.cmin = -128.0f - 3.0f;
                q.cmax = 127.0f - 3.0f;
                q.rs = 0.04f * (0.5f + unit());
                q.rflip = it % 2 ? 0x80 : 0;
                q.rzu = (int32_t)(next() % 256);
                check_pitched(&q, c0, ms[mi], pitch, ow, 0.0f);
            }
}

/* Constants the fast form does not take (a NaN or infinite channel constant, a negative or
 * infinite scale): the reference's steps one by one, contiguous and pitched. */
static void test_generic(void **state) {
    (void)state;
    counts n = {0, 0};
    for (int it = 0; it < 8; it++) {
        kn_qrequant q;
        set_y(&q, it % 2 ? -0.05f : INFINITY, it % 4 < 2, 7.0f, it % 3);
        if (it % 4 == 3)
            q.ys = 0.05f;
        check_block(&q, 70, 700, &n);
        check_pitched(&q, 5, 130, 15, 14, it % 4 == 3 ? NAN : 0.0f);
        check_pitched(&q, 5, 130, 15, 14, INFINITY);
        q.residual = true;
        q.cs = 0.02f;
        q.cmin = -128.0f;
        q.cmax = 127.0f;
        q.rs = it % 4 == 3 ? INFINITY : 0.03f;
        q.rzu = 3;
        check_block(&q, 70, 700, &n);
        check_pitched(&q, 5, 130, 15, 14, 0.0f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_exact_halves), cmocka_unit_test(test_extreme_scales),
        cmocka_unit_test(test_pitched),      cmocka_unit_test(test_generic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
