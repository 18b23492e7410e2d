/* MaxPool, AveragePool and LpPool over 1 to 3 spatial dims (fewer dims are padded to three
 * with unit dims), and the global pools. Work is split over the N*C planes; each window's
 * valid tap range is computed up front so the tap loops carry no bounds checks.
 *
 * Max pools propagate NaN as PyTorch's max_pool2d and numpy's max do: an output is NaN when any
 * input tap of its window is NaN (pads are -Inf, never NaN), and its index is the first NaN's.
 * The vector paths keep their max (v > m ? v : m, vmaxps), which drops a NaN in one operand, and
 * test each input value once for NaN on loads the max makes anyway (a compare per value, not per
 * tap; a separate scan of the input cost a quarter of ResNet-50's stem pool). Where one is found,
 * the output rows whose windows reach it are pooled again by the window walk (win_max, which
 * returns a window's first NaN), and a small same-size plane by its two passes with a max that
 * keeps NaN. */
#include "backend/cpu/nn/pool_nhwc.h"
#include "backend/cpu/reduction/reduce_impl.h"
#include "core/alloc.h"
#include "ops/nn/pool.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { POOL_MAX, POOL_AVG, POOL_LP };

typedef struct tap_range {
    int64_t start, j0, j1, jinc; /* taps [j0, j1) are inside; [0, jinc) count with pads */
} tap_range;

typedef struct pool_args {
    int kind;
    int nsp; /* real spatial dims: the last nsp of (Z, Y, X) */
    bool include_pad;
    int64_t storage_order;
    double p;
    /* geometry as (Z, Y, X) */
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
    int64_t in_plane, out_plane;
    const float *x;
    float *y;
    const void *xb; /* 8-bit integer planes (pool2d_max_u8, _s8) */
    void *yb;
    int64_t *ind;
    const tap_range *taps[3]; /* per output index of each dim */
    /* 2-D path: per output column the taps its average divides by (with or without pads), and
     * whether any column's window misses the input (such outputs are 0). */
    const float *col_div;
    bool empty_col;
} pool_args;

static tap_range taps(const pool_args *a, int dim, int64_t o) {
    tap_range t;
    int64_t d = a->d[dim], in = a->in[dim], k = a->k[dim];
    t.start = o * a->s[dim] - a->pb[dim];
    t.j0 = t.start >= 0 ? 0 : (-t.start + d - 1) / d;
    int64_t lim = in - t.start, limp = in + a->pe[dim] - t.start;
    t.j1 = lim <= 0 ? 0 : (lim + d - 1) / d;
    t.j1 = t.j1 < k ? t.j1 : k;
    t.jinc = limp <= 0 ? 0 : (limp + d - 1) / d;
    t.jinc = t.jinc < k ? t.jinc : k;
    return t;
}

static int64_t spatial_index(const pool_args *a, int64_t z, int64_t y, int64_t x) {
    if (a->storage_order == 0)
        return (z * a->in[1] + y) * a->in[2] + x;
    int64_t idx[3] = {z, y, x}, r = 0, m = 1;
    for (int i = 3 - a->nsp; i < 3; i++) {
        r += idx[i] * m;
        m *= a->in[i];
    }
    return r;
}

/* The window's maximum, or its first NaN; 0 when the window holds no input. */
static float win_max(const pool_args *a, const float *x, const tap_range *t) {
    float m = -INFINITY;
    bool any = false;
    int64_t dx = a->d[2];
    for (int64_t jz = t[0].j0; jz < t[0].j1; jz++) {
        int64_t pz = t[0].start + jz * a->d[0];
        for (int64_t jy = t[1].j0; jy < t[1].j1; jy++) {
            const float *row =
                x + (pz * a->in[1] + t[1].start + jy * a->d[1]) * a->in[2] + t[2].start;
            for (int64_t jx = t[2].j0; jx < t[2].j1; jx++) {
                float v = row[jx * dx];
                if (v != v)
                    return v;
                m = v > m ? v : m;
            }
            any = any || t[2].j1 > t[2].j0;
        }
    }
    return any ? m : 0;
}

/* Max with the position of its first occurrence, or the first NaN and its position; -1 when the
 * window holds no input. */
static float win_argmax(const pool_args *a, const float *x, const tap_range *t, int64_t *best) {
    float m = 0;
    *best = -1;
    for (int64_t jz = t[0].j0; jz < t[0].j1; jz++) {
        int64_t pz = t[0].start + jz * a->d[0];
        for (int64_t jy = t[1].j0; jy < t[1].j1; jy++) {
            int64_t py = t[1].start + jy * a->d[1];
            const float *row = x + (pz * a->in[1] + py) * a->in[2];
            for (int64_t jx = t[2].j0; jx < t[2].j1; jx++) {
                int64_t px = t[2].start + jx * a->d[2];
                float v = row[px];
                if (*best < 0 || v > m || v != v) {
                    m = v;
                    *best = spatial_index(a, pz, py, px);
                    if (v != v)
                        return m;
                }
            }
        }
    }
    return m;
}

