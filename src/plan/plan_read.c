/* Plan reader: checks a plan's header, section table and checksums, then parses each section
 * field by field, checking every count, index and range before it is used. Plans come from
 * files, so nothing here trusts the bytes: a bad plan is an error message, never a crash. */
#include "plan/plan.h"

#include "core/alloc.h"
#include "plan/plan_format.h"
#include "plan/plan_parse.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t kn_plan_host_features(void) {
    uint64_t f = KN_PLAN_FEAT_BACKEND_CPU;
#if defined(__x86_64__)
    f |= KN_PLAN_FEAT_X86_64;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        f |= KN_PLAN_FEAT_AVX2;
    if (__builtin_cpu_supports("fma"))
        f |= KN_PLAN_FEAT_FMA;
    if (__builtin_cpu_supports("avx512f"))
        f |= KN_PLAN_FEAT_AVX512F;
#elif defined(__aarch64__)
    f |= KN_PLAN_FEAT_AARCH64;
#endif
    return f;
}

static uint32_t get_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

const char *kn_plan_section_name(uint32_t id) {
    switch (id) {
    case KN_PLAN_SEC_STRINGS:
        return "STRINGS";
    case KN_PLAN_SEC_GRAPH:
        return "GRAPH";
    case KN_PLAN_SEC_PROFILES:
        return "PROFILES";
    case KN_PLAN_SEC_WEIGHTS:
        return "WEIGHTS";
    case KN_PLAN_SEC_PLUGINS:
        return "PLUGINS";
    default:
        return NULL;
    }
}

static const char *sec_label(uint32_t id, char *buf, size_t size) {
    const char *name = kn_plan_section_name(id);
    if (name)
        return name;
    snprintf(buf, size, "%u", id);
    return buf;
}

/* The kiln version text of a header, made printable whatever the bytes are. */
static void version_text(const uint8_t *p, char *out) {
    int i = 0;
    for (; i < KN_PLAN_VERSION_SIZE - 1 && p[i]; i++)
        out[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
    out[i] = '\0';
}

static kiln_status check_features(uint64_t need) {
    static const struct {
        uint64_t bit;
        const char *name;
    } cpu[] = {
        {KN_PLAN_FEAT_AVX2, "AVX2"}, {KN_PLAN_FEAT_FMA, "FMA"}, {KN_PLAN_FEAT_AVX512F, "AVX-512F"}};
    const uint64_t known = KN_PLAN_FEAT_X86_64 | KN_PLAN_FEAT_AARCH64 | KN_PLAN_FEAT_AVX2 |
                           KN_PLAN_FEAT_FMA | KN_PLAN_FEAT_AVX512F | KN_PLAN_FEAT_BACKEND_CPU |
                           KN_PLAN_FEAT_BACKEND_CUDA;
    uint64_t have = kn_plan_host_features();
    if (need & ~known)
        return kn_error(KILN_ERR_PLAN,
                        "plan needs target features 0x%llx that this kiln does not know (made by "
                        "a newer kiln?)",
                        (unsigned long long)(need & ~known));
    if ((need & KN_PLAN_FEAT_X86_64) && !(have & KN_PLAN_FEAT_X86_64))
        return kn_error(KILN_ERR_PLAN, "plan was built for x86-64; this machine is not x86-64");
    if ((need & KN_PLAN_FEAT_AARCH64) && !(have & KN_PLAN_FEAT_AARCH64))
        return kn_error(KILN_ERR_PLAN, "plan was built for AArch64; this machine is not AArch64");
    for (size_t i = 0; i < sizeof cpu / sizeof cpu[0]; i++)
        if ((need & cpu[i].bit) && !(have & cpu[i].bit))
            return kn_error(KILN_ERR_PLAN, "plan needs CPU feature %s, which this CPU lacks",
                            cpu[i].name);
    if ((need & KN_PLAN_FEAT_BACKEND_CUDA) && !(have & KN_PLAN_FEAT_BACKEND_CUDA))
        return kn_error(KILN_ERR_PLAN, "plan needs the CUDA backend, which this kiln lacks");
    return KILN_OK;
}

/* Magic, byte order, version, header checksum and size; fills *count. */
static kiln_status check_header(const uint8_t *p, size_t size, uint32_t *count) {
    if (size >= KN_PLAN_MAGIC_SIZE && memcmp(p, KN_PLAN_MAGIC, KN_PLAN_MAGIC_SIZE) != 0)
        return kn_error(KILN_ERR_PLAN, "not a kiln plan (bad magic)");
    if (size < KN_PLAN_HEADER_SIZE)
        return kn_error(KILN_ERR_PLAN, "plan is truncated: %zu bytes, a plan header alone is %u",
                        size, KN_PLAN_HEADER_SIZE);
    uint32_t mark = get_u32(p + KN_PLAN_OFF_ENDIAN);
    if (mark == __builtin_bswap32(KN_PLAN_ENDIAN_MARK))
        return kn_error(KILN_ERR_PLAN, "plan was written on a machine of the other byte order");
    if (mark != KN_PLAN_ENDIAN_MARK)
        return kn_error(KILN_ERR_PLAN, "plan header is corrupted (bad byte-order mark 0x%08x)",
                        mark);
    uint32_t version = get_u32(p + KN_PLAN_OFF_FORMAT_VERSION);
    if (version != KN_PLAN_FORMAT_VERSION) {
        char by[KN_PLAN_VERSION_SIZE];
        version_text(p + KN_PLAN_OFF_KILN_VERSION, by);
        if (version < KN_PLAN_FORMAT_VERSION)
            return kn_error(KILN_ERR_PLAN,
                            "plan format version %u was built by an older kiln (%s): rebuild the "
                            "plan from its model with this kiln %d.%d.%d (format %u)",
                            version, by, KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH,
                            KN_PLAN_FORMAT_VERSION);
        return kn_error(KILN_ERR_PLAN,
                        "plan format version %u (made by kiln %s) is not supported by this kiln "
                        "%d.%d.%d (reads version %u)",
                        version, by, KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH,
                        KN_PLAN_FORMAT_VERSION);
    }
    uint64_t file_size = get_u64(p + KN_PLAN_OFF_FILE_SIZE);
    *count = get_u32(p + KN_PLAN_OFF_SECTION_COUNT);
    uint64_t table_end = KN_PLAN_HEADER_SIZE + (uint64_t)*count * KN_PLAN_SECTION_ENTRY_SIZE;
    if (*count > KN_PLAN_MAX_SECTIONS || table_end > size) {
        if (file_size > size)
            return kn_error(KILN_ERR_PLAN, "plan is truncated: %zu bytes, header says %llu", size,
                            (unsigned long long)file_size);
        return kn_error(KILN_ERR_PLAN, "plan header is corrupted (%u sections)", *count);
    }
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, p, KN_PLAN_OFF_HEADER_CHECKSUM);
    XXH64_update(&st, p + KN_PLAN_HEADER_SIZE, (size_t)(table_end - KN_PLAN_HEADER_SIZE));
    if (XXH64_digest(&st) != get_u64(p + KN_PLAN_OFF_HEADER_CHECKSUM))
        return kn_error(KILN_ERR_PLAN, "plan header checksum mismatch (corrupted)");
    if (file_size > size)
        return kn_error(KILN_ERR_PLAN, "plan is truncated: %zu bytes, header says %llu", size,
                        (unsigned long long)file_size);
    if (file_size < size)
        return kn_error(KILN_ERR_PLAN, "plan is %zu bytes, header says %llu (trailing bytes)", size,
                        (unsigned long long)file_size);
    if (get_u32(p + KN_PLAN_OFF_HEADER_FLAGS) != 0)
        return kn_error(KILN_ERR_PLAN, "plan header has unknown flags 0x%x",
                        get_u32(p + KN_PLAN_OFF_HEADER_FLAGS));
    return check_features(get_u64(p + KN_PLAN_OFF_FEATURES));
}

