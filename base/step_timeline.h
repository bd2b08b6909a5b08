// What one rank measured of one training step, on its own clock: a sequence of marks, each saying
// what the rank works on from that moment until the next mark (a phase of step_phases.h, and where it
// is in a layer's pass, the layer), and the collectives its communication streams ran. From these come
// the step's phase times (the sum of each phase's intervals), the spans a timeline draws (the phases,
// each layer's forward and backward, each collective) and, per kind of collective, the bytes it moved
// and the bus bandwidth it reached.
//
// The CPU trainer marks with the clock as it goes; the GPU trainer records CUDA events where it marks
// and converts them to this clock after the step's one synchronisation (gpu/step_timer.h); the training
// loop adds what it does itself (reading the batches, writing a checkpoint).
#pragma once
#include <string>
#include <vector>

#include "base/step_phases.h"

// Microseconds on this process's steady clock.
double clock_us();

// One mark: from time_us on, the rank works in `phase` (COUNT: on nothing the phases name, e.g. the
// loop's own bookkeeping), inside layer `layer`'s forward or backward pass (-1: outside any layer).
struct StepMark {
    StepPhase phase = StepPhase::COUNT;
    int layer = -1;
    bool backward = false;
    double time_us = 0;
};

// One collective a communication stream ran, on the same clock. size_bytes is nccl-tests' size of it
// (an all-reduce's buffer, an all-gather's gathered result, a reduce-scatter's input, a send's message).
// kind: "all-reduce", "all-gather", "reduce-scatter", "broadcast" or "send/receive".
struct TimedCollective {
    std::string kind;
    double size_bytes = 0, bus_bytes = 0;  // bus_bytes: size times nccl-tests' bus factor
    int stream = 0;                        // which communication stream (0, 1, ...) ran it
    double start_us = 0, duration_us = 0;
};

// Per kind of collective over a step: how many, their bytes and their time, and the bus bandwidth
// they reached together (nccl-tests' definition: bus bytes over time).
struct CollectiveTotals {
    std::string kind;
    int count = 0;
    double size_bytes = 0, bus_bytes = 0, ms = 0;
    double bus_gbps() const { return ms > 0 ? bus_bytes / (ms * 1e-3) / 1e9 : 0; }
};

// A piece of a timeline: what ran, on which track, from when, for how long (µs on this rank's clock).
// Tracks: 0 the step and its phases, 1 the layers' passes, 2 + s communication stream s.
struct TimedSpan {
    std::string name, category;
    int track = 0;
    double start_us = 0, duration_us = 0;
};
constexpr int kPhaseTrack = 0, kLayerTrack = 1, kFirstCommunicationTrack = 2;

class StepTimeline {
public:
    void clear() {
        marks_.clear();
        collectives_.clear();
        extra_ = PhaseTimes();
    }
    // The rank works in `phase` from t_us on (marks may come in any order; they are sorted by time).
    void mark(StepPhase phase, double t_us, int layer = -1, bool backward = false) {
        marks_.push_back({phase, layer, backward, t_us});
    }
    void add_collective(const TimedCollective& c) { collectives_.push_back(c); }
    // Time spent outside the marked interval (a checkpoint written after the step) in `phase`.
    void add_time(StepPhase phase, double ms) { extra_.ms[(int)phase] += ms; }

    // Each phase's time: the intervals between consecutive marks, by the earlier mark's phase, with the
    // time added by add_time.
    PhaseTimes phase_times() const;
    // The step (step_name) from its first mark to its last, its phases inside it, and the layers'
    // passes on the phase track's side; each collective on its stream's track.
    std::vector<TimedSpan> spans(const std::string& step_name) const;
    // Per kind, in the order of the kinds' first appearance.
    std::vector<CollectiveTotals> collective_totals() const;
    const std::vector<StepMark>& marks() const { return marks_; }
    const std::vector<TimedCollective>& collectives() const { return collectives_; }

private:
    std::vector<StepMark> sorted_marks() const;
    std::vector<StepMark> marks_;
    std::vector<TimedCollective> collectives_;
    PhaseTimes extra_;
};

// The metrics log's fields for a step's collectives (train/metrics_log.h):
// "comm":{"all-reduce":{"count":..,"bytes":..,"ms":..,"bus_gbps":..},...}; "" when there were none.
std::string collective_metrics_json(const std::vector<CollectiveTotals>& totals);
// One line: "comm: all-reduce 24.0 MiB in 3.10 ms (12.9 GB/s bus) | all-gather ..."; "" when none.
std::string collective_summary(const std::vector<CollectiveTotals>& totals);
