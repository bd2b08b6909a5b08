// Host stand-ins for the CUDA runtime functions the project calls, declared by CUDA's own
// cuda_runtime_api.h. "Device" memory is host memory; streams are handles whose work has already
// run (launches and copies execute synchronously) unless a capture records it (stream_capture.cpp) or
// EMU_STREAMS queues it (stream_queue.h: synchronisations then run what they wait for); events record
// host time; there is one device, an emulated compute-capability-9.0 GPU whose name says so.
#include "emu/cuda_emu.h"
#include "emu/runtime_state.h"
#include "emu/stream_queue.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <omp.h>
#include <unistd.h>
#include <memory>
#include <unordered_map>
#include <vector>


namespace emu {
namespace {
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local std::string t_last_report;

std::mutex g_lock;  // guards the tables below
std::unordered_map<void*, size_t> g_device_allocations;
std::unordered_map<void*, size_t> g_host_allocations;
size_t g_device_bytes = 0;
std::unordered_map<const void*, size_t> g_max_dynamic_shared;
std::atomic<unsigned long long> g_host_syncs{0};

// Counts one host synchronisation, then returns `result`.
cudaError_t host_sync(cudaError_t result) {
    g_host_syncs++;
    return result;
}

bool is_device_allocation(const void* ptr) {
    std::lock_guard<std::mutex> hold(g_lock);
    return g_device_allocations.count(const_cast<void*>(ptr)) != 0;
}
// Whether ptr lies inside an allocation of the table (any byte of it, not only its start).
bool inside(const void* ptr, const std::unordered_map<void*, size_t>& table) {
    std::lock_guard<std::mutex> hold(g_lock);
    const char* p = static_cast<const char*>(ptr);
    for (const auto& [base, size] : table)
        if (p >= static_cast<const char*>(base) && p < static_cast<const char*>(base) + size) return true;
    return false;
}
// Host memory that is neither device memory nor pinned (cudaMallocHost): a copy to or from it is
// staged through the driver (synchronous into it, refused by a capture).
bool is_pageable(const void* ptr) { return !inside(ptr, g_device_allocations) && !inside(ptr, g_host_allocations); }

cudaError_t fail(cudaError_t err) {
    record_error(err);
    return err;
}

size_t physical_memory() { return (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE); }

cudaError_t allocate(void** ptr, size_t size, std::unordered_map<void*, size_t>& table) {
    if (!ptr) return fail(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (size == 0) return cudaSuccess;
    if (posix_memalign(ptr, 256, size) != 0) return fail(cudaErrorMemoryAllocation);
    memset(*ptr, 0xff, size);  // like fresh GPU memory, not zero; all ones reads as NaN
    std::lock_guard<std::mutex> hold(g_lock);
    table[*ptr] = size;
    if (&table == &g_device_allocations) g_device_bytes += size;
    return cudaSuccess;
}

cudaError_t release(void* ptr, std::unordered_map<void*, size_t>& table) {
    if (!ptr) return cudaSuccess;
    std::lock_guard<std::mutex> hold(g_lock);
    auto it = table.find(ptr);
    if (it == table.end()) return fail(cudaErrorInvalidValue);
    if (&table == &g_device_allocations) g_device_bytes -= it->second;
    table.erase(it);
    free(ptr);
    return cudaSuccess;
}

cudaError_t pending_launch_failure() {
    return t_last_error == cudaErrorLaunchFailure ? cudaErrorLaunchFailure : cudaSuccess;
}
}  // namespace

void record_error(cudaError_t err, const std::string& report) {
    t_last_error = err;
    t_last_report = report;
}

size_t max_dynamic_shared_bytes(const void* kernel) {
    std::lock_guard<std::mutex> hold(g_lock);
    auto it = g_max_dynamic_shared.find(kernel);
    return it == g_max_dynamic_shared.end() ? kDefaultSharedBytes : it->second;
}

std::string last_kernel_report() { return t_last_report; }

unsigned long long host_sync_count() { return g_host_syncs.load(); }
void reset_counters() {
    g_host_syncs = 0;
    reset_launch_count();
}

}  // namespace emu

using emu::fail;

// ---- errors
cudaError_t cudaGetLastError() {
    cudaError_t err = emu::t_last_error;
    emu::t_last_error = cudaSuccess;
    emu::t_last_report.clear();
    return err;
}
cudaError_t cudaPeekAtLastError() { return emu::t_last_error; }

static const char* error_text(cudaError_t err, bool name) {
    switch (err) {
        case cudaSuccess: return name ? "cudaSuccess" : "no error";
        case cudaErrorInvalidValue: return name ? "cudaErrorInvalidValue" : "invalid argument";
        case cudaErrorMemoryAllocation: return name ? "cudaErrorMemoryAllocation" : "out of memory";
        case cudaErrorInvalidConfiguration:
            return name ? "cudaErrorInvalidConfiguration" : "invalid configuration argument";
        case cudaErrorLaunchFailure:
            return name ? "cudaErrorLaunchFailure" : "unspecified launch failure (see the emu: report above)";
        case cudaErrorInvalidDevice: return name ? "cudaErrorInvalidDevice" : "invalid device ordinal";
        case cudaErrorInvalidResourceHandle:
            return name ? "cudaErrorInvalidResourceHandle" : "invalid resource handle";
        case cudaErrorNotReady: return name ? "cudaErrorNotReady" : "device not ready";
        case cudaErrorStreamCaptureUnsupported:
            return name ? "cudaErrorStreamCaptureUnsupported" : "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated:
            return name ? "cudaErrorStreamCaptureInvalidated"
                        : "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureUnjoined:
            return name ? "cudaErrorStreamCaptureUnjoined" : "capture sequence contains a fork that was not joined "
                                                             "to the primary stream";
        case cudaErrorStreamCaptureIsolation:
            return name ? "cudaErrorStreamCaptureIsolation"
                        : "dependency created on uncaptured work in another stream";
        case cudaErrorCapturedEvent:
            return name ? "cudaErrorCapturedEvent"
                        : "operation not permitted on an event last recorded in a capturing stream";
        case cudaErrorIllegalState: return name ? "cudaErrorIllegalState" : "the operation is not permitted in this state";
        default: return name ? "cudaErrorUnknown" : "unrecognized error code";
    }
}
const char* cudaGetErrorString(cudaError_t err) { return error_text(err, false); }
const char* cudaGetErrorName(cudaError_t err) { return error_text(err, true); }

// ---- device
cudaError_t cudaGetDeviceCount(int* count) {
    if (!count) return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* device) {
    if (!device) return fail(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (!prop) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "emulated CUDA device (host CPU, %d threads)",
             omp_get_max_threads());
    prop->major = 9;
    prop->minor = 0;
    prop->totalGlobalMem = emu::physical_memory();
    prop->multiProcessorCount = omp_get_max_threads();
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->sharedMemPerBlock = emu::kDefaultSharedBytes;
    prop->sharedMemPerBlockOptin = emu::kMaxSharedBytesOptIn;
    prop->sharedMemPerMultiprocessor = 228 << 10;
    prop->regsPerBlock = 65536;
    prop->totalConstMem = 64 << 10;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!value) return fail(cudaErrorInvalidValue);
    if (device != 0) return fail(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMultiProcessorCount: *value = omp_get_max_threads(); break;
        case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
        case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
        case cudaDevAttrWarpSize: *value = 32; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)emu::kDefaultSharedBytes; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)emu::kMaxSharedBytesOptIn; break;
        default: return fail(cudaErrorInvalidValue);  // not emulated
    }
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
    if (cudaError_t err = emu::refuse_in_capture("cudaDeviceSynchronize")) return err;
    emu::drain_queued_work();
    return emu::host_sync(emu::pending_launch_failure());
}
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int* version) {
    if (!version) return fail(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) { return cudaDriverGetVersion(version); }

// ---- kernel attributes
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (!func) return fail(cudaErrorInvalidValue);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > emu::kMaxSharedBytesOptIn) return fail(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> hold(emu::g_lock);
        emu::g_max_dynamic_shared[func] = (size_t)value;
    }
    return cudaSuccess;  // other attributes (carveout, ...) only tune a real GPU
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
    if (!attr || !func) return fail(cudaErrorInvalidValue);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->maxDynamicSharedSizeBytes = (int)emu::max_dynamic_shared_bytes(func);
    attr->ptxVersion = attr->binaryVersion = 90;
    return cudaSuccess;
}

