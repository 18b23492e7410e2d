/* The cost of one parallel job of kiln's thread pool (src/core/threadpool.c) at T threads:
 * the publication, the workers' wake-up and the closing barrier that every parallel layer pays
 * once or more (80 jobs a MobileNetV2 inference at batch 1, 264 a BERT-base one). For each
 * thread count, N jobs of C x T chunks back to back, each chunk spinning for W microseconds
 * (0: empty); prints the median and the 90th percentile of the time a job takes over C x W,
 * the work each thread has. With C = 8 (what kn_parallel_for cuts a large job into) and a small
 * W it also measures the claiming of chunks.
 *
 *   build/bin/kiln_pool_overhead [--threads 1,2,4,8,16] [--jobs 20000] [--work 0,2,10]
 *                                [--chunks 1]
 */
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

static void spin(void *arg, int64_t begin, int64_t end) {
    double us = *(const double *)arg;
    for (int64_t i = begin; i < end; i++) {
        double t0 = now_us();
        while (now_us() - t0 < us) {
        }
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int parse_list(const char *s, double *out, int cap) {
    int n = 0;
    while (*s != '\0' && n < cap) {
        char *end;
        out[n++] = strtod(s, &end);
        if (end == s)
            return -1;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv) {
    double threads[16] = {1, 2, 4, 8, 16}, work[8] = {0, 2, 10};
    int n_threads = 5, n_work = 3;
    long jobs = 20000, chunks = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            n_threads = parse_list(argv[++i], threads, 16);
        else if (strcmp(argv[i], "--work") == 0 && i + 1 < argc)
            n_work = parse_list(argv[++i], work, 8);
        else if (strcmp(argv[i], "--jobs") == 0 && i + 1 < argc)
            jobs = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--chunks") == 0 && i + 1 < argc)
            chunks = strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr,
                    "usage: %s [--threads 1,2,4,8,16] [--jobs N] [--work US,...] [--chunks C]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n_threads <= 0 || n_work <= 0 || jobs < 10 || jobs > 10000000 || chunks < 1 ||
        chunks > 64) {
        fprintf(stderr, "kiln_pool_overhead: bad --threads, --work, --jobs or --chunks\n");
        return 2;
    }
    double *t = malloc((size_t)jobs * sizeof *t);
    if (t == NULL)
        return 1;
    printf("| threads | chunks a thread | work a chunk (us) | job median (us) | over the work, "
           "median (us) | p90 (us) |\n|---:|---:|---:|---:|---:|---:|\n");
    for (int a = 0; a < n_threads; a++) {
        int T = (int)threads[a];
        kn_threadpool *pool = kn_threadpool_create(T);
        if (pool == NULL || T < 1) {
            fprintf(stderr, "kiln_pool_overhead: cannot make a pool of %d threads\n", T);
            return 1;
        }
        for (int b = 0; b < n_work; b++) {
            double w = work[b];
            for (long j = 0; j < jobs / 10; j++) /* warm: workers started and spinning */
                kn_parallel_for(pool, T * chunks, 1, spin, &w);
            for (long j = 0; j < jobs; j++) {
                double t0 = now_us();
                kn_parallel_for(pool, T * chunks, 1, spin, &w);
                t[j] = now_us() - t0;
            }
            qsort(t, (size_t)jobs, sizeof *t, cmp);
            double med = t[jobs / 2], p90 = t[jobs * 9 / 10];
            double own = (double)chunks * w;
            printf("| %d | %ld | %.1f | %.2f | %.2f | %.2f |\n", T, chunks, w, med, med - own,
                   p90 - own);
            fflush(stdout);
        }
        kn_threadpool_destroy(pool);
    }
    free(t);
    return 0;
}
