/* Executing a batch of requests: each request is checked on its own (a bad one gets its error
 * and never stops the others), consecutive good ones whose non-batch shapes agree are gathered
 * along the batch axis into one kiln execute, and the outputs are split back per request. */
#include "backend.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct kt_req {
    TRITONBACKEND_Request *request;
    TRITONBACKEND_Response *response;
    TRITONSERVER_Error *error;
    int64_t batch;                /* rows on the batch axis (1 without one) */
    TRITONBACKEND_Input **inputs; /* in engine input order */
    const int64_t **shapes;       /* per input, as sent */
    int reported;                 /* statistics sent for it */
} kt_req;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void ignore(TRITONSERVER_Error *err) {
    if (err)
        TRITONSERVER_ErrorDelete(err);
}

/* Check a request against the engine: names, dtypes, ranks, the profile, byte sizes. */
static TRITONSERVER_Error *check_request(const kt_model *m, kt_req *r) {
    uint32_t count = 0;
    TRITONSERVER_Error *err = TRITONBACKEND_RequestInputCount(r->request, &count);
    if (err)
        return err;
    if ((int)count != m->n_in)
        return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                        "the model takes %d inputs; the request "
                        "has %u",
                        m->n_in, count);
    r->batch = 1;
    for (int i = 0; i < m->n_in; i++) {
        const kiln_io_info *io = &m->in[i];
        if (TRITONBACKEND_RequestInput(r->request, io->name, &r->inputs[i]) != NULL) {
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG, "the request lacks input '%s'",
                            io->name);
        }
        TRITONSERVER_DataType dt;
        const int64_t *shape;
        uint32_t rank;
        uint64_t bytes;
        if ((err = TRITONBACKEND_InputProperties(r->inputs[i], NULL, &dt, &shape, &rank, &bytes,
                                                 NULL)))
            return err;
        if (kt_from_triton(dt) != io->dtype)
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "input '%s' has type %s; the model takes %s", io->name,
                            kt_triton_type_name(dt), kt_triton_type_name(kt_to_triton(io->dtype)));
        if ((int)rank != io->rank)
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "input '%s' has %u dims; the model takes %d", io->name, rank, io->rank);
        uint64_t n = 1;
        for (int d = 0; d < io->rank; d++) {
            int64_t hi =
                d == 0 && m->max_batch > 0 && m->max_batch < io->max[0] ? m->max_batch : io->max[d];
            if (shape[d] < io->min[d] || shape[d] > hi)
                return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "input '%s' dim %d is %lld; the model takes %lld..%lld", io->name,
                                d, (long long)shape[d], (long long)io->min[d], (long long)hi);
            n *= (uint64_t)shape[d];
        }
        if (bytes != n * kiln_dtype_size(io->dtype))
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                            "input '%s' has %llu bytes; its shape needs %llu", io->name,
                            (unsigned long long)bytes,
                            (unsigned long long)(n * kiln_dtype_size(io->dtype)));
        r->shapes[i] = shape;
        if (m->max_batch > 0) {
            if (i > 0 && shape[0] != r->batch)
                return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "input '%s' has batch %lld; input '%s' has %lld", io->name,
                                (long long)shape[0], m->in[0].name, (long long)r->batch);
            r->batch = shape[0];
        }
    }
    uint32_t outs = 0;
    if ((err = TRITONBACKEND_RequestOutputCount(r->request, &outs)))
        return err;
    for (uint32_t o = 0; o < outs; o++) {
        const char *name;
        if ((err = TRITONBACKEND_RequestOutputName(r->request, o, &name)))
            return err;
        int found = 0;
        for (int k = 0; k < m->n_out; k++)
            found |= strcmp(m->out[k].name, name) == 0;
        if (!found)
            return kt_error(TRITONSERVER_ERROR_INVALID_ARG, "the model has no output '%s'", name);
    }
    return NULL;
}

/* Whether request b can join a batch started by request a. */
static int same_rows(const kt_model *m, const kt_req *a, const kt_req *b) {
    for (int i = 0; i < m->n_in; i++)
        for (int d = 1; d < m->in[i].rank; d++)
            if (a->shapes[i][d] != b->shapes[i][d])
                return 0;
    return 1;
}

/* Copy one input of every request of the batch into one buffer (or bind it in place when the
 * batch is one request with one buffer). */
