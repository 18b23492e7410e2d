/* Cast with a change of layout, the edges of a region of NHWC tensors (passes/layout_nhwc.c):
 * float32 and bfloat16 tensors of rank 4, each side NCHW or NHWC as the node's kiln_nhwc masks
 * say, converted and reordered in one pass. Tiles of 16 channels by 64 pixels go through a
 * small buffer, so both sides are read and written in runs. */
#include "backend/cpu/tensor/tensor_kernels.h"
#include "core/status.h"
#include "core/tensor.h"

#include <string.h>

#define TILE_C 16
#define TILE_P 64

typedef struct reorder_job {
    const void *x;
    void *y;
    int32_t xt, yt;
    bool x_nhwc, y_nhwc;
    int64_t c, hw;            /* channels and pixels of one image */
    int64_t c_tiles, p_tiles; /* tiles of one image */
} reorder_job;

static inline float load(const void *p, int32_t t, int64_t i) {
    return t == KILN_DTYPE_FLOAT32 ? ((const float *)p)[i]
                                   : kn_bf16_widen(((const uint16_t *)p)[i]);
}

static inline void store(void *p, int32_t t, int64_t i, float f) {
    if (t == KILN_DTYPE_FLOAT32)
        ((float *)p)[i] = f;
    else
        ((uint16_t *)p)[i] = kn_bf16_round(f);
}

static void reorder_range(void *arg, int64_t begin, int64_t end) {
    const reorder_job *j = arg;
    float buf[TILE_C][TILE_P];
    for (int64_t t = begin; t < end; t++) {
        int64_t pt = t % j->p_tiles, ct = (t / j->p_tiles) % j->c_tiles;
        int64_t n = t / (j->p_tiles * j->c_tiles);
        int64_t c0 = ct * TILE_C, p0 = pt * TILE_P, base = n * j->c * j->hw;
        int64_t nc = j->c - c0 < TILE_C ? j->c - c0 : TILE_C;
        int64_t np = j->hw - p0 < TILE_P ? j->hw - p0 : TILE_P;
        if (j->x_nhwc)
            for (int64_t p = 0; p < np; p++)
                for (int64_t c = 0; c < nc; c++)
                    buf[c][p] = load(j->x, j->xt, base + (p0 + p) * j->c + c0 + c);
        else
            for (int64_t c = 0; c < nc; c++)
                for (int64_t p = 0; p < np; p++)
                    buf[c][p] = load(j->x, j->xt, base + (c0 + c) * j->hw + p0 + p);
        if (j->y_nhwc)
            for (int64_t p = 0; p < np; p++)
                for (int64_t c = 0; c < nc; c++)
                    store(j->y, j->yt, base + (p0 + p) * j->c + c0 + c, buf[c][p]);
        else
            for (int64_t c = 0; c < nc; c++)
                for (int64_t p = 0; p < np; p++)
                    store(j->y, j->yt, base + (c0 + c) * j->hw + p0 + p, buf[c][p]);
    }
}

kiln_status kn_cpu_cast_layout(kn_kernel_ctx *k) {
    const kn_attr *a = kn_node_attr(k->node, "kiln_nhwc");
    const kn_tensor *x = &k->in[0], *y = &k->out[0];
    if (a == NULL || a->type != KN_ATTR_INTS || a->n != 2)
        return kn_error(KILN_ERR_MODEL, "Cast: kiln_nhwc must hold two masks");
    bool float_types = (x->dtype == KILN_DTYPE_FLOAT32 || x->dtype == KILN_DTYPE_BFLOAT16) &&
                       (y->dtype == KILN_DTYPE_FLOAT32 || y->dtype == KILN_DTYPE_BFLOAT16);
    if (!float_types || x->shape.rank != 4 || !kn_shape_equal(&x->shape, &y->shape))
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "Cast: an NHWC layout is taken only between float32 and bfloat16 tensors "
                        "of rank 4 (got %s to %s, rank %d)",
                        kn_dtype_name(x->dtype), kn_dtype_name(y->dtype), x->shape.rank);
    reorder_job j = {.x = x->data,
                     .y = y->data,
                     .xt = x->dtype,
                     .yt = y->dtype,
                     .x_nhwc = (a->ints[0] & 1) != 0,
                     .y_nhwc = (a->ints[1] & 1) != 0,
                     .c = x->shape.d[1],
                     .hw = x->shape.d[2] * x->shape.d[3]};
    if (j.c == 0 || j.hw == 0 || x->shape.d[0] == 0)
        return KILN_OK;
    j.c_tiles = (j.c + TILE_C - 1) / TILE_C;
    j.p_tiles = (j.hw + TILE_P - 1) / TILE_P;
    kn_parallel_for(k->pool, x->shape.d[0] * j.c_tiles * j.p_tiles, 4, reorder_range, &j);
    return KILN_OK;
}
