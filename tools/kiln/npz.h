/* .npz archives (as numpy.savez writes them) read as named tensors, a side of kiln compare. */
#ifndef KILN_NPZ_H
#define KILN_NPZ_H

#include "core/tensor.h"

/* Read every NAME.npy member of path. *names and every (*tensors)[i].data are kn_malloc'd and
 * owned by the caller (also on failure, for the *n read so far). Returns 0 or an exit code. */
int cli_npz_read(const char *path, char ***names, kn_tensor **tensors, int *n);

#endif
