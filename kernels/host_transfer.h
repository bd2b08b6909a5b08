// Host fp32 vectors to and from device arrays of another element type (bf16 weights, fp32 state), on
// a stream, the host waiting for the copies: for loading and saving weights and optimizer state (a
// checkpoint's host copy at a step boundary), not for anything inside a step.
//
// The bytes go through two pinned host buffers of kTransferChunkBytes, taken turns about: while the
// device copies one chunk into one buffer, the host converts the chunk before it out of the other
// (to or from fp32). A copy from pageable memory (a std::vector) would be staged by the driver
// through its own pinned memory at a fraction of the link's speed, and converting a whole staged
// array after the copy would touch every byte twice more: on a GPU machine a 124M-parameter model's
// checkpoint took seconds at the step boundary that way.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "base/host_arrays.h"
#include "kernels/common.h"

constexpr size_t kTransferChunkBytes = 2u << 20;  // per buffer: 2 MiB, two of them

// The two pinned buffers and their events, made at the first transfer and kept for the process (the
// operating system takes them back at exit: freeing pinned memory from a static destructor would
// race with the CUDA runtime's own teardown). Never called inside a CUDA-graph capture.
struct TransferBuffers {
    std::mutex in_use;  // one transfer at a time (the writer threads of checkpoints never transfer)
    char* chunk[2] = {nullptr, nullptr};
    cudaEvent_t done[2] = {nullptr, nullptr};
};
inline TransferBuffers& transfer_buffers() {
    static TransferBuffers* buffers = [] {
        TransferBuffers* t = new TransferBuffers;
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaMallocHost(&t->chunk[i], kTransferChunkBytes));
            CUDA_CHECK(cudaEventCreateWithFlags(&t->done[i], cudaEventDisableTiming));
        }
        return t;
    }();
    return *buffers;
}

// Widens (or copies) `count` values of type T to fp32.
template <typename T>
inline void widen_to_float(float* to, const T* from, size_t count) {
    if constexpr (std::is_same_v<T, float>) memcpy(to, from, count * sizeof(float));
    else for (size_t i = 0; i < count; i++) to[i] = (float)from[i];
}
template <typename T>
inline void narrow_from_float(T* to, const float* from, size_t count) {
    if constexpr (std::is_same_v<T, float>) memcpy(to, from, count * sizeof(float));
    else for (size_t i = 0; i < count; i++) to[i] = (T)from[i];
}

// device[i] = (T)host[i] for every element of host.
template <typename T>
void copy_to_device(T* device, const std::vector<float>& host, cudaStream_t stream) {
    TransferBuffers& t = transfer_buffers();
    std::lock_guard<std::mutex> lock(t.in_use);
    const size_t per_chunk = kTransferChunkBytes / sizeof(T), n = host.size();
    for (size_t begin = 0, k = 0; begin < n; begin += per_chunk, k++) {
        const int i = (int)(k % 2);
        const size_t count = std::min(per_chunk, n - begin);
        // The buffer's copy two chunks ago must be done before it is refilled.
        if (k >= 2) CUDA_CHECK(cudaEventSynchronize(t.done[i]));
        narrow_from_float(reinterpret_cast<T*>(t.chunk[i]), host.data() + begin, count);
        CUDA_CHECK(cudaMemcpyAsync(device + begin, t.chunk[i], count * sizeof(T), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaEventRecord(t.done[i], stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

// The first n elements of device, widened to fp32, in a host array reused where one is kept
// (base/host_arrays.h: a checkpoint's arrays are handed back once written).
template <typename T>
std::vector<float> copy_from_device(const T* device, size_t n, cudaStream_t stream) {
    TransferBuffers& t = transfer_buffers();
    std::lock_guard<std::mutex> lock(t.in_use);
    std::vector<float> host = reusable_host_array(n);
    const size_t per_chunk = kTransferChunkBytes / sizeof(T), chunks = (n + per_chunk - 1) / per_chunk;
    auto issue = [&](size_t k) {
        const size_t begin = k * per_chunk, count = std::min(per_chunk, n - begin);
        CUDA_CHECK(cudaMemcpyAsync(t.chunk[k % 2], device + begin, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaEventRecord(t.done[k % 2], stream));
    };
    if (chunks > 0) issue(0);
    for (size_t k = 0; k < chunks; k++) {
        if (k + 1 < chunks) issue(k + 1);  // into the other buffer, converted in the last iteration
        CUDA_CHECK(cudaEventSynchronize(t.done[k % 2]));
        const size_t begin = k * per_chunk, count = std::min(per_chunk, n - begin);
        widen_to_float(host.data() + begin, reinterpret_cast<const T*>(t.chunk[k % 2]), count);
    }
    return host;
}
