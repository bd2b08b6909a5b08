// GPT-2 initialisation of a fresh model, deterministic from a seed:
//   weight matrices  normal(0, 0.02); the residual output projections (attprojw, fcprojw) further
//                    scaled by 1/sqrt(2L), so the residual stream's variance does not grow with
//                    depth
//   biases           zero;  LayerNorm weights one
//   wte rows ≥ V     zero (the padding rows never receive a token)
// Draws come from Rng(seed) (base/rng.h) tensor by tensor in file order, element by element, so the
// same seed gives the same bits on every machine.
#pragma once
#include <cstdint>

#include "base/gpt_config.h"

void gpt_init_params(const GPTConfig& config, uint64_t seed, float* params);
