/* Element-wise kernels whose inputs or output differ in dtype: Cast/CastLike, Pow (base and
 * exponent dtypes may differ) and Where (a bool selector over any dtype). Values pass through
 * tiles of double, int64 or uint64 so every pair of dtypes needs only one loader and one
 * storer; float-to-integer conversions truncate toward zero and saturate (NaN gives 0). */
#include "backend/cpu/math/elementwise_impl.h"
#include "core/narrow_dtype.h"

#include <math.h>
#include <string.h>

enum { K_FLOAT, K_SIGNED, K_UNSIGNED };

typedef struct tile {
    int kind;
    union {
        double f[EW_TILE];
        int64_t i[EW_TILE];
        uint64_t u[EW_TILE];
    } v;
} tile;

static int kind_of(int32_t dt) {
    switch (dt) {
    case KILN_DTYPE_UINT8:
    case KILN_DTYPE_UINT16:
    case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64:
        return K_UNSIGNED;
    case KILN_DTYPE_FLOAT32:
    case KILN_DTYPE_FLOAT64:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
        return K_FLOAT;
    default:
        return K_SIGNED; /* signed ints and bool */
    }
}

static void load_tile(const void *src, int32_t dt, int64_t stride, int64_t n, tile *t) {
    t->kind = kind_of(dt);
    if (t->kind == K_FLOAT) {
        ew_load_f64(src, dt, stride, n, t->v.f);
    } else if (t->kind == K_SIGNED) {
        ew_load_i64(src, dt, stride, n, t->v.i);
    } else {
        for (int64_t i = 0; i < n; i++) {
            switch (dt) {
            case KILN_DTYPE_UINT8:
                t->v.u[i] = ((const uint8_t *)src)[i * stride];
                break;
            case KILN_DTYPE_UINT16:
                t->v.u[i] = ((const uint16_t *)src)[i * stride];
                break;
            case KILN_DTYPE_UINT32:
                t->v.u[i] = ((const uint32_t *)src)[i * stride];
                break;
            default:
                t->v.u[i] = ((const uint64_t *)src)[i * stride];
            }
        }
    }
}

static int64_t f_to_i64(double v) {
    if (v != v)
        return 0;
    if (v >= 0x1p63)
        return INT64_MAX;
    if (v < -0x1p63)
        return INT64_MIN;
    return (int64_t)v;
}

static uint64_t f_to_u64(double v) {
    if (v != v || v <= 0)
        return 0;
    if (v >= 0x1p64)
        return UINT64_MAX;
    return (uint64_t)v;
}

static int64_t clamp_i(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Integers narrow modulo 2^bits (as numpy's astype does); floats saturate. */
#define EW_STORE_CASE(DT, TT, FROM_F, FROM_I, FROM_U)                                              \
    case DT: {                                                                                     \
        TT *d = dst;                                                                               \
        if (t->kind == K_FLOAT)                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                      \
                double v = t->v.f[i];                                                              \
                d[i] = FROM_F;                                                                     \
            }                                                                                      \
        else if (t->kind == K_SIGNED)                                                              \
            for (int64_t i = 0; i < n; i++) {                                                      \
                int64_t v = t->v.i[i];                                                             \
                d[i] = FROM_I;                                                                     \
            }                                                                                      \
        else                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                      \
                uint64_t v = t->v.u[i];                                                            \
                d[i] = FROM_U;                                                                     \
            }                                                                                      \
        break;                                                                                     \
    }

#define EW_INT_CASE(DT, TT, LO, HI)                                                                \
    EW_STORE_CASE(DT, TT, (TT)clamp_i(f_to_i64(v), LO, HI), (TT)v, (TT)v)

