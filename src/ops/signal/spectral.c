/* Signal ops: the Hann, Hamming and Blackman windows, DFT (opsets 17 and 20), STFT and
 * MelWeightMatrix: shape inference. Sizes come from scalar inputs, so their data is needed. */
#include "ops/infer_util.h"

static kiln_status output_datatype(const kn_infer_ctx *c, int32_t *dt) {
    int64_t v = kn_attr_int(c->node, "output_datatype", KILN_DTYPE_FLOAT32);
    if (v != KILN_DTYPE_FLOAT32 && v != KILN_DTYPE_FLOAT64 && v != KILN_DTYPE_FLOAT16 &&
        v != KILN_DTYPE_BFLOAT16 && !kn_dtype_is_integer((int32_t)v))
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "attribute 'output_datatype' %lld is not a "
                        "supported numeric type",
                        (long long)v);
    *dt = (int32_t)v;
    return KILN_OK;
}

kiln_status kn_infer_window(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, 1, 1));
    int32_t dt;
    KN_TRY(output_datatype(c, &dt));
    int64_t size;
    KN_TRY(kn_infer_scalar_i64(c, 0, "size", &size));
    if (size < 0)
        return kn_error(KILN_ERR_SHAPE, "input size must be >= 0, got %lld", (long long)size);
    c->out[0].dtype = dt;
    c->out[0].shape = (kn_shape){.rank = 1, .d = {size}};
    return KILN_OK;
}

/* The DFT axis: an attribute before opset 20, an optional input (default -2) from 20. The
 * last dim holds real/imaginary parts and cannot be the axis. */
static kiln_status dft_axis(const kn_infer_ctx *c, int64_t *axis) {
    int32_t r = c->in[0].shape.rank;
    int64_t a;
    if (c->node->opset >= 20) {
        a = -2;
        if (kn_has_input(c, 2))
            KN_TRY(kn_infer_scalar_i64(c, 2, "axis", &a));
    } else {
        a = kn_attr_int(c->node, "axis", 1);
    }
    if (a < 0)
        a += r;
    if (a < 0 || a >= r - 1)
        return kn_error(KILN_ERR_SHAPE, "DFT axis must be in [%d, %d] or [0, %d], got %lld", -r, -2,
                        r - 2, (long long)a);
    *axis = a;
    return KILN_OK;
}

kiln_status kn_infer_dft(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 1, c->node->opset >= 20 ? 3 : 2, 1));
    const kn_tensor *x = &c->in[0];
    if (!kn_infer_is_float(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input must be a float tensor, got %s",
                        kn_dtype_name(x->dtype));
    int32_t r = x->shape.rank;
    if (r < 2 || (x->shape.d[r - 1] != 1 && x->shape.d[r - 1] != 2))
        return kn_error(KILN_ERR_SHAPE, "input must have rank >= 2 and a last dim of 1 (real) "
                                        "or 2 (complex)");
    int64_t axis;
    KN_TRY(dft_axis(c, &axis));
    bool onesided = kn_attr_int(c->node, "onesided", 0) != 0;
    bool inverse = kn_attr_int(c->node, "inverse", 0) != 0;
    /* the inverse of a one-sided spectrum (IRFFT): m bins make 2 (m - 1) real values */
    bool irfft = onesided && inverse;
    int64_t n = irfft ? 2 * (x->shape.d[axis] - 1) : x->shape.d[axis];
    if (kn_has_input(c, 1))
        KN_TRY(kn_infer_scalar_i64(c, 1, "dft_length", &n));
    if (n < 1)
        return kn_error(KILN_ERR_SHAPE, "dft_length must be >= 1, got %lld", (long long)n);
    if (onesided && !inverse && x->shape.d[r - 1] != 1)
        return kn_error(KILN_ERR_SHAPE, "onesided forward DFT needs a real input (last dim 1)");
    if (irfft && x->shape.d[r - 1] != 2)
        return kn_error(KILN_ERR_SHAPE, "onesided inverse DFT needs a complex input (last dim 2)");
    c->out[0].dtype = x->dtype;
    c->out[0].shape = x->shape;
    c->out[0].shape.d[axis] = onesided && !inverse ? n / 2 + 1 : n;
    c->out[0].shape.d[r - 1] = irfft ? 1 : 2;
    return KILN_OK;
}

