// Where a run's time goes, for the training loop (--timers, --straggler-threshold, --profile-steps):
//   - every step, each rank's phases are marked in a timeline (base/step_timeline.h): the loop marks
//     the batches it reads, the model the rest (the GPU model from CUDA events);
//   - on logged steps, one gather brings every rank's phase times, host, GPU and telemetry to rank 0,
//     which adds to the step line the phase whose ranks differ most (--timers 1) or prints the table
//     of each phase's minimum and maximum with their ranks (--timers 2), puts them in metrics.jsonl
//     with this rank's collectives (bytes and bus bandwidth per kind), and names a rank whose compute
//     stays slower than its peers' (train/straggler_detector.h);
//   - with --profile-steps A:B, each rank keeps the spans of steps A..B; after step B rank 0 gathers
//     them, moves each rank's onto its own clock (offsets measured at start-up) and writes trace.json
//     in the output folder (train/chrome_trace.h).
// A checkpoint's time is counted in the next logged step's phases (it is written after its step's line),
// and so is the time a rank waits in the gather for slower ranks, as comm wait (the gather is where a
// rank that finished early first meets the others).
#pragma once
#include <string>
#include <vector>

#include "base/ranks.h"
#include "base/step_timeline.h"
#include "base/train_model.h"
#include "base/train_options.h"
#include "train/chrome_trace.h"
#include "train/straggler_detector.h"

class StepProfile {
public:
    // stage_of_rank[r]: the work rank r does (its pipeline stage), for the straggler detector.
    StepProfile(const TrainOptions& opt, RankGroup& ranks, TrainModel& model, std::vector<int> stage_of_rank);
    bool timing() const { return timers_ > 0; }

    // Before a step's work: a fresh timeline, marked from now.
    void step_begins(int step);
    // The model's next_batch, its reads marked as the data phase.
    TrainModel::NextBatch timed_reads(TrainModel::NextBatch next_batch);
    // After the step's work, which took step_ms. On logged steps (the same on every rank: it gathers)
    // returns the text the step line ends with ("" for none) and sets *timers_json; prints the table and
    // the straggler lines.
    std::string step_ends(int step, double step_ms, bool logged, std::string* timers_json);
    // A checkpoint written after `step`, taking `ms`.
    void checkpoint_written(int step, double start_us, double ms);
    // What the timers cost the steps, measured in this run: the marks (each costs what marking a
    // timeline costs here, measured at start-up) and the loop's own work for them, against the steps'
    // time. One line for the end of the run ("" with the timers off).
    std::string overhead_report() const;

private:
    void gather_and_report(int step, std::string* line, std::string* timers_json);
    void keep_spans(int step);
    void write_trace();

    int timers_;
    RankGroup& ranks_;
    TrainModel& model_;
    std::string output_dir_;
    std::vector<int> stage_of_rank_;
    StepTimeline timeline_;
    PhaseTimes pending_;  // time outside the steps (checkpoints) since the last logged step
    StragglerDetector stragglers_;
    std::string host_;
    int first_profiled_ = 0, last_profiled_ = -1;  // --profile-steps
    std::vector<TraceEvent> spans_;                 // this rank's spans of the profiled steps
    std::vector<double> clock_offsets_us_;          // rank 0: each rank's clock's offset from its own
    // The timers' own cost: marking once (µs), marks made, the loop's own timing work (µs), steps.
    double mark_cost_us_ = 0, own_us_ = 0, steps_ms_ = 0;
    double waited_us_ = 0;  // of own_us_, waiting in the gather for slower ranks (not the timers' cost)
    long long marks_ = 0, steps_ = 0;
};