static void store_tile(void *dst, int32_t dt, int64_t n, const tile *t) {
    switch (dt) {
        EW_STORE_CASE(KILN_DTYPE_FLOAT32, float, (float)v, (float)v, (float)v)
        EW_STORE_CASE(KILN_DTYPE_FLOAT64, double, v, (double)v, (double)v)
        EW_STORE_CASE(KILN_DTYPE_FLOAT16, uint16_t, kn_float_to_half((float)v),
                      kn_float_to_half((float)v), kn_float_to_half((float)v))
        EW_STORE_CASE(KILN_DTYPE_BFLOAT16, uint16_t, kn_float_to_bf16((float)v),
                      kn_float_to_bf16((float)v), kn_float_to_bf16((float)v))
        EW_STORE_CASE(KILN_DTYPE_BOOL, uint8_t, v != 0, v != 0, v != 0)
        EW_INT_CASE(KILN_DTYPE_INT8, int8_t, INT8_MIN, INT8_MAX)
        EW_INT_CASE(KILN_DTYPE_INT16, int16_t, INT16_MIN, INT16_MAX)
        EW_INT_CASE(KILN_DTYPE_INT32, int32_t, INT32_MIN, INT32_MAX)
        EW_STORE_CASE(KILN_DTYPE_INT64, int64_t, f_to_i64(v), v, (int64_t)v)
        EW_INT_CASE(KILN_DTYPE_UINT8, uint8_t, 0, UINT8_MAX)
        EW_INT_CASE(KILN_DTYPE_UINT16, uint16_t, 0, UINT16_MAX)
        EW_INT_CASE(KILN_DTYPE_UINT32, uint32_t, 0, UINT32_MAX)
        EW_STORE_CASE(KILN_DTYPE_UINT64, uint64_t, f_to_u64(v), (uint64_t)v, v)
    default:
        KN_ASSERT(!"store_tile: unsupported dtype");
    }
}

static bool cast_dtype_ok(int32_t dt) {
    return dt > 0 && dt != KILN_DTYPE_STRING && kn_dtype_size(dt) != 0 &&
           (dt < EW_NDT || kn_dtype_is_narrow(dt));
}

/* A tile of float8/4-bit/2-bit codes in the kind its values have: floats, or small integers. */
static void load_narrow_tile(const uint8_t *src, int32_t dt, int64_t n, tile *t) {
    if (kn_dtype_is_narrow_int(dt)) {
        t->kind = K_SIGNED;
        for (int64_t i = 0; i < n; i++)
            t->v.i[i] = kn_narrow_int_decode(dt, src[i]);
    } else if (dt == KILN_DTYPE_FLOAT8E8M0) {
        t->kind = K_FLOAT;
        for (int64_t i = 0; i < n; i++)
            t->v.f[i] = kn_e8m0_decode(src[i]);
    } else {
        t->kind = K_FLOAT;
        for (int64_t i = 0; i < n; i++)
            t->v.f[i] = kn_narrow_float_decode(dt, src[i]);
    }
}

/* Floats to 4- and 2-bit integers truncate toward zero and, like integers, keep the low bits
 * (numpy's astype); floats to float8 round to nearest even (saturate: see narrow_dtype.h). */
static void store_narrow_tile(uint8_t *dst, int32_t dt, int64_t n, const tile *t, bool saturate,
                              int round_mode) {
    bool small_int = kn_dtype_is_narrow_int(dt);
    for (int64_t i = 0; i < n; i++) {
        if (dt == KILN_DTYPE_FLOAT8E8M0)
            dst[i] = kn_e8m0_encode(t->kind == K_FLOAT    ? (float)t->v.f[i]
                                    : t->kind == K_SIGNED ? (float)t->v.i[i]
                                                          : (float)t->v.u[i],
                                    saturate, round_mode);
        else if (small_int)
            dst[i] = kn_narrow_int_encode(dt, t->kind == K_FLOAT    ? f_to_i64(t->v.f[i])
                                              : t->kind == K_SIGNED ? t->v.i[i]
                                                                    : (int64_t)t->v.u[i]);
        else
            dst[i] = kn_narrow_float_encode(dt,
                                            t->kind == K_FLOAT    ? (float)t->v.f[i]
                                            : t->kind == K_SIGNED ? (float)t->v.i[i]
                                                                  : (float)t->v.u[i],
                                            saturate);
    }
}

typedef struct cast_job {
    const char *x;
    char *y;
    int32_t dt_x, dt_y;
    size_t es_x, es_y;
    bool saturate;  /* float8 targets: the Cast attribute (opset 19) */
    int round_mode; /* float8e8m0 targets: KN_E8M0_* (opset 24) */
} cast_job;

