// Sampling one token from logits (see sampling.h).
#include "train/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

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

int sample_token_top_k(const float* logits, int vocab_size, double temperature, int top_k,
                       double coin) {
    std::vector<int> order(vocab_size);
    std::iota(order.begin(), order.end(), 0);
    const int k = top_k <= 0 || top_k > vocab_size ? vocab_size : top_k;
    const auto more_likely = [&](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), more_likely);
    if (temperature <= 0) return order[0];
    std::vector<double> weights(k);
    double sum = 0;
    for (int i = 0; i < k; i++)
        sum += weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
    double cumulative = 0;
    const double target = coin * sum;
    for (int i = 0; i < k; i++) {
        cumulative += weights[i];
        if (target < cumulative) return order[i];
    }
    return order[k - 1];
}
