// A model family's shapes for the GPU model and its planners (model_family.h).
#include "gpu/model_family.h"

#include "base/errors.h"
#include "gpu/gpt2_layers.h"
#include "gpu/llama_layers.h"
#include "parallel/plan/param_buckets.h"

static FamilyShape gpt2_family(const GPTConfig& config) {
    return {gpt2_model(config), config, gpt2_param_table(config), gpt2_layer_widths(config)};
}

// Llama 3: the qkv product (H + 2KV) heads wide, the MLP's gate|up 2F and down_proj's input F, RMSNorm,
// RoPE's tables.
static FamilyShape llama3_family(const LlamaConfig& c, const TrainOptions& opt) {
    if (opt.tensor_parallel > 1 || opt.pipeline_parallel > 1)
        fail("-tp/-pp (tensor and pipeline parallelism): the CUDA trainer runs Llama 3 on one tensor rank "
             "and one pipeline stage for now (data parallelism and ZeRO work)");
    if (c.ffn_channels % 8 != 0)
        fail("-e (--model): Llama 3's MLP width F %d must be a multiple of 8", c.ffn_channels);
    GPTConfig core;
    core.max_seq_len = c.max_seq_len, core.vocab_size = c.vocab_size;
    core.padded_vocab_size = (int)vocab_slice_rows(c.vocab_size, 1);
    core.num_layers = c.num_layers, core.num_heads = c.num_heads, core.channels = c.channels;
    const size_t C = c.channels, hs = c.head_size(), H = c.num_heads, KV = c.num_kv_heads, F = c.ffn_channels;
    LayerWidths widths{C, (H + 2 * KV) * hs, H * hs, H, hs, 2 * F, F};
    widths.rms_norms = true;
    widths.rope_pairs = hs / 2;
    return {llama3_model(c), core, llama_param_table(c), widths};
}

FamilyShape model_family(const ModelConfig& config, const TrainOptions& opt) {
    if (is_llama3(config)) return llama3_family(config.llama, opt);
    return gpt2_family(config.gpt);
}

std::unique_ptr<ModelLayers> make_family_layers(const FamilyShape& family, int max_T, const LayerContext& context) {
    if (is_llama3(family.model)) return std::make_unique<LlamaLayers>(family.model.llama, max_T, context);
    return std::make_unique<GPT2Layers>(family.core, context);
}
