// Initialisation of a fresh model, deterministic from a seed, for either family:
//   GPT-2 (base/gpt_init.h): matrices normal(0, 0.02), residual output projections further scaled by
//     1/sqrt(2L), biases zero, LayerNorm weights one.
//   Llama 3: every matrix (the embedding, lm_head, q/k/v/o and the MLP's) normal(0, 0.02), with the
//     residual stream's output projections (o_proj, down_proj) scaled by 1/sqrt(2L) as GPT-2's are;
//     RMSNorm weights one. Draws come from Rng(seed) tensor by tensor in buffer order.
#pragma once
#include <cstdint>

#include "base/model_config.h"

void init_model_params(const ModelConfig& config, uint64_t seed, float* params);
