/* Fixed worker pool. A job is published by bumping a generation number; workers spin briefly
 * on it (cheap wake-up for back-to-back kernels), then sleep on a condition variable.
 *
 * A job's chunks are dealt out in contiguous ranges, one a taking thread, each with its own
 * claim counter on a cache line of its own. A thread claims from its own range first, then
 * helps the others by claiming from theirs (faster threads take more; a thread that never
 * wakes loses its whole range to the others, the caller included). One counter for the whole
 * job, which every claim of every thread added to, was one cache line passed from core to
 * core a claim: at 16 threads that line, not the work, set a small layer's time.
 *
 * No lock is taken on the way into or out of a job while the workers spin: at 16 threads the
 * mutex every worker took to join and to leave a job cost more than a small layer's work. A
 * worker joins by raising its own `in_job` flag and then checking that the generation is still
 * the one it saw; the caller closes a job (an odd generation) before it waits for every flag
 * to drop and rewrites the job. Both sides use sequentially consistent operations on the flag
 * and the generation, so either the worker sees the job closed and backs out, or the caller
 * sees the worker and waits for it. Each flag is on its worker's own cache line: a count of
 * the workers inside, which every worker added to and took from, was one line passed from
 * core to core twice a worker a job. The mutex guards only sleeping: a worker registers as a
 * sleeper before its last look at the generation, and the caller, after publishing, wakes sleepers
 * under the mutex (the same handshake on `sleepers`, and on `caller_waiting` for the caller's
 * own sleep).
 *
 * The caller waits only for workers that joined the job, never for ones that have not woken
 * up yet: on a loaded machine a worker can stay descheduled for milliseconds, and the caller
 * takes its chunks instead. A late worker that joins after the job's chunks are all claimed
 * finds nothing to do; the next job is published only once it has left, so the claim counters
 * are never mixed between jobs. */
#include "core/threadpool.h"

#include "core/alloc.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

/* Iterations a worker polls for a new job with a pause between looks (and the caller for the
 * last workers): ~80 us on Zen 4, where a pause takes ~40 ns. Enough to bridge the gap between
 * consecutive kernels; longer pause spins took the core from the caller's own serial work, and
 * from a descheduled worker, whenever the machine was shared. */
#define SPIN_ITERS 2000
/* After the pause spin, a thread may keep polling with sched_yield between looks for
 * KILN_CPU_SPIN_US microseconds before it sleeps (default 0: it sleeps right after the pause
 * spin). A yield hands the core to any other runnable thread, so a shared machine's other work
 * and a descheduled worker still get it, while on an idle machine the thread stays awake for
 * the next job rather than be woken for it. MobileNetV2 at batch 8 on two threads put a worker
 * to sleep 3.9 times a run and the caller 3.4 (a batch's layers outlast the pause spin: a
 * thread done early, or the caller waiting for a long chunk); 2000 us took both under 0.05,
 * but the time moved by 1 %, inside the 2-core box's noise (docs/perf-notes.md, "Idle threads
 * that yield"), so it is a setting and not the default. */
#define YIELD_SPIN_US 0

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct kn_worker {
    struct kn_threadpool *pool;
    int index; /* 1..n-1; the caller is 0 */
    pthread_t thread;
    _Alignas(64) atomic_int in_job; /* 1 while the worker is inside a job */
} kn_worker;

/* One taking thread's range of the current job's chunks: [next, end) left to claim. Written by
 * the caller while the job is closed, then claimed from by its owner and by the others. */
typedef struct kn_range {
    _Alignas(64) atomic_int_fast64_t next;
    int64_t end;
} kn_range;

/* The fields every thread touches during a job sit on cache lines of their own, by who writes
 * them: a claim of a chunk (a write to a range's counter) then does not take away the line the
 * job's description is read from, nor the one the spinning workers poll, nor another thread's
 * flag. At 16 threads and 8 chunks a thread, a small layer's job is mostly claims. */
struct kn_threadpool {
    int n;     /* threads, counting the caller */
    int limit; /* threads later jobs may use (set by the driving thread) */
    kn_worker *workers;
    kn_range *ranges; /* one a thread; range i is taken first by thread i (0: the caller) */
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* a new job or shutdown */
    pthread_cond_t done; /* a worker left a job */
    void *scratch;
    size_t scratch_size;
    /* Even: a job is open (or none yet); odd: the caller is rewriting the job. Polled by the
     * spinning workers, written twice a job by the caller. */
    _Alignas(64) atomic_uint_fast64_t generation;
    atomic_bool stop;
    /* The current job; written while the generation is odd and no worker is inside it. */
    _Alignas(64) kn_range_fn fn;
    void *arg;
    int64_t total, chunk;
    atomic_int job_threads; /* threads with index < job_threads own a range and take part */
    _Alignas(64) atomic_int sleepers; /* workers asleep or about to sleep on wake */
    atomic_int caller_waiting;        /* the caller asleep or about to sleep on done */
    double yield_us;                  /* the yielding poll's length (YIELD_SPIN_US) */
};

