// State shared by the emulated CUDA runtime (cuda_runtime_host.cpp), stream capture
// (stream_capture.cpp), the queued streams (stream_queue.cpp) and the kernel launcher
// (grid_launch.cpp): the calling host thread's last error, the kernels' attributes, the stream and
// event objects, and the capture's hooks.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "emu/work_kind.h"

struct CUstream_st {
    bool blocking = true;  // false: created cudaStreamNonBlocking (no ordering with the legacy stream)
};
struct CUevent_st {
    // When it was recorded (queued streams: when the work before its record had run), shared with the
    // queued record, which may run after the event is destroyed.
    std::shared_ptr<std::chrono::steady_clock::time_point> time =
        std::make_shared<std::chrono::steady_clock::time_point>();
    bool recorded = false;
    bool timing = true;
    // Stream capture: the capture that last recorded it (0: recorded outside any), the stream it was
    // recorded on, how many nodes that stream had captured by then, and the nodes a stream waiting on
    // it waits for.
    unsigned long long capture = 0;
    cudaStream_t stream = nullptr;
    size_t mark = 0;
    std::vector<size_t> captured_after;
    // Queued streams (stream_queue.h): the queued record (0: none).
    unsigned long long queued = 0;
};

namespace emu {

// Records err as the last error of this host thread (kept until cudaGetLastError), with the
// report that explains a failed launch.
void record_error(cudaError_t err, const std::string& report = "");
// Most dynamic shared memory a launch of `kernel` may use (48 KiB unless raised through
// cudaFuncSetAttribute).
size_t max_dynamic_shared_bytes(const void* kernel);
// Sets launch_count() and its graph counters back to 0 (reset_counters() calls it).
void reset_launch_count();
constexpr size_t kDefaultSharedBytes = 48 << 10;
constexpr size_t kMaxSharedBytesOptIn = 227 << 10;  // an H100's opt-in limit per block

// ---- stream capture (stream_capture.cpp)
// cudaSuccess when no capture is active; else `what` (a call a capture forbids: synchronising,
// allocating, a synchronous copy) invalidates it, is reported on stderr, and the call returns
// cudaErrorStreamCaptureUnsupported.
cudaError_t refuse_in_capture(const char* what);
// The event hooks: cudaEventRecord on a capturing stream marks the event as the capture's;
// cudaStreamWaitEvent on such an event joins the waiting stream to the capture (a fork), or, from the
// capture's origin, joins the recording stream back (a join); a capturing stream waiting on an event
// recorded outside the capture is an isolation error.
void capture_event_record(cudaEvent_t event, cudaStream_t stream);
// Adds `work` to the active capture's graph as a node of `stream` (which must be capturing).
void capture_work(cudaStream_t stream, const char* name, std::function<void()> work, WorkKind kind);
cudaError_t capture_stream_wait(cudaStream_t stream, cudaEvent_t event);
// True when the event was last recorded in the capture still active (cudaEventQuery /
// cudaEventSynchronize refuse it).
bool event_in_active_capture(cudaEvent_t event);
// True while a graph's nodes run (cudaGraphLaunch): the counters count its kernels apart.
bool replaying_graph();

}  // namespace emu
