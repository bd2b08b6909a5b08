// GPT-2 as a model family of the GPU model (model_family.h): its shape (the core's is GPT-2's own),
// its layer maths (gpt2_layers.h) and its samples' decoder (gpt_decode.h).
#include "gpu/gpt2_layers.h"
#include "gpu/gpt_decode.h"
#include "gpu/model_family.h"
#include "parallel/plan/param_buckets.h"

// The activations' widths: qkv 3C, the attention C in NH heads, the MLP 4C before and after GELU.
static LayerWidths gpt2_layer_widths(const GPTConfig& config) {
    const size_t C = config.channels, NH = config.num_heads;
    return {C, 3 * C, C, NH, C / NH, 4 * C, 4 * C};
}

static FamilyShape gpt2_shape(const ModelConfig& config, const TrainOptions&) {
    return {config, config.gpt, gpt2_param_table(config.gpt), gpt2_layer_widths(config.gpt)};
}

static std::unique_ptr<ModelLayers> gpt2_layers(const FamilyShape& family, int, const LayerContext& context) {
    return std::make_unique<GPT2Layers>(family.core, context);
}

static std::unique_ptr<FamilyDecoder> gpt2_decoder(const ModelConfig& config, int max_len, cudaStream_t stream) {
    return std::make_unique<FamilyDecoderOf<GPUDecoder>>(config.gpt, max_len, stream);
}

extern const Family GPT2_FAMILY = {ModelFamily::GPT2, gpt2_shape, gpt2_layers, gpt2_decoder};
