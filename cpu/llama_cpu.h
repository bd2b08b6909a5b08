// The fp32 CPU reference Llama 3: forward pass, backward pass and AdamW over one flat parameter
// buffer laid out as base/llama_config.h lists the tensors. The ground truth for the Llama kernels,
// beside GPT-2's (cpu/gpt_cpu.h), with which it shares the ops but no model code.
#pragma once
#include <vector>

#include "base/llama_config.h"
#include "base/optimizer_settings.h"

struct LlamaCpu;  // parameters, gradients, optimizer moments and activations (cpu/llama_cpu.cpp)

// Allocates a model for micro-batches of up to B sequences of up to T tokens. Parameters,
// gradients and optimizer moments start at zero; the caller initialises or loads the parameters.
// Throws std::invalid_argument for an impossible config (llama_config_valid) or T > max T.
LlamaCpu* llama_cpu_create(const LlamaConfig& config, int B, int T);
void llama_cpu_free(LlamaCpu* model);

const LlamaConfig& llama_cpu_config(const LlamaCpu* model);
std::vector<float>& llama_cpu_params(LlamaCpu* model);  // llama_param_count(config) floats
std::vector<float>& llama_cpu_grads(LlamaCpu* model);

// Forward over inputs (B×T token ids). With targets (B×T) returns the mean cross-entropy over the
// B·T positions; with targets == nullptr returns NAN and only computes the logits. Throws
// std::invalid_argument for B or T beyond the allocated ones or a token id outside [0, V).
float llama_cpu_forward(LlamaCpu* model, const int* inputs, const int* targets, int B, int T);
const float* llama_cpu_logits(const LlamaCpu* model);  // (B, T, V) of the last forward

void llama_cpu_zero_grad(LlamaCpu* model);
// Adds loss_scale · d(mean loss of the last forward)/d(params) into the gradients. Requires a
// forward with targets (throws std::logic_error otherwise).
void llama_cpu_backward(LlamaCpu* model, float loss_scale);

double llama_cpu_grad_norm(const LlamaCpu* model);  // global L2 norm of all gradients
std::vector<float>& llama_cpu_adam_m(LlamaCpu* model);  // the optimizer's moments (LARS: m only; Muon: cpu/muon_step.h)
std::vector<float>& llama_cpu_adam_v(LlamaCpu* model);
// One step of settings.kind's optimizer (AdamW, LAMB, LARS or Muon; step counts from 1), weight decay
// on the matrices only, LAMB's and LARS's trust ratios per tensor, Muon on the layers' matrices.
void llama_cpu_update(LlamaCpu* model, const OptimizerSettings& settings, int step);

// Bytes the model holds: parameters, gradients, optimizer moments (m and v), and everything sized by
// the batch; of a model, or of one not yet made.
struct LlamaCpuMemory {
    size_t parameters, gradients, optimizer_state, activations;
};
LlamaCpuMemory llama_cpu_memory(const LlamaCpu* model);
LlamaCpuMemory llama_cpu_memory_needed(const LlamaConfig& config, int B, int T);
