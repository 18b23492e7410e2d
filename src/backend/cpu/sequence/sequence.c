/* Sequence and optional kernels: containers (core/container.h) built from the element lists
 * that inference computed the same way (ops/sequence/sequence.h). */
#include "backend/cpu/f32_stage.h"
#include "ops/sequence/sequence.h"

#include <string.h>

/* SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase, SplitToSequence, Optional */
kiln_status kn_cpu_seq_make(kn_kernel_ctx *k) {
    kn_seq_result r;
    KN_TRY(kn_seq_elements(k->node, k->n_in, k->in, &r));
    kiln_status rc = KILN_OK;
    if (kn_container_bytes(r.n, r.items) != kn_tensor_nbytes(&k->out[0]))
        rc = kn_error(KILN_ERR_INTERNAL, "the result's size changed since inference");
    if (rc == KILN_OK) {
        kn_container_write(k->out[0].data, r.kind, r.elem_dtype, r.n, r.items);
        if (r.starts != NULL) {
            kn_container c;
            rc = kn_container_open(&k->out[0], "output", &c);
            if (rc == KILN_OK)
                kn_seq_split_copy(&r, &k->in[0], &c);
        }
    }
    kn_seq_result_free(&r);
    return rc;
}

kiln_status kn_cpu_sequence_at(kn_kernel_ctx *k) {
    kn_container s;
    int pos;
    KN_TRY(kn_container_open(&k->in[0], "input 'input_sequence'", &s));
    KN_TRY(kn_seq_position(&k->in[1], "position", s.count, 0, &pos));
    kn_tensor t = kn_container_item(&s, pos);
    size_t nb = kn_tensor_nbytes(&t);
    if (nb != kn_tensor_nbytes(&k->out[0]))
        return kn_error(KILN_ERR_INTERNAL, "the element's size changed since inference");
    if (nb)
        memcpy(k->out[0].data, t.data, nb);
    return KILN_OK;
}

kiln_status kn_cpu_sequence_length(kn_kernel_ctx *k) {
    kn_container s;
    KN_TRY(kn_container_open(&k->in[0], "input 'input_sequence'", &s));
    *(int64_t *)k->out[0].data = s.count;
    return KILN_OK;
}

kiln_status kn_cpu_concat_from_sequence(kn_kernel_ctx *k) {
    kn_container s;
    kn_tensor shape;
    int axis;
    KN_TRY(kn_container_open(&k->in[0], "input 'input_sequence'", &s));
    KN_TRY(kn_seq_concat_shape(k->node, &s, &shape, &axis));
    if (!kn_shape_equal(&shape.shape, &k->out[0].shape))
        return kn_error(KILN_ERR_INTERNAL, "the output's shape changed since inference");
    int64_t outer = 1;
    for (int d = 0; d < axis; d++)
        outer *= shape.shape.d[d];
    size_t es = kn_dtype_size(shape.dtype), out_row = kn_tensor_nbytes(&shape);
    out_row = outer ? out_row / (size_t)outer : 0;
    size_t at = 0;
    for (int i = 0; i < s.count; i++) {
        kn_tensor t = kn_container_item(&s, i);
        size_t row = outer ? (size_t)(kn_tensor_numel(&t) / outer) * es : 0;
        for (int64_t o = 0; o < outer && row; o++)
            memcpy((char *)k->out[0].data + (size_t)o * out_row + at,
                   (const char *)t.data + (size_t)o * row, row);
        at += row;
    }
    return KILN_OK;
}

kiln_status kn_cpu_optional_has_element(kn_kernel_ctx *k) {
    bool has = k->n_in > 0 && k->in[0].dtype != 0;
    if (has && k->in[0].dtype == KILN_DTYPE_CONTAINER) {
        kn_container o;
        KN_TRY(kn_container_open(&k->in[0], "input", &o));
        has = o.kind != KN_CONTAINER_OPTIONAL || o.count > 0;
    }
    *(uint8_t *)k->out[0].data = has;
    return KILN_OK;
}

kiln_status kn_cpu_optional_get_element(kn_kernel_ctx *k) {
    kn_tensor src = k->in[0];
    if (src.dtype == KILN_DTYPE_CONTAINER) {
        kn_container o;
        KN_TRY(kn_container_open(&src, "input", &o));
        if (o.kind == KN_CONTAINER_OPTIONAL) {
            if (o.count == 0)
                return kn_error(KILN_ERR_INVALID_ARGUMENT, "the optional input is empty");
            src = kn_container_item(&o, 0);
        }
    }
    size_t nb = kn_tensor_nbytes(&src);
    if (nb != kn_tensor_nbytes(&k->out[0]))
        return kn_error(KILN_ERR_INTERNAL, "the element's size changed since inference");
    if (nb > 0 && k->out[0].data != src.data)
        memmove(k->out[0].data, src.data, nb);
    return KILN_OK;
}
