// Stream capture and CUDA graphs on the emulated device: cudaStreamBeginCapture ... EndCapture records
// the work issued to the captured streams (kernel launches, asynchronous copies and memsets, and the
// stand-ins' cuBLASLt products and NCCL collectives) instead of running it; cudaGraphInstantiate
// copies the recording; cudaGraphLaunch runs it, node after node in the order it was issued (a valid
// order of any graph the capture could make: the emulator runs every stream's work in issue order), or,
// with queued streams (stream_queue.h), queues the nodes to run in any order the graph's edges allow.
// The edges are recorded during the capture: each node follows the node before it on its stream and
// the nodes an event it waited on was recorded after. Kernel arguments are the values at capture; a
// captured copy reads its source when the graph runs.
//
// What a real capture refuses is refused here too, so that a trainer step that could not be captured
// on a GPU fails in the emulated tests (one capture at a time, in cudaStreamCaptureModeGlobal):
//   - synchronising (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize), allocating
//     or freeing (cudaMalloc, cudaMallocHost, cudaFree, cudaFreeHost), synchronous copies and memsets,
//     and asynchronous copies to or from pageable host memory: the call returns
//     cudaErrorStreamCaptureUnsupported and invalidates the capture (EndCapture then returns
//     cudaErrorStreamCaptureInvalidated);
//   - a capturing stream waiting on an event recorded outside the capture (cudaErrorStreamCaptureIsolation);
//   - querying or synchronising an event recorded in the capture (cudaErrorCapturedEvent);
//   - ending a capture while a stream it forked (through cudaEventRecord on a captured stream and
//     cudaStreamWaitEvent on another) has captured work the origin stream has not waited for
//     (cudaErrorStreamCaptureUnjoined). Only direct joins into the origin stream are tracked.
#include "emu/cuda_emu.h"
#include "emu/runtime_state.h"
#include "emu/stream_queue.h"

#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

struct CUgraph_st {
    std::vector<emu::GraphNode> nodes;
};
struct CUgraphExec_st {
    std::vector<emu::GraphNode> nodes;
};

namespace emu {
namespace {

struct Capture {
    unsigned long long id = 0;  // 0: none active
    bool invalidated = false;
    cudaStream_t origin = nullptr;
    CUgraph_st* graph = nullptr;
    std::map<cudaStream_t, size_t> captured;  // streams in the capture: nodes each has issued so far
    std::map<cudaStream_t, size_t> joined;    // how many of them the origin has waited for
    std::map<cudaStream_t, std::vector<size_t>> next_after;  // the nodes a stream's next node waits for
};
Capture g_capture;
unsigned long long g_next_capture_id = 1;
thread_local bool t_replaying = false;

bool active() { return g_capture.id != 0; }

}  // namespace

bool capturing(cudaStream_t stream) { return active() && g_capture.captured.count(stream) != 0; }

void capture_work(cudaStream_t stream, const char* name, std::function<void()> work, WorkKind kind) {
    std::vector<size_t>& after = g_capture.next_after[stream];
    if (!g_capture.invalidated) {
        g_capture.graph->nodes.push_back({name, std::move(work), kind, after});
        after = {g_capture.graph->nodes.size() - 1};
    }
    g_capture.captured[stream]++;
}

bool defers_work(cudaStream_t stream) { return capturing(stream) || streams_queued(); }

bool record_work(cudaStream_t stream, const char* name, std::function<void()> work, WorkKind kind) {
    if (capturing(stream)) {
        capture_work(stream, name, std::move(work), kind);
        return true;
    }
    if (!streams_queued()) return false;
    queue_work(stream, name, std::move(work), kind);
    return true;
}

bool replaying_graph() { return t_replaying; }

cudaError_t refuse_in_capture(const char* what) {
    if (!active()) return cudaSuccess;
    fprintf(stderr, "emu: %s while a stream is being captured: not permitted (the capture is invalidated)\n", what);
    g_capture.invalidated = true;
    record_error(cudaErrorStreamCaptureUnsupported, what);
    return cudaErrorStreamCaptureUnsupported;
}

void capture_event_record(cudaEvent_t event, cudaStream_t stream) {
    event->capture = capturing(stream) ? g_capture.id : 0;
    event->stream = stream;
    event->mark = capturing(stream) ? g_capture.captured[stream] : 0;
    event->captured_after = capturing(stream) ? g_capture.next_after[stream] : std::vector<size_t>{};
}

cudaError_t capture_stream_wait(cudaStream_t stream, cudaEvent_t event) {
    const bool captured_event = active() && event->capture == g_capture.id;
    if (!captured_event) {
        if (capturing(stream) && event->recorded) {
            fprintf(stderr, "emu: a capturing stream waits on an event recorded outside the capture\n");
            g_capture.invalidated = true;
            record_error(cudaErrorStreamCaptureIsolation);
            return cudaErrorStreamCaptureIsolation;
        }
        return cudaSuccess;
    }
    if (!capturing(stream)) g_capture.captured[stream] = 0;  // a fork: the stream joins the capture
    std::vector<size_t>& after = g_capture.next_after[stream];
    after.insert(after.end(), event->captured_after.begin(), event->captured_after.end());
    if (stream == g_capture.origin && event->stream != stream) {
        size_t& joined = g_capture.joined[event->stream];
        if (event->mark > joined) joined = event->mark;
    }
    return cudaSuccess;
}

bool event_in_active_capture(cudaEvent_t event) { return active() && event->capture == g_capture.id; }

}  // namespace emu

