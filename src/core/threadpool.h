/* A fixed pool of worker threads owned by one execution context (never global). */
#ifndef KN_THREADPOOL_H
#define KN_THREADPOOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct kn_threadpool kn_threadpool;

/* threads counts the calling thread: 1 means no workers. NULL on failure. */
kn_threadpool *kn_threadpool_create(int threads);
void kn_threadpool_destroy(kn_threadpool *pool);
/* Threads a job may use now: the limit (see kn_threadpool_set_limit); 1 for NULL. Kernels size
 * their partitions by it. */
int kn_threadpool_size(const kn_threadpool *pool);
/* Threads the pool was created with; 1 for NULL. */
int kn_threadpool_capacity(const kn_threadpool *pool);
/* The calling thread's place in the pool whose job it is running: 1..capacity - 1 on a worker,
 * 0 on any other thread (the caller, which takes part in its own jobs). With per-thread parts
 * of a scratch buffer, each chunk of a kn_parallel_for can work in memory of its thread. */
int kn_threadpool_thread_index(void);
/* Run later jobs on the caller and the first threads - 1 workers only (clamped to
 * [1, capacity]); the others stay parked and take no chunk. Returns the previous limit. Only
 * for the thread that drives the pool, between jobs. A small layer runs faster on a few cores
 * than spread over all of them: the executor sets each node's count (docs/perf-notes.md). */
int kn_threadpool_set_limit(kn_threadpool *pool, int threads);

/* CPU time (ms) the calling thread and the pool's workers have used so far, each thread's own
 * clock (exact for running threads, unlike the process clock, which counts another running
 * thread's time only at scheduler ticks). The difference over a timed run, against threads x
 * its wall time, tells whether the machine gave the pool its cores. */
double kn_threadpool_cpu_ms(const kn_threadpool *pool);

/* Run fn(arg, begin, end) over [0, n) split into chunks of at least `grain` items across the
 * pool (the caller's thread takes part); returns when all chunks are done. pool may be NULL
 * (runs inline). No more threads than chunks take part. Not re-entrant: fn must not call
 * kn_parallel_for on the same pool. */
typedef void (*kn_range_fn)(void *arg, int64_t begin, int64_t end);
void kn_parallel_for(kn_threadpool *pool, int64_t n, int64_t grain, kn_range_fn fn, void *arg);

/* Work shared by the tasks of one job: an item several tasks read (a packed panel of a GEMM's
 * operand) made of `parts` pieces that any of them may fill, so the packing needs no job of its
 * own and no barrier before the products: a task that needs the item calls
 * kn_shared_item_fill, which claims pieces not yet claimed and fills each by fn(arg, item,
 * part), then waits until the pieces other threads claimed are filled too. Every claimed piece
 * is being filled by a running thread, so the wait ends (pieces must not wait on anything).
 * Items start zeroed (one job's use; zero them again before the next). */
typedef struct kn_shared_item {
    _Atomic int32_t next; /* the next piece to claim */
    _Atomic int32_t done; /* pieces filled */
} kn_shared_item;
typedef void (*kn_piece_fn)(void *arg, int64_t item, int32_t part);
void kn_shared_item_fill(kn_shared_item *it, int64_t item, int32_t parts, kn_piece_fn fn,
                         void *arg);
/* Fill the pieces of `it` not yet claimed, without waiting for the others: a task that needs
 * several items helps with all of them first, then waits for each (kn_shared_item_fill), so
 * threads that reach the same items together fill different ones instead of one filling while
 * the others wait. */
void kn_shared_item_help(kn_shared_item *it, int64_t item, int32_t parts, kn_piece_fn fn,
                         void *arg);

/* Scratch memory owned by the pool (so by its context), 64-byte aligned, kept between calls so
 * hot kernels do not map fresh pages on every run. Valid until the next call or destroy; only
 * for the thread that drives the pool (not from inside fn). NULL for a NULL pool or on
 * out-of-memory: callers then allocate their own. */
void *kn_threadpool_scratch(kn_threadpool *pool, size_t bytes);

#endif
