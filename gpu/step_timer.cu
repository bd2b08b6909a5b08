// The GPU model's phase timers (step_timer.h).
#include "gpu/step_timer.h"

#include <algorithm>
#include <cmath>

#include "base/errors.h"

#ifndef EMU_CUDA
#include <nvtx3/nvToolsExt.h>
#else
// When the NCCL stand-in's collectives ran (emu/nccl_host.cpp; weak: a program may link no stand-in).
// An emulated event's host time (emu/cuda_runtime_host.cpp).
namespace emu {
std::vector<std::pair<double, double>> take_communication_intervals() __attribute__((weak));
double event_time_us(cudaEvent_t event);
}
#endif

GpuStepTimer::~GpuStepTimer() {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
    for (cudaEvent_t e : graph_events_) cudaEventDestroy(e);
#ifndef EMU_CUDA
    if (range_open_) nvtxRangePop();
#endif
}

void GpuStepTimer::begin_step() {
    records_.clear();
    pool_used_ = 0;
    interrupted_.clear();
    now_ = StepMark();
    in_step_ = enabled_;
#ifdef EMU_CUDA
    if (in_step_ && emu::take_communication_intervals) emu::take_communication_intervals();  // earlier ones
#endif
}

// Closes the NVTX range open and opens one named `name` ("" closes only).
void GpuStepTimer::open_range(const std::string& name) {
#ifndef EMU_CUDA
    if (range_open_) nvtxRangePop();
    range_open_ = !name.empty();
    if (range_open_) nvtxRangePushA(name.c_str());
#else
    (void)name;
#endif
}

// An event for the record, recorded on `stream`: while a graph is captured, a new one the graph's node
// records (kept with the graph); otherwise the step's next one from the pool.
void GpuStepTimer::record(Record r, cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    if (in_graph_) {
        CUDA_CHECK(cudaEventCreate(&event));
        graph_events_.push_back(event);
        CUDA_CHECK(cudaEventRecordWithFlags(event, stream, cudaEventRecordExternal));
    } else {
        if (pool_used_ == pool_.size()) {
            pool_.push_back(nullptr);
            CUDA_CHECK(cudaEventCreate(&pool_.back()));
        }
        event = pool_[pool_used_++];
        CUDA_CHECK(cudaEventRecord(event, stream));
    }
    r.event = event;
    records_.push_back(r);
}

int GpuStepTimer::stream_index(cudaStream_t stream) {
    auto it = std::find(streams_.begin(), streams_.end(), stream);
    if (it != streams_.end()) return (int)(it - streams_.begin());
    streams_.push_back(stream);
    return (int)streams_.size() - 1;
}

void GpuStepTimer::mark(StepPhase phase, int layer, bool backward) {
    if (!recording()) return;
    now_ = {phase, layer, backward, 0};
    Record r;
    r.type = Record::MARK, r.phase = phase, r.layer = layer, r.backward = backward;
    record(r, compute_);
    if (phase == StepPhase::COUNT)
        open_range("");
    else
        open_range(layer >= 0 ? strprintf("layer %d %s", layer, backward ? "backward" : "forward") : phase_name(phase));
}

void GpuStepTimer::wait_begins(StepPhase phase) {
    if (!recording()) return;
    interrupted_.push_back(now_);
    mark(phase, now_.layer, now_.backward);
}

void GpuStepTimer::wait_ends() {
    if (!recording() || interrupted_.empty()) return;
    const StepMark back = interrupted_.back();
    interrupted_.pop_back();
    mark(back.phase, back.layer, back.backward);
}

void GpuStepTimer::collective_begins(CollectiveKind kind, double size_bytes, int ranks, cudaStream_t stream,
                                     StepPhase compute_phase) {
    if (!recording()) return;
    if (stream == compute_) wait_begins(compute_phase);
    Record r;
    r.type = Record::BEGIN, r.kind = kind, r.size_bytes = size_bytes;
    r.bus_bytes = bus_bandwidth(kind, size_bytes, ranks, 1.0);  // bytes a second over one second
    r.stream = stream_index(stream);
    record(r, stream);
}

void GpuStepTimer::collective_ends(cudaStream_t stream) {
    if (!recording()) return;
    Record r;
    r.type = Record::END, r.stream = stream_index(stream);
    record(r, stream);
    if (stream == compute_) wait_ends();
}

void GpuStepTimer::graph_begins(const std::vector<long long>& key) {
    if (!recording()) return;
    graph_key_ = key;
    in_graph_ = true;
    graph_first_ = records_.size();
}

