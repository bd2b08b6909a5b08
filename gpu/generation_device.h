// What ./generate's two GPU generators (gpu/gpu_generate.h for GPT-2, gpu/llama_gpu_generate.h for
// Llama 3) share: finding the device, checking that the weights and the key/value cache fit in
// what it has free before anything is allocated, and uploading the model file's fp32 weights in
// floatX (bf16, or fp32 with -DENABLE_FP32) through a host slice of at most 2^24 values, so that the
// host never holds a second copy of the whole model. Header-only, built by nvcc (./generate) or
// through the emulator (build/generate_emu, build/generate_emu_fp32).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "base/errors.h"
#include "kernels/common.h"
#include "kernels/matmul.h"

// The CUDA device generation would run on (device 0), or why there is none.
struct CudaDeviceProbe {
    bool found = false;
    std::string name;     // the device's name, when found
    std::string why_not;  // the runtime's error name (e.g. cudaErrorNoDevice), when not
};
inline CudaDeviceProbe probe_cuda_device() {
    CudaDeviceProbe probe;
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        cudaGetLastError();  // clear the sticky error of a failed probe
        probe.why_not = err != cudaSuccess ? cudaGetErrorName(err) : "cudaGetDeviceCount found 0";
        return probe;
    }
    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    probe.found = true;
    probe.name = prop.name;
    return probe;
}

// Fails (InputError) in one line when the weights, a key/value cache of max_len tokens and
// cuBLASLt's workspace need more than the device has free.
inline void check_generation_memory(size_t weight_bytes, size_t cache_bytes, int max_len) {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t need = weight_bytes + cache_bytes + MATMUL_WORKSPACE_BYTES;
    if (need > free_bytes)
        fail("out of GPU memory: the weights (%.1f MiB, " PRECISION_NAME ") and the key/value cache "
             "of %d tokens (%.1f MiB) need %.1f MiB, and the device has %.1f MiB free (--device cpu "
             "runs on the CPU)", weight_bytes / 1048576.0, max_len, cache_bytes / 1048576.0,
             need / 1048576.0, free_bytes / 1048576.0);
}

// Copies params (fp32) to device[0 .. params.size()), narrowed to floatX slice by slice.
inline void upload_weights(floatX* device, const std::vector<float>& params) {
    std::vector<floatX> slice(std::min<size_t>(params.size(), (size_t)1 << 24));
    for (size_t start = 0; start < params.size(); start += slice.size()) {
        const size_t n = std::min(slice.size(), params.size() - start);
        for (size_t i = 0; i < n; i++) slice[i] = (floatX)params[start + i];
        CUDA_CHECK(cudaMemcpy(device + start, slice.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    }
}
