/* Fixed worker pool. Every job is published under the mutex with a new generation number;
 * workers spin briefly on the generation (cheap wake-up for back-to-back kernels), then sleep on
 * a condition variable. Chunks are claimed with an atomic counter so faster threads take more.
 *
 * The caller waits only for workers that joined the job (registered under the mutex), never for
 * ones that have not woken up yet: on a loaded machine a worker can stay descheduled for
 * milliseconds, and the caller takes its chunks instead. A late worker that wakes after the job
 * ended finds every chunk claimed and goes back to waiting; a new job is published only once no
 * worker is inside the previous one, so the shared chunk counter is never mixed between jobs. */
#include "core/threadpool.h"

#include "core/alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Iterations a worker polls for a new job before sleeping (and the caller for the last workers
 * before it sleeps): ~80 us on Zen 4, where a pause takes ~40 ns. Enough to bridge the gap
 * between consecutive kernels; longer spins took the core from the caller's own serial work,
 * and from a descheduled worker, whenever the machine was shared. */
#define SPIN_ITERS 2000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct kn_threadpool {
    int n; /* threads, counting the caller */
    pthread_t *workers;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* a new job or shutdown */
    pthread_cond_t done; /* the last worker finished the current job */
    atomic_uint_fast64_t generation;
    bool stop;
    atomic_int active; /* workers inside the current job (changed under mu) */
    /* The current job; written under mu before generation is bumped. */
    kn_range_fn fn;
    void *arg;
    int64_t total, chunk, n_chunks;
    atomic_int_fast64_t next_chunk;
    void *scratch;
    size_t scratch_size;
};

static void run_chunks(kn_threadpool *p) {
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&p->next_chunk, 1, memory_order_relaxed);
        if (c >= p->n_chunks)
            return;
        int64_t begin = c * p->chunk;
        int64_t end = begin + p->chunk < p->total ? begin + p->chunk : p->total;
        p->fn(p->arg, begin, end);
    }
}

static void *worker_main(void *arg) {
    kn_threadpool *p = arg;
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < SPIN_ITERS; i++) {
            if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen)
                break;
            cpu_relax();
        }
        pthread_mutex_lock(&p->mu);
        while (!p->stop && atomic_load_explicit(&p->generation, memory_order_relaxed) == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = atomic_load_explicit(&p->generation, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->active, 1, memory_order_relaxed);
        pthread_mutex_unlock(&p->mu);

        run_chunks(p);

        pthread_mutex_lock(&p->mu);
        if (atomic_fetch_sub_explicit(&p->active, 1, memory_order_release) == 1)
            pthread_cond_broadcast(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

kn_threadpool *kn_threadpool_create(int threads) {
    if (threads < 1)
        threads = 1;
    kn_threadpool *p = kn_calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->n = threads;
    atomic_init(&p->generation, 0);
    atomic_init(&p->next_chunk, 0);
    atomic_init(&p->active, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        goto fail_free;
    if (pthread_cond_init(&p->wake, NULL) != 0)
        goto fail_mutex;
    if (pthread_cond_init(&p->done, NULL) != 0)
        goto fail_wake;
    if (threads > 1) {
        p->workers = kn_calloc((size_t)threads - 1, sizeof *p->workers);
        if (p->workers == NULL)
            goto fail_done;
        for (int i = 0; i < threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                kn_threadpool_destroy(p);
                return NULL;
            }
            p->n_started++;
        }
    }
    return p;

fail_done:
    pthread_cond_destroy(&p->done);
fail_wake:
    pthread_cond_destroy(&p->wake);
fail_mutex:
    pthread_mutex_destroy(&p->mu);
fail_free:
    kn_free(p);
    return NULL;
}

void kn_threadpool_destroy(kn_threadpool *pool) {
    if (pool == NULL)
        return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_started; i++)
        pthread_join(pool->workers[i], NULL);
    kn_free(pool->workers);
    kn_free(pool->scratch);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    kn_free(pool);
}

int kn_threadpool_size(const kn_threadpool *pool) {
    return pool == NULL ? 1 : pool->n;
}

void kn_parallel_for(kn_threadpool *pool, int64_t n, int64_t grain, kn_range_fn fn, void *arg) {
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    int threads = kn_threadpool_size(pool);
    if (threads == 1 || pool->n_started == 0 || n <= grain) {
        fn(arg, 0, n);
        return;
    }
    /* Several chunks per thread balance uneven chunk costs (and a descheduled thread) without
     * much claiming overhead. */
    int64_t chunk = (n + (int64_t)threads * 8 - 1) / ((int64_t)threads * 8);
    if (chunk < grain)
        chunk = grain;
    int64_t n_chunks = (n + chunk - 1) / chunk;

    pthread_mutex_lock(&pool->mu);
    while (atomic_load_explicit(&pool->active, memory_order_relaxed) > 0)
        pthread_cond_wait(&pool->done, &pool->mu); /* a late worker still in the last job */
    pool->fn = fn;
    pool->arg = arg;
    pool->total = n;
    pool->chunk = chunk;
    pool->n_chunks = n_chunks;
    atomic_store_explicit(&pool->next_chunk, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    run_chunks(pool);

    /* Every chunk is claimed; wait for the workers still running one. Usually they finish
     * within microseconds, so poll before sleeping. */
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&pool->active, memory_order_acquire) == 0)
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&pool->mu);
    while (atomic_load_explicit(&pool->active, memory_order_acquire) > 0)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}

void *kn_threadpool_scratch(kn_threadpool *pool, size_t bytes) {
    if (pool == NULL)
        return NULL;
    if (bytes > pool->scratch_size) {
        kn_free(pool->scratch);
        pool->scratch_size = 0;
        pool->scratch = kn_aligned_alloc(bytes, 64);
        if (pool->scratch == NULL)
            return NULL;
        pool->scratch_size = bytes;
    }
    return pool->scratch;
}
