// The CUDA runtime stand-ins (emu/cuda_runtime_host.cpp): device description, memory, copies,
// streams, events with host timing, errors and kernel attributes.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common.h"
#include "test/test.h"

namespace {

TEST(emulated_device_says_what_it_is) {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count) == cudaSuccess && count == 1);
    CHECK(cudaSetDevice(0) == cudaSuccess);
    CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
    cudaGetLastError();
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
    CHECK(std::string(prop.name).find("emulated") != std::string::npos);
    CHECK(prop.major == 9 && prop.minor == 0);
    CHECK(prop.warpSize == 32 && prop.maxThreadsPerBlock == 1024);
    CHECK(prop.multiProcessorCount >= 1 && prop.totalGlobalMem > 0);
    int optin = 0;
    CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == cudaSuccess);
    CHECK((size_t)optin == prop.sharedMemPerBlockOptin);
}

TEST(memory_copies_and_sets) {
    const size_t n = 1000;
    std::vector<float> host(n), back(n, 0.0f);
    for (size_t i = 0; i < n; i++) host[i] = 0.5f * i;
    float *a, *b, *pinned;
    size_t free_before, free_after, total;
    CHECK(cudaMemGetInfo(&free_before, &total) == cudaSuccess && free_before <= total);
    CHECK(cudaMalloc(&a, n * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc(&b, n * sizeof(float)) == cudaSuccess);
    CHECK(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
    CHECK(free_before - free_after == 2 * n * sizeof(float));
    CHECK(cudaMallocHost(&pinned, n * sizeof(float)) == cudaSuccess);
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream) == cudaSuccess && stream != nullptr);
    CHECK(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpyAsync(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice, stream) == cudaSuccess);
    CHECK(cudaMemcpyAsync(pinned, b, n * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(std::vector<float>(pinned, pinned + n) == host);
    CHECK(cudaMemsetAsync(a, 0, n * sizeof(float), stream) == cudaSuccess);
    CHECK(cudaMemcpy(back.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(back == std::vector<float>(n, 0.0f));
    CHECK(cudaFree(host.data()) == cudaErrorInvalidValue);  // not from cudaMalloc
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaFree(a) == cudaSuccess && cudaFree(b) == cudaSuccess && cudaFreeHost(pinned) == cudaSuccess);
    CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST(events_time_host_work) {
    cudaEvent_t start, stop, untimed;
    CHECK(cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess);
    CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) == cudaSuccess);
    CHECK(cudaEventRecord(start, 0) == cudaSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(cudaEventRecord(stop, 0) == cudaSuccess && cudaEventRecord(untimed, 0) == cudaSuccess);
    CHECK(cudaEventSynchronize(stop) == cudaSuccess);
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
    CHECK_MSG(ms >= 19.0f && ms < 1000.0f, "elapsed %.3f ms for a 20 ms sleep", ms);
    CHECK(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
    cudaGetLastError();
    cudaEventDestroy(start), cudaEventDestroy(stop), cudaEventDestroy(untimed);
}

TEST(errors_have_names_and_strings) {
    CHECK(std::string(cudaGetErrorName(cudaErrorInvalidValue)) == "cudaErrorInvalidValue");
    CHECK(std::string(cudaGetErrorString(cudaSuccess)) == "no error");
    CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(cudaMemcpy(nullptr, nullptr, 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaSuccess);
}

__global__ void noop() {}

TEST(kernel_attributes) {
    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, noop) == cudaSuccess);
    CHECK(attr.maxDynamicSharedSizeBytes == 48 * 1024);
    CHECK(cudaFuncSetAttribute(noop, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024) == cudaSuccess);
    CHECK(cudaFuncGetAttributes(&attr, noop) == cudaSuccess);
    CHECK(attr.maxDynamicSharedSizeBytes == 100 * 1024);
    LAUNCH(noop, 1, 32, 100 * 1024, 0);
    CHECK(cudaGetLastError() == cudaSuccess);
}

}  // namespace

namespace {

__global__ void add_one(float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

// launch_count / host_sync_count: each counted call adds exactly one, nothing else adds any, and a
// reset starts again from zero.
TEST(counters_of_launches_and_host_synchronisations) {
    const int n = 100;
    float* d;
    std::vector<float> host(n, 1.0f);
    CHECK(cudaMalloc(&d, n * sizeof(float)) == cudaSuccess);
    cudaStream_t stream;
    cudaEvent_t event;
    CHECK(cudaStreamCreate(&stream) == cudaSuccess && cudaEventCreate(&event) == cudaSuccess);
    emu::reset_counters();
    CHECK(emu::launch_count() == 0 && emu::host_sync_count() == 0);

    // Not synchronising: H2D and D2D copies, async copies (any direction), memsets, event records.
    CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyDefault) == cudaSuccess);
    CHECK(cudaMemcpyAsync(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 0, n * sizeof(float), stream) == cudaSuccess);
    CHECK(cudaEventRecord(event, stream) == cudaSuccess);
    CHECK(emu::launch_count() == 0);
    CHECK_MSG(emu::host_sync_count() == 0, "host syncs %llu", emu::host_sync_count());

    LAUNCH(add_one, ceil_div(n, 32), 32, 0, stream, d, n);
    LAUNCH(add_one, 1, 128, 0, stream, d, n);
    LAUNCH(add_one, 1, 2048, 0, stream, d, n);  // refused by the launch checks: not a launch
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK_MSG(emu::launch_count() == 2, "launches %llu", emu::launch_count());

    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaEventSynchronize(event) == cudaSuccess);
    CHECK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDefault) == cudaSuccess);
    CHECK(host == std::vector<float>(n, 2.0f));
    CHECK_MSG(emu::host_sync_count() == 5, "host syncs %llu", emu::host_sync_count());
    CHECK(emu::launch_count() == 2);

    emu::reset_counters();
    CHECK(emu::launch_count() == 0 && emu::host_sync_count() == 0);
    emu::count_library_launch();
    CHECK(emu::launch_count() == 1);
    CHECK(cudaEventDestroy(event) == cudaSuccess && cudaStreamDestroy(stream) == cudaSuccess);
    CHECK(cudaFree(d) == cudaSuccess);
}

}  // namespace
