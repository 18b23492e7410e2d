/* kiln compare: run a reference and a target on the same inputs (or load saved outputs) and
 * compare every output, as `polygraphy run` compares two runners. */
#include "cli.h"

#include "compare.h"
#include "core/alloc.h"
#include "core/fileio.h"
#include "npz.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: kiln compare REF TARGET [--input NAME=FILE]... [--shapes SPEC]... [--seed N]\n"
    "                    [--rtol R] [--atol A] [--check-error-stat elemwise|max|mean|median]\n"
    "                    [--layers] [--json] [--report DIR] [--plugins LIB.so]...\n"
    "\n"
    "Each side is a model (.onnx), a plan, or saved outputs (outputs:DIR, a folder as kiln run\n"
    "writes it, or an .npz archive as numpy.savez writes it). Model and plan sides run on the same "
    "inputs: the --input files, else seeded\n"
    "random data (uniform in [0, 1) for floats) at the --shapes shape or the profile's OPT.\n"
    "For every output of REF: max/mean/median absolute and relative error (relative to REF),\n"
    "percentiles, the worst element, NaN/Inf counts and pass/fail. Exit 0 when every output is\n"
    "within tolerance, 1 when one is not, 2 on error.\n"
    "\n"
    "  --rtol R, --atol A       tolerances (default 1e-5 each); an element or statistic passes\n"
    "                           when its absolute error <= A or its relative error <= R\n"
    "  --check-error-stat S     elemwise (default: every element), or max, mean, median\n"
    "  --seed N                 seed of the random inputs (default 1)\n"
    "  --ref-backend LIST, --target-backend LIST placement of a side built from .onnx here\n"
    "                                            (as kiln build --backend; default cpu)\n"
    "  --ref-precision P, --target-precision P   fp32 (default), tf32, fp16 or bf16 for a side\n"
    "                                            built from .onnx here (kiln build --precision)\n"
    "  --layer-precision PATTERN=P               per-layer overrides for both sides (as kiln\n"
    "                                            build; e.g. the list kiln debug precision wrote)\n"
    "  --json                   one JSON object: {\"pass\", \"outputs\": {NAME: {...}}}\n"
    "  --layers                 also compare layer by layer: TARGET runs its plan as built and\n"
    "                           every layer's outputs are captured; a model REF is built unfused\n"
    "                           with every tensor an output (saved REF tensors work too); each\n"
    "                           layer REF has is compared, in execution order, and the first one\n"
    "                           beyond tolerance is named with the ONNX nodes it fused\n"
    "  --report DIR             DIR/NAME.svg: a histogram of each output's relative error;\n"
    "                           with --layers also DIR/layers.svg, the error of every layer\n";

static void side_free(cmp_side *s) {
    for (int i = 0; i < s->n_saved; i++) {
        kn_free(s->names[i]);
        kn_free(s->saved[i].data);
    }
    kn_free(s->names);
    kn_free(s->saved);
    kiln_context_destroy(s->ctx);
    kiln_engine_destroy(s->e);
}

