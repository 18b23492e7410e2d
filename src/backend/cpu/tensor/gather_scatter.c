/* Indexing kernels: Gather, GatherElements, GatherND, ScatterElements (and Scatter), ScatterND,
 * TensorScatter.
 * Every index is checked before it is used: a bad one is KILN_ERR_INVALID_ARGUMENT, never an
 * out-of-bounds access. */
#include "backend/cpu/tensor/tensor_kernels.h"

#include <string.h>

static inline int64_t index_at(const kn_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_INT64 ? ((const int64_t *)t->data)[i]
                                        : ((const int32_t *)t->data)[i];
}

typedef struct gather_job {
    char *dst;
    const char *src;
    const kn_tensor *ind;
    size_t ib; /* bytes of one gathered block */
    int64_t n, n_ind;
} gather_job;

static void gather_tasks(void *arg, int64_t b, int64_t e) {
    const gather_job *j = arg;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / j->n_ind, v = index_at(j->ind, t % j->n_ind);
        if (v < 0)
            v += j->n;
        const char *s = j->src + (size_t)(o * j->n + v) * j->ib;
        char *d = j->dst + (size_t)t * j->ib;
        switch (j->ib) {
        case 4:
            *(uint32_t *)d = *(const uint32_t *)s;
            break;
        case 8:
            *(uint64_t *)d = *(const uint64_t *)s;
            break;
        default:
            memcpy(d, s, j->ib);
            break;
        }
    }
}

kiln_status cpu_tensor_run_gather(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *ind = &k->in[1];
    int64_t axis, outer, n, inner;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", 0), x->shape.rank, &axis));
    tensor_split_dims(&x->shape, axis, &outer, &n, &inner);
    KN_TRY(tensor_check_indices(ind, n, "input 'indices'"));
    gather_job j = {.dst = k->out[0].data,
                    .src = x->data,
                    .ind = ind,
                    .ib = (size_t)inner * kn_dtype_size(x->dtype),
                    .n = n,
                    .n_ind = kn_shape_numel(&ind->shape)};
    if (j.ib == 0 || j.n_ind == 0 || outer == 0)
        return KILN_OK;
    kn_parallel_for(k->pool, outer * j.n_ind, (int64_t)(32768 / j.ib) + 1, gather_tasks, &j);
    return KILN_OK;
}

static void strides_of(const kn_shape *s, int64_t *st) {
    int64_t acc = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        st[i] = acc;
        acc *= s->d[i];
    }
}

/* Walk every position of `ind` (same rank as data); call back with the data offset in which
 * the axis coordinate is replaced by the index. Shared by GatherElements and ScatterElements. */
typedef void (*elem_fn)(void *arg, int64_t pos, int64_t data_off);

static kiln_status walk_elements(const kn_shape *data, const kn_tensor *ind, int64_t axis,
                                 elem_fn fn, void *arg) {
    int32_t r = data->rank;
    int64_t ds[KN_MAX_RANK], idx[KN_MAX_RANK] = {0};
    strides_of(data, ds);
    int64_t total = kn_shape_numel(&ind->shape), base = 0, dim = data->d[axis];
    for (int64_t p = 0; p < total; p++) {
        int64_t v = index_at(ind, p);
        if (v < -dim || v >= dim)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "input 'indices': index %lld at position %lld is out of range "
                            "[-%lld, %lld)",
                            (long long)v, (long long)p, (long long)dim, (long long)dim);
        if (v < 0)
            v += dim;
        fn(arg, p, base + v * ds[axis]);
        for (int d = r - 1; d >= 0; d--) {
            if (d != axis)
                base += ds[d];
            if (++idx[d] < ind->shape.d[d])
                break;
            if (d != axis)
                base -= ds[d] * ind->shape.d[d];
            idx[d] = 0;
        }
    }
    return KILN_OK;
}

typedef struct elem_job {
    char *dst;
    const char *src;
    size_t es;
    int32_t dtype;
    int red;
} elem_job;

static void gather_elem(void *arg, int64_t pos, int64_t off) {
    const elem_job *j = arg;
    memcpy(j->dst + (size_t)pos * j->es, j->src + (size_t)off * j->es, j->es);
}

static void scatter_elem(void *arg, int64_t pos, int64_t off) {
    const elem_job *j = arg;
    cpu_tensor_reduce_elem(j->dtype, j->red, j->dst + (size_t)off * j->es,
                           j->src + (size_t)pos * j->es);
}

static bool index_dims_fit(const kn_shape *data, const kn_shape *ind, int64_t axis) {
    if (ind->rank != data->rank)
        return false;
    for (int d = 0; d < data->rank; d++)
        if (d != axis && ind->d[d] > data->d[d])
            return false;
    return true;
}

kiln_status cpu_tensor_run_gather_elements(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *ind = &k->in[1];
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", 0), x->shape.rank, &axis));
    if (!index_dims_fit(&x->shape, &ind->shape, axis))
        return kn_error(KILN_ERR_SHAPE, "input 'indices' exceeds 'data' outside the axis");
    elem_job j = {.dst = k->out[0].data, .src = x->data, .es = kn_dtype_size(x->dtype)};
    return walk_elements(&x->shape, ind, axis, gather_elem, &j);
}

