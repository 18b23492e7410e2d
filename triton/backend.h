/* kiln's Triton backend: one kiln engine per model (loaded from 1/model.plan or built at load
 * from 1/model.onnx), one kiln context per model instance. See docs/triton.md. */
#ifndef KILN_TRITON_BACKEND_H
#define KILN_TRITON_BACKEND_H

#include "triton_api.h"

#include <kiln/kiln.h>

typedef struct kt_model {
    kiln_registry *registry;
    kiln_engine *engine;
    int max_batch; /* the config's max_batch_size: 0 = no batch axis in the config */
    int threads;   /* threads of each instance's context (0: kiln's default) */
    int n_in, n_out;
    kiln_io_info *in, *out; /* names owned by the engine */
} kt_model;

typedef struct kt_staging {
    void *data;
    size_t cap;
} kt_staging;

typedef struct kt_instance {
    kt_model *model;
    kiln_context *ctx;
    kt_staging *staging; /* one per input: requests of a batch are gathered here */
} kt_instance;

/* A Triton error with a formatted one-line message. */
TRITONSERVER_Error *kt_error(TRITONSERVER_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A Triton error from the last failed kiln call, prefixed with what was being done. */
TRITONSERVER_Error *kt_kiln_error(const char *what);
void kt_log(TRITONSERVER_LogLevel level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

TRITONSERVER_DataType kt_to_triton(kiln_dtype dtype);
kiln_dtype kt_from_triton(TRITONSERVER_DataType dtype);
const char *kt_config_type(kiln_dtype dtype); /* "TYPE_FP32", or NULL */
kiln_dtype kt_from_config_type(const char *name);
const char *kt_triton_type_name(TRITONSERVER_DataType dtype); /* "FP32" */

TRITONSERVER_Error *kt_model_load(TRITONBACKEND_Model *model, kt_model **out);
void kt_model_free(kt_model *m);

TRITONSERVER_Error *kt_execute(TRITONBACKEND_ModelInstance *instance, kt_instance *inst,
                               TRITONBACKEND_Request **requests, uint32_t count);

#endif
