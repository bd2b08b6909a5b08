// The fp32 CPU Llama 3 model (cpu/llama_cpu.h) behind the training loop's model interface
// (base/train_model.h): what train_gpt_cpu trains when -e names a Llama 3 shape or model file.
#pragma once
#include <memory>

#include "base/llama_config.h"
#include "base/train_model.h"
#include "base/train_options.h"

// Throws InputError for an impossible shape.
std::unique_ptr<TrainModel> create_llama_cpu_train_model(const LlamaConfig& config, const TrainOptions& opt);

// What create_llama_cpu_train_model will allocate, computed before it does (for the memory check).
ModelMemory llama_cpu_train_model_memory(const LlamaConfig& config, const TrainOptions& opt);
