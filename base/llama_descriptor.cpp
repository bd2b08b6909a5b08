// Llama 3 descriptors → LlamaConfig (see llama_descriptor.h).
#include "base/llama_descriptor.h"

#include <cstdlib>

#include "base/errors.h"
#include "base/formats.h"

static bool starts_with(const std::string& s, const char* prefix) {
    return s.rfind(prefix, 0) == 0;
}

// Parses a whole string as a positive int; false if it is anything else.
static bool parse_positive(const std::string& text, int* out) {
    if (text.empty() || text.size() > 9) return false;
    for (char c : text)
        if (c < '0' || c > '9') return false;
    *out = std::atoi(text.c_str());
    return *out > 0;
}

struct NamedLlama {
    const char* name;
    LlamaConfig (*config)();
};
static const NamedLlama named_llamas[] = {
    {"llama3.2-1b", llama32_1b},
    {"llama3.2-3b", llama32_3b},
    {"llama3.1-8b", llama31_8b},
};

bool is_llama_descriptor(const std::string& text) {
    if (starts_with(text, "llama3:")) return true;
    for (const NamedLlama& n : named_llamas)
        if (text == n.name) return true;
    return false;
}

int llama_default_ffn_channels(int channels) {
    const long wide = (8L * channels + 2) / 3;  // 8C/3 rounded up
    const long multiple = channels < 256 ? 16 : 256;
    return (int)((wide + multiple - 1) / multiple * multiple);
}

// One "<letters><number>" field of a custom descriptor into the config; F and V are optional.
static void set_llama_field(LlamaConfig* c, const std::string& field, const std::string& descriptor) {
    const size_t letters = starts_with(field, "KV") ? 2 : 1;
    int value = 0;
    if (field.size() <= letters || !parse_positive(field.substr(letters), &value))
        fail("model '%s': field '%s' is not a letter (or KV) followed by a positive number",
             descriptor.c_str(), field.c_str());
    const std::string key = field.substr(0, letters);
    if (key == "L") c->num_layers = value;
    else if (key == "C") c->channels = value;
    else if (key == "H") c->num_heads = value;
    else if (key == "KV") c->num_kv_heads = value;
    else if (key == "T") c->max_seq_len = value;
    else if (key == "F") c->ffn_channels = value;
    else if (key == "V") c->vocab_size = value;
    else
        fail("model '%s': unknown field '%s' (expected L, C, H, KV, T, F or V)", descriptor.c_str(),
             key.c_str());
}

// llama3:L2:C64:H4:KV2:T64[:F176][:V512], fields in any order after "llama3".
static LlamaConfig custom_llama(const std::string& descriptor) {
    LlamaConfig c;
    c.num_layers = c.channels = c.num_heads = c.num_kv_heads = c.max_seq_len = c.ffn_channels = 0;
    c.vocab_size = LLAMA3_VOCAB_SIZE;
    c.rope_theta = 500000.0;
    c.rmsnorm_eps = 1e-5;
    c.rope_scaling.enabled = false;
    size_t pos = descriptor.find(':') + 1;
    while (pos <= descriptor.size()) {
        size_t end = descriptor.find(':', pos);
        if (end == std::string::npos) end = descriptor.size();
        set_llama_field(&c, descriptor.substr(pos, end - pos), descriptor);
        pos = end + 1;
    }
    if (!c.num_layers || !c.channels || !c.num_heads || !c.num_kv_heads || !c.max_seq_len)
        fail("model '%s': Llama 3 shapes need L, C, H, KV and T, e.g. llama3:L2:C64:H4:KV2:T64",
             descriptor.c_str());
    if (!c.ffn_channels) c.ffn_channels = llama_default_ffn_channels(c.channels);
    return c;
}

LlamaConfig llama_config_from_descriptor(const std::string& descriptor) {
    LlamaConfig config;
    bool named = false;
    for (const NamedLlama& n : named_llamas)
        if (descriptor == n.name) config = n.config(), named = true;
    if (!named) {
        if (!starts_with(descriptor, "llama3:"))
            fail("model '%s': not a Llama 3 shape (llama3.2-1b, llama3.2-3b, llama3.1-8b or "
                 "llama3:L..:C..:H..:KV..:T..)", descriptor.c_str());
        config = custom_llama(descriptor);
    }
    validate_llama_config(config, "model '" + descriptor + "'");
    return config;
}

void validate_llama_config(const LlamaConfig& c, const std::string& what) {
    if (c.num_layers <= 0 || c.channels <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
        c.ffn_channels <= 0 || c.vocab_size <= 0 || c.max_seq_len <= 0)
        fail("%s: every size must be positive (%s)", what.c_str(), describe_llama_config(c).c_str());
    if (c.channels % c.num_heads != 0)
        fail("%s: %d heads do not divide %d channels", what.c_str(), c.num_heads, c.channels);
    if (c.head_size() % 2 != 0)
        fail("%s: head size %d (C/H) is odd; RoPE rotates pairs of channels", what.c_str(),
             c.head_size());
    if (c.num_heads % c.num_kv_heads != 0)
        fail("%s: %d key/value heads do not divide %d query heads", what.c_str(), c.num_kv_heads,
             c.num_heads);
    if (!(c.rope_theta > 0) || !(c.rmsnorm_eps > 0))
        fail("%s: RoPE θ %g and RMSNorm ε %g must be positive", what.c_str(), c.rope_theta,
             c.rmsnorm_eps);
    const RopeScaling& s = c.rope_scaling;
    if (s.enabled && !(s.factor > 0 && s.low_freq_factor > 0 &&
                       s.high_freq_factor > s.low_freq_factor && s.original_max_position > 0))
        fail("%s: RoPE scaling needs factor > 0 and 0 < low_freq_factor < high_freq_factor "
             "(%g, %g, %g) and original_max_position %d > 0", what.c_str(), s.factor,
             s.low_freq_factor, s.high_freq_factor, s.original_max_position);
    // Bound the element count before anyone multiplies sizes out (a corrupt header must not
    // overflow).
    const double C = c.channels, layer = C * (2.0 * C + 2.0 * c.num_kv_heads * c.head_size()) +
                                         3.0 * C * c.ffn_channels + 2 * C;
    const double elements = 2.0 * c.vocab_size * C + c.num_layers * layer + C;
    if (elements > 1e12)
        fail("%s: %.3g parameters is beyond any model this trainer can hold", what.c_str(),
             elements);
}

std::string describe_llama_config(const LlamaConfig& c) {
    return strprintf("L=%d C=%d H=%d KV=%d F=%d V=%d maxT=%d", c.num_layers, c.channels,
                     c.num_heads, c.num_kv_heads, c.ffn_channels, c.vocab_size, c.max_seq_len);
}
