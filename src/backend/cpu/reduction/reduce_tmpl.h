/* Reduction loops, instantiated by reduce.c once per (element type, accumulator type):
 * define RT_T, RT_ACC, RT_SUFFIX, RT_LOWEST, RT_HIGHEST and RT_EMPTY_MEAN, then include this file.
 * Expects red_plan, the RED_* op codes and red_decompose from reduce.c. */
#define RT_CAT_(a, b) a##_##b
#define RT_CAT(a, b) RT_CAT_(a, b)
#define RT_FN(name) RT_CAT(name, RT_SUFFIX)

/* With RT_WRAP (integer accumulators) sums and products wrap around as numpy's do, where plain
 * signed arithmetic would overflow (undefined), and results computed in double are saturated
 * into range (NaN to 0) instead of converted out of range. */
#ifdef RT_WRAP
#define RT_ADD(a, b) ((RT_ACC)((uint64_t)(a) + (uint64_t)(b)))
#define RT_MUL(a, b) ((RT_ACC)((uint64_t)(a) * (uint64_t)(b)))
#define RT_NEG(a) ((RT_ACC)(0 - (uint64_t)(a)))
#define RT_FROM_F64(v)                                                                             \
    ((v) > -0x1p63 ? ((v) < 0x1p63 ? (RT_ACC)(v) : RT_HIGHEST) : (v) == (v) ? RT_LOWEST : 0)
#else
#define RT_ADD(a, b) ((a) + (b))
#define RT_MUL(a, b) ((a) * (b))
#define RT_NEG(a) (-(a))
#define RT_FROM_F64(v) ((RT_ACC)(v))
#endif

/* Eight independent partial sums let the compiler vectorize without reassociating. */
#define RT_DEFINE_SUM(name, F)                                                                     \
    static RT_ACC RT_FN(name)(const RT_T *p, int64_t n) {                                          \
        RT_ACC s[8] = {0};                                                                         \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++) {                                                          \
                RT_ACC v = (RT_ACC)p[i + j];                                                       \
                s[j] = RT_ADD(s[j], F(v));                                                         \
            }                                                                                      \
        RT_ACC t = 0;                                                                              \
        for (int j = 0; j < 8; j++)                                                                \
            t = RT_ADD(t, s[j]);                                                                   \
        for (; i < n; i++) {                                                                       \
            RT_ACC v = (RT_ACC)p[i];                                                               \
            t = RT_ADD(t, F(v));                                                                   \
        }                                                                                          \
        return t;                                                                                  \
    }

#define RT_ID(v) (v)
#define RT_ABS(v) ((v) < 0 ? RT_NEG(v) : (v))
#define RT_SQ(v) RT_MUL(v, v)
RT_DEFINE_SUM(rt_sum, RT_ID)
RT_DEFINE_SUM(rt_sumabs, RT_ABS)
RT_DEFINE_SUM(rt_sumsq, RT_SQ)

static RT_ACC RT_FN(rt_init)(int op) {
    switch (op) {
    case RED_PROD:
        return 1;
    case RED_MAX:
        return RT_LOWEST;
    case RED_MIN:
        return RT_HIGHEST;
    default:
        return 0;
    }
}

static RT_ACC RT_FN(rt_shift)(const red_plan *p, int64_t o) {
    return p->shift == NULL ? 0 : RT_FROM_F64(p->shift[o]);
}

/* Folds n contiguous elements into acc. */
static RT_ACC RT_FN(rt_fold)(int op, RT_ACC acc, const RT_T *x, int64_t n, RT_ACC shift) {
    switch (op) {
    case RED_SUM:
    case RED_MEAN:
    case RED_LOGSUM:
        return RT_ADD(acc, RT_FN(rt_sum)(x, n));
    case RED_L1:
        return RT_ADD(acc, RT_FN(rt_sumabs)(x, n));
    case RED_L2:
    case RED_SUMSQ:
        return RT_ADD(acc, RT_FN(rt_sumsq)(x, n));
    case RED_LSE:
        for (int64_t i = 0; i < n; i++) {
            double e = exp((double)x[i] - (double)shift);
            acc = RT_ADD(acc, RT_FROM_F64(e));
        }
        return acc;
    case RED_PROD:
        for (int64_t i = 0; i < n; i++)
            acc = RT_MUL(acc, (RT_ACC)x[i]);
        return acc;
    case RED_MAX:
        for (int64_t i = 0; i < n; i++)
            acc = (RT_ACC)x[i] > acc ? (RT_ACC)x[i] : acc;
        return acc;
    default:
        for (int64_t i = 0; i < n; i++)
            acc = (RT_ACC)x[i] < acc ? (RT_ACC)x[i] : acc;
        return acc;
    }
}

