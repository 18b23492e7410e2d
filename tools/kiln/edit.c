/* kiln edit: graph surgery on an ONNX model, operations applied in the order given. */
#include "cli.h"

#include "core/alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kiln edit MODEL.onnx -o OUT.onnx [operations...]\n"
    "\n"
    "Applies the operations in order and writes OUT.onnx (checked by onnx.checker's full\n"
    "check). Tensor types are inferred wherever input shapes are fixed.\n"
    "\n"
    "  --extract-inputs A,B --extract-outputs C,D   keep the subgraph between these tensors\n"
    "  --remove NODE                 remove a node; its consumers read its first input\n"
    "  --insert-after TENSOR --op TYPE [--attr K=V]...   insert a node after a tensor\n"
    "  --rename OLD=NEW              rename a tensor (or a node)\n"
    "  --replace-pattern P --with-plugin NAME[:VERSION[:NAMESPACE]] [--attr K=V]...\n"
    "                                P: swish (x*sigmoid(x), +bias), relu-sigmoid-mul, gelu,\n"
    "                                layer-norm; every match becomes one plugin node\n"
    "  --fold-constants              evaluate nodes whose inputs are all constant\n"
    "  --cleanup                     drop dead nodes, unused initializers and inputs\n"
    "  --toposort                    sort nodes topologically\n"
    "  --set-shape NAME:DIMS         e.g. x:1x3x224x224, or x:Nx3x224x224 (N a named dim)\n"
    "  --opset N                     change the opset where no op of the model changed\n"
    "  --external-data-threshold B   initializers of at least B bytes go to OUT.onnx.data\n"
    "                                (default 1048576; 0 keeps every one inline)\n"
    "\n"
    "K=V: V is an int, a float, a comma-separated list of ints or floats, or else a string.\n";

#define MAX_ATTRS 32

typedef struct attr_list {
    kiln_attribute a[MAX_ATTRS];
    int64_t ints[MAX_ATTRS][KILN_MAX_RANK * 4];
    float floats[MAX_ATTRS][KILN_MAX_RANK * 4];
    char *names[MAX_ATTRS];
    int n;
} attr_list;

static void attrs_free(attr_list *l) {
    for (int i = 0; i < l->n; i++)
        kn_free(l->names[i]);
    l->n = 0;
}

static bool parse_number_list(const char *v, attr_list *l, kiln_attribute *a) {
    int k = l->n, n = 0;
    bool is_float = strpbrk(v, ".eE") != NULL;
    const char *p = v;
    while (*p != '\0') {
        char *end;
        errno = 0;
        if (n >= KILN_MAX_RANK * 4)
            return false;
        if (is_float)
            l->floats[k][n] = strtof(p, &end);
        else
            l->ints[k][n] = strtoll(p, &end, 10);
        if (end == p || errno != 0 || (*end != ',' && *end != '\0'))
            return false;
        n++;
        p = *end == ',' ? end + 1 : end;
    }
    bool list = strchr(v, ',') != NULL;
    if (n == 0)
        return false;
    if (!list && is_float)
        a->type = KILN_ATTR_FLOAT, a->f = l->floats[k][0];
    else if (!list)
        a->type = KILN_ATTR_INT, a->i = l->ints[k][0];
    else if (is_float)
        a->type = KILN_ATTR_FLOATS, a->n = n, a->floats = l->floats[k];
    else
        a->type = KILN_ATTR_INTS, a->n = n, a->ints = l->ints[k];
    return true;
}

static int add_attr(attr_list *l, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (eq == NULL || eq == arg)
        return cli_fail("--attr '%s': expected K=V", arg);
    if (l->n >= MAX_ATTRS)
        return cli_fail("--attr: at most %d attributes per operation", MAX_ATTRS);
    kiln_attribute *a = &l->a[l->n];
    memset(a, 0, sizeof *a);
    l->names[l->n] = kn_strndup(arg, (size_t)(eq - arg));
    a->name = l->names[l->n];
    if (!parse_number_list(eq + 1, l, a)) {
        memset(a, 0, sizeof *a);
        a->name = l->names[l->n];
        a->type = KILN_ATTR_STRING;
        a->s = eq + 1;
    }
    l->n++;
    return 0;
}

/* An operation that takes trailing --op/--with-plugin/--attr options, applied once they end. */
typedef struct pending {
    const char *kind; /* "insert-after", "replace-pattern" or NULL */
    const char *arg;
    const char *op; /* --op TYPE or --with-plugin SPEC */
    attr_list attrs;
} pending;

static int split_list(char *s, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok != NULL; tok = strtok(NULL, ","))
        if (n < max)
            out[n++] = tok;
    return n;
}

