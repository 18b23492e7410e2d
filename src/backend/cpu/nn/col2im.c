/* Col2Im. */
#include "backend/cpu/element_access.h"

#include <math.h>
#include <string.h>

/* ---- Col2Im ---- */

kiln_status kn_cpu_col2im(kn_kernel_ctx *k) {
    const kn_node *n = k->node;
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    const int64_t *img = k->in[1].data, *blk = k->in[2].data, *dil = NULL, *pads = NULL,
                  *str = NULL;
    int nd = (int)k->in[1].shape.d[0];
    int64_t has_dil = kn_attr_ints(n, "dilations", &dil);
    int64_t has_pad = kn_attr_ints(n, "pads", &pads);
    int64_t has_str = kn_attr_ints(n, "strides", &str);
    int64_t cols[KN_MAX_RANK], blocks = 1, L = 1, spatial = 1;
    for (int i = 0; i < nd; i++) {
        int64_t d = has_dil ? dil[i] : 1, s = has_str ? str[i] : 1;
        int64_t p = has_pad ? pads[i] + pads[nd + i] : 0;
        cols[i] = (img[i] + p - (d * (blk[i] - 1) + 1)) / s + 1;
        blocks *= blk[i];
        L *= cols[i];
        spatial *= img[i];
    }
    int64_t N = x->shape.d[0], C = x->shape.d[1] / blocks;
    int64_t total = kn_tensor_numel(y);
    for (int64_t i = 0; i < total; i++)
        kn_cpu_store_f64(y, i, 0.0);
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t kb = 0; kb < blocks; kb++) {
                int64_t ko[KN_MAX_RANK], rem = kb;
                for (int i = nd - 1; i >= 0; i--) {
                    ko[i] = rem % blk[i];
                    rem /= blk[i];
                }
                const int64_t row = ((b * C + c) * blocks + kb) * L;
                for (int64_t l = 0; l < L; l++) {
                    int64_t lr = l, pos = 0, ok = 1;
                    int64_t lo[KN_MAX_RANK];
                    for (int i = nd - 1; i >= 0; i--) {
                        lo[i] = lr % cols[i];
                        lr /= cols[i];
                    }
                    for (int i = 0; i < nd && ok; i++) {
                        int64_t s = has_str ? str[i] : 1, d = has_dil ? dil[i] : 1;
                        int64_t pb = has_pad ? pads[i] : 0;
                        int64_t q = lo[i] * s - pb + ko[i] * d;
                        ok = q >= 0 && q < img[i];
                        pos = pos * img[i] + q;
                    }
                    if (!ok)
                        continue;
                    int64_t o = (b * C + c) * spatial + pos;
                    kn_cpu_store_f64(y, o, kn_tensor_get_f64(y, o) + kn_cpu_load_f32(x, row + l));
                }
            }
    return KILN_OK;
}
