/* kiln debug precision: the fewest layers that must stay fp32 for the outputs to meet the
 * tolerance at a reduced precision. Layers are those of the model's optimized fp32 plan, in
 * execution order; a candidate is a set of layers kept in fp32. The search bisects for the
 * shortest prefix of the execution order that passes when kept, then prunes every layer of it
 * whose removal still passes, and writes the result as a --layer-precision list.
 *
 * A candidate is judged, by default, by building the model with --precision and the list as
 * --layer-precision overrides (on the --backend asked for) and comparing its outputs with the
 * fp32 run; by --check (a command given the list file; exit 0 passes); or, with --emulate, by
 * rounding the outputs of every layer not kept to the precision and back (Cast nodes after
 * it) in an fp32 run: that emulates reduced-precision storage between layers on any backend,
 * whichever layers the backend itself would lower. */
#include "cli.h"

#include "compare.h"
#include "core/alloc.h"
#include "core/fileio.h"
#include "debug.h"
#include "edit/edit.h"
#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln debug precision MODEL.onnx --precision fp16|bf16 -o LAYERS.txt\n"
    "                            [--emulate | --check \"CMD {}\"] [--rtol R] [--atol A]\n"
    "                            [--input NAME=FILE]... [--shapes SPEC]... [--plugins LIB]...\n"
    "                            [--backend LIST]\n"
    "\n"
    "Finds the fewest layers of MODEL's plan that must stay fp32 for its outputs to meet the\n"
    "tolerance when the rest run at --precision, and writes them as a layer-precision list\n"
    "(one NAME=fp32 line a layer) that kiln build reads with --layer-precision @LAYERS.txt.\n"
    "Bisection over the execution order, then pruning. By default each candidate is built with\n"
    "--precision and the list (on --backend) and its outputs compared with the fp32 run.\n"
    "\n"
    "  --emulate        instead round the outputs of every layer not kept to the precision\n"
    "                   (storage only) in an fp32 run, whichever layers the backend lowers\n"
    "  --check \"CMD {}\" judge a candidate with a command: {} is the list file, exit 0 passes\n"
    "  --rtol R, --atol A   tolerance of the outputs (default 1e-3 each), elementwise\n";

typedef struct prec_search {
    cli_opts o;
    const char *model, *out;
    int dtype; /* KILN_DTYPE_FLOAT16 or KILN_DTYPE_BFLOAT16 */
    const char *precision;
    bool emulate;
    debug_check check;
    cmp_tolerance tol;
    kn_graph *g0; /* the model, for the emulated candidates */
    kiln_engine *ref_e;
    kiln_context *ref_ctx; /* the fp32 run */
    int n_layers;
    kiln_layer_info *layers;
    char dir[64], path[128];
    int runs;
    double last_max_rel; /* of the last emulated candidate */
} prec_search;

/* Write the layer-precision list of the layers keep[] marks (atomically). */
static int write_list(const prec_search *s, const bool *keep, const char *path) {
    size_t len = 1;
    for (int i = 0; i < s->n_layers; i++)
        len += keep[i] ? 2 * strlen(s->layers[i].name) + 6 : 0;
    char *text = kn_calloc(len, 1), *o = text;
    if (text == NULL)
        return cli_fail("out of memory");
    for (int i = 0; i < s->n_layers; i++) {
        if (!keep[i])
            continue;
        /* a name is matched as a pattern: its pattern characters are escaped */
        for (const char *c = s->layers[i].name; *c; c++) {
            if (strchr("*?[]\\", *c))
                *o++ = '\\';
            *o++ = *c;
        }
        o += sprintf(o, "=fp32\n");
    }
    kiln_status st = kn_file_write_atomic(path, text, (size_t)(o - text));
    kn_free(text);
    return st == KILN_OK ? 0 : cli_fail("%s: %s", path, kiln_last_error());
}

