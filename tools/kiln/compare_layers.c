/* kiln compare --layers: the target's plan runs as built, with every layer's outputs captured
 * (kiln_context_set_capture copies them as each layer finishes, so fusion and memory reuse do
 * not change); the reference holds every ONNX tensor. A layer's outputs keep their ONNX names,
 * so each one the reference also has is compared, in the target's execution order. */
#include "cli.h"

#include "compare.h"
#include "core/alloc.h"
#include "core/fileio.h"
#include "layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_row {
    int index; /* in the target's execution order */
    int compared;
    double max_abs, max_rel;
    bool pass;
    char why[600]; /* a pair that could not be compared */
} layer_row;

/* Compare every output of layer li that ref has; false when ref has none of them. */
static bool compare_layer(const compare_opts *c, const cmp_side *ref, const cmp_side *target,
                          const kiln_layer_info *li, layer_row *row) {
    row->pass = true;
    for (int j = 0; j < li->n_outputs; j++) {
        kn_tensor a, b;
        if (li->outputs[j] == NULL || cmp_side_tensor(ref, li->outputs[j], &a) != 0 ||
            cmp_side_tensor(target, li->outputs[j], &b) != 0)
            continue;
        cmp_result *r = kn_malloc(sizeof *r);
        if (r == NULL)
            continue;
        cmp_tensors(li->outputs[j], &a, &b, &c->tol, r);
        row->compared++;
        if (!r->shape_ok) {
            snprintf(row->why, sizeof row->why, "%s: %s", li->outputs[j], r->why);
            row->pass = false;
        } else {
            /* NaN propagates so a layer that produced NaN never looks fine */
            row->max_abs =
                isnan(r->max_abs) || r->max_abs > row->max_abs ? r->max_abs : row->max_abs;
            row->max_rel =
                isnan(r->max_rel) || r->max_rel > row->max_rel ? r->max_rel : row->max_rel;
            row->pass &= r->pass;
        }
        kn_free(r);
    }
    return row->compared > 0;
}

static void json_num(FILE *f, double v) {
    if (isnan(v) || isinf(v))
        fputs("null", f);
    else
        fprintf(f, "%.17g", v);
}

static void json_name(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    fputc('"', f);
}

static void print_json(const cli_layers *l, const layer_row *rows, int n, int first) {
    fputs(", \"layers\": [", stdout);
    for (int k = 0; k < n; k++) {
        const kiln_layer_info *li = &l->info[rows[k].index];
        fputs(k ? ", {\"name\": " : "{\"name\": ", stdout);
        json_name(stdout, li->name);
        fputs(", \"op\": ", stdout);
        json_name(stdout, li->op_type);
        fputs(", \"onnx_nodes\": ", stdout);
        cli_layers_json_nodes(stdout, l->onnx_nodes[rows[k].index]);
        fputs(", \"outputs\": [", stdout);
        for (int j = 0; j < li->n_outputs; j++) {
            fputs(j ? ", " : "", stdout);
            json_name(stdout, li->outputs[j] ? li->outputs[j] : "");
        }
        fputs("], \"max_abs\": ", stdout);
        json_num(stdout, rows[k].max_abs);
        fputs(", \"max_rel\": ", stdout);
        json_num(stdout, rows[k].max_rel);
        printf(", \"pass\": %s", rows[k].pass ? "true" : "false");
        if (rows[k].why[0] != '\0') {
            fputs(", \"error\": ", stdout);
            json_name(stdout, rows[k].why);
        }
        fputs("}", stdout);
    }
    fputs("], \"first_failing_layer\": ", stdout);
    if (first >= 0)
        json_name(stdout, l->info[rows[first].index].name);
    else
        fputs("null", stdout);
}

static void print_text(const cli_layers *l, const layer_row *rows, int n, int first) {
    printf("\nlayers of the target's plan, in execution order (%d of %d have a reference "
           "tensor):\n",
           n, l->n);
    printf("  %-4s %-12s %-12s %-6s %-28s %s\n", "#", "max abs", "max rel", "", "layer",
           "onnx nodes");
    for (int k = 0; k < n; k++) {
        const layer_row *r = &rows[k];
        printf("  %-4d %-12.4g %-12.4g %-6s %-28s %s%s%s\n", r->index, r->max_abs, r->max_rel,
               r->pass ? "PASS" : "FAIL", l->info[r->index].name, l->onnx_nodes[r->index],
               r->why[0] ? "  " : "", r->why);
    }
    if (first >= 0)
        printf("first layer beyond tolerance: #%d '%s' (%s), fusing ONNX nodes: %s\n",
               rows[first].index, l->info[rows[first].index].name,
               l->info[rows[first].index].op_type, l->onnx_nodes[rows[first].index]);
    else
        printf("every layer is within tolerance\n");
}

