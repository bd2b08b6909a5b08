// The fp32 CPU reference models (GPT-2: cpu/gpt_cpu.h; Llama 3: cpu/llama_train_model.h) behind
// the training loop's model interface (base/train_model.h), and the defaults of a CPU run. Used by train_gpt_cpu, and by train_gpt when
// it finds no CUDA device (or was built without nvcc).
#pragma once
#include <memory>

#include "base/train_model.h"
#include "base/train_options.h"

// Defaults sized for a 2-core CPU: a 4-layer, 128-channel GPT-2 on Jane Austen trains for about
// three minutes (0.7 epoch) and its validation loss falls from 10.8 to about 5.9.
TrainOptions cpu_trainer_defaults();

// Throws InputError for an impossible shape.
std::unique_ptr<TrainModel> create_cpu_train_model(const ModelConfig& config, const TrainOptions& opt);

// What create_cpu_train_model will allocate, computed before it does (for the memory check).
ModelMemory cpu_train_model_memory(const ModelConfig& config, const TrainOptions& opt);
