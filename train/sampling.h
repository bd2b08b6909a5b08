// Drawing the next token of a sample from one row of logits: softmax over the real vocabulary
// (padding entries ignored), then the token where the cumulative probability first exceeds coin,
// a uniform draw in [0, 1) from the run's sampling Rng.
#pragma once

int sample_token(const float* logits, int vocab_size, double coin);

// The same with a temperature and top-k, for ./generate: softmax of logits / temperature over the
// top_k largest logits (top_k <= 0 or >= vocab_size: all of them; ties broken by the lower id),
// then the token where the cumulative probability first exceeds coin. temperature 0 picks the most
// likely token (the lowest id among equals) without drawing.
int sample_token_top_k(const float* logits, int vocab_size, double temperature, int top_k,
                       double coin);
