/* CPU element-wise kernels: the broadcast walk every multi-input kernel
 * shares, and conversion tiles between dtypes. The loops themselves live in
 * elementwise_unary.c, elementwise_binary.c, elementwise_mixed.c and
 * kiln/fused_elementwise.c. */
#include "backend/cpu/math/elementwise_impl.h"

#include <string.h>

void ew_bcast_init(ew_bcast *b, const kn_shape *out, int n_in, const kn_shape *const *in) {
    KN_ASSERT(n_in <= EW_MAX_WALK);
    int64_t dims[KN_MAX_RANK], st[EW_MAX_WALK][KN_MAX_RANK];
    int r = 0;
    for (int d = 0; d < out->rank; d++) {
        if (out->d[d] == 1)
            continue;
        dims[r] = out->d[d];
        for (int k = 0; k < n_in; k++) {
            int id = d - (out->rank - in[k]->rank);
            int64_t s = 0;
            if (id >= 0 && in[k]->d[id] != 1) {
                s = 1;
                for (int e = id + 1; e < in[k]->rank; e++)
                    s *= in[k]->d[e];
            }
            st[k][r] = s;
        }
        r++;
    }
    memset(b, 0, sizeof *b);
    b->n_in = n_in;
    b->numel = kn_shape_numel(out);
    if (r == 0) {
        b->rank = 1;
        b->dims[0] = 1;
        return;
    }
    /* Merge dim j into the previous one when every input steps through both as one dim. */
    int m = 0;
    for (int j = 0; j < r; j++) {
        bool merge = m > 0;
        for (int k = 0; merge && k < n_in; k++)
            merge = b->strides[k][m - 1] == st[k][j] * dims[j];
        if (merge) {
            b->dims[m - 1] *= dims[j];
            for (int k = 0; k < n_in; k++)
                b->strides[k][m - 1] = st[k][j];
        } else {
            b->dims[m] = dims[j];
            for (int k = 0; k < n_in; k++)
                b->strides[k][m] = st[k][j];
            m++;
        }
    }
    b->rank = m;
}