/* Round every float output of the layers not kept through the precision and back. */
static int emulated_model(const prec_search *s, const bool *keep) {
    kn_graph *g = kn_graph_clone(s->g0);
    if (g == NULL)
        return cli_fail("out of memory");
    kiln_status st = KILN_OK;
    for (int i = 0; st == KILN_OK && i < s->n_layers; i++) {
        const kiln_layer_info *li = &s->layers[i];
        for (int j = 0; !keep[i] && st == KILN_OK && j < li->n_outputs; j++) {
            int v = li->outputs[j] ? kn_graph_find_value(g, li->outputs[j]) : -1;
            if (v < 0 || g->values[v].dtype != KILN_DTYPE_FLOAT32)
                continue;
            kn_attr down = {.name = "to", .type = KN_ATTR_INT, .i = s->dtype};
            kn_attr up = {.name = "to", .type = KN_ATTR_INT, .i = KILN_DTYPE_FLOAT32};
            st = kn_edit_insert_after(g, li->outputs[j], "Cast", "", 1, &down);
            if (st == KILN_OK)
                st = kn_edit_insert_after(g, li->outputs[j], "Cast", "", 1, &up);
        }
    }
    if (st == KILN_OK)
        st = kn_onnx_export_file(g, s->path, 0);
    kn_graph_destroy(g);
    return st == KILN_OK ? 0 : cli_fail("emulating %s: %s", s->precision, kiln_last_error());
}

/* Build (or load) s->o.model as s->o says, run it and compare its outputs with the fp32 run:
 * 1 passes, 0 fails, -1 on error. */
static int run_candidate(prec_search *s) {
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    kn_tensor owned[CLI_MAX_ITEMS];
    int n_owned = 0, verdict = -1;
    if (cli_load_engine(&s->o, &e) == 0 && kiln_context_create(e, &ctx) == KILN_OK &&
        cli_bind_inputs(&s->o, e, ctx, true, owned, &n_owned) == 0) {
        if (kiln_context_execute(ctx) != KILN_OK) {
            cli_fail("%s", kiln_last_error());
        } else {
            verdict = 1;
            s->last_max_rel = 0;
            for (int k = 0; k < kiln_engine_num_outputs(s->ref_e); k++) {
                kiln_io_info info;
                kiln_engine_output_info(s->ref_e, k, &info);
                kiln_tensor_view a, b;
                if (kiln_context_get_output(s->ref_ctx, info.name, &a) != KILN_OK ||
                    kiln_context_get_output(ctx, info.name, &b) != KILN_OK) {
                    verdict = -1;
                    cli_fail("%s", kiln_last_error());
                    break;
                }
                kn_tensor ta = {.dtype = a.dtype, .shape.rank = a.rank, .data = (void *)a.data};
                kn_tensor tb = {.dtype = b.dtype, .shape.rank = b.rank, .data = (void *)b.data};
                memcpy(ta.shape.d, a.dims, sizeof a.dims);
                memcpy(tb.shape.d, b.dims, sizeof b.dims);
                cmp_result *r = kn_malloc(sizeof *r);
                if (r == NULL) {
                    verdict = -1;
                    break;
                }
                cmp_tensors(info.name, &ta, &tb, &s->tol, r);
                if (!r->pass || !r->shape_ok)
                    verdict = 0;
                if (!(r->max_rel <= s->last_max_rel))
                    s->last_max_rel = r->max_rel;
                kn_free(r);
            }
        }
    }
    for (int i = 0; i < n_owned; i++)
        kn_free(owned[i].data);
    kiln_context_destroy(ctx);
    kiln_engine_destroy(e);
    return verdict;
}

static int emulated_pass(prec_search *s, const bool *keep) {
    if (emulated_model(s, keep) != 0)
        return -1;
    s->o.model = s->path;
    return run_candidate(s);
}

/* The model built with --precision and the kept layers as fp32 overrides. */
static int native_pass(prec_search *s, const bool *keep) {
    if (write_list(s, keep, s->path) != 0)
        return -1;
    char spec[160];
    snprintf(spec, sizeof spec, "@%s", s->path);
    s->o.model = s->model;
    s->o.precision = s->precision;
    s->o.layer_precision[0] = spec;
    s->o.n_layer_precision = 1;
    int verdict = run_candidate(s);
    s->o.precision = NULL;
    s->o.n_layer_precision = 0;
    return verdict;
}