static void cast_chunk(void *arg, int64_t begin, int64_t end) {
    const cast_job *j = arg;
    /* float32 <-> float16 is the common case in half-precision models: convert directly. */
    if (j->dt_x == KILN_DTYPE_FLOAT32 && j->dt_y == KILN_DTYPE_FLOAT16) {
        const float *x = (const float *)j->x;
        uint16_t *y = (uint16_t *)j->y;
        for (int64_t i = begin; i < end; i++)
            y[i] = kn_float_to_half(x[i]);
        return;
    }
    if (j->dt_x == KILN_DTYPE_FLOAT16 && j->dt_y == KILN_DTYPE_FLOAT32) {
        const uint16_t *x = (const uint16_t *)j->x;
        float *y = (float *)j->y;
        for (int64_t i = begin; i < end; i++)
            y[i] = kn_half_to_float(x[i]);
        return;
    }
    tile t;
    for (int64_t i = begin; i < end; i += EW_TILE) {
        int64_t m = end - i < EW_TILE ? end - i : EW_TILE;
        const char *x = j->x + (size_t)i * j->es_x;
        char *y = j->y + (size_t)i * j->es_y;
        if (kn_dtype_is_narrow(j->dt_x))
            load_narrow_tile((const uint8_t *)x, j->dt_x, m, &t);
        else
            load_tile(x, j->dt_x, 1, m, &t);
        if (kn_dtype_is_narrow(j->dt_y))
            store_narrow_tile((uint8_t *)y, j->dt_y, m, &t, j->saturate, j->round_mode);
        else
            store_tile(y, j->dt_y, m, &t);
    }
}

static int e8m0_round_mode(const char *s) {
    return strcmp(s, "down") == 0      ? KN_E8M0_DOWN
           : strcmp(s, "nearest") == 0 ? KN_E8M0_NEAREST
                                       : KN_E8M0_UP;
}

kiln_status ew_k_cast(kn_kernel_ctx *k) {
    const kn_tensor *x = &k->in[0];
    kn_tensor *y = &k->out[0];
    if (!cast_dtype_ok(x->dtype) || !cast_dtype_ok(y->dtype))
        return kn_error(KILN_ERR_UNSUPPORTED, "cast from %s to %s is not supported",
                        kn_dtype_name(x->dtype), kn_dtype_name(y->dtype));
    int64_t n = kn_tensor_numel(x);
    if (x->dtype == y->dtype) {
        memcpy(y->data, x->data, (size_t)n * kn_dtype_size(x->dtype));
        return KILN_OK;
    }
    cast_job j = {.x = x->data,
                  .y = y->data,
                  .dt_x = x->dtype,
                  .dt_y = y->dtype,
                  .es_x = kn_dtype_size(x->dtype),
                  .es_y = kn_dtype_size(y->dtype),
                  .saturate = kn_attr_int(k->node, "saturate", 1) != 0,
                  .round_mode = e8m0_round_mode(kn_attr_string(k->node, "round_mode", "up"))};
    kn_parallel_for(k->pool, n, EW_GRAIN, cast_chunk, &j);
    return KILN_OK;
}

/* Integer power by squaring; negative exponents give 0 except for bases 1 and -1. Wraps on
 * overflow as numpy's integer power does. */
