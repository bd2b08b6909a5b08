// The llama_cpu_* API of cpu/llama_cpu.h over LlamaModel<float> (cpu/llama_model.h).
#include "cpu/llama_cpu.h"

#include "cpu/llama_model.h"

struct LlamaCpu {
    LlamaModel<float> model;
    LlamaCpu(const LlamaConfig& config, int B, int T) : model(config, B, T) {}
};

LlamaCpu* llama_cpu_create(const LlamaConfig& config, int B, int T) {
    return new LlamaCpu(config, B, T);
}
void llama_cpu_free(LlamaCpu* model) { delete model; }

const LlamaConfig& llama_cpu_config(const LlamaCpu* model) { return model->model.config; }
std::vector<float>& llama_cpu_params(LlamaCpu* model) { return model->model.params; }
std::vector<float>& llama_cpu_grads(LlamaCpu* model) { return model->model.grads; }

float llama_cpu_forward(LlamaCpu* model, const int* inputs, const int* targets, int B, int T) {
    return model->model.forward(inputs, targets, B, T);
}
const float* llama_cpu_logits(const LlamaCpu* model) { return model->model.logits.data(); }

void llama_cpu_zero_grad(LlamaCpu* model) { model->model.zero_grad(); }
void llama_cpu_backward(LlamaCpu* model, float loss_scale) { model->model.backward(loss_scale); }

double llama_cpu_grad_norm(const LlamaCpu* model) { return model->model.grad_norm(); }

std::vector<float>& llama_cpu_adam_m(LlamaCpu* model) { return model->model.adam_m; }
std::vector<float>& llama_cpu_adam_v(LlamaCpu* model) { return model->model.adam_v; }

void llama_cpu_update(LlamaCpu* model, const OptimizerSettings& s, int step) {
    switch (s.kind) {
        case OptimizerKind::ADAMW:
            model->model.adamw_step(s.learning_rate, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale, step);
            return;
        case OptimizerKind::LAMB: model->model.lamb_step(s, step); return;
        case OptimizerKind::LARS: model->model.lars_step(s); return;
        case OptimizerKind::MUON: model->model.muon_step(s, step); return;
    }
}

LlamaCpuMemory llama_cpu_memory(const LlamaCpu* model) {
    const LlamaModel<float>& m = model->model;
    const size_t state = m.params.size() * sizeof(float);
    return {state, state, (m.adam_m.size() + m.adam_v.size()) * sizeof(float), m.activation_bytes()};
}

LlamaCpuMemory llama_cpu_memory_needed(const LlamaConfig& c, int B, int T) {
    // The buffers allocate_activations sizes, counted without allocating them (N positions).
    const size_t N = (size_t)B * T, L = c.num_layers, C = c.channels, F = c.ffn_channels, V = c.vocab_size;
    const size_t Cq = (size_t)c.num_heads * c.head_size(), Ckv = (size_t)c.num_kv_heads * c.head_size();
    const size_t values = (L + 1) * N * C + 3 * L * N * C + 2 * L * N + 2 * L * N * Cq + 2 * L * N * Ckv +
                          L * B * c.num_heads * (size_t)T * T + 3 * L * N * F + N * C + 3 * N + 2 * N * V +
                          3 * N * C + 3 * N * Cq + 3 * N * Ckv + 3 * N * F;
    const size_t state = llama_param_count(c) * sizeof(float);
    return {state, state, 2 * state, values * sizeof(float)};
}
