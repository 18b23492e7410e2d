/* testdev: a device backend for tests, built as a backend module (libkiln_testdev.so) that the
 * registry loads by name, exactly as it loads a GPU backend. It proves the seam on a machine
 * without a GPU:
 *
 * - Its own memory space. A device buffer is two blocks: the real one, which only testdev's
 *   kernels touch, and a poisoned host view (every byte 0xFF: NaN in every float, -1 in every
 *   integer) whose address is what the runtime sees. Host code that reads device memory
 *   through a plain pointer, or a copy that placement forgot, yields NaNs and fails the
 *   bit-for-bit comparisons; host code that writes there is never seen by the device.
 * - Real asynchrony. Each stream is a worker thread with a queue: a kernel's run only enqueues,
 *   copies are asynchronous, events complete when the worker reaches them, and the worker
 *   lags now and then (up to 0.3 ms before a quarter of its jobs), so a wait the runtime
 *   forgot shows up as a wrong result; KILN_TESTDEV_LAG_US=N makes every job N us slow (a
 *   device whose time is known, for the profiler's tests). KILN_TESTDEV_SYNC=1 runs everything in
 * place (for debugging).
 * - CPU kernels for a subset of ops (the host's own, run on the worker on the real blocks), so
 *   mixed graphs split and results must match the CPU bit for bit. KILN_TESTDEV_DENY=Op,Op
 *   removes ops from the subset (to force host islands).
 * - kiln.FusedDepthwiseConv (passes.h) only with KILN_TESTDEV_DW_INPUT=1: a plan with it
 *   applies the expansion's activation in a pass of its own where the host's applies it in
 *   the GEMM's registers, which can differ in the last bit, and the model tests compare plans
 *   bit for bit.
 * - Stream graphs: between capture_begin and capture_end a stream records its jobs instead of
 *   running them; a launch runs the recording again, in order, on the worker.
 * - Per-context kernel state: each kernel keeps a kn_local_state keyed by its shapes, and
 *   kn_backend.context points at counters (testdev.h) that tests read.
 * - Build-time tuning: Conv and FusedConv have a tuning key (op, dtype, input shapes) and a
 *   tune that "times" nothing but returns a tactic derived from the key and counts the call,
 *   so the builder's tuning and its timing cache are tested without a GPU (the kernels ignore
 *   the tactic). As on CUDA, a build times them when it has a timing cache file or is told
 *   to (kiln_build_config_set_tactics).
 *
 * It uses nothing of libkiln but the host table (backend_module.h). */
#include "backend/backend_module.h"
#include "testdev.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const kn_backend_host_api *host;
static testdev_stats stats;

/* --- memory --- */

typedef struct dev_block {
    char *view; /* poisoned; what tensors point at */
    char *real;
    size_t size;
} dev_block;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static dev_block *blocks;
static int n_blocks, cap_blocks;

/* The real address behind a device address; host addresses pass through. */
static void *real_addr(const void *p) {
    if (p == NULL)
        return NULL;
    const char *c = p;
    void *out = (void *)p;
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < n_blocks; i++)
        if (c >= blocks[i].view && c < blocks[i].view + blocks[i].size) {
            out = blocks[i].real + (c - blocks[i].view);
            break;
        }
    pthread_mutex_unlock(&mem_lock);
    return out;
}

static kiln_status td_alloc(kn_backend *b, kn_mem mem, size_t size, kn_buffer *out) {
    (void)b;
    memset(out, 0, sizeof *out);
    if (mem != KN_MEM_DEVICE)
        return host->error(KILN_ERR_UNSUPPORTED, "testdev allocates device memory only");
    size_t n = (size + 63) / 64 * 64;
    if (n == 0)
        n = 64;
    dev_block blk = {aligned_alloc(64, n), aligned_alloc(64, n), n};
    if (blk.view == NULL || blk.real == NULL) {
        free(blk.view);
        free(blk.real);
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of device memory");
    }
    memset(blk.view, 0xFF, n);
    memset(blk.real, 0xFF, n);
    pthread_mutex_lock(&mem_lock);
    if (n_blocks == cap_blocks) {
        int cap = cap_blocks ? cap_blocks * 2 : 64;
        dev_block *nb = realloc(blocks, (size_t)cap * sizeof *nb);
        if (nb == NULL) {
            pthread_mutex_unlock(&mem_lock);
            free(blk.view);
            free(blk.real);
            return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
        }
        blocks = nb;
        cap_blocks = cap;
    }
    blocks[n_blocks++] = blk;
    pthread_mutex_unlock(&mem_lock);
    out->base = blk.view;
    out->size = size;
    out->mem = KN_MEM_DEVICE;
    return KILN_OK;
}