void ew_bcast_walk(const ew_bcast *b, int64_t begin, int64_t end, ew_run_fn fn, void *arg) {
    int r = b->rank;
    int64_t idx[KN_MAX_RANK], inner[EW_MAX_WALK] = {0}, off[EW_MAX_WALK] = {0};
    int64_t rem = begin;
    for (int d = r - 1; d >= 0; d--) {
        idx[d] = rem % b->dims[d];
        rem /= b->dims[d];
    }
    for (int k = 0; k < b->n_in; k++)
        inner[k] = b->strides[k][r - 1];
    for (int64_t pos = begin; pos < end;) {
        for (int k = 0; k < b->n_in; k++) {
            off[k] = 0;
            for (int d = 0; d < r; d++)
                off[k] += idx[d] * b->strides[k][d];
        }
        int64_t n = b->dims[r - 1] - idx[r - 1];
        if (n > end - pos)
            n = end - pos;
        fn(arg, off, inner, pos, n);
        pos += n;
        idx[r - 1] += n;
        for (int d = r - 1; d > 0 && idx[d] == b->dims[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

bool ew_is_half(int32_t dt) {
    return dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16;
}

#define EW_LOAD_CASE(DT, T, EXPR)                                                                  \
    case DT: {                                                                                     \
        const T *s = src;                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                          \
            T v = s[i * stride];                                                                   \
            dst[i] = EXPR;                                                                         \
        }                                                                                          \
        break;                                                                                     \
    }

#define EW_LOAD_ALL(OT)                                                                            \
    switch (dt) {                                                                                  \
        EW_LOAD_CASE(KILN_DTYPE_FLOAT32, float, (OT)v)                                             \
        EW_LOAD_CASE(KILN_DTYPE_FLOAT64, double, (OT)v)                                            \
        EW_LOAD_CASE(KILN_DTYPE_FLOAT16, uint16_t, (OT)kn_half_to_float(v))                        \
        EW_LOAD_CASE(KILN_DTYPE_BFLOAT16, uint16_t, (OT)kn_bf16_to_float(v))                       \
        EW_LOAD_CASE(KILN_DTYPE_INT8, int8_t, (OT)v)                                               \
        EW_LOAD_CASE(KILN_DTYPE_INT16, int16_t, (OT)v)                                             \
        EW_LOAD_CASE(KILN_DTYPE_INT32, int32_t, (OT)v)                                             \
        EW_LOAD_CASE(KILN_DTYPE_INT64, int64_t, (OT)v)                                             \
        EW_LOAD_CASE(KILN_DTYPE_UINT8, uint8_t, (OT)v)                                             \
        EW_LOAD_CASE(KILN_DTYPE_UINT16, uint16_t, (OT)v)                                           \
        EW_LOAD_CASE(KILN_DTYPE_UINT32, uint32_t, (OT)v)                                           \
        EW_LOAD_CASE(KILN_DTYPE_UINT64, uint64_t, (OT)v)                                           \
        EW_LOAD_CASE(KILN_DTYPE_BOOL, uint8_t, (OT)(v != 0))                                       \
    default:                                                                                       \
        KN_ASSERT(!"unsupported dtype in a load tile");                                            \
    }

void ew_load_f32(const void *src, int32_t dt, int64_t stride, int64_t n, float *dst) {
    EW_LOAD_ALL(float)
}

void ew_load_f64(const void *src, int32_t dt, int64_t stride, int64_t n, double *dst) {
    EW_LOAD_ALL(double)
}

/* Float sources are truncated toward zero, as an integer exponent or index is read. */
void ew_load_i64(const void *src, int32_t dt, int64_t stride, int64_t n, int64_t *dst) {
    switch (dt) {
    case KILN_DTYPE_FLOAT32:
    case KILN_DTYPE_FLOAT64:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        double t[EW_TILE];
        for (int64_t i = 0; i < n; i += EW_TILE) {
            int64_t m = n - i < EW_TILE ? n - i : EW_TILE;
            size_t es = kn_dtype_size(dt);
            ew_load_f64((const char *)src + (size_t)(i * stride) * es, dt, stride, m, t);
            for (int64_t j = 0; j < m; j++)
                dst[i + j] = t[j] != t[j]                     ? 0
                             : t[j] >= 9223372036854775807.0  ? INT64_MAX
                             : t[j] <= -9223372036854775808.0 ? INT64_MIN
                                                              : (int64_t)t[j];
        }
        break;
    }
    default:
        EW_LOAD_ALL(int64_t)
    }
}

void ew_store_f32(void *dst, int32_t dt, int64_t n, const float *src) {
    switch (dt) {
    case KILN_DTYPE_FLOAT32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case KILN_DTYPE_FLOAT64:
        for (int64_t i = 0; i < n; i++)
            ((double *)dst)[i] = src[i];
        break;
    case KILN_DTYPE_FLOAT16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = kn_float_to_half(src[i]);
        break;
    case KILN_DTYPE_BFLOAT16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = kn_float_to_bf16(src[i]);
        break;
    default:
        KN_ASSERT(!"float tiles store only to float dtypes");
    }
}

typedef struct bin_job {
    ew_bcast bc;
    const char *a, *b;
    char *y;
    size_t es_in, es_y;
    int32_t dt_in, dt_y;
    ew_binary_loop loop;
} bin_job;

static void bin_run(void *arg, const int64_t *off, const int64_t *st, int64_t pos, int64_t n) {
    const bin_job *j = arg;
    const char *pa = j->a + (size_t)off[0] * j->es_in, *pb = j->b + (size_t)off[1] * j->es_in;
    char *py = j->y + (size_t)pos * j->es_y;
    if (!ew_is_half(j->dt_in)) {
        j->loop(pa, st[0], pb, st[1], py, n);
        return;
    }
    float ta[EW_TILE], tb[EW_TILE], ty[EW_TILE];
    for (int64_t t = 0; t < n; t += EW_TILE) {
        int64_t m = n - t < EW_TILE ? n - t : EW_TILE;
        ew_load_f32(pa + (size_t)(t * st[0]) * j->es_in, j->dt_in, st[0], st[0] ? m : 1, ta);
        ew_load_f32(pb + (size_t)(t * st[1]) * j->es_in, j->dt_in, st[1], st[1] ? m : 1, tb);
        if (j->dt_y == KILN_DTYPE_BOOL) {
            j->loop(ta, st[0], tb, st[1], py + (size_t)t * j->es_y, m);
        } else {
            j->loop(ta, st[0], tb, st[1], ty, m);
            ew_store_f32(py + (size_t)t * j->es_y, j->dt_y, m, ty);
        }
    }
}

static void bin_chunk(void *arg, int64_t begin, int64_t end) {
    bin_job *j = arg;
    ew_bcast_walk(&j->bc, begin, end, bin_run, j);
}

kiln_status ew_binary(kn_kernel_ctx *k, const kn_tensor *a, const kn_tensor *b, kn_tensor *y,
                      const ew_binary_loop *table) {
    int32_t dt = a->dtype;
    int32_t lookup = ew_is_half(dt) ? KILN_DTYPE_FLOAT32 : dt;
    if (lookup <= 0 || lookup >= EW_NDT || table[lookup] == NULL)
        return kn_error(KILN_ERR_DTYPE, "no CPU kernel for dtype %s", kn_dtype_name(dt));
    bin_job j = {.a = a->data,
                 .b = b->data,
                 .y = y->data,
                 .es_in = kn_dtype_size(dt),
                 .es_y = kn_dtype_size(y->dtype),
                 .dt_in = dt,
                 .dt_y = y->dtype,
                 .loop = table[lookup]};
    const kn_shape *in[2] = {&a->shape, &b->shape};
    ew_bcast_init(&j.bc, &y->shape, 2, in);
    kn_parallel_for(k->pool, j.bc.numel, EW_BINARY_GRAIN, bin_chunk, &j);
    return KILN_OK;
}

typedef struct copy_job {
    ew_bcast bc;
    const char *x;
    char *y;
    size_t es;
} copy_job;

static void copy_run(void *arg, const int64_t *off, const int64_t *st, int64_t pos, int64_t n) {
    const copy_job *j = arg;
    const char *px = j->x + (size_t)off[0] * j->es;
    char *py = j->y + (size_t)pos * j->es;
    if (st[0] == 1) {
        memcpy(py, px, (size_t)n * j->es);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        memcpy(py + (size_t)i * j->es, px, j->es);
}

static void copy_chunk(void *arg, int64_t begin, int64_t end) {
    copy_job *j = arg;
    ew_bcast_walk(&j->bc, begin, end, copy_run, j);
}

void ew_broadcast_copy(kn_kernel_ctx *k, const kn_tensor *x, kn_tensor *y) {
    copy_job j = {.x = x->data, .y = y->data, .es = kn_dtype_size(x->dtype)};
    const kn_shape *in[1] = {&x->shape};
    ew_bcast_init(&j.bc, &y->shape, 1, in);
    kn_parallel_for(k->pool, j.bc.numel, EW_GRAIN, copy_chunk, &j);
}