static TRITONSERVER_Error *bind_input(kt_instance *inst, int i, kt_req *rs, int n, int64_t rows) {
    const kiln_io_info *io = &inst->model->in[i];
    int64_t dims[KILN_MAX_RANK];
    memcpy(dims, rs[0].shapes[i], sizeof(int64_t) * (size_t)io->rank);
    if (inst->model->max_batch > 0)
        dims[0] = rows;
    if (kiln_context_set_input_shape(inst->ctx, io->name, io->rank, dims) != KILN_OK)
        return kt_kiln_error("setting the input shape");
    size_t total = 0;
    for (int r = 0; r < n; r++) {
        uint64_t bytes;
        uint32_t buffers;
        TRITONSERVER_Error *err = TRITONBACKEND_InputProperties(rs[r].inputs[i], NULL, NULL, NULL,
                                                                NULL, &bytes, &buffers);
        if (err)
            return err;
        if (n == 1 && buffers == 1) {
            const void *data;
            uint64_t size;
            TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
            int64_t mt_id = 0;
            if ((err = TRITONBACKEND_InputBuffer(rs[r].inputs[i], 0, &data, &size, &mt, &mt_id)))
                return err;
            if (mt == TRITONSERVER_MEMORY_GPU)
                return kt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                                "input '%s' is in GPU memory; kiln serves from CPU memory",
                                io->name);
            if (kiln_context_set_input(inst->ctx, io->name, data, size) != KILN_OK)
                return kt_kiln_error("binding the input");
            return NULL;
        }
        total += bytes;
    }
    kt_staging *st = &inst->staging[i];
    if (total > st->cap) {
        void *p = realloc(st->data, total);
        if (!p)
            return kt_error(TRITONSERVER_ERROR_INTERNAL, "out of memory gathering input '%s'",
                            io->name);
        st->data = p;
        st->cap = total;
    }
    size_t off = 0;
    for (int r = 0; r < n; r++) {
        uint32_t buffers;
        TRITONSERVER_Error *err =
            TRITONBACKEND_InputProperties(rs[r].inputs[i], NULL, NULL, NULL, NULL, NULL, &buffers);
        if (err)
            return err;
        for (uint32_t b = 0; b < buffers; b++) {
            const void *data;
            uint64_t size;
            TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
            int64_t mt_id = 0;
            if ((err = TRITONBACKEND_InputBuffer(rs[r].inputs[i], b, &data, &size, &mt, &mt_id)))
                return err;
            if (mt == TRITONSERVER_MEMORY_GPU)
                return kt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                                "input '%s' is in GPU memory; kiln serves from CPU memory",
                                io->name);
            if (off + size > total)
                return kt_error(TRITONSERVER_ERROR_INVALID_ARG,
                                "input '%s': the buffers hold more bytes than its shape", io->name);
            memcpy((char *)st->data + off, data, size);
            off += size;
        }
    }
    if (kiln_context_set_input(inst->ctx, io->name, st->data, total) != KILN_OK)
        return kt_kiln_error("binding the input");
    return NULL;
}

/* Send request r the rows [row, row + r->batch) of every output it asked for. */
static TRITONSERVER_Error *respond(kt_instance *inst, kt_req *r, int64_t row, int64_t rows) {
    const kt_model *m = inst->model;
    uint32_t outs = 0;
    TRITONSERVER_Error *err = TRITONBACKEND_RequestOutputCount(r->request, &outs);
    if (err)
        return err;
    for (uint32_t o = 0; o < outs; o++) {
        const char *name;
        if ((err = TRITONBACKEND_RequestOutputName(r->request, o, &name)))
            return err;
        kiln_tensor_view view;
        if (kiln_context_get_output(inst->ctx, name, &view) != KILN_OK)
            return kt_kiln_error("reading an output");
        int64_t dims[KILN_MAX_RANK];
        memcpy(dims, view.dims, sizeof dims);
        size_t offset = 0, size = view.size;
        if (m->max_batch > 0) {
            if (view.rank < 1 || view.dims[0] != rows)
                return kt_error(TRITONSERVER_ERROR_INTERNAL,
                                "output '%s' has %lld rows for a batch of %lld", name,
                                (long long)(view.rank ? view.dims[0] : 0), (long long)rows);
            size = view.size / (size_t)rows * (size_t)r->batch;
            offset = view.size / (size_t)rows * (size_t)row;
            dims[0] = r->batch;
        }
        TRITONBACKEND_Output *out;
        void *buf;
        TRITONSERVER_MemoryType mt = TRITONSERVER_MEMORY_CPU;
        int64_t mt_id = 0;
        if ((err = TRITONBACKEND_ResponseOutput(r->response, &out, name, kt_to_triton(view.dtype),
                                                dims, (uint32_t)view.rank)) ||
            (err = TRITONBACKEND_OutputBuffer(out, &buf, size, &mt, &mt_id)))
            return err;
        if (mt == TRITONSERVER_MEMORY_GPU)
            return kt_error(TRITONSERVER_ERROR_UNSUPPORTED,
                            "output '%s': the server gave GPU memory; kiln serves from CPU memory",
                            name);
        memcpy(buf, (const char *)view.data + offset, size);
    }
    return NULL;
}

