/* BatchNormalization, InstanceNormalization and GroupNormalization (per-plane statistics). Every
 * input is read through float32 views. */
#include "backend/cpu/reduction/reduce_impl.h"
#include "core/alloc.h"

#include <math.h>
#include <stdint.h>

KN_CLONES void cpu_norm_moments(const float *x, int64_t n, double *mean, double *var) {
    double s[8] = {0}, t = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += x[i + j];
    for (; i < n; i++)
        t += x[i];
    for (int j = 0; j < 8; j++)
        t += s[j];
    double m = n > 0 ? t / (double)n : 0;
    for (int j = 0; j < 8; j++)
        s[j] = 0;
    t = 0;
    for (i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            double d = x[i + j] - m;
            s[j] += d * d;
        }
    for (; i < n; i++)
        t += (x[i] - m) * (x[i] - m);
    for (int j = 0; j < 8; j++)
        t += s[j];
    *mean = m;
    *var = n > 0 ? t / (double)n : 0;
}

static void affine(const float *x, float *y, int64_t n, float a, float b) {
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * a + b;
}

/* Up to 5 float32 views: inputs converted on acquire, released together. */
typedef struct views {
    kn_cpu_f32 v[5];
    int n;
} views;

static kiln_status views_acquire(views *vs, const kn_kernel_ctx *k, int count) {
    vs->n = 0;
    for (int i = 0; i < count; i++) {
        kiln_status rc = kn_cpu_f32_in(&k->in[i], &vs->v[i]);
        if (rc != KILN_OK) {
            for (int j = 0; j < vs->n; j++)
                kn_cpu_f32_release(&vs->v[j]);
            return rc;
        }
        vs->n++;
    }
    return KILN_OK;
}

static void views_release(views *vs) {
    for (int i = 0; i < vs->n; i++)
        kn_cpu_f32_release(&vs->v[i]);
}

typedef struct plane_args {
    const float *x;
    float *y;
    int64_t c, plane;   /* channels, elements per (n, c) plane */
    const float *a, *b; /* per channel: y = x * a + b (batch norm) */
    const float *scale, *bias;
    float eps;
    int64_t groups; /* group norm: groups per sample */
    bool per_group_affine;
} plane_args;

KN_CLONES static void bn_planes(void *arg, int64_t begin, int64_t end) {
    const plane_args *p = arg;
    for (int64_t u = begin; u < end; u++) {
        int64_t c = u % p->c;
        affine(p->x + u * p->plane, p->y + u * p->plane, p->plane, p->a[c], p->b[c]);
    }
}

KN_CLONES static void in_planes(void *arg, int64_t begin, int64_t end) {
    const plane_args *p = arg;
    for (int64_t u = begin; u < end; u++) {
        int64_t c = u % p->c;
        double mean, var;
        cpu_norm_moments(p->x + u * p->plane, p->plane, &mean, &var);
        float a = (float)(p->scale[c] / sqrt(var + p->eps));
        affine(p->x + u * p->plane, p->y + u * p->plane, p->plane, a,
               (float)(p->bias[c] - mean * a));
    }
}

KN_CLONES static void gn_groups(void *arg, int64_t begin, int64_t end) {
    const plane_args *p = arg;
    int64_t cpg = p->c / p->groups, len = cpg * p->plane;
    for (int64_t u = begin; u < end; u++) {
        int64_t g = u % p->groups;
        const float *x = p->x + u * len;
        float *y = p->y + u * len;
        double mean, var;
        cpu_norm_moments(x, len, &mean, &var);
        double inv = 1.0 / sqrt(var + p->eps);
        for (int64_t j = 0; j < cpg; j++) {
            int64_t w = p->per_group_affine ? g : g * cpg + j;
            float a = (float)(p->scale[w] * inv);
            affine(x + j * p->plane, y + j * p->plane, p->plane, a, (float)(p->bias[w] - mean * a));
        }
    }
}

static int64_t plane_grain(int64_t plane) {
    return plane >= 16384 ? 1 : 16384 / (plane > 0 ? plane : 1);
}

/* Batch statistics over N and the spatial dims (training_mode = 1), with running-stat
 * outputs mean * momentum + batch * (1 - momentum). */
