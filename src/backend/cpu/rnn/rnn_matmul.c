/* A·B^T for the RNN and einsum kernels. Products with several rows go to the packed GEMM;
 * one- or two-row products (a recurrence step with a small batch) are memory-bound, so a tiled
 * dot-product loop that reads B once and packs nothing is faster there. */
#include "backend/cpu/math/gemm.h"
#include "backend/cpu/rnn/rnn_internal.h"

enum { TILE_M = 8, TILE_N = 64 };

typedef struct mm_args {
    const float *a, *b;
    float *c;
    int64_t m, n, k, tiles_n;
} mm_args;

static float dot(const float *x, const float *y, int64_t k) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += x[i + l] * y[i + l];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < k; i++)
        s += x[i] * y[i];
    return s;
}

static void mm_tiles(void *arg, int64_t begin, int64_t end) {
    const mm_args *p = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t m0 = (t / p->tiles_n) * TILE_M, n0 = (t % p->tiles_n) * TILE_N;
        int64_t m1 = m0 + TILE_M < p->m ? m0 + TILE_M : p->m;
        int64_t n1 = n0 + TILE_N < p->n ? n0 + TILE_N : p->n;
        for (int64_t i = m0; i < m1; i++)
            for (int64_t j = n0; j < n1; j++)
                p->c[i * p->n + j] = dot(p->a + i * p->k, p->b + j * p->k, p->k);
    }
}

kiln_status cpu_rnn_matmul_nt(kn_threadpool *pool, const float *a, const float *b, float *c,
                              int64_t m, int64_t n, int64_t k) {
    if (m <= 0 || n <= 0)
        return KILN_OK;
    if (m > 2 && k > 0)
        return kn_sgemm(pool, false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n, NULL);
    mm_args p = {a, b, c, m, n, k, (n + TILE_N - 1) / TILE_N};
    int64_t tiles = ((m + TILE_M - 1) / TILE_M) * p.tiles_n;
    int64_t work = TILE_M * TILE_N * (k > 0 ? k : 1);
    int64_t grain = work >= 32768 ? 1 : 32768 / work;
    kn_parallel_for(pool, tiles, grain, mm_tiles, &p);
    return KILN_OK;
}
