/* Sequence and optional graph inputs and outputs on the command line: a sequence is a folder
 * holding 0.npy, 1.npy, ... (one file per element, in order); an optional is its element's
 * file or folder, or the word `none` for an empty one. */
#include "cli.h"
#include "core/alloc.h"
#include "core/container.h"
#include "core/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

bool cli_is_container_path(const char *path) {
    struct stat st;
    return strcmp(path, "none") == 0 || (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

static int make(int kind, int32_t elem, int n, const kn_tensor *items, kn_tensor *out) {
    size_t nb = kn_container_bytes(n, items);
    *out = kn_container_tensor(nb);
    if ((out->data = kn_malloc(nb)) == NULL)
        return cli_fail("out of memory (%zu bytes)", nb);
    kn_container_write(out->data, kind, elem, n, items);
    return 0;
}

int cli_read_container(const char *path, kn_tensor *out) {
    if (strcmp(path, "none") == 0)
        return make(KN_CONTAINER_OPTIONAL, 0, 0, NULL, out);
    kn_tensor items[CLI_MAX_ITEMS * 16];
    int n = 0, rc = 0;
    char file[4200];
    struct stat st;
    for (; n < (int)(sizeof items / sizeof items[0]); n++) {
        snprintf(file, sizeof file, "%s/%d.npy", path, n);
        if (stat(file, &st) != 0)
            break;
        if (kn_npy_read(file, &items[n]) != KILN_OK) {
            rc = cli_fail("%s", kiln_last_error());
            break;
        }
        if (n > 0 && items[n].dtype != items[0].dtype) {
            rc = cli_fail("%s is %s; %s/0.npy is %s (a sequence holds one dtype)", file,
                          kn_dtype_name(items[n].dtype), path, kn_dtype_name(items[0].dtype));
            n++;
            break;
        }
    }
    if (rc == 0)
        rc = make(KN_CONTAINER_SEQUENCE, n ? items[0].dtype : 0, n, items, out);
    for (int i = 0; i < n; i++)
        kn_free(items[i].data);
    return rc;
}

int cli_wrap_optional(const kn_tensor *t, kn_tensor *out) {
    return make(KN_CONTAINER_OPTIONAL, t->dtype, 1, t, out);
}

bool cli_wraps_optional(const kiln_io_info *info, const kn_tensor *t) {
    if (t->dtype != KILN_DTYPE_CONTAINER)
        return info->kind == KILN_IO_OPTIONAL || info->kind == KILN_IO_TENSOR;
    kn_container c;
    return info->kind == KILN_IO_OPTIONAL_SEQUENCE &&
           kn_container_open(t, info->name, &c) == KILN_OK && c.kind == KN_CONTAINER_SEQUENCE;
}

static int write_npy(const char *path, const kn_tensor *t) {
    return kn_npy_write(path, t) == KILN_OK ? 0 : cli_fail("%s", kiln_last_error());
}

int cli_write_container(const char *dir, const char *base, const kn_tensor *t, char *entry,
                        size_t size) {
    kn_container c;
    if (kn_container_open(t, base, &c) != KILN_OK)
        return cli_fail("%s", kiln_last_error());
    char path[4200];
    if (c.kind == KN_CONTAINER_OPTIONAL) {
        if (c.count == 0) {
            entry[0] = '\0';
            return 0;
        }
        kn_tensor e = kn_container_item(&c, 0);
        if (e.dtype == KILN_DTYPE_CONTAINER)
            return cli_write_container(dir, base, &e, entry, size);
        snprintf(entry, size, "%s.npy", base);
        snprintf(path, sizeof path, "%s/%s", dir, entry);
        return write_npy(path, &e);
    }
    snprintf(entry, size, "%s", base);
    snprintf(path, sizeof path, "%s/%s", dir, entry);
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return cli_fail("cannot create '%s': %s", path, strerror(errno));
    for (int i = 0; i < c.count; i++) {
        kn_tensor e = kn_container_item(&c, i);
        if (e.dtype == KILN_DTYPE_CONTAINER)
            return cli_fail("output '%s': a sequence of sequences cannot be written", base);
        char file[4300];
        snprintf(file, sizeof file, "%s/%d.npy", path, i);
        if (write_npy(file, &e) != 0)
            return 1;
    }
    return 0;
}
