// What every Hugging Face model folder shares, whichever model it holds (train/hf_gpt2.h for GPT-2,
// train/hf_llama.h for Llama 3): writing the folder under a temporary name, finding its weight files
// (model.safetensors, or the shards model.safetensors.index.json lists), reading one tensor as
// fp32, and the config.json fields read the same way for every model.
#pragma once
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/model_file.h"
#include "train/safetensors.h"

// A folder being written; removed unless commit() renamed it to its final name.
class TempFolder {
public:
    explicit TempFolder(const std::string& final_path);
    ~TempFolder();
    TempFolder(const TempFolder&) = delete;
    TempFolder& operator=(const TempFolder&) = delete;
    const std::string& path() const { return temp_; }
    void commit();  // a one-line InputError when the rename fails

private:
    std::string final_, temp_;
    bool committed_ = false;
};

// That dir can be exported to: it does not exist, or is an empty folder (removed by
// remove_empty_target before the commit).
void check_export_target(const std::string& dir);
void remove_empty_target(const std::string& dir);

void write_text(const std::string& path, const std::string& text);  // through AtomicFile
std::string read_text(const std::string& path);
// config.json's torch_dtype for weights stored as dtype: "float32", "bfloat16" or "float16".
const char* torch_dtype_name(StDtype dtype);

// The folder's config.json, parsed: a one-line InputError when dir is not a folder, has no
// config.json, or it is not a JSON object.
nlohmann::json read_hf_config(const std::string& dir);
// Its model_type ("gpt2", "llama"); "" when absent or not a string.
std::string hf_model_type(const nlohmann::json& config);

// The weight files of a folder: model.safetensors, or the shards model.safetensors.index.json lists.
std::vector<std::string> weight_files(const std::string& dir);

// One tensor of the weight file at path, which must be F32, F16 or BF16 (model names the model in
// the message), widened to fp32.
std::vector<float> read_float_tensor(const std::string& path, const StHeader& header,
                                     const StTensor& tensor, const char* model);

// The weight type of a model imported from tensors of these dtypes ("F32", "BF16", ...): BF16 when
// every one was BF16, else FP32 (F16 and BF16 widen exactly). `source_dtypes` (may be null)
// receives them joined by "+", e.g. "F16" or "BF16+F32".
WeightType imported_weight_type(const std::set<std::string>& dtypes, std::string* source_dtypes);

// "(2, 3)"
std::string shape_text(const std::vector<uint64_t>& shape);

// config[name], which must be a whole number in [min, max].
int int_field(const nlohmann::json& config, const char* name, const std::string& what, long min,
              long max);
// An optional boolean that must have the value `needed` for this trainer's model; `why` says so.
void require_bool(const nlohmann::json& config, const char* name, bool needed,
                  const std::string& what, const char* why);
