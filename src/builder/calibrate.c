/* int8 calibration of a float32 model (see kiln_build_config_set_int8). The graph, folded,
 * is built again in float32 for the CPU with every tensor calibration needs made an output
 * (so no fusion hides one), and run over the samples: a first pass takes each tensor's
 * minimum and maximum; the entropy method runs a second pass filling a 2048-bin histogram of
 * |x| over [0, max |x|] and takes TensorRT's threshold: the bin count i (from the number of
 * quantized levels up) whose clipped distribution P (the mass beyond i folded into bin i - 1)
 * is closest in KL divergence to Q, P merged into the levels and spread back over P's
 * non-empty bins; the threshold is (i + 0.5) bin widths. Exact zeros (half of what a Relu
 * writes) stay out of the histogram: they quantize without error, and their spike in the
 * first bin would otherwise decide the first level's spread. */
#include "builder/builder.h"
#include "builder/calibration_cache.h"

#include "core/alloc.h"
#include "core/fileio.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BINS 2048

typedef struct tstat {
    int v; /* value index in g */
    double lo, hi;
    uint64_t *hist; /* entropy, second pass */
} tstat;

typedef struct samples {
    char **paths; /* a folder per sample, or a .npy file per sample (one-input models) */
    int n;
    bool files;
} samples;

static void samples_free(samples *s) {
    for (int i = 0; i < s->n; i++)
        kn_free(s->paths[i]);
    kn_free(s->paths);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static kiln_status add_path(samples *s, const char *dir, const char *name) {
    char **p = kn_realloc(s->paths, (size_t)s->n * sizeof *p, (size_t)(s->n + 1) * sizeof *p);
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory listing calibration samples");
    s->paths = p;
    size_t len = strlen(dir) + strlen(name) + 2;
    if ((p[s->n] = kn_malloc(len)) == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory listing calibration samples");
    snprintf(p[s->n++], len, "%s/%s", dir, name);
    return KILN_OK;
}

/* The samples of dir: its sub-folders, else (one-input models) its .npy files, sorted. */
static kiln_status list_samples(const char *dir, const kn_graph *g, samples *s) {
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    if (d == NULL)
        return kn_error(KILN_ERR_IO, "calibration directory '%s' cannot be opened as a folder",
                        dir);
    samples files = {.files = true};
    kiln_status rc = KILN_OK;
    for (struct dirent *e; rc == KILN_OK && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (is_dir(path))
            rc = add_path(s, dir, e->d_name);
        else if (ends_with(e->d_name, ".npy"))
            rc = add_path(&files, dir, e->d_name);
    }
    closedir(d);
    if (rc == KILN_OK && s->n == 0 && files.n > 0) {
        if (g->n_inputs != 1) {
            rc = kn_error(KILN_ERR_INVALID_ARGUMENT,
                          "calibration directory '%s' holds .npy files, but the model has %d "
                          "inputs: give each sample a folder holding INPUT.npy for every input",
                          dir, g->n_inputs);
        } else {
            samples_free(s);
            *s = files;
            files = (samples){0};
        }
    }
    samples_free(&files);
    if (rc == KILN_OK && s->n == 0)
        rc = kn_error(KILN_ERR_INVALID_ARGUMENT,
                      "calibration directory '%s' holds no samples (expected a folder per sample "
                      "holding INPUT.npy for each model input, or .npy files for a one-input "
                      "model)",
                      dir);
    if (rc != KILN_OK) {
        samples_free(s);
        return rc;
    }
    qsort(s->paths, (size_t)s->n, sizeof *s->paths, by_name);
    return KILN_OK;
}

/* The file of input name in sample folder dir ('/' in the name becomes '_'). */
static void input_path(const char *dir, const char *name, char *out, size_t size) {
    int n = snprintf(out, size, "%s/", dir);
    for (const char *c = name; *c && (size_t)n + 5 < size; c++)
        out[n++] = *c == '/' ? '_' : *c;
    snprintf(out + n, size - (size_t)n, ".npy");
}

/* Load and bind sample i's inputs (t[n_inputs] receives the data, owned). */
static kiln_status bind_sample(const samples *s, int i, kiln_engine *e, kiln_context *ctx,
                               kn_tensor *t) {
    int n_in = kiln_engine_num_inputs(e);
    for (int k = 0; k < n_in; k++) {
        kiln_io_info info;
        kiln_engine_input_info(e, k, &info);
        char path[4096];
        if (s->files)
            snprintf(path, sizeof path, "%s", s->paths[i]);
        else
            input_path(s->paths[i], info.name, path, sizeof path);
        if (!s->files) {
            struct stat st;
            if (stat(path, &st) != 0)
                return kn_error(KILN_ERR_INVALID_ARGUMENT,
                                "calibration sample '%s' has no file for model input '%s' "
                                "(expected '%s')",
                                s->paths[i], info.name, path);
        }
        if (kn_npy_read(path, &t[k]) != KILN_OK)
            return kn_error_prefix(KILN_ERR_INVALID_ARGUMENT, "calibration sample '%s': ", path);
        if (t[k].dtype != (int32_t)info.dtype)
            return kn_error(KILN_ERR_DTYPE,
                            "calibration sample '%s': input '%s' is %s but the model expects %s",
                            path, info.name, kn_dtype_name(t[k].dtype), kn_dtype_name(info.dtype));
        if (t[k].shape.rank != info.rank)
            return kn_error(KILN_ERR_SHAPE,
                            "calibration sample '%s': input '%s' has rank %d but the model "
                            "expects rank %d",
                            path, info.name, t[k].shape.rank, info.rank);
        if (kiln_context_set_input_shape(ctx, info.name, t[k].shape.rank, t[k].shape.d) !=
                KILN_OK ||
            kiln_context_set_input(ctx, info.name, t[k].data, kn_tensor_nbytes(&t[k])) != KILN_OK)
            return kn_error_prefix(KILN_ERR_SHAPE, "calibration sample '%s': ", path);
    }
    return KILN_OK;
}

/* The data of tensor v after a run: an output of the calibration engine, or a graph input. */
static kiln_status tensor_data(const kn_graph *g, int v, kiln_context *ctx, kiln_engine *e,
                               const kn_tensor *in, const float **data, int64_t *n) {
    const char *name = g->values[v].name;
    for (int k = 0; k < kiln_engine_num_inputs(e); k++) {
        kiln_io_info info;
        kiln_engine_input_info(e, k, &info);
        if (strcmp(info.name, name) == 0) {
            *data = in[k].data;
            *n = kn_tensor_numel(&in[k]);
            return KILN_OK;
        }
    }
    kiln_tensor_view view;
    KN_TRY(kiln_context_get_output(ctx, name, &view));
    if (view.dtype != KILN_DTYPE_FLOAT32)
        return kn_error(KILN_ERR_DTYPE, "int8 calibration: tensor '%s' is %s, not float32", name,
                        kn_dtype_name((int32_t)view.dtype));
    *data = view.data;
    *n = (int64_t)(view.size / sizeof(float));
    return KILN_OK;
}

static double amax_of(const tstat *t) {
    return fmax(fabs(t->lo), fabs(t->hi));
}

static void observe(tstat *t, const float *x, int64_t n, int pass) {
    if (pass == 0) {
        for (int64_t i = 0; i < n; i++) {
            if (isnan(x[i]))
                continue;
            t->lo = x[i] < t->lo ? x[i] : t->lo;
            t->hi = x[i] > t->hi ? x[i] : t->hi;
        }
        return;
    }
    double amax = amax_of(t), per = amax > 0.0 ? BINS / amax : 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i]) || x[i] == 0.0f)
            continue;
        int64_t b = (int64_t)(fabs((double)x[i]) * per);
        t->hist[b < BINS ? b : BINS - 1]++;
    }
}

