// The gpt_cpu_* API of cpu/gpt_cpu.h over GPTModel<float> (cpu/gpt_model.h).
#include "cpu/gpt_cpu.h"

#include "cpu/gpt_model.h"

struct GPTCpu {
    GPTModel<float> model;
    GPTCpu(const GPTConfig& config, int B, int T) : model(config, B, T) {}
};

GPTCpu* gpt_cpu_create(const GPTConfig& config, int B, int T) { return new GPTCpu(config, B, T); }
void gpt_cpu_free(GPTCpu* model) { delete model; }

const GPTConfig& gpt_cpu_config(const GPTCpu* model) { return model->model.config; }
std::vector<float>& gpt_cpu_params(GPTCpu* model) { return model->model.params; }
std::vector<float>& gpt_cpu_grads(GPTCpu* model) { return model->model.grads; }
std::vector<float>& gpt_cpu_adam_m(GPTCpu* model) { return model->model.adam_m; }
std::vector<float>& gpt_cpu_adam_v(GPTCpu* model) { return model->model.adam_v; }

float gpt_cpu_forward(GPTCpu* model, const int* inputs, const int* targets, int B, int T) {
    return model->model.forward(inputs, targets, B, T);
}
const float* gpt_cpu_logits(const GPTCpu* model) { return model->model.logits.data(); }

void gpt_cpu_zero_grad(GPTCpu* model) { model->model.zero_grad(); }
void gpt_cpu_set_phase_marker(GPTCpu* model, std::function<void(StepPhase, int, bool)> marker) {
    model->model.on_phase = std::move(marker);
}
void gpt_cpu_backward(GPTCpu* model, float loss_scale) { model->model.backward(loss_scale); }

double gpt_cpu_grad_norm(const GPTCpu* model) { return model->model.grad_norm(); }

void gpt_cpu_update(GPTCpu* model, const OptimizerSettings& s, int step) {
    switch (s.kind) {
        case OptimizerKind::ADAMW:
            model->model.adamw_step(s.learning_rate, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale, step);
            return;
        case OptimizerKind::LAMB: model->model.lamb_step(s, step); return;
        case OptimizerKind::LARS: model->model.lars_step(s); return;
        case OptimizerKind::MUON: model->model.muon_step(s, step); return;
    }
}

GPTCpuMemory gpt_cpu_memory(const GPTCpu* model) {
    const GPTModel<float>& m = model->model;
    return {m.params.size() * sizeof(float), m.grads.size() * sizeof(float),
            (m.adam_m.size() + m.adam_v.size()) * sizeof(float), m.activation_bytes()};
}

GPTCpuMemory gpt_cpu_memory_needed(const GPTConfig& c, int B, int T) {
    // The buffers GPTModel's constructor sizes (cpu/gpt_model.h), by their shapes.
    const size_t P = param_layout(c).total, N = (size_t)B * T, L = c.num_layers, C = c.channels;
    const size_t NH = c.num_heads, Vp = c.padded_vocab_size;
    const size_t activations = N * C                  // encoded
                               + 5 * L * N * C        // ln1, atty, residual2, ln2, residual3
                               + 4 * L * N            // LayerNorm means and rstds
                               + L * N * 3 * C        // qkv
                               + L * B * NH * T * T   // att
                               + 2 * L * N * 4 * C    // fch, fch_gelu
                               + N * C + 4 * N        // lnf, lnf stats, logsumexp, losses
                               + N * Vp               // logits
                               + 5 * N * C            // branch, dresidual, dln, datty, dlnf
                               + N * 3 * C + 2 * N * 4 * C  // dqkv, dfch, dfch_gelu
                               + N * Vp;              // dlogits
    return {P * sizeof(float), P * sizeof(float), 2 * P * sizeof(float), activations * sizeof(float)};
}
