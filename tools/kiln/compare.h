/* kiln compare: the error statistics of one output pair, and their report. */
#ifndef KILN_COMPARE_H
#define KILN_COMPARE_H

#include "core/tensor.h"
#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdio.h>

typedef enum cmp_stat { CMP_ELEMWISE, CMP_MAX, CMP_MEAN, CMP_MEDIAN } cmp_stat;

typedef struct cmp_tolerance {
    double rtol, atol;
    cmp_stat stat;
} cmp_tolerance;

#define CMP_N_PCT 5
extern const double cmp_percentiles[CMP_N_PCT]; /* 50, 90, 95, 99, 99.9 */

/* Polygraphy's definitions: abs = |target - ref|, rel = abs / |ref| (a zero ref gets 2^-52
 * added first), in float32 for float32 data and double for float64. */
typedef struct cmp_result {
    char name[256];
    bool shape_ok;
    char why[256]; /* set when the pair cannot be compared */
    int64_t n;
    double max_abs, mean_abs, median_abs, max_rel, mean_rel, median_rel;
    double pct_abs[CMP_N_PCT], pct_rel[CMP_N_PCT];
    int64_t worst; /* flat index of the largest abs error */
    double worst_ref, worst_target;
    int64_t nan_ref, nan_target, inf_ref, inf_target;
    bool pass;
    /* Histogram of log10(rel) for the report. */
    int64_t hist[40];
} cmp_result;

/* Compare target against ref (same dtype and shape, else shape_ok = false and why set). */
void cmp_tensors(const char *name, const kn_tensor *ref, const kn_tensor *target,
                 const cmp_tolerance *tol, cmp_result *out);
void cmp_print_text(FILE *f, const cmp_result *r);
void cmp_print_json_entry(FILE *f, const cmp_result *r);
/* dir/<name>.svg: histogram of the relative error. Returns 0 or an exit code. */
int cmp_write_svg(const char *dir, const cmp_result *r);

/* One side of a comparison: a model or plan that runs, or saved tensors. */
typedef struct cmp_side {
    const char *spec;
    const char *dir;  /* outputs:DIR */
    bool all_outputs; /* a model side built unfused with every tensor an output (--layers REF) */
    bool capture;     /* keep every layer's outputs (--layers, without changing the plan) */
    const char *backends;  /* --ref-backend / --target-backend: placement when built here */
    const char *precision; /* --ref-precision / --target-precision */
    kiln_engine *e;
    kiln_context *ctx;
    char **names; /* saved tensors (outputs:DIR, .npz) */
    kn_tensor *saved;
    int n_saved;
} cmp_side;

typedef struct compare_opts {
    const char *ref, *target, *report;
    cmp_tolerance tol;
    uint64_t seed;
    bool layers;
    const char *ref_backend, *target_backend, *ref_precision, *target_precision;
} compare_opts;

/* The tensor called name on side s (an output, a captured tensor, a saved one): 0, or -1
 * when the side has none of that name. t borrows the side's memory. */
int cmp_side_tensor(const cmp_side *s, const char *name, kn_tensor *t);
/* --layers: compare every layer output of target's plan that ref also has, in execution
 * order; prints the table (or the JSON "layers" and "first_failing_layer" members) and, with
 * --report, DIR/layers.svg. Returns 0 or an exit code. */
int cmp_layers(const compare_opts *c, const cmp_side *ref, const cmp_side *target, bool json);

#endif
