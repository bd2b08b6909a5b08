// Which parameters Muon updates and which it leaves to AdamW, from each family's parameter layout.
// Muon takes every 2-D weight matrix of the transformer blocks, each (out, in) row-major as the
// model files store it:
//   GPT-2    per layer: q, k and v (the three C×C row blocks of the fused qkv weight (3C, C)), the
//            attention projection (C, C), fc (4C, C), the fc projection (C, 4C)
//   Llama 3  per layer: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
// Everything else (embeddings, the LM head, norms, biases) takes AdamW; of those, the 2-D weights
// (GPT-2's wte and wpe, Llama 3's embed_tokens and lm_head) take AdamW's weight decay. AdamW's second
// moment v is kept only for AdamW's tensors, packed one after the other in buffer order (v_offset);
// the first moment m and Muon's momentum buffer share one array of the buffer's length.
#pragma once
#include <cstddef>
#include <vector>

#include "base/gpt_config.h"
#include "base/llama_config.h"
#include "base/model_config.h"
#include "base/model_tensors.h"

struct MuonMatrix {
    size_t offset;   // elements from the start of the parameter buffer
    int rows, cols;  // (out, in)
    size_t size() const { return (size_t)rows * cols; }
};

struct AdamWTensor {
    size_t offset, size;  // a span of the parameter buffer
    bool decayed;         // a 2-D weight: AdamW's weight decay applies
    size_t v_offset;      // where its second moment starts in the packed v
};

struct MuonLayout {
    std::vector<MuonMatrix> matrices;  // in buffer order
    std::vector<AdamWTensor> adamw;    // in buffer order
    size_t muon_elements = 0, adamw_elements = 0;

    void add_matrix(size_t offset, int rows, int cols) {
        matrices.push_back({offset, rows, cols});
        muon_elements += (size_t)rows * cols;
    }
    void add_adamw(size_t offset, size_t size, bool decayed) {
        adamw.push_back({offset, size, decayed, adamw_elements});
        adamw_elements += size;
    }
};

inline MuonLayout muon_layout(const GPTConfig& c) {
    const int C = c.channels;
    MuonLayout layout;
    for (const ModelTensor& t : model_tensors(c)) {
        switch (t.kind) {
            case QKVW:  // (3C, C): q, k, v one after the other
                for (int part = 0; part < 3; part++) layout.add_matrix(t.offset + (size_t)part * C * C, C, C);
                break;
            case ATTPROJW: layout.add_matrix(t.offset, C, C); break;
            case FCW: layout.add_matrix(t.offset, 4 * C, C); break;
            case FCPROJW: layout.add_matrix(t.offset, C, 4 * C); break;
            default: layout.add_adamw(t.offset, t.size, is_weight_matrix(t.kind));
        }
    }
    return layout;
}

inline MuonLayout muon_layout(const LlamaConfig& c) {
    MuonLayout layout;
    for (const LlamaTensor& t : llama_tensors(c)) {
        if (t.layer >= 0 && t.is_matrix())
            layout.add_matrix(t.offset, t.rows, t.cols);
        else
            layout.add_adamw(t.offset, t.size(), t.is_matrix());
    }
    return layout;
}

inline MuonLayout muon_layout(const ModelConfig& c) {
    return is_llama3(c) ? muon_layout(c.llama) : muon_layout(c.gpt);
}
