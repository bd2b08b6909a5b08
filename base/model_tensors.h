// The model's parameters tensor by tensor, as a Hugging Face GPT-2 checkpoint names them: wte, wpe,
// each layer's own tensors (h.3.attn.c_attn.weight is layer 3's slice of QKVW, its own tensor) and
// ln_f's weight and bias. Each is a contiguous span of the parameter buffer (ParamLayout): a per-layer
// array of ParamLayout holds its L layers' tensors one after the other. Optimizers that scale an
// update by a tensor's norm (LAMB, LARS: cpu/lamb.h, cpu/lars.h) take their norms over these spans.
#pragma once
#include <cstddef>
#include <vector>

#include "base/gpt_config.h"

struct ModelTensor {
    int kind;       // its ParamTensor array
    int layer;      // -1 for wte, wpe, ln_f's weight and bias
    size_t offset;  // elements from the start of the parameter buffer
    size_t size;    // elements
};

// Whether a ParamTensor array holds one tensor per layer.
inline bool is_per_layer(int kind) { return kind >= LN1W && kind <= FCPROJB; }

inline std::vector<ModelTensor> model_tensors(const GPTConfig& c) {
    const ParamLayout layout = param_layout(c);
    std::vector<ModelTensor> tensors;
    for (int kind = 0; kind < NUM_PARAM_TENSORS; kind++) {
        if (!is_per_layer(kind)) {
            tensors.push_back({kind, -1, layout.offset[kind], layout.size[kind]});
            continue;
        }
        const size_t size = layout.size[kind] / c.num_layers;
        for (int l = 0; l < c.num_layers; l++) tensors.push_back({kind, l, layout.offset[kind] + l * size, size});
    }
    return tensors;
}

// Where tensor (kind, layer) is in model_tensors(c)'s list (layer ignored for wte, wpe and ln_f's
// tensors), and how long the list is: the CUDA trainer's layer-adaptive optimizers number their
// per-tensor norms so (kernels/layer_adaptive.h), the same on every rank.
inline int model_tensor_index(const GPTConfig& c, int kind, int layer) {
    int index = 0;
    for (int k = 0; k < kind; k++) index += is_per_layer(k) ? c.num_layers : 1;
    return index + (kind < NUM_PARAM_TENSORS && is_per_layer(kind) ? layer : 0);
}
inline int model_tensor_count(const GPTConfig& c) { return model_tensor_index(c, NUM_PARAM_TENSORS, 0); }
