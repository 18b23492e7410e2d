/* ArgMax/ArgMin and TopK. Values are compared exactly: float types as double, integer
 * types as int64. */
#include "backend/cpu/reduction/reduce_impl.h"
#include "core/alloc.h"
#include "ops/reduction/reduce.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct arg_args {
    int64_t outer, n, inner;
    bool is_min, last;
    const void *x; /* float, double or int64_t */
    int64_t *y;
} arg_args;

/* better(a, b): a replaces the current best b. Ties keep the first index unless `last`. */
#define DEFINE_ARG_SCAN(name, T)                                                                   \
    static void name(void *arg, int64_t begin, int64_t end) {                                      \
        const arg_args *a = arg;                                                                   \
        const T *x = a->x;                                                                         \
        for (int64_t u = begin; u < end; u++) {                                                    \
            int64_t o = u / a->inner, c = u % a->inner;                                            \
            const T *p = x + o * a->n * a->inner + c;                                              \
            T best = p[0];                                                                         \
            int64_t bi = 0;                                                                        \
            for (int64_t i = 1; i < a->n; i++) {                                                   \
                T v = p[i * a->inner];                                                             \
                bool better = a->is_min ? (v < best || (a->last && v == best))                     \
                                        : (v > best || (a->last && v == best));                    \
                if (better) {                                                                      \
                    best = v;                                                                      \
                    bi = i;                                                                        \
                }                                                                                  \
            }                                                                                      \
            a->y[u] = bi;                                                                          \
        }                                                                                          \
    }

DEFINE_ARG_SCAN(arg_scan_f32, float)
DEFINE_ARG_SCAN(arg_scan_f64, double)
DEFINE_ARG_SCAN(arg_scan_i64, int64_t)

/* Copies t into a double (float types) or int64 (integer types) buffer. */
static kiln_status to_wide(const kn_tensor *t, void **buf, bool *is_float) {
    int64_t n = kn_tensor_numel(t);
    *is_float = kn_dtype_is_float(t->dtype);
    *buf = kn_malloc((size_t)(n > 0 ? n : 1) * 8);
    if (*buf == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for a copy of input 0");
    if (*is_float && t->dtype == KILN_DTYPE_FLOAT32) {
        const float *s = t->data;
        for (int64_t i = 0; i < n; i++)
            ((double *)*buf)[i] = s[i];
    } else if (*is_float) {
        for (int64_t i = 0; i < n; i++)
            ((double *)*buf)[i] = kn_tensor_get_f64(t, i);
    } else {
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)*buf)[i] = kn_tensor_get_i64(t, i);
    }
    return KILN_OK;
}

kiln_status cpu_red_argmax(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    arg_args a = {0};
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", 0), x->shape.rank, &axis));
    kn_shape_split_axis(&x->shape, axis, &a.outer, &a.n, &a.inner);
    a.is_min = strcmp(k->node->op_type, "ArgMin") == 0;
    a.last = kn_attr_int(k->node, "select_last_index", 0) != 0;
    a.y = k->out[0].data;
    if (kn_tensor_numel(&k->out[0]) == 0)
        return KILN_OK;
    int64_t grain = a.n >= 4096 ? 1 : 4096 / a.n;
    if (x->dtype == KILN_DTYPE_FLOAT32) {
        a.x = x->data;
        kn_parallel_for(k->pool, a.outer * a.inner, grain, arg_scan_f32, &a);
        return KILN_OK;
    }
    void *buf;
    bool is_float;
    KN_TRY(to_wide(x, &buf, &is_float));
    a.x = buf;
    kn_parallel_for(k->pool, a.outer * a.inner, grain, is_float ? arg_scan_f64 : arg_scan_i64, &a);
    kn_free(buf);
    return KILN_OK;
}

typedef struct topk_item {
    union {
        double f;
        int64_t i;
    } v;
    int64_t idx;
} topk_item;

#define TOPK_CMP(name, field, before)                                                              \
    static int name(const void *pa, const void *pb) {                                              \
        const topk_item *a = pa, *b = pb;                                                          \
        if (a->v.field != b->v.field)                                                              \
            return (a->v.field before b->v.field) ? -1 : 1;                                        \
        return a->idx < b->idx ? -1 : (a->idx > b->idx);                                           \
    }

TOPK_CMP(topk_cmp_f_largest, f, >)
TOPK_CMP(topk_cmp_f_smallest, f, <)
TOPK_CMP(topk_cmp_i_largest, i, >)
TOPK_CMP(topk_cmp_i_smallest, i, <)

typedef int (*topk_cmp)(const void *, const void *);

/* Restores the heap below i, where the item ranked last sits at the top. */
static void topk_sift(topk_item *h, int64_t n, int64_t i, topk_cmp cmp) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cmp(&h[l], &h[w]) > 0)
            w = l;
        if (r < n && cmp(&h[r], &h[w]) > 0)
            w = r;
        if (w == i)
            return;
        topk_item t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Moves the k best of items[0..n) to the front, ranked. The order is total (ties go to the
 * lower index), so the result is exact; for small k a heap avoids sorting everything. */
static void topk_select(topk_item *items, int64_t n, int64_t k, topk_cmp cmp) {
    if (k == 0)
        return;
    if (k * 8 >= n) {
        qsort(items, (size_t)n, sizeof *items, cmp);
        return;
    }
    for (int64_t i = k / 2; i-- > 0;)
        topk_sift(items, k, i, cmp);
    for (int64_t i = k; i < n; i++)
        if (cmp(&items[i], &items[0]) < 0) {
            items[0] = items[i];
            topk_sift(items, k, 0, cmp);
        }
    qsort(items, (size_t)k, sizeof *items, cmp);
}

kiln_status cpu_red_topk(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_tensor *vals = &k->out[0];
    int64_t *idx_out = k->n_out > 1 && k->out[1].dtype != 0 ? k->out[1].data : NULL;
    int64_t axis, outer, n, inner;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", -1), x->shape.rank, &axis));
    kn_shape_split_axis(&x->shape, axis, &outer, &n, &inner);
    int64_t kk = vals->shape.d[axis];
    if (kn_tensor_numel(vals) == 0)
        return KILN_OK;
    bool largest = kn_attr_int(k->node, "largest", 1) != 0;
    size_t es = kn_dtype_size(x->dtype);
    void *wide;
    bool is_float;
    KN_TRY(to_wide(x, &wide, &is_float));
    topk_item *items = kn_malloc((size_t)n * sizeof *items);
    if (items == NULL) {
        kn_free(wide);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for TopK of %lld elements",
                        (long long)n);
    }
    topk_cmp cmp = is_float ? (largest ? topk_cmp_f_largest : topk_cmp_f_smallest)
                            : (largest ? topk_cmp_i_largest : topk_cmp_i_smallest);
    const char *xb = x->data;
    char *vb = vals->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            int64_t base = o * n * inner + c;
            for (int64_t i = 0; i < n; i++) {
                items[i].idx = i;
                if (is_float)
                    items[i].v.f = ((const double *)wide)[base + i * inner];
                else
                    items[i].v.i = ((const int64_t *)wide)[base + i * inner];
            }
            topk_select(items, n, kk, cmp);
            int64_t obase = o * kk * inner + c;
            for (int64_t j = 0; j < kk; j++) {
                int64_t src = base + items[j].idx * inner, dst = obase + j * inner;
                memcpy(vb + dst * es, xb + src * es, es);
                if (idx_out != NULL)
                    idx_out[dst] = items[j].idx;
            }
        }
    kn_free(items);
    kn_free(wide);
    return KILN_OK;
}
