// What the loop needs to know of any model family (see model_config.h).
#include "base/model_config.h"

#include "base/llama_descriptor.h"
#include "base/model_descriptor.h"

size_t parameter_count(const ModelConfig& c) {
    return is_llama3(c) ? llama_param_count(c.llama) : param_layout(c.gpt).total;
}
int model_vocab_size(const ModelConfig& c) { return is_llama3(c) ? c.llama.vocab_size : c.gpt.vocab_size; }
int model_max_seq_len(const ModelConfig& c) { return is_llama3(c) ? c.llama.max_seq_len : c.gpt.max_seq_len; }
int model_layers(const ModelConfig& c) { return is_llama3(c) ? c.llama.num_layers : c.gpt.num_layers; }
int model_attention_width(const ModelConfig& c) {
    return is_llama3(c) ? c.llama.num_heads * c.llama.head_size() : c.gpt.channels;
}

static bool same_llama(const LlamaConfig& a, const LlamaConfig& b) {
    const RopeScaling &s = a.rope_scaling, &t = b.rope_scaling;
    return a.num_layers == b.num_layers && a.channels == b.channels && a.num_heads == b.num_heads &&
           a.num_kv_heads == b.num_kv_heads && a.ffn_channels == b.ffn_channels && a.vocab_size == b.vocab_size &&
           a.max_seq_len == b.max_seq_len && a.rope_theta == b.rope_theta && a.rmsnorm_eps == b.rmsnorm_eps &&
           s.enabled == t.enabled &&
           (!s.enabled || (s.factor == t.factor && s.low_freq_factor == t.low_freq_factor &&
                           s.high_freq_factor == t.high_freq_factor &&
                           s.original_max_position == t.original_max_position));
}

bool same_model(const ModelConfig& a, const ModelConfig& b) {
    if (a.family != b.family) return false;
    return is_llama3(a) ? same_llama(a.llama, b.llama) : same_shape(a.gpt, b.gpt);
}

const char* family_name(ModelFamily family) { return family == ModelFamily::LLAMA3 ? "Llama 3" : "GPT-2"; }

std::string describe_model(const ModelConfig& c) {
    return std::string(family_name(c.family)) + " " +
           (is_llama3(c) ? describe_llama_config(c.llama) : describe_config(c.gpt));
}