static void td_free(kn_backend *b, kn_buffer *buf) {
    (void)b;
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < n_blocks; i++)
        if (blocks[i].view == buf->base) {
            free(blocks[i].view);
            free(blocks[i].real);
            blocks[i] = blocks[--n_blocks];
            break;
        }
    pthread_mutex_unlock(&mem_lock);
    memset(buf, 0, sizeof *buf);
}

/* --- streams: a worker thread and a queue --- */

/* A job's fn never frees arg: the worker does after running it, unless the job belongs to a
 * graph, which runs it again on each launch and frees it when destroyed. */
typedef struct job {
    void (*fn)(void *arg, char *err, size_t err_size);
    void *arg;
    bool keep;
    struct job *next;
} job;

/* A recorded stream graph: the jobs captured, in order. */
typedef struct td_graph {
    job *head;
} td_graph;

struct kn_stream {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    job *head, *tail;
    bool busy, stop;
    char error[512]; /* the first failure since the last sync */
    bool capturing;  /* jobs go to rec_head..rec_tail instead of the queue */
    job *rec_head, *rec_tail;
    uint32_t jitter; /* LCG state: the worker sometimes lags, to make missing waits show */
};

static void *worker(void *arg) {
    kn_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->wake, &s->lock);
        if (s->head == NULL && s->stop)
            break;
        job *j = s->head;
        s->head = j->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->busy = true;
        s->jitter = s->jitter * 1664525u + 1013904223u;
        uint32_t lag = (s->jitter >> 24) < 64 ? (s->jitter >> 16) % 300 : 0;
        const char *slow = getenv("KILN_TESTDEV_LAG_US"); /* every job this much slower */
        if (slow != NULL)
            lag = (uint32_t)atoi(slow);
        pthread_mutex_unlock(&s->lock);
        if (lag > 0) {
            struct timespec ts = {(time_t)(lag / 1000000), (long)(lag % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
        char err[512] = "";
        j->fn(j->arg, err, sizeof err);
        if (!j->keep)
            free(j->arg);
        free(j);
        pthread_mutex_lock(&s->lock);
        if (err[0] != '\0' && s->error[0] == '\0')
            snprintf(s->error, sizeof s->error, "%s", err);
        s->busy = false;
        if (s->head == NULL)
            pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static kiln_status td_stream_sync(kn_backend *b, kn_stream *s);

static kiln_status enqueue_job(kn_stream *s, void (*fn)(void *, char *, size_t), void *arg,
                               bool keep) {
    if (!s->capturing && getenv("KILN_TESTDEV_SYNC") != NULL) { /* debugging: no asynchrony */
        char err[512] = "";
        td_stream_sync(NULL, s);
        fn(arg, err, sizeof err);
        if (!keep)
            free(arg);
        if (err[0] != '\0')
            return host->error(KILN_ERR_INTERNAL, err);
        return KILN_OK;
    }
    job *j = malloc(sizeof *j);
    if (j == NULL) {
        if (!keep)
            free(arg);
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    }
    j->fn = fn;
    j->arg = arg;
    j->keep = keep;
    j->next = NULL;
    if (s->capturing) { /* only the context's thread enqueues on its stream */
        j->keep = true;
        if (s->rec_tail)
            s->rec_tail->next = j;
        else
            s->rec_head = j;
        s->rec_tail = j;
        return KILN_OK;
    }
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return KILN_OK;
}

static kiln_status enqueue(kn_stream *s, void (*fn)(void *, char *, size_t), void *arg) {
    return enqueue_job(s, fn, arg, false);
}

static kiln_status td_stream_create(kn_backend *b, kn_stream **out) {
    (void)b;
    kn_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (pthread_create(&s->thread, NULL, worker, s) != 0) {
        free(s);
        return host->error(KILN_ERR_INTERNAL, "testdev: cannot start a stream thread");
    }
    *out = s;
    return KILN_OK;
}

static kiln_status td_stream_sync(kn_backend *b, kn_stream *s) {
    (void)b;
    pthread_mutex_lock(&s->lock);
    while (s->head != NULL || s->busy)
        pthread_cond_wait(&s->idle, &s->lock);
    char err[512];
    snprintf(err, sizeof err, "%s", s->error);
    s->error[0] = '\0';
    pthread_mutex_unlock(&s->lock);
    if (err[0] != '\0')
        return host->error(KILN_ERR_INTERNAL, err);
    return KILN_OK;
}

static void td_stream_destroy(kn_backend *b, kn_stream *s) {
    (void)b;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->idle);
    free(s);
}

/* --- copies --- */

typedef struct copy_job {
    void *dst;
    const void *src;
    size_t n;
} copy_job;

static void run_copy(void *arg, char *err, size_t size) {
    (void)err;
    (void)size;
    copy_job *c = arg;
    memcpy(c->dst, c->src, c->n);
}

static kiln_status td_copy(kn_backend *b, kn_stream *s, void *dst, kn_mem dst_mem, const void *src,
                           kn_mem src_mem, size_t n) {
    testdev_stats *st = b->context;
    if (src_mem == KN_MEM_DEVICE)
        atomic_fetch_add(dst_mem == KN_MEM_DEVICE ? &st->on_device : &st->to_host, 1);
    copy_job *c = malloc(sizeof *c);
    if (c == NULL)
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    c->dst = dst_mem == KN_MEM_DEVICE ? real_addr(dst) : dst;
    c->src = src_mem == KN_MEM_DEVICE ? real_addr(src) : src;
    c->n = n;
    if (n == 0) {
        free(c);
        return KILN_OK;
    }
    if (s == NULL) { /* no stream: synchronous */
        run_copy(c, NULL, 0);
        free(c);
        return KILN_OK;
    }
    return enqueue(s, run_copy, c);
}

/* --- events --- */

struct kn_event {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t recorded, reached;
    struct timespec at;
};

static kiln_status td_event_create(kn_backend *b, kn_event **out) {
    (void)b;
    kn_event *e = calloc(1, sizeof *e);
    if (e == NULL)
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->cond, NULL);
    *out = e;
    return KILN_OK;
}

static void td_event_destroy(kn_backend *b, kn_event *e) {
    (void)b;
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
    free(e);
}

typedef struct mark_job {
    kn_event *e;
    uint64_t gen;
} mark_job;

static void run_mark(void *arg, char *err, size_t size) {
    (void)err;
    (void)size;
    mark_job *m = arg;
    pthread_mutex_lock(&m->e->lock);
    clock_gettime(CLOCK_MONOTONIC, &m->e->at);
    if (m->gen > m->e->reached)
        m->e->reached = m->gen;
    pthread_cond_broadcast(&m->e->cond);
    pthread_mutex_unlock(&m->e->lock);
}

static kiln_status td_event_record(kn_backend *b, kn_event *e, kn_stream *s) {
    (void)b;
    mark_job *m = malloc(sizeof *m);
    if (m == NULL)
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    pthread_mutex_lock(&e->lock);
    m->e = e;
    m->gen = ++e->recorded;
    pthread_mutex_unlock(&e->lock);
    return enqueue(s, run_mark, m);
}

static void wait_reached(kn_event *e) {
    pthread_mutex_lock(&e->lock);
    uint64_t want = e->recorded;
    while (e->reached < want)
        pthread_cond_wait(&e->cond, &e->lock);
    pthread_mutex_unlock(&e->lock);
}

static kiln_status td_event_sync(kn_backend *b, kn_event *e) {
    (void)b;
    wait_reached(e);
    return KILN_OK;
}

static void run_wait(void *arg, char *err, size_t size) {
    (void)err;
    (void)size;
    wait_reached(*(kn_event **)arg);
}

static kiln_status td_event_wait(kn_backend *b, kn_stream *s, kn_event *e) {
    (void)b;
    kn_event **arg = malloc(sizeof *arg);
    if (arg == NULL)
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    *arg = e;
    return enqueue(s, run_wait, arg);
}

static kiln_status td_event_elapsed(kn_backend *b, kn_event *a, kn_event *z, float *ms) {
    (void)b;
    *ms = (float)((double)(z->at.tv_sec - a->at.tv_sec) * 1e3 +
                  (double)(z->at.tv_nsec - a->at.tv_nsec) / 1e6);
    return KILN_OK;
}

/* --- kernels: the host's, run on the worker over the real blocks --- */

/* The ops testdev takes; a model's other ops stay on the host, so graphs split. */
static const char *const taken[] = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Clip",
    "Conv",
    "Gemm",
    "MatMul",
    "Softmax",
    "Transpose",
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Concat",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "LayerNormalization",
    "FusedElementwise",
    "Gather",
    "Slice",
    "Erf",
    "Sqrt",
    "Pow",
    "ReduceMean",
    "Cast",
    "Where",
    "Identity",
    "FusedConv",
    "FusedGemm",
    "FusedMatMul",
    /* only with KILN_TESTDEV_DW_INPUT=1 (denied) */
    "FusedDepthwiseConv",
    /* every element-wise op the models use, so element-wise chains fuse as on the host */
    "HardSigmoid",
    "HardSwish",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Reciprocal",
    "LeakyRelu",
    "Softplus",
    "Max",
    "Min",
    "Gelu",
    /* kiln.Attention (device backends only) and the Split of its merged projections */
    "Attention",
    "Split",
    NULL,
};
/* Inputs each op reads on the host (shapes, axes, indices of slices). */
static uint64_t host_inputs(const char *op) {
    if (strcmp(op, "Reshape") == 0 || strcmp(op, "Squeeze") == 0 || strcmp(op, "Unsqueeze") == 0 ||
        strcmp(op, "ReduceMean") == 0)
        return 1u << 1;
    if (strcmp(op, "Slice") == 0)
        return 0x1Eu; /* starts, ends, axes, steps */
    return 0;
}

