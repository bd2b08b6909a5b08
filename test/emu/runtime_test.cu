// The CUDA runtime stand-ins (emu/cuda_runtime_host.cpp): device description, memory, copies,
// streams, events with host timing, errors and kernel attributes.
#include <chrono>
#include <functional>
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

    // Not synchronising: H2D and D2D copies, async copies into or out of pinned memory (into the middle
    // of a pinned allocation too) and out of pageable memory, memsets, event records.
    float* pinned = nullptr;
    CHECK(cudaMallocHost(&pinned, 2 * n * sizeof(float)) == cudaSuccess);
    CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyDefault) == cudaSuccess);
    CHECK(cudaMemcpyAsync(pinned + n, d, n * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
    CHECK(cudaMemcpyAsync(d, pinned, n * sizeof(float), cudaMemcpyHostToDevice, stream) == cudaSuccess);
    CHECK(cudaMemcpyAsync(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 0, n * sizeof(float), stream) == cudaSuccess);
    CHECK(cudaEventRecord(event, stream) == cudaSuccess);
    CHECK(emu::launch_count() == 0);
    CHECK_MSG(emu::host_sync_count() == 0, "host syncs %llu", emu::host_sync_count());
    // An async copy into pageable memory returns once it is done: a host synchronisation.
    CHECK(cudaMemcpyAsync(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
    CHECK_MSG(emu::host_sync_count() == 1, "host syncs %llu", emu::host_sync_count());
    CHECK(cudaFreeHost(pinned) == cudaSuccess);
    emu::reset_counters();

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

std::vector<float> host_copy(const float* device, int n) {
    std::vector<float> out(n);
    CHECK(cudaMemcpy(out.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
}

__global__ void scale_add(float* x, const float* y, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + y[i];
}

// A capture records instead of running: kernels with their arguments as they were, copies reading
// their source when replayed, work forked to a second stream and joined back; each launch of the
// graph runs it all again, in order, and the counters tell its kernels apart.
TEST(stream_capture_records_and_replays_in_order) {
    const int n = 64;
    float *x, *y, *pinned;
    CHECK(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess && cudaMalloc(&y, n * sizeof(float)) == cudaSuccess);
    CHECK(cudaMallocHost(&pinned, n * sizeof(float)) == cudaSuccess);
    CHECK(cudaMemset(x, 0, n * sizeof(float)) == cudaSuccess);
    cudaStream_t s, side;
    cudaEvent_t fork, join;
    CHECK(cudaStreamCreate(&s) == cudaSuccess && cudaStreamCreate(&side) == cudaSuccess);
    CHECK(cudaEventCreate(&fork) == cudaSuccess && cudaEventCreate(&join) == cudaSuccess);
    for (int i = 0; i < n; i++) pinned[i] = 1.0f;

    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    cudaStreamCaptureStatus status;
    CHECK(cudaStreamIsCapturing(s, &status) == cudaSuccess && status == cudaStreamCaptureStatusActive);
    CHECK(cudaMemcpyAsync(y, pinned, n * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess);
    float a = 2.0f;
    LAUNCH(scale_add, 1, n, 0, s, x, y, a, n);  // x = 2x + y
    a = 100.0f;                                 // not seen: the argument was taken at capture
    CHECK(cudaEventRecord(fork, s) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);  // side joins the capture
    CHECK(cudaStreamIsCapturing(side, &status) == cudaSuccess && status == cudaStreamCaptureStatusActive);
    LAUNCH(scale_add, 1, n, 0, side, x, y, 1.0f, n);  // x = x + y
    CHECK(cudaEventRecord(join, side) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s, join, 0) == cudaSuccess);
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess && graph != nullptr);
    CHECK(host_copy(x, n)[0] == 0.0f);  // nothing ran yet
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    emu::reset_counters();
    CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);  // x = 2·0 + 1 + 1 = 2
    for (int i = 0; i < n; i++) pinned[i] = 3.0f;    // the copy reads it when the graph runs
    CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);  // x = 2·2 + 3 + 3 = 10
    CHECK_MSG(host_copy(x, n) == std::vector<float>(n, 10.0f), "x[0] = %g", host_copy(x, n)[0]);
    CHECK(emu::launch_count() == 4 && emu::graph_kernel_count() == 4 && emu::graph_launch_count() == 2);
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess);
    for (cudaEvent_t e : {fork, join}) CHECK(cudaEventDestroy(e) == cudaSuccess);
    for (cudaStream_t st : {s, side}) CHECK(cudaStreamDestroy(st) == cudaSuccess);
    CHECK(cudaFree(x) == cudaSuccess && cudaFree(y) == cudaSuccess && cudaFreeHost(pinned) == cudaSuccess);
}

// What a GPU refuses in a capture is refused here: synchronising, allocating, pageable copies, waiting
// on work outside the capture, and a fork never joined back.
TEST(stream_capture_refuses_what_a_gpu_refuses) {
    float* x;
    CHECK(cudaMalloc(&x, 64) == cudaSuccess);
    std::vector<float> pageable(16);
    cudaStream_t s, side;
    cudaEvent_t outside, fork;
    CHECK(cudaStreamCreate(&s) == cudaSuccess && cudaStreamCreate(&side) == cudaSuccess);
    CHECK(cudaEventCreate(&outside) == cudaSuccess && cudaEventCreate(&fork) == cudaSuccess);
    CHECK(cudaEventRecord(outside, side) == cudaSuccess);
    auto refused = [&](const char* what, const std::function<cudaError_t()>& call, cudaError_t expected) {
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        LAUNCH(add_one, 1, 16, 0, s, x, 16);
        const cudaError_t err = call();
        cudaGraph_t graph = nullptr;
        const cudaError_t end = cudaStreamEndCapture(s, &graph);
        CHECK_MSG(err == expected || end == expected, "%s: %s / %s", what, cudaGetErrorName(err), cudaGetErrorName(end));
        CHECK_MSG(end != cudaSuccess && graph == nullptr, "%s: the capture ended well", what);
        cudaGetLastError();
    };
    void* p = nullptr;
    refused("cudaStreamSynchronize", [&] { return cudaStreamSynchronize(s); }, cudaErrorStreamCaptureUnsupported);
    refused("cudaDeviceSynchronize", [&] { return cudaDeviceSynchronize(); }, cudaErrorStreamCaptureUnsupported);
    refused("cudaMalloc", [&] { return cudaMalloc(&p, 16); }, cudaErrorStreamCaptureUnsupported);
    refused("cudaMallocHost", [&] { return cudaMallocHost(&p, 16); }, cudaErrorStreamCaptureUnsupported);
    refused("pageable copy", [&] {
        return cudaMemcpyAsync(x, pageable.data(), 64, cudaMemcpyHostToDevice, s);
    }, cudaErrorStreamCaptureUnsupported);
    refused("synchronous copy", [&] { return cudaMemcpy(pageable.data(), x, 64, cudaMemcpyDeviceToHost); },
            cudaErrorStreamCaptureUnsupported);
    refused("wait outside", [&] { return cudaStreamWaitEvent(s, outside, 0); }, cudaErrorStreamCaptureIsolation);
    refused("unjoined fork", [&] {
        cudaEventRecord(fork, s);
        cudaStreamWaitEvent(side, fork, 0);
        LAUNCH(add_one, 1, 16, 0, side, x, 16);
        return cudaSuccess;
    }, cudaErrorStreamCaptureUnjoined);
    // An event recorded in the capture cannot be queried (the capture itself goes on).
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaEventRecord(fork, s) == cudaSuccess);
    CHECK(cudaEventQuery(fork) == cudaErrorCapturedEvent);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess);
    cudaGetLastError();
    for (cudaEvent_t e : {outside, fork}) CHECK(cudaEventDestroy(e) == cudaSuccess);
    for (cudaStream_t st : {s, side}) CHECK(cudaStreamDestroy(st) == cudaSuccess);
    CHECK(cudaFree(x) == cudaSuccess);
}

}  // namespace
