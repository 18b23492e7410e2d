/* kiln plugin-check: load a plugin library into a fresh registry and exercise every plugin it
 * registers the way builds and engines will: creation, shape rules over a sweep of shapes,
 * format negotiation, enqueue on random data, the fields round trip, clones on several
 * threads and refusal of bad fields. Each check runs in a child process, so a plugin that
 * crashes or hangs fails that check and the report goes on. */
#include "plugin_check.h"

#include "core/alloc.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "plugin/expr.h"
#include "plugin/plugin.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage[] =
    "usage: kiln plugin-check LIB.so [--plugin NAME]\n"
    "\n"
    "Loads LIB.so into a fresh registry and checks every plugin it registers (or only NAME):\n"
    "identity and fields, creation with default fields, output shapes over a sweep of input\n"
    "shapes (ranks 1-5, dims 1..64, zero-size dims), the dtype/layout combinations\n"
    "supports_format claims, enqueue on random inputs (finite, deterministic, same result on 1\n"
    "and 4 threads, no writes past the outputs), get_fields -> create -> get_fields round trip,\n"
    "clones on several threads against a single-threaded run, and clean refusal of mistyped\n"
    "and missing fields. Prints one line per check and exits 1 if any check fails.\n";

/* ---- the checks (each runs in a child process) ------------------------------------------ */

static void check_shapes(const pc_plugin *p, pc_counts *c) {
    pc_shape sw[PC_MAX_SHAPES], in[PC_MAX_IO], out[PC_MAX_IO], out2[PC_MAX_IO];
    int n = sweep_shapes(sw), tried = 0, accepted = 0, refused = 0, zero_refused = 0;
    char msg[512], bad[768] = "", s[128];
    for (int i = 0; i < n; i++) {
        if (!input_shapes(p->n_in, p->pattern, &sw[i], in))
            continue;
        tried++;
        int rc = shapes_of(p, &p->inst, p->n_in, in, p->n_out, out, msg, sizeof msg);
        if (rc == 0 && shapes_of(p, &p->inst, p->n_in, in, p->n_out, out2, msg, sizeof msg) == 0 &&
            memcmp(out, out2, sizeof(pc_shape) * (size_t)p->n_out) != 0) {
            rc = -1;
            snprintf(msg, sizeof msg, "two calls gave different output shapes");
        }
        shape_str(&sw[i], s, sizeof s);
        if (rc < 0 && bad[0] == '\0')
            snprintf(bad, sizeof bad, "input 0 %s: %s", s, msg);
        accepted += rc == 0;
        refused += rc == 1;
        zero_refused += rc == 1 && elems(&sw[i]) == 0;
    }
    if (bad[0] != '\0')
        report(c, 1, "output shapes", "%s", bad);
    else if (accepted == 0)
        report(c, 1, "output shapes", "refused every shape of the sweep (%d tried)", tried);
    else
        report(c, 0, "output shapes",
               "%d shapes (ranks 1-5, dims 0..64): %d accepted, %d refused with a reason%s", tried,
               accepted, refused, zero_refused ? " (zero-size dims among them)" : "");
}

static void check_enqueue(const pc_plugin *p, pc_counts *c) {
    kn_threadpool *pool1 = kn_threadpool_create(1), *pool4 = kn_threadpool_create(PC_THREADS);
    pc_shape s[6];
    int ns = run_shapes(p, s, 6, true);
    for (int t = 0; t < p->n_dtypes; t++) {
        char check[64], msg[512] = "", sh[128];
        snprintf(check, sizeof check, "enqueue %s", kn_dtype_name(p->dtypes[t]));
        bool ok = ns > 0;
        for (int i = 0; i < ns && ok; i++) {
            pc_out a, b, d;
            uint64_t seed = 7 + (uint64_t)i;
            shape_str(&s[i], sh, sizeof sh);
            if (!run_once(p, &p->inst, &s[i], p->dtypes[t], seed, pool4, true, &a, msg,
                          sizeof msg)) {
                report(c, 1, check, "input 0 %s: %s", sh, msg);
                ok = false;
                break;
            }
            const char *why = NULL;
            if (!run_once(p, &p->inst, &s[i], p->dtypes[t], seed, pool4, true, &b, msg, sizeof msg))
                why = msg;
            else if (!same_out(&a, &b))
                why = "two runs on the same input differ";
            out_free(&b);
            if (why == NULL &&
                !run_once(p, &p->inst, &s[i], p->dtypes[t], seed, pool1, true, &d, msg, sizeof msg))
                why = msg;
            else if (why == NULL && !same_out(&a, &d))
                why = "1 and 4 threads give different results";
            out_free(&d);
            out_free(&a);
            if (why != NULL) {
                report(c, 1, check, "input 0 %s: %s", sh, why);
                ok = false;
            }
        }
        if (ok)
            report(c, 0, check,
                   "%d shapes: outputs finite and fully written, deterministic, same on 1 and %d "
                   "threads",
                   ns, PC_THREADS);
        else if (ns == 0)
            report(c, 2, check, "no accepted shape small enough to run");
    }
    kn_threadpool_destroy(pool1);
    kn_threadpool_destroy(pool4);
}