/* Average over the window; the divisor counts pads too with count_include_pad. */
static float win_avg(const pool_args *a, const float *x, const tap_range *t) {
    float acc = 0;
    int64_t dx = a->d[2];
    for (int64_t jz = t[0].j0; jz < t[0].j1; jz++) {
        int64_t pz = t[0].start + jz * a->d[0];
        for (int64_t jy = t[1].j0; jy < t[1].j1; jy++) {
            const float *row =
                x + (pz * a->in[1] + t[1].start + jy * a->d[1]) * a->in[2] + t[2].start;
            for (int64_t jx = t[2].j0; jx < t[2].j1; jx++)
                acc += row[jx * dx];
        }
    }
    int64_t div = a->include_pad ? t[0].jinc * t[1].jinc * t[2].jinc
                                 : (t[0].j1 - t[0].j0) * (t[1].j1 - t[1].j0) * (t[2].j1 - t[2].j0);
    return div > 0 ? acc / (float)div : 0;
}

/* (sum of |v|^p over the window's inputs)^(1/p): pads contribute nothing. */
static float win_lp(const pool_args *a, const float *x, const tap_range *t) {
    double acc = 0;
    int64_t dx = a->d[2];
    for (int64_t jz = t[0].j0; jz < t[0].j1; jz++) {
        int64_t pz = t[0].start + jz * a->d[0];
        for (int64_t jy = t[1].j0; jy < t[1].j1; jy++) {
            const float *row =
                x + (pz * a->in[1] + t[1].start + jy * a->d[1]) * a->in[2] + t[2].start;
            for (int64_t jx = t[2].j0; jx < t[2].j1; jx++)
                acc += a->p == 2 ? (double)row[jx * dx] * row[jx * dx]
                                 : pow(fabs((double)row[jx * dx]), a->p);
        }
    }
    return (float)(a->p == 2 ? sqrt(acc) : pow(acc, 1.0 / a->p));
}

KN_CLONES static void pool_planes(void *arg, int64_t begin, int64_t end) {
    const pool_args *a = arg;
    for (int64_t u = begin; u < end; u++) {
        const float *x = a->x + u * a->in_plane;
        float *y = a->y + u * a->out_plane;
        int64_t *ind = a->ind ? a->ind + u * a->out_plane : NULL;
        tap_range t[3];
        int64_t o = 0;
        for (int64_t oz = 0; oz < a->out[0]; oz++) {
            t[0] = a->taps[0][oz];
            for (int64_t oy = 0; oy < a->out[1]; oy++) {
                t[1] = a->taps[1][oy];
                for (int64_t ox = 0; ox < a->out[2]; ox++, o++) {
                    t[2] = a->taps[2][ox];
                    int64_t best;
                    if (a->kind == POOL_MAX && ind == NULL) {
                        y[o] = win_max(a, x, t);
                    } else if (a->kind == POOL_MAX) {
                        y[o] = win_argmax(a, x, t, &best);
                        ind[o] = best < 0 ? -1 : u * a->in_plane + best;
                    } else if (a->kind == POOL_AVG) {
                        y[o] = win_avg(a, x, t);
                    } else {
                        y[o] = win_lp(a, x, t);
                    }
                }
            }
        }
    }
}

/* 2-D max or average pooling without dilation or indices, the shape CNNs use. Both reductions
 * are separable: per output row, the input rows its window covers are reduced into one padded
 * row (contiguous vector loops over the full width), and that row along X, k_y + k_x steps per
 * output instead of k_x * k_y. A window walk per output stayed scalar on short rows and stride
 * 2 (0.54 ms for ResNet-50's stem pool, 0.14 ms for YOLO's 5x5 SPPF pool). */
#define KN_POOL_ROW_MAX 4096

static bool pool2d_fast(const pool_args *a) {
    int64_t ow = a->out[2], s = a->s[2], kx = a->k[2];
    int64_t len = (ow - 1) * s + kx, w = a->in[2] + a->pb[2];
    return (a->kind == POOL_MAX || a->kind == POOL_AVG) && a->ind == NULL && a->nsp == 2 &&
           a->d[1] == 1 && a->d[2] == 1 && kx <= 64 && (len > w ? len : w) <= KN_POOL_ROW_MAX;
}

