// GPT-2 initialisation (see gpt_init.h).
#include "base/gpt_init.h"

#include <cmath>

#include "base/rng.h"

void gpt_init_params(const GPTConfig& config, uint64_t seed, float* params) {
    const ParamLayout layout = param_layout(config);
    const double residual_scale = 1.0 / std::sqrt(2.0 * config.num_layers);
    Rng rng(seed);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        float* p = params + layout.offset[t];
        const size_t n = layout.size[t];
        if (is_weight_matrix(t)) {
            double std = 0.02 * ((t == ATTPROJW || t == FCPROJW) ? residual_scale : 1.0);
            // Only the real vocabulary rows of wte are drawn; padding rows stay zero.
            size_t drawn = (t == WTE) ? (size_t)config.vocab_size * config.channels : n;
            fill_normal(p, drawn, std, rng);
            for (size_t i = drawn; i < n; i++) p[i] = 0.0f;
        } else {
            const bool layernorm_weight = (t == LN1W || t == LN2W || t == LNFW);
            for (size_t i = 0; i < n; i++) p[i] = layernorm_weight ? 1.0f : 0.0f;
        }
    }
}
