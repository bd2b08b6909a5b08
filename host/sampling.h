// Drawing the next token of a sample from one row of logits: softmax over the real vocabulary
// (padding entries ignored), then the token where the cumulative probability first exceeds coin,
// a uniform draw in [0, 1) from the run's sampling Rng.
#pragma once

int sample_token(const float* logits, int vocab_size, double coin);
