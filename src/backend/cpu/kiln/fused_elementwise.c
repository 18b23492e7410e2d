/* kiln.FusedElementwise on the CPU: runs the node's program (see ops/fused_elementwise.h) a
 * tile of EW_TILE elements at a time so the registers stay in L1. A register holding one
 * value for the whole tile (a constant, a scalar input, or anything computed only from those)
 * is kept as a single element with stride 0, so scalar subexpressions are computed once. */
#include "backend/cpu/math/elementwise_impl.h"
#include "backend/cpu/quantization/requant.h"
#include "core/alloc.h"

#include <string.h>

typedef struct fused_instr {
    int kind, op, dst, a, b;
    ew_params p;
    float c; /* CONST value */
} fused_instr;

typedef struct fused_prog {
    int n;
    fused_instr *ins;
} fused_prog;

kiln_status ew_fused_prepare(const kn_node *node, int n_in, const kn_tensor *in, void **state) {
    (void)in;
    KN_TRY(kn_fused_validate(node, n_in));
    const int64_t *prog;
    const float *consts;
    int64_t n = kn_attr_ints(node, "program", &prog) / KN_FUSED_INSTR_INTS;
    kn_attr_floats(node, "constants", &consts);
    fused_prog *fp = kn_calloc(1, sizeof *fp);
    if (fp == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for a fused program");
    fp->ins = kn_calloc((size_t)n, sizeof *fp->ins);
    if (fp->ins == NULL) {
        kn_free(fp);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for a fused program");
    }
    fp->n = (int)n;
    for (int64_t i = 0; i < n; i++) {
        const int64_t *s = prog + i * KN_FUSED_INSTR_INTS;
        fused_instr *d = &fp->ins[i];
        d->kind = (int)s[0];
        d->op = (int)s[1];
        d->dst = (int)s[2];
        d->a = (int)s[3];
        d->b = (int)s[4];
        if (d->kind == KN_FUSED_CONST)
            d->c = consts[d->a];
        if (d->kind == KN_FUSED_STORE && d->op != 0) {
            d->p.a = consts[d->b];     /* scale */
            d->p.b = consts[d->b + 1]; /* zero point */
        }
        if (d->kind == KN_FUSED_UNARY && kn_ew_unary_nparams(d->op) > 0) {
            d->p.a = consts[d->b];
            if (kn_ew_unary_nparams(d->op) > 1)
                d->p.b = consts[d->b + 1];
            if (kn_ew_unary_nparams(d->op) > 2)
                d->p.c = consts[d->b + 2];
        }
    }
    *state = fp;
    return KILN_OK;
}

void ew_fused_release(void *state) {
    fused_prog *fp = state;
    if (fp == NULL)
        return;
    kn_free(fp->ins);
    kn_free(fp);
}

typedef struct fused_in {
    const float *data;
    int64_t stride; /* 0: one value for all; 1: same shape as the output */
    bool gather;    /* broadcast along some dims: copy through bc */
    int64_t period; /* > 0: the input is the output's trailing dims (a bias), repeated */
    ew_bcast bc;
} fused_in;

typedef struct fused_job {
    const fused_prog *prog;
    fused_in *in;
    void *out; /* float32, or bytes for a quantizing STORE */
} fused_job;

typedef struct gather_ctx {
    const float *src;
    float *dst;
    int64_t base;
} gather_ctx;

static void gather_run(void *arg, const int64_t *off, const int64_t *st, int64_t pos, int64_t n) {
    const gather_ctx *g = arg;
    float *d = g->dst + (pos - g->base);
    const float *s = g->src + off[0];
    if (st[0] == 1) {
        memcpy(d, s, (size_t)n * sizeof(float));
    } else {
        float v = s[0];
        for (int64_t i = 0; i < n; i++)
            d[i] = v;
    }
}

static void fused_chunk(void *arg, int64_t begin, int64_t end) {
    const fused_job *j = arg;
    float buf[KN_FUSED_MAX_REGS][EW_TILE];
    const float *reg[KN_FUSED_MAX_REGS];
    int64_t rs[KN_FUSED_MAX_REGS];
    for (int64_t t = begin; t < end; t += EW_TILE) {
        int64_t m = end - t < EW_TILE ? end - t : EW_TILE;
        for (int pc = 0; pc < j->prog->n; pc++) {
            const fused_instr *I = &j->prog->ins[pc];
            int d = I->dst;
            switch (I->kind) {
            case KN_FUSED_LOAD: {
                const fused_in *in = &j->in[I->a];
                int64_t off = in->period > 0 ? t % in->period : 0;
                if (in->period > 0 && off + m <= in->period) {
                    reg[d] = in->data + off;
                    rs[d] = 1;
                } else if (in->gather) {
                    gather_ctx g = {.src = in->data, .dst = buf[d], .base = t};
                    ew_bcast_walk(&in->bc, t, t + m, gather_run, &g);
                    reg[d] = buf[d];
                    rs[d] = 1;
                } else {
                    reg[d] = in->data + t * in->stride;
                    rs[d] = in->stride;
                }
                break;
            }
            case KN_FUSED_CONST:
                buf[d][0] = I->c;
                reg[d] = buf[d];
                rs[d] = 0;
                break;
            case KN_FUSED_UNARY:
                ew_unary_f32[I->op](reg[I->a], buf[d], rs[I->a] ? m : 1, &I->p);
                rs[d] = rs[I->a];
                reg[d] = buf[d];
                break;
            case KN_FUSED_BINARY: {
                int64_t sa = rs[I->a], sb = rs[I->b];
                ew_binary_f32[I->op](reg[I->a], sa, reg[I->b], sb, buf[d], sa | sb ? m : 1);
                rs[d] = sa | sb;
                reg[d] = buf[d];
                break;
            }
            case KN_FUSED_STORE: {
                if (I->op != 0) {
                    uint8_t *q = (uint8_t *)j->out + t;
                    bool sgn = I->op == KILN_DTYPE_INT8;
                    if (rs[I->a]) {
                        kn_cpu_quantize_q8(reg[I->a], m, (float)I->p.a, (float)I->p.b, sgn, q);
                    } else {
                        kn_cpu_quantize_q8(reg[I->a], 1, (float)I->p.a, (float)I->p.b, sgn, q);
                        memset(q + 1, q[0], (size_t)(m - 1));
                    }
                    break;
                }
                float *o = (float *)j->out + t;
                if (rs[I->a]) {
                    memcpy(o, reg[I->a], (size_t)m * sizeof(float));
                } else {
                    float v = reg[I->a][0];
                    for (int64_t i = 0; i < m; i++)
                        o[i] = v;
                }
                break;
            }
            default:
                KN_ASSERT(!"validated program has an unknown instruction");
            }
        }
    }
}

/* numel(x) when x, leading 1s dropped, equals y's trailing dims (so x repeats every numel(x)
 * elements of y), else 0. */
static int64_t trailing_period(const kn_shape *x, const kn_shape *y) {
    int lead = 0;
    while (lead < x->rank && x->d[lead] == 1)
        lead++;
    int n = x->rank - lead;
    if (n > y->rank)
        return 0;
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (x->d[lead + i] != y->d[y->rank - n + i])
            return 0;
        p *= x->d[lead + i];
    }
    return p;
}

