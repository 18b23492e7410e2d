/* Per-layer thread counts: the pool's limit, the build's choice, the plan attribute
 * (round trip and refusal of bad values) and the executor's cap (same results, pool restored). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "builder/thread_tune.h"
#include "core/alloc.h"
#include "core/fileio.h"
#include "core/threadpool.h"
#include "ir/placement.h"
#include "kiln/kiln.h"
#include "plan/plan.h"
#include "runtime/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MODEL "tests/models/resnet_mini"

static char *path(const char *rel) {
    static char buf[1024];
    const char *root = getenv("KILN_SOURCE_DIR");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : KILN_SOURCE_DIR, rel);
    return buf;
}

/* ---- the pool's limit ----------------------------------------------------------------- */

#define MAX_SEEN 16

typedef struct seen_threads {
    pthread_mutex_t mu;
    pthread_t ids[MAX_SEEN];
    int n;
    atomic_int hits[4096];
} seen_threads;

static void note_thread(void *arg, int64_t begin, int64_t end) {
    seen_threads *s = arg;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&s->mu);
    int k = 0;
    while (k < s->n && !pthread_equal(s->ids[k], self))
        k++;
    if (k == s->n && s->n < MAX_SEEN)
        s->ids[s->n++] = self;
    pthread_mutex_unlock(&s->mu);
    for (int64_t i = begin; i < end; i++) {
        atomic_fetch_add(&s->hits[i], 1);
        for (volatile int spin = 0; spin < 2000; spin++) /* long enough for workers to join */
            ;
    }
}

/* Threads that ran chunks of one job over [0, n), each item checked to run once. */
static int threads_used(kn_threadpool *pool, int64_t n) {
    seen_threads s = {.n = 0};
    pthread_mutex_init(&s.mu, NULL);
    for (int i = 0; i < 4096; i++)
        atomic_init(&s.hits[i], 0);
    kn_parallel_for(pool, n, 1, note_thread, &s);
    for (int64_t i = 0; i < 4096; i++)
        assert_int_equal(atomic_load(&s.hits[i]), i < n ? 1 : 0);
    pthread_mutex_destroy(&s.mu);
    return s.n;
}

static void test_pool_limit(void **state) {
    (void)state;
    kn_threadpool *pool = kn_threadpool_create(4);
    assert_non_null(pool);
    assert_int_equal(kn_threadpool_size(pool), 4);
    assert_int_equal(kn_threadpool_capacity(pool), 4);
    assert_int_equal(kn_threadpool_set_limit(pool, 2), 4);
    assert_int_equal(kn_threadpool_size(pool), 2);
    assert_int_equal(kn_threadpool_capacity(pool), 4);
    assert_int_equal(kn_threadpool_set_limit(pool, 0), 2); /* clamped to [1, capacity] */
    assert_int_equal(kn_threadpool_size(pool), 1);
    assert_int_equal(kn_threadpool_set_limit(pool, 99), 1);
    assert_int_equal(kn_threadpool_size(pool), 4);
    assert_int_equal(kn_threadpool_set_limit(NULL, 3), 1);
    assert_int_equal(kn_threadpool_capacity(NULL), 1);

    /* Whatever the scheduling, a capped job never runs on more threads than its cap, and
     * never on more threads than it has chunks. */
    bool saw_more = false;
    for (int rep = 0; rep < 200; rep++) {
        kn_threadpool_set_limit(pool, 2);
        assert_true(threads_used(pool, 2000) <= 2);
        kn_threadpool_set_limit(pool, 1);
        assert_int_equal(threads_used(pool, 500), 1);
        kn_threadpool_set_limit(pool, 4);
        assert_true(threads_used(pool, 2) <= 2);
        int all = threads_used(pool, 2000);
        assert_true(all <= 4);
        saw_more |= all > 2;
    }
    (void)saw_more; /* on a loaded machine the workers may not wake in time: not asserted */
    kn_threadpool_destroy(pool);
}

/* Limits changing between back-to-back jobs: parked workers must neither take a chunk nor
 * miss a later job that includes them. */
static void test_pool_limit_back_to_back(void **state) {
    (void)state;
    kn_threadpool *pool = kn_threadpool_create(5);
    assert_non_null(pool);
    for (int rep = 0; rep < 3000; rep++) {
        int limit = 1 + rep % 5;
        kn_threadpool_set_limit(pool, limit);
        int64_t n = 1 + (rep * 7) % 64;
        assert_true(threads_used(pool, n) <= limit);
    }
    kn_threadpool_destroy(pool);
}

