// Helper run by detect_test: a kernel that writes one float past the end of a device buffer
// ("global") or of its dynamic shared memory ("shared"). Under AddressSanitizer the write must be
// reported (the process then exits non-zero); otherwise it prints "no error detected".
#include <cstring>

#include "kernels/common.h"

__global__ void write_past_global_end(float* x, int n) { x[threadIdx.x + 1 == (unsigned)n ? n : threadIdx.x] = 1.0f; }
__global__ void write_past_shared_end(float* x, int n) {
    DYNAMIC_SHARED(float, buffer);
    buffer[threadIdx.x + 1] = 1.0f;  // the last thread writes buffer[n]
    x[threadIdx.x] = (float)n;
}

int main(int argc, char** argv) {
    const int n = 32;
    float* x;
    CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
    if (argc > 1 && strcmp(argv[1], "shared") == 0)
        LAUNCH(write_past_shared_end, 1, n, n * sizeof(float), 0, x, n);
    else
        LAUNCH(write_past_global_end, 1, n, 0, 0, x, n);
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("no error detected\n");
    return 0;
}
