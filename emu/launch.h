// Launching an emulated kernel: LAUNCH (kernels/launch.h) calls emu::launch, which packs the
// arguments the way nvcc would (converted to the kernel's parameter types, copied once) and hands
// run_grid a function that runs the kernel as one CUDA thread. run_grid (grid_launch.cpp) checks the
// launch configuration as a GPU would, then runs the blocks in parallel over the cores, the threads
// of each block as fibers. Errors go to the runtime's last-error state (cudaGetLastError).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu/work_kind.h"

namespace emu {

struct LaunchConfig {
    const char* kernel_name;
    const void* kernel;  // for attributes set with cudaFuncSetAttribute
    dim3 grid, block;
    size_t dynamic_shared_bytes;
    cudaStream_t stream;
};
// Runs thread_body(arg) once per CUDA thread of the grid. Returns the launch's status.
cudaError_t run_grid(const LaunchConfig& config, void (*thread_body)(void*), void* arg);
// The launch checks run_grid makes first (block and grid limits, shared memory): cudaSuccess, or the
// error (recorded as the last error, with a report on stderr).
cudaError_t check_launch(const LaunchConfig& config);

// Stream capture (stream_capture.cpp): whether work issued to `stream` is being recorded into a graph
// rather than run. defers_work: whether work issued to `stream` is recorded or queued (a capture, or
// the queued streams of EMU_STREAMS, stream_queue.h) rather than run now; record_work then records or
// queues `work` (returns false and does nothing otherwise: the caller runs the work now). For the host
// stand-ins of libraries too; their collectives and transfers are WorkKind::communication, which runs
// in the order issued (stream_queue.h says why).
bool capturing(cudaStream_t stream);
bool defers_work(cudaStream_t stream);
bool record_work(cudaStream_t stream, const char* name, std::function<void()> work,
                 WorkKind kind = WorkKind::device);

template <typename... Params, typename... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
    static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
    struct Closure {
        void (*kernel)(Params...);
        std::tuple<std::decay_t<Params>...> params;
    };
    Closure closure{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
    void (*thread_body)(void*) = [](void* p) {
        Closure& c = *static_cast<Closure*>(p);
        std::apply(c.kernel, c.params);
    };
    const LaunchConfig config{name, (const void*)kernel, grid, block, shared_bytes, stream};
    if (defers_work(stream)) {  // the arguments as they are now, run when the graph or the queue does
        if (check_launch(config) != cudaSuccess) return;
        auto kept = std::make_shared<Closure>(std::move(closure));
        record_work(stream, name, [config, thread_body, kept] { run_grid(config, thread_body, kept.get()); });
        return;
    }
    run_grid(config, thread_body, &closure);
}

// Run each barrier phase's threads in a shuffled order from now on (0: in thread order).
// The environment variable EMU_SHUFFLE=<seed> sets it at start-up.
void set_shuffle_seed(unsigned long long seed);
// The report of the last kernel error found while running (a barrier some threads never
// reached, ...); empty when there was none. Cleared by cudaGetLastError.
std::string last_kernel_report();

// Counters of what a step costs on a real device, counted since the program started or since the
// last reset_counters(), over all host threads of the process:
//   launch_count()     kernels launched: every LAUNCH that passed the launch checks (one that the
//                      checks refuse never runs and is not counted), plus one per cublasLtMatmul
//                      of the cuBLASLt stand-in when it is linked (a real cuBLASLt call may launch
//                      one or two kernels; it is counted as one);
//   host_sync_count()  calls that make the host wait for the device: cudaDeviceSynchronize,
//                      cudaStreamSynchronize, cudaEventSynchronize, synchronous cudaMemcpy
//                      from device to host memory (kind cudaMemcpyDeviceToHost, or cudaMemcpyDefault
//                      with a source from cudaMalloc and a destination that is not), and
//                      cudaMemcpyAsync from device memory into pageable (not cudaMallocHost) host
//                      memory, which returns only once the copy is done;
//   graph_launch_count()  cudaGraphLaunch calls;
//   graph_kernel_count()  of launch_count(), the kernels (and library launches) a graph ran.
// Kernels launched from the host are launch_count() − graph_kernel_count(); with the graph launches,
// the launches the host issued. Other asynchronous copies, memsets and event records count in none.
unsigned long long launch_count();
unsigned long long host_sync_count();
unsigned long long graph_launch_count();
unsigned long long graph_kernel_count();
void reset_counters();
void count_graph_launch();
// Adds one to launch_count(): for host stand-ins of libraries whose calls launch kernels on a GPU.
void count_library_launch();

}  // namespace emu

// cuda_runtime.h gives nvcc overloads taking the kernel itself; these are the emulator's.
template <typename... Params>
cudaError_t cudaFuncSetAttribute(void (*kernel)(Params...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)kernel, attr, value);
}
template <typename... Params>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, void (*kernel)(Params...)) {
    return cudaFuncGetAttributes(attr, (const void*)kernel);
}
