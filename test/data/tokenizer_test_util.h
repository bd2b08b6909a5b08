// Helpers of the tokenizer tests (GPT-2's and Llama 3's): random text of fragments that stress a
// byte-level BPE tokenizer and its pre-tokenisation, mixed with random bytes and long whitespace
// runs; writing a file; the message of the InputError a call throws.
#pragma once
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/errors.h"

// Random text built from fragments that stress the tokenizer: random bytes, invalid UTF-8,
// emoji sequences, CJK, long whitespace runs, contractions, digits, a literal "<|endoftext|>".
inline std::string random_text(std::mt19937& rng, int fragments) {
    static const std::vector<std::string> pool = {
        "Hello", " world", "'s", "'ll", " I'm", "  ", "\n\n", "\t", "\r\n", "12345", " 3.14",
        "\xc0\x80", "\xed\xa0\x80", "\xf5\xff", "\xe4\xb8", "\x80\x80\x80", "\xff",
        "\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7", "\xf0\x9f\x87\xaf\xf0\x9f\x87\xb5",
        "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97", "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf",
        "e\xcc\x81", "\xc2\xa0", "\xe2\x80\x83", "<|endoftext|>", "!!!", "...", "--", "$%^&*",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", " Caf\xc3\xa9"};
    std::string text;
    for (int i = 0; i < fragments; i++) {
        int kind = rng() % 10;
        if (kind == 0) {
            for (int k = rng() % 8; k >= 0; k--) text += (char)(rng() & 0xFF);
        } else if (kind == 1) {
            text += std::string(1 + rng() % 3000, " \n\t"[rng() % 3]);
        } else {
            text += pool[rng() % pool.size()];
        }
    }
    return text;
}

inline void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

// Runs f and returns the InputError message it throws ("" if it throws none).
template <typename F>
std::string error_of(F f) {
    try {
        f();
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}
