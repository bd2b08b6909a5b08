// What Hugging Face model folders share (see hf_folder.h).
#include "train/hf_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include "base/errors.h"
#include "base/file_io.h"

using nlohmann::json;
namespace fs = std::filesystem;

// ---- staging folders, and what writers that ended left behind ----

namespace {

// The staging folders being written, in fixed storage a signal handler can read (as base/file_io.cpp
// keeps AtomicFile's temporaries): a slot's path is complete before its `used` flag is set, and the
// flag is cleared before the slot is reused. Registration takes a mutex; the handler takes no lock.
std::mutex g_staging_mutex;
struct StagingSlot {
    volatile sig_atomic_t used = 0;
    char path[4096];
};
StagingSlot g_staging[8];

int register_staging_folder(const std::string& path) {
    if (path.size() >= sizeof g_staging[0].path) return -1;
    std::lock_guard<std::mutex> lock(g_staging_mutex);
    for (int i = 0; i < (int)(sizeof g_staging / sizeof g_staging[0]); i++) {
        if (g_staging[i].used) continue;
        memcpy(g_staging[i].path, path.c_str(), path.size() + 1);
        g_staging[i].used = 1;
        return i;
    }
    return -1;  // more open at once than slots: that folder is left to the next writer's clean-up
}

void unregister_staging_folder(int slot) {
    std::lock_guard<std::mutex> lock(g_staging_mutex);
    if (slot >= 0) g_staging[slot].used = 0;
}

bool is_dot_or_dot_dot(const char* name) {
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

// Unlinks every file in the folder at path, then the folder, with system calls alone (no
// allocation, no lock), so that a signal handler may call it. Entries are read again from the
// start after each batch of removals, until a pass removes nothing.
void remove_folder_of_files_now(const char* path) {
    const int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        alignas(8) char entries[4096];
        for (bool removed = true; removed;) {
            removed = false;
            if (lseek(fd, 0, SEEK_SET) != 0) break;
            const ssize_t bytes = getdents64(fd, entries, sizeof entries);
            for (ssize_t at = 0; at < bytes;) {
                const struct dirent64* entry = (const struct dirent64*)(entries + at);
                at += entry->d_reclen;
                if (!is_dot_or_dot_dot(entry->d_name) && unlinkat(fd, entry->d_name, 0) == 0)
                    removed = true;
            }
        }
        close(fd);
    }
    rmdir(path);
}

// The pid in a name that is exactly "<base>.tmp.<pid>" (the pattern AtomicFile and TempFolder
// name their temporaries with), or 0 for any other name.
long temporary_pid(const std::string& name, const std::string& base) {
    const std::string head = base + ".tmp.";
    if (name.size() <= head.size() || name.compare(0, head.size(), head) != 0) return 0;
    const std::string digits = name.substr(head.size());
    if (digits.size() > 9 || digits[0] == '0' ||
        digits.find_first_not_of("0123456789") != std::string::npos)
        return 0;
    return std::stol(digits);
}

// Whether no process has this pid now (one of another user's answers EPERM: it is running).
bool process_is_gone(long pid) {
    return pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

// The files an export writes into its staging folder (train/hf_gpt2.cpp, train/hf_llama.cpp), and
// their AtomicFile temporaries: what a staging folder may hold.
bool is_exported_file_name(const std::string& name) {
    for (const char* file : {"config.json", "model.safetensors", "generation_config.json",
                             "vocab.json", "merges.txt", "tokenizer_config.json"})
        if (name == file || temporary_pid(name, file) > 0) return true;
    return false;
}

// Removes a staging folder that an export left, but only when it holds nothing other than regular
// files an export writes: a folder of that name holding anything else is not ours to remove.
bool remove_left_staging_folder(const fs::path& folder) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
        if (!fs::is_regular_file(entry.symlink_status(ec)) ||
            !is_exported_file_name(entry.path().filename().string()))
            return false;
        files.push_back(entry.path());
    }
    if (ec) return false;
    for (const fs::path& file : files) unlink(file.c_str());
    return rmdir(folder.c_str()) == 0;
}

// A path without the slashes at its end ("out/" -> "out"), so that its name is the last component.
std::string without_trailing_slashes(std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    return path;
}

std::string joined(const std::vector<std::string>& names) {
    std::string text;
    for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
    return text;
}

}  // namespace

void remove_staging_folders_now() {
    for (StagingSlot& slot : g_staging)
        if (slot.used) remove_folder_of_files_now(slot.path);
}