/* y[ox] = reduction over KX taps of buf[ox * S + jx]; literal S and KX let GCC unroll the taps
 * and vectorize along the row. */
#define POOL_X_FIXED(S, KX)                                                                        \
    for (int64_t ox = 0; ox < ow; ox++) {                                                          \
        float m = buf[ox * (S)];                                                                   \
        _Pragma("GCC unroll 8") for (int jx = 1; jx < (KX); jx++) {                                \
            float v = buf[ox * (S) + jx];                                                          \
            m = is_max ? (v > m ? v : m) : m + v;                                                  \
        }                                                                                          \
        y[ox] = m;                                                                                 \
    }

KN_CLONES static void pool_row_x(const float *buf, int64_t s, int64_t kx, int64_t ow, bool is_max,
                                 float *y) {
    if (s == 1 && kx == 3) {
        POOL_X_FIXED(1, 3)
    } else if (s == 1 && kx == 5) {
        POOL_X_FIXED(1, 5)
    } else if (s == 2 && kx == 3) {
        POOL_X_FIXED(2, 3)
    } else if (s == 2 && kx == 2) {
        POOL_X_FIXED(2, 2)
    } else {
        for (int64_t ox = 0; ox < ow; ox++)
            y[ox] = buf[ox * s];
        for (int64_t jx = 1; jx < kx; jx++)
            if (is_max)
                for (int64_t ox = 0; ox < ow; ox++)
                    y[ox] = buf[ox * s + jx] > y[ox] ? buf[ox * s + jx] : y[ox];
            else
                for (int64_t ox = 0; ox < ow; ox++)
                    y[ox] += buf[ox * s + jx];
    }
}

/* row = the sum of `rows` input rows from x0 on (pitch W) over n columns. */
static inline __attribute__((always_inline)) void sum_rows(const float *x0, int64_t W, int64_t rows,
                                                           int64_t n, float *row) {
    if (rows == 3) {
        /* a 3-row window (the common 3x3 pools) in one pass: a copy and two passes over the row
         * buffer were three quarters of ResNet-50's MaxPool */
        for (int64_t i = 0; i < n; i++)
            row[i] = x0[i] + x0[W + i] + x0[2 * W + i];
        return;
    }
    memcpy(row, x0, (size_t)n * sizeof *row);
    for (int64_t r = 1; r < rows; r++)
        for (int64_t i = 0; i < n; i++)
            row[i] += x0[r * W + i];
}

/* row = the max of input rows [r0, r1) over n columns, in one pass for 2 and 3 rows. Returns
 * whether a NaN (which the max may drop) is among the rows from *next on, which no earlier
 * window of the plane read, and moves *next to r1: windows move down the plane, so each row is
 * tested once, on the loads of the max. */
static inline __attribute__((always_inline)) int
max_rows(const float *x, int64_t W, int64_t r0, int64_t r1, int64_t n, int64_t *next, float *row) {
    const float *x0 = x + r0 * W;
    int64_t seen = *next; /* rows before it are tested */
    int nan = 0;
    *next = r1;
    if (r1 - r0 == 3) {
        const float *x1 = x0 + W, *x2 = x1 + W;
        if (r0 >= seen)
            for (int64_t i = 0; i < n; i++) {
                float m = x1[i] > x0[i] ? x1[i] : x0[i];
                row[i] = x2[i] > m ? x2[i] : m;
                nan |= __builtin_isunordered(x0[i], x1[i]) | __builtin_isunordered(x2[i], x2[i]);
            }
        else
            for (int64_t i = 0; i < n; i++) {
                float m = x1[i] > x0[i] ? x1[i] : x0[i];
                row[i] = x2[i] > m ? x2[i] : m;
                nan |= __builtin_isunordered(x1[i], x2[i]);
            }
    } else if (r1 - r0 == 2) {
        const float *x1 = x0 + W;
        for (int64_t i = 0; i < n; i++) {
            row[i] = x1[i] > x0[i] ? x1[i] : x0[i];
            nan |= __builtin_isunordered(x0[i], x1[i]);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            row[i] = x0[i];
            nan |= x0[i] != x0[i];
        }
        for (int64_t r = r0 + 1; r < r1; r++) {
            const float *xr = x + r * W;
            if (r < seen)
                for (int64_t i = 0; i < n; i++)
                    row[i] = xr[i] > row[i] ? xr[i] : row[i];
            else
                for (int64_t i = 0; i < n; i++) {
                    row[i] = xr[i] > row[i] ? xr[i] : row[i];
                    nan |= xr[i] != xr[i];
                }
        }
    }
    return nan;
}

/* Whether output rows oy and oy + 1 each take 3 input rows, the second two rows below the first
 * (3x3 pools of stride 2). */