static bool fields_equal(const kiln_field_list *a, const kiln_field_list *b, char *msg,
                         size_t size) {
    if (a->count != b->count) {
        snprintf(msg, size, "%d fields, then %d", a->count, b->count);
        return false;
    }
    for (int i = 0; i < a->count; i++) {
        const kiln_field *x = &a->fields[i], *y = &b->fields[i];
        size_t unit = x->type == KILN_FIELD_INT64 || x->type == KILN_FIELD_INT64S       ? 8
                      : x->type == KILN_FIELD_FLOAT32 || x->type == KILN_FIELD_FLOAT32S ? 4
                                                                                        : 1;
        if (!x->name || !y->name || strcmp(x->name, y->name) != 0 || x->type != y->type ||
            x->count != y->count ||
            (x->count > 0 && memcmp(x->data, y->data, (size_t)x->count * unit) != 0)) {
            snprintf(msg, size, "field %d ('%s') changed", i, x->name ? x->name : "?");
            return false;
        }
    }
    return true;
}

static void check_round_trip(const pc_plugin *p, pc_counts *c) {
    kiln_field_list first = {.count = p->n_defaults, .fields = p->defaults};
    char msg[512] = "";
    clear_error();
    if (p->inst.ops->get_fields && p->inst.ops->get_fields(p->inst.self, &first) != 0) {
        report(c, 1, "fields round trip", "get_fields failed: %s", kiln_last_error());
        return;
    }
    if (first.count < 0 || (first.count > 0 && first.fields == NULL)) {
        report(c, 1, "fields round trip", "get_fields returned a malformed list");
        return;
    }
    kiln_plugin_instance again;
    if (create_with(p, first.fields, first.count, &again) != 0 || ops_problem(&again)) {
        report(c, 1, "fields round trip", "create from get_fields' own fields failed: %s",
               kiln_last_error());
        return;
    }
    kiln_field_list second = {.count = p->n_defaults, .fields = p->defaults};
    bool ok = true;
    if (again.ops->get_fields && again.ops->get_fields(again.self, &second) != 0) {
        snprintf(msg, sizeof msg, "get_fields on the re-created instance failed");
        ok = false;
    }
    ok = ok && fields_equal(&first, &second, msg, sizeof msg);
    pc_shape s[1];
    if (ok && p->n_dtypes > 0 && run_shapes(p, s, 1, false) == 1) {
        pc_out a, b;
        if (run_once(p, &p->inst, &s[0], p->dtypes[0], 3, NULL, true, &a, msg, sizeof msg)) {
            if (run_once(p, &again, &s[0], p->dtypes[0], 3, NULL, true, &b, msg, sizeof msg)) {
                ok = same_out(&a, &b);
                if (!ok)
                    snprintf(msg, sizeof msg, "the re-created instance computes differently");
                out_free(&b);
            }
            out_free(&a);
        }
    }
    again.ops->destroy(again.self);
    if (ok)
        report(c, 0, "fields round trip",
               "%d field(s)%s: get_fields -> create -> get_fields equal, same results", first.count,
               p->inst.ops->get_fields ? "" : " (no get_fields: creation fields)");
    else
        report(c, 1, "fields round trip", "%s", msg);
}

typedef struct pc_thread {
    const pc_plugin *p;
    const pc_shape *shapes;
    const pc_out *ref; /* [2 * PC_THREAD_ITERS]: per (shape, seed) */
    int id;
    bool ok;
    char msg[256];
} pc_thread;