kiln_status kn_infer_stft(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 2, 4, 1));
    const kn_tensor *x = &c->in[0];
    if (!kn_infer_is_float(x->dtype))
        return kn_error(KILN_ERR_DTYPE, "input signal must be a float tensor, got %s",
                        kn_dtype_name(x->dtype));
    if (x->shape.rank != 3 || (x->shape.d[2] != 1 && x->shape.d[2] != 2))
        return kn_error(KILN_ERR_SHAPE, "input signal must be [batch, length, 1 or 2]");
    int64_t step, len = -1;
    KN_TRY(kn_infer_scalar_i64(c, 1, "frame_step", &step));
    if (kn_has_input(c, 3))
        KN_TRY(kn_infer_scalar_i64(c, 3, "frame_length", &len));
    if (kn_has_input(c, 2)) {
        const kn_tensor *w = &c->in[2];
        if (w->shape.rank != 1 || !kn_infer_is_float(w->dtype))
            return kn_error(KILN_ERR_SHAPE, "input window must be a 1-D float tensor");
        if (len >= 0 && len != w->shape.d[0])
            return kn_error(KILN_ERR_SHAPE,
                            "frame_length %lld differs from the window's "
                            "length %lld",
                            (long long)len, (long long)w->shape.d[0]);
        len = w->shape.d[0];
    }
    if (len < 0)
        len = x->shape.d[1];
    if (step < 1 || len < 1 || len > x->shape.d[1])
        return kn_error(KILN_ERR_SHAPE,
                        "frame_step (%lld) must be >= 1 and frame_length "
                        "(%lld) in [1, signal length %lld]",
                        (long long)step, (long long)len, (long long)x->shape.d[1]);
    bool onesided = kn_attr_int(c->node, "onesided", 1) != 0;
    if (onesided && x->shape.d[2] != 1)
        return kn_error(KILN_ERR_SHAPE, "onesided STFT needs a real signal (last dim 1)");
    int64_t frames = 1 + (x->shape.d[1] - len) / step;
    c->out[0].dtype = x->dtype;
    c->out[0].shape =
        (kn_shape){.rank = 4, .d = {x->shape.d[0], frames, onesided ? len / 2 + 1 : len, 2}};
    return KILN_OK;
}

kiln_status kn_infer_mel_weight_matrix(kn_infer_ctx *c) {
    KN_TRY(kn_infer_need(c, 5, 5, 1));
    int32_t dt;
    KN_TRY(output_datatype(c, &dt));
    int64_t bins, dft, rate;
    KN_TRY(kn_infer_scalar_i64(c, 0, "num_mel_bins", &bins));
    KN_TRY(kn_infer_scalar_i64(c, 1, "dft_length", &dft));
    KN_TRY(kn_infer_scalar_i64(c, 2, "sample_rate", &rate));
    for (int i = 3; i < 5; i++)
        if (!kn_infer_is_float(c->in[i].dtype) || kn_tensor_numel(&c->in[i]) != 1)
            return kn_error(KILN_ERR_SHAPE, "input %d must be a float scalar", i);
    if (bins < 1 || dft < 1 || rate < 1)
        return kn_error(KILN_ERR_SHAPE, "num_mel_bins, dft_length and sample_rate must be "
                                        ">= 1");
    c->out[0].dtype = dt;
    c->out[0].shape = (kn_shape){.rank = 2, .d = {dft / 2 + 1, bins}};
    return KILN_OK;
}
