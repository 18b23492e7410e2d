/* Per-layer thread counts by timing: every host node runs, at the profile's opt shapes, on T,
 * T/2, T/4, ... 1 of the build's T threads, and a node that is clearly faster on fewer gets
 * that count in its KN_ATTR_THREADS attribute (the executor caps the pool around its run).
 * A batch-1 network's small layers (7x7 maps, squeeze-excitation, short GEMMs) cost more to
 * spread over 16 cores than the work they hold; no size rule predicted which ones, since each
 * kernel splits its work its own way, so the build measures (docs/perf-notes.md). */
#include "builder/thread_tune.h"

#include "core/alloc.h"
#include "core/threadpool.h"
#include "ir/placement.h"
#include "ops/op.h"
#include "plugin/plugin.h"
#include "shape/string_move.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* Fewer threads must beat the whole pool by this much: smaller gains are within the noise
 * of a layer timed alone on a shared machine (runs on the 16-core host spread by far more
 * than 3%), and the whole pool is what the layer ran on before. */
#define KEEP_ALL_MARGIN 0.90
/* Each timing repeats the layer for at least this long. */
#define MIN_SAMPLE_MS 0.3
#define MAX_REPS 64
#define ROUNDS 3
#define MAX_CANDIDATES 12
/* Part of every cache key: bump it when the timing or the choice changes meaning. */
#define THREAD_TUNE_VERSION 1
/* Fewer threads are chosen only if the whole pool's timing got at least this share of its
 * threads' CPU time (kn_threadpool workers spin between back-to-back runs, so an idle machine
 * gives 0.94 to 1.0 of it). Below, another process held cores: a thread descheduled mid-layer
 * makes the whole pool look slow and fewer threads look faster (on the 2-core box beside a
 * busy benchmark, 18 of MobileNetV2's 33 layers went to one thread and the plan ran 1.6x
 * slower). Such a choice is neither used nor kept in the cache. A layer that keeps all its
 * threads is kept whatever the share: a serial layer leaves the workers asleep (a low share
 * on an idle machine) and gains nothing from fewer. KILN_CPU_THREAD_TUNE_MIN_SHARE sets the
 * share (0 takes every timing). Timings shorter than MIN_SHARE_WALL_MS are not judged. */
#define MIN_CPU_SHARE 0.8
#define MIN_SHARE_WALL_MS 0.1

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A node's tensors for one timed run: constants from the graph, values the build knows on
 * the host (shape inputs) from at, others filled here. */
typedef struct timed_node {
    const kn_node *n;
    const kn_kernel *k;
    kn_tensor in[KN_MAX_NODE_IO], out[KN_MAX_NODE_IO];
    void *owned[2 * KN_MAX_NODE_IO];
    int n_owned;
    void *state;
    kn_local_state *local;
} timed_node;

static bool plain_dtype(int32_t dt) {
    return dt != 0 && dt != KILN_DTYPE_STRING && dt != KILN_DTYPE_CONTAINER &&
           kn_dtype_size(dt) > 0;
}