/* KL(P || Q) for the first i bins clipped, Q merged into `levels` levels (see the top). */
static double divergence(const uint64_t *h, int i, int levels, double *p, double *q) {
    double outliers = 0.0, sp = 0.0, sq = 0.0;
    for (int b = i; b < BINS; b++)
        outliers += (double)h[b];
    for (int b = 0; b < i; b++)
        p[b] = (double)h[b];
    p[i - 1] += outliers;
    for (int l = 0; l < levels; l++) {
        int b0 = (int)((int64_t)l * i / levels), b1 = (int)((int64_t)(l + 1) * i / levels);
        double sum = 0.0;
        int nonzero = 0;
        for (int b = b0; b < b1; b++) {
            sum += (double)h[b];
            nonzero += p[b] > 0.0;
        }
        for (int b = b0; b < b1; b++)
            q[b] = p[b] > 0.0 ? sum / nonzero : 0.0;
    }
    for (int b = 0; b < i; b++) {
        sp += p[b];
        sq += q[b];
    }
    if (sp <= 0.0 || sq <= 0.0)
        return INFINITY;
    double kl = 0.0;
    for (int b = 0; b < i; b++) {
        if (p[b] <= 0.0)
            continue;
        double pp = p[b] / sp, qq = q[b] > 0.0 ? q[b] / sq : 1e-12; /* Q empty where P is not */
        kl += pp * log(pp / qq);
    }
    return kl;
}

static double entropy_threshold(const tstat *t, int levels, double *p, double *q) {
    double amax = amax_of(t), best = INFINITY;
    int best_i = BINS;
    for (int i = levels; i <= BINS; i++) {
        double d = divergence(t->hist, i, levels, p, q);
        if (d < best) {
            best = d;
            best_i = i;
        }
    }
    return best_i >= BINS ? amax : ((double)best_i + 0.5) * amax / BINS;
}