// ---- memory (a capture refuses allocating and freeing)
cudaError_t cudaMalloc(void** ptr, size_t size) {
    if (cudaError_t err = emu::refuse_in_capture("cudaMalloc")) return err;
    return emu::allocate(ptr, size, emu::g_device_allocations);
}
cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int) { return cudaMalloc(ptr, size); }
cudaError_t cudaFree(void* ptr) {
    if (cudaError_t err = emu::refuse_in_capture("cudaFree")) return err;
    emu::drain_queued_work();  // cudaFree waits for the device: queued work may still use the memory
    return emu::release(ptr, emu::g_device_allocations);
}
cudaError_t cudaMallocHost(void** ptr, size_t size) {
    if (cudaError_t err = emu::refuse_in_capture("cudaMallocHost")) return err;
    return emu::allocate(ptr, size, emu::g_host_allocations);
}
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) { return cudaMallocHost(ptr, size); }
cudaError_t cudaFreeHost(void* ptr) {
    if (cudaError_t err = emu::refuse_in_capture("cudaFreeHost")) return err;
    emu::drain_queued_work();
    return emu::release(ptr, emu::g_host_allocations);
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    if (!free_bytes || !total_bytes) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> hold(emu::g_lock);
    *total_bytes = emu::physical_memory();
    *free_bytes = *total_bytes > emu::g_device_bytes ? *total_bytes - emu::g_device_bytes : 0;
    return cudaSuccess;
}
static cudaError_t copy(void* dst, const void* src, size_t count) {
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue);
    memcpy(dst, src, count);
    return cudaSuccess;
}
// Queued streams (stream_queue.h): a copy from pageable host memory reads its source when issued (the
// driver stages it before returning); one into pageable host memory returns once it has run, with what
// its stream waits for.
static cudaError_t queue_copy(void* dst, const void* src, size_t count, bool pageable_src, bool pageable_dst,
                              cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue);
    if (pageable_src) {
        auto staged = std::make_shared<std::vector<char>>((const char*)src, (const char*)src + count);
        emu::queue_work(stream, "cudaMemcpyAsync", [=] { memcpy(dst, staged->data(), count); }, emu::WorkKind::device);
    } else {
        emu::queue_work(stream, "cudaMemcpyAsync", [=] { memcpy(dst, src, count); }, emu::WorkKind::device);
    }
    if (!pageable_dst) return cudaSuccess;
    emu::drain_stream(stream);
    return emu::host_sync(emu::pending_launch_failure());
}
// A synchronous copy into host memory waits for the device: counted as a host synchronisation.
// (A base pointer is recognised; a pointer into the middle of an allocation is taken as host memory.)
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    if (cudaError_t err = emu::refuse_in_capture("cudaMemcpy (synchronous)")) return err;
    const bool to_host = kind == cudaMemcpyDeviceToHost ||
                         (kind == cudaMemcpyDefault && emu::is_device_allocation(src) &&
                          !emu::is_device_allocation(dst));
    if (emu::streams_queued()) {  // on the legacy stream, run now with what it waits for
        if (count && (!dst || !src)) return fail(cudaErrorInvalidValue);
        emu::queue_work(nullptr, "cudaMemcpy", [=] { copy(dst, src, count); }, emu::WorkKind::device);
        emu::drain_stream(nullptr);
        return to_host ? emu::host_sync(emu::pending_launch_failure()) : cudaSuccess;
    }
    const cudaError_t err = copy(dst, src, count);
    return to_host ? emu::host_sync(err) : err;
}
// An asynchronous copy into pageable host memory returns only once it is done (the CUDA runtime's
// documented behaviour): counted as a host synchronisation. Into or from pinned memory it is not.
// A captured copy runs when the graph does, reading its source then; a capture refuses pageable host
// memory (the driver could not stage it at replay).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
    const bool host_dst = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ||
                          (kind == cudaMemcpyDefault && !emu::inside(dst, emu::g_device_allocations));
    const bool host_src = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost ||
                          (kind == cudaMemcpyDefault && !emu::inside(src, emu::g_device_allocations));
    const bool pageable = (host_dst && emu::is_pageable(dst)) || (host_src && emu::is_pageable(src));
    if (emu::capturing(stream)) {
        if (pageable) return emu::refuse_in_capture("cudaMemcpyAsync with pageable host memory");
        emu::record_work(stream, "cudaMemcpyAsync", [=] { copy(dst, src, count); });
        return cudaSuccess;
    }
    if (emu::streams_queued()) return queue_copy(dst, src, count, host_src && emu::is_pageable(src),
                                                      host_dst && !host_src && emu::is_pageable(dst), stream);
    const cudaError_t err = copy(dst, src, count);
    return host_dst && !host_src && emu::is_pageable(dst) ? emu::host_sync(err) : err;
}
cudaError_t cudaMemset(void* ptr, int value, size_t count) {
    if (cudaError_t err = emu::refuse_in_capture("cudaMemset (synchronous)")) return err;
    if (count == 0) return cudaSuccess;
    if (!ptr) return fail(cudaErrorInvalidValue);
    if (emu::streams_queued()) {  // on the legacy stream, run now with what it waits for
        emu::queue_work(nullptr, "cudaMemset", [=] { memset(ptr, value, count); }, emu::WorkKind::device);
        emu::drain_stream(nullptr);
        return cudaSuccess;
    }
    memset(ptr, value, count);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
    if (emu::defers_work(stream)) {
        emu::record_work(stream, "cudaMemsetAsync", [=] { memset(ptr, value, count); });
        return ptr || count == 0 ? cudaSuccess : fail(cudaErrorInvalidValue);
    }
    if (count == 0) return cudaSuccess;
    if (!ptr) return fail(cudaErrorInvalidValue);
    memset(ptr, value, count);
    return cudaSuccess;
}

