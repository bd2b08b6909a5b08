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

void llama_cpu_update(LlamaCpu* model, const OptimizerSettings& s, int step) {
    if (s.kind != OptimizerKind::ADAMW)
        throw std::invalid_argument(std::string("llama: the ") + optimizer_name(s.kind) +
                                    " optimizer is not available for Llama models; use adamw");
    model->model.adamw_step(s.learning_rate, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale,
                            step);
}
