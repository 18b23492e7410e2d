/* TensorProto -> kn_tensor: raw_data, typed fields and external data, validated against the
 * declared dtype and dims. Used for initializers, tensor attributes and test-data files. */
#include "onnx/onnx_import.h"

#include "core/alloc.h"
#include "core/fileio.h"
#include "core/narrow_dtype.h"
#include "core/strings.h"
#include "onnx/onnx_private.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "raw_data and external data are little-endian; a big-endian host needs byte swapping"
#endif

/* allocator_data, when set, points at a bool that records an allocation failure, so a
 * parse that failed for lack of memory is not reported as a corrupt model. */
static void *pb_alloc(void *user, size_t size) {
    void *p = kn_malloc(size > 0 ? size : 1);
    if (p == NULL && user != NULL)
        *(bool *)user = true;
    return p;
}

static void pb_free(void *user, void *ptr) {
    (void)user;
    kn_free(ptr);
}

ProtobufCAllocator kn_onnx_pb_allocator = {pb_alloc, pb_free, NULL};

kiln_status kn_onnx_one_line_error(kiln_status rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kiln_last_error());
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return kn_error(rc, "%s", msg);
}

kiln_status kn_onnx_check_dtype(int32_t dtype, const char *what) {
    /* every numeric dtype kiln has, bool and string; kiln's container dtype is its own
     * (sequences and optionals), never an ONNX element type */
    if (kn_dtype_size(dtype) != 0 && dtype != KILN_DTYPE_CONTAINER)
        return KILN_OK;
    switch (dtype) {
    case KILN_DTYPE_UNDEFINED:
        return kn_error(KILN_ERR_MODEL, "%s has no data type", what);
    default:
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: data type %d is not supported", what,
                        (int)dtype);
    }
}

/* Strict non-negative decimal. */
static bool parse_u64(const char *s, uint64_t *out) {
    if (s == NULL || *s == '\0')
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        uint64_t digit = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return false;
        v = v * 10 + digit;
    }
    *out = v;
    return true;
}

/* A location must stay inside base_dir: relative, with no ".." component. */
static bool location_is_safe(const char *loc) {
    if (loc[0] == '/' || loc[0] == '\\' || (loc[0] != '\0' && loc[1] == ':'))
        return false;
    const char *p = loc;
    while (*p) {
        const char *e = p;
        while (*e && *e != '/' && *e != '\\')
            e++;
        if (e - p == 2 && p[0] == '.' && p[1] == '.')
            return false;
        p = *e ? e + 1 : e;
    }
    return true;
}

static kiln_status read_external(const Onnx__TensorProto *tp, const char *base_dir,
                                 const char *what, size_t nbytes, void *dst) {
    const char *loc = NULL;
    uint64_t offset = 0, length = 0;
    bool have_length = false;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = tp->external_data[i];
        const char *key = kv->key ? kv->key : "";
        if (strcmp(key, "location") == 0) {
            loc = kv->value;
        } else if (strcmp(key, "offset") == 0) {
            if (!parse_u64(kv->value, &offset))
                return kn_error(KILN_ERR_MODEL, "%s: external data offset '%s' is not a number",
                                what, kv->value ? kv->value : "");
        } else if (strcmp(key, "length") == 0) {
            if (!parse_u64(kv->value, &length))
                return kn_error(KILN_ERR_MODEL, "%s: external data length '%s' is not a number",
                                what, kv->value ? kv->value : "");
            have_length = true;
        }
    }
    if (loc == NULL || loc[0] == '\0')
        return kn_error(KILN_ERR_MODEL, "%s: external data has no location", what);
    if (!location_is_safe(loc))
        return kn_error(KILN_ERR_MODEL,
                        "%s: external data location '%s' must be a relative path inside the "
                        "model's directory",
                        what, loc);
    if (have_length && length != nbytes)
        return kn_error(KILN_ERR_MODEL,
                        "%s: external data length %llu does not match the %zu "
                        "bytes its dtype and dims need",
                        what, (unsigned long long)length, nbytes);

    const char *dir = base_dir != NULL && base_dir[0] != '\0' ? base_dir : ".";
    size_t dl = strlen(dir), ll = strlen(loc);
    char *path = kn_malloc(dl + ll + 2);
    if (path == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    memcpy(path, dir, dl);
    path[dl] = '/';
    memcpy(path + dl + 1, loc, ll + 1);

    const void *map;
    size_t fsize;
    kiln_status rc = kn_file_map(path, &map, &fsize);
    if (rc != KILN_OK) {
        kn_error_prefix(rc, "%s: external data: ", what);
        goto out_free;
    }
    if (offset > fsize || nbytes > fsize - offset) {
        rc = kn_error(KILN_ERR_MODEL,
                      "%s: external data [offset %llu, %zu bytes] lies outside '%s' (%zu bytes)",
                      what, (unsigned long long)offset, nbytes, path, fsize);
    } else {
        memcpy(dst, (const char *)map + offset, nbytes);
    }
    kn_file_unmap(map, fsize);
out_free:
    kn_free(path);
    return rc;
}

