/* How kiln's float32 GEMM scales with threads on the products of 1x1 convolutions: A the
 * weights packed once (kn_gemm_pack_a, m x k), B the activations as NCHW stores them (k rows of
 * n pixels, read or packed by the GEMM as in a model), C m x n. For each shape and thread count,
 * R rounds of N calls back to back; prints the minimum over the rounds of each round's median,
 * the rate in GMAC/s and the speed-up over the first thread count. The default shapes are
 * MobileNetV2's projections and ResNet-50's 1x1 convs at batch 1. With --written, the pool's
 * threads write B's rows (split by rows, as the layer before would write its output channels)
 * before each call, untimed, so that B is where a model leaves it: spread over the cores'
 * caches, not in every core's; with --evict MB, they also write MB megabytes of other memory,
 * so that A (the weights) comes from L3 or memory as it does in a model of many layers.
 *
 *   build/bin/kiln_gemm_threads [--threads 1,2] [--shapes MxNxK,...] [--calls 200]
 *                               [--rounds 5] [--residual] [--written] [--evict MB]
 */
#include "backend/cpu/math/gemm.h"
#include "core/threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char *DEFAULT_SHAPES =
    "64x196x384,96x196x576,160x49x576,160x49x960,320x49x960,32x784x192,24x3136x144,"
    "256x3136x64,64x3136x256,512x784x128,128x784x512,1024x196x256,256x196x1024,2048x49x512,"
    "512x49x2048";

typedef struct shape {
    long m, n, k;
} shape;

static int parse_shapes(const char *s, shape *out, int cap) {
    int n = 0;
    while (*s != '\0') {
        shape v;
        int used = 0;
        if (n == cap || sscanf(s, "%ldx%ldx%ld%n", &v.m, &v.n, &v.k, &used) != 3 || v.m < 1 ||
            v.n < 1 || v.k < 1 || v.m * v.n > (1L << 26) || v.m * v.k > (1L << 26) ||
            v.k * v.n > (1L << 26))
            return -1;
        out[n++] = v;
        s += used;
        if (*s == ',')
            s++;
        else if (*s != '\0')
            return -1;
    }
    return n;
}

static int parse_ints(const char *s, int *out, int cap) {
    int n = 0;
    while (*s != '\0' && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 256)
            return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (end[0] != '\0' && end[0] != ',')
            return -1;
    }
    return n;
}

typedef struct write_job {
    float *b;
    long n;
} write_job;

static void write_rows(void *arg, int64_t begin, int64_t end) {
    const write_job *w = arg;
    for (int64_t r = begin; r < end; r++)
        for (long i = 0; i < w->n; i++)
            w->b[r * w->n + i] = (float)((r * 7 + i) % 13) * 0.01f - 0.06f;
}

static void fill(float *x, long n, unsigned seed) {
    for (long i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
    }
}

int main(int argc, char **argv) {
    int threads[16] = {1, 2}, n_threads = 2;
    shape shapes[64];
    int n_shapes = parse_shapes(DEFAULT_SHAPES, shapes, 64);
    long calls = 200, rounds = 5, evict_mb = 0;
    bool residual = false, written = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            n_threads = parse_ints(argv[++i], threads, 16);
        else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc)
            n_shapes = parse_shapes(argv[++i], shapes, 64);
        else if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc)
            calls = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--residual") == 0)
            residual = true;
        else if (strcmp(argv[i], "--written") == 0)
            written = true;
        else if (strcmp(argv[i], "--evict") == 0 && i + 1 < argc)
            evict_mb = strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr,
                    "usage: %s [--threads 1,2] [--shapes MxNxK,...] [--calls N] [--rounds R] "
                    "[--residual] [--written] [--evict MB]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n_threads <= 0 || n_shapes <= 0 || calls < 5 || calls > 1000000 || rounds < 1 ||
        rounds > 100 || evict_mb < 0 || evict_mb > 4096) {
        fprintf(stderr,
                "kiln_gemm_threads: bad --threads, --shapes, --calls, --rounds or --evict\n");
        return 2;
    }
    long evict_rows = evict_mb * 1024, evict_n = 256; /* rows of 1 KB */
    float *evict = evict_rows > 0 ? malloc((size_t)(evict_rows * evict_n) * sizeof *evict) : NULL;
    if (evict_rows > 0 && evict == NULL)
        return 1;
    write_job ej = {.b = evict, .n = evict_n};
    double *t = malloc((size_t)calls * sizeof *t), *best = malloc((size_t)n_threads * sizeof *best);
    if (t == NULL || best == NULL)
        return 1;
    printf("| m x n x k |");
    for (int a = 0; a < n_threads; a++)
        printf(" %d thr us | GMAC/s |%s", threads[a], a > 0 ? " speed-up |" : "");
    printf("\n|---|");
    for (int a = 0; a < n_threads; a++)
        printf("---:|---:|%s", a > 0 ? "---:|" : "");
    printf("\n");
    for (int s = 0; s < n_shapes; s++) {
        long m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;
        float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
        float *c = malloc((size_t)(m * n) * sizeof *c), *r = malloc((size_t)(m * n) * sizeof *r);
        kn_gemm_packed *pa = NULL;
        if (a == NULL || b == NULL || c == NULL || r == NULL ||
            kn_gemm_pack_a((fill(a, m * k, 1), a), k, false, m, k, &pa) != KILN_OK) {
            fprintf(stderr, "kiln_gemm_threads: out of memory\n");
            return 1;
        }
        fill(b, k * n, 2);
        fill(r, m * n, 3);
        kn_gemm_operand oa = {.packed = pa}, ob = {.p = b, .ld = n};
        kn_epilogue ep = {.residual = residual ? r : NULL, .ldr = n};
        write_job wj = {.b = b, .n = n};
        printf("| %ldx%ldx%ld |", m, n, k);
        for (int x = 0; x < n_threads; x++) {
            kn_threadpool *pool = threads[x] > 1 ? kn_threadpool_create(threads[x]) : NULL;
            if (threads[x] > 1 && pool == NULL) {
                fprintf(stderr, "kiln_gemm_threads: cannot make a pool of %d threads\n",
                        threads[x]);
                return 1;
            }
            best[x] = 1e30;
            for (long rd = 0; rd < rounds; rd++) {
                for (long i = 0; i < calls / 5; i++)
                    (void)kn_gemm(pool, m, n, k, 1.0f, &oa, &ob, 0.0f, c, n, &ep);
                for (long i = 0; i < calls; i++) {
                    if (evict != NULL)
                        kn_parallel_for(pool, evict_rows, 64, write_rows, &ej);
                    if (written)
                        kn_parallel_for(pool, k, 16, write_rows, &wj);
                    double t0 = now_us();
                    (void)kn_gemm(pool, m, n, k, 1.0f, &oa, &ob, 0.0f, c, n, &ep);
                    t[i] = now_us() - t0;
                }
                qsort(t, (size_t)calls, sizeof *t, cmp);
                if (t[calls / 2] < best[x])
                    best[x] = t[calls / 2];
            }
            kn_threadpool_destroy(pool);
            printf(" %.1f | %.1f |", best[x], (double)(m * n * k) / best[x] / 1e3);
            if (x > 0)
                printf(" %.2fx |", best[0] / best[x]);
            fflush(stdout);
        }
        printf("\n");
        kn_gemm_packed_free(pa);
        free(a);
        free(b);
        free(c);
        free(r);
    }
    free(t);
    free(best);
    free(evict);
    return 0;
}
