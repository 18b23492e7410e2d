/* Error statistics of one output pair, defined as Polygraphy defines them so the numbers agree
 * with `polygraphy run --load-outputs` (the reference plays Polygraphy's second runner, whose
 * values divide the relative error), and their text, JSON and SVG forms. */
#include "compare.h"

#include "cli.h"

#include "core/alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const double cmp_percentiles[CMP_N_PCT] = {50, 90, 95, 99, 99.9};

/* Polygraphy adds this to zero reference values before dividing. */
#define CMP_EPSILON 2.220446049250313e-16
#define HIST_LO (-16.0) /* log10 of the smallest relative error binned */
#define HIST_STEP 0.5

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* numpy's default (linear) quantile of sorted s[0..n). */
static double quantile(const double *s, int64_t n, double q) {
    double idx = q * (double)(n - 1);
    int64_t lo = (int64_t)idx;
    int64_t hi = lo + 1 < n ? lo + 1 : lo;
    if (s[lo] == s[hi]) /* also two infinities, whose difference would be NaN */
        return s[lo];
    return s[lo] + (s[hi] - s[lo]) * (idx - (double)lo);
}

static double median(const double *s, int64_t n) {
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
}

/* max, mean, median and percentiles of v[0..n) (sorted in place); NaN if any value is. */
static void summarize(double *v, int64_t n, double *max, double *mean, double *med, double *pct) {
    double sum = 0;
    bool nan = false;
    for (int64_t i = 0; i < n; i++) {
        nan |= isnan(v[i]);
        sum += v[i];
    }
    if (nan || n == 0) {
        *max = *mean = *med = NAN;
        for (int k = 0; k < CMP_N_PCT; k++)
            pct[k] = NAN;
        return;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *max = v[n - 1];
    *mean = sum / (double)n;
    *med = median(v, n);
    for (int k = 0; k < CMP_N_PCT; k++)
        pct[k] = quantile(v, n, cmp_percentiles[k] / 100.0);
}

static bool stat_failed(double v, double tol) {
    return isnan(v) || v > tol;
}

static void errors_at(const kn_tensor *ref, const kn_tensor *target, int64_t i, double *abs_err,
                      double *rel_err) {
    if (ref->dtype == KILN_DTYPE_FLOAT32) { /* float32 arithmetic, as numpy does it */
        float r = ((const float *)ref->data)[i], t = ((const float *)target->data)[i];
        float a = fabsf(t - r);
        float d = r == 0.0f ? (float)CMP_EPSILON : r;
        *abs_err = a;
        *rel_err = a / fabsf(d);
        return;
    }
    double r = kn_tensor_get_f64(ref, i), t = kn_tensor_get_f64(target, i);
    double a = ref->dtype == KILN_DTYPE_BOOL ? (double)((r != 0) != (t != 0)) : fabs(t - r);
    *abs_err = a;
    *rel_err = a / fabs(r == 0.0 ? CMP_EPSILON : r);
}

static void count_special(const kn_tensor *t, int64_t *nan, int64_t *inf) {
    *nan = *inf = 0;
    if (!kn_dtype_is_float(t->dtype))
        return;
    for (int64_t i = 0; i < kn_tensor_numel(t); i++) {
        double v = kn_tensor_get_f64(t, i);
        *nan += isnan(v);
        *inf += isinf(v);
    }
}

static bool check_shapes(const kn_tensor *ref, const kn_tensor *target, cmp_result *out) {
    char a[128], b[128];
    if (ref->dtype != target->dtype)
        snprintf(out->why, sizeof out->why, "dtype differs: reference %s, target %s",
                 kn_dtype_name(ref->dtype), kn_dtype_name(target->dtype));
    else if (!kn_shape_equal(&ref->shape, &target->shape))
        snprintf(out->why, sizeof out->why, "shape differs: reference %s, target %s",
                 kn_shape_str(&ref->shape, a, sizeof a), kn_shape_str(&target->shape, b, sizeof b));
    else if (kn_dtype_size(ref->dtype) == 0)
        snprintf(out->why, sizeof out->why, "dtype %s cannot be compared",
                 kn_dtype_name(ref->dtype));
    else
        return true;
    return false;
}

void cmp_tensors(const char *name, const kn_tensor *ref, const kn_tensor *target,
                 const cmp_tolerance *tol, cmp_result *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->shape_ok = check_shapes(ref, target, out);
    if (!out->shape_ok)
        return;
    int64_t n = kn_tensor_numel(ref);
    out->n = n;
    double *ab = kn_malloc(((size_t)n + 1) * sizeof *ab);
    double *rel = kn_malloc(((size_t)n + 1) * sizeof *rel);
    if (ab == NULL || rel == NULL) {
        snprintf(out->why, sizeof out->why, "out of memory comparing %lld values", (long long)n);
        out->shape_ok = false;
        kn_free(ab), kn_free(rel);
        return;
    }
    bool elem_pass = true;
    double worst = -1;
    for (int64_t i = 0; i < n; i++) {
        errors_at(ref, target, i, &ab[i], &rel[i]);
        elem_pass &= !(stat_failed(ab[i], tol->atol) && stat_failed(rel[i], tol->rtol));
        /* The first NaN is the worst element; otherwise the largest error. */
        if (!isnan(worst) && (isnan(ab[i]) || ab[i] > worst)) {
            worst = ab[i];
            out->worst = i;
        }
        if (!isnan(rel[i])) {
            double l = rel[i] > 0 ? (log10(rel[i]) - HIST_LO) / HIST_STEP : 0;
            int b = l < 0 ? 0 : l >= 39 ? 39 : (int)l;
            out->hist[b]++;
        }
    }
    if (n > 0) {
        out->worst_ref = kn_tensor_get_f64(ref, out->worst);
        out->worst_target = kn_tensor_get_f64(target, out->worst);
    }
    count_special(ref, &out->nan_ref, &out->inf_ref);
    count_special(target, &out->nan_target, &out->inf_target);
    summarize(ab, n, &out->max_abs, &out->mean_abs, &out->median_abs, out->pct_abs);
    summarize(rel, n, &out->max_rel, &out->mean_rel, &out->median_rel, out->pct_rel);
    kn_free(ab), kn_free(rel);
    double a = out->max_abs, r = out->max_rel;
    if (tol->stat == CMP_MEAN)
        a = out->mean_abs, r = out->mean_rel;
    else if (tol->stat == CMP_MEDIAN)
        a = out->median_abs, r = out->median_rel;
    out->pass = tol->stat == CMP_ELEMWISE
                    ? elem_pass
                    : !(stat_failed(a, tol->atol) && stat_failed(r, tol->rtol));
    if (n == 0)
        out->pass = true;
}

void cmp_print_text(FILE *f, const cmp_result *r) {
    if (!r->shape_ok) {
        fprintf(f, "%s: FAIL (%s)\n", r->name, r->why);
        return;
    }
    fprintf(f, "%s: %s  (%lld values)\n", r->name, r->pass ? "PASS" : "FAIL", (long long)r->n);
    fprintf(f, "  abs error: max %.6g  mean %.6g  median %.6g\n", r->max_abs, r->mean_abs,
            r->median_abs);
    fprintf(f, "  rel error: max %.6g  mean %.6g  median %.6g\n", r->max_rel, r->mean_rel,
            r->median_rel);
    fprintf(f, "  abs percentiles:");
    for (int k = 0; k < CMP_N_PCT; k++)
        fprintf(f, " p%g %.4g", cmp_percentiles[k], r->pct_abs[k]);
    fprintf(f, "\n  worst at flat index %lld: reference %.8g, target %.8g\n", (long long)r->worst,
            r->worst_ref, r->worst_target);
    if (r->nan_ref || r->nan_target || r->inf_ref || r->inf_target)
        fprintf(f, "  NaN: reference %lld, target %lld; Inf: reference %lld, target %lld\n",
                (long long)r->nan_ref, (long long)r->nan_target, (long long)r->inf_ref,
                (long long)r->inf_target);
}

static void json_num(FILE *f, double v) {
    if (isnan(v) || isinf(v))
        fputs("null", f);
    else
        fprintf(f, "%.17g", v);
}

void cmp_print_json_entry(FILE *f, const cmp_result *r) {
    fputc('"', f);
    for (const char *s = r->name; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    fputs("\": {", f);
    if (!r->shape_ok) {
        fprintf(f, "\"pass\": false, \"error\": \"%s\"}", r->why);
        return;
    }
    const struct {
        const char *k;
        double v;
    } nums[] = {{"max_abs", r->max_abs},       {"mean_abs", r->mean_abs},
                {"median_abs", r->median_abs}, {"max_rel", r->max_rel},
                {"mean_rel", r->mean_rel},     {"median_rel", r->median_rel},
                {"worst_ref", r->worst_ref},   {"worst_target", r->worst_target}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        fprintf(f, "\"%s\": ", nums[i].k);
        json_num(f, nums[i].v);
        fputs(", ", f);
    }
    fputs("\"abs_percentiles\": {", f);
    for (int k = 0; k < CMP_N_PCT; k++) {
        fprintf(f, "%s\"p%g\": ", k ? ", " : "", cmp_percentiles[k]);
        json_num(f, r->pct_abs[k]);
    }
    fputs("}, \"rel_percentiles\": {", f);
    for (int k = 0; k < CMP_N_PCT; k++) {
        fprintf(f, "%s\"p%g\": ", k ? ", " : "", cmp_percentiles[k]);
        json_num(f, r->pct_rel[k]);
    }
    fprintf(f,
            "}, \"worst_index\": %lld, \"nan_ref\": %lld, \"nan_target\": %lld, \"inf_ref\": "
            "%lld, \"inf_target\": %lld, \"count\": %lld, \"pass\": %s}",
            (long long)r->worst, (long long)r->nan_ref, (long long)r->nan_target,
            (long long)r->inf_ref, (long long)r->inf_target, (long long)r->n,
            r->pass ? "true" : "false");
}

int cmp_write_svg(const char *dir, const cmp_result *r) {
    char safe[256], path[4096];
    size_t j = 0;
    for (const char *s = r->name; *s && j + 1 < sizeof safe; s++)
        safe[j++] = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                            (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'
                        ? *s
                        : '_';
    safe[j] = '\0';
    snprintf(path, sizeof path, "%s/%s.svg", dir, safe);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return cli_fail("--report: cannot write %s", path);
    int64_t top = 1;
    for (int b = 0; b < 40; b++)
        top = r->hist[b] > top ? r->hist[b] : top;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"660\" height=\"300\">\n"
            "<title>relative error of %s</title>\n"
            "<text x=\"10\" y=\"20\" font-family=\"sans-serif\" font-size=\"14\">%s: "
            "log10(relative error), %lld values</text>\n",
            safe, safe, (long long)r->n);
    for (int b = 0; b < 40; b++) {
        double h = 220.0 * (double)r->hist[b] / (double)top;
        fprintf(f,
                "<rect x=\"%d\" y=\"%.1f\" width=\"13\" height=\"%.1f\" fill=\"#4878a8\">"
                "<title>[%g, %g): %lld</title></rect>\n",
                20 + b * 15, 260 - h, h, HIST_LO + b * HIST_STEP, HIST_LO + (b + 1) * HIST_STEP,
                (long long)r->hist[b]);
    }
    for (int b = 0; b <= 40; b += 4)
        fprintf(f,
                "<text x=\"%d\" y=\"280\" font-family=\"sans-serif\" font-size=\"10\">%g</text>\n",
                14 + b * 15, HIST_LO + b * HIST_STEP);
    fputs("</svg>\n", f);
    if (fclose(f) != 0)
        return cli_fail("--report: cannot write %s", path);
    return 0;
}