static void *thread_main(void *arg) {
    pc_thread *t = arg;
    const pc_plugin *p = t->p;
    kiln_plugin_instance inst = p->inst;
    if (p->inst.ops->clone && (inst.self = p->inst.ops->clone(p->inst.self)) == NULL) {
        snprintf(t->msg, sizeof t->msg, "clone returned NULL");
        return NULL;
    }
    t->ok = true;
    for (int it = 0; it < PC_THREAD_ITERS && t->ok; it++) {
        int k = (t->id + it) % PC_THREAD_ITERS; /* threads visit the seeds in different orders */
        pc_out o;
        char msg[256] = "";
        if (!run_once(p, &inst, &t->shapes[k % 2], p->dtypes[0], 100 + (uint64_t)k, NULL, false, &o,
                      msg, sizeof msg)) {
            snprintf(t->msg, sizeof t->msg, "%s", msg);
            t->ok = false;
        } else {
            if (!same_out(&o, &t->ref[k])) {
                snprintf(t->msg, sizeof t->msg,
                         "thread %d run %d differs from the single-threaded result", t->id, it);
                t->ok = false;
            }
            out_free(&o);
        }
    }
    if (p->inst.ops->clone)
        p->inst.ops->destroy(inst.self);
    return NULL;
}

static void check_threads(const pc_plugin *p, pc_counts *c) {
    pc_shape s[3];
    int ns = run_shapes(p, s, 3, false);
    if (ns == 3)
        s[0] = s[1], s[1] = s[2];
    if (p->n_dtypes == 0 || ns == 0) {
        report(c, 2, "clones on threads", "nothing runnable to compare");
        return;
    }
    if (ns == 1)
        s[1] = s[0];
    pc_out ref[PC_THREAD_ITERS];
    char msg[256] = "";
    for (int k = 0; k < PC_THREAD_ITERS; k++)
        if (!run_once(p, &p->inst, &s[k % 2], p->dtypes[0], 100 + (uint64_t)k, NULL, false, &ref[k],
                      msg, sizeof msg)) {
            report(c, 1, "clones on threads", "single-threaded reference run: %s", msg);
            for (int j = 0; j < k; j++)
                out_free(&ref[j]);
            return;
        }
    pthread_t th[PC_THREADS];
    pc_thread st[PC_THREADS];
    for (int i = 0; i < PC_THREADS; i++) {
        st[i] = (pc_thread){.p = p, .shapes = s, .ref = ref, .id = i};
        if (pthread_create(&th[i], NULL, thread_main, &st[i]) != 0)
            snprintf(st[i].msg, sizeof st[i].msg, "pthread_create failed");
    }
    const char *bad = NULL;
    for (int i = 0; i < PC_THREADS; i++) {
        if (strcmp(st[i].msg, "pthread_create failed") != 0)
            pthread_join(th[i], NULL);
        if (!st[i].ok && bad == NULL)
            bad = st[i].msg;
    }
    for (int k = 0; k < PC_THREAD_ITERS; k++)
        out_free(&ref[k]);
    if (bad)
        report(c, 1, "clones on threads", "%s", bad);
    else
        report(c, 0, "clones on threads",
               "%d threads x %d runs on %s, bit-identical to the single-threaded run", PC_THREADS,
               PC_THREAD_ITERS, p->inst.ops->clone ? "clones" : "the shared instance");
}

/* A field of a type other than t, with readable data either way. */
static kiln_field wrong_field(const char *name, int32_t t) {
    static const int64_t ints[4] = {3, 5, 7, 9};
    kiln_field f = {.name = name, .type = KILN_FIELD_STRING, .count = 4, .data = "oops"};
    if (t == KILN_FIELD_STRING || t == KILN_FIELD_BYTES)
        f = (kiln_field){.name = name, .type = KILN_FIELD_INT64S, .count = 4, .data = ints};
    return f;
}

static void check_bad_fields(const pc_plugin *p, pc_counts *c) {
    int cases = 0, bad = 0;
    char first[512] = "";
    for (int s = 0; s < p->e->c.n_field_specs; s++) {
        const kiln_field_spec *spec = &p->e->specs[s];
        for (int mode = 0; mode < 2; mode++) {
            if (mode == 1 && !spec->required)
                continue;
            kiln_field f[33];
            int n = 0;
            for (int i = 0; i < p->n_defaults; i++)
                if (strcmp(p->defaults[i].name, spec->name) != 0)
                    f[n++] = p->defaults[i];
            if (mode == 0)
                f[n++] = wrong_field(spec->name, spec->type);
            kiln_plugin_instance inst;
            int32_t rc = create_with(p, f, n, &inst);
            bool given = error_given();
            cases++;
            if (rc == 0 || !given) {
                bad++;
                if (first[0] == '\0')
                    snprintf(first, sizeof first, "%s field '%s' (%s): %s",
                             mode ? "missing required" : "mistyped", spec->name,
                             ftype_name(spec->type),
                             rc == 0 ? "create accepted it" : "refused without set_error");
            }
            if (rc == 0 && inst.ops && inst.ops->destroy)
                inst.ops->destroy(inst.self);
        }
    }
    if (cases == 0)
        report(c, 2, "bad fields", "the plugin declares no fields to mistype");
    else if (bad)
        report(c, 1, "bad fields", "%d of %d bad field sets not refused; first: %s", bad, cases,
               first);
    else
        report(c, 0, "bad fields", "%d mistyped or missing field sets refused with a reason",
               cases);
}

