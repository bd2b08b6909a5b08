// CUDA graphs for work a trainer issues the same way again and again (a micro-step's forward and
// backward passes, an optimizer step's update): the first time a key is seen, the work is captured
// from its stream into a graph (nothing runs while it is captured) and instantiated; then, and every
// later time, one cudaGraphLaunch runs it all. The host's cost of hundreds of kernel launches becomes
// one launch, and the device runs the kernels back to back.
//
// What the captured work may do is what a capture allows: no allocation, no synchronisation, no copy
// from or to pageable host memory, no dependency on work issued outside the capture, and every stream
// it forks joined back before it ends. Kernel arguments and pointers are those of the capture: what
// changes between replays must live in device memory (or pinned host memory read by a captured copy),
// and anything else that changes (shapes, a flag) belongs in the key. The emulator enforces the same
// rules (emu/stream_capture.cpp).
//
//   GraphCache graphs(true);
//   graphs.run({B, T, last}, stream, [&] { ...issue the work on stream... });  // capture once, replay
#pragma once
#include <map>
#include <vector>

#include "kernels/common.h"

class GraphCache {
public:
    explicit GraphCache(bool enabled = false) : enabled_(enabled) {}
    GraphCache(const GraphCache&) = delete;
    GraphCache& operator=(const GraphCache&) = delete;
    ~GraphCache() { clear(); }

    bool enabled() const { return enabled_; }
    // Drops every graph (e.g. when the buffers they point into are reallocated).
    void clear() {
        for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
        graphs_.clear();
    }
    size_t size() const { return graphs_.size(); }

    // Runs `issue` (which puts work on `stream`): directly when graphs are off; else through the
    // graph of `key`, captured from it the first time. Returns true when this call captured.
    template <typename Issue>
    bool run(const std::vector<long long>& key, cudaStream_t stream, Issue&& issue) {
        if (!enabled_) {
            issue();
            return false;
        }
        auto it = graphs_.find(key);
        const bool capture = it == graphs_.end();
        if (capture) {
            cudaGraph_t graph = nullptr;
            cudaGraphExec_t exec = nullptr;
            CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
            issue();
            CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            CUDA_CHECK(cudaGraphDestroy(graph));
            it = graphs_.emplace(key, exec).first;
        }
        CUDA_CHECK(cudaGraphLaunch(it->second, stream));
        return capture;
    }

private:
    bool enabled_;
    std::map<std::vector<long long>, cudaGraphExec_t> graphs_;
};
