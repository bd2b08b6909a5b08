// The CPU Llama 3 model behind TrainModel (cpu/llama_train_model.h).
#include "cpu/llama_train_model.h"

#include <algorithm>
#include <stdexcept>

#include "base/errors.h"
#include "cpu/fp32_train_model.h"
#include "cpu/gemm.h"
#include "cpu/llama_cpu.h"
#include "cpu/llama_decode.h"

namespace {

ModelMemory model_memory(const LlamaCpuMemory& cpu, size_t optimizer_state) {
    ModelMemory mem;
    mem.parameters = cpu.parameters;
    mem.gradients = cpu.gradients;
    mem.optimizer_state = optimizer_state;
    mem.activations = cpu.activations;
    return mem;
}

class LlamaCpuTrainModel : public Fp32TrainModel {
public:
    LlamaCpuTrainModel(const LlamaConfig& config, int B, int T, std::vector<LayoutRange> v_ranges)
        : Fp32TrainModel(std::move(v_ranges)), model_(llama_cpu_create(config, B, T)),
          config_(llama3_model(config)) {
        pack_second_moment();
    }
    ~LlamaCpuTrainModel() override {
        llama_cpu_free(model_);
        if (decoder_) llama_decoder_free(decoder_);
    }

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

    ModelMemory memory() const override {
        const LlamaCpuMemory held = llama_cpu_memory(model_);
        return model_memory(held, held.optimizer_state);
    }

    // Samples run through the key/value-cache decoder (cpu/llama_decode.h) on the current weights.
    bool supports_decode() const override { return true; }
    void decode_reset(int max_len) override {
        if (decoder_ && llama_decoder_capacity(decoder_) == max_len) return llama_decoder_truncate(decoder_, 0);
        if (decoder_) llama_decoder_free(decoder_);
        decoder_ = nullptr;
        checked([&] { return (decoder_ = llama_decoder_create(config_.llama, max_len)), 0.0f; });
    }
    void decode_next(int token, float* logits) override {
        if (!decoder_) fail("decode_next before decode_reset");
        checked([&] { return llama_decoder_step(decoder_, llama_cpu_params(model_).data(), token, logits), 0.0f; });
    }

protected:
    std::vector<float>& params() override { return llama_cpu_params(model_); }
    std::vector<float>& moment_m() override { return llama_cpu_adam_m(model_); }
    std::vector<float>& moment_v() override { return llama_cpu_adam_v(model_); }

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
    LlamaDecoder* decoder_ = nullptr;  // created by the first decode_reset
};

}  // namespace

std::unique_ptr<TrainModel> create_llama_cpu_train_model(const LlamaConfig& config, const TrainOptions& opt) {
    try {
        return std::make_unique<LlamaCpuTrainModel>(config, opt.batch_size, opt.seq_len,
                                                    second_moment_ranges(llama3_model(config), opt));
    } catch (const std::invalid_argument& e) { fail("%s", e.what()); }
}

ModelMemory llama_cpu_train_model_memory(const LlamaConfig& config, const TrainOptions& opt) {
    return model_memory(llama_cpu_memory_needed(config, opt.batch_size, opt.seq_len),
                        optimizer_state_bytes(llama3_model(config), opt));
}
