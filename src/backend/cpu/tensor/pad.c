/* Pad (constant, reflect, edge and wrap modes; negative pads crop) and CenterCropPad, which is
 * a centered constant-zero Pad. Each output row maps to a
 * source row (or to the constant); the row's interior is one memcpy, only its borders are
 * mapped element by element. */
#include "backend/cpu/tensor/tensor_kernels.h"

#include <string.h>

typedef struct pad_job {
    char *dst;
    const char *src;
    size_t es;
    int rank;
    tensor_pad_mode mode;
    int64_t in_d[KN_MAX_RANK], out_d[KN_MAX_RANK], before[KN_MAX_RANK], istr[KN_MAX_RANK];
    uint64_t value; /* es bytes of the constant */
} pad_job;

/* Source index of padded position i on an axis of n elements; -1 for the constant. */
static int64_t map_index(tensor_pad_mode mode, int64_t i, int64_t n) {
    if (i >= 0 && i < n)
        return i;
    switch (mode) {
    case TENSOR_PAD_CONSTANT:
        return -1;
    case TENSOR_PAD_EDGE:
        return i < 0 ? 0 : n - 1;
    case TENSOR_PAD_WRAP: {
        int64_t m = i % n;
        return m < 0 ? m + n : m;
    }
    default: {
        if (n == 1)
            return 0;
        int64_t p = 2 * (n - 1), m = i % p;
        if (m < 0)
            m += p;
        return m < n ? m : p - m;
    }
    }
}

static void pad_row(const pad_job *j, char *dst, const char *src) {
    int last = j->rank - 1;
    int64_t len = j->out_d[last], n = j->in_d[last], b = j->before[last];
    int64_t lo = b > 0 ? b : 0, hi = b + n < len ? b + n : len;
    if (hi > lo)
        memcpy(dst + (size_t)lo * j->es, src + (size_t)(lo - b) * j->es, (size_t)(hi - lo) * j->es);
    else
        lo = hi = len;
    for (int64_t o = 0; o < len; o++) {
        if (o == lo) {
            o = hi - 1;
            continue;
        }
        int64_t si = map_index(j->mode, o - b, n);
        const void *from = si < 0 ? (const void *)&j->value : src + (size_t)si * j->es;
        memcpy(dst + (size_t)o * j->es, from, j->es);
    }
}

static void pad_rows(void *arg, int64_t b, int64_t e) {
    const pad_job *j = arg;
    int outer = j->rank - 1;
    size_t row_bytes = (size_t)j->out_d[outer] * j->es;
    for (int64_t r = b; r < e; r++) {
        int64_t rem = r, off = 0;
        bool inside = true;
        for (int d = outer - 1; d >= 0; d--) {
            int64_t i = rem % j->out_d[d];
            rem /= j->out_d[d];
            int64_t si = map_index(j->mode, i - j->before[d], j->in_d[d]);
            if (si < 0)
                inside = false;
            off += si * j->istr[d];
        }
        char *dst = j->dst + (size_t)r * row_bytes;
        if (inside)
            pad_row(j, dst, j->src + (size_t)off * j->es);
        else
            cpu_tensor_fill(dst, &j->value, j->es, j->out_d[outer]);
    }
}

static kiln_status pad_apply(kn_kernel_ctx *k, const tensor_pad_plan *p, uint64_t value) {
    const kn_tensor *x = &k->in[0];
    if (!kn_shape_equal(&p->out, &k->out[0].shape))
        return kn_error(KILN_ERR_INTERNAL, "padded shape differs from the inferred one");
    pad_job j = {.dst = k->out[0].data,
                 .src = x->data,
                 .es = kn_dtype_size(x->dtype),
                 .rank = x->shape.rank,
                 .mode = p->mode,
                 .value = value};
    int64_t numel = kn_shape_numel(&p->out);
    if (numel == 0)
        return KILN_OK;
    if (j.rank == 0) {
        memcpy(j.dst, j.src, j.es);
        return KILN_OK;
    }
    int64_t acc = 1;
    for (int i = j.rank - 1; i >= 0; i--) {
        j.in_d[i] = x->shape.d[i];
        j.out_d[i] = p->out.d[i];
        j.before[i] = p->before[i];
        j.istr[i] = acc;
        acc *= x->shape.d[i];
    }
    int64_t rows = numel / j.out_d[j.rank - 1];
    int64_t grain = 16384 / (j.out_d[j.rank - 1] * (int64_t)j.es) + 1;
    kn_parallel_for(k->pool, rows, grain, pad_rows, &j);
    return KILN_OK;
}

kiln_status cpu_tensor_run_pad(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    tensor_pad_plan p;
    KN_TRY(tensor_pad_resolve(k->node, k->n_in, k->in, &p));
    uint64_t value = 0;
    if (k->node->opset < 11) {
        kn_tensor v = {.dtype = x->dtype, .shape = {.rank = 0}, .data = &value};
        kn_tensor_set_f64(&v, 0, kn_attr_float(k->node, "value", 0.0f));
    } else if (k->n_in > 2 && k->in[2].dtype != 0) {
        memcpy(&value, k->in[2].data, kn_dtype_size(x->dtype));
    }
    return pad_apply(k, &p, value);
}

kiln_status cpu_tensor_run_center_crop_pad(kn_kernel_ctx *k) {
    tensor_pad_plan p;
    KN_TRY(tensor_center_crop_pad_resolve(k->node, k->n_in, k->in, &p));
    return pad_apply(k, &p, 0);
}