static int apply_pending(kiln_model *m, pending *p) {
    int rc = 0;
    if (p->kind == NULL)
        return 0;
    if (p->op == NULL) {
        rc = cli_fail("--%s %s needs %s", p->kind, p->arg,
                      strcmp(p->kind, "insert-after") == 0 ? "--op TYPE" : "--with-plugin NAME");
    } else if (strcmp(p->kind, "insert-after") == 0) {
        if (kiln_model_insert_after(m, p->arg, p->op, p->attrs.n, p->attrs.a) != KILN_OK)
            rc = cli_fail("%s", kiln_last_error());
    } else {
        char spec[512];
        snprintf(spec, sizeof spec, "%s", p->op);
        char *ver = strchr(spec, ':'), *ns = NULL;
        if (ver != NULL) {
            *ver++ = '\0';
            ns = strchr(ver, ':');
            if (ns != NULL)
                *ns++ = '\0';
        }
        int count = 0;
        if (kiln_model_replace_pattern(m, p->arg, spec, ver, ns, p->attrs.n, p->attrs.a, &count) !=
            KILN_OK)
            rc = cli_fail("%s", kiln_last_error());
        else if (count == 0)
            rc = cli_fail("--replace-pattern %s: the model has no match", p->arg);
        else
            fprintf(stderr, "replaced %d %s pattern%s with %s\n", count, p->arg,
                    count == 1 ? "" : "s", spec);
    }
    attrs_free(&p->attrs);
    p->kind = NULL;
    p->op = NULL;
    return rc;
}

/* NAME:DIMS where a dim is a number or a name. */
static int set_shape(kiln_model *m, const char *arg) {
    const char *colon = strrchr(arg, ':');
    if (colon == NULL || colon == arg)
        return cli_fail("--set-shape '%s': expected NAME:DIMS (e.g. x:Nx3x224x224)", arg);
    char name[512], spec[512];
    snprintf(name, sizeof name, "%.*s", (int)(colon - arg), arg);
    snprintf(spec, sizeof spec, "%s", colon + 1);
    int64_t dims[KILN_MAX_RANK];
    const char *syms[KILN_MAX_RANK];
    int rank = 0;
    if (spec[0] != '\0' && strcmp(spec, "scalar") != 0)
        for (char *tok = strtok(spec, "x"); tok != NULL; tok = strtok(NULL, "x")) {
            if (rank >= KILN_MAX_RANK)
                return cli_fail("--set-shape '%s': more than %d dims", arg, KILN_MAX_RANK);
            char *end;
            long long v = strtoll(tok, &end, 10);
            bool num = end != tok && *end == '\0' && v >= 0;
            dims[rank] = num ? v : -1;
            syms[rank] = num ? NULL : tok;
            rank++;
        }
    if (kiln_model_set_shape(m, name, rank, dims, syms) != KILN_OK)
        return cli_fail("%s", kiln_last_error());
    return 0;
}

static int simple_op(kiln_model *m, const char *opt, const char *arg) {
    kiln_status st;
    if (strcmp(opt, "--remove") == 0) {
        st = kiln_model_remove_node(m, arg);
    } else if (strcmp(opt, "--rename") == 0) {
        const char *eq = strchr(arg, '=');
        if (eq == NULL || eq == arg)
            return cli_fail("--rename '%s': expected OLD=NEW", arg);
        char old[512];
        snprintf(old, sizeof old, "%.*s", (int)(eq - arg), arg);
        st = kiln_model_rename(m, old, eq + 1);
    } else if (strcmp(opt, "--set-shape") == 0) {
        return set_shape(m, arg);
    } else if (strcmp(opt, "--opset") == 0) {
        char *end;
        long v = strtol(arg, &end, 10);
        if (end == arg || *end != '\0')
            return cli_fail("--opset '%s': expected a number", arg);
        st = kiln_model_set_opset(m, (int)v);
    } else if (strcmp(opt, "--fold-constants") == 0) {
        st = kiln_model_fold_constants(m);
    } else if (strcmp(opt, "--cleanup") == 0) {
        st = kiln_model_cleanup(m);
    } else {
        st = kiln_model_toposort(m);
    }
    return st == KILN_OK ? 0 : cli_fail("%s", kiln_last_error());
}

typedef struct edit_run {
    kiln_model *m;
    pending p;
    char *ext_in, *ext_out; /* --extract-* lists waiting for their partner */
    size_t threshold;
    const char *out;
} edit_run;

