// Judges text ./generate drew on the GPU in bf16 against an fp32 reference model (GPT-2's or Llama 3's
// CPU decoder), for test_generate.cpp and test_generate_llama.cpp. Every activation on the GPU is
// rounded to bf16, so its logits are the fp32 model's to about 1e-2 (relative;
// test/gpu/test_gpu_decode.cu, test_gpu_llama_decode.cu), and a draw may come out differently
// where that decides it. The rule each GPU token x must meet, judged by the reference on the GPU's own
// prefix and with the same coin u: x is the reference's draw, or its fp32 logit is within LOGIT_SLACK
// of that of a token the reference draws with a coin within COIN_SLACK of u (at temperature 0, the
// reference's choice) -- a near tie swapped by rounding, or a coin near a boundary that rounding
// moved. The tests also bound how often a draw differs at all.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/rng.h"
#include "test/test.h"
#include "train/sampling.h"

constexpr double LOGIT_SLACK = 0.1;  // twice a bf16 logit error well above the ones measured
constexpr double COIN_SLACK = 0.05;  // test_gpu_decode.cu's bound on the two paths' total variation

struct Judged {
    int draws = 0, differ = 0, unexplained = 0;
    std::string first;  // the first draw the rule does not explain
};

// The reference's logits (V of them) for the token after `window`, its tokens at positions from 0.
using WindowLogits = std::function<void(const std::vector<int>& window, float* logits)>;

// The tokens the reference draws from `logits` with a coin within COIN_SLACK of `coin` (at
// temperature 0, its choice only): those whose interval of the cumulative distribution, in the
// sampler's order, comes that close.
inline std::vector<int> reachable_tokens(const std::vector<float>& logits, double temperature, int top_k,
                                         double coin) {
    const int V = (int)logits.size();
    std::vector<int> reachable = {sample_token_top_k(logits.data(), V, temperature, top_k, coin)};
    if (temperature <= 0) return reachable;
    std::vector<int> order(V);
    for (int v = 0; v < V; v++) order[v] = v;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    const int k = top_k <= 0 || top_k > V ? V : top_k;
    std::vector<double> weight(k);
    double sum = 0, low = 0;
    for (int r = 0; r < k; r++) sum += weight[r] = std::exp((logits[order[r]] - logits[order[0]]) / temperature);
    for (int r = 0; r < k; r++) {
        const double high = low + weight[r] / sum;
        if (high >= coin - COIN_SLACK && low <= coin + COIN_SLACK) reachable.push_back(order[r]);
        low = high;
    }
    return reachable;
}

// Judges sample `sample` (1-based) of a ./generate run with `args`: its text (the test's decode table
// maps token i to 'A' + i), drawn from `start` then the prompt, each token from the window of the last
// T = min(maxT, prompt + 1 + gen_tokens) tokens, with the coins generate.cpp draws.
inline void judge_sample(const std::string& args, const WindowLogits& reference, int V, int max_seq_len,
                         int start, const std::string& text, const std::vector<int>& prompt, int gen_tokens,
                         uint64_t seed, int sample, double temperature, int top_k, Judged* judged) {
    const int T = std::min(max_seq_len, (int)prompt.size() + 1 + gen_tokens);
    std::vector<int> tokens = {start};
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    CHECK_MSG((int)text.size() == (int)prompt.size() + gen_tokens, "'%s'", text.c_str());
    std::vector<float> logits(V);
    Rng rng(seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)sample));
    for (size_t i = prompt.size(); i < text.size(); i++) {
        const int x = (unsigned char)text[i] - 'A';
        const double coin = rng.uniform();
        const size_t from = tokens.size() > (size_t)T ? tokens.size() - T : 0;
        reference(std::vector<int>(tokens.begin() + from, tokens.end()), logits.data());
        const int y = sample_token_top_k(logits.data(), V, temperature, top_k, coin);
        judged->draws++;
        if (x != y) {
            judged->differ++;
            bool explained = x >= 0 && x < V;
            if (explained) {
                double gap = 1e30;
                for (int z : reachable_tokens(logits, temperature, top_k, coin))
                    gap = std::min(gap, (double)std::fabs(logits[x] - logits[z]));
                explained = gap <= LOGIT_SLACK;
            }
            if (!explained && judged->unexplained++ == 0)
                judged->first = tst::format("%s, sample %d, draw %zu: token %d on the GPU, %d on the CPU "
                                            "(coin %.4f)",
                                            args.c_str(), sample, i - prompt.size(), x, y, coin);
        }
        tokens.push_back(x);  // the GPU's sequence goes on
    }
}
