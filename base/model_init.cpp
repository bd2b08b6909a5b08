// Fresh weights of either family (see model_init.h).
#include "base/model_init.h"

#include <cmath>

#include "base/gpt_init.h"
#include "base/rng.h"

static void llama_init_params(const LlamaConfig& config, uint64_t seed, float* params) {
    const double residual_scale = 1.0 / std::sqrt(2.0 * config.num_layers);
    Rng rng(seed);
    for (const LlamaTensor& t : llama_tensors(config)) {
        float* p = params + t.offset;
        if (!t.is_matrix()) {
            for (size_t i = 0; i < t.size(); i++) p[i] = 1.0f;
            continue;
        }
        const bool residual_output = t.kind == O_PROJ || t.kind == DOWN_PROJ;
        const double std = 0.02 * (residual_output ? residual_scale : 1.0);
        fill_normal(p, t.size(), std, rng);
    }
}

void init_model_params(const ModelConfig& config, uint64_t seed, float* params) {
    if (is_llama3(config))
        llama_init_params(config.llama, seed, params);
    else
        gpt_init_params(config.gpt, seed, params);
}