typedef void (*pc_check_fn)(const pc_plugin *p, pc_counts *c);

/* Run one check in a child; a crash or a hang (60 s) is that check's failure. */
static void run_isolated(const char *name, pc_check_fn fn, const pc_plugin *p, pc_counts *total) {
    int fd[2];
    fflush(stdout);
    if (pipe(fd) != 0) {
        report(total, 1, name, "cannot create a pipe");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        alarm(60);
        pc_counts c = {0};
        fn(p, &c);
        fflush(stdout);
        ssize_t w = write(fd[1], &c, sizeof c);
        _exit(w == (ssize_t)sizeof c ? 0 : 3);
    }
    close(fd[1]);
    pc_counts c = {0};
    int status = 0;
    ssize_t got = pid > 0 ? read(fd[0], &c, sizeof c) : -1;
    close(fd[0]);
    if (pid > 0)
        waitpid(pid, &status, 0);
    if (pid < 0)
        report(total, 1, name, "cannot fork");
    else if (WIFSIGNALED(status))
        report(total, 1, name, "crashed with signal %d (%s)", WTERMSIG(status),
               WTERMSIG(status) == SIGALRM ? "timed out after 60 s" : strsignal(WTERMSIG(status)));
    else if (got != (ssize_t)sizeof c)
        report(total, 1, name, "the check exited without a result");
    else {
        total->pass += c.pass;
        total->fail += c.fail;
        total->skip += c.skip;
    }
}

static void list_identity(const pc_plugin *p, pc_counts *c) {
    const kn_creator_entry *e = p->e;
    char specs[1024] = "none";
    size_t u = 0;
    for (int i = 0; i < e->c.n_field_specs && u < sizeof specs; i++)
        u += (size_t)snprintf(specs + u, sizeof specs - u, "%s%s (%s, %s)", i ? ", " : "",
                              e->specs[i].name, ftype_name(e->specs[i].type),
                              e->specs[i].required ? "required" : "optional");
    printf("plugin %s version '%s' namespace '%s'\n", e->name, e->version, e->ns);
    report(c, 0, "identity", "fields: %s", specs);
}

/* Create with defaults and learn inputs, formats and accepted shapes; false stops the rest. */
static bool prepare_plugin(pc_plugin *p, pc_counts *c) {
    default_fields(p);
    if (create_with(p, p->defaults, p->n_defaults, &p->inst) != 0) {
        if (p->n_defaults > 0)
            report(c, 2, "create",
                   "refused spec-derived defaults for its required fields (%s); "
                   "checks that need an instance are skipped",
                   kiln_last_error());
        else
            report(c, 1, "create", "create with no fields failed: %s", kiln_last_error());
        return false;
    }
    const char *why = ops_problem(&p->inst);
    if (why) {
        report(c, 1, "create", "%s", why);
        return false;
    }
    p->n_out = p->inst.ops->num_outputs(p->inst.self);
    if (p->n_out < 1 || p->n_out > PC_MAX_IO) {
        report(c, 1, "create", "num_outputs gave %d (kiln-check handles 1..%d)", p->n_out,
               PC_MAX_IO);
        return false;
    }
    report(c, 0, "create", "%d required field(s) from spec defaults; %d output(s)", p->n_defaults,
           p->n_out);
    if (!discover_inputs(p)) {
        report(c, 1, "inputs",
               "output_shapes refused 1-4 inputs of any tried shape pattern on "
               "[2x3x5x7] (last reason: %s)",
               kiln_last_error());
        return false;
    }
    report(c, 0, "inputs", "%d input(s)%s%s", p->n_in, p->n_in > 1 ? "; later ones shaped " : "",
           p->n_in > 1 ? pat_name[p->pattern] : "");
    char claimed[256] = "", refused[256] = "";
    for (int i = 0; i < PC_N_PROBES; i++) {
        const char *nm = kn_dtype_name(probe_dtypes[i]);
        if (claims(p, probe_dtypes[i], KILN_LAYOUT_LINEAR)) {
            p->dtypes[p->n_dtypes++] = probe_dtypes[i];
            snprintf(claimed + strlen(claimed), sizeof claimed - strlen(claimed), " %s/linear", nm);
        } else {
            snprintf(refused + strlen(refused), sizeof refused - strlen(refused), " %s", nm);
        }
        if (claims(p, probe_dtypes[i], KILN_LAYOUT_NHWC))
            snprintf(claimed + strlen(claimed), sizeof claimed - strlen(claimed), " %s/nhwc", nm);
    }
    if (p->n_dtypes == 0)
        report(c, 1, "formats", "supports_format claims no dtype with the linear layout");
    else
        report(c, 0, "formats", "claims%s; refuses%s", claimed, refused[0] ? refused : " none");
    pc_shape sw[PC_MAX_SHAPES], in[PC_MAX_IO], out[PC_MAX_IO];
    char msg[256];
    int n = sweep_shapes(sw);
    for (int i = 0; i < n && p->n_accepted < PC_MAX_SHAPES; i++)
        if (input_shapes(p->n_in, p->pattern, &sw[i], in) &&
            shapes_of(p, &p->inst, p->n_in, in, p->n_out, out, msg, sizeof msg) == 0)
            p->accepted[p->n_accepted++] = sw[i];
    /* smallest first, so the runs stay quick */
    for (int i = 1; i < p->n_accepted; i++)
        for (int j = i; j > 0 && elems(&p->accepted[j]) < elems(&p->accepted[j - 1]); j--) {
            pc_shape t = p->accepted[j];
            p->accepted[j] = p->accepted[j - 1];
            p->accepted[j - 1] = t;
        }
    return true;
}

