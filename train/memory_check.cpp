// Memory needed versus available (see memory_check.h).
#include "train/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "base/errors.h"

// A value of a /proc file of "Key:   15951232 kB" lines in bytes; 0 if absent.
static uint64_t proc_kb_value(const char* file, const char* key) {
    std::ifstream in(file);
    std::string line;
    const size_t n = strlen(key);
    while (std::getline(in, line))
        if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':')
            return strtoull(line.c_str() + n + 1, nullptr, 10) * 1024;
    return 0;
}
static uint64_t meminfo_bytes(const char* key) { return proc_kb_value("/proc/meminfo", key); }
static uint64_t status_bytes(const char* key) { return proc_kb_value("/proc/self/status", key); }

uint64_t resident_bytes() { return status_bytes("VmRSS"); }
uint64_t peak_resident_bytes() { return status_bytes("VmHWM"); }
bool reset_peak_resident() {
    std::ofstream clear("/proc/self/clear_refs");
    return (clear << "5").flush().good();  // 5: reset the peak resident size
}

// The cgroup (v2, else v1) memory limit less what the cgroup already uses; 0 when unlimited.
static uint64_t cgroup_room() {
    struct Files {
        const char *limit, *usage;
    };
    for (Files f : {Files{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                    Files{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
        std::ifstream limit_file(f.limit), usage_file(f.usage);
        std::string limit_text;
        uint64_t usage = 0;
        if (!(limit_file >> limit_text) || !(usage_file >> usage) || limit_text == "max") continue;
        const uint64_t limit = strtoull(limit_text.c_str(), nullptr, 10);
        if (limit == 0 || limit >= (1ull << 60)) continue;  // v1 writes a huge number for "none"
        return limit > usage ? limit - usage : 1;
    }
    return 0;
}

AvailableMemory available_host_memory() {
    AvailableMemory available{meminfo_bytes("MemAvailable"), "MemAvailable"};
    const uint64_t room = cgroup_room();
    if (room > 0 && (available.bytes == 0 || room < available.bytes))
        available = {room, "room under the cgroup memory limit"};
    return available;
}

uint64_t loop_host_bytes(const ModelConfig& config, const TrainOptions& opt, bool resuming,
                         bool from_model_file) {
    const uint64_t weights = (uint64_t)parameter_count(config) * sizeof(float);
    const uint64_t later = std::max(resuming ? 0 : weights,               // initial weights
                                    opt.output_dir.empty() ? 0 : 4 * weights);  // checkpoints
    const uint64_t held = resuming ? 4 * weights : from_model_file ? weights : 0;
    return later > held ? later - held : 0;
}

static double gib(uint64_t bytes) { return bytes / 1073741824.0; }

void check_host_memory(const ModelMemory& model, const ModelConfig& config, const TrainOptions& opt,
                       bool resuming, bool from_model_file) {
    const AvailableMemory available = available_host_memory();
    const uint64_t state = model.parameters + model.gradients + model.master_weights +
                           model.optimizer_state;
    const uint64_t loop = loop_host_bytes(config, opt, resuming, from_model_file);
    const uint64_t needed = state + model.activations + loop;
    if (available.bytes == 0 || needed <= available.bytes) return;
    const char* lower = model.activations > state ? "lower -b (batch size) or -t (sequence length)"
                                                  : "use a smaller model (-e), or a GPU";
    fail("-e (--model): this run needs about %.1f GiB of memory (weights, gradients and AdamW state "
         "%.1f GiB, activations %.1f GiB, loading and checkpoint copies %.1f GiB) but the machine "
         "has %.1f GiB available (%s): %s",
         gib(needed), gib(state), gib(model.activations), gib(loop), gib(available.bytes),
         available.source.c_str(), lower);
}
