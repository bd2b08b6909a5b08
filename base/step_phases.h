// Where a training step's time goes, phase by phase, and how the phases compare across ranks.
//
// Every rank measures the same phases of a step (the GPU trainer with CUDA events read one step
// late, the CPU trainer with the clock): reading the batch, the forward pass, the loss, the backward
// pass, the time the compute stream waits for the gradients' reduction, the optimizer, writing a
// checkpoint, and where they apply the pipeline's bubble (a stage waiting for its neighbour) and the
// time spent in the tensor group's collectives. A logged step gathers every rank's times on rank 0
// (one small gather), which reduces them to a minimum and a maximum per phase with the ranks that
// had them: a phase whose maximum stands out names the slow rank; a rank that is slow in compute
// makes the others wait, which shows as their communication wait.
//
// Phases that do not apply to a run (no pipeline, no tensor parallelism, no checkpoint this step)
// measure 0 and are left out of the report.
#pragma once
#include <string>
#include <vector>

enum class StepPhase {
    DATA,         // the next batch read and copied to the device
    FORWARD,      // the layers' forward passes
    LOSS,         // the classifier and the cross-entropy (and its gradient)
    BACKWARD,     // the layers' backward passes
    COMM_WAIT,    // the compute waiting for the data group's gradient reductions and weight gathers
    OPTIMIZER,    // the gradient norm, clipping and the update
    CHECKPOINT,   // writing a checkpoint
    BUBBLE,       // pipeline parallelism: waiting for a neighbouring stage
    TENSOR_WAIT,  // tensor parallelism: the tensor group's collectives
    COUNT
};
constexpr int kStepPhases = (int)StepPhase::COUNT;

// "data", "forward", "loss", "backward", "comm wait", "optimizer", "checkpoint", "bubble", "tensor wait"
const char* phase_name(StepPhase phase);
// The phases a rank computes in (forward, loss, backward, optimizer): a straggler is slow in these.
bool is_compute_phase(StepPhase phase);

// One rank's phase times of one step, in milliseconds.
struct PhaseTimes {
    double ms[kStepPhases] = {};
    double& operator[](StepPhase p) { return ms[(int)p]; }
    double operator[](StepPhase p) const { return ms[(int)p]; }
    double total() const;
    double compute() const;  // the compute phases' sum
};

// A phase across ranks: its fastest and slowest time and the ranks that had them (the lowest rank
// on a tie).
struct PhaseSpread {
    double min_ms = 0, max_ms = 0;
    int min_rank = 0, max_rank = 0;
    bool measured() const { return max_ms > 0; }
};
// Every phase's spread over `by_rank` (rank order; at least one rank).
std::vector<PhaseSpread> phase_spreads(const std::vector<PhaseTimes>& by_rank);

// --timers 1, for the step line: the phase whose maximum exceeds its minimum the most,
// "slowest: backward=12.1-15.8 ms (rank 3)"; "" when no phase was measured. (name=value: the step
// line's own "| loss 3.21 |" stays the only "loss" followed by a number there, for scripts that read it.)
std::string slowest_phase_summary(const std::vector<PhaseSpread>& spreads);
// --timers 2: a table, one line per measured phase: its name, minimum and maximum with their ranks.
std::string phase_table(const std::vector<PhaseSpread>& spreads, int step);
// The metrics log's fields (train/metrics_log.h), one object per measured phase:
// "phases":{"forward":{"min_ms":..,"min_rank":..,"max_ms":..,"max_rank":..},...}
std::string phase_metrics_json(const std::vector<PhaseSpread>& spreads);
