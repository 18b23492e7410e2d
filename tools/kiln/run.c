/* kiln run: one execution, outputs written as .npy files plus outputs.json. */
#include "cli.h"

#include "core/alloc.h"
#include "core/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln run MODEL.onnx|PLAN --input NAME=FILE... [--shapes SPEC]... [--output-dir DIR]\n"
    "                [--threads N]\n"
    "\n"
    "Runs the model once. FILE is a .npy file or an ONNX TensorProto .pb file; a sequence\n"
    "input is a folder of 0.npy, 1.npy, ... and an empty optional the word none. Each graph\n"
    "output is written to DIR as a .npy file (name made file-safe; a sequence as such a folder),\n"
    "and DIR/outputs.json maps output names to file names (null: an empty optional). Given an "
    ".onnx model it is built in memory first; a dynamic\n"
    "input takes its shape from --shapes or else from its input file. On failure nothing is\n"
    "written into DIR.\n"
    "\n"
    "  --input NAME=FILE  data for input NAME (every input needs one)\n"
    "  --shapes SPEC      NAME:DIMS or NAME:MIN,OPT,MAX (see kiln build --help)\n"
    "  --output-dir DIR   where outputs go (default: current directory; created if missing)\n"
    "  --threads N        threads for execution (default: the plan's setting, else "
    "cores)\n" CLI_BUILD_OPTIONS_HELP;

static void safe_name(const char *name, char *out, size_t size) {
    size_t j = 0;
    for (size_t i = 0; name[i] && j + 1 < size; i++) {
        char ch = name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
        out[j++] = ok ? ch : '_';
    }
    if (j == 0 || out[0] == '.')
        out[j == 0 ? j++ : 0] = '_';
    out[j] = '\0';
}

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static int write_outputs(kiln_engine *e, kiln_context *ctx, const char *dir) {
    int n = kiln_engine_num_outputs(e);
    char(*files)[300] = kn_calloc((size_t)n + 1, sizeof *files);
    char path[4096];
    int written = 0, rc = 0;
    if (files == NULL)
        return cli_fail("out of memory");
    for (int i = 0; i < n && rc == 0; i++) {
        kiln_io_info info;
        kiln_engine_output_info(e, i, &info);
        char base[256];
        safe_name(info.name, base, sizeof base);
        snprintf(files[i], sizeof files[i], "%s.npy", base);
        for (int k = 0, dup = 1; k < i; k++)
            if (strcmp(files[k], files[i]) == 0) {
                snprintf(files[i], sizeof files[i], "%s_%d.npy", base, ++dup);
                k = -1;
            }
        kiln_tensor_view v;
        if (kiln_context_get_output(ctx, info.name, &v) != KILN_OK) {
            rc = cli_fail("%s", kiln_last_error());
            break;
        }
        kn_tensor t = {.dtype = v.dtype, .shape = {.rank = v.rank}, .data = (void *)v.data};
        memcpy(t.shape.d, v.dims, sizeof v.dims);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (t.dtype == KILN_DTYPE_CONTAINER) {
            char stem[300]; /* written as a folder, a .npy, or nothing */
            snprintf(stem, sizeof stem, "%.*s", (int)strlen(files[i]) - 4, files[i]);
            if ((rc = cli_write_container(dir, stem, &t, files[i], sizeof files[i])) == 0)
                written++;
        } else if (kn_npy_write(path, &t) != KILN_OK)
            rc = cli_fail("%s", kiln_last_error());
        else
            written++;
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/outputs.json", dir);
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (f == NULL) {
            rc = cli_fail("cannot write %s: %s", path, strerror(errno));
        } else {
            fputs("{", f);
            for (int i = 0; i < n; i++) {
                kiln_io_info info;
                kiln_engine_output_info(e, i, &info);
                fputs(i ? ",\n  " : "\n  ", f);
                json_string(f, info.name);
                fputs(": ", f);
                if (files[i][0] != '\0')
                    json_string(f, files[i]);
                else
                    fputs("null", f); /* an empty optional */
            }
            fputs("\n}\n", f);
            if (fclose(f) != 0 || rename(tmp, path) != 0) {
                remove(tmp);
                rc = cli_fail("cannot write %s: %s", path, strerror(errno));
            }
        }
    }
    if (rc != 0)
        for (int i = 0; i < written; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            remove(path);
        }
    kn_free(files);
    return rc;
}

/* Bind each output whose shape is known before the run to a buffer of exactly its size, as an
 * application does, so the layers producing them write there in place (and a sanitizer build
 * sees any write past an output's end). bufs[i] stays NULL for the others, which are read
 * where the context holds them. */
static int bind_outputs(kiln_engine *e, kiln_context *ctx, void **bufs) {
    int n = kiln_engine_num_outputs(e);
    for (int i = 0; i < n; i++) {
        kiln_io_info info;
        kiln_engine_output_info(e, i, &info);
        kn_tensor t = {.dtype = info.dtype};
        if (info.dtype == KILN_DTYPE_CONTAINER || info.dtype == KILN_DTYPE_STRING ||
            kiln_context_get_output_shape(ctx, info.name, &t.shape.rank, t.shape.d) != KILN_OK)
            continue; /* a shape that depends on data: known after the run */
        size_t nb = kn_tensor_nbytes(&t);
        if (nb == 0)
            continue;
        if (posix_memalign(&bufs[i], 64, nb) != 0)
            return cli_fail("out of memory for output '%s' (%zu bytes)", info.name, nb);
        if (kiln_context_set_output(ctx, info.name, bufs[i], nb) != KILN_OK)
            return cli_fail("%s", kiln_last_error());
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    cli_opts o;
    int rc = cli_parse(argc, argv, "sidtp", usage, &o);
    if (rc != 0) {
        cli_opts_free(&o);
        return rc < 0 ? 0 : rc;
    }
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    kn_tensor owned[CLI_MAX_ITEMS];
    int n_owned = 0;
    const char *dir = o.output_dir ? o.output_dir : ".";
    void **bufs = NULL;
    if ((rc = cli_prepare_context(&o, false, &e, &ctx, owned, &n_owned)) != 0)
        goto out;
    if ((bufs = calloc((size_t)kiln_engine_num_outputs(e) + 1, sizeof *bufs)) == NULL) {
        rc = cli_fail("out of memory");
        goto out;
    }
    if ((rc = bind_outputs(e, ctx, bufs)) != 0)
        goto out;
    if (kiln_context_execute(ctx) != KILN_OK) {
        rc = cli_fail("%s", kiln_last_error());
        goto out;
    }
    struct stat st;
    if (stat(dir, &st) != 0 && mkdir(dir, 0777) != 0) {
        rc = cli_fail("cannot create output directory '%s': %s", dir, strerror(errno));
        goto out;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = cli_fail("'%s' is not a directory", dir);
        goto out;
    }
    rc = write_outputs(e, ctx, dir);
out:
    for (int i = 0; i < n_owned; i++)
        kn_free(owned[i].data);
    kiln_context_destroy(ctx);
    for (int i = 0; bufs != NULL && i < kiln_engine_num_outputs(e); i++)
        free(bufs[i]);
    free(bufs);
    kiln_engine_destroy(e);
    cli_opts_free(&o);
    return rc;
}
