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
void gpt_cpu_backward(GPTCpu* model, float loss_scale) { model->model.backward(loss_scale); }

double gpt_cpu_grad_norm(const GPTCpu* model) { return model->model.grad_norm(); }

void gpt_cpu_adamw_update(GPTCpu* model, const AdamWSettings& s, int step) {
    model->model.adamw_step(s.learning_rate, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale,
                            step);
}

GPTCpuMemory gpt_cpu_memory(const GPTCpu* model) {
    const GPTModel<float>& m = model->model;
    return {m.params.size() * sizeof(float), m.grads.size() * sizeof(float),
            (m.adam_m.size() + m.adam_v.size()) * sizeof(float), m.activation_bytes()};
}
