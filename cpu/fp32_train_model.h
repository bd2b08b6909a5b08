// What the CPU models (GPT-2's in cpu/cpu_train_model.cpp, Llama 3's in cpu/llama_train_model.cpp)
// share behind the training loop's interface: one fp32 parameter buffer that is both the working and
// the master weights, and the optimizer's moments m and v beside it. m has the buffer's length; v holds
// the second moment only where the optimizer keeps one (second_moment_ranges), packed: everywhere for
// AdamW and LAMB, nowhere for LARS (m is its momentum buffer), AdamW's tensors for Muon (m holds Muon's
// momentum at its matrices). The state files get v at the buffer's length, zeros where none is kept.
#pragma once
#include <vector>

#include "base/host_arrays.h"
#include "base/model_config.h"
#include "base/model_part.h"
#include "base/train_model.h"
#include "base/train_options.h"

// Where a run's optimizer keeps a second moment, in buffer order.
std::vector<LayoutRange> second_moment_ranges(const ModelConfig& config, const TrainOptions& opt);

// The optimizer state's bytes: m at the buffer's length and the packed v.
size_t optimizer_state_bytes(const ModelConfig& config, const TrainOptions& opt);

class Fp32TrainModel : public TrainModel {
public:
    explicit Fp32TrainModel(std::vector<LayoutRange> v_ranges)
        : v_ranges_(std::move(v_ranges)), v_size_(ranges_size(v_ranges_)) {}

    WeightType working_weight_type() const override { return WeightType::FP32; }
    void set_working_weights(const std::vector<float>& weights) override { params() = weights; }
    std::vector<float> working_weights() override { return reused_copy(params()); }
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) override {
        params() = master;
        moment_m() = m;
        if (v_size_ == v.size()) {
            moment_v() = v;
            return;
        }
        std::vector<float>& packed = moment_v();
        size_t at = 0;
        for (const LayoutRange& r : v_ranges_)
            for (size_t i = 0; i < r.length; i++) packed[at++] = v[r.offset + i];
    }
    // The copies out go into reused host arrays (base/host_arrays.h): a checkpoint's host copy.
    OptimizerPart optimizer_part() override {
        const size_t n = params().size();
        return {whole_model_ranges(n), reused_copy(params()), reused_copy(moment_m()), unpacked_v(n)};
    }

protected:
    // The model's own buffers.
    virtual std::vector<float>& params() = 0;
    virtual std::vector<float>& moment_m() = 0;
    virtual std::vector<float>& moment_v() = 0;
    // Once made, the model's v (allocated at the buffer's length) shrinks to the elements kept.
    void pack_second_moment() {
        if (moment_v().size() != v_size_) std::vector<float>(v_size_, 0.0f).swap(moment_v());
    }

private:
    std::vector<float> unpacked_v(size_t n) {
        const std::vector<float>& packed = moment_v();
        if (v_size_ == n) return reused_copy(packed);
        std::vector<float> v(n, 0.0f);
        size_t at = 0;
        for (const LayoutRange& r : v_ranges_)
            for (size_t i = 0; i < r.length; i++) v[r.offset + i] = packed[at++];
        return v;
    }

    const std::vector<LayoutRange> v_ranges_;
    const size_t v_size_;
};
