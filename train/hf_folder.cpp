// What Hugging Face model folders share (see hf_folder.h).
#include "train/hf_folder.h"

#include <unistd.h>

#include <filesystem>
#include <set>

#include "base/errors.h"
#include "base/file_io.h"

using nlohmann::json;
namespace fs = std::filesystem;

TempFolder::TempFolder(const std::string& final_path)
    : final_(final_path), temp_(final_path + ".tmp." + std::to_string(getpid())) {
    std::error_code ec;
    fs::remove_all(temp_, ec);
    make_directory(temp_);
}

TempFolder::~TempFolder() {
    if (committed_) return;
    std::error_code ec;
    fs::remove_all(temp_, ec);
}

void TempFolder::commit() {
    std::error_code ec;
    fs::rename(temp_, final_, ec);
    if (ec) fail("%s: cannot be created (%s)", final_.c_str(), ec.message().c_str());
    committed_ = true;
}

void check_export_target(const std::string& dir) {
    std::error_code ec;
    if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
        fail("%s: already exists and is not an empty folder (give a new folder)", dir.c_str());
}

void remove_empty_target(const std::string& dir) {
    std::error_code ec;
    if (fs::exists(dir, ec)) fs::remove(dir, ec);
}

void write_text(const std::string& path, const std::string& text) {
    AtomicFile file(path);
    file.write(text.data(), text.size());
    file.commit();
}

std::string read_text(const std::string& path) {
    std::vector<char> bytes(file_size(path));
    if (!bytes.empty()) read_bytes(path, 0, bytes.data(), bytes.size());
    return std::string(bytes.begin(), bytes.end());
}

const char* torch_dtype_name(StDtype dtype) {
    return dtype == StDtype::BF16 ? "bfloat16" : dtype == StDtype::F16 ? "float16" : "float32";
}

json read_hf_config(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        fail("%s: not a folder (a Hugging Face model folder with config.json and "
             "model.safetensors)", dir.c_str());
    const std::string path = dir + "/config.json";
    if (!path_exists(path)) fail("%s: no config.json", dir.c_str());
    const json config = json::parse(read_text(path), nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) fail("%s: not valid JSON", path.c_str());
    if (!config.is_object()) fail("%s: not a JSON object", path.c_str());
    return config;
}

std::string hf_model_type(const json& config) {
    if (!config.contains("model_type") || !config["model_type"].is_string()) return "";
    return config["model_type"].get<std::string>();
}

std::vector<std::string> weight_files(const std::string& dir) {
    if (path_exists(dir + "/model.safetensors")) return {dir + "/model.safetensors"};
    const std::string index_path = dir + "/model.safetensors.index.json";
    if (!path_exists(index_path)) {
        if (path_exists(dir + "/pytorch_model.bin"))
            fail("%s: holds pytorch_model.bin but no model.safetensors; only safetensors is read "
                 "(save with save_pretrained(DIR, safe_serialization=True))", dir.c_str());
        fail("%s: no model.safetensors (nor model.safetensors.index.json)", dir.c_str());
    }
    const json index = json::parse(read_text(index_path), nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object())
        fail("%s: not a JSON object with a weight_map", index_path.c_str());
    std::set<std::string> files;
    for (const auto& item : index["weight_map"].items()) {
        const json& file = item.value();
        if (!file.is_string() || file.get<std::string>().empty() ||
            file.get<std::string>().find('/') != std::string::npos ||
            file.get<std::string>()[0] == '.')
            fail("%s: weight_map entry '%s' is not a file name in the folder", index_path.c_str(),
                 item.key().c_str());
        files.insert(file.get<std::string>());
    }
    if (files.empty()) fail("%s: the weight_map lists no files", index_path.c_str());
    std::vector<std::string> paths;
    for (const std::string& f : files) {
        if (!path_exists(dir + "/" + f))
            fail("%s: lists %s, which is not in the folder", index_path.c_str(), f.c_str());
        paths.push_back(dir + "/" + f);
    }
    return paths;
}

std::vector<float> read_float_tensor(const std::string& path, const StHeader& header,
                                     const StTensor& tensor, const char* model) {
    if (tensor.dtype != StDtype::F32 && tensor.dtype != StDtype::F16 &&
        tensor.dtype != StDtype::BF16)
        fail("%s: tensor '%s' is %s; %s weights must be F32, F16 or BF16", path.c_str(),
             tensor.name.c_str(), dtype_name(tensor.dtype), model);
    const std::vector<uint8_t> bytes = read_tensor_bytes(path, header, tensor);
    StTensor local = tensor;
    local.end -= local.begin;
    local.begin = 0;
    return tensor_as_float(local, bytes.data(), path);
}

WeightType imported_weight_type(const std::set<std::string>& dtypes, std::string* source_dtypes) {
    if (source_dtypes) {
        source_dtypes->clear();
        for (const std::string& d : dtypes) *source_dtypes += (source_dtypes->empty() ? "" : "+") + d;
    }
    return dtypes.size() == 1 && *dtypes.begin() == "BF16" ? WeightType::BF16 : WeightType::FP32;
}

std::string shape_text(const std::vector<uint64_t>& shape) {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); i++)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + ")";
}

int int_field(const json& config, const char* name, const std::string& what, long min, long max) {
    if (!config.contains(name)) fail("%s: no '%s'", what.c_str(), name);
    const json& v = config[name];
    if (!v.is_number_integer() || v.get<long long>() < min || v.get<long long>() > max)
        fail("%s: %s is %s, not a whole number from %ld to %ld", what.c_str(), name,
             v.dump().substr(0, 40).c_str(), min, max);
    return (int)v.get<long long>();
}

void require_bool(const json& config, const char* name, bool needed, const std::string& what,
                  const char* why) {
    if (!config.contains(name) || config[name].is_null()) return;
    if (!config[name].is_boolean())
        fail("%s: %s is %s, not true or false", what.c_str(), name,
             config[name].dump().substr(0, 40).c_str());
    if (config[name].get<bool>() != needed)
        fail("%s: %s is %s: %s", what.c_str(), name, needed ? "false" : "true", why);
}