static void check_plugin(const kn_creator_entry *e, pc_counts *total) {
    pc_plugin *p = kn_calloc(1, sizeof *p);
    if (p == NULL) {
        report(total, 1, "create", "out of memory");
        return;
    }
    p->e = e;
    p->host = kiln_host_api_get();
    list_identity(p, total);
    bool ready = false;
    /* prepare in the parent: its discoveries feed every later check */
    ready = prepare_plugin(p, total);
    if (ready) {
        run_isolated("output shapes", check_shapes, p, total);
        run_isolated("enqueue", check_enqueue, p, total);
        run_isolated("fields round trip", check_round_trip, p, total);
        run_isolated("clones on threads", check_threads, p, total);
    }
    run_isolated("bad fields", check_bad_fields, p, total);
    if (p->inst.ops && p->inst.ops->destroy)
        p->inst.ops->destroy(p->inst.self);
    kn_free(p);
}

int cmd_plugin_check(int argc, char **argv) {
    const char *lib = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        } else if (strcmp(argv[i], "--plugin") == 0) {
            if (i + 1 >= argc)
                return cli_fail("--plugin needs a plugin name (see kiln plugin-check --help)");
            only = argv[++i];
        } else if (argv[i][0] == '-') {
            return cli_fail("unknown option '%s' for plugin-check (see kiln plugin-check --help)",
                            argv[i]);
        } else if (lib == NULL) {
            lib = argv[i];
        } else {
            return cli_fail("unexpected argument '%s' (see kiln plugin-check --help)", argv[i]);
        }
    }
    if (lib == NULL)
        return cli_fail("plugin-check needs a plugin library (see kiln plugin-check --help)");
    kiln_registry *r = NULL;
    if (kiln_registry_create(&r) != KILN_OK)
        return cli_fail_kiln("plugin registry");
    if (kiln_registry_load_library(r, lib) != KILN_OK) {
        int rc = cli_fail("%s", kiln_last_error());
        kiln_registry_destroy(r);
        return rc;
    }
    pc_counts total = {0};
    int checked = 0;
    char names[512] = "";
    for (int i = 0; i < r->n; i++) {
        size_t u = strlen(names);
        snprintf(names + u, sizeof names - u, "%s%s", u ? ", " : "", r->items[i].name);
        if (only && strcmp(r->items[i].name, only) != 0)
            continue;
        check_plugin(&r->items[i], &total);
        checked++;
    }
    int rc = 0;
    if (checked == 0)
        rc = cli_fail("'%s' registers %s%s%s%s", lib, only ? "no plugin named " : "no plugins",
                      only ? only : "", r->n > 0 ? "; it registers: " : "", r->n > 0 ? names : "");
    else
        printf("plugin-check: %d plugin(s), %d passed, %d failed, %d skipped\n", checked,
               total.pass, total.fail, total.skip);
    kiln_registry_destroy(r);
    return rc ? rc : total.fail > 0;
}