static int64_t ipow(int64_t base, int64_t e) {
    if (e < 0)
        return base == 1 ? 1 : base == -1 ? (e % 2 ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)base;
    while (e > 0) {
        if (e & 1)
            r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

typedef struct pow_job {
    ew_bcast bc;
    const char *a, *b;
    char *y;
    int32_t dt_a, dt_b;
    size_t es_a, es_b;
} pow_job;

static void pow_run(void *arg, const int64_t *off, const int64_t *st, int64_t pos, int64_t n) {
    const pow_job *j = arg;
    const char *pa = j->a + (size_t)off[0] * j->es_a, *pb = j->b + (size_t)off[1] * j->es_b;
    if (j->dt_a == KILN_DTYPE_FLOAT32 && j->dt_b == KILN_DTYPE_FLOAT32) {
        ew_binary_f32[KN_EW_POW](pa, st[0], pb, st[1], j->y + (size_t)pos * j->es_a, n);
        return;
    }
    tile ta, tb, r;
    for (int64_t t = 0; t < n; t += EW_TILE) {
        int64_t m = n - t < EW_TILE ? n - t : EW_TILE;
        load_tile(pa + (size_t)(t * st[0]) * j->es_a, j->dt_a, st[0], st[0] ? m : 1, &ta);
        load_tile(pb + (size_t)(t * st[1]) * j->es_b, j->dt_b, st[1], st[1] ? m : 1, &tb);
        if (ta.kind != K_FLOAT && tb.kind != K_FLOAT) {
            r.kind = K_SIGNED;
            for (int64_t i = 0; i < m; i++) {
                int64_t b =
                    tb.kind == K_SIGNED ? tb.v.i[st[1] ? i : 0] : (int64_t)tb.v.u[st[1] ? i : 0];
                r.v.i[i] = ipow(ta.v.i[st[0] ? i : 0], b);
            }
        } else {
            r.kind = K_FLOAT;
            for (int64_t i = 0; i < m; i++) {
                int64_t ia = st[0] ? i : 0, ib = st[1] ? i : 0;
                double a = ta.kind == K_FLOAT ? ta.v.f[ia] : (double)ta.v.i[ia];
                double b = tb.kind == K_FLOAT    ? tb.v.f[ib]
                           : tb.kind == K_SIGNED ? (double)tb.v.i[ib]
                                                 : (double)tb.v.u[ib];
                r.v.f[i] = pow(a, b);
            }
        }
        store_tile(j->y + (size_t)(pos + t) * j->es_a, j->dt_a, m, &r);
    }
}

static void pow_chunk(void *arg, int64_t begin, int64_t end) {
    pow_job *j = arg;
    ew_bcast_walk(&j->bc, begin, end, pow_run, j);
}

kiln_status ew_k_pow(kn_kernel_ctx *k) {
    const kn_tensor *a = &k->in[0], *b = &k->in[1];
    kn_tensor *y = &k->out[0];
    if (!cast_dtype_ok(a->dtype) || !cast_dtype_ok(b->dtype) || kind_of(a->dtype) == K_UNSIGNED)
        return kn_error(KILN_ERR_DTYPE, "no CPU kernel for Pow of %s by %s",
                        kn_dtype_name(a->dtype), kn_dtype_name(b->dtype));
    pow_job j = {.a = a->data,
                 .b = b->data,
                 .y = y->data,
                 .dt_a = a->dtype,
                 .dt_b = b->dtype,
                 .es_a = kn_dtype_size(a->dtype),
                 .es_b = kn_dtype_size(b->dtype)};
    const kn_shape *in[2] = {&a->shape, &b->shape};
    ew_bcast_init(&j.bc, &y->shape, 2, in);
    kn_parallel_for(k->pool, j.bc.numel, EW_GRAIN, pow_chunk, &j);
    return KILN_OK;
}

typedef struct where_job {
    ew_bcast bc;
    const uint8_t *c;
    const char *x, *y;
    char *out;
    size_t es;
} where_job;

#define EW_WHERE_CASE(SIZE, TT)                                                                    \
    case SIZE: {                                                                                   \
        const TT *X = (const TT *)px, *Y = (const TT *)py;                                         \
        TT *O = (TT *)po;                                                                          \
        for (int64_t i = 0; i < n; i++)                                                            \
            O[i] = c[i * st[0]] ? X[i * st[1]] : Y[i * st[2]];                                     \
        break;                                                                                     \
    }

static void where_run(void *arg, const int64_t *off, const int64_t *st, int64_t pos, int64_t n) {
    const where_job *j = arg;
    const uint8_t *c = j->c + off[0];
    const char *px = j->x + (size_t)off[1] * j->es, *py = j->y + (size_t)off[2] * j->es;
    char *po = j->out + (size_t)pos * j->es;
    switch (j->es) {
        EW_WHERE_CASE(1, uint8_t)
        EW_WHERE_CASE(2, uint16_t)
        EW_WHERE_CASE(4, uint32_t)
        EW_WHERE_CASE(8, uint64_t)
    default:
        KN_ASSERT(!"where: unsupported element size");
    }
}

static void where_chunk(void *arg, int64_t begin, int64_t end) {
    where_job *j = arg;
    ew_bcast_walk(&j->bc, begin, end, where_run, j);
}

kiln_status ew_k_where(kn_kernel_ctx *k) {
    kn_tensor *o = &k->out[0];
    size_t es = kn_dtype_size(o->dtype);
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return kn_error(KILN_ERR_UNSUPPORTED, "Where on dtype %s is not supported",
                        kn_dtype_name(o->dtype));
    where_job j = {
        .c = k->in[0].data, .x = k->in[1].data, .y = k->in[2].data, .out = o->data, .es = es};
    const kn_shape *in[3] = {&k->in[0].shape, &k->in[1].shape, &k->in[2].shape};
    ew_bcast_init(&j.bc, &o->shape, 3, in);
    kn_parallel_for(k->pool, j.bc.numel, EW_GRAIN, where_chunk, &j);
    return KILN_OK;
}
