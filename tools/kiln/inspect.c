/* kiln inspect: what a model or plan holds after optimization. */
#include "cli.h"

#include "backend/backend.h"
#include "ir/placement.h"
#include "runtime/engine.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: kiln inspect MODEL|PLAN [--shapes SPEC]... [--json] [--dot FILE]\n"
    "\n"
    "Shows inputs and outputs with their (symbolic) shapes, optimization profiles, the layers\n"
    "left after optimization with the backend and kernel each runs (and, for a node a device\n"
    "backend did not take, why it stayed on the host), the copies between memory spaces,\n"
    "weight bytes and the activation arena size of each memory space at the profile's largest\n"
    "shapes. An .onnx model is built in memory first (dynamic\n"
    "inputs need --shapes).\n"
    "\n"
    "  --shapes SPEC      NAME:DIMS or NAME:MIN,OPT,MAX (see kiln build --help)\n"
    "  --json             print one JSON object instead of text (each layer with its\n"
    "                     \"inputs\" and \"outputs\" tensor names, which kiln's shape\n"
    "                     and capture calls take)\n"
    "  --dot FILE         write a Graphviz picture of the optimized graph to "
    "FILE\n" CLI_BUILD_OPTIONS_HELP;

static void shape_text(const kn_value *v, char *buf, size_t size) {
    size_t used = 0;
    if (v->rank < 0) {
        snprintf(buf, size, "?");
        return;
    }
    used += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < v->rank && used < size; d++) {
        if (v->dims[d].sym)
            used +=
                (size_t)snprintf(buf + used, size - used, "%s%s", d ? ", " : "", v->dims[d].sym);
        else
            used += (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "",
                                     (long long)v->dims[d].value);
    }
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