static void *fill(timed_node *t, const kn_tensor *x) {
    size_t nb = kn_tensor_nbytes(x);
    void *p = kn_aligned_alloc(nb ? nb : 64, 64);
    if (p == NULL)
        return NULL;
    t->owned[t->n_owned++] = p;
    memset(p, 0, nb);
    if (x->dtype == KILN_DTYPE_FLOAT32) { /* values in [-1, 1): no denormals, no overflow */
        float *f = p;
        uint32_t s = 12345;
        for (size_t i = 0; i < nb / sizeof *f; i++) {
            s = s * 1664525u + 1013904223u;
            f[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
        }
    }
    return p;
}

static void timed_release(timed_node *t) {
    if (t->local != NULL && t->local->release != NULL)
        t->local->release(t->local);
    if (t->state != NULL && t->k != NULL && t->k->release != NULL)
        t->k->release(t->state);
    for (int i = 0; i < t->n_owned; i++)
        kn_free(t->owned[i]);
    memset(t, 0, sizeof *t);
}

/* Set up node i for timing; false when it is not a host kernel the build can run alone
 * (control flow, plugins, copies, strings, shapes only known when running, work done at
 * shape time) or it cannot be prepared. */
static bool timed_setup(const kn_graph *g, int i, const kn_resolved *at, timed_node *t) {
    const kn_node *n = &g->nodes[i];
    memset(t, 0, sizeof *t);
    t->n = n;
    if (n->dead || kn_is_plugin_node(n) || kn_node_copy_kind(n) != KN_COPY_NONE ||
        strcmp(kn_node_backend(n), KN_BACKEND_HOST) != 0 || kn_string_moves_in(g, n) ||
        n->n_in > KN_MAX_NODE_IO || n->n_out > KN_MAX_NODE_IO)
        return false;
    const kn_op_schema *op = kn_op_find(n->domain, n->op_type);
    if (op != NULL && (op->flags & KN_OP_SUBGRAPH))
        return false;
    kn_backend *b = kn_backend_host();
    t->k = b->iface->find_kernel(b, n->domain, n->op_type);
    if (t->k == NULL)
        return false;
    bool computed = false;
    for (int j = 0; j < n->n_out; j++) {
        int v = n->out[j];
        if (v < 0)
            continue;
        if (!at[v].known || !plain_dtype(at[v].t.dtype))
            return false;
        computed |= at[v].t.data == NULL;
    }
    if (!computed) /* evaluated when shapes are resolved */
        return false;
    kn_tensor prep[KN_MAX_NODE_IO];
    for (int j = 0; j < n->n_in; j++) {
        memset(&prep[j], 0, sizeof prep[j]);
        int v = n->in[j];
        if (v < 0)
            continue;
        const kn_value *val = &g->values[v];
        if (val->data != NULL) {
            prep[j] = t->in[j] = kn_value_tensor(val);
            continue;
        }
        if (!at[v].known || !plain_dtype(at[v].t.dtype))
            return false;
        t->in[j] = at[v].t;
        prep[j].dtype = val->dtype;
        kn_value_shape(val, &prep[j].shape);
        if (t->in[j].data == NULL && (t->in[j].data = fill(t, &t->in[j])) == NULL)
            return false;
    }
    for (int j = 0; j < n->n_out; j++) {
        if (n->out[j] < 0)
            continue;
        t->out[j] = at[n->out[j]].t;
        if ((t->out[j].data = fill(t, &t->out[j])) == NULL)
            return false;
    }
    if (t->k->prepare != NULL && t->k->prepare(n, n->n_in, prep, &t->state) != KILN_OK) {
        t->state = NULL;
        return false;
    }
    return true;
}

/* One timing: reps runs (enough to last MIN_SAMPLE_MS, from the caller), *ms the mean of one
 * (wall clock); *cpu (when not NULL) the threads' CPU time over them as a share of threads *
 * wall. */
static kiln_status timed_run(timed_node *t, kn_threadpool *pool, int reps, int threads, double *ms,
                             double *cpu) {
    kn_backend *b = kn_backend_host();
    kn_kernel_ctx kc = {.node = t->n,
                        .n_in = t->n->n_in,
                        .in = t->in,
                        .n_out = t->n->n_out,
                        .out = t->out,
                        .state = t->state,
                        .pool = pool,
                        .backend = b,
                        .local = &t->local};
    double c0 = cpu != NULL ? kn_threadpool_cpu_ms(pool) : 0.0, t0 = now_ms();
    for (int r = 0; r < reps; r++)
        KN_TRY(t->k->run(&kc));
    double wall = now_ms() - t0;
    *ms = wall / reps;
    if (cpu != NULL) /* too short a timing to tell counts as the machine's whole */
        *cpu =
            wall >= MIN_SHARE_WALL_MS ? (kn_threadpool_cpu_ms(pool) - c0) / (wall * threads) : 1.0;
    return KILN_OK;
}

/* FNV-1a over n bytes. */
static uint64_t mix(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The layer's signature: repeats of one layer (the blocks of a ResNet stage, BERT's layers)
 * are timed once. */
static uint64_t signature(const kn_node *n, const timed_node *t) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(h, n->domain, strlen(n->domain) + 1);
    h = mix(h, n->op_type, strlen(n->op_type) + 1);
    for (int j = 0; j < n->n_in + n->n_out; j++) {
        const kn_tensor *x = j < n->n_in ? &t->in[j] : &t->out[j - n->n_in];
        int32_t tag[2] = {x->dtype, x->shape.rank};
        h = mix(h, tag, sizeof tag);
        h = mix(h, x->shape.d, (size_t)x->shape.rank * sizeof(int64_t));
    }
    for (int a = 0; a < n->n_attr; a++) {
        const kn_attr *x = &n->attr[a];
        h = mix(h, x->name, strlen(x->name) + 1);
        h = mix(h, &x->type, sizeof x->type);
        h = mix(h, &x->i, sizeof x->i);
        h = mix(h, &x->f, sizeof x->f);
        if (x->s != NULL)
            h = mix(h, x->s, x->slen);
        if (x->ints != NULL)
            h = mix(h, x->ints, (size_t)x->n * sizeof *x->ints);
        if (x->floats != NULL)
            h = mix(h, x->floats, (size_t)x->n * sizeof *x->floats);
    }
    return h;
}