static int candidate_pass(prec_search *s, const bool *keep) {
    s->runs++;
    if (s->emulate)
        return emulated_pass(s, keep);
    if (s->check.command == NULL)
        return native_pass(s, keep);
    if (write_list(s, keep, s->path) != 0)
        return -1;
    int fails = debug_check_run(&s->check, s->path);
    return fails < 0 ? -1 : !fails;
}

static int count(const bool *keep, int n) {
    int k = 0;
    for (int i = 0; i < n; i++)
        k += keep[i];
    return k;
}

/* The search itself: 0 with keep[] filled, or an exit code. */
static int search(prec_search *s, bool *keep) {
    int n = s->n_layers, got;
    memset(keep, 0, (size_t)n * sizeof *keep);
    if ((got = candidate_pass(s, keep)) < 0)
        return 2;
    printf("all %d layers at %s: %s", n, s->precision, got ? "within tolerance" : "FAILS");
    if (s->check.command == NULL)
        printf(" (max relative error %.4g)", s->last_max_rel);
    printf("\n");
    if (got)
        return 0;
    for (int i = 0; i < n; i++)
        keep[i] = true;
    if ((got = candidate_pass(s, keep)) < 0)
        return 2;
    if (!got)
        return cli_fail("the outputs miss the tolerance even with every layer in fp32: the "
                        "tolerance is too tight for this comparison") +
               1;
    /* Shortest passing prefix of the execution order (lo..hi: prefix lengths). */
    int lo = 1, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        for (int i = 0; i < n; i++)
            keep[i] = i < mid;
        if ((got = candidate_pass(s, keep)) < 0)
            return 2;
        got ? (hi = mid) : (lo = mid + 1);
    }
    for (int i = 0; i < n; i++)
        keep[i] = i < lo;
    /* Prune: from the back, drop every kept layer the outputs do not need. */
    for (int i = lo - 1; i >= 0; i--) {
        keep[i] = false;
        if ((got = candidate_pass(s, keep)) < 0)
            return 2;
        keep[i] = !got;
    }
    return 0;
}

static int parse_args(prec_search *s, int argc, char **argv) {
    char **rest = kn_calloc((size_t)argc + 1, sizeof *rest);
    if (rest == NULL)
        return cli_fail("out of memory");
    int n_rest = 0, rc = 0;
    rest[n_rest++] = "debug precision";
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            rc = -1;
        } else if (strcmp(a, "--emulate") == 0) {
            s->emulate = true;
        } else if (strcmp(a, "--check") == 0) {
            rc = debug_check_parse(&s->check, argc, argv, i, &used);
        } else if (v == NULL && (strcmp(a, "--precision") == 0 || strcmp(a, "-o") == 0 ||
                                 strcmp(a, "--rtol") == 0 || strcmp(a, "--atol") == 0)) {
            rc = cli_fail("%s needs a value (see kiln debug precision --help)", a);
        } else if (strcmp(a, "--precision") == 0) {
            s->precision = v, used = 2;
            if (strcmp(v, "fp16") == 0)
                s->dtype = KILN_DTYPE_FLOAT16;
            else if (strcmp(v, "bf16") == 0)
                s->dtype = KILN_DTYPE_BFLOAT16;
            else
                rc = cli_fail("--precision '%s': expected fp16 or bf16", v);
        } else if (strcmp(a, "-o") == 0) {
            s->out = v, used = 2;
        } else if (strcmp(a, "--rtol") == 0 || strcmp(a, "--atol") == 0) {
            char *end;
            errno = 0;
            double x = strtod(v, &end);
            if (errno != 0 || end == v || *end != '\0' || !(x >= 0))
                rc = cli_fail("%s '%s': expected a number >= 0", a, v);
            *(a[2] == 'r' ? &s->tol.rtol : &s->tol.atol) = x;
            used = 2;
        } else {
            rest[n_rest++] = argv[i];
        }
        i += used - 1;
    }
    if (rc == 0)
        rc = cli_parse(n_rest, rest, "sitp", usage, &s->o);
    kn_free(rest);
    if (rc != 0)
        return rc;
    s->model = s->o.model;
    if (s->precision == NULL || s->out == NULL)
        return cli_fail("debug precision needs --precision fp16|bf16 and -o FILE (see kiln debug "
                        "precision --help)");
    if (s->emulate && s->check.command != NULL)
        return cli_fail("debug precision takes --emulate or --check, not both");
    if (cli_is_plan(s->model))
        return cli_fail("debug precision needs the ONNX model, not a plan");
    return 0;
}

