/* kiln plugin-check: load a plugin library into a fresh registry and exercise every plugin it
 * registers the way builds and engines will: creation, shape rules over a sweep of shapes,
 * format negotiation, enqueue on random data, the fields round trip, clones on several
 * threads and refusal of bad fields. Each check runs in a child process, so a plugin that
 * crashes or hangs fails that check and the report goes on. */
#include "cli.h"

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

#define PC_MAX_IO 8
#define PC_MAX_SHAPES 48
#define PC_MAX_ELEMS (1 << 21) /* largest input enqueue runs on */
#define PC_GUARD 64
#define PC_THREADS 4
#define PC_THREAD_ITERS 6
#define PC_PLACEHOLDER "(no reason given)"

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

/* How inputs after the first are shaped from input 0's dims. */
enum { PAT_SAME, PAT_CHANNEL, PAT_LAST, PAT_ONE, PAT_SCALAR, PAT_COUNT };
static const char *pat_name[] = {"like input 0", "[dims[1]]", "[last dim]", "[1]", "a scalar"};

static const int32_t probe_dtypes[] = {KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT16, KILN_DTYPE_INT32,
                                       KILN_DTYPE_INT64,   KILN_DTYPE_INT8,    KILN_DTYPE_UINT8,
                                       KILN_DTYPE_BOOL};
#define PC_N_PROBES ((int)(sizeof probe_dtypes / sizeof probe_dtypes[0]))

typedef struct pc_shape {
    int rank;
    int64_t d[KILN_PLUGIN_MAX_RANK];
} pc_shape;

/* What the parent learns about one plugin before forking the checks. */
typedef struct pc_plugin {
    const kn_creator_entry *e;
    const kiln_host_api *host;
    kiln_field defaults[32];
    int n_defaults;
    kiln_plugin_instance inst;
    int n_in, n_out, pattern;
    int32_t dtypes[PC_N_PROBES]; /* input dtypes claimed with the linear layout */
    int n_dtypes;
    pc_shape accepted[PC_MAX_SHAPES];
    int n_accepted;
} pc_plugin;

typedef struct pc_counts {
    int pass, fail, skip;
} pc_counts;

typedef struct pc_out {
    void *buf[PC_MAX_IO];
    size_t bytes[PC_MAX_IO];
    int n;
} pc_out;

