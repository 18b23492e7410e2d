/* Reduce* kernels. A reduction is planned on the input
 * shape with size-1 dims dropped and neighbouring dims of the same kind (kept or reduced)
 * merged, so the innermost loop always runs over a contiguous run: either a reduced run
 * (one output per unit) or a kept run (a row of outputs accumulated at once). */
#include "backend/cpu/reduction/reduce_impl.h"
#include "core/alloc.h"
#include "ops/reduction/reduce.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum {
    RED_SUM,
    RED_MEAN,
    RED_MAX,
    RED_MIN,
    RED_PROD,
    RED_L1,
    RED_L2,
    RED_LOGSUM,
    RED_LSE,
    RED_SUMSQ,
};

typedef struct red_plan {
    int op;
    bool rows;     /* innermost merged dim is reduced */
    int64_t inner; /* length of the innermost merged dim */
    int nk, nr;    /* outer kept / reduced dims, walked by index */
    int64_t kdim[KN_MAX_RANK], kstride[KN_MAX_RANK];
    int64_t rdim[KN_MAX_RANK], rstride[KN_MAX_RANK];
    int64_t units, rcount, count;
    const void *x;
    void *acc;           /* one accumulator per output element */
    const double *shift; /* LogSumExp: per-output max, finite */
} red_plan;

static inline int64_t red_decompose(int64_t idx, int n, const int64_t *dim, const int64_t *stride) {
    int64_t off = 0;
    for (int i = n - 1; i >= 0; i--) {
        off += (idx % dim[i]) * stride[i];
        idx /= dim[i];
    }
    return off;
}

#define RT_T float
#define RT_ACC double
#define RT_SUFFIX f32
#define RT_LOWEST (-INFINITY)
#define RT_HIGHEST INFINITY
#define RT_EMPTY_MEAN NAN
#include "backend/cpu/reduction/reduce_tmpl.h"
#undef RT_T
#undef RT_ACC
#undef RT_SUFFIX
#undef RT_LOWEST
#undef RT_HIGHEST
#undef RT_EMPTY_MEAN

#define RT_T double
#define RT_ACC double
#define RT_SUFFIX f64
#define RT_LOWEST (-INFINITY)
#define RT_HIGHEST INFINITY
#define RT_EMPTY_MEAN NAN
#include "backend/cpu/reduction/reduce_tmpl.h"
#undef RT_T
#undef RT_ACC
#undef RT_SUFFIX
#undef RT_LOWEST
#undef RT_HIGHEST
#undef RT_EMPTY_MEAN

#define RT_T int64_t
#define RT_ACC int64_t
#define RT_WRAP
#define RT_SUFFIX i64
#define RT_LOWEST INT64_MIN
#define RT_HIGHEST INT64_MAX
#define RT_EMPTY_MEAN 0
#include "backend/cpu/reduction/reduce_tmpl.h"
#undef RT_WRAP
#undef RT_T
#undef RT_ACC
#undef RT_SUFFIX
#undef RT_LOWEST
#undef RT_HIGHEST
#undef RT_EMPTY_MEAN

static void red_plan_build(const kn_shape *xs, const kn_reduce_axes *a, red_plan *p) {
    int m = 0;
    int64_t dim[KN_MAX_RANK], stride[KN_MAX_RANK];
    bool red[KN_MAX_RANK];
    for (int32_t i = 0; i < xs->rank; i++) {
        if (xs->d[i] == 1)
            continue;
        if (m > 0 && red[m - 1] == a->mask[i]) {
            dim[m - 1] *= xs->d[i];
        } else {
            dim[m] = xs->d[i];
            red[m] = a->mask[i];
            m++;
        }
    }
    if (m == 0) {
        dim[0] = 1;
        red[0] = false;
        m = 1;
    }
    int64_t s = 1;
    for (int i = m - 1; i >= 0; i--) {
        stride[i] = s;
        s *= dim[i];
    }
    p->rows = red[m - 1];
    p->inner = dim[m - 1];
    p->nk = p->nr = 0;
    p->units = p->rcount = 1;
    p->count = p->rows ? p->inner : 1;
    for (int i = 0; i < m - 1; i++) {
        if (red[i]) {
            p->rdim[p->nr] = dim[i];
            p->rstride[p->nr++] = stride[i];
            p->rcount *= dim[i];
            p->count *= dim[i];
        } else {
            p->kdim[p->nk] = dim[i];
            p->kstride[p->nk++] = stride[i];
            p->units *= dim[i];
        }
    }
}

typedef enum { ENG_F32, ENG_F64, ENG_I64 } red_engine;

static void red_execute(red_plan *p, red_engine e, kn_threadpool *pool) {
    int64_t work = p->rcount * p->inner;
    int64_t grain = work >= 16384 ? 1 : 16384 / (work > 0 ? work : 1);
    kn_range_fn fn;
    if (e == ENG_F32)
        fn = p->rows ? rt_rows_f32 : rt_cols_f32;
    else if (e == ENG_F64)
        fn = p->rows ? rt_rows_f64 : rt_cols_f64;
    else
        fn = p->rows ? rt_rows_i64 : rt_cols_i64;
    kn_parallel_for(pool, p->units, grain, fn, p);
}

