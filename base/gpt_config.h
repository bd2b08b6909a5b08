// GPT model shape and the layout of its 16 parameter tensors, in llm.c's order.
// Both trainers keep all parameters in one contiguous buffer; ParamLayout says where each tensor is.
#pragma once
#include <cstddef>

struct GPTConfig {
    int max_seq_len = 1024;         // maxT: positions in wpe
    int vocab_size = 50257;         // V: real tokens
    int padded_vocab_size = 50304;  // Vp: V rounded up to a multiple of 128 (rows of wte)
    int num_layers = 12;            // L
    int num_heads = 12;             // NH
    int channels = 768;             // C
};

// Whether two configs describe the same model (every field equal).
inline bool same_shape(const GPTConfig& a, const GPTConfig& b) {
    return a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size &&
           a.padded_vocab_size == b.padded_vocab_size && a.num_layers == b.num_layers &&
           a.num_heads == b.num_heads && a.channels == b.channels;
}

enum ParamTensor {
    WTE, WPE,                           // token embedding (Vp, C), position embedding (maxT, C)
    LN1W, LN1B,                         // (L, C) each
    QKVW, QKVB,                         // (L, 3C, C), (L, 3C)
    ATTPROJW, ATTPROJB,                 // (L, C, C), (L, C)
    LN2W, LN2B,                         // (L, C) each
    FCW, FCB,                           // (L, 4C, C), (L, 4C)
    FCPROJW, FCPROJB,                   // (L, C, 4C), (L, C)
    LNFW, LNFB,                         // (C) each
    NUM_PARAM_TENSORS
};

struct ParamLayout {
    size_t size[NUM_PARAM_TENSORS];    // elements in each tensor
    size_t offset[NUM_PARAM_TENSORS];  // element offset of each tensor in the contiguous buffer
    size_t total;                      // elements in all
};

inline ParamLayout param_layout(const GPTConfig& c) {
    const size_t Vp = c.padded_vocab_size, maxT = c.max_seq_len, L = c.num_layers, C = c.channels;
    const size_t sizes[NUM_PARAM_TENSORS] = {
        Vp * C, maxT * C,  L * C,     L * C,  L * 3 * C * C, L * 3 * C, L * C * C, L * C,
        L * C,  L * C,     L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,  C,         C};
    ParamLayout layout;
    layout.total = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        layout.size[i] = sizes[i];
        layout.offset[i] = layout.total;
        layout.total += sizes[i];
    }
    return layout;
}

// Weight matrices (the tensors AdamW applies weight decay to): wte, wpe and the four linear weights.
inline bool is_weight_matrix(int tensor) {
    return tensor == WTE || tensor == WPE || tensor == QKVW || tensor == ATTPROJW || tensor == FCW ||
           tensor == FCPROJW;
}
