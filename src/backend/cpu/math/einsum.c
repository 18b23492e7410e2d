/* Einsum on the CPU. Two float32 operands become one batched A·B^T: labels are sorted into
 * batch, row, column and contracted groups, each operand is gathered into that layout (summing
 * labels only it has), multiplied, and scattered into the output order. Everything else (one
 * operand, three or more, other dtypes) takes a direct sum-of-products loop. */
#include "backend/cpu/quantization/saturate.h"
#include "backend/cpu/rnn/rnn_internal.h"
#include "core/alloc.h"
#include "ops/math/einsum.h"

#include <string.h>

#define ML KN_EINSUM_MAX_LABELS

/* Strides of operand i per label; repeated labels add up (a diagonal), broadcast dims are 0. */
static void label_strides(const kn_einsum *e, const kn_tensor *t, int i, int64_t *stride) {
    int64_t st[KN_MAX_RANK];
    kn_shape_strides(&t->shape, st);
    memset(stride, 0, sizeof(int64_t) * ML);
    for (int a = 0; a < e->in_rank[i]; a++) {
        int l = e->in_label[i][a];
        if (t->shape.d[a] != 1 || e->size[l] == 1)
            stride[l] += st[a];
    }
}

typedef struct odo {
    int n;
    int64_t size[ML], stride[ML], idx[ML];
    int64_t off;
} odo;

static void odo_init(odo *o, int n, const int *labels, const int64_t *size, const int64_t *st) {
    o->n = n;
    o->off = 0;
    for (int i = 0; i < n; i++) {
        o->size[i] = size[labels[i]];
        o->stride[i] = st[labels[i]];
        o->idx[i] = 0;
    }
}

static void odo_seek(odo *o, int64_t linear) {
    o->off = 0;
    for (int i = o->n - 1; i >= 0; i--) {
        o->idx[i] = o->size[i] ? linear % o->size[i] : 0;
        linear = o->size[i] ? linear / o->size[i] : 0;
        o->off += o->idx[i] * o->stride[i];
    }
}

static void odo_next(odo *o) {
    for (int i = o->n - 1; i >= 0; i--) {
        o->off += o->stride[i];
        if (++o->idx[i] < o->size[i])
            return;
        o->off -= o->stride[i] * o->size[i];
        o->idx[i] = 0;
    }
}

static int64_t count_of(const int *labels, int n, const int64_t *size) {
    int64_t c = 1;
    for (int i = 0; i < n; i++)
        c *= size[labels[i]];
    return c;
}

/* ---- generic: out[o] = sum over the other labels of the product of all operands ---- */

typedef struct gen_work {
    const kn_einsum *e;
    const kn_tensor *in;
    kn_tensor *out;
    int64_t stride[KN_EINSUM_MAX_INPUTS][ML];
    int out_labels[KN_MAX_RANK], sum_labels[ML], n_sum;
} gen_work;

static void generic_range(void *arg, int64_t begin, int64_t end) {
    const gen_work *w = arg;
    const kn_einsum *e = w->e;
    odo outer[KN_EINSUM_MAX_INPUTS];
    for (int i = 0; i < e->n_in; i++) {
        odo_init(&outer[i], e->out_rank, w->out_labels, e->size, w->stride[i]);
        odo_seek(&outer[i], begin);
    }
    int64_t n_sum = count_of(w->sum_labels, w->n_sum, e->size);
    for (int64_t o = begin; o < end; o++) {
        odo inner[KN_EINSUM_MAX_INPUTS];
        for (int i = 0; i < e->n_in; i++)
            odo_init(&inner[i], w->n_sum, w->sum_labels, e->size, w->stride[i]);
        double acc = 0.0;
        for (int64_t s = 0; s < n_sum; s++) {
            double prod = 1.0;
            for (int i = 0; i < e->n_in; i++) {
                int64_t off = outer[i].off + inner[i].off;
                prod *= w->in[i].dtype == KILN_DTYPE_FLOAT32 ? ((const float *)w->in[i].data)[off]
                                                             : kn_tensor_get_f64(&w->in[i], off);
                odo_next(&inner[i]);
            }
            acc += prod;
        }
        if (w->out->dtype == KILN_DTYPE_FLOAT32)
            ((float *)w->out->data)[o] = (float)acc;
        else if (kn_dtype_is_float(w->out->dtype))
            kn_tensor_set_f64(w->out, o, acc);
        else
            kn_cpu_store_saturated(w->out, o, acc);
        for (int i = 0; i < e->n_in; i++)
            odo_next(&outer[i]);
    }
}

static void einsum_generic(kn_kernel_ctx *k, const kn_einsum *e) {
    gen_work w = {.e = e, .in = k->in, .out = &k->out[0]};
    for (int i = 0; i < e->n_in; i++)
        label_strides(e, &k->in[i], i, w.stride[i]);
    bool in_out[ML] = {false};
    for (int a = 0; a < e->out_rank; a++) {
        w.out_labels[a] = e->out_label[a];
        in_out[e->out_label[a]] = true;
    }
    for (int l = 0; l < e->n_labels; l++)
        if (!in_out[l])
            w.sum_labels[w.n_sum++] = l;
    kn_parallel_for(k->pool, kn_tensor_numel(&k->out[0]), 256, generic_range, &w);
}

