/* Kernels that move data without looking at it: the view ops' copy, Transpose, Concat, Split,
 * Slice, Expand, Tile, DepthToSpace, SpaceToDepth, BitCast. Output shapes come from inference; the
 * kernels re-resolve parameters through the same functions inference used. */
#include "backend/cpu/tensor/tensor_kernels.h"

#include "core/narrow_dtype.h"

#include <string.h>

#define ROWS_GRAIN_BYTES 32768

static void strides_of(const kn_shape *s, int64_t *st) {
    int64_t acc = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        st[i] = acc;
        acc *= s->d[i];
    }
}

kiln_status cpu_tensor_run_copy(kn_kernel_ctx *k) {
    size_t n = kn_tensor_nbytes(&k->out[0]);
    if (n != kn_tensor_nbytes(&k->in[0]))
        return kn_error(KILN_ERR_INTERNAL, "output size %zu differs from input size %zu", n,
                        kn_tensor_nbytes(&k->in[0]));
    cpu_tensor_copy(k->pool, k->out[0].data, k->in[0].data, n);
    return KILN_OK;
}

/* BitCast: the bytes unchanged; a 4- or 2-bit code keeps its low bits only. */
kiln_status cpu_tensor_run_bitcast(kn_kernel_ctx *k) {
    KN_TRY(cpu_tensor_run_copy(k));
    int bits = kn_dtype_packed_bits(k->out[0].dtype);
    if (bits != 0) {
        uint8_t *p = k->out[0].data, mask = (uint8_t)((1u << bits) - 1);
        for (int64_t i = 0, n = kn_tensor_numel(&k->out[0]); i < n; i++)
            p[i] &= mask;
    }
    return KILN_OK;
}

kiln_status cpu_tensor_run_transpose(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t perm[KN_MAX_RANK];
    KN_TRY(tensor_transpose_perm(k->node, x->shape.rank, perm));
    cpu_tensor_permute(k->pool, k->out[0].data, x->data, kn_dtype_size(x->dtype), x->shape.rank,
                       x->shape.d, perm);
    return KILN_OK;
}

/* Concat and Split share one row walk: `whole` is the joined tensor, `parts` the pieces. */
typedef struct join_job {
    char *whole;
    const kn_tensor *parts;
    int n_parts;
    int64_t axis;
    size_t inner_bytes, row_bytes;
    bool split;
} join_job;

static void join_rows(void *arg, int64_t b, int64_t e) {
    const join_job *j = arg;
    for (int64_t o = b; o < e; o++) {
        char *row = j->whole + (size_t)o * j->row_bytes;
        for (int i = 0; i < j->n_parts; i++) {
            const kn_tensor *t = &j->parts[i];
            size_t bytes = (size_t)t->shape.d[j->axis] * j->inner_bytes;
            if (t->data != NULL && bytes > 0) {
                char *part = (char *)t->data + (size_t)o * bytes;
                if (j->split)
                    memcpy(part, row, bytes);
                else
                    memcpy(row, part, bytes);
            }
            row += bytes;
        }
    }
}

static void join_run(kn_threadpool *pool, const kn_tensor *whole, const kn_tensor *parts,
                     int n_parts, int64_t axis, bool split) {
    int64_t outer, n, inner;
    tensor_split_dims(&whole->shape, axis, &outer, &n, &inner);
    size_t es = kn_dtype_size(whole->dtype);
    join_job j = {.whole = whole->data,
                  .parts = parts,
                  .n_parts = n_parts,
                  .axis = axis,
                  .inner_bytes = (size_t)inner * es,
                  .row_bytes = (size_t)(n * inner) * es,
                  .split = split};
    if (outer == 0 || j.row_bytes == 0)
        return;
    if (outer == 1) {
        char *row = j.whole;
        for (int i = 0; i < n_parts; i++) {
            size_t bytes = (size_t)parts[i].shape.d[axis] * j.inner_bytes;
            if (parts[i].data != NULL)
                cpu_tensor_copy(pool, split ? parts[i].data : row, split ? row : parts[i].data,
                                bytes);
            row += bytes;
        }
        return;
    }
    kn_parallel_for(pool, outer, (int64_t)(ROWS_GRAIN_BYTES / j.row_bytes) + 1, join_rows, &j);
}

kiln_status cpu_tensor_run_concat(kn_kernel_ctx *k) {
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", 0), k->out[0].shape.rank, &axis));
    join_run(k->pool, &k->out[0], k->in, k->n_in, axis, false);
    return KILN_OK;
}

kiln_status cpu_tensor_run_split(kn_kernel_ctx *k) {
    int64_t axis;
    KN_TRY(kn_norm_axis(kn_attr_int(k->node, "axis", 0), k->in[0].shape.rank, &axis));
    kn_tensor whole = k->in[0];
    join_run(k->pool, &whole, k->out, k->n_out, axis, true);
    return KILN_OK;
}

kiln_status cpu_tensor_run_slice(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    tensor_slice_plan p;
    KN_TRY(tensor_slice_resolve(k->node, k->n_in, k->in, &p));
    if (!kn_shape_equal(&p.out, &k->out[0].shape))
        return kn_error(KILN_ERR_INTERNAL, "slice shape differs from the inferred one");
    int64_t istr[KN_MAX_RANK], sstr[KN_MAX_RANK], base = 0;
    strides_of(&x->shape, istr);
    for (int i = 0; i < x->shape.rank; i++) {
        sstr[i] = p.step[i] * istr[i];
        base += p.start[i] * istr[i];
    }
    cpu_tensor_strided_copy(k->pool, k->out[0].data, x->data, kn_dtype_size(x->dtype),
                            x->shape.rank, p.out.d, sstr, base);
    return KILN_OK;
}