// ---- streams: work submitted to one has already run when the call returns (unless queued)
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    if (!stream) return fail(cudaErrorInvalidValue);
    *stream = new CUstream_st{};
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
    cudaError_t err = cudaStreamCreate(stream);
    if (err == cudaSuccess) (*stream)->blocking = !(flags & cudaStreamNonBlocking);
    return err;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    emu::forget_stream(stream);  // its queued work still runs
    delete stream;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (cudaError_t err = emu::refuse_in_capture("cudaStreamSynchronize")) return err;
    emu::drain_stream(stream);
    return emu::host_sync(emu::pending_launch_failure());
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    if (emu::capturing(stream)) return emu::refuse_in_capture("cudaStreamQuery on a capturing stream");
    return emu::stream_idle(stream) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    const cudaError_t err = emu::capture_stream_wait(stream, event);
    if (err == cudaSuccess && emu::streams_queued() && !emu::capturing(stream) && event->capture == 0)
        emu::queue_stream_wait(stream, event);
    return err;
}

// ---- events: the host time at which they were recorded
cudaError_t cudaEventCreate(cudaEvent_t* event) {
    if (!event) return fail(cudaErrorInvalidValue);
    *event = new CUevent_st{};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    cudaError_t err = cudaEventCreate(event);
    if (err == cudaSuccess) (*event)->timing = !(flags & cudaEventDisableTiming);
    return err;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    *event->time = std::chrono::steady_clock::now();
    event->recorded = true;
    event->queued = 0;
    emu::capture_event_record(event, stream);
    if (emu::streams_queued() && !emu::capturing(stream)) emu::queue_event_record(event, stream);
    return cudaSuccess;
}
// With cudaEventRecordExternal on a capturing stream the record itself is captured: a graph node that
// records the time each time the graph runs (timing a graph's parts). Otherwise a plain record.
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
    if (!(flags & cudaEventRecordExternal) || !emu::capturing(stream)) return cudaEventRecord(event, stream);
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    event->recorded = true;
    event->queued = 0;
    auto time = event->time;
    emu::record_work(stream, "(event record node)", [time] { *time = std::chrono::steady_clock::now(); },
                     emu::WorkKind::device);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (emu::event_in_active_capture(event)) return fail(cudaErrorCapturedEvent);
    if (cudaError_t err = emu::refuse_in_capture("cudaEventSynchronize")) return err;
    emu::drain_event(event);
    return emu::host_sync(cudaSuccess);
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (emu::event_in_active_capture(event)) return fail(cudaErrorCapturedEvent);
    return emu::event_done(event) ? cudaSuccess : cudaErrorNotReady;
}
// When a recorded event's work had run, on the host's steady clock (µs): the emulated device's events
// are host times, which the trainer's phase timers read directly (gpu/step_timer.cu).
namespace emu {
double event_time_us(cudaEvent_t event) {
    return std::chrono::duration<double, std::micro>(event->time->time_since_epoch()).count();
}
}  // namespace emu
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms) return fail(cudaErrorInvalidValue);
    if (!start || !end || !start->timing || !end->timing) return fail(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
    if (!emu::event_done(start) || !emu::event_done(end)) return cudaErrorNotReady;
    *ms = std::chrono::duration<float, std::milli>(*end->time - *start->time).count();
    return cudaSuccess;
}
