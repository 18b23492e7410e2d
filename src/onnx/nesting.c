/* protobuf-c unpacks nested messages recursively with no depth limit, so a few megabytes of
 * messages nested inside each other (graph -> node -> attribute -> graph -> ...) overflow the
 * stack. Before unpacking, walk the wire format with the generated descriptors, only to
 * measure how deep messages nest; anything else malformed is left to protobuf-c to refuse. */
#include "onnx/onnx_private.h"

#include <stdbool.h>
#include <stdint.h>

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Returns the deepest nesting found below this message (stopping early past `limit`). */
static int nesting(const uint8_t *p, const uint8_t *end, const ProtobufCMessageDescriptor *d,
                   int depth, int limit) {
    int deepest = depth;
    while (p < end && deepest <= limit) {
        uint64_t tag, len;
        if (!read_varint(&p, end, &tag))
            break;
        switch (tag & 7) {
        case 0:
            if (!read_varint(&p, end, &len))
                return deepest;
            break;
        case 1:
            if (end - p < 8)
                return deepest;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return deepest;
            p += 4;
            break;
        case 2: {
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p))
                return deepest;
            const ProtobufCFieldDescriptor *f =
                tag >> 3 <= UINT32_MAX
                    ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3))
                    : NULL;
            if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                int sub = nesting(p, p + len, f->descriptor, depth + 1, limit);
                if (sub > deepest)
                    deepest = sub;
            }
            p += len;
            break;
        }
        default: /* groups and invalid wire types: protobuf-c refuses them */
            return deepest;
        }
    }
    return deepest;
}

bool kn_onnx_nesting_ok(const void *data, size_t size, const ProtobufCMessageDescriptor *d,
                        int limit) {
    const uint8_t *p = data;
    return nesting(p, p + size, d, 0, limit) <= limit;
}