static void jstr(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

/* , "key": [names of the values idx[0..n) (null for an omitted optional one)] */
static void json_tensor_names(const kn_graph *g, const char *key, const int *idx, int n) {
    printf(", \"%s\": [", key);
    for (int i = 0; i < n; i++) {
        if (i)
            printf(", ");
        if (idx[i] < 0)
            printf("null");
        else
            jstr(g->values[idx[i]].name);
    }
    printf("]");
}

/* What the node runs: the op, with fusion details. */
static void kernel_text(const kn_node *n, char *buf, size_t size) {
    const char *act = kn_attr_string(n, "kiln_activation", NULL);
    int residual = (int)kn_attr_int(n, "kiln_residual", 0);
    bool bias = kn_attr_int(n, "kiln_bias", 0) != 0;
    const char *where = kn_node_backend(n);
    bool plugin = kn_is_plugin_node(n), host = strcmp(where, "cpu") == 0;
    snprintf(buf, size, "%s%s%s:%s%s%s%s%s", plugin ? "plugin" : "", plugin && !host ? "@" : "",
             plugin && host ? "" : where, n->domain[0] && !kn_is_plugin_node(n) ? n->domain : "",
             n->domain[0] && !kn_is_plugin_node(n) ? "." : "", n->op_type, bias ? "+bias" : "",
             residual ? "+residual" : "");
    if (act) {
        size_t l = strlen(buf);
        snprintf(buf + l, size - l, "+%s", act);
    }
    if (strcmp(n->op_type, "FusedElementwise") == 0) {
        const int64_t *prog;
        int64_t len = kn_attr_ints(n, "program", &prog);
        size_t l = strlen(buf);
        /* five integers an instruction (ops/fused_elementwise.h) */
        snprintf(buf + l, size - l, "(%lld instructions%s)", (long long)len / 5,
                 kn_node_attr(n, KN_ATTR_CODE) ? ", generated kernel" : "");
    }
}

/* The bodies of a control-flow node (If, Loop, Scan), indented under it, nested bodies
 * further in. Body nodes run on the host through the subgraph executor. */
static void print_bodies(const kn_node *n, int depth) {
    for (int a = 0; a < n->n_attr; a++) {
        const kn_graph *b = n->attr[a].g;
        if (n->attr[a].type != KN_ATTR_GRAPH || b == NULL)
            continue;
        printf("%*s%s: %d nodes, %d inputs (%d from enclosing scopes), %d outputs\n", 8 + 4 * depth,
               "", n->attr[a].name, b->n_nodes, b->n_inputs, b->n_outer, b->n_outputs);
        for (int i = 0; i < b->n_nodes; i++) {
            const kn_node *m = &b->nodes[i];
            printf("%*s%-36s %s%s%s\n", 10 + 4 * depth, "", m->name, m->domain,
                   m->domain[0] ? "." : "", m->op_type);
            print_bodies(m, depth + 1);
        }
    }
}

static void json_bodies(const kn_node *n) {
    printf(", \"subgraphs\": [");
    int shown = 0;
    for (int a = 0; a < n->n_attr; a++) {
        const kn_graph *b = n->attr[a].g;
        if (n->attr[a].type != KN_ATTR_GRAPH || b == NULL)
            continue;
        printf("%s{\"attribute\": ", shown++ ? ", " : "");
        jstr(n->attr[a].name);
        printf(", \"outer_inputs\": %d, \"layers\": [", b->n_outer);
        for (int i = 0; i < b->n_nodes; i++) {
            printf("%s{\"name\": ", i ? ", " : "");
            jstr(b->nodes[i].name);
            printf(", \"op\": ");
            jstr(b->nodes[i].op_type);
            json_bodies(&b->nodes[i]);
            printf("}");
        }
        printf("]}");
    }
    printf("]");
}

/* Arena bytes per memory space (0: host) at the profile's largest shapes. */
static void arena_at_max(kiln_engine *e, size_t *size) {
    memset(size, 0, KN_MAX_PLAN_BACKENDS * sizeof *size);
    kiln_context *ctx;
    if (kiln_context_create(e, &ctx) != KILN_OK)
        return;
    for (int i = 0; i < kiln_engine_num_inputs(e); i++) {
        kiln_io_info info;
        kiln_engine_input_info(e, i, &info);
        kiln_context_set_input_shape(ctx, info.name, info.rank, info.dims);
    }
    if (kn_context_resolve(ctx) == KILN_OK)
        for (int k = 0; k < e->n_backends; k++)
            size[k] = ctx->arenas[k].size;
    kiln_context_destroy(ctx);
}

/* The float type a layer computes in: that of its first float output ("-" when none), or that
 * of its weights where only they were lowered (kiln_weights: a CPU product in bf16), unless it
 * widens them at load (kiln_compute). */
static const char *layer_precision(const kn_graph *g, const kn_node *n) {
    if (strcmp(n->domain, "kiln") == 0 &&
        (strcmp(n->op_type, "QConv") == 0 || strcmp(n->op_type, "QMatMul") == 0))
        return "int8";
    const char *weights = kn_attr_string(n, "kiln_weights", NULL);
    if (weights != NULL)
        return kn_attr_string(n, "kiln_compute", weights);
    for (int j = 0; j < n->n_out; j++) {
        int v = n->out[j];
        if (v < 0)
            continue;
        switch (g->values[v].dtype) {
        case KILN_DTYPE_FLOAT32:
            return kn_attr_int(n, "kiln_allow_tf32", 0) ? "tf32" : "fp32";
        case KILN_DTYPE_FLOAT16:
            return "fp16";
        case KILN_DTYPE_BFLOAT16:
            return "bf16";
        case KILN_DTYPE_FLOAT64:
            return "fp64";
        default:
            break;
        }
    }
    return "-";
}

static void print_copies(const kn_graph *g, bool json) {
    int shown = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        kn_copy_kind kind = kn_node_copy_kind(n);
        if (kind == KN_COPY_NONE)
            continue;
        const char *from = g->values[n->in[0]].name, *to = g->values[n->out[0]].name;
        const char *dir = kind == KN_COPY_TO_HOST ? "to_host" : "to_device";
        if (json) {
            printf("%s{\"name\": ", shown ? ", " : "");
            jstr(n->name);
            printf(", \"direction\": \"%s\", \"backend\": ", dir);
            jstr(kn_node_backend(n));
            printf(", \"from\": ");
            jstr(from);
            printf(", \"to\": ");
            jstr(to);
            printf("}");
        } else {
            printf("  %-10s %s: %s -> %s\n", dir, kn_node_backend(n), from, to);
        }
        shown++;
    }
    if (!json && shown == 0)
        printf("  none\n");
}

