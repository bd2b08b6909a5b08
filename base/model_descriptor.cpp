// Model descriptors → GPTConfig (see model_descriptor.h). The GPT-2 and GPT-3 shape tables are the
// published model sizes as llm.c lists them.
#include "base/model_descriptor.h"

#include <cstdlib>

#include "base/errors.h"
#include "base/formats.h"

int padded_vocab_size(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

// Parses a whole string as a positive int; false if it is anything else.
static bool parse_positive(const std::string& text, int* out) {
    if (text.empty() || text.size() > 9) return false;
    for (char c : text)
        if (c < '0' || c > '9') return false;
    *out = std::atoi(text.c_str());
    return *out > 0;
}

static bool starts_with(const std::string& s, const char* prefix) {
    return s.rfind(prefix, 0) == 0;
}

bool is_model_descriptor(const std::string& text) {
    if (starts_with(text, "gpt2:") || starts_with(text, "gpt3:") || starts_with(text, "custom:"))
        return true;
    int depth;
    return text.size() >= 2 && text[0] == 'd' && parse_positive(text.substr(1), &depth);
}

static GPTConfig gpt2_by_depth(int depth, const std::string& descriptor) {
    struct Shape {
        int depth, channels, heads;
    };
    static const Shape shapes[] = {
        {6, 384, 6},     // unofficial tiny
        {12, 768, 12},   // GPT-2 124M
        {24, 1024, 16},  // GPT-2 350M (medium)
        {36, 1280, 20},  // GPT-2 774M (large)
        {48, 1600, 25},  // GPT-2 1558M (xl)
        {60, 1920, 30},  // unofficial 2.7B
        {72, 2880, 30},  // unofficial 7.3B
        {84, 3456, 36},  // unofficial 12.2B
    };
    for (const Shape& s : shapes) {
        if (s.depth != depth) continue;
        GPTConfig c;
        c.num_layers = s.depth;
        c.channels = s.channels;
        c.num_heads = s.heads;
        c.max_seq_len = 1024;
        c.vocab_size = GPT2_VOCAB_SIZE;
        c.padded_vocab_size = padded_vocab_size(c.vocab_size);
        return c;
    }
    fail("model '%s': no GPT-2 model of depth %d (known: 6 12 24 36 48 60 72 84)",
         descriptor.c_str(), depth);
}

static GPTConfig gpt3_by_channels(int channels, const std::string& descriptor) {
    struct Shape {
        int channels, depth, head_size;
    };
    static const Shape shapes[] = {
        {384, 6, 64},      // unofficial tiny
        {768, 12, 64},     // GPT-3 Small 125M
        {1024, 24, 64},    // Medium 350M
        {1536, 24, 96},    // Large 760M
        {2048, 24, 128},   // XL 1.3B
        {2560, 32, 80},    // 2.7B
        {4096, 32, 128},   // 6.7B
        {5120, 40, 128},   // 13B (the paper's table prints 5140, which 40 heads of 128 cannot make)
        {12288, 96, 128},  // 175B
    };
    for (const Shape& s : shapes) {
        if (s.channels != channels) continue;
        GPTConfig c;
        c.num_layers = s.depth;
        c.channels = s.channels;
        c.num_heads = s.channels / s.head_size;
        c.max_seq_len = 2048;
        c.vocab_size = GPT2_VOCAB_SIZE;
        c.padded_vocab_size = padded_vocab_size(c.vocab_size);
        return c;
    }
    fail(
        "model '%s': no GPT-3 model with %d channels (known: 384 768 1024 1536 2048 2560 4096 5120 "
        "12288)",
        descriptor.c_str(), channels);
}

// custom:L2:C64:H4[:V512][:T64], fields in any order after "custom".
static GPTConfig custom_shape(const std::string& descriptor) {
    GPTConfig c;
    c.num_layers = c.channels = c.num_heads = 0;
    c.vocab_size = GPT2_VOCAB_SIZE;
    c.max_seq_len = 1024;
    size_t pos = descriptor.find(':') + 1;
    while (pos <= descriptor.size()) {
        size_t end = descriptor.find(':', pos);
        if (end == std::string::npos) end = descriptor.size();
        std::string field = descriptor.substr(pos, end - pos);
        int value = 0;
        if (field.size() < 2 || !parse_positive(field.substr(1), &value))
            fail("model '%s': field '%s' is not a letter followed by a positive number",
                 descriptor.c_str(), field.c_str());
        switch (field[0]) {
            case 'L': c.num_layers = value; break;
            case 'C': c.channels = value; break;
            case 'H': c.num_heads = value; break;
            case 'V': c.vocab_size = value; break;
            case 'T': c.max_seq_len = value; break;
            default:
                fail("model '%s': unknown field '%c' (expected L, C, H, V or T)",
                     descriptor.c_str(), field[0]);
        }
        pos = end + 1;
    }
    if (!c.num_layers || !c.channels || !c.num_heads)
        fail("model '%s': custom models need L, C and H, e.g. custom:L2:C64:H4:V512:T64",
             descriptor.c_str());
    c.padded_vocab_size = padded_vocab_size(c.vocab_size);
    return c;
}

GPTConfig config_from_descriptor(const std::string& descriptor) {
    GPTConfig config;
    int n = 0;
    if (starts_with(descriptor, "custom:")) {
        config = custom_shape(descriptor);
    } else if (starts_with(descriptor, "gpt3:")) {
        if (descriptor.size() < 7 || descriptor[5] != 'c' ||
            !parse_positive(descriptor.substr(6), &n))
            fail("model '%s': expected gpt3:cN with N the number of channels", descriptor.c_str());
        config = gpt3_by_channels(n, descriptor);
    } else {
        std::string depth = starts_with(descriptor, "gpt2:") ? descriptor.substr(5) : descriptor;
        if (depth.size() < 2 || depth[0] != 'd' || !parse_positive(depth.substr(1), &n))
            fail("model '%s': expected dN or gpt2:dN with N the number of layers",
                 descriptor.c_str());
        config = gpt2_by_depth(n, descriptor);
    }
    validate_config(config, "model '" + descriptor + "'");
    return config;
}

void validate_config(const GPTConfig& c, const std::string& what) {
    if (c.num_layers <= 0 || c.channels <= 0 || c.num_heads <= 0 || c.vocab_size <= 0 ||
        c.max_seq_len <= 0 || c.padded_vocab_size <= 0)
        fail("%s: every size must be positive (%s)", what.c_str(), describe_config(c).c_str());
    if (c.channels % c.num_heads != 0)
        fail("%s: %d heads do not divide %d channels", what.c_str(), c.num_heads, c.channels);
    if (c.padded_vocab_size < c.vocab_size)
        fail("%s: padded vocabulary %d is smaller than the vocabulary %d", what.c_str(),
             c.padded_vocab_size, c.vocab_size);
    // Bound the element count before anyone multiplies sizes out (a corrupt header must not
    // overflow).
    const double elements = (double)c.padded_vocab_size * c.channels +
                            (double)c.max_seq_len * c.channels +
                            12.0 * c.num_layers * (double)c.channels * c.channels;
    if (elements > 1e12)
        fail("%s: %.3g parameters is beyond any model this trainer can hold", what.c_str(),
             elements);
    if (c.vocab_size > 65536)
        fail("%s: vocabulary %d does not fit uint16 token shards", what.c_str(), c.vocab_size);
}

std::string describe_config(const GPTConfig& c) {
    return strprintf("L=%d H=%d C=%d V=%d Vp=%d maxT=%d", c.num_layers, c.num_heads, c.channels,
                     c.vocab_size, c.padded_vocab_size, c.max_seq_len);
}