void remove_stale_temporaries(const std::string& output) {
    const fs::path target(without_trailing_slashes(output));
    const std::string base = target.filename().string();
    const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::vector<std::string> removed, left;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
        const std::string name = entry.path().filename().string();
        const long pid = temporary_pid(name, base);
        if (pid == 0 || !process_is_gone(pid)) continue;
        const fs::file_status status = entry.symlink_status(ec);
        const bool gone = fs::is_regular_file(status)  ? unlink(entry.path().c_str()) == 0
                          : fs::is_directory(status) ? remove_left_staging_folder(entry.path())
                                                     : false;
        (gone ? removed : left).push_back(name);
    }
    std::sort(removed.begin(), removed.end());
    std::sort(left.begin(), left.end());
    if (!removed.empty())
        printf("removed %s: temporaries of %s left by processes no longer running\n",
               joined(removed).c_str(), output.c_str());
    if (!left.empty())
        printf("left %s: named like temporaries of %s, but holding what a writer of it does not "
               "write\n", joined(left).c_str(), output.c_str());
}

TempFolder::TempFolder(const std::string& final_path)
    : final_(without_trailing_slashes(final_path)),
      temp_(final_ + ".tmp." + std::to_string(getpid())) {
    // A folder of this name is from an earlier process that had this pid (pids are reused).
    std::error_code ec;
    if (fs::exists(fs::symlink_status(temp_, ec)) && !remove_left_staging_folder(temp_))
        fail("%s: exists and holds files an export does not write; remove it, or export elsewhere",
             temp_.c_str());
    const fs::path parent = fs::path(temp_).parent_path();
    if (!parent.empty()) make_directory(parent.string());
    slot_ = register_staging_folder(temp_);
    if (mkdir(temp_.c_str(), 0777) != 0) {
        const int saved_errno = errno;
        unregister_staging_folder(slot_);
        fail("%s: cannot be created (%s)", temp_.c_str(), strerror(saved_errno));
    }
}

TempFolder::~TempFolder() {
    if (!committed_) remove_folder_of_files_now(temp_.c_str());  // ours alone: this process made it
    unregister_staging_folder(slot_);
}

void TempFolder::commit() {
    // rename() replaces an empty folder of the final name, and fails on anything else there.
    if (rename(temp_.c_str(), final_.c_str()) != 0)
        fail("%s: cannot be created (%s)", final_.c_str(), strerror(errno));
    committed_ = true;
    unregister_staging_folder(slot_);
    slot_ = -1;
}

void check_export_target(const std::string& dir) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(dir, ec)) && !(fs::is_directory(fs::symlink_status(dir, ec)) &&
                                                     fs::is_empty(dir, ec)))
        fail("%s: already exists and is not an empty folder (give a new folder)", dir.c_str());
}

void write_text(const std::string& path, const std::string& text) {
    AtomicFile file(path);
    file.write(text.data(), text.size());
    file.commit();
}

// The largest JSON file read here: safetensors' own limit for its header, far above any config.json
// or index (a file beyond it is not one).
constexpr uint64_t MAX_TEXT_BYTES = 100000000;

std::string read_text(const std::string& path) {
    const uint64_t size = file_size(path);
    if (size > MAX_TEXT_BYTES)
        fail("%s: %llu bytes, more than the %llu a JSON file of a model folder may have",
             path.c_str(), (unsigned long long)size, (unsigned long long)MAX_TEXT_BYTES);
    std::vector<char> bytes(size);
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

// Fails on the first NaN or infinity among a tensor's values, naming the tensor and the element.
static void check_finite(const std::string& path, const StTensor& tensor,
                         const std::vector<float>& values) {
    for (size_t i = 0; i < values.size(); i++)
        if (!std::isfinite(values[i]))
            fail("%s: tensor '%s' holds %s at element %zu (--allow-nonfinite 1 imports it anyway)",
                 path.c_str(), tensor.name.c_str(),
                 std::isnan(values[i]) ? "NaN" : values[i] > 0 ? "+inf" : "-inf", i);
}

std::vector<float> read_float_tensor(const std::string& path, const StHeader& header,
                                     const StTensor& tensor, const char* model,
                                     bool allow_nonfinite) {
    if (tensor.dtype != StDtype::F32 && tensor.dtype != StDtype::F16 &&
        tensor.dtype != StDtype::BF16)
        fail("%s: tensor '%s' is %s; %s weights must be F32, F16 or BF16", path.c_str(),
             tensor.name.c_str(), dtype_name(tensor.dtype), model);
    const std::vector<uint8_t> bytes = read_tensor_bytes(path, header, tensor);
    StTensor local = tensor;
    local.end -= local.begin;
    local.begin = 0;
    std::vector<float> values = tensor_as_float(local, bytes.data(), path);
    if (!allow_nonfinite) check_finite(path, tensor, values);
    return values;
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
