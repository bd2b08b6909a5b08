// Token shards in llm.c's format: a 256-int32 header ([0] magic 20240520, [1] version 1,
// [2] token count n), then n uint16 tokens; the file is exactly 1024 + 2n bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

// The most tokens one shard can hold (the count is an int32).
constexpr size_t MAX_SHARD_TOKENS = INT32_MAX;

// Writes a shard atomically (temporary file, then rename); throws InputError on failure.
void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count);

// Reads and checks a whole shard: header, exact size, every token below vocab_size. Throws
// InputError naming the file and the problem.
std::vector<uint16_t> read_token_shard(const std::string& path, int vocab_size);