static void bn_training(kn_kernel_ctx *k, const float *x, int64_t n, int64_t ch, int64_t plane,
                        float *mean, float *var) {
    float momentum = kn_attr_float(k->node, "momentum", 0.9f);
    for (int64_t c = 0; c < ch; c++) {
        double s = 0, sq = 0;
        for (int64_t b = 0; b < n; b++) {
            double m, v;
            cpu_norm_moments(x + (b * ch + c) * plane, plane, &m, &v);
            s += m;
            sq += v + m * m;
        }
        double bm = n > 0 ? s / (double)n : 0, bv = n > 0 ? sq / (double)n - bm * bm : 0;
        for (int i = 1; i <= 2; i++) {
            kn_tensor *o = &k->out[i];
            if (i >= k->n_out || o->dtype == 0 || k->node->out[i] < 0)
                continue;
            double in = kn_tensor_get_f64(&k->in[i + 2], c);
            kn_tensor_set_f64(o, c, in * momentum + (i == 1 ? bm : bv) * (1 - momentum));
        }
        mean[c] = (float)bm;
        var[c] = (float)bv;
    }
}

kiln_status kn_cpu_cpu_norm_batchnorm(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    int64_t n = x->shape.d[0], ch = x->shape.d[1],
            plane = kn_tensor_numel(x) / (n * ch > 0 ? n * ch : 1);
    float eps = kn_attr_float(k->node, "epsilon", 1e-5f);
    bool training = k->node->opset >= 14 && kn_attr_int(k->node, "training_mode", 0) != 0;
    views vs;
    kn_cpu_f32 yv = {0};
    KN_TRY(views_acquire(&vs, k, 5));
    kiln_status rc = kn_cpu_f32_out(&k->out[0], &yv);
    float *ab = rc == KILN_OK ? kn_malloc((size_t)(ch > 0 ? ch : 1) * 4 * sizeof(float)) : NULL;
    if (rc == KILN_OK && ab == NULL)
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "no memory for batch-norm coefficients");
    if (rc != KILN_OK)
        goto out;
    const float *mean = vs.v[3].p, *var = vs.v[4].p;
    if (training) {
        bn_training(k, vs.v[0].p, n, ch, plane, ab + 2 * ch, ab + 3 * ch);
        mean = ab + 2 * ch;
        var = ab + 3 * ch;
    }
    for (int64_t c = 0; c < ch; c++) {
        ab[c] = (float)(vs.v[1].p[c] / sqrt((double)var[c] + eps));
        ab[ch + c] = vs.v[2].p[c] - mean[c] * ab[c];
    }
    plane_args p = {.x = vs.v[0].p, .y = yv.p, .c = ch, .plane = plane, .a = ab, .b = ab + ch};
    kn_parallel_for(k->pool, n * ch, plane_grain(plane), bn_planes, &p);
    kn_cpu_f32_commit(&k->out[0], &yv);
out:
    kn_free(ab);
    if (yv.owned)
        kn_cpu_f32_release(&yv);
    views_release(&vs);
    return rc;
}

/* InstanceNormalization (one group per channel) and GroupNormalization. */
kiln_status kn_cpu_cpu_norm_grouped(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    bool group = k->node->op_type[0] == 'G';
    int64_t n = x->shape.d[0], ch = x->shape.d[1];
    int64_t plane = kn_tensor_numel(x) / (n * ch > 0 ? n * ch : 1);
    views vs;
    kn_cpu_f32 yv = {0};
    KN_TRY(views_acquire(&vs, k, 3));
    kiln_status rc = kn_cpu_f32_out(&k->out[0], &yv);
    if (rc != KILN_OK)
        goto out;
    plane_args p = {.x = vs.v[0].p,
                    .y = yv.p,
                    .c = ch,
                    .plane = plane,
                    .scale = vs.v[1].p,
                    .bias = vs.v[2].p,
                    .eps = kn_attr_float(k->node, "epsilon", 1e-5f)};
    if (group) {
        p.groups = kn_attr_int(k->node, "num_groups", 1);
        p.per_group_affine = k->node->opset < 21;
        kn_parallel_for(k->pool, n * p.groups, plane_grain(plane * (ch / p.groups)), gn_groups, &p);
    } else {
        kn_parallel_for(k->pool, n * ch, plane_grain(plane), in_planes, &p);
    }
    kn_cpu_f32_commit(&k->out[0], &yv);
out:
    if (yv.owned)
        kn_cpu_f32_release(&yv);
    views_release(&vs);
    return rc;
}