static void run_chunk(const kn_threadpool *p, int64_t c) {
    int64_t begin = c * p->chunk;
    int64_t end = begin + p->chunk < p->total ? begin + p->chunk : p->total;
    p->fn(p->arg, begin, end);
}

/* Claim and run chunks until every range is empty: thread `self`'s own range first, then the
 * others' in turn from the next one on. Another's range is looked at before it is claimed
 * from, so a thread finding the job done reads the counters and writes none. The claims are
 * acq_rel and the looks acquire: whoever finds a range empty then sees the joins of all that
 * claimed from it, so the caller, having found all ranges empty, waits for every such worker. */
static void run_chunks(kn_threadpool *p, int self) {
    int parts = atomic_load_explicit(&p->job_threads, memory_order_relaxed);
    for (int k = 0; k < parts; k++) {
        kn_range *r = &p->ranges[(self + k) % parts];
        if (k > 0 && atomic_load_explicit(&r->next, memory_order_acquire) >= r->end)
            continue;
        for (;;) {
            int64_t c = atomic_fetch_add_explicit(&r->next, 1, memory_order_acq_rel);
            if (c >= r->end)
                break;
            run_chunk(p, c);
        }
    }
}

/* Between two looks while polling (look i, from 0): a pause for the first SPIN_ITERS, then a
 * yield until the pool's yield_us have passed since the pause spin ended (*end, set then).
 * False once it is time to sleep. */
static bool poll_wait(const kn_threadpool *p, int i, double *end) {
    if (i < SPIN_ITERS) {
        cpu_relax();
        return true;
    }
    if (p->yield_us <= 0)
        return false; /* the default: no clock read on the way to sleep */
    if (i == SPIN_ITERS)
        *end = now_us() + p->yield_us;
    if (now_us() >= *end)
        return false;
    sched_yield();
    return true;
}

/* The next open generation after seen, or 0 on shutdown. */
static uint64_t wait_for_job(kn_threadpool *p, uint64_t seen) {
    double end = 0;
    for (int i = 0;; i++) {
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen && !(g & 1))
            return g;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
            return 0;
        if (!poll_wait(p, i, &end))
            break;
    }
    uint64_t g;
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (!atomic_load(&p->stop) && ((g = atomic_load(&p->generation)) == seen || (g & 1)))
        pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return atomic_load(&p->stop) ? 0 : g;
}

