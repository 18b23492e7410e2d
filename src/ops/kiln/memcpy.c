/* kiln.MemcpyToDevice and kiln.MemcpyToHost: the copies placement inserts between memory
 * spaces (ir/placement.h). The executor runs them through the backend's copy. */
#include "ir/placement.h"
#include "ops/op.h"

kiln_status kn_infer_copy(kn_infer_ctx *c) {
    if (c->n_in != 1 || c->n_out != 1 || c->in[0].dtype == 0)
        return kn_error(KILN_ERR_MODEL, "a copy takes one input and makes one output");
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].shape = c->in[0].shape;
    return KILN_OK;
}
