#include "cli.h"

#include "builder/builder.h"
#include "core/alloc.h"
#include "core/container.h"
#include "core/fileio.h"
#include "onnx/onnx_import.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cli_fail(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fprintf(stderr, "kiln: error: %s\n", msg);
    return 1;
}

int cli_fail_kiln(const char *what) {
    return cli_fail("%s: %s", what, kiln_last_error());
}

static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* "1x3x224x224" into dims; "" or "scalar" is rank 0. Every dim must be a number. */
static bool parse_dims(const char *s, int *rank, int64_t *dims) {
    *rank = 0;
    if (*s == '\0' || strcmp(s, "scalar") == 0)
        return true;
    const char *p = s;
    for (;;) {
        char *end;
        if (*p < '0' || *p > '9' || *rank >= KILN_MAX_RANK)
            return false;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno != 0 || v > KN_MAX_ELEMENTS)
            return false;
        dims[(*rank)++] = v;
        if (*end == '\0')
            return true;
        if (*end != 'x')
            return false;
        p = end + 1;
    }
}

static int parse_shape(const char *arg, cli_shape *sh) {
    const char *colon = strrchr(arg, ':');
    if (colon == NULL || colon == arg)
        return cli_fail("--shapes '%s': expected NAME:DIMS or NAME:MIN,OPT,MAX "
                        "(e.g. input:1x3x224x224)",
                        arg);
    memset(sh, 0, sizeof *sh);
    sh->name = kn_strndup(arg, (size_t)(colon - arg));
    const char *spec = colon + 1;
    char parts[3][256];
    int n = 0, commas = 0;
    for (const char *q = spec; *q; q++)
        commas += *q == ',';
    if (commas != 0 && commas != 2)
        return cli_fail("--shapes '%s': give one shape or three (MIN,OPT,MAX)", arg);
    const char *p = spec;
    while (n < 3) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len >= sizeof parts[0])
            return cli_fail("--shapes '%s': dims too long", arg);
        memcpy(parts[n], p, len);
        parts[n][len] = '\0';
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    int r[3];
    int64_t *dst[3] = {sh->min, sh->opt, sh->max};
    for (int i = 0; i < n; i++)
        if (!parse_dims(parts[i], &r[i], dst[i]))
            return cli_fail("--shapes '%s': '%s' is not a shape like 1x3x224x224 with dims in "
                            "[0, 2^40]",
                            arg, parts[i]);
    if (n == 1) {
        memcpy(sh->opt, sh->min, sizeof sh->min);
        memcpy(sh->max, sh->min, sizeof sh->min);
        r[1] = r[2] = r[0];
    }
    if (r[1] != r[0] || r[2] != r[0])
        return cli_fail("--shapes '%s': MIN, OPT and MAX have different ranks", arg);
    sh->rank = r[0];
    sh->range = n == 3;
    for (int d = 0; d < sh->rank; d++)
        if (sh->min[d] > sh->opt[d] || sh->opt[d] > sh->max[d])
            return cli_fail("--shapes '%s': axis %d needs MIN <= OPT <= MAX", arg, d);
    return 0;
}

static int parse_input(const char *arg, cli_input *in) {
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg || eq[1] == '\0')
        return cli_fail("--input '%s': expected NAME=FILE (a .npy or TensorProto .pb file)", arg);
    memset(in, 0, sizeof *in);
    in->name = kn_strndup(arg, (size_t)(eq - arg));
    in->path = kn_strdup(eq + 1);
    return 0;
}