static bool three_rows_pair(const pool_args *a, int64_t oy) {
    const tap_range *t = &a->taps[1][oy];
    return oy + 1 < a->out[1] && t[0].j1 - t[0].j0 == 3 && t[1].j1 - t[1].j0 == 3 &&
           t[1].start + t[1].j0 == t[0].start + t[0].j0 + 2;
}

/* max_rows for two such windows, rows x0 to x0 + 4W, in one pass that reads the shared row once:
 * the NaN test made ResNet-50's stem pool 3-4 % slower a window at a time, in pairs it is 1-4 %
 * faster than it was without the test. Row 0 was the last row of the window before, so rows 1
 * to 4 are tested. */
static inline __attribute__((always_inline)) int max_rows_pair(const float *x0, int64_t W,
                                                               int64_t n, float *row, float *row2) {
    const float *x1 = x0 + W, *x2 = x1 + W, *x3 = x2 + W, *x4 = x3 + W;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        float m = x1[i] > x0[i] ? x1[i] : x0[i], m2 = x3[i] > x2[i] ? x3[i] : x2[i];
        row[i] = x2[i] > m ? x2[i] : m;
        row2[i] = x4[i] > m2 ? x4[i] : m2;
        nan |= __builtin_isunordered(x1[i], x2[i]) | __builtin_isunordered(x3[i], x4[i]);
    }
    return nan;
}

/* Output row oy of a 2-D max pool over plane x, window by window (win_max, exact with NaN): the
 * rows whose windows reach input rows where a NaN was found. */
static void walk_row(const pool_args *a, const float *x, int64_t oy, float *yr) {
    tap_range t[3] = {a->taps[0][0], a->taps[1][oy], {0}};
    for (int64_t ox = 0; ox < a->out[2]; ox++) {
        t[2] = a->taps[2][ox];
        yr[ox] = win_max(a, x, t);
    }
}

KN_CLONES static void pool2d_planes(void *arg, int64_t begin, int64_t end) {
    const pool_args *a = arg;
    int64_t W = a->in[2], OH = a->out[1], OW = a->out[2], s = a->s[2], pb = a->pb[2];
    int64_t kx = a->k[2], len = (OW - 1) * s + kx;
    bool is_max = a->kind == POOL_MAX;
    /* Reduced rows (two for max_rows_pair) with their padding (the reduction's identity) on both
     * sides, so no tap needs a bounds check. */
    float buf[KN_POOL_ROW_MAX], buf2[KN_POOL_ROW_MAX];
    float pad = is_max ? -INFINITY : 0.0f;
    int64_t lead = pb < len ? pb : len, body = len - lead < W ? len - lead : W;
    for (int64_t i = 0; i < lead; i++)
        buf[i] = buf2[i] = pad;
    for (int64_t i = lead + body; i < len; i++)
        buf[i] = buf2[i] = pad;
    float *row = buf + lead;
    for (int64_t u = begin; u < end; u++) {
        const float *x = a->x + u * a->in_plane;
        float *y = a->y + u * a->out_plane;
        int64_t next = 0;    /* the first row no window has read yet */
        int64_t tainted = 0; /* rows before it may hold a NaN: a test found one there */
        for (int64_t oy = 0; oy < OH; oy++) {
            const tap_range *ty = &a->taps[1][oy];
            int64_t r0 = ty->start + ty->j0, r1 = ty->start + ty->j1;
            float *yr = y + oy * OW;
            if (r1 <= r0) {
                for (int64_t ox = 0; ox < OW; ox++)
                    yr[ox] = 0.0f;
                continue;
            }
            if (is_max && !a->empty_col && r0 < next && three_rows_pair(a, oy)) {
                if (max_rows_pair(x + r0 * W, W, body, row, buf2 + lead))
                    tainted = r0 + 5;
                next = r0 + 5;
                if (r0 < tainted)
                    walk_row(a, x, oy, yr);
                else
                    pool_row_x(buf, s, kx, OW, true, yr);
                if (r0 + 2 < tainted)
                    walk_row(a, x, oy + 1, yr + OW);
                else
                    pool_row_x(buf2, s, kx, OW, true, yr + OW);
                oy++;
                continue;
            }
            if (!is_max)
                sum_rows(x + r0 * W, W, r1 - r0, body, row);
            else if (max_rows(x, W, r0, r1, body, &next, row))
                tainted = r1;
            if (is_max && r0 < tainted) {
                walk_row(a, x, oy, yr);
                continue;
            }
            pool_row_x(buf, s, kx, OW, is_max, yr);
            /* Windows with no input give 0; averages divide by the taps counted. */
            if (!is_max) {
                float rdiv = (float)(a->include_pad ? ty->jinc : r1 - r0);
                for (int64_t ox = 0; ox < OW; ox++) {
                    float div = rdiv * a->col_div[ox];
                    yr[ox] = div > 0.0f ? yr[ox] / div : 0.0f;
                }
            } else if (a->empty_col) {
                for (int64_t ox = 0; ox < OW; ox++)
                    yr[ox] = a->taps[2][ox].j1 > a->taps[2][ox].j0 ? yr[ox] : 0.0f;
            }
        }
    }
}