int kn_thread_tune_pick(const int *threads, const double *ms, int n) {
    int best = 0;
    for (int c = 1; c < n; c++)
        if (ms[c] < ms[best])
            best = c;
    return ms[best] < ms[0] * KEEP_ALL_MARGIN ? threads[best] : threads[0];
}

int kn_thread_tune_choose(const int *threads, const double *ms, int n, double share,
                          double min_share, bool *busy) {
    int pick = kn_thread_tune_pick(threads, ms, n);
    *busy = pick != threads[0] && share < min_share;
    return *busy ? threads[0] : pick;
}

/* Time one prepared node at each candidate count; the count to record, 0 for all. *busy: fewer
 * threads looked faster, but the whole pool's best timing had less than min_share of its
 * threads' CPU time (then 0, not to be kept). */
static kiln_status time_node(timed_node *t, kn_threadpool *pool, int threads, double min_share,
                             int *chosen, bool *busy) {
    int cand[MAX_CANDIDATES], n_cand = 0;
    double best[MAX_CANDIDATES];
    bool live[MAX_CANDIDATES];
    for (int c = threads; c >= 1 && n_cand < MAX_CANDIDATES; c /= 2) {
        cand[n_cand] = c;
        best[n_cand] = 1e300;
        live[n_cand++] = true;
    }
    double first, share = 0.0;
    kn_threadpool_set_limit(pool, threads);
    KN_TRY(timed_run(t, pool, 1, threads, &first, NULL)); /* warm: caches, local state */
    KN_TRY(timed_run(t, pool, 1, threads, &first, NULL));
    int reps = first > 0 ? (int)(MIN_SAMPLE_MS / first) + 1 : MAX_REPS;
    if (reps > MAX_REPS)
        reps = MAX_REPS;
    for (int r = 0; r < ROUNDS; r++) {
        double round_best = 1e300;
        for (int c = 0; c < n_cand; c++) {
            if (!live[c])
                continue;
            double ms, cpu;
            kn_threadpool_set_limit(pool, cand[c]);
            KN_TRY(timed_run(t, pool, reps, cand[c], &ms, &cpu));
            if (ms < best[c]) {
                best[c] = ms;
                if (c == 0)
                    share = cpu;
            }
            if (best[c] < round_best)
                round_best = best[c];
        }
        /* Halving further only helps while it still helps: a count twice as slow as the
         * best is dropped (so the large layers do not run long on one thread). */
        for (int c = 1; c < n_cand; c++)
            live[c] = live[c] && best[c] <= 2 * round_best;
    }
    kn_threadpool_set_limit(pool, threads);
    int pick = kn_thread_tune_choose(cand, best, n_cand, share, min_share, busy);
    kn_log(KILN_LOG_INFO,
           "thread timing: '%s' %.4f ms on %d threads with %.2f of their CPU time; %d chosen%s",
           t->n->name, best[0], threads, share, pick,
           *busy ? " (fewer looked faster, not kept: the pool lacked CPU time)" : "");
    *chosen = pick == threads ? 0 : pick;
    return KILN_OK;
}

bool kn_thread_tune_wanted(bool cache_file) {
    const char *v = getenv("KILN_CPU_THREAD_TUNE");
    if (v != NULL && strcmp(v, "1") == 0)
        return true;
    if (v != NULL && strcmp(v, "0") == 0)
        return false;
    return cache_file;
}

/* The machine part of a cache key: the processor's name (CPUID's brand string on x86) and how
 * many logical CPUs are online, so a cache carried to another machine times afresh. */