int cli_parse(int argc, char **argv, const char *allowed, const char *usage, cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->warmup = 10;
    o->iterations = 50;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED(letter, flag)                                                                         \
    if (!strchr(allowed, letter))                                                                  \
        return cli_fail("%s does not take %s (see kiln %s --help)", argv[0], flag, argv[0]);       \
    if (val == NULL)                                                                               \
        return cli_fail("%s needs a value (see kiln %s --help)", flag, argv[0]);                   \
    i++;
        long long v;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return -1;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            NEED('o', "-o");
            o->output = val;
        } else if (strcmp(a, "--shapes") == 0) {
            NEED('s', "--shapes");
            if (o->n_shapes == CLI_MAX_ITEMS)
                return cli_fail("too many --shapes");
            int rc = parse_shape(val, &o->shapes[o->n_shapes++]);
            if (rc)
                return rc;
            for (int k = 0; k + 1 < o->n_shapes; k++)
                if (strcmp(o->shapes[k].name, o->shapes[o->n_shapes - 1].name) == 0)
                    return cli_fail("--shapes gives '%s' twice", o->shapes[k].name);
        } else if (strcmp(a, "--input") == 0) {
            NEED('i', "--input");
            if (o->n_inputs == CLI_MAX_ITEMS)
                return cli_fail("too many --input");
            int rc = parse_input(val, &o->inputs[o->n_inputs++]);
            if (rc)
                return rc;
        } else if (strcmp(a, "--plugins") == 0) {
            NEED('p', "--plugins");
            if (o->n_plugins == CLI_MAX_ITEMS)
                return cli_fail("too many --plugins");
            o->plugins[o->n_plugins++] = val;
        } else if (strcmp(a, "--prefer-plugin") == 0) {
            NEED('p', "--prefer-plugin");
            if (o->n_prefer == CLI_MAX_ITEMS)
                return cli_fail("too many --prefer-plugin");
            o->prefer[o->n_prefer++] = val;
        } else if (strcmp(a, "--backend") == 0) {
            NEED('p', "--backend");
            o->backends = val;
        } else if (strcmp(a, "--precision") == 0) {
            NEED('p', "--precision");
            o->precision = val;
        } else if (strcmp(a, "--layer-precision") == 0) {
            NEED('p', "--layer-precision");
            if (o->n_layer_precision == CLI_MAX_ITEMS)
                return cli_fail("too many --layer-precision");
            o->layer_precision[o->n_layer_precision++] = val;
        } else if (strcmp(a, "--timing-cache") == 0) {
            NEED('p', "--timing-cache");
            o->timing_cache = val;
        } else if (strcmp(a, "--tactics") == 0) {
            NEED('p', "--tactics");
            o->tactics = val;
        } else if (strcmp(a, "--int8") == 0 && strchr(allowed, 'I')) {
            o->int8 = true;
        } else if (strcmp(a, "--calibration") == 0) {
            NEED('I', "--calibration");
            o->calibration = val;
        } else if (strcmp(a, "--calibration-method") == 0) {
            NEED('I', "--calibration-method");
            o->calibration_method = val;
        } else if (strcmp(a, "--calibration-cache") == 0) {
            NEED('I', "--calibration-cache");
            o->calibration_cache = val;
        } else if (strcmp(a, "--output-dir") == 0) {
            NEED('d', "--output-dir");
            o->output_dir = val;
        } else if (strcmp(a, "--dot") == 0) {
            NEED('g', "--dot");
            o->dot = val;
        } else if (strcmp(a, "--threads") == 0) {
            NEED('t', "--threads");
            if (!parse_int(val, 1, 1024, &v))
                return cli_fail("--threads '%s': expected a number from 1 to 1024", val);
            o->threads = (int)v;
        } else if (strcmp(a, "--warmup") == 0) {
            NEED('w', "--warmup");
            if (!parse_int(val, 0, 1000000, &v))
                return cli_fail("--warmup '%s': expected a number from 0 to 1000000", val);
            o->warmup = (int)v;
        } else if (strcmp(a, "--iterations") == 0) {
            NEED('w', "--iterations");
            if (!parse_int(val, 1, 1000000, &v))
                return cli_fail("--iterations '%s': expected a number from 1 to 1000000", val);
            o->iterations = (int)v;
        } else if (strcmp(a, "--json") == 0 && strchr(allowed, 'j')) {
            o->json = true;
        } else if (strcmp(a, "--profile") == 0 && strchr(allowed, 'P')) {
            o->profile = true;
        } else if (strcmp(a, "--quiet") == 0 && strchr(allowed, 'q')) {
            o->quiet = true;
        } else if (strcmp(a, "--verbose") == 0 && strchr(allowed, 'v')) {
            o->verbose = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_fail("unknown option '%s' for %s (see kiln %s --help)", a, argv[0], argv[0]);
        } else if (o->model == NULL) {
            o->model = a;
        } else {
            return cli_fail("unexpected argument '%s' (see kiln %s --help)", a, argv[0]);
        }