using emu::g_capture;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
    if (!stream) {  // the legacy stream synchronises with every other: it cannot be captured
        emu::record_error(cudaErrorStreamCaptureUnsupported, "a capture of the legacy default stream");
        return cudaErrorStreamCaptureUnsupported;
    }
    if (emu::active()) {
        emu::record_error(cudaErrorIllegalState, "a second capture (the emulator captures one stream at a time)");
        return cudaErrorIllegalState;
    }
    g_capture = emu::Capture{};
    g_capture.id = emu::g_next_capture_id++;
    g_capture.origin = stream;
    g_capture.graph = new CUgraph_st;
    g_capture.captured[stream] = 0;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    if (!graph) return cudaErrorInvalidValue;
    *graph = nullptr;
    if (!emu::active() || stream != g_capture.origin) {
        emu::record_error(cudaErrorIllegalState, "cudaStreamEndCapture without a capture of this stream");
        return cudaErrorIllegalState;
    }
    cudaError_t result = cudaSuccess;
    if (g_capture.invalidated) result = cudaErrorStreamCaptureInvalidated;
    for (const auto& [s, issued] : g_capture.captured)
        if (result == cudaSuccess && s != g_capture.origin && issued > g_capture.joined[s]) {
            fprintf(stderr, "emu: the capture ends with work on a forked stream that the origin stream never "
                            "waited for\n");
            result = cudaErrorStreamCaptureUnjoined;
        }
    if (result == cudaSuccess)
        *graph = g_capture.graph;
    else
        delete g_capture.graph;
    g_capture = emu::Capture{};
    if (result != cudaSuccess) emu::record_error(result);
    return result;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    if (!status) return cudaErrorInvalidValue;
    *status = !emu::capturing(stream)       ? cudaStreamCaptureStatusNone
              : g_capture.invalidated       ? cudaStreamCaptureStatusInvalidated
                                            : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    if (!exec || !graph) return cudaErrorInvalidValue;
    *exec = new CUgraphExec_st{graph->nodes};
    return cudaSuccess;
}

// Runs the nodes in order; a failed kernel stops the graph (its error is the launch's). With queued
// streams, queues them instead (a failed kernel then stops nothing).
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return cudaErrorInvalidResourceHandle;
    if (emu::capturing(stream)) return emu::refuse_in_capture("cudaGraphLaunch into a capture");
    emu::count_graph_launch();
    if (emu::streams_queued()) {
        std::vector<emu::GraphNode> nodes = exec->nodes;
        for (emu::GraphNode& node : nodes)
            node.work = [work = node.work] {
                emu::t_replaying = true;
                work();
                emu::t_replaying = false;
            };
        emu::queue_graph(stream, nodes);
        return cudaSuccess;
    }
    emu::t_replaying = true;
    for (const emu::GraphNode& node : exec->nodes) {
        node.work();
        if (cudaPeekAtLastError() == cudaErrorLaunchFailure) break;
    }
    emu::t_replaying = false;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}
