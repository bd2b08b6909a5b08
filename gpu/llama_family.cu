// Llama 3 as a model family of the GPU model (model_family.h): its shape, its layer maths
// (llama_layers.h) and its samples' decoder (llama_decode.h).
#include <algorithm>

#include "base/errors.h"
#include "gpu/llama_decode.h"
#include "gpu/llama_layers.h"
#include "gpu/model_family.h"
#include "parallel/plan/param_buckets.h"

// Llama 3: the qkv product (H + 2KV) heads wide, the MLP's gate|up 2F and down_proj's input F, RMSNorm,
// RoPE's tables. A tensor rank's slice of the MLP (F/T of each of gate and up) must stay a multiple of 8
// (the SwiGLU kernels' and the products' vectors); that T divides H and KV the flags check
// (train/train_flags.cpp).
static FamilyShape llama3_shape(const ModelConfig& config, const TrainOptions& opt) {
    const LlamaConfig& c = config.llama;
    const int tp = std::max(1, opt.tensor_parallel);
    if (c.ffn_channels % 8 != 0)
        fail("-e (--model): Llama 3's MLP width F %d must be a multiple of 8", c.ffn_channels);
    if (c.ffn_channels % (8 * tp) != 0)
        fail("-tp (--tensor-parallel): %d splits Llama 3's MLP width F %d into slices that are not multiples of 8",
             tp, c.ffn_channels);
    const size_t C = c.channels, hs = c.head_size(), H = c.num_heads, KV = c.num_kv_heads, F = c.ffn_channels;
    LayerWidths widths{C, (H + 2 * KV) * hs, H * hs, H, hs, 2 * F, F};
    widths.rms_norms = true;
    widths.rope_pairs = hs / 2;
    return {config, llama3_model_shape(c, (int)vocab_slice_rows(c.vocab_size, 1)), llama_param_table(c), widths};
}

static std::unique_ptr<ModelLayers> llama3_layers(const FamilyShape& family, int max_T, const LayerContext& context) {
    return std::make_unique<LlamaLayers>(family.model.llama, max_T, context);
}

static std::unique_ptr<FamilyDecoder> llama3_decoder(const ModelConfig& config, int max_len, cudaStream_t stream) {
    return std::make_unique<FamilyDecoderOf<LlamaGPUDecoder>>(config.llama, max_len, stream);
}

extern const Family LLAMA3_FAMILY = {ModelFamily::LLAMA3, llama3_shape, llama3_layers, llama3_decoder};
