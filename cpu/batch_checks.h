// The checks the CPU models make on a forward's batch: that its shape fits the allocated one, and
// that every token id is in the vocabulary. Each throws std::invalid_argument with a one-line
// message that names the model ("gpt forward: ...", "llama forward: ...").
#pragma once
#include <stdexcept>
#include <string>

inline void check_batch_shape(const char* model, int B, int T, int max_B, int max_T) {
    if (B < 1 || B > max_B || T < 1 || T > max_T)
        throw std::invalid_argument(std::string(model) + " forward: batch " + std::to_string(B) +
                                    "x" + std::to_string(T) + " exceeds the allocated " +
                                    std::to_string(max_B) + "x" + std::to_string(max_T));
}

// `what` says which tokens: "input" or "target".
inline void check_token_ids(const char* model, const int* tokens, int n, int V, const char* what) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            throw std::invalid_argument(std::string(model) + " forward: " + what + " token " +
                                        std::to_string(tokens[i]) + " at position " +
                                        std::to_string(i) + " is outside the vocabulary [0, " +
                                        std::to_string(V) + ")");
}
