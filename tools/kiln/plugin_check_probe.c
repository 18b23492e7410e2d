/* kiln plugin-check: creating, shaping and running a plugin for the checks. */
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

const char *const pat_name[] = {"like input 0", "[dims[1]]", "[last dim]", "[1]", "a scalar"};
const int32_t probe_dtypes[] = {KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT16, KILN_DTYPE_INT32,
                                KILN_DTYPE_INT64,   KILN_DTYPE_INT8,    KILN_DTYPE_UINT8,
                                KILN_DTYPE_BOOL};

void report(pc_counts *c, int kind, const char *check, const char *fmt, ...) {
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

const char *ftype_name(int32_t t) {
    static const char *n[] = {"?", "int64", "float32", "string", "int64s", "float32s", "bytes"};
    return t >= 1 && t <= 6 ? n[t] : "?";
}

void clear_error(void) {
    kn_error(KILN_ERR_PLUGIN, PC_PLACEHOLDER);
}

bool error_given(void) {
    return strcmp(kiln_last_error(), PC_PLACEHOLDER) != 0 && kiln_last_error()[0] != '\0';
}

/* Spec-derived values for required fields: 0, 1.0, "{}", empty arrays and bytes. */
void default_fields(pc_plugin *p) {
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

int32_t create_with(const pc_plugin *p, const kiln_field *f, int n, kiln_plugin_instance *out) {
    kiln_field_list list = {.count = n, .fields = f};
    memset(out, 0, sizeof *out);
    clear_error();
    return p->e->c.create(&p->e->c, &list, out);
}

const char *ops_problem(const kiln_plugin_instance *inst) {
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
bool input_shapes(int n_in, int pattern, const pc_shape *x, pc_shape *in) {
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
int shapes_of(const pc_plugin *p, const kiln_plugin_instance *inst, int n_in, const pc_shape *in,
              int n_out, pc_shape *out, char *msg, size_t size) {
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

void shape_str(const pc_shape *s, char *buf, size_t size) {
    size_t u = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < s->rank && u < size; d++)
        u += (size_t)snprintf(buf + u, size - u, "%s%lld", d ? "x" : "", (long long)s->d[d]);
    if (u < size)
        snprintf(buf + u, size - u, "]");
}

/* Input count and the shape pattern of inputs after the first: the first combination whose
 * shapes output_shapes accepts on input 0 = [2x3x5x7]. */
bool discover_inputs(pc_plugin *p) {
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

uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

int sweep_shapes(pc_shape *s) {
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

int64_t elems(const pc_shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->rank; d++)
        n *= s->d[d];
    return n;
}

void to_desc(const pc_shape *s, int32_t dtype, int32_t layout, kiln_tensor_desc *d) {
    memset(d, 0, sizeof *d);
    d->dtype = dtype, d->layout = layout, d->rank = s->rank;
    memcpy(d->dims, s->d, sizeof d->dims);
}

bool out_dtypes(const kiln_plugin_instance *inst, int n_in, int32_t dt, int n_out, int32_t *odt) {
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
int claims(const pc_plugin *p, int32_t dt, int32_t layout) {
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

void fill_random(void *buf, int32_t dt, int64_t n, uint64_t seed) {
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

void out_free(pc_out *o) {
    for (int i = 0; i < o->n; i++)
        kn_free(o->buf[i]);
    memset(o, 0, sizeof *o);
}

/* One enqueue of inst on input 0 = x with dtype dt and data from seed. Outputs start as all
 * ones bits (NaN for floats) followed by a guard, so unwritten elements and overruns show. */
bool run_once(const pc_plugin *p, const kiln_plugin_instance *inst, const pc_shape *x, int32_t dt,
              uint64_t seed, kn_threadpool *pool, bool strict, pc_out *res, char *msg,
              size_t size) {
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

bool same_out(const pc_out *a, const pc_out *b) {
    if (a->n != b->n)
        return false;
    for (int i = 0; i < a->n; i++)
        if (a->bytes[i] != b->bytes[i] || memcmp(a->buf[i], b->buf[i], a->bytes[i]) != 0)
            return false;
    return true;
}

/* Up to `max` accepted shapes small enough to run, spread from the smallest to the largest
 * (the accepted list is sorted by size); zero-size ones only when with_zero. */
int run_shapes(const pc_plugin *p, pc_shape *s, int max, bool with_zero) {
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