typedef struct sec_entry {
    uint32_t id, flags;
    uint64_t offset, size, checksum;
} sec_entry;

static int by_offset(const void *a, const void *b) {
    const sec_entry *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static bool all_zero(const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* Section bounds, overlap, padding and checksums; fills the known sections of r. */
static kiln_status check_sections(kn_plan_reader *r, uint32_t count) {
    sec_entry e[KN_PLAN_MAX_SECTIONS] = {{0}};
    char label[16];
    uint64_t table_end = KN_PLAN_HEADER_SIZE + (uint64_t)count * KN_PLAN_SECTION_ENTRY_SIZE;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *t = r->base + KN_PLAN_HEADER_SIZE + (size_t)i * KN_PLAN_SECTION_ENTRY_SIZE;
        e[i] = (sec_entry){get_u32(t + KN_PLAN_SEC_OFF_ID), get_u32(t + KN_PLAN_SEC_OFF_FLAGS),
                           get_u64(t + KN_PLAN_SEC_OFF_OFFSET), get_u64(t + KN_PLAN_SEC_OFF_SIZE),
                           get_u64(t + KN_PLAN_SEC_OFF_CHECKSUM)};
        const char *name = sec_label(e[i].id, label, sizeof label);
        if (e[i].offset < table_end || e[i].offset > r->size || e[i].size > r->size - e[i].offset ||
            e[i].offset % KN_PLAN_ALIGN != 0)
            return kn_error(KILN_ERR_PLAN,
                            "plan section %s is out of bounds (offset %llu, size %llu, plan "
                            "%zu bytes)",
                            name, (unsigned long long)e[i].offset, (unsigned long long)e[i].size,
                            r->size);
        if (!kn_plan_section_name(e[i].id) || e[i].id == KN_PLAN_SEC_PLUGINS) {
            if (e[i].flags & KN_PLAN_SEC_REQUIRED)
                return kn_error(KILN_ERR_PLAN,
                                "plan needs section %s, which this kiln cannot read (made by a "
                                "newer kiln?)",
                                name);
            continue;
        }
        if (r->sec[e[i].id])
            return kn_error(KILN_ERR_PLAN, "plan has two %s sections", name);
        r->sec[e[i].id] = r->base + e[i].offset;
        r->sec_size[e[i].id] = e[i].size;
    }
    qsort(e, count, sizeof e[0], by_offset);
    uint64_t end = table_end;
    for (uint32_t i = 0; i < count; i++) {
        if (e[i].offset < end)
            return kn_error(KILN_ERR_PLAN, "plan section %s overlaps another",
                            sec_label(e[i].id, label, sizeof label));
        if (!all_zero(r->base + end, e[i].offset - end))
            return kn_error(KILN_ERR_PLAN,
                            "plan has non-zero padding before section %s "
                            "(corrupted)",
                            sec_label(e[i].id, label, sizeof label));
        end = e[i].offset + e[i].size;
    }
    if (!all_zero(r->base + end, r->size - end))
        return kn_error(KILN_ERR_PLAN,
                        "plan has non-zero bytes after its last section (corrupted)");
    for (uint32_t i = 0; i < count; i++)
        if (XXH64(r->base + e[i].offset, (size_t)e[i].size, 0) != e[i].checksum)
            return kn_error(KILN_ERR_PLAN, "plan section %s checksum mismatch (corrupted)",
                            sec_label(e[i].id, label, sizeof label));
    static const uint32_t needed[] = {KN_PLAN_SEC_STRINGS, KN_PLAN_SEC_GRAPH, KN_PLAN_SEC_PROFILES,
                                      KN_PLAN_SEC_WEIGHTS};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        if (!r->sec[needed[i]])
            return kn_error(KILN_ERR_PLAN, "plan has no %s section",
                            kn_plan_section_name(needed[i]));
    return KILN_OK;
}

/* The string table: every entry's bytes inside the blob and NUL-terminated. */
static kiln_status check_strings(kn_plan_reader *r) {
    const uint8_t *s = r->sec[KN_PLAN_SEC_STRINGS];
    uint64_t size = r->sec_size[KN_PLAN_SEC_STRINGS];
    if (size < KN_PLAN_STRINGS_HEAD)
        return kn_error(KILN_ERR_PLAN, "plan STRINGS section is too small (%llu bytes)",
                        (unsigned long long)size);
    uint32_t n = get_u32(s);
    if (get_u32(s + 4) != 0 || n > (size - KN_PLAN_STRINGS_HEAD) / KN_PLAN_STRING_ENTRY)
        return kn_error(KILN_ERR_PLAN,
                        "plan STRINGS section is corrupted (%u strings in %llu "
                        "bytes)",
                        n, (unsigned long long)size);
    const uint8_t *blob = s + KN_PLAN_STRINGS_HEAD + (size_t)n * KN_PLAN_STRING_ENTRY;
    uint64_t blob_size = size - KN_PLAN_STRINGS_HEAD - (uint64_t)n * KN_PLAN_STRING_ENTRY;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *ent = s + KN_PLAN_STRINGS_HEAD + (size_t)i * KN_PLAN_STRING_ENTRY;
        uint64_t off = get_u32(ent), len = get_u32(ent + 4);
        if (off + len >= blob_size || blob[off + len] != 0)
            return kn_error(KILN_ERR_PLAN, "plan string %u is out of bounds or unterminated", i);
    }
    r->n_str = n;
    r->str_entries = s + KN_PLAN_STRINGS_HEAD;
    r->str_blob = (const char *)blob;
    return KILN_OK;
}

