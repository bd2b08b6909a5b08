// A model family's shapes for the GPU model and its planners (model_family.h).
#include "gpu/model_family.h"

#include <algorithm>

#include "base/errors.h"
#include "gpu/gpt2_layers.h"
#include "gpu/llama_layers.h"
#include "parallel/plan/param_buckets.h"

static FamilyShape gpt2_family(const GPTConfig& config) {
    return {gpt2_model(config), config, gpt2_param_table(config), gpt2_layer_widths(config)};
}

// Llama 3: the qkv product (H + 2KV) heads wide, the MLP's gate|up 2F and down_proj's input F, RMSNorm,
// RoPE's tables. A tensor rank's slice of the MLP (F/T of each of gate and up) must stay a multiple of 8
// (the SwiGLU kernels' and the products' vectors); that T divides H and KV the flags check
// (train/train_flags.cpp).
static FamilyShape llama3_family(const LlamaConfig& c, const TrainOptions& opt) {
    const int tp = std::max(1, opt.tensor_parallel);
    if (c.ffn_channels % 8 != 0)
        fail("-e (--model): Llama 3's MLP width F %d must be a multiple of 8", c.ffn_channels);
    if (c.ffn_channels % (8 * tp) != 0)
        fail("-tp (--tensor-parallel): %d splits Llama 3's MLP width F %d into slices that are not multiples of 8",
             tp, c.ffn_channels);
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