/* A DOT string literal's contents: quotes and backslashes escaped, control bytes dropped. */
static const char *dot_text(const char *s, char *buf, size_t size) {
    size_t j = 0;
    for (; *s && j + 2 < size; s++) {
        if (*s == '"' || *s == '\\')
            buf[j++] = '\\';
        if ((unsigned char)*s >= 0x20)
            buf[j++] = *s;
    }
    buf[j] = '\0';
    return buf;
}

static int write_dot(const kn_graph *g, const char *path) {
    char e1[512], e2[512];
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return cli_fail("cannot write %s: %s", path, strerror(errno));
    fprintf(f, "digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\"];\n");
    for (int i = 0; i < g->n_inputs; i++)
        fprintf(f, "  v%d [shape=ellipse, label=\"%s\"];\n", g->inputs[i],
                dot_text(g->values[g->inputs[i]].name, e1, sizeof e1));
    for (int i = 0; i < g->n_outputs; i++)
        fprintf(f, "  v%d [shape=ellipse, label=\"%s\"];\n", g->outputs[i],
                dot_text(g->values[g->outputs[i]].name, e1, sizeof e1));
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        char k[256];
        kernel_text(n, k, sizeof k);
        fprintf(f, "  n%d [label=\"%s\\n%s\"];\n", i, dot_text(n->name, e1, sizeof e1),
                dot_text(k, e2, sizeof e2));
        for (int j = 0; j < n->n_in; j++) {
            int v = n->in[j];
            if (v < 0 || g->values[v].data != NULL)
                continue;
            char s[256];
            shape_text(&g->values[v], s, sizeof s);
            if (g->values[v].producer >= 0)
                fprintf(f, "  n%d -> n%d [label=\"%s\"];\n", g->values[v].producer, i,
                        dot_text(s, e1, sizeof e1));
            else
                fprintf(f, "  v%d -> n%d;\n", v, i);
        }
        for (int j = 0; j < n->n_out; j++)
            if (n->out[j] >= 0 && g->values[n->out[j]].is_output)
                fprintf(f, "  n%d -> v%d;\n", i, n->out[j]);
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        remove(tmp);
        return cli_fail("cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

static void print_io(const kiln_engine *e, const kn_graph *g, bool json) {
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? g->n_outputs : g->n_inputs;
        const int *list = pass ? g->outputs : g->inputs;
        if (json)
            printf("%s\"%s\": [", pass ? ", " : "", pass ? "outputs" : "inputs");
        else
            printf("%s:\n", pass ? "outputs" : "inputs");
        for (int i = 0; i < n; i++) {
            const kn_value *v = &g->values[list[i]];
            char s[512];
            shape_text(v, s, sizeof s);
            const kn_profile *p = pass ? NULL : e->input_profile[i];
            if (json) {
                printf("%s{\"name\": ", i ? ", " : "");
                jstr(v->name);
                printf(", \"dtype\": \"%s\", \"shape\": ", kn_dtype_name(v->dtype));
                jstr(s);
                if (p) {
                    printf(", \"profile\": {");
                    const int64_t *arr[3] = {p->min, p->opt, p->max};
                    for (int k = 0; k < 3; k++) {
                        printf("%s\"%s\": [", k ? ", " : "",
                               k == 0   ? "min"
                               : k == 1 ? "opt"
                                        : "max");
                        for (int d = 0; d < p->rank; d++)
                            printf("%s%lld", d ? ", " : "", (long long)arr[k][d]);
                        printf("]");
                    }
                    printf("}");
                }
                printf("}");
            } else {
                printf("  %-24s %-8s %s", v->name, kn_dtype_name(v->dtype), s);
                if (p) {
                    printf("   profile");
                    const int64_t *arr[3] = {p->min, p->opt, p->max};
                    for (int k = 0; k < 3; k++) {
                        printf(" %s ", k == 0 ? "min" : k == 1 ? "opt" : "max");
                        for (int d = 0; d < p->rank; d++)
                            printf("%s%lld", d ? "x" : "", (long long)arr[k][d]);
                    }
                }
                printf("\n");
            }
        }
        if (json)
            printf("]");
    }
}

/* Each distinct plugin identity the graph needs, once. */
static void print_plugins(const kn_graph *g, bool json) {
    int shown = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (!kn_is_plugin_node(n))
            continue;
        const char *ver = kn_attr_string(n, KN_PLUGIN_ATTR_VERSION, "");
        const char *ns = kn_attr_string(n, KN_PLUGIN_ATTR_NAMESPACE, "");
        bool seen = false;
        for (int k = 0; k < i && !seen; k++)
            seen = kn_is_plugin_node(&g->nodes[k]) &&
                   strcmp(g->nodes[k].op_type, n->op_type) == 0 &&
                   strcmp(kn_attr_string(&g->nodes[k], KN_PLUGIN_ATTR_VERSION, ""), ver) == 0 &&
                   strcmp(kn_attr_string(&g->nodes[k], KN_PLUGIN_ATTR_NAMESPACE, ""), ns) == 0;
        if (seen)
            continue;
        if (json) {
            printf("%s{\"name\": ", shown ? ", " : "");
            jstr(n->op_type);
            printf(", \"version\": ");
            jstr(ver);
            printf(", \"namespace\": ");
            jstr(ns);
            printf("}");
        } else {
            printf(" %s (version %s, namespace '%s')", n->op_type, ver, ns);
        }
        shown++;
    }
    if (!json && shown == 0)
        printf(" none");
}

