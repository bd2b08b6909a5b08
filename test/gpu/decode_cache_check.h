// What every key/value-cache decoder must do with its cache, checked the same way for GPT-2's
// (gpu/gpt_decode.h) and Llama 3's (gpu/llama_decode.h) by test_gpu_decode.cu and
// test_gpu_llama_decode.cu: truncation that keeps the first tokens' rows (feeding the dropped tokens
// again gives the same logits, bit for bit), and a one-line InputError, the cache left as it was,
// for a token past a full cache or outside the vocabulary.
#pragma once
#include <cstring>
#include <vector>

#include "base/errors.h"
#include "test/kernels/kernel_test.h"

// `decoder` holds 8 tokens and is empty; `weights` is the DecodeWeights view it steps over.
template <class Decoder, class Weights>
void check_truncation_and_refusals(Decoder& decoder, const Weights& weights, int vocab_size) {
    const std::vector<int> tokens = random_tokens(8, vocab_size, 3);
    std::vector<float> first(vocab_size), again(vocab_size);
    for (int t = 0; t < 8; t++) decoder.step(tokens[t], weights, first.data());
    // Keep 5 tokens, then feed the last 3 again: the same logits, bit for bit.
    decoder.truncate(5);
    CHECK(decoder.length() == 5);
    for (int t = 5; t < 8; t++) decoder.step(tokens[t], weights, again.data());
    CHECK(bitwise_equal(first.data(), again.data(), first.size() * sizeof(float)));
    auto refused = [&](int token, const char* word) {
        try {
            decoder.step(token, weights, again.data());
        } catch (const InputError& e) {
            CHECK_MSG(strstr(e.what(), word) && !strchr(e.what(), '\n'), "message: %s", e.what());
            return;
        }
        CHECK_MSG(false, "token %d at length %d was accepted", token, decoder.length());
    };
    refused(1, "full");
    CHECK(decoder.length() == 8);
    decoder.truncate(0);
    refused(vocab_size, "outside the vocabulary");
    refused(-1, "outside the vocabulary");
    CHECK(decoder.length() == 0);
}
