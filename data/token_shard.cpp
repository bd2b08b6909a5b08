// Token shard writing and reading, both formats (see token_shard.h).
#include "data/token_shard.h"

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"

template <typename Token>
static void write_shard(const std::string& path, const Token* tokens, size_t count, int magic,
                        int version) {
    if (count > MAX_SHARD_TOKENS)
        fail("%s: %zu tokens do not fit one shard (at most %zu)", path.c_str(), count, MAX_SHARD_TOKENS);
    std::vector<int32_t> header(FILE_HEADER_INTS, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = (int32_t)count;
    AtomicFile file(path);
    file.write(header.data(), FILE_HEADER_BYTES);
    file.write(tokens, count * sizeof(Token));
    file.commit();
}

void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count) {
    write_shard(path, tokens, count, TOKEN_SHARD_MAGIC, TOKEN_SHARD_VERSION);
}

void write_token_shard(const std::string& path, const uint32_t* tokens, size_t count) {
    write_shard(path, tokens, count, LLAMA3_TOKEN_SHARD_MAGIC, LLAMA3_TOKEN_SHARD_VERSION);
}

// The tokens of a shard whose header says it holds count tokens of token_bytes each.
static std::vector<uint32_t> read_tokens(const std::string& path, uint64_t count, int token_bytes) {
    std::vector<uint32_t> tokens(count);
    if (token_bytes == 4) {
        read_bytes(path, FILE_HEADER_BYTES, tokens.data(), count * 4);
        return tokens;
    }
    std::vector<uint16_t> narrow(count);
    read_bytes(path, FILE_HEADER_BYTES, narrow.data(), count * 2);
    for (uint64_t i = 0; i < count; i++) tokens[i] = narrow[i];
    return tokens;
}

TokenShard read_any_token_shard(const std::string& path, int vocab_size) {
    const char* name = path.c_str();
    std::vector<int32_t> header = read_header(path);
    int version = 0, token_bytes = 0;
    if (!token_shard_layout(header[0], &version, &token_bytes))
        fail("%s: not a token shard (magic %d, expected %d or %d)", name, header[0],
             TOKEN_SHARD_MAGIC, LLAMA3_TOKEN_SHARD_MAGIC);
    if (header[1] != version)
        fail("%s: token shard version %d (expected %d)", name, header[1], version);
    if (header[2] < 0) fail("%s: negative token count %d", name, header[2]);
    const uint64_t count = (uint64_t)header[2], size = file_size(path);
    if (size != FILE_HEADER_BYTES + token_bytes * count)
        fail("%s: is %llu bytes, but a shard of %llu tokens is %llu", name, (unsigned long long)size,
             (unsigned long long)count, (unsigned long long)(FILE_HEADER_BYTES + token_bytes * count));
    TokenShard shard;
    shard.magic = header[0];
    shard.tokens = read_tokens(path, count, token_bytes);
    for (uint64_t i = 0; i < count; i++)
        if (shard.tokens[i] >= (uint32_t)vocab_size)
            fail("%s: token %u at position %llu is not below the vocabulary size %d", name,
                 shard.tokens[i], (unsigned long long)i, vocab_size);
    return shard;
}

std::vector<uint16_t> read_token_shard(const std::string& path, int vocab_size) {
    std::vector<int32_t> header = read_header(path);
    if (header[0] == LLAMA3_TOKEN_SHARD_MAGIC)
        fail("%s: is a Llama 3 token shard, expected a GPT-2 one", path.c_str());
    TokenShard shard = read_any_token_shard(path, vocab_size);
    return std::vector<uint16_t>(shard.tokens.begin(), shard.tokens.end());
}
