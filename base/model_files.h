// A model file of either family, told apart by its magic: llm.c's GPT-2 file (base/model_file.h) or
// our Llama 3 file (base/llama_model_file.h). Both are a 256-int32 header followed by the weights in
// the family's buffer order, fp32 or bf16, so that after the header a reader needs only the count.
// The training loop reads and writes checkpoints through these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/model_config.h"
#include "base/model_file.h"

struct AnyModelFile {
    ModelConfig config;
    WeightType type = WeightType::FP32;
    std::vector<float> params;  // parameter_count(config) values (bf16 widened to fp32)
};

void write_any_model_file(const std::string& path, const ModelConfig& config, const float* params, WeightType type);
std::vector<char> any_model_file_image(const ModelConfig& config, const float* params, WeightType type);
AnyModelFile read_any_model_file(const std::string& path);
// True where the file starts with a model file's magic of either family.
bool looks_like_model_file(const std::string& path);

// A model file opened for reading slices of its weights (train/resharding.h): the header and the
// size checked as the family's reader checks them, the weights read piece by piece on demand.
class ModelWeightsReader {
public:
    explicit ModelWeightsReader(const std::string& path);
    const ModelConfig& config() const { return config_; }
    WeightType type() const { return type_; }
    const std::string& path() const { return file_.path(); }
    // Weights [first, first + count) of the buffer order, widened to fp32, into out.
    void read_values(uint64_t first, uint64_t count, float* out);

private:
    FileReader file_;
    ModelConfig config_;
    WeightType type_;
    size_t total_;
};