/* The sleeping paths: workers asleep between jobs (woken by the next one) and the caller asleep
 * waiting for a worker that holds a long chunk (woken by its leaving). Every item of every job
 * runs exactly once, and a job returns only once all of its items have run. */
typedef struct slow_job {
    atomic_int hits[256];
    int64_t slow; /* the item that sleeps */
} slow_job;

static void slow_items(void *arg, int64_t begin, int64_t end) {
    slow_job *j = arg;
    for (int64_t i = begin; i < end; i++) {
        if (i == j->slow) {
            struct timespec ts = {0, 1000000}; /* 1 ms: far past the caller's spin */
            nanosleep(&ts, NULL);
        }
        atomic_fetch_add(&j->hits[i], 1);
    }
}

/* The same jobs with the yielding poll off (the default, and KILN_CPU_SPIN_US=0: threads sleep
 * after the pause spin, so the 2 ms gaps and 1 ms items reach the sleeping paths), at 2000 us
 * (the items end inside it, the gaps near its end) and at 1 us (a garbled value keeps the
 * default). */
static void run_sleep_paths(const char *spin_us) {
    if (spin_us != NULL)
        setenv("KILN_CPU_SPIN_US", spin_us, 1);
    else
        unsetenv("KILN_CPU_SPIN_US");
    kn_threadpool *pool = kn_threadpool_create(9);
    unsetenv("KILN_CPU_SPIN_US");
    assert_non_null(pool);
    for (int rep = 0; rep < 60; rep++) {
        if (rep % 3 == 0) {
            struct timespec ts = {0, 2000000}; /* past the workers' spin: they go to sleep */
            nanosleep(&ts, NULL);
        }
        slow_job j;
        int64_t n = 9 + rep * 37 % 200;
        for (int i = 0; i < 256; i++)
            atomic_init(&j.hits[i], 0);
        j.slow = rep % 2 == 0 ? n - 1 : rep % n;
        kn_parallel_for(pool, n, 1, slow_items, &j);
        for (int64_t i = 0; i < 256; i++)
            assert_int_equal(atomic_load(&j.hits[i]), i < n ? 1 : 0);
    }
    kn_threadpool_destroy(pool);
}

static void test_pool_sleep_paths(void **state) {
    (void)state;
    run_sleep_paths("0");
    run_sleep_paths(NULL);
    run_sleep_paths("2000");
    run_sleep_paths("1");
    run_sleep_paths("2 ms");
}

/* Chunks are dealt out in ranges, one a thread; a thread that is held up must lose the rest
 * of its range to the others. The first item the caller runs, and then the first a worker
 * runs, waits (up to 10 s) until every other item of the job has run: that happens only where
 * the other threads take the held thread's remaining chunks (the rest of the held chunk runs
 * after the hold). */
typedef struct held_job {
    atomic_int hits[512];
    atomic_int done;     /* items finished */
    atomic_int held;     /* 0: none held yet, 1: one held */
    pthread_t hold_on;   /* the thread to hold */
    bool hold_caller;    /* hold the caller's first item, else a worker's */
    atomic_int timeouts; /* holds that ended by the time limit */
    int64_t n;
} held_job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void held_items(void *arg, int64_t begin, int64_t end) {
    held_job *j = arg;
    for (int64_t i = begin; i < end; i++) {
        bool mine = pthread_equal(pthread_self(), j->hold_on) != 0;
        int expected = 0;
        if (mine == j->hold_caller && atomic_compare_exchange_strong(&j->held, &expected, 1)) {
            double t0 = now_s();
            /* every item but this chunk's: the others run only after the hold */
            while (atomic_load(&j->done) < j->n - (end - begin)) {
                if (now_s() - t0 > 10.0) {
                    atomic_fetch_add(&j->timeouts, 1);
                    break;
                }
                struct timespec ts = {0, 100000};
                nanosleep(&ts, NULL);
            }
        }
        atomic_fetch_add(&j->hits[i], 1);
        atomic_fetch_add(&j->done, 1);
    }
}