/* The next JSON string of a flat object at *p (escapes \" \\ \uXXXX below 0x80 only). */
static char *json_next_string(const char **p) {
    const char *s = strchr(*p, '"');
    if (s == NULL)
        return NULL;
    char *out = kn_malloc(strlen(s) + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (s++; *s && *s != '"'; s++) {
        if (*s != '\\') {
            *o++ = *s;
            continue;
        }
        s++;
        if (*s == 'u' && strlen(s) >= 5) {
            *o++ = (char)strtol((char[5]){s[1], s[2], s[3], s[4], 0}, NULL, 16);
            s += 4;
        } else if (*s != '\0') {
            *o++ = *s;
        } else {
            break;
        }
    }
    *o = '\0';
    if (*s != '"') {
        kn_free(out);
        return NULL;
    }
    *p = s + 1;
    return out;
}

/* outputs:DIR -> DIR/outputs.json, {"output name": "file.npy", ...}, as kiln run writes it. */
static int load_saved(cmp_side *s) {
    char path[4096];
    snprintf(path, sizeof path, "%s/outputs.json", s->dir);
    void *text;
    size_t size;
    if (kn_file_read(path, &text, &size) != KILN_OK)
        return cli_fail("%s: %s", s->spec, kiln_last_error());
    char *json = kn_realloc(text, size, size + 1);
    if (json == NULL) {
        kn_free(text);
        return cli_fail("out of memory");
    }
    json[size] = '\0';
    int rc = 0, cap = 0;
    const char *p = json;
    for (;;) {
        char *name = json_next_string(&p);
        if (name == NULL)
            break;
        char *file = json_next_string(&p);
        if (file == NULL || strchr(file, '/') != NULL) {
            kn_free(name), kn_free(file);
            rc =
                cli_fail("%s: outputs.json is not a flat {\"name\": \"file.npy\"} object", s->spec);
            break;
        }
        if (s->n_saved == cap) {
            int nc = cap ? cap * 2 : 8;
            char **nn = kn_realloc(s->names, (size_t)cap * sizeof *nn, (size_t)nc * sizeof *nn);
            if (nn != NULL)
                s->names = nn;
            kn_tensor *nt = kn_realloc(s->saved, (size_t)cap * sizeof *nt, (size_t)nc * sizeof *nt);
            if (nt != NULL)
                s->saved = nt;
            if (nn == NULL || nt == NULL) {
                kn_free(name), kn_free(file);
                rc = cli_fail("out of memory");
                break;
            }
            cap = nc;
        }
        snprintf(path, sizeof path, "%s/%s", s->dir, file);
        kn_free(file);
        s->names[s->n_saved] = name;
        memset(&s->saved[s->n_saved], 0, sizeof s->saved[0]);
        kiln_status st = kn_npy_read(path, &s->saved[s->n_saved]);
        s->n_saved++;
        if (st != KILN_OK) {
            rc = cli_fail("%s: output '%s': %s", s->spec, name, kiln_last_error());
            break;
        }
    }
    if (rc == 0 && s->n_saved == 0)
        rc = cli_fail("%s: outputs.json lists no outputs", s->spec);
    kn_free(json);
    return rc;
}

/* Uniform [0, 1) floats (Polygraphy's default data), small non-negative ints, from a seed. */
static void fill_seeded(kn_tensor *t, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    for (int64_t i = 0; i < kn_tensor_numel(t); i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double u = (double)(s >> 11) / (double)(1ull << 53);
        if (kn_dtype_is_float(t->dtype))
            kn_tensor_set_f64(t, i, u);
        else
            kn_tensor_set_i64(t, i, t->dtype == KILN_DTYPE_BOOL ? u < 0.5 : (int64_t)(u * 4));
    }
}

/* Inputs of e not given with --input get seeded data, added to o->inputs for both sides. */
static int add_seeded_inputs(cli_opts *o, kiln_engine *e, uint64_t seed) {
    for (int k = 0; k < kiln_engine_num_inputs(e); k++) {
        kiln_io_info info;
        kiln_engine_input_info(e, k, &info);
        bool given = false;
        for (int i = 0; i < o->n_inputs && !given; i++)
            given = strcmp(o->inputs[i].name, info.name) == 0;
        if (given)
            continue;
        if (o->n_inputs == CLI_MAX_ITEMS)
            return cli_fail("too many inputs");
        cli_input *in = &o->inputs[o->n_inputs];
        memset(in, 0, sizeof *in);
        in->t.dtype = info.dtype;
        in->t.shape.rank = info.rank;
        for (int d = 0; d < info.rank; d++) {
            in->t.shape.d[d] = info.opt[d];
            for (int s = 0; s < o->n_shapes; s++)
                if (strcmp(o->shapes[s].name, info.name) == 0 && o->shapes[s].rank == info.rank)
                    in->t.shape.d[d] = o->shapes[s].opt[d];
        }
        in->name = kn_strdup(info.name);
        in->t.data = kn_malloc(kn_tensor_nbytes(&in->t) + 1);
        o->n_inputs++;
        if (in->name == NULL || in->t.data == NULL)
            return cli_fail("out of memory for input '%s'", info.name);
        fill_seeded(&in->t, seed + (uint64_t)k);
    }
    return 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int open_side(cli_opts *o, cmp_side *s, const compare_opts *c) {
    if (ends_with(s->spec, ".npz")) {
        const char *path = strncmp(s->spec, "outputs:", 8) == 0 ? s->spec + 8 : s->spec;
        return cli_npz_read(path, &s->names, &s->saved, &s->n_saved);
    }
    if (strncmp(s->spec, "outputs:", 8) == 0) {
        s->dir = s->spec + 8;
        return load_saved(s);
    }
    o->model = s->spec;
    o->all_outputs = s->all_outputs;
    o->backends = s->backends;
    o->precision = s->precision;
    int rc = cli_load_engine(o, &s->e);
    o->all_outputs = false;
    o->backends = NULL;
    o->precision = NULL;
    if (rc != 0)
        return rc;
    if ((rc = add_seeded_inputs(o, s->e, c->seed)) != 0)
        return rc;
    if (kiln_context_create(s->e, &s->ctx) != KILN_OK)
        return cli_fail_kiln("context");
    if (o->threads > 0 && kiln_context_set_threads(s->ctx, o->threads) != KILN_OK)
        return cli_fail_kiln("threads");
    if (s->capture && kiln_context_set_capture(s->ctx, NULL, -1) != KILN_OK)
        return cli_fail_kiln("capture");
    int n_owned = 0;
    if ((rc = cli_bind_inputs(o, s->e, s->ctx, false, NULL, &n_owned)) != 0)
        return rc;
    if (kiln_context_execute(s->ctx) != KILN_OK)
        return cli_fail("%s: %s", s->spec, kiln_last_error());
    return 0;
}

int cmp_side_tensor(const cmp_side *s, const char *name, kn_tensor *t) {
    if (s->ctx == NULL) {
        for (int i = 0; i < s->n_saved; i++)
            if (strcmp(s->names[i], name) == 0) {
                *t = s->saved[i];
                return 0;
            }
        return -1;
    }
    kiln_tensor_view v;
    if (kiln_context_get_output(s->ctx, name, &v) != KILN_OK &&
        (!s->capture || kiln_context_get_captured(s->ctx, name, &v) != KILN_OK))
        return -1;
    t->dtype = v.dtype;
    t->shape.rank = v.rank;
    memcpy(t->shape.d, v.dims, sizeof v.dims);
    t->data = (void *)v.data;
    return 0;
}

static int side_output(const cmp_side *s, const char *name, kn_tensor *t) {
    if (cmp_side_tensor(s, name, t) == 0)
        return 0;
    return cli_fail("%s has no output named '%s'", s->spec, name);
}

static int side_num_outputs(const cmp_side *s) {
    return s->ctx ? kiln_engine_num_outputs(s->e) : s->n_saved;
}

static const char *side_output_name(const cmp_side *s, int i) {
    if (s->ctx == NULL)
        return s->names[i];
    kiln_io_info info;
    kiln_engine_output_info(s->e, i, &info);
    return info.name;
}

static bool parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= 0))
        return false;
    *out = v;
    return true;
}

