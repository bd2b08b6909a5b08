// Token shards in llm.c's two formats, both a 256-int32 header ([0] magic, [1] version, [2] token
// count n) followed by n tokens:
//   GPT-2:   magic 20240520, version 1, uint16 tokens: the file is exactly 1024 + 2n bytes;
//   Llama 3: magic 20240801, version 7, uint32 tokens: the file is exactly 1024 + 4n bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

// The most tokens one shard can hold (the count is an int32).
constexpr size_t MAX_SHARD_TOKENS = INT32_MAX;

// Writes a shard atomically (temporary file, then rename); throws InputError on failure. uint16
// tokens make a GPT-2 shard, uint32 tokens a Llama 3 shard.
void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count);
void write_token_shard(const std::string& path, const uint32_t* tokens, size_t count);

// A shard of either format, read whole.
struct TokenShard {
    int magic = 0;  // TOKEN_SHARD_MAGIC or LLAMA3_TOKEN_SHARD_MAGIC (base/formats.h)
    std::vector<uint32_t> tokens;
};

// Reads and checks a whole shard of either format: header, exact size, every token below
// vocab_size. Throws InputError naming the file and the problem.
TokenShard read_any_token_shard(const std::string& path, int vocab_size);
// The same for a GPT-2 shard only (a Llama 3 shard is refused, saying so).
std::vector<uint16_t> read_token_shard(const std::string& path, int vocab_size);