static int red_op(const char *name) {
    static const char *const names[] = {
        "ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",
        "ReduceL1",  "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
    };
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

/* Converts the input to the engine's element type when it is not already stored so. */
static kiln_status red_input(const kn_tensor *x, red_engine e, void **buf, const void **data) {
    int64_t n = kn_tensor_numel(x);
    *buf = NULL;
    *data = x->data;
    if ((e == ENG_F32 && x->dtype == KILN_DTYPE_FLOAT32) ||
        (e == ENG_F64 && x->dtype == KILN_DTYPE_FLOAT64) ||
        (e == ENG_I64 && x->dtype == KILN_DTYPE_INT64))
        return KILN_OK;
    if (e == ENG_F32) {
        kn_cpu_f32 v;
        KN_TRY(kn_cpu_f32_in(x, &v));
        *buf = v.p;
        *data = v.p;
        return KILN_OK;
    }
    *buf = kn_malloc((size_t)(n > 0 ? n : 1) * 8);
    if (*buf == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for a converted input");
    if (e == ENG_F64) {
        for (int64_t i = 0; i < n; i++)
            ((double *)*buf)[i] = kn_tensor_get_f64(x, i);
    } else {
        for (int64_t i = 0; i < n; i++)
            ((int64_t *)*buf)[i] = kn_tensor_get_i64(x, i);
    }
    *data = *buf;
    return KILN_OK;
}

/* The range of a narrower integer output: a Max or Min over an empty set holds int64's lowest or
 * highest, which becomes the output type's (False and True for bool). */
static void int_range(int32_t dt, int64_t *lo, int64_t *hi) {
    *lo = INT64_MIN;
    *hi = INT64_MAX;
    switch (dt) {
    case KILN_DTYPE_BOOL:
        *lo = 0, *hi = 1;
        break;
    case KILN_DTYPE_INT8:
        *lo = INT8_MIN, *hi = INT8_MAX;
        break;
    case KILN_DTYPE_UINT8:
        *lo = 0, *hi = UINT8_MAX;
        break;
    case KILN_DTYPE_INT16:
        *lo = INT16_MIN, *hi = INT16_MAX;
        break;
    case KILN_DTYPE_UINT16:
        *lo = 0, *hi = UINT16_MAX;
        break;
    case KILN_DTYPE_INT32:
        *lo = INT32_MIN, *hi = INT32_MAX;
        break;
    case KILN_DTYPE_UINT32:
        *lo = 0, *hi = UINT32_MAX;
        break;
    default:
        break;
    }
}

static void red_store(kn_tensor *y, red_engine e, const void *acc, int op) {
    int64_t n = kn_tensor_numel(y);
    if (e == ENG_I64) {
        int64_t lo, hi;
        int_range(y->dtype, &lo, &hi);
        bool clamp = op == RED_MAX || op == RED_MIN; /* other ops wrap, as onnxruntime's do */
        for (int64_t i = 0; i < n; i++) {
            int64_t v = ((const int64_t *)acc)[i];
            kn_tensor_set_i64(y, i, clamp ? (v < lo ? lo : v > hi ? hi : v) : v);
        }
    } else if (y->dtype == KILN_DTYPE_FLOAT32) {
        float *o = y->data;
        for (int64_t i = 0; i < n; i++)
            o[i] = (float)((const double *)acc)[i];
    } else if (y->dtype == KILN_DTYPE_FLOAT64) {
        memcpy(y->data, acc, (size_t)n * sizeof(double));
    } else {
        for (int64_t i = 0; i < n; i++)
            kn_tensor_set_f64(y, i, ((const double *)acc)[i]);
    }
}

static kiln_status red_lse_shift(red_plan *p, red_engine e, kn_threadpool *pool, int64_t out_n,
                                 double **shift) {
    *shift = kn_malloc((size_t)out_n * sizeof(double));
    if (*shift == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for LogSumExp maxima");
    void *acc = p->acc;
    p->acc = *shift;
    p->op = RED_MAX;
    red_execute(p, e, pool);
    p->acc = acc;
    p->op = RED_LSE;
    for (int64_t i = 0; i < out_n; i++)
        if (!isfinite((*shift)[i]))
            (*shift)[i] = 0;
    p->shift = *shift;
    return KILN_OK;
}

kiln_status cpu_red_reduce(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    kn_reduce_axes a;
    KN_TRY(kn_reduce_axes_read(k->node, &x->shape,
                               k->n_in > 1 && k->in[1].dtype != 0 ? &k->in[1] : NULL, &a));
    if (a.noop) {
        memcpy(y->data, x->data, kn_tensor_nbytes(x));
        return KILN_OK;
    }
    int64_t out_n = kn_tensor_numel(y);
    if (out_n == 0)
        return KILN_OK;
    red_plan p = {.op = red_op(k->node->op_type)};
    if (p.op < 0)
        return kn_error(KILN_ERR_UNSUPPORTED, "no reduce kernel for %s", k->node->op_type);
    red_engine e;
    if (x->dtype == KILN_DTYPE_FLOAT64)
        e = ENG_F64;
    else if (kn_dtype_is_float(x->dtype))
        e = ENG_F32;
    else if (p.op == RED_L2 || p.op == RED_LOGSUM || p.op == RED_LSE)
        e = ENG_F64;
    else
        e = ENG_I64;
    red_plan_build(&x->shape, &a, &p);
    void *xbuf = NULL;
    double *shift = NULL;
    kiln_status rc = red_input(x, e, &xbuf, &p.x);
    if (rc != KILN_OK)
        return rc;
    p.acc = kn_malloc((size_t)out_n * 8);
    if (p.acc == NULL) {
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for reduction accumulators");
        goto out_free_input;
    }
    if (p.op == RED_LSE) {
        rc = red_lse_shift(&p, e, k->pool, out_n, &shift);
        if (rc != KILN_OK)
            goto out_free_acc;
    }
    red_execute(&p, e, k->pool);
    red_store(y, e, p.acc, p.op);
    kn_free(shift);
out_free_acc:
    kn_free(p.acc);
out_free_input:
    kn_free(xbuf);
    return rc;
}