static void test_pool_takes_held_ranges(void **state) {
    (void)state;
    kn_threadpool *pool = kn_threadpool_create(5);
    assert_non_null(pool);
    for (int rep = 0; rep < 8; rep++) {
        held_job j;
        j.n = 40 + rep * 53; /* 40..411 items: several chunks a thread */
        for (int i = 0; i < 512; i++)
            atomic_init(&j.hits[i], 0);
        atomic_init(&j.done, 0);
        atomic_init(&j.held, 0);
        atomic_init(&j.timeouts, 0);
        j.hold_on = pthread_self();
        j.hold_caller = rep % 2 == 0;
        kn_parallel_for(pool, j.n, 1, held_items, &j);
        assert_int_equal(atomic_load(&j.timeouts), 0);
        for (int64_t i = 0; i < 512; i++)
            assert_int_equal(atomic_load(&j.hits[i]), i < j.n ? 1 : 0);
    }
    kn_threadpool_destroy(pool);
}

/* ---- pieces of a shared item filled inside one job ----------------------------------- */

#define SHARED_ITEMS 24
#define SHARED_PIECES 7

typedef struct shared_job {
    kn_shared_item items[SHARED_ITEMS];
    atomic_int fills[SHARED_ITEMS][SHARED_PIECES];
    atomic_int early; /* a task that went on before every piece of its item was filled */
    int tasks_per_item;
    bool help_first; /* each task first helps with every item (kn_shared_item_help) */
} shared_job;

static void fill_piece(void *arg, int64_t item, int32_t part) {
    shared_job *j = arg;
    for (volatile int spin = 0; spin < 20000 * (part + 1); spin++) /* uneven pieces */
        ;
    atomic_fetch_add(&j->fills[item][part], 1);
}

static void shared_tasks(void *arg, int64_t begin, int64_t end) {
    shared_job *j = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t item = t / j->tasks_per_item;
        for (int64_t i = 0; j->help_first && i < SHARED_ITEMS; i++)
            kn_shared_item_help(&j->items[i], i, SHARED_PIECES, fill_piece, j);
        kn_shared_item_fill(&j->items[item], item, SHARED_PIECES, fill_piece, j);
        for (int p = 0; p < SHARED_PIECES; p++)
            if (atomic_load(&j->fills[item][p]) != 1)
                atomic_fetch_add(&j->early, 1);
    }
}

/* Every piece of every item filled exactly once, and no task past kn_shared_item_fill before
 * its item was whole: on one thread (no pool), and on 5 and 16 threads with one to five tasks
 * reading each item, with and without every task first helping with every item. */
static void test_shared_item_fill(void **state) {
    (void)state;
    int sizes[] = {1, 5, 16};
    for (int si = 0; si < 3; si++) {
        kn_threadpool *pool = sizes[si] > 1 ? kn_threadpool_create(sizes[si]) : NULL;
        assert_true(sizes[si] == 1 || pool != NULL);
        for (int per = 1; per <= 10; per++) {
            shared_job *j = calloc(1, sizeof *j);
            assert_non_null(j);
            j->tasks_per_item = (per + 1) / 2;
            j->help_first = per % 2 == 0;
            kn_parallel_for(pool, (int64_t)SHARED_ITEMS * j->tasks_per_item, 1, shared_tasks, j);
            assert_int_equal(atomic_load(&j->early), 0);
            for (int i = 0; i < SHARED_ITEMS; i++) {
                assert_int_equal(atomic_load(&j->items[i].done), SHARED_PIECES);
                for (int p = 0; p < SHARED_PIECES; p++)
                    assert_int_equal(atomic_load(&j->fills[i][p]), 1);
            }
            free(j);
        }
        kn_threadpool_destroy(pool);
    }
}

static void test_pick(void **state) {
    (void)state;
    int t[] = {16, 8, 4, 2, 1};
    double flat[] = {1.0, 0.93, 1.2, 1.5, 2.0};    /* 7% is noise: keep them all */
    double small[] = {1.0, 0.70, 0.50, 0.55, 0.9}; /* a small layer: 4 is best */
    double big[] = {1.0, 1.8, 3.5, 7.0, 14.0};
    assert_int_equal(kn_thread_tune_pick(t, flat, 5), 16);
    assert_int_equal(kn_thread_tune_pick(t, small, 5), 4);
    assert_int_equal(kn_thread_tune_pick(t, big, 5), 16);
    assert_int_equal(kn_thread_tune_pick(t, small, 1), 16);
    /* fewer threads are taken only from a whole-pool timing that had its CPU time */
    bool busy = true;
    assert_int_equal(kn_thread_tune_choose(t, small, 5, 0.97, 0.8, &busy), 4);
    assert_false(busy);
    assert_int_equal(kn_thread_tune_choose(t, small, 5, 0.55, 0.8, &busy), 16);
    assert_true(busy);
    busy = true; /* all threads anyway: kept whatever the share (a serial layer's is low) */
    assert_int_equal(kn_thread_tune_choose(t, big, 5, 0.06, 0.8, &busy), 16);
    assert_false(busy);
    assert_int_equal(kn_thread_tune_choose(t, small, 5, 0.55, 0.0, &busy), 4);
    assert_false(busy);
}

