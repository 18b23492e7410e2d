/* NonMaxSuppression: the greedy selection itself lives here because the output's length is
 * the number of selected boxes; inference and the kernel both run it. */
#include "core/alloc.h"
#include "ops/object_detection/nms.h"

#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float score;
    int64_t box;
} cand;

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->box < b->box ? -1 : (a->box > b->box);
}

typedef struct box {
    float y1, x1, y2, x2;
} box;

static box load_box(const float *p, int center) {
    box b;
    if (center) {
        b.x1 = p[0] - p[2] / 2.0f;
        b.x2 = p[0] + p[2] / 2.0f;
        b.y1 = p[1] - p[3] / 2.0f;
        b.y2 = p[1] + p[3] / 2.0f;
    } else {
        b.y1 = p[0] < p[2] ? p[0] : p[2];
        b.y2 = p[0] < p[2] ? p[2] : p[0];
        b.x1 = p[1] < p[3] ? p[1] : p[3];
        b.x2 = p[1] < p[3] ? p[3] : p[1];
    }
    return b;
}

static float iou(box a, box b) {
    float area_a = (a.y2 - a.y1) * (a.x2 - a.x1), area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
    if (area_a <= 0.0f || area_b <= 0.0f)
        return 0.0f;
    float ih = (a.y2 < b.y2 ? a.y2 : b.y2) - (a.y1 > b.y1 ? a.y1 : b.y1);
    float iw = (a.x2 < b.x2 ? a.x2 : b.x2) - (a.x1 > b.x1 ? a.x1 : b.x1);
    if (ih <= 0.0f || iw <= 0.0f)
        return 0.0f;
    float inter = ih * iw;
    return inter / (area_a + area_b - inter);
}

static kiln_status check_inputs(const kn_tensor *in, int n_in) {
    if (n_in < 2 || n_in > 5 || in[0].dtype == 0 || in[1].dtype == 0)
        return kn_error(KILN_ERR_MODEL, "NonMaxSuppression takes boxes, scores and up to three "
                                        "optional inputs");
    if (in[0].dtype != KILN_DTYPE_FLOAT32 || in[1].dtype != KILN_DTYPE_FLOAT32)
        return kn_error(KILN_ERR_DTYPE, "inputs boxes and scores must be float32");
    const kn_shape *bs = &in[0].shape, *ss = &in[1].shape;
    if (bs->rank != 3 || bs->d[2] != 4)
        return kn_error(KILN_ERR_SHAPE, "input boxes must have shape [batch, boxes, 4]");
    if (ss->rank != 3 || ss->d[0] != bs->d[0] || ss->d[2] != bs->d[1])
        return kn_error(KILN_ERR_SHAPE, "input scores must have shape [%lld, classes, %lld]",
                        (long long)bs->d[0], (long long)bs->d[1]);
    static const int32_t types[5] = {0, 0, KILN_DTYPE_INT64, KILN_DTYPE_FLOAT32,
                                     KILN_DTYPE_FLOAT32};
    static const char *const names[5] = {"", "", "max_output_boxes_per_class", "iou_threshold",
                                         "score_threshold"};
    for (int i = 2; i < n_in; i++) {
        if (in[i].dtype == 0)
            continue;
        if (in[i].dtype != types[i])
            return kn_error(KILN_ERR_DTYPE, "input %s must be %s", names[i],
                            kn_dtype_name(types[i]));
        if (kn_shape_numel(&in[i].shape) != 1)
            return kn_error(KILN_ERR_SHAPE, "input %s must hold one value", names[i]);
    }
    return KILN_OK;
}

kiln_status kn_nms_select(const kn_node *n, int n_in, const kn_tensor *in, int64_t **sel,
                          int64_t *count) {
    *sel = NULL;
    *count = 0;
    KN_TRY(check_inputs(in, n_in));
    for (int i = 0; i < n_in; i++)
        if (in[i].dtype != 0 && in[i].data == NULL)
            return KN_NEED_DATA;
    int center = (int)kn_attr_int(n, "center_point_box", 0);
    if (center != 0 && center != 1)
        return kn_error(KILN_ERR_MODEL, "attribute 'center_point_box' must be 0 or 1");
    int64_t max_out = n_in > 2 && in[2].dtype ? ((const int64_t *)in[2].data)[0] : 0;
    float iou_th = n_in > 3 && in[3].dtype ? ((const float *)in[3].data)[0] : 0.0f;
    int has_score_th = n_in > 4 && in[4].dtype;
    float score_th = has_score_th ? ((const float *)in[4].data)[0] : 0.0f;
    int64_t batches = in[0].shape.d[0], nbox = in[0].shape.d[1], classes = in[1].shape.d[1];
    if (max_out <= 0 || nbox == 0)
        return KILN_OK;
    if (max_out > nbox)
        max_out = nbox;
    const float *boxes = in[0].data, *scores = in[1].data;
    cand *cands = kn_malloc(sizeof(cand) * (size_t)nbox);
    box *kept = kn_malloc(sizeof(box) * (size_t)max_out);
    int64_t cap = batches * classes * max_out;
    int64_t *out = kn_malloc(sizeof(int64_t) * (size_t)(3 * cap + 1));
    if (cands == NULL || kept == NULL || out == NULL) {
        kn_free(cands);
        kn_free(kept);
        kn_free(out);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in NonMaxSuppression");
    }
    int64_t total = 0;
    for (int64_t b = 0; b < batches; b++)
        for (int64_t c = 0; c < classes; c++) {
            const float *sc = scores + (b * classes + c) * nbox;
            int64_t nc = 0;
            for (int64_t i = 0; i < nbox; i++)
                if (!has_score_th || sc[i] > score_th)
                    cands[nc++] = (cand){sc[i], i};
            qsort(cands, (size_t)nc, sizeof(cand), cand_cmp);
            int64_t nk = 0;
            for (int64_t i = 0; i < nc && nk < max_out; i++) {
                box bx = load_box(boxes + (b * nbox + cands[i].box) * 4, center);
                int64_t j = 0;
                while (j < nk && !(iou(bx, kept[j]) > iou_th))
                    j++;
                if (j < nk)
                    continue;
                kept[nk++] = bx;
                out[3 * total] = b;
                out[3 * total + 1] = c;
                out[3 * total + 2] = cands[i].box;
                total++;
            }
        }
    kn_free(cands);
    kn_free(kept);
    *sel = out;
    *count = total;
    return KILN_OK;
}

kiln_status kn_infer_nms(kn_infer_ctx *c) {
    int64_t *sel, count;
    kiln_status rc = kn_nms_select(c->node, c->n_in, c->in, &sel, &count);
    if (rc != KILN_OK)
        return rc;
    kn_free(sel);
    if (c->n_out != 1)
        return kn_error(KILN_ERR_MODEL, "NonMaxSuppression has one output");
    c->out[0].dtype = KILN_DTYPE_INT64;
    c->out[0].shape.rank = 2;
    c->out[0].shape.d[0] = count;
    c->out[0].shape.d[1] = 3;
    return KILN_OK;
}