/* The scale as the cache prints it, so a build from the cache sees the same float. */
static float printed(double s) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.9g", s);
    return strtof(buf, NULL);
}

static kiln_status ranges_from_stats(const tstat *st, int n, int method, kn_int8_range *ranges) {
    double *p = kn_malloc(2 * BINS * sizeof(double));
    if (p == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory calibrating");
    for (int i = 0; i < n; i++) {
        const tstat *t = &st[i];
        bool u = t->lo >= 0.0;
        int levels = u ? 256 : 128;
        double th = method == KILN_CALIBRATION_ENTROPY && amax_of(t) > 0.0
                        ? entropy_threshold(t, levels, p, p + BINS)
                        : amax_of(t);
        double s = th > 0.0 && isfinite(th) ? th / (u ? 255.0 : 127.0) : 1.0;
        ranges[t->v] = (kn_int8_range){.scale = printed(s), .is_unsigned = u};
    }
    kn_free(p);
    return KILN_OK;
}

typedef struct runner {
    const kiln_build_config *cfg;
    const kn_graph *g;
    const samples *s;
    tstat *st;
    int n_st;
    int passes;
} runner;

static kiln_status run_pass(runner *r, kiln_engine *e, kiln_context *ctx, int pass) {
    int n_in = kiln_engine_num_inputs(e);
    kn_tensor *in = kn_calloc((size_t)n_in + 1, sizeof *in);
    if (in == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory calibrating");
    kiln_status rc = KILN_OK;
    char stage[64];
    snprintf(stage, sizeof stage, "calibrating (run %d of %d)", pass + 1, r->passes);
    for (int i = 0; i < r->s->n && rc == KILN_OK; i++) {
        if (r->cfg->progress)
            r->cfg->progress(r->cfg->progress_user, stage, (double)i / r->s->n);
        rc = bind_sample(r->s, i, e, ctx, in);
        if (rc == KILN_OK && (rc = kiln_context_execute(ctx)) != KILN_OK)
            kn_error_prefix(rc, "calibration sample '%s': ", r->s->paths[i]);
        for (int t = 0; t < r->n_st && rc == KILN_OK; t++) {
            const float *x;
            int64_t n;
            if ((rc = tensor_data(r->g, r->st[t].v, ctx, e, in, &x, &n)) == KILN_OK)
                observe(&r->st[t], x, n, pass);
        }
        for (int k = 0; k < n_in; k++) {
            kn_free(in[k].data);
            in[k] = (kn_tensor){0};
        }
    }
    if (rc == KILN_OK && r->cfg->progress)
        r->cfg->progress(r->cfg->progress_user, stage, 1.0);
    kn_free(in);
    return rc;
}

/* The float32 engine whose outputs are the tensors of st (besides the graph's own). */
static kiln_status calibration_engine(const kiln_builder *b, const kiln_build_config *cfg,
                                      const kn_graph *g, const tstat *st, int n, kiln_engine **e) {
    kn_graph *c = kn_graph_clone(g);
    if (c == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory copying the network");
    kiln_status rc = KILN_OK;
    for (int i = 0; i < n && rc == KILN_OK; i++)
        if (!c->values[st[i].v].is_input && !c->values[st[i].v].is_output)
            rc = kn_graph_add_output(c, st[i].v);
    kiln_network net = {.graph = c, .builder = (kiln_builder *)b};
    kiln_build_config fp32 = *cfg;
    fp32.int8 = false;
    fp32.progress = NULL;
    fp32.backends = NULL;
    fp32.n_backends = 0;
    fp32.precision = KILN_PRECISION_FP32;
    fp32.n_layer_precision = 0;
    fp32.timing_cache = NULL;
    kn_plan plan;
    void *data = NULL;
    size_t size = 0;
    if (rc == KILN_OK && (rc = kn_build_plan(b, &net, &fp32, &plan)) == KILN_OK) {
        rc = kn_plan_write(&plan, &data, &size);
        kn_plan_clear(&plan);
    }
    if (rc == KILN_OK)
        rc = kiln_engine_load_memory(data, size, b->registry, e);
    if (rc != KILN_OK)
        kn_error_prefix(rc, "int8 calibration: building the float32 model: ");
    kn_free(data);
    kn_graph_destroy(c);
    return rc;
}

static kiln_status calibrate_runs(const kiln_builder *b, const kiln_build_config *cfg,
                                  const kn_graph *g, tstat *st, int n, kn_int8_range *ranges) {
    samples s;
    KN_TRY(list_samples(cfg->calibration_dir, g, &s));
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    runner r = {.cfg = cfg,
                .g = g,
                .s = &s,
                .st = st,
                .n_st = n,
                .passes = cfg->calibration_method == KILN_CALIBRATION_ENTROPY ? 2 : 1};
    kiln_status rc = calibration_engine(b, cfg, g, st, n, &e);
    if (rc == KILN_OK && (rc = kiln_context_create(e, &ctx)) == KILN_OK && cfg->threads > 0)
        rc = kiln_context_set_threads(ctx, cfg->threads);
    kn_log(KILN_LOG_INFO, "int8 calibration: %d samples from '%s', %s, %d tensors", s.n,
           cfg->calibration_dir, kn_calibration_method_name(cfg->calibration_method), n);
    for (int pass = 0; pass < r.passes && rc == KILN_OK; pass++) {
        for (int i = 0; i < n && pass == 1; i++)
            if ((st[i].hist = kn_calloc(BINS, sizeof(uint64_t))) == NULL)
                rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory calibrating");
        if (rc == KILN_OK)
            rc = run_pass(&r, e, ctx, pass);
    }
    if (rc == KILN_OK)
        rc = ranges_from_stats(st, n, cfg->calibration_method, ranges);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    samples_free(&s);
    return rc;
}

/* The distinct x and y tensors of the layers. */
static tstat *tensors_of(const kn_graph *g, const kn_int8_layer *l, int n_l, int *n) {
    tstat *st = kn_calloc((size_t)(2 * n_l) + 1, sizeof *st);
    bool *seen = kn_calloc((size_t)g->n_values + 1, sizeof(bool));
    *n = 0;
    for (int i = 0; st != NULL && seen != NULL && i < n_l; i++)
        for (int k = 0; k < 2; k++) {
            int v = k == 0 ? l[i].x : l[i].y;
            if (!seen[v])
                st[(*n)++] = (tstat){.v = v, .lo = INFINITY, .hi = -INFINITY};
            seen[v] = true;
        }
    if (seen == NULL) {
        kn_free(st);
        st = NULL;
    }
    kn_free(seen);
    return st;
}

static kiln_status check_float_model(const kn_graph *g, int n_layers) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (!n->dead && n->domain[0] == '\0' &&
            (strcmp(n->op_type, "QuantizeLinear") == 0 ||
             strcmp(n->op_type, "DequantizeLinear") == 0))
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "int8 calibration: the model is already quantized (it has %s node "
                            "'%s'); build it without calibration, its QDQ pairs run in int8",
                            n->op_type, n->name);
    }
    if (n_layers == 0)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "int8 calibration: the model has no float32 Conv, Gemm or MatMul with "
                        "constant weights to run in int8");
    return KILN_OK;
}