#undef NEED
    }
    if (o->model == NULL)
        return cli_fail("%s needs a model or plan file (see kiln %s --help)", argv[0], argv[0]);
    return 0;
}

int cli_load_plugins(cli_opts *o) {
    if (kiln_registry_create(&o->registry) != KILN_OK)
        return cli_fail_kiln("plugin registry");
    if (kiln_registry_load_env(o->registry) != KILN_OK)
        return cli_fail("%s", kiln_last_error());
    for (int i = 0; i < o->n_plugins; i++)
        if (kiln_registry_load_library(o->registry, o->plugins[i]) != KILN_OK)
            return cli_fail("--plugins: %s", kiln_last_error());
    return 0;
}

void cli_opts_free(cli_opts *o) {
    kiln_registry_destroy(o->registry);
    o->registry = NULL;
    for (int i = 0; i < o->n_shapes; i++)
        kn_free(o->shapes[i].name);
    for (int i = 0; i < o->n_inputs; i++) {
        kn_free(o->inputs[i].name);
        kn_free(o->inputs[i].path);
        kn_free(o->inputs[i].t.data);
    }
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int cli_load_inputs(cli_opts *o) {
    for (int i = 0; i < o->n_inputs; i++) {
        cli_input *in = &o->inputs[i];
        for (int j = 0; j < i; j++)
            if (strcmp(o->inputs[j].name, in->name) == 0)
                return cli_fail("--input '%s' is given twice", in->name);
        kiln_status rc;
        if (cli_is_container_path(in->path)) {
            if (cli_read_container(in->path, &in->t) != 0)
                return 1;
            continue;
        }
        if (ends_with(in->path, ".npy")) {
            rc = kn_npy_read(in->path, &in->t);
        } else {
            char *name = NULL;
            rc = kn_onnx_read_tensor_file(in->path, &in->t, &name);
            kn_free(name);
        }
        if (rc != KILN_OK)
            return cli_fail("input '%s': %s", in->name, kiln_last_error());
    }
    return 0;
}

bool cli_is_plan(const char *path) {
    struct stat st; /* a FIFO or device would block the read; the loader refuses those */
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return false;
    char magic[8] = {0};
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return n == 8 && memcmp(magic, "KILNPLAN", 8) == 0;
}

static const cli_shape *find_shape(const cli_opts *o, const char *name) {
    for (int i = 0; i < o->n_shapes; i++)
        if (strcmp(o->shapes[i].name, name) == 0)
            return &o->shapes[i];
    return NULL;
}

static const cli_input *find_input(const cli_opts *o, const char *name) {
    for (int i = 0; i < o->n_inputs; i++)
        if (strcmp(o->inputs[i].name, name) == 0)
            return &o->inputs[i];
    return NULL;
}

static int parse_precision(const char *what, const char *s, kiln_precision *out) {
    static const char *const names[] = {"fp32", "tf32", "fp16", "bf16"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (kiln_precision)i;
            return 0;
        }
    return cli_fail("%s '%s': expected fp32, tf32, fp16 or bf16", what, s);
}

/* One PATTERN=P override (what names the spec in messages). */
static int add_layer_precision(kiln_build_config *cfg, const char *what, const char *spec,
                               size_t len) {
    const char *eq = NULL;
    for (size_t i = 0; i < len; i++)
        if (spec[i] == '=')
            eq = spec + i;
    if (eq == NULL || eq == spec || len >= 512)
        return cli_fail("%s '%.*s': expected PATTERN=fp32|tf32|fp16|bf16", what, (int)len, spec);
    char pattern[512], prec[16];
    size_t n = (size_t)(eq - spec), m = len - n - 1;
    memcpy(pattern, spec, n);
    pattern[n] = '\0';
    if (m >= sizeof prec)
        return cli_fail("%s '%.*s': unknown precision", what, (int)m, eq + 1);
    memcpy(prec, eq + 1, m);
    prec[m] = '\0';
    kiln_precision p;
    if (parse_precision(what, prec, &p) != 0)
        return 1;
    if (kiln_build_config_set_layer_precision(cfg, pattern, p) != KILN_OK)
        return cli_fail_kiln(what);
    return 0;
}

/* --layer-precision @FILE: one PATTERN=P a line (blank lines and # comments skipped), the
 * list kiln debug precision writes. */
static int add_layer_precision_file(kiln_build_config *cfg, const char *path) {
    void *data;
    size_t size;
    if (kn_file_read(path, &data, &size) != KILN_OK)
        return cli_fail("--layer-precision @%s: %s", path, kiln_last_error());
    const char *p = data, *end = p + size;
    int rc = 0;
    while (p < end && rc == 0) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        while (len > 0 && (p[len - 1] == '\r' || p[len - 1] == ' '))
            len--;
        if (len > 0 && p[0] != '#')
            rc = add_layer_precision(cfg, path, p, len);
        p = nl ? nl + 1 : end;
    }
    kn_free(data);
    return rc;
}

