/* Loading a model: its config, its plugins, its engine (a plan, or ONNX built with the profile
 * from the config), the config auto-completed from the engine, and the two checked against
 * each other so a mismatch fails the load rather than a request. */
#include "backend.h"
#include "config_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OOM() kt_error(TRITONSERVER_ERROR_INTERNAL, "out of memory")

void kt_model_free(kt_model *m) {
    if (!m)
        return;
    free(m->in);
    free(m->out);
    kiln_engine_destroy(m->engine);
    kiln_registry_destroy(m->registry);
    free(m);
}

static const char *parameter(const kj_node *config, const char *key) {
    const kj_node *v = kj_get(kj_get(kj_get(config, "parameters"), key), "string_value");
    return v && v->type == KJ_STRING ? v->text : NULL;
}

static TRITONSERVER_Error *load_plugins(kt_model *m, const kj_node *config, const char *model) {
    if (kiln_registry_create(&m->registry) != KILN_OK)
        return kt_kiln_error("creating the plugin registry");
    const char *list = parameter(config, "plugins");
    if (!list) {
        if (kiln_registry_load_env(m->registry) != KILN_OK)
            return kt_kiln_error("loading KILN_PLUGIN_PATH");
        return NULL;
    }
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return OOM();
    for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        if (kiln_registry_load_library(m->registry, p) != KILN_OK) {
            TRITONSERVER_Error *err =
                kt_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': parameter 'plugins': %s",
                         model, kiln_last_error());
            free(copy);
            return err;
        }
    }
    free(copy);
    return NULL;
}

/* dims of a config tensor (without the batch axis); -1 for variable dims. */
static int config_dims(const kj_node *t, int64_t *dims, int max_rank) {
    const kj_node *d = kj_get(t, "dims");
    if (!d || d->type != KJ_ARRAY || (int)d->count > max_rank)
        return -1;
    for (size_t i = 0; i < d->count; i++)
        if (kj_int(d->items[i], &dims[i]) != 0)
            return -1;
    return (int)d->count;
}

static const char *tensor_name(const kj_node *t) {
    const kj_node *n = kj_get(t, "name");
    return n && n->type == KJ_STRING ? n->text : "";
}

/* Build 1/model.onnx with a profile from the config: every input's dims must be fixed; with
 * max_batch_size the batch axis spans 1..max_batch_size. */
/* Whether the config asks for a GPU instance (Triton fills instance_group before loading). */
static int wants_gpu(const kj_node *config) {
    const kj_node *groups = kj_get(config, "instance_group");
    for (size_t i = 0; groups && groups->type == KJ_ARRAY && i < groups->count; i++) {
        const kj_node *kind = kj_get(groups->items[i], "kind");
        if (kind && kind->type == KJ_STRING && strcmp(kind->text, "KIND_GPU") == 0)
            return 1;
    }
    return 0;
}

/* The parameters `backends` (comma-separated, default "cuda,cpu" for a model with a GPU
 * instance, else "cpu") and `precision` (fp32, tf32, fp16, bf16) of a build at load. */
static TRITONSERVER_Error *build_options(kiln_build_config *cfg, const kj_node *config,
                                         const char *model) {
    const char *list = parameter(config, "backends");
    if (!list && wants_gpu(config))
        list = "cuda,cpu";
    if (list) {
        char copy[256];
        const char *names[8];
        int n = 0;
        snprintf(copy, sizeof copy, "%s", list);
        char *save = NULL;
        for (char *p = strtok_r(copy, ", ", &save); p && n < 8; p = strtok_r(NULL, ", ", &save))
            names[n++] = p;
        if (kiln_build_config_set_backends(cfg, names, n) != KILN_OK)
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': parameter 'backends': %s",
                            model, kiln_last_error());
    }
    const char *precision = parameter(config, "precision");
    if (precision) {
        static const char *const names[] = {"fp32", "tf32", "fp16", "bf16"};
        int p = 0;
        while (p < 4 && strcmp(precision, names[p]) != 0)
            p++;
        if (p == 4 || kiln_build_config_set_precision(cfg, (kiln_precision)p) != KILN_OK)
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "model '%s': parameter 'precision' is '%s' (one of fp32, tf32, "
                            "fp16, bf16)",
                            model, precision);
    }
    return NULL;
}