/* Small planes pooled by stride-1 max windows that keep the size (k x k, k / 2 padding: YOLO's
 * SPPF, 5x5 at 20x20 and 10x10): the plane is copied once into a buffer framed by k / 2 rows
 * and columns of -Inf, then reduced down the columns and along the rows as two passes over the
 * whole framed plane, each a flat loop of a few hundred floats. Row by row (pool2d_planes), the
 * loops ran over 10 or 20 floats at a time and this pool took three times onnxruntime's. */
#define KN_POOL_SAME_MAX 4096

static bool pool2d_same_max(const pool_args *a) {
    int64_t k = a->k[2], h = a->in[1] + k - 1, p = a->in[2] + k - 1;
    return a->kind == POOL_MAX && a->ind == NULL && a->nsp == 2 && k == a->k[1] &&
           (k == 3 || k == 5 || k == 7) && a->s[1] == 1 && a->s[2] == 1 && a->d[1] == 1 &&
           a->d[2] == 1 && a->pb[1] == k / 2 && a->pe[1] == k / 2 && a->pb[2] == k / 2 &&
           a->pe[2] == k / 2 && h * p <= KN_POOL_SAME_MAX;
}

/* m's next value for tap v: the larger of the two; NAN_STEP also takes a NaN either holds. */
#define MAX_STEP(v, m) ((v) > (m) ? (v) : (m))
#define NAN_STEP(v, m) ((v) > (m) || (v) != (v) ? (v) : (m))

/* col[i] = max over K rows of buf from i down (row pitch P), then y's row oy = max over K
 * columns of col's row, each tap a STEP; literal K unrolls the taps so both loops vectorize.
 * With TEST, the middle tap, which runs over exactly the plane's rows, is tested for NaN, and
 * one found sets nan and skips the row pass. */
