// Helpers for the host tests: write token shards (good or deliberately broken), read or corrupt
// files, and check that an InputError is thrown with a one-line message containing given words.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "base/errors.h"
#include "base/formats.h"
#include "test/test.h"

// A token shard; header_tokens overrides the count written in the header (-1: the real count).
inline void write_shard(const std::string& path, const std::vector<uint16_t>& tokens,
                        int magic = TOKEN_SHARD_MAGIC, int version = TOKEN_SHARD_VERSION,
                        long header_tokens = -1) {
    int32_t header[FILE_HEADER_INTS] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = (int32_t)(header_tokens >= 0 ? header_tokens : (long)tokens.size());
    FILE* f = fopen(path.c_str(), "wb");
    CHECK_MSG(f != nullptr, "cannot write %s", path.c_str());
    fwrite(header, sizeof header, 1, f);
    if (!tokens.empty()) fwrite(tokens.data(), 2, tokens.size(), f);
    fclose(f);
}

inline std::vector<unsigned char> read_all(const std::string& path) {
    std::vector<unsigned char> bytes;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return bytes;
    int c;
    while ((c = fgetc(f)) != EOF) bytes.push_back((unsigned char)c);
    fclose(f);
    return bytes;
}

inline void write_all(const std::string& path, const std::vector<unsigned char>& bytes) {
    FILE* f = fopen(path.c_str(), "wb");
    CHECK_MSG(f != nullptr, "cannot write %s", path.c_str());
    if (!bytes.empty()) fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
}

// Runs fn, which must throw InputError with one line holding every word in `words`.
inline void expect_input_error(const std::function<void()>& fn,
                               const std::vector<std::string>& words) {
    try {
        fn();
    } catch (const InputError& e) {
        std::string message = e.what();
        CHECK_MSG(message.find('\n') == std::string::npos, "message spans lines: %s", e.what());
        for (const std::string& w : words)
            CHECK_MSG(message.find(w) != std::string::npos, "message '%s' lacks '%s'", e.what(),
                      w.c_str());
        return;
    }
    CHECK_MSG(false, "no InputError (expected one mentioning '%s')",
              words.empty() ? "" : words[0].c_str());
}