static void report(pc_counts *c, int kind, const char *check, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void report(pc_counts *c, int kind, const char *check, const char *fmt, ...) {
    static const char *tag[] = {"PASS", "FAIL", "SKIP"};
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("%s  %-22s %s\n", tag[kind], check, msg);
    fflush(stdout);
    if (kind == 0)
        c->pass++;
    else if (kind == 1)
        c->fail++;
    else
        c->skip++;
}

static const char *ftype_name(int32_t t) {
    static const char *n[] = {"?", "int64", "float32", "string", "int64s", "float32s", "bytes"};
    return t >= 1 && t <= 6 ? n[t] : "?";
}

static void clear_error(void) {
    kn_error(KILN_ERR_PLUGIN, PC_PLACEHOLDER);
}

static bool error_given(void) {
    return strcmp(kiln_last_error(), PC_PLACEHOLDER) != 0 && kiln_last_error()[0] != '\0';
}

/* Spec-derived values for required fields: 0, 1.0, "{}", empty arrays and bytes. */
static void default_fields(pc_plugin *p) {
    static const int64_t zero = 0;
    static const float one = 1.0f;
    p->n_defaults = 0;
    for (int i = 0; i < p->e->c.n_field_specs && p->n_defaults < 32; i++) {
        const kiln_field_spec *s = &p->e->specs[i];
        if (!s->required)
            continue;
        kiln_field f = {.name = s->name, .type = s->type, .count = 1, .data = &zero};
        if (s->type == KILN_FIELD_FLOAT32)
            f.data = &one;
        else if (s->type == KILN_FIELD_STRING)
            f.data = "{}", f.count = 2;
        else if (s->type != KILN_FIELD_INT64)
            f.count = 0;
        p->defaults[p->n_defaults++] = f;
    }
}

static int32_t create_with(const pc_plugin *p, const kiln_field *f, int n,
                           kiln_plugin_instance *out) {
    kiln_field_list list = {.count = n, .fields = f};
    memset(out, 0, sizeof *out);
    clear_error();
    return p->e->c.create(&p->e->c, &list, out);
}

static const char *ops_problem(const kiln_plugin_instance *inst) {
    const kiln_plugin_ops *o = inst->ops;
    if (o == NULL)
        return "create returned no function table";
    if (o->abi_version < 1 || o->abi_version > KILN_PLUGIN_ABI_VERSION)
        return "the function table's abi_version is not one this kiln knows";
    if (o->struct_size < offsetof(kiln_plugin_ops, destroy) + sizeof o->destroy)
        return "the function table's struct_size is too small";
    if (!o->num_outputs || !o->output_shapes || !o->enqueue || !o->destroy)
        return "num_outputs, output_shapes, enqueue or destroy is missing";
    return NULL;
}

/* Input shapes for input 0 of shape x under the plugin's pattern. */
static bool input_shapes(int n_in, int pattern, const pc_shape *x, pc_shape *in) {
    in[0] = *x;
    for (int i = 1; i < n_in; i++) {
        memset(&in[i], 0, sizeof in[i]);
        switch (pattern) {
        case PAT_SAME:
            in[i] = *x;
            break;
        case PAT_CHANNEL:
            if (x->rank < 2)
                return false;
            in[i].rank = 1, in[i].d[0] = x->d[1];
            break;
        case PAT_LAST:
            if (x->rank < 1)
                return false;
            in[i].rank = 1, in[i].d[0] = x->d[x->rank - 1];
            break;
        case PAT_ONE:
            in[i].rank = 1, in[i].d[0] = 1;
            break;
        default:
            break;
        }
    }
    return true;
}

/* output_shapes on concrete dims. 0: accepted (out filled), 1: refused with a reason,
 * -1: a broken answer (why in msg). */
static int shapes_of(const pc_plugin *p, const kiln_plugin_instance *inst, int n_in,
                     const pc_shape *in, int n_out, pc_shape *out, char *msg, size_t size) {
    kiln_expr_builder *b = kn_calloc(1, sizeof *b);
    kiln_shape_expr se[2 * PC_MAX_IO];
    if (b == NULL) {
        snprintf(msg, size, "out of memory");
        return -1;
    }
    memset(se, 0, sizeof se);
    for (int i = 0; i < n_in; i++) {
        se[i].rank = in[i].rank;
        for (int d = 0; d < in[i].rank; d++)
            se[i].dims[d] = p->host->expr_constant(b, in[i].d[d]);
    }
    for (int i = 0; i < n_out; i++)
        se[PC_MAX_IO + i].rank = -1;
    clear_error();
    int rc = 0;
    if (inst->ops->output_shapes(inst->self, n_in, se, n_out, se + PC_MAX_IO, b) != 0) {
        rc = error_given() ? 1 : -1;
        snprintf(msg, size, "%s",
                 rc == 1 ? kiln_last_error() : "refused without calling set_error");
    }
    for (int i = 0; i < n_out && rc == 0; i++) {
        const kiln_shape_expr *o = &se[PC_MAX_IO + i];
        if (o->rank < 0 || o->rank > KILN_PLUGIN_MAX_RANK) {
            snprintf(msg, size, "output %d has rank %d (must be 0..%d)", i, o->rank,
                     KILN_PLUGIN_MAX_RANK);
            rc = -1;
            break;
        }
        memset(&out[i], 0, sizeof out[i]);
        out[i].rank = o->rank;
        for (int d = 0; d < o->rank && rc == 0; d++)
            if (!p->host->expr_value(o->dims[d], &out[i].d[d]) || out[i].d[d] < 0) {
                snprintf(msg, size, "output %d dim %d is missing, negative or invalid", i, d);
                rc = -1;
            }
    }
    kn_free(b);
    return rc;
}

static void shape_str(const pc_shape *s, char *buf, size_t size) {
    size_t u = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < s->rank && u < size; d++)
        u += (size_t)snprintf(buf + u, size - u, "%s%lld", d ? "x" : "", (long long)s->d[d]);
    if (u < size)
        snprintf(buf + u, size - u, "]");
}