static void run_batch(TRITONBACKEND_ModelInstance *instance, kt_instance *inst, kt_req *rs, int n,
                      int64_t rows, uint64_t exec_start) {
    TRITONSERVER_Error *err = NULL;
    uint64_t compute_start = now_ns();
    for (int i = 0; i < inst->model->n_in && !err; i++)
        err = bind_input(inst, i, rs, n, rows);
    if (!err && kiln_context_execute(inst->ctx) != KILN_OK)
        err = kt_kiln_error("execute");
    uint64_t compute_end = now_ns();
    int64_t row = 0;
    for (int r = 0; r < n; r++) {
        rs[r].error =
            err ? TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, TRITONSERVER_ErrorMessage(err))
                : respond(inst, &rs[r], row, rows);
        row += rs[r].batch;
    }
    if (err)
        TRITONSERVER_ErrorDelete(err);
    else
        ignore(TRITONBACKEND_ModelInstanceReportBatchStatistics(
            instance, (uint64_t)rows, exec_start, compute_start, compute_end, now_ns()));
    for (int r = 0; r < n; r++) {
        ignore(TRITONBACKEND_ModelInstanceReportStatistics(instance, rs[r].request,
                                                           rs[r].error == NULL, exec_start,
                                                           compute_start, compute_end, now_ns()));
        rs[r].reported = 1;
    }
}

TRITONSERVER_Error *kt_execute(TRITONBACKEND_ModelInstance *instance, kt_instance *inst,
                               TRITONBACKEND_Request **requests, uint32_t count) {
    const kt_model *m = inst->model;
    uint64_t exec_start = now_ns();
    kt_req *rs = calloc(count, sizeof *rs);
    TRITONBACKEND_Input **inputs = calloc((size_t)count * (size_t)m->n_in + 1, sizeof *inputs);
    const int64_t **shapes = calloc((size_t)count * (size_t)m->n_in + 1, sizeof *shapes);
    if (!rs || !inputs || !shapes) {
        free(rs);
        free(inputs);
        free(shapes);
        return kt_error(TRITONSERVER_ERROR_INTERNAL, "out of memory for %u requests", count);
    }
    for (uint32_t r = 0; r < count; r++) {
        rs[r].request = requests[r];
        rs[r].inputs = inputs + (size_t)r * (size_t)m->n_in;
        rs[r].shapes = shapes + (size_t)r * (size_t)m->n_in;
        rs[r].error = TRITONBACKEND_ResponseNew(&rs[r].response, requests[r]);
        if (!rs[r].error)
            rs[r].error = check_request(m, &rs[r]);
    }
    /* Batch the good requests: a run of consecutive ones with equal rows, up to the maximum. */
    int64_t limit = m->max_batch > 0 ? m->max_batch : 1;
    for (uint32_t r = 0; r < count;) {
        if (rs[r].error) {
            r++;
            continue;
        }
        uint32_t end = r + 1;
        int64_t rows = rs[r].batch;
        while (m->max_batch > 0 && end < count && !rs[end].error && rows + rs[end].batch <= limit &&
               same_rows(m, &rs[r], &rs[end]))
            rows += rs[end++].batch;
        run_batch(instance, inst, rs + r, (int)(end - r), rows, exec_start);
        r = end;
    }
    for (uint32_t r = 0; r < count; r++) {
        if (rs[r].response) {
            ignore(TRITONBACKEND_ResponseSend(rs[r].response, TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                                              rs[r].error));
        }
        if (!rs[r].reported)
            ignore(TRITONBACKEND_ModelInstanceReportStatistics(
                instance, rs[r].request, false, exec_start, exec_start, exec_start, now_ns()));
        if (rs[r].error)
            TRITONSERVER_ErrorDelete(rs[r].error);
        ignore(TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL));
    }
    free(rs);
    free(inputs);
    free(shapes);
    return NULL;
}
