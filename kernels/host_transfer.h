// Host fp32 vectors to and from device arrays of another element type (bf16 weights, fp32 state), on
// a stream, the host waiting for each copy: for loading and saving weights and optimizer state, not
// for anything inside a step.
#pragma once
#include <cstddef>
#include <vector>

#include "kernels/common.h"

// device[i] = (T)host[i] for every element of host.
template <typename T>
void copy_to_device(T* device, const std::vector<float>& host, cudaStream_t stream) {
    std::vector<T> staged(host.size());
    for (size_t i = 0; i < host.size(); i++) staged[i] = (T)host[i];
    CUDA_CHECK(cudaMemcpyAsync(device, staged.data(), staged.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

// The first n elements of device, widened to fp32.
template <typename T>
std::vector<float> copy_from_device(const T* device, size_t n, cudaStream_t stream) {
    std::vector<T> staged(n);
    CUDA_CHECK(cudaMemcpyAsync(staged.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return std::vector<float>(staged.begin(), staged.end());
}