#define SAME_MAX_FIXED(K, STEP, TEST)                                                              \
    do {                                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                          \
            float m = buf[i], mid = buf[i + (K) / 2 * p];                                          \
            _Pragma("GCC unroll 8") for (int j = 1; j < (K); j++) m = STEP(buf[i + j * p], m);     \
            col[i] = m;                                                                            \
            nan |= (TEST) && mid != mid;                                                           \
        }                                                                                          \
        if ((TEST) && nan)                                                                         \
            break;                                                                                 \
        for (int64_t oy = 0; oy < H; oy++) {                                                       \
            const float *c = col + oy * p;                                                         \
            float *yr = y + oy * W;                                                                \
            for (int64_t ox = 0; ox < W; ox++) {                                                   \
                float m = c[ox];                                                                   \
                _Pragma("GCC unroll 8") for (int j = 1; j < (K); j++) m = STEP(c[ox + j], m);      \
                yr[ox] = m;                                                                        \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* SAME_MAX_FIXED for the plane's k (3, 5 or 7: pool2d_same_max), each a literal K. */
#define SAME_MAX_BY_K(STEP, TEST)                                                                  \
    do {                                                                                           \
        if (k == 3)                                                                                \
            SAME_MAX_FIXED(3, STEP, TEST);                                                         \
        else if (k == 5)                                                                           \
            SAME_MAX_FIXED(5, STEP, TEST);                                                         \
        else                                                                                       \
            SAME_MAX_FIXED(7, STEP, TEST);                                                         \
    } while (0)

/* dst[0, n) = src[0, n) in runs of 8 floats, the last run overlapping the one before: a memcpy
 * call per row of 10 or 20 floats cost more than the copy. */
static inline __attribute__((always_inline)) void copy_row(float *dst, const float *src,
                                                           int64_t n) {
    if (n < 8) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = src[i];
        return;
    }
    for (int64_t c = 0;; c += 8) {
        c = c < n - 8 ? c : n - 8;
        memcpy(dst + c, src + c, 8 * sizeof *src);
        if (c == n - 8)
            return;
    }
}

KN_CLONES static void pool2d_same_max_planes(void *arg, int64_t begin, int64_t end) {
    const pool_args *a = arg;
    int64_t H = a->in[1], W = a->in[2], k = a->k[2], r = k / 2, p = W + k - 1, n = H * p;
    float buf[KN_POOL_SAME_MAX], col[KN_POOL_SAME_MAX];
    for (int64_t i = 0; i < (H + k - 1) * p; i++)
        buf[i] = -INFINITY;
    for (int64_t u = begin; u < end; u++) {
        const float *x = a->x + u * a->in_plane;
        float *y = a->y + u * a->out_plane;
        int nan = 0;
        for (int64_t oy = 0; oy < H; oy++)
            copy_row(buf + (oy + r) * p + r, x + oy * W, W);
        SAME_MAX_BY_K(MAX_STEP, 1);
        if (!nan)
            continue;
        /* a NaN in the plane: both passes again with the max that keeps NaN, a compare more a
         * tap */
        SAME_MAX_BY_K(NAN_STEP, 0);
    }
}

/* y[ox] = max(buf[2 ox], buf[2 ox + 1], buf[2 ox + 2]) over bytes, buf holding one byte more
 * than the windows read; flip 0x80 orders int8 as uint8. The pairs are read as 16-bit words
 * (even byte low, odd byte high), so the loop is contiguous and vectorizes. */
KN_CLONES static void max_s2k3_bytes(const uint8_t *buf, int64_t ow, uint8_t flip, uint8_t *y) {
    for (int64_t ox = 0; ox < ow; ox++) {
        uint16_t w0, w1;
        memcpy(&w0, buf + 2 * ox, 2);
        memcpy(&w1, buf + 2 * ox + 2, 2);
        uint8_t a = (uint8_t)((w0 & 0xff) ^ flip), b = (uint8_t)((w0 >> 8) ^ flip),
                c = (uint8_t)((w1 & 0xff) ^ flip);
        uint8_t m = a > b ? a : b;
        y[ox] = (uint8_t)((c > m ? c : m) ^ flip);
    }
}

/* pool2d_planes' max for 8-bit integers (a QDQ model's MaxPool between int8 layers, elided to
 * run on the quantized tensor, kn_pass_elide_qdq): the same separable walk on bytes, padding
 * the type's least value, windows with no input 0. Float32 staging of the plane cost 20 times
 * the pool itself. */
#define POOL2D_MAX_BYTES(NAME, T, LEAST, FLIP)                                                     \
    KN_CLONES static void NAME(void *arg, int64_t begin, int64_t end) {                            \
        const pool_args *a = arg;                                                                  \
        int64_t W = a->in[2], OH = a->out[1], OW = a->out[2], s = a->s[2], pb = a->pb[2];          \
        int64_t kx = a->k[2], len = (OW - 1) * s + kx;                                             \
        T buf[KN_POOL_ROW_MAX + 1];                                                                \
        int64_t lead = pb < len ? pb : len, body = len - lead < W ? len - lead : W;                \
        for (int64_t i = 0; i < lead; i++)                                                         \
            buf[i] = (LEAST);                                                                      \
        for (int64_t i = lead + body; i <= len; i++)                                               \
            buf[i] = (LEAST);                                                                      \
        T *row = buf + lead;                                                                       \
        for (int64_t u = begin; u < end; u++) {                                                    \
            const T *x = (const T *)a->xb + u * a->in_plane;                                       \
            T *y = (T *)a->yb + u * a->out_plane;                                                  \
            for (int64_t oy = 0; oy < OH; oy++) {                                                  \
                const tap_range *ty = &a->taps[1][oy];                                             \
                int64_t r0 = ty->start + ty->j0, r1 = ty->start + ty->j1;                          \
                T *yr = y + oy * OW;                                                               \
                if (r1 <= r0) {                                                                    \
                    memset(yr, 0, (size_t)OW);                                                     \
                    continue;                                                                      \
                }                                                                                  \
                memcpy(row, x + r0 * W, (size_t)body);                                             \
                for (int64_t r = r0 + 1; r < r1; r++) {                                            \
                    const T *xr = x + r * W;                                                       \
                    for (int64_t i = 0; i < body; i++)                                             \
                        row[i] = xr[i] > row[i] ? xr[i] : row[i];                                  \
                }                                                                                  \
                if (s == 2 && kx == 3)                                                             \
                    max_s2k3_bytes((const uint8_t *)buf, OW, (FLIP), (uint8_t *)yr);               \
                else                                                                               \
                    for (int64_t ox = 0; ox < OW; ox++) {                                          \
                        T m = buf[ox * s];                                                         \
                        for (int64_t jx = 1; jx < kx; jx++)                                        \
                            m = buf[ox * s + jx] > m ? buf[ox * s + jx] : m;                       \
                        yr[ox] = m;                                                                \
                    }                                                                              \
                if (a->empty_col)                                                                  \
                    for (int64_t ox = 0; ox < OW; ox++)                                            \
                        yr[ox] = a->taps[2][ox].j1 > a->taps[2][ox].j0 ? yr[ox] : 0;               \
            }                                                                                      \
        }                                                                                          \
    }

POOL2D_MAX_BYTES(pool2d_max_u8, uint8_t, 0, 0)
POOL2D_MAX_BYTES(pool2d_max_s8, int8_t, INT8_MIN, 0x80)

static void pool_args_init(pool_args *a, const kn_pool_geom *g) {
    int off = 3 - g->nsp;
    for (int i = 0; i < 3; i++) {
        a->in[i] = a->out[i] = a->k[i] = a->s[i] = a->d[i] = 1;
        a->pb[i] = a->pe[i] = 0;
    }
    for (int i = 0; i < g->nsp; i++) {
        a->in[off + i] = g->in[i];
        a->out[off + i] = g->out[i];
        a->k[off + i] = g->k[i];
        a->s[off + i] = g->s[i];
        a->d[off + i] = g->d[i];
        a->pb[off + i] = g->pb[i];
        a->pe[off + i] = g->pe[i];
    }
    a->in_plane = a->in[0] * a->in[1] * a->in[2];
    a->out_plane = a->out[0] * a->out[1] * a->out[2];
    a->nsp = g->nsp;
    a->include_pad = g->count_include_pad;
    a->storage_order = g->storage_order;
    a->p = g->p;
}

static int64_t plane_grain(int64_t work) {
    return work >= 16384 ? 1 : 16384 / (work > 0 ? work : 1);
}

kiln_status kn_cpu_cpu_pool_window(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_pool_geom g;
    KN_TRY(kn_pool_geom_read(k->node, &x->shape, &g));
    if (kn_node_attr(k->node, "kiln_nhwc") != NULL)
        return kn_cpu_maxpool_nhwc_bf16(k, &g);
    pool_args a = {0};
    const char *op = k->node->op_type;
    a.kind = strcmp(op, "MaxPool") == 0 ? POOL_MAX : strcmp(op, "LpPool") == 0 ? POOL_LP : POOL_AVG;
    pool_args_init(&a, &g);
    int64_t planes = x->shape.d[0] * x->shape.d[1];
    if (planes == 0 || a.out_plane == 0)
        return KILN_OK;
    a.ind = k->n_out > 1 && k->node->out[1] >= 0 ? k->out[1].data : NULL;
    tap_range *tr = kn_malloc((size_t)(a.out[0] + a.out[1] + a.out[2]) * sizeof *tr);
    float *col_div = kn_malloc((size_t)a.out[2] * sizeof *col_div);
    if (tr == NULL || col_div == NULL) {
        kn_free(tr);
        kn_free(col_div);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for pooling windows");
    }
    int64_t at = 0;
    for (int dim = 0; dim < 3; dim++) {
        a.taps[dim] = tr + at;
        for (int64_t o = 0; o < a.out[dim]; o++)
            tr[at + o] = taps(&a, dim, o);
        at += a.out[dim];
    }
    for (int64_t o = 0; o < a.out[2]; o++) {
        const tap_range *t = &a.taps[2][o];
        col_div[o] = (float)(a.include_pad ? t->jinc : t->j1 - t->j0);
        a.empty_col = a.empty_col || t->j1 <= t->j0;
    }
    a.col_div = col_div;
    bool bytes = x->dtype == KILN_DTYPE_UINT8 || x->dtype == KILN_DTYPE_INT8;
    if (bytes && a.kind == POOL_MAX && pool2d_fast(&a)) {
        a.xb = x->data;
        a.yb = k->out[0].data;
        kn_parallel_for(k->pool, planes, plane_grain(a.out_plane * a.k[1] * a.k[2] / 4),
                        x->dtype == KILN_DTYPE_UINT8 ? pool2d_max_u8 : pool2d_max_s8, &a);
        kn_free(tr);
        kn_free(col_div);
        return KILN_OK;
    }
    kn_cpu_f32 xv = {0}, yv = {0};
    kiln_status rc = kn_cpu_f32_in(x, &xv);
    if (rc == KILN_OK)
        rc = kn_cpu_f32_out(&k->out[0], &yv);
    if (rc == KILN_OK) {
        a.x = xv.p;
        a.y = yv.p;
        int64_t work = a.out_plane; /* saturating: padding allows windows of 2^40 per dim */
        for (int d = 0; d < 3; d++)
            work = work > INT64_MAX / a.k[d] ? INT64_MAX : work * a.k[d];
        kn_parallel_for(k->pool, planes, plane_grain(work),
                        pool2d_same_max(&a) ? pool2d_same_max_planes
                        : pool2d_fast(&a)   ? pool2d_planes
                                            : pool_planes,
                        &a);
        kn_cpu_f32_commit(&k->out[0], &yv);
    }
    kn_cpu_f32_release(&yv);
    kn_cpu_f32_release(&xv);
    kn_free(tr);
    kn_free(col_div);
    return rc;
}

typedef struct global_args {
    int kind;
    double p;
    int64_t plane;
    const float *x;
    float *y;
} global_args;

/* Sums in double, eight partial sums (one vector of doubles) on small planes. */
static inline __attribute__((always_inline)) double sum_narrow(const float *x, int64_t n) {
    double s[8] = {0}, acc = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += x[i + j];
    for (; i < n; i++)
        acc += x[i];
    for (int j = 0; j < 8; j++)
        acc += s[j];
    return acc;
}

/* Large planes: 32 partial sums, four vectors of doubles; one vector's add chain held them to
 * one add per latency (32ch 112x112 in EfficientNet-B0: 0.037 -> 0.023 ms). On 7x7 planes the
 * longer remainder loses (1152ch: 0.007 -> 0.017 ms), hence the two forms. */
static inline __attribute__((always_inline)) double sum_wide(const float *x, int64_t n) {
    double s[32] = {0};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 32; j++)
            s[j] += x[i + j];
    double acc = sum_narrow(x + i, n - i);
    for (int j = 0; j < 32; j++)
        acc += s[j];
    return acc;
}

