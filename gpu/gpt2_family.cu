// GPT-2 as a model family of the GPU model (model_family.h): its shape, its layer maths
// (gpt2_layers.h) and its samples' decoder (gpt_decode.h).
#include "base/errors.h"
#include "gpu/gpt2_layers.h"
#include "gpu/gpt_decode.h"
#include "gpu/model_family.h"
#include "parallel/plan/param_buckets.h"

// The activations' widths: qkv 3C, the attention C in NH heads, the MLP 4C before and after GELU.
static LayerWidths gpt2_layer_widths(const GPTConfig& config) {
    const size_t C = config.channels, NH = config.num_heads;
    return {C, 3 * C, C, NH, C / NH, 4 * C, 4 * C};
}

// Heads of C / NH channels each.
static FamilyShape gpt2_shape(const ModelConfig& config, const TrainOptions&) {
    const GPTConfig& c = config.gpt;
    if (c.channels % c.num_heads != 0)
        fail("-e (--model): channels %d must be a multiple of 8 and of the head count %d", c.channels, c.num_heads);
    return {config, gpt2_model_shape(c), gpt2_param_table(c), gpt2_layer_widths(c)};
}

static std::unique_ptr<ModelLayers> gpt2_layers(const FamilyShape& family, int, const LayerContext& context) {
    return std::make_unique<GPT2Layers>(family.model.gpt, context);
}

static std::unique_ptr<FamilyDecoder> gpt2_decoder(const ModelConfig& config, int max_len, cudaStream_t stream) {
    return std::make_unique<FamilyDecoderOf<GPUDecoder>>(config.gpt, max_len, stream);
}

extern const Family GPT2_FAMILY = {ModelFamily::GPT2, gpt2_shape, gpt2_layers, gpt2_decoder};
