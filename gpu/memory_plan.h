// The traffic and device memory of a GPU run, planned without a device (the start-up report and
// --dry-run read them; GPUModel checks its first step's tensor traffic against the plan).
#pragma once
#include <cstddef>
#include <string>

#include "base/gpt_config.h"
#include "base/train_model.h"
#include "base/train_options.h"
#include "gpu/placement.h"
#include "parallel/comm/tensor_parallel.h"

// Bytes one rank sends in its tensor group per optimizer step of `micro_steps` micro-steps: the
// collectives of forward_stage, run_classifier and backward_stage (parallel/comm/tensor_parallel.h),
// counted here without running them (GPUModel checks its first micro-step against this). Per
// micro-step, with n = N·C elements of one (N, C) activation and Ls the stage's layers:
//   sequence parallel   forward: the embeddings' reduce-scatter (first stage); per layer 2 gathers and
//                       2 reduce-scatters; lnf's gather, again for the classifier's backward, and the
//                       reduce-scatter of lnf's gradient (last stage). backward: per layer 4 gathers
//                       and 2 reduce-scatters; the embeddings' gather (first stage): 10 Ls + 2 + 3
//                       gathers' worth with both ends.
//                       The LayerNorm gradients' sums (4C per layer, 2C final) wherever the gradients
//                       are reduced.
//   otherwise           forward: the embeddings' (first stage), per layer 2, and the classifier's
//                       backward's (last stage) all-reduces; backward: per layer 2.
// The last stage also gathers the classifier's row statistics (N × 3 fp32); the squared norm is summed
// once per step.
struct TensorTraffic {
    size_t per_micro_step = 0, per_reduction = 0, per_step = 0;
};
TensorTraffic tensor_traffic(const GPTConfig& c, int B, int T_len, const TensorParallel& tp, const Stage& stage);
size_t tensor_bytes_per_step(const TensorTraffic& t, int micro_steps, int zero_stage);
// Bytes one rank sends along its pipeline per step (see memory_plan.cu).
size_t pipeline_bytes_per_step(const GPTConfig& c, const TrainOptions& opt, const TensorParallel& tp,
                               const Stage& stage, int stages, int micro_steps);
// One line per pipeline stage for the start-up report: its layers, micro-batches in flight and memory.
std::string stage_report(const GPTConfig& config, const TrainOptions& opt, int num_ranks, bool communicates);
// The device memory and network traffic of rank 0 of a run of num_ranks ranks (stage 0; the others'
// in memory.pipeline_report), computed from the same buffer requests the model makes, without
// allocating anything (for --dry-run; no device needed).
ModelMemory plan_gpu_memory(const GPTConfig& config, const TrainOptions& opt, int num_ranks, bool communicates);