/* ---- two float32 operands through a batched matmul ---- */

/* dst[outer...] = sum over `sum` labels of src, outer labels in row-major order. */
static void gather(const float *src, const int64_t *st, const int *outer, int n_outer,
                   const int *sum, int n_sum, const int64_t *size, float *dst) {
    odo o, s;
    odo_init(&o, n_outer, outer, size, st);
    int64_t n_o = count_of(outer, n_outer, size), n_s = count_of(sum, n_sum, size);
    for (int64_t i = 0; i < n_o; i++) {
        odo_init(&s, n_sum, sum, size, st);
        float acc = 0.0f;
        for (int64_t j = 0; j < n_s; j++) {
            acc += src[o.off + s.off];
            odo_next(&s);
        }
        dst[i] = acc;
        odo_next(&o);
    }
}

static kiln_status einsum_pair(kn_kernel_ctx *k, const kn_einsum *e) {
    int64_t sa[ML], sb[ML], so[ML] = {0};
    label_strides(e, &k->in[0], 0, sa);
    label_strides(e, &k->in[1], 1, sb);
    bool has_a[ML] = {false}, has_b[ML] = {false}, has_o[ML] = {false};
    for (int a = 0; a < e->in_rank[0]; a++)
        has_a[e->in_label[0][a]] = true;
    for (int a = 0; a < e->in_rank[1]; a++)
        has_b[e->in_label[1][a]] = true;
    int64_t ost[KN_MAX_RANK];
    kn_shape_strides(&k->out[0].shape, ost);
    for (int a = 0; a < e->out_rank; a++) {
        has_o[e->out_label[a]] = true;
        so[e->out_label[a]] = ost[a];
    }
    int bt[ML], m[ML], n[ML], kk[ML], suma[ML], sumb[ML];
    int nb = 0, nm = 0, nn = 0, nk = 0, nsa = 0, nsb = 0;
    for (int l = 0; l < e->n_labels; l++) {
        if (has_a[l] && has_b[l]) {
            if (has_o[l])
                bt[nb++] = l;
            else
                kk[nk++] = l;
        } else if (has_a[l]) {
            if (has_o[l])
                m[nm++] = l;
            else
                suma[nsa++] = l;
        } else if (has_b[l]) {
            if (has_o[l])
                n[nn++] = l;
            else
                sumb[nsb++] = l;
        }
    }
    int64_t B = count_of(bt, nb, e->size), M = count_of(m, nm, e->size);
    int64_t N = count_of(n, nn, e->size), K = count_of(kk, nk, e->size);
    int la[3 * ML], lb[3 * ML], lc[3 * ML];
    memcpy(la, bt, sizeof(int) * (size_t)nb);
    memcpy(la + nb, m, sizeof(int) * (size_t)nm);
    memcpy(la + nb + nm, kk, sizeof(int) * (size_t)nk);
    memcpy(lb, bt, sizeof(int) * (size_t)nb);
    memcpy(lb + nb, n, sizeof(int) * (size_t)nn);
    memcpy(lb + nb + nn, kk, sizeof(int) * (size_t)nk);
    memcpy(lc, bt, sizeof(int) * (size_t)nb);
    memcpy(lc + nb, m, sizeof(int) * (size_t)nm);
    memcpy(lc + nb + nm, n, sizeof(int) * (size_t)nn);
    float *buf = kn_malloc(sizeof(float) * (size_t)(B * M * K + B * N * K + B * M * N + 1));
    if (buf == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for einsum operands");
    float *a = buf, *b = a + B * M * K, *c = b + B * N * K;
    gather(k->in[0].data, sa, la, nb + nm + nk, suma, nsa, e->size, a);
    gather(k->in[1].data, sb, lb, nb + nn + nk, sumb, nsb, e->size, b);
    kiln_status rc = KILN_OK;
    for (int64_t i = 0; i < B && rc == KILN_OK; i++)
        rc = cpu_rnn_matmul_nt(k->pool, a + i * M * K, b + i * N * K, c + i * M * N, M, N, K);
    if (rc != KILN_OK) {
        kn_free(buf);
        return rc;
    }
    odo o;
    odo_init(&o, nb + nm + nn, lc, e->size, so);
    float *y = k->out[0].data;
    for (int64_t i = 0; i < B * M * N; i++) {
        y[o.off] = c[i];
        odo_next(&o);
    }
    kn_free(buf);
    return KILN_OK;
}

kiln_status kn_cpu_einsum(kn_kernel_ctx *k) {
    kn_einsum e;
    KN_TRY(kn_einsum_parse(kn_attr_string(k->node, "equation", ""), k->n_in, k->in, &e));
    if (kn_tensor_numel(&k->out[0]) == 0)
        return KILN_OK;
    if (k->n_in == 2 && k->in[0].dtype == KILN_DTYPE_FLOAT32)
        return einsum_pair(k, &e);
    einsum_generic(k, &e);
    return KILN_OK;
}
