// Llama 3 model file read/write (see llama_model_file.h).
#include "base/llama_model_file.h"

#include <cstdint>
#include <cstring>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"
#include "base/llama_descriptor.h"

namespace {

enum Slot {
    MAGIC, VERSION, WEIGHT_BYTES, LAYERS, CHANNELS, HEADS, KV_HEADS, FFN, VOCAB, MAX_T,
    SCALING_ON, SCALING_ORIGINAL_MAX,
    THETA = 12, EPS = 14, SCALING_FACTOR = 16, SCALING_LOW = 18, SCALING_HIGH = 20,
    FIRST_UNUSED = 22
};

void put_double(int32_t* header, int slot, double value) { memcpy(header + slot, &value, 8); }
double get_double(const int32_t* header, int slot) {
    double value;
    memcpy(&value, header + slot, 8);
    return value;
}

void llama_header(const LlamaConfig& c, WeightType type, int32_t h[FILE_HEADER_INTS]) {
    std::fill(h, h + FILE_HEADER_INTS, 0);
    h[MAGIC] = LLAMA3_MODEL_FILE_MAGIC;
    h[VERSION] = LLAMA3_MODEL_FILE_VERSION;
    h[WEIGHT_BYTES] = type == WeightType::FP32 ? 4 : 2;
    h[LAYERS] = c.num_layers, h[CHANNELS] = c.channels, h[HEADS] = c.num_heads;
    h[KV_HEADS] = c.num_kv_heads, h[FFN] = c.ffn_channels, h[VOCAB] = c.vocab_size;
    h[MAX_T] = c.max_seq_len;
    h[SCALING_ON] = c.rope_scaling.enabled ? 1 : 0;
    h[SCALING_ORIGINAL_MAX] = c.rope_scaling.original_max_position;
    put_double(h, THETA, c.rope_theta);
    put_double(h, EPS, c.rmsnorm_eps);
    put_double(h, SCALING_FACTOR, c.rope_scaling.factor);
    put_double(h, SCALING_LOW, c.rope_scaling.low_freq_factor);
    put_double(h, SCALING_HIGH, c.rope_scaling.high_freq_factor);
}

// The magic, the version and the weight type, or a one-line error saying what the file is instead.
WeightType check_kind(const int32_t* h, const std::string& path) {
    if (h[MAGIC] == MODEL_FILE_MAGIC)
        fail("%s: is a GPT-2 model file (llm.c's), not a Llama 3 model file", path.c_str());
    if (h[MAGIC] != LLAMA3_MODEL_FILE_MAGIC) {
        if (const char* kind = file_kind_of_magic(h[MAGIC]))
            fail("%s: is %s, not a Llama 3 model file", path.c_str(), kind);
        fail("%s: not a Llama 3 model file (magic %d, expected %d)", path.c_str(), h[MAGIC],
             LLAMA3_MODEL_FILE_MAGIC);
    }
    if (h[VERSION] != LLAMA3_MODEL_FILE_VERSION)
        fail("%s: unsupported Llama 3 model file version %d (expected %d)", path.c_str(),
             h[VERSION], LLAMA3_MODEL_FILE_VERSION);
    if (h[WEIGHT_BYTES] != 4 && h[WEIGHT_BYTES] != 2)
        fail("%s: %d bytes per weight (expected 4 for fp32 or 2 for bf16)", path.c_str(),
             h[WEIGHT_BYTES]);
    for (int i = FIRST_UNUSED; i < FILE_HEADER_INTS; i++)
        if (h[i] != 0)
            fail("%s: header slot %d is %d; version %d leaves slots %d to %d zero", path.c_str(), i,
                 h[i], LLAMA3_MODEL_FILE_VERSION, FIRST_UNUSED, FILE_HEADER_INTS - 1);
    return h[WEIGHT_BYTES] == 4 ? WeightType::FP32 : WeightType::BF16;
}

LlamaConfig header_config(const int32_t* h, const std::string& path) {
    if (h[SCALING_ON] != 0 && h[SCALING_ON] != 1)
        fail("%s: header slot %d (RoPE scaling on) is %d, not 0 or 1", path.c_str(), SCALING_ON,
             h[SCALING_ON]);
    LlamaConfig c;
    c.num_layers = h[LAYERS], c.channels = h[CHANNELS], c.num_heads = h[HEADS];
    c.num_kv_heads = h[KV_HEADS], c.ffn_channels = h[FFN], c.vocab_size = h[VOCAB];
    c.max_seq_len = h[MAX_T];
    c.rope_theta = get_double(h, THETA);
    c.rmsnorm_eps = get_double(h, EPS);
    c.rope_scaling.enabled = h[SCALING_ON] == 1;
    c.rope_scaling.original_max_position = h[SCALING_ORIGINAL_MAX];
    c.rope_scaling.factor = get_double(h, SCALING_FACTOR);
    c.rope_scaling.low_freq_factor = get_double(h, SCALING_LOW);
    c.rope_scaling.high_freq_factor = get_double(h, SCALING_HIGH);
    validate_llama_config(c, path + " header");
    return c;
}

}  // namespace

std::vector<char> llama_model_file_image(const LlamaConfig& config, const float* params, WeightType type) {
    int32_t header[FILE_HEADER_INTS];
    llama_header(config, type, header);
    return model_file_bytes(header, params, llama_param_count(config), type);
}

void write_llama_model_file(const std::string& path, const LlamaConfig& config, const float* params,
                            WeightType type) {
    validate_llama_config(config, path);
    int32_t header[FILE_HEADER_INTS];
    llama_header(config, type, header);
    AtomicFile file(path);
    file.write(header, sizeof header);
    write_weights(file, params, llama_param_count(config), type);
    file.commit();
}

LlamaConfig read_llama_model_header(FileReader& file, WeightType* type) {
    const std::string& path = file.path();
    if (file.size() < (uint64_t)FILE_HEADER_BYTES)
        fail("%s: shorter than the %d-byte header", path.c_str(), FILE_HEADER_BYTES);
    int32_t h[FILE_HEADER_INTS];
    file.read(0, h, FILE_HEADER_BYTES);
    *type = check_kind(h, path);
    const LlamaConfig config = header_config(h, path);
    check_model_file_size(file, FILE_HEADER_BYTES + llama_param_count(config) * h[WEIGHT_BYTES],
                          describe_llama_config(config));
    return config;
}

LlamaModelFile read_llama_model_file(const std::string& path) {
    FileReader file(path);
    LlamaModelFile model;
    model.config = read_llama_model_header(file, &model.type);
    model.params.resize(llama_param_count(model.config));
    read_weights(file, FILE_HEADER_BYTES, model.params.size(), model.type, model.params.data());
    return model;
}
