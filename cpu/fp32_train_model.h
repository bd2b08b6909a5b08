// What the CPU models (GPT-2's in cpu/cpu_train_model.cpp, Llama 3's in cpu/llama_train_model.cpp)
// share behind the training loop's interface: one fp32 parameter buffer that is both the working and
// the master weights, and the optimizer's moments m and v beside it. LARS keeps one moment (its
// momentum buffer, in m): the model then holds no v, and the state files get zeros in its place.
#pragma once
#include <vector>

#include "base/host_arrays.h"
#include "base/train_model.h"
#include "base/train_options.h"

// Whether a run's optimizer keeps one moment (LARS) instead of two.
inline bool keeps_one_moment(const TrainOptions& opt) { return opt.optimizer == "lars"; }

class Fp32TrainModel : public TrainModel {
public:
    explicit Fp32TrainModel(bool one_moment) : one_moment_(one_moment) {}

    WeightType working_weight_type() const override { return WeightType::FP32; }
    void set_working_weights(const std::vector<float>& weights) override { params() = weights; }
    std::vector<float> working_weights() override { return reused_copy(params()); }
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) override {
        params() = master;
        moment_m() = m;
        if (!one_moment_) moment_v() = v;
    }
    // The copies out go into reused host arrays (base/host_arrays.h): a checkpoint's host copy.
    OptimizerPart optimizer_part() override {
        const size_t n = params().size();
        return {whole_model_ranges(n), reused_copy(params()), reused_copy(moment_m()),
                one_moment_ ? std::vector<float>(n, 0.0f) : reused_copy(moment_v())};
    }

protected:
    // The model's own buffers.
    virtual std::vector<float>& params() = 0;
    virtual std::vector<float>& moment_m() = 0;
    virtual std::vector<float>& moment_v() = 0;
    // A model that keeps one moment frees v once made.
    void drop_second_moment() {
        if (one_moment_) std::vector<float>().swap(moment_v());
    }
    const bool one_moment_;
};