/* Options only compare takes; the rest go to cli_parse. Returns 0, or an exit code. */
static int take_compare_option(const char *a, const char *v, compare_opts *c) {
    if (v == NULL)
        return cli_fail("%s needs a value (see kiln compare --help)", a);
    if (strcmp(a, "--rtol") == 0 || strcmp(a, "--atol") == 0) {
        double *dst = a[2] == 'r' ? &c->tol.rtol : &c->tol.atol;
        if (!parse_double(v, dst))
            return cli_fail("%s '%s': expected a number >= 0", a, v);
    } else if (strcmp(a, "--check-error-stat") == 0) {
        static const char *const names[] = {"elemwise", "max", "mean", "median"};
        int k = 0;
        while (k < 4 && strcmp(v, names[k]) != 0)
            k++;
        if (k == 4)
            return cli_fail("--check-error-stat '%s': expected elemwise, max, mean or median", v);
        c->tol.stat = (cmp_stat)k;
    } else if (strcmp(a, "--seed") == 0) {
        char *end;
        unsigned long long s = strtoull(v, &end, 10);
        if (end == v || *end != '\0')
            return cli_fail("--seed '%s': expected a number", v);
        c->seed = s;
    } else if (strcmp(a, "--report") == 0) {
        c->report = v;
    } else if (strcmp(a, "--ref-backend") == 0) {
        c->ref_backend = v;
    } else if (strcmp(a, "--target-backend") == 0) {
        c->target_backend = v;
    } else if (strcmp(a, "--ref-precision") == 0) {
        c->ref_precision = v;
    } else {
        c->target_precision = v;
    }
    return 0;
}

