// Model files of either family (see model_files.h).
#include "base/model_files.h"

#include "base/errors.h"
#include "base/formats.h"
#include "base/llama_model_file.h"

void write_any_model_file(const std::string& path, const ModelConfig& config, const float* params, WeightType type) {
    if (is_llama3(config))
        write_llama_model_file(path, config.llama, params, type);
    else
        write_model_file(path, config.gpt, params, type);
}

std::vector<char> any_model_file_image(const ModelConfig& config, const float* params, WeightType type) {
    return is_llama3(config) ? llama_model_file_image(config.llama, params, type)
                             : model_file_image(config.gpt, params, type);
}

// The first int32 of the file (0 for a file shorter than that).
static int32_t file_magic(FileReader& file) {
    int32_t magic = 0;
    if (file.size() >= sizeof magic) file.read(0, &magic, sizeof magic);
    return magic;
}

bool looks_like_model_file(const std::string& path) {
    FileReader file(path);
    const int32_t magic = file_magic(file);
    return magic == MODEL_FILE_MAGIC || magic == LLAMA3_MODEL_FILE_MAGIC;
}

ModelWeightsReader::ModelWeightsReader(const std::string& path) : file_(path) {
    if (file_magic(file_) == LLAMA3_MODEL_FILE_MAGIC)
        config_ = llama3_model(read_llama_model_header(file_, &type_));
    else
        config_ = gpt2_model(read_model_file_header(file_, &type_));  // names any other file's kind
    total_ = parameter_count(config_);
}

void ModelWeightsReader::read_values(uint64_t first, uint64_t count, float* out) {
    if (first > total_ || count > total_ - first)
        fail("internal error: weights [%llu, +%llu) of %s, which holds %zu", (unsigned long long)first,
             (unsigned long long)count, file_.path().c_str(), total_);
    read_weights(file_, FILE_HEADER_BYTES + first * (type_ == WeightType::FP32 ? 4 : 2), count, type_, out);
}

AnyModelFile read_any_model_file(const std::string& path) {
    ModelWeightsReader reader(path);
    AnyModelFile model;
    model.config = reader.config();
    model.type = reader.type();
    model.params.resize(parameter_count(model.config));
    reader.read_values(0, model.params.size(), model.params.data());
    return model;
}
