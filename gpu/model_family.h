// A model family as the GPU model (gpu/gpu_model.h) and its planners (gpu/memory_plan.h) see it:
// everything family-specific about sizing a run, in one place, so that the plan is made from the same
// shapes as the model it plans.
//   core    the core's shape (base/model_shape.h): depth, width, vocabulary, longest sequence and a
//           layer's cost, which the pipeline's layer split, the traffic plan and the device overhead
//           read
//   table   the parameters (parallel/plan/param_table.h), from which the buckets and shards follow
//   widths  the activations' widths per position (gpu/activations.h)
// and the family's layer maths for a model's context (gpu/model_layers.h) and its samples' decoder
// (gpu/decode_weights.h). Each family registers itself once, by one line of model_family.cu's table (a
// Family, defined in the family's own file: gpu/gpt2_family.cu, gpu/llama_family.cu); the core finds
// it by the model's family and names none.
#pragma once
#include <memory>

#include "base/model_config.h"
#include "base/model_shape.h"
#include "base/train_options.h"
#include "gpu/activations.h"
#include "gpu/decode_weights.h"
#include "gpu/model_layers.h"
#include "parallel/plan/param_table.h"

struct FamilyShape {
    ModelConfig model;  // the model as the training loop sees it
    ModelShape core;
    ParamTable table;
    LayerWidths widths;
};

// A model family as the core uses it.
struct Family {
    ModelFamily id;  // base/model_config.h
    // The shape of a run with `opt`; what the GPU model cannot run for this family is refused in one line.
    FamilyShape (*shape)(const ModelConfig& config, const TrainOptions& opt);
    // Its layer maths over `context`, for sequences of up to max_T positions.
    std::unique_ptr<ModelLayers> (*layers)(const FamilyShape& family, int max_T, const LayerContext& context);
    // Its key/value-cache decoder for samples of up to max_len tokens.
    std::unique_ptr<FamilyDecoder> (*decoder)(const ModelConfig& config, int max_len, cudaStream_t stream);
};

// The registered family of `config` (an unregistered one is refused in one line).
const Family& family_of(const ModelConfig& config);
// The family's shape for a run with `opt` (family_of(config).shape).
inline FamilyShape model_family(const ModelConfig& config, const TrainOptions& opt) {
    return family_of(config).shape(config, opt);
}
