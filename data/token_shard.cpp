// Token shard writing and reading (see token_shard.h).
#include "data/token_shard.h"

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"

void write_token_shard(const std::string& path, const uint16_t* tokens, size_t count) {
    if (count > MAX_SHARD_TOKENS)
        fail("%s: %zu tokens do not fit one shard (at most %zu)", path.c_str(), count, MAX_SHARD_TOKENS);
    std::vector<int32_t> header(FILE_HEADER_INTS, 0);
    header[0] = TOKEN_SHARD_MAGIC;
    header[1] = TOKEN_SHARD_VERSION;
    header[2] = (int32_t)count;
    AtomicFile file(path);
    file.write(header.data(), FILE_HEADER_BYTES);
    file.write(tokens, count * sizeof(uint16_t));
    file.commit();
}

std::vector<uint16_t> read_token_shard(const std::string& path, int vocab_size) {
    const char* name = path.c_str();
    std::vector<int32_t> header = read_header(path);
    if (header[0] != TOKEN_SHARD_MAGIC)
        fail("%s: not a token shard (magic %d, expected %d)", name, header[0], TOKEN_SHARD_MAGIC);
    if (header[1] != TOKEN_SHARD_VERSION)
        fail("%s: token shard version %d (expected %d)", name, header[1], TOKEN_SHARD_VERSION);
    if (header[2] < 0) fail("%s: negative token count %d", name, header[2]);
    const uint64_t count = (uint64_t)header[2], size = file_size(path);
    if (size != FILE_HEADER_BYTES + 2 * count)
        fail("%s: is %llu bytes, but a shard of %llu tokens is %llu", name, (unsigned long long)size,
             (unsigned long long)count, (unsigned long long)(FILE_HEADER_BYTES + 2 * count));
    std::vector<uint16_t> tokens(count);
    read_bytes(path, FILE_HEADER_BYTES, tokens.data(), count * sizeof(uint16_t));
    for (uint64_t i = 0; i < count; i++)
        if (tokens[i] >= vocab_size)
            fail("%s: token %d at position %llu is not below the vocabulary size %d", name, tokens[i],
                 (unsigned long long)i, vocab_size);
    return tokens;
}
