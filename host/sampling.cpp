// Sampling one token from logits (see sampling.h).
#include "host/sampling.h"

#include <cmath>

int sample_token(const float* logits, int vocab_size, double coin) {
    double max_logit = logits[0];
    for (int i = 1; i < vocab_size; i++) max_logit = std::fmax(max_logit, (double)logits[i]);
    double sum = 0;
    for (int i = 0; i < vocab_size; i++) sum += std::exp(logits[i] - max_logit);
    double cumulative = 0, target = coin * sum;
    for (int i = 0; i < vocab_size; i++) {
        cumulative += std::exp(logits[i] - max_logit);
        if (target < cumulative) return i;
    }
    return vocab_size - 1;  // coin·sum rounded up to the total
}