kiln_status cpu_tensor_run_expand(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    const kn_shape *o = &k->out[0].shape;
    int64_t istr[KN_MAX_RANK], sstr[KN_MAX_RANK];
    strides_of(&x->shape, istr);
    int lead = o->rank - x->shape.rank;
    if (lead < 0)
        return kn_error(KILN_ERR_INTERNAL, "expanded rank is below the input rank");
    for (int i = 0; i < o->rank; i++)
        sstr[i] = i < lead || x->shape.d[i - lead] == 1 ? 0 : istr[i - lead];
    cpu_tensor_strided_copy(k->pool, k->out[0].data, x->data, kn_dtype_size(x->dtype), o->rank,
                            o->d, sstr, 0);
    return KILN_OK;
}

kiln_status cpu_tensor_run_tile(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    const kn_shape *o = &k->out[0].shape;
    if (kn_shape_numel(o) == 0)
        return KILN_OK;
    /* Output dim i of size rep*d is viewed as (rep, d) with source strides (0, stride). */
    int64_t istr[KN_MAX_RANK], dims[2 * KN_MAX_RANK], sstr[2 * KN_MAX_RANK];
    strides_of(&x->shape, istr);
    for (int i = 0; i < x->shape.rank; i++) {
        dims[2 * i] = o->d[i] / x->shape.d[i];
        dims[2 * i + 1] = x->shape.d[i];
        sstr[2 * i] = 0;
        sstr[2 * i + 1] = istr[i];
    }
    /* The doubled view fits the strided walk when at most KN_MAX_RANK of its dims are not 1. */
    int live = 0;
    for (int i = 0; i < 2 * x->shape.rank; i++)
        live += dims[i] != 1;
    size_t es = kn_dtype_size(x->dtype);
    if (live <= KN_MAX_RANK) {
        int64_t d2[KN_MAX_RANK], s2[KN_MAX_RANK];
        int n = 0;
        for (int i = 0; i < 2 * x->shape.rank; i++) {
            if (dims[i] != 1) {
                d2[n] = dims[i];
                s2[n++] = sstr[i];
            }
        }
        if (n == 0) {
            d2[0] = s2[0] = 1;
            n = 1;
        }
        cpu_tensor_strided_copy(k->pool, k->out[0].data, x->data, es, n, d2, s2, 0);
        return KILN_OK;
    }
    /* More live dims than a view holds: tile one axis at a time through a scratch chain. */
    int64_t n = kn_shape_numel(o);
    char *a = kn_malloc((size_t)n * es), *b = kn_malloc((size_t)n * es);
    if (a == NULL || b == NULL) {
        kn_free(a);
        kn_free(b);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in Tile");
    }
    kn_shape cur = x->shape;
    memcpy(a, x->data, kn_tensor_nbytes(x));
    for (int ax = 0; ax < cur.rank; ax++) {
        int64_t outer, len, inner, rep = o->d[ax] / cur.d[ax];
        tensor_split_dims(&cur, ax, &outer, &len, &inner);
        int64_t dd[3] = {outer, rep, len * inner}, ss[3] = {len * inner, 0, 1};
        cpu_tensor_strided_copy(k->pool, b, a, es, 3, dd, ss, 0);
        cur.d[ax] *= rep;
        char *t = a;
        a = b;
        b = t;
    }
    memcpy(k->out[0].data, a, (size_t)n * es);
    kn_free(a);
    kn_free(b);
    return KILN_OK;
}

kiln_status cpu_tensor_run_depth_to_space(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t b = kn_attr_int(k->node, "blocksize", 1);
    const int64_t *d = x->shape.d;
    int64_t c2 = d[1] / (b * b);
    bool crd = strcmp(kn_attr_string(k->node, "mode", "DCR"), "CRD") == 0;
    int64_t dcr_dims[6] = {d[0], b, b, c2, d[2], d[3]}, dcr_perm[6] = {0, 3, 4, 1, 5, 2};
    int64_t crd_dims[6] = {d[0], c2, b, b, d[2], d[3]}, crd_perm[6] = {0, 1, 4, 2, 5, 3};
    cpu_tensor_permute(k->pool, k->out[0].data, x->data, kn_dtype_size(x->dtype), 6,
                       crd ? crd_dims : dcr_dims, crd ? crd_perm : dcr_perm);
    return KILN_OK;
}

kiln_status cpu_tensor_run_space_to_depth(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t b = kn_attr_int(k->node, "blocksize", 1);
    const int64_t *d = x->shape.d;
    /* output channel (bh * b + bw) * C + c (DCR), or c * b * b + bh * b + bw (CRD, opset 28) */
    bool crd = strcmp(kn_attr_string(k->node, "mode", "DCR"), "CRD") == 0;
    int64_t dims[6] = {d[0], d[1], d[2] / b, b, d[3] / b, b}, dcr[6] = {0, 3, 5, 1, 2, 4},
            crd_perm[6] = {0, 1, 3, 5, 2, 4};
    cpu_tensor_permute(k->pool, k->out[0].data, x->data, kn_dtype_size(x->dtype), 6, dims,
                       crd ? crd_perm : dcr);
    return KILN_OK;
}
