// What the GPU model's core and the run's planners need to know of a model, whatever its family: its
// depth, its residual width, its vocabulary, its longest sequence, and what one layer costs. Each
// family makes its shape from its own config (gpt2_model_shape, llama3_model_shape below; the GPU
// model's families through gpu/model_family.h), so the pipeline's layer split (parallel/plan/
// pipeline_schedule.h), the traffic plan and the step's buffers are sized from the family's real
// products rather than from GPT-2's.
#pragma once
#include <cstddef>

#include "base/gpt_config.h"
#include "base/llama_config.h"

struct ModelShape {
    int num_layers = 0;         // L
    int channels = 0;           // C: the residual stream's width
    int vocab_size = 0;         // V: real tokens
    int padded_vocab_size = 0;  // Vp: rows of the embedding and of the classifier
    int max_seq_len = 0;        // the longest sequence a forward pass takes
    size_t layer_weights = 0;   // elements of one layer's weight matrices (its products' operands)
    size_t attention_width = 0; // query heads × head size

    // Forward FLOPs per token of one layer at sequence length T: its products (2 per weight) and
    // causal attention (scores and values: 2 · 2·T·width, half of it masked).
    double layer_flops(int T) const { return 2.0 * layer_weights + 2.0 * T * attention_width; }
    // Forward FLOPs per token of the classifier's product.
    double classifier_flops() const { return 2.0 * channels * padded_vocab_size; }
};

// GPT-2: qkv 3C·C, the attention projection C·C, fc 4C·C and its projection C·4C.
inline ModelShape gpt2_model_shape(const GPTConfig& c) {
    const size_t C = c.channels;
    return {c.num_layers, c.channels, c.vocab_size, c.padded_vocab_size, c.max_seq_len, 12 * C * C, C};
}

// Llama 3: q (H·hs)·C, k and v (KV·hs)·C each, o C·(H·hs), gate and up F·C each, down C·F. The
// classifier's rows are the vocabulary rounded up to `padded_vocab` (the GPU model pads to 128).
inline ModelShape llama3_model_shape(const LlamaConfig& c, int padded_vocab) {
    const size_t C = c.channels, hs = c.head_size(), H = c.num_heads, KV = c.num_kv_heads, F = c.ffn_channels;
    return {c.num_layers, c.channels, c.vocab_size, padded_vocab, c.max_seq_len,
            (2 * H + 2 * KV) * hs * C + 3 * F * C, H * hs};
}
