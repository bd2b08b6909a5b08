// Next-token logits for sampling through a key/value cache, giving what a forward pass over the
// sequence's last `window` tokens gives (the uncached samplers' rule: once the sequence outgrows
// the window, positions restart at 0 on its last `window` tokens). While the window's start stays
// at 0, each call feeds the cache only the newest token; once the window slides, every position
// shifts, so the cache restarts on the window (as costly as recomputing, and just as exact).
#pragma once
#include <algorithm>
#include <functional>
#include <vector>

class CachedSampler {
public:
    // reset(): empty the cache; step(token, logits): append a token, write the next token's logits.
    CachedSampler(int window, std::function<void()> reset,
                  std::function<void(int token, float* logits)> step)
        : window_(window), reset_(std::move(reset)), step_(std::move(step)) {}

    // Logits (the real vocabulary) of the token after tokens (non-empty).
    void next_logits(const std::vector<int>& tokens, float* logits) {
        const int n = (int)tokens.size(), start = std::max(0, n - window_);
        if (start != cached_start_ || cached_ != n - 1 - start) {
            reset_();
            cached_start_ = start;
            cached_ = 0;
        }
        for (int i = start + cached_; i < n; i++, cached_++) step_(tokens[i], logits);
    }

private:
    int window_;
    std::function<void()> reset_;
    std::function<void(int, float*)> step_;
    int cached_start_ = -1, cached_ = 0;  // the cache holds tokens[cached_start_, + cached_)
};
