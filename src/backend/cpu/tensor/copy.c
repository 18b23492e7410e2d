/* Data-movement primitives of the tensor kernels: parallel copy, fill, strided gather over an
 * arbitrary view, blocked transposition, and one-element reductions for scatters. */
#include "backend/cpu/tensor/tensor_kernels.h"

#include <string.h>

#define COPY_CHUNK ((size_t)1 << 16)
#define PAR_COPY_MIN ((size_t)1 << 20)
#define ROW_BYTES_PER_TASK 32768
#define TILE 32

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t bytes;
} copy_job;

static void copy_range(void *arg, int64_t b, int64_t e) {
    copy_job *j = arg;
    size_t lo = (size_t)b * COPY_CHUNK, hi = (size_t)e * COPY_CHUNK;
    if (hi > j->bytes)
        hi = j->bytes;
    memcpy(j->dst + lo, j->src + lo, hi - lo);
}

void cpu_tensor_copy(kn_threadpool *pool, void *dst, const void *src, size_t bytes) {
    if (bytes == 0 || dst == src)
        return;
    if (bytes < PAR_COPY_MIN || kn_threadpool_size(pool) == 1) {
        memcpy(dst, src, bytes);
        return;
    }
    copy_job j = {dst, src, bytes};
    kn_parallel_for(pool, (int64_t)((bytes + COPY_CHUNK - 1) / COPY_CHUNK), 4, copy_range, &j);
}

#define FILL_T(T)                                                                                  \
    do {                                                                                           \
        T v;                                                                                       \
        memcpy(&v, val, sizeof v);                                                                 \
        T *d = dst;                                                                                \
        for (int64_t i = 0; i < n; i++)                                                            \
            d[i] = v;                                                                              \
    } while (0)

void cpu_tensor_fill(void *dst, const void *val, size_t es, int64_t n) {
    if (n <= 0)
        return;
    switch (es) {
    case 1:
        memset(dst, *(const uint8_t *)val, (size_t)n);
        break;
    case 2:
        FILL_T(uint16_t);
        break;
    case 4:
        FILL_T(uint32_t);
        break;
    default:
        FILL_T(uint64_t);
        break;
    }
}

#define GATHER_T(T)                                                                                \
    do {                                                                                           \
        const T *s = (const T *)src;                                                               \
        T *d = (T *)dst;                                                                           \
        for (int64_t i = 0; i < len; i++)                                                          \
            d[i] = s[i * st];                                                                      \
    } while (0)

static void row_copy(void *dst, const void *src, size_t es, int64_t len, int64_t st) {
    if (st == 1) {
        memcpy(dst, src, (size_t)len * es);
        return;
    }
    if (st == 0) {
        cpu_tensor_fill(dst, src, es, len);
        return;
    }
    switch (es) {
    case 1:
        GATHER_T(uint8_t);
        break;
    case 2:
        GATHER_T(uint16_t);
        break;
    case 4:
        GATHER_T(uint32_t);
        break;
    default:
        GATHER_T(uint64_t);
        break;
    }
}

/* Drop unit dims and merge dims that are contiguous in the source too. Returns the new rank
 * (at least 1). */
static int simplify(int rank, const int64_t *dims, const int64_t *sstr, int64_t *od, int64_t *os) {
    int n = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1)
            continue;
        if (n > 0 && os[n - 1] == sstr[i] * dims[i]) {
            od[n - 1] *= dims[i];
            os[n - 1] = sstr[i];
            continue;
        }
        od[n] = dims[i];
        os[n] = sstr[i];
        n++;
    }
    if (n == 0) {
        od[0] = 1;
        os[0] = 1;
        n = 1;
    }
    return n;
}

typedef struct strided_job {
    char *dst;
    const char *src;
    size_t es;
    int rank;
    int64_t dims[KN_MAX_RANK];
    int64_t sstr[KN_MAX_RANK];
    int64_t base;
} strided_job;

