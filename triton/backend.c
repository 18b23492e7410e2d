/* The entry points Triton calls (TRITONBACKEND_Initialize ... ModelInstanceExecute), errors,
 * logging and the dtype tables. */
#include "backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TRITONSERVER_Error *kt_error(TRITONSERVER_Error_Code code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return TRITONSERVER_ErrorNew(code, msg);
}

TRITONSERVER_Error *kt_kiln_error(const char *what) {
    return kt_error(TRITONSERVER_ERROR_INVALID_ARG, "kiln: %s: %s", what, kiln_last_error());
}

void kt_log(TRITONSERVER_LogLevel level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    TRITONSERVER_Error *err = TRITONSERVER_LogMessage(level, __FILE__, __LINE__, msg);
    if (err)
        TRITONSERVER_ErrorDelete(err);
}

static const struct {
    kiln_dtype kiln;
    TRITONSERVER_DataType triton;
    const char *config; /* model config's DataType name */
    const char *name;   /* Triton's wire name */
} dtypes[] = {
    {KILN_DTYPE_BOOL, TRITONSERVER_TYPE_BOOL, "TYPE_BOOL", "BOOL"},
    {KILN_DTYPE_UINT8, TRITONSERVER_TYPE_UINT8, "TYPE_UINT8", "UINT8"},
    {KILN_DTYPE_UINT16, TRITONSERVER_TYPE_UINT16, "TYPE_UINT16", "UINT16"},
    {KILN_DTYPE_UINT32, TRITONSERVER_TYPE_UINT32, "TYPE_UINT32", "UINT32"},
    {KILN_DTYPE_UINT64, TRITONSERVER_TYPE_UINT64, "TYPE_UINT64", "UINT64"},
    {KILN_DTYPE_INT8, TRITONSERVER_TYPE_INT8, "TYPE_INT8", "INT8"},
    {KILN_DTYPE_INT16, TRITONSERVER_TYPE_INT16, "TYPE_INT16", "INT16"},
    {KILN_DTYPE_INT32, TRITONSERVER_TYPE_INT32, "TYPE_INT32", "INT32"},
    {KILN_DTYPE_INT64, TRITONSERVER_TYPE_INT64, "TYPE_INT64", "INT64"},
    {KILN_DTYPE_FLOAT16, TRITONSERVER_TYPE_FP16, "TYPE_FP16", "FP16"},
    {KILN_DTYPE_FLOAT32, TRITONSERVER_TYPE_FP32, "TYPE_FP32", "FP32"},
    {KILN_DTYPE_FLOAT64, TRITONSERVER_TYPE_FP64, "TYPE_FP64", "FP64"},
    {KILN_DTYPE_BFLOAT16, TRITONSERVER_TYPE_BF16, "TYPE_BF16", "BF16"},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

TRITONSERVER_DataType kt_to_triton(kiln_dtype dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].kiln == dtype)
            return dtypes[i].triton;
    return TRITONSERVER_TYPE_INVALID;
}

kiln_dtype kt_from_triton(TRITONSERVER_DataType dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].triton == dtype)
            return dtypes[i].kiln;
    return KILN_DTYPE_UNDEFINED;
}

const char *kt_config_type(kiln_dtype dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].kiln == dtype)
            return dtypes[i].config;
    return NULL;
}

kiln_dtype kt_from_config_type(const char *name) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(dtypes[i].config, name) == 0)
            return dtypes[i].kiln;
    return KILN_DTYPE_UNDEFINED;
}

const char *kt_triton_type_name(TRITONSERVER_DataType dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].triton == dtype)
            return dtypes[i].name;
    return dtype == TRITONSERVER_TYPE_BYTES ? "BYTES" : "INVALID";
}

TRITONSERVER_Error *TRITONBACKEND_Initialize(TRITONBACKEND_Backend *backend) {
    const char *name = "kiln";
    TRITONSERVER_Error *err = TRITONBACKEND_BackendName(backend, &name);
    if (err)
        return err;
    uint32_t major, minor;
    if ((err = TRITONBACKEND_ApiVersion(&major, &minor)))
        return err;
    if (major != KILN_TRITONBACKEND_API_MAJOR || minor < KILN_TRITONBACKEND_API_MINOR)
        return kt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                        "backend '%s' (kiln %s) needs Triton's backend API %d.%d or a later 1.x; "
                        "this server has %u.%u",
                        name, kiln_version_string(), KILN_TRITONBACKEND_API_MAJOR,
                        KILN_TRITONBACKEND_API_MINOR, major, minor);
    kt_log(TRITONSERVER_LOG_INFO, "backend '%s': kiln %s, Triton backend API %u.%u", name,
           kiln_version_string(), major, minor);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_Finalize(TRITONBACKEND_Backend *backend) {
    (void)backend;
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model *model) {
    kt_model *m;
    TRITONSERVER_Error *err = kt_model_load(model, &m);
    if (err)
        return err;
    if ((err = TRITONBACKEND_ModelSetState(model, m)))
        kt_model_free(m);
    return err;
}

