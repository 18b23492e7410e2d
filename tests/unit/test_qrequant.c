/* The int8 convolution's requantization (backend/cpu/quantization/requant.h): the dispatched
 * form and the AVX-512 one against the reference, byte for byte. The channel scales are chosen
 * so that many quotients land exactly on, or a few ulps from, a half-integer (where the
 * roundings half to even must agree), and sums so large that the clamps at y's range take
 * part; row lengths cover the masked tail. */
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
#define LDC 80

typedef struct counts {
    long lanes, near; /* quotients checked; of them within 2^-12 of a half-integer */
} counts;

/* One block of ROWS rows of m pixels under q: the dispatched and AVX-512 forms against the
 * reference. Row j's scale puts r / ys (or r / cs) near acc / 2, so odd sums fall near .5. */
static void check_block(const kn_qrequant *q, int64_t m, int spread, counts *n) {
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
        e[i] = (int32_t)(next() % 41) - 20;
    for (int64_t i = 0; i < ROWS * LDC; i++) {
        /* acc - 128 e + corr spans the clamp edges: most within +-spread, some far beyond */
        int32_t v = (int32_t)(next() % (uint32_t)(2 * spread + 1)) - spread;
        if (next() % 16 == 0)
            v *= 1000;
        acc[i] = v;
        res[i] = (uint8_t)next();
    }
    for (int j = 0; j < ROWS; j++)
        for (int64_t i = 0; i < m; i++) {
            float r = (float)(acc[j * LDC + i] - 128 * e[i] + corr[j]) * sc[j] + b[j];
            float v = r / d;
            n->lanes++;
            if (fabsf(v) < 1000.0f && fabsf(fabsf(v - rintf(v)) - 0.5f) < 0x1p-12f)
                n->near++;
        }
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

/* y uint8 (zero point yz) or int8, with no activation, a Relu, or a Clip. */
static void set_y(kn_qrequant *q, float ys, bool y_signed, float yz, int act) {
    memset(q, 0, sizeof *q);
    q->ys = ys;
    q->yz = yz;
    q->qlo = (y_signed ? -128.0f : 0.0f) - yz;
    q->qhi = (y_signed ? 127.0f : 255.0f) - yz;
    q->lo = act == 0 ? -INFINITY : 0.0f;
    q->hi = act == 2 ? 6.0f : INFINITY;
}

static void test_plain(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 7, 15, 16, 17, 31, 32, 33, 49, 64, 80};
    static const float yss[] = {0.5f, 0.0235294f, 0.1f, 3.0f, 1e-3f, 0.0078125f};
    counts n = {0, 0};
    for (int it = 0; it < 40; it++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            kn_qrequant q;
            bool sgn = it % 2;
            float yz = sgn ? (float)((int)(next() % 21) - 10) : (float)(next() % 256);
            set_y(&q, yss[it % 6] * (0.5f + unit()), sgn, yz, it % 3);
            check_block(&q, ms[mi], it % 5 == 0 ? 20000 : 700, &n);
        }
    /* the boundary cases the test is built for did occur */
    assert_true(n.near > n.lanes / 50);
}

static void test_residual(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 9, 16, 23, 32, 47, 80};
    counts n = {0, 0};
    for (int it = 0; it < 60; it++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            kn_qrequant q;
            set_y(&q, 0.05f * (0.5f + unit()), it % 2, it % 2 ? 0.0f : (float)(next() % 256),
                  it % 3);
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
        for (int act = 0; act < 3; act++) {
            kn_qrequant q;
            set_y(&q, 0.25f, sgn, sgn ? 3.0f : 128.0f, act);
            enum { N = 2200 };
            static int32_t acc[N], e[N];
            static uint8_t want[N], got[N];
            float sc = 0.0625f, b = 0.0f; /* r / ys = s / 4: quarters, halves, integers */
            int32_t corr = 0;
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_exact_halves),
        cmocka_unit_test(test_extreme_scales),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
