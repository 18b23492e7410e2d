/* AffineGrid. */
#include "backend/cpu/f32_stage.h"

#include <math.h>

/* Normalised coordinate of sample i of n along one axis. */
static double grid_coord(int64_t i, int64_t n, bool align) {
    if (align)
        return n > 1 ? -1.0 + 2.0 * (double)i / (double)(n - 1) : -1.0;
    return -1.0 + (2.0 * (double)i + 1.0) / (double)n;
}

kiln_status kn_cpu_affine_grid(kn_kernel_ctx *k) {
    const kn_tensor *theta = &k->in[0];
    kn_tensor *y = &k->out[0];
    bool align = kn_attr_int(k->node, "align_corners", 0) != 0;
    int nd = y->shape.rank - 2; /* 2 or 3 spatial dims */
    int64_t n = y->shape.d[0], d = nd == 3 ? y->shape.d[1] : 1;
    int64_t h = y->shape.d[nd == 3 ? 2 : 1], w = y->shape.d[nd == 3 ? 3 : 2];
    int64_t cols = nd + 1;
    for (int64_t b = 0; b < n; b++)
        for (int64_t z = 0; z < d; z++)
            for (int64_t r = 0; r < h; r++)
                for (int64_t c = 0; c < w; c++) {
                    double p[4] = {grid_coord(c, w, align), grid_coord(r, h, align),
                                   nd == 3 ? grid_coord(z, d, align) : 1.0, 1.0};
                    int64_t base = (((b * d + z) * h + r) * w + c) * nd;
                    for (int o = 0; o < nd; o++) {
                        double acc = 0.0;
                        for (int e = 0; e < cols; e++)
                            acc += kn_tensor_get_f64(theta, (b * nd + o) * cols + e) * p[e];
                        kn_tensor_set_f64(y, base + o, acc);
                    }
                }
    return KILN_OK;
}