/* The typed field that carries this dtype, and how many values it holds. */
static size_t typed_count(const Onnx__TensorProto *tp, int32_t dtype) {
    switch (dtype) {
    case KILN_DTYPE_FLOAT32:
        return tp->n_float_data;
    case KILN_DTYPE_INT64:
        return tp->n_int64_data;
    case KILN_DTYPE_FLOAT64:
        return tp->n_double_data;
    case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64:
        return tp->n_uint64_data;
    default: /* the spec packs every narrower type into int32_data */
        return tp->n_int32_data;
    }
}

static void copy_typed(const Onnx__TensorProto *tp, int32_t dtype, size_t n, void *dst) {
    if (n == 0) /* the field's pointer may be NULL */
        return;
    switch (dtype) {
    case KILN_DTYPE_FLOAT32:
        memcpy(dst, tp->float_data, n * sizeof(float));
        break;
    case KILN_DTYPE_INT64:
        memcpy(dst, tp->int64_data, n * sizeof(int64_t));
        break;
    case KILN_DTYPE_FLOAT64:
        memcpy(dst, tp->double_data, n * sizeof(double));
        break;
    case KILN_DTYPE_UINT64:
        memcpy(dst, tp->uint64_data, n * sizeof(uint64_t));
        break;
    case KILN_DTYPE_UINT32:
        for (size_t i = 0; i < n; i++)
            ((uint32_t *)dst)[i] = (uint32_t)tp->uint64_data[i];
        break;
    case KILN_DTYPE_INT32:
        memcpy(dst, tp->int32_data, n * sizeof(int32_t));
        break;
    case KILN_DTYPE_INT16:
        for (size_t i = 0; i < n; i++)
            ((int16_t *)dst)[i] = (int16_t)tp->int32_data[i];
        break;
    case KILN_DTYPE_UINT16:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: /* 16-bit patterns in the low half */
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = (uint16_t)tp->int32_data[i];
        break;
    case KILN_DTYPE_INT8:
        for (size_t i = 0; i < n; i++)
            ((int8_t *)dst)[i] = (int8_t)tp->int32_data[i];
        break;
    case KILN_DTYPE_UINT8:
    case KILN_DTYPE_FLOAT8E4M3FN: /* one 8-bit code per value */
    case KILN_DTYPE_FLOAT8E4M3FNUZ:
    case KILN_DTYPE_FLOAT8E5M2:
    case KILN_DTYPE_FLOAT8E5M2FNUZ:
    case KILN_DTYPE_FLOAT8E8M0:
    case KILN_DTYPE_UINT4: /* 4- and 2-bit: one packed byte per value here, unpacked by the caller
                            */
    case KILN_DTYPE_INT4:
    case KILN_DTYPE_FLOAT4E2M1:
    case KILN_DTYPE_UINT2:
    case KILN_DTYPE_INT2:
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)dst)[i] = (uint8_t)tp->int32_data[i];
        break;
    case KILN_DTYPE_BOOL:
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)dst)[i] = tp->int32_data[i] != 0;
        break;
    default:
        KN_ASSERT(!"dtype checked by the caller");
    }
}