/* ---- plans ---------------------------------------------------------------------------- */

static void build(int threads, void **plan, size_t *size) {
    kiln_builder *b = NULL;
    kiln_network *net = NULL;
    kiln_build_config *cfg = NULL;
    assert_int_equal(kiln_builder_create(&b), KILN_OK);
    assert_int_equal(kiln_network_from_onnx_file(b, path(MODEL "/model.onnx"), &net), KILN_OK);
    assert_int_equal(kiln_build_config_create(&cfg), KILN_OK);
    assert_int_equal(kiln_build_config_set_threads(cfg, threads), KILN_OK);
    int64_t dims[] = {1, 3, 48, 48};
    assert_int_equal(kiln_build_config_add_profile(cfg, "input", 4, dims, dims, dims), KILN_OK);
    assert_int_equal(kiln_build(b, net, cfg, plan, size), KILN_OK);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
}

/* An aligned copy of a plan and its parse (constants point into the copy). */
static void *parse(const void *plan, size_t size, kn_plan *p) {
    void *copy = kn_aligned_alloc(size, 64);
    assert_non_null(copy);
    memcpy(copy, plan, size);
    assert_int_equal(kn_plan_read(copy, size, p), KILN_OK);
    return copy;
}

static int count_attrs(const kn_graph *g, int threads) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_attr *a = kn_node_attr(&g->nodes[i], KN_ATTR_THREADS);
        if (a == NULL)
            continue;
        assert_int_equal(a->type, KN_ATTR_INT);
        assert_true(a->i >= 1 && a->i < threads);
        n++;
    }
    return n;
}

static void test_build_records_valid_counts(void **state) {
    (void)state;
    void *plan;
    size_t size;
    kn_plan p;
    setenv("KILN_CPU_THREAD_TUNE", "1", 1);
    build(4, &plan, &size);
    void *copy = parse(plan, size, &p);
    (void)count_attrs(p.graph, 4); /* which layers is the machine's answer; the range is ours */
    kn_plan_clear(&p);
    kn_free(copy);
    kiln_free(plan);

    build(1, &plan, &size); /* one thread: nothing to choose */
    unsetenv("KILN_CPU_THREAD_TUNE");
    copy = parse(plan, size, &p);
    assert_int_equal(count_attrs(p.graph, 1), 0);
    kn_plan_clear(&p);
    kn_free(copy);
    kiln_free(plan);

    build(4, &plan, &size); /* off by default */
    copy = parse(plan, size, &p);
    assert_int_equal(count_attrs(p.graph, 4), 0);
    kn_plan_clear(&p);
    kn_free(copy);
    kiln_free(plan);
}

/* Run a plan once on `threads` threads; the logits into out (30 floats). */
static void run_plan(const void *plan, size_t size, int threads, float *out) {
    kn_tensor x;
    assert_int_equal(kn_npy_read(path(MODEL "/case1_3x3x48x80/input.npy"), &x), KILN_OK);
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    assert_int_equal(kiln_engine_load_memory(plan, size, NULL, &e), KILN_OK);
    assert_int_equal(kiln_context_create(e, &c), KILN_OK);
    assert_int_equal(kiln_context_set_threads(c, threads), KILN_OK);
    int64_t dims[] = {1, 3, 48, 48};
    assert_int_equal(kiln_context_set_input_shape(c, "input", 4, dims), KILN_OK);
    size_t one = 3 * 48 * 48 * sizeof(float);
    assert_true(kn_tensor_nbytes(&x) >= one);
    assert_int_equal(kiln_context_set_input(c, "input", x.data, one), KILN_OK);
    assert_int_equal(kiln_context_execute(c), KILN_OK);
    /* The executor hands the whole pool back after each capped node. */
    assert_int_equal(kn_threadpool_size(c->pool), threads);
    kiln_tensor_view v;
    assert_int_equal(kiln_context_get_output(c, "logits", &v), KILN_OK);
    assert_int_equal(v.size, 10 * sizeof(float));
    memcpy(out, v.data, v.size);
    kiln_context_destroy(c);
    kiln_engine_destroy(e);
    kn_free(x.data);
}