int cmd_inspect(int argc, char **argv) {
    cli_opts o;
    int rc = cli_parse(argc, argv, "sjgp", usage, &o);
    if (rc != 0) {
        cli_opts_free(&o);
        return rc < 0 ? 0 : rc;
    }
    kiln_engine *e = NULL;
    if ((rc = cli_load_engine(&o, &e)) != 0)
        goto out;
    const kn_graph *g = e->plan.graph;
    size_t weights = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].data != NULL) {
            kn_tensor t = kn_value_tensor(&g->values[v]);
            weights += kn_tensor_nbytes(&t);
        }
    size_t arenas[KN_MAX_PLAN_BACKENDS];
    arena_at_max(e, arenas);
    size_t arena = arenas[0];
    /* The picture first: a bad --dot path fails before anything is printed. */
    if (o.dot && (rc = write_dot(g, o.dot)) != 0)
        goto out;
    if (o.json) {
        printf("{");
        print_io(e, g, true);
        printf(", \"layers\": [");
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *n = &g->nodes[i];
            char k[256];
            kernel_text(n, k, sizeof k);
            printf("%s{\"name\": ", i ? ", " : "");
            jstr(n->name);
            printf(", \"op\": ");
            jstr(n->op_type);
            printf(", \"domain\": ");
            jstr(n->domain);
            printf(", \"kernel\": ");
            jstr(k);
            printf(", \"backend\": ");
            jstr(kn_node_backend(n));
            printf(", \"precision\": \"%s\"", layer_precision(g, n));
            json_tensor_names(g, "inputs", n->in, n->n_in);
            json_tensor_names(g, "outputs", n->out, n->n_out);
            const int64_t *nhwc;
            if (kn_attr_ints(n, "kiln_nhwc", &nhwc) == 2) /* passes/layout_nhwc.c */
                printf(", \"nhwc\": {\"inputs\": %lld, \"outputs\": %lld}", (long long)nhwc[0],
                       (long long)nhwc[1]);
            const int64_t *tactic;
            int64_t n_tactic = kn_attr_ints(n, KN_ATTR_TACTIC, &tactic);
            if (n_tactic > 0) { /* the backend's choice by timing at build (backend.h) */
                printf(", \"tactic\": [");
                for (int64_t t = 0; t < n_tactic; t++)
                    printf("%s%lld", t ? ", " : "", (long long)tactic[t]);
                printf("]");
            }
            int64_t threads = kn_attr_int(n, KN_ATTR_THREADS, 0);
            if (threads > 0) /* fewer threads than the context's, chosen by timing at build */
                printf(", \"threads\": %lld", (long long)threads);
            const char *why = kn_attr_string(n, KN_ATTR_PLACEMENT_REASON, NULL);
            if (why) {
                printf(", \"placement_reason\": ");
                jstr(why);
            }
            const char *int8_why = kn_attr_string(n, "kiln_int8_reason", NULL);
            if (int8_why) {
                printf(", \"int8_reason\": ");
                jstr(int8_why);
            }
            const char *weights = kn_attr_string(n, "kiln_weights", NULL);
            if (weights) {
                printf(", \"weights\": ");
                jstr(weights);
            }
            const char *fp32_why = kn_attr_string(n, "kiln_precision_note", NULL);
            if (fp32_why) {
                printf(", \"precision_reason\": ");
                jstr(fp32_why);
            }
            if (kn_node_n_outer(n) > 0 || kn_node_attr(n, "body") || kn_node_attr(n, "then_branch"))
                json_bodies(n);
            printf("}");
        }
        printf("], \"copies\": [");
        print_copies(g, true);
        printf("], \"backends\": [");
        for (int k = 0; k < e->n_backends; k++) {
            printf("%s{\"name\": ", k ? ", " : "");
            jstr(e->backends[k]->iface->name);
            printf(", \"arena_bytes\": %zu}", arenas[k]);
        }
        printf("], \"weight_bytes\": %zu, \"arena_bytes\": %zu, \"plugins\": [", weights, arena);
        print_plugins(g, true);
        printf("]}\n");
    } else {
        print_io(e, g, false);
        printf("layers (%d after optimization):\n", g->n_nodes);
        for (int i = 0; i < g->n_nodes; i++) {
            const kn_node *n = &g->nodes[i];
            char k[256], s[512] = "";
            kernel_text(n, k, sizeof k);
            if (n->n_out > 0 && n->out[0] >= 0)
                shape_text(&g->values[n->out[0]], s, sizeof s);
            const char *why = kn_attr_string(n, KN_ATTR_PLACEMENT_REASON, NULL);
            const char *prec = layer_precision(g, n);
            const char *int8_why = kn_attr_string(n, "kiln_int8_reason", NULL);
            bool shown =
                strcmp(prec, "fp16") == 0 || strcmp(prec, "bf16") == 0 || strcmp(prec, "int8") == 0;
            /* weights stored narrow for a layer that computes in fp32 */
            const char *stored = kn_attr_string(n, "kiln_compute", NULL)
                                     ? kn_attr_string(n, "kiln_weights", NULL)
                                     : NULL;
            if (stored != NULL) {
                shown = true;
                prec = stored;
            }
            const char *fp32_why = kn_attr_string(n, "kiln_precision_note", NULL);
            const int64_t *nhwc;
            /* NHWC: the output is stored so; from NHWC: only inputs are (a Cast at the edge) */
            const char *layout = "";
            if (kn_attr_ints(n, "kiln_nhwc", &nhwc) == 2)
                layout = (nhwc[1] & 1) ? " NHWC" : nhwc[0] != 0 ? " from NHWC" : "";
            char threads[32] = "";
            if (kn_attr_int(n, KN_ATTR_THREADS, 0) > 0)
                snprintf(threads, sizeof threads, "  threads %lld",
                         (long long)kn_attr_int(n, KN_ATTR_THREADS, 0));
            printf("  %4d  %-36s %-34s -> %s%s%s%s%s%s%s%s%s%s%s%s%s%s%s\n", i, n->name, k, s,
                   shown ? " " : "", shown ? prec : "", stored ? " weights" : "", layout, threads,
                   why ? "  (host: " : "", why ? why : "", why ? ")" : "",
                   int8_why ? "  (fp32, not int8: " : "", int8_why ? int8_why : "",
                   int8_why ? ")" : "", fp32_why ? "  (fp32: " : "", fp32_why ? fp32_why : "",
                   fp32_why ? ")" : "");
            print_bodies(n, 0);
        }
        if (e->n_backends > 1) {
            printf("copies between memory spaces:\n");
            print_copies(g, false);
            for (int k = 1; k < e->n_backends; k++)
                printf("%s activation arena (largest shapes): %zu bytes\n",
                       e->backends[k]->iface->name, arenas[k]);
        }
        printf("weights: %zu bytes\nactivation arena (largest shapes): %zu bytes\n"
               "plugins required:",
               weights, arena);
        print_plugins(g, false);
        printf("\n");
    }
out:
    kiln_engine_destroy(e);
    cli_opts_free(&o);
    return rc;
}