static kiln_status convert_shape(const Onnx__TensorProto *tp, const char *what, kn_shape *shape,
                                 int64_t *numel) {
    if (tp->n_dims > KN_MAX_RANK)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s has rank %zu; kiln supports at most %d", what,
                        tp->n_dims, KN_MAX_RANK);
    shape->rank = (int32_t)tp->n_dims;
    for (size_t i = 0; i < tp->n_dims; i++) {
        int64_t d = tp->dims[i];
        if (d < 0)
            return kn_error(KILN_ERR_MODEL, "%s: dim %zu is negative (%lld)", what, i,
                            (long long)d);
        shape->d[i] = d;
    }
    /* Also bounds the dims beside a zero, which the element count alone would let through. */
    if (!kn_shape_valid(shape))
        return kn_error(KILN_ERR_MODEL, "%s: dims give more than %lld elements", what,
                        (long long)KN_MAX_ELEMENTS);
    *numel = kn_shape_numel(shape);
    return KILN_OK;
}

/* A string tensor's string_data as one block (core/strings.h). */
static kiln_status convert_strings(const Onnx__TensorProto *tp, const char *what,
                                   const kn_shape *shape, int64_t numel, kn_tensor *t) {
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return kn_error(KILN_ERR_UNSUPPORTED,
                        "%s: string tensors in external data are not "
                        "supported",
                        what);
    if (tp->has_raw_data && tp->raw_data.len > 0)
        return kn_error(KILN_ERR_MODEL,
                        "%s: a string tensor has raw_data; ONNX keeps strings in "
                        "string_data",
                        what);
    if (tp->n_string_data != (size_t)numel) {
        char dims[96];
        return kn_error(KILN_ERR_MODEL, "%s: holds %zu strings but string [%s] needs %lld", what,
                        tp->n_string_data, kn_shape_str(shape, dims, sizeof dims),
                        (long long)numel);
    }
    kn_strings_builder b;
    KN_TRY(kn_strings_begin(&b, shape));
    for (size_t i = 0; i < tp->n_string_data; i++)
        kn_strings_add(&b, (const char *)tp->string_data[i].data, tp->string_data[i].len);
    return kn_strings_finish(&b, t);
}

