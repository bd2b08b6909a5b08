// The GPU model's phase timers: CUDA events recorded where the step changes phase (base/step_timeline.h)
// and around every collective (parallel/comm/collective_hook.h), read after the step's one host
// synchronisation, so timing adds no synchronisation of its own. Each event's time on the host's clock
// is the moment of the synchronisation minus its distance from the step's last event, which the
// device records just before the host waits for it.
//
// A mark records an event on the compute stream: from there to the next mark the stream works in the
// mark's phase (a wait for another stream's collectives shows as the time between the marks around
// the wait). A collective records an event before and after it on the stream that runs it.
//
// Inside a CUDA graph (gpu/cuda_graphs.h) the events are recorded by the graph's own nodes
// (cudaEventRecordExternal): a graph captured with timing records the same events each time it runs,
// so its marks are kept with it and repeated on each replay. A graph that runs more than once in a
// step would overwrite its events: the model gives each micro-step a graph of its own while timing.
//
// In the CUDA build every mark also opens an NVTX range of the same name (closing the one before), so
// Nsight Systems shows the phases and each layer's forward and backward on the host's timeline; a
// replayed CUDA graph shows as its launch (profile with --cuda-graphs 0, or nsys's
// --cuda-graph-trace=node, to see its parts).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "base/step_timeline.h"
#include "kernels/common.h"
#include "parallel/comm/collective_hook.h"

class GpuStepTimer : public CollectiveHook {
public:
    GpuStepTimer() = default;
    GpuStepTimer(const GpuStepTimer&) = delete;
    GpuStepTimer& operator=(const GpuStepTimer&) = delete;
    ~GpuStepTimer() override;

    // Timing on (the model's compute stream) or off; the model's graphs must be made afresh after a change.
    void set_enabled(bool enabled, cudaStream_t compute) {
        enabled_ = enabled;
        compute_ = compute;
    }
    bool enabled() const { return enabled_; }

    // A step begins: the last one's records forgotten; marks and collectives are recorded until read.
    void begin_step();
    // The compute stream works in `phase` from here on (in layer `layer`'s forward or backward pass;
    // -1: outside the layers).
    void mark(StepPhase phase, int layer = -1, bool backward = false);
    // The step's last event, on the compute stream, just before the host synchronises with it.
    void end_step() { mark(StepPhase::COUNT); }
    // After the synchronisation (host time sync_us, clock_us()): the step's marks and collectives on
    // the host's clock into *timeline; recording stops until the next begin_step.
    void read(StepTimeline* timeline, double sync_us);

    // Around GraphCache::run: what is recorded between the two belongs to the graph `key`.
    void graph_begins(const std::vector<long long>& key);
    void graph_ends(bool captured);

    // CollectiveHook
    void collective_begins(CollectiveKind kind, double size_bytes, int ranks, cudaStream_t stream,
                           StepPhase compute_phase) override;
    void collective_ends(cudaStream_t stream) override;
    void wait_begins(StepPhase phase) override;
    void wait_ends() override;

private:
    struct Record {
        enum Type { MARK, BEGIN, END } type = MARK;
        cudaEvent_t event = nullptr;
        StepPhase phase = StepPhase::COUNT;  // MARK
        int layer = -1;
        bool backward = false;
        CollectiveKind kind = CollectiveKind::ALL_REDUCE;  // BEGIN
        double size_bytes = 0, bus_bytes = 0;
        int stream = 0;  // BEGIN, END: which communication stream
    };
    bool recording() const { return enabled_ && in_step_; }
    void record(Record r, cudaStream_t stream);
    int stream_index(cudaStream_t stream);
    void open_range(const std::string& name);
#ifdef EMU_CUDA
    // The emulated device's collectives, which stop its compute while they run: comm wait marks.
    static void add_emulated_waits(std::vector<StepMark>* marks);
#endif

    bool enabled_ = false, in_step_ = false;
    cudaStream_t compute_ = nullptr;
    std::vector<Record> records_;
    std::vector<cudaEvent_t> pool_;  // events for records outside graphs, reused each step
    size_t pool_used_ = 0;
    std::vector<cudaEvent_t> graph_events_;  // events the captured graphs record, kept with them
    std::map<std::vector<long long>, std::vector<Record>> graph_records_;
    std::vector<long long> graph_key_;
    bool in_graph_ = false;
    size_t graph_first_ = 0;
    // Where the compute stream is (for a wait to return to), and the waits and collectives open on it.
    StepMark now_;
    std::vector<StepMark> interrupted_;
    std::vector<cudaStream_t> streams_;  // the communication streams seen, in order
    bool range_open_ = false;
};
