/* kiln debug: dispatch to reduce and precision, and the failure check both run on candidates
 * (a shell command, or kiln compare itself). */
#include "debug.h"

#include "cli.h"
#include "core/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage[] = "usage: kiln debug reduce MODEL.onnx -o MIN.onnx (--check \"CMD {}\" | "
                            "--fails-compare OPTIONS...)\n"
                            "       kiln debug precision MODEL.onnx --precision fp16|bf16 ... -o "
                            "LAYERS.txt\n"
                            "Run 'kiln debug reduce --help' or 'kiln debug precision --help'.\n";

/* Append s to the growing command line, single-quoted for the shell. */
static bool append_quoted(char **cmd, size_t *len, const char *s, bool quote) {
    size_t extra = strlen(s) * 4 + 4;
    char *n = kn_realloc(*cmd, *len + 1, *len + extra + 1);
    if (n == NULL)
        return false;
    *cmd = n;
    char *o = n + *len;
    *o++ = ' ';
    if (quote)
        *o++ = '\'';
    for (; *s; s++) {
        if (quote && *s == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *s;
        }
    }
    if (quote)
        *o++ = '\'';
    *o = '\0';
    *len = (size_t)(o - n);
    return true;
}

int debug_check_parse(debug_check *c, int argc, char **argv, int at, int *consumed) {
    const char *a = argv[at];
    if (c->command != NULL)
        return cli_fail("give one of --check and --fails-compare");
    if (strcmp(a, "--check") == 0) {
        if (at + 1 >= argc || strstr(argv[at + 1], "{}") == NULL)
            return cli_fail("--check needs a command with {} for the model file, e.g. --check "
                            "\"kiln run {} --input x=x.npy\"");
        c->command = kn_strdup(argv[at + 1]);
        *consumed = 2;
        return c->command ? 0 : cli_fail("out of memory");
    }
    /* --fails-compare: this very binary's compare, the candidate as REF and TARGET. */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return cli_fail("--fails-compare: cannot find the kiln executable");
    self[n] = '\0';
    size_t len = 0;
    c->command = kn_calloc(1, 1);
    bool ok = c->command != NULL && append_quoted(&c->command, &len, self, true) &&
              append_quoted(&c->command, &len, "compare {} {}", false);
    for (int i = at + 1; ok && i < argc; i++)
        ok = append_quoted(&c->command, &len, argv[i], true);
    c->compare = true;
    *consumed = argc - at;
    return ok ? 0 : cli_fail("out of memory");
}

int debug_check_run(debug_check *c, const char *path) {
    size_t need = strlen(c->command) + 1;
    for (const char *p = strstr(c->command, "{}"); p; p = strstr(p + 2, "{}"))
        need += strlen(path) + 2;
    char *line = kn_malloc(need + 32);
    if (line == NULL)
        return cli_fail("out of memory"), -1;
    char *o = line;
    for (const char *p = c->command; *p;) {
        if (p[0] == '{' && p[1] == '}') {
            o += sprintf(o, "'%s'", path);
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    strcpy(o, c->verbose ? "" : " >/dev/null 2>&1");
    fflush(stdout);
    int st = system(line);
    kn_free(line);
    c->runs++;
    if (st == -1 || !WIFEXITED(st))
        return cli_fail("the check command could not run or was killed"), -1;
    int code = WEXITSTATUS(st);
    if (c->verbose)
        fprintf(stderr, "check #%d on %s: exit %d\n", c->runs, path, code);
    if (!c->compare)
        return code != 0;
    return code == 1; /* 2 (an error, e.g. a candidate kiln cannot build) is not the failure */
}

void debug_check_free(debug_check *c) {
    kn_free(c->command);
    c->command = NULL;
}

int cmd_debug(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "reduce") == 0)
        return cmd_debug_reduce(argc - 1, argv + 1);
    if (strcmp(argv[1], "precision") == 0)
        return cmd_debug_precision(argc - 1, argv + 1);
    return cli_fail("unknown debug command '%s' (reduce, precision)", argv[1]) + 1;
}