static void leave_job(kn_threadpool *p, kn_worker *w) {
    atomic_store(&w->in_job, 0);
    if (atomic_load(&p->caller_waiting)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->done);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Set once by each worker; other threads keep 0 (kn_threadpool_thread_index). */
static _Thread_local int thread_index;

int kn_threadpool_thread_index(void) {
    return thread_index;
}

static void *worker_main(void *arg) {
    kn_worker *w = arg;
    kn_threadpool *p = w->pool;
    uint64_t seen = 0;
    thread_index = w->index;
    for (;;) {
        uint64_t g = wait_for_job(p, seen);
        if (g == 0)
            return NULL;
        seen = g;
        /* A job after g may already be published (we then skip g): harmless, we wait for it
         * next. A worker past the job's thread count stays out and keeps spinning. */
        if (w->index >= atomic_load_explicit(&p->job_threads, memory_order_relaxed))
            continue;
        atomic_store(&w->in_job, 1);
        if (atomic_load(&p->generation) == g)
            run_chunks(p, w->index);
        leave_job(p, w);
    }
}

kn_threadpool *kn_threadpool_create(int threads) {
    if (threads < 1)
        threads = 1;
    kn_threadpool *p = kn_calloc(1, sizeof *p); /* 64-byte aligned, as the lines above want */
    if (p == NULL)
        return NULL;
    p->n = threads;
    p->limit = threads;
    p->yield_us = YIELD_SPIN_US;
    const char *spin = getenv("KILN_CPU_SPIN_US");
    if (spin != NULL) {
        char *end = NULL;
        double us = strtod(spin, &end);
        if (end != spin && *end == '\0' && us >= 0.0 && us <= 1e6)
            p->yield_us = us;
    }
    atomic_init(&p->generation, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->job_threads, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        goto fail_free;
    if (pthread_cond_init(&p->wake, NULL) != 0)
        goto fail_mutex;
    if (pthread_cond_init(&p->done, NULL) != 0)
        goto fail_wake;
    if (threads > 1) {
        p->ranges = kn_calloc((size_t)threads, sizeof *p->ranges);
        p->workers = kn_calloc((size_t)threads - 1, sizeof *p->workers);
        if (p->ranges == NULL || p->workers == NULL) {
            kn_free(p->ranges);
            kn_free(p->workers);
            goto fail_done;
        }
        for (int i = 0; i < threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].index = i + 1;
            if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
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
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_started; i++)
        pthread_join(pool->workers[i].thread, NULL);
    kn_free(pool->workers);
    kn_free(pool->ranges);
    kn_free(pool->scratch);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mu);
    kn_free(pool);
}

int kn_threadpool_size(const kn_threadpool *pool) {
    return pool == NULL ? 1 : pool->limit;
}

int kn_threadpool_capacity(const kn_threadpool *pool) {
    return pool == NULL ? 1 : pool->n;
}

static double thread_cpu_ms(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double kn_threadpool_cpu_ms(const kn_threadpool *pool) {
    double ms = thread_cpu_ms(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; pool != NULL && i < pool->n_started; i++) {
        clockid_t id;
        if (pthread_getcpuclockid(pool->workers[i].thread, &id) == 0)
            ms += thread_cpu_ms(id);
    }
    return ms;
}

int kn_threadpool_set_limit(kn_threadpool *pool, int threads) {
    if (pool == NULL)
        return 1;
    int old = pool->limit;
    pool->limit = threads < 1 ? 1 : threads > pool->n ? pool->n : threads;
    return old;
}

/* Whether a worker from *from on is inside a job; *from moves past the ones found outside.
 * Skipping those later is safe: one outside a closed job stays out of it (it sees the odd
 * generation), and one that joins an open job after its chunks are all claimed has none. */
static bool any_in_job(kn_threadpool *p, int *from) {
    for (; *from < p->n_started; (*from)++)
        if (atomic_load(&p->workers[*from].in_job)) /* seq_cst: pairs with the join */
            return true;
    return false;
}

/* Wait until no worker is inside a job: poll first, as they usually leave within
 * microseconds, then sleep. */
static void wait_idle(kn_threadpool *p) {
    int from = 0;
    double end = 0;
    for (int i = 0;; i++) {
        if (!any_in_job(p, &from))
            return;
        if (!poll_wait(p, i, &end))
            break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waiting, 1);
    while (any_in_job(p, &from))
        pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->caller_waiting, 0);
    pthread_mutex_unlock(&p->mu);
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

    uint64_t g = atomic_load_explicit(&pool->generation, memory_order_relaxed);
    atomic_store(&pool->generation, g + 1); /* closed: late workers back out */
    wait_idle(pool);
    pool->fn = fn;
    pool->arg = arg;
    pool->total = n;
    pool->chunk = chunk;
    /* Waking a worker that finds no chunk left costs more than the chunk. */
    int parts = n_chunks < threads ? (int)n_chunks : threads;
    for (int i = 0; i < parts; i++) {
        atomic_store_explicit(&pool->ranges[i].next, n_chunks * i / parts, memory_order_relaxed);
        pool->ranges[i].end = n_chunks * (i + 1) / parts;
    }
    atomic_store_explicit(&pool->job_threads, parts, memory_order_relaxed);
    atomic_store(&pool->generation, g + 2);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mu);
    }

    run_chunks(pool, 0);
    wait_idle(pool);
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

void kn_shared_item_help(kn_shared_item *it, int64_t item, int32_t parts, kn_piece_fn fn,
                         void *arg) {
    /* a load first: items already claimed are passed without a write to their line */
    while (atomic_load_explicit(&it->next, memory_order_relaxed) < parts) {
        int32_t part = atomic_fetch_add_explicit(&it->next, 1, memory_order_relaxed);
        if (part >= parts)
            break;
        fn(arg, item, part);
        atomic_fetch_add_explicit(&it->done, 1, memory_order_release);
    }
}

void kn_shared_item_fill(kn_shared_item *it, int64_t item, int32_t parts, kn_piece_fn fn,
                         void *arg) {
    if (atomic_load_explicit(&it->done, memory_order_acquire) >= parts)
        return;
    kn_shared_item_help(it, item, parts, fn, arg);
    /* pieces take microseconds; past a spin of that order the filler may have lost its core
     * (a shared machine), so give it the core back */
    for (int spins = 0; atomic_load_explicit(&it->done, memory_order_acquire) < parts; spins++) {
        if (spins < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
}