static kiln_status fused_run(kn_kernel_ctx *k, const fused_prog *prog) {
    kn_tensor *y = &k->out[0];
    int64_t numel = kn_tensor_numel(y);
    fused_in *in = kn_calloc(k->n_in > 0 ? (size_t)k->n_in : 1, sizeof *in);
    if (in == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for fused inputs");
    for (int i = 0; i < k->n_in; i++) {
        const kn_tensor *x = &k->in[i];
        int64_t n = kn_tensor_numel(x);
        in[i].data = x->data;
        if (n == 1) {
            in[i].stride = 0;
        } else if (n == numel) {
            in[i].stride = 1;
        } else {
            const kn_shape *s[1] = {&x->shape};
            in[i].gather = true;
            in[i].period = trailing_period(&x->shape, &y->shape);
            ew_bcast_init(&in[i].bc, &y->shape, 1, s);
        }
    }
    fused_job j = {.prog = prog, .in = in, .out = y->data};
    kn_parallel_for(k->pool, numel, EW_GRAIN, fused_chunk, &j);
    kn_free(in);
    return KILN_OK;
}

kiln_status ew_k_fused(kn_kernel_ctx *k) {
    if (k->state != NULL)
        return fused_run(k, k->state);
    void *state = NULL;
    KN_TRY(ew_fused_prepare(k->node, k->n_in, k->in, &state));
    kiln_status rc = fused_run(k, state);
    ew_fused_release(state);
    return rc;
}