static TRITONSERVER_Error *build_onnx(kt_model *m, const kj_node *config, const char *path,
                                      const char *model) {
    const kj_node *inputs = kj_get(config, "input");
    if (!inputs || inputs->type != KJ_ARRAY || inputs->count == 0)
        return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "model '%s': building %s needs the config's inputs with their dims "
                        "(or give a kiln plan, 1/model.plan, whose inputs the config can "
                        "leave out)",
                        model, path);
    kiln_builder *b = NULL;
    kiln_network *net = NULL;
    kiln_build_config *cfg = NULL;
    void *plan = NULL;
    size_t size = 0;
    TRITONSERVER_Error *err = NULL;
    if (kiln_builder_create(&b) != KILN_OK ||
        kiln_builder_set_registry(b, m->registry) != KILN_OK ||
        kiln_build_config_create(&cfg) != KILN_OK) {
        err = kt_kiln_error("creating the builder");
        goto done;
    }
    if (kiln_network_from_onnx_file(b, path, &net) != KILN_OK) {
        err = kt_kiln_error("importing the ONNX model");
        goto done;
    }
    for (size_t i = 0; i < inputs->count; i++) {
        const kj_node *t = inputs->items[i];
        int64_t dims[KILN_MAX_RANK], mn[KILN_MAX_RANK], mx[KILN_MAX_RANK];
        int batched = m->max_batch > 0;
        int rank = config_dims(t, dims + batched, KILN_MAX_RANK - batched);
        if (rank < 0) {
            err = kt_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': input '%s': bad dims",
                           model, tensor_name(t));
            goto done;
        }
        rank += batched;
        for (int d = batched; d < rank; d++)
            if (dims[d] < 0) {
                err = kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                               "model '%s': input '%s': dim %d is variable (-1); building from "
                               "ONNX needs fixed dims (or build a plan with a profile: kiln "
                               "build --shapes)",
                               model, tensor_name(t), d - batched);
                goto done;
            }
        memcpy(mn, dims, sizeof dims);
        memcpy(mx, dims, sizeof dims);
        if (batched)
            mn[0] = 1, mx[0] = m->max_batch;
        if (kiln_build_config_add_profile(cfg, tensor_name(t), rank, mn, mx, mx) != KILN_OK) {
            err = kt_kiln_error("setting the profile");
            goto done;
        }
    }
    if (m->threads > 0)
        kiln_build_config_set_threads(cfg, m->threads);
    if ((err = build_options(cfg, config, model)))
        goto done;
    if (kiln_build(b, net, cfg, &plan, &size) != KILN_OK) {
        err = kt_kiln_error("building the ONNX model");
        goto done;
    }
    if (kiln_engine_load_memory(plan, size, m->registry, &m->engine) != KILN_OK)
        err = kt_kiln_error("loading the built plan");
done:
    kiln_free(plan);
    kiln_build_config_destroy(cfg);
    kiln_network_destroy(net);
    kiln_builder_destroy(b);
    return err;
}

/* Whether every input and output has a dynamic first axis the profile lets start at 1: then
 * that axis is Triton's batch axis, up to the smallest profile max. */
static int engine_batch_max(const kt_model *m) {
    int64_t mx = INT64_MAX;
    for (int i = 0; i < m->n_in; i++) {
        if (m->in[i].rank < 1 || !m->in[i].symbols[0] || m->in[i].min[0] > 1)
            return 0;
        mx = m->in[i].max[0] < mx ? m->in[i].max[0] : mx;
    }
    for (int i = 0; i < m->n_out; i++)
        if (m->out[i].rank < 1 || !m->out[i].symbols[0])
            return 0;
    return mx > INT32_MAX ? INT32_MAX : (int)mx;
}

static kj_node *tensor_json(const kiln_io_info *io, int skip_batch, int is_input) {
    kj_node *t = kj_new(KJ_OBJECT), *dims = kj_new(KJ_ARRAY);
    if (!t || !dims || kj_set(t, "name", kj_new_string(io->name)) != 0 ||
        kj_set(t, "data_type", kj_new_string(kt_config_type(io->dtype))) != 0) {
        kj_free(t);
        kj_free(dims);
        return NULL;
    }
    for (int d = skip_batch; d < io->rank; d++) {
        int fixed = is_input ? io->min[d] == io->max[d] : !io->symbols[d];
        if (kj_push(dims, kj_new_int(fixed ? io->dims[d] : -1)) != 0) {
            kj_free(t);
            return NULL;
        }
    }
    if (kj_set(t, "dims", dims) != 0) {
        kj_free(t);
        return NULL;
    }
    return t;
}

