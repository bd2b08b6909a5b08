// Llama 3 model shape and the layout of its parameters: a list of named tensors in one flat buffer,
// named as Hugging Face's LlamaForCausalLM names them. The layout, in buffer order:
//   model.embed_tokens.weight                          (V, C)
//   for each layer N = 0 .. L−1, its nine tensors one after the other:
//     model.layers.N.input_layernorm.weight            (C)
//     model.layers.N.self_attn.q_proj.weight           (H·hs, C)    hs = C / H, the head size
//     model.layers.N.self_attn.k_proj.weight           (KV·hs, C)
//     model.layers.N.self_attn.v_proj.weight           (KV·hs, C)
//     model.layers.N.self_attn.o_proj.weight           (C, H·hs)
//     model.layers.N.post_attention_layernorm.weight   (C)
//     model.layers.N.mlp.gate_proj.weight              (F, C)
//     model.layers.N.mlp.up_proj.weight                (F, C)
//     model.layers.N.mlp.down_proj.weight              (C, F)
//   model.norm.weight                                  (C)
//   lm_head.weight                                     (V, C), untied from the embedding
// Every matrix is stored (out features × in features), row-major, as in the checkpoints. There are
// no biases and no position embeddings (positions enter through RoPE, cpu/rope.h).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

// Llama 3.1's rescaling of RoPE's frequencies for long contexts: wavelengths shorter than
// original_max_position / high_freq_factor keep their frequency, those longer than
// original_max_position / low_freq_factor are divided by factor, and the band between blends the
// two (cpu/rope.h). Off by default (Llama 3.0).
struct RopeScaling {
    bool enabled = false;
    double factor = 8.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int original_max_position = 8192;
};

struct LlamaConfig {
    int num_layers = 2;          // L
    int channels = 16;           // C, the hidden size
    int num_heads = 4;           // H, query heads
    int num_kv_heads = 2;        // KV, key/value heads; H % KV == 0
    int ffn_channels = 32;       // F, the MLP's intermediate size
    int vocab_size = 11;         // V
    int max_seq_len = 16;        // max T
    double rope_theta = 500000.0;
    RopeScaling rope_scaling;
    double rmsnorm_eps = 1e-5;

    int head_size() const { return channels / num_heads; }
};

// Whether the shape can be built: positive sizes, C divisible by H into an even head size (RoPE
// rotates pairs), H divisible by KV.
inline bool llama_config_valid(const LlamaConfig& c) {
    return c.num_layers >= 1 && c.channels >= 1 && c.num_heads >= 1 && c.num_kv_heads >= 1 &&
           c.ffn_channels >= 1 && c.vocab_size >= 1 && c.max_seq_len >= 1 &&
           c.channels % c.num_heads == 0 && c.head_size() % 2 == 0 &&
           c.num_heads % c.num_kv_heads == 0 && c.rope_theta > 0 && c.rmsnorm_eps > 0;
}

// The published shapes (Meta's config.json for each model). Llama 3.2's checkpoints tie lm_head to
// the embedding; loading one into this untied layout copies embed_tokens into lm_head.
inline LlamaConfig llama_shape(int layers, int channels, int heads, int ffn, double rope_factor) {
    LlamaConfig c;
    c.num_layers = layers;
    c.channels = channels;
    c.num_heads = heads;
    c.num_kv_heads = 8;
    c.ffn_channels = ffn;
    c.vocab_size = 128256;
    c.max_seq_len = 131072;
    c.rope_theta = 500000.0;
    c.rope_scaling.enabled = true;
    c.rope_scaling.factor = rope_factor;
    return c;
}
inline LlamaConfig llama32_1b() { return llama_shape(16, 2048, 32, 8192, 32.0); }
inline LlamaConfig llama32_3b() { return llama_shape(28, 3072, 24, 8192, 32.0); }
inline LlamaConfig llama31_8b() { return llama_shape(32, 4096, 32, 14336, 8.0); }

// Each layer's tensors, in their buffer order.
enum LlamaLayerTensor {
    ATTN_NORM, Q_PROJ, K_PROJ, V_PROJ, O_PROJ, MLP_NORM, GATE_PROJ, UP_PROJ, DOWN_PROJ,
    NUM_LLAMA_LAYER_TENSORS
};

struct LlamaTensor {
    std::string name;  // Hugging Face's name
    int layer;         // −1 for the embedding, the final norm and lm_head
    int kind;          // its LlamaLayerTensor within the layer; −1 outside the layers
    int rows, cols;    // (out, in) for a matrix; (C, 1) for a norm's weight
    size_t offset;     // elements from the start of the buffer
    size_t size() const { return (size_t)rows * cols; }
    bool is_matrix() const { return cols > 1; }  // what AdamW decays
};

inline std::vector<LlamaTensor> llama_tensors(const LlamaConfig& c) {
    const int C = c.channels, hs = c.head_size(), F = c.ffn_channels;
    const int q = c.num_heads * hs, kv = c.num_kv_heads * hs;
    static const char* layer_names[NUM_LLAMA_LAYER_TENSORS] = {
        "input_layernorm",    "self_attn.q_proj", "self_attn.k_proj",
        "self_attn.v_proj",   "self_attn.o_proj", "post_attention_layernorm",
        "mlp.gate_proj",      "mlp.up_proj",      "mlp.down_proj"};
    const int shapes[NUM_LLAMA_LAYER_TENSORS][2] = {{C, 1}, {q, C},  {kv, C}, {kv, C}, {C, q},
                                                    {C, 1}, {F, C},  {F, C},  {C, F}};
    std::vector<LlamaTensor> tensors;
    size_t offset = 0;
    auto add = [&](std::string name, int layer, int kind, int rows, int cols) {
        tensors.push_back({std::move(name), layer, kind, rows, cols, offset});
        offset += (size_t)rows * cols;
    };
    add("model.embed_tokens.weight", -1, -1, c.vocab_size, C);
    for (int l = 0; l < c.num_layers; l++)
        for (int k = 0; k < NUM_LLAMA_LAYER_TENSORS; k++)
            add("model.layers." + std::to_string(l) + "." + layer_names[k] + ".weight", l, k,
                shapes[k][0], shapes[k][1]);
    add("model.norm.weight", -1, -1, C, 1);
    add("lm_head.weight", -1, -1, c.vocab_size, C);
    return tensors;
}

// Where each tensor is in llama_tensors(c)'s list.
inline int llama_embedding_index() { return 0; }
inline int llama_layer_tensor_index(int layer, int kind) {
    return 1 + layer * NUM_LLAMA_LAYER_TENSORS + kind;
}
inline int llama_final_norm_index(const LlamaConfig& c) {
    return 1 + c.num_layers * NUM_LLAMA_LAYER_TENSORS;
}
inline int llama_lm_head_index(const LlamaConfig& c) { return llama_final_norm_index(c) + 1; }

// The parameters' total, counted from the shape (without building the tensor list, which a corrupt
// header's layer count could make huge): the embedding and lm_head (V·C each), the final norm (C),
// and per layer two norms (2C), q and o (2·C·H·hs), k and v (2·C·KV·hs) and the MLP (3·C·F).
inline size_t llama_param_count(const LlamaConfig& c) {
    const size_t C = (size_t)c.channels, hs = (size_t)c.head_size();
    const size_t layer = 2 * C + 2 * C * c.num_heads * hs + 2 * C * c.num_kv_heads * hs + 3 * C * c.ffn_channels;
    return 2 * (size_t)c.vocab_size * C + C + (size_t)c.num_layers * layer;
}