static void machine_id(char *buf, size_t size) {
    char brand[49] = "";
#if defined(__x86_64__) || defined(__i386__)
    unsigned r[12] = {0}, top = 0, b, c, d;
    if (__get_cpuid(0x80000000u, &top, &b, &c, &d) && top >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        memcpy(brand, r, 48);
        brand[48] = '\0';
    }
#endif
    /* Printable, no '|' (the key's separator), spaces squeezed. */
    char *o = brand;
    for (const char *p = brand; *p != '\0'; p++) {
        char ch = (*p < 0x20 || *p > 0x7e || *p == '|') ? ' ' : *p;
        if (ch == ' ' && (o == brand || o[-1] == ' '))
            continue;
        *o++ = ch;
    }
    while (o > brand && o[-1] == ' ')
        o--;
    *o = '\0';
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(buf, size, "%s|%ld cpus", brand[0] != '\0' ? brand : "unknown cpu", n > 0 ? n : 1);
}

static double min_share(void) {
    const char *v = getenv("KILN_CPU_THREAD_TUNE_MIN_SHARE");
    char *end = NULL;
    double d = v != NULL ? strtod(v, &end) : MIN_CPU_SHARE;
    return v != NULL && end != v && *end == '\0' && d >= 0.0 && d <= 1.0 ? d : MIN_CPU_SHARE;
}

kiln_status kn_thread_tune(kn_graph *g, const kn_resolved *at, int threads, kn_timing_cache *cache,
                           int n_read) {
    if (threads <= 1)
        return KILN_OK;
    double share = min_share();
    if (threads > KN_MAX_THREADS)
        threads = KN_MAX_THREADS;
    char machine[96], key[320];
    machine_id(machine, sizeof machine);
    kn_threadpool *pool = NULL;
    int timed = 0, from_file = 0, repeats = 0, fewer = 0, busy_layers = 0;
    double t_start = now_ms();
    kiln_status rc = KILN_OK;
    for (int i = 0; i < g->n_nodes && rc == KILN_OK; i++) {
        timed_node t;
        if (!timed_setup(g, i, at, &t)) {
            timed_release(&t);
            continue;
        }
        const kn_node *n = &g->nodes[i];
        snprintf(key, sizeof key, "cpu threads %d|%s|%d threads|%s|%016" PRIx64,
                 THREAD_TUNE_VERSION, machine, threads, n->op_type, signature(n, &t));
        const kn_timing_entry *e = kn_timing_cache_find(cache, key);
        int chosen = 0;
        if (e != NULL) {
            chosen = (int)e->v[0];
            if (e - cache->e < n_read)
                from_file++;
            else
                repeats++;
        } else {
            if (pool == NULL && (pool = kn_threadpool_create(threads)) == NULL) {
                timed_release(&t);
                rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory timing thread counts");
                break;
            }
            bool busy = false;
            if (time_node(&t, pool, threads, share, &chosen, &busy) != KILN_OK) {
                /* A kernel that refuses made-up inputs runs on every thread, as before (and is
                 * not cached, so a later build tries again). */
                kn_log(KILN_LOG_VERBOSE, "threads: '%s' (%s) not timed: %s", n->name, n->op_type,
                       kiln_last_error());
                chosen = 0;
            } else if (busy) {
                busy_layers++; /* all threads, and not cached: a later build times it again */
            } else {
                int64_t v = chosen;
                rc = kn_timing_cache_add(cache, key, &v, 1);
                timed++;
            }
        }
        timed_release(&t);
        /* A count from a file is the file's word: keep it within what the plan can hold. */
        if (rc == KILN_OK && chosen > 0 && chosen < threads) {
            fewer++;
            rc = kn_node_set_attr_int(g, i, KN_ATTR_THREADS, chosen);
        }
    }
    if (rc == KILN_OK)
        kn_log(KILN_LOG_INFO,
               "threads: %d layers timed at %d..1 threads in %.0f ms, %d from the timing cache "
               "file, %d repeating a layer timed before; %d run on fewer",
               timed, threads, now_ms() - t_start, from_file, repeats, fewer);
    if (rc == KILN_OK && busy_layers > 0)
        kn_log(KILN_LOG_WARNING,
               "threads: %d layers keep all %d threads untimed: fewer looked faster, but the "
               "build got less than %.0f%% of its threads' CPU time (other processes are "
               "running); build on an idle machine for per-layer thread counts",
               busy_layers, threads, share * 100);
    kn_threadpool_destroy(pool);
    return rc;
}
