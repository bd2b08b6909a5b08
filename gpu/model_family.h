// A model family as the GPU model (gpu/gpt_model.h) and its planners (gpu/memory_plan.h) see it:
// everything family-specific about sizing a run, in one place, so that the plan is made from the same
// shapes as the model it plans.
//   core    the core's shape: depth, width, heads, padded vocabulary and longest sequence, which the
//           pipeline's layer split, the traffic plan and the device overhead read (GPT-2: its config;
//           Llama 3: a GPT-2 shape of the same depth, width, heads and vocabulary)
//   table   the parameters (parallel/plan/param_table.h), from which the buckets and shards follow
//   widths  the activations' widths per position (gpu/activations.h)
// and make_family_layers, the family's layer maths for a model's context.
#pragma once
#include <memory>

#include "base/gpt_config.h"
#include "base/model_config.h"
#include "base/train_options.h"
#include "gpu/activations.h"
#include "gpu/model_layers.h"
#include "parallel/plan/param_table.h"

struct FamilyShape {
    ModelConfig model;  // the model as the training loop sees it
    GPTConfig core;
    ParamTable table;
    LayerWidths widths;
};

// The family's shape for a run with `opt`; what the GPU model cannot run for this family (Llama 3: an
// MLP width, or a tensor rank's slice of it, that is not a multiple of 8) is refused in one line.
FamilyShape model_family(const ModelConfig& config, const TrainOptions& opt);
// The family's layer maths over `context`, for sequences of up to max_T positions.
std::unique_ptr<ModelLayers> make_family_layers(const FamilyShape& family, int max_T, const LayerContext& context);