/* Input count and the shape pattern of inputs after the first: the first combination whose
 * shapes output_shapes accepts on input 0 = [2x3x5x7]. */
static bool discover_inputs(pc_plugin *p) {
    pc_shape x = {.rank = 4, .d = {2, 3, 5, 7}}, in[PC_MAX_IO], out[PC_MAX_IO];
    char msg[512];
    for (int n_in = 1; n_in <= 4; n_in++)
        for (int pat = 0; pat < (n_in == 1 ? 1 : PAT_COUNT); pat++) {
            input_shapes(n_in, pat, &x, in);
            if (shapes_of(p, &p->inst, n_in, in, p->n_out, out, msg, sizeof msg) == 0) {
                p->n_in = n_in;
                p->pattern = pat;
                return true;
            }
        }
    return false;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static int sweep_shapes(pc_shape *s) {
    int n = 0;
    uint64_t seed = 12345;
    static const int64_t fixed[][4] = {{1, 1, 1, 1},  {1, 3, 64, 64}, {64, 64, 64, 64},
                                       {2, 3, 5, 40}, {0, 3, 5, 7},   {2, 3, 0, 7}};
    for (int i = 0; i < 6; i++) {
        s[n].rank = 4;
        memcpy(s[n++].d, fixed[i], sizeof fixed[i]);
    }
    for (int i = 0; i < 24; i++) {
        s[n].rank = 4;
        for (int d = 0; d < 4; d++)
            s[n].d[d] = 1 + (int64_t)(lcg(&seed) % 64);
        n++;
    }
    for (int r = 1; r <= 5; r++)
        for (int k = 0; k < 2; k++) {
            s[n].rank = r;
            for (int d = 0; d < r; d++)
                s[n].d[d] = 1 + (int64_t)(lcg(&seed) % (r > 3 ? 12 : 64));
            n++;
        }
    return n;
}

static int64_t elems(const pc_shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->d[d];
    return n;
}

static void to_desc(const pc_shape *s, int32_t dtype, int32_t layout, kiln_tensor_desc *d) {
    memset(d, 0, sizeof *d);
    d->dtype = dtype, d->layout = layout, d->rank = s->rank;
    memcpy(d->dims, s->d, sizeof d->dims);
}

static bool out_dtypes(const kiln_plugin_instance *inst, int n_in, int32_t dt, int n_out,
                       int32_t *odt) {
    int32_t idt[PC_MAX_IO];
    for (int i = 0; i < n_in; i++)
        idt[i] = dt;
    for (int i = 0; i < n_out; i++)
        odt[i] = dt;
    clear_error();
    return inst->ops->output_dtypes == NULL ||
           inst->ops->output_dtypes(inst->self, n_in, idt, n_out, odt) == 0;
}

/* 1 when the plugin accepts every position with these inputs (outputs from output_dtypes). */
static int claims(const pc_plugin *p, int32_t dt, int32_t layout) {
    pc_shape x = {.rank = 4, .d = {2, 3, 5, 7}}, in[PC_MAX_IO], out[PC_MAX_IO];
    char msg[256];
    int32_t odt[PC_MAX_IO];
    input_shapes(p->n_in, p->pattern, &x, in);
    if (shapes_of(p, &p->inst, p->n_in, in, p->n_out, out, msg, sizeof msg) != 0 ||
        !out_dtypes(&p->inst, p->n_in, dt, p->n_out, odt))
        return 0;
    kiln_tensor_desc descs[2 * PC_MAX_IO];
    for (int i = 0; i < p->n_in; i++)
        to_desc(&in[i], dt, layout, &descs[i]);
    for (int i = 0; i < p->n_out; i++)
        to_desc(&out[i], odt[i], layout, &descs[p->n_in + i]);
    for (int pos = 0; pos < p->n_in + p->n_out; pos++) {
        int32_t ok = p->inst.ops->supports_format
                         ? p->inst.ops->supports_format(p->inst.self, pos, descs, p->n_in, p->n_out)
                         : descs[pos].dtype == KILN_DTYPE_FLOAT32 && layout == KILN_LAYOUT_LINEAR;
        if (!ok || kn_dtype_size(descs[pos].dtype) == 0)
            return 0;
    }
    return 1;
}

static void fill_random(void *buf, int32_t dt, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        double u = (double)lcg(&seed) / 2147483648.0; /* [0, 1) */
        switch (dt) {
        case KILN_DTYPE_FLOAT32:
            ((float *)buf)[i] = (float)(u * 8.0 - 4.0);
            break;
        case KILN_DTYPE_FLOAT16:
            ((uint16_t *)buf)[i] = kn_float_to_half((float)(u * 8.0 - 4.0));
            break;
        case KILN_DTYPE_INT32:
            ((int32_t *)buf)[i] = (int32_t)(u * 17) - 8;
            break;
        case KILN_DTYPE_INT64:
            ((int64_t *)buf)[i] = (int64_t)(u * 17) - 8;
            break;
        case KILN_DTYPE_INT8:
            ((int8_t *)buf)[i] = (int8_t)((int)(u * 17) - 8);
            break;
        default: /* uint8 and bool */
            ((uint8_t *)buf)[i] = (uint8_t)(u * (dt == KILN_DTYPE_BOOL ? 2 : 17));
            break;
        }
    }
}