/* Folds a row of n contiguous elements into n accumulators. */
static void RT_FN(rt_fold_row)(int op, RT_ACC *acc, const RT_T *x, int64_t n, const double *shift) {
    switch (op) {
    case RED_SUM:
    case RED_MEAN:
    case RED_LOGSUM:
        for (int64_t i = 0; i < n; i++)
            acc[i] = RT_ADD(acc[i], (RT_ACC)x[i]);
        break;
    case RED_L1:
        for (int64_t i = 0; i < n; i++)
            acc[i] = RT_ADD(acc[i], RT_ABS((RT_ACC)x[i]));
        break;
    case RED_L2:
    case RED_SUMSQ:
        for (int64_t i = 0; i < n; i++)
            acc[i] = RT_ADD(acc[i], RT_SQ((RT_ACC)x[i]));
        break;
    case RED_LSE:
        for (int64_t i = 0; i < n; i++) {
            double e = exp((double)x[i] - shift[i]);
            acc[i] = RT_ADD(acc[i], RT_FROM_F64(e));
        }
        break;
    case RED_PROD:
        for (int64_t i = 0; i < n; i++)
            acc[i] = RT_MUL(acc[i], (RT_ACC)x[i]);
        break;
    case RED_MAX:
        for (int64_t i = 0; i < n; i++)
            acc[i] = (RT_ACC)x[i] > acc[i] ? (RT_ACC)x[i] : acc[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            acc[i] = (RT_ACC)x[i] < acc[i] ? (RT_ACC)x[i] : acc[i];
        break;
    }
}

static RT_ACC RT_FN(rt_finish)(int op, RT_ACC acc, int64_t count, RT_ACC shift) {
    switch (op) {
    case RED_MEAN:
        return count > 0 ? acc / (RT_ACC)count : RT_EMPTY_MEAN;
    case RED_L2: {
        double r = sqrt((double)acc);
        return RT_FROM_F64(r);
    }
    case RED_LOGSUM: {
        double r = log((double)acc);
        return RT_FROM_F64(r);
    }
    case RED_LSE: {
        double r = log((double)acc) + (double)shift;
        return RT_FROM_F64(r);
    }
    default:
        return acc;
    }
}

/* Units whose innermost reduced run is contiguous: one output element each. */
KN_CLONES static void RT_FN(rt_rows)(void *arg, int64_t begin, int64_t end) {
    const red_plan *p = arg;
    const RT_T *x = p->x;
    RT_ACC *out = p->acc;
    for (int64_t u = begin; u < end; u++) {
        int64_t base = red_decompose(u, p->nk, p->kdim, p->kstride);
        RT_ACC shift = RT_FN(rt_shift)(p, u);
        RT_ACC acc = RT_FN(rt_init)(p->op);
        for (int64_t j = 0; j < p->rcount; j++) {
            int64_t off = base + red_decompose(j, p->nr, p->rdim, p->rstride);
            acc = RT_FN(rt_fold)(p->op, acc, x + off, p->inner, shift);
        }
        out[u] = RT_FN(rt_finish)(p->op, acc, p->count, shift);
    }
}

/* Units ending in a kept contiguous run of `inner` outputs, accumulated row by row. */
KN_CLONES static void RT_FN(rt_cols)(void *arg, int64_t begin, int64_t end) {
    const red_plan *p = arg;
    const RT_T *x = p->x;
    int64_t b = p->inner;
    const double *shift = p->shift;
    for (int64_t u = begin; u < end; u++) {
        RT_ACC *acc = (RT_ACC *)p->acc + u * b;
        int64_t base = red_decompose(u, p->nk, p->kdim, p->kstride);
        RT_ACC init = RT_FN(rt_init)(p->op);
        for (int64_t i = 0; i < b; i++)
            acc[i] = init;
        for (int64_t j = 0; j < p->rcount; j++) {
            int64_t off = base + red_decompose(j, p->nr, p->rdim, p->rstride);
            RT_FN(rt_fold_row)(p->op, acc, x + off, b, shift ? shift + u * b : NULL);
        }
        for (int64_t i = 0; i < b; i++)
            acc[i] = RT_FN(rt_finish)(p->op, acc[i], p->count, RT_FN(rt_shift)(p, u * b + i));
    }
}

#undef RT_ADD
#undef RT_MUL
#undef RT_NEG
#undef RT_FROM_F64
#undef RT_DEFINE_SUM
#undef RT_ID
#undef RT_ABS
#undef RT_SQ
#undef RT_FN
#undef RT_CAT
#undef RT_CAT_