/* --precision P and --layer-precision PATTERN=P | @FILE. */
static int set_precision(const cli_opts *o, kiln_build_config *cfg) {
    kiln_precision p;
    if (o->precision != NULL) {
        if (parse_precision("--precision", o->precision, &p) != 0)
            return 1;
        if (kiln_build_config_set_precision(cfg, p) != KILN_OK)
            return cli_fail_kiln("--precision");
    }
    for (int i = 0; i < o->n_layer_precision; i++) {
        const char *spec = o->layer_precision[i];
        int rc = spec[0] == '@' ? add_layer_precision_file(cfg, spec + 1)
                                : add_layer_precision(cfg, "--layer-precision", spec, strlen(spec));
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* --backend NAME[,NAME...]: the placement order. */
static int set_backends(kiln_build_config *cfg, const char *spec) {
    char buf[512];
    const char *names[8];
    int n = 0;
    if (strlen(spec) >= sizeof buf)
        return cli_fail("--backend '%s': too long", spec);
    strcpy(buf, spec);
    for (char *tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        if (n == 8)
            return cli_fail("--backend '%s': at most 8 backends", spec);
        names[n++] = tok;
    }
    if (n == 0)
        return cli_fail("--backend needs a name (cpu, or a device backend such as cuda)");
    if (kiln_build_config_set_backends(cfg, names, n) != KILN_OK)
        return cli_fail_kiln("--backend");
    return 0;
}

/* --tactics auto|timed|heuristic. */
static int set_tactics(kiln_build_config *cfg, const char *spec) {
    static const struct {
        const char *name;
        kiln_tactics t;
    } choices[] = {{"auto", KILN_TACTICS_AUTO},
                   {"timed", KILN_TACTICS_TIMED},
                   {"heuristic", KILN_TACTICS_HEURISTIC}};
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if (strcmp(spec, choices[i].name) == 0)
            return kiln_build_config_set_tactics(cfg, choices[i].t) == KILN_OK
                       ? 0
                       : cli_fail_kiln("--tactics");
    return cli_fail("--tactics '%s': expected auto, timed or heuristic", spec);
}

int cli_make_config(const cli_opts *o, kiln_network *net, kiln_build_config **out) {
    kiln_build_config *cfg;
    if (kiln_build_config_create(&cfg) != KILN_OK)
        return cli_fail_kiln("build config");
    if (o->threads > 0)
        kiln_build_config_set_threads(cfg, o->threads);
    for (int i = 0; i < o->n_prefer; i++)
        kiln_build_config_prefer_plugin(cfg, o->prefer[i]);
    if (o->timing_cache != NULL &&
        kiln_build_config_set_timing_cache(cfg, o->timing_cache) != KILN_OK) {
        kiln_build_config_destroy(cfg);
        return cli_fail_kiln("--timing-cache");
    }
    if (o->tactics != NULL && set_tactics(cfg, o->tactics) != 0) {
        kiln_build_config_destroy(cfg);
        return 1;
    }
    if ((o->backends != NULL && set_backends(cfg, o->backends) != 0) ||
        set_precision(o, cfg) != 0 || cli_set_int8(o, cfg) != 0) {
        kiln_build_config_destroy(cfg);
        return 1;
    }
    const kn_graph *g = net->graph;
    for (int i = 0; i < o->n_shapes; i++) {
        int v = kn_graph_find_value(g, o->shapes[i].name);
        if (v < 0 || !g->values[v].is_input) {
            kiln_build_config_destroy(cfg);
            return cli_fail("--shapes names '%s', which is not an input of the model",
                            o->shapes[i].name);
        }
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const kn_value *v = &g->values[g->inputs[i]];
        const cli_shape *sh = find_shape(o, v->name);
        const cli_input *in = find_input(o, v->name);
        kiln_status rc = KILN_OK;
        if (sh != NULL) {
            rc = kiln_build_config_add_profile(cfg, v->name, sh->rank, sh->min, sh->opt, sh->max);
        } else {
            bool dynamic = false;
            for (int d = 0; d < v->rank; d++)
                dynamic |= v->dims[d].sym != NULL;
            if (!dynamic || v->dtype == KILN_DTYPE_CONTAINER)
                continue; /* a sequence or optional is sized by its value at run time */
            if (in == NULL) {
                kiln_build_config_destroy(cfg);
                return cli_fail("input '%s' has dynamic dims: pass --shapes %s:DIMS or "
                                "%s:MIN,OPT,MAX",
                                v->name, v->name, v->name);
            }
            const int64_t *d = in->t.shape.d;
            rc = kiln_build_config_add_profile(cfg, v->name, in->t.shape.rank, d, d, d);
        }
        if (rc != KILN_OK) {
            kiln_build_config_destroy(cfg);
            return cli_fail_kiln("profile");
        }
    }
    *out = cfg;
    return 0;
}

/* A plan's layers, precisions and tactics were fixed when it was built: options that only
 * steer a build get one warning line rather than being dropped in silence. */
static void warn_build_options(const cli_opts *o) {
    const char *given[8];
    int n = 0;
    if (o->precision != NULL)
        given[n++] = "--precision";
    if (o->n_layer_precision > 0)
        given[n++] = "--layer-precision";
    if (o->tactics != NULL)
        given[n++] = "--tactics";
    if (o->timing_cache != NULL)
        given[n++] = "--timing-cache";
    if (o->int8 || o->calibration != NULL || o->calibration_method != NULL ||
        o->calibration_cache != NULL)
        given[n++] = "--int8/--calibration";
    if (o->n_prefer > 0)
        given[n++] = "--prefer-plugin";
    if (n == 0)
        return;
    char list[160] = "";
    for (int i = 0; i < n; i++) {
        strcat(list, i == 0 ? "" : i + 1 == n ? " and " : ", ");
        strcat(list, given[i]);
    }
    fprintf(stderr,
            "kiln: warning: %s is a plan, built already: %s ignored (build options apply to "
            ".onnx models)\n",
            o->model, list);
}

int cli_load_engine(const cli_opts *o, kiln_engine **out) {
    int prc = o->registry ? 0 : cli_load_plugins((cli_opts *)o);
    if (prc != 0)
        return prc;
    if (cli_is_plan(o->model)) {
        warn_build_options(o);
        if (kiln_engine_load_file(o->model, o->registry, out) != KILN_OK)
            return cli_fail("%s", kiln_last_error());
        return 0;
    }
    kiln_builder *b = NULL;
    kiln_network *net = NULL;
    kiln_build_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    int rc = 0;
    if (kiln_builder_create(&b) != KILN_OK) {
        rc = cli_fail_kiln("builder");
        goto out;
    }
    kiln_builder_set_registry(b, o->registry);
    if (kiln_network_from_onnx_file(b, o->model, &net) != KILN_OK) {
        rc = cli_fail("%s", kiln_last_error());
        goto out;
    }
    for (int v = 0; o->all_outputs && v < net->graph->n_values; v++) {
        /* Outputs stop fusion, so this builds the model unfused (the --layers reference). */
        const kn_value *val = &net->graph->values[v];
        if (val->producer >= 0 && !val->is_output && kiln_network_mark_output(net, v) != KILN_OK) {
            rc = cli_fail("%s: %s", o->model, kiln_last_error());
            goto out;
        }
    }
    if ((rc = cli_make_config(o, net, &cfg)) != 0)
        goto out;
    if (kiln_build(b, net, cfg, &plan, &size) != KILN_OK) {
        rc = cli_fail("%s: %s", o->model, kiln_last_error());
        goto out;
    }
    if (kiln_engine_load_memory(plan, size, o->registry, out) != KILN_OK)
        rc = cli_fail("%s", kiln_last_error());
out:
    kiln_free(plan);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
    return rc;
}

/* Deterministic pseudo-random fill (xorshift) for benchmark inputs. */
static void fill_random(kn_tensor *t, uint64_t seed) {
    uint64_t s = seed * 2654435761u + 1;
    int64_t n = kn_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double u = (double)(s >> 11) / (double)(1ull << 53);
        if (kn_dtype_is_float(t->dtype))
            kn_tensor_set_f64(t, i, u * 2.0 - 1.0);
        else if (t->dtype == KILN_DTYPE_BOOL)
            kn_tensor_set_i64(t, i, u < 0.5);
        else
            kn_tensor_set_i64(t, i, (int64_t)(u * 4.0));
    }
}

int cli_bind_inputs(const cli_opts *o, kiln_engine *e, kiln_context *ctx, bool random_rest,
                    kn_tensor *owned, int *n_owned) {
    *n_owned = 0;
    for (int i = 0; i < o->n_inputs; i++) {
        bool found = false;
        for (int k = 0; k < kiln_engine_num_inputs(e) && !found; k++) {
            kiln_io_info info;
            kiln_engine_input_info(e, k, &info);
            found = strcmp(info.name, o->inputs[i].name) == 0;
        }
        if (!found) {
            char names[512] = "";
            size_t used = 0;
            for (int k = 0; k < kiln_engine_num_inputs(e) && used < sizeof names; k++) {
                kiln_io_info info;
                kiln_engine_input_info(e, k, &info);
                used += (size_t)snprintf(names + used, sizeof names - used, "%s'%s'", k ? ", " : "",
                                         info.name);
            }
            return cli_fail("--input names '%s', which is not an input of the model (inputs: %s)",
                            o->inputs[i].name, names);
        }
    }
    for (int i = 0; i < o->n_shapes; i++) {
        bool found = false;
        for (int k = 0; k < kiln_engine_num_inputs(e) && !found; k++) {
            kiln_io_info info;
            kiln_engine_input_info(e, k, &info);
            found = strcmp(info.name, o->shapes[i].name) == 0;
        }
        if (!found)
            return cli_fail("--shapes names '%s', which is not an input of the model",
                            o->shapes[i].name);
    }
    for (int k = 0; k < kiln_engine_num_inputs(e); k++) {
        kiln_io_info info;
        kiln_engine_input_info(e, k, &info);
        const cli_input *in = find_input(o, info.name);
        const cli_shape *sh = find_shape(o, info.name);
        kn_tensor t = {0};
        if (in != NULL) {
            t = in->t;
            if (info.dtype == KILN_DTYPE_CONTAINER && cli_wraps_optional(&info, &in->t)) {
                if (cli_wrap_optional(&in->t, &t) != 0)
                    return 1;
                owned[(*n_owned)++] = t;
            } else if ((info.kind == KILN_IO_SEQUENCE || info.kind == KILN_IO_OPTIONAL_SEQUENCE) &&
                       t.dtype != KILN_DTYPE_CONTAINER) {
                return cli_fail("input '%s' is %s: give a folder holding 0.npy, 1.npy, ... (one "
                                "file per element)%s, not a .npy file",
                                info.name,
                                info.kind == KILN_IO_SEQUENCE ? "a sequence"
                                                              : "an optional sequence",
                                info.kind == KILN_IO_SEQUENCE ? "" : " or the word none");
            }
            if (t.dtype != (int32_t)info.dtype)
                return cli_fail("input '%s' is %s but the model expects %s", info.name,
                                kn_dtype_name(t.dtype), kn_dtype_name(info.dtype));
        } else if (random_rest) {
            t.dtype = info.dtype;
            t.shape.rank = info.rank;
            for (int d = 0; d < info.rank; d++)
                t.shape.d[d] = sh ? sh->opt[d] : info.opt[d];
            if (!kn_shape_valid(&t.shape))
                return cli_fail("input '%s': --shapes gives more than 2^40 elements", info.name);
            t.data = kn_malloc(kn_tensor_nbytes(&t) + 1);
            if (t.data == NULL)
                return cli_fail("out of memory for input '%s'", info.name);
            fill_random(&t, (uint64_t)k + 1);
            owned[(*n_owned)++] = t;
        } else {
            return cli_fail("input '%s' has no data: pass --input %s=FILE", info.name, info.name);
        }
        if (t.shape.rank != info.rank)
            return cli_fail("input '%s' has rank %d but the model expects rank %d", info.name,
                            t.shape.rank, info.rank);
        /* A plan keeps its own profile, so nothing else would notice --shapes disagreeing
         * with the file (for a model, --shapes is the profile and the context checks it). */
        if (in != NULL && sh != NULL && cli_is_plan(o->model)) {
            if (sh->rank != t.shape.rank)
                return cli_fail("input '%s' has rank %d but --shapes gives rank %d", info.name,
                                t.shape.rank, sh->rank);
            for (int d = 0; d < t.shape.rank; d++)
                if (t.shape.d[d] < sh->min[d] || t.shape.d[d] > sh->max[d])
                    return cli_fail("input '%s' axis %d: the file has %lld, outside the --shapes "
                                    "range [%lld, %lld]",
                                    info.name, d, (long long)t.shape.d[d], (long long)sh->min[d],
                                    (long long)sh->max[d]);
        }
        if (kiln_context_set_input_shape(ctx, info.name, t.shape.rank, t.shape.d) != KILN_OK ||
            kiln_context_set_input(ctx, info.name, t.data, kn_tensor_nbytes(&t)) != KILN_OK)
            return cli_fail("%s", kiln_last_error());
    }
    return 0;
}

int cli_prepare_context(cli_opts *o, bool random_rest, kiln_engine **e, kiln_context **ctx,
                        kn_tensor *owned, int *n_owned) {
    int rc;
    *n_owned = 0;
    if ((rc = cli_load_inputs(o)) != 0 || (rc = cli_load_engine(o, e)) != 0)
        return rc;
    if (kiln_context_create(*e, ctx) != KILN_OK)
        return cli_fail_kiln("context");
    if (o->threads > 0 && kiln_context_set_threads(*ctx, o->threads) != KILN_OK)
        return cli_fail_kiln("threads");
    return cli_bind_inputs(o, *e, *ctx, random_rest, owned, n_owned);
}