kiln_status kn_onnx_tensor_convert(const Onnx__TensorProto *tp, const char *base_dir,
                                   const char *what, kn_tensor *t) {
    kn_tensor r = {0};
    r.dtype = tp->has_data_type ? tp->data_type : 0;
    KN_TRY(kn_onnx_check_dtype(r.dtype, what));
    int64_t numel = 0;
    KN_TRY(convert_shape(tp, what, &r.shape, &numel));
    if (tp->segment != NULL)
        return kn_error(KILN_ERR_UNSUPPORTED, "%s: segmented tensors are not supported", what);
    if (r.dtype == KILN_DTYPE_STRING)
        return convert_strings(tp, what, &r.shape, numel, t);

    size_t nbytes = (size_t)numel * kn_dtype_size(r.dtype); /* kiln's buffer */
    /* ONNX packs 4-bit values two per byte and 2-bit ones four, low bits first: what the file
     * holds. */
    int bits = kn_dtype_packed_bits(r.dtype);
    bool packed = bits != 0;
    size_t per = packed ? (size_t)(8 / bits) : 1;
    size_t stored = packed ? ((size_t)numel + per - 1) / per : nbytes;
    char dims[96];
    kn_shape_str(&r.shape, dims, sizeof dims);
    bool external =
        tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    /* An empty raw_data next to typed values is a writer's leftover, not the data. */
    size_t typed = typed_count(tp, r.dtype);
    bool use_raw = !external && tp->has_raw_data && (tp->raw_data.len > 0 || typed == 0);
    if (use_raw && tp->raw_data.len != stored)
        return kn_error(KILN_ERR_MODEL, "%s: raw_data has %zu bytes but %s [%s] needs %zu", what,
                        tp->raw_data.len, kn_dtype_name(r.dtype), dims, stored);
    if (!external && !use_raw && typed != (packed ? stored : (size_t)numel))
        return kn_error(KILN_ERR_MODEL, "%s: holds %zu values but %s [%s] needs %zu", what, typed,
                        kn_dtype_name(r.dtype), dims, packed ? stored : (size_t)numel);

    r.data = kn_malloc(nbytes > 0 ? nbytes : 1);
    if (r.data == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", what, nbytes);
    if (external) {
        kiln_status rc = read_external(tp, base_dir, what, stored, r.data);
        if (rc != KILN_OK) {
            kn_free(r.data);
            return rc;
        }
    } else if (use_raw) {
        if (stored > 0)
            memcpy(r.data, tp->raw_data.data, stored);
    } else {
        copy_typed(tp, r.dtype, packed ? stored : (size_t)numel, r.data);
    }
    if (packed) /* in place, from the end: element i comes from byte i / per */
        for (size_t i = (size_t)numel; i-- > 0;) {
            uint8_t b = ((uint8_t *)r.data)[i / per];
            ((uint8_t *)r.data)[i] =
                (uint8_t)((b >> (i % per * (size_t)bits)) & ((1u << bits) - 1));
        }
    if (r.dtype == KILN_DTYPE_BOOL && (external || use_raw)) {
        uint8_t *p = r.data;
        for (size_t i = 0; i < nbytes; i++)
            p[i] = p[i] != 0;
    }
    *t = r;
    return KILN_OK;
}

static kiln_status tensor_from_bytes(const void *data, size_t size, const char *base_dir,
                                     kn_tensor *t, char **name) {
    if (data == NULL || t == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "tensor bytes or output is NULL");
    bool oom = false;
    ProtobufCAllocator alloc = kn_onnx_pb_allocator;
    alloc.allocator_data = &oom;
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&alloc, size, (const uint8_t *)data);
    if (tp == NULL && oom)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory parsing a TensorProto");
    if (tp == NULL)
        return kn_error(KILN_ERR_MODEL, "not a valid TensorProto (truncated or corrupt bytes)");
    const char *nm = tp->name != NULL ? tp->name : "";
    char what[160];
    snprintf(what, sizeof what, "tensor '%.120s'", nm);
    kiln_status rc = kn_onnx_tensor_convert(tp, base_dir, what, t);
    if (rc == KILN_OK && name != NULL) {
        *name = kn_strdup(nm);
        if (*name == NULL) {
            kn_free(t->data);
            t->data = NULL;
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    onnx__tensor_proto__free_unpacked(tp, &alloc);
    return rc == KILN_OK ? rc : kn_onnx_one_line_error(rc);
}

kiln_status kn_onnx_tensor_from_bytes(const void *data, size_t size, kn_tensor *t, char **name) {
    return tensor_from_bytes(data, size, NULL, t, name);
}

kiln_status kn_onnx_read_tensor_file(const char *path, kn_tensor *t, char **name) {
    void *buf;
    size_t n;
    KN_TRY(kn_file_read(path, &buf, &n));
    const char *slash = strrchr(path, '/');
    char *dir = slash == NULL ? kn_strdup(".") : kn_strndup(path, (size_t)(slash - path));
    kiln_status rc;
    if (dir == NULL)
        rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    else
        rc = tensor_from_bytes(buf, n, dir[0] != '\0' ? dir : "/", t, name);
    kn_free(dir);
    kn_free(buf);
    if (rc != KILN_OK)
        kn_error_prefix(rc, "'%s': ", path);
    return rc;
}
