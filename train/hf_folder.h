// What every Hugging Face model folder shares, whichever model it holds (train/hf_gpt2.h for GPT-2,
// train/hf_llama.h for Llama 3): writing the folder under a temporary name (removed on an error, a
// signal, or by the next writer once its process is gone), finding its weight files
// (model.safetensors, or the shards model.safetensors.index.json lists), reading one tensor as
// fp32, and the config.json fields read the same way for every model.
#pragma once
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/model_file.h"
#include "train/safetensors.h"

// A folder being written, under the staging name "<final>.tmp.<pid>", which this process creates
// itself (so everything in it is this process's); removed unless commit() renamed it to its final
// name. While it exists it is registered for remove_staging_folders_now().
class TempFolder {
public:
    explicit TempFolder(const std::string& final_path);  // one-line InputError when it can't create
    ~TempFolder();
    TempFolder(const TempFolder&) = delete;
    TempFolder& operator=(const TempFolder&) = delete;
    const std::string& path() const { return temp_; }
    void commit();  // a one-line InputError when the rename fails

private:
    std::string final_, temp_;
    bool committed_ = false;
    int slot_ = -1;  // where remove_staging_folders_now() finds temp_ (-1: not registered)
};

// Removes the staging folders of the TempFolders now open, with the files in them. Async-signal-
// safe: for a signal handler about to end the process (convert.cpp), beside base/file_io.h's
// remove_temporary_files_now(), so that no half-written folder stays behind.
void remove_staging_folders_now();

// Removes what writers of `output` that are no longer running left behind: the entries of its folder
// named exactly "<output's name>.tmp.<pid>" (AtomicFile's temporary files, TempFolder's staging
// folders) whose pid is no process now (kill(pid, 0) fails with ESRCH). A file goes only when it is a
// regular file; a folder only when it holds nothing but files an export writes (and their
// temporaries). Prints one line naming what was removed, and one naming what was left, if any.
void remove_stale_temporaries(const std::string& output);

// That dir can be exported to: it does not exist, or is an empty folder (which the commit's rename
// replaces).
void check_export_target(const std::string& dir);

void write_text(const std::string& path, const std::string& text);  // through AtomicFile
// The bytes of a model folder's JSON file (config.json, an index); a one-line InputError when it is
// not a regular file or is over 100 MB.
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
// the message), widened to fp32. A NaN or an infinity in it is a one-line InputError naming the
// tensor and the element, unless allow_nonfinite (convert import-hf --allow-nonfinite 1).
std::vector<float> read_float_tensor(const std::string& path, const StHeader& header,
                                     const StTensor& tensor, const char* model,
                                     bool allow_nonfinite);

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
