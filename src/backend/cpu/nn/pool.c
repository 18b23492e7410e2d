/* MaxPool, AveragePool and LpPool over 1 to 3 spatial dims (fewer dims are padded to three
 * with unit dims), and the global pools. Work is split over the N*C planes; each window's
 * valid tap range is computed up front so the tap loops carry no bounds checks. */
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
    int64_t *ind;
    const tap_range *taps[3]; /* per output index of each dim */
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

static float win_max(const pool_args *a, const float *x, const tap_range *t) {
    float m = -INFINITY;
    bool any = false;
    int64_t dx = a->d[2];
    for (int64_t jz = t[0].j0; jz < t[0].j1; jz++) {
        int64_t pz = t[0].start + jz * a->d[0];
        for (int64_t jy = t[1].j0; jy < t[1].j1; jy++) {
            const float *row =
                x + (pz * a->in[1] + t[1].start + jy * a->d[1]) * a->in[2] + t[2].start;
            for (int64_t jx = t[2].j0; jx < t[2].j1; jx++)
                m = row[jx * dx] > m ? row[jx * dx] : m;
            any = any || t[2].j1 > t[2].j0;
        }
    }
    return any ? m : 0;
}

/* Max with the position of its first occurrence; -1 when the window holds no input. */
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
                if (*best < 0 || row[px] > m) {
                    m = row[px];
                    *best = spatial_index(a, pz, py, px);
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

/* 2-D max or average pooling without dilation or indices, the shape CNNs use: each output row
 * is built with one pass per window tap over the row, so the inner loops are plain strided
 * loops instead of a window walk per output. */
#define KN_POOL_ROW_MAX 4096

static int64_t div_floor(int64_t a, int64_t b) {
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

static bool pool2d_fast(const pool_args *a) {
    return (a->kind == POOL_MAX || a->kind == POOL_AVG) && a->ind == NULL && a->nsp == 2 &&
           a->d[1] == 1 && a->d[2] == 1 && a->out[2] <= KN_POOL_ROW_MAX;
}

KN_CLONES static void pool2d_planes(void *arg, int64_t begin, int64_t end) {
    const pool_args *a = arg;
    int64_t W = a->in[2], OH = a->out[1], OW = a->out[2], s = a->s[2], pb = a->pb[2];
    bool is_max = a->kind == POOL_MAX;
    float acc[KN_POOL_ROW_MAX];
    /* Only taps that land on the input for some output column: with huge padding the kernel
     * may be far wider than the input, and walking all of it would take hours for nothing. */
    int64_t jx0 = pb - (OW - 1) * s, jx1 = pb + W;
    jx0 = jx0 < 0 ? 0 : jx0;
    jx1 = jx1 > a->k[2] ? a->k[2] : jx1;
    for (int64_t u = begin; u < end; u++) {
        const float *x = a->x + u * a->in_plane;
        float *y = a->y + u * a->out_plane;
        for (int64_t oy = 0; oy < OH; oy++) {
            const tap_range *ty = &a->taps[1][oy];
            for (int64_t ox = 0; ox < OW; ox++)
                acc[ox] = is_max ? -INFINITY : 0.0f;
            for (int64_t jy = ty->j0; jy < ty->j1; jy++) {
                const float *row = x + (ty->start + jy) * W;
                for (int64_t jx = jx0; jx < jx1; jx++) {
                    int64_t lo = -div_floor(jx - pb, s), hi = div_floor(W - 1 + pb - jx, s) + 1;
                    lo = lo < 0 ? 0 : lo;
                    hi = hi > OW ? OW : hi;
                    const float *src = row + jx - pb;
                    if (is_max)
                        for (int64_t ox = lo; ox < hi; ox++)
                            acc[ox] = src[ox * s] > acc[ox] ? src[ox * s] : acc[ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++)
                            acc[ox] += src[ox * s];
                }
            }
            int64_t rows = ty->j1 - ty->j0, rows_inc = ty->jinc;
            for (int64_t ox = 0; ox < OW; ox++) {
                const tap_range *tx = &a->taps[2][ox];
                int64_t n = rows * (tx->j1 - tx->j0);
                int64_t div = a->include_pad ? rows_inc * tx->jinc : n;
                if (is_max)
                    y[oy * OW + ox] = n > 0 ? acc[ox] : 0.0f;
                else
                    y[oy * OW + ox] = div > 0 ? acc[ox] / (float)div : 0.0f;
            }
        }
    }
}

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
    pool_args a = {0};
    const char *op = k->node->op_type;
    a.kind = strcmp(op, "MaxPool") == 0 ? POOL_MAX : strcmp(op, "LpPool") == 0 ? POOL_LP : POOL_AVG;
    pool_args_init(&a, &g);
    int64_t planes = x->shape.d[0] * x->shape.d[1];
    if (planes == 0 || a.out_plane == 0)
        return KILN_OK;
    a.ind = k->n_out > 1 && k->node->out[1] >= 0 ? k->out[1].data : NULL;
    tap_range *tr = kn_malloc((size_t)(a.out[0] + a.out[1] + a.out[2]) * sizeof *tr);
    if (tr == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for pooling windows");
    int64_t at = 0;
    for (int dim = 0; dim < 3; dim++) {
        a.taps[dim] = tr + at;
        for (int64_t o = 0; o < a.out[dim]; o++)
            tr[at + o] = taps(&a, dim, o);
        at += a.out[dim];
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
                        pool2d_fast(&a) ? pool2d_planes : pool_planes, &a);
        kn_cpu_f32_commit(&k->out[0], &yv);
    }
    kn_cpu_f32_release(&yv);
    kn_cpu_f32_release(&xv);
    kn_free(tr);
    return rc;
}

typedef struct global_args {
    int kind;
    double p;
    int64_t plane;
    const float *x;
    float *y;
} global_args;

KN_CLONES static void global_planes(void *arg, int64_t begin, int64_t end) {
    const global_args *a = arg;
    for (int64_t u = begin; u < end; u++) {
        const float *x = a->x + u * a->plane;
        double acc = 0;
        if (a->kind == POOL_MAX) {
            float m = a->plane > 0 ? x[0] : 0;
            for (int64_t i = 1; i < a->plane; i++)
                m = x[i] > m ? x[i] : m;
            acc = m;
        } else if (a->kind == POOL_AVG) {
            double s[8] = {0};
            int64_t i = 0;
            for (; i + 8 <= a->plane; i += 8)
                for (int j = 0; j < 8; j++)
                    s[j] += x[i + j];
            for (; i < a->plane; i++)
                acc += x[i];
            for (int j = 0; j < 8; j++)
                acc += s[j];
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