static bool denied(const char *op) {
    if (strcmp(op, "FusedDepthwiseConv") == 0) /* see the top of the file */
        return getenv("KILN_TESTDEV_DW_INPUT") == NULL;
    const char *deny = getenv("KILN_TESTDEV_DENY");
    if (deny == NULL)
        return false;
    size_t n = strlen(op);
    for (const char *p = deny; (p = strstr(p, op)) != NULL; p += n)
        if ((p == deny || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return true;
    return false;
}

/* Whether op of the taken list is of kiln's domain (the fused ops and Attention). */
static bool kiln_op(const char *op) {
    return strncmp(op, "Fused", 5) == 0 || strcmp(op, "Attention") == 0;
}

static bool is_taken(const char *domain, const char *op) {
    if (strcmp(domain, "") != 0 && strcmp(domain, "kiln") != 0)
        return false;
    if ((strcmp(domain, "kiln") == 0) != kiln_op(op))
        return false;
    for (int i = 0; taken[i]; i++)
        if (strcmp(taken[i], op) == 0)
            return !denied(op);
    return false;
}

typedef struct kstate {
    const kn_kernel *cpu;
    void *inner;
} kstate;

typedef struct kernel_job {
    const kn_kernel *cpu;
    kn_kernel_ctx kc;
    kn_tensor t[]; /* n_in inputs, then n_out outputs */
} kernel_job;

static void run_kernel(void *arg, char *err, size_t size) {
    kernel_job *j = arg;
    kiln_status rc = j->cpu->run(&j->kc);
    if (rc != KILN_OK)
        snprintf(err, size, "testdev: node '%s' (%s) failed", j->kc.node->name,
                 j->kc.node->op_type);
}

static kiln_status enqueue_kernel(kn_kernel_ctx *k, const kn_kernel *cpu, void *state) {
    kernel_job *j = malloc(sizeof *j + (size_t)(k->n_in + k->n_out) * sizeof(kn_tensor));
    if (j == NULL)
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    j->cpu = cpu;
    for (int i = 0; i < k->n_in; i++) {
        j->t[i] = k->in[i];
        j->t[i].data = real_addr(k->in[i].data);
    }
    for (int i = 0; i < k->n_out; i++) {
        j->t[k->n_in + i] = k->out[i];
        j->t[k->n_in + i].data = real_addr(k->out[i].data);
    }
    j->kc = *k;
    j->kc.in = j->t;
    j->kc.out = j->t + k->n_in;
    j->kc.state = state;
    j->kc.pool = NULL; /* the context's pool belongs to the host thread */
    j->kc.stream = NULL;
    j->kc.backend = host->host_backend();
    j->kc.local = NULL;
    return enqueue(k->stream, run_kernel, j);
}

/* The per-context state every testdev kernel keeps: the shapes it was made for, as a device
 * kernel keeps its descriptors. */
typedef struct td_local {
    kn_local_state base;
    kn_shape in0, out0;
} td_local;

static void td_local_release(kn_local_state *self) {
    atomic_fetch_add(&stats.local_released, 1);
    free(self);
}

static bool same_shape(const kn_shape *a, const kn_shape *b) {
    return a->rank == b->rank && memcmp(a->d, b->d, (size_t)a->rank * sizeof a->d[0]) == 0;
}

static kiln_status keep_local(kn_kernel_ctx *k) {
    if (k->local == NULL || k->n_in < 1 || k->n_out < 1)
        return KILN_OK;
    td_local *l = (td_local *)*k->local;
    if (l == NULL) {
        l = calloc(1, sizeof *l);
        if (l == NULL)
            return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
        l->base.release = td_local_release;
        *k->local = &l->base;
        atomic_fetch_add(&stats.local_made, 1);
    } else if (same_shape(&l->in0, &k->in[0].shape) && same_shape(&l->out0, &k->out[0].shape)) {
        return KILN_OK;
    } else {
        atomic_fetch_add(&stats.local_remade, 1);
    }
    l->in0 = k->in[0].shape;
    l->out0 = k->out[0].shape;
    return KILN_OK;
}

static kiln_status td_run(kn_kernel_ctx *k) {
    const kstate *st = k->state;
    if (keep_local(k) != KILN_OK)
        return KILN_ERR_OUT_OF_MEMORY;
    return enqueue_kernel(k, st->cpu, st->inner);
}

/* --- stream graphs --- */

static kiln_status td_capture_begin(kn_backend *b, kn_stream *s) {
    (void)b;
    if (s->capturing)
        return host->error(KILN_ERR_INTERNAL, "testdev: the stream is already capturing");
    s->capturing = true;
    s->rec_head = s->rec_tail = NULL;
    return KILN_OK;
}

static void free_jobs(job *j) {
    while (j != NULL) {
        job *next = j->next;
        free(j->arg);
        free(j);
        j = next;
    }
}

static kiln_status td_capture_end(kn_backend *b, kn_stream *s, void **graph) {
    (void)b;
    *graph = NULL;
    if (!s->capturing)
        return host->error(KILN_ERR_INTERNAL, "testdev: the stream is not capturing");
    s->capturing = false;
    td_graph *g = malloc(sizeof *g);
    if (g == NULL) {
        free_jobs(s->rec_head);
        s->rec_head = s->rec_tail = NULL;
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    }
    g->head = s->rec_head;
    s->rec_head = s->rec_tail = NULL;
    atomic_fetch_add(&stats.captured, 1);
    *graph = g;
    return KILN_OK;
}

static void run_graph(void *arg, char *err, size_t size) {
    const td_graph *g = arg;
    for (const job *j = g->head; j != NULL && err[0] == '\0'; j = j->next)
        j->fn(j->arg, err, size);
}

static kiln_status td_graph_launch(kn_backend *b, kn_stream *s, void *graph) {
    (void)b;
    atomic_fetch_add(&stats.launched, 1);
    return enqueue_job(s, run_graph, graph, true);
}

static void td_graph_destroy(kn_backend *b, void *graph) {
    (void)b;
    td_graph *g = graph;
    free_jobs(g->head);
    free(g);
    atomic_fetch_add(&stats.destroyed, 1);
}

static const kn_kernel *cpu_kernel(const char *domain, const char *name) {
    kn_backend *h = host->host_backend();
    return h->iface->find_kernel(h, domain, name);
}

static kiln_status td_prepare(const kn_node *n, int n_in, const kn_tensor *in, void **state) {
    kstate *st = calloc(1, sizeof *st);
    if (st == NULL)
        return host->error(KILN_ERR_OUT_OF_MEMORY, "testdev: out of memory");
    st->cpu = cpu_kernel(n->domain, n->op_type);
    kiln_status rc = KILN_OK;
    if (st->cpu == NULL)
        rc = host->error(KILN_ERR_UNSUPPORTED, "testdev: the host has no kernel to wrap");
    else if (st->cpu->prepare != NULL)
        rc = st->cpu->prepare(n, n_in, in, &st->inner);
    if (rc != KILN_OK) {
        free(st);
        return rc;
    }
    *state = st;
    return KILN_OK;
}

static void td_release(void *state) {
    kstate *st = state;
    if (st->inner != NULL && st->cpu->release != NULL)
        st->cpu->release(st->inner);
    free(st);
}

/* One wrapper serves every op: the host kernel is found at prepare. */
static kn_kernel wrappers[sizeof taken / sizeof taken[0]];
static pthread_once_t wrappers_once = PTHREAD_ONCE_INIT;

static void make_wrappers(void) {
    for (int i = 0; taken[i]; i++)
        wrappers[i] = (kn_kernel){.domain = kiln_op(taken[i]) ? "kiln" : "",
                                  .name = taken[i],
                                  .run = td_run,
                                  .prepare = td_prepare,
                                  .release = td_release};
}

static const kn_kernel *td_find_kernel(kn_backend *b, const char *domain, const char *name) {
    (void)b;
    if (!is_taken(domain, name) || cpu_kernel(domain, name) == NULL)
        return NULL;
    pthread_once(&wrappers_once, make_wrappers);
    for (int i = 0; taken[i]; i++)
        if (strcmp(taken[i], name) == 0)
            return &wrappers[i];
    return NULL;
}

static bool td_supports(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                        const kn_tensor *out, kn_caps *caps) {
    (void)n_out;
    (void)out;
    if (td_find_kernel(b, n->domain, n->op_type) == NULL) {
        snprintf(caps->reason, sizeof caps->reason, "testdev has no %s kernel", n->op_type);
        return false;
    }
    for (int j = 0; j < n_in; j++)
        if (in[j].dtype == KILN_DTYPE_FLOAT16 || in[j].dtype == KILN_DTYPE_FLOAT64) {
            snprintf(caps->reason, sizeof caps->reason, "testdev runs %s in float32 only",
                     n->op_type);
            return false;
        }
    caps->host_in = host_inputs(n->op_type);
    caps->capture_safe = true;
    /* KILN_TESTDEV_NHWC: offer NHWC for every op, so a test sees the layout pass's choices
     * (passes/layout_nhwc.c) in a plan; the host's kernels then read the bytes as NCHW, so
     * such plans are for inspection, not for running */
    if (getenv("KILN_TESTDEV_NHWC") != NULL)
        caps->layouts |= KN_LAYOUT_NHWC_BIT;
    /* it runs the host's kernels: it lowers to bfloat16 what the host would lower to either
     * 16-bit type (the host's element-wise kernels run both; the host itself lowers them only
     * to float16, keeping bf16 plans free of Casts between its fp32 products), never to
     * float16, which it refuses above; not what the host offers inside a region only (its
     * bf16 convs on AMX), whose kernels read NHWC bytes the host's way */
    kn_backend *h = host->host_backend();
    kn_caps hc;
    memset(&hc, 0, sizeof hc);
    if (h->iface->supports != NULL && h->iface->supports(h, n, n_in, in, n_out, out, &hc) &&
        (hc.lower & ~hc.lower_region & (KN_LOWER_FP16 | KN_LOWER_BF16)))
        caps->lower = KN_LOWER_BF16;
    return true;
}

/* Plugin nodes: the host's plugin kernel, run on the worker over the real blocks. */
static const kn_kernel *host_plugin_kernel;

static kiln_status td_plugin_run(kn_kernel_ctx *k) {
    return enqueue_kernel(k, host_plugin_kernel, k->state);
}

static const kn_kernel td_plugin = {.domain = "*", .name = "*", .run = td_plugin_run};

static const kn_kernel *td_plugin_kernel(kn_backend *b, const kn_kernel *host_kernel) {
    (void)b;
    host_plugin_kernel = host_kernel; /* the same for every call: the host has one */
    return &td_plugin;
}

/* --- build-time tuning --- */

static bool td_tune_key(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                        const kn_tensor *out, char *key, size_t size) {
    (void)b;
    (void)n_out;
    (void)out;
    if (strcmp(n->op_type, "Conv") != 0 && strcmp(n->op_type, "FusedConv") != 0)
        return false;
    size_t at = (size_t)snprintf(key, size, "testdev 1|%s|dtype %d", n->op_type,
                                 n_in > 0 ? (int)in[0].dtype : 0);
    for (int j = 0; j < n_in && j < 2 && at < size; j++)
        for (int d = 0; d < in[j].shape.rank && at < size; d++)
            at += (size_t)snprintf(key + at, size - at, "%s%lld", d ? "x" : "|",
                                   (long long)in[j].shape.d[d]);
    return at < size;
}

static kiln_status td_tune(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in,
                           int n_out, const kn_tensor *out, int64_t *tactic, int *n_tactic,
                           char *note, size_t note_size) {
    char key[512];
    if (!td_tune_key(b, n, n_in, in, n_out, out, key, sizeof key))
        return host->error(KILN_ERR_INTERNAL, "testdev: nothing to tune");
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the key: a choice fixed by the layer */
    for (const char *c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    atomic_fetch_add(&stats.tuned, 1);
    tactic[0] = 1;
    tactic[1] = (int64_t)(h % 5);
    tactic[2] = in[0].shape.rank > 0 ? in[0].shape.d[0] : 0;
    *n_tactic = 3;
    snprintf(note, note_size, "variant %lld", (long long)tactic[1]);
    return KILN_OK;
}

static const kn_backend_iface testdev_iface = {
    .name = "testdev",
    .mem = KN_MEM_DEVICE,
    .find_kernel = td_find_kernel,
    .supports = td_supports,
    .plugin_kernel = td_plugin_kernel,
    .buffer_alloc = td_alloc,
    .buffer_free = td_free,
    .copy = td_copy,
    .stream_create = td_stream_create,
    .stream_destroy = td_stream_destroy,
    .stream_sync = td_stream_sync,
    .event_create = td_event_create,
    .event_destroy = td_event_destroy,
    .event_record = td_event_record,
    .event_wait = td_event_wait,
    .event_sync = td_event_sync,
    .event_elapsed = td_event_elapsed,
    .capture_begin = td_capture_begin,
    .capture_end = td_capture_end,
    .graph_launch = td_graph_launch,
    .graph_destroy = td_graph_destroy,
    .tune_key = td_tune_key,
    .tune = td_tune,
};

static kn_backend testdev = {.iface = &testdev_iface, .device = 0, .context = &stats};

__attribute__((visibility("default"))) kiln_status
kn_backend_entry(const kn_backend_host_api *h, uint32_t version, kn_backend **out) {
    if (version != KN_BACKEND_MODULE_VERSION || h->struct_size < sizeof *h)
        return h->error(KILN_ERR_UNSUPPORTED, "testdev was built for another kiln");
    if (getenv("KILN_TESTDEV_ABSENT"))
        return h->error(KILN_ERR_UNSUPPORTED, "no testdev device (KILN_TESTDEV_ABSENT is set)");
    host = h;
    *out = &testdev;
    return KILN_OK;
}
