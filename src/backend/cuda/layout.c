/* The NHWC storage the layout pass (passes/layout_nhwc.c) records per node, as the kernels
 * read it. */
#include "backend/cuda/cuda_internal.h"

bool kc_nhwc_offered;

static bool mask_bit(const kn_node *n, int side, int j) {
    const int64_t *m;
    return j >= 0 && j < 32 && kc_attr_ints(n, "kiln_nhwc", &m) == 2 && ((m[side] >> j) & 1);
}

bool kc_nhwc_in(const kn_node *n, int j) {
    return mask_bit(n, 0, j);
}

bool kc_nhwc_out(const kn_node *n, int j) {
    return mask_bit(n, 1, j);
}

/* s right-aligned to rank 4 and reordered N, H, W, C. */
static kn_shape stored_nhwc(const kn_shape *s) {
    int64_t d[4] = {1, 1, 1, 1};
    for (int k = 0; k < s->rank && k < 4; k++)
        d[4 - s->rank + k] = s->d[k];
    kn_shape t = {.rank = 4};
    t.d[0] = d[0];
    t.d[1] = d[2];
    t.d[2] = d[3];
    t.d[3] = d[1];
    return t;
}

bool kc_bcast_stored(kc_bcast *b, const kn_node *n, const kn_shape *out, int n_in,
                     const kn_shape *const *in) {
    if (out->rank != 4 || !kc_nhwc_out(n, 0) || n_in > KC_MAX_EW_IN)
        return kc_bcast_init(b, out, n_in, in);
    kn_shape o = stored_nhwc(out), s[KC_MAX_EW_IN];
    const kn_shape *p[KC_MAX_EW_IN];
    for (int j = 0; j < n_in; j++) {
        if (in[j]->rank > 4)
            return false;
        s[j] = stored_nhwc(in[j]);
        p[j] = &s[j];
    }
    return kc_bcast_init(b, &o, n_in, p);
}
