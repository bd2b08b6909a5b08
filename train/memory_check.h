// Will the run fit in memory? The bytes a run needs are computed before anything big is allocated
// and checked against what the machine can give (MemAvailable, or the container's cgroup limit
// when that is lower), so that a model too big ends with one error naming the figures and what to
// lower, rather than being killed by the kernel without a word. (The GPU's own memory is checked by
// the CUDA model against cudaMemGetInfo.)
#pragma once
#include <cstdint>
#include <string>

#include "base/model_config.h"
#include "base/train_model.h"
#include "train/train_flags.h"

struct AvailableMemory {
    uint64_t bytes = 0;  // 0: unknown (no /proc/meminfo), then nothing is checked
    std::string source;  // "MemAvailable", "the cgroup memory limit"
};
AvailableMemory available_host_memory();

// Host bytes the training loop itself holds at its peak besides the model: the initial weights
// while they are copied in, and at each checkpoint (with -o) a copy of the weights, master weights
// and AdamW moments, minus what it already holds when the model is created (the model file, a
// resumed state), which it frees before then.
uint64_t loop_host_bytes(const ModelConfig& config, const TrainOptions& opt, bool resuming,
                         bool from_model_file);
inline uint64_t loop_host_bytes(const GPTConfig& config, const TrainOptions& opt, bool resuming, bool from_model_file) {
    return loop_host_bytes(gpt2_model(config), opt, resuming, from_model_file);
}

// Fails with one line (the need, split into its parts, what is available, and what to lower) when
// `model` (the model's host memory, zero for a GPU model) plus loop_host_bytes() exceeds what is
// available.
void check_host_memory(const ModelMemory& model, const ModelConfig& config, const TrainOptions& opt,
                       bool resuming, bool from_model_file);
inline void check_host_memory(const ModelMemory& model, const GPTConfig& config, const TrainOptions& opt,
                              bool resuming, bool from_model_file) {
    check_host_memory(model, gpt2_model(config), opt, resuming, from_model_file);
}

// This process's resident memory now (VmRSS) and at its peak (VmHWM), from /proc/self/status; 0
// where unknown. reset_peak_resident() starts the peak afresh from now (false where the kernel does
// not allow it), so that the peak of one phase, such as a resume, can be read.
uint64_t resident_bytes();
uint64_t peak_resident_bytes();
bool reset_peak_resident();