int cmd_debug_precision(int argc, char **argv) {
    prec_search s = {.tol = {.rtol = 1e-3, .atol = 1e-3, .stat = CMP_ELEMWISE}};
    int rc = parse_args(&s, argc, argv);
    bool *keep = NULL;
    kn_tensor owned[CLI_MAX_ITEMS];
    int n_owned = 0;
    if (rc == 0)
        rc = cli_prepare_context(&s.o, true, &s.ref_e, &s.ref_ctx, owned, &n_owned);
    if (rc == 0 && kiln_context_execute(s.ref_ctx) != KILN_OK)
        rc = cli_fail("%s: %s", s.model, kiln_last_error());
    if (rc == 0 &&
        (kn_onnx_import_file(s.model, &s.g0) != KILN_OK || kn_edit_infer_types(s.g0) != KILN_OK))
        rc = cli_fail("%s: %s", s.model, kiln_last_error());
    if (rc == 0) {
        s.n_layers = kiln_engine_num_layers(s.ref_e);
        s.layers = kn_calloc((size_t)s.n_layers + 1, sizeof *s.layers);
        keep = kn_calloc((size_t)s.n_layers + 1, sizeof *keep);
        if (s.layers == NULL || keep == NULL)
            rc = cli_fail("out of memory");
        for (int i = 0; rc == 0 && i < s.n_layers; i++)
            kiln_engine_layer_info(s.ref_e, i, &s.layers[i]);
    }
    strcpy(s.dir, "/tmp/kiln-precision-XXXXXX");
    if (rc == 0 && mkdtemp(s.dir) == NULL)
        rc = cli_fail("cannot create a temporary folder in /tmp");
    bool made_dir = rc == 0;
    snprintf(s.path, sizeof s.path, "%s/%s", s.dir, s.emulate ? "candidate.onnx" : "layers.txt");
    if (rc == 0)
        rc = search(&s, keep);
    if (rc == 0)
        rc = write_list(&s, keep, s.out);
    if (rc == 0) {
        int k = count(keep, s.n_layers);
        if (k > 0 && candidate_pass(&s, keep) < 0)
            rc = 2;
        printf("%d of %d layers must stay fp32 (%d runs), written to %s", k, s.n_layers, s.runs,
               s.out);
        if (s.check.command == NULL && k > 0)
            printf("; with them, max relative error %.4g", s.last_max_rel);
        printf("\n");
        for (int i = 0; i < s.n_layers; i++)
            if (keep[i])
                printf("  %s (%s)\n", s.layers[i].name, s.layers[i].op_type);
    }
    if (made_dir) {
        unlink(s.path);
        rmdir(s.dir);
    }
    for (int i = 0; i < n_owned; i++)
        kn_free(owned[i].data);
    kn_free(keep);
    kn_free(s.layers);
    if (s.g0 != NULL)
        kn_graph_destroy(s.g0);
    kiln_context_destroy(s.ref_ctx);
    kiln_engine_destroy(s.ref_e);
    debug_check_free(&s.check);
    cli_opts_free(&s.o);
    return rc < 0 ? 0 : rc == 0 ? 0 : 2;
}