kiln_status cpu_tensor_run_scatter_elements(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *ind = &k->in[1], *upd = &k->in[2];
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", 0), x->shape.rank, &axis));
    if (!index_dims_fit(&x->shape, &ind->shape, axis))
        return kn_error(KILN_ERR_SHAPE, "input 'indices' exceeds 'data' outside the axis");
    elem_job j = {
        .dst = k->out[0].data, .src = upd->data, .es = kn_dtype_size(x->dtype), .dtype = x->dtype};
    KN_TRY(tensor_scatter_reduction(k->node, &j.red));
    cpu_tensor_copy(k->pool, k->out[0].data, x->data, kn_tensor_nbytes(x));
    return walk_elements(&x->shape, ind, axis, scatter_elem, &j);
}

/* Offset (in elements of data) addressed by m index values starting at dims d0. */
static kiln_status nd_offset(const kn_tensor *ind, int64_t at, int64_t m, const kn_shape *data,
                             const int64_t *ds, int64_t d0, int64_t *off) {
    int64_t o = 0;
    for (int64_t i = 0; i < m; i++) {
        int64_t v = index_at(ind, at + i), dim = data->d[d0 + i];
        if (v < -dim || v >= dim)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "input 'indices': index %lld for data axis %lld is out of range "
                            "[-%lld, %lld)",
                            (long long)v, (long long)(d0 + i), (long long)dim, (long long)dim);
        o += (v < 0 ? v + dim : v) * ds[d0 + i];
    }
    *off = o;
    return KILN_OK;
}

kiln_status cpu_tensor_run_gather_nd(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *ind = &k->in[1];
    int64_t b = k->node->opset >= 12 ? kn_attr_int(k->node, "batch_dims", 0) : 0;
    int32_t q = ind->shape.rank;
    int64_t m = ind->shape.d[q - 1], ds[KN_MAX_RANK];
    strides_of(&x->shape, ds);
    int64_t batches = 1, per_batch = 1;
    for (int64_t i = 0; i < b; i++)
        batches *= x->shape.d[i];
    for (int32_t i = (int32_t)b; i < q - 1; i++)
        per_batch *= ind->shape.d[i];
    int64_t slice = b + m < x->shape.rank ? ds[b + m - 1] : 1;
    int64_t batch_stride = b > 0 ? ds[b - 1] : 0;
    size_t es = kn_dtype_size(x->dtype), sb = (size_t)slice * es;
    char *dst = k->out[0].data;
    const char *src = x->data;
    for (int64_t bi = 0; bi < batches; bi++) {
        for (int64_t n = 0; n < per_batch; n++) {
            int64_t off;
            KN_TRY(nd_offset(ind, (bi * per_batch + n) * m, m, &x->shape, ds, b, &off));
            memcpy(dst, src + (size_t)(bi * batch_stride + off) * es, sb);
            dst += sb;
        }
    }
    return KILN_OK;
}

kiln_status cpu_tensor_run_scatter_nd(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *ind = &k->in[1], *upd = &k->in[2];
    int red;
    KN_TRY(tensor_scatter_reduction(k->node, &red));
    int32_t q = ind->shape.rank;
    int64_t m = ind->shape.d[q - 1], ds[KN_MAX_RANK];
    strides_of(&x->shape, ds);
    int64_t n_upd = kn_shape_numel(&ind->shape) / (m > 0 ? m : 1);
    int64_t slice = m < x->shape.rank ? ds[m - 1] : 1;
    size_t es = kn_dtype_size(x->dtype);
    char *dst = k->out[0].data;
    const char *src = upd->data;
    cpu_tensor_copy(k->pool, dst, x->data, kn_tensor_nbytes(x));
    for (int64_t n = 0; n < n_upd; n++) {
        int64_t off;
        KN_TRY(nd_offset(ind, n * m, m, &x->shape, ds, 0, &off));
        const char *u = src + (size_t)(n * slice) * es;
        char *d = dst + (size_t)off * es;
        if (red == 0) {
            memcpy(d, u, (size_t)slice * es);
            continue;
        }
        for (int64_t s = 0; s < slice; s++)
            cpu_tensor_reduce_elem(x->dtype, red, d + (size_t)s * es, u + (size_t)s * es);
    }
    return KILN_OK;
}

kiln_status cpu_tensor_run_tensor_scatter(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0], *upd = &k->in[1];
    const kn_tensor *w = k->n_in > 2 && k->in[2].dtype != 0 ? &k->in[2] : NULL;
    int64_t axis, prefix, cap, inner;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", -2), x->shape.rank, &axis));
    tensor_split_dims(&x->shape, axis, &prefix, &cap, &inner);
    bool circular = strcmp(kn_attr_string(k->node, "mode", "linear"), "circular") == 0;
    int64_t seq = upd->shape.d[axis], batch = x->shape.d[0];
    int64_t per_batch = batch > 0 ? prefix / batch : 0;
    size_t ib = (size_t)inner * kn_dtype_size(x->dtype);
    char *dst = k->out[0].data;
    const char *src = upd->data;
    cpu_tensor_copy(k->pool, dst, x->data, kn_tensor_nbytes(x));
    for (int64_t p = 0; p < prefix; p++) {
        int64_t start = w != NULL ? ((const int64_t *)w->data)[p / per_batch] : 0;
        for (int64_t s = 0; s < seq; s++) {
            int64_t pos = start + s;
            if (circular && cap > 0) {
                pos %= cap;
                pos += pos < 0 ? cap : 0;
            } else if (pos < 0 || pos >= cap) {
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "input 'write_indices': position %lld is outside the cache of "
                                "%lld",
                                (long long)pos, (long long)cap);
            }
            memcpy(dst + (size_t)(p * cap + pos) * ib, src + (size_t)(p * seq + s) * ib, ib);
        }
    }
    return KILN_OK;
}