static void strided_rows(void *arg, int64_t b, int64_t e) {
    const strided_job *j = arg;
    int outer = j->rank - 1;
    int64_t len = j->dims[outer], st = j->sstr[outer];
    int64_t idx[KN_MAX_RANK], off = j->base, r = b;
    for (int d = outer - 1; d >= 0; d--) {
        idx[d] = r % j->dims[d];
        r /= j->dims[d];
        off += idx[d] * j->sstr[d];
    }
    char *dst = j->dst + (size_t)b * (size_t)len * j->es;
    for (int64_t row = b; row < e; row++) {
        row_copy(dst, j->src + off * (int64_t)j->es, j->es, len, st);
        dst += (size_t)len * j->es;
        for (int d = outer - 1; d >= 0; d--) {
            off += j->sstr[d];
            if (++idx[d] < j->dims[d])
                break;
            off -= j->sstr[d] * j->dims[d];
            idx[d] = 0;
        }
    }
}

void cpu_tensor_strided_copy(kn_threadpool *pool, void *dst, const void *src, size_t es, int rank,
                             const int64_t *dims, const int64_t *sstr, int64_t base) {
    int64_t numel = 1;
    for (int i = 0; i < rank; i++)
        numel *= dims[i];
    if (numel == 0)
        return;
    strided_job j = {.dst = dst, .src = src, .es = es, .base = base};
    j.rank = simplify(rank, dims, sstr, j.dims, j.sstr);
    int64_t len = j.dims[j.rank - 1], rows = numel / len;
    int64_t grain = ROW_BYTES_PER_TASK / (len * (int64_t)es) + 1;
    kn_parallel_for(pool, rows, grain, strided_rows, &j);
}

typedef struct tile_job {
    char *dst;
    const char *src;
    size_t es;
    int n_outer;
    int64_t odims[KN_MAX_RANK], osrc[KN_MAX_RANK], odst[KN_MAX_RANK]; /* outer dims */
    int64_t nj, nl, s_l, d_j; /* J: source-contiguous dim; L: destination-contiguous dim */
    int64_t n_jblocks;
} tile_job;

/* Each tile goes through a small local buffer: the source is read and the destination written
 * in contiguous runs, so power-of-two strides cannot make the tile's rows evict each other. */
