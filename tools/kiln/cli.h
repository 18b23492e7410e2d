/* Shared pieces of the kiln command-line tool. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "core/tensor.h"
#include "kiln/kiln.h"

#include <stdbool.h>

#define CLI_MAX_ITEMS 64

/* The options of every verb that builds a plan from an .onnx model, for its --help. */
#define CLI_BUILD_OPTIONS_HELP                                                                     \
    "  --plugins LIB.so   load a plugin library (repeatable; KILN_PLUGIN_PATH adds more)\n"        \
    "  --prefer-plugin OP let a registered plugin named OP replace the built-in op OP\n"           \
    "  --backend LIST     backends to place nodes on, in order of preference, e.g. cuda,cpu\n"     \
    "                     (default cpu; the host takes what no listed backend runs; kiln\n"        \
    "                     inspect shows where each layer went)\n"                                  \
    "  --precision P      fp32 (default, strict), tf32 (device Conv/Gemm/MatMul may use TF32),\n"  \
    "                     fp16 or bf16 (each layer its backend offers it for runs in 16 bits,\n"   \
    "                     accumulating in float32; inputs and outputs keep their dtypes)\n"        \
    "  --layer-precision PATTERN=P\n"                                                              \
    "                     the layers whose ONNX name matches PATTERN (* ? [...]) in P, e.g.\n"     \
    "                     '*attn*=fp32' (repeatable; later ones win); @FILE reads one\n"           \
    "                     PATTERN=P a line (as kiln debug precision writes)\n"                     \
    "  --tactics T        how device backends choose among a layer's algorithms (cuDNN\n"          \
    "                     convolutions, cuBLASLt products): timed (each timed on this device,\n"   \
    "                     the fastest kept in the plan: seconds more a build), heuristic (the\n"   \
    "                     libraries' first choice, nothing timed) or auto (default: timed when\n"  \
    "                     --timing-cache is given, else heuristic)\n"                              \
    "  --timing-cache FILE\n"                                                                      \
    "                     keep what the build chooses by timing in FILE: device backends'\n"       \
    "                     tactics (cuDNN and cuBLASLt algorithms; see --tactics) and, with\n"      \
    "                     --threads above 1, the layers faster on fewer of the context's\n"        \
    "                     threads (timed where the machine gives the build its threads: build\n"   \
    "                     on an idle one; KILN_CPU_THREAD_TUNE=0: not timed). Read before,\n"      \
    "                     written after; a rebuild with it times nothing and writes the same\n"    \
    "                     plan. Without FILE nothing is timed on the CPU\n"                        \
    "                     (KILN_CPU_THREAD_TUNE=1: timed, not reproducible)\n"

typedef struct cli_shape {
    char *name;
    int rank;
    int64_t min[KILN_MAX_RANK], opt[KILN_MAX_RANK], max[KILN_MAX_RANK];
    bool range; /* MIN,OPT,MAX given */
} cli_shape;

typedef struct cli_input {
    char *name;
    char *path;
    kn_tensor t; /* loaded data (owned) */
} cli_input;

typedef struct cli_opts {
    const char *model;
    const char *output; /* -o for build */
    const char *output_dir;
    const char *dot;
    cli_shape shapes[CLI_MAX_ITEMS];
    int n_shapes;
    cli_input inputs[CLI_MAX_ITEMS];
    int n_inputs;
    const char *plugins[CLI_MAX_ITEMS];
    int n_plugins;
    const char *prefer[CLI_MAX_ITEMS]; /* --prefer-plugin OP */
    int n_prefer;
    const char *backends;                       /* --backend NAME[,NAME...] */
    const char *precision;                      /* --precision fp32|tf32|fp16|bf16 */
    const char *layer_precision[CLI_MAX_ITEMS]; /* --layer-precision PATTERN=PREC */
    int n_layer_precision;
    const char *timing_cache; /* --timing-cache FILE */
    const char *tactics;      /* --tactics auto|timed|heuristic */
    kiln_registry *registry;  /* from --plugins and KILN_PLUGIN_PATH */
    int threads;              /* 0: default */
    int warmup, iterations;
    bool json, quiet, verbose;
    bool profile;     /* bench --profile */
    bool all_outputs; /* cli_load_engine: every tensor a node writes becomes an output */
    /* build --int8 --calibration DIR --calibration-method M --calibration-cache FILE */
    bool int8;
    const char *calibration, *calibration_method, *calibration_cache;
} cli_opts;

/* Print "kiln: error: <msg>" on one line to stderr; returns 1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same, with kiln_last_error() appended. */
int cli_fail_kiln(const char *what);

/* Parse the verb's arguments (argv[0] is the verb). allowed is a string of option letters:
 * o=-o, s=--shapes, i=--input, d=--output-dir, t=--threads, w=--warmup/--iterations,
 * j=--json, q=--quiet, v=--verbose, g=--dot, P=--profile. Returns 0 or an exit code (errors already
 * printed). I takes --int8 and the --calibration options. */
int cli_parse(int argc, char **argv, const char *allowed, const char *usage, cli_opts *o);
void cli_opts_free(cli_opts *o);

/* Create o->registry and load KILN_PLUGIN_PATH and every --plugins library into it. */
int cli_load_plugins(cli_opts *o);

/* Load inputs given with --input (npy or pb). */
int cli_load_inputs(cli_opts *o);
/* Load MODEL (.onnx is built in memory with the given shapes and input files' shapes as
 * profiles; anything starting with the plan magic is loaded as a plan). */
int cli_load_engine(const cli_opts *o, kiln_engine **out);
bool cli_is_plan(const char *path);
/* Set shapes and data of every input on ctx: from --input files, else random (bench). */
int cli_bind_inputs(const cli_opts *o, kiln_engine *e, kiln_context *ctx, bool random_rest,
                    kn_tensor *owned, int *n_owned);
/* Everything before the first execute of run and bench: load --input files, load or build
 * the engine, create a context with --threads, bind inputs (random_rest: fill inputs not
 * given). On failure the error is printed; the caller still frees *e, *ctx and owned. */
int cli_prepare_context(cli_opts *o, bool random_rest, kiln_engine **e, kiln_context **ctx,
                        kn_tensor *owned, int *n_owned);
/* Build config from --shapes (and input files' shapes for inputs without one). */
/* Sequence and optional inputs and outputs (containers.c): a folder of 0.npy, 1.npy, ... is a
 * sequence, `none` an empty optional. */
bool cli_is_container_path(const char *path);
int cli_read_container(const char *path, kn_tensor *out);
int cli_wrap_optional(const kn_tensor *t, kn_tensor *out);
/* Whether the value t given for input `info` is an optional's element, bound wrapped: a
 * tensor for an optional tensor (or an undeclared container), a folder's sequence for an
 * optional sequence. */
bool cli_wraps_optional(const kiln_io_info *info, const kn_tensor *t);
/* Writes container t as DIR/BASE (a folder) or DIR/BASE.npy; entry receives that name, or ""
 * for an empty optional. */
int cli_write_container(const char *dir, const char *base, const kn_tensor *t, char *entry,
                        size_t size);
int cli_make_config(const cli_opts *o, kiln_network *net, kiln_build_config **out);
/* --int8 with --calibration DIR, --calibration-method and --calibration-cache (build.c). */
int cli_set_int8(const cli_opts *o, kiln_build_config *cfg);

int cmd_build(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_plugin_check(int argc, char **argv);
int cmd_edit(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_debug(int argc, char **argv);

#endif
