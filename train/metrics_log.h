// The metrics log: one JSON object per line per step, appended to <output dir>/metrics.jsonl:
//   {"step":12,"loss":3.4567,"lr":0.0003,"norm":1.234,"ms":123.4,"tok_per_s":54321,"val_loss":3.21,
//    "hellaswag":0.2950,"gpu_sm_mhz":1755,"gpu_max_sm_mhz":1980,"gpu_power_w":612.0,
//    "gpu_power_limit_w":700.0,"gpu_temp_c":61,"gpu_throttle":"sw-power-cap"}
// val_loss and hellaswag (the accuracy, -h 1) only on steps where they were measured; a step-0 line
// holds the untrained model's alone; the gpu_ keys on the steps -lg reads the GPU (power fields only
// where the device reports them; "gpu":"n/a" where there is no telemetry); then, on logged steps with
// --timers, "phases" (each phase's min and max across ranks: base/step_phases.h) and "comm" (this
// rank 0's collectives by kind: base/step_timeline.h). Keys are
// always in this order, which scripts/plot_metrics.sh relies on. Each line is flushed when written.
#pragma once
#include <cstdio>
#include <string>

#include "base/gpu_telemetry.h"

struct StepMetrics {
    int step = 0;
    bool has_train = false;  // loss, lr, norm, ms, tok_per_s are set
    double loss = 0, lr = 0, norm = 0, ms = 0, tokens_per_s = 0;
    bool has_val = false;
    double val_loss = 0;
    bool has_hellaswag = false;
    double hellaswag_accuracy = 0;  // correct / examples
    bool has_gpu = false;           // -lg: the GPU was read at this step
    GpuTelemetry gpu;
    std::string timers_json;        // --timers: "\"phases\":{...}" and ",\"comm\":{...}" (or empty)
    double sent_bytes = -1;         // what this rank sent to the others in the step (-1: one process)
};

class MetricsLog {
public:
    explicit MetricsLog(const std::string& path);  // appends; throws InputError if it can't open
    ~MetricsLog();
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;
    void write(const StepMetrics& metrics);

private:
    std::string path_;
    FILE* file_;
};

// On resume from step N: drops the lines of steps after N (written by the run that stopped after
// its last checkpoint), so that the log holds each step once. Rewrites the file atomically; no
// file, no-op.
void truncate_metrics_log(const std::string& path, long long last_kept_step);

// One log line (without the newline), as write() appends it.
std::string metrics_json(const StepMetrics& metrics);
