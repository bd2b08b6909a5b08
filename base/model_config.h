// The model a run trains: which family (GPT-2, base/gpt_config.h; Llama 3, base/llama_config.h)
// and that family's shape. The training loop, checkpoints and the state files work with this; each
// family's model code keeps its own config. The few facts the loop needs of any model (how many
// parameters, the vocabulary, the longest sequence, a one-line description) are the functions here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/gpt_config.h"
#include "base/llama_config.h"

enum class ModelFamily : int32_t { GPT2 = 0, LLAMA3 = 1 };

struct ModelConfig {
    ModelFamily family = ModelFamily::GPT2;
    GPTConfig gpt;      // the shape, when family is GPT2
    LlamaConfig llama;  // the shape, when family is LLAMA3
};

inline ModelConfig gpt2_model(const GPTConfig& c) {
    ModelConfig m;
    m.family = ModelFamily::GPT2;
    m.gpt = c;
    return m;
}
inline ModelConfig llama3_model(const LlamaConfig& c) {
    ModelConfig m;
    m.family = ModelFamily::LLAMA3;
    m.llama = c;
    return m;
}
inline bool is_gpt2(const ModelConfig& c) { return c.family == ModelFamily::GPT2; }
inline bool is_llama3(const ModelConfig& c) { return c.family == ModelFamily::LLAMA3; }

// Elements of the flat parameter buffer (GPT-2: ParamLayout's total; Llama 3: llama_param_count).
size_t parameter_count(const ModelConfig& c);
// Real tokens (GPT-2's padded rows not counted), and the longest sequence a forward pass takes.
int model_vocab_size(const ModelConfig& c);
int model_max_seq_len(const ModelConfig& c);
// Layers and the attention width (query heads × head size), for the FLOP count.
int model_layers(const ModelConfig& c);
int model_attention_width(const ModelConfig& c);
// Every field equal (the same family and shape).
bool same_model(const ModelConfig& a, const ModelConfig& b);
// "GPT-2 L=12 H=12 C=768 V=50257 Vp=50304 maxT=1024" or "Llama 3 L=2 C=64 H=4 KV=2 F=176 V=512 maxT=64".
std::string describe_model(const ModelConfig& c);
// "GPT-2" or "Llama 3".
const char* family_name(ModelFamily family);