/* The largest of n values, or the first NaN among them; 0 when n is 0. 32 running maxima and
 * NaN tests (two vectors of each) vectorize, where one max chain waited on every compare. */
static inline __attribute__((always_inline)) float plane_max(const float *x, int64_t n) {
    float m[32];
    int32_t nan[32];
    for (int j = 0; j < 32; j++) {
        m[j] = -INFINITY;
        nan[j] = 0;
    }
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 32; j++) {
            m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
            nan[j] |= x[i + j] != x[i + j];
        }
    float r = -INFINITY;
    int any = 0;
    for (int j = 0; j < 32; j++) {
        r = m[j] > r ? m[j] : r;
        any |= nan[j];
    }
    for (; i < n; i++) {
        r = x[i] > r ? x[i] : r;
        any |= x[i] != x[i];
    }
    for (i = 0; any && i < n; i++)
        if (x[i] != x[i])
            return x[i];
    return n > 0 ? r : 0;
}

KN_CLONES static void global_planes(void *arg, int64_t begin, int64_t end) {
    const global_args *a = arg;
    for (int64_t u = begin; u < end; u++) {
        const float *x = a->x + u * a->plane;
        double acc = 0;
        if (a->kind == POOL_MAX) {
            acc = plane_max(x, a->plane);
        } else if (a->kind == POOL_AVG) {
            acc = a->plane >= 256 ? sum_wide(x, a->plane) : sum_narrow(x, a->plane);
            acc /= (double)a->plane;
        } else {
            for (int64_t i = 0; i < a->plane; i++)
                acc += pow(fabs((double)x[i]), a->p);
            acc = pow(acc, 1.0 / a->p);
        }
        a->y[u] = (float)acc;
    }
}

