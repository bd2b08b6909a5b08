// The CPU reference model behind TrainModel (cpu/cpu_train_model.h).
#include "cpu/cpu_train_model.h"

#include <algorithm>
#include <stdexcept>

#include "base/errors.h"
#include "cpu/fp32_train_model.h"
#include "cpu/gemm.h"
#include "cpu/gpt_cpu.h"
#include "cpu/gpt_decode.h"
#include "cpu/llama_train_model.h"

TrainOptions cpu_trainer_defaults() {
    TrainOptions o;
    o.model = "custom:L4:C128:H4:T256";
    o.batch_size = 8;
    o.seq_len = 128;
    o.max_steps = 600;
    o.learning_rate = 1e-3;
    o.warmup_steps = 20;
    o.final_lr_fraction = 0.1;
    o.weight_decay = 0.1;
    o.val_every = 100;
    o.val_batches = 10;
    o.sample_every = 200;
    o.gen_tokens = 64;
    return o;
}

namespace {

ModelMemory model_memory(const GPTCpuMemory& cpu) {
    ModelMemory mem;
    mem.parameters = cpu.parameters;
    mem.gradients = cpu.gradients;
    mem.optimizer_state = cpu.optimizer_state;
    mem.activations = cpu.activations;
    return mem;
}

class CpuTrainModel : public Fp32TrainModel {
public:
    CpuTrainModel(const GPTConfig& config, int B, int T, std::vector<LayoutRange> v_ranges)
        : Fp32TrainModel(std::move(v_ranges)), model_(gpt_cpu_create(config, B, T)),
          model_config_(gpt2_model(config)) {
        pack_second_moment();
    }
    ~CpuTrainModel() override {
        gpt_cpu_free(model_);
        if (decoder_) gpt_decoder_free(decoder_);
    }

    const GPTConfig& config() const { return gpt_cpu_config(model_); }
    const ModelConfig& model_config() const override { return model_config_; }
    std::string description() const override {
        return std::string("CPU, fp32 (reference model); GEMM: ") + gemm_backend();
    }

    float forward(const int* inputs, const int* targets, int B, int T) override {
        return gpt_cpu_forward(model_, inputs, targets, B, T);
    }
    void logits_at(int t, float* out) override {
        const GPTConfig& c = config();
        const float* row = gpt_cpu_logits(model_) + (size_t)t * c.padded_vocab_size;
        std::copy(row, row + c.vocab_size, out);
    }
    void zero_grad() override { gpt_cpu_zero_grad(model_); }
    void set_step_timeline(StepTimeline* timeline) override {
        TrainModel::set_step_timeline(timeline);
        if (!timeline) return gpt_cpu_set_phase_marker(model_, nullptr);
        gpt_cpu_set_phase_marker(model_, [this](StepPhase phase, int layer, bool backward) {
            mark_phase(phase, layer, backward);
        });
    }
    float forward_backward(const int* inputs, const int* targets, int B, int T, float loss_scale,
                           bool) override {
        const float loss = gpt_cpu_forward(model_, inputs, targets, B, T);
        gpt_cpu_backward(model_, loss_scale);
        return loss;
    }
    double grad_norm() override { return gpt_cpu_grad_norm(model_); }
    void update(const OptimizerSettings& settings, int step) override {
        gpt_cpu_update(model_, settings, step);
    }

    ModelMemory memory() const override { return model_memory(gpt_cpu_memory(model_)); }

    // Samples run through the key/value-cache decoder (cpu/gpt_decode.h) on the current weights.
    bool supports_decode() const override { return true; }
    void decode_reset(int max_len) override {
        if (decoder_ && gpt_decoder_capacity(decoder_) == max_len) {
            gpt_decoder_truncate(decoder_, 0);
            return;
        }
        if (decoder_) gpt_decoder_free(decoder_);
        decoder_ = nullptr;
        try {
            decoder_ = gpt_decoder_create(config(), max_len);
        } catch (const std::invalid_argument& e) { fail("%s", e.what()); }
    }
    void decode_next(int token, float* logits) override {
        if (!decoder_) fail("decode_next before decode_reset");
        try {
            gpt_decoder_step(decoder_, gpt_cpu_params(model_).data(), token, logits);
        } catch (const std::invalid_argument& e) { fail("%s", e.what()); }
    }

protected:
    std::vector<float>& params() override { return gpt_cpu_params(model_); }
    std::vector<float>& moment_m() override { return gpt_cpu_adam_m(model_); }
    std::vector<float>& moment_v() override { return gpt_cpu_adam_v(model_); }

private:
    GPTCpu* model_;
    const ModelConfig model_config_;
    GPTDecoder* decoder_ = nullptr;  // created by the first decode_reset
};

}  // namespace

std::unique_ptr<TrainModel> create_cpu_train_model(const ModelConfig& config, const TrainOptions& opt) {
    if (is_llama3(config)) return create_llama_cpu_train_model(config.llama, opt);
    try {
        return std::make_unique<CpuTrainModel>(config.gpt, opt.batch_size, opt.seq_len,
                                               second_moment_ranges(config, opt));
    } catch (const std::invalid_argument& e) { fail("%s", e.what()); }
}

ModelMemory cpu_train_model_memory(const ModelConfig& config, const TrainOptions& opt) {
    if (is_llama3(config)) return llama_cpu_train_model_memory(config.llama, opt);
    GPTCpuMemory needed = gpt_cpu_memory_needed(config.gpt, opt.batch_size, opt.seq_len);
    needed.optimizer_state = optimizer_state_bytes(config, opt);
    return model_memory(needed);
}
