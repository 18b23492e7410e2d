/* A zip reader just large enough for numpy.savez: the central directory gives each member's
 * name, method, sizes and header offset (zip64 extras included, numpy forces them); members
 * must be stored, which savez does (savez_compressed deflates and is refused by name). */
#include "npz.h"

#include "cli.h"
#include "core/alloc.h"
#include "core/fileio.h"

#include <stdint.h>
#include <string.h>

static uint32_t rd16(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}
static uint32_t rd32(const uint8_t *p) {
    return rd16(p) | rd16(p + 2) << 16;
}
static uint64_t rd64(const uint8_t *p) {
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Sizes and offset of a central-directory entry, from its zip64 extra field where the 32-bit
 * fields are saturated. */
static bool zip64_fields(const uint8_t *extra, size_t len, uint64_t *usize, uint64_t *csize,
                         uint64_t *offset) {
    for (size_t k = 0; k + 4 <= len;) {
        uint32_t id = rd16(extra + k), n = rd16(extra + k + 2);
        if (k + 4 + n > len)
            return false;
        if (id == 1) {
            const uint8_t *q = extra + k + 4, *end = q + n;
            uint64_t *f[3] = {usize, csize, offset};
            for (int i = 0; i < 3; i++)
                if (*f[i] == 0xFFFFFFFFu) {
                    if (q + 8 > end)
                        return false;
                    *f[i] = rd64(q);
                    q += 8;
                }
            return true;
        }
        k += 4 + n;
    }
    return true;
}

static int read_members(const char *path, const uint8_t *z, size_t size, char ***names,
                        kn_tensor **tensors, int *n) {
    size_t eocd = size >= 22 ? size - 22 : 0;
    while (eocd > 0 && rd32(z + eocd) != 0x06054b50u && size - eocd < 22 + 65535)
        eocd--;
    if (size < 22 || rd32(z + eocd) != 0x06054b50u)
        return cli_fail("%s: not a zip archive (numpy.savez writes .npz files)", path);
    uint64_t count = rd16(z + eocd + 10), cd = rd32(z + eocd + 16);
    if (cd == 0xFFFFFFFFu && eocd >= 20 && rd32(z + eocd - 20) == 0x07064b50u) {
        uint64_t at = rd64(z + eocd - 20 + 8);
        if (at + 56 > size || rd32(z + at) != 0x06064b50u)
            return cli_fail("%s: damaged zip64 directory", path);
        count = rd64(z + at + 32), cd = rd64(z + at + 48);
    }
    *names = kn_calloc((size_t)count + 1, sizeof **names);
    *tensors = kn_calloc((size_t)count + 1, sizeof **tensors);
    if (*names == NULL || *tensors == NULL)
        return cli_fail("out of memory");
    size_t p = (size_t)cd;
    for (uint64_t i = 0; i < count; i++) {
        if (p + 46 > size || rd32(z + p) != 0x02014b50u)
            return cli_fail("%s: damaged zip directory", path);
        uint32_t method = rd16(z + p + 10), nlen = rd16(z + p + 28), xlen = rd16(z + p + 30),
                 clen = rd16(z + p + 32);
        uint64_t csize = rd32(z + p + 20), usize = rd32(z + p + 24), off = rd32(z + p + 42);
        if (p + 46 + nlen + xlen > size ||
            !zip64_fields(z + p + 46 + nlen, xlen, &usize, &csize, &off))
            return cli_fail("%s: damaged zip directory", path);
        const char *name = (const char *)z + p + 46;
        if (nlen < 5 || memcmp(name + nlen - 4, ".npy", 4) != 0)
            return cli_fail("%s: member '%.*s' is not a .npy array", path, (int)nlen, name);
        if (method != 0)
            return cli_fail("%s: member '%.*s' is compressed; write the archive with numpy.savez "
                            "(not savez_compressed)",
                            path, (int)nlen, name);
        if (off + 30 > size || rd32(z + off) != 0x04034b50u)
            return cli_fail("%s: damaged zip member '%.*s'", path, (int)nlen, name);
        uint64_t data = off + 30 + rd16(z + off + 26) + rd16(z + off + 28);
        if (data > size || csize > size - data || csize != usize)
            return cli_fail("%s: member '%.*s' runs past the end of the file", path, (int)nlen,
                            name);
        (*names)[*n] = kn_strndup(name, nlen - 4);
        if ((*names)[*n] == NULL)
            return cli_fail("out of memory");
        kiln_status st = kn_npy_from_bytes(z + data, (size_t)csize, &(*tensors)[*n]);
        (*n)++;
        if (st != KILN_OK)
            return cli_fail("%s: member '%.*s': %s", path, (int)nlen, name, kiln_last_error());
        p += 46 + nlen + xlen + clen;
    }
    if (*n == 0)
        return cli_fail("%s: the archive holds no arrays", path);
    return 0;
}

int cli_npz_read(const char *path, char ***names, kn_tensor **tensors, int *n) {
    *names = NULL, *tensors = NULL, *n = 0;
    const void *z;
    size_t size;
    if (kn_file_map(path, &z, &size) != KILN_OK)
        return cli_fail("%s: %s", path, kiln_last_error());
    int rc = read_members(path, z, size, names, tensors, n);
    kn_file_unmap(z, size);
    return rc;
}