static int empty_array(const kj_node *n) {
    return !n || n->type != KJ_ARRAY || n->count == 0;
}

/* Fill what the user left out: inputs, outputs, max_batch_size (with dynamic batching on). */
static TRITONSERVER_Error *auto_complete(TRITONBACKEND_Model *model, kt_model *m, kj_node *config,
                                         const char *name) {
    bool enabled = false;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelAutoCompleteConfig(model, &enabled);
    if (err || !enabled)
        return err;
    int changed = 0, batch_max = engine_batch_max(m);
    if (m->max_batch == 0 && batch_max > 0 && empty_array(kj_get(config, "input"))) {
        m->max_batch = batch_max;
        if (kj_set(config, "max_batch_size", kj_new_int(batch_max)) != 0)
            return OOM();
        if (!kj_get(config, "dynamic_batching") && !kj_get(config, "sequence_batching") &&
            kj_set(config, "dynamic_batching", kj_new(KJ_OBJECT)) != 0)
            return OOM();
        changed = 1;
    }
    const struct {
        const char *key;
        const kiln_io_info *io;
        int n, is_input;
    } lists[] = {{"input", m->in, m->n_in, 1}, {"output", m->out, m->n_out, 0}};
    for (int l = 0; l < 2; l++) {
        if (!empty_array(kj_get(config, lists[l].key)))
            continue;
        kj_node *arr = kj_new(KJ_ARRAY);
        if (!arr)
            return OOM();
        for (int i = 0; i < lists[l].n; i++)
            if (kj_push(arr, tensor_json(&lists[l].io[i], m->max_batch > 0, lists[l].is_input)) !=
                0) {
                kj_free(arr);
                return OOM();
            }
        if (kj_set(config, lists[l].key, arr) != 0)
            return OOM();
        changed = 1;
    }
    if (!changed)
        return NULL;
    size_t len;
    char *text = kj_write(config, &len);
    if (!text)
        return OOM();
    TRITONSERVER_Message *msg;
    err = TRITONSERVER_MessageNewFromSerializedJson(&msg, text, len);
    free(text);
    if (err)
        return err;
    err = TRITONBACKEND_ModelSetConfig(model, 1, msg);
    TRITONSERVER_MessageDelete(msg);
    if (!err)
        kt_log(TRITONSERVER_LOG_INFO, "model '%s': config completed from the kiln engine", name);
    return err;
}

/* The config and the engine agree: same names and dtypes, a batch axis the engine has. */
static TRITONSERVER_Error *check_config(const kt_model *m, const kj_node *config,
                                        const char *name) {
    if (m->max_batch > 0) {
        int batch_max = engine_batch_max(m);
        if (batch_max == 0)
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "model '%s': max_batch_size %d needs a dynamic first axis on every "
                            "input and output of the kiln engine (profile min 1); set "
                            "max_batch_size: 0",
                            name, m->max_batch);
        if (m->max_batch > batch_max)
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "model '%s': max_batch_size %d exceeds the engine's profile, whose "
                            "batch axis goes up to %d",
                            name, m->max_batch, batch_max);
    }
    const struct {
        const char *key;
        const kiln_io_info *io;
        int n;
    } lists[] = {{"input", m->in, m->n_in}, {"output", m->out, m->n_out}};
    for (int l = 0; l < 2; l++) {
        const kj_node *arr = kj_get(config, lists[l].key);
        for (size_t i = 0; arr && arr->type == KJ_ARRAY && i < arr->count; i++) {
            const char *tname = tensor_name(arr->items[i]);
            const kiln_io_info *io = NULL;
            for (int k = 0; k < lists[l].n; k++)
                if (strcmp(lists[l].io[k].name, tname) == 0)
                    io = &lists[l].io[k];
            if (!io)
                return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "model '%s': config %s '%s' is not one of the engine's", name,
                                lists[l].key, tname);
            const kj_node *dt = kj_get(arr->items[i], "data_type");
            if (dt && dt->type == KJ_STRING && kt_from_config_type(dt->text) != io->dtype)
                return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "model '%s': config %s '%s' has %s; the engine's is %s", name,
                                lists[l].key, tname, dt->text,
                                kt_config_type(io->dtype) ? kt_config_type(io->dtype) : "?");
        }
    }
    return NULL;
}