kiln_status kn_cpu_cpu_pool_global(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    const char *op = k->node->op_type;
    global_args a = {0};
    a.kind = strcmp(op, "GlobalMaxPool") == 0  ? POOL_MAX
             : strcmp(op, "GlobalLpPool") == 0 ? POOL_LP
                                               : POOL_AVG;
    a.p = (double)kn_attr_int(k->node, "p", 2);
    const kn_attr *pa = kn_node_attr(k->node, "p");
    if (pa != NULL && pa->type == KN_ATTR_FLOAT)
        a.p = pa->f;
    int64_t planes = x->shape.d[0] * x->shape.d[1];
    if (planes == 0)
        return KILN_OK;
    a.plane = kn_tensor_numel(x) / planes;
    kn_cpu_f32 xv = {0}, yv = {0};
    KN_TRY(kn_cpu_f32_in(x, &xv));
    kiln_status rc = kn_cpu_f32_out(&k->out[0], &yv);
    if (rc == KILN_OK) {
        a.x = xv.p;
        a.y = yv.p;
        kn_parallel_for(k->pool, planes, plane_grain(a.plane), global_planes, &a);
        kn_cpu_f32_commit(&k->out[0], &yv);
    }
    kn_cpu_f32_release(&yv);
    kn_cpu_f32_release(&xv);
    return rc;
}
