// What launchers need to know of the device to size a grid.
#ifndef KN_CUDA_KERNELS_LAUNCH_CUH
#define KN_CUDA_KERNELS_LAUNCH_CUH

#include <cuda_runtime.h>

// The current device's multiprocessor count, read once per process (a launcher picks smaller
// work items when the large ones would leave multiprocessors idle, as at batch 1).
inline int kc_sm_count() {
    static int n = 0;
    if (n == 0) {
        int dev = 0, v = 0;
        n = cudaGetDevice(&dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) ==
                        cudaSuccess &&
                    v > 0
                ? v
                : 1;
    }
    return n;
}

#endif
