// The CPU Llama 3 model behind TrainModel (cpu/llama_train_model.h).
#include "cpu/llama_train_model.h"

#include <algorithm>
#include <stdexcept>

#include "base/errors.h"
#include "cpu/gemm.h"
#include "cpu/llama_cpu.h"

namespace {

// LARS keeps one moment (its momentum buffer, in m): the model then holds no v.
bool keeps_one_moment(const TrainOptions& opt) { return opt.optimizer == "lars"; }

ModelMemory model_memory(const LlamaCpuMemory& cpu, bool one_moment) {
    ModelMemory mem;
    mem.parameters = cpu.parameters;
    mem.gradients = cpu.gradients;
    mem.optimizer_state = one_moment ? cpu.optimizer_state / 2 : cpu.optimizer_state;
    mem.activations = cpu.activations;
    return mem;
}

class LlamaCpuTrainModel : public TrainModel {
public:
    LlamaCpuTrainModel(const LlamaConfig& config, int B, int T, bool one_moment)
        : model_(llama_cpu_create(config, B, T)), config_(llama3_model(config)), one_moment_(one_moment) {
        if (one_moment_) std::vector<float>().swap(llama_cpu_adam_v(model_));
    }
    ~LlamaCpuTrainModel() override { llama_cpu_free(model_); }

    const ModelConfig& model_config() const override { return config_; }
    std::string description() const override {
        return std::string("CPU, fp32 (reference Llama 3 model); GEMM: ") + gemm_backend();
    }

    float forward(const int* inputs, const int* targets, int B, int T) override {
        return checked([&] { return llama_cpu_forward(model_, inputs, targets, B, T); });
    }
    void logits_at(int t, float* out) override {
        const int V = config_.llama.vocab_size;
        const float* row = llama_cpu_logits(model_) + (size_t)t * V;
        std::copy(row, row + V, out);
    }
    void zero_grad() override { llama_cpu_zero_grad(model_); }
    float forward_backward(const int* inputs, const int* targets, int B, int T, float loss_scale,
                           bool) override {
        const float loss = forward(inputs, targets, B, T);
        llama_cpu_backward(model_, loss_scale);
        return loss;
    }
    double grad_norm() override { return llama_cpu_grad_norm(model_); }
    void update(const OptimizerSettings& settings, int step) override {
        llama_cpu_update(model_, settings, step);
    }

    // The fp32 parameters are both the working and the master weights.
    WeightType working_weight_type() const override { return WeightType::FP32; }
    void set_working_weights(const std::vector<float>& weights) override { llama_cpu_params(model_) = weights; }
    std::vector<float> working_weights() override { return llama_cpu_params(model_); }
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) override {
        llama_cpu_params(model_) = master;
        llama_cpu_adam_m(model_) = m;
        if (!one_moment_) llama_cpu_adam_v(model_) = v;  // LARS: v is zeros in the state file
    }
    OptimizerPart optimizer_part() override {
        const size_t n = llama_cpu_params(model_).size();
        return {whole_model_ranges(n), llama_cpu_params(model_), llama_cpu_adam_m(model_),
                one_moment_ ? std::vector<float>(n, 0.0f) : llama_cpu_adam_v(model_)};
    }

    ModelMemory memory() const override { return model_memory(llama_cpu_memory(model_), one_moment_); }

private:
    // The model's own checks (a token id outside the vocabulary) as one-line input errors.
    template <typename F>
    float checked(F f) {
        try {
            return f();
        } catch (const std::invalid_argument& e) { fail("%s", e.what()); }
    }

    LlamaCpu* model_;
    const ModelConfig config_;
    const bool one_moment_;
};

}  // namespace

std::unique_ptr<TrainModel> create_llama_cpu_train_model(const LlamaConfig& config, const TrainOptions& opt) {
    try {
        return std::make_unique<LlamaCpuTrainModel>(config, opt.batch_size, opt.seq_len, keeps_one_moment(opt));
    } catch (const std::invalid_argument& e) { fail("%s", e.what()); }
}

ModelMemory llama_cpu_train_model_memory(const LlamaConfig& config, const TrainOptions& opt) {
    return model_memory(llama_cpu_memory_needed(config, opt.batch_size, opt.seq_len), keeps_one_moment(opt));
}