static bool is_compare_option(const char *a) {
    static const char *const opts[] = {"--rtol",           "--atol",          "--check-error-stat",
                                       "--seed",           "--report",        "--ref-backend",
                                       "--target-backend", "--ref-precision", "--target-precision"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (strcmp(a, opts[i]) == 0)
            return true;
    return false;
}

static bool takes_value(const char *a) {
    return strcmp(a, "--input") == 0 || strcmp(a, "--shapes") == 0 || strcmp(a, "--plugins") == 0 ||
           strcmp(a, "--prefer-plugin") == 0 || strcmp(a, "--threads") == 0 ||
           strcmp(a, "--layer-precision") == 0;
}

/* Split argv into compare's own options, REF, TARGET, and the rest for cli_parse. */
static int split_args(int argc, char **argv, compare_opts *c, char **rest, int *n_rest) {
    *n_rest = 0;
    rest[(*n_rest)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return -1;
        }
        if (strcmp(a, "--layers") == 0) {
            c->layers = true;
        } else if (is_compare_option(a)) {
            int rc = take_compare_option(a, i + 1 < argc ? argv[i + 1] : NULL, c);
            if (rc != 0)
                return rc;
            i++;
        } else if (a[0] == '-') {
            rest[(*n_rest)++] = argv[i];
            if (takes_value(a) && i + 1 < argc)
                rest[(*n_rest)++] = argv[++i];
        } else if (c->ref == NULL) {
            c->ref = a;
        } else if (c->target == NULL) {
            c->target = a;
        } else {
            return cli_fail("unexpected argument '%s' (see kiln compare --help)", a);
        }
    }
    if (c->target == NULL)
        return cli_fail("compare needs REF and TARGET (see kiln compare --help)");
    if (c->layers && (strncmp(c->target, "outputs:", 8) == 0 || ends_with(c->target, ".npz")))
        return cli_fail("--layers runs TARGET to capture its layers: give a model or a plan, "
                        "not saved outputs");
    rest[(*n_rest)++] = (char *)c->ref; /* cli_parse wants a model argument */
    return 0;
}

static int compare_outputs(const compare_opts *c, const cmp_side *ref, const cmp_side *target,
                           bool json) {
    /* With --layers the reference is built with every tensor an output: the model's outputs
     * are then the target's. */
    const cmp_side *names = c->layers ? target : ref;
    int n = side_num_outputs(names), rc = 0;
    bool all_pass = true;
    if (c->report != NULL && mkdir(c->report, 0777) != 0 && errno != EEXIST)
        return cli_fail("--report: cannot create '%s': %s", c->report, strerror(errno));
    if (json)
        printf("{\"outputs\": {");
    for (int i = 0; i < n && rc == 0; i++) {
        const char *name = side_output_name(names, i);
        kn_tensor a, b;
        if ((rc = side_output(ref, name, &a)) != 0 || (rc = side_output(target, name, &b)) != 0)
            break;
        cmp_result r;
        cmp_tensors(name, &a, &b, &c->tol, &r);
        all_pass &= r.pass && r.shape_ok;
        if (json) {
            fputs(i ? ", " : "", stdout);
            cmp_print_json_entry(stdout, &r);
        } else {
            cmp_print_text(stdout, &r);
        }
        if (c->report != NULL && r.shape_ok)
            rc = cmp_write_svg(c->report, &r);
    }
    if (json)
        fputs("}", stdout);
    if (rc == 0 && c->layers)
        rc = cmp_layers(c, ref, target, json);
    if (rc != 0)
        return 2;
    if (json)
        printf(", \"pass\": %s}\n", all_pass ? "true" : "false");
    else
        printf("%s\n", all_pass ? "PASSED: every output is within tolerance"
                                : "FAILED: an output is outside the tolerance");
    return all_pass ? 0 : 1;
}

int cmd_compare(int argc, char **argv) {
    compare_opts c = {.tol = {.rtol = 1e-5, .atol = 1e-5, .stat = CMP_ELEMWISE}, .seed = 1};
    char **rest = kn_calloc((size_t)argc + 2, sizeof *rest);
    if (rest == NULL)
        return cli_fail("out of memory") + 1;
    int n_rest;
    int rc = split_args(argc, argv, &c, rest, &n_rest);
    if (rc != 0) {
        kn_free(rest);
        return rc < 0 ? 0 : 2;
    }
    cli_opts o;
    rc = cli_parse(n_rest, rest, "sitpj", usage, &o);
    cmp_side ref = {.spec = c.ref,
                    .all_outputs = c.layers,
                    .capture = c.layers,
                    .backends = c.ref_backend,
                    .precision = c.ref_precision},
             target = {.spec = c.target,
                       .capture = c.layers,
                       .backends = c.target_backend,
                       .precision = c.target_precision};
    if (rc == 0)
        rc = cli_load_inputs(&o);
    if (rc == 0)
        rc = cli_load_plugins(&o);
    if (rc == 0)
        rc = open_side(&o, &ref, &c);
    if (rc == 0)
        rc = open_side(&o, &target, &c);
    if (rc == 0)
        rc = compare_outputs(&c, &ref, &target, o.json);
    else if (rc > 0)
        rc = 2;
    side_free(&ref);
    side_free(&target);
    cli_opts_free(&o);
    kn_free(rest);
    return rc < 0 ? 0 : rc;
}
