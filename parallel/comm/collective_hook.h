// Where the trainer's timers see the ranks' communication (gpu/step_timer.h): every collective of
// parallel/comm/ tells a hook when it is issued and when its call is done, and every place where the
// compute stream waits for another stream's collectives tells it when the wait begins and ends. The
// hook records CUDA events there (nothing when the timers are off or no hook is set): a collective's
// duration and bytes give its bus bandwidth; a wait on the compute stream is time the step spends on
// communication rather than compute.
#pragma once
#include "base/step_phases.h"
#include "kernels/common.h"
#include "parallel/plan/traffic.h"

class CollectiveHook {
public:
    virtual ~CollectiveHook() = default;
    // A collective of `kind` moving size_bytes (nccl-tests' size: bus_bandwidth in traffic.h) among
    // `ranks` ranks is issued on `stream`; on the compute stream it is time in `compute_phase`.
    virtual void collective_begins(CollectiveKind kind, double size_bytes, int ranks, cudaStream_t stream,
                                   StepPhase compute_phase) = 0;
    virtual void collective_ends(cudaStream_t stream) = 0;
    // The compute stream waits for other streams' work (time in `phase`: a wait for the data group's
    // collectives, a pipeline stage waiting for its neighbour) from here until wait_ends.
    virtual void wait_begins(StepPhase phase) = 0;
    virtual void wait_ends() = 0;
};

// The hook told around a scope: a collective's calls, or the compute stream's wait. A collective on
// another stream ends its scope before the event the compute stream waits on for its result is
// recorded, so that the hook's end event is done whenever the step is.
class HookedCollective {
public:
    HookedCollective(CollectiveHook* hook, CollectiveKind kind, double size_bytes, int ranks, cudaStream_t stream,
                     StepPhase compute_phase = StepPhase::COMM_WAIT)
        : hook_(ranks > 1 ? hook : nullptr), stream_(stream) {
        if (hook_) hook_->collective_begins(kind, size_bytes, ranks, stream, compute_phase);
    }
    ~HookedCollective() {
        if (hook_) hook_->collective_ends(stream_);
    }
    HookedCollective(const HookedCollective&) = delete;
    HookedCollective& operator=(const HookedCollective&) = delete;

private:
    CollectiveHook* hook_;
    cudaStream_t stream_;
};
class HookedWait {
public:
    HookedWait(CollectiveHook* hook, StepPhase phase) : hook_(hook) {
        if (hook_) hook_->wait_begins(phase);
    }
    ~HookedWait() {
        if (hook_) hook_->wait_ends();
    }
    HookedWait(const HookedWait&) = delete;
    HookedWait& operator=(const HookedWait&) = delete;

private:
    CollectiveHook* hook_;
};