/* log10 of an error for the plot, clamped to [-12, 4] (0 and NaN/Inf to the ends). */
static double plot_log(double v) {
    if (isnan(v) || isinf(v))
        return 4;
    double x = v > 0 ? log10(v) : -12;
    return x < -12 ? -12 : x > 4 ? 4 : x;
}

/* DIR/layers.svg: every compared layer's max relative error (bars, red beyond tolerance)
 * and max absolute error (dots), on a log scale, with the tolerances as lines. */
static int write_svg(const compare_opts *c, const cli_layers *l, const layer_row *rows, int n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/layers.svg", c->report);
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (f == NULL)
        return cli_fail("--report: out of memory");
    int w = 60 + (n > 0 ? n : 1) * 14, h = 320;
#define Y(v) (20.0 + (4.0 - plot_log(v)) * 16.0)
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">\n"
            "<title>per-layer error</title>\n"
            "<text x=\"10\" y=\"14\" font-family=\"sans-serif\" font-size=\"12\">log10 error per "
            "layer (bars: max rel, dots: max abs; lines: rtol, atol)</text>\n",
            w, h);
    for (int e = -12; e <= 4; e += 4)
        fprintf(f,
                "<text x=\"2\" y=\"%.1f\" font-family=\"sans-serif\" font-size=\"9\">%d</text>\n",
                20.0 + (4 - e) * 16.0, e);
    for (int k = 0; k < n; k++) {
        const layer_row *r = &rows[k];
        double y = Y(r->max_rel), x = 40 + k * 14;
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%.1f\" width=\"11\" height=\"%.1f\" fill=\"%s\"><title>#%d "
                "%s: max rel %g, max abs %g</title></rect>\n",
                x, y, 276.0 - y, r->pass ? "#4878a8" : "#c83c3c", r->index, l->info[r->index].name,
                r->max_rel, r->max_abs);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#303030\"/>\n", x + 5.5,
                Y(r->max_abs));
    }
    fprintf(f,
            "<line x1=\"36\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#c83c3c\" "
            "stroke-dasharray=\"4\"/>\n"
            "<line x1=\"36\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#303030\" "
            "stroke-dasharray=\"2\"/>\n</svg>\n",
            w, Y(c->tol.rtol), Y(c->tol.rtol), w, Y(c->tol.atol), Y(c->tol.atol));
#undef Y
    if (fclose(f) != 0) {
        free(buf);
        return cli_fail("--report: out of memory");
    }
    kiln_status st = kn_file_write_atomic(path, buf, size);
    free(buf);
    return st == KILN_OK ? 0 : cli_fail("--report: %s", kiln_last_error());
}

static const char *onnx_model_of(const cmp_side *s) {
    return s->e != NULL && !cli_is_plan(s->spec) ? s->spec : NULL;
}

int cmp_layers(const compare_opts *c, const cmp_side *ref, const cmp_side *target, bool json) {
    cli_layers l;
    /* The ONNX graph the layers are mapped back to: the target's own model, else REF's. */
    const char *model = onnx_model_of(target) ? onnx_model_of(target) : onnx_model_of(ref);
    int rc = cli_layers_load(&l, target->e, model ? model : target->spec);
    layer_row *rows = rc == 0 ? kn_calloc((size_t)l.n + 1, sizeof *rows) : NULL;
    if (rc == 0 && rows == NULL)
        rc = cli_fail("out of memory");
    int n = 0, first = -1;
    for (int i = 0; rc == 0 && i < l.n; i++) {
        memset(&rows[n], 0, sizeof rows[n]);
        rows[n].index = i;
        if (!compare_layer(c, ref, target, &l.info[i], &rows[n]))
            continue;
        if (!rows[n].pass && first < 0)
            first = n;
        n++;
    }
    if (rc == 0 && n == 0)
        rc = cli_fail("--layers: no layer output of '%s' exists in '%s' (the reference needs "
                      "the ONNX tensor names)",
                      target->spec, ref->spec);
    if (rc == 0) {
        if (json)
            print_json(&l, rows, n, first);
        else
            print_text(&l, rows, n, first);
        if (c->report != NULL)
            rc = write_svg(c, &l, rows, n);
    }
    kn_free(rows);
    cli_layers_free(&l);
    return rc;
}