static TRITONSERVER_Error *read_io(kt_model *m) {
    m->n_in = kiln_engine_num_inputs(m->engine);
    m->n_out = kiln_engine_num_outputs(m->engine);
    m->in = calloc((size_t)m->n_in + 1, sizeof *m->in);
    m->out = calloc((size_t)m->n_out + 1, sizeof *m->out);
    if (!m->in || !m->out)
        return OOM();
    for (int i = 0; i < m->n_in; i++)
        if (kiln_engine_input_info(m->engine, i, &m->in[i]) != KILN_OK)
            return kt_kiln_error("reading the engine's inputs");
    for (int i = 0; i < m->n_out; i++)
        if (kiln_engine_output_info(m->engine, i, &m->out[i]) != KILN_OK)
            return kt_kiln_error("reading the engine's outputs");
    for (int i = 0; i < m->n_in + m->n_out; i++) {
        const kiln_io_info *io = i < m->n_in ? &m->in[i] : &m->out[i - m->n_in];
        if (kt_to_triton(io->dtype) == TRITONSERVER_TYPE_INVALID)
            return kt_error(TRITONSERVER_ERROR_UNSUPPORTED, "tensor '%s': dtype %s is not served",
                            io->name, kiln_dtype_name(io->dtype));
    }
    return NULL;
}

TRITONSERVER_Error *kt_model_load(TRITONBACKEND_Model *model, kt_model **out) {
    const char *name = "?", *location = NULL;
    uint64_t version = 0;
    TRITONBACKEND_ArtifactType artifact;
    TRITONSERVER_Message *msg = NULL;
    TRITONSERVER_Error *err;
    if ((err = TRITONBACKEND_ModelName(model, &name)) ||
        (err = TRITONBACKEND_ModelVersion(model, &version)) ||
        (err = TRITONBACKEND_ModelRepository(model, &artifact, &location)) ||
        (err = TRITONBACKEND_ModelConfig(model, 1, &msg)))
        return err;
    const char *json;
    size_t len;
    kj_node *config = NULL;
    char perr[160];
    if (!(err = TRITONSERVER_MessageSerializeToJson(msg, &json, &len)) &&
        !(config = kj_parse(json, len, perr, sizeof perr)))
        err = kt_error(TRITONSERVER_ERROR_INVALID_ARG, "model '%s': %s", name, perr);
    TRITONSERVER_MessageDelete(msg);
    if (err)
        return err;
    kt_model *m = calloc(1, sizeof *m);
    if (!m) {
        kj_free(config);
        return OOM();
    }
    int64_t v = 0;
    if (kj_int(kj_get(config, "max_batch_size"), &v) == 0)
        m->max_batch = (int)v;
    const char *threads = parameter(config, "threads");
    if (threads)
        m->threads = atoi(threads);
    char path[4096];
    if ((err = load_plugins(m, config, name)))
        goto fail;
    snprintf(path, sizeof path, "%s/%" PRIu64 "/model.plan", location, version);
    if (access(path, R_OK) == 0) {
        if (kiln_engine_load_file(path, m->registry, &m->engine) != KILN_OK) {
            err = kt_kiln_error("loading model.plan");
            goto fail;
        }
    } else {
        snprintf(path, sizeof path, "%s/%" PRIu64 "/model.onnx", location, version);
        if (access(path, R_OK) != 0) {
            err = kt_error(TRITONSERVER_ERROR_NOT_FOUND,
                           "model '%s': neither %s/%" PRIu64 "/model.plan nor model.onnx exists",
                           name, location, version);
            goto fail;
        }
        if ((err = build_onnx(m, config, path, name)))
            goto fail;
    }
    if ((err = read_io(m)) || (err = auto_complete(model, m, config, name)) ||
        (err = check_config(m, config, name)))
        goto fail;
    kt_log(TRITONSERVER_LOG_INFO,
           "model '%s' version %" PRIu64 ": %s, %d inputs, %d outputs, "
           "max_batch_size %d",
           name, version, path, m->n_in, m->n_out, m->max_batch);
    kj_free(config);
    *out = m;
    return NULL;
fail:
    kj_free(config);
    kt_model_free(m);
    return err;
}