#define TILE_T(T)                                                                                  \
    do {                                                                                           \
        T buf[TILE * TILE];                                                                        \
        const T *s = (const T *)j->src + soff;                                                     \
        T *d = (T *)j->dst + doff;                                                                 \
        int64_t nj = j1 - j0;                                                                      \
        for (int64_t l0 = 0; l0 < j->nl; l0 += TILE) {                                             \
            int64_t nl = l0 + TILE < j->nl ? TILE : j->nl - l0;                                    \
            for (int64_t l = 0; l < nl; l++) {                                                     \
                const T *sl = s + (l0 + l) * j->s_l + j0;                                          \
                for (int64_t jj = 0; jj < nj; jj++)                                                \
                    buf[jj * TILE + l] = sl[jj];                                                   \
            }                                                                                      \
            for (int64_t jj = 0; jj < nj; jj++) {                                                  \
                T *dj = d + (j0 + jj) * j->d_j + l0;                                               \
                for (int64_t l = 0; l < nl; l++)                                                   \
                    dj[l] = buf[jj * TILE + l];                                                    \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static void tile_tasks(void *arg, int64_t b, int64_t e) {
    const tile_job *j = arg;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / j->n_jblocks, jb = t % j->n_jblocks;
        int64_t soff = 0, doff = 0;
        for (int d = j->n_outer - 1; d >= 0; d--) {
            int64_t i = o % j->odims[d];
            o /= j->odims[d];
            soff += i * j->osrc[d];
            doff += i * j->odst[d];
        }
        int64_t j0 = jb * TILE, j1 = j0 + TILE < j->nj ? j0 + TILE : j->nj;
        switch (j->es) {
        case 1:
            TILE_T(uint8_t);
            break;
        case 2:
            TILE_T(uint16_t);
            break;
        case 4:
            TILE_T(uint32_t);
            break;
        default:
            TILE_T(uint64_t);
            break;
        }
    }
}

void cpu_tensor_permute(kn_threadpool *pool, void *dst, const void *src, size_t es, int rank,
                        const int64_t *in_dims, const int64_t *perm) {
    int64_t istr[KN_MAX_RANK], od[KN_MAX_RANK], os[KN_MAX_RANK];
    int64_t numel = 1;
    for (int i = rank - 1; i >= 0; i--) {
        istr[i] = numel;
        numel *= in_dims[i];
    }
    if (numel == 0)
        return;
    for (int i = 0; i < rank; i++) {
        od[i] = in_dims[perm[i]];
        os[i] = istr[perm[i]];
    }
    int64_t sd[KN_MAX_RANK], ss[KN_MAX_RANK];
    int n = simplify(rank, od, os, sd, ss);
    int jd = -1;
    for (int i = 0; i < n - 1; i++)
        if (ss[i] == 1)
            jd = i;
    if (ss[n - 1] == 1 || jd < 0) {
        cpu_tensor_strided_copy(pool, dst, src, es, n, sd, ss, 0);
        return;
    }
    /* The innermost source dim moved outwards: transpose 2-D tiles of (J, L). */
    int64_t ostr[KN_MAX_RANK], acc = 1;
    for (int i = n - 1; i >= 0; i--) {
        ostr[i] = acc;
        acc *= sd[i];
    }
    tile_job j = {.dst = dst, .src = src, .es = es};
    int64_t outer = 1;
    for (int i = 0; i < n - 1; i++) {
        if (i == jd)
            continue;
        j.odims[j.n_outer] = sd[i];
        j.osrc[j.n_outer] = ss[i];
        j.odst[j.n_outer] = ostr[i];
        j.n_outer++;
        outer *= sd[i];
    }
    j.nj = sd[jd];
    j.d_j = ostr[jd];
    j.nl = sd[n - 1];
    j.s_l = ss[n - 1];
    j.n_jblocks = (j.nj + TILE - 1) / TILE;
    int64_t grain = 4096 / (TILE * j.nl) + 1;
    kn_parallel_for(pool, outer * j.n_jblocks, grain, tile_tasks, &j);
}

#define RED_T(T)                                                                                   \
    do {                                                                                           \
        T a, b;                                                                                    \
        memcpy(&a, dst, sizeof a);                                                                 \
        memcpy(&b, src, sizeof b);                                                                 \
        a = red == 1   ? (T)(a + b)                                                                \
            : red == 2 ? (T)(a * b)                                                                \
            : red == 3 ? (a > b ? a : b)                                                           \
            : a < b    ? a                                                                         \
                       : b;                                                                           \
        memcpy(dst, &a, sizeof a);                                                                 \
    } while (0)

static void reduce_half(int32_t dtype, int red, void *dst, const void *src) {
    uint16_t ha, hb;
    memcpy(&ha, dst, 2);
    memcpy(&hb, src, 2);
    bool f16 = dtype == KILN_DTYPE_FLOAT16;
    float a = f16 ? kn_half_to_float(ha) : kn_bf16_to_float(ha);
    float b = f16 ? kn_half_to_float(hb) : kn_bf16_to_float(hb);
    a = red == 1 ? a + b : red == 2 ? a * b : red == 3 ? (a > b ? a : b) : a < b ? a : b;
    ha = f16 ? kn_float_to_half(a) : kn_float_to_bf16(a);
    memcpy(dst, &ha, 2);
}

void cpu_tensor_reduce_elem(int32_t dtype, int red, void *dst, const void *src) {
    if (red == 0) {
        memcpy(dst, src, kn_dtype_size(dtype));
        return;
    }
    switch (dtype) {
    case KILN_DTYPE_FLOAT32:
        RED_T(float);
        break;
    case KILN_DTYPE_FLOAT64:
        RED_T(double);
        break;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
        reduce_half(dtype, red, dst, src);
        break;
    case KILN_DTYPE_INT8:
        RED_T(int8_t);
        break;
    case KILN_DTYPE_INT16:
        RED_T(int16_t);
        break;
    case KILN_DTYPE_INT32:
        RED_T(int32_t);
        break;
    case KILN_DTYPE_INT64:
        RED_T(int64_t);
        break;
    case KILN_DTYPE_UINT16:
        RED_T(uint16_t);
        break;
    case KILN_DTYPE_UINT32:
        RED_T(uint32_t);
        break;
    case KILN_DTYPE_UINT64:
        RED_T(uint64_t);
        break;
    case KILN_DTYPE_BOOL: {
        uint8_t *a = dst;
        uint8_t b = *(const uint8_t *)src;
        *a = (red == 1 || red == 3) ? (*a || b) : (*a && b);
        break;
    }
    default:
        RED_T(uint8_t);
        break;
    }
}
