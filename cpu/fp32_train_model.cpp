// Where the CPU models keep a second moment (cpu/fp32_train_model.h).
#include "cpu/fp32_train_model.h"

#include "base/muon_layout.h"

std::vector<LayoutRange> second_moment_ranges(const ModelConfig& config, const TrainOptions& opt) {
    if (opt.optimizer == "lars") return {};
    if (opt.optimizer != "muon") return whole_model_ranges(parameter_count(config));
    std::vector<LayoutRange> ranges;
    for (const AdamWTensor& t : muon_layout(config).adamw) ranges.push_back({t.offset, t.size});
    return ranges;
}

size_t optimizer_state_bytes(const ModelConfig& config, const TrainOptions& opt) {
    return (parameter_count(config) + ranges_size(second_moment_ranges(config, opt))) * sizeof(float);
}
