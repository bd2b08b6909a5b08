// llm.c model files: a 256-int32 header (magic 20240326, version 3 = fp32 or 5 = bf16,
// maxT, V, L, NH, C, Vp) followed by the 16 parameter tensors in ParamLayout order.
// Writing goes through AtomicFile; reading checks magic, version, the header's shape and that the
// file holds exactly the bytes the header implies, each failure a one-line InputError.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/formats.h"
#include "base/gpt_config.h"

enum class WeightType { FP32, BF16 };

struct ModelFile {
    GPTConfig config;
    WeightType type;
    std::vector<float> params;  // param_layout(config).total values (bf16 files widened to fp32)
};

void write_model_file(const std::string& path, const GPTConfig& config, const float* params,
                      WeightType type);
// The bytes write_model_file writes, for a writer that writes them later or elsewhere.
std::vector<char> model_file_image(const GPTConfig& config, const float* params, WeightType type);
ModelFile read_model_file(const std::string& path);
// The header of an open file, checked as read_model_file checks it (the file's size too); the weights
// follow at byte FILE_HEADER_BYTES.
GPTConfig read_model_file_header(FileReader& file, WeightType* type);

// A model file opened for reading slices of its weights (train/resharding.h): the header and the size
// checked as read_model_file checks them, the weights read piece by piece on demand.
class ModelFileReader {
public:
    explicit ModelFileReader(const std::string& path);
    const GPTConfig& config() const { return config_; }
    WeightType type() const { return type_; }
    const std::string& path() const { return file_.path(); }
    // Weights [first, first + count) of ParamLayout order, widened to fp32, into out.
    void read_values(uint64_t first, uint64_t count, float* out);

private:
    FileReader file_;
    GPTConfig config_;
    WeightType type_;
    size_t total_;
};

// The weights part of a model file, shared by GPT-2's and Llama 3's (base/llama_model_file.h):
// count fp32 values written as fp32, or rounded to bf16 a chunk at a time; and read back from
// byte `offset` of the file, widened to fp32.
void write_weights(AtomicFile& file, const float* values, size_t count, WeightType type);
void read_weights(FileReader& file, uint64_t offset, uint64_t count, WeightType type, float* out);
// That the file holds exactly `expected` bytes, as its header (whose shape reads `shape` in the
// message) implies; a one-line InputError for a truncated or an overlong file.
// A whole file's bytes: the header, then count weights as write_weights writes them.
std::vector<char> model_file_bytes(const int32_t header[FILE_HEADER_INTS], const float* params, size_t count,
                                   WeightType type);
void check_model_file_size(const FileReader& file, uint64_t expected, const std::string& shape);

// fp32 → bf16 with round-to-nearest-even (NaN stays NaN); bf16 → fp32 is exact.
uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t value);