/* Set KN_ATTR_THREADS on every host node with a kernel (value(i) for node i), write. */
static void with_counts(const void *plan, size_t size, int32_t type, int64_t (*value)(int),
                        void **out, size_t *out_size) {
    kn_plan p;
    void *copy = parse(plan, size, &p);
    for (int i = 0; i < p.graph->n_nodes; i++) {
        kn_attr a = {.name = KN_ATTR_THREADS, .type = type, .i = value(i), .s = "4", .slen = 1};
        assert_int_equal(kn_node_set_attr(p.graph, i, &a), KILN_OK);
    }
    assert_int_equal(kn_plan_write(&p, out, out_size), KILN_OK);
    /* The reader gives back what was written. */
    kn_plan q;
    void *again = parse(*out, *out_size, &q);
    for (int i = 0; i < q.graph->n_nodes && type == KN_ATTR_INT; i++)
        assert_int_equal(kn_attr_int(&q.graph->nodes[i], KN_ATTR_THREADS, -1), value(i));
    kn_plan_clear(&q);
    kn_free(again);
    kn_plan_clear(&p);
    kn_free(copy);
}

static int64_t one_to_three(int i) {
    return 1 + i % 3;
}
static int64_t zero(int i) {
    (void)i;
    return 0;
}
static int64_t negative(int i) {
    (void)i;
    return -2;
}
static int64_t too_many(int i) {
    (void)i;
    return KN_MAX_THREADS + 1;
}

static void test_capped_runs_match(void **state) {
    (void)state;
    void *plan, *capped;
    size_t size, capped_size;
    build(4, &plan, &size);
    with_counts(plan, size, KN_ATTR_INT, one_to_three, &capped, &capped_size);
    float whole[10], again[10], one[10], cap[10], cap_again[10];
    run_plan(plan, size, 4, whole);
    run_plan(plan, size, 4, again);
    run_plan(plan, size, 1, one);
    run_plan(capped, capped_size, 4, cap);
    run_plan(capped, capped_size, 4, cap_again);
    /* One plan at one thread count gives the same bits on every run. The tile grids split
     * rows and columns only, so 1 and 4 threads give the same bits too; layers capped at 2
     * threads take the depth split (gemm.c's ksplit), whose sums run in another order: the
     * same values to float32 rounding. */
    assert_memory_equal(whole, again, sizeof whole);
    assert_memory_equal(whole, one, sizeof whole);
    assert_memory_equal(cap, cap_again, sizeof cap);
    for (int i = 0; i < 10; i++)
        assert_float_equal(cap[i], whole[i], 1e-5 * (1 + fabs(whole[i])));
    kn_free(capped);
    kiln_free(plan);
}

static void refused(const void *plan, size_t size, int32_t type, int64_t (*value)(int),
                    const char *message) {
    void *bad;
    size_t bad_size;
    with_counts(plan, size, type, value, &bad, &bad_size);
    kiln_engine *e = NULL;
    assert_int_equal(kiln_engine_load_memory(bad, bad_size, NULL, &e), KILN_ERR_PLAN);
    assert_null(e);
    if (strstr(kiln_last_error(), message) == NULL)
        fail_msg("'%s' does not say '%s'", kiln_last_error(), message);
    kn_free(bad);
}

static void test_bad_counts_refused(void **state) {
    (void)state;
    void *plan;
    size_t size;
    build(2, &plan, &size);
    refused(plan, size, KN_ATTR_INT, zero, "kiln_threads is 0, must be between 1 and 1024");
    refused(plan, size, KN_ATTR_INT, negative, "kiln_threads is -2, must be between 1 and 1024");
    refused(plan, size, KN_ATTR_INT, too_many, "kiln_threads is 1025, must be between 1 and 1024");
    refused(plan, size, KN_ATTR_STRING, zero, "attribute kiln_threads must be an int");
    kiln_free(plan);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_limit),
        cmocka_unit_test(test_pool_limit_back_to_back),
        cmocka_unit_test(test_pool_sleep_paths),
        cmocka_unit_test(test_pool_takes_held_ranges),
        cmocka_unit_test(test_shared_item_fill),
        cmocka_unit_test(test_pick),
        cmocka_unit_test(test_build_records_valid_counts),
        cmocka_unit_test(test_capped_runs_match),
        cmocka_unit_test(test_bad_counts_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