static int try_extract(edit_run *r) {
    if (r->ext_in == NULL || r->ext_out == NULL)
        return 0;
    const char *in[CLI_MAX_ITEMS], *out[CLI_MAX_ITEMS];
    int ni = split_list(r->ext_in, in, CLI_MAX_ITEMS);
    int no = split_list(r->ext_out, out, CLI_MAX_ITEMS);
    int rc = 0;
    if (kiln_model_extract(r->m, ni, in, no, out) != KILN_OK)
        rc = cli_fail("%s", kiln_last_error());
    kn_free(r->ext_in);
    kn_free(r->ext_out);
    r->ext_in = r->ext_out = NULL;
    return rc;
}

static bool takes_arg(const char *opt) {
    static const char *const with[] = {"-o",
                                       "--extract-inputs",
                                       "--extract-outputs",
                                       "--remove",
                                       "--insert-after",
                                       "--op",
                                       "--attr",
                                       "--rename",
                                       "--replace-pattern",
                                       "--with-plugin",
                                       "--set-shape",
                                       "--opset",
                                       "--external-data-threshold"};
    for (size_t i = 0; i < sizeof with / sizeof with[0]; i++)
        if (strcmp(opt, with[i]) == 0)
            return true;
    return false;
}

static int one_option(edit_run *r, const char *opt, const char *arg) {
    pending *p = &r->p;
    if (strcmp(opt, "--op") == 0 || strcmp(opt, "--with-plugin") == 0) {
        bool want_op = strcmp(opt, "--op") == 0;
        if (p->kind == NULL || want_op != (strcmp(p->kind, "insert-after") == 0))
            return cli_fail("%s must follow %s", opt,
                            want_op ? "--insert-after TENSOR" : "--replace-pattern P");
        p->op = arg;
        return 0;
    }
    if (strcmp(opt, "--attr") == 0) {
        if (p->kind == NULL)
            return cli_fail("--attr must follow --insert-after or --replace-pattern");
        return add_attr(&p->attrs, arg);
    }
    int rc = apply_pending(r->m, p);
    if (rc != 0)
        return rc;
    if (strcmp(opt, "-o") == 0) {
        r->out = arg;
    } else if (strcmp(opt, "--external-data-threshold") == 0) {
        char *end;
        long long v = strtoll(arg, &end, 10);
        if (end == arg || *end != '\0' || v < 0)
            return cli_fail("--external-data-threshold '%s': expected bytes >= 0", arg);
        r->threshold = (size_t)v;
    } else if (strcmp(opt, "--insert-after") == 0 || strcmp(opt, "--replace-pattern") == 0) {
        p->kind = opt + 2;
        p->arg = arg;
    } else if (strcmp(opt, "--extract-inputs") == 0 || strcmp(opt, "--extract-outputs") == 0) {
        char **slot = opt[10] == 'i' ? &r->ext_in : &r->ext_out;
        kn_free(*slot);
        *slot = kn_strdup(arg);
        return try_extract(r);
    } else {
        return simple_op(r->m, opt, arg);
    }
    return 0;
}

int cmd_edit(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc < 2 || argv[1][0] == '-') {
        fputs(usage, stderr);
        return 2;
    }
    edit_run r = {.threshold = 1 << 20};
    if (kiln_model_load(argv[1], &r.m) != KILN_OK)
        return cli_fail("%s", kiln_last_error());
    int rc = 0;
    for (int i = 2; i < argc && rc == 0; i++) {
        const char *opt = argv[i];
        const char *arg = NULL;
        bool known = takes_arg(opt) || strcmp(opt, "--fold-constants") == 0 ||
                     strcmp(opt, "--cleanup") == 0 || strcmp(opt, "--toposort") == 0;
        if (!known) {
            rc = cli_fail("edit: unknown option '%s' (see kiln edit --help)", opt);
            break;
        }
        if (takes_arg(opt)) {
            if (i + 1 >= argc) {
                rc = cli_fail("%s needs a value", opt);
                break;
            }
            arg = argv[++i];
        }
        rc = one_option(&r, opt, arg);
    }
    if (rc == 0)
        rc = apply_pending(r.m, &r.p);
    if (rc == 0 && (r.ext_in != NULL || r.ext_out != NULL))
        rc = cli_fail("--extract-inputs and --extract-outputs go together");
    if (rc == 0 && r.out == NULL)
        rc = cli_fail("edit needs -o OUT.onnx");
    if (rc == 0 && kiln_model_save(r.m, r.out, r.threshold) != KILN_OK)
        rc = cli_fail("%s", kiln_last_error());
    attrs_free(&r.p.attrs);
    kn_free(r.ext_in);
    kn_free(r.ext_out);
    kiln_model_destroy(r.m);
    return rc;
}
