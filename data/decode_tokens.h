// Decoding shared by the byte-level BPE tokenizers: a token sequence's bytes are its tokens' bytes,
// concatenated in order.
#pragma once
#include <string>
#include <vector>

#include "base/errors.h"

// The bytes of tokens[0..count); throws InputError for an id outside token_bytes.
template <typename Token>
std::string decode_tokens(const std::vector<std::string>& token_bytes, const Token* tokens,
                          size_t count) {
    std::string text;
    for (size_t i = 0; i < count; i++) {
        if (tokens[i] >= token_bytes.size())
            fail("token %u at position %zu is outside the vocabulary (%zu tokens)",
                 (unsigned)tokens[i], i, token_bytes.size());
        text += token_bytes[tokens[i]];
    }
    return text;
}
