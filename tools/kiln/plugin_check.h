/* kiln plugin-check: shared types and the probing helpers the checks use. */
#ifndef KILN_PLUGIN_CHECK_H
#define KILN_PLUGIN_CHECK_H

#include "cli.h"
#include "plugin/plugin.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PC_MAX_IO 8
#define PC_MAX_SHAPES 48
#define PC_MAX_ELEMS (1 << 21) /* largest input enqueue runs on */
#define PC_GUARD 64
#define PC_THREADS 4
#define PC_THREAD_ITERS 6
#define PC_PLACEHOLDER "(no reason given)"

/* How inputs after the first are shaped from input 0's dims. */
enum { PAT_SAME, PAT_CHANNEL, PAT_LAST, PAT_ONE, PAT_SCALAR, PAT_COUNT };
extern const char *const pat_name[];

extern const int32_t probe_dtypes[];
#define PC_N_PROBES 7

typedef struct pc_shape {
    int rank;
    int64_t d[KILN_PLUGIN_MAX_RANK];
} pc_shape;

/* What the parent learns about one plugin before forking the checks. */
typedef struct pc_plugin {
    const kn_creator_entry *e;
    const kiln_host_api *host;
    kiln_field defaults[32];
    int n_defaults;
    kiln_plugin_instance inst;
    int n_in, n_out, pattern;
    int32_t dtypes[PC_N_PROBES]; /* input dtypes claimed with the linear layout */
    int n_dtypes;
    pc_shape accepted[PC_MAX_SHAPES];
    int n_accepted;
} pc_plugin;

typedef struct pc_counts {
    int pass, fail, skip;
} pc_counts;

typedef struct pc_out {
    void *buf[PC_MAX_IO];
    size_t bytes[PC_MAX_IO];
    int n;
} pc_out;

void report(pc_counts *c, int kind, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *ftype_name(int32_t t);
void clear_error(void);
bool error_given(void);
void default_fields(pc_plugin *p);
int32_t create_with(const pc_plugin *p, const kiln_field *f, int n, kiln_plugin_instance *out);
const char *ops_problem(const kiln_plugin_instance *inst);
bool input_shapes(int n_in, int pattern, const pc_shape *x, pc_shape *in);
int shapes_of(const pc_plugin *p, const kiln_plugin_instance *inst, int n_in, const pc_shape *in,
              int n_out, pc_shape *out, char *msg, size_t size);
void shape_str(const pc_shape *s, char *buf, size_t size);
bool discover_inputs(pc_plugin *p);
uint64_t lcg(uint64_t *s);
int sweep_shapes(pc_shape *s);
int64_t elems(const pc_shape *s);
void to_desc(const pc_shape *s, int32_t dtype, int32_t layout, kiln_tensor_desc *d);
bool out_dtypes(const kiln_plugin_instance *inst, int n_in, int32_t dt, int n_out, int32_t *odt);
int claims(const pc_plugin *p, int32_t dt, int32_t layout);
void fill_random(void *buf, int32_t dt, int64_t n, uint64_t seed);
void out_free(pc_out *o);
bool run_once(const pc_plugin *p, const kiln_plugin_instance *inst, const pc_shape *x, int32_t dt,
              uint64_t seed, kn_threadpool *pool, bool strict, pc_out *res, char *msg, size_t size);
bool same_out(const pc_out *a, const pc_out *b);
int run_shapes(const pc_plugin *p, pc_shape *s, int max, bool with_zero);

#endif
