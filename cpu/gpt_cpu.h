// The fp32 CPU reference GPT-2: forward pass, backward pass and the optimizers (AdamW, LAMB, LARS, Muon)
// over contiguous buffers.
// This is the compute half of train_gpt_cpu; everything else (flags, data, schedule, checkpoints,
// logging) is the shared host code in train/ and base/. It is also the ground truth the CUDA kernels are tested
// against.
#pragma once
#include <functional>
#include <vector>

#include "base/gpt_config.h"
#include "base/optimizer_settings.h"
#include "base/step_phases.h"

struct GPTCpu;  // parameters, gradients, optimizer moments and activations (defined in cpu/gpt_cpu.cpp)

// Allocates a model for micro-batches of up to B sequences of up to T tokens. Parameters, gradients
// and optimizer moments start at zero; the caller initialises or loads the parameters. Throws
// std::invalid_argument for an impossible config (C not a multiple of NH, T > maxT, V > Vp, ...).
GPTCpu* gpt_cpu_create(const GPTConfig& config, int B, int T);
void gpt_cpu_free(GPTCpu* model);

const GPTConfig& gpt_cpu_config(const GPTCpu* model);
std::vector<float>& gpt_cpu_params(GPTCpu* model);  // param_layout(config).total floats
std::vector<float>& gpt_cpu_grads(GPTCpu* model);
std::vector<float>& gpt_cpu_adam_m(GPTCpu* model);  // LARS: its momentum buffer (Muon: cpu/muon_step.h)
std::vector<float>& gpt_cpu_adam_v(GPTCpu* model);  // LARS: unused; Muon: AdamW's tensors' only, packed

// Forward over inputs (B×T token ids, B ≤ allocated B, T ≤ allocated T). With targets (B×T, may
// not be null for training) returns the mean cross-entropy over the B·T positions; with targets ==
// nullptr returns NAN and only computes logits. Padded vocabulary entries never contribute (their
// logits are the padded wte rows' products, 0 for zero rows; samplers must read only the first V).
// Throws std::invalid_argument for B or T beyond the allocated ones or a token id outside [0, V).
float gpt_cpu_forward(GPTCpu* model, const int* inputs, const int* targets, int B, int T);
const float* gpt_cpu_logits(const GPTCpu* model);  // (B, T, Vp) of the last forward

void gpt_cpu_zero_grad(GPTCpu* model);
// Told where forward and backward change phase and enter each layer (GPTModel::on_phase); null: not.
void gpt_cpu_set_phase_marker(GPTCpu* model, std::function<void(StepPhase, int, bool)> marker);
// Adds loss_scale · d(mean loss of the last forward)/d(params) into the gradients, so gradient
// accumulation over k micro-batches uses loss_scale = 1/k. Requires a forward with targets
// (throws std::logic_error otherwise).
void gpt_cpu_backward(GPTCpu* model, float loss_scale);

double gpt_cpu_grad_norm(const GPTCpu* model);  // global L2 norm of all gradients
// One step of settings.kind's optimizer (step counts from 1, for bias correction) on all parameters.
void gpt_cpu_update(GPTCpu* model, const OptimizerSettings& settings, int step);

// Bytes held, for the start-up memory report.
struct GPTCpuMemory {
    size_t parameters, gradients, optimizer_state, activations;
};
GPTCpuMemory gpt_cpu_memory(const GPTCpu* model);
// What gpt_cpu_create(config, B, T) will allocate, computed without allocating it (for the memory
// check before a run starts); equal to gpt_cpu_memory() of the created model.
GPTCpuMemory gpt_cpu_memory_needed(const GPTConfig& config, int B, int T);