TRITONSERVER_Error *TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model *model) {
    void *state = NULL;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelState(model, &state);
    if (err)
        return err;
    kt_model_free(state);
    return NULL;
}

static void instance_free(kt_instance *inst) {
    if (!inst)
        return;
    if (inst->staging)
        for (int i = 0; i < inst->model->n_in; i++)
            free(inst->staging[i].data);
    free(inst->staging);
    kiln_context_destroy(inst->ctx);
    free(inst);
}

/* A KIND_GPU instance runs a plan placed on a device backend (CUDA) on GPU 0, the one device
 * kiln uses; a KIND_CPU instance needs a plan that runs on the host alone. */
static TRITONSERVER_Error *check_kind(TRITONBACKEND_ModelInstance *instance, const char *name,
                                      TRITONSERVER_InstanceGroupKind kind, const kt_model *m) {
    const char *device = kiln_engine_device_backend(m->engine);
    if (kind == TRITONSERVER_INSTANCEGROUPKIND_GPU) {
        int32_t id = 0;
        TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceDeviceId(instance, &id);
        if (err)
            return err;
        if (!device) {
            /* Triton makes instances KIND_GPU by default on a GPU machine: a CPU plan still
             * serves, and the log says how to use the GPU. */
            kt_log(TRITONSERVER_LOG_WARN,
                   "instance '%s' is KIND_GPU but the model's plan runs on the host only, so it "
                   "runs on the CPU; build it with kiln build --backend cuda,cpu (or, for "
                   "model.onnx, parameter backends \"cuda,cpu\") to use the GPU",
                   name);
            return NULL;
        }
        if (id != 0)
            return kt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                            "instance '%s': kiln runs on GPU 0 only, not GPU %d; set "
                            "instance_group [{ kind: KIND_GPU, gpus: [0] }] (or "
                            "CUDA_VISIBLE_DEVICES to choose the GPU)",
                            name, (int)id);
        return NULL;
    }
    if (kind != TRITONSERVER_INSTANCEGROUPKIND_CPU)
        return kt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                        "instance '%s': kiln runs KIND_CPU and KIND_GPU instances only", name);
    if (device)
        return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "instance '%s' is KIND_CPU but the model's plan places layers on '%s': "
                        "use instance_group [{ kind: KIND_GPU }], or a plan built for the CPU",
                        name, device);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance *instance) {
    const char *name = "?";
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceName(instance, &name);
    if (err)
        return err;
    TRITONSERVER_InstanceGroupKind kind;
    if ((err = TRITONBACKEND_ModelInstanceKind(instance, &kind)))
        return err;
    TRITONBACKEND_Model *model;
    void *state;
    if ((err = TRITONBACKEND_ModelInstanceModel(instance, &model)) ||
        (err = TRITONBACKEND_ModelState(model, &state)))
        return err;
    if ((err = check_kind(instance, name, kind, state)))
        return err;
    kt_instance *inst = calloc(1, sizeof *inst);
    if (!inst)
        return kt_error(TRITONSERVER_ERROR_INTERNAL, "instance '%s': out of memory", name);
    inst->model = state;
    inst->staging = calloc((size_t)inst->model->n_in, sizeof *inst->staging);
    if (!inst->staging) {
        instance_free(inst);
        return kt_error(TRITONSERVER_ERROR_INTERNAL, "instance '%s': out of memory", name);
    }
    if (kiln_context_create(inst->model->engine, &inst->ctx) != KILN_OK ||
        (inst->model->threads > 0 &&
         kiln_context_set_threads(inst->ctx, inst->model->threads) != KILN_OK)) {
        err = kt_kiln_error("creating the instance's context");
        instance_free(inst);
        return err;
    }
    if ((err = TRITONBACKEND_ModelInstanceSetState(instance, inst)))
        instance_free(inst);
    return err;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance *instance) {
    void *state = NULL;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceState(instance, &state);
    if (err)
        return err;
    instance_free(state);
    return NULL;
}

TRITONSERVER_Error *TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance *instance,
                                                       TRITONBACKEND_Request **requests,
                                                       const uint32_t request_count) {
    void *state = NULL;
    TRITONSERVER_Error *err = TRITONBACKEND_ModelInstanceState(instance, &state);
    if (err)
        return err;
    return kt_execute(instance, state, requests, request_count);
}
