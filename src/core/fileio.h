/* Files: whole-file reads, mappings, atomic writes, .npy tensors. */
#ifndef KN_FILEIO_H
#define KN_FILEIO_H

#include "core/status.h"
#include "core/tensor.h"

#include <stddef.h>

/* Map a file read-only. Empty files are refused. */
kiln_status kn_file_map(const char *path, const void **data, size_t *size);
void kn_file_unmap(const void *data, size_t size);
/* Read a whole file into memory (kn_malloc'd, caller frees). */
kiln_status kn_file_read(const char *path, void **data, size_t *size);
/* Write to "path.tmp.XXXXXX" beside path, fsync, then rename over path: a failure never
 * leaves a partial file or damages an existing one. */
kiln_status kn_file_write_atomic(const char *path, const void *data, size_t size);

/* .npy (format 1.0/2.0/3.0, little-endian, C order): read into t (t->data kn_malloc'd and
 * owned by the caller); write t. Validates header, dtype, shape and size against the file. */
kiln_status kn_npy_read(const char *path, kn_tensor *t);
kiln_status kn_npy_from_bytes(const void *data, size_t size, kn_tensor *t);
kiln_status kn_npy_write(const char *path, const kn_tensor *t);
/* Serialise to memory (kn_malloc'd). */
kiln_status kn_npy_to_bytes(const kn_tensor *t, void **data, size_t *size);

#endif