void kn_plan_clear(kn_plan *plan) {
    if (!plan)
        return;
    kn_graph_destroy(plan->graph);
    for (int i = 0; i < plan->n_profiles; i++)
        kn_free(plan->profiles[i].input);
    kn_free(plan->profiles);
    memset(plan, 0, sizeof *plan);
}

kiln_status kn_plan_read(const void *data, size_t size, kn_plan *out) {
    if (!out)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan reader: NULL output");
    memset(out, 0, sizeof *out);
    if (!data)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plan reader: NULL data");
    if ((uintptr_t)data % KN_PLAN_ALIGN != 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "plan buffer is not %u-byte aligned (weights are used in place)",
                        KN_PLAN_ALIGN);
    kn_plan_reader r = {.base = data, .size = size};
    uint32_t count = 0;
    KN_TRY(check_header(r.base, size, &count));
    KN_TRY(check_sections(&r, count));
    KN_TRY(check_strings(&r));
    kiln_status rc = kn_plan_parse_graph(&r, &out->graph);
    if (rc == KILN_OK)
        rc = kn_plan_parse_profiles(&r, out);
    if (rc != KILN_OK) {
        kn_plan_clear(out);
        return rc;
    }
    out->features = get_u64(r.base + KN_PLAN_OFF_FEATURES);
    return KILN_OK;
}