// A capture keeps what it recorded with its graph; a replay records those same events again.
void GpuStepTimer::graph_ends(bool captured) {
    if (!in_graph_) return;
    in_graph_ = false;
    if (captured) {
        graph_records_[graph_key_].assign(records_.begin() + graph_first_, records_.end());
    } else {
        const std::vector<Record>& replayed = graph_records_[graph_key_];
        records_.insert(records_.end(), replayed.begin(), replayed.end());
        for (const Record& r : replayed)
            if (r.type == Record::MARK) now_ = {r.phase, r.layer, r.backward, 0};
    }
}

static const char* collective_kind_name(CollectiveKind kind) {
    switch (kind) {
        case CollectiveKind::ALL_REDUCE: return "all-reduce";
        case CollectiveKind::ALL_GATHER: return "all-gather";
        case CollectiveKind::REDUCE_SCATTER: return "reduce-scatter";
        case CollectiveKind::BROADCAST: return "broadcast";
        case CollectiveKind::SEND: return "send/receive";
        case CollectiveKind::ALL_TO_ALL: return "all-to-all";
    }
    return "?";
}

void GpuStepTimer::read(StepTimeline* timeline, double sync_us) {
    if (!in_step_) return;
    in_step_ = false;
    open_range("");
    if (records_.empty()) return;
    const cudaEvent_t last = records_.back().event;
    // An event the synchronisation did not cover (work on another stream the step never waited for)
    // is left out rather than waited for.
    auto time_us = [&](cudaEvent_t e) {
        float ms = 0;
        if (cudaEventQuery(e) != cudaSuccess) {
            cudaGetLastError();  // the query's cudaErrorNotReady is not an error of the step
            return (double)NAN;
        }
#ifdef EMU_CUDA
        // The emulated device's events are host times already; its synchronisation may run other
        // streams' work after the step's last event, so the anchor below would shift them.
        (void)ms, (void)last, (void)sync_us;
        return emu::event_time_us(e);
#else
        CUDA_CHECK(cudaEventElapsedTime(&ms, e, last));
        return sync_us - 1000.0 * ms;
#endif
    };
    std::vector<std::vector<const Record*>> open(streams_.size());  // each stream's collectives begun
    std::vector<StepMark> marks;
    for (const Record& r : records_) {
        if (r.type == Record::MARK) {
            const double t = time_us(r.event);
            if (!std::isnan(t)) marks.push_back({r.phase, r.layer, r.backward, t});
        } else if (r.type == Record::BEGIN) {
            open[r.stream].push_back(&r);
        } else if (!open[r.stream].empty()) {
            const Record& begin = *open[r.stream].back();
            open[r.stream].pop_back();
            TimedCollective c;
            c.kind = collective_kind_name(begin.kind);
            c.size_bytes = begin.size_bytes, c.bus_bytes = begin.bus_bytes, c.stream = r.stream;
            c.start_us = time_us(begin.event);
            c.duration_us = time_us(r.event) - c.start_us;
            if (std::isnan(c.duration_us)) continue;
            timeline->add_collective(c);
        }
    }
#ifdef EMU_CUDA
    add_emulated_waits(&marks);
#endif
    for (const StepMark& m : marks) timeline->mark(m.phase, m.time_us, m.layer, m.backward);
}

#ifdef EMU_CUDA
// The emulated device runs every stream's work on one host thread, one piece after the other (emu/
// stream_queue.h): while a collective runs, blocked until every rank reaches it, the compute stream
// computes nothing. That time is the compute stream's wait for communication, as it is on a GPU (where
// the collective would overlap the compute and the compute stream would wait for it later): marked
// comm wait, inside the layer it interrupted, from the stand-in's own record of when each ran.
void GpuStepTimer::add_emulated_waits(std::vector<StepMark>* marks) {
    if (!emu::take_communication_intervals) return;
    const std::vector<std::pair<double, double>> ran = emu::take_communication_intervals();
    std::vector<StepMark> sorted = *marks;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const StepMark& a, const StepMark& b) { return a.time_us < b.time_us; });
    if (sorted.size() < 2) return;
    auto active_at = [&](double t) {  // the mark in force at t
        auto it = std::upper_bound(sorted.begin(), sorted.end(), t,
                                   [](double x, const StepMark& m) { return x < m.time_us; });
        return *(it - 1);
    };
    for (const auto& [start, end] : ran) {
        if (start < sorted.front().time_us || end > sorted.back().time_us) continue;
        const StepMark during = active_at(start), after = active_at(end);
        const bool waiting = during.phase == StepPhase::COMM_WAIT || during.phase == StepPhase::BUBBLE ||
                             during.phase == StepPhase::TENSOR_WAIT;  // already a wait of its own kind
        marks->push_back({waiting ? during.phase : StepPhase::COMM_WAIT, during.layer, during.backward, start});
        marks->push_back({after.phase, after.layer, after.backward, end});
    }
}
#endif