static void out_free(pc_out *o) {
    for (int i = 0; i < o->n; i++)
        kn_free(o->buf[i]);
    memset(o, 0, sizeof *o);
}

/* One enqueue of inst on input 0 = x with dtype dt and data from seed. Outputs start as all
 * ones bits (NaN for floats) followed by a guard, so unwritten elements and overruns show. */
static bool run_once(const pc_plugin *p, const kiln_plugin_instance *inst, const pc_shape *x,
                     int32_t dt, uint64_t seed, kn_threadpool *pool, bool strict, pc_out *res,
                     char *msg, size_t size) {
    pc_shape in[PC_MAX_IO], out[PC_MAX_IO];
    kiln_tensor_desc din[PC_MAX_IO], dout[PC_MAX_IO];
    int32_t odt[PC_MAX_IO];
    void *ibuf[PC_MAX_IO] = {0}, *ws = NULL;
    bool ok = false;
    msg[0] = '\0';
    memset(res, 0, sizeof *res);
    input_shapes(p->n_in, p->pattern, x, in);
    if (shapes_of(p, inst, p->n_in, in, p->n_out, out, msg, size) != 0)
        return false;
    if (!out_dtypes(inst, p->n_in, dt, p->n_out, odt)) {
        snprintf(msg, size, "output_dtypes: %s", kiln_last_error());
        return false;
    }
    for (int i = 0; i < p->n_in; i++) {
        to_desc(&in[i], dt, KILN_LAYOUT_LINEAR, &din[i]);
        size_t nb = (size_t)elems(&in[i]) * kn_dtype_size(dt);
        if ((ibuf[i] = kn_malloc(nb + 1)) == NULL)
            goto out_release;
        fill_random(ibuf[i], dt, elems(&in[i]), seed * 31 + (uint64_t)i);
    }
    res->n = p->n_out;
    for (int i = 0; i < p->n_out; i++) {
        to_desc(&out[i], odt[i], KILN_LAYOUT_LINEAR, &dout[i]);
        res->bytes[i] = (size_t)elems(&out[i]) * kn_dtype_size(odt[i]);
        if ((res->buf[i] = kn_malloc(res->bytes[i] + PC_GUARD)) == NULL)
            goto out_release;
        memset(res->buf[i], 0xff, res->bytes[i]);
        memset((char *)res->buf[i] + res->bytes[i], 0xcd, PC_GUARD);
    }
    clear_error();
    if (inst->ops->on_shape_change &&
        inst->ops->on_shape_change(inst->self, p->n_in, din, p->n_out, dout) != 0) {
        snprintf(msg, size, "on_shape_change: %s", kiln_last_error());
        goto out_release;
    }
    size_t wsz = inst->ops->workspace_size
                     ? inst->ops->workspace_size(inst->self, p->n_in, din, p->n_out, dout)
                     : 0;
    if (wsz > ((size_t)1 << 32)) {
        snprintf(msg, size, "workspace_size asks for %zu bytes", wsz);
        goto out_release;
    }
    if (wsz && (ws = kn_aligned_alloc(wsz, 64)) == NULL)
        goto out_release;
    kiln_stream stream = {.backend = KILN_BACKEND_CPU, .handle = NULL, .host_private = pool};
    clear_error();
    if (inst->ops->enqueue(inst->self, p->n_in, din, (const void *const *)ibuf, p->n_out, dout,
                           res->buf, ws, &stream) != 0) {
        snprintf(msg, size, "enqueue failed: %s", kiln_last_error());
        goto out_release;
    }
    ok = true;
    for (int i = 0; i < p->n_out && ok; i++) {
        const unsigned char *g = (const unsigned char *)res->buf[i] + res->bytes[i];
        for (int k = 0; k < PC_GUARD && ok; k++)
            if (g[k] != 0xcd) {
                snprintf(msg, size, "enqueue wrote past the end of output %d", i);
                ok = false;
            }
        int64_t n = strict ? elems(&out[i]) : 0;
        for (int64_t k = 0; k < n && ok; k++) {
            float v = odt[i] == KILN_DTYPE_FLOAT32 ? ((const float *)res->buf[i])[k]
                      : odt[i] == KILN_DTYPE_FLOAT16
                          ? kn_half_to_float(((const uint16_t *)res->buf[i])[k])
                          : 0.0f;
            if (!isfinite(v)) {
                snprintf(msg, size,
                         "output %d element %lld of %lld is not finite (unwritten or overflow)", i,
                         (long long)k, (long long)n);
                ok = false;
            }
        }
    }
out_release:
    if (!ok && msg[0] == '\0')
        snprintf(msg, size, "out of memory");
    for (int i = 0; i < p->n_in; i++)
        kn_free(ibuf[i]);
    kn_free(ws);
    if (!ok)
        out_free(res);
    return ok;
}

static bool same_out(const pc_out *a, const pc_out *b) {
    if (a->n != b->n)
        return false;
    for (int i = 0; i < a->n; i++)
        if (a->bytes[i] != b->bytes[i] || memcmp(a->buf[i], b->buf[i], a->bytes[i]) != 0)
            return false;
    return true;
}

/* Up to `max` accepted shapes small enough to run, spread from the smallest to the largest
 * (the accepted list is sorted by size); zero-size ones only when with_zero. */
static int run_shapes(const pc_plugin *p, pc_shape *s, int max, bool with_zero) {
    const pc_shape *ok[PC_MAX_SHAPES];
    int n_ok = 0, n = 0;
    for (int i = 0; i < p->n_accepted; i++) {
        int64_t e = elems(&p->accepted[i]);
        if (e <= PC_MAX_ELEMS && (e > 0 || with_zero))
            ok[n_ok++] = &p->accepted[i];
    }
    for (int k = 0; k < max && k < n_ok; k++)
        s[n++] =
            *ok[max >= n_ok ? k : (int)((int64_t)k * (n_ok - 1) / (max - 1 > 0 ? max - 1 : 1))];
    return n;
}

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