kiln_status kn_int8_calibrate(const kiln_builder *b, const kiln_build_config *cfg, kn_graph *g) {
    kn_int8_layer *layers;
    int n_layers, n = 0;
    KN_TRY(kn_int8_layers(g, &layers, &n_layers));
    kiln_status rc = check_float_model(g, n_layers);
    tstat *st = rc == KILN_OK ? tensors_of(g, layers, n_layers, &n) : NULL;
    kn_int8_range *ranges = kn_calloc((size_t)g->n_values + 1, sizeof *ranges);
    int *values = kn_calloc((size_t)n + 1, sizeof(int));
    if (rc == KILN_OK && (st == NULL || ranges == NULL || values == NULL))
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory calibrating");
    for (int i = 0; rc == KILN_OK && i < n; i++)
        values[i] = st[i].v;
    uint64_t hash = rc == KILN_OK ? kn_int8_model_hash(g) : 0;
    const char *cache = cfg->calibration_cache;
    struct stat sb;
    bool cached = cache != NULL && stat(cache, &sb) == 0;
    if (rc == KILN_OK && cached) {
        rc = kn_calibration_cache_read(cache, hash, cfg->calibration_method, g, values, n, ranges);
        if (rc == KILN_OK)
            kn_log(KILN_LOG_INFO, "int8 calibration: %d tensor scales from '%s'", n, cache);
    } else if (rc == KILN_OK && cfg->calibration_dir == NULL) {
        rc = kn_error(KILN_ERR_INVALID_ARGUMENT,
                      "int8 needs a calibration directory (or an existing calibration cache%s%s)",
                      cache ? "; not found: " : "", cache ? cache : "");
    } else if (rc == KILN_OK) {
        rc = calibrate_runs(b, cfg, g, st, n, ranges);
        if (rc == KILN_OK && cache != NULL)
            rc = kn_calibration_cache_write(cache, hash, cfg->calibration_method, g, values, n,
                                            ranges);
    }
    if (rc == KILN_OK)
        rc = kn_pass_quantize_int8(g, layers, n_layers, ranges);
    for (int i = 0; st != NULL && i < n; i++)
        kn_free(st[i].hist);
    kn_free(st);
    kn_free(values);
    kn_free(ranges);
    kn_free(layers);
    return rc;
}
